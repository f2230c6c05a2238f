"""Two threads stepping one stateful optimizer: every step applied once, nothing corrupted.

Each step donates the optimizer's state buffers; without the optimizer's lock, a second
thread reads buffers the first has donated ("Buffer has been deleted or donated") or
overwrites its state (lost steps).
"""

from __future__ import annotations

import copy
import threading
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
