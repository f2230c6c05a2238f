"""Writers racing to save a checkpoint to one directory: one wins, whole; the others are told.

Threads of one process and separate processes save ``{"w": n floats, "v": 3 floats}``, each
writer its own values, to the same path at the same moment (a barrier releases them
together), many times over. Each time exactly one writer succeeds, the checkpoint restores
to that writer's data and nobody else's (never ``w`` of one and ``v`` of another), the
others get an error naming the path, `optx.latest_checkpoint` never returns a folder that
`optx.restore_state` refuses (a reader polls it while the processes write), nothing is left
behind but the checkpoint, and the processes exit as soon as they are done. An optimizer's
``save`` while another thread steps it writes one whole state.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx

# The writers import the optx this process imported, and this folder's modules.
PATH = os.pathsep.join(
    [str(pathlib.Path(optx.__file__).resolve().parents[1]), str(pathlib.Path(__file__).parent)]
)
N = 2**18  # floats in "w": a save long enough (1 MiB) for writers to overlap
WRITERS = 3


def tree_of(trial: int, writer: int) -> dict[str, jax.Array]:
    """Writer ``writer``'s data in trial ``trial``: every float is its own tag."""
    tag = float(100 * trial + writer + 1)
    return {"w": jnp.full(N, tag), "v": jnp.full(3, tag)}


TARGET = jax.eval_shape(lambda: tree_of(0, 0))


def exists_message(path: pathlib.Path) -> str:
    """What a writer arriving after the winner published is told."""
    return (
        "`save_state` needs a directory that does not exist yet (or force=True to overwrite "
        f"it). Received: directory={str(path)!r}, which exists."
    )


def taken_message(path: pathlib.Path) -> str:
    """What a writer that was saving while another published is told."""
    return (
        "`save_state` needs a directory that no other writer saves to at the same time. "
        f"Received: directory={str(path)!r}, which another writer saved while this call was "
        "saving: that checkpoint is there, complete, and this call's was discarded. Give each "
        "writer its own directory, or pass force=True to overwrite."
    )


def writer_of(restored: dict[str, jax.Array], trial: int) -> int:
    """The one writer whose data ``restored`` is, entirely; fails on a mix or a stranger."""
    w, v = np.asarray(restored["w"]), np.asarray(restored["v"])
    tags = set(np.unique(w).tolist()) | set(np.unique(v).tolist())
    assert len(tags) == 1, f"trial {trial}: a mix of writers {sorted(tags)}"
    writer = int(tags.pop()) - 100 * trial - 1
    assert 0 <= writer < WRITERS, f"trial {trial}: data of no writer of this trial"
    return writer


def check_trial(path: pathlib.Path, trial: int, outcomes: dict[int, str | None]) -> None:
    """One winner (outcome None), the others told why; the winner's data, whole, on disk."""
    winners = [i for i, outcome in outcomes.items() if outcome is None]
    assert len(winners) == 1, f"trial {trial}: {outcomes}"
    for i, outcome in outcomes.items():
        if outcome is not None:
            assert outcome in (exists_message(path), taken_message(path)), (i, outcome)
    assert optx.latest_checkpoint(path.parent) == str(path)
    assert writer_of(optx.restore_state(path, TARGET), trial) == winners[0]
    # Nothing half-written or set aside is left beside it.
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


@pytest.mark.parametrize("force", [False, True])
def test_threads_racing_to_one_directory(tmp_path, force: bool) -> None:
    for trial in range(4):
        path = tmp_path / f"trial_{trial}" / "step_1"
        if force:  # an older checkpoint to overwrite
            optx.save_state(path, tree_of(trial, WRITERS))
        barrier = threading.Barrier(WRITERS)
        outcomes: dict[int, str | None] = {}

        def write(i: int, path=path, trial=trial, barrier=barrier, outcomes=outcomes) -> None:
            tree = tree_of(trial, i)
            barrier.wait()
            try:
                optx.save_state(path, tree, force=force)
                outcomes[i] = None
            except ValueError as e:
                outcomes[i] = str(e)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if force:  # each overwrote what was there: the last to publish is there, whole
            assert outcomes == dict.fromkeys(range(WRITERS)), outcomes
            writer_of(optx.restore_state(path, TARGET), trial)
            assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
        else:
            check_trial(path, trial, outcomes)


CHILD = """
import json, pathlib, sys, time
import optx
from test_checkpoint_concurrency import WRITERS, tree_of
root, me, trials = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
outcomes = []
for trial in range(trials):
    tree = tree_of(trial, me)
    # A barrier across processes: each writer's file, then wait for all of them.
    (root / "barrier" / f"{trial}_{me}").touch()
    deadline = time.monotonic() + 600
    while len(list((root / "barrier").glob(f"{trial}_*"))) < WRITERS:
        assert time.monotonic() < deadline, "the other writers never came"
        time.sleep(0.001)
    try:
        optx.save_state(root / f"trial_{trial}" / "step_1", tree)
        outcomes.append(None)
    except ValueError as e:
        outcomes.append(str(e))
(root / f"outcomes_{me}.json").write_text(json.dumps(outcomes))
"""


