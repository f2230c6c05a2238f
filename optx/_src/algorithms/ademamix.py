"""AdEMAMix: Adam with a mixture of a fast and a slow momentum.

`scale_by_ademamix` and `ademamix`; `scale_by_simplified_ademamix` and `simplified_ademamix`
(one momentum, mixed with the current gradient). Both divide by Adam's denominator.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
    zero_count,
)
from optx._src.combine import Chain, MaskSpec, chain
from optx._src.moments import (
    AdamScalars,
    abs_sq,
    adam_scalars,
    decay_pair,
    real_zeros_like,
    unzip,
    zeros_like,
)
from optx._src.options import dtype_options
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights


def _adam_denominator(
    s: AdamScalars, g: jax.Array, v: jax.Array, k2: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Adam's second moment and denominator: ``(nu_t, sqrt(k2 * nu_t + eps_root) + eps)``.

    ``k2`` is ``1 / (1 - b2**t)``, computed once per step.
    """
    new_v = s.c2 * abs_sq(g) + s.b2 * v
    return new_v, jnp.sqrt(new_v * k2 + s.eps_root) + s.eps


class ScaleByAdemamixState(NamedTuple):
    """State of `scale_by_ademamix`: step count, fast and slow EMAs, second moment."""

    count: jax.Array
    m1: Params
    m2: Params
    nu: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByAdemamix(Transform):
    """See `scale_by_ademamix`."""

    name = "scale_by_ademamix"
    elementwise = True
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    b3: ScalarOrSchedule = hp.field(0.9999, hp.UNIT_OPEN, decay=True)
    alpha: ScalarOrSchedule = hp.field(6.0, hp.NONNEG)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    mu_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "mu_dtype")

    def init(self, params: Params) -> ScaleByAdemamixState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        checks.complex_slot(f"{self.name}.init", "mu_dtype", self.mu_dtype, params)
        zeros = zeros_like(params, self.mu_dtype)
        nu = real_zeros_like(params, self.mu_dtype)
        return ScaleByAdemamixState(zero_count(), zeros, zeros, nu, self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: ScaleByAdemamixState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByAdemamixState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.m1, "updates", "the state")
        s = adam_scalars(state.hyperparams, state.count)
        b3, c3 = decay_pair(s.hyperparams, "b3")
        alpha = s.hyperparams["alpha"]
        # Scalars once per step: the slow EMA is not bias-corrected (it would start too
        # loud); the fast one and the second moment are, as in Adam.
        k1, k2 = 1 / s.bias_correction("b1"), 1 / s.bias_correction("b2")

        def leaf(g: jax.Array, m1: jax.Array, m2: jax.Array, v: jax.Array) -> tuple[Any, ...]:
            new_m1 = s.c1 * g + s.b1 * m1
            new_m2 = c3 * g + b3 * m2
            new_v, denominator = _adam_denominator(s, g, v, k2)
            u = (new_m1 * k1 + alpha * new_m2) / denominator
            return (
                u.astype(g.dtype),
                new_m1.astype(m1.dtype),
                new_m2.astype(m2.dtype),
                new_v.astype(v.dtype),
            )

        flat = jax.tree.map(leaf, updates, state.m1, state.m2, state.nu)
        u, m1, m2, nu = unzip(flat, updates, 4)
        return u, ScaleByAdemamixState(s.count, m1, m2, nu, s.hyperparams)


