"""`keep_params_nonnegative`: updates that never take a parameter below zero."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks
from optx._src.base import Params, Transform, Updates, transform
from optx._src.tree import is_none


class NonNegativeParamsState(NamedTuple):
    """State of `keep_params_nonnegative`: empty (it keeps nothing)."""


@transform
class KeepParamsNonnegative(Transform):
    """See `keep_params_nonnegative`."""

    name = "keep_params_nonnegative"
    elementwise = True

    def init(self, params: Params) -> NonNegativeParamsState:
        del params
        return NonNegativeParamsState()

    def update(
        self,
        updates: Updates,
        state: NonNegativeParamsState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, NonNegativeParamsState]:
        del extra
        api = f"{self.name}.update"
        checks.float_updates(api, updates)
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params", allow_none=True)

        def leaf(u: jax.Array | None, p: jax.Array) -> jax.Array | None:
            if u is None:
                return None
            return jnp.where(p + u < 0, -p, u).astype(u.dtype)

        return jax.tree.map(leaf, updates, params, is_leaf=is_none), state


def keep_params_nonnegative() -> KeepParamsNonnegative:
    r"""Changes each update that would take its parameter below zero to end at zero.

    .. math:: u \leftarrow \begin{cases} -\theta & \text{if } \theta + u < 0 \\
       u & \text{otherwise} \end{cases}

    elementwise, so that :math:`\theta + u \ge 0`. Put it last in a chain (after the
    learning rate), since it reads the final step. A parameter that is already negative
    is moved to zero.

    Returns:
      The transform (its state is an empty `NonNegativeParamsState`). Its ``update``
      needs ``params``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.chain(optx.sgd(1.0), optx.keep_params_nonnegative())
      >>> params = {"w": jnp.array([1.0, 2.0])}
      >>> updates, _ = tx.update({"w": jnp.array([3.0, 1.0])}, tx.init(params), params)
      >>> optx.apply_updates(params, updates)
      {'w': Array([0., 1.], dtype=float32)}
    """
    return KeepParamsNonnegative()
