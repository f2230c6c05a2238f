"""Checkpoints of optimizer state with orbax-checkpoint: `save_state` and `restore_state`.

Thin wrappers over ``orbax.checkpoint.StandardCheckpointer`` that add what an optimizer
needs: restoring onto the target's shardings (each process reads only its own shards, so a
state saved on one mesh restores onto another), and a check, before any array is read, that
the saved tree is the target's (leaf paths, shapes, dtypes), so a checkpoint of another
optimizer fails with the first leaf that differs rather than deep inside orbax.

Atomicity is orbax's: a save writes to ``<directory>.orbax-checkpoint-tmp-*``, writes
``commit_success.txt`` when every array is on disk, and only then renames the folder to
``<directory>``. `restore_state` refuses a folder without both, so a save cut short (a
crash, a preempted job) is never read as a complete checkpoint; `latest_checkpoint` finds the
newest complete one among a run's checkpoints.

Each checkpoint also records, in orbax's custom metadata, the type of every NamedTuple (or
other custom) node of the saved tree by path, so that a state of another optimizer with the
same leaves (``adam`` and ``adabelief`` keep the same ``mu`` and ``nu``) is refused too.

orbax-checkpoint is an optional dependency (``pip install orbax-checkpoint``), imported on
the first call.
"""

from __future__ import annotations

import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import SingleDeviceSharding

from optx._src import hyperparams as hp
from optx._src.base import OptState
from optx._src.tree import path_name

PyTree = Any
_COMMIT_FILE = "commit_success.txt"
_TMP_SUFFIX = ".orbax-checkpoint-tmp"
# Key of optx's entries in a checkpoint's custom metadata (shared with the stateful `save`).
_KEY = "optx"
_TYPES = "state_types"


def save_state(directory: str | os.PathLike[str], state: OptState, *, force: bool = False) -> None:
    """Saves an optimizer state (any pytree of arrays) to ``directory`` with orbax.

    NamedTuple states, dicts, `MaskedNode` placeholders, int32 step counts and float32
    hyperparameters are saved as they are; a sharded state is written shard by shard by
    the processes that hold it (no gather to one host). The call returns when the
    checkpoint is complete on disk. Any pytree works, so ``{"params": params, "opt_state":
    state}`` saves a whole training state at once.

    Args:
      directory: the checkpoint's folder; it must not exist yet (orbax creates it
        atomically, see the module docstring).
      state: the pytree to save, e.g. ``tx.init(params)`` after some steps.
      force: overwrite an existing ``directory``.

    Raises:
      ValueError: ``directory`` exists and ``force`` is ``False``.

    Example:
      >>> import tempfile, jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones(3)}
      >>> tx = optx.adam(1e-3)
      >>> state = tx.init(params)
      >>> path = tempfile.mkdtemp() + "/step_0"
      >>> optx.save_state(path, state)
      >>> restored = optx.restore_state(path, tx.init(params))
      >>> restored[0].mu["w"]
      Array([0., 0., 0.], dtype=float32)
    """
    ocp = _orbax("save_state")
    path = _path(directory)
    if path.exists() and not force:
        raise ValueError(
            f"`save_state` needs a directory that does not exist yet (or force=True to "
            f"overwrite it). Received: directory={str(path)!r}, which exists."
        )
    _save(ocp, path, state, None, force)


