"""Adaptive Nesterov momentum: `scale_by_adan` and `adan`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, placement
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
from optx._src.moments import abs_sq, adam_scalars, decay_pair, real_zeros_like, unzip
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights


class ScaleByAdanState(NamedTuple):
    """State of `scale_by_adan`: step count, moments m, v, n, last gradient, hyperparameters."""

    count: jax.Array
    m: Params
    v: Params
    n: Params
    g: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByAdan(Transform):
    """See `scale_by_adan`."""

    name = "scale_by_adan"
    elementwise = True
    b1: ScalarOrSchedule = hp.field(0.98, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.92, hp.UNIT_OPEN, decay=True)
    b3: ScalarOrSchedule = hp.field(0.99, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)

    def init(self, params: Params) -> ScaleByAdanState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        zeros = jax.tree.map(placement.zeros_like, params)
        n = real_zeros_like(params, None)
        return ScaleByAdanState(zero_count(), zeros, zeros, n, zeros, self.init_hyperparams())

    def update(
        self, updates: Updates, state: ScaleByAdanState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByAdanState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.m, "updates", "the state")
        s = adam_scalars(state.hyperparams, state.count)
        b3, c3 = decay_pair(s.hyperparams, "b3")
        first = state.count == 0
        bc1, bc2, bc3 = (s.bias_correction(name) for name in ("b1", "b2", "b3"))

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array, n: jax.Array, prev: jax.Array) -> Any:
            # No previous gradient on the first step: the difference is zero, not g.
            diff = jnp.where(first, placement.zeros_like(g), g - prev)
            new_m = s.c1 * g + s.b1 * m
            new_v = s.c2 * diff + s.b2 * v
            new_n = c3 * abs_sq(g + s.c2 * diff) + b3 * n
            u = (new_m / bc1 + s.c2 * (new_v / bc2)) / (jnp.sqrt(new_n / bc3 + s.eps_root) + s.eps)
            return (
                u.astype(g.dtype),
                new_m.astype(m.dtype),
                new_v.astype(v.dtype),
                new_n.astype(n.dtype),
                g.astype(prev.dtype),
            )

        flat = jax.tree.map(leaf, updates, state.m, state.v, state.n, state.g)
        u, m, v, n, g = unzip(flat, updates, 5)
        return u, ScaleByAdanState(s.count, m, v, n, g, s.hyperparams)


def scale_by_adan(
    b1: float = 0.98,
    b2: float = 0.92,
    b3: float = 0.99,
    eps: float = 1e-8,
    eps_root: float = 0.0,
) -> ScaleByAdan:
    r"""Rescales updates by Adan's moments of the gradient and of its change.

    With :math:`\Delta_t = g_t - g_{t-1}` (and :math:`\Delta_1 = 0`):

    .. math::
       m_t = \beta_1 m_{t-1} + (1-\beta_1)\,g_t, \quad
       v_t = \beta_2 v_{t-1} + (1-\beta_2)\,\Delta_t, \\
       n_t = \beta_3 n_{t-1} + (1-\beta_3)\,\bigl(g_t + (1-\beta_2)\Delta_t\bigr)^2, \\
       u_t = \frac{\hat m_t + (1-\beta_2)\,\hat v_t}{\sqrt{\hat n_t + \bar\epsilon}
       + \epsilon}

    where hats divide by :math:`1-\beta_i^t`, with :math:`\beta_1, \beta_2, \beta_3` =
    ``b1``, ``b2``, ``b3``, :math:`\epsilon` = ``eps``, :math:`\bar\epsilon` =
    ``eps_root``. The :math:`(1-\beta_2)\Delta_t` terms estimate the gradient at the
    Nesterov look-ahead point without computing it there. Note that ``b1``, ``b2`` and
    ``b3`` weigh the *old* moment (the paper's :math:`1 - \beta_i`).

    Args:
      b1: decay of the gradient's average, in [0, 1).
      b2: decay of the average of the gradient's changes, in [0, 1).
      b3: decay of the squared look-ahead gradient's average, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.

    Returns:
      The transform. Its five arguments are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), or ``eps`` / ``eps_root`` is negative.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_adan()
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -3.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates
      {'w': Array([ 1., -1.], dtype=float32)}

    References:
      Xie, Zhou, Li, Lin and Yan, "Adan: Adaptive Nesterov Momentum Algorithm for Faster
      Optimizing Deep Models", IEEE TPAMI 2024 (arXiv:2208.06677).
    """
    return ScaleByAdan(b1, b2, b3, eps, eps_root)


def adan(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.98,
    b2: float = 0.92,
    b3: float = 0.99,
    eps: float = 1e-8,
    eps_root: float = 1e-8,
    weight_decay: float = 0.0,
    mask: MaskSpec | None = None,
) -> Chain:
    r"""The Adan optimizer, with decoupled weight decay.

    .. math:: \theta_t = \theta_{t-1} - \eta_t\,\bigl(u_t + \lambda\,\theta_{t-1}\bigr)

    with :math:`u_t` of `scale_by_adan`. (The paper's proximal form
    :math:`\theta_t = (\theta_{t-1} - \eta u_t) / (1 + \lambda\eta)` differs from this by
    :math:`O(\lambda^2\eta^2)`; optax implements this decoupled form too.)

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the gradient's average, in [0, 1).
      b2: decay of the average of the gradient's changes, in [0, 1).
      b3: decay of the squared look-ahead gradient's average, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0 (note: ``1e-8`` here, ``0`` in
        `scale_by_adan`, as in optax).
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay (see `add_decayed_weights`); ``None`` decays all.

    Returns:
      ``chain(scale_by_adan(...), add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.adan(0.1)
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(100):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.1 * 5.0)  # from 5.0
      True

    References:
      Xie, Zhou, Li, Lin and Yan, "Adan: Adaptive Nesterov Momentum Algorithm for Faster
      Optimizing Deep Models", IEEE TPAMI 2024 (arXiv:2208.06677).
    """
    with hp.caller("adan"):
        return chain(
            scale_by_adan(b1, b2, b3, eps, eps_root),
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate),
        )
