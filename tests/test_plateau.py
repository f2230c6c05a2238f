"""`reduce_on_plateau`: parity with optax.contrib, a Python reference, errors, no recompiles."""

import math
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib
import pytest
from helpers import count_compiles

import optx

STEPS = 400
PARAMS = {"w": jnp.ones(3), "b": jnp.ones(())}

# Configurations optax accepts too (it rejects rtol == atol == 0).
CONFIGS = [
    {},
    {"factor": 0.5, "patience": 5},
    {"factor": 0.5, "patience": 3, "cooldown": 4, "min_scale": 0.02},
    {"factor": 0.3, "patience": 2, "accumulation_size": 5, "rtol": 0.0, "atol": 0.01},
    {"factor": 0.7, "patience": 4, "rtol": 0.02, "atol": 0.001, "cooldown": 2},
]


def losses(seed=0, steps=STEPS):
    """A noisy loss that falls, plateaus, falls again and flattens out (float32)."""
    rng = np.random.RandomState(seed)
    t = np.arange(steps)
    trend = np.where(t < 100, 2.0 - t / 100, 1.0) - np.where(t > 200, (t - 200) / 400, 0.0)
    trend = np.maximum(trend, 0.6)
    return (trend + 0.03 * rng.standard_normal(steps)).astype(np.float32)


def scan_run(tx, values, params=PARAMS):
    """Every step's updates and state, under one jitted `lax.scan`."""
    grads = jax.tree.map(jnp.ones_like, params)

    def step(state, value):
        updates, state = tx.update(grads, state, params, value=value)
        return state, (updates, state)

    _, (updates, states) = jax.jit(lambda s, v: jax.lax.scan(step, s, v))(
        tx.init(params), jnp.asarray(values)
    )
    return updates, states


def reference(values, factor=0.1, patience=10, rtol=1e-4, atol=0.0, cooldown=0,
              accumulation_size=1, min_scale=0.0):  # fmt: skip
    """The documented rule, in Python floats: the scale after each step."""
    scale, best, plateau, cool, count, total = 1.0, math.inf, 0, 0, 0, 0.0
    scales = []
    for v in values:
        count, total = count + 1, total + float(v)
        if count == accumulation_size:
            mean = total / count
            count, total = 0, 0.0
            improved = mean < (1 - rtol) * best - atol
            if improved:
                best, plateau = mean, 0
            else:
                plateau += 1
            if cool > 0:
                cool, plateau = cool - 1, 0
            else:
                if plateau == patience:
                    scale, plateau, cool = scale * factor, 0, cooldown
                scale = max(scale, min_scale)
        scales.append(scale)
    return np.asarray(scales)


# ---------------------------------------------------------------------------------------
# Numerics.


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_parity_with_optax(config):
    values = losses()
    updates, states = scan_run(optx.reduce_on_plateau(**config), values)
    expected_updates, expected = scan_run(optax.contrib.reduce_on_plateau(**config), values)
    # The sequence of scales is the point: it must reduce, and more than once.
    assert len(np.unique(np.asarray(states.scale))) >= 3, np.unique(states.scale)
    chex.assert_trees_all_equal(updates, expected_updates)
    for field in expected._fields:
        np.testing.assert_array_equal(getattr(states, field), getattr(expected, field), field)


STRICT = {"rtol": 0.0, "atol": 0.0, "patience": 3, "factor": 0.5}  # optax rejects this one


@pytest.mark.parametrize("config", [*CONFIGS, STRICT], ids=str)
def test_matches_python_reference(config):
    values = losses(seed=1)
    _, states = scan_run(optx.reduce_on_plateau(**config), values)
    np.testing.assert_allclose(states.scale, reference(values, **config), rtol=1e-6)


def test_scale_floors_at_min_scale():
    tx = optx.reduce_on_plateau(factor=0.5, patience=1, min_scale=0.1)
    _, states = scan_run(tx, np.ones(8, np.float32))
    np.testing.assert_allclose(states.scale, [1, 0.5, 0.25, 0.125, 0.1, 0.1, 0.1, 0.1])


