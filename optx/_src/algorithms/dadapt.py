"""D-Adaptation for AdamW: `dadapt_adamw`, AdamW that estimates its own learning rate."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, placement, reductions
from optx._src import hyperparams as hp
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
    zero_count,
)
from optx._src.moments import adam_scalars, real_zeros_like, scaled_abs_sq, unzip


class DAdaptAdamWState(NamedTuple):
    r"""State of `dadapt_adamw`.

    Attributes:
      exp_avg: first moment of the scaled gradients :math:`\gamma_t g`.
      exp_avg_sq: second moment of the gradients (real: :math:`|g|^2` for a complex
        parameter).
      grad_sum: the decayed sum :math:`s` of past scaled gradients.
      estim_lr: the estimate :math:`d` of the distance to a solution (float32, or float64
        where a parameter is float64).
      numerator_weighted: the running numerator :math:`r` of the estimate (same dtype).
      count: the step count (int32, saturating).
      hyperparams: the dynamic hyperparameters.
    """

    exp_avg: Params
    exp_avg_sq: Params
    grad_sum: Params
    estim_lr: jax.Array
    numerator_weighted: jax.Array
    count: jax.Array
    hyperparams: dict[str, jax.Array]


@transform
class DAdaptAdamW(Transform):
    """See `dadapt_adamw`."""

    name = "dadapt_adamw"
    elementwise = True
    learning_rate: ScalarOrSchedule = hp.field(1.0, hp.NONNEG)
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    estim_lr0: ScalarOrSchedule = hp.field(1e-6, hp.POSITIVE)
    weight_decay: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)

    def __repr__(self) -> str:
        # Shown as the factory takes them: one ``betas`` pair.
        pair = f"b1={self.b1!r}, b2={self.b2!r}"
        return super().__repr__().replace(pair, f"betas={(self.b1, self.b2)!r}")

    def unused_hyperparams(self) -> frozenset[str]:
        # estim_lr0 sets the estimate at `init`; later changes could not show.
        return frozenset({"estim_lr0"})

    def init(self, params: Params) -> DAdaptAdamWState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        zeros = jax.tree.map(placement.zeros_like, params)
        dtype = reductions.scalar_dtype(params)
        return DAdaptAdamWState(
            zeros,
            real_zeros_like(params, None),
            zeros,
            jnp.asarray(self.initial("estim_lr0"), dtype),
            jnp.zeros([], dtype),
            zero_count(),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: DAdaptAdamWState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, DAdaptAdamWState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.exp_avg, "updates", "the state")
        checks.same_tree(api, params, state.exp_avg, "params", "the state")
        h = state.hyperparams
        s = adam_scalars(h, state.count)
        d = state.estim_lr
        dtype = d.dtype
        eps, wd = s.eps, h["weight_decay"]
        # sqrt(b2) in the estimate's dtype; 1 - sqrt(b2) = (1 - b2) / (1 + sqrt(b2)) from the
        # stored 1 - b2, without the cancellation of 1 - 0.9995.
        sb2 = jnp.sqrt(s.b2.astype(dtype))
        c3 = s.c2.astype(dtype) / (1 + sb2)
        # Adam's bias corrections, in the estimate's dtype, folded into the step size.
        bc2 = reductions.bias_correction(h, "b2", s.count, dtype)
        bc = jnp.sqrt(bc2) / reductions.bias_correction(h, "b1", s.count, dtype)
        dlr = (d * h["learning_rate"] * bc).astype(dtype)
        # Re<g, s / (sqrt(v) + eps)> with the previous s and v: one reduction over all leaves
        # (the real part of a complex parameter's inner product).
        weighted = jax.tree.map(
            lambda sk, v: sk / (jnp.sqrt(v) + eps), state.grad_sum, state.exp_avg_sq
        )
        numerator = reductions.vdot(updates, weighted, dtype)

        def moments(g: jax.Array, m: jax.Array, v: jax.Array, sk: jax.Array) -> tuple[Any, ...]:
            new_m = s.b1 * m + s.c1 * dlr * g
            # |g|^2, real; a real leaf keeps its rounding order.
            new_v = s.b2 * v + scaled_abs_sq(s.c2, g)
            new_s = sb2 * sk + c3 * dlr * g
            return new_m.astype(m.dtype), new_v.astype(v.dtype), new_s.astype(sk.dtype)

        flat = jax.tree.map(moments, updates, state.exp_avg, state.exp_avg_sq, state.grad_sum)
        exp_avg, exp_avg_sq, grad_sum = unzip(flat, updates, 3)
        weighted_num = sb2 * state.numerator_weighted + c3 * dlr * numerator
        denominator = c3 * reductions.l1_norm(grad_sum, dtype)
        # All gradients zero so far: optax's 0 / 0 would make the estimate NaN for good.
        safe = jnp.where(denominator > 0, denominator, 1.0)
        estimate = jnp.where(denominator > 0, weighted_num / safe, 0.0)
        new_d = jnp.maximum(d, estimate)

        def step(m: jax.Array, v: jax.Array, p: jax.Array, g: jax.Array) -> jax.Array:
            return (-wd * dlr * p - m / (jnp.sqrt(v) + eps)).astype(g.dtype)

        out = jax.tree.map(step, exp_avg, exp_avg_sq, params, updates)
        return out, DAdaptAdamWState(exp_avg, exp_avg_sq, grad_sum, new_d, weighted_num, s.count, h)


def dadapt_adamw(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    estim_lr0: float = 1e-6,
    weight_decay: float = 0.0,
) -> DAdaptAdamW:
    r"""D-Adaptation AdamW: AdamW whose step size is an estimate of the distance to a solution.

    With :math:`d_t` the estimate (``estim_lr``, from :math:`d_0` = ``estim_lr0``),
    :math:`\beta_3 = \sqrt{\beta_2}` and
    :math:`\gamma_t = d_t\,\eta_t \sqrt{1-\beta_2^t} / (1-\beta_1^t)`:

    .. math::
       r_t = \beta_3 r_{t-1} + (1-\beta_3)\,\gamma_t
             \bigl\langle g_t,\ s_{t-1} / (\sqrt{v_{t-1}} + \epsilon)\bigr\rangle, \\
       m_t = \beta_1 m_{t-1} + (1-\beta_1)\,\gamma_t g_t, \quad
       v_t = \beta_2 v_{t-1} + (1-\beta_2)\,g_t^2, \quad
       s_t = \beta_3 s_{t-1} + (1-\beta_3)\,\gamma_t g_t, \\
       d_{t+1} = \max\Bigl(d_t,\ \frac{r_t}{(1-\beta_3)\,\lVert s_t\rVert_1}\Bigr), \quad
       u_t = -\frac{m_t}{\sqrt{v_t} + \epsilon} - \lambda\,\gamma_t\,\theta_{t-1}

    with :math:`(\beta_1, \beta_2)` = ``betas``, :math:`\eta_t` = ``learning_rate`` (a
    multiplier of the estimate), :math:`\epsilon` = ``eps`` and :math:`\lambda` =
    ``weight_decay``. The learning rate takes part in the estimate, so the transform applies
    it itself: its updates are the parameter changes. For complex parameters :math:`d_t` and
    :math:`r_t` stay real: :math:`v_t` holds :math:`|g_t|^2` (a real slot), the inner
    product is its real part and :math:`\lVert s_t\rVert_1` sums moduli; :math:`m_t`,
    :math:`s_t` and the updates are complex.

    Where optax differs: while every gradient so far is zero, :math:`\lVert s_t\rVert_1 = 0`
    and optax's estimate is :math:`0/0`, NaN from then on; here the estimate is kept.
    :math:`1 - \sqrt{\beta_2}` is computed as :math:`(1-\beta_2)/(1+\sqrt{\beta_2})`, so it
    does not lose digits to cancellation in float32.

    Args:
      learning_rate: multiplier :math:`\eta \ge 0` of the estimated step, or a schedule
        (e.g. from 1 down to 0, with a warm-up).
      betas: :math:`(\beta_1, \beta_2)`, each in [0, 1) (``"b1"``, ``"b2"`` in the state).
      eps: :math:`\epsilon \ge 0`, added to :math:`\sqrt{v}`.
      estim_lr0: the initial (under-)estimate :math:`d_0 > 0` (read at ``init``).
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay scaled by :math:`\gamma_t`.

    Returns:
      The transform (its state is `DAdaptAdamWState`); ``learning_rate``, ``b1``, ``b2``,
      ``eps`` and ``weight_decay`` are dynamic hyperparameters. Its ``update`` needs the
      parameters.

    Raises:
      ValueError: an argument is out of range, or ``betas`` is not a pair.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.contrib.dadapt_adamw()
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(100):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.5), bool(state.estim_lr > 1e-3)  # from 5.0; d grew from 1e-6
      (True, True)

    References:
      Defazio and Mishchenko, "Learning-Rate-Free Learning by D-Adaptation", ICML 2023.
    """
    if not isinstance(betas, tuple | list) or len(betas) != 2:
        raise ValueError(
            f"`{hp.current('dadapt_adamw')}` needs betas to be a pair (b1, b2). "
            f"Received: betas={betas!r}."
        )
    with hp.caller("dadapt_adamw", {"b1": "betas[0]", "b2": "betas[1]"}):
        return DAdaptAdamW(learning_rate, betas[0], betas[1], eps, estim_lr0, weight_decay)
