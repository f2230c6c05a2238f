"""Warmup-stable-decay and inverse-square-root schedules: values, continuity, configs, errors."""

import json
import math
import re

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx
from optx.schedules import warmup_inverse_sqrt_schedule, warmup_stable_decay_schedule

DECAY_TYPES = ("linear", "cosine", "1-sqrt")


def wsd_reference(t, peak, warmup, stable, decay, init, end, decay_type):
    """Warmup-stable-decay in float64, phase by phase."""
    if t < warmup:
        return init + (peak - init) * t / warmup
    if t < warmup + stable:
        return peak
    s = min(t - warmup - stable, decay) / decay
    shape = {
        "linear": 1 - s,
        "cosine": 0.5 * (1 + math.cos(math.pi * s)),
        "1-sqrt": 1 - math.sqrt(s),
    }[decay_type]
    return end + (peak - end) * shape


def inverse_sqrt_reference(t, peak, warmup, init, timescale):
    """Linear warmup, then peak / sqrt(1 + (t - W) / timescale), in float64."""
    if t < warmup:
        return init + (peak - init) * t / warmup
    return peak / math.sqrt(1 + (t - warmup) / timescale)


def values(schedule, steps):
    return np.asarray([float(schedule(t)) for t in steps])


# ---------------------------------------------------------------------------------------
# Values at every step.


@pytest.mark.parametrize("decay_type", DECAY_TYPES)
@pytest.mark.parametrize(
    ("peak", "warmup", "stable", "decay", "init", "end"),
    [(1e-3, 10, 20, 15, 0.0, 0.0), (2.0, 7, 0, 9, 0.5, 0.2), (0.1, 0, 5, 1, 0.0, 0.01)],
)
def test_wsd_matches_reference(decay_type, peak, warmup, stable, decay, init, end):
    s = warmup_stable_decay_schedule(peak, warmup, stable, decay, init, end, decay_type)
    steps = np.arange(warmup + stable + decay + 10)
    expected = [wsd_reference(t, peak, warmup, stable, decay, init, end, decay_type) for t in steps]
    got = jax.vmap(s)(jnp.asarray(steps))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-7 * peak)
    # Eager and vmapped agree up to XLA's fusion of float32 arithmetic.
    np.testing.assert_allclose(values(s, steps), got, rtol=1e-6, atol=1e-7 * peak)


def test_wsd_phases():
    s = warmup_stable_decay_schedule(1.0, 4, 3, 4, init_value=0.2, end_value=0.1)
    np.testing.assert_allclose(
        values(s, range(13)),
        [0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 1.0, 1.0, 0.775, 0.55, 0.325, 0.1, 0.1],
        rtol=1e-6,
    )
    # The 1 - sqrt cooldown drops fastest first; halfway it is at 1 - sqrt(1/2).
    s = warmup_stable_decay_schedule(1.0, 0, 0, 100, decay_type="1-sqrt")
    np.testing.assert_allclose(float(s(50)), 1 - math.sqrt(0.5), rtol=1e-6)
    np.testing.assert_allclose(float(s(25)), 0.5, rtol=1e-6)


@pytest.mark.parametrize(
    ("peak", "warmup", "init", "timescale"),
    [(1e-3, 10, 0.0, None), (2.0, 5, 0.5, 20.0), (0.1, 0, 0.0, 7), (1.0, 1, 0.0, None)],
)
def test_inverse_sqrt_matches_reference(peak, warmup, init, timescale):
    s = warmup_inverse_sqrt_schedule(peak, warmup, init, timescale)
    tau = warmup if timescale is None else timescale
    steps = np.arange(200)
    expected = [inverse_sqrt_reference(t, peak, warmup, init, tau) for t in steps]
    got = jax.vmap(s)(jnp.asarray(steps))
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-7 * peak)
    # Eager and vmapped agree up to XLA's fusion of float32 arithmetic.
    np.testing.assert_allclose(values(s, steps), got, rtol=1e-6, atol=1e-7 * peak)


