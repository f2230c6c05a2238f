"""bfloat16 parameters: plain, with `optx.kahan_summation`, with `optx.stochastic_rounding`.

Run: ``python bench/bf16.py [--tiny] [--steps N] [--loops N]``.

The problem: linear least squares, fixed data. ``X`` is 1,024 x 64 standard normal, the
target ``y = X @ w_true + 0.1 * noise`` with ``w_true ~ 2 N(0, 1)``, the parameters start at
``w0 ~ N(0, 1)`` and the loss is ``mean((X @ w - y)**2)``, computed in float32 from the
parameters cast up (the parameters, gradients and updates are in the parameters' dtype).
Its minimum is about 0.0088 (the noise), and about 0.0095 at the minimiser rounded to
bfloat16: no bfloat16 run can go lower. Each run takes ``--steps`` full-batch steps
(default 10,000; ``--tiny``: 200 on 64 x 8) inside one jitted ``fori_loop``: Adam at
learning rate 1e-3 and SGD at 1e-2, both of which converge in float32. The final loss of
each run is printed beside optax doing the same work (optax's optimizer, with the same optx
rounding transform chained last) and as a ratio to optx's float32 run. optax's ``adam``
keeps its second moment in the parameters' dtype (it has no ``nu_dtype``), so the first
Adam block uses float32 first moments only, for both; the second block is optx's
recommended set-up for bfloat16 parameters, both moments in float32.

The step-time table times one donated jitted step (``update`` + ``apply_updates``) on one
leaf of 2**21 bfloat16 parameters (``--tiny``: 2**10), median of ``--loops`` loops of 10
steps, and gives each time over the plain bfloat16 step's; the extra state column is the
rounding transform's state in bytes per parameter.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import optx

FULL = {"n": 1024, "d": 64, "steps": 10_000, "timed": 2**21}
TINY = {"n": 64, "d": 8, "steps": 200, "timed": 2**10}
F32 = jnp.float32
BF16 = jnp.bfloat16

# The rounding variants: (label, parameter dtype, the transform chained last or None).
VARIANTS: tuple[tuple[str, Any, Callable[[], Any] | None], ...] = (
    ("float32", F32, None),
    ("bfloat16", BF16, None),
    ("bfloat16 + kahan_summation()", BF16, optx.kahan_summation),
    ("bfloat16 + kahan_summation(float32)", BF16, lambda: optx.kahan_summation(F32)),
    ("bfloat16 + stochastic_rounding(0)", BF16, lambda: optx.stochastic_rounding(0)),
)

# The optimizers: (label, optx factory, optax factory or None).
OPTIMIZERS: tuple[tuple[str, Callable[[], Any], Callable[[], Any] | None], ...] = (
    (
        "adam, float32 mu",
        lambda: optx.adam(1e-3, mu_dtype=F32),
        lambda: optax.adam(1e-3, mu_dtype=F32),
    ),
    ("adam, float32 mu and nu", lambda: optx.adam(1e-3, mu_dtype=F32, nu_dtype=F32), None),
    ("sgd", lambda: optx.sgd(1e-2), lambda: optax.sgd(1e-2)),
)


def problem(n: int, d: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The fixed data ``X``, ``y`` and the starting point ``w0`` (see the module docstring)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d)).astype(np.float32)
    w_true = (2 * rng.standard_normal(d)).astype(np.float32)
    y = x @ w_true + (0.1 * rng.standard_normal(n)).astype(np.float32)
    w0 = rng.standard_normal(d).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y), jnp.asarray(w0)


def final_loss(tx: Any, dtype: Any, data: tuple[jax.Array, ...], steps: int) -> float:
    """The loss after ``steps`` steps of ``tx`` from ``w0`` in ``dtype``."""
    x, y, w0 = data

    def loss(w: jax.Array) -> jax.Array:
        r = x @ w.astype(F32) - y
        return jnp.mean(r * r)

    @jax.jit
    def train(w: jax.Array) -> jax.Array:
        def body(_: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
            w, state = carry
            updates, state = tx.update(jax.grad(loss)(w), state, w)
            return optx.apply_updates(w, updates), state

        w, _ = jax.lax.fori_loop(0, steps, body, (w, tx.init(w)))
        return loss(w)

    return float(train(w0.astype(dtype)))


def with_rounding(base: Any, last: Callable[[], Any] | None, lib: str) -> Any:
    if last is None:
        return base
    return optax.chain(base, last()) if lib == "optax" else optx.chain(base, last())


def loss_rows(data: tuple[jax.Array, ...], steps: int) -> list[dict[str, Any]]:
    """The final losses of every optimizer and variant, optx and optax."""
    rows = []
    for name, make_optx, make_optax in OPTIMIZERS:
        f32_loss = None
        for label, dtype, last in VARIANTS:
            mine = final_loss(with_rounding(make_optx(), last, "optx"), dtype, data, steps)
            f32_loss = mine if f32_loss is None else f32_loss
            theirs = None
            if make_optax is not None:
                theirs = final_loss(with_rounding(make_optax(), last, "optax"), dtype, data, steps)
            row = {"optimizer": name, "variant": label, "optx": mine, "optax": theirs}
            rows.append({**row, "over_float32": mine / f32_loss})
    return rows


def step_time(tx: Any, size: int, loops: int, lib: str) -> float:
    """Median seconds of one donated jitted step on one bfloat16 leaf of ``size``."""
    apply = optax.apply_updates if lib == "optax" else optx.apply_updates

    def step(params: Any, state: Any, grads: Any) -> tuple[Any, Any]:
        updates, state = tx.update(grads, state, params)
        return apply(params, updates), state

    step = jax.jit(step, donate_argnums=(0, 1))
    rng = np.random.default_rng(1)
    params = jnp.asarray(rng.standard_normal(size), BF16)
    grads = jnp.asarray(rng.standard_normal(size), BF16)
    box = [jax.block_until_ready(step(params, tx.init(params), grads))]  # compiles
    times = []
    for _ in range(loops):
        start = time.perf_counter()
        for _ in range(10):
            box[0] = step(*box[0], grads)
        jax.block_until_ready(box[0])
        times.append((time.perf_counter() - start) / 10)
    return statistics.median(times)


def state_bytes(last: Callable[[], Any] | None, size: int) -> float:
    """The rounding transform's state, in bytes per bfloat16 parameter."""
    if last is None:
        return 0.0
    state = last().init(jnp.zeros(size, BF16))
    return sum(x.nbytes for x in jax.tree.leaves(state)) / size


