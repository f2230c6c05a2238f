"""Step times of two revisions of optx in one run: ``python -m bench.revisions``.

    python -m bench.revisions --before /path/to/old/checkout [--size full] [--rounds 2]

Runs ``python -m bench --only gpt many stateful`` once per round for each revision, in
alternating order (before, after, after, before, ...), each in its own process: the
earlier revision's ``optx`` comes first on ``PYTHONPATH``, the benchmark code is this
checkout's for both. Prints, for every optx row (per-leaf and flat steps, the stateful
wrapper's ``apply`` and ``stateless_apply``), the median over rounds of each revision's
median step time and their ratio, beside optax's figure from the same processes (the
same work in both: its ratio shows the noise between the processes).

``--before`` is a checkout, e.g. ``git worktree add /tmp/before <rev>``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WORKLOADS = ("gpt", "many", "stateful")
ROOT = Path(__file__).resolve().parent.parent


def _run(python_path: str | None, size: str, only: Sequence[str], out: Path) -> dict[str, Any]:
    env = dict(os.environ)
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [python_path, env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "bench", "--size", size, "--only", *only]
    subprocess.run(
        [*command, "--json", str(out)], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL
    )
    return json.loads(out.read_text())


def _rows(result: dict[str, Any]) -> dict[tuple[str, ...], float]:
    """``{(workload, tree, optimizer, library, variant): donated median}``."""
    out = {}
    for name in ("gpt", "many"):
        for row in result.get(name, {}).get("rows", []):
            if row["donated"]:
                key = (name, "", row["optimizer"], row["library"], row["variant"])
                out[key] = row["donated"]["median"]
    for tree in result.get("stateful", {}).get("trees", []):
        for row in tree["rows"]:
            if row["donated"]:
                key = ("stateful", tree["tree"], row["optimizer"], row["library"], row["variant"])
                out[key] = row["donated"]["median"]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.revisions", description=__doc__)
    p.add_argument("--before", required=True, help="a checkout of the earlier revision")
    p.add_argument("--size", default="full", choices=("tiny", "small", "full"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--only", nargs="+", choices=WORKLOADS, default=WORKLOADS)
    p.add_argument("--json", metavar="OUT", help="write every figure to this JSON file")
    args = p.parse_args(argv)
    runs: dict[str, list[dict[tuple[str, ...], float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                path = str(Path(args.before).resolve()) if which == "before" else None
                result = _run(path, args.size, args.only, Path(tmp) / f"{which}{r}.json")
                runs[which].append(_rows(result))
    keys = [k for k in runs["after"][0] if all(k in run for run in runs["before"] + runs["after"])]
    print(f"# Step times, before ({args.before}) and after (this checkout), --size {args.size}")
    print(f"# median over {args.rounds} rounds of each run's median; ms per step\n")
    print("| workload | tree | optimizer | library | variant | before | after | after/before |")
    print("|---|---|---|---|---|---:|---:|---:|")
    table = []
    for key in keys:
        before = statistics.median(run[key] for run in runs["before"]) * 1e3
        after = statistics.median(run[key] for run in runs["after"]) * 1e3
        table.append({"key": key, "before_ms": before, "after_ms": after})
        cells = " | ".join(key)
        print(f"| {cells} | {before:.3f} | {after:.3f} | {after / before:.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
