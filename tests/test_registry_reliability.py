"""Reliability of every registered transform: non-finite steps, counters, determinism.

Each entry of `registry.REGISTRY`, wrapped in ``apply_if_finite(entry, 2)``, runs six steps
on three of the conformance parameters (a matrix, a vector and a scalar; all five for the
entries in `FULL_TREE`): three finite gradients, one holding a NaN, one holding an
infinity, one finite. The checks:

* the NaN and the infinity steps leave the parameters (one of them ``-0.0``) and the inner
  state bit for bit as they were, and are counted in ``total_notfinite``;
* without protection (the wrapper gives up after ``max_consecutive_errors``), the NaN
  reaches the parameters or the state, except for the entries listed in `DROPS_NAN`;
* every int32 step counter set to 2**31 - 1 stays there (no wrap) and the steps stay finite;
* two runs are bit-identical; a run saved with `optx.save_state` after three steps and
  restored continues bit-identically; jit and eager (`jax.disable_jit`) runs are
  bit-identical for the entries in `JIT_EQUALS_EAGER` and within `JIT_EAGER_RTOL` for the
  others (see there why).

A new entry that fails here either has a bug, or belongs in the list that says why
(`DROPS_NAN`, `FULL_TREE`, `MONOTONE` / `RESETTING`, `JIT_EQUALS_EAGER`).

To stay fast, the entries run in batches: one jitted program steps a whole batch (XLA's
compile time is most of this module's time, and grows with the leaves).
"""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx

try:
    from tests import registry
    from tests.test_conformance import make_grads, make_params
except ImportError:  # tests/ is not a package: pytest put it on sys.path.
    import registry
    from test_conformance import make_grads, make_params

ENTRIES = list(registry.REGISTRY.values())
KEYS = [e.key for e in ENTRIES]
BATCH = 30
MAX_ERRORS = 2
NAN_STEP, INF_STEP, SAVED_STEP = 3, 4, 2  # the checkpoint holds the results of step 2
INT32_MAX = int(np.iinfo(np.int32).max)
# Counters that only grow (saturating, DESIGN D5). Other int32 leaves reset or wrap by
# design: consecutive or plateau counts, a position within `every_k` micro-steps.
MONOTONE = frozenset(
    {"count", "total_notfinite", "applied_count", "skipped_steps", "gradient_step", "step"}
)
# Entries whose `count` is a position within `k` calls (optax's field name), not a counter.
COUNT_RESETS = frozenset({"apply_every"})
RESETTING = frozenset(
    {
        "notfinite_count",
        "growth_count",
        "plateau_count",
        "cooldown_count",
        "mini_step",
        "num_not_finite",
        "steps_since_sync",
        "num_linesearch_steps",  # a line search's evaluations in its last search
    }
)

# Entries that a NaN gradient leaves without a NaN in the parameters and the state, by
# design: they replace the updates with zeros (`set_to_zero`), drop the NaN (`zero_nans`),
# skip the step themselves (`apply_if_finite`, `dynamic_loss_scale`, `MultiSteps` with
# `skip_not_finite`), or ignore the gradients (the Hessian estimator).
DROPS_NAN = frozenset(
    {
        "set_to_zero",
        "zero_nans",
        "apply_if_finite",
        "dynamic_loss_scale",
        "hutchinson_estimator_diag_hessian",
        "hutchinson_estimator_diag_hessian/typed_key",
        "MultiSteps/schedule_sum_skip",
        "accumulate_gradients/schedule_skip",
    }
)
# Entries whose configuration names all five conformance parameters.
FULL_TREE = frozenset({"masked/tree"})

