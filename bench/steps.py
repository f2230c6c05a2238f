"""The step-time workloads: every optimizer, as optx's variants and each peer, on one tree."""

from __future__ import annotations

from typing import Any

import optx
from bench import bandwidth, optimizers, peers, workloads
from bench.peers import Row
from bench.workloads import XLA_OPTIONS

OPTX_VARIANTS = ("per-leaf", "flat state", "flat params", f"per-leaf, {XLA_OPTIONS}")


def run(
    name: str, size: str, loops: int, only_optimizers: tuple[str, ...] | None
) -> dict[str, Any]:
    """Runs one step workload; returns its description, measured bandwidth and rows."""
    w = workloads.workload(name, size)
    shapes = w.leaf_shapes()
    params = workloads.materialise(w.shapes, seed=0, scale=0.02)
    grads = workloads.materialise(w.shapes, seed=1, scale=1e-3)
    gbps = bandwidth.triad_gbps(w.num_params(), loops)
    has_optax, keras_note = peers.installed("optax"), peers.keras_note()
    torch_mode = peers.torch_mode() if peers.installed("torch") else ""
    rows: list[Row] = []
    for opt in w.optimizers:
        if only_optimizers and opt not in only_optimizers:
            continue
        nondonated = opt in w.nondonated
        row = Row(opt, "optax", "")
        if has_optax:
            _guard(row, peers.run_jax, peers.optax_make(opt, params, grads), loops, nondonated)
        else:
            row.note = "not installed"
        rows.append(row)
        options = optx.compiler_options()
        if options and has_optax and w.runs("optax", XLA_OPTIONS, opt):
            row = Row(opt, "optax", XLA_OPTIONS)
            make = peers.optax_make(opt, params, grads)
            _guard(row, peers.run_jax, make, loops, False, options)  # donated only
            rows.append(row)
        row = Row(opt, "keras", "stateless_apply, jitted")
        if keras_note:
            row.note = keras_note
        elif not w.runs("keras", "", opt):
            row.note = f"skipped at --size {size}"
        else:
            _guard(row, peers.run_jax, peers.keras_make(opt, params, grads), loops, nondonated)
        rows.append(row)
        if opt in optimizers.TORCH:
            row = Row(opt, "torch", f"{torch_mode} {optimizers.TORCH[opt]}".strip())
            if not torch_mode:
                row.note = "not installed"
            else:
                _guard(row, peers.run_torch, params, grads, loops)
            rows.append(row)
        for variant in OPTX_VARIANTS:
            with_options = variant.endswith(XLA_OPTIONS)
            if with_options and not options:
                continue  # no options for this backend: the per-leaf row says it all
            base = variant.split(",")[0]
            row = Row(opt, "optx", variant, note=peers.optx_note(opt, base))
            if not row.note and not w.runs("optx", variant, opt):
                row.note = f"skipped at --size {size}"
            if not row.note:
                make = peers.optx_make(opt, base, params, grads)
                if with_options:  # donated only
                    _guard(row, peers.run_jax, make, loops, False, options)
                else:
                    _guard(row, peers.run_jax, make, loops, nondonated)
            rows.append(row)
    spec_bytes = {opt: optimizers.SPECS[opt].bytes_per_step(shapes) for opt in optimizers.NAMES}
    for row in rows:
        if row.donated is not None:
            row.fraction = bandwidth.fraction_of_floor(
                spec_bytes[row.optimizer], row.donated.median, gbps
            )
    ratios(rows)
    return {
        "workload": name,
        "title": w.title,
        "leaves": w.num_leaves(),
        "params": w.num_params(),
        "param_bytes": 4 * w.num_params(),
        "triad_gbps": gbps,
        "bytes_per_step": spec_bytes,
        "rows": rows,
    }


def _guard(row: Row, fn: Any, *args: Any) -> None:
    """Runs ``fn(row, *args)``; an exception becomes the row's note (the run goes on)."""
    try:
        fn(row, *args)
    except Exception as e:  # reported in the table; the CI test fails on it
        row.note = peers.error_note(e)


def ratios(rows: list[Row]) -> None:
    """optx rows: this variant's donated step over optax's; peer rows: best optx over the peer."""
    by_opt: dict[str, list[Row]] = {}
    for row in rows:
        by_opt.setdefault(row.optimizer, []).append(row)
    for group in by_opt.values():
        optx_times = [r.donated.median for r in group if r.library == "optx" and r.donated]
        best = min(optx_times) if optx_times else None
        optax = next((r.donated.median for r in group if r.library == "optax" and r.donated), None)
        for r in group:
            if r.donated is None:
                continue
            if r.library == "optx" and optax:
                r.ratio = r.donated.median / optax
            elif r.library != "optx" and best is not None:
                r.ratio = best / r.donated.median
