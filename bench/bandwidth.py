"""The bandwidth floor: a donated, jitted triad ``a = a + s * b`` measured in the same run.

An optimizer step is memory-bound: it cannot run faster than the bytes it must move divided
by the memory bandwidth. The triad moves 12 bytes per float32 element (reads ``a`` and
``b``, writes ``a`` back into its own donated buffer), which is as close to the machine's
streaming bandwidth as XLA gets. (STREAM's ``a = b + s * c``, with the donated ``a`` only
written, runs 3x slower under XLA:CPU: 11.6 GB/s against 37.5 GB/s at 5e7 elements here,
as if its output were a fresh allocation each step.) It is measured on arrays as large as
the workload (small workloads fit in cache and get the cache's bandwidth, as their
optimizer step does).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bench import timing

TRIAD_BYTES = 12  # per float32 element: read a, read b, write a


def triad_gbps(n: int, loops: int) -> float:
    """GB/s of a donated jitted triad on three float32 arrays of ``n`` elements."""
    n = max(int(n), 1)

    def triad(a: jax.Array, b: jax.Array, s: jax.Array) -> jax.Array:
        return a + s * b

    a, b = jnp.zeros(n, jnp.float32), jnp.ones(n, jnp.float32)
    s = jnp.float32(0.5)
    compiled, _ = timing.compile_step(triad, [a, b, s], donate=(0,))
    box = [a]

    def step() -> jax.Array:
        box[0] = compiled(box[0], b, s)
        return box[0]

    t = timing.time_loop(step, loops)
    return TRIAD_BYTES * n / t.median / 1e9


def fraction_of_floor(bytes_moved: float, step_seconds: float, gbps: float) -> float:
    """The step's achieved bandwidth (``bytes_moved`` per step) over the triad's."""
    if step_seconds <= 0 or gbps <= 0:
        return float("nan")
    return bytes_moved / step_seconds / 1e9 / gbps