def restore_state(directory: str | os.PathLike[str], target: OptState) -> OptState:
    """Restores a state saved by `save_state` into the structure and shardings of ``target``.

    ``target`` is a state of the same optimizer on the same parameters: a real one
    (``tx.init(params)``) or an abstract one (``jax.eval_shape(tx.init, params)``), whose
    leaves may carry shardings (`jax.ShapeDtypeStruct` with ``sharding=``, e.g. from
    `optx.state_shardings`). Each leaf is read onto the target's sharding, each process
    reading only its own shards, so a state saved on 8 devices restores onto a 2x4 mesh,
    4 devices or 1. A leaf without a sharding is restored onto the first local device.

    The saved tree is compared with ``target`` before anything is read: the same leaf
    paths (NamedTuple fields, dict keys, tuple positions; empty nodes such as `MaskedNode`
    hold none), shapes and dtypes.

    Args:
      directory: a folder written by `save_state`.
      target: a state, or the abstract state, to restore into.

    Returns:
      The state, with ``target``'s structure (its NamedTuple types) and shardings.

    Raises:
      FileNotFoundError: ``directory`` does not exist.
      ValueError: ``directory`` is not a finalized orbax checkpoint (a save that did not
        finish), or its tree differs from ``target``'s: the message names the first leaf
        path that differs (missing, extra, or its shapes and dtypes on both sides), or,
        with the same leaves, the first node whose state type differs (a checkpoint of
        ``adam`` restored into ``adabelief``).

    Example:
      >>> import tempfile, jax, jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones(3)}
      >>> tx = optx.sgd(0.1, momentum=0.9)
      >>> path = tempfile.mkdtemp() + "/ckpt"
      >>> optx.save_state(path, tx.init(params))
      >>> state = optx.restore_state(path, jax.eval_shape(tx.init, params))
      >>> optx.restore_state(path, optx.adam(0.1).init(params))
      Traceback (most recent call last):
        ...
      ValueError: `restore_state` needs a checkpoint whose tree matches target's...
    """
    return _restore("restore_state", directory, target)


def latest_checkpoint(root: str | os.PathLike[str]) -> str | None:
    """The newest complete checkpoint in ``root``, to resume a run from.

    A run that saves every few steps to ``root/step_<n>`` (`save_state`, or an optimizer's
    ``save``) and is killed, even in the middle of a save, resumes from the folder this
    returns: among the folders directly in ``root`` whose names end in a number, the one
    with the largest number that orbax finalized (a save cut short is skipped, see the
    module docstring).

    Args:
      root: the folder holding the run's checkpoints.

    Returns:
      The checkpoint's path, or ``None`` when ``root`` holds no complete checkpoint (or
      does not exist yet: a run's first start).

    Raises:
      ValueError: ``root`` is a file, not a folder.

    Example:
      >>> import tempfile, jax.numpy as jnp, optx
      >>> root = tempfile.mkdtemp()
      >>> optx.latest_checkpoint(root) is None
      True
      >>> for step in (9, 10):
      ...     optx.save_state(f"{root}/step_{step}", {"w": jnp.full(2, step)})
      >>> optx.latest_checkpoint(root) == f"{root}/step_10"
      True
    """
    ocp = _orbax("latest_checkpoint")
    path = _path(root)
    if not path.exists():
        return None
    if not path.is_dir():
        raise ValueError(
            f"`latest_checkpoint` needs root to be a folder of checkpoints. Received: "
            f"root={str(path)!r}, which is a file."
        )
    numbered = []
    for child in path.iterdir():
        found = re.search(r"(\d+)$", child.name)
        if found and child.is_dir() and _finalized(ocp, child):
            numbered.append((int(found.group(1)), child.name))
    if not numbered:
        return None
    return os.fspath(path / max(numbered)[1])


# -- shared with the stateful optimizers' `save` / `load` ---------------------------------


def _orbax(api: str) -> Any:
    try:
        import orbax.checkpoint as ocp
    except ImportError as e:  # pragma: no cover - orbax is a test dependency
        raise ImportError(
            f"`{api}` needs orbax-checkpoint. Received: no module 'orbax.checkpoint'; "
            f"install it with `pip install orbax-checkpoint`."
        ) from e
    return ocp


def _path(directory: str | os.PathLike[str]) -> Any:
    from etils import epath  # orbax's path type; installed with it

    text = os.fspath(directory)
    # orbax wants absolute paths; a URL (gs://...) is left as it is.
    return epath.Path(text if "://" in text else os.path.abspath(text))


