"""Per-step time of the Keras-style stateful optimizers beside the functional step, optax and Keras.

Run: ``python bench/stateful.py [--small]`` (CPU unless JAX finds an accelerator). Each figure
is the median over repeats of a timed loop of steps, excluding compilation, blocking on
the result.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import keras
import numpy as np
import optax

import optx

LEAVES, STEPS, REPEATS = 64, 50, 5
# `--small`: 64 leaves of 16 values, where the per-call overhead of the wrappers shows.
SIZE = 16 if "--small" in sys.argv else 256 * 256


def _params() -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)
    return {f"p{i:02d}": jnp.asarray(rng.normal(size=SIZE), jnp.float32) for i in range(LEAVES)}


def _time(step: Callable[[], object]) -> float:
    jax.block_until_ready(step())  # compile and warm up
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        out = None
        for _ in range(STEPS):
            out = step()
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / STEPS)
    return statistics.median(times)


def functional(tx: optax.GradientTransformation) -> Callable[[], object]:
    params, grads = _params(), _params()
    state = tx.init(params)

    @jax.jit
    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    box = [params, state]

    def run() -> object:
        box[0], box[1] = step(box[0], box[1], grads)
        return box[0]

    return run


def stateful_apply() -> Callable[[], object]:
    opt, grads, box = optx.optimizers.Adam(1e-3), _params(), [_params()]

    def run() -> object:
        box[0] = opt.apply(grads, box[0])
        return box[0]

    return run


def stateful_stateless() -> Callable[[], object]:
    opt, grads, params = optx.optimizers.Adam(1e-3), _params(), _params()
    opt.build(params)
    box = [params, opt.variables]

    def run() -> object:
        box[0], box[1] = opt.stateless_apply(box[1], grads, box[0])
        return box[0]

    return run


def keras_stateless() -> Callable[[], object]:
    params, grads = _params(), _params()
    names = sorted(params)
    variables = [keras.Variable(params[n], name=n) for n in names]
    opt = keras.optimizers.Adam(1e-3)
    opt.build(variables)
    step = jax.jit(opt.stateless_apply, donate_argnums=0)
    g = [grads[n] for n in names]
    box = [[v.value for v in variables], [v.value for v in opt.variables]]

    def run() -> object:
        box[0], box[1] = step(box[1], g, box[0])
        return box[0]

    return run


def main() -> None:
    print(f"Adam, {LEAVES} leaves x {SIZE} float32 on {jax.devices()[0].device_kind}")
    base = _time(functional(optax.adam(1e-3)))
    rows = [
        ("optax.adam (jitted update + apply_updates)", base),
        ("optx.adam (same)", _time(functional(optx.adam(1e-3)))),
        ("optx.optimizers.Adam.apply", _time(stateful_apply())),
        ("optx.optimizers.Adam.stateless_apply", _time(stateful_stateless())),
        ("keras.optimizers.Adam.stateless_apply (jitted)", _time(keras_stateless())),
    ]
    for name, t in rows:
        print(f"{name:50s} {t * 1e3:8.3f} ms/step   {t / base:5.2f}x optax")


if __name__ == "__main__":
    main()