def test_inverse_sqrt_is_noam_without_timescale():
    # Vaswani et al. (2017): d**-0.5 * min(t**-0.5, t * W**-1.5), peak d**-0.5 * W**-0.5.
    d, warmup = 512, 4000
    s = warmup_inverse_sqrt_schedule(d**-0.5 * warmup**-0.5, warmup)
    steps = np.array([1, 10, 1000, 3999, 4000, 4001, 10_000, 100_000, 10**6])
    noam = d**-0.5 * np.minimum(steps**-0.5, steps * warmup**-1.5)
    np.testing.assert_allclose(values(s, steps), noam, rtol=2e-6)
    np.testing.assert_allclose(values(s, steps[4:]), s.peak_value * np.sqrt(warmup / steps[4:]))


# ---------------------------------------------------------------------------------------
# Continuity at the phase boundaries (evaluated at fractional steps).


def assert_continuous_at(s, boundary, value, length):
    """Both sides tend to ``value``; 1 - sqrt has an infinite slope, so within sqrt(eps)."""
    for eps in (1e-1, 1e-2, 1e-3):
        around = s(jnp.asarray([boundary - eps, boundary, boundary + eps], jnp.float32))
        np.testing.assert_allclose(around, value, atol=1.01 * math.sqrt(eps / length) + 1e-6)


@pytest.mark.parametrize("decay_type", DECAY_TYPES)
def test_wsd_is_continuous(decay_type):
    peak, warmup, stable, decay, init, end = 1.0, 50, 30, 40, 0.1, 0.05
    s = warmup_stable_decay_schedule(peak, warmup, stable, decay, init, end, decay_type)
    assert_continuous_at(s, warmup, peak, warmup)
    assert_continuous_at(s, warmup + stable, peak, decay)
    assert_continuous_at(s, warmup + stable + decay, end, decay)


@pytest.mark.parametrize("timescale", [None, 25.0])
def test_inverse_sqrt_is_continuous(timescale):
    s = warmup_inverse_sqrt_schedule(1.0, 50, 0.1, timescale)
    assert_continuous_at(s, 50, 1.0, 50)


# ---------------------------------------------------------------------------------------
# Transformations and configs.

SCHEDULES = [
    warmup_stable_decay_schedule(1e-3, 10, 20, 30),
    warmup_stable_decay_schedule(1e-3, 0, 0, 5, init_value=1e-4, end_value=1e-5),
    warmup_stable_decay_schedule(3e-4, 100, 800, 100, decay_type="cosine"),
    warmup_stable_decay_schedule(3e-4, 100, 800, 100, end_value=3e-5, decay_type="1-sqrt"),
    warmup_inverse_sqrt_schedule(1e-3, 100),
    warmup_inverse_sqrt_schedule(1e-3, 0, timescale=10_000),
    warmup_inverse_sqrt_schedule(1e-3, 10, init_value=1e-5, timescale=2.5),
]


@pytest.mark.parametrize("s", SCHEDULES, ids=repr)
def test_jit_and_vmap(s):
    steps = jnp.arange(0, 3000, 7, dtype=jnp.int32)
    eager = values(s, np.asarray(steps))
    # Equal up to XLA's fusion of float32 arithmetic.
    np.testing.assert_allclose(jax.vmap(s)(steps), eager, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.vmap(s))(steps), eager, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(s)(steps[5]), eager[5], rtol=1e-6)
    # A saturated int32 step count (DESIGN D5) is fine.
    assert np.isfinite(float(s(jnp.iinfo(jnp.int32).max)))


@pytest.mark.parametrize("s", SCHEDULES, ids=repr)
def test_json_round_trip(s):
    config = s.get_config()
    rebuilt = optx.schedules.from_config(json.loads(json.dumps(config)))
    assert rebuilt == s
    assert hash(rebuilt) == hash(s)
    assert rebuilt.get_config() == config
    assert repr(rebuilt) == repr(s)
    assert repr(s).startswith(config["class_name"] + "(")


