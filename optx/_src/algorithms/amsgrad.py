"""AMSGrad: Adam with a running maximum of the second moment."""

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
from optx._src.combine import Chain, chain
from optx._src.moments import (
    abs_sq,
    adam_scalars,
    real_zeros_like,
    second_moment_scalars,
    unzip,
    zeros_like,
)
from optx._src.options import dtype_options, eps_placement_option, flag_options
from optx._src.scaling import scale_by_learning_rate


class ScaleByAmsgradState(NamedTuple):
    """State of `scale_by_amsgrad`: step count, moments, maximum of ``nu``, hyperparameters."""

    count: jax.Array
    mu: Params
    nu: Params
    nu_max: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByAmsgrad(Transform):
    """See `scale_by_amsgrad`."""

    name = "scale_by_amsgrad"
    elementwise = True
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    mu_dtype: Any = None
    bias_correction_mu: bool = True
    bias_correction_nu: bool = True
    nu_dtype: Any = None
    eps_placement: str = "optax"

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "mu_dtype", "nu_dtype")
        flag_options(self, "bias_correction_mu", "bias_correction_nu")
        eps_placement_option(self.name, self.eps_placement)

    def init(self, params: Params) -> ScaleByAmsgradState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        checks.complex_slot(f"{self.name}.init", "mu_dtype", self.mu_dtype, params)
        return ScaleByAmsgradState(
            zero_count(),
            zeros_like(params, self.mu_dtype),
            real_zeros_like(params, self.nu_dtype),
            real_zeros_like(params, self.nu_dtype),
            self.init_hyperparams(),
        )

    def update(
        self,
        updates: Updates,
        state: ScaleByAmsgradState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByAmsgradState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        s = adam_scalars(state.hyperparams, state.count)
        k_m = 1 / s.bias_correction("b1") if self.bias_correction_mu else None
        k_v = None
        if self.bias_correction_nu:
            # Keras: the maximum of the raw v; its correction is the scalar sqrt(1 - b2^t) on m.
            k_m, _, k_v = second_moment_scalars(s, self.eps_placement, k_m)

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array, v_max: jax.Array) -> tuple:
            new_m = s.c1 * g + s.b1 * m
            new_v = s.c2 * abs_sq(g) + s.b2 * v
            new_max = jnp.maximum(v_max, new_v if k_v is None else new_v * k_v)
            m_hat = new_m if k_m is None else new_m * k_m
            u = m_hat / (jnp.sqrt(new_max + s.eps_root) + s.eps)
            return (
                u.astype(g.dtype),
                new_m.astype(m.dtype),
                new_v.astype(v.dtype),
                new_max.astype(v_max.dtype),
            )

        tuples = jax.tree.map(leaf, updates, state.mu, state.nu, state.nu_max)
        u, mu, nu, nu_max = unzip(tuples, updates, 4)
        return u, ScaleByAmsgradState(s.count, mu, nu, nu_max, s.hyperparams)


def scale_by_amsgrad(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
    *,
    nu_dtype: DTypeLike | None = None,
    eps_placement: str = "optax",
) -> ScaleByAmsgrad:
    r"""Rescales updates by AMSGrad: Adam with the running maximum of the second moment.

    .. math::
       m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad
       v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2, \\
       \hat v^{\max}_t = \max(\hat v^{\max}_{t-1}, v_t / (1-\beta_2^t)), \quad
       u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{\hat v^{\max}_t + \bar\epsilon} + \epsilon}

    with :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``, :math:`\epsilon` = ``eps``
    and :math:`\bar\epsilon` = ``eps_root``; ``bias_correction_mu=False`` drops
    :math:`1-\beta_1^t` and ``bias_correction_nu=False`` drops :math:`1-\beta_2^t` (the
    original AMSGrad).

    ``eps_placement="keras"`` is Keras's and TF's ``amsgrad=True``: the maximum is over the
    raw :math:`v_t`, :math:`v^{\max}_t = \max(v^{\max}_{t-1}, v_t)`, and the bias
    corrections become the scalar :math:`\alpha_t = \sqrt{1-\beta_2^t}/(1-\beta_1^t)`:
    :math:`u_t = \alpha_t m_t / (\sqrt{v^{\max}_t + \bar\epsilon} + \epsilon)`. Early in
    training the raw :math:`v_t` grows from zero, so the two maxima differ.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      bias_correction_mu: divide the first moment by :math:`1-\beta_1^t`.
      bias_correction_nu: correct the second moment by :math:`1-\beta_2^t`.
      nu_dtype: dtype of the second moment and of its maximum; ``None`` uses each
        parameter's dtype.
      eps_placement: ``"optax"`` or ``"keras"``.

    Returns:
      The transform. ``b1``, ``b2``, ``eps`` and ``eps_root`` are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), ``eps`` or ``eps_root`` is negative, or
        ``eps_placement`` is unknown.
      TypeError: a moment dtype is not a floating dtype, or a bias-correction flag is not a
        bool.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_amsgrad()
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([2.0, -3.0])}, state)
      >>> updates
      {'w': Array([ 1., -1.], dtype=float32)}

    References:
      Reddi, Kale and Kumar, "On the Convergence of Adam and Beyond", ICLR 2018.
    """
    return ScaleByAmsgrad(
        b1,
        b2,
        eps,
        eps_root,
        mu_dtype,
        bias_correction_mu,
        bias_correction_nu,
        nu_dtype,
        eps_placement,
    )


def amsgrad(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
    *,
    nu_dtype: DTypeLike | None = None,
    eps_placement: str = "optax",
) -> Chain:
    r"""The AMSGrad optimizer: `scale_by_amsgrad` then `scale_by_learning_rate`.

    .. math:: \theta_t = \theta_{t-1} - \eta\,\hat m_t / (\sqrt{\hat v^{\max}_t +
       \bar\epsilon} + \epsilon)

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      bias_correction_mu: divide the first moment by :math:`1-\beta_1^t`.
      bias_correction_nu: correct the second moment by :math:`1-\beta_2^t`.
      nu_dtype: dtype of the second moment and its maximum.
      eps_placement: ``"optax"``, or ``"keras"`` for Keras's ``Adam(amsgrad=True)``
        numerics (see `scale_by_amsgrad`).

    Returns:
      ``chain(scale_by_amsgrad(...), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_amsgrad`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.amsgrad(0.1)
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.2))
      True

    References:
      Reddi, Kale and Kumar, "On the Convergence of Adam and Beyond", ICLR 2018.
    """
    with hp.caller("amsgrad"):
        return chain(
            scale_by_amsgrad(
                b1,
                b2,
                eps,
                eps_root,
                mu_dtype,
                bias_correction_mu,
                bias_correction_nu,
                nu_dtype=nu_dtype,
                eps_placement=eps_placement,
            ),
            scale_by_learning_rate(learning_rate),
        )
