"""The Adam family's core: `scale_by_adam` (Adam, NAdam) and the optimizers `adam`, `adamw`.

The family's shared maths is in `optx._src.moments`; its other members (`nadam.py`,
`amsgrad.py`, `adamax.py`, `radam.py`, ...) build on it and on `ScaleByAdamState`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
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
    abs_sq,
    adam_scalars,
    first_moment_scalars,
    nadam_schedule,
    real_zeros_like,
    second_moment_scalars,
    unzip,
    zeros_like,
)
from optx._src.options import dtype_options, eps_placement_option, flag_options
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights


class ScaleByAdamState(NamedTuple):
    """State of `scale_by_adam`: step count, first and second moments, hyperparameters."""

    count: jax.Array
    mu: Params
    nu: Params
    hyperparams: dict[str, jax.Array]


class ScaleByNadamState(NamedTuple):
    """State of `scale_by_adam` with NAdam's momentum schedule (``momentum_decay`` set).

    ``u_product`` is the product of the scheduled momenta so far (a float32 scalar).
    """

    count: jax.Array
    mu: Params
    nu: Params
    u_product: jax.Array
    hyperparams: dict[str, jax.Array]


def adam_state_init(self: Any, params: Params) -> ScaleByAdamState:
    """``init`` of the transforms whose state is `ScaleByAdamState` (adamax, radam, ...)."""
    checks.float_params(f"{self.name}.init", params, complex_ok=True)
    checks.complex_slot(f"{self.name}.init", "mu_dtype", self.mu_dtype, params)
    return ScaleByAdamState(
        zero_count(),
        zeros_like(params, self.mu_dtype),
        real_zeros_like(params, self.nu_dtype),
        self.init_hyperparams(),
    )


@transform
class ScaleByAdam(Transform):
    """See `scale_by_adam`."""

    name = "scale_by_adam"
    elementwise = True
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    mu_dtype: Any = None
    nesterov: bool = False
    nu_dtype: Any = None
    eps_placement: str = "optax"
    # Optional: ``None`` (optax's constant momentum) is neither validated nor stored.
    momentum_decay: ScalarOrSchedule | None = hp.field(None, hp.NONNEG, optional=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "mu_dtype", "nu_dtype")
        flag_options(self, "nesterov")
        eps_placement_option(self.name, self.eps_placement)
        if self.momentum_decay is not None and not self.nesterov:
            raise ValueError(
                f"`{hp.current(self.name)}` needs nesterov=True to use momentum_decay "
                f"(NAdam's momentum schedule). Received: momentum_decay={self.momentum_decay!r}"
                f", nesterov=False."
            )

    def __repr__(self) -> str:
        text = super().__repr__()
        return text.replace(", momentum_decay=None)", ")")

    def init(self, params: Params) -> ScaleByAdamState | ScaleByNadamState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        checks.complex_slot(f"{self.name}.init", "mu_dtype", self.mu_dtype, params)
        mu, nu = zeros_like(params, self.mu_dtype), real_zeros_like(params, self.nu_dtype)
        h = self.init_hyperparams()
        if self.momentum_decay is None:
            return ScaleByAdamState(zero_count(), mu, nu, h)
        return ScaleByNadamState(zero_count(), mu, nu, jnp.ones([], jnp.float32), h)

    def update(
        self,
        updates: Updates,
        state: ScaleByAdamState | ScaleByNadamState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByAdamState | ScaleByNadamState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        h = state.hyperparams
        # Scalars computed once per step; the leaves only multiply by them.
        s = adam_scalars(h, state.count)
        product = None
        if self.momentum_decay is None:
            k_m, k_g = first_moment_scalars(h, s.count, self.nesterov)
        else:
            k_m, k_g, product = nadam_schedule(s, state.u_product)  # pyright: ignore[reportAttributeAccessIssue]
        k_m, k_g, k_v = second_moment_scalars(s, self.eps_placement, k_m, k_g)

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, ...]:
            new_m = s.c1 * g + s.b1 * m
            new_v = s.c2 * abs_sq(g) + s.b2 * v
            m_hat = new_m * k_m if k_g is None else new_m * k_m + g * k_g
            v_hat = new_v if k_v is None else new_v * k_v
            u = m_hat / (jnp.sqrt(v_hat + s.eps_root) + s.eps)
            return u.astype(g.dtype), new_m.astype(m.dtype), new_v.astype(v.dtype)

        u, mu, nu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu), updates, 3)
        if self.momentum_decay is None:
            return u, ScaleByAdamState(s.count, mu, nu, h)
        assert product is not None
        return u, ScaleByNadamState(s.count, mu, nu, product, h)


def scale_by_adam(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = False,
    nu_dtype: DTypeLike | None = None,
    eps_placement: str = "optax",
    momentum_decay: float | None = None,
) -> ScaleByAdam:
    r"""Rescales updates by Adam's bias-corrected moment estimates.

    .. math::
       m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad
       v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2, \\
       \hat m_t = m_t / (1-\beta_1^t), \quad \hat v_t = v_t / (1-\beta_2^t), \quad
       u_t = \hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon)

    with :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``, :math:`\epsilon` = ``eps``
    and :math:`\bar\epsilon` = ``eps_root``. With ``nesterov=True`` (NAdam),
    :math:`\hat m_t = \beta_1 m_t / (1-\beta_1^{t+1}) + (1-\beta_1) g_t / (1-\beta_1^t)`.

    ``eps_placement="keras"`` adds :math:`\epsilon` to the uncorrected :math:`\sqrt{v_t}`,
    as Keras and TF do: :math:`u_t = \alpha_t m_t / (\sqrt{v_t + \bar\epsilon} +
    \epsilon)` with the scalar :math:`\alpha_t = \sqrt{1-\beta_2^t} / (1-\beta_1^t)`
    (the learning rate stays in `scale_by_learning_rate`). In bias-corrected terms the
    effective epsilon is :math:`\epsilon / \sqrt{1-\beta_2^t}`, 31.6 :math:`\epsilon` at
    the first step for :math:`\beta_2 = 0.999`.

    ``momentum_decay`` :math:`\psi` (with ``nesterov=True``) gives NAdam's momentum
    schedule :math:`\mu_t = \beta_1 (1 - \tfrac12\, 0.96^{\psi t})`, with
    :math:`\Pi_t = \prod_{s \le t} \mu_s` kept in the state (`ScaleByNadamState`):
    :math:`\hat m_t = \mu_{t+1} m_t / (1 - \Pi_t \mu_{t+1}) + (1 - \mu_t) g_t /
    (1 - \Pi_t)`. Keras's Nadam uses :math:`\psi = 1`, PyTorch's and TF's legacy one
    :math:`\psi = 0.004`. The arithmetic runs in at least float32 whatever the moments'
    dtypes.

    For complex parameters (as optax) :math:`g_t^2` is :math:`|g_t|^2 = g_t \bar g_t`, and
    :math:`v` is kept in the real dtype (float32 for complex64); :math:`m` and the updates
    stay complex.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype (complex for
        a complex parameter).
      nesterov: use Nesterov momentum (NAdam).
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's (real) dtype.
      eps_placement: ``"optax"`` (epsilon after the bias correction) or ``"keras"``.
      momentum_decay: :math:`\psi \ge 0` of NAdam's momentum schedule, or ``None`` for a
        constant :math:`\beta_1` (optax). Needs ``nesterov=True``.

    Returns:
      The transform. ``b1``, ``b2``, ``eps``, ``eps_root`` (and ``momentum_decay`` when
      set) are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), ``eps``, ``eps_root`` or ``momentum_decay`` is
        negative, ``eps_placement`` is unknown, or ``momentum_decay`` is set without
        ``nesterov``.
      TypeError: a moment dtype is not a floating dtype, or ``nesterov`` is not a bool.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_adam()
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -3.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates
      {'w': Array([ 1., -1.], dtype=float32)}

    References:
      Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015;
      Dozat, "Incorporating Nesterov Momentum into Adam", ICLR Workshop 2016.
    """
    return ScaleByAdam(
        b1, b2, eps, eps_root, mu_dtype, nesterov, nu_dtype, eps_placement, momentum_decay
    )


def adam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = False,
    nu_dtype: DTypeLike | None = None,
    eps_placement: str = "optax",
    momentum_decay: float | None = None,
) -> Chain:
    r"""The Adam optimizer: `scale_by_adam` then `scale_by_learning_rate`.

    .. math:: \theta_t = \theta_{t-1} - \eta\,\hat m_t / (\sqrt{\hat v_t +
       \bar\epsilon} + \epsilon)

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype (complex for
        a complex parameter).
      nesterov: use Nesterov momentum (NAdam).
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's (real) dtype.
      eps_placement: ``"optax"``, or ``"keras"`` for Keras's epsilon on the uncorrected
        :math:`\sqrt{v_t}` (see `scale_by_adam`).
      momentum_decay: NAdam's momentum schedule (see `scale_by_adam`); needs ``nesterov``.

    Returns:
      ``chain(scale_by_adam(...), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_adam`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.adam(0.1)
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.1))
      True

    References:
      Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015.
    """
    with hp.caller("adam"):
        return chain(
            scale_by_adam(
                b1,
                b2,
                eps,
                eps_root,
                mu_dtype,
                nesterov=nesterov,
                nu_dtype=nu_dtype,
                eps_placement=eps_placement,
                momentum_decay=momentum_decay,
            ),
            scale_by_learning_rate(learning_rate),
        )


def adamw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    weight_decay: float = 1e-4,
    mask: MaskSpec | None = None,
    *,
    nesterov: bool = False,
    nu_dtype: DTypeLike | None = None,
    eps_placement: str = "optax",
    momentum_decay: float | None = None,
) -> Chain:
    r"""Adam with decoupled weight decay (AdamW).

    .. math:: \theta_t = \theta_{t-1} - \eta\,\bigl(\hat m_t / (\sqrt{\hat v_t +
       \bar\epsilon} + \epsilon) + \lambda\,\theta_{t-1}\bigr)

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay (see `add_decayed_weights`); ``None`` decays all.
      nesterov: use Nesterov momentum.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.
      eps_placement: ``"optax"`` or ``"keras"`` (see `scale_by_adam`).
      momentum_decay: NAdam's momentum schedule (see `scale_by_adam`); needs ``nesterov``.

    Returns:
      ``chain(scale_by_adam(...), add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.adamw(1e-3, weight_decay=1e-2, mask=r"kernel")
      >>> sorted(optx.get_hyperparams(tx.init({"kernel": jnp.ones(2), "bias": jnp.ones(2)})))
      ['b1', 'b2', 'eps', 'eps_root', 'learning_rate', 'weight_decay']

    References:
      Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.
    """
    with hp.caller("adamw"):
        return chain(
            scale_by_adam(
                b1,
                b2,
                eps,
                eps_root,
                mu_dtype,
                nesterov=nesterov,
                nu_dtype=nu_dtype,
                eps_placement=eps_placement,
                momentum_decay=momentum_decay,
            ),
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate),
        )
