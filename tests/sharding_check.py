"""Run on 8 CPU devices by tests/test_sharding_registry.py.

``python sharding_check.py init Auto`` (or ``Explicit``): every registry entry's
``jit(init)`` and donated step on a 4x2 mesh with those axis types. ``python
sharding_check.py zero``: ZeRO-1 with a plain donated step against one device. Prints one
line per check; exits non-zero with every failure listed.
"""

from __future__ import annotations

import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import registry
from helpers import FAST_COMPILE, roundoff_rtol
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import optx

# The conformance tree's structure (labels and masks select by these paths), in shapes the
# 4x2 mesh divides, sharded every way: both axes, one axis, a later axis, replicated.
SPECS = {
    "dense": {"kernel": ((8, 4), P("data", "model")), "bias": ((4,), P("model"))},
    "layers": [{"w": ((4, 8), P(None, "data"))}, ((8,), P("data"))],
    "scale": ((), P()),
}
is_spec = lambda x: isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], P)  # noqa: E731


def make_params(mesh: Any, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)

    def make(leaf: tuple) -> jax.Array:
        shape, spec = leaf
        x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
        return jax.device_put(x, NamedSharding(mesh, spec))

    return jax.tree.map(make, SPECS, is_leaf=is_spec)


def same(a: Any, b: Any, ndim: int) -> bool:
    return a.is_equivalent_to(b, ndim)


def narrow(
    entries: list[Any], what: str, error: Exception, mesh: Any, failures: list[str], label: str
) -> None:
    """Reports the error of a single entry, or runs each entry of a failed batch alone."""
    if len(entries) == 1:
        failures.append(f"{label} {entries[0].key}: {what} raised {type(error).__name__}: {error}")
        return
    for e in entries:
        check_batch([e], mesh, failures, label)


def check_batch(entries: list[Any], mesh: Any, failures: list[str], label: str) -> None:
    """One jitted ``init`` and one donated jitted step for all of ``entries`` (a compile
    each, not one per entry); an entry that raises is found by running it alone.
    """
    auto = mesh.axis_types[0] == AxisType.Auto
    txs = [e() for e in entries]
    params = make_params(mesh)
    grads = make_params(mesh, seed=1)
    # Under Auto axes a traced parameter carries no sharding, so `flatten` lays out what it
    # sees: build its state outside `jit` there (see README, "Sharded optimizer state").
    eager = [auto and e.key.startswith("flatten") for e in entries]

    def init_all(p: Any) -> list[Any]:
        return [None if skip else tx.init(p) for tx, skip in zip(txs, eager, strict=True)]

    def step_all(p: Any, states: list[Any], g: Any) -> tuple:
        out_p, out_s = [], []
        for tx, e, s in zip(txs, entries, states, strict=True):
            u, s = tx.update(g, s, p, **e.extra)
            out_p.append(optx.apply_updates(p, u))
            out_s.append(s)
        return out_p, out_s

    try:
        states = jax.jit(init_all, compiler_options=FAST_COMPILE)(params)
        states = [
            tx.init(params) if skip else s for tx, skip, s in zip(txs, eager, states, strict=True)
        ]
    except Exception as error:
        narrow(entries, "init", error, mesh, failures, label)
        return
    for e, tx, state in zip(entries, txs, states, strict=True):
        expected = optx.state_shardings(tx, params)
        got = jax.tree_util.tree_flatten_with_path(state)[0]
        want = jax.tree.leaves(expected, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
        if len(got) != len(want):
            failures.append(f"{label} {e.key}: state_shardings has another structure")
            continue
        for (path, leaf), s in zip(got, want, strict=True):
            if not s.is_fully_replicated and not same(leaf.sharding, s, leaf.ndim):
                failures.append(
                    f"{label} {e.key}: init{jax.tree_util.keystr(path)} is on "
                    f"{leaf.sharding}, expected {s}"
                )
    state_before = [[(x.sharding, x.ndim) for x in jax.tree.leaves(s)] for s in states]
    step = jax.jit(step_all, donate_argnums=(1,), compiler_options=FAST_COMPILE)
    try:
        new_params, new_states = step(params, states, grads)
        new_params, new_states = step(params, new_states, grads)
    except Exception as error:
        narrow(entries, "step", error, mesh, failures, label)
        return
    before = jax.tree.leaves(jax.tree.map(lambda x: x.sharding, params))
    for e, p, s, shardings in zip(entries, new_params, new_states, state_before, strict=True):
        for (path, x), want_s in zip(
            jax.tree_util.tree_flatten_with_path(p)[0], before, strict=True
        ):
            if not same(x.sharding, want_s, x.ndim):
                failures.append(
                    f"{label} {e.key}: params{jax.tree_util.keystr(path)} came back on "
                    f"{x.sharding}, was {want_s}"
                )
        for (path, x), (sh, ndim) in zip(
            jax.tree_util.tree_flatten_with_path(s)[0], shardings, strict=True
        ):
            if not sh.is_fully_replicated and not same(x.sharding, sh, ndim):
                failures.append(
                    f"{label} {e.key}: state{jax.tree_util.keystr(path)} came back on "
                    f"{x.sharding}, was {sh}"
                )


def main_init(kind: str) -> None:
    failures: list[str] = []
    entries = list(registry.REGISTRY.values())
    for types in (AxisType[kind],):
        mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(types, types))
        for i in range(0, len(entries), BATCH):
            check_batch(entries[i : i + BATCH], mesh, failures, types.name)
        print(f"{types.name}: {len(entries)} entries checked")
    if failures:
        print("\n".join(failures))
        sys.exit(1)


