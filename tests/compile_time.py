"""How long the test session's XLA flags take to compile registry entries' updates.

Not a test: ``python tests/compile_time.py [FLAGS...]`` compiles the jitted ``update`` of
every tenth registry entry on the conformance tree and prints the time spent lowering and
compiling. With no arguments it runs under conftest.py's flags (`XLA_FLAGS` from the
environment is kept in front), so one command compares settings, e.g.
``python tests/compile_time.py --xla_cpu_use_fusion_emitters=true``.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time


def main(argv: list[str]) -> None:
    here = pathlib.Path(__file__).resolve().parent
    sys.path[:0] = [str(here.parent), str(here)]  # the root conftest.py before tests/'
    import conftest  # noqa: F401  (sets XLA_FLAGS before JAX starts its backend)

    os.environ["XLA_FLAGS"] = " ".join([os.environ["XLA_FLAGS"], *argv])
    import jax
    import registry
    import test_conformance as conformance

    keys = list(registry.REGISTRY)[::10]
    lowering = compiling = 0.0
    for key in keys:
        entry = registry.REGISTRY[key]
        tx, params = entry(), conformance.make_params()
        state, grads = tx.init(params), conformance.make_grads()[0]
        step = jax.jit(lambda g, s, p, tx=tx, e=entry: tx.update(g, s, p, **e.extra))
        start = time.perf_counter()
        lowered = step.lower(grads, state, params)
        middle = time.perf_counter()
        lowered.compile()
        lowering, compiling = lowering + middle - start, compiling + time.perf_counter() - middle
    print(f"XLA_FLAGS={os.environ['XLA_FLAGS']}")
    print(f"{len(keys)} entries: lowering {lowering:.2f} s, compiling {compiling:.2f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