# jit against eager (`jax.disable_jit`), on any CPU (see tests/TOLERANCES.md):
# * bit-identical for the entries below: elementwise maths with no reduction, where no
#   inexact product ``a * b`` is added to anything (XLA:CPU contracts ``a * b + c`` into a
#   fused multiply-add under jit, with AVX2 or AVX-512: one rounding where eager rounds
#   twice). Their products are single (a learning rate, a scale, a step size) or exact (by
#   0.5: the momentum of `sgd/schedule`, `signum`, `scale_by_lion/fast_momentum`; by 2: the
#   optimistic step), and every update reaches its parameter through `apply_if_finite`'s
#   select, which XLA does not fuse into the add. `scale_by_lion/fast_momentum` takes the
#   sign of ``b1 * m + (1 - b1) * g``: a last-bit change flips it only for an argument
#   within an ulp of zero.
# * the others within JIT_EAGER_RTOL of each leaf's scale: STEPS_APPLIED finite steps, each
#   moving a value by up to ROUNDINGS roundings (contracted multiply-adds; ``x / sqrt(v)``,
#   which XLA rewrites as ``x * rsqrt(v)``) and by a reduction over the N_REDUCED entries of
#   the tree (global norms, means, Newton-Schulz's matrix products) summed in another
#   order (``n * eps`` of the sum of the terms' sizes; the terms are squares or of the
#   leaf's size). The scale of a leaf is the largest size it has had so far (see
#   `_history_scale`): a leaf that cancels to near zero (Prodigy's running numerator, a
#   parameter that the optimistic step brings to near zero) keeps the error of the terms
#   it sums. Muon's Newton-Schulz iterations magnify an error only along small singular
#   values, and its output reaches the parameters multiplied by the learning rate.
# * Prodigy's ``numerator_weighted`` adds a dot product ``<g, x0 - x>`` whose terms cancel:
#   its scale also counts the size of those terms (`_prodigy_terms`).
# * A line search's ``decrease_error`` is ``f(w + eta u) - f(w) - c eta slope``: two values
#   that cancel where the search failed, so its scale also counts the values' size (the
#   largest ``value`` the search has kept, `_values_size`).
JIT_EQUALS_EAGER = frozenset(
    {
        "accumulate_gradients/f32_accumulator",
        "chain/empty",
        "clip",
        "constrain",
        "constrain/mask",
        "identity",
        "reduce_on_plateau",
        "rprop",
        "scale",
        "scale_by_learning_rate",
        "scale_by_learning_rate/no_flip",
        "scale_by_learning_rate/schedule",
        "scale_by_lion/fast_momentum",
        "scale_by_optimistic_gradient",
        "scale_by_rprop",
        "scale_by_rprop/tight_bounds",
        "scale_by_schedule",
        "scale_by_shape",
        "scale_by_shape/consistent_rms",
        "scale_by_sign",
        "set_to_zero",
        "sgd",
        "sgd/schedule",
        "sign_sgd",
        "signum/f32_accumulator",
        "stateless",
        "unscale_gradients",
        "zero_nans",
    }
)
EPS32 = float(np.finfo(np.float32).eps)  # 2**-23
STEPS_APPLIED = 4  # steps 0, 1, 2 and 5; the NaN and infinity steps are skipped
ROUNDINGS = 8  # per value and step: Adam's m, v, two bias corrections, rsqrt, divide, lr, add
N_REDUCED = 18  # entries of the small tree: 3 x 4 + 5 + 1
JIT_EAGER_RTOL = STEPS_APPLIED * (ROUNDINGS + N_REDUCED) * EPS32  # 1.2e-5


def _small(tree: Any) -> Any:
    """The conformance kernel, last layer and scale: the structure every mask expects."""
    return {
        "dense": {"kernel": tree["dense"]["kernel"]},
        "layers": [tree["layers"][1]],
        "scale": tree["scale"],
    }


def _grads() -> list[Any]:
    grads = make_grads(steps=6)
    grads[NAN_STEP]["dense"]["kernel"] = grads[NAN_STEP]["dense"]["kernel"].at[1, 2].set(jnp.nan)
    grads[INF_STEP]["layers"][1] = grads[INF_STEP]["layers"][1].at[3].set(jnp.inf)
    return grads


