"""The plot: Adam's donated step time and compile time against the number of leaves."""

from __future__ import annotations

from typing import Any


def save(compile_result: dict[str, Any], path: str, subtitle: str = "") -> None:
    """Two log-log panels (step ms, compile s) of the compile sweep's rows, one line each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float, float]]] = {}
    for r in compile_result["rows"]:
        if "compile_s" not in r:
            continue
        lib, variant = r["library"], r["variant"]
        label = variant if variant.startswith(lib) else f"{lib} {variant}".strip()
        series.setdefault(label, []).append((r["leaves"], r["step"]["median"], r["compile_s"]))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label, points in sorted(series.items()):
        points.sort()
        xs = [p[0] for p in points]
        style = "-o" if label.startswith("optx") else "--s"
        axes[0].plot(xs, [p[1] * 1e3 for p in points], style, label=label)
        axes[1].plot(xs, [p[2] for p in points], style, label=label)
    for ax, title, unit in (
        (axes[0], "donated step time", "ms per step"),
        (axes[1], "compile time (trace + lower + compile)", "seconds"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("leaves (64 float32 each)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"Adam against the number of leaves{subtitle}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
