"""MoMo, momentum with a Polyak-type step size from the loss: `momo`, `momo_adam`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import checks, placement, reductions
from optx._src import hyperparams as hp
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.moments import adam_scalars, real_zeros_like, scaled_abs_sq, unzip
from optx._src.options import flag_options

# A squared norm at or below float64's machine epsilon counts as zero (as in optax).
_TINY = float(np.finfo(np.float64).eps)


class MomoState(NamedTuple):
    r"""State of `momo`.

    Attributes:
      exp_avg: the momentum :math:`d` (an average of the gradients).
      barf: the average :math:`\bar f` of the losses (float32, or float64 where a
        parameter is float64).
      gamma: the average :math:`\gamma` of :math:`\langle g_k, x_k\rangle` (same dtype).
      lb: the lower bound of the loss in use (same dtype).
      count: the step count (int32, saturating).
      hyperparams: the dynamic hyperparameters.
    """

    exp_avg: Params
    barf: jax.Array
    gamma: jax.Array
    lb: jax.Array
    count: jax.Array
    hyperparams: dict[str, jax.Array]


class MomoAdamState(NamedTuple):
    r"""State of `momo_adam`: `MomoState`'s fields and Adam's second moment ``exp_avg_sq``."""

    exp_avg: Params
    exp_avg_sq: Params
    barf: jax.Array
    gamma: jax.Array
    lb: jax.Array
    count: jax.Array
    hyperparams: dict[str, jax.Array]


def _loss(api: str, extra: dict[str, Any], dtype: Any) -> jax.Array:
    value = extra.get("value")
    if value is None:
        raise TypeError(
            f"`{api}` needs the loss at the current parameters as a keyword argument. "
            f"Received: value=None. Call `update(updates, state, params, value=loss)`."
        )
    if np.shape(value) != ():
        raise ValueError(
            f"`{api}` needs value to be a scalar (the loss). "
            f"Received: value of shape {np.shape(value)}."
        )
    return jnp.asarray(value, dtype)


def _polyak(
    tx: Any,
    state: Any,
    lr: jax.Array,
    barf: jax.Array,
    gamma: jax.Array,
    iprod: jax.Array,
    norm: jax.Array,
    bc1: Any,
) -> tuple[jax.Array, jax.Array]:
    """MoMo's step size ``tau`` and the new lower bound (``bc1`` is 1 without Adam)."""
    h = state.hyperparams
    lower = h["lower_bound"].astype(barf.dtype)
    decay = 1 + lr * h["weight_decay"].astype(barf.dtype)
    lb = state.lb if tx.adapt_lower_bound else lower
    if tx.adapt_lower_bound:
        cap = decay * (barf - gamma) + iprod
        lb = jnp.where(cap < decay * bc1 * lb, jnp.maximum(cap / (2 * bc1 * decay), lower), lb)
    gap = jnp.maximum(decay * (barf - bc1 * lb - gamma) + iprod, 0.0)
    small = norm <= _TINY
    t1 = jnp.where(small, 0.0, gap / jnp.where(small, 1.0, norm))
    tau = jnp.minimum(lr / bc1, t1)
    if tx.adapt_lower_bound:
        lb = jnp.maximum(((barf + iprod - gamma) - tau * norm / 2) / bc1, lower)
    return tau, lb.astype(barf.dtype)


