"""Gradient accumulation: `accumulate_gradients` (optax's ``MultiSteps``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import tree as tree_lib
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    Transform,
    Updates,
    transform,
    zero_count,
)
from optx._src.combine import accepts_extra, call_update
from optx._src.moments import zeros_like


class AccumulateGradientsState(NamedTuple):
    """State of `accumulate_gradients`.

    Attributes:
      mini_step: calls since the last real update, in ``[0, every_k)``.
      acc_grads: the sum of the gradients of those calls.
      inner_state: the wrapped transform's state, changed only by real updates.
    """

    mini_step: jax.Array
    acc_grads: Params
    inner_state: OptState


@transform
class AccumulateGradients(Transform):
    """See `accumulate_gradients`."""

    name = "accumulate_gradients"
    elementwise = True
    inner: GradientTransformationLike = None  # type: ignore[assignment]
    every_k: int = 1
    accumulator_dtype: Any = None

    def __post_init__(self) -> None:
        checks.transform(self.name, "inner", self.inner)
        object.__setattr__(
            self, "every_k", checks.nonneg_int(self.name, "every_k", self.every_k, 1)
        )
        dtype = checks.dtype_option(self.name, "accumulator_dtype", self.accumulator_dtype)
        object.__setattr__(self, "accumulator_dtype", dtype)

    def init(self, params: Params) -> AccumulateGradientsState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        checks.complex_slot(
            f"{self.name}.init", "accumulator_dtype", self.accumulator_dtype, params
        )
        return AccumulateGradientsState(
            zero_count(), zeros_like(params, self.accumulator_dtype), self.inner.init(params)
        )

    def update(
        self,
        updates: Updates,
        state: AccumulateGradientsState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, AccumulateGradientsState]:
        checks.same_tree(f"{self.name}.update", updates, state.acc_grads, "updates", "the state")
        total = jax.tree.map(lambda g, a: a + g.astype(a.dtype), updates, state.acc_grads)
        accepts = accepts_extra(self.inner)
        k = self.every_k

        def emit(_: None) -> tuple[Updates, AccumulateGradientsState]:
            mean = jax.tree.map(lambda a, g: (a / k).astype(g.dtype), total, updates)
            new, inner = call_update(self.inner, accepts, mean, state.inner_state, params, extra)
            return new, AccumulateGradientsState(zero_count(), tree_lib.zeros_like(total), inner)

        def hold(_: None) -> tuple[Updates, AccumulateGradientsState]:
            return tree_lib.zeros_like(updates), AccumulateGradientsState(
                state.mini_step + 1, total, state.inner_state
            )

        if k == 1:
            return emit(None)
        # Only the branch taken runs: the inner update is not computed on held steps.
        return jax.lax.cond(state.mini_step + 1 >= k, emit, hold, None)


def accumulate_gradients(
    inner: GradientTransformationLike,
    every_k: int,
    accumulator_dtype: DTypeLike | None = None,
) -> AccumulateGradients:
    """Applies ``inner`` once every ``every_k`` calls, to the mean of their gradients.

    Between real updates the output updates are zeros and ``inner``'s state is untouched
    (its step count, and so its bias corrections and schedules, count real updates).
    Combined with a batch split into ``every_k`` micro-batches, this equals one step on the
    whole batch.

    Args:
      inner: the optimizer to apply to the averaged gradients.
      every_k: the number of calls per real update (an int >= 1).
      accumulator_dtype: dtype of the gradient sum; ``None`` uses each parameter's dtype.

    Returns:
      The transform; its state is `AccumulateGradientsState`.

    Raises:
      TypeError: ``inner`` is not a transform.
      ValueError: ``every_k`` is not an int >= 1.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.accumulate_gradients(optx.sgd(1.0), every_k=2)
      >>> params = {"w": jnp.zeros(1)}
      >>> state = tx.init(params)
      >>> u1, state = tx.update({"w": jnp.array([1.0])}, state, params)
      >>> u2, state = tx.update({"w": jnp.array([3.0])}, state, params)
      >>> u1["w"], u2["w"]
      (Array([0.], dtype=float32), Array([-2.], dtype=float32))
    """
    return AccumulateGradients(inner, every_k, accumulator_dtype)
