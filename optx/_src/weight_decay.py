"""Decoupled weight decay: `add_decayed_weights` and `decay_before`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import (
    MaskSpec,
    accepts_extra,
    call_update,
    freeze_mask,
    masked,
    resolve_mask,
)
from optx._src.tree import is_none


class AddDecayedWeightsState(NamedTuple):
    """State of `add_decayed_weights`: the decay rate."""

    hyperparams: dict[str, jax.Array]


@transform
class AddDecayedWeights(Transform):
    """See `add_decayed_weights`."""

    name = "add_decayed_weights"
    elementwise = True
    weight_decay: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)

    def init(self, params: Params) -> AddDecayedWeightsState:
        del params
        return AddDecayedWeightsState(self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: AddDecayedWeightsState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, AddDecayedWeightsState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params", allow_none=True)
        wd = state.hyperparams["weight_decay"]
        updates = jax.tree.map(
            lambda u, p: None if u is None else (u + wd * p).astype(u.dtype),
            updates,
            params,
            is_leaf=is_none,
        )
        return updates, state


def add_decayed_weights(weight_decay: float = 0.0, mask: MaskSpec | None = None) -> Any:
    r"""Adds ``weight_decay * params`` to the updates (decoupled weight decay).

    .. math:: u \leftarrow u + \lambda\,\theta

    Placed before the learning rate in a chain, this is AdamW's decay
    (:math:`\theta \leftarrow \theta - \eta(\hat u + \lambda\theta)`).

    Args:
      weight_decay: :math:`\lambda \ge 0` (a dynamic hyperparameter, ``"weight_decay"``).
      mask: which parameters to decay: a pytree of bools, a callable
        ``params -> pytree of bools``, or regular expression(s) on parameter path names
        (see `masked`). ``None`` decays every parameter.

    Returns:
      The transform (wrapped in `masked` when ``mask`` is given).

    Raises:
      ValueError: ``weight_decay`` is negative or non-finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.add_decayed_weights(0.1, mask="kernel")
      >>> params = {"kernel": jnp.ones(2), "bias": jnp.ones(2)}
      >>> updates, _ = tx.update(optx.tree.zeros_like(params), tx.init(params), params)
      >>> updates["kernel"], updates["bias"]
      (Array([0.1, 0.1], dtype=float32), Array([0., 0.], dtype=float32))

    References:
      Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.
    """
    decay = AddDecayedWeights(weight_decay)
    return decay if mask is None else masked(decay, mask)


class DecayBeforeState(NamedTuple):
    """State of `decay_before`: the step count, the inner state and the hyperparameters."""

    count: jax.Array
    inner_state: OptState
    hyperparams: dict[str, jax.Array]


@transform
class DecayBefore(Transform):
    """See `decay_before`."""

    name = "decay_before"
    inner: GradientTransformationLike = None  # type: ignore[assignment]
    weight_decay: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    learning_rate: ScalarOrSchedule = hp.field(1e-3, hp.NONNEG)
    mask: MaskSpec = None

    def __post_init__(self) -> None:
        checks.transform(self.name, "inner", self.inner)
        if self.mask is not None:
            object.__setattr__(self, "mask", freeze_mask(self.name, self.mask))
        super().__post_init__()

    def init(self, params: Params) -> DecayBeforeState:
        return DecayBeforeState(zero_count(), self.inner.init(params), self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: DecayBeforeState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, DecayBeforeState]:
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params", allow_none=True)
        lr = state.hyperparams["learning_rate"]
        wd = state.hyperparams["weight_decay"]
        mask = (
            jax.tree.map(lambda _: True, params)
            if self.mask is None
            else resolve_mask(self.name, self.mask, params)
        )

        def shrink(decay: bool, p: jax.Array) -> jax.Array:
            if not decay:
                return p
            # In the parameter's dtype, as Keras computes `w - w * wd * lr`.
            return p - p * wd.astype(p.dtype) * lr.astype(p.dtype)

        decayed = jax.tree.map(shrink, mask, params)
        inner_updates, inner_state = call_update(
            self.inner, accepts_extra(self.inner), updates, state.inner_state, decayed, extra
        )
        out = jax.tree.map(
            lambda u, d, p: None if u is None else ((d - p) + u).astype(u.dtype),
            inner_updates,
            decayed,
            params,
            is_leaf=is_none,
        )
        return out, DecayBeforeState(safe_increment(state.count), inner_state, state.hyperparams)


def decay_before(
    inner: GradientTransformationLike,
    weight_decay: float,
    learning_rate: ScalarOrSchedule,
    mask: MaskSpec | None = None,
) -> DecayBefore:
    r"""Shrinks the parameters by :math:`\eta_t\lambda` before ``inner`` takes its step.

    .. math:: \theta' = \theta - \eta_t\,\lambda\,\theta, \qquad
       \theta_{t+1} = \theta' + \mathrm{inner}(g, \theta')

    This is the weight decay of every Keras optimizer: decoupled (no moment sees it),
    multiplied by the learning rate of the step, and applied *before* the update, which
    therefore reads the decayed parameters. Where ``inner`` does not read the parameters
    it equals ``add_decayed_weights`` placed before ``scale_by_learning_rate``; where it
    does (Lamb's trust ratio, Adafactor's parameter scale, schedule-free's interpolation,
    FTRL), only this order reproduces Keras.

    Args:
      inner: the optimizer, including its learning rate.
      weight_decay: :math:`\lambda \ge 0` (a dynamic hyperparameter, ``"weight_decay"``).
      learning_rate: :math:`\eta`, the same learning rate (or schedule) as ``inner``'s: a
        number (a dynamic hyperparameter, ``"learning_rate"``) or a schedule evaluated at
        the step count kept in the state.
      mask: which parameters to decay (as `masked`'s); ``None`` decays all of them.

    Returns:
      The transform; its state is `DecayBeforeState`.

    Raises:
      TypeError: ``inner`` is not a transform, ``weight_decay`` is not a number, or the
        mask is malformed.
      ValueError: ``weight_decay`` or ``learning_rate`` is negative or non-finite.

    Example:
      The tf.keras documentation's example: SGD at learning rate 1 with decay 0.004, a
      zero gradient, and the second variable excluded:

      >>> import jax.numpy as jnp, optx
      >>> tx = optx.decay_before(optx.sgd(1.0), 0.004, 1.0, mask="var1")
      >>> params = {"var1": jnp.array(2.0), "var2": jnp.array(2.0)}
      >>> updates, _ = tx.update(optx.tree.zeros_like(params), tx.init(params), params)
      >>> optx.apply_updates(params, updates)
      {'var1': Array(1.992, dtype=float32), 'var2': Array(2., dtype=float32)}
    """
    return DecayBefore(inner, weight_decay, learning_rate, mask)
