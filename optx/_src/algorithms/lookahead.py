"""Lookahead: `lookahead`, a wrapper keeping slow weights in its state."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
    zero_count,
)
from optx._src.combine import accepts_extra, call_update
from optx._src.moments import unzip
from optx._src.options import flag_options


class LookaheadState(NamedTuple):
    """State of `lookahead`.

    Attributes:
      fast_state: the fast optimizer's state.
      steps_since_sync: fast steps since the last synchronisation, in ``[0, sync_period)``.
      slow: the slow weights, with the structure and dtypes of the parameters: the ones to
        evaluate.
      hyperparams: ``slow_step_size``.
    """

    fast_state: OptState
    steps_since_sync: jax.Array
    slow: Params
    hyperparams: dict[str, jax.Array]


def _is_hyperparam(path: tuple[Any, ...]) -> bool:
    return any(getattr(k, "name", getattr(k, "key", None)) == "hyperparams" for k in path)


def restart_where(cond: Any, current: OptState, fresh: OptState) -> OptState:
    """``fresh`` where ``cond``, else ``current``, keeping ``current``'s hyperparameters.

    An inner optimizer restarted with a fresh ``init`` keeps the hyperparameters in force
    (a fresh ``init`` would set them back to their construction values).
    """
    return jax.tree_util.tree_map_with_path(
        lambda path, cur, new: (
            cur if _is_hyperparam(path) else jnp.where(cond, new, cur).astype(cur.dtype)
        ),
        current,
        fresh,
    )


@transform
class Lookahead(Transform):
    """See `lookahead`."""

    name = "lookahead"
    elementwise = True
    fast_optimizer: GradientTransformationLike = None  # type: ignore[assignment]
    sync_period: int = 1
    slow_step_size: ScalarOrSchedule = hp.field(0.5, hp.UNIT_CLOSED)
    reset_state: bool = False

    def __post_init__(self) -> None:
        checks.transform(self.name, "fast_optimizer", self.fast_optimizer)
        period = checks.nonneg_int(self.name, "sync_period", self.sync_period, 1)
        object.__setattr__(self, "sync_period", period)
        super().__post_init__()
        flag_options(self, "reset_state")

    def init(self, params: Params) -> LookaheadState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        # A copy, so that params and the slow weights can both be donated to a jitted step.
        slow = jax.tree.map(lambda p: jnp.array(p, jnp.result_type(p)), params)
        return LookaheadState(
            self.fast_optimizer.init(params), zero_count(), slow, self.init_hyperparams()
        )

    def update(
        self, updates: Updates, state: LookaheadState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, LookaheadState]:
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.slow, "updates", "the state")
        checks.same_tree(api, params, state.slow, "params", "the state")
        fast = self.fast_optimizer
        steps, fast_state = call_update(
            fast, accepts_extra(fast), updates, state.fast_state, params, extra
        )
        alpha = state.hyperparams["slow_step_size"]
        sync = state.steps_since_sync == self.sync_period - 1

        def leaf(u: Any, p: Any, s: Any) -> tuple[jax.Array, jax.Array]:
            # The last fast step lands at p + u; the slow weights move alpha of the way there
            # and the fast weights jump to them. Other steps leave u and the slow weights be.
            dtype = jnp.promote_types(jnp.result_type(p), jnp.float32)
            diff = jnp.asarray(p, dtype) + jnp.asarray(u, dtype) - s
            new_s = jnp.where(sync, (s + alpha * diff).astype(s.dtype), s)
            new_u = jnp.where(sync, (u - (1 - alpha) * diff).astype(u.dtype), u)
            return new_u, new_s

        out, slow = unzip(jax.tree.map(leaf, steps, params, state.slow), steps, 2)
        if self.reset_state:
            # Restart the fast optimizer after a synchronisation.
            fast_state = restart_where(sync, fast_state, fast.init(params))
        since = (state.steps_since_sync + 1) % self.sync_period
        return out, LookaheadState(fast_state, since.astype(jnp.int32), slow, state.hyperparams)


def lookahead(
    fast_optimizer: GradientTransformationLike,
    sync_period: int,
    slow_step_size: float,
    reset_state: bool = False,
) -> Lookahead:
    r"""Lookahead: ``sync_period`` fast steps, then the slow weights move toward them.

    .. math::
       \phi_{t} = \phi_{t-1} + \alpha\,(\theta_{t-1} + u_t - \phi_{t-1}), \quad
       \theta_t = \phi_t \qquad \text{if } t \equiv 0 \pmod k,

    else :math:`\theta_t = \theta_{t-1} + u_t` and :math:`\phi_t = \phi_{t-1}`, where
    :math:`\theta` are the parameters (the fast weights), :math:`\phi` the slow weights,
    :math:`u_t` the fast optimizer's update, :math:`k` = ``sync_period`` and :math:`\alpha`
    = ``slow_step_size``.

    Unlike optax's ``lookahead``, which needs the parameters as a ``LookaheadParams(fast,
    slow)`` pair and returns updates for both, this one takes the plain parameters (the
    fast weights, where gradients are taken) and keeps the slow weights in its state
    (`LookaheadState` ``.slow``, initialised to a copy of the parameters): evaluate at
    ``state.slow``. The numbers are optax's. The updates it returns make the fast weights
    jump to the slow ones at each synchronisation, so they must reach the parameters
    unchanged (no transform after ``lookahead`` in a chain).

    Args:
      fast_optimizer: the inner optimizer (an optx or optax transform).
      sync_period: :math:`k`, fast steps per synchronisation (an int >= 1).
      slow_step_size: :math:`\alpha \in [0, 1]`.
      reset_state: re-initialise the fast optimizer's state (but not its hyperparameters)
        at each synchronisation, at the parameters before that step.

    Returns:
      The transform; its state is `LookaheadState`; ``slow_step_size`` is a dynamic
      hyperparameter.

    Raises:
      TypeError: ``fast_optimizer`` is not a transform or ``reset_state`` is not a bool.
      ValueError: ``sync_period`` is not an int >= 1, or ``slow_step_size`` is outside
        [0, 1].

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.lookahead(optx.sgd(0.1), sync_period=2, slow_step_size=0.5)
      >>> params = jnp.array([1.0])
      >>> state = tx.init(params)
      >>> for _ in range(2):
      ...     updates, state = tx.update(jnp.array([1.0]), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> params, state.slow  # 1 -> 0.9 -> 0.8, then halfway back to 1
      (Array([0.9], dtype=float32), Array([0.9], dtype=float32))

    References:
      Zhang, Lucas, Hinton and Ba, "Lookahead Optimizer: k steps forward, 1 step back",
      NeurIPS 2019.
    """
    return Lookahead(fast_optimizer, sync_period, slow_step_size, reset_state)
