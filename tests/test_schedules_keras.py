"""Keras's schedule classes in `optx.optimizers.schedules`: numerics, configs, errors.

Checked against a NumPy transcription of each formula (float64), against Keras itself on the
JAX backend, against the values verified in the reference notes, and for config parity.
"""

import dataclasses
import functools
import inspect
import json
import math
import os
import re

os.environ["KERAS_BACKEND"] = "jax"  # before keras is imported

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest
from helpers import count_compiles

import optx
from optx._src.schedules.base import registered

S = optx.optimizers.schedules
KS = keras.optimizers.schedules
STEPS = np.arange(301)
RTOL, ATOL = 1e-6, 1e-7


def assert_close(got, want):
    """rtol 1e-6, and an absolute 3e-7 of the schedule's largest value: float32 rounding.

    Where float32 cancels (``1 - s/D`` near the end of a decay, ``1 + cos`` near pi) the
    relative error of a small value grows; Keras computes the same float32 expressions.
    """
    want = np.asarray(want, np.float64)
    scale = np.nanmax(np.abs(want)) if np.isfinite(want).any() else 1.0
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=RTOL, atol=3e-7 * scale)


# NumPy transcriptions of the formulas, in float64. The restarts reference walks the periods
# one by one instead of using the closed form, so it checks that form too.


def np_exponential(s, lr0, D, rate, staircase=False, name=None):
    p = np.floor(s / D) if staircase else s / D
    return lr0 * rate**p


def np_piecewise(s, boundaries, values, name=None):
    return np.array([values[sum(t > b for b in boundaries)] for t in s], np.float64)


def np_polynomial(s, lr0, D, end=1e-4, power=1.0, cycle=False, name=None):
    if cycle:
        length = D * np.where(s == 0, 1.0, np.ceil(s / D))
    else:
        s, length = np.minimum(s, D), D
    return (lr0 - end) * (1 - s / length) ** power + end


def np_inverse_time(s, lr0, D, rate, staircase=False, name=None):
    p = np.floor(s / D) if staircase else s / D
    return lr0 / (1 + rate * p)


def np_cosine(s, lr0, D, alpha=0.0, name=None, warmup_target=None, warmup_steps=0):
    def decay(t, start):
        return start * ((1 - alpha) * 0.5 * (1 + np.cos(np.pi * t / D)) + alpha)

    if warmup_target is None:
        return decay(np.minimum(s, D), lr0)
    t = np.minimum(s, D + warmup_steps)
    warm = lr0 + (warmup_target - lr0) * t / max(warmup_steps, 1)
    return np.where(t < warmup_steps, warm, decay(t - warmup_steps, warmup_target))


def np_restarts(s, lr0, D1, t_mul=2.0, m_mul=1.0, alpha=0.0, name=None):
    out = []
    for t in s:
        if t_mul < 1 and t >= D1 / (1 - t_mul):
            out.append(np.nan)
            continue
        start, length, i = 0.0, float(D1), 0
        while t >= start + length:
            start, length, i = start + length, length * t_mul, i + 1
        g = (t - start) / length
        out.append(lr0 * ((1 - alpha) * m_mul**i * 0.5 * (1 + np.cos(np.pi * g)) + alpha))
    return np.array(out)


REFERENCE = {
    "ExponentialDecay": np_exponential,
    "PiecewiseConstantDecay": np_piecewise,
    "PolynomialDecay": np_polynomial,
    "InverseTimeDecay": np_inverse_time,
    "CosineDecay": np_cosine,
    "CosineDecayRestarts": np_restarts,
}

