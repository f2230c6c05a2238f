"""Loss scaling for low-precision training.

Static: `scale_loss` and `unscale_gradients`. Dynamic (Keras's ``LossScaleOptimizer``):
`dynamic_loss_scale` and `loss_scale`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from optx._src import checks, tree_reduce
from optx._src import hyperparams as hp
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    find_one,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import accepts_extra, call_update
from optx._src.finite import no_change
from optx._src.tree import is_none


def scale_loss(loss: ArrayLike, loss_scale_factor: ArrayLike) -> jax.Array:
    """Multiplies a loss by the loss-scale factor (before differentiating it).

    Pair it with `unscale_gradients` at the head of the chain, with the same factor.

    Args:
      loss: the loss.
      loss_scale_factor: the factor; pass ``optx.get_hyperparams(state)["loss_scale_factor"]``
        to use the one held in the optimizer state.

    Returns:
      ``loss * loss_scale_factor``.

    Example:
      >>> import optx
      >>> float(optx.scale_loss(0.5, 1024.0))
      512.0
    """
    return jax.numpy.asarray(loss) * loss_scale_factor


class UnscaleGradientsState(NamedTuple):
    """State of `unscale_gradients`: the factor."""

    hyperparams: dict[str, jax.Array]


@transform
class UnscaleGradients(Transform):
    """See `unscale_gradients`."""

    name = "unscale_gradients"
    elementwise = True
    loss_scale_factor: ScalarOrSchedule = hp.field(1.0, hp.POSITIVE)

    def init(self, params: Params) -> UnscaleGradientsState:
        del params
        return UnscaleGradientsState(self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: UnscaleGradientsState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, UnscaleGradientsState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        s = state.hyperparams["loss_scale_factor"]
        updates = jax.tree.map(
            lambda u: None if u is None else (u / s).astype(u.dtype), updates, is_leaf=is_none
        )
        return updates, state


def unscale_gradients(loss_scale_factor: float) -> UnscaleGradients:
    r"""Divides the gradients by the loss-scale factor: :math:`g \leftarrow g / s`.

    Gradients of ``scale_loss(loss, s)`` are ``s`` times too large; put this first in the
    chain (Keras's ``loss_scale_factor``) so clipping and the rest see true gradients.

    Args:
      loss_scale_factor: :math:`s > 0` (a dynamic hyperparameter, ``"loss_scale_factor"``).

    Returns:
      The transform.

    Raises:
      ValueError: ``loss_scale_factor`` is not positive and finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.unscale_gradients(1024.0)
      >>> tx.update({"w": jnp.array([512.0])}, tx.init(None))[0]
      {'w': Array([0.5], dtype=float32)}
    """
    return UnscaleGradients(loss_scale_factor)


class DynamicLossScaleState(NamedTuple):
    """State of `dynamic_loss_scale`.

    Attributes:
      scale: the current loss scale (a float32 scalar); read it with `loss_scale`.
      growth_count: finite steps since the scale last changed, in ``[0, growth_interval)``.
      applied_count: steps whose (finite) updates were applied; the steps skipped are the
        calls to ``update`` minus this (`optx.optimizers.LossScaleOptimizer` shows them as
        ``skipped_steps``).
      inner_state: the wrapped transform's state (unchanged by a skipped step).
      hyperparams: ``{"initial_scale": ...}``, read by ``init`` only.
    """

    scale: jax.Array
    growth_count: jax.Array
    applied_count: jax.Array
    inner_state: OptState
    hyperparams: dict[str, jax.Array]


# The least scale: float32's smallest normal number. Halved below it, the scale would be
# flushed to zero (XLA:CPU flushes subnormal numbers), and the next finite step would divide
# the gradients by zero.
_MIN_SCALE = float(jnp.finfo(jnp.float32).smallest_normal)
MAX_LOSS_SCALE = 2.0**64
"""The ceiling of `dynamic_loss_scale`'s scale.

Without one, gradients that never overflow (a frozen or zero-gradient model) double the
scale every ``growth_interval`` steps: at 2**127 its reciprocal is subnormal and flushed to
0 (every update 0), and at ``inf`` every later step is skipped. At 2**64 the reciprocal,
2**-64, is a normal float32 with 2**62 of room below it, and a float32 or bfloat16 loss up
to 2**64 still scales to a finite number (float16's largest, 65504, is about 2**16: a
float16 loss overflows long before, and the scale halves back). Keras 3 and optax have no
ceiling (TensorFlow's keeps the scale finite only, at most 2**127); Flax's ``DynamicScale``
stops at float32's largest number.
"""


def _in_scale_range(v: float) -> bool:
    # A module-level function, not a lambda: a state's rules are pickled with it.
    return 0 < v <= MAX_LOSS_SCALE


_SCALE_RANGE = hp.Range("in (0, 2**64] (2**64 is the scale's ceiling)", _in_scale_range)


@transform
class DynamicLossScale(Transform):
    """See `dynamic_loss_scale`."""

    name = "dynamic_loss_scale"
    elementwise = True
    # The scale itself changes every step and lives in the state, not among these.
    inner: GradientTransformationLike = None  # type: ignore[assignment]
    initial_scale: ScalarOrSchedule = hp.field(2.0**15, _SCALE_RANGE)
    growth_interval: int = 2000

    def __post_init__(self) -> None:
        checks.transform(self.name, "inner", self.inner)
        super().__post_init__()
        n = checks.nonneg_int(self.name, "growth_interval", self.growth_interval, 1)
        object.__setattr__(self, "growth_interval", n)

    def init(self, params: Params) -> DynamicLossScaleState:
        # Clipped: a schedule's value, or one set in the state, may lie outside the range.
        initial = jnp.asarray(self.initial("initial_scale"), jnp.float32)
        return DynamicLossScaleState(
            jnp.clip(initial, _MIN_SCALE, MAX_LOSS_SCALE),
            zero_count(),
            zero_count(),
            self.inner.init(params),
            self.init_hyperparams(),
        )

    def update(
        self,
        updates: Updates,
        state: DynamicLossScaleState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, DynamicLossScaleState]:
        finite = tree_reduce.all_finite(updates)
        scale = state.scale
        accepts = accepts_extra(self.inner)

        def apply(_: None) -> tuple[Updates, OptState]:
            # Unscaled by the scale the loss was multiplied by: this step's, before it grows.
            grads = jax.tree.map(lambda g: (g / scale).astype(g.dtype), updates)
            return call_update(self.inner, accepts, grads, state.inner_state, params, extra)

        def skip(_: None) -> tuple[Updates, OptState]:
            return no_change(updates), state.inner_state

        # Only the branch taken runs: a skipped step does not compute the inner update.
        new_updates, inner_state = jax.lax.cond(finite, apply, skip, None)
        grow = finite & (state.growth_count >= self.growth_interval - 1)
        halved = jnp.maximum(scale * 0.5, _MIN_SCALE)
        doubled = jnp.minimum(scale * 2.0, MAX_LOSS_SCALE)
        new_scale = jnp.where(finite, jnp.where(grow, doubled, scale), halved)
        growth_count = jnp.where(finite & ~grow, state.growth_count + 1, 0)
        applied = jnp.where(finite, safe_increment(state.applied_count), state.applied_count)
        return new_updates, DynamicLossScaleState(
            new_scale.astype(jnp.float32),
            growth_count.astype(jnp.int32),
            applied.astype(jnp.int32),
            inner_state,
            state.hyperparams,
        )


def dynamic_loss_scale(
    inner: GradientTransformationLike,
    initial_scale: float = 2.0**15,
    growth_interval: int = 2000,
) -> DynamicLossScale:
    r"""Dynamic loss scaling (Keras's ``LossScaleOptimizer``) around ``inner``.

    The incoming updates are the gradients of ``scale_loss(loss, loss_scale(state))``, that
    is of :math:`s \cdot L` with :math:`s` the current scale. If they are all finite,
    ``inner`` is applied to :math:`g / s` (cast back to each leaf's dtype); then :math:`s`
    doubles if this is the ``growth_interval``-th finite step in a row since it last changed,
    up to a ceiling of :math:`2^{64}` (``MAX_LOSS_SCALE``). If any is a NaN or an infinity,
    the step is skipped (negative-zero updates, which `optx.apply_updates` adds without
    changing a bit of the parameters; ``inner``'s state unchanged) and :math:`s` halves,
    down to float32's smallest normal number (:math:`2^{-126}`; without that floor, about
    140 non-finite steps in a row would take it to zero). ``None`` gradients are ignored.

    The ceiling: gradients that never overflow (a model whose gradients are all zero, for
    one) would double the scale forever; without a ceiling, at :math:`2^{127}` its
    reciprocal is flushed to 0 (every update 0), and at ``inf`` every later step is skipped.
    At :math:`2^{64}`, :math:`1/s` is a normal float32 with room to spare, and a float32 or
    bfloat16 loss up to :math:`2^{64}` scales to a finite number (a float16 loss overflows
    at about :math:`2^{16}`, and the scale halves back). Keras 3 and optax set no ceiling,
    TensorFlow keeps the scale finite (at most :math:`2^{127}`), and Flax's ``DynamicScale``
    stops at float32's largest number.

    The scale lives in the state (it changes every step), not among the hyperparameters;
    read it with `loss_scale`.

    Args:
      inner: the optimizer to apply to the unscaled gradients.
      initial_scale: the scale to start from, in :math:`(0, 2^{64}]` (Keras's default);
        read by ``init`` only: setting it in a state later changes nothing.
      growth_interval: finite steps in a row after which the scale doubles (an int >= 1);
        Keras's ``dynamic_growth_steps`` (same default).

    Returns:
      The transform; its state is `DynamicLossScaleState`. ``initial_scale`` is a dynamic
      hyperparameter (as ``inner``'s are).

    Raises:
      TypeError: ``inner`` is not a transform, or ``initial_scale`` is not a number.
      ValueError: ``initial_scale`` is not in :math:`(0, 2^{64}]`, or ``growth_interval``
        is not an int in :math:`[1, 2^{31} - 1]` (its counter is int32).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.dynamic_loss_scale(optx.sgd(1.0), initial_scale=8.0, growth_interval=2)
      >>> params = {"w": jnp.zeros(1)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([8.0])}, state, params)
      >>> updates["w"], float(optx.loss_scale(state))
      (Array([-1.], dtype=float32), 8.0)
      >>> updates, state = tx.update({"w": jnp.array([jnp.inf])}, state, params)
      >>> optx.apply_updates(params, updates)["w"], float(optx.loss_scale(state))
      (Array([0.], dtype=float32), 4.0)
    """
    return DynamicLossScale(inner, initial_scale, growth_interval)


def loss_scale(state: OptState) -> jax.Array:
    """The current scale held by the one `dynamic_loss_scale` in an optimizer state.

    Args:
      state: the state of a transform or chain that contains exactly one
        `dynamic_loss_scale`.

    Returns:
      The scale (a float32 scalar): pass it to `scale_loss` before differentiating.

    Raises:
      ValueError: the state holds no `dynamic_loss_scale` state, or several.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.dynamic_loss_scale(optx.adam(1e-3), initial_scale=1024.0)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> float(optx.scale_loss(0.5, optx.loss_scale(state)))
      512.0
    """
    return find_one(state, DynamicLossScaleState, "loss_scale", "dynamic_loss_scale").scale
