r"""Moving averages of gradient moments over pytrees, and their bias correction.

The building blocks of Adam-like optimizers, leaf by leaf: the exponential moving average
of a power of the gradients, of a power of their modulus, or of their maximum, and the
division by :math:`1 - \beta^t` that removes the bias of an average started at zero.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from optx._src.tree import is_none
from optx._src.tree_reduce import abs_sq

PyTree = Any


def complement_power(complement: ArrayLike, count: ArrayLike) -> jax.Array:
    r""":math:`1 - \beta^t` from :math:`c = 1 - \beta`, without cancellation.

    As ``-expm1(t * log1p(-c))`` it is exact to a few ulps for every :math:`\beta`, where
    ``1 - b**t`` loses the digits of ``b**t`` that cancel (all of them for :math:`t = 1`
    and :math:`\beta` near 1).
    """
    c = jnp.asarray(complement)
    return -jnp.expm1(jnp.asarray(count, c.dtype) * jnp.log1p(-c))


def update_moment(updates: PyTree, moments: PyTree, decay: ArrayLike, order: int) -> PyTree:
    r"""One step of the moving average of the ``order``-th power of the updates.

    .. math::
      m_t = (1 - \beta)\, g_t^{k} + \beta\, m_{t-1}

    with :math:`\beta` = ``decay`` and :math:`k` = ``order``. A ``None`` update (a
    parameter without a gradient) gives a ``None`` moment.

    Args:
      updates: the gradients :math:`g_t`, a pytree.
      moments: the moments :math:`m_{t-1}`, with the structure of ``updates``.
      decay: :math:`\beta`.
      order: :math:`k` (1 for the mean, 2 for the uncentred variance).

    Returns:
      The moments :math:`m_t`.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.update_moment({"a": jnp.array([2.0])}, {"a": jnp.array([1.0])}, 0.5, 2)
      {'a': Array([2.5], dtype=float32)}
    """
    return jax.tree.map(
        lambda g, m: None if g is None else (1 - decay) * (g**order) + decay * m,
        updates,
        moments,
        is_leaf=is_none,
    )


def _modulus_power(g: jax.Array, order: ArrayLike) -> jax.Array:
    """``|g|**order`` for complex ``g`` (through ``|g|**2``); ``g**order`` for real ``g``."""
    if jnp.isrealobj(g):
        return g**order
    half = order / 2
    # An integer exponent lowers to repeated multiplication, as for real leaves.
    if float(half).is_integer():
        half = int(half)
    return abs_sq(g) ** half


def update_moment_per_elem_norm(
    updates: PyTree, moments: PyTree, decay: ArrayLike, order: int
) -> PyTree:
    r"""One step of the moving average of the ``order``-th power of each element's modulus.

    .. math::
      m_t = (1 - \beta)\, |g_t|^{k} + \beta\, m_{t-1}

    For real updates :math:`|g|^k` is computed as :math:`g^k` (as `update_moment` does); for
    complex ones as :math:`(\bar g g)^{k/2}`, so that the moment is real.

    Args:
      updates: the gradients :math:`g_t`, a pytree (real or complex leaves).
      moments: the moments :math:`m_{t-1}`, with the structure of ``updates``.
      decay: :math:`\beta`.
      order: :math:`k`.

    Returns:
      The moments :math:`m_t`.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> g = {"a": jnp.array([3 + 4j])}
      >>> optx.tree.update_moment_per_elem_norm(g, {"a": jnp.zeros(1)}, 0.5, 2)
      {'a': Array([12.5], dtype=float32)}
    """
    return jax.tree.map(
        lambda g, m: None if g is None else (1 - decay) * _modulus_power(g, order) + decay * m,
        updates,
        moments,
        is_leaf=is_none,
    )


def update_infinity_moment(
    updates: PyTree, moments: PyTree, decay: ArrayLike, eps: ArrayLike
) -> PyTree:
    r"""One step of the decayed maximum of the updates' magnitudes (AdaMax's :math:`u_t`).

    .. math::
      u_t = \max(|g_t| + \epsilon,\ \beta\, u_{t-1})

    Args:
      updates: the gradients :math:`g_t`, a pytree.
      moments: :math:`u_{t-1}`, with the structure of ``updates``.
      decay: :math:`\beta`.
      eps: :math:`\epsilon`, added to :math:`|g_t|`.

    Returns:
      :math:`u_t` (``None`` where an update is ``None``).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.update_infinity_moment(
      ...     {"a": jnp.array([-1.0, 0.1])}, {"a": jnp.array([0.5, 2.0])}, 0.5, 0.0)
      {'a': Array([1., 1.], dtype=float32)}

    References:
      Kingma and Ba, `Adam: A Method for Stochastic Optimization
      <https://arxiv.org/abs/1412.6980>`_, ICLR 2015 (section 7.1).
    """
    return jax.tree.map(
        lambda g, u: None if g is None else jnp.maximum(jnp.abs(g) + eps, decay * u),
        updates,
        moments,
        is_leaf=is_none,
    )


def bias_correction(moment: PyTree, decay: ArrayLike, count: ArrayLike) -> PyTree:
    r"""Divides a moving average started at zero by :math:`1 - \beta^t`.

    .. math::
      \hat m_t = \frac{m_t}{1 - \beta^t}

    :math:`1 - \beta^t` is computed in float32 (or ``decay``'s wider dtype) without
    cancellation, as ``-expm1(t * log1p(-(1 - decay)))``, then cast to each leaf's dtype:
    a bfloat16 moment stays bfloat16, and ``decay**count`` never rounds to 1.

    Args:
      moment: :math:`m_t`, a pytree of arrays.
      decay: :math:`\beta`, in :math:`[0, 1)`.
      count: :math:`t`, the number of steps averaged (at least 1).

    Returns:
      :math:`\hat m_t`, each leaf in its dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.bias_correction({"a": jnp.array([0.1])}, 0.9, 1)
      {'a': Array([1.], dtype=float32)}

    References:
      Kingma and Ba, `Adam: A Method for Stochastic Optimization
      <https://arxiv.org/abs/1412.6980>`_, ICLR 2015 (section 3).
    """
    decay = jnp.asarray(decay)
    if not jnp.issubdtype(decay.dtype, jnp.floating):
        decay = decay.astype(jnp.float32)
    correction = complement_power(1 - decay, count)
    return jax.tree.map(lambda m: m / correction.astype(jnp.result_type(m)), moment)
