"""optx.schedules: values against optax, configs, jit and vmap, properties, error messages."""

import inspect
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optx

S = optx.schedules

# The values must agree with optax's to float32 round-off: a relative tolerance of 1e-6
# (~8 float32 ulps), and the same in absolute terms of the schedule's largest value, for
# values near 0 (the end of a cosine decay). In practice they agree exactly (same float32
# operations in the same order); the test allows for a different XLA fusion.
RTOL = 1e-6
STEPS = 400
INT32_MAX = 2**31 - 1

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None)

# Cases built the same way from `optx.schedules` and from `optax`: `make(module)`.
PARITY = {
    "constant": lambda m: m.constant_schedule(0.3),
    "linear": lambda m: m.linear_schedule(1.0, 0.1, transition_steps=150, transition_begin=20),
    "polynomial": lambda m: m.polynomial_schedule(2.0, 0.5, power=3.0, transition_steps=90),
    "exponential": lambda m: m.exponential_decay(0.1, transition_steps=10, decay_rate=0.9),
    "exponential/staircase_begin": lambda m: m.exponential_decay(
        0.1, transition_steps=7, decay_rate=0.5, transition_begin=20, staircase=True
    ),
    "exponential/end_value": lambda m: m.exponential_decay(
        1.0, transition_steps=5, decay_rate=0.8, end_value=0.05
    ),
    "exponential/growth_end_value": lambda m: m.exponential_decay(
        0.01, transition_steps=10, decay_rate=1.5, transition_begin=30, end_value=1.0
    ),
    "cosine": lambda m: m.cosine_decay_schedule(0.5, decay_steps=200),
    "cosine/alpha_exponent": lambda m: m.cosine_decay_schedule(
        1.0, decay_steps=150, alpha=0.1, exponent=2.0
    ),
    "cosine/short": lambda m: m.cosine_decay_schedule(2.0, decay_steps=37, alpha=0.5, exponent=0.5),
    "warmup_constant": lambda m: m.warmup_constant_schedule(0.0, 1.0, warmup_steps=50),
    "warmup_cosine": lambda m: m.warmup_cosine_decay_schedule(0.0, 1.0, 20, 250),
    "warmup_cosine/no_warmup": lambda m: m.warmup_cosine_decay_schedule(
        0.1, 1.0, 0, 100, end_value=0.01
    ),
    "warmup_cosine/exponent": lambda m: m.warmup_cosine_decay_schedule(
        0.0, 3e-4, 30, 200, end_value=1e-5, exponent=1.5
    ),
    "warmup_exponential": lambda m: m.warmup_exponential_decay_schedule(
        0.0, 1.0, 10, transition_steps=20, decay_rate=0.5
    ),
    "warmup_exponential/all": lambda m: m.warmup_exponential_decay_schedule(
        0.01,
        0.5,
        25,
        transition_steps=9,
        decay_rate=0.7,
        transition_begin=15,
        staircase=True,
        end_value=0.1,
    ),
    "warmup_exponential/no_warmup": lambda m: m.warmup_exponential_decay_schedule(
        0.0, 1.0, 0, transition_steps=30, decay_rate=0.3
    ),
    "piecewise_constant": lambda m: m.piecewise_constant_schedule(1.0, {100: 0.1, 200: 0.01}),
    "piecewise_constant/zero_and_growth": lambda m: m.piecewise_constant_schedule(
        0.5, {0: 2.0, 37: 0.5, 150: 3.0, 300: 0.0}
    ),
    "piecewise_constant/none": lambda m: m.piecewise_constant_schedule(0.3),
    "piecewise_linear": lambda m: m.piecewise_interpolate_schedule(
        "linear", 1.0, {50: 0.5, 120: 0.1, 250: 2.0}
    ),
    "piecewise_cosine": lambda m: m.piecewise_interpolate_schedule(
        "cosine", 2.0, {0: 0.5, 60: 0.25, 61: 3.0, 333: 0.1}
    ),
    "linear_onecycle": lambda m: m.linear_onecycle_schedule(250, 0.1),
    "linear_onecycle/custom": lambda m: m.linear_onecycle_schedule(
        100, 1.0, pct_start=0.1, pct_final=0.5, div_factor=10.0, final_div_factor=100.0
    ),
    "cosine_onecycle": lambda m: m.cosine_onecycle_schedule(250, 0.1),
    "cosine_onecycle/custom": lambda m: m.cosine_onecycle_schedule(
        80, 1.0, pct_start=0.5, div_factor=5.0, final_div_factor=50.0
    ),
    "sgdr": lambda m: m.sgdr_schedule(
        [
            dict(init_value=0.0, peak_value=1.0, warmup_steps=10, decay_steps=100),
            dict(init_value=0.1, peak_value=0.5, warmup_steps=0, decay_steps=80, end_value=0.05),
            dict(init_value=0.0, peak_value=0.3, warmup_steps=5, decay_steps=150, exponent=2.0),
        ]
    ),
    "join": lambda m: m.join_schedules(
        [
            m.linear_schedule(0.0, 1.0, 40),
            m.cosine_decay_schedule(1.0, 100, alpha=0.2),
            m.exponential_decay(0.2, 15, 0.5, staircase=True),
        ],
        [40, 120],
    ),
}