def test_config_and_equality():
    s = warmup_stable_decay_schedule(1e-3, 10, 20, 30, decay_type="1-sqrt")
    assert s.get_config() == {
        "class_name": "warmup_stable_decay_schedule",
        "config": {
            "peak_value": 1e-3,
            "warmup_steps": 10,
            "stable_steps": 20,
            "decay_steps": 30,
            "init_value": 0.0,
            "end_value": 0.0,
            "decay_type": "1-sqrt",
        },
    }
    assert s == warmup_stable_decay_schedule(1e-3, 10, 20, 30, decay_type="1-sqrt")
    assert s != warmup_stable_decay_schedule(1e-3, 10, 20, 30, decay_type="cosine")
    r = warmup_inverse_sqrt_schedule(1e-3, 10, timescale=100)
    assert r.get_config()["config"] == {
        "peak_value": 1e-3,
        "warmup_steps": 10,
        "init_value": 0.0,
        "timescale": 100.0,
    }
    assert r != warmup_inverse_sqrt_schedule(1e-3, 10)


def test_drives_an_optimizer_without_recompiling():
    s = warmup_stable_decay_schedule(0.1, 2, 2, 2, decay_type="cosine")
    tx = optx.sgd(s)
    params = {"w": jnp.ones(2)}
    step = jax.jit(tx.update)
    state = tx.init(params)
    got = []
    for _ in range(8):
        updates, state = step({"w": jnp.ones(2)}, state, params)
        got.append(-float(updates["w"][0]))
    assert step._cache_size() == 1
    np.testing.assert_allclose(got, values(s, range(8)), rtol=1e-6)


# ---------------------------------------------------------------------------------------
# Properties.

steps_st = st.integers(0, 300)
# Not subnormal: XLA:CPU flushes float32 subnormals to zero.
value_st = st.one_of(st.just(0.0), st.floats(1e-6, 10.0))


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(
    peak=value_st,
    frac_init=st.floats(0.0, 1.0),
    frac_end=st.floats(0.0, 1.0),
    warmup=steps_st,
    stable=steps_st,
    decay=st.integers(1, 300),
    decay_type=st.sampled_from(DECAY_TYPES),
)
def test_wsd_properties(peak, frac_init, frac_end, warmup, stable, decay, decay_type):
    init, end = frac_init * peak, frac_end * peak
    s = warmup_stable_decay_schedule(peak, warmup, stable, decay, init, end, decay_type)
    # One length for every example, so that nothing recompiles.
    v = np.asarray(jax.vmap(s)(jnp.arange(1000)), np.float64)[: warmup + stable + decay + 20]
    assert np.all(np.isfinite(v))
    assert np.all(v >= 0)
    tol = 1e-6 * peak
    after = v[warmup:]
    assert np.all(np.diff(after) <= tol), "not non-increasing after the warmup"
    assert np.all(np.diff(v[: warmup + 1]) >= -tol), "not non-decreasing during the warmup"
    np.testing.assert_allclose(v[-1], end, rtol=1e-5, atol=tol)
    assert np.all(after <= peak * (1 + 1e-6))


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(
    peak=value_st,
    frac_init=st.floats(0.0, 1.0),
    warmup=steps_st,
    timescale=st.one_of(st.none(), st.floats(1e-3, 1e6)),
    step=st.integers(0, 2**31 - 2),
)
def test_inverse_sqrt_properties(peak, frac_init, warmup, timescale, step):
    if timescale is None:
        warmup = max(warmup, 1)
    s = warmup_inverse_sqrt_schedule(peak, warmup, frac_init * peak, timescale)
    v = np.asarray(jax.vmap(s)(jnp.asarray([step, step + 1, warmup, warmup + 1])), np.float64)
    assert np.all(np.isfinite(v)) and np.all(v >= 0)
    assert np.all(v <= peak * (1 + 1e-6))
    if step >= warmup:
        assert v[1] <= v[0] + 1e-6 * peak


# ---------------------------------------------------------------------------------------
# Errors.