def _save(
    ocp: Any, path: Any, tree: PyTree, custom_metadata: dict[str, Any] | None, force: bool
) -> None:
    metadata = dict(custom_metadata or {})
    metadata[_KEY] = {**metadata.get(_KEY, {}), _TYPES: _node_types(tree)}
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, tree, force=force, custom_metadata=metadata)
        checkpointer.wait_until_finished()


def _finalized(ocp: Any, path: Any) -> bool:
    """Whether orbax completed the checkpoint at ``path`` (renamed, with its marker)."""
    return (
        _TMP_SUFFIX not in path.name
        and (path / _COMMIT_FILE).exists()
        and ocp.utils.is_checkpoint_finalized(path)
    )


def _metadata(api: str, directory: str | os.PathLike[str]) -> Any:
    """Orbax's `StepMetadata` of a finalized checkpoint at ``directory``."""
    ocp = _orbax(api)
    path = _path(directory)
    if not path.exists():
        raise FileNotFoundError(
            f"`{api}` needs an existing checkpoint directory. Received: "
            f"directory={str(path)!r}, which does not exist."
        )
    if not _finalized(ocp, path):
        raise ValueError(
            f"`{api}` needs a finalized checkpoint (orbax renames a save's temporary "
            f"folder and writes {_COMMIT_FILE!r} only once it is complete). Received: "
            f"directory={str(path)!r}, an incomplete or interrupted save; use an earlier "
            f"checkpoint."
        )
    with ocp.StandardCheckpointer() as checkpointer:
        meta = checkpointer.metadata(path)
    if getattr(meta, "item_metadata", None) is None:
        raise ValueError(
            f"`{api}` needs a checkpoint written by `optx.save_state` (orbax's "
            f"StandardCheckpointer). Received: directory={str(path)!r}, which holds no "
            f"pytree metadata."
        )
    return meta


def _restore(api: str, directory: str | os.PathLike[str], target: PyTree) -> PyTree:
    meta = _metadata(api, directory)
    saved_names = [
        path_name(p) for p, _ in jax.tree_util.tree_flatten_with_path(meta.item_metadata.tree)[0]
    ]
    if hp.is_legacy(saved_names):
        return _restore_legacy(api, directory, target)
    _check_tree(api, meta.item_metadata.tree, target)
    custom = meta.custom_metadata if isinstance(meta.custom_metadata, dict) else {}
    saved_types = custom.get(_KEY, {}).get(_TYPES)
    if isinstance(saved_types, dict):  # absent from checkpoints written by orbax alone
        _check_types(api, saved_types, _node_types(target))
    abstract = jax.tree.map(_abstract, target)
    ocp = _orbax(api)
    with ocp.StandardCheckpointer() as checkpointer:
        return checkpointer.restore(_path(directory), abstract)


