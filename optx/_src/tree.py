"""Pytree arithmetic, public as `optx.tree`.

Parameters are named by their key path joined with ``/``: ``{"dense": {"kernel":
w}}`` names ``w`` ``"dense/kernel"``; list and tuple positions are numbers (``"layers/0/w"``).
"""

from __future__ import annotations

import functools
import operator
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from optx._src import placement

PyTree = Any


def is_none(x: Any) -> bool:
    """`is_leaf` predicate that keeps ``None`` leaves (missing gradients) as leaves."""
    return x is None


def is_param(x: Any) -> bool:
    """`is_leaf` predicate for naming parameters: ``None`` and Flax ``nnx.Variable`` are leaves.

    ``nnx.Optimizer`` initialises with Variables (whose array sits at ``.../value``) and
    updates with plain arrays; stopping at the Variable names both ``"dense/kernel"``.
    """
    if x is None:
        return True
    nnx = sys.modules.get("flax.nnx")
    return nnx is not None and isinstance(x, nnx.Variable)


def path_name(path: tuple[Any, ...]) -> str:
    """The ``/``-joined name of a key path, e.g. ``"dense/kernel"``.

    Example:
      >>> import jax, optx
      >>> [optx.tree.path_name(p) for p, _ in jax.tree_util.tree_flatten_with_path(
      ...     {"dense": {"kernel": 1, "bias": 2}})[0]]
      ['dense/bias', 'dense/kernel']
    """
    return jax.tree_util.keystr(tuple(path), simple=True, separator="/")


def paths(tree: PyTree) -> PyTree:
    """A tree of the same structure whose leaves are the leaves' path names.

    Example:
      >>> import optx
      >>> optx.tree.paths({"a": [1.0, 2.0], "b": 3.0})
      {'a': ['a/0', 'a/1'], 'b': 'b'}
    """
    return jax.tree_util.tree_map_with_path(lambda p, _: path_name(p), tree)


def leaves_with_paths(tree: PyTree, is_leaf: Any = None) -> list[tuple[str, Any]]:
    """The ``(path name, leaf)`` pairs of a tree, in tree order.

    Example:
      >>> import optx
      >>> optx.tree.leaves_with_paths({"b": 1, "a": [2]})
      [('a/0', 2), ('b', 1)]
    """
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)[0]
    return [(path_name(p), leaf) for p, leaf in flat]


def add(tree_x: PyTree, tree_y: PyTree, *other_trees: PyTree) -> PyTree:
    """Leafwise sum of two or more trees of the same structure.

    Args:
      tree_x: a pytree.
      tree_y: a pytree with the structure of ``tree_x``.
      *other_trees: more pytrees with that structure, added too.

    Returns:
      ``tree_x + tree_y + ...``, leaf by leaf.

    Example:
      >>> import optx
      >>> optx.tree.add({"a": 1.0}, {"a": 2.0}, {"a": 4.0})
      {'a': 7.0}
    """
    return jax.tree.map(
        lambda *xs: functools.reduce(operator.add, xs), tree_x, tree_y, *other_trees
    )