@transform
class Momo(Transform):
    """See `momo`."""

    name = "momo"
    elementwise = True
    learning_rate: ScalarOrSchedule = hp.field(1.0, hp.NONNEG)
    beta: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    lower_bound: ScalarOrSchedule = hp.field(0.0)
    weight_decay: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    adapt_lower_bound: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        flag_options(self, "adapt_lower_bound")

    def init(self, params: Params) -> MomoState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        dtype = reductions.scalar_dtype(params)
        zero = jnp.zeros([], dtype)
        lb = jnp.asarray(self.initial("lower_bound"), dtype)
        return MomoState(
            jax.tree.map(placement.zeros_like, params),
            zero,
            zero,
            lb,
            zero_count(),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: MomoState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, MomoState]:
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.exp_avg, "updates", "the state")
        checks.same_tree(api, params, state.exp_avg, "params", "the state")
        dtype = state.barf.dtype
        value = _loss(api, extra, dtype)
        h = state.hyperparams
        first = state.count == 0
        # The averages start at the first gradient and loss.
        b = jnp.where(first, 0.0, hp.value(h, "beta"))
        c = jnp.where(first, 1.0, hp.complement(h, "beta"))
        barf = b * state.barf + c * value
        exp_avg = jax.tree.map(lambda m, g: (b * m + c * g).astype(m.dtype), state.exp_avg, updates)
        # Real parts of the inner products (the first-order model of a real loss of complex
        # parameters); the identity for real ones.
        gamma = b * state.gamma + c * reductions.vdot(updates, params, dtype)
        norm = reductions.sq_norm(exp_avg, dtype)
        iprod = reductions.vdot(exp_avg, params, dtype)
        # The scalars in the estimates' dtype: float64 parameters get float64 step sizes.
        lr = h["learning_rate"].astype(dtype)
        tau, lb = _polyak(self, state, lr, barf, gamma, iprod, norm, 1.0)
        wd = h["weight_decay"].astype(dtype)
        shrink = lr * wd / (1 + lr * wd)
        out = jax.tree.map(
            lambda m, p, g: (-shrink * p - tau * m).astype(g.dtype), exp_avg, params, updates
        )
        return out, MomoState(exp_avg, barf, gamma, lb, safe_increment(state.count), h)


def momo(
    learning_rate: ScalarOrSchedule = 1.0,
    beta: float = 0.9,
    lower_bound: float = 0.0,
    weight_decay: float = 0.0,
    adapt_lower_bound: bool = False,
) -> Momo:
    r"""MoMo: SGD with momentum and a Polyak-type step size, from the loss passed to ``update``.

    With :math:`f_t` the loss (``value=``), :math:`\beta_1 = 0` at the first step and
    :math:`\beta` after:

    .. math::
       d_t = \beta d_{t-1} + (1-\beta)\,g_t, \quad
       \bar f_t = \beta \bar f_{t-1} + (1-\beta)\,f_t, \quad
       \gamma_t = \beta\gamma_{t-1} + (1-\beta)\,\langle g_t, x_{t-1}\rangle, \\
       \tau_t = \min\Bigl(\eta_t,\ \frac{\bigl[(1+\eta_t\lambda)(\bar f_t - f^\star
       - \gamma_t) + \langle d_t, x_{t-1}\rangle\bigr]_+}{\lVert d_t\rVert^2}\Bigr), \quad
       x_t = x_{t-1} - \frac{\eta_t\lambda}{1+\eta_t\lambda}\,x_{t-1} - \tau_t d_t

    with :math:`\eta_t` = ``learning_rate``, :math:`f^\star` = ``lower_bound``,
    :math:`\lambda` = ``weight_decay``; :math:`\tau_t = 0` where
    :math:`\lVert d_t\rVert^2 \le 2^{-52}`. ``adapt_lower_bound`` replaces :math:`f^\star`
    by an estimate updated at each step (at least ``lower_bound``; see the paper). Its
    updates are the parameter changes (the learning rate is applied inside). For complex
    parameters the inner products are their real parts :math:`\operatorname{Re}\langle
    \cdot,\cdot\rangle` (the first-order model of a real loss) and
    :math:`\lVert d_t\rVert^2` sums :math:`|d_t|^2`, so :math:`\bar f, \gamma, \tau` stay
    real; :math:`d_t` and the updates are complex.

    Args:
      learning_rate: :math:`\eta \ge 0`, the largest step size (rather large: 1 by
        default), or a schedule.
      beta: :math:`\beta \in [0, 1)`, the momentum.
      lower_bound: :math:`f^\star`, a lower bound of the loss (0 for most losses).
      weight_decay: :math:`\lambda \ge 0`.
      adapt_lower_bound: estimate the lower bound on the fly.

    Returns:
      The transform (its state is `MomoState`); every number above is a dynamic
      hyperparameter. Its ``update`` needs the parameters and ``value=loss``.

    Raises:
      ValueError: an argument is out of range; at ``update``, ``value`` is not a scalar.
      TypeError: ``adapt_lower_bound`` is not a bool; at ``update``, ``value`` is missing.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> loss = lambda p: jnp.sum(p**2)
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> tx = optx.contrib.momo()
      >>> state = tx.init(params)
      >>> for step in range(30):
      ...     value, grads = jax.value_and_grad(loss)(params)
      ...     updates, state = tx.update(grads, state, params, value=value)
      ...     params = optx.apply_updates(params, updates)
      ...     if step == 0:  # the Polyak step f / |g|^2 = 14 / 56 halves the parameters
      ...         print(float(loss(params)))
      3.5
      >>> bool(loss(params) < 1.0)  # from 14
      True

    References:
      Schaipp, Ohana, Eickenberg, Defazio and Gower, "MoMo: Momentum Models for Adaptive
      Learning Rates", ICML 2024.
    """
    return Momo(learning_rate, beta, lower_bound, weight_decay, adapt_lower_bound)


