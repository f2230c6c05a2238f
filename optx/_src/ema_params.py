"""An exponential moving average of the parameters: `ema_params` and `ema_params_value`."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import (
    OptState,
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    find_one,
    safe_increment,
    zero_count,
)
from optx._src.base import transform as _transform


class EmaParamsState(NamedTuple):
    """State of `ema_params`: the step count, the averaged parameters and the momentum."""

    count: jax.Array
    ema: Params
    hyperparams: dict[str, jax.Array]


_STARTS = ("initial", "first_step")


@_transform
class EmaParams(Transform):
    """See `ema_params`."""

    name = "ema_params"
    elementwise = True
    momentum: ScalarOrSchedule = hp.field(0.99, hp.UNIT_CLOSED, decay=True)
    overwrite_frequency: int | None = None
    start: Literal["initial", "first_step"] = "initial"
    ema_dtype: Any = None
    every_k: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.overwrite_frequency is not None:
            n = checks.nonneg_int(self.name, "overwrite_frequency", self.overwrite_frequency, 1)
            object.__setattr__(self, "overwrite_frequency", n)
        if self.start not in _STARTS:
            raise ValueError(
                f"`{hp.current(self.name)}` needs start in {_STARTS}. "
                f"Received: start={self.start!r}."
            )
        dtype = checks.dtype_option(self.name, "ema_dtype", self.ema_dtype)
        object.__setattr__(self, "ema_dtype", dtype)
        k = checks.nonneg_int(self.name, "every_k", self.every_k, 1)
        object.__setattr__(self, "every_k", k)

    def init(self, params: Params) -> EmaParamsState:
        api = f"{self.name}.init"
        checks.float_params(api, params, complex_ok=True)
        checks.complex_slot(api, "ema_dtype", self.ema_dtype, params)
        # A copy, never the parameters' own buffers: a step that donates both the
        # parameters and the state would otherwise donate one buffer twice.
        ema = jax.tree.map(
            lambda p: jnp.array(p, self.ema_dtype or jnp.result_type(p), copy=True), params
        )
        return EmaParamsState(zero_count(), ema, self.init_hyperparams())

    def update(
        self, updates: Updates, state: EmaParamsState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, EmaParamsState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params")
        checks.same_tree(api, params, state.ema, "params", "the state")
        m = hp.value(state.hyperparams, "momentum")
        c = hp.complement(state.hyperparams, "momentum")
        # The number of real steps before this call (calls, with every_k = 1).
        steps = state.count // self.every_k
        if self.start == "first_step":
            first = steps == 0
            m, c = jnp.where(first, 0.0, m), jnp.where(first, 1.0, c)
        count = safe_increment(state.count)

        def leaf(u: jax.Array, p: jax.Array, e: jax.Array) -> jax.Array:
            new_p = (p + u).astype(jnp.result_type(p))
            return (m * e + c * new_p).astype(e.dtype)

        ema = jax.tree.map(leaf, updates, params, state.ema)
        if self.overwrite_frequency is not None:
            overwrite = (steps + 1) % self.overwrite_frequency == 0
            updates = jax.tree.map(
                lambda u, p, e: jnp.where(overwrite, (e - p).astype(u.dtype), u),
                updates,
                params,
                ema,
            )
        return updates, EmaParamsState(count, ema, state.hyperparams)


def ema_params(
    momentum: float = 0.99,
    overwrite_frequency: int | None = None,
    *,
    start: Literal["initial", "first_step"] = "initial",
    ema_dtype: DTypeLike | None = None,
    every_k: int = 1,
) -> EmaParams:
    r"""Keeps an exponential moving average of the parameters in the state.

    Put it last in a chain: it reads the parameters and the final updates, and averages
    the parameters as they are after this step,

    .. math:: \bar\theta \leftarrow \mu\,\bar\theta + (1 - \mu)\,(\theta + u).

    The updates pass unchanged, except every ``overwrite_frequency``-th step, when they are
    replaced by :math:`\bar\theta - \theta` so that the parameters become the average
    (to float round-off). Read the average with `ema_params_value`. A complex parameter's
    average is complex (the momentum real), so its ``ema_dtype`` must be complex.

    Args:
      momentum: :math:`\mu \in [0, 1]` (a dynamic hyperparameter, ``"momentum"``);
        ``1`` keeps the starting weights, ``0`` tracks the weights.
      overwrite_frequency: overwrite the parameters with the average after every N-th
        step; ``None`` never does.
      start: ``"initial"`` (default, as the tf.keras documentation specifies) starts the
        average at the parameters given to `init`; ``"first_step"`` (Keras 3) copies the
        parameters after the first step instead.
      ema_dtype: dtype of the average; ``None`` uses each parameter's dtype.
      every_k: calls per real step, when this follows `accumulate_gradients` with the
        same ``every_k`` (as Keras does): the average is still updated on every call, but
        the first step (for ``start="first_step"``) and the overwrite period count real
        steps, so every call of the overwriting window overwrites.

    Returns:
      The transform; its state is `EmaParamsState`.

    Raises:
      ValueError: ``momentum`` is outside [0, 1], ``overwrite_frequency`` or ``every_k`` is
        not an int >= 1, or ``start`` is unknown.

    Example:
      The tf.keras documentation's example (SGD, learning rate 1, gradient 1, momentum 0.5,
      overwrite every 3 steps) ends at -0.125:

      >>> import jax.numpy as jnp, optx
      >>> tx = optx.chain(optx.sgd(1.0), optx.ema_params(0.5, overwrite_frequency=3))
      >>> params = jnp.array(2.0)
      >>> state = tx.init(params)
      >>> for _ in range(3):
      ...     updates, state = tx.update(jnp.array(1.0), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> float(params)
      -0.125
    """
    return EmaParams(momentum, overwrite_frequency, start, ema_dtype, every_k)


def ema_params_value(state: OptState) -> Params:
    """The averaged parameters held by the one `ema_params` in an optimizer state.

    Args:
      state: the state of a transform or chain that contains exactly one `ema_params`.

    Returns:
      The average, with the structure of the parameters.

    Raises:
      ValueError: the state holds no `ema_params` state, or several.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.chain(optx.sgd(1.0), optx.ema_params(0.5))
      >>> state = tx.init(jnp.array(2.0))
      >>> _, state = tx.update(jnp.array(1.0), state, jnp.array(2.0))
      >>> float(optx.ema_params_value(state))
      1.5
    """
    return find_one(state, EmaParamsState, "ema_params_value", "ema_params").ema
