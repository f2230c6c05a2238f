"""Scaling by a constant, a learning rate, or a schedule."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, sparse
from optx._src import hyperparams as hp
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Schedule,
    Transform,
    Updates,
    safe_increment,
    transform,
    zero_count,
)


def scale_tree(updates: Updates, factor: jax.Array) -> Updates:
    """Multiplies every update by a scalar, keeping each leaf's dtype (None stays None).

    A row-sparse leaf stays row-sparse (its values are scaled).
    """

    def leaf(u: Any) -> Any:
        if u is None:
            return None
        if isinstance(u, sparse.RowSparse):
            return sparse.scale(u, factor)
        return (u * factor).astype(u.dtype)

    return jax.tree.map(leaf, updates, is_leaf=sparse.is_update_leaf)


class ScaleState(NamedTuple):
    """State of `scale`: the step size, as a dynamic hyperparameter."""

    hyperparams: dict[str, jax.Array]


@transform
class Scale(Transform):
    """See `scale`."""

    name = "scale"
    elementwise = True
    row_sparse = True
    step_size: ScalarOrSchedule = hp.field(1.0)

    def init(self, params: Params) -> ScaleState:
        del params
        return ScaleState(self.init_hyperparams())

    def update(
        self, updates: Updates, state: ScaleState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        return scale_tree(updates, state.hyperparams["step_size"]), state


def scale(step_size: float) -> Scale:
    r"""Multiplies updates by ``step_size``: :math:`u \leftarrow s\,u`.

    Args:
      step_size: the factor :math:`s` (a dynamic hyperparameter, ``"step_size"``).

    Returns:
      The transform.

    Raises:
      TypeError, ValueError: ``step_size`` is not a finite real number.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale(-0.5)
      >>> tx.update({"w": jnp.ones(2)}, tx.init(None))[0]
      {'w': Array([-0.5, -0.5], dtype=float32)}
    """
    return Scale(step_size)


class ScaleByLearningRateState(NamedTuple):
    """State of `scale_by_learning_rate` and `scale_by_schedule`."""

    count: jax.Array
    hyperparams: dict[str, jax.Array]


ScaleByScheduleState = ScaleByLearningRateState
"""optax's name for the state of `scale_by_schedule` (`ScaleByLearningRateState`)."""


@transform
class ScaleByLearningRate(Transform):
    """See `scale_by_learning_rate`."""

    name = "scale_by_learning_rate"
    elementwise = True
    row_sparse = True
    learning_rate: ScalarOrSchedule = hp.field(1e-3, hp.NONNEG)
    flip_sign: bool = True

    def init(self, params: Params) -> ScaleByLearningRateState:
        del params
        return ScaleByLearningRateState(zero_count(), self.init_hyperparams())

    def current(self, state: ScaleByLearningRateState) -> jax.Array:
        """The learning rate of the next step."""
        return state.hyperparams["learning_rate"]

    def update(
        self,
        updates: Updates,
        state: ScaleByLearningRateState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByLearningRateState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        lr = self.current(state)
        updates = scale_tree(updates, -lr if self.flip_sign else lr)
        return updates, state._replace(count=safe_increment(state.count))


def scale_by_learning_rate(
    learning_rate: ScalarOrSchedule, *, flip_sign: bool = True
) -> ScaleByLearningRate:
    r"""Scales updates by the (negated) learning rate: :math:`u \leftarrow -\eta_t\,u`.

    Args:
      learning_rate: :math:`\eta`, a non-negative number (a dynamic hyperparameter,
        ``"learning_rate"``) or a schedule ``step -> value`` evaluated at the step count
        kept in the state (0 on the first update).
      flip_sign: multiply by :math:`-\eta` (descent) rather than :math:`\eta`.

    Returns:
      The transform.

    Raises:
      TypeError, ValueError: ``learning_rate`` is negative, non-finite or not a number.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_learning_rate(0.1)
      >>> tx.update({"w": jnp.ones(2)}, tx.init(None))[0]
      {'w': Array([-0.1, -0.1], dtype=float32)}
    """
    return ScaleByLearningRate(learning_rate, flip_sign)


@transform
class ScaleBySchedule(Transform):
    """See `scale_by_schedule`."""

    name = "scale_by_schedule"
    elementwise = True
    row_sparse = True
    step_size_fn: Schedule = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not callable(self.step_size_fn):
            raise TypeError(
                f"`{hp.current(self.name)}` needs step_size_fn to be a callable step -> "
                f"value. Received: step_size_fn={self.step_size_fn!r}."
            )

    def init(self, params: Params) -> ScaleByLearningRateState:
        del params
        return ScaleByLearningRateState(zero_count(), {})

    def update(
        self,
        updates: Updates,
        state: ScaleByLearningRateState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByLearningRateState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        factor = jnp.asarray(self.step_size_fn(state.count), jnp.float32)
        return scale_tree(updates, factor), state._replace(count=safe_increment(state.count))


def scale_by_schedule(step_size_fn: Schedule) -> ScaleBySchedule:
    """Multiplies updates by ``step_size_fn(count)``, ``count`` being kept in the state.

    Args:
      step_size_fn: a function of the int32 step count (0 on the first update).

    Returns:
      The transform.

    Raises:
      TypeError: ``step_size_fn`` is not callable.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_schedule(lambda count: 1.0 / (count + 1))
      >>> state = tx.init(None)
      >>> for _ in range(2):
      ...     updates, state = tx.update({"w": jnp.ones(1)}, state)
      >>> updates
      {'w': Array([0.5], dtype=float32)}
    """
    return ScaleBySchedule(step_size_fn)
