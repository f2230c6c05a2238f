"""Row-sparse embedding updates beside the dense update of the same table.

Run: ``python bench/sparse.py [--tiny] [--steps N] [--loops N]``. The table is 1,000,000 x
64 float32 (``--tiny``: 10,000 x 8), with 1% of its rows touched per step at random indices,
some of them repeated. Each optimizer runs as one jitted step (``update`` + ``apply_updates``) with
the parameters and state donated, on the dense gradient (``grad.todense()``, computed once
beforehand) and on the row-sparse one; optax's step on the dense gradient is the reference.
Each figure is the median, over ``--loops`` loops of ``--steps`` steps, of the time per
step, wall-clock and CPU time of the process; compilation is excluded and each loop blocks
on its result (on a loaded machine, blocking on every step would add a scheduling delay to
each short sparse step).
The last row times the gradient itself: `jax.grad` of a lookup loss (dense) against
`optx.embedding_grad` (row-sparse).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import optx

FULL = {"rows": 1_000_000, "dim": 64}
TINY = {"rows": 10_000, "dim": 8}
TOUCHED = 0.01  # the fraction of rows in a step's indices
REPEATED = 0.05  # the fraction of a step's indices that repeat another one
POOL = 4  # distinct sparse gradients, cycled through the steps


def sparse_grads(rows: int, dim: int, seed: int = 0) -> list[optx.RowSparse]:
    """`POOL` row-sparse gradients of ``rows * TOUCHED`` entries, some indices repeated."""
    rng = np.random.default_rng(seed)
    k = max(1, int(rows * TOUCHED))
    grads = []
    for _ in range(POOL):
        ids = rng.integers(0, rows, size=k)
        repeat = rng.random(k) < REPEATED
        ids[repeat] = rng.choice(ids, size=int(repeat.sum()))
        values = rng.standard_normal((k, dim)).astype(np.float32)
        grads.append(optx.RowSparse(jnp.asarray(ids, jnp.int32), jnp.asarray(values), (rows, dim)))
    return grads


class Timing(NamedTuple):
    """Seconds per step: wall-clock, and CPU time of this process (all its threads)."""

    wall: float
    cpu: float


def timed_loops(run: Callable[[int], Any], steps: int, loops: int) -> Timing:
    """Medians over ``loops`` calls of ``run(steps)`` (which blocks on its result), per step.

    The CPU time does not count the time the process waits while the machine runs others, so
    on a shared machine it is the steadier figure.
    """
    walls, cpus = [], []
    for _ in range(loops):
        wall, cpu = time.perf_counter(), time.process_time()
        run(steps)
        walls.append((time.perf_counter() - wall) / steps)
        cpus.append((time.process_time() - cpu) / steps)
    return Timing(statistics.median(walls), statistics.median(cpus))


def donated_step(tx: Any, apply: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    """A jitted ``(params, state, grads) -> (params, state)`` donating params and state."""

    def step(params: Any, state: Any, grads: Any) -> tuple[Any, Any]:
        updates, state = tx.update(grads, state, params)
        return apply(params, updates), state

    return jax.jit(step, donate_argnums=(0, 1))


def run_case(
    tx: Any, table: np.ndarray, grads: Sequence[Any], steps: int, loops: int, lib: str
) -> Timing:
    """Time per step of ``tx`` on ``{"emb": table}``, cycling through ``grads``."""
    params = {"emb": jnp.array(table)}  # a fresh copy: the steps donate it
    apply = optax.apply_updates if lib == "optax" else optx.apply_updates
    step = donated_step(tx, apply)
    grads = [{"emb": g} for g in grads]
    box = [jax.block_until_ready(step(params, tx.init(params), grads[0]))]  # compiles

    def run(n: int) -> None:
        for i in range(n):
            box[0] = step(*box[0], grads[i % len(grads)])
        jax.block_until_ready(box[0])

    timing = timed_loops(run, steps, loops)
    del params
    box.clear()  # frees the table before the next case
    jax.clear_caches()
    gc.collect()
    return timing


def gradient_times(
    table: np.ndarray, grads: Sequence[optx.RowSparse], steps: int, loops: int
) -> tuple[Timing, Timing]:
    """Time of a lookup loss's gradient: dense `jax.grad`, and `optx.embedding_grad`."""
    emb = jnp.asarray(table)
    ids = [g.indices for g in grads]
    target = jnp.ones(table.shape[1], jnp.float32)

    def loss(rows: jax.Array, target: jax.Array) -> jax.Array:
        return jnp.sum((rows - target) ** 2)

    def timing(fn: Callable[..., Any]) -> Timing:
        fn = jax.jit(fn)
        jax.block_until_ready(fn(emb, ids[0], target))  # compiles

        def run(n: int) -> None:
            jax.block_until_ready([fn(emb, ids[i % len(ids)], target) for i in range(n)])

        return timed_loops(run, steps, loops)

    dense = timing(jax.grad(lambda t, i, y: loss(t[i], y)))
    sparse = timing(lambda t, i, y: optx.embedding_grad(loss, t, i, y))
    return dense, sparse