GRADS = {"full": _grads(), "small": [_small(g) for g in _grads()]}
PARAMS = {"full": make_params(), "small": _small(make_params())}


def _tree(entry: registry.Entry) -> str:
    return "full" if entry.key in FULL_TREE else "small"


def _with_negative_zero(params: Any) -> Any:
    """``params`` with its scalar leaf set to -0.0, which a skipped step must keep."""
    return {**params, "scale": jnp.full_like(params["scale"], -0.0)}


def _batch_step(entries: list[registry.Entry]) -> Callable[..., Any]:
    txs = [(optx.apply_if_finite(e(), MAX_ERRORS), e.extra) for e in entries]

    def step(params: list[Any], states: list[Any], grads: list[Any]) -> tuple[list, list]:
        out = [
            tx.update(g, s, p, **extra)
            for (tx, extra), p, s, g in zip(txs, params, states, grads, strict=True)
        ]
        new_params = [optx.apply_updates(p, u) for p, (u, _) in zip(params, out, strict=True)]
        return new_params, [s for _, s in out]

    return step


def _grads_at(t: int, entries: list[registry.Entry]) -> list[Any]:
    return [GRADS[_tree(e)][t] for e in entries]


def _run(
    step: Callable[..., Any],
    entries: list[registry.Entry],
    params: list[Any],
    states: list[Any],
    first: int,
) -> list:
    """Steps ``first..5``; returns [(params, states)] after each."""
    history = []
    for t in range(first, 6):
        if t == NAN_STEP:
            params = [_with_negative_zero(p) for p in params]
        params, states = step(params, states, _grads_at(t, entries))
        history.append((params, states))
    return history


def _set_counters(state: Any, value: int) -> Any:
    def put(path: Any, leaf: Any) -> Any:
        return jnp.full_like(leaf, value) if _counter_name(path) in MONOTONE else leaf

    return jax.tree_util.tree_map_with_path(put, state)


def _counter_name(path: Any) -> str | None:
    last = path[-1]
    return getattr(last, "name", None) or getattr(last, "key", None)


