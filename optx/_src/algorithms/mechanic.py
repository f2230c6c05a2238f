"""Mechanic, a learning-rate tuner around any optimizer: `mechanize`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import checks, reductions
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
from optx._src.combine import accepts_extra, call_update


class MechanicState(NamedTuple):
    r"""State of `mechanize`.

    Attributes:
      base_optimizer_state: the wrapped optimizer's state.
      count: the step count (int32, saturating).
      r, m, v, s: per decay :math:`\beta_i`, the reward, the largest :math:`|h|`, the
        sum of squares of :math:`h` and the scale :math:`s_i` (vectors of ``num_betas``
        entries; float32, or float64 where a parameter is float64).
      x0: the parameters at the first update (the reference point of the steps).
      hyperparams: the dynamic hyperparameters.
    """

    base_optimizer_state: OptState
    count: jax.Array
    r: jax.Array
    m: jax.Array
    v: jax.Array
    s: jax.Array
    x0: Params
    hyperparams: dict[str, jax.Array]


@transform
class Mechanize(Transform):
    """See `mechanize`."""

    name = "mechanize"
    elementwise = True
    base_optimizer: GradientTransformationLike = None  # type: ignore[assignment]
    weight_decay: ScalarOrSchedule = hp.field(1e-2, hp.NONNEG)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.POSITIVE)
    s_init: ScalarOrSchedule = hp.field(1e-6, hp.POSITIVE)
    num_betas: int = 6

    def __post_init__(self) -> None:
        checks.transform(self.name, "base_optimizer", self.base_optimizer)
        # 1 - 0.1**i is 1 in float32 from i = 8 and in float64 from i = 17: more decays would
        # repeat the last one.
        n = checks.nonneg_int(self.name, "num_betas", self.num_betas, 1, 16)
        object.__setattr__(self, "num_betas", n)
        super().__post_init__()

    def init(self, params: Params) -> MechanicState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        dtype = reductions.scalar_dtype(params)
        zeros = jnp.zeros([self.num_betas], dtype)
        return MechanicState(
            self.base_optimizer.init(params),
            zero_count(),
            zeros,
            zeros,
            zeros,
            jnp.full([self.num_betas], self.initial("s_init"), dtype),
            jax.tree.map(lambda p: jnp.array(p, jnp.result_type(p)), params),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: MechanicState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, MechanicState]:
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.x0, "updates", "the state")
        checks.same_tree(api, params, state.x0, "params", "the state")
        base = self.base_optimizer
        steps, base_state = call_update(
            base, accepts_extra(base), updates, state.base_optimizer_state, params, extra
        )
        h = state.hyperparams
        dtype = state.s.dtype
        wd, eps, s_init = (h[k].astype(dtype) for k in ("weight_decay", "eps", "s_init"))
        # The reference point is the parameters at the first update (which may have been
        # replaced by pre-trained ones since `init`).
        first = state.count == 0
        x0 = jax.tree.map(lambda p, p0: jnp.where(first, p, p0), params, state.x0)
        s_sum = jnp.sum(state.s)
        decay = (
            wd
            * s_sum
            * jnp.sqrt(reductions.sq_norm(updates, dtype))
            / (jnp.sqrt(reductions.sq_norm(params, dtype)) + eps)
        )
        decayed = jax.tree.map(lambda g, p: g + decay * p, updates, params)
        # The step so far, per unit of scale: (x0 - x) / sum(s).
        delta_prev = jax.tree.map(lambda x, p0: (p0 - x) / (s_sum + eps), params, x0)
        # Real: the real part of a complex parameter's inner product.
        hh = reductions.vdot(decayed, delta_prev, dtype)
        clipped = jnp.clip(hh, -state.m, state.m)
        betas = jnp.asarray(1 - 0.1 ** np.arange(1, self.num_betas + 1, dtype=np.float64), dtype)
        m = jnp.maximum(betas * state.m, jnp.abs(hh) + eps)
        v = betas**2 * state.v + hh**2
        r = betas * state.r + clipped * state.s
        wealth = (s_init / self.num_betas) * m + jnp.maximum(r, 0.0)
        s = wealth / (jnp.sqrt(v) + eps)
        total = jnp.sum(s)
        # New parameters x0 - total * (delta_prev - u): the update is their distance from x,
        # computed from x0 - x and u rather than as a difference of two parameter-sized
        # values.
        keep = 1 - total / (s_sum + eps)

        def leaf(u: Any, x: Any, p0: Any) -> jax.Array:
            return ((p0 - x) * keep + total * u).astype(u.dtype)

        out = jax.tree.map(leaf, steps, params, x0)
        return out, MechanicState(base_state, safe_increment(state.count), r, m, v, s, x0, h)


def mechanize(
    base_optimizer: GradientTransformationLike,
    weight_decay: float = 1e-2,
    eps: float = 1e-8,
    s_init: float = 1e-6,
    num_betas: int = 6,
) -> Mechanize:
    r"""Mechanic: learns the scale of another optimizer's steps, as it trains.

    With :math:`u_t` the wrapped optimizer's update, :math:`x_0` the parameters at the
    first update and :math:`S_t = \sum_i s_{t,i}`:

    .. math::
       \Delta_{t-1} = \frac{x_0 - x_{t-1}}{S_{t-1} + \epsilon}, \quad
       h_t = \bigl\langle g_t + \lambda S_{t-1}
             \tfrac{\lVert g_t\rVert}{\lVert x_{t-1}\rVert + \epsilon}\,x_{t-1},\
             \Delta_{t-1}\bigr\rangle, \\
       m_{t,i} = \max(\beta_i m_{t-1,i},\ |h_t| + \epsilon), \quad
       v_{t,i} = \beta_i^2 v_{t-1,i} + h_t^2, \quad
       r_{t,i} = \beta_i r_{t-1,i} + \operatorname{clip}(h_t, \pm m_{t-1,i})\,s_{t-1,i}, \\
       s_{t,i} = \frac{s_0\,m_{t,i} / n + \max(r_{t,i}, 0)}{\sqrt{v_{t,i}} + \epsilon},
       \quad x_t = x_0 - S_t\,(\Delta_{t-1} - u_t)

    with decays :math:`\beta_i = 1 - 0.1^i`, :math:`i = 1..n`, :math:`n` = ``num_betas``,
    :math:`s_0` = ``s_init`` (also the initial :math:`s_{0,i}`), :math:`\lambda` =
    ``weight_decay`` and :math:`\epsilon` = ``eps``. Keep the wrapped optimizer's learning
    rate (or schedule) at a base value such as 1: Mechanic learns the factor :math:`S_t`.
    For complex parameters (with a wrapped optimizer that takes them) :math:`h_t` is the
    real part :math:`\operatorname{Re}\langle\cdot,\cdot\rangle` of the inner product and
    the norms are of moduli, so :math:`r, m, v, s` stay real; the updates are complex.

    Where optax differs: optax returns :math:`x_t - x_{t-1}` as the difference of two
    parameter-sized values, which loses the digits of a small update to a large parameter
    in float32; here it is computed as
    :math:`(x_0 - x_{t-1})(1 - S_t / (S_{t-1} + \epsilon)) + S_t u_t` (the same number in
    exact arithmetic).

    Args:
      base_optimizer: the optimizer whose steps are scaled (an optx or optax transform);
        it gets the extra keyword arguments of ``update``.
      weight_decay: :math:`\lambda \ge 0`, on the gradients Mechanic sees (not on the
        wrapped optimizer's).
      eps: :math:`\epsilon > 0`.
      s_init: :math:`s_0 > 0` (the initial scales read it at ``init``).
      num_betas: :math:`n`, an int in [1, 16].

    Returns:
      The transform (its state is `MechanicState`); ``weight_decay``, ``eps`` and
      ``s_init`` are dynamic hyperparameters. Its ``update`` needs the parameters.

    Raises:
      TypeError: ``base_optimizer`` is not a transform.
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.contrib.mechanize(optx.adam(1.0))
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(100):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.5), bool(state.s.sum() > 1e-3)  # from 5.0; the scale grew
      (True, True)

    References:
      Cutkosky, Defazio and Mehta, "Mechanic: A Learning Rate Tuner", NeurIPS 2023.
    """
    return Mechanize(base_optimizer, weight_decay, eps, s_init, num_betas)
