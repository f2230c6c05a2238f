"""MADGRAD: momentumised dual averaging, `scale_by_madgrad` and `madgrad`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks
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
from optx._src.combine import Chain, chain
from optx._src.moments import abs_sq, decay_pair, real_zeros_like, unzip, zeros_like
from optx._src.weight_decay import add_decayed_weights


class MadgradState(NamedTuple):
    """State of `scale_by_madgrad`.

    Attributes:
      count: steps taken (saturating int32).
      grad_sum_sq: :math:`G`, the weighted sum of squared gradients.
      s: the weighted sum of gradients.
      x0: the parameters at ``init``, the centre of the dual averaging.
      hyperparams: ``learning_rate``, ``momentum``, ``eps``.
    """

    count: jax.Array
    grad_sum_sq: Updates
    s: Updates
    x0: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByMadgrad(Transform):
    """See `scale_by_madgrad`."""

    name = "scale_by_madgrad"
    elementwise = True
    learning_rate: ScalarOrSchedule = hp.field(1e-3, hp.NONNEG)
    momentum: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-6, hp.NONNEG)

    def init(self, params: Params) -> MadgradState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        # A copy, so that the parameters and x0 can both be donated to a jitted step.
        x0 = jax.tree.map(lambda p: jnp.array(p, jnp.result_type(p)), params)
        return MadgradState(
            zero_count(),
            real_zeros_like(params, None),
            zeros_like(params, None),
            x0,
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: MadgradState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, MadgradState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.s, "updates", "the state")
        checks.same_tree(api, params, state.x0, "params", "the state")
        h = state.hyperparams
        momentum, c = decay_pair(h, "momentum")
        eps = h["eps"]
        # lambda_k = (lr + eps) sqrt(k + 1) for the k-th step (k from 0), as the reference
        # implementation: eps keeps the first steps moving with a zero learning rate.
        k = state.count.astype(jnp.float32)
        lamb = (h["learning_rate"] + eps) * jnp.sqrt(k + 1)

        def leaf(g: Any, p: Any, big_g: Any, s: Any, x0: Any) -> tuple[Any, ...]:
            new_big_g = big_g + (lamb * abs_sq(g)).astype(big_g.dtype)
            new_s = s + (lamb * g).astype(s.dtype)
            z = x0 - new_s / (jnp.cbrt(new_big_g) + eps)
            # x_{k+1} = (1 - momentum) z + momentum x_k, returned as x_{k+1} - x_k.
            u = c * z + momentum * p - p
            return u.astype(p.dtype), new_big_g, new_s

        flat = jax.tree.map(leaf, updates, params, state.grad_sum_sq, state.s, state.x0)
        u, big_g, s = unzip(flat, updates, 3)
        return u, MadgradState(safe_increment(state.count), big_g, s, state.x0, h)


def scale_by_madgrad(
    learning_rate: ScalarOrSchedule,
    momentum: float = 0.9,
    eps: float = 1e-6,
) -> ScaleByMadgrad:
    r"""MADGRAD's step: dual averaging with a cube-root scaling and momentum.

    At step :math:`k = 0, 1, \ldots`, with :math:`\eta_k` = ``learning_rate``,
    :math:`\beta` = ``momentum`` and :math:`\epsilon` = ``eps``:

    .. math::
       \lambda_k = (\eta_k + \epsilon)\sqrt{k + 1}, \quad
       G_{k+1} = G_k + \lambda_k g_k^2, \quad
       s_{k+1} = s_k + \lambda_k g_k, \\
       z_{k+1} = x_0 - \frac{s_{k+1}}{G_{k+1}^{1/3} + \epsilon}, \quad
       x_{k+1} = (1 - \beta)\,z_{k+1} + \beta\,x_k,

    and the update is :math:`x_{k+1} - x_k`. The learning rate is inside the step (this
    transform returns the change of the parameters: put nothing that rescales after it).
    :math:`x_0` is the parameters given to ``init``, kept in the state. For complex
    parameters :math:`g_k^2` is :math:`|g_k|^2`: :math:`G` is real (in the real dtype) and
    :math:`s`, :math:`z` and the update are complex.

    Args:
      learning_rate: :math:`\eta \ge 0`, a number or a schedule.
      momentum: :math:`\beta \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`, added to the learning rate and to the denominator.

    Returns:
      The transform (its state is `MadgradState`); its three arguments are dynamic
      hyperparameters.

    Raises:
      ValueError: an argument is out of range, or ``update`` gets no ``params``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.contrib.scale_by_madgrad(1.0, momentum=0.0, eps=0.0)
      >>> params = {"w": jnp.array([1.0, 1.0])}
      >>> updates, _ = tx.update({"w": jnp.array([8.0, -1.0])}, tx.init(params), params)
      >>> updates["w"].round(4)  # -s / G**(1/3) = -g / (g**2)**(1/3)
      Array([-2.,  1.], dtype=float32)

    References:
      Defazio and Jelassi, "Adaptivity without Compromise: A Momentumized, Adaptive, Dual
      Averaged Gradient Method for Stochastic Optimization", JMLR 2022 (arXiv:2101.11075).
    """
    return ScaleByMadgrad(learning_rate, momentum, eps)


def madgrad(
    learning_rate: ScalarOrSchedule,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    eps: float = 1e-6,
) -> Chain:
    r"""The MADGRAD optimizer: L2 weight decay, then `scale_by_madgrad`.

    .. math:: g_k \leftarrow g_k + \lambda\,x_k

    with :math:`\lambda` = ``weight_decay``, then MADGRAD's step (see `scale_by_madgrad`).
    The decay is added to the gradient, so it enters MADGRAD's sums (L2 regularisation,
    as optax and the reference implementation).

    Args:
      learning_rate: :math:`\eta \ge 0`, a number or a schedule.
      momentum: :math:`\beta \in [0, 1)`.
      weight_decay: :math:`\lambda \ge 0`.
      eps: :math:`\epsilon \ge 0`.

    Returns:
      ``chain(add_decayed_weights(weight_decay), scale_by_madgrad(learning_rate,
      momentum, eps))``.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.contrib.madgrad(0.1)
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(100):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.05)  # from 5.0
      True

    References:
      Defazio and Jelassi, "Adaptivity without Compromise: A Momentumized, Adaptive, Dual
      Averaged Gradient Method for Stochastic Optimization", JMLR 2022 (arXiv:2101.11075).
    """
    with hp.caller("madgrad"):
        return chain(
            add_decayed_weights(weight_decay),
            scale_by_madgrad(learning_rate, momentum, eps),
        )