WSD = "warmup_stable_decay_schedule"
ISQ = "warmup_inverse_sqrt_schedule"
ERRORS = [
    (
        lambda: warmup_stable_decay_schedule(1.0, 1, 1, 1, decay_type="exponential"),
        ValueError,
        f"`{WSD}` needs decay_type to be one of 'linear', 'cosine', '1-sqrt'. "
        f"Received: decay_type='exponential'.",
    ),
    (
        lambda: warmup_stable_decay_schedule(1.0, 1, 1, 1, decay_type="sqrt"),
        ValueError,
        f"`{WSD}` needs decay_type to be one of 'linear', 'cosine', '1-sqrt'. "
        f"Received: decay_type='sqrt'.",
    ),
    (
        lambda: warmup_stable_decay_schedule(1.0, -1, 1, 1),
        ValueError,
        f"`{WSD}` needs warmup_steps >= 0. Received: warmup_steps=-1.",
    ),
    (
        lambda: warmup_stable_decay_schedule(1.0, 1, -5, 1),
        ValueError,
        f"`{WSD}` needs stable_steps >= 0. Received: stable_steps=-5.",
    ),
    (
        lambda: warmup_stable_decay_schedule(1.0, 1, 1, 0),
        ValueError,
        f"`{WSD}` needs decay_steps >= 1. Received: decay_steps=0.",
    ),
    (
        lambda: warmup_stable_decay_schedule(1.0, 1.5, 1, 1),
        TypeError,
        f"`{WSD}` needs warmup_steps to be an int. Received: warmup_steps=1.5.",
    ),
    (
        lambda: warmup_stable_decay_schedule(1.0, 1, True, 1),
        TypeError,
        f"`{WSD}` needs stable_steps to be an int. Received: stable_steps=True.",
    ),
    (
        lambda: warmup_stable_decay_schedule(float("nan"), 1, 1, 1),
        ValueError,
        f"`{WSD}` needs peak_value to be finite. Received: peak_value=nan.",
    ),
    (
        lambda: warmup_stable_decay_schedule(1.0, 1, 1, 1, init_value="0"),
        TypeError,
        f"`{WSD}` needs init_value to be a real number. Received: init_value='0'.",
    ),
    (
        lambda: warmup_stable_decay_schedule(1.0, 1, 1, 1, end_value=float("inf")),
        ValueError,
        f"`{WSD}` needs end_value to be finite. Received: end_value=inf.",
    ),
    (
        lambda: warmup_inverse_sqrt_schedule(1.0, 0),
        ValueError,
        f"`{ISQ}` needs warmup_steps >= 1 when timescale is None (the decay is "
        f"peak_value * sqrt(warmup_steps / t)). Received: warmup_steps=0. "
        f"Give a timescale to decay from step 0.",
    ),
    (
        lambda: warmup_inverse_sqrt_schedule(1.0, -1, timescale=10),
        ValueError,
        f"`{ISQ}` needs warmup_steps >= 0. Received: warmup_steps=-1.",
    ),
    (
        lambda: warmup_inverse_sqrt_schedule(1.0, 10.0),
        TypeError,
        f"`{ISQ}` needs warmup_steps to be an int. Received: warmup_steps=10.0.",
    ),
    (
        lambda: warmup_inverse_sqrt_schedule(1.0, 10, timescale=0),
        ValueError,
        f"`{ISQ}` needs timescale > 0. Received: timescale=0.",
    ),
    (
        lambda: warmup_inverse_sqrt_schedule(1.0, 10, timescale=-3.0),
        ValueError,
        f"`{ISQ}` needs timescale > 0. Received: timescale=-3.0.",
    ),
    (
        lambda: warmup_inverse_sqrt_schedule(1.0, 10, timescale="10"),
        TypeError,
        f"`{ISQ}` needs timescale to be a real number. Received: timescale='10'.",
    ),
    (
        lambda: warmup_inverse_sqrt_schedule(1.0, 10, init_value=float("nan")),
        ValueError,
        f"`{ISQ}` needs init_value to be finite. Received: init_value=nan.",
    ),
]


@pytest.mark.parametrize(("build", "error", "message"), ERRORS)
def test_errors(build, error, message):
    with pytest.raises(error, match=re.escape(message)):
        build()
