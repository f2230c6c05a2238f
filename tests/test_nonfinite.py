"""Non-finite gradients: skipped bit for bit when protected, spread when not.

`optx.optimizers.LossScaleOptimizer` around every Keras-style class skips a step whose
gradients hold a NaN or an infinity: the parameters (a ``-0.0`` among them) and the inner
optimizer's variables stay bit for bit as they were, and `skipped_steps` counts the step.
Without protection the Keras-style classes apply such a gradient as Keras does: the NaN
reaches the parameters. `optx.apply_if_finite` inside the generic `Optimizer` and
`optx.dynamic_loss_scale` skip the same way (every registry entry under `apply_if_finite`:
tests/test_registry_reliability.py).
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx
from optx._src.finite import no_change

KERAS = optx.optimizers
WRAPPERS = {"Optimizer", "MultiOptimizer", "LossScaleOptimizer", "OptimizerMap"}
CLASSES = sorted(
    name
    for name in dir(KERAS)
    if inspect.isclass(getattr(KERAS, name))
    and issubclass(getattr(KERAS, name), KERAS.Optimizer)
    and name not in WRAPPERS
)


def test_every_keras_class_is_covered() -> None:
    assert CLASSES == [
        "Adadelta",
        "Adafactor",
        "Adagrad",
        "Adam",
        "AdamW",
        "Adamax",
        "Ftrl",
        "Lamb",
        "Lion",
        "Muon",
        "Nadam",
        "RMSprop",
        "SGD",
    ]


def _params() -> dict[str, jax.Array]:
    rng = np.random.RandomState(0)
    kernel = rng.standard_normal((3, 4)).astype(np.float32)
    kernel[0, 0] = -0.0  # p + 0.0 would make it +0.0: a skipped step must not
    return {"kernel": jnp.asarray(kernel), "bias": jnp.asarray(rng.standard_normal(4), "float32")}


def _grads(seed: int) -> dict[str, jax.Array]:
    rng = np.random.RandomState(seed)
    return {
        "kernel": jnp.asarray(rng.standard_normal((3, 4)), "float32"),
        "bias": jnp.asarray(rng.standard_normal(4), "float32"),
    }


NAN = {**_grads(3), "kernel": _grads(3)["kernel"].at[1, 1].set(jnp.nan)}
INF = {**_grads(4), "bias": _grads(4)["bias"].at[2].set(-jnp.inf)}


def bits(tree) -> dict[str, bytes]:
    """Each leaf's raw bytes by path: equality that NaN and -0.0 cannot fool."""
    return {
        jax.tree_util.keystr(p): np.asarray(x).tobytes()
        for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


@pytest.mark.parametrize("name", CLASSES)
def test_loss_scale_optimizer_skips_bit_for_bit(name: str) -> None:
    opt = KERAS.LossScaleOptimizer(getattr(KERAS, name)(), initial_scale=4.0)
    params = _params()
    for seed in (1, 2):
        params = opt.apply(_grads(seed), params)
    # The -0.0 of the kernel survived the finite steps for SGD-like updates or not; put
    # one back so that the skipped steps are shown to keep it.
    params = {**params, "kernel": params["kernel"].at[0, 0].set(-0.0)}
    before, variables = bits(params), bits(opt.variables)
    for grads in (NAN, INF):
        params = opt.apply(grads, params)
        assert bits(params) == before
    changed = {k for k, v in bits(opt.variables).items() if v != variables[k]}
    # Only the loss scale's own bookkeeping moves: the scale halves twice, the run of
    # finite steps restarts, and every call is counted.
    assert changed == {
        "['iterations']",
        "['loss_scale_optimizer/scale']",
        "['loss_scale_optimizer/growth_count']",
    }
    assert int(opt.skipped_steps) == 2 and int(opt.iterations) == 2
    assert int(opt.variables["iterations"]) == 4
    assert float(opt.loss_scale()) == 1.0
    # The next finite step applies.
    params = opt.apply(_grads(5), params)
    assert bits(params) != before and int(opt.iterations) == 3 and int(opt.skipped_steps) == 2


@pytest.mark.parametrize("name", CLASSES)
def test_without_protection_a_nan_reaches_the_parameters_or_the_slots(name: str) -> None:
    opt = getattr(KERAS, name)()
    params = opt.apply(NAN, _params())
    in_params = bool(np.isnan(np.asarray(params["kernel"])).any())
    in_slots = any(np.isnan(np.asarray(v, np.float32)).any() for v in opt.variables.values())
    # Adagrad's accumulator takes the NaN while its update of that element is 0: the
    # parameter stays finite, and stops moving.
    assert (in_params, in_slots) == ((False, True) if name == "Adagrad" else (True, in_slots))
    assert int(opt.iterations) == 1


def test_generic_optimizer_with_apply_if_finite_counts_its_skips() -> None:
    opt = KERAS.Optimizer(optx.apply_if_finite(optx.adam(1e-2), max_consecutive_errors=3))
    params = opt.apply(_grads(1), _params())
    before, inner = bits(params), bits(opt.variables)
    params = opt.apply(NAN, params)
    assert bits(params) == before
    variables = bits(opt.variables)
    counters = {"['iterations']", "['optimizer/notfinite_count']"}
    counters |= {"['optimizer/last_finite']", "['optimizer/total_notfinite']"}
    assert {k for k, v in variables.items() if v != inner[k]} == counters
    assert int(opt.variables["optimizer/total_notfinite"]) == 1


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "eager"])
def test_dynamic_loss_scale_skips_bit_for_bit(jit: bool) -> None:
    tx = optx.dynamic_loss_scale(optx.adam(1e-2), initial_scale=8.0, growth_interval=3)
    update = jax.jit(tx.update) if jit else tx.update
    params = _params()
    state = tx.init(params)
    updates, state = update(_grads(1), state, params)
    params = {**optx.apply_updates(params, updates), "kernel": params["kernel"]}
    for grads, scale in ((NAN, 4.0), (INF, 2.0)):
        updates, new_state = update(grads, state, params)
        assert bits(optx.apply_updates(params, updates)) == bits(params)
        assert bits(new_state.inner_state) == bits(state.inner_state)
        assert int(new_state.applied_count) == 1 and float(new_state.scale) == scale
        state = new_state


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_skipped_updates_keep_every_bit_of_any_value(dtype: str) -> None:
    # Normal numbers, zeros, infinities, NaN. (XLA:CPU flushes subnormal numbers to zero in
    # any arithmetic, so a subnormal parameter becomes 0 on a skipped step too.)
    values = [-0.0, 0.0, 1.5, -2.0, 3e-38, np.inf, -np.inf, np.nan]
    params = jnp.asarray(np.array(values, np.float32)).astype(dtype)
    for add in (optx.apply_updates, jax.jit(optx.apply_updates)):
        assert bits(add(params, no_change(params))) == bits(params)
    # Why negative zeros: adding a positive zero turns -0.0 into +0.0.
    plus = optx.apply_updates(params, jnp.zeros_like(params))
    assert np.signbit(np.asarray(params[0], np.float32))
    assert not np.signbit(np.asarray(plus[0], np.float32))


def test_dynamic_loss_scale_never_halves_to_zero() -> None:
    tx = optx.dynamic_loss_scale(optx.sgd(0.1), initial_scale=2.0**15)
    params = {"w": jnp.ones(2)}

    @jax.jit
    def skip_200_steps(state):
        inf = {"w": jnp.array([jnp.inf, 1.0])}
        return jax.lax.fori_loop(0, 200, lambda _, s: tx.update(inf, s, params)[1], state)

    state = skip_200_steps(tx.init(params))
    assert float(optx.loss_scale(state)) == 2.0**-126  # float32's smallest normal number
    # The next finite gradients are divided by that scale, not by zero.
    updates, state = tx.update({"w": jnp.array([2.0**-126, 0.0])}, state, params)
    np.testing.assert_array_equal(updates["w"], np.float32([-0.1, 0.0]))