def scale_by_ademamix(
    b1: float = 0.9,
    b2: float = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 6.0,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
) -> ScaleByAdemamix:
    r"""Rescales updates by AdEMAMix: Adam's moments plus a slow EMA of the gradients.

    .. math::
       m^{(1)}_t = \beta_1 m^{(1)}_{t-1} + (1-\beta_1) g_t, \quad
       m^{(2)}_t = \beta_3 m^{(2)}_{t-1} + (1-\beta_3) g_t, \quad
       \nu_t = \beta_2 \nu_{t-1} + (1-\beta_2) g_t^2, \\
       u_t = \frac{m^{(1)}_t / (1-\beta_1^t) + \alpha\, m^{(2)}_t}
       {\sqrt{\nu_t / (1-\beta_2^t) + \bar\epsilon} + \epsilon}

    with :math:`\beta_1, \beta_2, \beta_3, \alpha, \epsilon, \bar\epsilon` = ``b1``, ``b2``,
    ``b3``, ``alpha``, ``eps``, ``eps_root``. The slow EMA :math:`m^{(2)}` keeps gradients
    from thousands of steps back (:math:`1/(1-\beta_3)` = 10,000 steps by default); it is
    not bias-corrected. ``b3`` and ``alpha`` may be schedules of the step count (0 on the
    first update): the paper warms both up, since a large :math:`\alpha` on a young slow
    EMA destabilises early training.

    Args:
      b1: decay of the fast EMA, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      b3: decay of the slow EMA, in [0, 1), or a schedule.
      alpha: weight :math:`\alpha \ge 0` of the slow EMA, or a schedule. (``6.0`` here,
        ``5.0`` in `ademamix`, as in optax.)
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the three slots (both EMAs and the second moment, as optax);
        ``None`` uses each parameter's dtype.

    Returns:
      The transform. ``b1``, ``b2``, ``eps``, ``eps_root`` and ``b3`` and ``alpha`` when
      they are numbers are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), or ``alpha``, ``eps`` or ``eps_root`` is
        negative.
      TypeError: ``mu_dtype`` is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_ademamix(alpha=1.0, b3=0.5)
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -3.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates["w"].round(4)  # 1 (Adam's first step) + alpha * (1 - b3) * sign(g)
      Array([ 1.5, -1.5], dtype=float32)

    References:
      Pagliardini, Ablin and Grangier, "The AdEMAMix Optimizer: Better, Faster, Older",
      ICLR 2025 (arXiv:2409.03137).
    """
    return ScaleByAdemamix(b1, b2, b3, alpha, eps, eps_root, mu_dtype)


def ademamix(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 5.0,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    weight_decay: float = 0.0,
    mask: MaskSpec | None = None,
) -> Chain:
    r"""The AdEMAMix optimizer, with decoupled weight decay.

    .. math:: \theta_t = \theta_{t-1} - \eta_t\,\bigl(u_t + \lambda\,\theta_{t-1}\bigr)

    with :math:`u_t` of `scale_by_ademamix`. It suits long runs; with few steps a smaller
    ``b3`` (e.g. 0.999) does better (the paper's appendix C.1.5).

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the fast EMA, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      b3: decay of the slow EMA, in [0, 1), or a schedule.
      alpha: weight of the slow EMA, >= 0, or a schedule.
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the slots; ``None`` uses each parameter's dtype.
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay (see `add_decayed_weights`); ``None`` decays all.

    Returns:
      ``chain(scale_by_ademamix(...), add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_ademamix`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.ademamix(0.05, b3=0.99)
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(200):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.05)  # from 5.0
      True

    References:
      Pagliardini, Ablin and Grangier, "The AdEMAMix Optimizer: Better, Faster, Older",
      ICLR 2025 (arXiv:2409.03137).
    """
    with hp.caller("ademamix"):
        return chain(
            scale_by_ademamix(b1, b2, b3, alpha, eps, eps_root, mu_dtype),
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate),
        )


class ScaleBySimplifiedAdEMAMixState(NamedTuple):
    r"""State of `scale_by_simplified_ademamix`.

    Attributes:
      count: steps taken (saturating int32; optax calls it ``t``).
      m: the accumulated momentum :math:`m_t = \beta_1 m_{t-1} + g_t`.
      n: the second moment (an EMA of the squared gradients).
      hyperparams: ``b1``, ``b2``, ``alpha``, ``eps``, ``eps_root``.
    """

    count: jax.Array
    m: Updates
    n: Updates
    hyperparams: dict[str, jax.Array]


