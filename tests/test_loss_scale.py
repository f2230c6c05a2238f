"""Dynamic loss scaling: `dynamic_loss_scale` and `loss_scale`."""

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_close

import optx

# Keras 3.15 `LossScaleOptimizer(SGD(1.0), initial_scale=8, dynamic_growth_steps=2)` on
# w0 = 0, fed these (already scaled) gradients: the weight and the scale after each step.
KERAS_GRADS = [8.0, np.inf, 4.0, 4.0, 2.0]
KERAS_W = [-1.0, -1.0, -2.0, -3.0, -3.25]
KERAS_SCALE = [8.0, 4.0, 4.0, 8.0, 8.0]


def reference_scaling(grads, initial_scale, growth_interval):
    """NumPy loop: per step, whether it is applied, the unscaled gradients, the new scale."""
    scale, count, out = float(initial_scale), 0, []
    for g in grads:
        leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(g)]
        applied = all(np.all(np.isfinite(x)) for x in leaves)
        unscaled = [x / scale for x in leaves] if applied else None  # by this step's scale
        if not applied:
            scale, count = scale * 0.5, 0
        elif count == growth_interval - 1:
            scale, count = scale * 2.0, 0
        else:
            count += 1
        out.append((applied, unscaled, scale))
    return out


def reference_adam(grads, params, initial_scale, growth_interval, lr, b1=0.9, b2=0.999):
    """Dynamic loss scaling around optax-style Adam, in float64."""
    w = [np.asarray(p, np.float64) for p in jax.tree.leaves(params)]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    t, history = 0, []
    for applied, g, scale in reference_scaling(grads, initial_scale, growth_interval):
        if applied:
            t += 1
            m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g, strict=True)]
            v = [b2 * vi + (1 - b2) * gi**2 for vi, gi in zip(v, g, strict=True)]
            w = [
                wi - lr * (mi / (1 - b1**t)) / (np.sqrt(vi / (1 - b2**t)) + 1e-8)
                for wi, mi, vi in zip(w, m, v, strict=True)
            ]
        history.append((list(w), scale, t))
    return history


def _run(tx, params, grads, jit=False):
    update = jax.jit(tx.update) if jit else tx.update
    state, history = tx.init(params), []
    for g in grads:
        updates, state = update(g, state, params)
        params = optx.apply_updates(params, updates)
        history.append((params, updates, state))
    return history


def _random_grads(steps, seed=0):
    rng = np.random.default_rng(seed)
    grads = []
    for _ in range(steps):
        g = {
            "a": (rng.normal(size=3) * 100).astype(np.float32),
            "b": (rng.normal(size=(2, 2)) * 100).astype(np.float32),
        }
        if rng.random() < 0.25:
            leaf = "a" if rng.random() < 0.5 else "b"
            g[leaf].flat[rng.integers(g[leaf].size)] = rng.choice([np.inf, -np.inf, np.nan])
        grads.append({k: jnp.asarray(x) for k, x in g.items()})
    return grads


PARAMS = {"a": jnp.array([0.5, -1.0, 2.0]), "b": jnp.array([[1.0, 0.0], [-0.5, 3.0]])}


def test_keras_sequence():
    tx = optx.dynamic_loss_scale(optx.sgd(1.0), initial_scale=8.0, growth_interval=2)
    grads = [{"w": jnp.array([g], jnp.float32)} for g in KERAS_GRADS]
    history = _run(tx, {"w": jnp.zeros(1)}, grads)
    np.testing.assert_array_equal([float(p["w"][0]) for p, _, _ in history], KERAS_W)
    np.testing.assert_array_equal([float(optx.loss_scale(s)) for _, _, s in history], KERAS_SCALE)
    # The NumPy reference agrees.
    ref = reference_scaling([[g] for g in KERAS_GRADS], 8.0, 2)
    assert [s for _, _, s in ref] == KERAS_SCALE
    w = np.cumsum([-g[0] if applied else 0.0 for applied, g, _ in ref])
    np.testing.assert_array_equal(w, KERAS_W)
    _, _, state = history[-1]
    assert int(state.applied_count) == 4
    assert int(state.growth_count) == 1


