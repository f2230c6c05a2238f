"""Compile-cache behaviour (DESIGN D1, D2).

* Changing a hyperparameter with `optx.set_hyperparams` between calls of a jitted step never
  recompiles, and the new value takes effect.
* Rebuilding an identical transform gives an equal, hash-equal value, so passing it as a
  static argument (or inside a TrainState / nnx.Optimizer) hits the compile cache.
* Different configurations are not equal, so a cached program is never reused for them.

Compilations are counted two ways: by the traces of the Python function (a side effect in
its body runs once per trace) and by JAX's public monitoring hook, which records a
``/jax/core/compile/backend_compile_duration`` event per XLA compilation, with the jitted
function's name.
"""

from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from flax import nnx
from flax.training import train_state
from helpers import count_compiles

import optx

PARAMS = {
    "dense": {"bias": jnp.zeros(3), "kernel": jnp.ones((2, 3))},
    "head": {"bias": jnp.zeros(1), "kernel": jnp.ones((3, 1))},
}
GRADS = jax.tree.map(lambda p: jnp.full_like(p, 0.5), PARAMS)


# ---------------------------------------------------------------------------------------
# (a) set_hyperparams between calls of a jitted step does not recompile

_STEP_TX = optx.chain(optx.clip_by_global_norm(10.0), optx.adamw(1e-3, weight_decay=1e-2))
_STEP_TRACES: list[int] = []


@jax.jit
def adamw_step(params: optx.Params, state: optx.OptState, grads: optx.Updates) -> tuple:
    _STEP_TRACES.append(1)
    updates, state = _STEP_TX.update(grads, state, params)
    return optx.apply_updates(params, updates), state, updates


def test_set_hyperparams_between_steps_does_not_recompile():
    state0 = _STEP_TX.init(PARAMS)
    _STEP_TRACES.clear()
    with count_compiles("adamw_step") as compiled:
        _, _, base = adamw_step(PARAMS, state0, GRADS)
        # The same value given as a Python float, a NumPy scalar and arrays of other dtypes.
        for learning_rate in (2e-3, np.float64(2e-3), jnp.float32(2e-3), jnp.bfloat16(2e-3)):
            state = optx.set_hyperparams(state0, learning_rate=learning_rate)
            _, _, updates = adamw_step(PARAMS, state, GRADS)
            # The update is linear in the learning rate (weight decay is scaled by it too).
            ratio = float(np.float32(learning_rate)) / float(np.float32(1e-3))
            chex.assert_trees_all_close(
                updates, jax.tree.map(lambda u, r=ratio: r * u, base), rtol=1e-6
            )
        # Other hyperparameters, several at once, in a stepped state.
        params, state, _ = adamw_step(PARAMS, state0, GRADS)
        state = optx.set_hyperparams(state, b1=0.5, b2=0.9, weight_decay=0.0, max_norm=0.1)
        params, state, _ = adamw_step(params, state, GRADS)
        got = optx.get_hyperparams(state)
        np.testing.assert_allclose(
            [got["b1"], got["b2"], got["weight_decay"], got["max_norm"]],
            [0.5, 0.9, 0.0, 0.1],
            rtol=1e-6,
        )
    assert len(_STEP_TRACES) == 1
    assert len(compiled) == 1


def test_the_new_learning_rate_takes_effect_in_the_next_step():
    tx = optx.sgd(0.1, momentum=0.9)

    @jax.jit
    def sgd_step(params: optx.Params, state: optx.OptState, grads: optx.Updates) -> tuple:
        updates, state = tx.update(grads, state, params)
        return optx.apply_updates(params, updates), state

    with count_compiles("sgd_step") as compiled:
        params, state = sgd_step(PARAMS, tx.init(PARAMS), GRADS)
        chex.assert_trees_all_close(
            params, jax.tree.map(lambda p: p - 0.05, PARAMS), rtol=1e-6, atol=1e-7
        )
        before = params
        # sgd's momentum is the `decay` of its `trace` stage.
        state = optx.set_hyperparams(state, learning_rate=1.0, momentum=0.0)
        params, state = sgd_step(params, state, GRADS)
        # Without momentum the step is exactly -learning_rate * grad.
        chex.assert_trees_all_close(
            params, jax.tree.map(lambda p: p - 0.5, before), rtol=1e-6, atol=1e-7
        )
    assert len(compiled) == 1


