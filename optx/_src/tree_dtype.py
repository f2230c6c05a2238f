"""The dtypes of pytrees: casting every leaf, and the one dtype of a tree."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from optx._src.tree import is_none, path_name

PyTree = Any

_HANDLERS = (None, "promote", "highest", "lowest")


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


def cast_like(tree: PyTree, other_tree: PyTree) -> PyTree:
    """Casts each leaf of ``tree`` to the dtype of the matching leaf of ``other_tree``.

    A leaf of ``other_tree`` without a dtype (a Python number) leaves its leaf as it is.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.tree.cast_like({"a": jnp.ones(2)}, {"a": jnp.ones(2, jnp.float16)})["a"].dtype
      dtype('float16')
    """
    return jax.tree.map(
        lambda x, y: x if x is None or not hasattr(y, "dtype") else jnp.asarray(x).astype(y.dtype),
        tree,
        other_tree,
        is_leaf=is_none,
    )


def _ordered(api: str, a: np.dtype, b: np.dtype, highest: bool) -> np.dtype:
    """The higher (or lower) of two dtypes where one promotes to the other."""
    promoted = jnp.promote_types(a, b)
    if promoted not in (a, b):
        raise ValueError(
            f"`{api}` needs dtypes that promote one to the other for this handler. "
            f"Received: {a} and {b}, which promote to {promoted}. Use "
            f"mixed_dtype_handler='promote'."
        )
    high, low = (a, b) if promoted == a else (b, a)
    return high if highest else low


def dtype(tree: PyTree, mixed_dtype_handler: str | None = None) -> np.dtype:
    """The dtype of a tree's leaves.

    Args:
      tree: a pytree of arrays (or numbers).
      mixed_dtype_handler: what to do when the leaves' dtypes differ: ``None`` raises,
        ``"promote"`` gives their promoted dtype (`jax.numpy.promote_types`),
        ``"highest"`` / ``"lowest"`` the dtype the others promote to / that promotes to
        the others (an error where two dtypes do not promote one to the other, e.g.
        ``int32`` and ``uint32``).

    Returns:
      The dtype; JAX's default float dtype for a tree without leaves.

    Raises:
      ValueError: the leaves' dtypes differ and ``mixed_dtype_handler`` is ``None`` (the
        message names each leaf that differs), the handler is unknown, or ``"highest"`` /
        ``"lowest"`` meets two dtypes that do not promote one to the other.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tree = {"a": jnp.ones(2, jnp.float16), "b": jnp.ones(2)}
      >>> optx.tree.dtype(tree, "lowest"), optx.tree.dtype(tree, "highest")
      (dtype('float16'), dtype('float32'))
    """
    api = "optx.tree.dtype"
    if mixed_dtype_handler not in _HANDLERS:
        raise ValueError(
            f"`{api}` needs mixed_dtype_handler in (None, 'promote', 'highest', 'lowest'). "
            f"Received: mixed_dtype_handler={mixed_dtype_handler!r}."
        )
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    dtypes = [jnp.asarray(x).dtype for _, x in flat]
    if not dtypes:
        return jnp.asarray([]).dtype
    if mixed_dtype_handler is None:
        first = dtypes[0]
        bad = [f"{path_name(p)}: {d}" for (p, _), d in zip(flat, dtypes, strict=True) if d != first]
        if bad:
            raise ValueError(
                f"`{api}` needs leaves of one dtype (or a mixed_dtype_handler). Received: "
                f"{first} at {path_name(flat[0][0]) or 'the root'}, and " + ", ".join(bad) + "."
            )
        return first
    if mixed_dtype_handler == "promote":
        return functools.reduce(jnp.promote_types, dtypes)
    highest = mixed_dtype_handler == "highest"
    return functools.reduce(lambda a, b: _ordered(api, a, b, highest), dtypes)
