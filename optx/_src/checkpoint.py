"""Checkpoints of optimizer state with orbax-checkpoint: `save_state` and `restore_state`.

Thin wrappers over ``orbax.checkpoint.StandardCheckpointer`` that add what an optimizer
needs: restoring onto the target's shardings (each process reads only its own shards, so a
state saved on one mesh restores onto another), and a check, before any array is read, that
the saved tree is the target's (leaf paths, shapes, dtypes), so a checkpoint of another
optimizer fails with the first leaf that differs rather than deep inside orbax.

Atomic and safe under concurrency (`checkpoint_publish`): a save writes into a staging
folder of its own beside ``<directory>``, flushes every file to disk and publishes it with
one atomic ``os.rename``. Of several threads or processes saving to one directory at once,
exactly one wins and the others raise a `ValueError` naming the directory. A save cut short
(a crash, ``kill -9``, a preempted job) leaves only its staging folder, which
`restore_state` refuses and `latest_checkpoint` skips, so nothing half-written is ever read
as a checkpoint.

Each checkpoint also records, in orbax's custom metadata, the type of every NamedTuple (or
other custom) node of the saved tree by path, so that a state of another optimizer with the
same leaves (``adam`` and ``adabelief`` keep the same ``mu`` and ``nu``) is refused too.

Python scalars are stored as orbax stores them (``5`` as int64, ``0.5`` as float64, ``True``
as bool) and restore, into a target holding a Python scalar, as that Python type and value.
A leaf stored in a 64-bit dtype restores into a target array of the same kind and a
narrower width (int64 into int32, float64 into float32: what JAX makes without
``jax_enable_x64``), and the other way round, when every value fits: one that does not
(2**40 into int32, 1e300 into float32) raises, never wraps or overflows. A tree without
leaves (the state of ``identity``, or of a chain of stateless transforms) saves and restores.

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

from optx._src import checkpoint_match as match
from optx._src import checkpoint_publish as publish
from optx._src import hyperparams as hp
from optx._src.base import OptState
from optx._src.tree import path_name

PyTree = Any
# Key of optx's entries in a checkpoint's custom metadata (shared with the stateful `save`).
_KEY = "optx"
_TYPES = "state_types"
# Flag (and placeholder leaf) of a checkpoint of a tree without leaves.
_EMPTY = "empty_tree"


def save_state(directory: str | os.PathLike[str], state: OptState, *, force: bool = False) -> None:
    """Saves an optimizer state (any pytree of arrays) to ``directory`` with orbax.

    NamedTuple states, dicts, `MaskedNode` placeholders, int32 step counts and float32
    hyperparameters are saved as they are; a sharded state is written shard by shard by
    the processes that hold it (no gather to one host). The call returns when the
    checkpoint is complete and flushed to disk. Any pytree works, so ``{"params": params,
    "opt_state": state, "step": 5}`` saves a whole training state at once (Python scalars
    restore as Python scalars), and so does a state without leaves (``identity``'s).

    The checkpoint appears at ``directory`` whole, in one atomic rename, or not at all.
    Threads or processes saving to one ``directory`` at once do not mix: one wins, the
    others raise (see the module docstring).

    Args:
      directory: the checkpoint's folder; it must not exist yet.
      state: the pytree to save, e.g. ``tx.init(params)`` after some steps.
      force: overwrite an existing ``directory``: the old folder is set aside and the new
        one renamed into place, so a reader sees the old checkpoint, none, or the new one,
        never a mix; of writers racing with ``force``, the last to publish stays.

    Raises:
      ValueError: ``directory`` exists and ``force`` is ``False``, or another writer
        published a checkpoint there while this call was saving (the message says so, and
        that checkpoint is left as it is).

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
    _save("save_state", directory, state, None, force)


def restore_state(directory: str | os.PathLike[str], target: OptState) -> OptState:
    """Restores a state saved by `save_state` into the structure and shardings of ``target``.

    ``target`` is a state of the same optimizer on the same parameters: a real one
    (``tx.init(params)``) or an abstract one (``jax.eval_shape(tx.init, params)``), whose
    leaves may carry shardings (`jax.ShapeDtypeStruct` with ``sharding=``, e.g. from
    `optx.state_shardings`). Each leaf is read onto the target's sharding, each process
    reading only its own shards, so a state saved on 8 devices restores onto a 2x4 mesh,
    4 devices or 1. A leaf without a placement of its own (an uncommitted array made by
    ``jnp`` or ``tx.init``, a NumPy array, a shape without a sharding) is restored onto the
    default device uncommitted, as ``jnp`` makes arrays: a step jitted before the restore
    runs on it without compiling again.

    The saved tree is compared with ``target`` before anything is read: the same leaf
    paths (NamedTuple fields, dict keys, tuple positions; empty nodes such as `MaskedNode`
    hold none), shapes and dtypes. A Python scalar in ``target`` restores as that Python
    type (``5`` was stored as int64); a leaf stored 64-bit restores into a target of the
    same kind and another width (int64 into int32) when its values fit.

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
        ``adam`` restored into ``adabelief``), or a value does not fit target's narrower
        dtype (an int64 of 2**40 into int32).

    Example:
      >>> import tempfile, jax, jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones(3)}
      >>> tx = optx.sgd(0.1, momentum=0.9)
      >>> path = tempfile.mkdtemp() + "/ckpt"
      >>> optx.save_state(path, {"opt_state": tx.init(params), "step": 5})
      >>> target = {"opt_state": jax.eval_shape(tx.init, params), "step": 0}
      >>> optx.restore_state(path, target)["step"]
      5
      >>> optx.save_state(path, tx.init(params), force=True)
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
    with the largest number that was published whole (a save cut short, or still being
    written, is a staging folder, skipped; see the module docstring).

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
    ocp = publish.orbax("latest_checkpoint")
    path = publish.as_path(root)
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
        if found and child.is_dir() and publish.finalized(ocp, child):
            numbered.append((int(found.group(1)), child.name))
    if not numbered:
        return None
    return os.fspath(path / max(numbered)[1])


# -- shared with the stateful optimizers' `save` / `load` ---------------------------------


def _save(
    api: str,
    directory: str | os.PathLike[str],
    tree: PyTree,
    custom_metadata: dict[str, Any] | None,
    force: bool,
) -> None:
    """Saves ``tree`` with the node types of its states (see `checkpoint_publish.write`)."""
    metadata = dict(custom_metadata or {})
    metadata[_KEY] = {**metadata.get(_KEY, {}), _TYPES: match.node_types(tree)}
    if not jax.tree.leaves(tree):
        # orbax refuses an empty tree ("Found empty item."): one placeholder leaf instead,
        # and a flag that `_restore` reads to return target's (empty) tree.
        metadata[_KEY][_EMPTY] = True
        tree = {_EMPTY: np.zeros((), np.int8)}
    publish.write(api, directory, tree, metadata, force)


def _metadata(api: str, directory: str | os.PathLike[str]) -> Any:
    """Orbax's `StepMetadata` of a finalized checkpoint at ``directory``."""
    ocp = publish.orbax(api)
    path = publish.as_path(directory)
    if not path.exists():
        raise FileNotFoundError(
            f"`{api}` needs an existing checkpoint directory. Received: "
            f"directory={str(path)!r}, which does not exist."
        )
    if not publish.finalized(ocp, path):
        raise ValueError(
            f"`{api}` needs a finalized checkpoint (orbax renames a save's temporary "
            f"folder and writes {publish.COMMIT_FILE!r} only once it is complete). Received: "
            f"directory={str(path)!r}, an incomplete or interrupted save; use an earlier "
            f"checkpoint."
        )
    with publish.LOCK, ocp.StandardCheckpointer() as checkpointer:
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
    custom = meta.custom_metadata if isinstance(meta.custom_metadata, dict) else {}
    ours = custom.get(_KEY) if isinstance(custom.get(_KEY), dict) else {}
    empty = bool(ours.get(_EMPTY))
    saved = {} if empty else match.saved_leaves(meta.item_metadata.tree)
    if hp.is_legacy(list(saved)):
        return _restore_legacy(api, directory, target)
    match.check_tree(api, saved, target)
    saved_types = ours.get(_TYPES)
    if isinstance(saved_types, dict):  # absent from checkpoints written by orbax alone
        match.check_types(api, saved_types, match.node_types(target))
    flat, treedef = jax.tree_util.tree_flatten_with_path(target)
    if empty:
        return jax.tree.unflatten(treedef, [])
    abstract, widths, loose = [], {}, set()
    for i, (p, leaf) in enumerate(flat):
        saved_dtype = saved[path_name(p)][1]
        if match.is_scalar(leaf):
            abstract.append(leaf)  # orbax restores a Python scalar as one, exactly
        elif saved_dtype is not None and np.dtype(saved_dtype) != match.held(leaf):
            # Read in the stored width, then narrowed (or widened) with a range check: orbax
            # would wrap an int64 into int32 silently (2**40 -> 0).
            abstract.append(np.empty(np.shape(leaf), saved_dtype))
            widths[i] = path_name(p)
        elif match.uncommitted(leaf):
            # Read to the host, then onto the default device uncommitted, as the target is:
            # a committed copy would make a jitted step compile once more after a restore.
            abstract.append(np.empty(np.shape(leaf), match.held(leaf)))
            loose.add(i)
        else:
            abstract.append(match.abstract(leaf))
    ocp = publish.orbax(api)
    with publish.LOCK, ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore(
            publish.as_path(directory), jax.tree.unflatten(treedef, abstract)
        )
    leaves = jax.tree.leaves(restored)
    for i in loose:
        leaves[i] = jnp.asarray(leaves[i])
    for i, name in widths.items():
        leaf = flat[i][1]
        value = match.fit(api, name, np.asarray(leaves[i]), match.held(leaf))
        leaves[i] = (
            jnp.asarray(value)
            if match.uncommitted(leaf)
            else jax.device_put(value, match.abstract(leaf).sharding)
        )
    return jax.tree.unflatten(treedef, leaves)


def _restore_raw(api: str, directory: str | os.PathLike[str]) -> PyTree:
    """The saved tree as orbax restores it without a target (for earlier releases' stores)."""
    ocp = publish.orbax(api)
    with publish.LOCK, ocp.StandardCheckpointer() as checkpointer:
        return checkpointer.restore(publish.as_path(directory))


def _restore_legacy(api: str, directory: str | os.PathLike[str], target: PyTree) -> PyTree:
    """Restores a store of an earlier release, whose decays were stored as ``1 - b``."""
    raw = _restore_raw(api, directory)
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
        shape, dtype = np.shape(leaf), match.dtype_of(leaf)
        if value.shape != shape or value.dtype != dtype:
            raise ValueError(
                f"`{api}` needs a checkpoint whose tree matches target's. Received: leaf "
                f"{name!r} of {match.describe(value.shape, value.dtype)} in the checkpoint (an "
                f"earlier release's), {match.describe(shape, dtype)} in target."
            )
        leaves.append(jax.device_put(value, match.abstract(leaf).sharding))
    return jax.tree.unflatten(jax.tree.structure(target), leaves)
