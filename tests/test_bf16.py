"""bfloat16 parameters that train: `optx.kahan_summation` and `optx.stochastic_rounding`.

Each returns updates ``u'`` such that ``apply_updates(p, u')`` lands exactly where it means
the parameter to go: checked bit for bit over bfloat16 values (hypothesis and every
binade), then the training behaviour (a compensated run follows float32 to a bound derived
below; stochastic rounding is unbiased, to a bound from its variance), the state's dtypes
and memory, float32 passthrough, non-finite steps, composition with `flatten`, every error
message and the benchmark's smoke run.
"""

from __future__ import annotations

import importlib.util
import math
import pathlib
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optx

BF16, F32 = jnp.bfloat16, jnp.float32
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, database=None)
# bfloat16 exponent fields kept by the bit-level properties: |p| in [2**-100, 2**100), so
# that p / 2, 2 p and every difference of two nearby values are normal floats (XLA:CPU
# flushes subnormal results to zero) and finite.
EXP_LO, EXP_HI = 27, 227


def bits_to_bf16(bits) -> jax.Array:
    return jax.lax.bitcast_convert_type(jnp.asarray(np.asarray(bits, np.uint16)), BF16)


def f64(x) -> np.ndarray:
    return np.asarray(jnp.asarray(x, F32), np.float64)


def one_step(tx, p: jax.Array, u: jax.Array):
    """One update of ``tx`` from a fresh state; returns (landed parameters, new state)."""
    updates, state = tx.update({"p": u}, tx.init({"p": p}), {"p": p})
    assert updates["p"].dtype == p.dtype
    return optx.apply_updates({"p": p}, updates)["p"], state


normal_bits = st.tuples(st.integers(0, 1), st.integers(EXP_LO, EXP_HI), st.integers(0, 127)).map(
    lambda t: (t[0] << 15) | (t[1] << 7) | t[2]
)


# ---------------------------------------------------------------------------------------
# Landing exactly.


@SETTINGS
@given(st.lists(st.tuples(normal_bits, st.integers(-128, 128)), min_size=1, max_size=64))
def test_kahan_lands_exactly_on_a_target_within_a_factor_two(pairs) -> None:
    # A target q at most 128 codes (one binade) from p, on p's side of zero: q / 2 <= p <=
    # 2 q, so q - p fits bfloat16 (Sterbenz's lemma) and p + (q - p) is q exactly.
    p = bits_to_bf16([b for b, _ in pairs])
    q = bits_to_bf16([b + (d if (b & 0x7FFF) + d <= 0x7F7F else 0) for b, d in pairs])
    landed, state = one_step(optx.kahan_summation(), p, q.astype(F32) - p.astype(F32))
    np.testing.assert_array_equal(f64(landed), f64(q))
    np.testing.assert_array_equal(f64(state.residual["p"]), 0.0)


@SETTINGS
@given(
    st.lists(normal_bits, min_size=1, max_size=64),
    st.lists(st.floats(-0.25, 0.25, width=32), min_size=64, max_size=64),
)
def test_kahan_lands_on_the_nearest_value_and_keeps_the_rest(bits, fractions) -> None:
    # Any float32 step up to a quarter of |p|: p lands on the nearest bfloat16 to p + u and
    # the float32 residual is the rest, exactly (their difference is a float32 number).
    p = bits_to_bf16(bits)
    u = jnp.asarray(fractions[: len(bits)], F32) * p.astype(F32)
    target = p.astype(F32) + u
    landed, state = one_step(optx.kahan_summation(F32), p, u)
    np.testing.assert_array_equal(f64(landed), f64(target.astype(BF16)))
    np.testing.assert_array_equal(f64(landed) + f64(state.residual["p"]), f64(target))


@SETTINGS
@given(st.lists(st.tuples(normal_bits, normal_bits), min_size=1, max_size=64))
def test_kahan_far_jumps_land_where_the_difference_fits_and_keep_the_rest(pairs) -> None:
    # Any two values, u = q - p in float32: the target t = p + u (float32) rounds to q' (q
    # itself unless the exponents differ by more than float32 holds). When q' - p fits
    # bfloat16 the parameter lands on q'; else on p + round(q' - p), and the residual keeps
    # t minus where it landed, to float32 round-off of that.
    p, q = bits_to_bf16([a for a, _ in pairs]), bits_to_bf16([b for _, b in pairs])
    u = q.astype(F32) - p.astype(F32)
    target = p.astype(F32) + u
    nearest = f64(target.astype(BF16))
    diff = nearest - f64(p)
    fits = f64(jnp.asarray(diff, F32).astype(BF16)) == diff
    landed, state = one_step(optx.kahan_summation(F32), p, u)
    np.testing.assert_array_equal(f64(landed)[fits], nearest[fits])
    missed = f64(target) - f64(landed)
    error = np.abs(f64(state.residual["p"]) - missed)
    assert np.all(error <= 2.0**-24 * np.abs(missed)), (error, missed)


