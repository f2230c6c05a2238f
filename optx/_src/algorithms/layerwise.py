"""Layer-wise adaptive optimizers: `scale_by_trust_ratio`, `lamb`, `lars`, `fromage`."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks, placement
from optx._src import hyperparams as hp
from optx._src.algorithms.adam import scale_by_adam
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    safe_increment,
    transform,
)
from optx._src.combine import Chain, MaskSpec, chain, masked
from optx._src.momentum import Trace
from optx._src.scaling import ScaleByLearningRate, ScaleByLearningRateState, scale_by_learning_rate
from optx._src.tree_reduce import abs_sq
from optx._src.weight_decay import add_decayed_weights

_PLACEMENTS = ("inside", "outside")


def _f32(x: jax.Array) -> jax.Array:
    """``x`` in at least float32."""
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def _norm(x: jax.Array, floor: jax.Array) -> jax.Array:
    """``max(||x||, floor)``, its gradient finite where ``||x|| <= floor`` (even at 0)."""
    norm = jnp.sqrt(jnp.sum(abs_sq(x)))
    small = norm <= floor
    safe = jnp.sqrt(jnp.sum(abs_sq(jnp.where(small, placement.full_like(x, 1), x))))
    return jnp.where(small, floor, safe)


class ScaleByTrustRatioState(NamedTuple):
    """State of `scale_by_trust_ratio`: its hyperparameters."""

    hyperparams: dict[str, jax.Array]


@transform
class ScaleByTrustRatio(Transform):
    """See `scale_by_trust_ratio`."""

    name = "scale_by_trust_ratio"
    min_norm: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    trust_coefficient: ScalarOrSchedule = hp.field(1.0, hp.NONNEG)
    eps: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    # Hyperparameters that an optimizer does not expose (LAMB's trust ratio takes none of
    # its arguments) stay constants, so its state holds exactly the optimizer's arguments.
    constants: tuple[str, ...] = dataclasses.field(default=(), repr=False)

    def unused_hyperparams(self) -> frozenset[str]:
        return frozenset(self.constants)

    def init(self, params: Params) -> ScaleByTrustRatioState:
        del params
        return ScaleByTrustRatioState(self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: ScaleByTrustRatioState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByTrustRatioState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params")
        h = state.hyperparams

        def get(f: str) -> jax.Array:
            return jnp.asarray(getattr(self, f), jnp.float32) if f in self.constants else h[f]

        floor, coefficient, eps = get("min_norm"), get("trust_coefficient"), get("eps")

        def leaf(u: jax.Array, p: jax.Array) -> jax.Array:
            u32 = _f32(u)
            p_norm, u_norm = _norm(_f32(p), floor), _norm(u32, floor)
            ratio = coefficient * p_norm / (u_norm + eps)
            # A zero parameter (fresh bias) or a zero update keeps the plain update.
            ratio = jnp.where((p_norm == 0.0) | (u_norm == 0.0), 1.0, ratio)
            return (u32 * ratio).astype(u.dtype)

        return jax.tree.map(leaf, updates, params), state


def scale_by_trust_ratio(
    min_norm: float = 0.0, trust_coefficient: float = 1.0, eps: float = 0.0
) -> ScaleByTrustRatio:
    r"""Scales each leaf's update by its trust ratio, the norm of its parameter over its own.

    .. math:: u \leftarrow u \cdot \frac{c\,\max(\|\theta\|, n)}{\max(\|u\|, n) + \epsilon}

    per leaf (one layer's weights), with :math:`c` = ``trust_coefficient``, :math:`n` =
    ``min_norm`` and :math:`\epsilon` = ``eps``; the factor is 1 where either clipped norm
    is zero. Norms are Euclidean (Frobenius) norms of whole leaves.

    Args:
      min_norm: :math:`n \ge 0`, the floor of both norms.
      trust_coefficient: :math:`c \ge 0`.
      eps: :math:`\epsilon \ge 0`, added to the update's norm.

    Returns:
      The transform; its three arguments are dynamic hyperparameters.

    Raises:
      ValueError: an argument is negative or non-finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_trust_ratio()
      >>> params = {"w": jnp.array([3.0, 4.0]), "b": jnp.zeros(2)}
      >>> grads = {"w": jnp.array([0.0, 0.5]), "b": jnp.ones(2)}
      >>> updates, _ = tx.update(grads, tx.init(params), params)
      >>> updates["w"], updates["b"]
      (Array([0., 5.], dtype=float32), Array([1., 1.], dtype=float32))

    References:
      You, Gitman and Ginsburg, "Large Batch Training of Convolutional Networks",
      arXiv:1708.03888, 2017.
    """
    return ScaleByTrustRatio(min_norm, trust_coefficient, eps)


def _masked(tx: Any, mask: MaskSpec | None) -> Any:
    """``tx``, restricted to ``mask`` unless the mask selects everything (``None``, ``True``)."""
    return tx if mask is None or mask is True else masked(tx, mask)


def lamb(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
    eps_root: float = 0.0,
    weight_decay: float = 0.0,
    mask: MaskSpec | None = None,
    *,
    weight_decay_placement: str = "inside",
    mu_dtype: DTypeLike | None = None,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The LAMB optimizer: Adam's direction, scaled per layer by a trust ratio.

    .. math::
       r = \hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon), \qquad
       \theta \leftarrow \theta - \eta\,\frac{\|\theta\|}{\|r + \lambda\theta\|}
       (r + \lambda\theta)

    with Adam's moments (`scale_by_adam`: :math:`\beta_1` = ``b1``, :math:`\beta_2` =
    ``b2``, :math:`\epsilon` = ``eps``, :math:`\bar\epsilon` = ``eps_root``), :math:`\eta`
    = ``learning_rate`` and :math:`\lambda` = ``weight_decay``. The trust ratio is 1
    where a norm is zero. With ``weight_decay_placement="outside"`` (Keras's ``Lamb``,
    whose base class decays the weights apart from the step) the decay stays out of the
    trust ratio:
    :math:`\theta \leftarrow \theta - \eta\,(\|\theta\|/\|r\|\;r + \lambda\theta)`. Keras
    takes :math:`\|\theta\|` after its decay, i.e. a trust ratio
    :math:`(1 - \eta\lambda)` times this one; without decay the two agree.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root (Keras: ``epsilon=1e-7``).
      eps_root: added inside the square root.
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay: a pytree of bools, a callable, or regular
        expressions on parameter paths (see `masked`); ``None`` decays all.
      weight_decay_placement: ``"inside"`` (optax) or ``"outside"`` (Keras) the trust
        ratio.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.

    Returns:
      ``chain(scale_by_adam(...), add_decayed_weights(weight_decay, mask),
      scale_by_trust_ratio(), scale_by_learning_rate(learning_rate))``; ``"outside"``
      swaps the middle two.

    Raises:
      ValueError: an argument is out of range, or the placement is unknown.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.array([3.0, 4.0])}
      >>> tx = optx.lamb(0.1)
      >>> updates, _ = tx.update({"w": jnp.array([1.0, 0.0])}, tx.init(params), params)
      >>> updates["w"]
      Array([-0.5,  0. ], dtype=float32)

    References:
      You, Li, Reddi, Hseu, Kumar, Bhojanapalli, Song, Demmel, Keutzer and Hsieh,
      "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", ICLR 2020.
    """
    with hp.caller("lamb"):
        if weight_decay_placement not in _PLACEMENTS:
            raise ValueError(
                "`lamb` needs weight_decay_placement to be 'inside' or 'outside'. "
                f"Received: weight_decay_placement={weight_decay_placement!r}."
            )
        adam = scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nu_dtype=nu_dtype)
        decay = add_decayed_weights(weight_decay, _masked_spec(mask))
        trust = ScaleByTrustRatio(constants=("min_norm", "trust_coefficient", "eps"))
        middle = (decay, trust)
        if weight_decay_placement == "outside":
            middle = middle[::-1]
        return chain(adam, *middle, scale_by_learning_rate(learning_rate))