@functools.cache
def _batch(index: int, tmp: str) -> dict[str, dict[str, Any]]:
    """Every run of the batch ``index``, by entry key."""
    entries = ENTRIES[index * BATCH : (index + 1) * BATCH]
    plain = _batch_step(entries)
    step = jax.jit(plain)
    # Committed to the device, as `restore_state` returns arrays: else the resumed run would
    # compile the batch's program a second time.
    device = jax.devices()[0]
    params0 = jax.device_put([PARAMS[_tree(e)] for e in entries], device)

    def init() -> list[Any]:
        states = [
            optx.apply_if_finite(e(), MAX_ERRORS).init(p)
            for e, p in zip(entries, params0, strict=True)
        ]
        return jax.device_put(states, device)

    first = _run(step, entries, params0, init(), 0)
    second = _run(step, entries, params0, init(), 0)
    with jax.disable_jit():
        eager = _run(plain, entries, params0, init(), 0)

    # A checkpoint after step 2, restored into the initial state, continued.
    saved_params, saved_states = first[SAVED_STEP]
    path = f"{tmp}/batch_{index}"
    optx.save_state(path, {"params": saved_params, "states": saved_states})
    restored = optx.restore_state(path, {"params": params0, "states": init()})
    resumed = _run(step, entries, restored["params"], restored["states"], SAVED_STEP + 1)

    # Unprotected: as if two non-finite steps in a row had been skipped, a NaN is applied.
    params5, states5 = first[-1]
    given_up = [
        s._replace(notfinite_count=jnp.full_like(s.notfinite_count, MAX_ERRORS)) for s in states5
    ]
    unprotected = step(params5, given_up, _grads_at(NAN_STEP, entries))

    # Counters at int32's maximum: a finite step, then a NaN step (skipped).
    at_max = [_set_counters(s, INT32_MAX) for s in states5]
    saturated = [step(params5, at_max, _grads_at(0, entries))]
    saturated.append(step(*saturated[0], _grads_at(NAN_STEP, entries)))

    def pick(history: list, i: int) -> list:
        return [(p[i], s[i]) for p, s in history]

    return {
        e.key: {
            "first": pick(first, i),
            "second": pick(second, i),
            "eager": pick(eager, i),
            "restored": (restored["params"][i], restored["states"][i]),
            "saved": (saved_params[i], saved_states[i]),
            "resumed": pick(resumed, i),
            "unprotected": (unprotected[0][i], unprotected[1][i]),
            "saturated": pick(saturated, i),
        }
        for i, e in enumerate(entries)
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Callable[[str], dict[str, Any]]:
    tmp = str(tmp_path_factory.mktemp("checkpoints"))
    yield lambda key: _batch(KEYS.index(key) // BATCH, tmp)[key]
    _batch.cache_clear()


def _bits(tree: Any) -> list[tuple[str, str, bytes]]:
    """Each leaf as (path, dtype, raw bytes): equality that NaN and -0.0 cannot fool."""
    return [
        (jax.tree_util.keystr(p), str(np.asarray(x).dtype), np.asarray(x).tobytes())
        for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]
    ]


def assert_bit_identical(actual: Any, expected: Any, what: str) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected), what
    for (path, dtype, a), (_, want_dtype, b) in zip(_bits(actual), _bits(expected), strict=True):
        assert dtype == want_dtype, f"{what}: {path} is {dtype}, expected {want_dtype}"
        assert a == b, f"{what}: {path} differs"


def _has_nan(tree: Any) -> bool:
    return any(
        np.isnan(np.asarray(x, np.float64)).any()
        for x in jax.tree.leaves(tree)
        if jnp.issubdtype(jnp.result_type(x), jnp.floating)
    )


BATCHES = [KEYS[i : i + BATCH] for i in range(0, len(KEYS), BATCH)]


def check_nonfinite_steps_leave_every_bit(run: dict[str, Any], key: str) -> None:
    first = run["first"]
    (p2, s2), (p3, s3), (p4, s4) = first[2:5]
    before = _with_negative_zero(p2)
    for t, (p, s) in ((NAN_STEP, (p3, s3)), (INF_STEP, (p4, s4))):
        assert_bit_identical(p, before, f"params after the non-finite step {t}")
        assert_bit_identical(s.inner_state, s2.inner_state, f"inner state after step {t}")
    # Counted, and visible in the state.
    assert [int(s.total_notfinite) for _, s in first] == [0, 0, 0, 1, 2, 2]
    assert [int(s.notfinite_count) for _, s in first] == [0, 0, 0, 1, 2, 0]
    assert [bool(s.last_finite) for _, s in first] == [True] * 3 + [False] * 2 + [True]


def check_without_protection_the_nan_spreads(run: dict[str, Any], key: str) -> None:
    params, state = run["unprotected"]
    assert int(state.total_notfinite) == 3 and int(state.notfinite_count) == MAX_ERRORS + 1
    assert _has_nan((params, state.inner_state)) == (key not in DROPS_NAN)


def check_counters_saturate(run: dict[str, Any], key: str) -> None:
    counters = 0
    for step, (params, state) in enumerate(run["saturated"]):
        for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
            name = _counter_name(path)
            if jnp.result_type(leaf) != jnp.int32:
                continue
            assert name in MONOTONE | RESETTING, f"an int32 leaf of unknown kind: {path}"
            assert int(np.min(leaf)) >= 0, f"step {step}: {jax.tree_util.keystr(path)} wrapped"
            if name in MONOTONE and not (name == "count" and key in COUNT_RESETS):
                counters += 1
                assert int(leaf) == INT32_MAX, f"step {step}: {jax.tree_util.keystr(path)}"
        for path, leaf in jax.tree_util.tree_flatten_with_path((params, state))[0]:
            if jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
                assert np.isfinite(np.asarray(leaf, np.float64)).all(), (
                    f"step {step}: {jax.tree_util.keystr(path)} is not finite"
                )
    assert counters >= 2  # `apply_if_finite`'s total_notfinite, at least


