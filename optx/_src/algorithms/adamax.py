"""AdaMax: Adam with the infinity norm in place of the second moment."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.algorithms.adam import ScaleByAdamState, adam_state_init
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
)
from optx._src.combine import Chain, MaskSpec, chain
from optx._src.moments import adam_scalars, unzip
from optx._src.options import dtype_options, eps_placement_option
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights


@transform
class ScaleByAdamax(Transform):
    """See `scale_by_adamax`."""

    name = "scale_by_adamax"
    elementwise = True
    # b2 scales a maximum, not an average: it is stored as it is.
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    eps_placement: str = "optax"
    mu_dtype: Any = None
    nu_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        eps_placement_option(self.name, self.eps_placement)
        dtype_options(self, "mu_dtype", "nu_dtype")

    init = adam_state_init

    def update(
        self, updates: Updates, state: ScaleByAdamState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByAdamState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        s = adam_scalars(state.hyperparams, state.count)
        k_m = 1 / s.bias_correction("b1")
        keras = self.eps_placement == "keras"

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, ...]:
            new_m = s.c1 * g + s.b1 * m
            if keras:
                new_v = jnp.maximum(s.b2 * v, jnp.abs(g))
                u = new_m * k_m / (new_v + s.eps)
            else:
                new_v = jnp.maximum(s.b2 * v, jnp.abs(g) + s.eps)
                u = new_m * k_m / new_v
            return u.astype(g.dtype), new_m.astype(m.dtype), new_v.astype(v.dtype)

        u, mu, nu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu), updates, 3)
        return u, ScaleByAdamState(s.count, mu, nu, s.hyperparams)


def scale_by_adamax(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    *,
    eps_placement: str = "optax",
    mu_dtype: DTypeLike | None = None,
    nu_dtype: DTypeLike | None = None,
) -> ScaleByAdamax:
    r"""Rescales updates by AdaMax: the first moment over an exponentially weighted maximum.

    .. math::
       m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad
       v_t = \max(\beta_2 v_{t-1}, |g_t| + \epsilon), \quad
       u_t = \frac{m_t}{(1-\beta_1^t)\, v_t}

    with :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2`` and :math:`\epsilon` =
    ``eps``. With ``eps_placement="keras"`` (Keras and TF), :math:`\epsilon` is added in
    the denominator rather than inside the maximum, where it accumulates:
    :math:`v_t = \max(\beta_2 v_{t-1}, |g_t|)`, :math:`u_t = m_t / ((1-\beta_1^t)
    (v_t + \epsilon))`. Both libraries keep :math:`v` under the name ``nu``.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the infinity norm, in [0, 1).
      eps: >= 0, see above.
      eps_placement: ``"optax"`` (inside the maximum) or ``"keras"`` (in the denominator).
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the infinity norm; ``None`` uses each parameter's dtype.

    Returns:
      The transform (its state is `ScaleByAdamState`). ``b1``, ``b2`` and ``eps`` are
      dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), ``eps`` is negative, or ``eps_placement`` is
        unknown.
      TypeError: a moment dtype is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_adamax(eps=0.0)
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -3.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates
      {'w': Array([ 1., -1.], dtype=float32)}

    References:
      Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015 (section 7).
    """
    return ScaleByAdamax(b1, b2, eps, eps_placement, mu_dtype, nu_dtype)


def adamax(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    *,
    eps_placement: str = "optax",
    mu_dtype: DTypeLike | None = None,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The AdaMax optimizer: `scale_by_adamax` then `scale_by_learning_rate`.

    .. math:: \theta_t = \theta_{t-1} - \eta\,\frac{m_t}{(1-\beta_1^t)\, v_t}

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the infinity norm, in [0, 1).
      eps: >= 0, inside the maximum (optax) or in the denominator (Keras).
      eps_placement: ``"optax"`` or ``"keras"`` (see `scale_by_adamax`).
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the infinity norm; ``None`` uses each parameter's dtype.

    Returns:
      ``chain(scale_by_adamax(...), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_adamax`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.adamax(0.1)
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.2))
      True

    References:
      Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015 (section 7).
    """
    with hp.caller("adamax"):
        return chain(
            scale_by_adamax(
                b1, b2, eps, eps_placement=eps_placement, mu_dtype=mu_dtype, nu_dtype=nu_dtype
            ),
            scale_by_learning_rate(learning_rate),
        )


def adamaxw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 1e-4,
    mask: MaskSpec | None = None,
    *,
    eps_placement: str = "optax",
    mu_dtype: DTypeLike | None = None,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
    r"""AdaMax with decoupled weight decay (AdaMaxW).

    .. math:: \theta_t = \theta_{t-1} - \eta\,\Bigl(\frac{m_t}{(1-\beta_1^t)\, v_t}
       + \lambda\,\theta_{t-1}\Bigr)

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the infinity norm, in [0, 1).
      eps: >= 0, inside the maximum (optax) or in the denominator (Keras).
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay (see `add_decayed_weights`); ``None`` decays all.
      eps_placement: ``"optax"`` or ``"keras"`` (see `scale_by_adamax`).
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the infinity norm; ``None`` uses each parameter's dtype.

    Returns:
      ``chain(scale_by_adamax(...), add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones(2)}
      >>> tx = optx.adamaxw(0.1, weight_decay=0.5)
      >>> updates, _ = tx.update({"w": jnp.zeros(2)}, tx.init(params), params)
      >>> updates
      {'w': Array([-0.05, -0.05], dtype=float32)}

    References:
      Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015;
      Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.
    """
    with hp.caller("adamaxw"):
        return chain(
            scale_by_adamax(
                b1, b2, eps, eps_placement=eps_placement, mu_dtype=mu_dtype, nu_dtype=nu_dtype
            ),
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate),
        )