def test_keras_parity():
    import keras  # a test dependency; tests/conftest.py selects the JAX backend

    assert keras.backend.backend() == "jax"
    w = keras.Variable(np.zeros(1, np.float32))
    opt = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(1.0), initial_scale=8.0, dynamic_growth_steps=2, name="lso"
    )
    opt.build([w])
    names = [v.path for v in opt.variables]
    opt_vars, train_vars = [v.value for v in opt.variables], [w.value]
    tx = optx.dynamic_loss_scale(optx.sgd(1.0), initial_scale=8.0, growth_interval=2)
    params, state = jnp.zeros(1), tx.init(jnp.zeros(1))
    for g in KERAS_GRADS:
        grad = np.array([g], np.float32)
        train_vars, opt_vars = opt.stateless_apply(opt_vars, [grad], train_vars)
        updates, state = tx.update(jnp.asarray(grad), state, params)
        params = optx.apply_updates(params, updates)
        keras_scale = opt_vars[names.index("lso/dynamic_scale")]
        np.testing.assert_array_equal(params, train_vars[0])
        assert float(optx.loss_scale(state)) == float(keras_scale)


def test_adam_matches_numpy_reference():
    grads = _random_grads(50)
    tx = optx.dynamic_loss_scale(optx.adam(1e-2), initial_scale=2.0**10, growth_interval=3)
    history = _run(tx, PARAMS, grads)
    ref = reference_adam(grads, PARAMS, 2.0**10, 3, 1e-2)
    assert any(s > 2.0**10 for _, s, _ in ref) and any(s < 2.0**10 for _, s, _ in ref)
    for step, ((params, _, state), (w, scale, t)) in enumerate(zip(history, ref, strict=True)):
        assert_close(f"step {step}", jax.tree.leaves(params), w, rtol=1e-6)
        assert float(state.scale) == scale
        assert int(state.applied_count) == t


def test_jit_equals_eager():
    grads = _random_grads(12, seed=1)
    tx = optx.dynamic_loss_scale(optx.adam(1e-2), initial_scale=2.0**10, growth_interval=2)
    eager, jitted = _run(tx, PARAMS, grads), _run(tx, PARAMS, grads, jit=True)
    for e, j in zip(eager, jitted, strict=True):
        chex.assert_trees_all_close(e, j, rtol=1e-6, atol=1e-7)


def test_skipped_step_leaves_inner_state():
    tx = optx.dynamic_loss_scale(optx.adam(1e-2), initial_scale=64.0, growth_interval=2)
    params = {"w": jnp.ones(3)}
    _, state = tx.update({"w": jnp.array([64.0, -32.0, 16.0])}, tx.init(params), params)
    assert int(state.growth_count) == 1
    updates, new = tx.update({"w": jnp.array([1.0, jnp.nan, 2.0])}, state, params)
    chex.assert_trees_all_equal(updates, {"w": jnp.zeros(3)})
    chex.assert_trees_all_equal(new.inner_state, state.inner_state)
    assert float(new.scale) == 32.0
    assert int(new.growth_count) == 0
    assert int(new.applied_count) == int(state.applied_count) == 1


def test_growth_interval_one_doubles_every_finite_step():
    tx = optx.dynamic_loss_scale(optx.sgd(1.0), initial_scale=1.0, growth_interval=1)
    state = tx.init(jnp.zeros(2))
    for expected in (2.0, 4.0, 8.0):
        _, state = tx.update(jnp.ones(2), state)
        assert float(optx.loss_scale(state)) == expected
        assert int(state.growth_count) == 0


def test_none_gradients_are_ignored():
    tx = optx.dynamic_loss_scale(optx.sgd(1.0), initial_scale=4.0)
    params = {"a": jnp.zeros(2), "b": jnp.zeros(1)}
    updates, state = tx.update({"a": jnp.array([4.0, 8.0]), "b": None}, tx.init(params), params)
    assert updates["b"] is None
    np.testing.assert_array_equal(updates["a"], [-1.0, -2.0])
    assert int(state.applied_count) == 1


def test_bfloat16_updates_keep_dtype():
    tx = optx.dynamic_loss_scale(optx.sgd(1.0), initial_scale=256.0)
    params = jnp.zeros(2, jnp.bfloat16)
    updates, state = tx.update(jnp.array([256.0, 512.0], jnp.bfloat16), tx.init(params), params)
    assert updates.dtype == jnp.bfloat16
    np.testing.assert_array_equal(updates.astype(jnp.float32), [-1.0, -2.0])
    assert state.scale.dtype == jnp.float32