# (class name, positional args, keyword args)
CASES = [
    ("ExponentialDecay", (0.1, 10, 0.9), {}),
    ("ExponentialDecay", (0.1, 7, 0.5), {"staircase": True}),
    ("ExponentialDecay", (2.0, 2.5, 0.96), {"name": "lr"}),
    ("PiecewiseConstantDecay", ([10, 50, 120], [1.0, 0.5, 0.1, 0.01]), {}),
    ("PiecewiseConstantDecay", ([0], [0.3, 0.2]), {}),
    ("PiecewiseConstantDecay", ([10.5, 99.9], [1.0, 0.1, 0.05]), {}),
    ("PolynomialDecay", (0.1, 50), {}),
    ("PolynomialDecay", (1.0, 40, 0.01), {"power": 0.5, "cycle": True}),
    ("PolynomialDecay", (1.0, 33, 0.1), {"power": 2.0}),
    ("PolynomialDecay", (0.5, 25, 0.0), {"cycle": True}),
    ("InverseTimeDecay", (0.1, 1.0, 0.5), {}),
    ("InverseTimeDecay", (1.0, 20, 2.0), {"staircase": True}),
    ("CosineDecay", (0.1, 100), {}),
    ("CosineDecay", (0.1, 100), {"alpha": 0.2}),
    ("CosineDecay", (0.0, 50), {"alpha": 0.1, "warmup_target": 1.0, "warmup_steps": 30}),
    ("CosineDecay", (0.3, 60), {"warmup_target": 0.6}),
    ("CosineDecayRestarts", (1.0, 20), {}),
    ("CosineDecayRestarts", (1.0, 25), {"t_mul": 1.0, "m_mul": 0.8, "alpha": 0.05}),
    ("CosineDecayRestarts", (0.1, 10), {"t_mul": 1.5, "m_mul": 0.5, "alpha": 0.1}),
    ("CosineDecayRestarts", (1.0, 30), {"t_mul": 3.0}),
]
IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(CASES)]


def build(module, name, args, kwargs):
    return getattr(module, name)(*args, **kwargs)


def keras_values(schedule, steps=STEPS):
    # vmap turns CosineDecay's `ops.cond` on the step into a select; jit compiles it once.
    return np.asarray(jax.jit(jax.vmap(schedule))(jnp.asarray(steps, jnp.int32)))


@functools.cache
def keras_case(index):
    """Keras's values at steps 0..300 for CASES[index]."""
    name, args, kwargs = CASES[index]
    return keras_values(build(KS, name, args, kwargs))


# (a) NumPy reference, (b) Keras, (c) verified values.


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES, ids=IDS)
def test_matches_numpy_reference(name, args, kwargs):
    got = np.asarray(build(S, name, args, kwargs)(jnp.asarray(STEPS, jnp.int32)))
    assert got.dtype == np.float32
    assert_close(got, REFERENCE[name](STEPS.astype(np.float64), *args, **kwargs))


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES, ids=IDS)
def test_matches_keras(name, args, kwargs):
    got = np.asarray(build(S, name, args, kwargs)(jnp.asarray(STEPS, jnp.int32)))
    assert_close(got, keras_case(CASES.index((name, args, kwargs))))
    # Scalar steps, eagerly, as a Keras optimizer calls it.
    for step in (0, 17):
        ours = build(S, name, args, kwargs)(step)
        theirs = build(KS, name, args, kwargs)(step)
        assert_close(ours, theirs)


def test_restarts_with_shrinking_periods_match_keras_up_to_nan():
    # t_mul < 1: the periods add up to 16 / (1 - 0.5) = 32 steps; Keras gives NaN after.
    steps = np.arange(40)
    got = np.asarray(S.CosineDecayRestarts(1.0, 16, t_mul=0.5)(steps))
    want = keras_values(KS.CosineDecayRestarts(1.0, 16, t_mul=0.5), steps)
    assert_close(got, want)
    assert_close(got, np_restarts(steps, 1.0, 16, t_mul=0.5))
    assert np.isfinite(got[:32]).all() and np.isnan(got[32:]).all()


def test_piecewise_exact_at_large_integer_steps():
    s = S.PiecewiseConstantDecay([100_000_000, 2**31 - 2], [1.0, 0.5, 0.1])
    steps = jnp.asarray([100_000_000, 100_000_001, 2**31 - 2, 2**31 - 1], jnp.int32)
    np.testing.assert_array_equal(s(steps), np.float32([1.0, 0.5, 0.5, 0.1]))
    k = KS.PiecewiseConstantDecay([100_000_000, 2**31 - 2], [1.0, 0.5, 0.1])
    np.testing.assert_array_equal(k(steps), np.float32([1.0, 0.5, 0.5, 0.1]))
    # Float steps compare in float32, as Keras does for a float step.
    np.testing.assert_array_equal(s(jnp.asarray([2.5, 1e8 + 8])), np.float32([1.0, 0.5]))


