"""Prodigy: AdamW that estimates its own learning rate, `scale_by_prodigy` and `prodigy`."""

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
from optx._src.combine import Chain, MaskSpec, chain, freeze_mask, resolve_mask
from optx._src.moments import adam_scalars, real_zeros_like, scaled_abs_sq, unzip
from optx._src.options import flag_options


class ProdigyState(NamedTuple):
    r"""State of `scale_by_prodigy`.

    Attributes:
      count: the step count (int32, saturating).
      exp_avg: first moment of the scaled gradients :math:`d\,g`.
      exp_avg_sq: second moment of the scaled gradients (real: :math:`|d\,g|^2` for a complex
        parameter).
      grad_sum: the weighted sum :math:`s` of past scaled gradients.
      params0: the parameters at ``init``.
      estim_lr: the current estimate :math:`d` of the distance to the solution (float32, or
        float64 where a parameter is float64).
      numerator_weighted: the running numerator of the estimate (same dtype).
      hyperparams: the dynamic hyperparameters.
    """

    count: jax.Array
    exp_avg: Params
    exp_avg_sq: Params
    grad_sum: Params
    params0: Params
    estim_lr: jax.Array
    numerator_weighted: jax.Array
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByProdigy(Transform):
    """See `scale_by_prodigy`."""

    name = "scale_by_prodigy"
    elementwise = True
    learning_rate: ScalarOrSchedule = hp.field(1.0, hp.NONNEG)
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    # ``None``: sqrt(b2), read from the stored b2 at every step.
    beta3: ScalarOrSchedule | None = hp.field(None, hp.UNIT_OPEN, decay=True, optional=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    estim_lr0: ScalarOrSchedule = hp.field(1e-6, hp.POSITIVE)
    estim_lr_coef: ScalarOrSchedule = hp.field(1.0, hp.NONNEG)
    weight_decay: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    safeguard_warmup: bool = False
    weight_decay_mask: MaskSpec = None

    def __post_init__(self) -> None:
        super().__post_init__()
        flag_options(self, "safeguard_warmup")
        if self.weight_decay_mask is not None:
            mask = freeze_mask(self.name, self.weight_decay_mask)
            object.__setattr__(self, "weight_decay_mask", mask)

    def __repr__(self) -> str:
        # Shown as the factory takes them: one ``betas`` pair.
        pair = f"b1={self.b1!r}, b2={self.b2!r}"
        return super().__repr__().replace(pair, f"betas={(self.b1, self.b2)!r}")

    def init(self, params: Params) -> ProdigyState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        zeros = jax.tree.map(placement.zeros_like, params)
        dtype = reductions.scalar_dtype(params)
        return ProdigyState(
            zero_count(),
            zeros,
            real_zeros_like(params, None),
            zeros,
            jax.tree.map(jnp.asarray, params),
            jnp.asarray(self.initial("estim_lr0"), dtype),
            jnp.zeros([], dtype),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: ProdigyState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ProdigyState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.exp_avg, "updates", "the state")
        checks.same_tree(api, params, state.exp_avg, "params", "the state")
        h = state.hyperparams
        s = adam_scalars(h, state.count)
        b1, c1, b2, c2 = s.b1, s.c1, s.b2, s.c2
        d = state.estim_lr
        # sqrt(b2) in the estimate's dtype: float64 parameters get a float64 root.
        b3 = jnp.sqrt(b2.astype(d.dtype)) if self.beta3 is None else hp.value(h, "beta3")
        eps, d0, wd = s.eps, h["estim_lr0"], h["weight_decay"]
        lr = h["learning_rate"]
        # Adam's bias corrections, folded into the step size as in Keras's Adam.
        bc = jnp.sqrt(s.bias_correction("b2")) / s.bias_correction("b1")
        dlr = d * lr * bc
        # Re<g, x0 - x>: one reduction over every leaf, accumulated in the estimate's dtype
        # (float32, or float64 for float64 parameters; complex64 and complex128 for complex
        # ones, whose real part is kept).
        dtype = d.dtype

        def wide(x: jax.Array) -> jax.Array:
            return jnp.asarray(x, jnp.promote_types(x.dtype, dtype))

        numerator = reductions.total(
            (
                jnp.real(placement.vdot(wide(g), wide(p0) - wide(p)))
                for g, p, p0 in zip(
                    jax.tree.leaves(updates),
                    jax.tree.leaves(params),
                    jax.tree.leaves(state.params0),
                    strict=True,
                )
            ),
            dtype,
        )
        weight = d if self.safeguard_warmup else dlr

        def moments(g: jax.Array, m: jax.Array, v: jax.Array, s: jax.Array) -> tuple[Any, ...]:
            dg = d * g
            new_m = b1 * m + c1 * dg
            # |d g|^2, real; a real leaf keeps its rounding order.
            new_v = b2 * v + scaled_abs_sq(c2, dg)
            new_s = b3 * s + weight * dg / d0
            return new_m.astype(m.dtype), new_v.astype(v.dtype), new_s.astype(s.dtype)

        flat = jax.tree.map(moments, updates, state.exp_avg, state.exp_avg_sq, state.grad_sum)
        exp_avg, exp_avg_sq, grad_sum = unzip(flat, updates, 3)
        weighted = b3 * state.numerator_weighted + (d / d0) * dlr * numerator
        denominator = reductions.l1_norm(grad_sum, dtype)
        # A zero denominator (all gradients zero so far) keeps the estimate: optax's 0/0
        # would make it NaN for good.
        safe = jnp.where(denominator > 0, denominator, 1.0)
        estimate = jnp.where(denominator > 0, h["estim_lr_coef"] * weighted / safe, 0.0)
        new_d = jnp.maximum(d, estimate)

        def step(m: jax.Array, v: jax.Array, p: jax.Array, g: jax.Array, decays: bool) -> jax.Array:
            u = -dlr * m / (jnp.sqrt(v) + new_d * eps)
            if decays:
                u = -wd * dlr * p + u
            return u.astype(g.dtype)

        decays = (
            jax.tree.map(lambda _: True, params)
            if self.weight_decay_mask is None
            else resolve_mask(self.name, self.weight_decay_mask, params)
        )
        out = jax.tree.map(step, exp_avg, exp_avg_sq, params, updates, decays)
        return out, ProdigyState(
            s.count, exp_avg, exp_avg_sq, grad_sum, state.params0, new_d, weighted, h
        )


def scale_by_prodigy(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[float, float] = (0.9, 0.999),
    beta3: float | None = None,
    eps: float = 1e-8,
    estim_lr0: float = 1e-6,
    estim_lr_coef: float = 1.0,
    weight_decay: float = 0.0,
    safeguard_warmup: bool = False,
    *,
    weight_decay_mask: MaskSpec | None = None,
) -> ScaleByProdigy:
    r"""Prodigy's step: AdamW whose learning rate is an estimate of the distance to a solution.

    With :math:`d_t` the estimate (``estim_lr``, starting at :math:`d_0` = ``estim_lr0``)
    and :math:`\gamma_t = d_t\,\eta_t \sqrt{1-\beta_2^t} / (1-\beta_1^t)`:

    .. math::
       m_t = \beta_1 m_{t-1} + (1-\beta_1)\,d_t g_t, \quad
       v_t = \beta_2 v_{t-1} + (1-\beta_2)\,d_t^2 g_t^2, \\
       s_t = \beta_3 s_{t-1} + \gamma_t d_t g_t / d_0, \quad
       r_t = \beta_3 r_{t-1} + (d_t / d_0)\,\gamma_t\,\langle g_t, x_0 - x_t\rangle, \\
       d_{t+1} = \max\bigl(d_t,\ c\,r_t / \lVert s_t \rVert_1\bigr), \quad
       u_t = -\gamma_t \bigl(m_t / (\sqrt{v_t} + d_{t+1}\epsilon) + \lambda\,x_t\bigr)

    with :math:`\beta_1, \beta_2` = ``betas``, :math:`\beta_3` = ``beta3`` (default
    :math:`\sqrt{\beta_2}`), :math:`\eta_t` = ``learning_rate`` (a multiplier of the
    estimate, e.g. a schedule from 1 to 0), :math:`c` = ``estim_lr_coef``, :math:`\lambda` =
    ``weight_decay`` (0 for the parameters ``weight_decay_mask`` leaves out; the moments
    and the estimate still take every parameter). ``safeguard_warmup`` uses :math:`d_t`
    instead of :math:`\gamma_t` in :math:`s_t`, so a warm-up schedule's small
    :math:`\eta_t` does not inflate the estimate.

    The learning rate takes part in the estimate, so unlike the other building blocks
    this one applies it itself: its updates are the parameter changes (descent
    direction, sign included), and nothing follows it in `prodigy`. The scalars
    :math:`d_t` and :math:`r_t`, and the two reductions behind them, are kept in float32
    (float64 where a parameter is float64), so bfloat16 parameters still get a float32
    estimate. For complex parameters :math:`d_t` and :math:`r_t` stay real: :math:`v_t`
    holds :math:`|d_t g_t|^2` (a real slot), the inner product is its real part
    :math:`\operatorname{Re}\langle g_t, x_0 - x_t\rangle` and :math:`\lVert s_t\rVert_1`
    sums moduli; :math:`m_t`, :math:`s_t` and the updates are complex.

    Args:
      learning_rate: :math:`\eta \ge 0` or a schedule of the step count.
      betas: :math:`(\beta_1, \beta_2)`, each in [0, 1) (``"b1"``, ``"b2"`` in the state).
      beta3: decay of the estimate's sums, in [0, 1), or ``None`` for :math:`\sqrt{\beta_2}`
        (then it follows changes of ``b2``).
      eps: added to :math:`\sqrt{v_t}` (scaled by :math:`d`), >= 0.
      estim_lr0: the initial (under-)estimate :math:`d_0 > 0`.
      estim_lr_coef: :math:`c \ge 0`, multiplies each new estimate.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay scaled by :math:`\gamma_t`.
      safeguard_warmup: leave the learning rate out of :math:`s_t`.
      weight_decay_mask: which parameters to decay: a pytree of bools, a callable
        ``params -> pytree of bools``, or regular expressions on parameter paths (as
        `masked`); ``None`` decays all of them.

    Returns:
      The transform; every number above is a dynamic hyperparameter. Its ``update`` needs
      the parameters.

    Raises:
      ValueError: an argument is out of range, or ``betas`` is not a pair.
      TypeError: ``safeguard_warmup`` is not a bool, or ``weight_decay_mask`` is malformed.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.array([1.0, -1.0])}
      >>> tx = optx.scale_by_prodigy()
      >>> updates, state = tx.update({"w": jnp.array([2.0, -3.0])}, tx.init(params), params)
      >>> updates  # -d0 * lr * sign(g) on the first step
      {'w': Array([-1.e-06,  1.e-06], dtype=float32)}

    References:
      Mishchenko and Defazio, "Prodigy: An Expeditiously Adaptive Parameter-Free Learner",
      ICML 2024.
    """
    if not isinstance(betas, tuple | list) or len(betas) != 2:
        raise ValueError(
            f"`{hp.current('scale_by_prodigy')}` needs betas to be a pair (b1, b2). "
            f"Received: betas={betas!r}."
        )
    with hp.caller("scale_by_prodigy", {"b1": "betas[0]", "b2": "betas[1]"}):
        return ScaleByProdigy(
            learning_rate,
            betas[0],
            betas[1],
            beta3,
            eps,
            estim_lr0,
            estim_lr_coef,
            weight_decay,
            safeguard_warmup,
            weight_decay_mask,
        )


def prodigy(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[float, float] = (0.9, 0.999),
    beta3: float | None = None,
    eps: float = 1e-8,
    estim_lr0: float = 1e-6,
    estim_lr_coef: float = 1.0,
    weight_decay: float = 0.0,
    safeguard_warmup: bool = False,
    *,
    weight_decay_mask: MaskSpec | None = None,
) -> Chain:
    r"""The Prodigy optimizer: learning-rate-free AdamW (a D-Adaptation variant).

    Prodigy raises its step size :math:`d` towards an estimate of the distance from the
    initial parameters to a solution, weighting recent gradients more than D-Adaptation.
    ``learning_rate`` multiplies the estimate: leave it at 1, or use a schedule relative
    to 1 (e.g. a cosine decay with warm-up and ``safeguard_warmup=True``). See
    `scale_by_prodigy` for the update rule.

    Args:
      learning_rate: multiplier :math:`\eta \ge 0` of the estimated step, or a schedule.
      betas: Adam's :math:`(\beta_1, \beta_2)`, each in [0, 1).
      beta3: decay of the estimate's sums, or ``None`` for :math:`\sqrt{\beta_2}`.
      eps: added to the denominator, >= 0.
      estim_lr0: initial estimate :math:`d_0 > 0`.
      estim_lr_coef: multiplies the estimates, >= 0.
      weight_decay: decoupled weight decay, >= 0, scaled by the estimated step.
      safeguard_warmup: leave the learning rate out of the estimate's denominator.
      weight_decay_mask: which parameters to decay (see `scale_by_prodigy`); ``None``
        decays all of them.

    Returns:
      ``chain(scale_by_prodigy(...))``: the learning rate is applied inside, where the
      estimate needs it.

    Raises:
      ValueError: an argument is out of range (see `scale_by_prodigy`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.prodigy()
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(200):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.05)  # from 5.0, with no learning rate to tune
      True

    References:
      Mishchenko and Defazio, "Prodigy: An Expeditiously Adaptive Parameter-Free Learner",
      ICML 2024.
    """
    with hp.caller("prodigy"):
        return chain(
            scale_by_prodigy(
                learning_rate,
                betas,
                beta3,
                eps,
                estim_lr0,
                estim_lr_coef,
                weight_decay,
                safeguard_warmup,
                weight_decay_mask=weight_decay_mask,
            )
        )
