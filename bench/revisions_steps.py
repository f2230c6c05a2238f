"""Donated step times of one revision of optx, per-leaf and flat parameters, as JSON.

``bench.revisions`` runs the whole benchmark per revision; this script times only optx's
own step (no peers), so that many alternating processes fit in a few minutes::

    for r in 1 2 3; do
      PYTHONPATH=/tmp/before python -P bench/revisions_steps.py >> before.jsonl
      PYTHONPATH=. python -P bench/revisions_steps.py >> after.jsonl
    done

``-P`` keeps the current directory off ``sys.path``: ``optx`` comes from ``PYTHONPATH``
(its path is printed first, on stderr). Arguments, if any, name the trees to time
(``many``, ``gpt``; default both). Each figure is the median of a loop of donated
steps (compiled beforehand, timed to the end of the step), in ms: ``many`` (1,000 leaves of
64) and ``gpt`` (GPT-shaped, 16 blocks, width 256), for Adam, AdamW, SGD, Lion and the
clip + AdamW + EMA chain.
"""

import functools
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench.workloads import gpt_shapes, leaves_shapes  # (imports no optx)

sys.path.pop(0)

import jax
import jax.numpy as jnp
import numpy as np

import optx

TREES = {"many": leaves_shapes(1000, (64,)), "gpt": gpt_shapes(16, 256, 8192, 512)}
REPS = {"many": 200, "gpt": 40}


def transforms() -> dict:
    return {
        "adam": optx.adam(1e-3),
        "adamw": optx.adamw(1e-3),
        "sgd": optx.sgd(1e-2),
        "lion": optx.lion(1e-4),
        "chain": optx.chain(optx.clip_by_global_norm(1.0), optx.adamw(1e-3), optx.ema_params(0.99)),
    }


def time_step(tx, params, reps: int) -> float:
    grads = jax.tree.map(lambda p: p * 0.1, params)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(p, s, g):
        u, s = tx.update(g, s, p)
        return optx.apply_updates(p, u), s

    p, s = jax.tree.map(jnp.copy, (params, tx.init(params)))
    for _ in range(3):
        p, s = step(p, s, grads)
    jax.block_until_ready((p, s))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        p, s = step(p, s, grads)
        jax.block_until_ready((p, s))
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def main() -> None:
    print(optx.__file__, file=sys.stderr)
    # Optional arguments: the trees to time (default: all), e.g. ``many``.
    names = sys.argv[1:] or list(TREES)
    out = {}
    for tree, shapes in ((name, TREES[name]) for name in names):
        params = jax.tree.map(
            lambda s: jnp.full(s, 0.01, jnp.float32),
            shapes,
            is_leaf=lambda x: isinstance(x, tuple),
        )
        for variant in ("per-leaf", "flat params"):
            p = optx.flatten_tree(params) if variant == "flat params" else params
            for name, tx in transforms().items():
                tx = optx.flatten(tx) if variant == "flat params" else tx
                out[f"{tree}|{variant}|{name}"] = time_step(tx, p, REPS[tree])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
