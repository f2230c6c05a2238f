"""The Keras-style stateful wrapper's cost over the raw jitted functional step it runs.

Two measurements:

- per step, on the GPT-shaped tree and the many-small-leaves tree: ``Adam.apply`` and
  ``Adam.stateless_apply`` beside the raw jitted step of the very chain the wrapper builds
  (``opt.transform``; update + `optx.apply_updates`), donating the state as ``apply``
  does, or the state and the parameters as ``stateless_apply`` does (optax's and Keras's
  Adam on the same trees are in the step workloads' tables).
- the Python overhead per call: ``apply`` against the raw step on tiny leaves (4 floats),
  each call blocking on its result, at several leaf counts, fitted as ``a + b * leaves``
  (the target: 50 us + 0.5 us/leaf).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

import optx
from bench import peers, timing, workloads
from bench.peers import Row


def _raw(opt: Any, params: Any, grads: Any, donate: tuple[int, ...]) -> Callable[[], Any]:
    """The wrapper's own chain as a jitted ``(params, state, grads)`` step."""
    tx = opt.transform
    state = tx.init(params)

    # Outputs in the order of the donated inputs: JAX pairs them by shape in order, and
    # new parameters listed before a donated state would take the moments' buffers.
    state_first = donate == (1,)

    def step(p: Any, s: Any, g: Any) -> tuple[Any, Any]:
        updates, s = tx.update(g, s, p)
        new = optx.apply_updates(p, updates)
        return (s, new) if state_first else (new, s)

    compiled, _ = timing.compile_step(step, (params, state, grads), donate)
    box = [params, state]

    def run() -> Any:
        out = compiled(box[0], box[1], grads)
        box[1], box[0] = out if state_first else out[::-1]
        return box[0]

    return run


def _apply(params: Any, grads: Any) -> Callable[[], Any]:
    opt, box = optx.optimizers.Adam(1e-3), [params]

    def run() -> Any:
        box[0] = opt.apply(grads, box[0])
        return box[0]

    return run


def _stateless(params: Any, grads: Any) -> Callable[[], Any]:
    opt = optx.optimizers.Adam(1e-3)
    opt.build(params)
    box = [params, opt.variables]

    def run() -> Any:
        box[0], box[1] = opt.stateless_apply(box[1], grads, box[0])
        return box[0]

    return run


def _steps(name: str, size: str, loops: int) -> dict[str, Any]:
    w = workloads.workload(name, size)
    params = workloads.materialise(w.shapes, seed=0, scale=0.02)
    grads = workloads.materialise(w.shapes, seed=1, scale=1e-3)
    cases: list[tuple[str, str, Callable[[], Callable[[], Any]]]] = [
        ("raw", "donates state", lambda: _raw(_adam(), _copy(params), grads, (1,))),
        ("raw", "donates params + state", lambda: _raw(_adam(), _copy(params), grads, (0, 1))),
        ("wrapper", "Adam.apply", lambda: _apply(_copy(params), grads)),
        ("wrapper", "Adam.stateless_apply", lambda: _stateless(_copy(params), grads)),
    ]
    rows = []
    for kind, variant, build in cases:
        row = Row("adam", kind, variant)
        try:
            row.donated = timing.time_loop(build(), loops)
        except Exception as e:  # reported in the table; the CI test fails on it
            row.note = peers.error_note(e)
        rows.append(row)
    raw = {r.variant: r.donated.median for r in rows if r.library == "raw" and r.donated}
    for r in rows:
        if r.donated is not None and r.variant == "Adam.apply":
            r.ratio = r.donated.median / raw["donates state"]
        elif r.donated is not None and raw:
            r.ratio = r.donated.median / raw["donates params + state"]
    return {"tree": name, "title": w.title, "leaves": w.num_leaves(), "rows": rows}


def _adam() -> Any:
    return optx.optimizers.Adam(1e-3)


def _copy(tree: Any) -> Any:
    return workloads.copy_tree(tree)


def _blocking(run: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: jax.block_until_ready(run())


def overhead(size: str, loops: int) -> dict[str, Any]:
    """Seconds per ``apply`` and per raw step on tiny leaves; the fit of their difference."""
    points = []
    for n in workloads.CALL_LEAVES[size]:
        shapes = workloads.leaves_shapes(n, (4,))
        params = workloads.materialise(shapes, seed=0, scale=0.02)
        grads = workloads.materialise(shapes, seed=1, scale=1e-3)
        # Each call blocks: the device's time cannot hide the Python time behind it.
        raw = timing.time_loop(_blocking(_raw(_adam(), _copy(params), grads, (1,))), loops)
        wrapped = timing.time_loop(_blocking(_apply(_copy(params), grads)), loops)
        raw, wrapped = raw.median, wrapped.median
        points.append({"leaves": n, "raw_s": raw, "apply_s": wrapped, "overhead_s": wrapped - raw})
        jax.clear_caches()
    xs = [p["leaves"] for p in points]
    a, b = timing.fit_line(xs, [p["overhead_s"] for p in points])
    a_total, b_total = timing.fit_line(xs, [p["apply_s"] for p in points])
    return {
        "points": points,
        "overhead_fit": {"a_s": a, "b_s_per_leaf": b},
        "apply_fit": {"a_s": a_total, "b_s_per_leaf": b_total},
    }


def run(size: str, loops: int) -> dict[str, Any]:
    return {
        "workload": "stateful",
        "trees": [_steps(name, size, loops) for name in ("gpt", "many")],
        "overhead": overhead(size, loops),
    }
