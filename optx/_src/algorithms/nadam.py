"""NAdam and NAdamW: Adam with Nesterov momentum (`scale_by_adam` with ``nesterov=True``)."""

from __future__ import annotations

from jax.typing import DTypeLike

from optx._src import hyperparams as hp
from optx._src.algorithms.adam import adam, adamw
from optx._src.base import ScalarOrSchedule
from optx._src.combine import Chain, MaskSpec


def nadam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = True,
    nu_dtype: DTypeLike | None = None,
    eps_placement: str = "optax",
    momentum_decay: float | None = None,
) -> Chain:
    r"""The NAdam optimizer: `adam` with Nesterov momentum.

    .. math::
       \hat m_t = \frac{\beta_1 m_t}{1-\beta_1^{t+1}} + \frac{(1-\beta_1) g_t}{1-\beta_1^t},
       \qquad \theta_t = \theta_{t-1} - \eta\,\hat m_t / (\sqrt{\hat v_t + \bar\epsilon}
       + \epsilon)

    with :math:`m_t, v_t, \hat v_t` as in `scale_by_adam`. ``momentum_decay`` :math:`\psi`
    replaces the constant :math:`\beta_1` of :math:`\hat m_t` by the schedule
    :math:`\mu_t = \beta_1 (1 - \tfrac12\, 0.96^{\psi t})` of Dozat's paper:
    :math:`\hat m_t = \mu_{t+1} m_t / (1 - \prod_{s \le t+1} \mu_s) + (1 - \mu_t) g_t /
    (1 - \prod_{s \le t} \mu_s)`. ``momentum_decay=1.0`` is Keras's ``Nadam`` (with
    ``eps=1e-7``), ``0.004`` PyTorch's ``NAdam``.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: :math:`\beta_1`, decay of the first moment, in [0, 1).
      b2: :math:`\beta_2`, decay of the second moment, in [0, 1).
      eps: :math:`\epsilon`, added to the denominator outside the square root.
      eps_root: :math:`\bar\epsilon`, added inside the square root.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nesterov: ``False`` gives plain `adam`.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.
      eps_placement: ``"optax"`` or ``"keras"`` (see `scale_by_adam`).
      momentum_decay: :math:`\psi \ge 0`, or ``None`` for optax's constant :math:`\beta_1`.

    Returns:
      ``chain(scale_by_adam(..., nesterov=True), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_adam`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.nadam(0.1, momentum_decay=1.0)
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.1))
      True

    References:
      Dozat, "Incorporating Nesterov Momentum into Adam", ICLR Workshop 2016.
    """
    with hp.caller("nadam"):
        return adam(
            learning_rate,
            b1,
            b2,
            eps,
            eps_root,
            mu_dtype,
            nesterov=nesterov,
            nu_dtype=nu_dtype,
            eps_placement=eps_placement,
            momentum_decay=momentum_decay,
        )


def nadamw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    weight_decay: float = 1e-4,
    mask: MaskSpec | None = None,
    *,
    nesterov: bool = True,
    nu_dtype: DTypeLike | None = None,
    eps_placement: str = "optax",
    momentum_decay: float | None = None,
) -> Chain:
    r"""NAdam with decoupled weight decay: `adamw` with Nesterov momentum.

    .. math:: \theta_t = \theta_{t-1} - \eta\,\bigl(\hat m_t / (\sqrt{\hat v_t +
       \bar\epsilon} + \epsilon) + \lambda\,\theta_{t-1}\bigr)

    with NAdam's :math:`\hat m_t` (see `nadam`).

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay (see `add_decayed_weights`); ``None`` decays all.
      nesterov: ``False`` gives plain `adamw`.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.
      eps_placement: ``"optax"`` or ``"keras"`` (see `scale_by_adam`).
      momentum_decay: NAdam's momentum schedule (see `nadam`), or ``None``.

    Returns:
      ``chain(scale_by_adam(..., nesterov=True), add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones(2)}
      >>> tx = optx.nadamw(0.1, weight_decay=0.5)
      >>> updates, _ = tx.update({"w": jnp.zeros(2)}, tx.init(params), params)
      >>> updates
      {'w': Array([-0.05, -0.05], dtype=float32)}

    References:
      Dozat, "Incorporating Nesterov Momentum into Adam", ICLR Workshop 2016;
      Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.
    """
    with hp.caller("nadamw"):
        return adamw(
            learning_rate,
            b1,
            b2,
            eps,
            eps_root,
            mu_dtype,
            weight_decay,
            mask,
            nesterov=nesterov,
            nu_dtype=nu_dtype,
            eps_placement=eps_placement,
            momentum_decay=momentum_decay,
        )
