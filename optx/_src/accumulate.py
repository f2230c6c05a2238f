"""Gradient accumulation: `MultiSteps` (optax's), `accumulate_gradients` and `apply_every`.

One accumulation, in `MultiSteps.update`: `accumulate_gradients` is `MultiSteps` under
optx's argument names, and `apply_every` is that accumulation summed, with no inner step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks, display
from optx._src import tree as tree_lib
from optx._src.base import (
    EmptyState,
    GradientTransformationLike,
    Identity,
    OptState,
    Params,
    Transform,
    Updates,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import accepts_extra, call_update
from optx._src.moments import zeros_like
from optx._src.reprs import short

ShouldSkipUpdateFunction = Callable[[Any, jax.Array, Any], tuple[jax.Array, Any]]
"""``fn(updates, gradient_step, params) -> (should_skip, skip_state)`` of `MultiSteps`.

``should_skip`` is a scalar bool array: ``True`` drops this call's gradients, as if the
call had not happened. ``skip_state`` is any pytree (the same structure every call), kept in
`MultiStepsState` ``skip_state`` for logging. ``gradient_step`` is the count of real
updates so far; ``params`` may be ``None``. See `skip_not_finite`, `skip_large_updates`.
"""


def skip_not_finite(
    updates: Updates, gradient_step: jax.Array, params: Params | None
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """A `ShouldSkipUpdateFunction`: skip a call whose gradients hold a NaN or an infinity.

    Args:
      updates: the gradients of the call.
      gradient_step: unused.
      params: unused.

    Returns:
      ``(should_skip, {"should_skip": should_skip, "num_not_finite": n})`` with ``n`` the
      number of non-finite entries over all leaves.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> skip, info = optx.skip_not_finite({"w": jnp.array([1.0, jnp.nan])}, 0, None)
      >>> bool(skip), int(info["num_not_finite"])
      (True, 1)
    """
    del gradient_step, params
    counts = [jnp.sum(~jnp.isfinite(u)) for u in jax.tree.leaves(updates)]
    total = jnp.sum(jnp.stack(counts)) if counts else jnp.zeros([], jnp.int32)
    skip = total > 0
    return skip, {"should_skip": skip, "num_not_finite": total}


def skip_large_updates(
    updates: Updates, gradient_step: jax.Array, params: Params | None, max_squared_norm: float
) -> tuple[jax.Array, dict[str, jax.Array]]:
    r"""A `ShouldSkipUpdateFunction`: skip a call whose gradients are too large.

    Skips unless :math:`\sum_i g_i^2 < \text{max\_squared\_norm}` (so a NaN norm skips).
    Bind ``max_squared_norm`` with `functools.partial` to pass it to `MultiSteps`.

    Args:
      updates: the gradients of the call.
      gradient_step: unused.
      params: unused.
      max_squared_norm: the largest squared global norm accepted.

    Returns:
      ``(should_skip, {"should_skip": should_skip, "norm_squared": n})``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> skip, info = optx.skip_large_updates({"w": jnp.array([3.0, 4.0])}, 0, None, 20.0)
      >>> bool(skip), float(info["norm_squared"])
      (True, 25.0)
    """
    del gradient_step, params
    squares = [jnp.sum(jnp.square(u)) for u in jax.tree.leaves(updates)]
    norm_sq = jnp.sum(jnp.stack(squares)) if squares else jnp.zeros([])
    skip = jnp.logical_not(norm_sq < max_squared_norm)
    return skip, {"should_skip": skip, "norm_squared": norm_sq}


class MultiStepsState(NamedTuple):
    """State of `MultiSteps` and `accumulate_gradients`.

    Attributes:
      mini_step: calls accumulated since the last real update, in ``[0, k)``.
      gradient_step: real updates so far (int32, saturating); ``every_k_schedule`` is
        evaluated at it.
      inner_opt_state: the wrapped transform's state, changed only by real updates.
      acc_grads: the sum of the accumulated gradients (optax keeps their running mean:
        the same over ``mini_step`` calls).
      skip_state: what ``should_skip_update_fn`` returned last (``()`` without one).
    """

    mini_step: jax.Array
    gradient_step: jax.Array
    inner_opt_state: OptState
    acc_grads: Params
    skip_state: Any = ()


AccumulateGradientsState = MultiStepsState
"""The state of `accumulate_gradients`: the same class as `MultiStepsState`."""


@transform
class MultiSteps(Transform):
    r"""Applies ``opt`` once every ``k`` calls, to the mean (or sum) of their gradients.

    A transform (optax's wrapper class, under its name and arguments): with ``k`` given by
    ``every_k_schedule`` at the count of real updates,

    .. math::
       a \leftarrow a + g_t; \quad \text{every } k\text{-th call: }
       u = \mathrm{opt}(a / k \text{ or } a), \ a \leftarrow 0; \quad \text{else } u = 0.

    Between real updates the updates are zeros and ``opt``'s state is untouched (its step
    count, bias corrections and schedules count real updates), so ``k`` micro-batches give
    one step on the whole batch. A call that ``should_skip_update_fn`` rejects changes
    nothing but ``skip_state``. ``opt`` is only run on the calls that update.

    Args:
      opt: the optimizer to apply to the accumulated gradients.
      every_k_schedule: ``k``, an int >= 1, or a function of the real-update count
        ``gradient_step`` returning it (to grow the batch during training).
      use_grad_mean: average the ``k`` gradients (``False``: sum them).
      should_skip_update_fn: a `ShouldSkipUpdateFunction` (e.g. `skip_not_finite`), or
        ``None`` to accept every call.
      accumulator_dtype: dtype of the sum (``None``: each parameter's).

    Raises:
      TypeError: ``opt`` is not a transform, ``every_k_schedule`` is neither an int nor
        callable, ``should_skip_update_fn`` is not callable, or ``accumulator_dtype`` is not
        a floating dtype.
      ValueError: ``every_k_schedule`` is an int < 1; (at ``update``)
        ``should_skip_update_fn`` does not return a scalar bool.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.MultiSteps(optx.sgd(1.0), every_k_schedule=2)
      >>> params = {"w": jnp.zeros(1)}
      >>> state = tx.init(params)
      >>> u1, state = tx.update({"w": jnp.array([1.0])}, state, params)
      >>> bool(tx.has_updated(state))
      False
      >>> u2, state = tx.update({"w": jnp.array([3.0])}, state, params)
      >>> u1["w"], u2["w"], bool(tx.has_updated(state))
      (Array([0.], dtype=float32), Array([-2.], dtype=float32), True)
    """

    name = "MultiSteps"
    elementwise = True
    # The argument names of the public constructor, by field (for messages and `repr`).
    _args: ClassVar[dict[str, str]] = {}
    opt: GradientTransformationLike
    every_k_schedule: int | Callable[[jax.Array], Any]
    use_grad_mean: bool = True
    should_skip_update_fn: ShouldSkipUpdateFunction | None = None
    accumulator_dtype: Any = jnp.float32

    def __post_init__(self) -> None:
        arg = self._args.get
        checks.transform(self.name, arg("opt", "opt"), self.opt)
        k, k_name = self.every_k_schedule, arg("every_k_schedule", "every_k_schedule")
        if not callable(k):
            object.__setattr__(self, "every_k_schedule", checks.nonneg_int(self.name, k_name, k, 1))
        fn = self.should_skip_update_fn
        if fn is not None and not callable(fn):
            raise TypeError(
                f"`{self.name}` needs should_skip_update_fn to be None or a callable "
                f"(updates, gradient_step, params) -> (should_skip, skip_state). "
                f"Received: should_skip_update_fn={short(fn)}."
            )
        dtype = checks.dtype_option(self.name, "accumulator_dtype", self.accumulator_dtype)
        object.__setattr__(self, "accumulator_dtype", dtype)

    @property
    def inner_opt(self) -> GradientTransformationLike:
        """The wrapped optimizer (``opt``)."""
        return self.opt

    def init(self, params: Params) -> MultiStepsState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        checks.complex_slot(
            f"{self.name}.init", "accumulator_dtype", self.accumulator_dtype, params
        )
        skip_state: Any = ()
        if self.should_skip_update_fn is not None:
            zeros = tree_lib.zeros_like(params)
            _, skip_state = self.should_skip_update_fn(zeros, zero_count(), params)
        return MultiStepsState(
            zero_count(),
            zero_count(),
            self.opt.init(params),
            zeros_like(params, self.accumulator_dtype),
            skip_state,
        )

    def update(
        self, updates: Updates, state: MultiStepsState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, MultiStepsState]:
        api = f"{self.name}.update"
        checks.same_tree(api, updates, state.acc_grads, "updates", "the state")
        fn = self.should_skip_update_fn
        skip_state = state.skip_state
        if fn is not None:
            skip, skip_state = fn(updates, state.gradient_step, params)
            skip = jnp.asarray(skip)
            if skip.shape != () or skip.dtype != jnp.bool_:
                raise ValueError(
                    f"`{api}` needs should_skip_update_fn to return a scalar bool first. "
                    f"Received: an array of dtype {skip.dtype} and shape {skip.shape}."
                )
        k = self.every_k_schedule
        k = k(state.gradient_step) if callable(k) else k
        accepts = accepts_extra(self.opt)

        def accumulate(_: None) -> tuple[Updates, MultiStepsState]:
            total = jax.tree.map(lambda g, a: a + g.astype(a.dtype), updates, state.acc_grads)

            def emit(_: None) -> tuple[Updates, MultiStepsState]:
                mean = self.use_grad_mean
                grads = jax.tree.map(
                    lambda a, g: (a / k if mean else a).astype(g.dtype), total, updates
                )
                new, inner = call_update(
                    self.opt, accepts, grads, state.inner_opt_state, params, extra
                )
                step = safe_increment(state.gradient_step)
                zeros = tree_lib.zeros_like(total)
                return new, MultiStepsState(zero_count(), step, inner, zeros, skip_state)

            def hold(_: None) -> tuple[Updates, MultiStepsState]:
                return tree_lib.zeros_like(updates), state._replace(
                    mini_step=state.mini_step + 1, acc_grads=total, skip_state=skip_state
                )

            if isinstance(k, int) and k == 1:
                return emit(None)
            # Only the branch taken runs: the inner update is not computed on held calls.
            return jax.lax.cond(state.mini_step >= k - 1, emit, hold, None)

        if fn is None:
            return accumulate(None)

        def skipped(_: None) -> tuple[Updates, MultiStepsState]:
            return tree_lib.zeros_like(updates), state._replace(skip_state=skip_state)

        return jax.lax.cond(skip, skipped, accumulate, None)

    def has_updated(self, state: MultiStepsState) -> jax.Array:
        """Whether the last ``update`` made a real update (a scalar bool array).

        Args:
          state: the state that ``update`` returned.

        Returns:
          ``mini_step == 0 and gradient_step > 0``.
        """
        return jnp.logical_and(state.mini_step == 0, state.gradient_step > 0)

    def gradient_transformation(self) -> MultiSteps:
        """This transform (it is one already; optax's wrapper returns its ``init``/``update``)."""
        return self

    def __repr__(self) -> str:
        if not self._args:
            return super().__repr__()
        # Under the factory's argument names; its accumulator default is None.
        items = [(n, v) for n, v in display.config_items(self) if n != "accumulator_dtype"]
        shown = [f"{self._args.get(n, n)}={v!r}" for n, v in items]
        if self.accumulator_dtype is not None:
            shown.append(f"accumulator_dtype={self.accumulator_dtype.name!r}")
        return f"{self.name}({', '.join(shown)})"


@transform
class AccumulateGradients(MultiSteps):
    """See `accumulate_gradients` (`MultiSteps` under optx's argument names)."""

    name = "accumulate_gradients"
    _args: ClassVar[dict[str, str]] = {"opt": "inner", "every_k_schedule": "every_k"}


def accumulate_gradients(
    inner: GradientTransformationLike,
    every_k: int | Callable[[jax.Array], Any],
    accumulator_dtype: DTypeLike | None = None,
    *,
    use_grad_mean: bool = True,
    should_skip_update_fn: ShouldSkipUpdateFunction | None = None,
) -> AccumulateGradients:
    """Applies ``inner`` once every ``every_k`` calls, to the mean of their gradients.

    `MultiSteps` (see there for the maths) under optx's argument names, with the
    accumulator in each parameter's dtype by default. Between real updates the output
    updates are zeros and ``inner``'s state is untouched (its step count, and so its bias
    corrections and schedules, count real updates). Combined with a batch split into
    ``every_k`` micro-batches, this equals one step on the whole batch.

    Args:
      inner: the optimizer to apply to the averaged gradients.
      every_k: the number of calls per real update: an int >= 1, or a function of the
        count of real updates returning it.
      accumulator_dtype: dtype of the gradient sum; ``None`` uses each parameter's dtype.
      use_grad_mean: average the gradients (``False``: sum them).
      should_skip_update_fn: a `ShouldSkipUpdateFunction` such as `skip_not_finite`.

    Returns:
      The transform; its state is `MultiStepsState`.

    Raises:
      TypeError: ``inner`` is not a transform.
      ValueError: ``every_k`` is not an int >= 1 or a function.

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
    return AccumulateGradients(
        inner, every_k, use_grad_mean, should_skip_update_fn, accumulator_dtype
    )


class ApplyEvery(NamedTuple):
    """State of `apply_every`.

    Attributes:
      count: calls since the last emitted sum, in ``[0, k)``.
      grad_acc: the sum of the updates of those calls.
    """

    count: jax.Array
    grad_acc: Updates


@transform
class ApplyEveryTransform(Transform):
    """See `apply_every`."""

    name = "apply_every"
    elementwise = True
    k: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "k", checks.nonneg_int(self.name, "k", self.k, 1))

    def _steps(self) -> MultiSteps:
        return MultiSteps(Identity(), self.k, use_grad_mean=False, accumulator_dtype=None)

    def init(self, params: Params) -> ApplyEvery:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        return ApplyEvery(zero_count(), zeros_like(params, None))

    def update(
        self, updates: Updates, state: ApplyEvery, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ApplyEvery]:
        del extra
        inner = MultiStepsState(state.count, zero_count(), EmptyState(), state.grad_acc)
        new, inner = self._steps().update(updates, inner, params)
        return new, ApplyEvery(inner.mini_step, inner.acc_grads)


def apply_every(k: int = 1) -> ApplyEveryTransform:
    r"""Sums the updates of ``k`` calls and emits the sum every ``k``-th call, else zeros.

    .. math::
       a \leftarrow a + u_t; \quad \text{every } k\text{-th call: } u = a,\ a \leftarrow 0;
       \quad \text{else } u = 0.

    Unlike `MultiSteps`, the transforms before it in a chain still update their states
    every call: to accumulate gradients for an optimizer, wrap it in `MultiSteps`.

    Args:
      k: calls per emitted sum (an int >= 1).

    Returns:
      The transform; its state is `ApplyEvery`.

    Raises:
      ValueError: ``k`` is not an int >= 1.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.apply_every(2)
      >>> state = tx.init({"w": jnp.zeros(1)})
      >>> u1, state = tx.update({"w": jnp.array([1.0])}, state)
      >>> u2, state = tx.update({"w": jnp.array([3.0])}, state)
      >>> u1["w"], u2["w"]
      (Array([0.], dtype=float32), Array([4.], dtype=float32))
    """
    return ApplyEveryTransform(k)