@transform
class ScaleBySimplifiedAdemamix(Transform):
    """See `scale_by_simplified_ademamix`."""

    name = "scale_by_simplified_ademamix"
    elementwise = True
    b1: ScalarOrSchedule = hp.field(0.99, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.95, hp.UNIT_OPEN, decay=True)
    alpha: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)

    def init(self, params: Params) -> ScaleBySimplifiedAdEMAMixState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        return ScaleBySimplifiedAdEMAMixState(
            zero_count(),
            zeros_like(params, None),
            real_zeros_like(params, None),
            self.init_hyperparams(),
        )

    def update(
        self,
        updates: Updates,
        state: ScaleBySimplifiedAdEMAMixState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleBySimplifiedAdEMAMixState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.m, "updates", "the state")
        s = adam_scalars(state.hyperparams, state.count)
        alpha = s.hyperparams["alpha"]
        k2 = 1 / s.bias_correction("b2")

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, ...]:
            # An accumulation, not an average: 1 / (1 - b1) times an EMA of g.
            new_m = g + s.b1 * m
            new_v, denominator = _adam_denominator(s, g, v, k2)
            u = (new_m + alpha * g) / denominator
            return u.astype(g.dtype), new_m.astype(m.dtype), new_v.astype(v.dtype)

        u, m, n = unzip(jax.tree.map(leaf, updates, state.m, state.n), updates, 3)
        return u, ScaleBySimplifiedAdEMAMixState(s.count, m, n, s.hyperparams)


def scale_by_simplified_ademamix(
    b1: float = 0.99,
    b2: float = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: float = 1e-8,
    eps_root: float = 0.0,
) -> ScaleBySimplifiedAdemamix:
    r"""Rescales updates by Simplified AdEMAMix: one momentum, mixed with the gradient.

    .. math::
       m_t = \beta_1 m_{t-1} + g_t, \quad
       \nu_t = \beta_2 \nu_{t-1} + (1-\beta_2) g_t^2, \quad
       u_t = \frac{m_t + \alpha\, g_t}{\sqrt{\nu_t / (1-\beta_2^t) + \bar\epsilon}
       + \epsilon}

    with :math:`\beta_1, \beta_2, \alpha, \epsilon, \bar\epsilon` = ``b1``, ``b2``,
    ``alpha``, ``eps``, ``eps_root``. :math:`m` sums the gradients with weights
    :math:`\beta_1^k` (no :math:`1 - \beta_1` factor, no bias correction), so its size is
    up to :math:`1/(1-\beta_1)` times the gradient's: scale the learning rate down
    accordingly. With :math:`\alpha = 0` this is Adam without the first moment's
    correction, its learning rate multiplied by :math:`1/(1-\beta_1)`.
    For complex parameters :math:`g_t^2` is :math:`|g_t|^2`: :math:`\nu` is real (in the
    real dtype), :math:`m` and the update are complex.

    Args:
      b1: decay of the momentum, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      alpha: weight :math:`\alpha \ge 0` of the current gradient, or a schedule.
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.

    Returns:
      The transform; its five arguments are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), or ``alpha``, ``eps`` or ``eps_root`` is
        negative.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.contrib.scale_by_simplified_ademamix(alpha=1.0, eps=0.0)
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -3.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates["w"].round(4)  # (g + alpha g) / |g|
      Array([ 2., -2.], dtype=float32)

    References:
      Morwani, Vyas, Kakade et al., "Connections between Schedule-Free Optimizers,
      AdEMAMix, and Accelerated SGD Variants", arXiv:2502.02431, 2025.
    """
    return ScaleBySimplifiedAdemamix(b1, b2, alpha, eps, eps_root)


def simplified_ademamix(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.99,
    b2: float = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    weight_decay: float = 0.0,
    mask: MaskSpec | None = None,
) -> Chain:
    r"""Simplified AdEMAMix, with decoupled weight decay.

    .. math:: \theta_t = \theta_{t-1} - \eta_t\,\bigl(u_t + \lambda\,\theta_{t-1}\bigr)

    with :math:`u_t` of `scale_by_simplified_ademamix`, :math:`\eta` = ``learning_rate``
    and :math:`\lambda` = ``weight_decay``.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the momentum, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      alpha: weight of the current gradient, >= 0, or a schedule.
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay (see `add_decayed_weights`); ``None`` decays all.

    Returns:
      ``chain(scale_by_simplified_ademamix(...), add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_simplified_ademamix`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.contrib.simplified_ademamix(0.005, b1=0.9, alpha=2.0)
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(200):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.05)  # from 5.0
      True

    References:
      Morwani, Vyas, Kakade et al., "Connections between Schedule-Free Optimizers,
      AdEMAMix, and Accelerated SGD Variants", arXiv:2502.02431, 2025.
    """
    with hp.caller("simplified_ademamix"):
        return chain(
            scale_by_simplified_ademamix(b1, b2, alpha, eps, eps_root),
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate),
        )
