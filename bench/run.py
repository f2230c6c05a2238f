"""The entry point: ``python -m bench [--size tiny|small|full] [--only W ...] ...``.

Prints the machine, the versions, one Markdown table per workload and the targets table;
``--json`` writes every figure, ``--plot`` the step/compile-time plot (needs the
``compile`` workload).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

import jax

from bench import compile_time, optimizers, report, stateful, steps, targets, timing, workloads

PACKAGES = ("jax", "jaxlib", "optax", "keras", "torch", "numpy", "optx-jax")
# Timed loops per figure, seconds per loop and warm-up steps, by size.
LOOPS = {"tiny": 1, "small": 3, "full": 5}
LOOP_SECONDS = {"tiny": 0.0, "small": 0.05, "full": 0.1}
WARMUP = {"tiny": 1, "small": 2, "full": 2}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--size", choices=workloads.SIZES, default="small")
    p.add_argument(
        "--only",
        nargs="+",
        choices=workloads.WORKLOADS,
        metavar="WORKLOAD",
        help=f"run only these workloads ({', '.join(workloads.WORKLOADS)})",
    )
    p.add_argument(
        "--optimizers", nargs="+", choices=optimizers.NAMES, help="step workloads: only these"
    )
    p.add_argument("--repeats", type=int, help="timed loops per figure (default: by size)")
    p.add_argument("--json", metavar="OUT", help="write every figure to this JSON file")
    p.add_argument("--plot", metavar="OUT.png", help="save the plot (runs `compile`)")
    return p.parse_args(argv)


def machine() -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    device = jax.devices()[0]
    return {
        "date": datetime.date.today().isoformat(),
        "command": " ".join(["python -m bench", *sys.argv[1:]]),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "device": f"{device.platform} ({device.device_kind}), {jax.device_count()} device(s)",
        "versions": versions,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    loops = args.repeats or LOOPS[args.size]
    timing.LOOP_SECONDS, timing.WARMUP = LOOP_SECONDS[args.size], WARMUP[args.size]
    names = list(args.only or workloads.WORKLOADS)
    if args.plot and "compile" not in names:
        names.append("compile")
    info = machine()
    print(f"# optx benchmarks, --size {args.size}, {info['date']}\n")
    print(f"Machine: {info['cpu']}, {info['affinity']} usable CPU cores, {info['device']}; ")
    print(", ".join(f"{k} {v}" for k, v in info["versions"].items()) + ".\n", flush=True)
    results: dict[str, Any] = {"machine": info, "size": args.size, "loops": loops}
    opts = tuple(args.optimizers) if args.optimizers else None
    start = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        if name in workloads.STEP_WORKLOADS:
            res = steps.run(name, args.size, loops, opts)
            text = report.step_table(res)
        elif name == "compile":
            res = compile_time.run(args.size, loops)
            text = report.compile_table(res)
        else:
            res = stateful.run(args.size, loops)
            text = report.stateful_tables(res)
        res["seconds"] = time.perf_counter() - t0
        results[name] = res
        print(f"{text}\n\n({res['seconds']:.0f} s)\n", flush=True)
    print(targets.table(results))
    results["seconds"] = time.perf_counter() - start
    print(f"\nTotal: {results['seconds']:.0f} s.")
    if args.json:
        with open(args.json, "w") as f:
            f.write(report.to_json(results))
    if args.plot:
        from bench import plot

        plot.save(results["compile"], args.plot, f" (--size {args.size})")
    return results


if __name__ == "__main__":
    main()