def test_verified_values():
    s = S.CosineDecay(0, 10, warmup_target=1, warmup_steps=5, alpha=0.1)
    got = [round(float(s(t)), 3) for t in range(17)]
    assert got[:7] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 0.978]
    assert got[-2:] == [0.1, 0.1]
    s = S.CosineDecayRestarts(1, 4, t_mul=2, m_mul=0.5)
    got = [round(float(s(t)), 3) for t in range(13)]
    assert got[:6] == [1.0, 0.854, 0.5, 0.146, 0.5, 0.481]
    assert got[12] == 0.25  # the second restart
    s = S.PolynomialDecay(1.0, 10, end_learning_rate=0.1, cycle=True)
    assert float(s(10)) == pytest.approx(0.1, abs=1e-7)  # exactly the end at s = D
    assert float(s(11)) == pytest.approx(0.9 * (1 - 11 / 20) + 0.1)  # then over 2 D


def test_polynomial_cycle_is_one_period_at_step_zero():
    s = S.PolynomialDecay(1.0, 10, end_learning_rate=0.0, cycle=True)
    assert float(s(0)) == 1.0
    assert float(s(20)) == 0.0 and float(s(21)) == pytest.approx(1 - 21 / 30)


# (d) configs and serialisation.


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES, ids=IDS)
def test_config_matches_keras(name, args, kwargs):
    ours, theirs = build(S, name, args, kwargs), build(KS, name, args, kwargs)
    config = ours.get_config()
    assert config == theirs.get_config()
    assert list(config) == list(theirs.get_config())  # same keys, same order
    cls = type(ours)
    assert cls.from_config(config) == ours
    assert hash(cls.from_config(config)) == hash(ours)


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES, ids=IDS)
@pytest.mark.parametrize("legacy", [False, True])
def test_serialize_round_trip_through_json(name, args, kwargs, legacy):
    ours = build(S, name, args, kwargs)
    config = S.serialize(ours, use_legacy_format=legacy)
    if legacy:
        assert set(config) == {"class_name", "config"}
    else:
        assert config == KS.serialize(build(KS, name, args, kwargs))
    assert S.deserialize(json.loads(json.dumps(config))) == ours


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES, ids=IDS)
def test_deserialize_keras_output(name, args, kwargs):
    theirs = build(KS, name, args, kwargs)
    for config in (KS.serialize(theirs), json.loads(json.dumps(KS.serialize(theirs)))):
        ours = S.deserialize(config)
        assert ours == build(S, name, args, kwargs)
        assert_close(ours(STEPS), keras_case(CASES.index((name, args, kwargs))))


def test_legacy_config_with_name_none():
    config = {
        "class_name": "ExponentialDecay",
        "config": {
            "initial_learning_rate": 0.1,
            "decay_steps": 10,
            "decay_rate": 0.5,
            "staircase": False,
            "name": None,
        },
    }
    s = S.deserialize(config)
    assert s == S.ExponentialDecay(0.1, 10, 0.5)
    assert s.name == "ExponentialDecay"
    assert float(s(10)) == pytest.approx(0.05)


def test_defaults_match_keras():
    for name in REFERENCE:
        ours = inspect_defaults(getattr(S, name))
        theirs = inspect_defaults(getattr(KS, name))
        assert ours == theirs, name


def inspect_defaults(cls):
    return [(p.name, p.default) for p in inspect.signature(cls).parameters.values()]


def test_optx_schedules_through_serialize():
    s = optx.schedules.linear_schedule(1.0, 0.0, transition_steps=4)
    assert S.deserialize(s.get_config()) == s
    for legacy in (False, True):
        config = json.loads(json.dumps(S.serialize(s, use_legacy_format=legacy)))
        assert S.deserialize(config) == s
    assert S.serialize(s)["module"] == "optx.schedules"
    # and the Keras-style classes through optx.schedules.from_config
    k = S.CosineDecay(0.1, 100, alpha=0.1)
    assert optx.schedules.from_config(S.serialize(k)) == k


@dataclasses.dataclass(frozen=True)
class Halving(S.LearningRateSchedule):
    initial_learning_rate: float

    def value(self, count):
        return self.initial_learning_rate / 2**count


class KerasStyle(S.LearningRateSchedule):
    def __init__(self, lr):
        self.lr = lr

    def __call__(self, step):
        return self.lr / (step + 1)

    def get_config(self):
        return {"lr": self.lr}


@dataclasses.dataclass(frozen=True)
class Halving2(S.ExponentialDecay):
    pass


def test_custom_objects():
    h = Halving(1.0)
    assert float(h(3)) == 0.125
    config = S.serialize(h)
    assert config["class_name"] == "Halving" and config["registered_name"] == "Halving"
    assert S.deserialize(json.loads(json.dumps(config)), {"Halving": Halving}) == h
    k = S.deserialize(S.serialize(KerasStyle(0.5)), custom_objects={"KerasStyle": KerasStyle})
    assert isinstance(k, KerasStyle) and k(1) == 0.25
    # a custom class overrides a built-in of the same name
    config = S.serialize(S.ExponentialDecay(0.1, 10, 0.5), use_legacy_format=True)
    assert S.deserialize(config, {"ExponentialDecay": Halving2}).initial_learning_rate == 0.1