def check_same_inputs_same_bits(run: dict[str, Any], key: str) -> None:
    for t, (a, b) in enumerate(zip(run["first"], run["second"], strict=True)):
        assert_bit_identical(a, b, f"second run, step {t}")


def check_save_restore_continues_bit_identically(run: dict[str, Any], key: str) -> None:
    assert_bit_identical(run["restored"], run["saved"], "restored checkpoint")
    for t, (a, b) in enumerate(zip(run["resumed"], run["first"][SAVED_STEP + 1 :], strict=True), 3):
        assert_bit_identical(a, b, f"resumed run, step {t}")


def _history_scale(history: list) -> list[list[float]]:
    """Per step, per leaf: the largest finite ``|value|`` the leaf has had up to that step."""
    scales, running = [], None
    for tree in history:
        now = [
            float(np.max(np.abs(x[np.isfinite(x)]), initial=0.0))
            for x in (np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(tree))
        ]
        running = now if running is None else [max(a, b) for a, b in zip(running, now, strict=True)]
        scales.append(running)
    return scales


def _find_prodigy_state(state: Any) -> Any:
    if hasattr(state, "numerator_weighted") and hasattr(state, "params0"):
        return state
    if isinstance(state, tuple):
        for inner in state:
            found = _find_prodigy_state(inner)
            if found is not None:
                return found
    return None


def _prodigy_terms(key: str, history: list) -> list[float]:
    """Per step, the size of the terms of Prodigy's ``numerator_weighted`` (0 otherwise).

    ``numerator_weighted = b3 * previous + c * <g, x0 - x>``: the dot product's terms
    cancel, so its round-off is relative to ``c * sum|g * (x0 - x)|``, not to its value.
    """
    if _find_prodigy_state(history[0][1].inner_state) is None:
        return [0.0] * len(history)
    h = optx.get_hyperparams(history[0][1])
    b3 = float(h["beta3"]) if "beta3" in h else float(np.sqrt(h["b2"]))
    params = [PARAMS[_tree(registry.REGISTRY[key])]] + [p for p, _ in history[:-1]]
    sizes, previous = [], 0.0
    for t, (_, state) in enumerate(history):
        prodigy = _find_prodigy_state(state.inner_state)
        now = float(prodigy.numerator_weighted)
        pairs = [
            (np.asarray(g, np.float64), np.asarray(x0, np.float64) - np.asarray(x, np.float64))
            for g, x0, x in zip(
                jax.tree.leaves(GRADS[_tree(registry.REGISTRY[key])][t]),
                jax.tree.leaves(prodigy.params0),
                jax.tree.leaves(params[t]),
                strict=True,
            )
        ]
        dot = sum(float(np.sum(g * d)) for g, d in pairs)
        terms = sum(float(np.sum(np.abs(g * d))) for g, d in pairs)
        # Skipped steps (NaN, infinity) and the first (x = x0) add nothing.
        c = (now - b3 * previous) / dot if dot and now != previous else 0.0
        sizes.append(abs(c) * terms)
        previous = now
    return sizes


def _values_size(history: list) -> list[float]:
    """Per step, the largest ``|value|`` a line search has kept so far (0 without one)."""
    sizes, running = [], 0.0
    for tree in history:
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            if _counter_name(path) == "value":
                x = np.asarray(leaf, np.float64)
                running = max(running, float(np.max(np.abs(x[np.isfinite(x)]), initial=0.0)))
        sizes.append(running)
    return sizes