@transform
class MomoAdam(Transform):
    """See `momo_adam`."""

    name = "momo_adam"
    elementwise = True
    learning_rate: ScalarOrSchedule = hp.field(1e-2, hp.NONNEG)
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    lower_bound: ScalarOrSchedule = hp.field(0.0)
    weight_decay: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    adapt_lower_bound: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        flag_options(self, "adapt_lower_bound")

    def init(self, params: Params) -> MomoAdamState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        dtype = reductions.scalar_dtype(params)
        zero = jnp.zeros([], dtype)
        zeros = jax.tree.map(placement.zeros_like, params)
        lb = jnp.asarray(self.initial("lower_bound"), dtype)
        # The second moment |g|^2 is real, also for complex parameters.
        return MomoAdamState(
            zeros,
            real_zeros_like(params, None),
            zero,
            zero,
            lb,
            zero_count(),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: MomoAdamState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, MomoAdamState]:
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.exp_avg, "updates", "the state")
        checks.same_tree(api, params, state.exp_avg, "params", "the state")
        dtype = state.barf.dtype
        value = _loss(api, extra, dtype)
        h = state.hyperparams
        s = adam_scalars(h, state.count)
        barf = s.b1 * state.barf + s.c1 * value

        def moments(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
            new_m = s.b1 * m + s.c1 * g
            # |g|^2, real; a real leaf keeps its rounding order.
            new_v = s.b2 * v + scaled_abs_sq(s.c2, g)
            return new_m.astype(m.dtype), new_v.astype(v.dtype)

        exp_avg, exp_avg_sq = unzip(
            jax.tree.map(moments, updates, state.exp_avg, state.exp_avg_sq), updates, 2
        )
        bc2 = reductions.bias_correction(h, "b2", s.count, dtype)
        precond = jax.tree.map(lambda v: s.eps + jnp.sqrt(v / bc2), exp_avg_sq)
        weighted = jax.tree.map(lambda m, q: m / q, exp_avg, precond)
        # Real parts of the inner products, as in `momo`.
        norm = reductions.vdot(exp_avg, weighted, dtype)
        gamma = s.b1 * state.gamma + s.c1 * reductions.vdot(updates, params, dtype)
        iprod = reductions.vdot(exp_avg, params, dtype)
        # The scalars in the estimates' dtype: float64 parameters get float64 step sizes.
        lr = h["learning_rate"].astype(dtype)
        bc1 = reductions.bias_correction(h, "b1", s.count, dtype)
        tau, lb = _polyak(self, state, lr, barf, gamma, iprod, norm, bc1)
        wd = h["weight_decay"].astype(dtype)
        shrink = lr * wd / (1 + lr * wd)
        out = jax.tree.map(
            lambda w, p, g: (-shrink * p - tau * w).astype(g.dtype), weighted, params, updates
        )
        return out, MomoAdamState(exp_avg, exp_avg_sq, barf, gamma, lb, s.count, h)


def momo_adam(
    learning_rate: ScalarOrSchedule = 1e-2,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    lower_bound: float = 0.0,
    weight_decay: float = 0.0,
    adapt_lower_bound: bool = False,
) -> MomoAdam:
    r"""MoMo-Adam: Adam(W) with a Polyak-type step size, from the loss passed to ``update``.

    With :math:`f_t` the loss (``value=``), Adam's moments :math:`m_t, v_t` of the
    gradients, :math:`b_{1,t} = 1 - \beta_1^t`, :math:`b_{2,t} = 1 - \beta_2^t` and the
    preconditioner :math:`D_t = \epsilon + \sqrt{v_t / b_{2,t}}`:

    .. math::
       \bar f_t = \beta_1 \bar f_{t-1} + (1-\beta_1)\,f_t, \quad
       \gamma_t = \beta_1\gamma_{t-1} + (1-\beta_1)\,\langle g_t, x_{t-1}\rangle, \\
       \tau_t = \min\Bigl(\frac{\eta_t}{b_{1,t}},\ \frac{\bigl[(1+\eta_t\lambda)
       (\bar f_t - b_{1,t} f^\star - \gamma_t) + \langle m_t, x_{t-1}\rangle\bigr]_+}
       {\langle m_t, m_t / D_t\rangle}\Bigr), \quad
       x_t = x_{t-1} - \frac{\eta_t\lambda}{1+\eta_t\lambda}\,x_{t-1} - \tau_t\,m_t / D_t

    with :math:`\eta_t` = ``learning_rate``, :math:`f^\star` = ``lower_bound``,
    :math:`\lambda` = ``weight_decay``, :math:`\epsilon` = ``eps``; :math:`\tau_t = 0`
    where the denominator is at most :math:`2^{-52}`. ``adapt_lower_bound`` estimates
    :math:`f^\star` on the fly (at least ``lower_bound``). For complex parameters
    :math:`v_t` holds :math:`|g_t|^2` (a real slot) and the inner products are their real
    parts, so the step size stays real; :math:`m_t` and the updates are complex.

    Where optax differs: optax computes :math:`1 - \beta_2^t` in float32 for float32
    parameters, off by up to 1e-5 relative at the first steps (the cancellation of
    :math:`1 - 0.999`); here the bias corrections are accurate to float32 round-off.

    Args:
      learning_rate: :math:`\eta \ge 0`, or a schedule.
      b1: :math:`\beta_1 \in [0, 1)`, the decay of the first moment and of the averages.
      b2: :math:`\beta_2 \in [0, 1)`, the decay of the second moment.
      eps: :math:`\epsilon \ge 0`.
      lower_bound: :math:`f^\star`, a lower bound of the loss.
      weight_decay: :math:`\lambda \ge 0`.
      adapt_lower_bound: estimate the lower bound on the fly.

    Returns:
      The transform (its state is `MomoAdamState`); every number above is a dynamic
      hyperparameter. Its ``update`` needs the parameters and ``value=loss``.

    Raises:
      ValueError: an argument is out of range; at ``update``, ``value`` is not a scalar.
      TypeError: ``adapt_lower_bound`` is not a bool; at ``update``, ``value`` is missing.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> loss = lambda p: jnp.sum(p**2)
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> tx = optx.contrib.momo_adam(learning_rate=1.0)
      >>> state = tx.init(params)
      >>> for _ in range(30):
      ...     value, grads = jax.value_and_grad(loss)(params)
      ...     updates, state = tx.update(grads, state, params, value=value)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.5)  # from 14
      True

    References:
      Schaipp, Ohana, Eickenberg, Defazio and Gower, "MoMo: Momentum Models for Adaptive
      Learning Rates", ICML 2024.
    """
    return MomoAdam(learning_rate, b1, b2, eps, lower_bound, weight_decay, adapt_lower_bound)
