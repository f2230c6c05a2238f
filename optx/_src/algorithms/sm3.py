"""SM3, a memory-efficient adaptive method: `scale_by_sm3`, `sm3`."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, placement
from optx._src import hyperparams as hp
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.combine import Chain, chain
from optx._src.moments import abs_sq, adam_scalars, real_dtype, unzip, zeros_like
from optx._src.scaling import scale_by_learning_rate


class ScaleBySM3State(NamedTuple):
    """State of `scale_by_sm3`: per-axis accumulators, the momentum, hyperparameters.

    ``mu`` holds, for each parameter, a list with one vector per axis (the maxima of the
    accumulator over the other axes); a vector or a scalar parameter keeps one accumulator
    of its own shape. ``nu`` is the momentum of the preconditioned updates.
    """

    mu: Params
    nu: Params
    hyperparams: dict[str, jax.Array]


def _cover(p: Any) -> list[jax.Array]:
    """Zero accumulators of the row/column cover of ``p``: one vector per axis.

    In ``p``'s real dtype: they hold ``|g|**2``.
    """
    ndim, dtype = jnp.ndim(p), real_dtype(jnp.result_type(p))
    if ndim < 2:
        # A vector's (or scalar's) cover is its elements: one accumulator each.
        return [placement.zeros_like(p, dtype)]
    # Each on the sharding of the axis it covers.
    return [
        placement.zeros_without_axes(p, tuple(j for j in range(ndim) if j != i), dtype)
        for i in range(ndim)
    ]


def _broadcastable(v: jax.Array, axis: int, ndim: int) -> jax.Array:
    """The per-axis vector ``v`` reshaped to broadcast along every axis but ``axis``."""
    return jnp.reshape(v, [1] * axis + [v.shape[0]] + [1] * (ndim - axis - 1))


@transform
class ScaleBySM3(Transform):
    """See `scale_by_sm3`."""

    name = "scale_by_sm3"
    # b2 = 1 (the default) sums the squared gradients, as Adagrad does.
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(1.0, hp.UNIT_CLOSED, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)

    def init(self, params: Params) -> ScaleBySM3State:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        return ScaleBySM3State(
            jax.tree.map(_cover, params), zeros_like(params, None), self.init_hyperparams()
        )

    def update(
        self, updates: Updates, state: ScaleBySM3State, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleBySM3State]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.nu, "updates", "the state")
        s = adam_scalars(state.hyperparams, None)  # SM3 counts no steps
        b1, c1, b2, eps = s.b1, s.c1, s.b2, s.eps
        # b2 = 1 adds the full squared gradient (a sum), not (1 - b2) of it.
        c2 = jnp.where(s.c2 == 0, jnp.ones_like(s.c2), s.c2)

        def leaf(g: jax.Array, mu: list[jax.Array], nu: jax.Array) -> tuple[Any, ...]:
            dtype = jnp.promote_types(g.dtype, jnp.float32)
            g32, acc_dtype = g.astype(dtype), real_dtype(dtype)
            if g.ndim < 2:
                previous = mu[0].astype(acc_dtype)
            else:
                previous = functools.reduce(
                    jnp.minimum,
                    [_broadcastable(v.astype(acc_dtype), i, g.ndim) for i, v in enumerate(mu)],
                )
            acc = c2 * abs_sq(g32) + b2 * previous
            # 0/0 = 0: an element that never had a gradient does not move.
            scaled = g32 * jnp.where(acc > 0, jax.lax.rsqrt(acc + eps), 0.0)
            new_nu = c1 * scaled + b1 * nu.astype(dtype)
            if g.ndim < 2:
                new_mu = [acc]
            else:
                new_mu = [
                    jnp.max(acc, axis=tuple(a for a in range(g.ndim) if a != i))
                    for i in range(g.ndim)
                ]
            new_mu = [m.astype(v.dtype) for m, v in zip(new_mu, mu, strict=True)]
            return new_nu.astype(g.dtype), new_mu, new_nu.astype(nu.dtype)

        u, mu, nu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu), updates, 3)
        return u, ScaleBySM3State(mu, nu, s.hyperparams)


def scale_by_sm3(b1: float = 0.9, b2: float = 1.0, eps: float = 1e-8) -> ScaleBySM3:
    r"""Rescales updates by SM3's cover-based accumulators, then averages them (momentum).

    For a parameter of rank :math:`k \ge 2`, SM3 keeps one vector :math:`\mu^{(r)}` per axis
    :math:`r` (the row/column cover), not one accumulator per element:

    .. math::
       \nu_t(i) = c\,g_t(i)^2 + \beta_2 \min_{r} \mu^{(r)}_{t-1}(i_r), \quad
       \mu^{(r)}_t(j) = \max_{i : i_r = j} \nu_t(i), \\
       s_t = g_t / \sqrt{\nu_t + \epsilon} \ (0 \text{ where } \nu_t = 0), \quad
       m_t = \beta_1 m_{t-1} + (1 - \beta_1)\,s_t, \quad u_t = m_t

    with :math:`c = 1` if :math:`\beta_2 = 1` (SM3-II: a running sum, the default) and
    :math:`c = 1 - \beta_2` otherwise; :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``,
    :math:`\epsilon` = ``eps``. A vector or a scalar parameter keeps one accumulator per
    element (:math:`\mu_t = \nu_t`), which is Adagrad with momentum. Memory: the sum of the
    axis lengths per matrix, instead of their product. The arithmetic runs in at least
    float32; accumulators are kept in each parameter's dtype. For complex parameters
    :math:`g_t(i)^2` is :math:`|g_t(i)|^2`: the accumulators are real (in the real dtype),
    the momentum and the update complex.

    Args:
      b1: decay of the momentum of the rescaled updates, in [0, 1).
      b2: decay of the squared gradients, in [0, 1]; 1 sums them.
      eps: added to the accumulator inside the square root, >= 0.

    Returns:
      The transform. ``b1``, ``b2`` and ``eps`` are dynamic hyperparameters.

    Raises:
      ValueError: ``b1`` is outside [0, 1), ``b2`` outside [0, 1], or ``eps`` negative.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_sm3()
      >>> state = tx.init({"w": jnp.zeros((2, 2))})
      >>> updates, state = tx.update({"w": jnp.array([[3.0, 0.0], [0.0, -4.0]])}, state)
      >>> updates
      {'w': Array([[ 0.1,  0. ],
             [ 0. , -0.1]], dtype=float32)}
      >>> state.mu["w"]  # the row and column maxima of the squared gradients
      [Array([ 9., 16.], dtype=float32), Array([ 9., 16.], dtype=float32)]

    References:
      Anil, Gupta, Koren and Singer, "Memory-Efficient Adaptive Optimization",
      NeurIPS 2019.
    """
    return ScaleBySM3(b1, b2, eps)


def sm3(learning_rate: ScalarOrSchedule, momentum: float = 0.9) -> Chain:
    r"""The SM3 optimizer: `scale_by_sm3` then `scale_by_learning_rate`.

    .. math:: \theta_t = \theta_{t-1} - \eta\,m_t

    with :math:`m_t` the momentum of the SM3-rescaled gradients (see `scale_by_sm3`, whose
    ``b1`` is ``momentum`` and ``b2 = 1``).

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule (optax's `sm3`
        takes a number only; the numerics for a number are the same).
      momentum: decay of the momentum, in [0, 1); kept in the state as ``b1``.

    Returns:
      ``chain(scale_by_sm3(b1=momentum), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: ``learning_rate`` is negative or ``momentum`` is outside [0, 1).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([[1.0, -2.0], [0.5, 3.0]])
      >>> tx = optx.sm3(0.5)
      >>> state = tx.init(params)
      >>> for _ in range(200):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.1))
      True

    References:
      Anil, Gupta, Koren and Singer, "Memory-Efficient Adaptive Optimization",
      NeurIPS 2019.
    """
    with hp.caller("sm3"):
        momentum = hp.validate("sm3", "momentum", momentum, hp.UNIT_OPEN)
        return chain(scale_by_sm3(b1=momentum), scale_by_learning_rate(learning_rate))
