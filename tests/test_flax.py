"""Flax integration: optx transforms as the ``tx`` of linen's TrainState and nnx.Optimizer.

No adapter is involved (DESIGN D1): both duck-type the ``(init, update)`` protocol. The
hyperparameters held in the state (DESIGN D2) are read and changed through
`optx.get_hyperparams` / `optx.set_hyperparams` on ``TrainState.opt_state`` and
``nnx.Optimizer.opt_state`` without recompiling the jitted train step.

Compilations are counted with JAX's public monitoring hook: every XLA compilation records a
``/jax/core/compile/backend_compile_duration`` event with the jitted function's name.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn
from flax import nnx
from flax.training import train_state
from helpers import count_compiles

import optx


def make_tx(learning_rate: float = 1e-2) -> optx.Transform:
    return optx.chain(optx.clip_by_global_norm(1.0), optx.adamw(learning_rate))


@pytest.fixture(scope="module")
def data() -> tuple[jax.Array, jax.Array]:
    x = jax.random.normal(jax.random.key(0), (64, 3))
    y = jnp.sin(2.0 * x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]
    return x, y


# ---------------------------------------------------------------------------------------
# linen + TrainState


class LinenMLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(1)(jnp.tanh(nn.Dense(16)(x)))


_LINEN = LinenMLP()


def linen_state(tx: optax.GradientTransformation) -> train_state.TrainState:
    params = _LINEN.init(jax.random.key(1), jnp.zeros((1, 3)))["params"]
    return train_state.TrainState.create(apply_fn=_LINEN.apply, params=params, tx=tx)


def linen_loss(params: optx.Params, apply_fn: object, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((apply_fn({"params": params}, x) - y) ** 2)


@jax.jit
def linen_step(
    state: train_state.TrainState, x: jax.Array, y: jax.Array
) -> tuple[train_state.TrainState, jax.Array]:
    loss, grads = jax.value_and_grad(linen_loss)(state.params, state.apply_fn, x, y)
    return state.apply_gradients(grads=grads), loss


def run_linen(
    state: train_state.TrainState, data: tuple[jax.Array, jax.Array], steps: int
) -> tuple[train_state.TrainState, list[float]]:
    losses = []
    for _ in range(steps):
        state, loss = linen_step(state, *data)
        losses.append(float(loss))
    return state, losses


def test_train_state_trains(data):
    state, losses = run_linen(linen_state(make_tx()), data, 150)
    final = float(linen_loss(state.params, state.apply_fn, *data))
    assert final < losses[0] / 5, (losses[0], final)
    assert int(state.step) == 150


def test_train_state_matches_optax(data):
    # The gradient's global norm exceeds the clipping bound at first, so both stages act.
    state0 = linen_state(make_tx())
    grads = jax.grad(linen_loss)(state0.params, state0.apply_fn, *data)
    assert float(optax.tree.norm(grads)) > 1.0

    ours, our_losses = run_linen(state0, data, 20)
    reference_tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2))
    theirs, their_losses = run_linen(linen_state(reference_tx), data, 20)

    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-5)
    # Each Adam step agrees to ~1e-5 relative: optx computes the bias correction 1 - b2**t
    # from the stored 1 - b2 (hyperparams.bias_correction), optax as 1 - float32(b2)**t,
    # which is off by up to 3e-5 relative for small t. Twenty steps of about lr each then
    # agree to 20 * lr * 1e-5 absolute, whatever the size of the parameter.
    chex.assert_trees_all_close(ours.params, theirs.params, rtol=1e-5, atol=20 * 1e-2 * 1e-5)
    # The moments agree too, to 1e-4 of their largest entry: they average gradients taken
    # at parameters that differ by the round-off above. (optax's adamw state is (adam,
    # decay, lr); optx's is the same with the hyperparameters in each stage's state.)
    our_adam, their_adam = ours.opt_state[1][0], theirs.opt_state[1][0]
    for ours_moment, theirs_moment in ((our_adam.mu, their_adam.mu), (our_adam.nu, their_adam.nu)):
        scale = max(float(jnp.max(jnp.abs(leaf))) for leaf in jax.tree.leaves(theirs_moment))
        chex.assert_trees_all_close(ours_moment, theirs_moment, rtol=1e-5, atol=1e-4 * scale)


def test_train_state_hyperparams_without_recompiling(data):
    state, _ = run_linen(linen_state(make_tx()), data, 1)  # compiled outside the count
    got = optx.get_hyperparams(state.opt_state)
    assert list(got) == [
        "max_norm",
        "b1",
        "b2",
        "eps",
        "eps_root",
        "weight_decay",
        "learning_rate",
    ]
    np.testing.assert_allclose(got["learning_rate"], 1e-2, rtol=1e-7)
    np.testing.assert_allclose(got["b2"], 0.999, rtol=1e-7)
    np.testing.assert_allclose(got["max_norm"], 1.0)

    with count_compiles("linen_step") as compiled:
        # A zero learning rate freezes the parameters (weight decay is scaled by it too).
        frozen = state.replace(opt_state=optx.set_hyperparams(state.opt_state, learning_rate=0.0))
        assert float(optx.get_hyperparams(frozen.opt_state)["learning_rate"]) == 0.0
        after, _ = run_linen(frozen, data, 3)
        chex.assert_trees_all_equal(after.params, state.params)
        assert int(after.step) == 4

        # Back to a positive learning rate: it trains again.
        resumed = after.replace(
            opt_state=optx.set_hyperparams(after.opt_state, learning_rate=3e-2, max_norm=0.5)
        )
        trained, _ = run_linen(resumed, data, 3)
        assert not np.allclose(
            trained.params["Dense_0"]["kernel"], state.params["Dense_0"]["kernel"]
        )
    assert compiled == [], "set_hyperparams recompiled the jitted train step"

    # Setting the learning rate in the state is the same as building the optimizer with it.
    state0 = linen_state(make_tx())
    changed = state0.replace(opt_state=optx.set_hyperparams(state0.opt_state, learning_rate=3e-2))
    ours, _ = run_linen(changed, data, 5)
    with count_compiles("linen_step") as compiled:
        # A different configuration is a different static `tx`: the counter sees that compile.
        built, _ = run_linen(linen_state(make_tx(3e-2)), data, 5)
    assert len(compiled) == 1
    chex.assert_trees_all_equal(ours.params, built.params)


# ---------------------------------------------------------------------------------------
# nnx + nnx.Optimizer


class NnxMLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(3, 16, rngs=rngs)
        self.out = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jnp.tanh(self.hidden(x)))


def nnx_loss(model: NnxMLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


@nnx.jit
def nnx_step(model: NnxMLP, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    loss, grads = nnx.value_and_grad(nnx_loss)(model, x, y)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def nnx_set_learning_rate(optimizer: nnx.Optimizer, learning_rate: jax.Array) -> None:
    optimizer.opt_state = optx.set_hyperparams(optimizer.opt_state, learning_rate=learning_rate)


def nnx_setup(tx: optax.GradientTransformation) -> tuple[NnxMLP, nnx.Optimizer]:
    model = NnxMLP(nnx.Rngs(0))
    return model, nnx.Optimizer(model, tx, wrt=nnx.Param)


def params_of(model: NnxMLP) -> dict:
    return jax.tree.map(jnp.copy, nnx.to_pure_dict(nnx.state(model, nnx.Param)))


def test_nnx_optimizer_trains(data):
    model, optimizer = nnx_setup(make_tx())
    first = float(nnx_step(model, optimizer, *data))
    for _ in range(149):
        nnx_step(model, optimizer, *data)
    final = float(nnx_loss(model, *data))
    assert final < first / 5, (first, final)
    assert int(optimizer.step[...]) == 150


def test_nnx_opt_state_holds_hyperparams_in_variables():
    model, optimizer = nnx_setup(make_tx())
    # nnx wraps every leaf of the state in a Variable (OptState); the accessors see through
    # them and `set_hyperparams` keeps them.
    state = optimizer.opt_state
    assert all(
        isinstance(v, nnx.Variable)
        for v in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, nnx.Variable))
    )
    got = optx.get_hyperparams(state)
    assert all(isinstance(v, jax.Array) for v in got.values())
    np.testing.assert_allclose(got["learning_rate"], 1e-2, rtol=1e-7)
    np.testing.assert_allclose(got["b2"], 0.999, rtol=1e-7)
    new = optx.set_hyperparams(state, learning_rate=0.5)
    assert jax.tree.structure(new) == jax.tree.structure(state)
    assert float(optx.get_hyperparams(new)["learning_rate"]) == 0.5
    assert float(optx.get_hyperparams(state)["learning_rate"]) == np.float32(1e-2)  # unchanged
    del model


def test_nnx_hyperparams_without_recompiling(data):
    model, optimizer = nnx_setup(make_tx())
    nnx_step(model, optimizer, *data)  # compiled outside the count
    nnx_set_learning_rate(optimizer, jnp.float32(1e-2))
    with count_compiles("nnx_step") as compiled:
        # Written back by assignment, outside any transform.
        optimizer.opt_state = optx.set_hyperparams(optimizer.opt_state, learning_rate=0.0)
        before = params_of(model)
        for _ in range(3):
            nnx_step(model, optimizer, *data)
        chex.assert_trees_all_equal(params_of(model), before)

        # Written back in place with `nnx.update`.
        nnx.update(
            optimizer.opt_state,
            nnx.state(optx.set_hyperparams(optimizer.opt_state, learning_rate=3e-2)),
        )
        np.testing.assert_allclose(optx.get_hyperparams(optimizer.opt_state)["learning_rate"], 3e-2)
        nnx_step(model, optimizer, *data)
        assert not np.allclose(params_of(model)["hidden"]["kernel"], before["hidden"]["kernel"])

        # Set inside an `nnx.jit`-compiled function, with a traced value.
        with count_compiles("nnx_set_learning_rate") as compiled_set:
            nnx_set_learning_rate(optimizer, jnp.float32(0.0))
        assert compiled_set == []
        before = params_of(model)
        nnx_step(model, optimizer, *data)
        chex.assert_trees_all_equal(params_of(model), before)
    assert compiled == [], "set_hyperparams recompiled the nnx.jit train step"
    assert int(optimizer.step[...]) == 6

    with count_compiles("nnx_step") as compiled:
        # A different configuration is a different static `tx`: the counter sees that compile.
        other_model, other_optimizer = nnx_setup(make_tx(3e-2))
        nnx_step(other_model, other_optimizer, *data)
    assert len(compiled) == 1


# nnx.Optimizer calls tx.init on Variables (whose arrays sit at 'head/bias/value') but
# tx.update on plain arrays ('head/bias'); optx names both 'head/bias', so a regex anchored at
# the end selects the same parameters at init and at update.
def test_nnx_regex_labels_anchored_at_the_end(data):
    tx = optx.partition(
        {"adam": optx.adam(1e-2), "momentum": optx.sgd(1e-2, momentum=0.9)},
        {r"bias$": "adam", r".*": "momentum"},
    )
    model, optimizer = nnx_setup(tx)
    first = float(nnx_step(model, optimizer, *data))
    for _ in range(20):
        nnx_step(model, optimizer, *data)
    assert float(nnx_loss(model, *data)) < first


def test_nnx_masked_regex_selects_the_same_leaves_at_init_and_update(data):
    # Adam's scaling for the kernels, plain SGD for the rest.
    tx = optx.chain(
        optx.masked(optx.scale_by_adam(), r"kernel$"), optx.scale_by_learning_rate(1e-2)
    )
    model, optimizer = nnx_setup(tx)
    before = float(nnx_loss(model, *data))
    for _ in range(5):
        nnx_step(model, optimizer, *data)
    assert float(nnx_loss(model, *data)) < before
