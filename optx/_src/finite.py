"""Surviving non-finite numbers: `apply_if_finite` and `zero_nans`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, placement, tree_reduce
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


class ApplyIfFiniteState(NamedTuple):
    """State of `apply_if_finite`.

    Attributes:
      notfinite_count: non-finite steps in a row (0 after a finite one).
      last_finite: whether the last step's updates were finite.
      total_notfinite: non-finite steps since `init`.
      inner_state: the wrapped transform's state (unchanged by a skipped step).
    """

    notfinite_count: jax.Array
    last_finite: jax.Array
    total_notfinite: jax.Array
    inner_state: OptState


@transform
class ApplyIfFinite(Transform):
    """See `apply_if_finite`."""

    name = "apply_if_finite"
    elementwise = True
    inner: GradientTransformationLike = None  # type: ignore[assignment]
    max_consecutive_errors: int = 5

    def __post_init__(self) -> None:
        checks.transform(self.name, "inner", self.inner)
        n = checks.nonneg_int(self.name, "max_consecutive_errors", self.max_consecutive_errors)
        object.__setattr__(self, "max_consecutive_errors", n)

    def init(self, params: Params) -> ApplyIfFiniteState:
        return ApplyIfFiniteState(
            zero_count(), jnp.array(True), zero_count(), self.inner.init(params)
        )

    def update(
        self,
        updates: Updates,
        state: ApplyIfFiniteState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ApplyIfFiniteState]:
        finite = tree_reduce.all_finite(updates)
        notfinite_count = jnp.where(finite, 0, safe_increment(state.notfinite_count))
        accepts = accepts_extra(self.inner)

        def apply(_: None) -> tuple[Updates, OptState]:
            return call_update(self.inner, accepts, updates, state.inner_state, params, extra)

        def skip(_: None) -> tuple[Updates, OptState]:
            return no_change(updates), state.inner_state

        new_updates, inner_state = jax.lax.cond(
            finite | (notfinite_count > self.max_consecutive_errors), apply, skip, None
        )
        total = jnp.where(finite, state.total_notfinite, safe_increment(state.total_notfinite))
        return new_updates, ApplyIfFiniteState(
            notfinite_count.astype(jnp.int32), finite, total, inner_state
        )


def apply_if_finite(
    inner: GradientTransformationLike, max_consecutive_errors: int
) -> ApplyIfFinite:
    """Skips a step whose updates hold a NaN or an infinity; gives up after too many.

    On a non-finite step the updates are zeros (negative zeros, so that
    `optx.apply_updates` leaves every parameter bit for bit as it was, ``-0.0`` included)
    and ``inner``'s state is left as it was; the skip is counted in the state
    (``total_notfinite``). After more than ``max_consecutive_errors`` non-finite
    steps in a row, the update is applied anyway (so a run that is truly diverging shows
    it rather than stalling).

    Args:
      inner: the transform to protect.
      max_consecutive_errors: how many non-finite steps in a row to skip (an int >= 0).

    Returns:
      The transform; its state is `ApplyIfFiniteState`.

    Raises:
      TypeError: ``inner`` is not a transform.
      ValueError: ``max_consecutive_errors`` is not an int >= 0.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.apply_if_finite(optx.sgd(0.1), max_consecutive_errors=3)
      >>> params = {"w": jnp.ones(2)}
      >>> updates, state = tx.update({"w": jnp.array([1.0, jnp.nan])}, tx.init(params), params)
      >>> optx.apply_updates(params, updates)["w"], int(state.total_notfinite)
      (Array([1., 1.], dtype=float32), 1)
    """
    return ApplyIfFinite(inner, max_consecutive_errors)


def no_change(updates: Updates) -> Updates:
    """Updates that leave the parameters bit for bit as they are: negative zeros.

    ``p + (-0.0)`` is ``p`` for every ``p``; ``p + 0.0`` would turn a ``-0.0`` into ``0.0``.
    """
    return jax.tree.map(lambda u: placement.full_like(u, -0.0), updates)


class ZeroNansState(NamedTuple):
    """State of `zero_nans`: per leaf, whether the last updates held a NaN."""

    found_nan: Any


@transform
class ZeroNans(Transform):
    """See `zero_nans`."""

    name = "zero_nans"
    elementwise = True

    def init(self, params: Params) -> ZeroNansState:
        return ZeroNansState(jax.tree.map(lambda _: jnp.array(False), params))

    def update(
        self, updates: Updates, state: ZeroNansState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ZeroNansState]:
        del params, extra
        checks.array_leaves(f"{self.name}.update", updates)
        found = jax.tree.map(lambda u: jnp.any(jnp.isnan(u)), updates)
        updates = jax.tree.map(
            lambda u: jnp.where(jnp.isnan(u), placement.zeros_like(u), u), updates
        )
        return updates, ZeroNansState(found)


def zero_nans() -> ZeroNans:
    """Replaces NaNs in the updates with zeros, recording per leaf whether any were found.

    Returns:
      The transform; its state is `ZeroNansState`.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.zero_nans()
      >>> updates, state = tx.update({"w": jnp.array([1.0, jnp.nan])}, tx.init({"w": jnp.ones(2)}))
      >>> updates["w"], bool(state.found_nan["w"])
      (Array([1., 0.], dtype=float32), True)
    """
    return ZeroNans()