def _assert_close(actual, desired, scale=None):
    """Equal to float32 round-off: relative, or relative to the schedule's scale near 0."""
    desired = np.asarray(desired)
    atol = RTOL * np.max(np.abs(desired if scale is None else scale))
    np.testing.assert_allclose(np.asarray(actual), desired, rtol=RTOL, atol=atol)


@pytest.mark.parametrize("make", PARITY.values(), ids=PARITY.keys())
def test_values_match_optax(make):
    steps = jnp.arange(STEPS, dtype=jnp.int32)
    ours = make(S)(steps)  # optx schedules take any shape of count
    assert ours.dtype == jnp.float32 and ours.shape == (STEPS,)
    _assert_close(ours, np.asarray(jax.vmap(make(optax))(steps), np.float32))
    # Under jit XLA turns divisions by constants into multiplications and fuses
    # multiply-adds: an ulp or so apart from eager, for optax as for optx.
    _assert_close(jax.jit(make(S))(steps), jax.jit(jax.vmap(make(optax)))(steps))


# (2) One example of every schedule, with non-default arguments where it has them.
EXAMPLES = [
    S.constant_schedule(0.25),
    S.warmup_stable_decay_schedule(1.0, 5, 10, 20, init_value=0.1, end_value=0.01),
    S.warmup_stable_decay_schedule(1.0, 0, 3, 7, decay_type="1-sqrt"),
    S.warmup_inverse_sqrt_schedule(1.0, 10),
    S.warmup_inverse_sqrt_schedule(0.5, 0, init_value=0.1, timescale=8),
    S.linear_schedule(1.0, 0.0, transition_steps=30, transition_begin=5),
    S.polynomial_schedule(1.0, 0.1, power=2.0, transition_steps=40),
    S.exponential_decay(1.0, 10, 0.5, transition_begin=3, staircase=True, end_value=0.01),
    S.exponential_decay(1e-3, 10, 2.0, end_value=1.0),
    S.cosine_decay_schedule(1.0, 50, alpha=0.1, exponent=2.0),
    S.warmup_constant_schedule(0.0, 1.0, 10),
    S.warmup_cosine_decay_schedule(0.0, 1.0, 10, 60, end_value=0.05, exponent=1.5),
    S.warmup_exponential_decay_schedule(0.0, 1.0, 10, 5, 0.8, 2, True, 0.1),
    S.piecewise_constant_schedule(1.0, {20: 0.5, 40: 0.1}),
    S.piecewise_interpolate_schedule("cosine", 1.0, {10: 2.0, 50: 0.01}),
    S.linear_onecycle_schedule(60, 1.0, pct_start=0.2, pct_final=0.7),
    S.cosine_onecycle_schedule(60, 1.0, pct_start=0.4, div_factor=10.0),
    S.sgdr_schedule(
        [
            dict(init_value=0.0, peak_value=1.0, warmup_steps=5, decay_steps=20),
            dict(init_value=0.0, peak_value=0.5, warmup_steps=0, decay_steps=30, end_value=0.1),
        ]
    ),
    S.join_schedules(
        [
            S.warmup_cosine_decay_schedule(0.0, 1.0, 5, 25),
            S.piecewise_constant_schedule(0.5, {10: 0.1}),
            S.constant_schedule(0.01),
        ],
        [25, 60],
    ),
]
EXAMPLE_IDS = [f"{i}-{s.class_name}" for i, s in enumerate(EXAMPLES)]


