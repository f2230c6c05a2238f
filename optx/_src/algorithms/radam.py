"""RAdam: Adam with a rectified adaptive learning rate."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.algorithms.adam import ScaleByAdamState, adam_state_init
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
)
from optx._src.combine import Chain, chain
from optx._src.moments import abs_sq, adam_scalars, first_moment_scalars, unzip
from optx._src.options import dtype_options, flag_options
from optx._src.scaling import scale_by_learning_rate

# 2/c - 1 - 2/L(c), L(c) = -log(1 - c), is 2 * sum_{n>=2} G_n c^(n-1) with Gregory's
# coefficients G_n; below c = 0.1 seven terms are exact to float32 round-off.
_GREGORY = (1 / 6, 1 / 12, 19 / 360, 3 / 80, 863 / 30240, 275 / 12096, 33953 / 1814400)


def sma_length(c: jax.Array, count: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(rho_t, rho_inf)``: the length of the approximated simple moving average.

    ``rho_t = rho_inf - 2 t b^t / (1 - b^t)`` with ``b = 1 - c`` and ``rho_inf = 2/c - 1``.
    Evaluated as written, two terms of size ~2/c cancel to a result of size ~t (float32
    loses 1e-2 at t = 5 for b = 0.999). As ``A(c) + (2/L)(1 - x/expm1(x))`` with
    ``L = -log1p(-c)`` and ``x = t L``, both terms are positive and each is computed
    without cancellation: ``A`` by its series for small ``c``, ``1 - x/expm1(x)`` by its
    Taylor series for small ``x``.
    """
    log_b = -jnp.log1p(-c)  # L >= c > 0; inf for b = 0.
    rho_inf = 2 / c - 1
    series = c * sum(coef * c**i for i, coef in enumerate(_GREGORY))
    a = jnp.where(c < 0.1, series, rho_inf - 2 / log_b)
    # Capped: x/expm1(x) underflows to 0 well before x = 100 (and inf/inf would be NaN).
    x = jnp.minimum(count.astype(c.dtype) * log_b, 100.0)
    taylor = x / 2 - x**2 / 12 + x**4 / 720 - x**6 / 30240 + x**8 / 1209600
    f_complement = jnp.where(x < 1, taylor, 1 - x / jnp.expm1(x))
    return a + 2 / log_b * f_complement, rho_inf


@transform
class ScaleByRadam(Transform):
    """See `scale_by_radam`."""

    name = "scale_by_radam"
    elementwise = True
    # The rectifier is real for rho_t >= 4 (and rho_t < 2, which a threshold cannot select).
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    threshold: ScalarOrSchedule = hp.field(5.0, hp.Range("finite and >= 4", lambda v: v >= 4))
    nesterov: bool = False
    mu_dtype: Any = None
    nu_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        flag_options(self, "nesterov")
        dtype_options(self, "mu_dtype", "nu_dtype")

    init = adam_state_init

    def update(
        self, updates: Updates, state: ScaleByAdamState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByAdamState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        h = state.hyperparams
        s = adam_scalars(h, state.count)
        k_m, k_g = first_moment_scalars(h, s.count, self.nesterov)
        k_v = 1 / s.bias_correction("b2")
        rho, rho_inf = sma_length(s.c2, s.count)
        rectify = rho >= h["threshold"]
        r = jnp.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
        # One expression for both cases: u = r m_hat / (sqrt(v_hat) + eps) when rectified,
        # else u = m_hat / (0 * sqrt(v_hat) + 1); the scalars pick the case once per step.
        scale = jnp.where(rectify, r, 1.0)
        on = rectify.astype(jnp.float32)
        off = jnp.where(rectify, s.eps, 1.0)

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, ...]:
            new_m = s.c1 * g + s.b1 * m
            new_v = s.c2 * abs_sq(g) + s.b2 * v
            m_hat = new_m * k_m if k_g is None else new_m * k_m + g * k_g
            u = scale * m_hat / (jnp.sqrt(new_v * k_v + s.eps_root) * on + off)
            return u.astype(g.dtype), new_m.astype(m.dtype), new_v.astype(v.dtype)

        u, mu, nu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu), updates, 3)
        return u, ScaleByAdamState(s.count, mu, nu, h)


def scale_by_radam(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    threshold: float = 5.0,
    *,
    nesterov: bool = False,
    mu_dtype: DTypeLike | None = None,
    nu_dtype: DTypeLike | None = None,
) -> ScaleByRadam:
    r"""Rescales updates by Rectified Adam: Adam's step once its variance is tractable.

    .. math::
       \rho_\infty = \frac{2}{1-\beta_2} - 1, \quad
       \rho_t = \rho_\infty - \frac{2 t \beta_2^t}{1-\beta_2^t}, \quad
       r_t = \sqrt{\frac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)
       \rho_t}}, \\
       u_t = r_t\,\hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon)
       \ \text{if } \rho_t \ge \tau, \ \text{else } u_t = \hat m_t

    with :math:`\hat m_t, \hat v_t` as in `scale_by_adam` (``nesterov`` as there),
    :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``, :math:`\epsilon` = ``eps``,
    :math:`\bar\epsilon` = ``eps_root`` and :math:`\tau` = ``threshold``. optx evaluates
    :math:`\rho_t` without the cancellation of the formula as written (see
    ``sma_length``); computed naively in float32 it is 1e-2 off near :math:`t = 5`.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      threshold: :math:`\tau \ge 4`, the :math:`\rho_t` from which the step is rectified.
      nesterov: use Nesterov momentum.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.

    Returns:
      The transform (its state is `ScaleByAdamState`). ``b1``, ``b2``, ``eps``,
      ``eps_root`` and ``threshold`` are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), ``eps`` or ``eps_root`` is negative, or
        ``threshold`` is below 4 (where the rectifier would be the square root of a
        negative number).
      TypeError: a moment dtype is not a floating dtype, or ``nesterov`` is not a bool.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_radam()
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -3.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates  # rho_1 = 1 < 5: the first steps are momentum SGD
      {'w': Array([ 2., -3.], dtype=float32)}

    References:
      Liu, Jiang, He, Chen, Liu, Gao and Han, "On the Variance of the Adaptive Learning
      Rate and Beyond", ICLR 2020.
    """
    return ScaleByRadam(b1, b2, eps, eps_root, threshold, nesterov, mu_dtype, nu_dtype)


def radam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    threshold: float = 5.0,
    *,
    nesterov: bool = False,
    mu_dtype: DTypeLike | None = None,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The Rectified Adam optimizer: `scale_by_radam` then `scale_by_learning_rate`.

    .. math:: \theta_t = \theta_{t-1} - \eta\,u_t

    with :math:`u_t` of `scale_by_radam`: momentum SGD while :math:`\rho_t < \tau`, then
    Adam with the rectifier :math:`r_t`.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      threshold: :math:`\tau \ge 4` (see `scale_by_radam`).
      nesterov: use Nesterov momentum.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.

    Returns:
      ``chain(scale_by_radam(...), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_radam`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.radam(0.1)
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.1))
      True

    References:
      Liu, Jiang, He, Chen, Liu, Gao and Han, "On the Variance of the Adaptive Learning
      Rate and Beyond", ICLR 2020.
    """
    with hp.caller("radam"):
        return chain(
            scale_by_radam(
                b1,
                b2,
                eps,
                eps_root,
                threshold,
                nesterov=nesterov,
                mu_dtype=mu_dtype,
                nu_dtype=nu_dtype,
            ),
            scale_by_learning_rate(learning_rate),
        )