def test_kahan_lands_exactly_in_every_binade() -> None:
    # Every positive and negative normal bfloat16 p of exponent EXP_LO..EXP_HI, moved to
    # its neighbours, to 1.5 p, 2 p and p / 2 (all within a factor 2 of p).
    codes = np.arange(EXP_LO << 7, (EXP_HI + 1) << 7)
    p = bits_to_bf16(np.concatenate([codes, codes | 0x8000]))
    tx = optx.kahan_summation()
    for q in (
        jnp.nextafter(p, jnp.asarray(jnp.inf, BF16)),
        jnp.nextafter(p, jnp.asarray(-jnp.inf, BF16)),
        (1.5 * p.astype(F32)).astype(BF16),
        (2 * p.astype(F32)).astype(BF16),
        (0.5 * p.astype(F32)).astype(BF16),
    ):
        landed, _ = one_step(tx, p, q.astype(F32) - p.astype(F32))
        np.testing.assert_array_equal(f64(landed), f64(q))


@SETTINGS
@given(
    st.lists(normal_bits, min_size=1, max_size=64),
    st.lists(st.floats(-0.25, 0.25, width=32), min_size=64, max_size=64),
    st.integers(0, 2**31 - 1),
)
def test_stochastic_rounding_lands_on_a_neighbour_of_the_target(bits, fractions, seed) -> None:
    p = bits_to_bf16(bits)
    u = jnp.asarray(fractions[: len(bits)], F32) * p.astype(F32)
    target = p.astype(F32) + u
    landed, _ = one_step(optx.stochastic_rounding(seed), p, u)
    nearest = target.astype(BF16)
    up = jnp.where(nearest.astype(F32) >= target, nearest, jnp.nextafter(nearest, jnp.inf))
    down = jnp.where(nearest.astype(F32) <= target, nearest, jnp.nextafter(nearest, -jnp.inf))
    assert np.all((f64(landed) == f64(up)) | (f64(landed) == f64(down)))


# ---------------------------------------------------------------------------------------
# Training.

# SGD on f(w) = sum a_i (w_i - c_i)**2 / 2 from w = 0, with a_i in [1, 2] and |c_i| in
# [1, 2): w moves monotonically to c (lr a < 1), so |w| < 2 and bfloat16's spacing along
# the run is at most ULP = 2**-7.
LR, STEPS, ULP = 1e-2, 1000, 2.0**-7


def quadratic_runs(last, dtype=BF16, n: int = 256):
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.uniform(1, 2, n), F32)
    c = jnp.asarray(rng.choice([-1, 1], n) * rng.uniform(1, 2, n), F32)
    tx = optx.sgd(LR) if last is None else optx.chain(optx.sgd(LR), last)

    @jax.jit
    def run(w):
        def body(_, carry):
            w, state = carry
            grads = (a * (w.astype(F32) - c)).astype(w.dtype)
            updates, state = tx.update(grads, state, w)
            return optx.apply_updates(w, updates), state

        return jax.lax.fori_loop(0, STEPS, body, (w, tx.init(w)))[0]

    return f64(run(jnp.zeros(n, dtype))), a


def test_kahan_tracks_float32_where_plain_bfloat16_stalls() -> None:
    reference, a = quadratic_runs(None, F32)
    compensated, _ = quadratic_runs(optx.kahan_summation())
    plain, _ = quadratic_runs(None)
    # The compensated sum m = p + r follows the float32 run: each step it departs by the
    # gradient taken at p instead of m (lr a |r| <= lr a ULP / 2) and by rounding r to
    # bfloat16 (<= 2**-9 |r| <= 2**-10 ULP); the run contracts errors by (1 - lr a) per
    # step, so |m - w_f32| <= ULP / 2 + 2**-10 ULP / (lr a_min). The parameter is m
    # rounded (another ULP / 2). bfloat16 gradients and updates (relative 2**-9 each) only
    # change the rate of convergence: their effect after lr a_min STEPS = 10 time
    # constants is <= 2 * 2**-9 * max|c| * 10 e**-10, below 1e-5.
    contraction = LR * float(jnp.min(a))
    bound = ULP * (1 + 2.0**-10 / contraction) + 2 * 2.0**-9 * 2 * 10 * math.exp(-10)
    assert np.max(np.abs(compensated - reference)) <= bound
    # Plain bfloat16 stops where lr a |w - c| falls below half the spacing (|w - c| up to
    # ULP / (2 lr a)), tens of spacings short.
    assert np.max(np.abs(plain - reference)) > 10 * ULP


