"""Timing helpers: compile outside the timed region, warm up, time steps, report medians.

Every figure of the suite comes from here, so that optx and its peers are timed the same
way: `compile_step` traces, lowers and compiles a fresh function (the compile time covers
all three), `time_loop` runs an already compiled step in loops of ``k`` steps, blocking on
the result at the end of each loop, and reports the median and spread over the loops.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

# Per-step figures come from loops of at least this long (seconds), at most this many steps,
# after this many warm-up steps (`bench.run` lowers them for the tiny size).
LOOP_SECONDS = 0.2
MAX_STEPS = 200
WARMUP = 2


@dataclasses.dataclass
class Timing:
    """Seconds per step: the median over loops, and the fastest and slowest loop."""

    median: float
    low: float
    high: float
    steps: int  # steps per loop
    loops: int

    def as_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


def memory(compiled: Any) -> dict[str, int]:
    """XLA's buffer sizes of a compiled step (bytes); empty where the backend gives none."""
    try:
        stats = compiled.memory_analysis()
    except (AttributeError, NotImplementedError, RuntimeError):
        return {}
    if stats is None:
        return {}
    names = ("temp", "argument", "output", "alias", "generated_code")
    return {n: int(getattr(stats, f"{n}_size_in_bytes", -1)) for n in names}


def compile_step(
    fn: Callable[..., Any],
    args: Sequence[Any],
    donate: tuple[int, ...] = (),
    options: dict[str, Any] | None = None,
) -> tuple[Any, float]:
    """Compiles ``fn`` for ``args``; returns the executable and the seconds it took.

    ``fn`` should be a fresh function (a new closure) so that no tracing cache helps it;
    the time covers tracing, lowering to StableHLO and XLA's compilation.
    """
    start = time.perf_counter()
    jitted = jax.jit(fn, donate_argnums=donate, compiler_options=options or None)
    compiled = jitted.trace(*args).lower().compile()
    return compiled, time.perf_counter() - start


def time_loop(step: Callable[[], Any], loops: int) -> Timing:
    """Times ``step()`` (which runs one step and returns something to block on).

    Warms up with `WARMUP` steps, picks ``k`` steps per loop so that a loop lasts about
    `LOOP_SECONDS`, then times ``loops`` loops.
    """
    for _ in range(WARMUP):
        jax.block_until_ready(step())
    start = time.perf_counter()
    jax.block_until_ready(step())
    once = max(time.perf_counter() - start, 1e-7)
    k = int(min(MAX_STEPS, max(1, round(LOOP_SECONDS / once))))
    times = []
    for _ in range(loops):
        start = time.perf_counter()
        out = None
        for _ in range(k):
            out = step()
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / k)
    return Timing(statistics.median(times), min(times), max(times), k, loops)


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``; returns ``(a, b)``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b