OPTIMIZERS = {
    "sgd": (lambda: optx.sgd(0.1), lambda: optx.sgd(0.1), lambda: optax.sgd(0.1)),
    "adagrad": (lambda: optx.adagrad(0.1), lambda: optx.adagrad(0.1), lambda: optax.adagrad(0.1)),
    "adam": (lambda: optx.adam(1e-3), lambda: optx.lazy_adam(1e-3), lambda: optax.adam(1e-3)),
}


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Runs the benchmark, prints the table and returns its rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a 10,000 x 8 table (smoke test)")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed loop")
    parser.add_argument("--loops", type=int, default=3, help="timed loops per figure")
    args = parser.parse_args(argv)
    shape = TINY if args.tiny else FULL
    rows, dim = shape["rows"], shape["dim"]
    table = np.random.default_rng(1).standard_normal((rows, dim)).astype(np.float32)
    grads = sparse_grads(rows, dim)
    dense_grads = [grads[0].todense()]  # the dense step's cost does not depend on the values
    k = grads[0].indices.shape[0]
    print(
        f"{rows:,} x {dim} float32 table, {k:,} rows per step ({TOUCHED:.0%}, ~{REPEATED:.0%} "
        f"repeated); {jax.devices()[0].platform}, JAX {jax.__version__}, optax "
        f"{optax.__version__}; median of {args.loops} loops of {args.steps} donated steps"
    )
    header = (
        f"{'':<19}{'wall-clock ms per step':^42}{'CPU ms per step':^38}\n"
        f"{'optimizer':<19}{'optax':>9}{'dense':>9}{'sparse':>9}{'d/s':>8}{'d/optax':>9}"
        f"{'optax':>9}{'dense':>9}{'sparse':>9}{'d/s':>8}"
    )
    print(header)
    results = []
    timing = (args.steps, args.loops)
    for name, (dense_tx, sparse_tx, optax_tx) in OPTIMIZERS.items():
        ref = run_case(optax_tx(), table, dense_grads, *timing, "optax")
        dense = run_case(dense_tx(), table, dense_grads, *timing, "optx")
        sparse = run_case(sparse_tx(), table, grads, *timing, "optx")
        label = f"{name} / lazy_adam" if name == "adam" else name
        results.append({"optimizer": label, "optax_dense": ref, "dense": dense, "sparse": sparse})
        print(
            f"{label:<19}{ref.wall * 1e3:>9.2f}{dense.wall * 1e3:>9.2f}{sparse.wall * 1e3:>9.2f}"
            f"{dense.wall / sparse.wall:>7.1f}x{dense.wall / ref.wall:>8.2f}x"
            f"{ref.cpu * 1e3:>9.2f}{dense.cpu * 1e3:>9.2f}{sparse.cpu * 1e3:>9.2f}"
            f"{dense.cpu / sparse.cpu:>7.1f}x"
        )
    del dense_grads
    gc.collect()
    dense, sparse = gradient_times(table, grads, *timing)
    results.append({"optimizer": "gradient", "dense": dense, "sparse": sparse})
    print(
        f"{'gradient of lookup':<19}{'':>9}{dense.wall * 1e3:>9.2f}{sparse.wall * 1e3:>9.2f}"
        f"{dense.wall / sparse.wall:>7.1f}x{'':>9}{'':>9}{dense.cpu * 1e3:>9.2f}"
        f"{sparse.cpu * 1e3:>9.2f}{dense.cpu / sparse.cpu:>7.1f}x"
    )
    print(
        "d/s: the dense step's time over the sparse step's; d/optax: optx's dense step over "
        "optax's. sparse: optx.sgd / adagrad / lazy_adam on a RowSparse gradient; the "
        "gradient row: jax.grad of a lookup loss against optx.embedding_grad."
    )
    return results


if __name__ == "__main__":
    main()