def test_stochastic_rounding_is_unbiased() -> None:
    # p in [1, 2) (spacing ULP), u in (0, ULP / 2): rounding to nearest never moves p (its
    # mean error is -E[u] = -ULP / 4); stochastic rounding moves it up with probability
    # q = u / ULP, so its error p' - t has mean 0 and variance ULP**2 q (1 - q).
    n = 2**16
    rng = np.random.default_rng(0)
    p = jnp.asarray(rng.uniform(1, 2, n), F32).astype(BF16)
    u = jnp.asarray(rng.uniform(0, ULP / 2, n), F32)
    target = f64(p) + f64(u)
    landed, _ = one_step(optx.stochastic_rounding(7), p, u)
    error = f64(landed) - target
    q = f64(u) / ULP
    sigma_of_mean = ULP * math.sqrt(np.sum(q * (1 - q))) / n
    assert abs(np.mean(error)) <= 5 * sigma_of_mean, (np.mean(error), sigma_of_mean)
    nearest, _ = one_step(optx.kahan_summation(), p, u)
    assert np.mean(f64(nearest) - target) < -ULP / 8  # the bias SR removes


def test_stochastic_rounding_repeats_with_its_key_and_draws_anew_each_step() -> None:
    p = jnp.ones(4096, BF16)
    u = {"p": jnp.full(4096, ULP / 4, F32)}
    tx = optx.stochastic_rounding(3)
    first, state = tx.update(u, tx.init({"p": p}), {"p": p})
    again, _ = tx.update(u, tx.init({"p": p}), {"p": p})
    second, _ = tx.update(u, state, {"p": p})
    chex.assert_trees_all_equal(first, again)
    assert not np.array_equal(f64(first["p"]), f64(second["p"]))
    other_tx = optx.stochastic_rounding(4)
    other, _ = other_tx.update(u, other_tx.init({"p": p}), {"p": p})
    assert not np.array_equal(f64(first["p"]), f64(other["p"]))


# ---------------------------------------------------------------------------------------
# State, memory, passthrough, non-finite steps, composition.


def test_state_dtypes_and_memory() -> None:
    params = {
        "w": jnp.zeros((3, 4), BF16),
        "h": jnp.zeros(5, jnp.float16),
        "b": jnp.zeros(4, F32),
        "d": jnp.zeros(2, jnp.float64) if jax.config.jax_enable_x64 else jnp.zeros(2, F32),
    }
    residual = optx.kahan_summation().init(params).residual
    assert residual["b"] is None and residual["d"] is None  # no memory at 32 bits or more
    assert residual["w"].dtype == BF16 and residual["w"].shape == (3, 4)
    assert residual["h"].dtype == jnp.float16
    assert sum(x.nbytes for x in jax.tree.leaves(residual)) == 2 * (12 + 5)
    wide = optx.kahan_summation(F32).init(params).residual
    assert wide["w"].dtype == F32 and wide["h"].dtype == F32 and wide["b"] is None
    assert sum(x.nbytes for x in jax.tree.leaves(wide)) == 4 * (12 + 5)
    key = optx.stochastic_rounding(0).init(params)
    assert [(x.dtype, x.shape) for x in jax.tree.leaves(key)] == [(jnp.uint32, (2,))]


@pytest.mark.parametrize("tx", [optx.kahan_summation(), optx.stochastic_rounding(0)])
def test_float32_parameters_pass_through(tx) -> None:
    params = {"b": jnp.arange(3.0), "w": jnp.ones(2, BF16)}
    updates = {"b": jnp.asarray([1e-9, -2.0, 0.5]), "w": None}
    state = tx.init(params)
    out, new_state = tx.update(updates, state, params)
    assert out["w"] is None
    chex.assert_trees_all_equal(out["b"], updates["b"])
    if isinstance(state, optx.KahanSummationState):
        chex.assert_trees_all_equal(new_state, state)


def test_float16_parameters_are_compensated_too() -> None:
    p = jnp.ones(8, jnp.float16)
    tx = optx.kahan_summation(F32)
    params, state = {"p": p}, tx.init({"p": p})
    for _ in range(100):  # 100 steps of 1e-4: float16's spacing at 1 is 2**-10
        updates, state = tx.update({"p": jnp.full(8, 1e-4, jnp.float16)}, state, params)
        params = optx.apply_updates(params, updates)
    total = f64(params["p"]) + f64(state.residual["p"])
    # 100 float16 updates (each 1e-4 to 2**-11 relative) summed in float32.
    np.testing.assert_allclose(total, 1.01, rtol=0, atol=100 * 1e-4 * 2.0**-11 + 1e-6)
    assert np.all(f64(params["p"]) > 1.0)