def test_examples_cover_every_schedule():
    factories = {
        name for name in dir(S) if not name.startswith("_") and inspect.isfunction(getattr(S, name))
    } - {"from_config", "plot", "inject_hyperparams", "inject_stateful_hyperparams"}
    missing = factories - {s.class_name for s in EXAMPLES}
    assert not missing, f"Add an example of {sorted(missing)} to EXAMPLES in this file."


@pytest.mark.parametrize("s", EXAMPLES, ids=EXAMPLE_IDS)
def test_config_round_trips_through_json(s):
    config = s.get_config()
    assert config["class_name"] == s.class_name
    # A config holds the factory's own arguments, composites included.
    factory = getattr(S, s.class_name)
    assert list(config["config"]) == list(inspect.signature(factory).parameters)
    rebuilt = S.from_config(json.loads(json.dumps(config)))
    assert rebuilt == s and hash(rebuilt) == hash(s) and type(rebuilt) is type(s)
    assert rebuilt.get_config() == config
    assert S.from_config(config) == s  # without JSON too


@pytest.mark.parametrize("s", EXAMPLES, ids=EXAMPLE_IDS)
def test_jit_vmap_and_extremes(s):
    jitted = jax.jit(s)
    steps = np.arange(80, dtype=np.int32)
    per_step = np.array([jitted(jnp.int32(t)) for t in steps])
    _assert_close(jax.vmap(s)(jnp.asarray(steps)), per_step)  # vectorised code: an ulp off
    for t in (0, 3, 25, 79):
        _assert_close(s(t), per_step[t], scale=per_step)  # eager: an ulp or so from jit
    for t in (0, INT32_MAX):
        assert np.isfinite(s(t)) and np.isfinite(jitted(jnp.int32(t))), t
    assert s(jnp.int32(INT32_MAX)).dtype == jnp.float32
    assert repr(s).startswith(f"{s.class_name}(")


def test_equal_arguments_give_equal_schedules():
    a = S.piecewise_constant_schedule(1.0, {200: 0.01, 100: 0.1})
    b = S.piecewise_constant_schedule(1, {100: 0.1, 200: 0.01})
    assert a == b and hash(a) == hash(b)
    assert repr(a) == (
        "piecewise_constant_schedule(init_value=1.0, boundaries_and_scales={100: 0.1, 200: 0.01})"
    )
    assert a.get_config()["config"]["boundaries_and_scales"] == {"100": 0.1, "200": 0.01}
    assert S.warmup_cosine_decay_schedule(0, 1, 2, 10) != S.warmup_cosine_decay_schedule(
        0, 1, 3, 10
    )
    cycle = dict(init_value=0.0, peak_value=1.0, warmup_steps=1, decay_steps=3)
    assert repr(S.sgdr_schedule([cycle])) == (
        "sgdr_schedule(cosine_kwargs=[{'init_value': 0.0, 'peak_value': 1.0, 'warmup_steps': 1, "
        "'decay_steps': 3, 'end_value': 0.0, 'exponent': 1.0}])"
    )