BATCH = 40


ZERO = {
    "adamw": lambda: optx.adamw(1e-2, weight_decay=0.1),
    "lion": lambda: optx.lion(1e-3),
    "sgd": lambda: optx.sgd(1e-2, momentum=0.9),
    "clip_adamw_ema": lambda: optx.chain(
        optx.clip_by_global_norm(1.0), optx.adamw(1e-2), optx.ema_params(0.9)
    ),
}


def main_zero() -> None:
    failures: list[str] = []
    steps = 3
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((32, 16)).astype(np.float32)
    b0 = rng.standard_normal(16).astype(np.float32)
    grads = [
        {
            "w": rng.standard_normal((32, 16)).astype(np.float32),
            "b": rng.standard_normal(16).astype(np.float32),
        }
        for _ in range(steps)
    ]
    for types in (AxisType.Auto, AxisType.Explicit):
        mesh = jax.make_mesh((8,), ("data",), axis_types=(types,))
        replicated = NamedSharding(mesh, P())
        for name, make in ZERO.items():
            tx = make()
            # One device: the reference.
            p1, s1 = {"w": jnp.asarray(w0), "b": jnp.asarray(b0)}, None
            s1 = tx.init(p1)
            one = jax.jit(lambda p, s, g, tx=tx: _step(tx, p, s, g))
            for g in grads:
                p1, s1 = one(p1, s1, g)
            # ZeRO-1: replicated parameters, the state split over "data", a plain step.
            params = jax.device_put({"w": w0, "b": b0}, replicated)
            shardings = optx.shard_state(tx, mesh, "data", params=params)
            state = jax.jit(tx.init, out_shardings=shardings)(params)
            step = jax.jit(lambda p, s, g, tx=tx: _step(tx, p, s, g), donate_argnums=(0, 1))
            for g in grads:
                params, state = step(params, state, jax.device_put(g, replicated))
            label = f"{types.name} {name}"
            for k, x in params.items():
                if not x.sharding.is_equivalent_to(replicated, x.ndim):
                    failures.append(f"{label}: params[{k!r}] came back on {x.sharding}")
            for x, s in zip(jax.tree.leaves(state), jax.tree.leaves(shardings), strict=True):
                if not x.sharding.is_equivalent_to(s, x.ndim):
                    failures.append(f"{label}: a state leaf came back on {x.sharding}, not {s}")
            # Elementwise maths on the same inputs; the global norm may sum in another order.
            rtol = roundoff_rtol(steps, roundings=8, reduced=32 * 16 + 16)
            for k in params:
                a, b = np.asarray(params[k], np.float64), np.asarray(p1[k], np.float64)
                err = float(np.max(np.abs(a - b)))
                bound = rtol * float(np.max(np.abs(b)))
                if err > bound:
                    failures.append(f"{label}: params[{k!r}] off by {err:.3g} > {bound:.3g}")
            print(f"{label}: ZeRO-1 equals one device, parameters replicated")
    if failures:
        print("\n".join(failures))
        sys.exit(1)


def _step(tx: Any, p: Any, s: Any, g: Any) -> tuple:
    u, s = tx.update(g, s, p)
    return optx.apply_updates(p, u), s


if __name__ == "__main__":
    if sys.argv[1] == "init":
        main_init(sys.argv[2])
    else:
        main_zero()
