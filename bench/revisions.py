"""Step times of two revisions of optx in one run: ``python -m bench.revisions``.

    python -m bench.revisions --before /path/to/old/checkout [--size full] [--rounds 2]
        [--only many] [--optimizers lion sgd]

Runs ``python -m bench --only gpt many stateful`` once per round for each revision, in
alternating order (before, after, after, before, ...), each in its own process, started
with ``python -P`` (no current directory on ``sys.path``) and a ``PYTHONPATH`` whose first
entry holds only a link to the earlier revision's ``optx`` package: the benchmark code is
this checkout's for both. Each process's ``optx.__file__`` is checked before it runs (an
earlier version of this script imported this checkout's ``optx`` for both revisions).
Prints, for every optx row (per-leaf and flat steps, the stateful
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


def _run(
    python_path: str | None,
    size: str,
    only: Sequence[str],
    out: Path,
    optimizers: Sequence[str] = (),
) -> dict[str, Any]:
    # ``-P``: no current directory first on ``sys.path``. With ``python -m`` from this
    # checkout it would otherwise import this checkout's ``optx`` for both revisions.
    env = dict(os.environ)
    roots = [str(ROOT)]
    if python_path:
        # Only the earlier revision's ``optx`` package comes first, not its ``bench``.
        link = out.parent / "before" / "optx"
        if not link.exists():
            link.parent.mkdir(exist_ok=True)
            link.symlink_to(Path(python_path) / "optx", target_is_directory=True)
        roots.insert(0, str(link.parent))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*roots, env.get("PYTHONPATH")]))
    where = subprocess.run(
        [sys.executable, "-P", "-c", "import optx; print(optx.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    expected = (Path(python_path or ROOT) / "optx" / "__init__.py").resolve()
    if Path(where).resolve() != expected:
        raise RuntimeError(f"the run would import optx from {where}, not from {expected}")
    command = [sys.executable, "-P", "-m", "bench", "--size", size, "--only", *only]
    if optimizers:
        command += ["--optimizers", *optimizers]
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
    p.add_argument(
        "--optimizers", nargs="+", default=(), help="the step workloads' optimizers (all)"
    )
    p.add_argument("--json", metavar="OUT", help="write every figure to this JSON file")
    args = p.parse_args(argv)
    runs: dict[str, list[dict[tuple[str, ...], float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                path = str(Path(args.before).resolve()) if which == "before" else None
                out = Path(tmp) / f"{which}{r}.json"
                result = _run(path, args.size, args.only, out, args.optimizers)
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
