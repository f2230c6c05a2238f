"""Adam variants with another second moment: AdaBelief and Yogi.

`scale_by_belief` and `adabelief`; `scale_by_yogi` and `yogi`.
"""

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
from optx._src.moments import (
    AdamScalars,
    abs_sq,
    adam_scalars,
    real_full_like,
    real_zeros_like,
    unzip,
)
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights


def belief_update(s: AdamScalars, g: jax.Array, m: jax.Array, belief: jax.Array) -> jax.Array:
    """AdaBelief's new belief: ``b2 * belief + (1 - b2) * (g - m)**2 + eps_root``.

    ``m`` is the mean the gradient is compared with: this step's (AdaBelief) or the
    previous one (ACProp, `scale_by_acprop`).
    """
    return s.c2 * abs_sq(g - m) + s.b2 * belief + s.eps_root


class ScaleByBeliefState(NamedTuple):
    """State of `scale_by_belief`: step count, first moment, belief, hyperparameters."""

    count: jax.Array
    mu: Params
    nu: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByBelief(Transform):
    """See `scale_by_belief`."""

    name = "scale_by_belief"
    elementwise = True
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-16, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(1e-16, hp.NONNEG)
    nesterov: bool = False

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
        bc1, bc2 = s.bias_correction("b1"), s.bias_correction("b2")
        bc1_next = s.bias_correction("b1", next_step=True) if self.nesterov else None

        def leaf(g: jax.Array, m: jax.Array, belief: jax.Array) -> tuple[jax.Array, ...]:
            new_m = s.c1 * g + s.b1 * m
            new_belief = belief_update(s, g, new_m, belief)
            m_hat = s.b1 * (new_m / bc1_next) + s.c1 * (g / bc1) if self.nesterov else new_m / bc1
            u = m_hat / (jnp.sqrt(new_belief / bc2) + s.eps)
            return u.astype(g.dtype), new_m.astype(m.dtype), new_belief.astype(belief.dtype)

        u, mu, nu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu), updates, 3)
        return u, ScaleByBeliefState(s.count, mu, nu, s.hyperparams)


def scale_by_belief(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-16,
    eps_root: float = 1e-16,
    *,
    nesterov: bool = False,
) -> ScaleByBelief:
    r"""Rescales updates by AdaBelief's estimates: the mean and the belief in it.

    .. math::
       m_t = \beta_1 m_{t-1} + (1-\beta_1)\,g_t, \quad
       s_t = \beta_2 s_{t-1} + (1-\beta_2)\,(g_t - m_t)^2 + \bar\epsilon, \\
       u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{s_t / (1-\beta_2^t)} + \epsilon}

    with :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``, :math:`\epsilon` = ``eps``
    and :math:`\bar\epsilon` = ``eps_root``. Where Adam divides by the spread of the
    gradients around zero, AdaBelief divides by their spread around the running mean
    :math:`m_t`: small where the gradient is as predicted, so the step is large there.
    With ``nesterov=True`` the numerator is
    :math:`\beta_1 m_t / (1-\beta_1^{t+1}) + (1-\beta_1) g_t / (1-\beta_1^t)`.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the belief :math:`s`, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added to :math:`s_t` at every step (so kept in the state), >= 0. The paper
        uses ``eps=1e-8, eps_root=0``.
      nesterov: use Nesterov momentum.

    Returns:
      The transform. ``b1``, ``b2``, ``eps`` and ``eps_root`` are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), or ``eps`` / ``eps_root`` is negative.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_belief()
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -3.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates  # first step: m = 0.1 g, s = 0.001 (0.9 g)^2, so u = g / (0.9 |g|)
      {'w': Array([ 1.1111112, -1.1111112], dtype=float32)}

    References:
      Zhuang, Tang, Ding, Tatikonda, Dvornek, Papademetris and Duncan, "AdaBelief
      Optimizer: Adapting Stepsizes by the Belief in Observed Gradients", NeurIPS 2020.
    """
    return ScaleByBelief(b1, b2, eps, eps_root, nesterov)


def adabelief(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-16,
    eps_root: float = 1e-16,
    *,
    nesterov: bool = False,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskSpec | None = None,
) -> Chain:
    r"""The AdaBelief optimizer: `scale_by_belief` then `scale_by_learning_rate`.

    .. math:: \theta_t = \theta_{t-1} - \eta_t\,\bigl(\hat m_t / (\sqrt{\hat s_t} +
       \epsilon) + \lambda\,\theta_{t-1}\bigr)

    with :math:`\hat m_t`, :math:`\hat s_t` the bias-corrected mean and belief of
    `scale_by_belief`, and :math:`\lambda` = ``weight_decay`` (0 when ``None``): decay
    added after the preconditioning and multiplied by the learning rate, as AdamW's (and
    as PyTorch's, where Loshchilov and Hutter scale it by the schedule only), as in
    optax's main branch.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the belief, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added to the belief at every step, >= 0.
      nesterov: use Nesterov momentum.
      weight_decay: :math:`\lambda \ge 0` (a number or a schedule), or ``None`` for none
        (the chain then has no `add_decayed_weights`, as in optax 0.2.8).
      weight_decay_mask: which parameters to decay (see `add_decayed_weights`); ``None``
        decays all of them.

    Returns:
      ``chain(scale_by_belief(...), scale_by_learning_rate(learning_rate))``, with
      ``add_decayed_weights(weight_decay, weight_decay_mask)`` between them when
      ``weight_decay`` is given.

    Raises:
      ValueError: an argument is out of range (see `scale_by_belief`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.adabelief(0.1)
      >>> state = tx.init(params)
      >>> for _ in range(200):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.1))
      True

    References:
      Zhuang, Tang, Ding, Tatikonda, Dvornek, Papademetris and Duncan, "AdaBelief
      Optimizer: Adapting Stepsizes by the Belief in Observed Gradients", NeurIPS 2020.
    """
    with hp.caller("adabelief"):
        decay = (
            () if weight_decay is None else (add_decayed_weights(weight_decay, weight_decay_mask),)
        )
        return chain(
            scale_by_belief(b1, b2, eps, eps_root, nesterov=nesterov),
            *decay,
            scale_by_learning_rate(learning_rate),
        )


