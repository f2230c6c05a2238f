"""NovoGrad: Adam-like moments with a per-layer second moment."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.algorithms.layerwise import _f32
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
    zero_count,
)
from optx._src.combine import Chain, chain
from optx._src.moments import abs_sq, adam_scalars, real_dtype, unzip, zeros_like
from optx._src.options import dtype_options
from optx._src.scaling import scale_by_learning_rate


class ScaleByNovogradState(NamedTuple):
    """State of `scale_by_novograd`: step count, first moments, per-leaf second moments."""

    count: jax.Array
    mu: Params
    nu: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByNovograd(Transform):
    """See `scale_by_novograd`."""

    name = "scale_by_novograd"
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.25, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    weight_decay: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    mu_dtype: Any = None
    nu_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "mu_dtype", "nu_dtype")

    def init(self, params: Params) -> ScaleByNovogradState:
        api = f"{self.name}.init"
        checks.float_params(api, params, complex_ok=True)
        checks.complex_slot(api, "mu_dtype", self.mu_dtype, params)
        # Each leaf's squared norm is real, also for a complex parameter.
        nu = jax.tree.map(
            lambda p: jnp.zeros((), real_dtype(self.nu_dtype or jnp.result_type(p))), params
        )
        return ScaleByNovogradState(
            zero_count(), zeros_like(params, self.mu_dtype), nu, self.init_hyperparams()
        )

    def update(
        self,
        updates: Updates,
        state: ScaleByNovogradState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByNovogradState]:
        del extra
        api = f"{self.name}.update"
        checks.same_tree(api, updates, state.mu, "updates", "the state")
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params")
        s = adam_scalars(state.hyperparams, state.count)
        wd = s.hyperparams["weight_decay"]
        first = s.count == 1

        def leaf(g: jax.Array, m: jax.Array, n: jax.Array, p: jax.Array) -> tuple[jax.Array, ...]:
            g32 = _f32(g)
            sq = jnp.sum(abs_sq(g32))
            # The first step starts both moments from the first gradient, not from zero.
            new_n = jnp.where(first, sq, s.b2 * n + s.c2 * sq).astype(n.dtype)
            root = jnp.sqrt(new_n.astype(real_dtype(g32.dtype)) + s.eps_root)
            step = g32 / (root + s.eps) + wd * p
            new_m = jnp.where(first, step, s.b1 * m + step).astype(m.dtype)
            return new_m.astype(g.dtype), new_m, new_n

        u, mu, nu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu, params), updates, 3)
        return u, ScaleByNovogradState(s.count, mu, nu, s.hyperparams)


def scale_by_novograd(
    b1: float = 0.9,
    b2: float = 0.25,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    weight_decay: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nu_dtype: DTypeLike | None = None,
) -> ScaleByNovograd:
    r"""NovoGrad's rescaling: gradients normalised by a per-layer second moment, then momentum.

    .. math::
       v_t = \beta_2 v_{t-1} + (1-\beta_2)\|g_t\|^2, \quad
       m_t = \beta_1 m_{t-1} + \frac{g_t}{\sqrt{v_t + \bar\epsilon} + \epsilon}
       + \lambda\theta, \quad u_t = m_t

    per leaf (:math:`v` is one scalar per leaf), with :math:`v_1 = \|g_1\|^2` and
    :math:`m_0 = 0`; :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``,
    :math:`\epsilon` = ``eps``, :math:`\bar\epsilon` = ``eps_root``, :math:`\lambda` =
    ``weight_decay``. The parameters are needed even without weight decay. A complex leaf's
    :math:`\|g\|^2 = \sum |g|^2` is real, as in optax (:math:`v` is kept in the real dtype).

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      weight_decay: :math:`\lambda \ge 0`.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.

    Returns:
      The transform; the five numbers are dynamic hyperparameters.

    Raises:
      ValueError: an argument is out of range.
      TypeError: a moment dtype is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_novograd()
      >>> params = {"w": jnp.zeros(2)}
      >>> updates, _ = tx.update({"w": jnp.array([3.0, 4.0])}, tx.init(params), params)
      >>> updates["w"]
      Array([0.6, 0.8], dtype=float32)

    References:
      Ginsburg, Castonguay, Hrinchuk, Kuchaiev, Lavrukhin, Leary, Li, Nguyen, Zhang and
      Cohen, "Stochastic Gradient Methods with Layer-wise Adaptive Moments for Training of
      Deep Networks", arXiv:1905.11286, 2019.
    """
    return ScaleByNovograd(b1, b2, eps, eps_root, weight_decay, mu_dtype, nu_dtype)


def novograd(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.25,
    eps: float = 1e-6,
    eps_root: float = 0.0,
    weight_decay: float = 0.0,
    *,
    mu_dtype: DTypeLike | None = None,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The NovoGrad optimizer: `scale_by_novograd` then `scale_by_learning_rate`.

    .. math:: \theta_t = \theta_{t-1} - \eta\,m_t

    with :math:`m_t` from `scale_by_novograd` and :math:`\eta` = ``learning_rate``.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the per-layer second moment, in [0, 1).
      eps: added outside the square root.
      eps_root: added inside the square root.
      weight_decay: added as ``weight_decay * params`` to the normalised gradient.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.

    Returns:
      ``chain(scale_by_novograd(...), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.novograd(0.1)
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     updates, state = tx.update(jax.grad(lambda p: jnp.sum(p**2))(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.1))
      True

    References:
      Ginsburg et al., "Stochastic Gradient Methods with Layer-wise Adaptive Moments for
      Training of Deep Networks", arXiv:1905.11286, 2019.
    """
    with hp.caller("novograd"):
        return chain(
            scale_by_novograd(b1, b2, eps, eps_root, weight_decay, mu_dtype, nu_dtype=nu_dtype),
            scale_by_learning_rate(learning_rate),
        )