def time_rows(size: int, loops: int) -> list[dict[str, Any]]:
    """Step times of each bfloat16 variant, over the plain bfloat16 step's."""
    rows = []
    # optax's closest Adam keeps its second moment in bfloat16 (it has no nu_dtype).
    timed = ((*OPTIMIZERS[1][:2], OPTIMIZERS[0][2]), OPTIMIZERS[2])
    for name, make_optx, make_optax in timed:
        plain = step_time(make_optx(), size, loops, "optx")
        peer = step_time(make_optax(), size, loops, "optax")
        for label, _, last in VARIANTS[1:]:
            tx = optx.chain(make_optx(), last()) if last else None
            t = plain if tx is None else step_time(tx, size, loops, "optx")
            row = {"optimizer": name, "variant": label, "seconds": t, "over_plain": t / plain}
            rows.append({**row, "optax_plain": peer, "bytes_per_param": state_bytes(last, size)})
    return rows


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def main(argv: Sequence[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Runs the benchmark, prints both tables and returns their rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a 64 x 8 problem (smoke test)")
    parser.add_argument("--steps", type=int, help="training steps (default 10,000; tiny 200)")
    parser.add_argument("--loops", type=int, default=5, help="timed loops per step time")
    args = parser.parse_args(argv)
    size = TINY if args.tiny else FULL
    steps = args.steps or size["steps"]
    data = problem(size["n"], size["d"])
    print(
        f"Least squares {size['n']} x {size['d']}, {steps:,} steps; "
        f"{jax.devices()[0].platform}, JAX {jax.__version__}, optax {optax.__version__}\n"
    )
    print(
        "| optimizer | parameters | optx final loss | optax final loss | optx / optax "
        "| optx / optx float32 |"
    )
    print("|---|---|---:|---:|---:|---:|")
    losses = loss_rows(data, steps)
    for r in losses:
        ratio = None if r["optax"] is None else r["optx"] / r["optax"]
        print(
            f"| {r['optimizer']} | {r['variant']} | {_fmt(r['optx'])} | {_fmt(r['optax'])} "
            f"| {_fmt(ratio)} | {_fmt(r['over_float32'])} |"
        )
    print(
        f"\nStep time, one donated jitted step on {size['timed']:,} bfloat16 parameters, "
        f"median of {args.loops} loops of 10 steps\n"
    )
    print(
        "| optimizer | parameters | ms per step | over plain bfloat16 | optax plain ms "
        "| extra state, bytes per parameter |"
    )
    print("|---|---|---:|---:|---:|---:|")
    times = time_rows(size["timed"], args.loops)
    for r in times:
        print(
            f"| {r['optimizer']} | {r['variant']} | {r['seconds'] * 1e3:.3f} "
            f"| {r['over_plain']:.2f} | {r['optax_plain'] * 1e3:.3f} "
            f"| {r['bytes_per_param']:.4g} |"
        )
    return {"losses": losses, "times": times}


if __name__ == "__main__":
    main()