def test_a_non_finite_step_restarts_the_residual() -> None:
    p = jnp.ones(3, BF16)
    tx = optx.kahan_summation()
    state = optx.KahanSummationState({"p": jnp.full(3, 2.0**-9, BF16)})
    u = {"p": jnp.asarray([jnp.nan, jnp.inf, 2.0**-10], F32)}
    updates, state = tx.update(u, state, {"p": p})
    landed = optx.apply_updates({"p": p}, updates)["p"]
    assert np.isnan(f64(landed)[0]) and np.isposinf(f64(landed)[1])
    np.testing.assert_array_equal(f64(state.residual["p"]), [0.0, 0.0, 2.0**-9 + 2.0**-10])


def test_flatten_and_optax_chain_compute_the_same() -> None:
    params = {"a": jnp.linspace(-2, 2, 7).astype(BF16), "b": jnp.ones(3, F32)}
    grads = [jax.tree.map(lambda x, k=k: jnp.cos(k * x.astype(F32)).astype(x.dtype), params)
             for k in range(1, 4)]  # fmt: skip
    adam = dict(mu_dtype=F32, nu_dtype=F32)

    def run(tx):
        p, s = params, tx.init(params)
        for g in grads:
            u, s = tx.update(g, s, p)
            p = optx.apply_updates(p, u)
        return p

    reference = run(optx.chain(optx.adam(0.1, **adam), optx.kahan_summation()))
    flat = run(optx.flatten(optx.chain(optx.adam(0.1, **adam), optx.kahan_summation())))
    in_optax = run(optax.chain(optx.adam(0.1, **adam), optx.kahan_summation()))
    chex.assert_trees_all_equal(flat, reference)
    chex.assert_trees_all_equal(in_optax, reference)


# ---------------------------------------------------------------------------------------
# Errors.


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: optx.kahan_summation("int16"),
            TypeError,
            "`kahan_summation` needs residual_dtype to be None or a floating dtype. "
            "Received: residual_dtype='int16'.",
        ),
        (
            lambda: optx.stochastic_rounding(1.5),
            TypeError,
            "`stochastic_rounding` needs key to be an int seed or one typed PRNG key",
        ),
        (
            lambda: optx.stochastic_rounding(1, seed=2),
            ValueError,
            "`stochastic_rounding` needs one of key and seed, not both. Received: key=1, seed=2.",
        ),
    ],
)
def test_factory_errors(make, error, message) -> None:
    with pytest.raises(error, match=re.escape(message)):
        make()


@pytest.mark.parametrize("tx", [optx.kahan_summation(), optx.stochastic_rounding(0)])
def test_update_errors(tx) -> None:
    params = {"w": jnp.ones(2, BF16)}
    state = tx.init(params)
    with pytest.raises(ValueError, match=re.escape(f"`{tx.name}.update` needs the current")):
        tx.update(params, state)
    with pytest.raises(ValueError, match=re.escape(f"`{tx.name}.update` needs updates with")):
        tx.update({"v": jnp.ones(2, BF16)}, state, params)
    with pytest.raises(TypeError, match=re.escape(f"`{tx.name}.init` needs floating-point")):
        tx.init({"w": jnp.ones(2, jnp.int32)})


def test_kahan_refuses_a_state_of_other_parameters() -> None:
    tx = optx.kahan_summation()
    state = tx.init({"w": jnp.ones(2, BF16)})
    params = {"v": jnp.ones(2, BF16)}
    message = (
        "`kahan_summation.update` needs the state's residual with the structure of params. "
        "Received: missing from the state's residual: 'v'; not in params: 'w'."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        tx.update(params, state, params)


# ---------------------------------------------------------------------------------------
# The benchmark's smoke run.


@pytest.mark.slow  # about 25 s: it compiles some 40 small programs
def test_benchmark_runs_at_tiny_size() -> None:
    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "bf16.py"
    spec = importlib.util.spec_from_file_location("bench_bf16", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--tiny", "--steps", "20", "--loops", "1"])
    losses, times = result["losses"], result["times"]
    assert len(losses) == len(module.OPTIMIZERS) * len(module.VARIANTS)
    assert all(math.isfinite(r["optx"]) and r["optx"] >= 0 for r in losses)
    assert all(r["optax"] is None or math.isfinite(r["optax"]) for r in losses)
    assert all(r["seconds"] > 0 and r["optax_plain"] > 0 for r in times)
    by_variant = {r["variant"]: r["bytes_per_param"] for r in times}
    assert by_variant["bfloat16 + kahan_summation()"] == 2
    assert by_variant["bfloat16 + kahan_summation(float32)"] == 4
    assert by_variant["bfloat16"] == 0