def _masked_spec(mask: MaskSpec | None) -> MaskSpec | None:
    return None if mask is True else mask


def lars(
    learning_rate: ScalarOrSchedule,
    weight_decay: float = 0.0,
    weight_decay_mask: MaskSpec = True,
    trust_coefficient: float = 0.001,
    eps: float = 0.0,
    trust_ratio_mask: MaskSpec = True,
    momentum: float = 0.9,
    nesterov: bool = False,
    *,
    accumulator_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The LARS optimizer: SGD with momentum on per-layer trust-ratio-scaled updates.

    .. math::
       d = g + \lambda\theta, \quad
       t \leftarrow \eta\,\frac{c\,\|\theta\|}{\|d\| + \epsilon}\,d + \mu t, \quad
       \theta \leftarrow \theta - t \ \ (\theta - (\eta\,\ldots\,d + \mu t)
       \text{ with Nesterov})

    with :math:`\lambda` = ``weight_decay`` (on the leaves ``weight_decay_mask`` selects),
    :math:`c` = ``trust_coefficient``, :math:`\epsilon` = ``eps`` (the trust ratio only on
    the leaves ``trust_ratio_mask`` selects; 1 where a norm is zero), :math:`\mu` =
    ``momentum`` and :math:`\eta` = ``learning_rate``, applied before the momentum.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      weight_decay: :math:`\lambda \ge 0`.
      weight_decay_mask: which parameters to decay: ``True`` (all), a pytree of bools, a
        callable, or regular expressions on parameter paths (see `masked`).
      trust_coefficient: :math:`c \ge 0`.
      eps: :math:`\epsilon \ge 0`, added to the update's norm.
      trust_ratio_mask: which parameters get the trust ratio, in the same forms.
      momentum: :math:`\mu \in [0, 1]`.
      nesterov: use Nesterov momentum.
      accumulator_dtype: dtype of the momentum buffer; ``None`` uses the parameters'.

    Returns:
      ``chain(add_decayed_weights(weight_decay, weight_decay_mask),
      masked(scale_by_trust_ratio(trust_coefficient=..., eps=...), trust_ratio_mask),
      scale_by_learning_rate(learning_rate), trace(momentum, nesterov))`` (without
      `masked` for a mask of ``True``).

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.array([3.0, 4.0])}
      >>> tx = optx.lars(1.0, trust_coefficient=0.1)
      >>> updates, _ = tx.update({"w": jnp.array([0.0, 1.0])}, tx.init(params), params)
      >>> updates["w"]
      Array([ 0. , -0.5], dtype=float32)

    References:
      You, Gitman and Ginsburg, "Large Batch Training of Convolutional Networks",
      arXiv:1708.03888, 2017.
    """
    with hp.caller("lars"):
        return chain(
            add_decayed_weights(weight_decay, _masked_spec(weight_decay_mask)),
            _masked(
                ScaleByTrustRatio(0.0, trust_coefficient, eps, constants=("min_norm",)),
                trust_ratio_mask,
            ),
            scale_by_learning_rate(learning_rate),
            Trace(momentum, nesterov, accumulator_dtype, hyperparam_name="momentum"),
        )


@transform
class FromageStep(ScaleByLearningRate):
    """Fromage's step: ``-lr u / sqrt(1 + lr**2)`` plus the shrinkage of the parameters."""

    name = "fromage_step"

    def update(
        self,
        updates: Updates,
        state: ScaleByLearningRateState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByLearningRateState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params")
        lr = self.current(state)
        root = jnp.sqrt(1.0 + lr * lr)
        step = -lr / root
        # 1/root - 1 without the cancellation of computing it that way in float32.
        shrink = -(lr * lr) / (root * (1.0 + root))

        def leaf(u: jax.Array, p: jax.Array) -> jax.Array:
            return (step * _f32(u) + shrink * _f32(p)).astype(u.dtype)

        updates = jax.tree.map(leaf, updates, params)
        return updates, state._replace(count=safe_increment(state.count))


def fromage(learning_rate: ScalarOrSchedule, min_norm: float = 1e-6) -> Chain:
    r"""The Fromage optimizer: trust-ratio steps, then shrinking the weights.

    .. math::
       \theta \leftarrow \frac{1}{\sqrt{1 + \eta^2}}\Bigl(\theta - \eta\,
       \frac{\max(\|\theta\|, n)}{\max(\|g\|, n)}\,g\Bigr)

    per leaf, with :math:`\eta` = ``learning_rate`` (a schedule is evaluated at each
    step) and :math:`n` = ``min_norm``.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      min_norm: :math:`n \ge 0`, the floor of both norms.

    Returns:
      ``chain(scale_by_trust_ratio(min_norm), fromage_step(learning_rate))``, the second
      applying :math:`u \mapsto -\eta u / \sqrt{1+\eta^2} + (1/\sqrt{1+\eta^2} - 1)\theta`.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.array([3.0, 4.0])}
      >>> tx = optx.fromage(0.75)
      >>> updates, _ = tx.update({"w": jnp.array([0.0, 1.0])}, tx.init(params), params)
      >>> updates["w"]  # the new weights are (3, 4 - 0.75 * 5) / 1.25 = (2.4, 0.2)
      Array([-0.6, -3.8], dtype=float32)

    References:
      Bernstein, Vahdat, Yue and Liu, "On the distance between two neural networks and the
      stability of learning", NeurIPS 2020.
    """
    with hp.caller("fromage"):
        return chain(
            ScaleByTrustRatio(min_norm, constants=("trust_coefficient", "eps")),
            FromageStep(learning_rate),  # type: ignore[arg-type]
        )
