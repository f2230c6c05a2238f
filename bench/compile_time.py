"""Compile time (and donated step time) of Adam against the number of leaves.

Each figure is trace + lower + XLA compile of a fresh step function after
`jax.clear_caches()`, for a tree of ``n`` leaves of 64 float32 values. The same compiled
executable is then timed (donated), which gives the step-time-against-leaves curve of
the plot. ``jaxpr eqns/leaf`` counts the traced equations (nested calls included) per leaf.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax

from bench import peers, timing, workloads

# Above this many leaves only optax.adam and optx's per-leaf and flat-parameter steps
# compile: the others take minutes there (Keras, and a concatenation per step: optax.flatten
# and optx's flat state compile 3-4x slower than optax.adam already at 300 leaves).
MAX_LEAVES_SLOW = 1000
SLOW = {("optax", "optax.flatten"), ("keras", "stateless_apply, jitted"), ("optx", "flat state")}


def count_eqns(jaxpr: Any) -> int:
    """Equations of a jaxpr, counting those inside nested jaxprs (pjit, custom_jvp, ...)."""
    total = 0
    for eqn in jaxpr.eqns:
        inner = [v for v in eqn.params.values() if hasattr(v, "eqns") or hasattr(v, "jaxpr")]
        if inner:
            total += sum(count_eqns(getattr(v, "jaxpr", v)) for v in inner)
        else:
            total += 1
    return total


def _makes(params: Any, grads: Any, n: int) -> list[tuple[str, str, str, peers.Make | None]]:
    """(library, variant, note, make) of each implementation compared."""
    out: list[tuple[str, str, str, peers.Make | None]] = []
    if peers.installed("optax"):
        import optax

        out.append(("optax", "", "", peers.optax_make("adam", params, grads)))

        def flat() -> tuple[Callable[..., Any], Any, Any, Any]:
            tx = optax.flatten(optax.adam(1e-3))
            p = workloads.copy_tree(params)
            return _step(tx, optax.apply_updates), p, tx.init(p), grads

        out.append(("optax", "optax.flatten", "", flat))
    else:
        out.append(("optax", "", "not installed", None))
    note = peers.keras_note()
    keras_make = None if note else peers.keras_make("adam", params, grads)
    out.append(("keras", "stateless_apply, jitted", note, keras_make))
    for variant in ("per-leaf", "flat state", "flat params"):
        note = peers.optx_note("adam", variant)
        make = None if note else peers.optx_make("adam", variant, params, grads)
        out.append(("optx", variant, note, make))
    if n > MAX_LEAVES_SLOW:
        skipped = f"skipped above {MAX_LEAVES_SLOW:,} leaves (compile time)"
        out = [
            (lib, v, skipped, None) if (lib, v) in SLOW else (lib, v, note, make)
            for lib, v, note, make in out
        ]
    return out


def _step(tx: Any, apply: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def step(params: Any, state: Any, grads: Any) -> tuple[Any, Any]:
        updates, state = tx.update(grads, state, params)
        return apply(params, updates), state

    return step


def run(size: str, loops: int) -> dict[str, Any]:
    """Runs the sweep; rows of library, variant, leaves, compile s, eqns/leaf, step ms."""
    rows: list[dict[str, Any]] = []
    for n in workloads.COMPILE_LEAVES[size]:
        shapes = workloads.leaves_shapes(n, (64,))
        params = workloads.materialise(shapes, seed=0, scale=0.02)
        grads = workloads.materialise(shapes, seed=1, scale=1e-3)
        for library, variant, note, make in _makes(params, grads, n):
            row: dict[str, Any] = {"library": library, "variant": variant, "leaves": n}
            row["note"] = note
            if make is not None:
                try:
                    row.update(_measure(make, loops, n))
                except Exception as e:  # reported in the table; the CI test fails on it
                    row["note"] = peers.error_note(e)
            rows.append(row)
    _ratios(rows)
    return {"workload": "compile", "rows": rows}


def _measure(make: peers.Make, loops: int, n: int) -> dict[str, Any]:
    fn, params, state, grads = make()
    jax.clear_caches()
    start = time.perf_counter()
    traced = jax.jit(fn, donate_argnums=(0, 1)).trace(params, state, grads)
    compiled = traced.lower().compile()
    seconds = time.perf_counter() - start
    eqns = count_eqns(traced.jaxpr.jaxpr)
    box = [params, state]

    def step() -> Any:
        box[0], box[1] = compiled(box[0], box[1], grads)
        return box[0]

    t = timing.time_loop(step, loops)
    return {
        "compile_s": seconds,
        "eqns_per_leaf": eqns / n,
        "step": t.as_dict(),
        "memory": timing.memory(compiled),
    }


def _ratios(rows: list[dict[str, Any]]) -> None:
    """Each row's compile time over optax's (plain ``optax.adam``) at the same leaf count."""
    base = {
        r["leaves"]: r["compile_s"]
        for r in rows
        if r["library"] == "optax" and not r["variant"] and "compile_s" in r
    }
    for r in rows:
        if "compile_s" in r and base.get(r["leaves"]):
            r["ratio"] = r["compile_s"] / base[r["leaves"]]