def test_cooldown_and_accumulation():
    tx = optx.reduce_on_plateau(factor=0.5, patience=1, cooldown=2, accumulation_size=2)
    updates, states = scan_run(tx, np.ones(12, np.float32))
    # A check every second step: improve, reduce, cool, cool, reduce, cool.
    np.testing.assert_allclose(
        states.scale, [1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25]
    )
    np.testing.assert_array_equal(states.count, np.tile([1, 0], 6))
    np.testing.assert_array_equal(states.cooldown_count, [0, 0, 0, 2, 2, 1, 1, 0, 0, 2, 2, 1])
    np.testing.assert_allclose(updates["w"][:, 0], states.scale)


def test_updates_keep_dtypes_and_state_is_float32():
    params = {"w": jnp.ones(3, jnp.bfloat16), "b": jnp.ones((), jnp.float32)}
    tx = optx.reduce_on_plateau(factor=0.5, patience=1)
    updates, states = scan_run(tx, np.ones(4, np.float32), params)
    assert updates["w"].dtype == jnp.bfloat16 and updates["b"].dtype == jnp.float32
    for field in ("scale", "best_value", "avg_value"):
        assert getattr(states, field).dtype == jnp.float32, field
    for field in ("plateau_count", "cooldown_count", "count"):
        assert getattr(states, field).dtype == jnp.int32, field
    np.testing.assert_allclose(updates["w"][:, 0].astype(np.float32), [1, 0.5, 0.25, 0.125])


def test_hyperparams_and_state_fields():
    tx = optx.reduce_on_plateau()
    state = tx.init(None)
    assert list(state._fields) == [
        "scale",
        "best_value",
        "plateau_count",
        "cooldown_count",
        "count",
        "avg_value",
        "hyperparams",
    ]
    got = {k: float(v) for k, v in optx.get_hyperparams(state).items()}
    assert got == pytest.approx({"atol": 0.0, "factor": 0.1, "min_scale": 0.0, "rtol": 1e-4})
    assert repr(tx) == "reduce_on_plateau(factor=0.1, rtol=0.0001, atol=0.0, min_scale=0.0)"
    assert tx == optx.reduce_on_plateau() and tx != optx.reduce_on_plateau(patience=3)


def test_set_hyperparams_inside_jit_does_not_recompile():
    tx = optx.reduce_on_plateau(factor=0.5, patience=1)
    grads = jax.tree.map(jnp.ones_like, PARAMS)

    def train_step(state, value):
        return tx.update(grads, state, PARAMS, value=value)

    step = jax.jit(train_step)

    def scales(state, values):
        out = []
        for v in values:
            _, state = step(state, v)
            out.append(float(state.scale))
        return out

    flat = [1.0, 1.0, 1.0, 1.0]
    with count_compiles("train_step") as compiled:
        base = scales(tx.init(PARAMS), flat)
        fast = scales(optx.set_hyperparams(tx.init(PARAMS), factor=0.1), flat)
        floor = scales(optx.set_hyperparams(tx.init(PARAMS), min_scale=0.3), flat)
        # Falls of 3% are improvements for rtol=1e-4; not for rtol=0.1 nor atol=0.1 (the
        # best value stays at 1 without an improvement, and 0.91 is not below 0.9).
        falling = [1.0, 0.97, 0.94, 0.91]
        strict = scales(optx.set_hyperparams(tx.init(PARAMS), rtol=0.1), falling)
        absolute = scales(optx.set_hyperparams(tx.init(PARAMS), atol=0.1), falling)
        loose = scales(tx.init(PARAMS), falling)
    assert len(compiled) == 1
    assert base == [1.0, 0.5, 0.25, 0.125]
    assert fast == pytest.approx([1.0, 0.1, 0.01, 0.001])
    assert floor == pytest.approx([1.0, 0.5, 0.3, 0.3])
    assert loose == [1.0, 1.0, 1.0, 1.0]
    assert strict == absolute == [1.0, 0.5, 0.25, 0.125]


def test_vmap_sweeps_factor():
    tx = optx.reduce_on_plateau(patience=1)
    factors = jnp.asarray([0.1, 0.5, 0.9])

    def final_scale(factor):
        state = optx.set_hyperparams(tx.init(PARAMS), factor=factor)
        for _ in range(3):
            _, state = tx.update(PARAMS, state, value=1.0)
        return state.scale

    np.testing.assert_allclose(jax.jit(jax.vmap(final_scale))(factors), factors**2, rtol=1e-6)