# ---------------------------------------------------------------------------------------
# (b) identical rebuilt transforms are equal, hash-equal and hit the compile cache


def _adamw() -> optx.Transform:
    return optx.adamw(1e-3)


def _dict_masks() -> optx.Transform:
    mask = {"dense": {"bias": False, "kernel": True}, "head": {"bias": False, "kernel": True}}
    return optx.chain(
        optx.masked(optx.clip(1.0), {"dense": True, "head": False}),
        optx.adamw(1e-3, weight_decay=1e-2, mask=mask),
    )


def _regex_masks() -> optx.Transform:
    return optx.chain(
        optx.masked(optx.clip_by_norm(1.0), ["dense/", r"head/kernel"]),
        optx.adamw(1e-3, weight_decay=1e-2, mask=r"kernel$"),
    )


def _label_tree() -> optx.Transform:
    labels = {"dense": "adam", "head": {"bias": "frozen", "kernel": "sgd"}}
    return optx.partition(
        {"adam": optx.adam(1e-3), "sgd": optx.sgd(0.1, momentum=0.9), "frozen": optx.set_to_zero()},
        labels,
    )


def _label_regexes() -> optx.Transform:
    return optx.partition(
        {"decayed": optx.adamw(1e-3), "plain": optx.adam(1e-2)},
        {r"kernel": "decayed", r".*": "plain"},
    )


BUILDERS: dict[str, Callable[[], optx.Transform]] = {
    "adamw": _adamw,
    "chain_with_dict_masks": _dict_masks,
    "chain_with_regex_masks": _regex_masks,
    "partition_with_label_tree": _label_tree,
    "partition_with_regex_labels": _label_regexes,
}

_STATIC_TRACES: list[str] = []


def _static_step(tx: optx.Transform, params: optx.Params, grads: optx.Updates) -> tuple:
    _STATIC_TRACES.append(repr(tx))
    state = tx.init(params)
    updates, state = tx.update(grads, state, params)
    return optx.apply_updates(params, updates), state


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_rebuilt_transform_is_equal_and_hits_the_cache(build):
    first, second = build(), build()
    assert first is not second
    assert first == second
    assert hash(first) == hash(second)
    assert repr(first) == repr(second)

    # A fresh jitted function per case, so each case counts its own compilations.
    static_step = jax.jit(_static_step, static_argnums=0)
    _STATIC_TRACES.clear()
    with count_compiles("_static_step") as compiled:
        out_first = static_step(first, PARAMS, GRADS)
        out_second = static_step(second, PARAMS, GRADS)
    assert len(_STATIC_TRACES) == 1
    assert len(compiled) == 1
    chex.assert_trees_all_equal(out_first, out_second)
    # The transform really did something.
    assert not jax.tree.all(jax.tree.map(jnp.array_equal, out_first[0], PARAMS))


