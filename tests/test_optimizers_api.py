"""The stateful wrapper API of `optx.optimizers`: state, hyperparameters, I/O, configs.

Numerics of each Keras class against Keras are in ``test_optimizers_keras.py``; the error
messages are in ``test_optimizers_errors.py``. Here: the generic `Optimizer` against the
functional loop, the flat ``variables`` view, setting the learning rate without
recompiling, save/load and config round trips (the next step is bit-identical),
``stateless_apply``, ``apply_gradients`` with variables (optx's and Flax's),
``minimize``, the EMA weights, loss scaling, weight-decay exclusions, `MultiOptimizer`
and `LossScaleOptimizer` (both also against Keras), serialization, and the displays.
"""

import json
import os
import re

os.environ["KERAS_BACKEND"] = "jax"  # before keras is imported

import jax
import jax.numpy as jnp
import keras
import numpy as np
import optax
import pytest
from flax import nnx
from helpers import assert_close, count_compiles
from keras_reference import run_keras, run_optx

import optx

OX = optx.optimizers
K = keras.optimizers
HAS_KERAS_MULTI = hasattr(K, "MultiOptimizer")

PARAMS = {
    "dense": {
        "bias": jnp.array([0.5, -1.0], jnp.float32),
        "kernel": jnp.array([[1.0, -2.0], [0.25, 3.0], [-0.5, 1.5]], jnp.float32),
    }
}
PATHS = ["dense/bias", "dense/kernel"]


def grads_seq(n, seed=0, params=PARAMS):
    rng = np.random.default_rng(seed)
    return [
        jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), p.dtype), params)
        for _ in range(n)
    ]


def run(opt, grads, params=PARAMS):
    out = []
    for g in grads:
        params = opt.apply(g, params)
        out.append(params)
    return out


def assert_equal(actual, expected):
    jax.tree.map(np.testing.assert_array_equal, actual, expected)


def unique_params(n):
    """Parameters of shapes no other test uses: their step is compiled afresh (the positive
    control of the compile counts; XLA reuses a compilation of the same program)."""
    return {
        "dense": {
            "bias": jnp.linspace(-1.0, 1.0, n, dtype=jnp.float32),
            "kernel": jnp.linspace(-2.0, 2.0, 3 * n, dtype=jnp.float32).reshape(3, n),
        }
    }


def functional(tx, grads, params=PARAMS):
    """The functional loop: ``update`` and `optx.apply_updates` under one jit per step."""

    @jax.jit
    def step(params, state, g):
        updates, state = tx.update(g, state, params)
        return optx.apply_updates(params, updates), state

    state, out = tx.init(params), []
    for g in grads:
        params, state = step(params, state, g)
        out.append(params)
    return out, state


# ---------------------------------------------------------------------------------------
# The generic wrapper


@pytest.mark.parametrize("make", [lambda: optx.adam(0.1), lambda: optax.adam(0.1)])
def test_generic_optimizer_equals_the_functional_loop(make):
    grads = grads_seq(3)
    opt = OX.Optimizer(make(), name="adam")
    assert not opt.built and opt.variables == {}
    got = run(opt, grads)
    want, state = functional(make(), grads)
    assert_equal(got, want)
    assert opt.built and int(opt.iterations) == 3
    assert opt.iterations.dtype == jnp.int32
    variables = opt.variables
    assert next(iter(variables)) == "iterations" and int(variables["iterations"]) == 3
    for slot in ("mu", "nu"):
        for path in PATHS:
            assert f"adam/{slot}/{path}" in variables

    # One key per state leaf (nothing tied in a generic wrapper), holding the same values.
    def key(a):
        a = np.asarray(a)
        return a.shape, str(a.dtype), a.tobytes()

    assert sorted(map(key, jax.tree.leaves(state))) == sorted(
        map(key, list(variables.values())[1:])
    )
    np.testing.assert_array_equal(
        variables["adam/mu/dense/kernel"], opt.get_slot("dense/kernel", "mu")
    )


def test_generic_optimizer_variables_keys_hold_hyperparameters():
    opt = OX.Optimizer(optx.adam(0.1), name="adam")
    opt.apply(grads_seq(1)[0], PARAMS)
    keys = list(opt.variables)
    assert keys[0] == "iterations"
    assert {"learning_rate", "b1", "b2", "eps"} <= set(keys)
    assert not any("one_minus" in k for k in keys)
    # Hyperparameters come before the slots.
    assert keys.index("learning_rate") < keys.index("adam/mu/dense/bias")
    np.testing.assert_allclose(opt.variables["learning_rate"], 0.1)
    np.testing.assert_allclose(opt.learning_rate, 0.1)
    # The default name is "optimizer".
    other = OX.Optimizer(optx.sgd(0.1, momentum=0.9))
    other.apply(grads_seq(1)[0], PARAMS)
    assert "optimizer/trace/dense/bias" in other.variables


# ---------------------------------------------------------------------------------------
# Setting the learning rate


def test_generic_learning_rate_setter_changes_the_step_without_compiling():
    params = unique_params(5)
    grads = grads_seq(4, params=params)
    opt = OX.Optimizer(optx.adam(0.1), name="adam")
    with count_compiles("_step") as compiled:
        p = opt.apply(grads[0], params)  # the one compilation
        p = opt.apply(grads[1], p)
        opt.learning_rate = 0.01
        p = opt.apply(grads[2], p)
        opt.lr = 0.001
        p = opt.apply(grads[3], p)
    assert compiled == ["_step"]
    np.testing.assert_allclose(opt.lr, 0.001)
    # The functional loop with the same hyperparameter changes.
    tx = optx.adam(0.1)
    step = jax.jit(lambda s, g, q: tx.update(g, s, q))
    q, state = params, tx.init(params)
    for g, lr in zip(grads, (None, None, 0.01, 0.001), strict=True):
        if lr is not None:
            state = optx.set_hyperparams(state, learning_rate=lr)
        u, state = step(state, g, q)
        q = optx.apply_updates(q, u)
    assert_close("lr set", p, q, rtol=1e-6)


