r"""Euclidean projections of a pytree onto convex sets (public as `optx.projections`).

Each function returns :math:`\arg\min_{p \in S} \lVert x - p \rVert_2`, the point of a set
:math:`S` closest to the tree :math:`x`, where the tree is seen as one flat vector (the
simplex and the balls constrain all leaves together). They are pure and jit-able; the
constraints `optx.constraints.Box`, `Simplex`, `L1Ball` and `L2Ball` apply them per leaf.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import flatten_util
from jax.typing import ArrayLike

from optx._src import tree as tree_lib
from optx._src import tree_reduce
from optx._src.tree import path_name


def _check(api: str, name: str, value: Any, positive: bool = True) -> None:
    """A Python radius must be > 0 (``>= 0`` where ``not positive``); arrays pass as given."""
    if isinstance(value, numbers.Real | np.number) and not isinstance(value, bool):
        v = float(value)
        if math.isnan(v) or v < 0 or (positive and v == 0):
            needs = "> 0" if positive else ">= 0"
            raise ValueError(f"`{api}` needs {name} {needs}. Received: {name}={value!r}.")


def _is_leaf_value(x: Any) -> bool:
    return jax.tree_util.treedef_is_leaf(jax.tree.structure(x)) and x is not None


def _bound(bound: Any, tree: Any) -> Any:
    """``bound`` for every leaf of ``tree``: a scalar repeated, else a tree of its shape."""
    if _is_leaf_value(bound) and not _is_leaf_value(tree):
        return jax.tree.map(lambda _: bound, tree)
    return bound


def projection_non_negative(tree: Any) -> Any:
    r"""Projection onto the non-negative orthant: :math:`p = \max(x, 0)` elementwise.

    Args:
      tree: the tree to project.

    Returns:
      The projection, with the structure of ``tree``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_non_negative({"w": jnp.array([-1.0, 2.0])})
      {'w': Array([0., 2.], dtype=float32)}
    """
    return jax.tree.map(jax.nn.relu, tree)


def projection_box(tree: Any, lower: Any, upper: Any) -> Any:
    r"""Projection onto the box :math:`\{l \le p \le u\}`: :math:`p = \min(\max(x, l), u)`.

    Args:
      tree: the tree to project.
      lower: :math:`l`, a scalar or a tree of the structure of ``tree``.
      upper: :math:`u`, a scalar or a tree of the structure of ``tree``.

    Returns:
      The projection, with the structure of ``tree``.

    Raises:
      ValueError: ``lower`` exceeds ``upper`` (both Python numbers).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_box({"w": jnp.array([-3.0, 0.5, 2.0])}, -1.0, 1.0)
      {'w': Array([-1. ,  0.5,  1. ], dtype=float32)}
    """
    numeric = (numbers.Real, np.number)
    if isinstance(lower, numeric) and isinstance(upper, numeric) and not lower <= upper:
        raise ValueError(
            f"`projection_box` needs lower <= upper. Received: lower={lower!r}, upper={upper!r}."
        )
    return jax.tree.map(jnp.clip, tree, _bound(lower, tree), _bound(upper, tree))


def projection_hypercube(tree: Any, scale: Any = 1) -> Any:
    r"""Projection onto the hypercube :math:`\{0 \le p \le s\}` (`projection_box`).

    Args:
      tree: the tree to project.
      scale: :math:`s \ge 0`, a scalar or a tree of the structure of ``tree``.

    Returns:
      The projection, with the structure of ``tree``.

    Raises:
      ValueError: ``scale`` is a negative or NaN number.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_hypercube(jnp.array([-0.5, 0.5, 1.5]))
      Array([0. , 0.5, 1. ], dtype=float32)
    """
    _check("projection_hypercube", "scale", scale, positive=False)
    return projection_box(tree, 0, scale)


@jax.custom_jvp
def _unit_simplex(x: jax.Array) -> jax.Array:
    r"""Projection of a vector onto :math:`\{p \ge 0, \sum p = 1\}` (Held et al.).

    :math:`p = \max(x - \tau, 0)`: with :math:`u` sorted decreasingly, the support holds the
    :math:`k` largest entries for the largest :math:`k` with
    :math:`u_k > (\sum_{j \le k} u_j - 1) / k` (always true for :math:`k = 1`), and
    :math:`\tau = (\sum_{j \le k} u_j - 1) / k`.
    """
    u = jnp.sort(x)[::-1]
    excess = jnp.cumsum(u) - 1
    k = jnp.arange(1, x.size + 1, dtype=x.dtype)
    # The largest k that satisfies the condition (it holds for a prefix of k, in exact
    # arithmetic; the largest index stays right where round-off breaks the prefix).
    last = jnp.max(jnp.where(u - excess / k > 0, jnp.arange(x.size), 0))
    tau = excess[last] / k[last]
    return jax.nn.relu(x - tau)


@_unit_simplex.defjvp
def _unit_simplex_jvp(primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
    # On the support S the projection is x - tau with tau the mean over S of x (less a
    # constant): the derivative is the centring of the tangent over S, 0 elsewhere.
    (x,), (dx,) = primals, tangents
    p = _unit_simplex(x)
    on = (p > 0).astype(x.dtype)
    return p, on * dx - on * (jnp.vdot(on, dx) / jnp.sum(on))


def _simplex(x: jax.Array, scale: ArrayLike) -> jax.Array:
    """Projection of a vector onto ``{p >= 0, sum(p) = scale}`` (``scale > 0``)."""
    if x.size == 0:
        return x
    return scale * _unit_simplex(x / scale)


def projection_simplex(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the simplex :math:`\{p \ge 0, \textstyle\sum p = s\}`.

    .. math:: p = \max(x - \tau, 0), \qquad \tau \text{ such that }
       \textstyle\sum \max(x - \tau, 0) = s

    over all leaves together, with :math:`\tau` found by sorting (:math:`O(n \log n)`).
    Its derivative is exact (a custom JVP): on the support, the tangent less its mean.

    Args:
      tree: the tree to project.
      scale: :math:`s > 0`, the sum of the projection (default 1: the probability
        simplex).

    Returns:
      The projection, with the structure of ``tree``.

    Raises:
      ValueError: ``scale`` is a Python number that is not > 0.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_simplex({"a": jnp.array([0.5, 1.0]), "b": -1.0})
      {'a': Array([0.25, 0.75], dtype=float32), 'b': Array(0., dtype=float32)}

    References:
      Held, Wolfe and Crowder, "Validation of subgradient optimization", Mathematical
      Programming, 1974. Duchi, Shalev-Shwartz, Singer and Chandra, "Efficient
      Projections onto the l1-Ball for Learning in High Dimensions", ICML 2008.
    """
    _check("projection_simplex", "scale", scale)
    values, unravel = flatten_util.ravel_pytree(tree)
    return unravel(_simplex(values, scale))


