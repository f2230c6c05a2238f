"""Two threads stepping one stateful optimizer: every step applied once, nothing corrupted.

Each step donates the optimizer's state buffers; without the optimizer's lock, a second
thread reads buffers the first has donated ("Buffer has been deleted or donated") or
overwrites its state (lost steps).
"""

from __future__ import annotations

import copy
import re
import threading
import time
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

import optx

N = 300  # steps per thread


def in_two_threads(work: Callable[[int], object]) -> None:
    """Runs ``work(0)`` and ``work(1)`` in two threads started together; fails on an error."""
    barrier, errors = threading.Barrier(2), []

    def run(index: int) -> None:
        barrier.wait()
        try:
            work(index)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_two_threads_apply_gradients_to_the_same_variables() -> None:
    opt = optx.optimizers.SGD(0.5)
    var = optx.optimizers.Variable(jnp.zeros(4), name="w")
    ones = jnp.ones(4)
    in_two_threads(lambda _: [opt.apply_gradients([(ones, var)]) for _ in range(N)])
    # Exactly 2N steps of -0.5 each (exact in float32), counted once each.
    np.testing.assert_array_equal(np.asarray(var.value), np.full(4, -0.5 * 2 * N, np.float32))
    assert int(opt.iterations) == 2 * N


def test_two_threads_apply_match_one_thread() -> None:
    params, ones = {"w": jnp.zeros(4)}, {"w": jnp.ones(4)}
    shared = optx.optimizers.SGD(0.1, momentum=0.9)
    shared.build(params)
    in_two_threads(lambda _: [shared.apply(ones, params) for _ in range(N)])
    alone = optx.optimizers.SGD(0.1, momentum=0.9)
    for _ in range(2 * N):
        alone.apply(ones, params)
    # The same gradient every step: the order does not matter, the count does.
    assert int(shared.iterations) == 2 * N
    for key, value in alone.variables.items():
        np.testing.assert_array_equal(np.asarray(shared.variables[key]), np.asarray(value))


def test_reading_while_another_thread_steps() -> None:
    # `iterations` and the hyperparameters are copies read under the lock. (The arrays of
    # `variables` are the state's own buffers, which the next step donates.)
    opt = optx.optimizers.Adam(1e-2)
    params, grads = {"w": jnp.ones(4)}, {"w": jnp.ones(4)}
    opt.build(params)
    seen: list[int] = []

    def work(index: int) -> None:
        if index == 0:
            for _ in range(N):
                opt.apply(grads, params)
            return
        for _ in range(10 * N):
            seen.append(int(opt.iterations))
            assert float(opt.learning_rate) == np.float32(1e-2)

    in_two_threads(work)
    assert int(opt.iterations) == N
    assert seen == sorted(seen)


def test_a_copy_has_its_own_lock() -> None:
    opt = optx.optimizers.Adam(1e-2)
    params = opt.apply({"w": jnp.ones(2)}, {"w": jnp.ones(2)})
    twin = copy.deepcopy(opt)
    assert twin._lock is not opt._lock
    twin.apply({"w": jnp.ones(2)}, params)
    assert (int(twin.iterations), int(opt.iterations)) == (2, 1)


class SlowStore(dict):
    """A store that takes its time to write each array, as a file would."""

    def __setitem__(self, key: str, value: object) -> None:
        time.sleep(1e-4)  # lets the stepping thread run between two writes
        super().__setitem__(key, value)


def test_reads_from_other_threads_while_one_steps_see_one_whole_state() -> None:
    # `save_own_variables`, `get_weights`, `get_slot` and `repr` read the state under the
    # lock, as copies: a step (which donates the state's buffers) between the read and the
    # copy gave "Array has been deleted"; each read sees the state of one iteration.
    params, grads = {"a": jnp.ones(8), "b": jnp.ones(8)}, {"a": jnp.ones(8), "b": jnp.ones(8)}
    reference = optx.optimizers.Adam(1e-2)
    reference.build(params)
    # The state after each number of steps (the same compiled step: the same bits).
    states = [reference.get_weights()]
    for _ in range(N):
        reference.apply(grads, params)
        states.append(reference.get_weights())
    keys = list(reference.variables)
    momentum = keys.index("adam/momentum/a")

    opt = optx.optimizers.Adam(1e-2)
    opt.build(params)
    done, errors = threading.Event(), []
    reads = {"save": 0, "weights": 0, "slot": 0, "repr": 0}

    def check(values: list[np.ndarray]) -> None:
        step = int(values[0])
        for key, got, want in zip(keys, values, states[step], strict=True):
            np.testing.assert_array_equal(got, want, err_msg=f"{key} at iteration {step}")

    def read(kind: str) -> None:
        while not done.is_set():
            if kind == "save":
                store = SlowStore()
                opt.save_own_variables(store)
                check([store[k] for k in keys])
            elif kind == "weights":
                check(opt.get_weights())
            elif kind == "slot":
                slot = np.asarray(opt.get_slot("a", "momentum"))
                assert any(np.array_equal(slot, s[momentum]) for s in states)
            else:
                assert re.search(r"iterations=\d+", repr(opt))
            reads[kind] += 1

    def step() -> None:
        try:
            for i in range(N):
                if i == N // 2:
                    # Half-way, until every reader has read once (or a minute has passed): on
                    # a loaded machine the stepping thread could otherwise finish first.
                    deadline = time.monotonic() + 60
                    while not all(reads.values()) and time.monotonic() < deadline:
                        time.sleep(1e-3)
                opt.apply(grads, params)
        finally:
            done.set()

    def run(work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as error:  # reported below
            errors.append(error)

    workers = [step] + [lambda kind=kind: read(kind) for kind in reads]
    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert int(opt.iterations) == N
    assert all(reads.values()), reads


def test_a_slot_read_stays_readable_after_a_step_in_another_thread() -> None:
    opt = optx.optimizers.SGD(0.1, momentum=0.9)
    params = {"w": jnp.ones(4)}
    opt.apply({"w": jnp.ones(4)}, params)
    slot = opt.get_slot("w", "momentum")
    stepper = threading.Thread(target=opt.apply, args=({"w": jnp.ones(4)}, params))
    stepper.start()
    stepper.join()
    # A copy: the step donated the state's buffer, not this one.
    np.testing.assert_array_equal(np.asarray(slot), np.full(4, -0.1, np.float32))
