"""The Adam family: `scale_by_adam`, `adam`, `adamw`."""

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
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import Chain, MaskSpec, chain
from optx._src.momentum import zeros_like
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights


class ScaleByAdamState(NamedTuple):
    """State of `scale_by_adam`: step count, first and second moments, hyperparameters."""

    count: jax.Array
    mu: Params
    nu: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByAdam(Transform):
    """See `scale_by_adam`."""

    name = "scale_by_adam"
    hyperparams = ("b1", "b2", "eps", "eps_root")
    decays = ("b1", "b2")
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    eps_root: float = 0.0
    mu_dtype: Any = None
    nesterov: bool = False
    nu_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for field in ("mu_dtype", "nu_dtype"):
            dtype = checks.dtype_option(self.name, field, getattr(self, field))
            object.__setattr__(self, field, dtype)

    def init(self, params: Params) -> ScaleByAdamState:
        checks.float_params(f"{self.name}.init", params)
        return ScaleByAdamState(
            zero_count(),
            zeros_like(params, self.mu_dtype),
            zeros_like(params, self.nu_dtype),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: ScaleByAdamState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByAdamState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        h = state.hyperparams
        b1, c1 = hp.value(h, "b1"), hp.one_minus(h, "b1")
        b2, c2 = hp.value(h, "b2"), hp.one_minus(h, "b2")
        eps, eps_root = h["eps"], h["eps_root"]
        count = safe_increment(state.count)
        # Bias corrections are scalars, computed once per step rather than per leaf.
        bc1 = hp.bias_correction(h, "b1", count)
        bc2 = hp.bias_correction(h, "b2", count)
        bc1_next = hp.bias_correction(h, "b1", safe_increment(count))

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, ...]:
            new_m = c1 * g + b1 * m
            new_v = c2 * jnp.square(g) + b2 * v
            nesterov = b1 * (new_m / bc1_next) + c1 * (g / bc1) if self.nesterov else None
            m_hat = new_m / bc1 if nesterov is None else nesterov
            u = m_hat / (jnp.sqrt(new_v / bc2 + eps_root) + eps)
            return u.astype(g.dtype), new_m.astype(m.dtype), new_v.astype(v.dtype)

        treedef = jax.tree.structure(updates)
        triples = treedef.flatten_up_to(jax.tree.map(leaf, updates, state.mu, state.nu))
        u, mu, nu = (jax.tree.unflatten(treedef, [t[i] for t in triples]) for i in range(3))
        return u, ScaleByAdamState(count, mu, nu, h)


def scale_by_adam(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = False,
    nu_dtype: DTypeLike | None = None,
) -> ScaleByAdam:
    r"""Rescales updates by Adam's bias-corrected moment estimates.

    .. math::
       m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad
       v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2, \\
       \hat m_t = m_t / (1-\beta_1^t), \quad \hat v_t = v_t / (1-\beta_2^t), \quad
       u_t = \hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon)

    with :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``, :math:`\epsilon` = ``eps``
    and :math:`\bar\epsilon` = ``eps_root``. With ``nesterov=True``,
    :math:`\hat m_t = \beta_1 m_t / (1-\beta_1^{t+1}) + (1-\beta_1) g_t / (1-\beta_1^t)`
    (NAdam). The arithmetic runs in at least float32 whatever the moments' dtypes.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nesterov: use Nesterov momentum (NAdam).
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.

    Returns:
      The transform. ``b1``, ``b2``, ``eps`` and ``eps_root`` are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), or ``eps`` / ``eps_root`` is negative.
      TypeError: a moment dtype is not a floating dtype.

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
    return ScaleByAdam(b1, b2, eps, eps_root, mu_dtype, nesterov, nu_dtype)


def adam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = False,
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
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nesterov: use Nesterov momentum (NAdam).

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
            scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
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
            scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate),
        )