def test_keras_learning_rate_is_tied_with_weight_decay():
    params = unique_params(6)
    grads = grads_seq(2, params=params)
    a = OX.AdamW(learning_rate=0.1, weight_decay=0.5)
    b = OX.AdamW(learning_rate=0.1, weight_decay=0.5)
    with count_compiles("_step") as compiled:
        p1 = a.apply(grads[0], params)
        b.apply(grads[0], params)
        assert [k for k in a.variables if k.endswith("learning_rate")] == ["learning_rate"]
        assert compiled
        before = len(compiled)
        a.learning_rate = 0.01
        pa = a.apply(grads[1], p1)
        pb = b.apply(grads[1], p1)
    assert len(compiled) == before
    np.testing.assert_allclose(a.learning_rate, 0.01)
    # The decay and the Adam step are both linear in the learning rate: one tenth of the
    # update (it would not be if only one of the two copies had changed).
    assert_close(
        "tied lr",
        jax.tree.map(jnp.subtract, pa, p1),
        jax.tree.map(lambda x, y: 0.1 * (x - y), pb, p1),
        rtol=1e-5,
    )
    # Both copies in the state hold the new value.
    held = [v for k, v in optx.get_hyperparams(a._state).items() if k.endswith("learning_rate")]
    assert len(held) == 2
    np.testing.assert_allclose(held, 0.01)


def test_learning_rate_before_build_and_lr_alias_rebuilds():
    opt = OX.SGD(0.1)
    np.testing.assert_allclose(opt.learning_rate, 0.1)
    opt.lr = 0.5
    new = opt.apply({"w": jnp.ones(2)}, {"w": jnp.zeros(2)})
    np.testing.assert_allclose(new["w"], [-0.5, -0.5])
    np.testing.assert_allclose(opt.learning_rate, 0.5)


def test_learning_rate_of_a_schedule_is_its_value_now():
    sched = OX.schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5)
    opt = OX.Adam(sched)
    np.testing.assert_allclose(opt.learning_rate, 0.1, rtol=1e-6)
    run(opt, grads_seq(3))
    np.testing.assert_allclose(opt.learning_rate, float(sched(3)), rtol=1e-6)
    np.testing.assert_allclose(opt.learning_rate, 0.1 * 0.5**1.5, rtol=1e-6)


def test_setting_a_number_on_a_schedule_optimizer_is_a_type_error():
    opt = OX.SGD(OX.schedules.ExponentialDecay(0.1, 2, 0.5))
    with pytest.raises(TypeError, match="so a number cannot replace it"):
        opt.learning_rate = 0.1


def test_setting_a_schedule_after_build_keeps_the_slots():
    g1, g2, g3 = grads_seq(3)
    b1, b2, eps = 0.9, 0.999, 1e-7
    opt = OX.Adam(0.1)
    p = run(opt, [g1, g2])[-1]
    before = opt.variables
    sched = OX.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    opt.learning_rate = sched
    # The state holds the schedule's step count and scale beside the value in force.
    assert {"learning_rate/count", "learning_rate/scale"} <= set(opt.variables)
    assert int(opt.variables["learning_rate/count"]) == 2
    assert int(opt.iterations) == 2
    for path in PATHS:
        for slot in ("momentum", "velocity"):
            key = f"adam/{slot}/{path}"
            np.testing.assert_array_equal(opt.variables[key], before[key])
    np.testing.assert_allclose(opt.learning_rate, 0.025, rtol=1e-6)
    new = opt.apply(g3, p)

    # Keras's Adam at t = 3 with the schedule's value at iteration 2.
    def expected(path):
        m = np.asarray(before[f"adam/momentum/{path}"], np.float64)
        v = np.asarray(before[f"adam/velocity/{path}"], np.float64)
        g = np.asarray(_leaf(g3, path), np.float64)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        lr = 0.025 * np.sqrt(1 - b2**3) / (1 - b1**3)
        return np.asarray(_leaf(p, path), np.float64) - lr * m / (np.sqrt(v) + eps)

    for path in PATHS:
        assert_close(path, _leaf(new, path), expected(path), rtol=1e-5)


def _leaf(tree, path):
    for part in path.split("/"):
        tree = tree[part]
    return tree


# ---------------------------------------------------------------------------------------
# Saving and loading


def _roundtrip_optimizer(opt):
    config = json.loads(json.dumps(opt.get_config()))
    return type(opt).from_config(config)


def _multi():
    return OX.MultiOptimizer(
        {".*bias": OX.SGD(0.1, momentum=0.9, use_ema=True)},
        default_optimizer=OX.Adam(0.05, weight_decay=0.1),
    )


SAVE_CASES = {
    "adam_ema_wd_accumulation": lambda: OX.Adam(
        0.1, use_ema=True, weight_decay=0.1, gradient_accumulation_steps=2
    ),
    "multi": _multi,
    "loss_scale": lambda: OX.LossScaleOptimizer(
        OX.Adam(0.1), initial_scale=4.0, dynamic_growth_steps=2
    ),
}