def test_train_step_with_scale_loss():
    tx = optx.dynamic_loss_scale(optx.sgd(0.1), initial_scale=2.0**15, growth_interval=5)

    def loss_fn(w):
        return jnp.sum((w - 3.0) ** 2)

    @jax.jit
    def step(w, state):
        grads = jax.grad(lambda p: optx.scale_loss(loss_fn(p), optx.loss_scale(state)))(w)
        updates, state = tx.update(grads, state, w)
        return optx.apply_updates(w, updates), state

    w, state = jnp.zeros(2), tx.init(jnp.zeros(2))
    plain, plain_state = jnp.zeros(2), optx.sgd(0.1).init(jnp.zeros(2))
    for _ in range(12):
        w, state = step(w, state)
        updates, plain_state = optx.sgd(0.1).update(jax.grad(loss_fn)(plain), plain_state)
        plain = optx.apply_updates(plain, updates)
    np.testing.assert_allclose(w, plain, rtol=1e-6)
    assert float(optx.loss_scale(state)) == 2.0**17


def test_chains_with_optax():
    tx = optax.chain(optx.dynamic_loss_scale(optx.sgd(0.1)))
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    updates, state = tx.update({"w": jnp.full(2, 2.0**15)}, state, params)
    np.testing.assert_allclose(updates["w"], [-0.1, -0.1])
    assert float(optx.loss_scale(state)) == 2.0**15
    updates, state = jax.jit(tx.update)({"w": jnp.array([jnp.inf, 1.0])}, state, params)
    np.testing.assert_array_equal(updates["w"], [0.0, 0.0])
    assert float(optx.loss_scale(state)) == 2.0**14


