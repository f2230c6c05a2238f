"""ADOPT: Adam with the second moment taken one step late, `scale_by_adopt` and `adopt`."""

from __future__ import annotations

from collections.abc import Callable
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
from optx._src.moments import abs_sq, adam_scalars, real_zeros_like, unzip, zeros_like
from optx._src.options import dtype_options, flag_options
from optx._src.scaling import scale_by_learning_rate


def quarter_power(count: jax.Array) -> jax.Array:
    """ADOPT's default clipping bound at step ``count`` (0 first): ``count ** 0.25``."""
    return jnp.asarray(count, jnp.float32) ** 0.25


class ScaleByAdoptState(NamedTuple):
    """State of `scale_by_adopt`: step count, first and second moments, hyperparameters."""

    count: jax.Array
    mu: Params
    nu: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByAdopt(Transform):
    """See `scale_by_adopt`."""

    name = "scale_by_adopt"
    elementwise = True
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.9999, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-6, hp.NONNEG)
    mu_dtype: Any = None
    nesterov: bool = False
    use_clipping: bool = True
    clip_value_fn: Callable[[jax.Array], jax.Array] = quarter_power
    nu_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "mu_dtype", "nu_dtype")
        flag_options(self, "nesterov", "use_clipping")
        if not callable(self.clip_value_fn):
            raise TypeError(
                f"`{hp.current(self.name)}` needs clip_value_fn to be a callable step -> "
                f"bound. Received: clip_value_fn={self.clip_value_fn!r}."
            )

    def init(self, params: Params) -> ScaleByAdoptState:
        # The clip to [-bound, bound] has no complex counterpart (JAX refuses it, as optax's).
        checks.float_params(f"{self.name}.init", params, complex_ok=not self.use_clipping)
        checks.complex_slot(f"{self.name}.init", "mu_dtype", self.mu_dtype, params)
        mu, nu = zeros_like(params, self.mu_dtype), real_zeros_like(params, self.nu_dtype)
        return ScaleByAdoptState(zero_count(), mu, nu, self.init_hyperparams())

    def update(
        self, updates: Updates, state: ScaleByAdoptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByAdoptState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        s = adam_scalars(state.hyperparams, state.count)
        first = state.count == 0
        # The first step only records g^2: nu = g^2 (b2 -> 0) and the momentum keeps its
        # zeros (b1 -> 1), so the first update is zero.
        b1, c1 = jnp.where(first, 1.0, s.b1), jnp.where(first, 0.0, s.c1)
        b2, c2 = jnp.where(first, 0.0, s.b2), jnp.where(first, 1.0, s.c2)
        eps = s.eps
        bound = jnp.asarray(self.clip_value_fn(state.count), jnp.float32)

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, ...]:
            # Normalised by the second moment *before* this gradient enters it.
            scaled = g / jnp.maximum(jnp.sqrt(v), eps)
            if self.use_clipping:
                scaled = jnp.clip(scaled, -bound, bound)
            new_m = c1 * scaled + b1 * m
            new_v = c2 * abs_sq(g) + b2 * v
            u = c1 * scaled + b1 * new_m if self.nesterov else new_m
            return u.astype(g.dtype), new_m.astype(m.dtype), new_v.astype(v.dtype)

        u, mu, nu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu), updates, 3)
        return u, ScaleByAdoptState(s.count, mu, nu, s.hyperparams)


def scale_by_adopt(
    b1: float = 0.9,
    b2: float = 0.9999,
    eps: float = 1e-6,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[jax.Array], jax.Array] = quarter_power,
    nu_dtype: DTypeLike | None = None,
) -> ScaleByAdopt:
    r"""Rescales updates by ADOPT: the gradient is normalised by the *previous* second moment.

    .. math::
       \tilde g_t = \operatorname{clip}\bigl(g_t / \max(\sqrt{v_{t-1}}, \epsilon),
       \ -c(t-1),\ c(t-1)\bigr), \\
       m_t = \beta_1 m_{t-1} + (1-\beta_1)\,\tilde g_t, \qquad
       v_t = \beta_2 v_{t-1} + (1-\beta_2)\,g_t^2, \qquad u_t = m_t

    (:math:`u_t = \beta_1 m_t + (1-\beta_1)\tilde g_t` with Nesterov), for :math:`t \ge 2`.
    The first step only initialises :math:`v_1 = g_1^2` and returns a zero update
    (:math:`m_1 = 0`). :math:`\beta_1, \beta_2, \epsilon` are ``b1``, ``b2``, ``eps``; the
    bound :math:`c` is ``clip_value_fn`` of the step count (0 on the first update), by
    default :math:`c(k) = k^{1/4}`. Decoupling :math:`v_{t-1}` from :math:`g_t` is what
    lets ADOPT converge for any :math:`\beta_2`. No bias correction is needed: the first
    moment starts after the second has a value.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: lower bound of :math:`\sqrt{v}`, >= 0.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nesterov: use Nesterov momentum.
      use_clipping: clip the normalised gradient to :math:`[-c, c]` (recommended when
        training from scratch).
      clip_value_fn: the bound :math:`c` as a function of the int32 step count.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.

    Returns:
      The transform. ``b1``, ``b2`` and ``eps`` are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), or ``eps`` is negative.
      TypeError: a moment dtype is not floating, a flag is not a bool, or
        ``clip_value_fn`` is not callable.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_adopt()
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> for _ in range(2):
      ...     updates, state = tx.update({"w": jnp.array([2.0, -3.0])}, state)
      >>> updates
      {'w': Array([ 0.1, -0.1], dtype=float32)}

    References:
      Taniguchi, Harada, Minegishi, Oshima, Jeong, Nagahara, Iiyama, Suzuki, Iwasawa and
      Matsuo, "ADOPT: Modified Adam Can Converge with Any :math:`\beta_2` with the Optimal
      Rate", NeurIPS 2024.
    """
    return ScaleByAdopt(b1, b2, eps, mu_dtype, nesterov, use_clipping, clip_value_fn, nu_dtype)


def adopt(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.9999,
    eps: float = 1e-6,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[jax.Array], jax.Array] = quarter_power,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The ADOPT optimizer: `scale_by_adopt` then `scale_by_learning_rate`.

    .. math:: \theta_t = \theta_{t-1} - \eta_t\, m_t

    with :math:`m_t` of `scale_by_adopt` (zero on the first step).

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: lower bound of :math:`\sqrt{v}`, >= 0.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nesterov: use Nesterov momentum.
      use_clipping: clip the normalised gradient (see `scale_by_adopt`).
      clip_value_fn: the clipping bound as a function of the step count.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.

    Returns:
      ``chain(scale_by_adopt(...), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_adopt`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.adopt(0.1)
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(100):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.05)  # from 5.0
      True

    References:
      Taniguchi et al., "ADOPT: Modified Adam Can Converge with Any :math:`\beta_2` with the
      Optimal Rate", NeurIPS 2024.
    """
    with hp.caller("adopt"):
        return chain(
            scale_by_adopt(
                b1,
                b2,
                eps,
                mu_dtype,
                nesterov=nesterov,
                use_clipping=use_clipping,
                clip_value_fn=clip_value_fn,
                nu_dtype=nu_dtype,
            ),
            scale_by_learning_rate(learning_rate),
        )
