"""The stateful wrapper's Python overhead per call, of one revision of optx, as JSON.

``Adam.apply`` against the raw jitted step of the same chain (`bench.stateful`'s ``_raw``,
donating the state) on tiny leaves (4 floats), each call blocking on its result. Both run
in one process, in 15 interleaved blocks of calls, so that the noise between processes
cancels in their difference; the overhead is the median over blocks of (apply - raw)::

    for r in 1 2 3; do
      PYTHONPATH=/tmp/before python -P bench/revisions_overhead.py >> before.jsonl
      PYTHONPATH=. python -P bench/revisions_overhead.py >> after.jsonl
    done

``-P`` keeps the current directory off ``sys.path``: ``optx`` comes from ``PYTHONPATH``
(its path is printed first, on stderr). Figures in µs per call, by number of leaves.
"""

import json
import pathlib
import sys
import time

# This checkout's `bench` (last on the path: `optx` comes from PYTHONPATH's revision).
_ROOT = str(pathlib.Path(__file__).resolve().parents[1])
sys.path.append(_ROOT)
from bench import stateful, workloads  # noqa: E402

sys.path.remove(_ROOT)

import jax  # noqa: E402
import numpy as np  # noqa: E402

import optx  # noqa: E402

BLOCKS = 15


def measure(leaves: int) -> dict[str, float]:
    shapes = workloads.leaves_shapes(leaves, (4,))
    params = workloads.materialise(shapes, seed=0, scale=0.02)
    grads = workloads.materialise(shapes, seed=1, scale=1e-3)
    raw = stateful._raw(stateful._adam(), workloads.copy_tree(params), grads, (1,))
    apply = stateful._apply(workloads.copy_tree(params), grads)
    for f in (raw, apply):
        for _ in range(5):
            jax.block_until_ready(f())
    calls = 40 if leaves < 1000 else 10
    raws, applies, diffs = [], [], []
    for block in range(BLOCKS):
        order = [("raw", raw), ("apply", apply)]
        times = {}
        for name, f in order if block % 2 == 0 else order[::-1]:
            t = []
            for _ in range(calls):
                start = time.perf_counter()
                jax.block_until_ready(f())
                t.append(time.perf_counter() - start)
            times[name] = float(np.median(t))
        raws.append(times["raw"])
        applies.append(times["apply"])
        diffs.append(times["apply"] - times["raw"])
    jax.clear_caches()
    return {
        "raw_us": 1e6 * float(np.median(raws)),
        "apply_us": 1e6 * float(np.median(applies)),
        "overhead_us": 1e6 * float(np.median(diffs)),
    }


def main() -> None:
    print(optx.__file__, file=sys.stderr)
    print(json.dumps({n: measure(n) for n in (1, 100)}))


if __name__ == "__main__":
    main()
