"""The bandwidth floor: a donated, jitted triad ``a = b + s * c`` measured in the same run.

An optimizer step is memory-bound: it cannot run faster than the bytes it must move divided
by the memory bandwidth. The triad moves 12 bytes per float32 element (reads ``b`` and
``c``, writes ``a`` into its own donated buffer), which is as close to the machine's
streaming bandwidth as XLA gets. It is measured on arrays as large as the workload (small
workloads fit in cache and get the cache's bandwidth, as their optimizer step does).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bench import timing

TRIAD_BYTES = 12  # per float32 element: read b, read c, write a


def triad_gbps(n: int, loops: int) -> float:
    """GB/s of a donated jitted triad on three float32 arrays of ``n`` elements."""
    n = max(int(n), 1)

    def triad(a: jax.Array, b: jax.Array, c: jax.Array, s: jax.Array) -> jax.Array:
        del a  # only its buffer is used, for the output
        return b + s * c

    args = [jnp.zeros(n, jnp.float32), jnp.ones(n, jnp.float32), jnp.ones(n, jnp.float32)]
    s = jnp.float32(0.5)
    compiled, _ = timing.compile_step(triad, [*args, s], donate=(0,))
    box = [args[0]]

    def step() -> jax.Array:
        box[0] = compiled(box[0], args[1], args[2], s)
        return box[0]

    t = timing.time_loop(step, loops)
    return TRIAD_BYTES * n / t.median / 1e9


def fraction_of_floor(bytes_moved: float, step_seconds: float, gbps: float) -> float:
    """The step's achieved bandwidth (``bytes_moved`` per step) over the triad's."""
    if step_seconds <= 0 or gbps <= 0:
        return float("nan")
    return bytes_moved / step_seconds / 1e9 / gbps
