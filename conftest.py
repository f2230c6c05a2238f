"""Test-session settings for every test item: the suite in tests/ and the doctests in optx/."""

import os
import subprocess
import sys
import traceback

import pytest

# The suite compiles thousands of small programs (a few per registry entry, and every eager
# operation's first call) that then run a few steps on a few dozen numbers: compiling is
# most of its time, and XLA:CPU's code generation none of what a test checks (every numeric
# bound is derived for any contraction and summation order, tests/TOLERANCES.md). So the
# test session compiles cheaply: no LLVM optimisation, fusions emitted by XLA's loop
# emitter rather than its MLIR fusion emitters, and each program's code generated in one
# piece (the workers already keep both cores busy). `python tests/compile_time.py` times
# it: 30 registry entries' jitted updates compiled in 4.3 s with the first two flags and
# 1.1 s with all four. `OPTX_TEST_FULL_XLA=1` runs the suite at XLA's defaults instead.
_FAST_XLA = (
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_cpu_use_fusion_emitters=false",
    "--xla_cpu_parallel_codegen_split_count=1",
)
# Collectives between the CPU devices of one process (the 8-device notebooks and
# subprocesses) wait for every device's thread, and XLA ends the process when one is 60 s
# late (a warning at 20 s, the end 40 s later). CI lost notebook 06's kernel that way once,
# on a loaded 2-core machine. With 10 minutes a late thread arrives; a real deadlock still
# fails, by nbmake's cell timeout, with the notebook's cell named.
_PATIENT_COLLECTIVES = (
    "--xla_cpu_collective_call_warn_stuck_timeout_seconds=120",
    "--xla_cpu_collective_call_terminate_timeout_seconds=600",
)
_CHECKED = "OPTX_TEST_XLA_FLAGS"  # the flags this session settled on, for its subprocesses


def _accepted(flags: tuple[str, ...]) -> bool:
    """Whether this jaxlib knows every flag of ``flags`` (asked of a subprocess).

    XLA aborts the process on an unknown flag: a flag a later jaxlib drops must not reach
    the test session.
    """
    env = dict(os.environ, XLA_FLAGS=" ".join(flags), JAX_PLATFORMS="cpu")
    probe = [sys.executable, "-c", "import jax; jax.devices()"]
    return subprocess.run(probe, env=env, capture_output=True, timeout=300).returncode == 0


def _wanted() -> tuple[str, ...]:
    """The flags this session asks for (`OPTX_TEST_FULL_XLA=1`: XLA's own code generation)."""
    if os.environ.get("OPTX_TEST_FULL_XLA") == "1":
        return _PATIENT_COLLECTIVES
    return _PATIENT_COLLECTIVES + _FAST_XLA


def _session_xla_flags() -> str:
    wanted = _wanted()
    if not _accepted(wanted):  # one probe per flag only when the set as a whole fails
        wanted = tuple(flag for flag in wanted if _accepted((flag,)))
    return " ".join(wanted)


# Before JAX is imported, once: pytest-xdist's workers, notebooks' kernels and the tests'
# subprocesses inherit the environment. A user's own XLA_FLAGS come first and are kept.
if _CHECKED not in os.environ:
    os.environ[_CHECKED] = _session_xla_flags()
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {os.environ[_CHECKED]}".strip()

import jax  # noqa: E402  (after XLA_FLAGS is set)


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
    "tests/test_conformance.py",  # ~150 s
    "tests/test_registry_reliability.py",  # ~75 s
    "tests/test_sharding_registry.py",  # ~70 s: two 8-device subprocesses
    "tests/test_hyperparams_registry.py",  # ~35 s
    "tests/test_complex.py",  # ~30 s
    "tests/test_bench.py",  # ~30 s: the benchmark suite in a subprocess
    "tests/test_bad_input.py",  # ~25 s
    "tests/test_missing.py",  # ~25 s
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