def test_repr_and_equality():
    tx = optx.dynamic_loss_scale(optx.sgd(0.1), initial_scale=8, growth_interval=2)
    assert tx == optx.dynamic_loss_scale(optx.sgd(0.1), 8.0, 2)
    assert repr(tx).startswith("dynamic_loss_scale(inner=chain(")
    assert "initial_scale=8.0" in repr(tx) and "growth_interval=2" in repr(tx)
    hyperparams = optx.get_hyperparams(tx.init(jnp.zeros(1)))
    assert hyperparams == {"initial_scale": 8.0, "learning_rate": pytest.approx(0.1)}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"inner": 0.1},
            TypeError,
            "`dynamic_loss_scale` needs inner to be a transform with `init` and `update` "
            "methods (an optx or optax transform). Received: inner=0.1.",
        ),
        (
            {"initial_scale": 0.0},
            ValueError,
            "`dynamic_loss_scale` needs initial_scale in (0, 2**64] (2**64 is the scale's "
            "ceiling). Received: initial_scale=0.0.",
        ),
        (
            {"initial_scale": -8.0},
            ValueError,
            "`dynamic_loss_scale` needs initial_scale in (0, 2**64] (2**64 is the scale's "
            "ceiling). Received: initial_scale=-8.0.",
        ),
        (
            {"initial_scale": float("inf")},
            ValueError,
            "`dynamic_loss_scale` needs initial_scale in (0, 2**64] (2**64 is the scale's "
            "ceiling). Received: initial_scale=inf.",
        ),
        (
            {"initial_scale": float("nan")},
            ValueError,
            "`dynamic_loss_scale` needs initial_scale in (0, 2**64] (2**64 is the scale's "
            "ceiling). Received: initial_scale=nan.",
        ),
        (
            {"initial_scale": 2.0**65},
            ValueError,
            "`dynamic_loss_scale` needs initial_scale in (0, 2**64] (2**64 is the scale's "
            "ceiling). Received: initial_scale=3.6893488147419103e+19.",
        ),
        (
            {"initial_scale": "big"},
            TypeError,
            "`dynamic_loss_scale` needs initial_scale to be a real number or a schedule (a "
            "function of the step count). Received: initial_scale='big' of type str.",
        ),
        (
            {"growth_interval": 0},
            ValueError,
            "`dynamic_loss_scale` needs growth_interval to be an int >= 1. "
            "Received: growth_interval=0.",
        ),
        (
            {"growth_interval": 2.5},
            ValueError,
            "`dynamic_loss_scale` needs growth_interval to be an int >= 1. "
            "Received: growth_interval=2.5.",
        ),
        (
            {"growth_interval": True},
            ValueError,
            "`dynamic_loss_scale` needs growth_interval to be an int >= 1. "
            "Received: growth_interval=True.",
        ),
        (
            {"growth_interval": 2**31},
            ValueError,
            "`dynamic_loss_scale` needs growth_interval to be an int in [1, 2**31 - 1] (step "
            "counters are int32 and stop at 2**31 - 1 = 2147483647, so a larger count is "
            "never reached). Received: growth_interval=2147483648.",
        ),
    ],
)
def test_errors(kwargs, error, message):
    args = {"inner": optx.sgd(0.1), **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        optx.dynamic_loss_scale(**args)


@pytest.mark.parametrize("count", [0, 2])
def test_loss_scale_needs_exactly_one_state(count):
    tx = optx.chain(*[optx.dynamic_loss_scale(optx.sgd(0.1)) for _ in range(count)])
    state = tx.init(jnp.zeros(1))
    message = (
        "`loss_scale` needs a state holding exactly one `dynamic_loss_scale` state. "
        f"Received: a state holding {count}."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        optx.loss_scale(state)


def test_set_initial_scale_checks_its_range():
    state = optx.dynamic_loss_scale(optx.sgd(0.1)).init(jnp.zeros(1))
    message = (
        "`set_hyperparams` needs initial_scale in (0, 2**64] (2**64 is the scale's ceiling). "
        "Received: initial_scale=0.0."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        optx.set_hyperparams(state, initial_scale=0.0)


# The ceiling of the scale: 2**64.
CEILING = 2.0**64


@pytest.mark.parametrize("growth_interval", [1, 3])
def test_the_scale_stops_at_its_ceiling_and_updates_stay_nonzero(growth_interval):
    # Clean steps whose gradients never overflow (zero would do) double the scale each
    # `growth_interval` steps. Without a ceiling it passed 2**127 (its reciprocal flushed to
    # 0: every update 0) and reached inf (every later step skipped).
    tx = optx.dynamic_loss_scale(optx.sgd(1.0), 2.0**60, growth_interval)
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    step = jax.jit(tx.update)
    scales = []
    for _ in range(40 * growth_interval):
        s = optx.loss_scale(state)
        grads = {"w": jnp.full(2, 0.5) * s}  # the gradient of s * loss, for a true 0.5
        updates, state = step(grads, state, params)
        scales.append(float(optx.loss_scale(state)))
        # 1/s is a normal float32 at the ceiling: the update is exactly -0.5.
        np.testing.assert_array_equal(updates["w"], np.full(2, -0.5, np.float32))
    assert max(scales) == CEILING and scales[-1] == CEILING
    assert scales[4 * growth_interval - 1] == CEILING  # 2**60 doubles 4 times
    assert int(state.applied_count) == 40 * growth_interval


def test_the_scale_never_becomes_inf_from_zero_gradients():
    # 3,000 clean steps from 2**15 with growth every step: without the ceiling the scale was
    # inf from step 113 on.
    tx = optx.dynamic_loss_scale(optx.sgd(1.0), growth_interval=1)
    params = {"w": jnp.ones(3)}

    def run(state, _):
        updates, state = tx.update({"w": jnp.zeros(3)}, state, params)
        return state, (optx.loss_scale(state), updates["w"])

    state, (scales, updates) = jax.lax.scan(run, tx.init(params), None, length=3000)
    scales = np.asarray(scales)
    assert np.all(np.isfinite(scales)) and scales.max() == CEILING and scales[-1] == CEILING
    assert np.all(np.isfinite(updates))
    assert int(state.applied_count) == 3000  # no step skipped


def test_the_scale_state_at_the_ceiling_halves_on_overflow():
    tx = optx.dynamic_loss_scale(optx.sgd(1.0), CEILING, growth_interval=1)
    params = {"w": jnp.ones(1)}
    state = tx.init(params)
    _, state = tx.update({"w": jnp.ones(1)}, state, params)
    assert float(optx.loss_scale(state)) == CEILING
    _, state = tx.update({"w": jnp.array([jnp.inf])}, state, params)
    assert float(optx.loss_scale(state)) == CEILING / 2


def test_loss_scale_optimizer_scale_stops_at_the_ceiling():
    opt = optx.optimizers.LossScaleOptimizer(
        optx.optimizers.SGD(1.0), initial_scale=2.0**62, dynamic_growth_steps=1
    )
    w = {"w": jnp.ones(2)}
    for _ in range(6):
        s = float(opt.loss_scale())
        w = opt.apply({"w": jnp.full(2, 0.25) * s}, w)
    assert float(opt.loss_scale()) == CEILING
    assert int(opt.iterations) == 6 and int(opt.skipped_steps) == 0
    np.testing.assert_array_equal(w["w"], np.full(2, 1.0 - 6 * 0.25, np.float32))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`LossScaleOptimizer` needs initial_scale in (0, 2**64] (2**64 is the scale's "
            "ceiling). Received: initial_scale=1e+40."
        ),
    ):
        optx.optimizers.LossScaleOptimizer(optx.optimizers.SGD(1.0), initial_scale=1e40)
