"""ACProp: AdaBelief's belief, used one step late, `scale_by_acprop` and `acprop`."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from optx._src import checks, placement
from optx._src import hyperparams as hp
from optx._src.algorithms.belief import ScaleByBeliefState, belief_update
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
    zero_count,
)
from optx._src.combine import Chain, MaskSpec, chain
from optx._src.moments import adam_scalars, real_zeros_like, unzip
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights


@transform
class ScaleByAcprop(Transform):
    """See `scale_by_acprop`."""

    name = "scale_by_acprop"
    elementwise = True
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-16, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(1e-16, hp.NONNEG)

    def init(self, params: Params) -> ScaleByBeliefState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        zeros = jax.tree.map(placement.zeros_like, params)
        return ScaleByBeliefState(
            zero_count(), zeros, real_zeros_like(params, None), self.init_hyperparams()
        )

    def update(
        self,
        updates: Updates,
        state: ScaleByBeliefState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByBeliefState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        s = adam_scalars(state.hyperparams, state.count)
        # The denominator is last step's belief, corrected for its own step count; there is
        # none at the first step, where the corrected belief is taken as 1.
        first = state.count == 0
        previous = jnp.where(first, 1, state.count)
        k = 1 / hp.bias_correction(state.hyperparams, "b2", previous)

        def leaf(g: jax.Array, m: jax.Array, belief: jax.Array) -> tuple[jax.Array, ...]:
            new_m = s.c1 * g + s.b1 * m
            new_belief = belief_update(s, g, m, belief)
            s_hat = jnp.where(first, 1, belief * k)
            u = g / (jnp.sqrt(s_hat) + s.eps)
            return u.astype(g.dtype), new_m.astype(m.dtype), new_belief.astype(belief.dtype)

        u, mu, nu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu), updates, 3)
        return u, ScaleByBeliefState(s.count, mu, nu, s.hyperparams)


def scale_by_acprop(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-16,
    eps_root: float = 1e-16,
) -> ScaleByAcprop:
    r"""Rescales the gradient by ACProp's belief: AdaBelief's, one step late.

    .. math::
       u_t = \frac{g_t}{\sqrt{s_{t-1} / (1-\beta_2^{t-1})} + \epsilon}, \quad
       m_t = \beta_1 m_{t-1} + (1-\beta_1)\,g_t, \\
       s_t = \beta_2 s_{t-1} + (1-\beta_2)\,(g_t - m_{t-1})^2 + \bar\epsilon

    with :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``, :math:`\epsilon` = ``eps``
    and :math:`\bar\epsilon` = ``eps_root``; at the first step the corrected belief is 1
    (:math:`u_1 = g_1 / (1 + \epsilon)`). The numerator is the raw gradient and the
    denominator knows only past gradients (the "asynchronous" update), and the belief
    compares the gradient with the mean before it. For complex parameters
    :math:`(g_t - m_{t-1})^2` is :math:`|g_t - m_{t-1}|^2`: the belief is real (in the real
    dtype), the mean and the update complex. The state is `ScaleByBeliefState`
    (``mu`` is :math:`m`, ``nu`` is :math:`s`), as in optax.

    Args:
      b1: decay of the mean :math:`m`, in [0, 1).
      b2: decay of the belief :math:`s`, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added to :math:`s_t` at every step, >= 0.

    Returns:
      The transform; its four arguments are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), or ``eps`` / ``eps_root`` is negative.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.contrib.scale_by_acprop(eps_root=0.0)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([2.0, -3.0])}, state)
      >>> updates  # the first step divides by 1
      {'w': Array([ 2., -3.], dtype=float32)}
      >>> tx.update({"w": jnp.array([2.0, -3.0])}, state)[0]["w"].round(4)  # by |g - m_0|
      Array([ 1., -1.], dtype=float32)

    References:
      Zhuang, Liu, Cutkosky and Orabona, "Momentum Centering and Asynchronous Update for
      Adaptive Gradient Methods", NeurIPS 2021 (arXiv:2110.05454).
    """
    return ScaleByAcprop(b1, b2, eps, eps_root)


def acprop(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-16,
    eps_root: float = 1e-16,
    weight_decay: float = 0.0,
    mask: MaskSpec | None = None,
) -> Chain:
    r"""The ACProp optimizer, with decoupled weight decay.

    .. math:: \theta_t = \theta_{t-1} - \eta_t\,(u_t + \lambda\,\theta_{t-1})

    with :math:`u_t` of `scale_by_acprop`, :math:`\eta` = ``learning_rate`` and
    :math:`\lambda` = ``weight_decay`` (multiplied by the learning rate, as in PyTorch).

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the mean, in [0, 1).
      b2: decay of the belief, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added to the belief at every step, >= 0.
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay (see `add_decayed_weights`); ``None`` decays all.

    Returns:
      ``chain(scale_by_acprop(b1, b2, eps, eps_root), add_decayed_weights(weight_decay,
      mask), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.contrib.acprop(0.05)
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(200):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.05)  # from 5.0
      True

    References:
      Zhuang, Liu, Cutkosky and Orabona, "Momentum Centering and Asynchronous Update for
      Adaptive Gradient Methods", NeurIPS 2021 (arXiv:2110.05454).
    """
    with hp.caller("acprop"):
        return chain(
            scale_by_acprop(b1, b2, eps, eps_root),
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate),
        )