def test_join_takes_plain_functions_but_has_no_config_then():
    def half(count):
        return 0.5 * jnp.ones_like(count)

    s = S.join_schedules([S.constant_schedule(1.0), half], [2])
    assert [float(s(t)) for t in range(4)] == [1.0, 1.0, 0.5, 0.5]
    with pytest.raises(TypeError, match=re.escape("A plain Python function has no config")):
        s.get_config()


# (3) Properties, on the steps 0..STEPS-1 and the largest int32 step.
PROPERTY_STEPS = jnp.asarray(np.r_[np.arange(300), INT32_MAX], jnp.int32)
TOL = 2.0**-21  # a few float32 ulps of the schedule's largest value


def _values(s):
    values = np.asarray(s(PROPERTY_STEPS), np.float64)
    assert np.all(np.isfinite(values)), values[~np.isfinite(values)]
    return values


def _non_increasing(values):
    assert np.all(np.diff(values) <= TOL * max(np.max(np.abs(values)), 1e-30))


def _non_decreasing(values):
    _non_increasing(-values)


values_ = st.floats(0.0, 10.0, allow_subnormal=False)
fractions = st.floats(0.0, 1.0, allow_subnormal=False)


@SETTINGS
@given(
    values_,
    st.integers(1, 100),
    st.floats(1e-3, 1.0),
    st.integers(0, 50),
    st.booleans(),
    st.none() | fractions,
)
def test_exponential_decay_properties(init, steps, rate, begin, staircase, end):
    s = S.exponential_decay(init, steps, rate, begin, staircase, None if end is None else end)
    values = _values(s)
    assert np.all(values >= 0)
    _non_increasing(values)


@SETTINGS
@given(values_, st.integers(1, 300), fractions, st.floats(0.0, 4.0))
def test_cosine_decay_properties(init, steps, alpha, exponent):
    values = _values(S.cosine_decay_schedule(init, steps, alpha, exponent))
    assert np.all(values >= 0)
    _non_increasing(values)


@SETTINGS
@given(values_, values_, st.integers(0, 100), st.integers(1, 200), fractions, st.booleans())
def test_warmups_rise_then_decay(a, b, warmup, length, end_fraction, cosine):
    init, peak = min(a, b), max(a, b)
    if cosine:
        s = S.warmup_cosine_decay_schedule(
            init, peak, warmup, warmup + length, end_value=end_fraction * peak
        )
    else:
        s = S.warmup_exponential_decay_schedule(init, peak, warmup, length, 0.5 + end_fraction / 2)
    values = _values(s)
    assert np.all(values >= 0)
    _non_decreasing(values[: warmup + 1])
    _non_increasing(values[warmup:])
    constant = _values(S.warmup_constant_schedule(init, peak, max(warmup, 1)))
    _non_decreasing(constant)


@SETTINGS
@given(
    values_,
    st.dictionaries(st.integers(0, 350), fractions, max_size=3),
    st.sampled_from([None, "linear", "cosine"]),
)
def test_piecewise_properties(init, boundaries_and_scales, interpolate_type):
    if interpolate_type is None:
        s = S.piecewise_constant_schedule(init, boundaries_and_scales)
    else:
        s = S.piecewise_interpolate_schedule(interpolate_type, init, boundaries_and_scales)
    values = _values(s)
    assert np.all(values >= 0)
    _non_increasing(values)  # scales <= 1


@SETTINGS
@given(st.integers(3, 300), values_, st.floats(0.0, 0.3), st.floats(0.5, 0.9), st.booleans())
def test_onecycle_properties(steps, peak, pct_start, pct_final, cosine):
    if cosine:
        s = S.cosine_onecycle_schedule(steps, peak, pct_start)
    else:
        s = S.linear_onecycle_schedule(steps, peak, pct_start, pct_final)
    values = _values(s)
    assert np.all(values >= 0)
    _non_decreasing(values[: int(pct_start * steps) + 1])


