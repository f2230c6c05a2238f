"""Euclidean projections onto convex sets, as constraints: `Box`, `Simplex`, `L1Ball`, `L2Ball`.

Each maps an array to the closest point (in the L2 sense) of its set, computed per leaf on
the flattened array (in float32 at least), and is jit-able: the functions of
`optx.projections` applied to one leaf. Public as `optx.constraints`; use with
`optx.constrain` for projected gradient descent.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from optx._src.constraints import Constraint, compute_dtype, number
from optx._src.projection_fns import (
    projection_box,
    projection_l1_ball,
    projection_l2_ball,
    projection_simplex,
)


def _positive(api: str, scale: float) -> float:
    return number(api, "scale", scale, lambda v: v > 0 and math.isfinite(v), "> 0 and finite")


@dataclasses.dataclass(frozen=True)
class Box(Constraint):
    r"""Clips every element to ``[lower, upper]`` (optax's ``projection_box``, per leaf).

    .. math:: w \leftarrow \min(\max(w, l), u)

    Args:
      lower: :math:`l`, the lower bound (``-inf`` for none).
      upper: :math:`u \ge l`, the upper bound (``inf`` for none).

    Raises:
      ValueError: a bound is NaN, or ``lower`` exceeds ``upper``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.constraints.Box(-1.0, 1.0)(jnp.array([-3.0, 0.5, 2.0]))
      Array([-1. ,  0.5,  1. ], dtype=float32)
    """

    lower: float
    upper: float

    def __post_init__(self) -> None:
        low = number("Box", "lower", self.lower, lambda v: v < math.inf, "< inf")
        high = number("Box", "upper", self.upper, lambda v: v >= low, f">= lower ({low!r})")
        object.__setattr__(self, "lower", low)
        object.__setattr__(self, "upper", high)

    def __call__(self, w: jax.Array) -> jax.Array:
        w = jnp.asarray(w)
        return projection_box(w, self.lower, self.upper).astype(w.dtype)


@dataclasses.dataclass(frozen=True)
class Simplex(Constraint):
    r"""Projects the (flattened) array onto the simplex :math:`\{x \ge 0, \sum x = s\}`.

    .. math:: w \leftarrow \max(w - \tau, 0), \qquad \tau \text{ such that }
       \textstyle\sum \max(w - \tau, 0) = s

    with :math:`\tau` found by sorting (O(n log n)), so it is jit-able.

    Args:
      scale: :math:`s > 0`, the sum of the projection.

    Raises:
      ValueError: ``scale`` is not positive and finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.constraints.Simplex()(jnp.array([0.5, 1.0, -1.0]))
      Array([0.25, 0.75, 0.  ], dtype=float32)

    References:
      Held, Wolfe and Crowder, "Validation of subgradient optimization", Mathematical
      Programming, 1974. Duchi, Shalev-Shwartz, Singer and Chandra, "Efficient Projections
      onto the l1-Ball for Learning in High Dimensions", ICML 2008.
    """

    scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _positive("Simplex", self.scale))

    def __call__(self, w: jax.Array) -> jax.Array:
        w = jnp.asarray(w)
        return projection_simplex(w.astype(compute_dtype(w)), self.scale).astype(w.dtype)


@dataclasses.dataclass(frozen=True)
class L1Ball(Constraint):
    r"""Projects the (flattened) array onto the L1 ball :math:`\{\lVert x \rVert_1 \le s\}`.

    Inside the ball the array is unchanged; outside it is
    :math:`\mathrm{sign}(w)\,P_\Delta(\lvert w \rvert)`, with :math:`P_\Delta` the projection
    onto the simplex of sum :math:`s` (see `Simplex`).

    Args:
      scale: :math:`s > 0`, the radius.

    Raises:
      ValueError: ``scale`` is not positive and finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.constraints.L1Ball(2.0)(jnp.array([2.0, -1.0]))
      Array([ 1.5, -0.5], dtype=float32)

    References:
      Duchi, Shalev-Shwartz, Singer and Chandra, "Efficient Projections onto the l1-Ball
      for Learning in High Dimensions", ICML 2008.
    """

    scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _positive("L1Ball", self.scale))

    def __call__(self, w: jax.Array) -> jax.Array:
        w = jnp.asarray(w)
        return projection_l1_ball(w.astype(compute_dtype(w)), self.scale).astype(w.dtype)


@dataclasses.dataclass(frozen=True)
class L2Ball(Constraint):
    r"""Projects the (flattened) array onto the L2 ball :math:`\{\lVert x \rVert_2 \le s\}`.

    .. math:: w \leftarrow w \cdot \min(1, s / \lVert w \rVert_2)

    (computed as :math:`w\,s / \max(\lVert w \rVert_2, s)`, finite at :math:`w = 0`).

    Args:
      scale: :math:`s > 0`, the radius.

    Raises:
      ValueError: ``scale`` is not positive and finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.constraints.L2Ball()(jnp.array([3.0, 4.0]))
      Array([0.6, 0.8], dtype=float32)
    """

    scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _positive("L2Ball", self.scale))

    def __call__(self, w: jax.Array) -> jax.Array:
        w = jnp.asarray(w)
        return projection_l2_ball(w.astype(compute_dtype(w)), self.scale).astype(w.dtype)
