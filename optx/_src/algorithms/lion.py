"""Sign-based optimizers: `scale_by_sign`, `sign_sgd`, `signum`, `scale_by_lion`, `lion`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import (
    EmptyState,
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
    zero_count,
)
from optx._src.combine import Chain, MaskSpec, chain
from optx._src.moments import adam_scalars, unzip, zeros_like
from optx._src.momentum import Ema
from optx._src.options import dtype_options
from optx._src.scaling import scale_by_learning_rate
from optx._src.tree import is_none
from optx._src.weight_decay import add_decayed_weights

_LION_MODES = ("hard", "smooth", "refined")


@transform
class ScaleBySign(Transform):
    """See `scale_by_sign`."""

    name = "scale_by_sign"
    elementwise = True

    def init(self, params: Params) -> EmptyState:
        del params
        return EmptyState()

    def update(
        self, updates: Updates, state: EmptyState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, EmptyState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        return jax.tree.map(
            lambda u: None if u is None else jnp.sign(u), updates, is_leaf=is_none
        ), state


def scale_by_sign() -> ScaleBySign:
    r"""Replaces each update by its sign: :math:`u \leftarrow \operatorname{sign}(g)`.

    Zeros stay zero (:math:`\operatorname{sign}(0) = 0`).

    Returns:
      The transform (its state is `EmptyState`).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_sign()
      >>> tx.update({"w": jnp.array([0.3, -2.0, 0.0])}, tx.init(None))[0]
      {'w': Array([ 1., -1.,  0.], dtype=float32)}

    References:
      Bernstein, Wang, Azizzadenesheli and Anandkumar, "signSGD: Compressed Optimisation
      for Non-Convex Problems", ICML 2018.
    """
    return ScaleBySign()


def sign_sgd(learning_rate: ScalarOrSchedule) -> Chain:
    r"""signSGD: steps of a fixed length along the sign of each gradient component.

    .. math:: \theta \leftarrow \theta - \eta_t \operatorname{sign}(g)

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.

    Returns:
      ``chain(scale_by_sign(), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: ``learning_rate`` is negative or non-finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.sign_sgd(0.1)
      >>> params = {"w": jnp.zeros(2)}
      >>> tx.update({"w": jnp.array([5.0, -0.01])}, tx.init(params), params)[0]
      {'w': Array([-0.1,  0.1], dtype=float32)}

    References:
      Bernstein, Wang, Azizzadenesheli and Anandkumar, "signSGD: Compressed Optimisation
      for Non-Convex Problems", ICML 2018; Balles, Pedregosa and Le Roux, "The Geometry of
      Sign Gradient Descent", arXiv:2002.08056, 2020.
    """
    with hp.caller("sign_sgd"):
        return chain(scale_by_sign(), scale_by_learning_rate(learning_rate))


def signum(
    learning_rate: ScalarOrSchedule,
    beta: float = 0.9,
    accumulator_dtype: DTypeLike | None = None,
) -> Chain:
    r"""Signum: signSGD on a moving average of the gradients.

    .. math::
       m \leftarrow \beta\,m + (1 - \beta)\,g, \qquad
       \theta \leftarrow \theta - \eta_t \operatorname{sign}(m)

    The average is not debiased: a positive factor does not change its sign.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      beta: :math:`\beta \in [0, 1]`, the decay of the average (a dynamic hyperparameter,
        ``"beta"``).
      accumulator_dtype: dtype of the average; ``None`` uses each parameter's dtype.

    Returns:
      ``chain(ema(beta, debias=False, accumulator_dtype), scale_by_sign(),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: ``learning_rate`` or ``beta`` is out of range.
      TypeError: ``accumulator_dtype`` is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.signum(0.1, beta=0.5)
      >>> params = {"w": jnp.zeros(1)}
      >>> state = tx.init(params)
      >>> for g in (3.0, -1.0):  # the average is 1.5, then 0.25: still positive
      ...     updates, state = tx.update({"w": jnp.array([g])}, state, params)
      >>> updates
      {'w': Array([-0.1], dtype=float32)}

    References:
      Bernstein, Wang, Azizzadenesheli and Anandkumar, "signSGD: Compressed Optimisation
      for Non-Convex Problems", ICML 2018; Zhao, Morwani, Brandfonbrener, Vyas and
      Kakade, "Deconstructing What Makes a Good Optimizer for Language Models",
      arXiv:2407.07972, 2024.
    """
    with hp.caller("signum"):
        return chain(
            Ema(beta, False, accumulator_dtype, hyperparam_name="beta"),
            scale_by_sign(),
            scale_by_learning_rate(learning_rate),
        )


class ScaleByLionState(NamedTuple):
    """State of `scale_by_lion`: step count, momentum and hyperparameters."""

    count: jax.Array
    mu: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByLion(Transform):
    """See `scale_by_lion`."""

    name = "scale_by_lion"
    elementwise = True
    # b1 interpolates between the momentum and the gradient: both ends are meaningful.
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_CLOSED, decay=True)
    b2: ScalarOrSchedule = hp.field(0.99, hp.UNIT_OPEN, decay=True)
    mu_dtype: Any = None
    mode: str = "hard"
    smooth_beta: ScalarOrSchedule = hp.field(1.0, hp.POSITIVE)

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "mu_dtype")
        if self.mode not in _LION_MODES:
            raise ValueError(
                f"`{hp.current(self.name)}` needs mode to be one of 'hard', 'smooth', "
                f"'refined'. Received: mode={self.mode!r}."
            )

    def unused_hyperparams(self) -> frozenset[str]:
        # smooth_beta only acts in "smooth" mode; elsewhere it is not kept.
        return frozenset() if self.mode == "smooth" else frozenset({"smooth_beta"})

    def init(self, params: Params) -> ScaleByLionState:
        # A complex value's sign is ``c / |c|`` (as `jnp.sign` and optax take it); the
        # smooth and refined modes have no complex counterpart.
        hard = self.mode == "hard"
        checks.float_params(f"{self.name}.init", params, complex_ok=hard)
        checks.complex_slot(f"{self.name}.init", "mu_dtype", self.mu_dtype, params)
        return ScaleByLionState(
            zero_count(), zeros_like(params, self.mu_dtype), self.init_hyperparams()
        )

    def update(
        self, updates: Updates, state: ScaleByLionState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByLionState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        s = adam_scalars(state.hyperparams, state.count)
        # Kept in the state only in "smooth" mode (`unused_hyperparams`).
        smooth_beta = s.hyperparams["smooth_beta"] if self.mode == "smooth" else 1.0

        def leaf(g: jax.Array, m: jax.Array) -> tuple[jax.Array, jax.Array]:
            c = s.c1 * g + s.b1 * m
            if self.mode == "hard":
                u = jnp.sign(c)
            elif self.mode == "smooth":
                u = jnp.tanh(smooth_beta * c)
            else:  # "refined": linear on [-1, 1], the sign beyond
                u = jnp.clip(c, -1, 1)
            new_m = s.c2 * g + s.b2 * m
            return u.astype(g.dtype), new_m.astype(m.dtype)

        u, mu = unzip(jax.tree.map(leaf, updates, state.mu), updates, 2)
        return u, ScaleByLionState(s.count, mu, s.hyperparams)


def scale_by_lion(
    b1: float = 0.9,
    b2: float = 0.99,
    mu_dtype: DTypeLike | None = None,
    *,
    mode: str = "hard",
    smooth_beta: float = 1.0,
) -> ScaleByLion:
    r"""Lion's update direction: the sign of an interpolation of momentum and gradient.

    .. math::
       c_t = \beta_1 m_{t-1} + (1 - \beta_1)\,g_t, \qquad
       u_t = \operatorname{sign}(c_t), \qquad
       m_t = \beta_2 m_{t-1} + (1 - \beta_2)\,g_t

    with :math:`\beta_1` = ``b1`` and :math:`\beta_2` = ``b2``. The momentum is updated
    after the direction is taken, so ``b1`` weighs the current gradient more than ``b2``
    would. ``mode`` replaces the sign: ``"smooth"`` uses :math:`\tanh(\gamma\,c_t)` with
    :math:`\gamma` = ``smooth_beta``; ``"refined"`` uses :math:`\min(1, \max(-1, c_t))`,
    linear near zero and the sign beyond.

    Keras's ``Lion`` computes the same (``beta_1``, ``beta_2``); it checks
    :math:`0 < \beta_1 \le 1`.

    Args:
      b1: :math:`\beta_1 \in [0, 1]`, the weight of the momentum in the direction.
      b2: :math:`\beta_2 \in [0, 1)`, the decay of the momentum.
      mu_dtype: dtype of the momentum; ``None`` uses each parameter's dtype.
      mode: ``"hard"`` (the sign), ``"smooth"`` or ``"refined"``.
      smooth_beta: :math:`\gamma > 0`, the slope of ``"smooth"`` at zero (kept in the
        state only in that mode).

    Returns:
      The transform. ``b1``, ``b2`` (and ``smooth_beta`` in ``"smooth"`` mode) are dynamic
      hyperparameters.

    Raises:
      ValueError: a beta or ``smooth_beta`` is out of range, or ``mode`` is unknown.
      TypeError: ``mu_dtype`` is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_lion()
      >>> updates, state = tx.update({"w": jnp.array([0.2, -3.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates, state.mu
      ({'w': Array([ 1., -1.], dtype=float32)}, {'w': Array([ 0.002, -0.03 ], dtype=float32)})

    References:
      Chen, Liang, Huang, Real, Wang, Pham, Dong, Luong, Hsieh, Lu and Le, "Symbolic
      Discovery of Optimization Algorithms", NeurIPS 2023.
    """
    return ScaleByLion(b1, b2, mu_dtype, mode, smooth_beta)


def lion(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.99,
    mu_dtype: DTypeLike | None = None,
    weight_decay: float = 1e-3,
    mask: MaskSpec | None = None,
) -> Chain:
    r"""The Lion optimizer: signed momentum steps with decoupled weight decay.

    .. math::
       \theta_t = \theta_{t-1} - \eta_t\,\bigl(\operatorname{sign}(\beta_1 m_{t-1}
       + (1 - \beta_1)\,g_t) + \lambda\,\theta_{t-1}\bigr), \qquad
       m_t = \beta_2 m_{t-1} + (1 - \beta_2)\,g_t

    Every step has size :math:`\eta` per coordinate, so Lion wants a learning rate 3-10x
    smaller than AdamW's, and a weight decay :math:`\lambda` 3-10x larger.

    Keras's ``Lion(learning_rate, beta_1, beta_2, weight_decay)`` is the same optimizer:
    it applies :math:`\theta \leftarrow \theta - \eta\lambda\theta` before the signed
    step, which uses the same :math:`\theta_{t-1}`. Only the default decay differs (Keras:
    none; here, as in optax: ``1e-3``).

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: :math:`\beta_1 \in [0, 1]`, the weight of the momentum in the direction.
      b2: :math:`\beta_2 \in [0, 1)`, the decay of the momentum.
      mu_dtype: dtype of the momentum; ``None`` uses each parameter's dtype.
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay (see `add_decayed_weights`); ``None`` decays all.

    Returns:
      ``chain(scale_by_lion(b1, b2, mu_dtype), add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range.
      TypeError: ``mu_dtype`` is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.lion(0.1, weight_decay=0.5)
      >>> params = {"w": jnp.array([1.0, 1.0])}
      >>> grads = {"w": jnp.array([2.0, -0.01])}  # only the signs matter
      >>> tx.update(grads, tx.init(params), params)[0]  # -0.1 * (sign(g) + 0.5 * w)
      {'w': Array([-0.15,  0.05], dtype=float32)}

    References:
      Chen, Liang, Huang, Real, Wang, Pham, Dong, Luong, Hsieh, Lu and Le, "Symbolic
      Discovery of Optimization Algorithms", NeurIPS 2023.
    """
    with hp.caller("lion"):
        return chain(
            scale_by_lion(b1, b2, mu_dtype),
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate),
        )