@SETTINGS
@given(st.lists(st.tuples(values_, st.integers(0, 20), st.integers(1, 80)), min_size=1, max_size=4))
def test_sgdr_properties(cycles):
    s = S.sgdr_schedule(
        [
            dict(init_value=v / 2, peak_value=v, warmup_steps=w, decay_steps=w + d)
            for v, w, d in cycles
        ]
    )
    assert np.all(_values(s) >= 0)


# (4) Every error message, word for word.
LIN = S.linear_schedule(0.0, 1.0, 10)
COS = S.cosine_decay_schedule(1.0, 10)
CYCLE = dict(init_value=0.0, peak_value=1.0, warmup_steps=2, decay_steps=10)

ERRORS = [
    (
        lambda: S.exponential_decay(1.0, 0, 0.5),
        ValueError,
        "`exponential_decay` needs transition_steps >= 1. Received: transition_steps=0.",
    ),
    (
        lambda: S.exponential_decay(1.0, -5, 0.5),
        ValueError,
        "`exponential_decay` needs transition_steps >= 1. Received: transition_steps=-5.",
    ),
    (
        lambda: S.exponential_decay(1.0, 10.0, 0.5),
        TypeError,
        "`exponential_decay` needs transition_steps to be an int. Received: transition_steps=10.0.",
    ),
    (
        lambda: S.exponential_decay(1.0, 10, 0.0),
        ValueError,
        "`exponential_decay` needs decay_rate > 0. Received: decay_rate=0.0.",
    ),
    (
        lambda: S.exponential_decay(1.0, 10, -0.5),
        ValueError,
        "`exponential_decay` needs decay_rate > 0. Received: decay_rate=-0.5.",
    ),
    (
        lambda: S.exponential_decay(1.0, 10, 0.5, transition_begin=-1),
        ValueError,
        "`exponential_decay` needs transition_begin >= 0. Received: transition_begin=-1.",
    ),
    (
        lambda: S.exponential_decay(1.0, 10, 0.5, staircase=1),
        TypeError,
        "`exponential_decay` needs staircase to be a bool. Received: staircase=1.",
    ),
    (
        lambda: S.exponential_decay(1.0, 10, 0.5, end_value=float("nan")),
        ValueError,
        "`exponential_decay` needs end_value to be finite. Received: end_value=nan.",
    ),
    (
        lambda: S.warmup_exponential_decay_schedule(0.0, 1.0, 10, 0, 0.5),
        ValueError,
        "`warmup_exponential_decay_schedule` needs transition_steps >= 1. "
        "Received: transition_steps=0.",
    ),
    (
        lambda: S.warmup_exponential_decay_schedule(0.0, 1.0, -3, 10, 0.5),
        ValueError,
        "`warmup_exponential_decay_schedule` needs warmup_steps >= 0. Received: warmup_steps=-3.",
    ),
    (
        lambda: S.warmup_exponential_decay_schedule(0.0, 1.0, 3, 10, 0),
        ValueError,
        "`warmup_exponential_decay_schedule` needs decay_rate > 0. Received: decay_rate=0.",
    ),
    (
        lambda: S.cosine_decay_schedule(1.0, 0),
        ValueError,
        "`cosine_decay_schedule` needs decay_steps >= 1. Received: decay_steps=0.",
    ),
    (
        lambda: S.cosine_decay_schedule(1.0, -10),
        ValueError,
        "`cosine_decay_schedule` needs decay_steps >= 1. Received: decay_steps=-10.",
    ),
    (
        lambda: S.cosine_decay_schedule(1.0, 10, exponent=-1.0),
        ValueError,
        "`cosine_decay_schedule` needs exponent >= 0. Received: exponent=-1.0.",
    ),
    (
        lambda: S.warmup_cosine_decay_schedule(0.0, 1.0, 10, 10),
        ValueError,
        "`warmup_cosine_decay_schedule` needs decay_steps > warmup_steps: decay_steps is the "
        "whole schedule's length, warmup included. Received: decay_steps=10, warmup_steps=10.",
    ),
    (
        lambda: S.warmup_cosine_decay_schedule(0.0, 1.0, -1, 10),
        ValueError,
        "`warmup_cosine_decay_schedule` needs warmup_steps >= 0. Received: warmup_steps=-1.",
    ),
    (
        lambda: S.warmup_cosine_decay_schedule(0.0, 1.0, 2, 0),
        ValueError,
        "`warmup_cosine_decay_schedule` needs decay_steps >= 1. Received: decay_steps=0.",
    ),
    (
        lambda: S.warmup_constant_schedule(0.0, 1.0, 0),
        ValueError,
        "`warmup_constant_schedule` needs warmup_steps >= 1. Received: warmup_steps=0. For no "
        "warmup, use constant_schedule(peak_value).",
    ),
    (
        lambda: S.warmup_constant_schedule(0.0, 1.0, -2),
        ValueError,
        "`warmup_constant_schedule` needs warmup_steps >= 1. Received: warmup_steps=-2.",
    ),
    (
        lambda: S.piecewise_constant_schedule(1.0, {-1: 0.5}),
        ValueError,
        "`piecewise_constant_schedule` needs the keys of boundaries_and_scales to be int steps "
        ">= 0. Received: boundaries_and_scales={-1: 0.5}, with key -1.",
    ),
    (
        lambda: S.piecewise_constant_schedule(1.0, {10.5: 0.5}),
        ValueError,
        "`piecewise_constant_schedule` needs the keys of boundaries_and_scales to be int steps "
        ">= 0. Received: boundaries_and_scales={10.5: 0.5}, with key 10.5.",
    ),
    (
        lambda: S.piecewise_constant_schedule(1.0, {10: -0.5}),
        ValueError,
        "`piecewise_constant_schedule` needs boundaries_and_scales[10] >= 0. "
        "Received: boundaries_and_scales[10]=-0.5.",
    ),
    (
        lambda: S.piecewise_constant_schedule(1.0, [100, 200]),
        TypeError,
        "`piecewise_constant_schedule` needs boundaries_and_scales to be a dict {step: scale}. "
        "Received: boundaries_and_scales=[100, 200].",
    ),
    (
        lambda: S.piecewise_constant_schedule(1.0, ((5, 0.1), (5, 0.2))),
        ValueError,
        "`piecewise_constant_schedule` needs distinct steps in boundaries_and_scales. "
        "Received: boundaries_and_scales=((5, 0.1), (5, 0.2)).",
    ),
    (
        lambda: S.piecewise_interpolate_schedule("quadratic", 1.0, {10: 0.5}),
        ValueError,
        "`piecewise_interpolate_schedule` needs interpolate_type to be 'linear' or 'cosine'. "
        "Received: interpolate_type='quadratic'.",
    ),
    (
        lambda: S.piecewise_interpolate_schedule("linear", 1.0, {10: -1.0}),
        ValueError,
        "`piecewise_interpolate_schedule` needs boundaries_and_scales[10] >= 0. "
        "Received: boundaries_and_scales[10]=-1.0.",
    ),
    (
        lambda: S.linear_onecycle_schedule(0, 1.0),
        ValueError,
        "`linear_onecycle_schedule` needs transition_steps >= 1. Received: transition_steps=0.",
    ),
    (
        lambda: S.linear_onecycle_schedule(100, 1.0, pct_start=0.9, pct_final=0.5),
        ValueError,
        "`linear_onecycle_schedule` needs int(pct_start * transition_steps) < "
        "int(pct_final * transition_steps) < transition_steps, so that each phase lasts a step "
        "at least. Received: transition_steps=100, pct_start=0.9, pct_final=0.5: boundaries "
        "[90, 50, 100].",
    ),
    (
        lambda: S.linear_onecycle_schedule(100, 1.0, pct_final=1.0),
        ValueError,
        "`linear_onecycle_schedule` needs int(pct_start * transition_steps) < "
        "int(pct_final * transition_steps) < transition_steps, so that each phase lasts a step "
        "at least. Received: transition_steps=100, pct_start=0.3, pct_final=1.0: boundaries "
        "[30, 100, 100].",
    ),
    (
        lambda: S.linear_onecycle_schedule(100, 1.0, pct_start=-0.1),
        ValueError,
        "`linear_onecycle_schedule` needs 0 <= pct_start <= 1. Received: pct_start=-0.1.",
    ),
    (
        lambda: S.linear_onecycle_schedule(100, 1.0, div_factor=0.0),
        ValueError,
        "`linear_onecycle_schedule` needs div_factor > 0. Received: div_factor=0.0.",
    ),
    (
        lambda: S.cosine_onecycle_schedule(10, 1.0, pct_start=1.0),
        ValueError,
        "`cosine_onecycle_schedule` needs int(pct_start * transition_steps) < transition_steps, "
        "so that each phase lasts a step at least. Received: transition_steps=10, "
        "pct_start=1.0: boundaries [10, 10].",
    ),
    (
        lambda: S.cosine_onecycle_schedule(10, 1.0, final_div_factor=-1.0),
        ValueError,
        "`cosine_onecycle_schedule` needs final_div_factor > 0. Received: final_div_factor=-1.0.",
    ),
    (
        lambda: S.sgdr_schedule([]),
        ValueError,
        "`sgdr_schedule` needs at least one cycle in cosine_kwargs. Received: cosine_kwargs=[].",
    ),
    (
        lambda: S.sgdr_schedule(CYCLE),
        TypeError,
        "`sgdr_schedule` needs cosine_kwargs to be a list of dicts of arguments of "
        "warmup_cosine_decay_schedule. Received: cosine_kwargs={'init_value': 0.0, "
        "'peak_value': 1.0, 'warmup_steps': 2, 'decay_steps': 10}.",
    ),
    (
        lambda: S.sgdr_schedule([CYCLE, 3]),
        TypeError,
        "`sgdr_schedule` needs each entry of cosine_kwargs to be a dict of arguments of "
        "warmup_cosine_decay_schedule. Received: cosine_kwargs[1]=3.",
    ),
    (
        lambda: S.sgdr_schedule([dict(init_value=0.0, peak_value=1.0, decay_steps=10, alpha=0.1)]),
        TypeError,
        "`sgdr_schedule` needs each entry of cosine_kwargs to hold the arguments of "
        "warmup_cosine_decay_schedule (init_value, peak_value, warmup_steps, decay_steps, "
        "end_value, exponent; the first four required). Received: cosine_kwargs[0]="
        "{'init_value': 0.0, 'peak_value': 1.0, 'decay_steps': 10, 'alpha': 0.1}, with unknown "
        "['alpha'] and missing ['warmup_steps'].",
    ),
    (
        lambda: S.sgdr_schedule([CYCLE, {**CYCLE, "decay_steps": 2}]),
        ValueError,
        "`warmup_cosine_decay_schedule` needs decay_steps > warmup_steps: decay_steps is the "
        "whole schedule's length, warmup included. Received: decay_steps=2, warmup_steps=2.\n"
        "In `sgdr_schedule`, for cosine_kwargs[1].",  # a note (PEP 678) names the cycle
    ),
    (
        lambda: S.join_schedules([LIN, COS], [10, 20]),
        ValueError,
        "`join_schedules` needs one boundary fewer than schedules (a boundary between each "
        "two). Received: 2 schedules and boundaries=[10, 20].",
    ),
    (
        lambda: S.join_schedules([LIN, COS, LIN], [20, 10]),
        ValueError,
        "`join_schedules` needs strictly increasing boundaries. Received: boundaries=[20, 10].",
    ),
    (
        lambda: S.join_schedules([LIN, COS, LIN], [10, 10]),
        ValueError,
        "`join_schedules` needs strictly increasing boundaries. Received: boundaries=[10, 10].",
    ),
    (
        lambda: S.join_schedules([LIN, COS], [-1]),
        ValueError,
        "`join_schedules` needs boundaries[0] >= 0. Received: boundaries[0]=-1.",
    ),
    (
        lambda: S.join_schedules([LIN, COS], [2.5]),
        TypeError,
        "`join_schedules` needs boundaries[0] to be an int. Received: boundaries[0]=2.5.",
    ),
    (
        lambda: S.join_schedules([], []),
        ValueError,
        "`join_schedules` needs at least one schedule. Received: schedules=[].",
    ),
    (
        lambda: S.join_schedules([LIN, 0.5], [10]),
        TypeError,
        "`join_schedules` needs schedules to be callables step -> value. "
        "Received: schedules[1]=0.5.",
    ),
    (
        lambda: S.join_schedules([LIN, COS], 10),
        TypeError,
        "`join_schedules` needs boundaries to be a list or tuple. Received: boundaries=10.",
    ),
    # from_config
    (
        lambda: S.from_config({"class_name": "warmup_cosine_decay", "config": {}}),
        ValueError,
        "`from_config` needs the class_name of a known schedule. Received: "
        "class_name='warmup_cosine_decay'. Did you mean 'warmup_cosine_decay_schedule'?",
    ),
    (
        lambda: S.from_config({"class_name": "Zzz", "config": {}}),
        ValueError,
        "`from_config` needs the class_name of a known schedule. Received: class_name='Zzz'. "
        "The names are those of the schedule factories, such as 'linear_schedule'.",
    ),
    (
        lambda: S.from_config({"config": {"value": 1.0}}),
        ValueError,
        "`from_config` needs a dict with 'class_name' and 'config' keys. "
        "Received: {'config': {'value': 1.0}}.",
    ),
    (
        lambda: S.from_config({"class_name": "constant_schedule", "config": [1.0]}),
        ValueError,
        "`from_config` needs 'config' to be a dict of arguments. Received: config=[1.0].",
    ),
    (
        lambda: S.from_config(
            {"class_name": "exponential_decay", "config": {"init_value": 1.0, "decay_rate": 0.5}}
        ),
        TypeError,
        "`from_config` needs every required argument of exponential_decay. Missing: "
        "['transition_steps']. Received: config={'init_value': 1.0, 'decay_rate': 0.5}.",
    ),
    (
        lambda: S.from_config(
            {
                "class_name": "cosine_decay_schedule",
                "config": {"init_value": 1.0, "decay_steps": 10, "warmup": 3, "beta": 1},
            }
        ),
        TypeError,
        "`from_config` got arguments that cosine_decay_schedule does not take: "
        "['beta', 'warmup']. It takes: ['init_value', 'decay_steps', 'alpha', 'exponent'].",
    ),
    (
        lambda: S.from_config(
            {
                "class_name": "join_schedules",
                "config": {
                    "schedules": [{"class_name": "nope"}, COS.get_config()],
                    "boundaries": [5],
                },
            }
        ),
        ValueError,
        "`from_config` needs the class_name of a known schedule. Received: class_name='nope'. "
        "The names are those of the schedule factories, such as 'linear_schedule'.",
    ),
    (
        lambda: S.from_config(
            {
                "class_name": "piecewise_constant_schedule",
                "config": {"init_value": 1.0, "boundaries_and_scales": {"ten": 0.1}},
            }
        ),
        ValueError,
        "`piecewise_constant_schedule` needs the keys of boundaries_and_scales to be int steps. "
        "Received: boundaries_and_scales={'ten': 0.1}, with key 'ten'.",
    ),
]


@pytest.mark.parametrize(("make", "error", "message"), ERRORS)
def test_error_messages(make, error, message):
    with pytest.raises(error, match=re.escape(message) + "$"):
        make()