def check_jit_and_eager(run: dict[str, Any], key: str) -> None:
    if key in JIT_EQUALS_EAGER:
        for t, (jitted, eager) in enumerate(zip(run["first"], run["eager"], strict=True)):
            assert_bit_identical(jitted, eager, f"eager step {t}")
        return
    scales = _history_scale(run["eager"])
    prodigy_terms = np.maximum.accumulate(_prodigy_terms(key, run["eager"]))
    values = _values_size(run["eager"])
    for t, (jitted, eager) in enumerate(zip(run["first"], run["eager"], strict=True)):
        assert jax.tree.structure(jitted) == jax.tree.structure(eager)
        for (path, a), b, scale in zip(
            jax.tree_util.tree_flatten_with_path(jitted)[0],
            jax.tree.leaves(eager),
            scales[t],
            strict=True,
        ):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            if _counter_name(path) == "numerator_weighted":
                scale = max(scale, prodigy_terms[t])
            if _counter_name(path) == "decrease_error":
                scale = max(scale, values[t])
            finite = np.isfinite(b)
            np.testing.assert_array_equal(np.isfinite(a), finite)
            np.testing.assert_allclose(
                a[finite],
                b[finite],
                rtol=0,
                atol=JIT_EAGER_RTOL * scale,
                err_msg=f"step {t}: {jax.tree_util.keystr(path)}",
            )


CHECKS = (
    check_nonfinite_steps_leave_every_bit,
    check_without_protection_the_nan_spreads,
    check_counters_saturate,
    check_same_inputs_same_bits,
    check_save_restore_continues_bit_identically,
    check_jit_and_eager,
)


@pytest.mark.slow
@pytest.mark.parametrize("batch", range(len(BATCHES)), ids=lambda i: f"{BATCHES[i][0]}...")
def test_every_check_on_every_entry(runs, batch: int) -> None:
    """Each ``check_*`` above on each entry of a batch: one test per batch, so that a
    batch's runs are built once (tests on two pytest-xdist workers would build them twice).
    Every failure is reported, by check and entry.
    """
    failures = []
    for key in BATCHES[batch]:
        for check in CHECKS:
            try:
                check(runs(key), key)
            except AssertionError as error:
                failures.append(f"{check.__name__}[{key}]: {error}")
    assert not failures, "\n\n".join(failures)


FMA_CHECK = """
import jax, jax.numpy as jnp, numpy as np, optx
from test_registry_reliability import ENTRIES, PARAMS, GRADS, _batch_step
entries = [e for e in ENTRIES if e.key in ("adam", "sgd/momentum", "rmsprop", "lion")]
step = _batch_step(entries)
params = [PARAMS["small"]] * len(entries)
def run(step):
    p, s = params, [optx.apply_if_finite(e(), 2).init(PARAMS["small"]) for e in entries]
    for t in range(3):
        p, s = step(p, s, [GRADS["small"][t]] * len(entries))
    return jax.tree.leaves((p, s))
jitted = run(jax.jit(step))
with jax.disable_jit():
    eager = run(step)
same = all(np.asarray(a).tobytes() == np.asarray(b).tobytes() for a, b in zip(jitted, eager))
print("bit-identical" if same else "different")
"""


@pytest.mark.slow
def test_fused_multiply_add_is_the_difference() -> None:
    # Limited to SSE4.2 (x86-64 without FMA instructions), jit and eager agree to the bit on
    # these entries, which they do not with FMA (they are not in JIT_EQUALS_EAGER).
    assert not {"adam", "sgd/momentum", "rmsprop", "lion"} & JIT_EQUALS_EAGER
    tests = pathlib.Path(__file__).resolve().parent
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_max_isa=SSE4_2", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(tests.parent), str(tests)])
    result = subprocess.run(
        [sys.executable, "-c", FMA_CHECK], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "bit-identical"