def _restore_legacy(api: str, directory: str | os.PathLike[str], target: PyTree) -> PyTree:
    """Restores a store of an earlier release, whose decays were stored as ``1 - b``."""
    ocp = _orbax(api)
    with ocp.StandardCheckpointer() as checkpointer:
        raw = checkpointer.restore(_path(directory))
    saved = {path_name(p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(raw)[0]}
    try:
        upgraded = hp.upgrade_legacy(saved, target, path_name)
    except KeyError as e:
        raise ValueError(
            f"`{api}` needs a checkpoint of this optimizer. Received: a checkpoint of an "
            f"earlier release without the hyperparameter leaf {e.args[0]!r}. Restore it with "
            f"the optimizer that wrote it, then save it again."
        ) from None
    # A schedule's scale and count were not stored by earlier releases: target's.
    new = {path_name(p) for f in hp.find(target) for kind, p in f.aux_paths if kind != "residual"}
    leaves = []
    for p, leaf in jax.tree_util.tree_flatten_with_path(target)[0]:
        name = path_name(p)
        if name in upgraded or name in saved:
            value = np.asarray(upgraded[name] if name in upgraded else saved[name])
        elif name in new:
            value = np.asarray(leaf)
        else:
            raise ValueError(
                f"`{api}` needs a checkpoint whose tree matches target's. Received: a "
                f"checkpoint of an earlier release without the leaf {name!r}."
            )
        if value.shape != np.shape(leaf) or value.dtype != _dtype(leaf):
            raise ValueError(
                f"`{api}` needs a checkpoint whose tree matches target's. Received: leaf "
                f"{name!r} of {_describe(value.shape, value.dtype)} in the checkpoint (an "
                f"earlier release's), {_describe(np.shape(leaf), _dtype(leaf))} in target."
            )
        leaves.append(jax.device_put(value, _abstract(leaf).sharding))
    return jax.tree.unflatten(jax.tree.structure(target), leaves)


def _abstract(leaf: Any) -> jax.ShapeDtypeStruct:
    sharding = getattr(leaf, "sharding", None)
    if sharding is None or isinstance(leaf, jax.core.Tracer):
        sharding = SingleDeviceSharding(jax.local_devices()[0])
    return jax.ShapeDtypeStruct(np.shape(leaf), _dtype(leaf), sharding=sharding)


def _dtype(leaf: Any) -> np.dtype:
    dtype = getattr(leaf, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.dtype(jnp.asarray(leaf).dtype)


def _describe(shape: tuple[int, ...], dtype: Any) -> str:
    return f"shape {tuple(shape)} and dtype {np.dtype(dtype).name}"


def _check_tree(api: str, saved: PyTree, target: PyTree) -> None:
    """Raises a `ValueError` naming the first leaf where ``saved`` (orbax's) and ``target`` differ.

    orbax keeps a NamedTuple as a dict of its fields and a tuple as a list; both flatten to
    the same key names, so the paths compare as strings. Empty nodes keep no leaf.
    """
    stored = {
        path_name(p): (tuple(getattr(m, "shape", ()) or ()), getattr(m, "dtype", None))
        for p, m in jax.tree_util.tree_flatten_with_path(saved)[0]
    }
    wanted = jax.tree_util.tree_flatten_with_path(target)[0]
    head = f"`{api}` needs a checkpoint whose tree matches target's (the same leaf paths, "
    head += "shapes and dtypes; was it saved from another optimizer or other parameters?)."
    names = set()
    for p, leaf in wanted:
        name = path_name(p)
        names.add(name)
        shape, dtype = tuple(np.shape(leaf)), _dtype(leaf)
        if name not in stored:
            raise ValueError(
                f"{head} Received: a checkpoint without the leaf {name!r} (target: "
                f"{_describe(shape, dtype)}); {len(stored)} leaves saved, {len(wanted)} "
                f"in target. Saved leaves like it: {_listing(_nearby(name, list(stored)))}."
            )
        s_shape, s_dtype = stored[name]
        if s_shape != shape or (s_dtype is not None and np.dtype(s_dtype) != dtype):
            saved_dtype = s_dtype if s_dtype is not None else dtype
            raise ValueError(
                f"{head} Received: leaf {name!r} of {_describe(s_shape, saved_dtype)} in "
                f"the checkpoint, {_describe(shape, dtype)} in target."
            )
    extra = [n for n in stored if n not in names]
    if extra:
        s_shape, s_dtype = stored[extra[0]]
        raise ValueError(
            f"{head} Received: a checkpoint with the leaf {extra[0]!r} "
            f"({_describe(s_shape, s_dtype or np.float32)}) that target lacks; "
            f"{len(stored)} leaves saved, {len(wanted)} in target."
        )


def _node_types(tree: PyTree) -> dict[str, str]:
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


def _check_types(api: str, saved: dict[str, str], wanted: dict[str, str]) -> None:
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
