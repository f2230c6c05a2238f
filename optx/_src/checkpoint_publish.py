"""How a checkpoint folder is written and published: staged, flushed, renamed atomically.

A save writes into a staging folder of its own beside ``<directory>``
(``<name>.orbax-checkpoint-tmp-optx-<uuid>-<host>-<pid>-<thread>``), where orbax writes the
arrays and then ``commit_success.txt``; every file is flushed to disk (``fsync``), and one
``os.rename`` publishes the folder as ``<directory>``. A rename is atomic, and it fails when
another writer's folder is already there: of several threads or processes saving to one
directory at once, exactly one wins and the others raise a `ValueError` naming the
directory, their staging folders removed. A save cut short (a crash, ``kill -9``, a
preempted job) leaves only its staging folder, which `finalized` refuses, so nothing
half-written is ever read as a checkpoint. (On a URL such as ``gs://``, without atomic
renames, orbax's own protocol applies instead.)

In a multi-process job every process writes its shards into the one staging folder that
process 0 names, and process 0 alone publishes it; its error, if any, is raised on every
process. `optx.save_state` and the stateful optimizers' ``save`` write through `write`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import threading
import uuid
from typing import Any

import jax
import numpy as np

PyTree = Any
COMMIT_FILE = "commit_success.txt"
TMP_SUFFIX = ".orbax-checkpoint-tmp"
# Serialises optx's orbax calls in this process: orbax keeps its current operation id in a
# class attribute, so two calls running at once in one process wait on each other's
# signals (and hang ~5 min at exit).
LOCK = threading.RLock()


def orbax(api: str) -> Any:
    """The ``orbax.checkpoint`` module, or an `ImportError` that says how to install it."""
    try:
        import orbax.checkpoint as ocp
    except ImportError as e:  # pragma: no cover - orbax is a test dependency
        raise ImportError(
            f"`{api}` needs orbax-checkpoint. Received: no module 'orbax.checkpoint'; "
            f"install it with `pip install orbax-checkpoint`."
        ) from e
    return ocp


def as_path(directory: str | os.PathLike[str]) -> Any:
    """``directory`` as orbax's path type: absolute, or a URL (``gs://...``) as it is."""
    from etils import epath  # orbax's path type; installed with it

    text = os.fspath(directory)
    return epath.Path(text if "://" in text else os.path.abspath(text))


def finalized(ocp: Any, path: Any) -> bool:
    """Whether the checkpoint at ``path`` was published whole (renamed, with its marker)."""
    return (
        TMP_SUFFIX not in path.name
        and (path / COMMIT_FILE).exists()
        and ocp.utils.is_checkpoint_finalized(path)
    )


def write(
    api: str,
    directory: str | os.PathLike[str],
    tree: PyTree,
    custom_metadata: dict[str, Any],
    force: bool,
) -> None:
    """Writes ``tree`` in a private staging folder, then publishes it at ``directory``.

    Raises:
      ValueError: ``directory`` exists (and not ``force``), or another writer published
        there while this call was saving.

    Example:
      >>> import tempfile, numpy as np
      >>> from optx._src import checkpoint_publish as publish
      >>> path = tempfile.mkdtemp() + "/step_1"
      >>> publish.write("save_state", path, {"w": np.ones(2)}, {}, force=False)
      >>> publish.finalized(publish.orbax("save_state"), publish.as_path(path))
      True
      >>> publish.write("save_state", path, {"w": np.ones(2)}, {}, force=False)
      Traceback (most recent call last):
        ...
      ValueError: `save_state` needs a directory that does not exist yet (or force=True...
    """
    ocp = orbax(api)
    path = as_path(directory)
    if path.exists() and not force:
        raise ValueError(
            f"`{api}` needs a directory that does not exist yet (or force=True to "
            f"overwrite it). Received: directory={str(path)!r}, which exists."
        )
    if "://" in os.fspath(directory):  # a bucket has no atomic rename: orbax's own protocol
        with LOCK, ocp.StandardCheckpointer() as checkpointer:
            checkpointer.save(path, tree, force=force, custom_metadata=custom_metadata)
            checkpointer.wait_until_finished()
        return
    staging = path.parent / f"{path.name}{TMP_SUFFIX}-optx-{_token()}"[:255]
    primary = jax.process_index() == 0
    try:
        staging.mkdir(parents=True, exist_ok=True)  # one folder shared by a job's processes
        item = staging / path.name
        with LOCK:
            # Published while this call waited for the lock: nothing to write. (Not in a
            # multi-process job, whose processes must all take the same path.)
            if path.exists() and not force and jax.process_count() == 1:
                raise ValueError(_taken(api, path))
            with ocp.StandardCheckpointer() as checkpointer:
                checkpointer.save(item, tree, custom_metadata=custom_metadata)
                checkpointer.wait_until_finished()
        _all_processes(api, lambda: _publish(api, staging, item, path, force) if primary else None)
    finally:
        if primary:
            shutil.rmtree(staging, ignore_errors=True)


