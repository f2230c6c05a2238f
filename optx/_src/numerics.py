r"""Norms bounded below with finite gradients, and saturating counters.

:math:`\max(\|x\|, m)` has a NaN gradient at :math:`x = 0` under `jax.grad` (the norm's
square root is differentiated there even though the maximum discards it). `safe_norm` and
`safe_root_mean_squares` evaluate the norm of a stand-in where the bound wins, so the
gradient there is 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from optx._src import checks
from optx._src.base import safe_increment
from optx._src.tree_reduce import abs_sq

# optax's earlier name; the same function (it saturates every integer and float dtype).
safe_int32_increment = safe_increment


def safe_norm(
    x: ArrayLike,
    min_norm: ArrayLike,
    ord: int | float | str | None = None,
    axis: tuple[int, ...] | int | None = None,
    keepdims: bool = False,
) -> jax.Array:
    r"""``max(norm(x), min_norm)`` whose gradient is 0, not NaN, where ``min_norm`` wins.

    .. math::
      \max(\|x\|_{\mathrm{ord}}, m)

    Args:
      x: an array.
      min_norm: :math:`m`, the lower bound.
      ord: the order of the norm, as `jax.numpy.linalg.norm` takes it (``None``: the
        2-norm of a vector, Frobenius of a matrix).
      axis: the axis (or pair of axes) to take norms over; ``None``: all of ``x``.
      keepdims: keep the reduced axes with size one.

    Returns:
      The bounded norm(s).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> float(optx.safe_norm(jnp.array([3.0, 4.0]), 1.0))
      5.0
      >>> jax.grad(lambda x: optx.safe_norm(x, 1e-3))(jnp.zeros(2))
      Array([0., 0.], dtype=float32)
    """
    keepdims = checks.flag("safe_norm", "keepdims", keepdims)
    x = jnp.asarray(x)
    norm = jnp.linalg.norm(x, ord=ord, axis=axis, keepdims=True)
    small = norm <= min_norm
    stand_in = jnp.where(small, jnp.ones_like(x), x)
    if not keepdims:
        small = jnp.squeeze(small, axis=axis)
    return jnp.where(
        small, min_norm, jnp.linalg.norm(stand_in, ord=ord, axis=axis, keepdims=keepdims)
    )


def safe_root_mean_squares(x: ArrayLike, min_rms: ArrayLike) -> jax.Array:
    r"""``max(rms(x), min_rms)`` whose gradient is 0, not NaN, where ``min_rms`` wins.

    .. math::
      \max\Big(\sqrt{\tfrac{1}{n} \textstyle\sum_i |x_i|^2},\ m\Big)

    Args:
      x: an array (real or complex).
      min_rms: :math:`m`, the lower bound.

    Returns:
      A scalar.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> float(optx.safe_root_mean_squares(jnp.array([1.0, 7.0]), 1e-3))
      5.0
    """
    x = jnp.asarray(x)
    small = jnp.sqrt(jnp.mean(abs_sq(x))) <= min_rms
    stand_in = jnp.where(small, jnp.ones_like(x), x)
    return jnp.where(small, min_rms, jnp.sqrt(jnp.mean(abs_sq(stand_in))))
