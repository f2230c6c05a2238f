"""The benchmark suite (`python -m bench`) runs end to end at its tiny size.

A smoke test: one subprocess runs every benchmark once, as CI's users would run it, and the
tests read its JSON. No time is asserted; the figures must exist, be finite, and be
consistent with each other (ratios and bandwidth fractions recomputed here).
"""

import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

import optx

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEP_WORKLOADS = ("large", "wide", "many", "gpt")
OPTIMIZERS = ("adam", "adamw", "sgd", "lion", "adafactor", "chain")
TORCH_OPTIMIZERS = ("adam", "adamw", "sgd", "chain")
# With `optx.compiler_options()` for this backend (CPU: one), per-leaf steps compiled with
# them too, for optax and optx.
WITH_OPTIONS = bool(optx.compiler_options())
OPTX_VARIANTS = ("per-leaf", "flat state", "flat params") + (
    ("per-leaf, XLA options",) if WITH_OPTIONS else ()
)
FLAT = ("flat state", "flat params")
REL = 1e-9  # recomputed ratios: the same float64 arithmetic


def _bench(module: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` as CI's users run it, at XLA's cheapest optimisation."""
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    # A smoke test: XLA's cheapest code generation keeps the ~130 compilations short.
    flags = env.get("XLA_FLAGS", "")  # kept: e.g. --xla_cpu_max_isa
    env["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level=0".strip()
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    args = ["--size", "tiny", "--json", str(out / "bench.json"), "--plot", str(out / "p.png")]
    result = _bench("bench", *args)
    return json.loads((out / "bench.json").read_text()), result.stdout, out


def _finite(x):
    return isinstance(x, int | float) and math.isfinite(x)


def _rows(results, workload, optimizer, library):
    return [
        r
        for r in results[workload]["rows"]
        if r["optimizer"] == optimizer and r["library"] == library
    ]


def test_no_benchmark_failed(run):
    results, stdout, _ = run
    for name in (*STEP_WORKLOADS, "compile"):
        for row in results[name]["rows"]:
            assert not row["note"].startswith("error"), (name, row)
    for tree in results["stateful"]["trees"]:
        for row in tree["rows"]:
            assert not row["note"].startswith("error"), row
    assert "error" not in stdout


@pytest.mark.parametrize("workload", STEP_WORKLOADS)
def test_every_optimizer_has_finite_figures(run, workload):
    results = run[0]
    res = results[workload]
    assert _finite(res["triad_gbps"]) and res["triad_gbps"] > 0
    for opt in OPTIMIZERS:
        optax, *optax_options = _rows(results, workload, opt, "optax")
        assert optax["variant"] == ""
        assert [r["variant"] for r in optax_options] in ([], ["XLA options"] * WITH_OPTIONS)
        optx_rows = _rows(results, workload, opt, "optx")
        assert [r["variant"] for r in optx_rows] == list(OPTX_VARIANTS)
        assert len(_rows(results, workload, opt, "keras")) == 1
        torch_rows = _rows(results, workload, opt, "torch")
        assert len(torch_rows) == (opt in TORCH_OPTIMIZERS)
        if torch_rows and importlib.util.find_spec("torch") is None:
            assert torch_rows[0]["note"] == "not installed"
        peers = [optax, *optax_options, *_rows(results, workload, opt, "keras"), *torch_rows]
        for row in [*peers, *optx_rows]:
            if row["donated"] is None:  # only where the note says why
                assert row["note"], row
                continue
            t = row["donated"]
            assert _finite(t["median"]) and 0 < t["low"] <= t["median"] <= t["high"], row
            assert _finite(row["fraction"]) and row["fraction"] > 0, row
            expected = res["bytes_per_step"][opt] / t["median"] / 1e9 / res["triad_gbps"]
            assert row["fraction"] == pytest.approx(expected, rel=REL)
            if row["library"] == "torch":
                continue
            assert _finite(row["compile_s"]) and row["compile_s"] > 0, row
            assert row["memory"]["temp"] >= 0 and row["memory"]["argument"] > 0, row
        # The per-leaf step always runs; its ratio is to optax's step of the same run.
        per_leaf = optx_rows[0]
        assert per_leaf["donated"] is not None, per_leaf
        assert per_leaf["ratio"] == pytest.approx(
            per_leaf["donated"]["median"] / optax["donated"]["median"], rel=REL
        )


def test_every_optimizer_runs_each_variant_somewhere(run):
    """The tiny size spreads Keras, the non-donated step and the flat variants over workloads."""
    results = run[0]
    for opt in OPTIMIZERS:
        rows = [r for w in STEP_WORKLOADS for r in results[w]["rows"] if r["optimizer"] == opt]
        assert any(r["library"] == "keras" and r["donated"] for r in rows), opt
        assert any(r["library"] == "optx" and r["plain"] for r in rows), opt
        for variant in OPTX_VARIANTS[1:]:
            ran = [r for r in rows if r["variant"] == variant and r["donated"]]
            if opt == "adafactor" and variant in FLAT:  # optx.flatten refuses it
                assert not ran
            else:
                assert ran, (opt, variant)


def test_bytes_per_step_follow_the_stated_floors(run):
    results = run[0]
    res = results["wide"]  # leaves of one dimension: nothing is factored
    n = res["params"]
    floors = {"adam": 28, "adamw": 28, "sgd": 20, "lion": 20, "adafactor": 20, "chain": 40}
    assert res["bytes_per_step"] == {k: v * n for k, v in floors.items()}


def test_compile_sweep(run):
    results = run[0]
    rows = results["compile"]["rows"]
    leaves = sorted({r["leaves"] for r in rows})
    assert len(leaves) >= 2
    for n in leaves:
        at_n = {(r["library"], r["variant"]): r for r in rows if r["leaves"] == n}
        base = at_n[("optax", "")]
        for key in [("optax", "optax.flatten"), *[("optx", v) for v in OPTX_VARIANTS[:3]]]:
            r = at_n[key]
            assert _finite(r["compile_s"]) and r["compile_s"] > 0, r
            assert r["ratio"] == pytest.approx(r["compile_s"] / base["compile_s"], rel=REL)
            assert r["eqns_per_leaf"] > 0 and r["step"]["median"] > 0, r


def test_stateful_wrapper_figures(run):
    results = run[0]
    trees = results["stateful"]["trees"]
    assert [t["tree"] for t in trees] == ["gpt", "many"]
    for tree in trees:
        kinds = [(r["library"], r["variant"]) for r in tree["rows"]]
        assert kinds == [
            ("raw", "donates state"),
            ("raw", "donates params + state"),
            ("wrapper", "Adam.apply"),
            ("wrapper", "Adam.stateless_apply"),
        ]
        assert all(_finite(r["ratio"]) and r["ratio"] > 0 for r in tree["rows"])
    overhead = results["stateful"]["overhead"]
    points = overhead["points"]
    assert len(points) >= 2
    for p in points:
        assert p["overhead_s"] == pytest.approx(p["apply_s"] - p["raw_s"], rel=REL)
    assert all(_finite(v) for v in overhead["overhead_fit"].values())


def test_output_and_plot(run):
    results, stdout, out = run
    for name in (*STEP_WORKLOADS, "compile", "targets"):
        assert f"### {name}" in stdout
    assert "### stateful" in stdout
    assert results["machine"]["versions"]["jax"] in stdout
    assert (out / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_revisions_compares_two_checkouts(tmp_path):
    # This checkout against itself, once: every optx row has both columns and a ratio.
    out = tmp_path / "revisions.json"
    args = ["--before", str(ROOT), "--size", "tiny", "--rounds", "1", "--only", "many"]
    result = _bench("bench.revisions", *args, "--json", str(out))
    table = json.loads(out.read_text())
    optx_rows = [r for r in table if r["key"][3] == "optx"]
    assert {r["key"][4] for r in optx_rows} >= {"per-leaf"}
    assert all(_finite(r["before_ms"]) and _finite(r["after_ms"]) for r in table)
    assert "| workload | tree | optimizer |" in result.stdout
