"""COCOB-Backprop, coin betting without a learning rate: `scale_by_cocob`, `cocob`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, placement
from optx._src import hyperparams as hp
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.combine import Chain, MaskSpec, chain
from optx._src.moments import real_full_like, real_zeros_like, unzip
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights


class COCOBState(NamedTuple):
    r"""State of `scale_by_cocob`, per parameter coordinate.

    Attributes:
      init_particles: the parameters at ``init`` (:math:`\theta_0`).
      cumulative_gradients: :math:`-\sum g` so far.
      scale: :math:`L`, the largest :math:`|g|` so far (at least ``eps``; real).
      subgradients: :math:`G`, the sum of :math:`|g|` so far (real).
      reward: :math:`R`, the reward of the bets so far (real).
      hyperparams: the dynamic hyperparameters.
    """

    init_particles: Params
    cumulative_gradients: Params
    scale: Params
    subgradients: Params
    reward: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByCocob(Transform):
    """See `scale_by_cocob`."""

    name = "scale_by_cocob"
    elementwise = True
    alpha: ScalarOrSchedule = hp.field(100.0, hp.POSITIVE)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.POSITIVE)

    def unused_hyperparams(self) -> frozenset[str]:
        return frozenset({"eps"})  # the initial scale, read at `init`

    def init(self, params: Params) -> COCOBState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        eps = self.initial("eps")
        # L, G and R are real (a complex coordinate is a coin in the plane); C is complex.
        real_zeros = real_zeros_like(params, None)
        return COCOBState(
            jax.tree.map(lambda p: jnp.array(p, jnp.result_type(p)), params),
            jax.tree.map(placement.zeros_like, params),
            real_full_like(params, eps, None),
            real_zeros,
            real_zeros,
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: COCOBState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, COCOBState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.cumulative_gradients, "updates", "the state")
        checks.same_tree(api, params, state.cumulative_gradients, "params", "the state")
        alpha = state.hyperparams["alpha"]

        def leaf(g: Any, p: Any, p0: Any, c: Any, lg: Any, sg: Any, r: Any) -> tuple[Any, ...]:
            lg = jnp.maximum(lg, jnp.abs(g)).astype(lg.dtype)
            sg = (sg + jnp.abs(g)).astype(sg.dtype)
            # The bet's reward Re(conj(g) (p - p0)): g (p - p0) for a real coordinate.
            r = jnp.maximum(r - jnp.real(jnp.conj(g) * (p - p0)), 0).astype(r.dtype)
            c = (c - g).astype(c.dtype)
            bet = c / (lg * jnp.maximum(sg + lg, alpha * lg)) * (lg + r)
            # The new parameter is p0 + bet: the update is its distance from p.
            return ((p0 - p) + bet).astype(g.dtype), c, lg, sg, r

        flat = jax.tree.map(
            leaf,
            updates,
            params,
            state.init_particles,
            state.cumulative_gradients,
            state.scale,
            state.subgradients,
            state.reward,
        )
        out, c, lg, sg, r = unzip(flat, updates, 5)
        return out, COCOBState(state.init_particles, c, lg, sg, r, state.hyperparams)


def scale_by_cocob(alpha: float = 100.0, eps: float = 1e-8) -> ScaleByCocob:
    r"""COCOB-Backprop's step: each coordinate bets a fraction of its winnings on a direction.

    Per coordinate, with :math:`g_t` the update it receives:

    .. math::
       L_t = \max(L_{t-1}, |g_t|), \quad G_t = G_{t-1} + |g_t|, \quad
       R_t = \max\bigl(R_{t-1} - g_t(\theta_{t-1} - \theta_0),\ 0\bigr), \quad
       C_t = C_{t-1} - g_t, \\
       \theta_t = \theta_0 + \frac{C_t}{L_t \max(G_t + L_t,\ \alpha L_t)}\,(L_t + R_t),
       \qquad u_t = \theta_t - \theta_{t-1}

    with :math:`L_0` = ``eps``, :math:`\alpha` = ``alpha`` and the other sums starting at 0.
    Its updates are the parameter changes (descent included): nothing that rescales them
    should follow it. A complex coordinate is a coin in the plane: :math:`L, G, R` are real
    (moduli :math:`|g_t|`, and the reward's :math:`\operatorname{Re}(\bar g_t(\theta_{t-1} -
    \theta_0))`), while :math:`C_t` and the bet are complex.

    Args:
      alpha: :math:`\alpha > 0`, bounds the fraction bet early on.
      eps: :math:`L_0 > 0`, the initial scale (read at ``init``).

    Returns:
      The transform (its state is `COCOBState`); ``alpha`` is a dynamic hyperparameter.
      Its ``update`` needs the parameters.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.array([1.0, 1.0])}
      >>> tx = optx.contrib.scale_by_cocob(alpha=1.0, eps=1.0)
      >>> # L = max(1, |g|), G = |g|, C = -g: the bet is -g / (L max(G + L, L)) * L.
      >>> tx.update({"w": jnp.array([2.0, -0.5])}, tx.init(params), params)[0]
      {'w': Array([-0.5       ,  0.33333334], dtype=float32)}

    References:
      Orabona and Tommasi, "Training Deep Networks without Learning Rates Through Coin
      Betting", NeurIPS 2017.
    """
    return ScaleByCocob(alpha, eps)


def cocob(
    learning_rate: ScalarOrSchedule = 1.0,
    alpha: float = 100.0,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    mask: MaskSpec | None = None,
) -> Chain:
    r"""COCOB-Backprop: training without a learning rate, by coin betting.

    The gradient plus :math:`\lambda\theta` (on the parameters ``mask`` selects), scaled
    by :math:`\eta_t` = ``learning_rate`` (1 by default, a multiplier), goes to
    `scale_by_cocob`, whose update is the parameter change:

    .. math::
       \tilde g_t = \eta_t\,(g_t + \lambda\,\theta_{t-1}), \qquad
       \theta_t = \theta_0 + \frac{C_t}{L_t \max(G_t + L_t,\ \alpha L_t)}\,(L_t + R_t)

    (see `scale_by_cocob` for :math:`C, L, G, R`).

    Args:
      learning_rate: :math:`\eta \ge 0`, or a schedule, scaling the gradients.
      alpha: :math:`\alpha > 0`.
      eps: the initial scale :math:`L_0 > 0`.
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay (see `add_decayed_weights`).

    Returns:
      ``chain(add_decayed_weights(weight_decay, mask), scale_by_learning_rate(
      learning_rate, flip_sign=False), scale_by_cocob(alpha, eps))``.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.contrib.cocob()
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum((p - 3.0) ** 2)
      >>> for _ in range(200):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < loss(jnp.array([1.0, -2.0])) / 10)  # from 29
      True

    References:
      Orabona and Tommasi, "Training Deep Networks without Learning Rates Through Coin
      Betting", NeurIPS 2017.
    """
    with hp.caller("cocob"):
        return chain(
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate, flip_sign=False),
            scale_by_cocob(alpha, eps),
        )