def test_processes_racing_to_one_directory(tmp_path) -> None:
    trials = 6
    (tmp_path / "barrier").mkdir()
    env = dict(os.environ, PYTHONPATH=PATH)
    env["JAX_PLATFORMS"] = "cpu"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), str(i), str(trials)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for i in range(WRITERS)
    ]
    # Meanwhile, a reader: whatever `latest_checkpoint` returns restores, to one writer's data.
    reads = 0
    done = [tmp_path / f"outcomes_{i}.json" for i in range(WRITERS)]
    try:
        while not all(p.exists() for p in done) and all(c.poll() is None for c in children):
            for trial in range(trials):
                latest = optx.latest_checkpoint(tmp_path / f"trial_{trial}")
                if latest is not None:
                    writer_of(optx.restore_state(latest, TARGET), trial)
                    reads += 1
        # Each writer, done, exits at once (a loser waited orbax's 5-minute signal timeout).
        outputs = [child.communicate(timeout=60)[0] for child in children]
    finally:
        for child in children:
            child.kill()
            child.wait()
    for child, output in zip(children, outputs, strict=True):
        assert child.returncode == 0, output
    assert reads > 0
    results = [json.loads((tmp_path / f"outcomes_{i}.json").read_text()) for i in range(WRITERS)]
    for trial in range(trials):
        outcomes = {i: results[i][trial] for i in range(WRITERS)}
        check_trial(tmp_path / f"trial_{trial}" / "step_1", trial, outcomes)


def test_stateful_save_racing_a_save_state(tmp_path) -> None:
    # `optimizer.save` publishes the same way: the loser is told, under its own name.
    opt = optx.optimizers.SGD(0.1, momentum=0.9)
    opt.build({"w": jnp.ones(3)})
    path = tmp_path / "opt"
    optx.save_state(path, {"w": jnp.ones(3)})
    message = (
        "`save` needs a directory that does not exist yet (or force=True to overwrite it). "
        f"Received: directory={str(path)!r}, which exists."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        opt.save(path)
    opt.save(path, force=True)
    assert int(optx.optimizers.Optimizer.load(path, {"w": jnp.ones(3)}).iterations) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["opt"]


def test_a_writer_that_publishes_first_wins(tmp_path, monkeypatch) -> None:
    # Another writer publishes at the last moment of this one's save (just before its
    # rename): this save is discarded, the other's stays, whole.
    from optx._src import checkpoint_publish as publish

    path = tmp_path / "step_1"
    flush = publish._fsync_tree

    def other_writer_first(root: str) -> None:
        monkeypatch.setattr(publish, "_fsync_tree", flush)
        optx.save_state(path, tree_of(0, 1))
        flush(root)

    monkeypatch.setattr(publish, "_fsync_tree", other_writer_first)
    with pytest.raises(ValueError, match=re.escape(taken_message(path))):
        optx.save_state(path, tree_of(0, 0))
    assert writer_of(optx.restore_state(path, TARGET), 0) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1"]


def test_save_while_another_thread_steps(tmp_path) -> None:
    # Each save holds one whole state, copied under the optimizer's lock, while another
    # thread keeps stepping (and donating the state's buffers). Adagrad on gradients of
    # ones: after n steps every accumulator holds exactly n (float32 counts integers
    # exactly up to 2**24), so a state mixing two steps shows.
    params = {f"p{i}": jnp.zeros(64) for i in range(8)}
    opt = optx.optimizers.Adagrad(0.1, initial_accumulator_value=0.0)
    opt.build(params)
    grads = jax.tree.map(jnp.ones_like, params)
    stop = threading.Event()
    errors: list[BaseException] = []

    def train() -> None:
        current, steps = jax.tree.map(jnp.copy, params), 0
        try:
            while steps < 300 or not stop.is_set():
                current = opt.apply(grads, current)
                steps += 1
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    thread = threading.Thread(target=train)
    thread.start()
    paths = [tmp_path / f"save_{i}" for i in range(4)]
    try:
        for path in paths:
            opt.save(path)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert int(opt.iterations) >= 300
    for path in paths:
        loaded = optx.optimizers.Optimizer.load(path, params)
        steps = int(loaded.iterations)
        accumulators = [v for k, v in loaded.variables.items() if "/accumulator/" in k]
        assert len(accumulators) == len(params)
        for value in accumulators:
            np.testing.assert_array_equal(value, np.full(64, steps, np.float32))