def _l1_sphere(tree: Any, scale: ArrayLike) -> Any:
    signs = jax.tree.map(jnp.sign, tree)
    return tree_lib.mul(signs, projection_simplex(jax.tree.map(jnp.abs, tree), scale))


def projection_l1_sphere(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the L1 sphere :math:`\{\lVert p \rVert_1 = s\}`.

    :math:`p = \mathrm{sign}(x)\,P_\Delta(\lvert x \rvert)`, with :math:`P_\Delta` the
    projection onto the simplex of sum :math:`s` (`projection_simplex`).

    Args:
      tree: the tree to project.
      scale: :math:`s > 0`, the radius.

    Returns:
      The projection, with the structure of ``tree``.

    Raises:
      ValueError: ``scale`` is a Python number that is not > 0.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_l1_sphere(jnp.array([0.25, -0.25]))
      Array([ 0.5, -0.5], dtype=float32)
    """
    _check("projection_l1_sphere", "scale", scale)
    return _l1_sphere(tree, scale)


def projection_l1_ball(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the L1 ball :math:`\{\lVert p \rVert_1 \le s\}`.

    Inside the ball :math:`p = x`; outside, the projection onto its sphere
    (`projection_l1_sphere`).

    Args:
      tree: the tree to project.
      scale: :math:`s > 0`, the radius.

    Returns:
      The projection, with the structure of ``tree``.

    Raises:
      ValueError: ``scale`` is a Python number that is not > 0.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_l1_ball({"w": jnp.array([2.0, -1.0])}, 2.0)
      {'w': Array([ 1.5, -0.5], dtype=float32)}

    References:
      Duchi, Shalev-Shwartz, Singer and Chandra, "Efficient Projections onto the l1-Ball
      for Learning in High Dimensions", ICML 2008.
    """
    _check("projection_l1_ball", "scale", scale)
    inside = tree_reduce.norm(tree, ord=1) <= scale
    return jax.lax.cond(inside, lambda t: t, lambda t: _l1_sphere(t, scale), tree)


def projection_l2_sphere(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the L2 sphere :math:`\{\lVert p \rVert_2 = s\}`.

    .. math:: p = s\, x / \lVert x \rVert_2

    At :math:`x = 0` every point of the sphere is as close, and the result is NaN.

    Args:
      tree: the tree to project.
      scale: :math:`s > 0`, the radius.

    Returns:
      The projection, with the structure of ``tree``.

    Raises:
      ValueError: ``scale`` is a Python number that is not > 0.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_l2_sphere(jnp.array([0.3, 0.4]))
      Array([0.6, 0.8], dtype=float32)
    """
    _check("projection_l2_sphere", "scale", scale)
    return tree_lib.scale(scale / tree_reduce.norm(tree), tree)


def projection_l2_ball(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the L2 ball :math:`\{\lVert p \rVert_2 \le s\}`.

    .. math:: p = x \cdot s / \max(\lVert x \rVert_2, s)

    finite, and with a finite gradient, at :math:`x = 0`.

    Args:
      tree: the tree to project.
      scale: :math:`s > 0`, the radius.

    Returns:
      The projection, with the structure of ``tree``.

    Raises:
      ValueError: ``scale`` is a Python number that is not > 0.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_l2_ball({"a": jnp.array([3.0]), "b": jnp.array([4.0])})
      {'a': Array([0.6], dtype=float32), 'b': Array([0.8], dtype=float32)}
    """
    _check("projection_l2_ball", "scale", scale)
    sq = tree_reduce.norm(tree, squared=True)
    # The double `where` keeps the gradient finite at x == 0.
    norm = jnp.where(sq > 0, jnp.sqrt(jnp.where(sq > 0, sq, 1.0)), 0.0)
    return tree_lib.scale(scale / jnp.maximum(norm, scale), tree)


def projection_linf_ball(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the L-infinity ball :math:`\{\lVert p \rVert_\infty \le s\}`.

    :math:`p = \min(\max(x, -s), s)` elementwise (`projection_box`).

    Args:
      tree: the tree to project.
      scale: :math:`s \ge 0`, the radius.

    Returns:
      The projection, with the structure of ``tree``.

    Raises:
      ValueError: ``scale`` is a negative or NaN number.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_linf_ball(jnp.array([-3.0, 0.5, 2.0]))
      Array([-1. ,  0.5,  1. ], dtype=float32)
    """
    _check("projection_linf_ball", "scale", scale, positive=False)
    return projection_box(tree, jax.tree.map(jnp.negative, scale), scale)


def _dots(api: str, x: Any, a: Any) -> tuple[jax.Array, jax.Array]:
    """``<x, a>`` and ``<a, a>``, once ``a`` is checked to be shaped like ``x``."""
    x_flat, x_def = jax.tree_util.tree_flatten_with_path(x)
    a_flat, a_def = jax.tree_util.tree_flatten_with_path(a)
    if x_def != a_def:
        raise ValueError(
            f"`{api}` needs a with the structure of x. Received: x is {x_def}, a is {a_def}."
        )
    for (path, xi), (_, ai) in zip(x_flat, a_flat, strict=True):
        if np.shape(xi) != np.shape(ai):
            raise ValueError(
                f"`{api}` needs a with the shapes of x. Received: a[{path_name(path)!r}] of "
                f"shape {np.shape(ai)}, x[{path_name(path)!r}] of shape {np.shape(xi)}."
            )
    return tree_reduce.vdot(x, a), tree_reduce.vdot(a, a)


def projection_vector(x: Any, a: Any) -> Any:
    r"""Projection onto the line spanned by ``a``.

    .. math:: p = \frac{\langle x, a \rangle}{\langle a, a \rangle}\, a

    Args:
      x: the tree to project.
      a: a nonzero tree of the structure of ``x``.

    Returns:
      The projection, with the structure of ``x``.

    Raises:
      ValueError: ``a`` and ``x`` differ in structure or shapes.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_vector(jnp.array([2.0, 1.0]), jnp.array([1.0, 1.0]))
      Array([1.5, 1.5], dtype=float32)
    """
    xa, aa = _dots("projection_vector", x, a)
    return tree_lib.scale(xa / aa, a)


def _towards(x: Any, a: Any, factor: jax.Array) -> Any:
    return jax.tree.map(lambda xi, ai: (xi + factor * ai).astype(jnp.result_type(xi)), x, a)


def projection_hyperplane(x: Any, a: Any, b: ArrayLike) -> Any:
    r"""Projection onto the hyperplane :math:`\{\langle a, p \rangle = b\}`.

    .. math:: p = x + \frac{b - \langle a, x \rangle}{\langle a, a \rangle}\, a

    Args:
      x: the tree to project.
      a: the normal, a nonzero tree of the structure of ``x``.
      b: the offset, a scalar.

    Returns:
      The projection, with the structure of ``x``.

    Raises:
      ValueError: ``a`` and ``x`` differ in structure or shapes.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_hyperplane(jnp.array([2.0, 0.0]), jnp.ones(2), 1.0)
      Array([ 1.5, -0.5], dtype=float32)
    """
    xa, aa = _dots("projection_hyperplane", x, a)
    return _towards(x, a, (b - xa) / aa)


def projection_halfspace(x: Any, a: Any, b: ArrayLike) -> Any:
    r"""Projection onto the half-space :math:`\{\langle a, p \rangle \le b\}`.

    .. math:: p = x + \frac{\min(b - \langle a, x \rangle, 0)}{\langle a, a \rangle}\, a

    (:math:`x` itself where it lies in the half-space).

    Args:
      x: the tree to project.
      a: the outward normal, a nonzero tree of the structure of ``x``.
      b: the offset, a scalar.

    Returns:
      The projection, with the structure of ``x``.

    Raises:
      ValueError: ``a`` and ``x`` differ in structure or shapes.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.projections.projection_halfspace(jnp.array([2.0, 0.0]), jnp.ones(2), 1.0)
      Array([ 1.5, -0.5], dtype=float32)
      >>> optx.projections.projection_halfspace(jnp.array([0.0, 0.0]), jnp.ones(2), 1.0)
      Array([0., 0.], dtype=float32)
    """
    xa, aa = _dots("projection_halfspace", x, a)
    return _towards(x, a, jnp.minimum((b - xa) / aa, 0))