def test_repr_and_use_in_an_optimizer():
    s = S.ExponentialDecay(0.1, 1, 0.5)
    assert repr(s) == (
        "ExponentialDecay(initial_learning_rate=0.1, decay_steps=1, decay_rate=0.5, "
        "staircase=False, name='ExponentialDecay')"
    )
    assert repr(Halving(1.0)) == "Halving(initial_learning_rate=1.0)"
    tx = optx.sgd(s)
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    for want in (-0.1, -0.05, -0.025):  # the optimizer reads step 0, 1, 2
        updates, state = tx.update({"w": jnp.ones(2)}, state, params)
        np.testing.assert_allclose(updates["w"], want, rtol=1e-6)


# (e) transformations and extreme steps.


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES, ids=IDS)
def test_jit_vmap_and_large_steps(name, args, kwargs):
    s = build(S, name, args, kwargs)
    steps = jnp.asarray(STEPS, jnp.int32)
    eager = np.asarray(s(steps))
    np.testing.assert_allclose(jax.vmap(s)(steps), eager, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(jax.jit(jax.vmap(s))(steps), eager, rtol=RTOL, atol=ATOL)
    assert np.isfinite(float(s(2**31 - 1)))
    # A schedule is a static argument; an equal one reuses the compiled function.
    big = jnp.asarray([2**31 - 1, 2**31 - 2, 2**30, 0], jnp.int32)
    with count_compiles("call_schedule") as compiled:
        first = np.asarray(call_schedule(s, big))
        again = np.asarray(call_schedule(build(S, name, args, kwargs), big))
    assert len(compiled) == 1
    assert np.isfinite(first).all()
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(first[3], eager[0], rtol=RTOL)


@functools.partial(jax.jit, static_argnums=0)
def call_schedule(schedule, count):
    return schedule(count)


# (f) errors, one message each.


class KerasStyleWithoutConfig(S.LearningRateSchedule):
    pass


ERRORS = [
    (
        lambda: S.ExponentialDecay(0.1, 0, 0.5),
        ValueError,
        "`ExponentialDecay` needs decay_steps > 0. Received: decay_steps=0.",
    ),
    (
        lambda: S.ExponentialDecay(-0.1, 10, 0.5),
        ValueError,
        "`ExponentialDecay` needs initial_learning_rate >= 0. Received: "
        "initial_learning_rate=-0.1.",
    ),
    (
        lambda: S.ExponentialDecay(0.1, 10, -0.5),
        ValueError,
        "`ExponentialDecay` needs decay_rate >= 0. Received: decay_rate=-0.5.",
    ),
    (
        lambda: S.ExponentialDecay(0.1, "10", 0.5),
        TypeError,
        "`ExponentialDecay` needs decay_steps to be a real number. Received: decay_steps='10'.",
    ),
    (
        lambda: S.ExponentialDecay(math.nan, 10, 0.5),
        ValueError,
        "`ExponentialDecay` needs initial_learning_rate to be finite. "
        "Received: initial_learning_rate=nan.",
    ),
    (
        lambda: S.ExponentialDecay(0.1, 10, 0.5, staircase=1),
        TypeError,
        "`ExponentialDecay` needs staircase to be a bool. Received: staircase=1.",
    ),
    (
        lambda: S.ExponentialDecay(0.1, 10, 0.5, name=3),
        TypeError,
        "`ExponentialDecay` needs name to be a string. Received: name=3.",
    ),
    (
        lambda: S.PiecewiseConstantDecay([10, 20], [1.0, 0.5]),
        ValueError,
        "`PiecewiseConstantDecay` needs len(boundaries) == len(values) - 1. Received: "
        "boundaries=[10, 20] (length 2) and values=[1.0, 0.5] (length 2).",
    ),
    (
        lambda: S.PiecewiseConstantDecay([20, 10], [1.0, 0.5, 0.1]),
        ValueError,
        "`PiecewiseConstantDecay` needs strictly increasing boundaries. "
        "Received: boundaries=[20, 10].",
    ),
    (
        lambda: S.PiecewiseConstantDecay([10, 10], [1.0, 0.5, 0.1]),
        ValueError,
        "`PiecewiseConstantDecay` needs strictly increasing boundaries. "
        "Received: boundaries=[10, 10].",
    ),
    (
        lambda: S.PiecewiseConstantDecay([-1], [1.0, 0.5]),
        ValueError,
        "`PiecewiseConstantDecay` needs boundaries[0] >= 0. Received: boundaries[0]=-1.",
    ),
    (
        lambda: S.PiecewiseConstantDecay([5], [1.0, "a"]),
        TypeError,
        "`PiecewiseConstantDecay` needs values[1] to be a real number. Received: values[1]='a'.",
    ),
    (
        lambda: S.PiecewiseConstantDecay([5], [1.0, -0.5]),
        ValueError,
        "`PiecewiseConstantDecay` needs values[1] >= 0. Received: values[1]=-0.5.",
    ),
    (
        lambda: S.PiecewiseConstantDecay(5, [1.0]),
        TypeError,
        "`PiecewiseConstantDecay` needs boundaries to be a list of numbers. "
        "Received: boundaries=5.",
    ),
    (
        lambda: S.PiecewiseConstantDecay([], "1"),
        TypeError,
        "`PiecewiseConstantDecay` needs values to be a list of numbers. Received: values='1'.",
    ),
    (
        lambda: S.PolynomialDecay(0.1, -1),
        ValueError,
        "`PolynomialDecay` needs decay_steps > 0. Received: decay_steps=-1.",
    ),
    (
        lambda: S.PolynomialDecay(0.1, 10, -0.1),
        ValueError,
        "`PolynomialDecay` needs end_learning_rate >= 0. Received: end_learning_rate=-0.1.",
    ),
    (
        lambda: S.PolynomialDecay(0.1, 10, power=-1.0),
        ValueError,
        "`PolynomialDecay` needs power >= 0. Received: power=-1.0.",
    ),
    (
        lambda: S.PolynomialDecay(0.1, 10, cycle="yes"),
        TypeError,
        "`PolynomialDecay` needs cycle to be a bool. Received: cycle='yes'.",
    ),
    (
        lambda: S.InverseTimeDecay(0.1, 0.0, 0.5),
        ValueError,
        "`InverseTimeDecay` needs decay_steps > 0. Received: decay_steps=0.0.",
    ),
    (
        lambda: S.InverseTimeDecay(0.1, 10, -1.0),
        ValueError,
        "`InverseTimeDecay` needs decay_rate >= 0. Received: decay_rate=-1.0.",
    ),
    (
        lambda: S.CosineDecay(0.1, 0),
        ValueError,
        "`CosineDecay` needs decay_steps > 0. Received: decay_steps=0.",
    ),
    (
        lambda: S.CosineDecay(0.1, 10, alpha=-0.1),
        ValueError,
        "`CosineDecay` needs alpha >= 0. Received: alpha=-0.1.",
    ),
    (
        lambda: S.CosineDecay(0.1, 10, warmup_target=-1.0),
        ValueError,
        "`CosineDecay` needs warmup_target >= 0. Received: warmup_target=-1.0.",
    ),
    (
        lambda: S.CosineDecay(0.1, 10, warmup_target=1.0, warmup_steps=-5),
        ValueError,
        "`CosineDecay` needs warmup_steps >= 0. Received: warmup_steps=-5.",
    ),
    (
        lambda: S.CosineDecay(0.1, 10, warmup_steps=None),
        TypeError,
        "`CosineDecay` needs warmup_steps to be a real number. Received: warmup_steps=None.",
    ),
    (
        lambda: S.CosineDecayRestarts(0.1, 0),
        ValueError,
        "`CosineDecayRestarts` needs first_decay_steps > 0. Received: first_decay_steps=0.",
    ),
    (
        lambda: S.CosineDecayRestarts(0.1, 10, t_mul=0.0),
        ValueError,
        "`CosineDecayRestarts` needs t_mul > 0. Received: t_mul=0.0.",
    ),
    (
        lambda: S.CosineDecayRestarts(0.1, 10, m_mul=-1.0),
        ValueError,
        "`CosineDecayRestarts` needs m_mul >= 0. Received: m_mul=-1.0.",
    ),
    (
        lambda: S.CosineDecayRestarts(0.1, 10, alpha=-1.0),
        ValueError,
        "`CosineDecayRestarts` needs alpha >= 0. Received: alpha=-1.0.",
    ),
    (
        lambda: S.serialize(lambda step: 0.1),
        TypeError,
        "`serialize` needs an optx schedule (a LearningRateSchedule or an optx.schedules "
        "schedule). Received: schedule=",
    ),
    (
        lambda: S.deserialize("ExponentialDecay"),
        TypeError,
        "`deserialize` needs a dict such as `serialize` returns. "
        "Received: config='ExponentialDecay'.",
    ),
    (
        lambda: S.deserialize({"class_name": "CosineDecay"}),
        ValueError,
        "`deserialize` needs the keys 'class_name' and 'config'. Missing: ['config']. "
        "Received: config={'class_name': 'CosineDecay'}.",
    ),
    (
        lambda: S.deserialize({"class_name": 3, "config": {}}),
        TypeError,
        "`deserialize` needs class_name to be a string. Received: class_name=3.",
    ),
    (
        lambda: S.deserialize({"class_name": "CosineDecay", "config": [0.1, 10]}),
        TypeError,
        "`deserialize` needs 'config' to be a dict of arguments. Received: config=[0.1, 10].",
    ),
    (
        lambda: S.deserialize({"class_name": "CosineDecay", "config": {}}, custom_objects=[1]),
        TypeError,
        "`deserialize` needs custom_objects to be a dict of classes by name. "
        "Received: custom_objects=[1].",
    ),
    (
        lambda: S.deserialize({"class_name": "F", "config": {}}, custom_objects={"F": abs}),
        TypeError,
        "`deserialize` needs custom_objects['F'] to be a class with `from_config`. "
        "Received: <built-in function abs>.",
    ),
    (
        lambda: S.deserialize(
            {"class_name": "CosineDecay", "config": {"initial_learning_rate": 0.1, "steps": 3}}
        ),
        TypeError,
        "`deserialize` got arguments that CosineDecay does not take: ['steps']. It takes: "
        "['initial_learning_rate', 'decay_steps', 'alpha', 'name', 'warmup_target', "
        "'warmup_steps'].",
    ),
    (
        lambda: S.deserialize({"class_name": "CosineDecay", "config": {"alpha": 0.1}}),
        TypeError,
        "`deserialize` needs the arguments ['initial_learning_rate', 'decay_steps'] of "
        "CosineDecay, which the config lacks. Received: config={'alpha': 0.1}.",
    ),
    (
        lambda: KerasStyleWithoutConfig()(0),
        NotImplementedError,
        "Learning-rate schedule 'KerasStyleWithoutConfig' must override `__call__(self, step)` "
        "or `value(self, count)`.",
    ),
    (
        lambda: KerasStyleWithoutConfig().get_config(),
        NotImplementedError,
        "Learning-rate schedule 'KerasStyleWithoutConfig' must override `get_config()` to be "
        "serialisable.",
    ),
]


@pytest.mark.parametrize(("make", "error", "message"), ERRORS)
def test_error_messages(make, error, message):
    with pytest.raises(error, match=re.escape(message)):
        make()


def test_unknown_class_name():
    known = sorted(registered())
    message = (
        f"`deserialize` does not know the schedule class_name='LinearCosineDecay'. Known: "
        f"{known}. Pass custom_objects={{'LinearCosineDecay': YourClass}} for a class of your "
        f"own."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        S.deserialize({"class_name": "LinearCosineDecay", "config": {}})
    assert {"ExponentialDecay", "CosineDecayRestarts", "linear_schedule"} <= set(known)


def test_keras_raises_the_same_types():
    # Where Keras validates, it raises what optx raises.
    for make in (
        lambda m: m.ExponentialDecay(0.1, 0, 0.5),
        lambda m: m.PolynomialDecay(0.1, 0),
        lambda m: m.InverseTimeDecay(0.1, 0, 0.5),
        lambda m: m.CosineDecay(0.1, 0),
        lambda m: m.CosineDecayRestarts(0.1, 0),
        lambda m: m.PiecewiseConstantDecay([1, 2], [1.0, 0.5]),
    ):
        for module in (S, KS):
            with pytest.raises(ValueError):
                make(module)


def test_keras_schedule_nested_in_an_optx_schedule_round_trips_through_json():
    from optx.optimizers.schedules import CosineDecay

    joined = optx.schedules.join_schedules(
        [CosineDecay(1.0, 10), optx.schedules.constant_schedule(0.1)], [10]
    )
    config = json.loads(json.dumps(joined.get_config()))
    assert config["config"]["schedules"][0]["class_name"] == "CosineDecay"
    assert optx.schedules.from_config(config) == joined
