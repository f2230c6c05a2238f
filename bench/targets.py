"""The issue's performance targets, each checked against figures of the same run.

Every line is a ratio with its limit: ``met`` when the ratio is at most the limit. Where a
target covers several optimizers, the line shows the worst one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.peers import Row
from bench.report import DASH, _table, num

FLAT = ("flat state", "flat params")


def _best(rows: list[Row], optimizer: str, library: str, variants: tuple[str, ...] = ()) -> Any:
    """The fastest donated step among ``rows`` of that optimizer, library (and variants)."""
    times = [
        r.donated.median
        for r in rows
        if r.optimizer == optimizer
        and r.library == library
        and r.donated is not None
        and (not variants or r.variant in variants)
    ]
    return min(times) if times else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _line(target: str, limit: float, measured: float | None, where: str) -> list[str]:
    if measured is None:
        return [target, DASH, where, "not measured"]
    return [target, num(measured, 2, "x"), where, "met" if measured <= limit else "missed"]


def _worst(
    target: str, limit: float, rows: list[Row], ratio: Callable[[str], float | None]
) -> list[str]:
    """The line of a target checked per optimizer: its worst ratio, and which optimizer."""
    found = []
    for opt in sorted({r.optimizer for r in rows}):
        value = ratio(opt)
        if value is not None:
            found.append((value, opt))
    if not found:
        return _line(target, limit, None, "")
    value, opt = max(found)
    return _line(target, limit, value, f"worst: {opt}")


def _step_lines(name: str, res: dict[str, Any]) -> list[list[str]]:
    rows = res["rows"]

    def vs_optax(variants: tuple[str, ...]) -> Callable[[str], float | None]:
        # optx's default steps against optax's default step; optx's best (XLA options
        # included) against optax's best (with the same options).
        peer = () if not variants else ("",)
        return lambda o: _ratio(_best(rows, o, "optx", variants), _best(rows, o, "optax", peer))

    lines = [_worst(f"{name}: per-leaf step <= 1.0x optax", 1.0, rows, vs_optax(("per-leaf",)))]
    if name in ("gpt", "wide"):
        lines.append(_worst(f"{name}: best optx step <= 0.7x optax", 0.7, rows, vs_optax(())))
    if name == "many":
        lines.append(_worst("many: flat step <= 0.1x optax", 0.1, rows, vs_optax(FLAT)))
    if name == "large":
        ratio = _ratio(_best(rows, "adamw", "optx"), _best(rows, "adamw", "torch"))
        lines.append(_line("large: adamw <= 1.2x torch", 1.2, ratio, "best optx variant"))

    def temp(o: str) -> float | None:
        # The per-leaf step, with `optx.compiler_options()` where this backend has them.
        mem = [
            r.memory["temp"]
            for r in rows
            if r.optimizer == o
            and r.library == "optx"
            and r.variant.startswith("per-leaf")
            and r.memory
            and r.memory.get("temp", -1) >= 0
        ]
        return min(mem) / res["param_bytes"] if mem else None

    # No temporary the size of the parameters: under 1x (0.999: float round-off).
    lines.append(_worst(f"{name}: donated temp / param bytes < 1", 0.999, rows, temp))
    return lines


def check(results: dict[str, Any]) -> list[list[str]]:
    """Rows of (target, measured, where, met/missed)."""
    lines: list[list[str]] = []
    for name, res in results.items():
        if isinstance(res, dict) and "triad_gbps" in res:
            lines += _step_lines(name, res)
    for leaves, limit in ((1000, 0.2), (5000, 0.05)):
        for r in results.get("compile", {}).get("rows", []):
            if r["leaves"] == leaves and r["library"] == "optx":
                target = f"compile at {leaves:,} leaves <= {limit}x optax"
                lines.append(_line(target, limit, r.get("ratio"), r["variant"]))
    stateful = results.get("stateful")
    if stateful:
        for tree in stateful["trees"]:
            for r in tree["rows"]:
                if tree["tree"] == "gpt" and r.library == "wrapper":
                    lines.append(_line("gpt: wrapper step <= 1.1x raw", 1.1, r.ratio, r.variant))
        points = stateful["overhead"]["points"]
        worst = max(p["overhead_s"] / (50e-6 + 0.5e-6 * p["leaves"]) for p in points)
        lines.append(_line("apply overhead <= 50 us + 0.5 us/leaf", 1.0, worst, "worst point"))
    return lines


def table(results: dict[str, Any]) -> str:
    return "### targets\n\n" + _table(["target", "measured", "where", ""], check(results))
