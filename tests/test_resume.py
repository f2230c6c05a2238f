"""Resuming without loss: a run killed at a random step, even mid-save, ends where it would have.

A training script in a subprocess steps a functional optimizer and a stateful one side by
side and saves both, with their parameters, every `EVERY` steps (one `optx.save_state`
checkpoint per save). It is killed with SIGKILL, at a random step or while a checkpoint is
being written; a new run restores the newest complete checkpoint (`optx.latest_checkpoint`)
and finishes. Its final parameters equal, bit for bit, those of a run never interrupted. A
half-written checkpoint is refused by name, and so is a checkpoint restored into another
optimizer, configuration or parameter tree.
"""

from __future__ import annotations

import functools
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEPS, EVERY = 30, 5
TX = optx.chain(optx.clip_by_global_norm(1.0), optx.adamw(1e-2, weight_decay=1e-3))


def stateful() -> optx.optimizers.Optimizer:
    return optx.optimizers.Adam(1e-2, amsgrad=True, use_ema=True)


@functools.cache
def model() -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    """Parameters, and 4 minibatches of 4 examples: inputs (4, 4, 8), targets (4, 4, 4)."""
    k = jax.random.split(jax.random.key(0), 4)
    params = {"w": jax.random.normal(k[0], (8, 4)) / 4, "b": jax.random.normal(k[1], (4,))}
    x, y = jax.random.normal(k[2], (4, 4, 8)), jax.random.normal(k[3], (4, 4, 4))
    return params, x, y


@jax.jit
def grads(params: dict[str, jax.Array], t: jax.Array) -> dict[str, jax.Array]:
    """The gradient of step ``t``: a least-squares loss on the ``t % 4``-th minibatch."""
    _, x, y = model()

    def loss(p: dict[str, jax.Array]) -> jax.Array:
        return jnp.mean((x[t % 4] @ p["w"] + p["b"] - y[t % 4]) ** 2)

    return jax.grad(loss)(params)


@jax.jit
def step(params, state, t):
    updates, state = TX.update(grads(params, t), state, params)
    return optx.apply_updates(params, updates), state


def start() -> dict:
    params = model()[0]
    opt = stateful()
    opt.build(params)
    return {"params": params, "opt_state": TX.init(params), "sparams": params, "opt": opt}


def train(run: dict, first: int, last: int, save_to: str | None = None) -> dict:
    """Steps ``first..last-1``; saves after every `EVERY`-th step to ``save_to/step_<n>``."""
    for t in range(first, last):
        print(f"step {t}", flush=True)
        run["params"], run["opt_state"] = step(run["params"], run["opt_state"], t)
        run["sparams"] = run["opt"].apply(grads(run["sparams"], t), run["sparams"])
        if save_to is not None and (t + 1) % EVERY == 0:
            print(f"saving {t + 1}", flush=True)
            optx.save_state(f"{save_to}/step_{t + 1}", checkpoint(run))
            print(f"saved {t + 1}", flush=True)
    return run


def checkpoint(run: dict) -> dict:
    return {key: run[key] for key in ("params", "opt_state", "sparams")} | {
        "variables": run["opt"].variables
    }


def resume(root: str) -> tuple[dict, int]:
    """A run restored from the newest complete checkpoint in ``root`` (or a fresh one)."""
    run = start()
    latest = optx.latest_checkpoint(root)
    if latest is None:
        return run, 0
    saved = optx.restore_state(latest, checkpoint(run))
    run.update({key: saved[key] for key in ("params", "opt_state", "sparams")})
    run["opt"].load_own_variables(saved["variables"])
    return run, int(re.search(r"(\d+)$", latest).group(1))


CHILD = """
import sys
from test_resume import STEPS, start, train
train(start(), 0, STEPS, save_to=sys.argv[1])
print("done", flush=True)
"""