def test_value_reaches_it_through_chains():
    values = losses()[:50]
    tx = optx.reduce_on_plateau(factor=0.5, patience=2)
    alone, _ = scan_run(tx, values)
    in_optx, _ = scan_run(optx.chain(optx.scale(-1.0), tx), values)
    chex.assert_trees_all_close(in_optx, jax.tree.map(lambda u: -u, alone))
    # optax.chain passes extra arguments only to its GradientTransformationExtraArgs.
    wrapped = optax.GradientTransformationExtraArgs(tx.init, tx.update)
    in_optax, _ = scan_run(optax.chain(optax.scale(-1.0), wrapped), values)
    chex.assert_trees_all_close(in_optax, jax.tree.map(lambda u: -u, alone))


# ---------------------------------------------------------------------------------------
# Errors.

API = "reduce_on_plateau"
MISSING = (
    f"`{API}` needs the monitored value (e.g. the loss) as `update(updates, state, params, "
    f"value=loss)`. Received: no value (extra arguments: {{}}). `optx.chain` passes it on; "
    f"inside `optax.chain`, which drops extra arguments of other classes, wrap this transform "
    f"as `optax.GradientTransformationExtraArgs(tx.init, tx.update)`."
)


def test_missing_value():
    tx = optx.reduce_on_plateau()
    state = tx.init(PARAMS)
    with pytest.raises(TypeError, match=re.escape(MISSING.format("none"))):
        tx.update(PARAMS, state, PARAMS)
    with pytest.raises(TypeError, match=re.escape(MISSING.format("['loss']"))):
        tx.update(PARAMS, state, PARAMS, loss=1.0)
    in_optax = optax.chain(tx)
    with pytest.raises(TypeError, match=re.escape(MISSING.format("none"))):
        in_optax.update(PARAMS, in_optax.init(PARAMS), value=1.0)


def test_non_scalar_value():
    tx = optx.reduce_on_plateau()
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"`{API}` needs value to be a scalar (e.g. the mean loss). "
            f"Received: value of shape (2,)."
        ),
    ):
        tx.update(PARAMS, tx.init(PARAMS), value=jnp.ones(2))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"factor": 1.0}, ValueError, f"`{API}` needs factor in (0, 1). Received: factor=1.0."),
        ({"factor": 0.0}, ValueError, f"`{API}` needs factor in (0, 1). Received: factor=0.0."),
        (
            {"factor": "0.1"},
            TypeError,
            f"`{API}` needs factor to be a real number or a schedule (a function of the step "
            "count). Received: factor='0.1' of type str.",
        ),
        ({"rtol": 1.5}, ValueError, f"`{API}` needs rtol in [0, 1]. Received: rtol=1.5."),
        (
            {"atol": -0.1},
            ValueError,
            f"`{API}` needs atol finite and >= 0. Received: atol=-0.1.",
        ),
        (
            {"min_scale": -1.0},
            ValueError,
            f"`{API}` needs min_scale finite and >= 0. Received: min_scale=-1.0.",
        ),
        (
            {"min_scale": float("nan")},
            ValueError,
            f"`{API}` needs min_scale finite and >= 0. Received: min_scale=nan.",
        ),
        (
            {"patience": 0},
            ValueError,
            f"`{API}` needs patience to be an int >= 1. Received: patience=0.",
        ),
        (
            {"patience": 2.0},
            ValueError,
            f"`{API}` needs patience to be an int >= 1. Received: patience=2.0.",
        ),
        (
            {"cooldown": -1},
            ValueError,
            f"`{API}` needs cooldown to be an int >= 0. Received: cooldown=-1.",
        ),
        (
            {"accumulation_size": 0},
            ValueError,
            f"`{API}` needs accumulation_size to be an int >= 1. Received: accumulation_size=0.",
        ),
    ],
)
def test_argument_errors(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        optx.reduce_on_plateau(**kwargs)


def test_set_hyperparams_checks_ranges():
    state = optx.reduce_on_plateau().init(PARAMS)
    with pytest.raises(
        ValueError, match=re.escape("`set_hyperparams` needs rtol in [0, 1]. Received: rtol=2.0.")
    ):
        optx.set_hyperparams(state, rtol=2.0)


def test_set_hyperparams_checks_factor_with_the_transform_rule():
    # `factor` has no global rule; the transform's own range applies (Transform.ranges).
    state = optx.reduce_on_plateau().init(PARAMS)
    with pytest.raises(
        ValueError,
        match=re.escape("`set_hyperparams` needs factor in (0, 1). Received: factor=1.5."),
    ):
        optx.set_hyperparams(state, factor=1.5)
