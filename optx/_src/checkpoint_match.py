"""Whether a saved tree restores into a target: leaf paths, shapes, dtypes and state types.

`check_tree` compares orbax's metadata of a checkpoint (`saved_leaves`) with the target before
any array is read, and names the first leaf that differs; `check_types` compares the type
of every NamedTuple (or other custom) node, which `node_types` records at save time, so a
state of another optimizer with the same leaves is refused too. A leaf stored 64-bit
restores into a target of the same kind and another width (`convertible`), through `fit`,
which raises where a value does not fit rather than wrap or overflow.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import SingleDeviceSharding

from optx._src.tree import path_name

PyTree = Any


def abstract(leaf: Any) -> jax.ShapeDtypeStruct:
    """What orbax reads ``leaf`` as: its shape, dtype and sharding (else the first device)."""
    sharding = getattr(leaf, "sharding", None)
    if sharding is None or isinstance(leaf, jax.core.Tracer):
        sharding = SingleDeviceSharding(jax.local_devices()[0])
    return jax.ShapeDtypeStruct(np.shape(leaf), dtype_of(leaf), sharding=sharding)


def uncommitted(leaf: Any) -> bool:
    """Whether target's ``leaf`` has no placement of its own.

    An uncommitted array (made by ``jnp`` on the default device), a NumPy array, or a shape
    without a sharding.
    """
    if isinstance(leaf, jax.core.Tracer):
        return True
    if isinstance(leaf, jax.Array):
        return not leaf.committed
    if isinstance(leaf, jax.ShapeDtypeStruct):
        return getattr(leaf, "sharding", None) is None
    return isinstance(leaf, np.ndarray | np.generic)


def dtype_of(leaf: Any) -> np.dtype:
    """The dtype of target's ``leaf`` (an array, a NumPy or a Python scalar)."""
    if is_scalar(leaf):  # the dtype JAX gives it, without converting (2**40 overflows int32)
        return np.dtype(jax.dtypes.canonicalize_dtype(np.result_type(type(leaf))))
    dtype = getattr(leaf, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.dtype(jnp.asarray(leaf).dtype)


def held(leaf: Any) -> np.dtype:
    """The dtype JAX holds target's ``leaf`` in (int32 for int64 without jax_enable_x64)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype_of(leaf)))


def describe(shape: tuple[int, ...], dtype: Any) -> str:
    """``shape (2, 3) and dtype float32``, as the error messages show a leaf."""
    return f"shape {tuple(shape)} and dtype {np.dtype(dtype).name}"


def saved_leaves(saved: PyTree) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Leaf name -> (shape, dtype or None) of orbax's metadata tree.

    orbax keeps a NamedTuple as a dict of its fields and a tuple as a list; both flatten to
    the same key names as target's, so paths compare as strings. Empty nodes keep no leaf.
    """
    return {
        path_name(p): (tuple(getattr(m, "shape", ()) or ()), getattr(m, "dtype", None))
        for p, m in jax.tree_util.tree_flatten_with_path(saved)[0]
    }


def is_scalar(leaf: Any) -> bool:
    """A Python number (not a NumPy scalar, which has its dtype)."""
    return type(leaf) in (bool, int, float, complex)


_KINDS = {bool: "b", int: "iu", float: "f", complex: "c"}
_WIDE = tuple(np.dtype(d) for d in ("int64", "uint64", "float64", "complex128"))


def convertible(saved_dtype: Any, leaf: Any) -> bool:
    """Whether a leaf stored as ``saved_dtype`` restores into target's ``leaf``.

    A Python scalar takes any width of its kind (orbax stores ``5`` as int64, ``0.5`` as
    float64). An array takes the same kind when one side is 64-bit (saved with or without
    ``jax_enable_x64``); other dtype changes (float32 and bfloat16, float32 and float16)
    mean another configuration, and are refused.
    """
    s = np.dtype(saved_dtype)
    if is_scalar(leaf):
        return s.kind in _KINDS[type(leaf)]
    t = dtype_of(leaf)
    return s == t or (s.kind == t.kind and s.kind in "iufc" and (s in _WIDE) != (t in _WIDE))


def fit(api: str, name: str, value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``value`` cast to ``dtype``; raises if a value does not fit (never wraps or overflows)."""
    if value.size and dtype.kind in "iu":
        info = np.iinfo(dtype)
        outside = value[(value < info.min) | (value > info.max)]
        if outside.size:
            raise ValueError(
                f"`{api}` needs checkpoint values that fit target's dtypes. Received: leaf "
                f"{name!r} holds {outside.flat[0].item()!r} ({value.dtype.name} in the "
                f"checkpoint), outside the range of {dtype.name} in target "
                f"[{info.min}, {info.max}]. Restore it into a target of dtype "
                f"{value.dtype.name} (with jax.config.update('jax_enable_x64', True))."
            )
    with np.errstate(over="ignore"):
        cast = value.astype(dtype)
    if value.size and dtype.kind in "fc":
        lost = np.isfinite(value) & ~np.isfinite(cast)
        if lost.any():
            raise ValueError(
                f"`{api}` needs checkpoint values that fit target's dtypes. Received: leaf "
                f"{name!r} holds {value[lost].flat[0].item()!r} ({value.dtype.name} in the "
                f"checkpoint), which overflows {dtype.name} in target. Restore it into a "
                f"target of dtype {value.dtype.name} (with "
                f"jax.config.update('jax_enable_x64', True))."
            )
    return cast


def check_tree(api: str, stored: dict[str, tuple[tuple[int, ...], Any]], target: PyTree) -> None:
    """Raises a `ValueError` naming the first leaf where ``stored`` and ``target`` differ."""
    wanted = jax.tree_util.tree_flatten_with_path(target)[0]
    head = f"`{api}` needs a checkpoint whose tree matches target's (the same leaf paths, "
    head += "shapes and dtypes; was it saved from another optimizer or other parameters?)."
    names = set()
    for p, leaf in wanted:
        name = path_name(p)
        names.add(name)
        shape, dtype = tuple(np.shape(leaf)), dtype_of(leaf)
        if name not in stored:
            like = (
                f"Saved leaves like it: {_listing(_nearby(name, list(stored)))}."
                if stored
                else "The checkpoint is of a tree without leaves (a stateless transform's)."
            )
            raise ValueError(
                f"{head} Received: a checkpoint without the leaf {name!r} (target: "
                f"{describe(shape, dtype)}); {len(stored)} leaves saved, {len(wanted)} "
                f"in target. {like}"
            )
        s_shape, s_dtype = stored[name]
        if s_shape != shape or (s_dtype is not None and not convertible(s_dtype, leaf)):
            saved_dtype = s_dtype if s_dtype is not None else dtype
            raise ValueError(
                f"{head} Received: leaf {name!r} of {describe(s_shape, saved_dtype)} in "
                f"the checkpoint, {describe(shape, dtype)} in target."
            )
    extra = [n for n in stored if n not in names]
    if extra:
        s_shape, s_dtype = stored[extra[0]]
        raise ValueError(
            f"{head} Received: a checkpoint with the leaf {extra[0]!r} "
            f"({describe(s_shape, s_dtype or np.float32)}) that target lacks; "
            f"{len(stored)} leaves saved, {len(wanted)} in target."
        )


def node_types(tree: PyTree) -> dict[str, str]:
    """The type name of each node of ``tree`` with children, but dicts, lists and tuples.

    Keyed by the node's path (`path_name`; ``""`` for the root), in tree order: the
    NamedTuple states of an optimizer, and any other registered node type.
    """
    found: dict[str, str] = {}

    def visit(prefix: tuple[Any, ...], node: Any) -> None:
        if jax.tree_util.treedef_is_leaf(jax.tree.structure(node)):
            return  # an array, None, or a node without children
        if type(node) not in (dict, list, tuple):
            found[path_name(prefix)] = type(node).__name__
        children = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda c: c is not node)
        for path, child in children[0]:
            visit(prefix + tuple(path), child)

    visit((), tree)
    return found


def check_types(api: str, saved: dict[str, str], wanted: dict[str, str]) -> None:
    """Raises a `ValueError` naming the first node whose saved state type is not target's."""
    for name, kind in wanted.items():
        if name in saved and saved[name] != kind:
            where = repr(name) if name else "the root"
            raise ValueError(
                f"`{api}` needs a checkpoint of target's optimizer (the same state types at "
                f"the same paths). Received: node {where} is a {saved[name]} in the "
                f"checkpoint, a {kind} in target: the checkpoint holds the same leaves but "
                f"was saved from another optimizer. Restore it into a state of that one."
            )


def _nearby(name: str, stored: list[str]) -> list[str]:
    """The saved leaves of the same parameter (last key), else those sharing a prefix."""
    last = name.rpartition("/")[2]
    same = [n for n in stored if n.rpartition("/")[2] == last]
    if same:
        return same
    prefix = name
    while prefix and not any(n.startswith(prefix + "/") for n in stored):
        prefix = prefix.rpartition("/")[0]
    return [n for n in stored if n.startswith(prefix + "/")] if prefix else stored


def _listing(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")