@pytest.mark.parametrize("make", SAVE_CASES.values(), ids=SAVE_CASES.keys())
def test_save_then_load_into_a_fresh_optimizer_continues_bit_identically(make):
    grads = grads_seq(4)
    if "LossScale" in type(make()).__name__:
        grads[1] = jax.tree.map(lambda g: g.at[0].set(jnp.inf) if g.ndim == 1 else g, grads[1])
    opt = make()
    p = run(opt, grads[:3])[-1]
    store = {}
    opt.save_own_variables(store)
    assert list(store) == list(opt.variables)
    assert all(isinstance(v, np.ndarray) for v in store.values())
    fresh = _roundtrip_optimizer(opt)
    fresh.build(p)
    fresh.load_own_variables(store)
    assert int(fresh.iterations) == int(opt.iterations)
    want = opt.apply(grads[3], p)
    got = fresh.apply(grads[3], p)
    assert_equal(got, want)
    assert_equal(fresh.variables, opt.variables)


def test_get_weights_and_set_weights_round_trip():
    grads = grads_seq(3)
    opt = OX.Adam(0.1, amsgrad=True)
    p = run(opt, grads[:2])[-1]
    weights = opt.get_weights()
    assert [type(w) for w in weights] == [np.ndarray] * len(opt.variables)
    other = OX.Adam(0.1, amsgrad=True)
    other.build(p)
    other.set_weights(weights)
    assert_equal(other.apply(grads[2], p), opt.apply(grads[2], p))


def test_get_slot_is_the_adam_first_moment():
    g = grads_seq(1)[0]
    opt = OX.Adam(0.1)
    opt.apply(g, PARAMS)
    for path in PATHS:
        assert_close(path, opt.get_slot(path, "momentum"), 0.1 * np.asarray(_leaf(g, path)), 1e-6)
        assert_close(
            path, opt.get_slot(path, "velocity"), 1e-3 * np.asarray(_leaf(g, path)) ** 2, 1e-5
        )
    assert opt.get_slot("dense/bias", "momentum").shape == (2,)


@pytest.mark.parametrize(
    ("make", "slots"),
    [
        (lambda: OX.Adam(), ["momentum", "velocity"]),
        (lambda: OX.Adam(amsgrad=True), ["momentum", "velocity", "velocity_hat"]),
        (lambda: OX.SGD(momentum=0.9), ["momentum"]),
        (lambda: OX.SGD(), []),
        (lambda: OX.SGD(use_ema=True), ["average"]),
        (lambda: OX.SGD(gradient_accumulation_steps=2), ["gradient_accumulator"]),
        (
            # The accumulator follows the inner optimizer's slots (optax's `MultiStepsState`).
            lambda: OX.Adam(use_ema=True, gradient_accumulation_steps=3),
            ["average", "momentum", "velocity", "gradient_accumulator"],
        ),
    ],
)
def test_keras_slot_names(make, slots):
    opt = make()
    opt.build(PARAMS)
    assert opt.get_slot_names() == slots
    for slot in slots:
        for path in PATHS:
            assert f"{opt.name}/{slot}/{path}" in opt.variables
            assert opt.get_slot(path, slot).shape == _leaf(PARAMS, path).shape


# ---------------------------------------------------------------------------------------
# stateless_apply


def _copy(tree):
    return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)


def test_stateless_apply_equals_apply_and_compiles_once():
    params = unique_params(7)
    grads = grads_seq(4, params=params)
    ref = OX.Adam(0.1, weight_decay=0.1)
    want = run(ref, grads, params)
    opt = OX.Adam(0.1, weight_decay=0.1)
    opt.build(params)
    variables, p = opt.variables, params
    with count_compiles("_stateless") as compiled:
        for g, w in zip(grads, want, strict=True):
            p, variables = opt.stateless_apply(variables, g, _copy(p))
            assert_equal(p, w)
    assert len(compiled) == 1
    assert list(variables) == list(ref.variables)
    assert_equal(variables, ref.variables)
    # The optimizer's own state did not move.
    assert int(opt.iterations) == 0


def test_stateless_apply_on_opt_variables_leaves_the_optimizer_usable():
    grads = grads_seq(3)
    opt = OX.Adam(0.1)
    p = opt.apply(grads[0], PARAMS)
    before = {k: np.asarray(v) for k, v in opt.variables.items()}
    q, new_vars = opt.stateless_apply(opt.variables, grads[1], _copy(p))
    assert int(new_vars["iterations"]) == 2
    # Its own buffers were copied, not donated: still readable, unchanged, and usable.
    assert_equal({k: np.asarray(v) for k, v in opt.variables.items()}, before)
    r = opt.apply(grads[1], p)
    assert_equal(r, q)
    assert int(opt.iterations) == 2


def test_stateless_apply_without_jit_gives_the_same_numbers():
    grads = grads_seq(3)
    jitted, eager = OX.Adam(0.1, use_ema=True), OX.Adam(0.1, use_ema=True, jit_compile=False)
    assert eager.jit_compile is False and eager.get_config()["jit_compile"] is False
    out = {}
    for opt in (jitted, eager):
        opt.build(PARAMS)
        variables, p = opt.variables, PARAMS
        for g in grads:
            p, variables = opt.stateless_apply(variables, g, _copy(p))
        out[opt.jit_compile] = (p, variables)
    assert_close("params", out[False][0], out[True][0], rtol=1e-6)
    assert_close("variables", out[False][1], out[True][1], rtol=1e-6)
    assert_close("apply", run(eager, grads)[-1], out[True][0], rtol=1e-6)


# ---------------------------------------------------------------------------------------
# Variables: apply_gradients, finalize_variable_values