def sub(tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leafwise ``tree_x - tree_y``.

    Example:
      >>> import optx
      >>> optx.tree.sub({"a": 1.0}, {"a": 2.0})
      {'a': -1.0}
    """
    return jax.tree.map(operator.sub, tree_x, tree_y)


def mul(tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leafwise ``tree_x * tree_y``.

    Example:
      >>> import optx
      >>> optx.tree.mul({"a": 3.0}, {"a": 2.0})
      {'a': 6.0}
    """
    return jax.tree.map(operator.mul, tree_x, tree_y)


def div(tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leafwise ``tree_x / tree_y`` (true division).

    Example:
      >>> import optx
      >>> optx.tree.div({"a": 3.0}, {"a": 2.0})
      {'a': 1.5}
    """
    return jax.tree.map(operator.truediv, tree_x, tree_y)


def scale(scalar: ArrayLike, tree: PyTree) -> PyTree:
    """Multiplies every leaf by a scalar: ``scalar * tree``.

    Dtypes follow JAX's promotion, as in optax: a Python number keeps each leaf's dtype,
    a float32 array promotes a bfloat16 leaf to float32, and a float scales an integer leaf
    to floats.

    Args:
      scalar: the factor (a number or a scalar array).
      tree: a pytree of arrays.

    Returns:
      ``scalar * tree``, leaf by leaf.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.scale(2.0, {"a": jnp.ones(2, jnp.bfloat16)})["a"].dtype
      dtype(bfloat16)
      >>> optx.tree.scale(0.5, {"a": jnp.array([1, 3])})["a"].tolist()
      [0.5, 1.5]
    """
    return jax.tree.map(lambda x: scalar * x, tree)


def add_scale(tree_x: PyTree, scalar: ArrayLike, tree_y: PyTree) -> PyTree:
    """Leafwise ``tree_x + scalar * tree_y``; a ``None`` leaf of ``tree_x`` stays ``None``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.add_scale({"a": jnp.ones(2)}, 0.5, {"a": jnp.array([2.0, 4.0])})
      {'a': Array([2., 3.], dtype=float32)}
    """
    scalar = jnp.asarray(scalar)
    return jax.tree.map(
        lambda x, y: None if x is None else x + scalar * y, tree_x, tree_y, is_leaf=is_none
    )


def conj(tree: PyTree) -> PyTree:
    """The complex conjugate of every leaf (real leaves are unchanged).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.conj({"a": jnp.array([1 + 2j])})
      {'a': Array([1.-2.j], dtype=complex64)}
    """
    return jax.tree.map(jnp.conj, tree)


def real(tree: PyTree) -> PyTree:
    """The real part of every leaf.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.real({"a": jnp.array([1 + 2j])})
      {'a': Array([1.], dtype=float32)}
    """
    return jax.tree.map(jnp.real, tree)


def clip(
    tree: PyTree, min_value: ArrayLike | None = None, max_value: ArrayLike | None = None
) -> PyTree:
    """Every element clipped to ``[min_value, max_value]`` (``None``: no bound on that side).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.clip({"a": jnp.array([-2.0, 0.5, 3.0])}, -1.0, 1.0)
      {'a': Array([-1. ,  0.5,  1. ], dtype=float32)}
    """
    return jax.tree.map(lambda x: jnp.clip(x, min_value, max_value), tree)


def batch_shape(tree: PyTree, shape: tuple[int, ...] = ()) -> PyTree:
    """Every leaf broadcast to leading batch dimensions ``shape``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.batch_shape({"a": jnp.ones(3)}, (2,))["a"].shape
      (2, 3)
    """
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (*shape, *jnp.shape(x))), tree)


def zeros_like(tree: PyTree, dtype: DTypeLike | None = None) -> PyTree:
    """Zeros with the shapes of ``tree`` (and its dtypes, unless ``dtype`` is given).

    Each leaf is placed like its array: on its sharding outside ``jit``, and under ``jit``
    on several devices derived from it, so that XLA gives it the array's sharding.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.zeros_like({"a": jnp.ones(2)})
      {'a': Array([0., 0.], dtype=float32)}
    """
    return jax.tree.map(lambda x: placement.zeros_like(x, dtype), tree)


def ones_like(tree: PyTree, dtype: DTypeLike | None = None) -> PyTree:
    """Ones with the shapes of ``tree`` (and its dtypes, unless ``dtype`` is given).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.ones_like({"a": jnp.zeros(2)})
      {'a': Array([1., 1.], dtype=float32)}
    """
    return jax.tree.map(lambda x: placement.full_like(x, 1, dtype), tree)


def full_like(tree: PyTree, fill_value: ArrayLike, dtype: DTypeLike | None = None) -> PyTree:
    """Arrays filled with ``fill_value`` with the shapes of ``tree``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.full_like({"a": jnp.zeros(2)}, 0.5)
      {'a': Array([0.5, 0.5], dtype=float32)}
    """
    return jax.tree.map(lambda x: placement.full_like(x, fill_value, dtype), tree)


def where(condition: ArrayLike, tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leafwise ``jnp.where(condition, x, y)``: ``tree_x`` where ``condition`` holds.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.where(False, {"a": jnp.ones(1)}, {"a": jnp.zeros(1)})
      {'a': Array([0.], dtype=float32)}
    """
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), tree_x, tree_y)


def _is_placeholder(x: Any) -> bool:
    """`None` or an empty-tuple pytree node (`MaskedNode`): a leaf without an array."""
    return x is None or (isinstance(x, tuple) and type(x).__name__ == "MaskedNode")


def params_shaped_subtrees(state: Any, params: Any) -> list[tuple[tuple[Any, ...], Any]]:
    """(key path, node) of each proper subtree of ``state`` shaped like ``params``.

    "Shaped like" means the same structure (`None` and masked leaves count as leaves) and,
    leaf by leaf, the parameter's shape: the per-parameter slots of an optimizer state
    (Adam's ``mu``), as opposed to step counts or factored moments.
    """
    param_leaves, param_def = jax.tree.flatten(params, is_leaf=_is_placeholder)
    shapes = [None if _is_placeholder(p) else np.shape(p) for p in param_leaves]
    found: list[tuple[tuple[Any, ...], Any]] = []

    def shaped(node: Any) -> bool:
        leaves, treedef = jax.tree.flatten(node, is_leaf=_is_placeholder)
        if treedef != param_def:
            return False
        return all(
            _is_placeholder(x) or (hasattr(x, "shape") and (s is None or np.shape(x) == s))
            for x, s in zip(leaves, shapes, strict=True)
        )

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if path and shaped(node):
            found.append((path, node))
            return
        children = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)[0]
        for key_path, child in children:
            if child is not node and not _is_placeholder(child) and key_path:
                walk(child, path + tuple(key_path))

    walk(state, ())
    return found