def run_and_kill(root: pathlib.Path, *, at_step: int = -1, at_save: int = -1) -> list[str]:
    """Runs the training script and SIGKILLs it as it starts step ``at_step``, or as soon as
    orbax writes in the staging folder of its ``at_save``-th checkpoint.
    Returns the lines it printed."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    env["JAX_PLATFORMS"] = "cpu"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line.strip())
            if lines[-1] == f"saving {at_save * EVERY}":
                deadline = time.monotonic() + 10
                # The save's private staging folder, once orbax writes in it.
                while not list(root.glob("*.orbax-checkpoint-tmp*/*")):
                    assert time.monotonic() < deadline, "no temporary folder appeared"
                    time.sleep(0.0002)
                child.send_signal(signal.SIGKILL)
                break
            if lines[-1] == f"step {at_step}":
                child.send_signal(signal.SIGKILL)
                break
    finally:
        child.kill()
        _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, f"the run was not killed: {lines[-3:]}\n{err}"
    return lines


@pytest.fixture(scope="module")
def uninterrupted() -> dict:
    return train(start(), 0, STEPS)


def assert_same_end(root: pathlib.Path, uninterrupted: dict, killed: str) -> int:
    run, first = resume(str(root))
    run = train(run, first, STEPS)
    for key in ("params", "sparams"):
        for name in ("w", "b"):
            np.testing.assert_array_equal(
                run[key][name], uninterrupted[key][name], err_msg=f"killed at {killed!r}: {key}"
            )
    for name, value in uninterrupted["opt"].variables.items():
        np.testing.assert_array_equal(run["opt"].variables[name], value, err_msg=name)
    return first


@pytest.mark.slow
def test_killed_at_a_random_step_resumes_to_the_same_end(tmp_path, uninterrupted) -> None:
    killed = random.randrange(1, STEPS)
    run_and_kill(tmp_path, at_step=killed)
    # Step `killed` had not started; the save after step `killed - 1`, if due, completed.
    first = assert_same_end(tmp_path, uninterrupted, f"step {killed}")
    assert first == killed // EVERY * EVERY


@pytest.mark.slow
def test_killed_while_saving_resumes_from_the_last_complete_checkpoint(
    tmp_path, uninterrupted
) -> None:
    save = random.randrange(1, STEPS // EVERY + 1)
    lines = run_and_kill(tmp_path, at_save=save)
    half = list(tmp_path.glob("*.orbax-checkpoint-tmp*"))
    assert len(half) == 1, (lines[-3:], sorted(p.name for p in tmp_path.iterdir()))
    assert half[0].name.startswith(f"step_{save * EVERY}.")
    # The half-written checkpoint is never read as complete.
    last = (save - 1) * EVERY
    assert optx.latest_checkpoint(tmp_path) == (str(tmp_path / f"step_{last}") if last else None)
    with pytest.raises(ValueError, match=re.escape("an incomplete or interrupted save")):
        optx.restore_state(half[0], checkpoint(start()))
    assert assert_same_end(tmp_path, uninterrupted, f"save {save}") == last


# -- a checkpoint restored into something else: the first mismatch, named -------------------

HEAD = (
    "`restore_state` needs a checkpoint whose tree matches target's (the same leaf paths, "
    "shapes and dtypes; was it saved from another optimizer or other parameters?). Received: "
)
PARAMS = {"w": jnp.ones((2, 3)), "b": jnp.ones(3)}


@pytest.fixture(scope="module")
def adam_checkpoint(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("mismatch") / "adam"
    optx.save_state(path, optx.adam(1e-2).init(PARAMS))
    return path


def test_another_optimizer_with_the_same_leaves_is_named_by_its_state_type(
    adam_checkpoint,
) -> None:
    message = (
        "`restore_state` needs a checkpoint of target's optimizer (the same state types at "
        "the same paths). Received: node '0' is a ScaleByAdamState in the checkpoint, a "
        "ScaleByBeliefState in target: the checkpoint holds the same leaves but was saved "
        "from another optimizer. Restore it into a state of that one."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        optx.restore_state(adam_checkpoint, optx.adabelief(1e-2).init(PARAMS))
    # An abstract target is checked the same way.
    with pytest.raises(ValueError, match=re.escape(message)):
        optx.restore_state(adam_checkpoint, jax.eval_shape(optx.adabelief(1e-2).init, PARAMS))


def test_a_checkpoint_without_state_types_still_restores(tmp_path) -> None:
    # Written by orbax directly: no optx metadata, so only the leaves are compared.
    import orbax.checkpoint as ocp

    state = optx.adam(1e-2).init(PARAMS)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "plain", state)
    restored = optx.restore_state(tmp_path / "plain", state)
    assert type(restored[0]) is optx.ScaleByAdamState
    np.testing.assert_array_equal(restored[0].nu["w"], state[0].nu["w"])


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            lambda: optx.amsgrad(1e-2).init(PARAMS),
            "a checkpoint without the leaf '0/nu_max/b' (target: shape (3,) and dtype "
            "float32); 13 leaves saved, 15 in target. Saved leaves like it: '0/mu/b', '0/nu/b'.",
        ),
        (
            lambda: optx.adam(1e-2, mu_dtype=jnp.bfloat16).init(PARAMS),
            "leaf '0/mu/b' of shape (3,) and dtype float32 in the checkpoint, shape (3,) and "
            "dtype bfloat16 in target.",
        ),
        (
            lambda: optx.adam(1e-2).init({"w": jnp.ones((3, 2)), "b": jnp.ones(3)}),
            "leaf '0/mu/w' of shape (2, 3) and dtype float32 in the checkpoint, shape (3, 2) "
            "and dtype float32 in target.",
        ),
        (
            lambda: optx.adam(1e-2).init({**PARAMS, "c": jnp.ones(1)}),
            "a checkpoint without the leaf '0/mu/c' (target: shape (1,) and dtype float32); "
            "13 leaves saved, 15 in target.",
        ),
    ],
    ids=["amsgrad", "mu_dtype", "shapes", "extra_param"],
)
def test_another_configuration_or_tree_is_named_by_its_first_leaf(
    adam_checkpoint, target, message
) -> None:
    with pytest.raises(ValueError, match=re.escape(HEAD + message)):
        optx.restore_state(adam_checkpoint, target())


def test_stateful_checkpoint_of_another_configuration(tmp_path) -> None:
    saved = optx.optimizers.Adam(0.1, amsgrad=True)
    saved.build(PARAMS)
    optx.save_state(tmp_path / "variables", saved.variables)
    other = optx.optimizers.Adam(0.1)
    other.build(PARAMS)
    message = (
        "a checkpoint with the leaf 'adam/velocity_hat/b' (shape (3,) and dtype float32) that "
        "target lacks; 16 leaves saved, 14 in target."
    )
    with pytest.raises(ValueError, match=re.escape(HEAD + message)):
        optx.restore_state(tmp_path / "variables", other.variables)
    # `save` records the configuration: `load` rebuilds it, and refuses other parameters.
    saved.save(tmp_path / "opt")
    loaded = optx.optimizers.Optimizer.load(tmp_path / "opt", PARAMS)
    assert loaded.get_config()["amsgrad"] is True
    message = (
        "leaf 'adam/momentum/w' of shape (2, 3) and dtype float32 in the checkpoint, shape "
        "(3, 2) and dtype float32 in target."
    )
    with pytest.raises(
        ValueError, match=re.escape(HEAD.replace("restore_state", "load") + message)
    ):
        optx.optimizers.Adam.load(tmp_path / "opt", {"w": jnp.ones((3, 2)), "b": jnp.ones(3)})


# -- finding the newest complete checkpoint -----------------------------------------------


def test_latest_checkpoint(tmp_path) -> None:
    assert optx.latest_checkpoint(tmp_path / "not_yet") is None
    assert optx.latest_checkpoint(tmp_path) is None
    for step in (9, 10, 2):
        optx.save_state(tmp_path / f"step_{step}", {"w": jnp.full(2, step)})
    (tmp_path / "step_11").mkdir()  # a folder that is not a checkpoint
    (tmp_path / "step_12.orbax-checkpoint-tmp-17").mkdir()  # a save cut short
    optx.save_state(tmp_path / "best", {"w": jnp.zeros(2)})  # no number: not a step
    (tmp_path / "step_13").write_text("")  # a file
    assert optx.latest_checkpoint(tmp_path) == str(tmp_path / "step_10")
    # A save whose commit marker is missing is skipped too.
    (tmp_path / "step_10" / "commit_success.txt").unlink()
    assert optx.latest_checkpoint(tmp_path) == str(tmp_path / "step_9")
    message = (
        "`latest_checkpoint` needs root to be a folder of checkpoints. Received: "
        f"root={str(tmp_path / 'step_13')!r}, which is a file."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        optx.latest_checkpoint(tmp_path / "step_13")