@pytest.mark.parametrize("named", [True, False])
def test_apply_gradients_with_variables(named):
    values = [np.array([1.0, 2.0], np.float32), np.array([[0.5]], np.float32)]
    names = ["w", "b"] if named else [None, None]
    variables = [OX.Variable(v, name=n) for v, n in zip(values, names, strict=True)]
    grads = [jnp.array([0.5, -1.0]), jnp.array([[2.0]])]
    opt = OX.SGD(0.1, momentum=0.9)
    it = opt.apply_gradients(zip(grads, variables, strict=True))
    assert int(it) == 1
    for var, v, g in zip(variables, values, grads, strict=True):
        assert_close("var", var.value, v - 0.1 * np.asarray(g), rtol=1e-6)
    expected_paths = ["w", "b"] if named else ["0", "1"]
    for path in expected_paths:
        assert f"sgd/momentum/{path}" in opt.variables
    it = opt.apply_gradients(zip(grads, variables, strict=True))
    assert int(it) == 2
    np.testing.assert_allclose(
        variables[0].numpy(), values[0] - 0.1 * 2.9 * np.asarray(grads[0]), rtol=1e-6
    )


def test_apply_gradients_updates_a_flax_nnx_model_in_place():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    vars_ = jax.tree.leaves(
        nnx.state(model, nnx.Param), is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    x = jnp.array([[1.0, -2.0], [0.5, 0.25]])

    def loss(m):
        return jnp.mean(m(x) ** 2)

    before = [np.asarray(v.get_value()) for v in vars_]
    opt = OX.SGD(0.1)
    for step in (1, 2):
        grads = nnx.grad(loss)(model)
        grad_leaves = jax.tree.leaves(grads)
        start = [np.asarray(v.get_value()) for v in vars_]
        it = opt.apply_gradients(zip(grad_leaves, vars_, strict=True))
        assert int(it) == step
        for v, s, g in zip(vars_, start, grad_leaves, strict=True):
            assert_close("nnx", v.get_value(), s - 0.1 * np.asarray(g), rtol=1e-6)
    # The model itself holds the new values.
    (i,) = [i for i, v in enumerate(vars_) if v is model.kernel]
    assert not np.array_equal(np.asarray(model.kernel.get_value()), before[i])
    assert int(opt.iterations) == 2


def test_finalize_variable_values_returns_the_moving_average():
    grads = grads_seq(3)
    opt = OX.SGD(0.1, use_ema=True, ema_momentum=0.5)
    p = run(opt, grads)[-1]
    ema = {path: opt.variables[f"sgd/average/{path}"] for path in PATHS}
    final = opt.finalize_variable_values(p)
    for path in PATHS:
        np.testing.assert_array_equal(_leaf(final, path), ema[path])
        assert not np.array_equal(_leaf(final, path), _leaf(p, path))
    # Variables are assigned in place.
    variables = [OX.Variable(np.ones(2, np.float32), "w")]
    opt = OX.SGD(0.1, use_ema=True, ema_momentum=0.5)
    opt.apply_gradients([(jnp.ones(2), variables[0])])
    opt.apply_gradients([(jnp.ones(2), variables[0])])
    average = np.asarray(opt.variables["sgd/average/w"])
    assert opt.finalize_variable_values(variables) is variables
    np.testing.assert_array_equal(variables[0].value, average)


def test_finalize_variable_values_without_ema_returns_the_params():
    opt = OX.Adam(0.1)
    p = opt.apply(grads_seq(1)[0], PARAMS)
    assert opt.finalize_variable_values(p) is p
    var = OX.Variable(np.ones(2, np.float32), "w")
    opt = OX.Adam(0.1)
    opt.apply_gradients([(jnp.ones(2), var)])
    value = np.asarray(var.value)
    opt.finalize_variable_values([var])
    np.testing.assert_array_equal(var.value, value)


# ---------------------------------------------------------------------------------------
# minimize and loss scaling


def _loss(params, x):
    return jnp.sum((params["dense"]["kernel"] @ params["dense"]["bias"] - x) ** 2)


def test_minimize_equals_apply_of_the_gradient():
    x = jnp.array([1.0, 0.0, -1.0])
    a, b = OX.Adam(0.1), OX.Adam(0.1)
    new, loss = a.minimize(_loss, PARAMS, x)
    np.testing.assert_array_equal(loss, _loss(PARAMS, x))
    assert_equal(new, b.apply(jax.grad(_loss)(PARAMS, x), PARAMS))


def test_minimize_with_loss_scale_factor_returns_the_unscaled_loss():
    x = jnp.array([1.0, 0.0, -1.0])
    scaled, plain = OX.Adam(0.1, loss_scale_factor=128.0), OX.Adam(0.1)
    p, q = PARAMS, PARAMS
    for _ in range(2):
        p, loss = scaled.minimize(_loss, p, x)
        q, plain_loss = plain.minimize(_loss, q, x)
        np.testing.assert_array_equal(loss, plain_loss)
    assert_close("scaled", p, q, rtol=1e-6)


def test_scale_loss():
    np.testing.assert_array_equal(OX.Adam(loss_scale_factor=4.0).scale_loss(2.5), 10.0)
    np.testing.assert_array_equal(OX.Adam().scale_loss(2.5), 2.5)
    np.testing.assert_array_equal(OX.Optimizer(optx.adam(0.1)).scale_loss(2.5), 2.5)
    built = OX.Adam(loss_scale_factor=4.0)
    built.build(PARAMS)
    np.testing.assert_array_equal(built.scale_loss(2.5), 10.0)
    lso = OX.LossScaleOptimizer(OX.SGD(1.0), initial_scale=8.0)
    np.testing.assert_array_equal(lso.scale_loss(2.0), 16.0)  # before build
    w = lso.apply({"w": jnp.array([jnp.inf])}, {"w": jnp.zeros(1)})
    np.testing.assert_array_equal(lso.scale_loss(2.0), 8.0)  # the current dynamic scale
    np.testing.assert_array_equal(w["w"], [0.0])


# ---------------------------------------------------------------------------------------
# exclude_from_weight_decay


def _decayed(opt, params=PARAMS):
    """Which leaves weight decay changed in one step of zero gradients."""
    new = opt.apply(jax.tree.map(jnp.zeros_like, params), params)
    return {path: not np.array_equal(_leaf(new, path), _leaf(params, path)) for path in PATHS}


def test_exclude_from_weight_decay_by_regex_on_the_full_path():
    for names, kept in (
        (["bias"], {"dense/bias": False, "dense/kernel": True}),
        (["dense/bias"], {"dense/bias": False, "dense/kernel": True}),
        (["^dense"], {"dense/bias": False, "dense/kernel": False}),
        (["^bias"], {"dense/bias": True, "dense/kernel": True}),
    ):
        opt = OX.SGD(0.1, weight_decay=0.5)
        opt.exclude_from_weight_decay(var_names=names)
        assert _decayed(opt) == kept, names
    opt = OX.SGD(0.1, weight_decay=0.5)
    new = opt.apply(jax.tree.map(jnp.zeros_like, PARAMS), PARAMS)
    assert_close("decay", new, jax.tree.map(lambda p: p * (1 - 0.05), PARAMS), rtol=1e-6)


def test_exclude_from_weight_decay_by_path_strings_and_arrays():
    opt = OX.AdamW(0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_list=["dense/kernel"])
    assert _decayed(opt) == {"dense/bias": True, "dense/kernel": False}
    # Arrays are matched by identity with the parameters the optimizer is built with.
    params = {"dense": dict(PARAMS["dense"])}
    opt = OX.SGD(0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_list=[params["dense"]["bias"]])
    assert _decayed(opt, params) == {"dense/bias": False, "dense/kernel": True}


def test_exclude_from_weight_decay_with_variables():
    w, b = OX.Variable(np.ones(2, np.float32), "w"), OX.Variable(np.ones(2, np.float32), "b")
    opt = OX.SGD(0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_list=[b])
    zeros = jnp.zeros(2)
    opt.apply_gradients([(zeros, w), (zeros, b)])
    np.testing.assert_allclose(w.value, [0.95, 0.95], rtol=1e-6)
    np.testing.assert_array_equal(b.value, [1.0, 1.0])
    # Unnamed Flax variables too.
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    opt = OX.SGD(0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_list=[model.bias])
    model.bias.set_value(jnp.ones(3))
    vars_ = [model.kernel, model.bias]
    kernel = np.asarray(model.kernel.get_value())
    opt.apply_gradients([(jnp.zeros_like(v.get_value()), v) for v in vars_])
    np.testing.assert_array_equal(model.bias.get_value(), np.ones(3))
    assert_close("kernel", model.kernel.get_value(), kernel * 0.95, rtol=1e-6)


# ---------------------------------------------------------------------------------------
# MultiOptimizer


def test_multi_optimizer_equals_each_optimizer_on_its_subset():
    grads = grads_seq(4)
    sgd, adam = OX.SGD(0.1, momentum=0.9), OX.Adam(0.05, weight_decay=0.1)
    multi = OX.MultiOptimizer({".*bias": sgd}, default_optimizer=adam)
    assert multi.optimizers == [sgd, adam]
    got = run(multi, grads)
    bias = run(
        OX.SGD(0.1, momentum=0.9),
        [{"b": g["dense"]["bias"]} for g in grads],
        {"b": PARAMS["dense"]["bias"]},
    )
    kernel = run(
        OX.Adam(0.05, weight_decay=0.1),
        [{"k": g["dense"]["kernel"]} for g in grads],
        {"k": PARAMS["dense"]["kernel"]},
    )
    for p, b, k in zip(got, bias, kernel, strict=True):
        assert_close("bias", p["dense"]["bias"], b["b"], rtol=1e-6)
        assert_close("kernel", p["dense"]["kernel"], k["k"], rtol=1e-6)
    assert int(multi.iterations) == 4
    keys = set(multi.variables)
    assert {"sgd/learning_rate", "adam/learning_rate", "sgd/momentum/dense/bias"} <= keys
    assert {"adam/momentum/dense/kernel", "adam/velocity/dense/kernel"} <= keys
    assert multi.get_slot("dense/kernel", "momentum").shape == (3, 2)


def test_multi_optimizer_routing_exact_key_first_and_callable():
    a, b, c = OX.SGD(0.1, name="a"), OX.SGD(0.2, name="b"), OX.SGD(0.3, name="c")
    # "dense/bias" equals a key: it goes there although ".*bias" matches it too.
    multi = OX.MultiOptimizer({"dense/bias": a, ".*bias": b}, default_optimizer=c)
    params = {"dense": dict(PARAMS["dense"]), "head": {"bias": jnp.zeros(2)}}
    ones = jax.tree.map(jnp.ones_like, params)
    new = multi.apply(ones, params)
    np.testing.assert_allclose(new["dense"]["bias"], params["dense"]["bias"] - 0.1)
    np.testing.assert_allclose(new["head"]["bias"], -0.2)
    np.testing.assert_allclose(new["dense"]["kernel"], params["dense"]["kernel"] - 0.3)
    # After build: those that received parameters, in the order of the parameters.
    assert [o.name for o in multi.optimizers] == ["a", "c", "b"]
    # A callable path -> optimizer.
    seen = []

    def route(path):
        seen.append(path)
        return a if path.endswith("bias") else c

    multi = OX.MultiOptimizer(route)
    new = multi.apply(ones, params)
    assert sorted(seen) == ["dense/bias", "dense/kernel", "head/bias"]
    np.testing.assert_allclose(new["head"]["bias"], -0.1)
    np.testing.assert_allclose(new["dense"]["kernel"], params["dense"]["kernel"] - 0.3)


def test_multi_optimizer_inner_learning_rate_set_after_build():
    multi = OX.MultiOptimizer({".*bias": OX.SGD(0.1)}, default_optimizer=OX.SGD(0.2, name="k"))
    params = unique_params(8)
    ones = jax.tree.map(jnp.ones_like, params)
    with count_compiles("_step") as compiled:
        p = multi.apply(ones, params)
        assert compiled == ["_step"]
        multi.optimizers[0].learning_rate = 0.01
        q = multi.apply(ones, p)
    assert compiled == ["_step"]
    np.testing.assert_allclose(multi.variables["sgd/learning_rate"], 0.01)
    np.testing.assert_allclose(multi.optimizers[0].learning_rate, 0.01)
    np.testing.assert_allclose(multi.optimizers[1].learning_rate, 0.2)
    assert_close("bias", q["dense"]["bias"], p["dense"]["bias"] - 0.01, rtol=1e-6)
    assert_close("kernel", q["dense"]["kernel"], p["dense"]["kernel"] - 0.2, rtol=1e-6)
    with pytest.raises(AttributeError):
        _ = multi.learning_rate


if HAS_KERAS_MULTI:

    def test_multi_optimizer_matches_keras():
        params = {
            "kernel": np.asarray(PARAMS["dense"]["kernel"]),
            "bias": np.asarray(PARAMS["dense"]["bias"]),
        }
        rng = np.random.default_rng(3)
        grads = [
            {k: rng.normal(size=v.shape).astype(np.float32) for k, v in params.items()}
            for _ in range(8)
        ]
        ours = OX.MultiOptimizer(
            {".*bias": OX.SGD(0.1, momentum=0.9)},
            default_optimizer=OX.Adam(0.05, weight_decay=0.1, use_ema=True),
        )
        theirs = K.MultiOptimizer(
            K.OptimizerMap(
                K.Adam(0.05, weight_decay=0.1, use_ema=True), {".*bias": K.SGD(0.1, momentum=0.9)}
            )
        )
        assert_close(
            "multi", run_optx(ours, params, grads), run_keras(theirs, params, grads), rtol=1e-6
        )


# ---------------------------------------------------------------------------------------
# LossScaleOptimizer


def test_loss_scale_optimizer_keras_sequence():
    opt = OX.LossScaleOptimizer(OX.SGD(1.0), initial_scale=8.0, dynamic_growth_steps=2)
    w = {"w": jnp.zeros(1)}
    ws, scales, its = [], [], []
    for g in (8.0, jnp.inf, 4.0, 4.0, 2.0):
        w = opt.apply({"w": jnp.array([g], jnp.float32)}, w)
        ws.append(float(w["w"][0]))
        scales.append(float(opt.loss_scale()))
        its.append(int(opt.iterations))
    assert ws == [-1.0, -1.0, -2.0, -3.0, -3.25]
    assert scales == [8.0, 4.0, 4.0, 8.0, 8.0]
    assert its == [1, 1, 2, 3, 4]
    np.testing.assert_allclose(opt.learning_rate, 1.0)
    assert opt.get_slot_names() == []


def test_loss_scale_optimizer_matches_keras_with_adam():
    params = {
        "kernel": np.asarray(PARAMS["dense"]["kernel"]),
        "bias": np.asarray(PARAMS["dense"]["bias"]),
    }
    rng = np.random.default_rng(5)
    grads = []
    for i in range(20):
        g = {k: (rng.normal(size=v.shape) * 16).astype(np.float32) for k, v in params.items()}
        if i in (2, 3, 11):
            g["bias"][0] = np.inf if i != 3 else np.nan
        grads.append(g)
    # A learning rate of 0.01: Keras computes 1 - beta_2**t from float32 beta_2 (1.3e-5
    # relative error in 1 - beta_2), optx holds 1 - beta_2; at 0.1 the updates differ by 6e-7.
    ours = OX.LossScaleOptimizer(OX.Adam(0.01), initial_scale=16.0, dynamic_growth_steps=3)
    theirs = K.LossScaleOptimizer(K.Adam(0.01), initial_scale=16.0, dynamic_growth_steps=3)
    assert_close("lso", run_optx(ours, params, grads), run_keras(theirs, params, grads), rtol=1e-6)
    assert int(ours.iterations) == 17
    np.testing.assert_allclose(ours.learning_rate, 0.01)


# ---------------------------------------------------------------------------------------
# serialize, deserialize, get


def test_get():
    assert type(OX.get("adam")) is OX.Adam
    assert type(OX.get("Adam")) is OX.Adam
    assert type(OX.get("lamb")) is OX.Lamb
    opt = OX.get({"class_name": "SGD", "config": {"learning_rate": 0.5, "momentum": 0.9}})
    assert type(opt) is OX.SGD and opt.momentum == 0.9
    np.testing.assert_allclose(opt.learning_rate, 0.5)
    assert OX.get(opt) is opt
    assert OX.get(None) is None


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
def test_serialize_format():
    opt = OX.Adam(0.01, beta_1=0.8, name="my_adam")
    out = OX.serialize(opt)
    assert set(out) == {"module", "class_name", "config", "registered_name"}
    assert out["module"] == "keras.optimizers"
    assert out["class_name"] == "Adam"
    assert out["registered_name"] is None
    assert out["config"] == opt.get_config()
    assert out["config"]["name"] == "my_adam" and out["config"]["beta_1"] == 0.8
    # The same keys as Keras's config of the same class.
    assert set(out["config"]) == set(K.Adam(0.01).get_config())
    back = OX.deserialize(json.loads(json.dumps(out)))
    assert type(back) is OX.Adam and back.get_config() == opt.get_config()


def _keras_params_grads(n=6, seed=7):
    params = {
        "kernel": np.asarray(PARAMS["dense"]["kernel"]),
        "bias": np.asarray(PARAMS["dense"]["bias"]),
    }
    rng = np.random.default_rng(seed)
    grads = [
        {k: rng.normal(size=v.shape).astype(np.float32) for k, v in params.items()}
        for _ in range(n)
    ]
    return params, grads


@pytest.mark.parametrize(
    "make",
    [
        lambda: K.Adam(0.01, beta_1=0.8, weight_decay=0.1, clipnorm=1.0),
        lambda: K.SGD(K.schedules.ExponentialDecay(0.1, 2, 0.5), momentum=0.9, nesterov=True),
    ],
    ids=["adam", "sgd_schedule"],
)
@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
def test_deserialize_a_keras_config(make):
    config = json.loads(json.dumps(K.serialize(make())))
    opt = OX.deserialize(config)
    assert type(opt).__name__ == config["class_name"]
    params, grads = _keras_params_grads()
    assert_close(
        "keras config", run_optx(opt, params, grads), run_keras(make(), params, grads), rtol=1e-6
    )


def test_tf_keras_config_with_lr_loads():
    config = {
        "class_name": "Adam",
        "config": {
            "name": "Adam",
            "lr": 0.01,
            "decay": 0.0,
            "beta_1": 0.9,
            "beta_2": 0.999,
            "epsilon": 1e-07,
            "amsgrad": False,
        },
    }
    opt = OX.deserialize(config)
    assert type(opt) is OX.Adam and opt.name == "Adam"
    np.testing.assert_allclose(opt.learning_rate, 0.01)
    ref = OX.Adam(0.01)
    g = grads_seq(1)[0]
    assert_equal(opt.apply(g, PARAMS), ref.apply(g, PARAMS))


def _sched():
    return OX.schedules.ExponentialDecay(0.1, decay_steps=3, decay_rate=0.5)


CLASSES = {
    "SGD": lambda lr: OX.SGD(lr, momentum=0.9),
    "RMSprop": lambda lr: OX.RMSprop(lr, momentum=0.5, centered=True),
    "Adam": lambda lr: OX.Adam(lr, amsgrad=True, use_ema=True),
    "AdamW": lambda lr: OX.AdamW(lr, weight_decay=0.1),
    "Adadelta": lambda lr: OX.Adadelta(lr, clipvalue=0.5),
    "Adagrad": lambda lr: OX.Adagrad(lr, global_clipnorm=1.0),
    "Adamax": lambda lr: OX.Adamax(lr, gradient_accumulation_steps=2),
    "Adafactor": lambda lr: OX.Adafactor(lr),
    "Nadam": lambda lr: OX.Nadam(lr, loss_scale_factor=2.0),
    "Ftrl": lambda lr: OX.Ftrl(lr, l1_regularization_strength=0.01),
    "Lion": lambda lr: OX.Lion(lr, clipnorm=1.0),
    "Lamb": lambda lr: OX.Lamb(lr, weight_decay=0.01),
    "Muon": lambda lr: OX.Muon(lr),
    "MultiOptimizer": lambda lr: OX.MultiOptimizer(
        {".*bias": OX.SGD(lr)}, default_optimizer=OX.Adam(lr), loss_scale_factor=2.0
    ),
    "LossScaleOptimizer": lambda lr: OX.LossScaleOptimizer(OX.Adam(lr), initial_scale=8.0),
}


def test_every_class_is_round_tripped():
    assert set(CLASSES) == {
        name
        for name in dir(OX)
        if isinstance(getattr(OX, name), type)
        and name not in ("Optimizer", "OptimizerMap", "Variable")
    }


@pytest.mark.parametrize("schedule", [False, True], ids=["float", "schedule"])
@pytest.mark.parametrize("name", CLASSES)
def test_config_round_trip_through_json(name, schedule):
    opt = CLASSES[name](_sched() if schedule else 0.05)
    serialized = json.loads(json.dumps(OX.serialize(opt)))
    back = OX.deserialize(serialized)
    assert type(back) is type(opt)
    assert OX.serialize(back) == serialized
    assert back.get_config() == json.loads(json.dumps(opt.get_config()))
    if schedule:
        # The same numerics over a few steps (the schedule decays in them).
        grads = grads_seq(4, seed=1)
        assert_equal(run(back, grads), run(opt, grads))


# ---------------------------------------------------------------------------------------
# Displays


def test_repr_before_and_after_build():
    opt = OX.Adam(0.1, amsgrad=True, weight_decay=0.01)
    text = repr(opt)
    assert text.startswith("Adam(name='adam', learning_rate=0.1")
    assert "amsgrad=True" in text and "weight_decay=0.01" in text
    assert "not built" in text
    html = opt._repr_html_()
    assert "not built" in html and "<strong>Adam(" in html
    run(opt, grads_seq(2))
    text = repr(opt)
    assert "built for 2 parameters; iterations=2" in text
    assert "learning_rate=0.1" in text and "beta_1=0.9" in text and "weight_decay=0.01" in text
    assert "b1=" not in text and "one_minus" not in text
    # 8 floats per slot: 2 + 6 elements.
    assert "momentum (2 arrays, 32 B)" in text
    assert "velocity_hat (2 arrays, 32 B)" in text
    nbytes = sum(np.asarray(v).nbytes for v in opt.variables.values())
    assert f"state {nbytes} B" in text
    html = opt._repr_html_()
    assert "<th>hyperparameter</th>" in html and "<td>learning_rate</td><td>0.1</td>" in html
    assert "<td>dense/kernel</td><td>velocity_hat</td><td>(3, 2)</td><td>float32</td>" in html
    assert f"state {nbytes} B" in html


def test_repr_of_wrappers():
    generic = OX.Optimizer(optx.sgd(0.1), name="plain")
    assert "name='plain'" in repr(generic) and "not built" in repr(generic)
    generic.apply(grads_seq(1)[0], PARAMS)
    assert "slots: none" in repr(generic)
    multi = _multi()
    assert repr(multi).startswith("MultiOptimizer(name='multi_optimizer', optimizers=[sgd, adam])")
    run(multi, grads_seq(1))
    text = repr(multi)
    assert "sgd/learning_rate=0.1" in text and "adam/learning_rate=0.05" in text
    assert "average (1 arrays" in text
    lso = OX.LossScaleOptimizer(OX.SGD(0.1), initial_scale=4.0)
    assert repr(lso).startswith(
        "LossScaleOptimizer(SGD(...), name='loss_scale_optimizer', initial_scale=4.0"
    )


# ---------------------------------------------------------------------------------------
# The learning rate of the optimizers inside a LossScaleOptimizer or MultiOptimizer


def test_loss_scale_optimizer_learning_rate_proxies_the_inner_one():
    sched = OX.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    lso = OX.LossScaleOptimizer(OX.SGD(sched), initial_scale=1.0)
    np.testing.assert_allclose(lso.learning_rate, 0.1)
    w = {"w": jnp.zeros(2)}
    for g in (1.0, jnp.inf, 1.0):
        w = lso.apply({"w": jnp.array([g, 1.0])}, w)
    # Two applied steps (the skipped one does not count): the schedule's value at 2.
    assert int(lso.iterations) == 2
    np.testing.assert_allclose(lso.learning_rate, 0.025, rtol=1e-6)
    # A number set on the wrapper reaches the step and the inner optimizer's value.
    lso = OX.LossScaleOptimizer(OX.SGD(0.1), initial_scale=1.0)
    p = lso.apply({"w": jnp.ones(2)}, {"w": jnp.zeros(2)})
    lso.learning_rate = 0.01
    q = lso.apply({"w": jnp.ones(2)}, p)
    assert_close("lso lr", q["w"], p["w"] - 0.01, rtol=1e-6)
    np.testing.assert_allclose(lso.inner_optimizer.learning_rate, 0.01)
    np.testing.assert_allclose(lso.learning_rate, 0.01)


def test_inner_learning_rate_set_after_a_loss_scale_optimizer_is_built():
    lso = OX.LossScaleOptimizer(OX.SGD(0.1), initial_scale=1.0)
    p = lso.apply({"w": jnp.ones(2)}, {"w": jnp.zeros(2)})
    lso.inner_optimizer.learning_rate = 0.01
    q = lso.apply({"w": jnp.ones(2)}, p)
    np.testing.assert_allclose(
        q["w"] - p["w"],
        [-0.01, -0.01],
        rtol=1e-5,
        err_msg="setting inner_optimizer.learning_rate after the LossScaleOptimizer is built "
        "must write the wrapper's state (the inner optimizer holds none of its own)",
    )


def test_inner_schedule_set_after_a_multi_optimizer_is_built():
    multi = OX.MultiOptimizer({"w": OX.SGD(0.1)}, default_optimizer=OX.SGD(0.2, name="other"))
    params = {"w": jnp.zeros(2), "b": jnp.zeros(2)}
    ones = jax.tree.map(jnp.ones_like, params)
    p = multi.apply(ones, params)
    (sgd,) = [o for o in multi.optimizers if o.name == "sgd"]
    sgd.learning_rate = OX.schedules.ExponentialDecay(0.01, 1, 0.5)
    q = multi.apply(ones, p)
    np.testing.assert_allclose(
        q["w"] - p["w"],
        [-0.005, -0.005],  # the schedule at iteration 1
        rtol=1e-5,
        err_msg="a schedule set on an inner optimizer of a built MultiOptimizer must rebuild "
        "the MultiOptimizer's partition, carrying its state over",
    )


def test_inner_exclude_from_weight_decay_after_a_multi_optimizer_is_built():
    multi = OX.MultiOptimizer({"w": OX.SGD(0.1, weight_decay=0.5)}, OX.SGD(0.2, name="other"))
    multi.apply({"w": jnp.ones(2), "b": jnp.ones(2)}, {"w": jnp.ones(2), "b": jnp.ones(2)})
    with pytest.raises(ValueError, match=re.escape("`exclude_from_weight_decay` needs")):
        # The inner optimizer is not built itself (its wrapper holds the state), but its
        # wrapper is: the chain is fixed.
        multi.optimizers[0].exclude_from_weight_decay(var_names=["w"])