class ScaleByYogiState(NamedTuple):
    """State of `scale_by_yogi`: step count, first and second moments, hyperparameters."""

    count: jax.Array
    mu: Params
    nu: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByYogi(Transform):
    """See `scale_by_yogi`."""

    name = "scale_by_yogi"
    elementwise = True
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-3, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    initial_accumulator_value: ScalarOrSchedule = hp.field(1e-6, hp.NONNEG)

    def init(self, params: Params) -> ScaleByYogiState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        value = self.initial("initial_accumulator_value")
        full = jax.tree.map(lambda p: placement.full_like(p, value), params)
        nu = real_full_like(params, value, None)
        return ScaleByYogiState(zero_count(), full, nu, self.init_hyperparams())

    def update(
        self, updates: Updates, state: ScaleByYogiState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByYogiState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        s = adam_scalars(state.hyperparams, state.count)
        bc1, bc2 = s.bias_correction("b1"), s.bias_correction("b2")

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, ...]:
            new_m = s.c1 * g + s.b1 * m
            g2 = abs_sq(g)
            # Moves v towards g^2 by (1 - b2) g^2: additively, unlike Adam's average.
            new_v = v - s.c2 * jnp.sign(v - g2) * g2
            u = (new_m / bc1) / (jnp.sqrt(new_v / bc2 + s.eps_root) + s.eps)
            return u.astype(g.dtype), new_m.astype(m.dtype), new_v.astype(v.dtype)

        u, mu, nu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu), updates, 3)
        return u, ScaleByYogiState(s.count, mu, nu, s.hyperparams)


def scale_by_yogi(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-3,
    eps_root: float = 0.0,
    initial_accumulator_value: float = 1e-6,
) -> ScaleByYogi:
    r"""Rescales updates by Yogi's moments: Adam with an additive second-moment update.

    .. math::
       m_t = \beta_1 m_{t-1} + (1-\beta_1)\,g_t, \quad
       v_t = v_{t-1} - (1-\beta_2)\operatorname{sign}(v_{t-1} - g_t^2)\,g_t^2, \\
       u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t) + \bar\epsilon}
       + \epsilon}

    with :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``, :math:`\epsilon` = ``eps``,
    :math:`\bar\epsilon` = ``eps_root``, and :math:`m_0 = v_0` =
    ``initial_accumulator_value``. Adam's :math:`v` moves by
    :math:`(1-\beta_2)(g_t^2 - v_{t-1})`, a large jump when :math:`v_{t-1}` is large;
    Yogi's moves by at most :math:`(1-\beta_2)\,g_t^2`, so the effective learning rate
    rises slowly when gradients shrink.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: rate of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      initial_accumulator_value: the starting value of both moments, >= 0. ``init``
        reads it; changing it with `set_hyperparams` afterwards has no effect.

    Returns:
      The transform. Its five arguments are dynamic hyperparameters.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_yogi(eps=0.0, initial_accumulator_value=0.0)
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -3.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates
      {'w': Array([ 1., -1.], dtype=float32)}

    References:
      Zaheer, Reddi, Sachan, Kale and Kumar, "Adaptive Methods for Nonconvex
      Optimization", NeurIPS 2018.
    """
    return ScaleByYogi(b1, b2, eps, eps_root, initial_accumulator_value)


def yogi(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-3,
) -> Chain:
    r"""The Yogi optimizer: `scale_by_yogi` then `scale_by_learning_rate`.

    .. math:: \theta_t = \theta_{t-1} - \eta_t\,\hat m_t / (\sqrt{\hat v_t} + \epsilon)

    with Yogi's additive second moment :math:`v` (see `scale_by_yogi`), both moments
    starting at ``1e-6``.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: rate of the second moment, in [0, 1).
      eps: added to the denominator, >= 0 (the paper's default, ``1e-3``).

    Returns:
      ``chain(scale_by_yogi(b1, b2, eps), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.yogi(0.1)
      >>> state = tx.init(params)
      >>> for _ in range(200):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.1))
      True

    References:
      Zaheer, Reddi, Sachan, Kale and Kumar, "Adaptive Methods for Nonconvex
      Optimization", NeurIPS 2018.
    """
    with hp.caller("yogi"):
        return chain(
            scale_by_yogi(b1, b2, eps),
            scale_by_learning_rate(learning_rate),
        )
