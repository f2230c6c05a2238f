"""Test-session settings for every test item: the suite in tests/ and the doctests in optx/."""

import os
import traceback

# The suite compiles thousands of small programs (a few per registry entry, and every eager
# operation's first call) that then run a few steps on a few dozen numbers: XLA:CPU's LLVM
# optimisations are most of their compile time and none of what a test checks (every
# numeric bound is derived for any contraction and summation order). Set before JAX is
# imported; `OPTX_TEST_FULL_XLA=1` runs the suite at XLA's default optimisation instead.
if os.environ.get("OPTX_TEST_FULL_XLA") != "1":
    os.environ["XLA_FLAGS"] = " ".join(
        [
            os.environ.get("XLA_FLAGS", ""),
            "--xla_backend_optimization_level=0",
            "--xla_llvm_disable_expensive_passes=true",
        ]
    ).strip()

import jax
import pytest


# XLA:CPU limited to SSE4.2 (`XLA_FLAGS=--xla_cpu_max_isa=SSE4_2`, as on an x86-64 CPU
# without F16C) cannot convert float16 at all: its JIT does not link the runtime function
# `__extendhfsf2` and every float16 conversion fails with "Failed to materialize symbols",
# with or without optx (`jnp.ones(1, jnp.float16).astype(jnp.float32)` alone). There, and
# only there, a test that fails with exactly that error is reported as an expected failure
# naming the limitation; every other failure, and every float16 test on a CPU that can
# convert float16, counts as usual.
def _xla_converts_float16() -> bool:
    try:
        jax.block_until_ready(jax.numpy.ones(1, jax.numpy.float16).astype(jax.numpy.float32))
    except jax.errors.JaxRuntimeError as error:
        if "Failed to materialize symbols" in str(error):
            return False
        raise
    return True


_FLOAT16_BROKEN = "xla_cpu_max_isa" in os.environ.get("XLA_FLAGS", "") and (
    not _xla_converts_float16()
)
_FLOAT16_ERROR = "Failed to materialize symbols"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Reports XLA:CPU's float16 failure without F16C as an expected failure (see above)."""
    outcome = yield
    if not _FLOAT16_BROKEN or outcome.excinfo is None:
        return
    error = outcome.excinfo[1]
    text = "".join(traceback.format_exception(error))
    # A doctest's failures hold the exceptions its examples raised.
    for failure in getattr(error, "failures", None) or [error]:
        inner = getattr(failure, "exc_info", None)
        if inner is not None:
            text += "".join(traceback.format_exception(inner[1]))
    if _FLOAT16_ERROR in text:
        outcome.force_exception(
            pytest.xfail.Exception(
                "XLA:CPU without F16C (--xla_cpu_max_isa=SSE4_2) cannot convert float16: "
                "its JIT does not link __extendhfsf2"
            )
        )


# The longest files first: pytest-xdist hands out whole files (`--dist loadfile`) in
# collection order, so a long file collected last would run alone while the other workers
# wait. CPU seconds of each file on 2 workers (`pytest -n 2 --durations=0`, 2026-12-05).
_LONGEST_FIRST = (
    "tests/test_conformance.py",  # ~300 s
    "tests/test_sharding_registry.py",  # ~115 s: two 8-device subprocesses
    "tests/test_hyperparams_registry.py",  # ~100 s
    "tests/test_registry_reliability.py",  # ~90 s
    "tests/test_public_api.py",  # ~70 s: README snippets
    "tests/test_missing.py",  # ~60 s
    "tests/test_complex.py",  # ~45 s
    "tests/test_bench.py",  # ~40 s: the benchmark suite in a subprocess
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Collects the longest files first (see `_LONGEST_FIRST`); the rest keep their order."""
    root = config.rootpath
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}

    def key(indexed: tuple[int, pytest.Item]) -> tuple[int, int]:
        index, item = indexed
        try:
            name = item.path.relative_to(root).as_posix()
        except ValueError:
            name = ""
        return rank.get(name, len(rank)), index

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]
