"""Markdown tables of the results, the issue's targets checked against them, and JSON."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from bench import optimizers
from bench.peers import Row

DASH = "—"


def ms(t: Any) -> str:
    """``median ±half-spread%`` of a `Timing` (or its dict), in milliseconds."""
    if t is None:
        return DASH
    median, low, high = (
        (t["median"], t["low"], t["high"])
        if isinstance(t, dict)
        else (
            t.median,
            t.low,
            t.high,
        )
    )
    spread = 50 * (high - low) / median if median else 0.0
    return f"{_sig(median * 1e3)} ±{spread:.0f}%"


def _sig(x: float, digits: int = 3) -> str:
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def num(x: float | None, digits: int = 3, suffix: str = "") -> str:
    return DASH if x is None else _sig(x, digits) + suffix


def size(n: int | None) -> str:
    """Bytes in decimal units."""
    if n is None or n < 0:
        return DASH
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _table(header: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return "\n".join(out)


STEP_HEADER = [
    "optimizer",
    "library",
    "variant",
    "step ms (donated)",
    "step ms (not donated)",
    "optx/peer",
    "compile s",
    "temp bytes",
    "of floor",
]


def step_table(result: dict[str, Any]) -> str:
    lines = []
    for row in result["rows"]:
        r = row if isinstance(row, Row) else Row(**_row_fields(row))
        label = optimizers.SPECS[r.optimizer].label
        if r.note and r.donated is None:
            lines.append([label, r.library, r.variant, r.note, "", "", "", "", ""])
            continue
        plain = ms(r.plain) if r.plain else (r.note or DASH)
        lines.append(
            [
                label,
                r.library,
                r.variant,
                ms(r.donated),
                plain,
                num(r.ratio, 2, "x"),
                num(r.compile_s, 2),
                size(r.memory.get("temp")) if r.memory else DASH,
                num(r.fraction, 2),
            ]
        )
    head = (
        f"### {result['workload']}: {result['title']} ({result['params']:,} parameters, "
        f"{result['leaves']:,} leaves); triad {result['triad_gbps']:.1f} GB/s"
    )
    return head + "\n\n" + _table(STEP_HEADER, lines)


def _row_fields(d: dict[str, Any]) -> dict[str, Any]:
    return {f.name: d.get(f.name) for f in dataclasses.fields(Row) if f.name in d}


def compile_table(result: dict[str, Any]) -> str:
    header = ["leaves", "library", "variant", "compile s", "x optax", "eqns/leaf", "step ms"]
    lines = []
    for r in result["rows"]:
        if r.get("note") and "compile_s" not in r:
            lines.append([f"{r['leaves']:,}", r["library"], r["variant"], r["note"], "", "", ""])
            continue
        lines.append(
            [
                f"{r['leaves']:,}",
                r["library"],
                r["variant"],
                num(r["compile_s"], 3),
                num(r.get("ratio"), 2, "x"),
                num(r["eqns_per_leaf"], 3),
                ms(r["step"]),
            ]
        )
    head = "### compile: Adam, leaves of 64 float32 (trace + lower + compile, caches cleared)"
    return head + "\n\n" + _table(header, lines)


def stateful_tables(result: dict[str, Any]) -> str:
    parts = []
    for tree in result["trees"]:
        lines = []
        for r in tree["rows"]:
            r = r if isinstance(r, Row) else Row(**_row_fields(r))
            if r.donated is None:
                lines.append([r.library, r.variant, r.note, ""])
            else:
                lines.append([r.library, r.variant, ms(r.donated), num(r.ratio, 3, "x")])
        head = f"### stateful: {tree['title']} ({tree['leaves']:,} leaves), Adam"
        parts.append(head + "\n\n" + _table(["", "step", "step ms", "x raw"], lines))
    o = result["overhead"]
    lines = [
        [
            f"{p['leaves']:,}",
            _sig(p["raw_s"] * 1e6),
            _sig(p["apply_s"] * 1e6),
            _sig(p["overhead_s"] * 1e6),
        ]
        for p in o["points"]
    ]
    fit = o["overhead_fit"]
    parts.append(
        "### stateful: Python overhead per `apply` call (leaves of 4 floats)\n\n"
        + _table(["leaves", "raw step us", "Adam.apply us", "overhead us"], lines)
        + f"\n\nFit of the overhead: {fit['a_s'] * 1e6:.1f} us + "
        f"{fit['b_s_per_leaf'] * 1e6:.2f} us/leaf (target: 50 us + 0.5 us/leaf)."
    )
    return "\n\n".join(parts)


def to_json(results: dict[str, Any]) -> str:
    def default(x: Any) -> Any:
        if isinstance(x, Row):
            return x.as_dict()
        if dataclasses.is_dataclass(x):
            return dataclasses.asdict(x)
        return str(x)

    return json.dumps(results, default=default, indent=1)
