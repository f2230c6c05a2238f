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


def add(x: PyTree, y: PyTree) -> PyTree:
    """Leafwise ``x + y``.

    Example:
      >>> import optx
      >>> optx.tree.add({"a": 1.0}, {"a": 2.0})
      {'a': 3.0}
    """
    return jax.tree.map(operator.add, x, y)


def sub(x: PyTree, y: PyTree) -> PyTree:
    """Leafwise ``x - y``.

    Example:
      >>> import optx
      >>> optx.tree.sub({"a": 1.0}, {"a": 2.0})
      {'a': -1.0}
    """
    return jax.tree.map(operator.sub, x, y)


def mul(x: PyTree, y: PyTree) -> PyTree:
    """Leafwise ``x * y``.

    Example:
      >>> import optx
      >>> optx.tree.mul({"a": 3.0}, {"a": 2.0})
      {'a': 6.0}
    """
    return jax.tree.map(operator.mul, x, y)


def scale(factor: ArrayLike, tree: PyTree) -> PyTree:
    """Multiplies every leaf by a scalar, keeping each leaf's dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.scale(2.0, {"a": jnp.ones(2, jnp.bfloat16)})["a"].dtype
      dtype(bfloat16)
    """
    return jax.tree.map(lambda x: (x * factor).astype(jnp.result_type(x)), tree)


def abs_sq(x: jax.Array) -> jax.Array:
    """``|x|**2`` elementwise, real: ``x * x`` for real ``x``, ``re**2 + im**2`` for complex.

    (Not exported: optx's transforms use it for second moments and norms, as optax does.)
    """
    if jnp.iscomplexobj(x):
        return jnp.square(jnp.real(x)) + jnp.square(jnp.imag(x))
    return jnp.square(x)


def vdot(x: PyTree, y: PyTree) -> jax.Array:
    """The inner product of two trees: the sum over leaves of ``vdot(x_leaf, y_leaf)``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> float(optx.tree.vdot({"a": jnp.array([1.0, 2.0])}, {"a": jnp.array([3.0, 4.0])}))
      11.0
    """
    parts = jax.tree.leaves(jax.tree.map(lambda a, b: jnp.vdot(a, b), x, y))
    return functools.reduce(operator.add, parts, jnp.zeros([], jnp.float32))


def sum(tree: PyTree) -> jax.Array:
    """The sum of every element of every leaf.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> float(optx.tree.sum({"a": jnp.ones(3), "b": 2.0}))
      5.0
    """
    parts = [jnp.sum(x) for x in jax.tree.leaves(tree)]
    return functools.reduce(operator.add, parts, jnp.zeros([], jnp.float32))


def norm(tree: PyTree, ord: int | float | str | None = 2, squared: bool = False) -> jax.Array:
    """The norm of a tree seen as one flat vector (the "global norm").

    Args:
      tree: a pytree of arrays.
      ord: ``2`` (or ``None``), ``1``, or ``"inf"`` / ``jnp.inf``.
      squared: return the squared norm (``ord=2`` only).

    Returns:
      A float32 scalar (or wider, for float64 leaves).

    Raises:
      ValueError: ``ord`` is not supported, or ``squared`` with ``ord != 2``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> float(optx.tree.norm({"a": jnp.array([3.0]), "b": jnp.array([4.0])}))
      5.0
    """
    leaves = jax.tree.leaves(tree)
    if ord in (2, None, "fro"):
        total = functools.reduce(
            operator.add, [jnp.sum(abs_sq(x)) for x in leaves], jnp.zeros([], jnp.float32)
        )
        return total if squared else jnp.sqrt(total)
    if squared:
        raise ValueError(f"`optx.tree.norm` needs ord=2 with squared=True. Received: ord={ord!r}.")
    if ord == 1:
        return functools.reduce(
            operator.add, [jnp.sum(jnp.abs(x)) for x in leaves], jnp.zeros([], jnp.float32)
        )
    if ord in ("inf", jnp.inf):
        return functools.reduce(
            jnp.maximum, [jnp.max(jnp.abs(x)) for x in leaves], jnp.zeros([], jnp.float32)
        )
    raise ValueError(f"`optx.tree.norm` needs ord in (1, 2, 'inf'). Received: ord={ord!r}.")


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


def cast(tree: PyTree, dtype: DTypeLike | None) -> PyTree:
    """Casts every leaf to ``dtype``; ``None`` leaves the tree as it is.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.cast({"a": jnp.ones(2)}, jnp.bfloat16)["a"].dtype
      dtype(bfloat16)
    """
    if dtype is None:
        return tree
    return jax.tree.map(lambda x: jnp.asarray(x).astype(dtype), tree)


def cast_like(tree: PyTree, like: PyTree) -> PyTree:
    """Casts each leaf of ``tree`` to the dtype of the matching leaf of ``like``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.cast_like({"a": jnp.ones(2)}, {"a": jnp.ones(2, jnp.float16)})["a"].dtype
      dtype('float16')
    """
    return jax.tree.map(
        lambda x, y: None if x is None else jnp.asarray(x).astype(jnp.result_type(y)),
        tree,
        like,
        is_leaf=is_none,
    )


def where(condition: ArrayLike, x: PyTree, y: PyTree) -> PyTree:
    """Leafwise ``jnp.where(condition, x, y)`` with one scalar condition.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.where(False, {"a": jnp.ones(1)}, {"a": jnp.zeros(1)})
      {'a': Array([0.], dtype=float32)}
    """
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), x, y)


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