class Linen(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(1)(jnp.tanh(nn.Dense(4)(x)))


_LINEN = Linen()
_X = jnp.linspace(-1.0, 1.0, 16).reshape(8, 2)
_Y = jnp.sin(_X[:, :1])
_TRAIN_TRACES: list[int] = []


@jax.jit
def linen_train_step(state: train_state.TrainState) -> train_state.TrainState:
    _TRAIN_TRACES.append(1)

    def loss(params: optx.Params) -> jax.Array:
        return jnp.mean((state.apply_fn({"params": params}, _X) - _Y) ** 2)

    return state.apply_gradients(grads=jax.grad(loss)(state.params))


def _train_state(tx: optx.Transform) -> train_state.TrainState:
    params = _LINEN.init(jax.random.key(0), _X)["params"]
    return train_state.TrainState.create(apply_fn=_LINEN.apply, params=params, tx=tx)


def test_train_state_with_rebuilt_tx_hits_the_cache():
    _TRAIN_TRACES.clear()
    with count_compiles("linen_train_step") as compiled:
        first = linen_train_step(_train_state(_regex_masks()))
        second = linen_train_step(_train_state(_regex_masks()))
    assert len(_TRAIN_TRACES) == 1
    assert len(compiled) == 1
    chex.assert_trees_all_equal(first.params, second.params)

    # Control: a different configuration is a different static `tx`, hence a compilation.
    with count_compiles("linen_train_step") as compiled:
        linen_train_step(_train_state(optx.adamw(1e-4)))
        linen_train_step(_train_state(optx.adamw(1e-4)))
    assert len(_TRAIN_TRACES) == 2
    assert len(compiled) == 1


class NnxModel(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.dense = nnx.Linear(2, 4, rngs=rngs)
        self.head = nnx.Linear(4, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.head(jnp.tanh(self.dense(x)))


_NNX_TRACES: list[int] = []


@nnx.jit
def nnx_train_step(model: NnxModel, optimizer: nnx.Optimizer) -> None:
    _NNX_TRACES.append(1)
    grads = nnx.grad(lambda m: jnp.mean((m(_X) - _Y) ** 2))(model)
    optimizer.update(model, grads)


def test_nnx_optimizer_with_rebuilt_tx_hits_the_cache():
    _NNX_TRACES.clear()
    with count_compiles("nnx_train_step") as compiled:
        for _ in range(2):
            model = NnxModel(nnx.Rngs(0))
            nnx_train_step(model, nnx.Optimizer(model, _label_regexes(), wrt=nnx.Param))
    assert len(_NNX_TRACES) == 1
    assert len(compiled) == 1


# ---------------------------------------------------------------------------------------
# (c) different configurations are not equal


DIFFERENT = {
    "learning_rate": (lambda: optx.adamw(1e-3), lambda: optx.adamw(1e-4)),
    "weight_decay": (lambda: optx.adamw(1e-3), lambda: optx.adamw(1e-3, weight_decay=1e-2)),
    "b2": (lambda: optx.adam(1e-3), lambda: optx.adam(1e-3, b2=0.99)),
    "structural_option": (lambda: optx.adam(1e-3), lambda: optx.adam(1e-3, nesterov=True)),
    "regex_mask": (
        lambda: optx.adamw(1e-3, mask="kernel"),
        lambda: optx.adamw(1e-3, mask="bias"),
    ),
    "dict_mask": (
        lambda: optx.masked(optx.clip(1.0), {"dense": True, "head": False}),
        lambda: optx.masked(optx.clip(1.0), {"dense": False, "head": True}),
    ),
    "labels": (
        lambda: optx.partition(
            {"a": optx.sgd(0.1), "b": optx.set_to_zero()}, {"dense": "a", "head": "b"}
        ),
        lambda: optx.partition(
            {"a": optx.sgd(0.1), "b": optx.set_to_zero()}, {"dense": "b", "head": "a"}
        ),
    ),
    "chain_order": (
        lambda: optx.chain(optx.clip(1.0), optx.sgd(0.1)),
        lambda: optx.chain(optx.sgd(0.1), optx.clip(1.0)),
    ),
}


@pytest.mark.parametrize("pair", DIFFERENT.values(), ids=DIFFERENT.keys())
def test_different_configurations_are_not_equal(pair):
    first, second = (build() for build in pair)
    assert first != second
    assert first == pair[0]()  # but each equals its own rebuild


def test_cached_init_never_returns_another_configurations_state():
    traces: list[int] = []

    def init(tx: optx.Transform, params: optx.Params) -> optx.OptState:
        traces.append(1)
        return tx.init(params)

    cached_init = jax.jit(init, static_argnums=0)
    for learning_rate in (1e-3, 1e-4, 1e-3, 1e-4):
        state = cached_init(optx.adamw(learning_rate), PARAMS)
        assert float(optx.get_hyperparams(state)["learning_rate"]) == np.float32(learning_rate)
    assert len(traces) == 2
