"""Reductions of pytrees to scalars: sums, inner products, norms, extrema, comparisons.

Sums of floating-point leaves are accumulated in float32 at least, so that the norm of a
bfloat16 tree does not round at bfloat16 precision.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from optx._src import checks, placement

PyTree = Any


def _total(parts: list[jax.Array], op: Any, empty: float) -> jax.Array:
    """``parts`` combined by ``op`` in order, from a float32 ``empty``.

    Floating-point parts are accumulated in float32 at least (a bfloat16 tree's norm is
    float32); integer parts alone keep their dtype.
    """
    if parts and not any(jnp.issubdtype(p.dtype, jnp.inexact) for p in parts):
        return functools.reduce(op, parts)
    return functools.reduce(op, parts, jnp.asarray(empty, jnp.float32))


def vdot(tree_x: PyTree, tree_y: PyTree) -> jax.Array:
    """The inner product of two trees: the sum over leaves of ``vdot(x_leaf, y_leaf)``.

    Complex leaves of ``tree_x`` are conjugated. Under ``Explicit`` mesh axes the scalar
    is replicated.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> float(optx.tree.vdot({"a": jnp.array([1.0, 2.0])}, {"a": jnp.array([3.0, 4.0])}))
      11.0
    """
    parts = jax.tree.leaves(
        jax.tree.map(lambda a, b: placement.vdot(jnp.asarray(a), jnp.asarray(b)), tree_x, tree_y)
    )
    return _total(parts, operator.add, 0.0)


def sum(tree: PyTree, associative_reduction: bool = False) -> jax.Array:
    """The sum of every element of every leaf.

    Args:
      tree: a pytree of arrays.
      associative_reduction: add the leaves' sums as a balanced tree instead of left to
        right (fewer sequential additions in a large tree; the last bits may differ).

    Returns:
      A scalar in the leaves' promoted dtype (float32 for an empty tree).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> float(optx.tree.sum({"a": jnp.ones(3), "b": 2.0}))
      5.0
    """
    associative_reduction = checks.flag(
        "optx.tree.sum", "associative_reduction", associative_reduction
    )
    parts = [jnp.sum(x) for x in jax.tree.leaves(tree)]
    if associative_reduction:
        while len(parts) > 1:
            pairs = [parts[i] + parts[i + 1] for i in range(0, len(parts) - 1, 2)]
            parts = pairs + parts[len(pairs) * 2 :]
    return _total(parts, operator.add, 0.0)


def max(tree: PyTree) -> jax.Array:
    """The largest element over all leaves (``-inf`` for a tree without elements).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> float(optx.tree.max({"a": jnp.array([1.0, 5.0]), "b": -2.0}))
      5.0
    """
    parts = [jnp.max(x) for x in jax.tree.leaves(tree) if jnp.size(x)]
    return _total(parts, jnp.maximum, -jnp.inf)


def min(tree: PyTree) -> jax.Array:
    """The smallest element over all leaves (``inf`` for a tree without elements).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> float(optx.tree.min({"a": jnp.array([1.0, 5.0]), "b": -2.0}))
      -2.0
    """
    parts = [jnp.min(x) for x in jax.tree.leaves(tree) if jnp.size(x)]
    return _total(parts, jnp.minimum, jnp.inf)


def abs_sq(x: ArrayLike) -> jax.Array:
    """``|x|**2``, for real and complex ``x``."""
    x = jnp.asarray(x)
    if jnp.iscomplexobj(x):
        return jnp.square(x.real) + jnp.square(x.imag)
    return jnp.square(x)


def norm(tree: PyTree, ord: int | float | str | None = None, squared: bool = False) -> jax.Array:
    """The norm of a tree seen as one flat vector (the "global norm").

    Args:
      tree: a pytree of (real or complex) arrays.
      ord: ``2`` (or ``None``), ``1``, or ``"inf"`` / ``"infinity"`` / ``jnp.inf``.
      squared: return the norm squared.

    Returns:
      A scalar array (float32 for float32 leaves, wider for float64 ones).

    Raises:
      ValueError: ``ord`` is not one of those.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> float(optx.tree.norm({"a": jnp.array([3.0]), "b": jnp.array([4.0])}))
      5.0
    """
    leaves = jax.tree.leaves(tree)
    if ord in (2, None, "fro"):
        total = _total([jnp.sum(abs_sq(x)) for x in leaves], operator.add, 0.0)
        return total if squared else jnp.sqrt(total)
    if ord == 1:
        value = _total([jnp.sum(jnp.abs(x)) for x in leaves], operator.add, 0.0)
    elif ord in ("inf", "infinity", jnp.inf):
        value = _total([jnp.max(jnp.abs(x)) for x in leaves if jnp.size(x)], jnp.maximum, 0.0)
    else:
        raise ValueError(f"`optx.tree.norm` needs ord in (1, 2, 'inf'). Received: ord={ord!r}.")
    return jnp.square(value) if squared else value


def allclose(
    a: PyTree,
    b: PyTree,
    rtol: ArrayLike = 1e-05,
    atol: ArrayLike = 1e-08,
    equal_nan: bool = False,
) -> jax.Array:
    """Whether two trees are elementwise equal within a tolerance (`jax.numpy.allclose`).

    Each element must satisfy ``|a - b| <= atol + rtol * |b|``.

    Args:
      a: a pytree of arrays.
      b: a pytree with the structure of ``a``.
      rtol: the relative tolerance.
      atol: the absolute tolerance.
      equal_nan: whether NaNs in the same places count as equal.

    Returns:
      A boolean scalar array.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> bool(optx.tree.allclose({"a": jnp.ones(2)}, {"a": jnp.ones(2) + 1e-7}))
      True
    """
    equal_nan = checks.flag("optx.tree.allclose", "equal_nan", equal_nan)
    close = jax.tree.map(
        lambda x, y: jnp.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan), a, b
    )
    return functools.reduce(jnp.logical_and, jax.tree.leaves(close), jnp.array(True))


def size(tree: PyTree) -> int:
    """The number of elements over all leaves.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.size({"a": jnp.ones((2, 3)), "b": jnp.ones(4)})
      10
    """
    return int(functools.reduce(operator.add, [jnp.size(x) for x in jax.tree.leaves(tree)], 0))


def nbytes(tree: PyTree) -> int:
    """The number of bytes over all array leaves.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.nbytes({"a": jnp.ones((2, 3)), "b": jnp.ones(4, jnp.bfloat16)})
      32
    """
    return int(
        functools.reduce(
            operator.add,
            [jnp.size(x) * jnp.dtype(jnp.result_type(x)).itemsize for x in jax.tree.leaves(tree)],
            0,
        )
    )


def all_finite(tree: PyTree) -> jax.Array:
    """Whether every element of every leaf is finite (a boolean scalar).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> bool(optx.tree.all_finite({"a": jnp.array([1.0, jnp.inf])}))
      False
    """
    leaves = jax.tree.leaves(tree)
    if not leaves:
        return jnp.array(True)
    return functools.reduce(jnp.logical_and, [jnp.all(jnp.isfinite(x)) for x in leaves])
