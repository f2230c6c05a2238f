"""Transforms applied at some steps only: `conditionally_transform`, `conditionally_mask`."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from optx._src import checks
from optx._src import tree as tree_lib
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    Transform,
    Updates,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import accepts_extra, call_update
from optx._src.reprs import short


class ConditionFn(Protocol):
    """The condition of `conditionally_transform` and `conditionally_mask`.

    ``fn(step, **extra) -> bool``: whether to apply the inner transform at this call.
    ``step`` is the count of earlier calls (an int32 scalar); the result is a scalar bool
    array. ``update``'s keyword arguments are passed on with ``forward_extra_args=True``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> def every_third(step: jnp.ndarray, **extra) -> jnp.ndarray:
      ...     return step % 3 == 0
      >>> tx = optx.conditionally_mask(optx.sgd(0.1), every_third)
    """

    def __call__(self, step: jax.Array, **extra_args: Any) -> jax.Array:
        """Whether to apply the inner transform at call ``step``."""
        ...


class ConditionallyTransformState(NamedTuple):
    """State of `conditionally_transform`.

    Attributes:
      inner_state: the inner transform's state (changed only at the steps it runs).
      step: the calls so far (int32, saturating).
    """

    inner_state: OptState
    step: jax.Array


class ConditionallyMaskState(NamedTuple):
    """State of `conditionally_mask`.

    Attributes:
      step: the calls so far (int32, saturating).
      inner_state: the inner transform's state (changed only at the steps it runs).
    """

    step: jax.Array
    inner_state: OptState


@transform
class ConditionallyTransform(Transform):
    """See `conditionally_transform`."""

    name = "conditionally_transform"
    inner: GradientTransformationLike = None  # type: ignore[assignment]
    should_transform_fn: ConditionFn = None  # type: ignore[assignment]
    forward_extra_args: bool = False
    # What the skipped steps return: the updates as they are, or zeros.
    zero_skipped = False

    def __post_init__(self) -> None:
        checks.transform(self.name, "inner", self.inner)
        if not callable(self.should_transform_fn):
            raise TypeError(
                f"`{self.name}` needs should_transform_fn to be a callable step -> bool. "
                f"Received: should_transform_fn={short(self.should_transform_fn)}."
            )

    def init(self, params: Params) -> ConditionallyTransformState:
        return ConditionallyTransformState(self.inner.init(params), zero_count())

    def _apply(
        self, updates: Updates, step: jax.Array, inner_state: OptState, params: Any, extra: dict
    ) -> tuple[Updates, OptState]:
        kwargs = extra if self.forward_extra_args else {}
        condition = jnp.asarray(self.should_transform_fn(step, **kwargs))
        if condition.shape != () or condition.dtype != jnp.bool_:
            raise ValueError(
                f"`{self.name}.update` needs should_transform_fn to return a scalar bool. "
                f"Received: an array of dtype {condition.dtype} and shape {condition.shape}."
            )
        accepts = accepts_extra(self.inner)

        def run(_: None) -> tuple[Updates, OptState]:
            return call_update(self.inner, accepts, updates, inner_state, params, extra)

        def skip(_: None) -> tuple[Updates, OptState]:
            out = tree_lib.zeros_like(updates) if self.zero_skipped else updates
            return out, inner_state

        return jax.lax.cond(condition, run, skip, None)

    def update(
        self,
        updates: Updates,
        state: ConditionallyTransformState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ConditionallyTransformState]:
        new, inner = self._apply(updates, state.step, state.inner_state, params, extra)
        return new, ConditionallyTransformState(inner, safe_increment(state.step))


@transform
class ConditionallyMask(ConditionallyTransform):
    """See `conditionally_mask`."""

    name = "conditionally_mask"
    zero_skipped = True

    def init(self, params: Params) -> ConditionallyMaskState:  # type: ignore[override]
        return ConditionallyMaskState(zero_count(), self.inner.init(params))

    def update(  # type: ignore[override]
        self,
        updates: Updates,
        state: ConditionallyMaskState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ConditionallyMaskState]:
        new, inner = self._apply(updates, state.step, state.inner_state, params, extra)
        return new, ConditionallyMaskState(safe_increment(state.step), inner)


def conditionally_transform(
    inner: GradientTransformationLike,
    should_transform_fn: ConditionFn,
    forward_extra_args: bool = False,
) -> ConditionallyTransform:
    r"""Applies ``inner`` at the calls ``should_transform_fn`` selects; passes the others.

    With :math:`s` the count of earlier calls,

    .. math::
       u = \begin{cases} \mathrm{inner}(g) & \text{if } f(s) \\ g & \text{otherwise}
       \end{cases}

    and ``inner``'s state changes only at the calls it runs (only that branch is computed).
    To return zeros at the other calls, use `conditionally_mask`.

    Args:
      inner: the transform to apply.
      should_transform_fn: a `ConditionFn`: ``fn(step) -> bool`` (a scalar bool array).
      forward_extra_args: also pass ``update``'s keyword arguments to
        ``should_transform_fn``.

    Returns:
      The transform; its state is `ConditionallyTransformState`.

    Raises:
      TypeError: ``inner`` is not a transform, or ``should_transform_fn`` not callable.
      ValueError: (at ``update``) ``should_transform_fn`` does not return a scalar bool.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.conditionally_transform(optx.scale(10.0), lambda step: step % 2 == 1)
      >>> state = tx.init({"w": jnp.zeros(1)})
      >>> u0, state = tx.update({"w": jnp.ones(1)}, state)
      >>> u1, state = tx.update({"w": jnp.ones(1)}, state)
      >>> u0["w"], u1["w"]
      (Array([1.], dtype=float32), Array([10.], dtype=float32))
    """
    return ConditionallyTransform(inner, should_transform_fn, forward_extra_args)


def conditionally_mask(
    inner: GradientTransformationLike,
    should_transform_fn: ConditionFn,
    forward_extra_args: bool = False,
) -> ConditionallyMask:
    r"""Applies ``inner`` at the calls ``should_transform_fn`` selects; zeros elsewhere.

    With :math:`s` the count of earlier calls,

    .. math::
       u = \begin{cases} \mathrm{inner}(g) & \text{if } f(s) \\ 0 & \text{otherwise}
       \end{cases}

    and ``inner``'s state changes only at the calls it runs. To pass the updates through
    unchanged at the other calls, use `conditionally_transform`.

    Args:
      inner: the transform to apply.
      should_transform_fn: a `ConditionFn`: ``fn(step) -> bool`` (a scalar bool array).
      forward_extra_args: also pass ``update``'s keyword arguments to
        ``should_transform_fn``.

    Returns:
      The transform; its state is `ConditionallyMaskState`.

    Raises:
      TypeError: ``inner`` is not a transform, or ``should_transform_fn`` not callable.
      ValueError: (at ``update``) ``should_transform_fn`` does not return a scalar bool.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.conditionally_mask(optx.sgd(1.0), lambda step: step >= 1)
      >>> state = tx.init({"w": jnp.zeros(1)})
      >>> u0, state = tx.update({"w": jnp.ones(1)}, state)
      >>> u1, state = tx.update({"w": jnp.ones(1)}, state)
      >>> u0["w"], u1["w"]
      (Array([0.], dtype=float32), Array([-1.], dtype=float32))
    """
    return ConditionallyMask(inner, should_transform_fn, forward_extra_args)