def _token() -> str:
    """A name no other writer uses; in a multi-process job, process 0's, shared by all."""
    # The uuid first: a long checkpoint name may cut the rest (a file name has 255 bytes).
    token = f"{uuid.uuid4().hex}-{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}"
    token = re.sub(r"[^A-Za-z0-9_-]", "_", token)[:96]
    if jax.process_count() == 1:
        return token
    from jax.experimental import multihost_utils

    raw = np.zeros(96, np.uint8)
    raw[: len(token)] = np.frombuffer(token.encode(), np.uint8)
    shared = np.asarray(multihost_utils.broadcast_one_to_all(raw), np.uint8)
    return shared.tobytes().rstrip(b"\0").decode()


def _all_processes(api: str, publish: Any) -> None:
    """Runs ``publish`` (a no-op but on process 0), then raises its error on every process."""
    if jax.process_count() == 1:
        publish()
        return
    from jax.experimental import multihost_utils

    error: Exception | None = None
    try:
        publish()
    except Exception as e:  # reported to every process below, then raised here
        error = e
    failed = multihost_utils.broadcast_one_to_all(np.int32(error is not None))
    if error is not None:
        raise error
    if int(failed):
        raise ValueError(f"`{api}` could not publish the checkpoint: see process 0's error.")


def _publish(api: str, staging: Any, item: Any, path: Any, force: bool) -> None:
    """Flushes ``item`` to disk and renames it to ``path`` (atomically; never onto another's)."""
    _fsync_tree(os.fspath(item))
    for _ in range(8):  # with force, other writers may publish between our two renames
        if force and os.path.lexists(path):
            # Set aside what is there (the staging folder's removal deletes it); another
            # writer may have moved it first.
            with contextlib.suppress(FileNotFoundError):
                os.rename(path, staging / f"replaced-{uuid.uuid4().hex}")
        try:
            os.rename(item, path)
        except OSError as e:
            # EEXIST / ENOTEMPTY: a folder with content is there (another writer's);
            # NotADirectoryError: a file is.
            if not os.path.lexists(path):
                raise
            if not force:
                raise ValueError(_taken(api, path)) from e
            continue
        _fsync_dir(os.fspath(path.parent))
        return
    raise ValueError(_taken(api, path))


def _taken(api: str, path: Any) -> str:
    return (
        f"`{api}` needs a directory that no other writer saves to at the same time. "
        f"Received: directory={str(path)!r}, which another writer saved while this call "
        f"was saving: that checkpoint is there, complete, and this call's was discarded. "
        f"Give each writer its own directory, or pass force=True to overwrite."
    )


def _fsync_tree(root: str) -> None:
    """Flushes every file and folder under ``root`` to disk.

    So that a power loss after the rename cannot leave a published checkpoint with missing
    bytes.
    """
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(folder)


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders (Windows): nothing to flush
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _finalized(ocp: Any, path: Any) -> bool:
    """Whether orbax completed the checkpoint at ``path`` (renamed, with its marker)."""
