"""`optx.make_step`: the hand-written step bit for bit, cached, donating, with its options."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, count_compiles

import optx


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def loss_with_aux(params, x, y):
    loss = loss_fn(params, x, y)
    return loss, {"twice": 2 * loss}


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    params = {
        "w1": jnp.asarray(rng.normal(size=(5, 8)), jnp.float32),
        "b1": jnp.zeros(8, jnp.float32),
        "w2": jnp.asarray(rng.normal(size=(8, 2)), jnp.float32),
    }
    x = jnp.asarray(rng.normal(size=(16, 5)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(16, 2)), jnp.float32)
    return params, x, y


def copy(tree):
    return jax.tree.map(jnp.copy, tree)


def hand_written(tx, loss=loss_fn):
    """The step README's manual recipe writes."""

    @functools.partial(
        jax.jit, donate_argnums=(0, 1), compiler_options=optx.compiler_options() or None
    )
    def step(params, state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return optx.apply_updates(params, updates), state, value

    return step


TRANSFORMS = {
    "adam": lambda: optx.adam(1e-2),
    "lion": lambda: optx.lion(1e-3),
    "clip_adamw_ema": lambda: optx.chain(
        optx.clip_by_global_norm(1.0), optx.adamw(1e-2, weight_decay=1e-2), optx.ema_params(0.9)
    ),
    "flat_sgd": lambda: optx.flatten(optx.sgd(1e-2, momentum=0.9)),
}


@pytest.mark.parametrize("name", TRANSFORMS)
def test_equals_the_hand_written_step_bit_for_bit(name):
    # The same jaxpr compiled with the same options on the same inputs: the same executable,
    # so the results are identical to the bit (no tolerance applies).
    tx = TRANSFORMS[name]()
    params, x, y = make_data()
    mine, theirs = copy(params), copy(params)
    s_mine, s_theirs = tx.init(mine), tx.init(theirs)
    step, manual = optx.make_step(loss_fn, tx), hand_written(tx)
    for _ in range(5):
        mine, s_mine, l_mine = step(mine, s_mine, x, y)
        theirs, s_theirs, l_theirs = manual(theirs, s_theirs, x, y)
        np.testing.assert_array_equal(l_mine, l_theirs)
    ours, reference = jax.tree.leaves((mine, s_mine)), jax.tree.leaves((theirs, s_theirs))
    for a, b in zip(ours, reference, strict=True):
        np.testing.assert_array_equal(a, b)


def test_flat_parameters():
    tx = optx.flatten(optx.adam(1e-2))
    params, x, y = make_data()
    flat = optx.flatten_tree(copy(params))
    state = tx.init(flat)
    step = optx.make_step(loss_fn, tx)
    new_flat, state, loss = step(flat, state, x, y)
    assert isinstance(new_flat, optx.FlatTree)
    # The same step on the tree, by hand: the flat path's numbers are the per-leaf path's
    # (flat buffers change only the layout of elementwise maths).
    tree_tx = optx.adam(1e-2)
    tree, _, tree_loss = hand_written(tree_tx)(copy(params), tree_tx.init(params), x, y)
    np.testing.assert_array_equal(loss, tree_loss)
    for a, b in zip(jax.tree.leaves(new_flat.unflatten()), jax.tree.leaves(tree), strict=True):
        # One Adam step: a few roundings of values of size lr = 1e-2 on parameters of size 1.
        np.testing.assert_allclose(a, b, rtol=0, atol=8 * np.finfo(np.float32).eps)


def test_rebuilding_with_an_equal_transform_does_not_recompile():
    params, x, y = make_data()
    with count_compiles("train_step") as compiled:
        for _ in range(3):  # a notebook cell re-run three times
            tx = optx.chain(optx.clip_by_global_norm(1.0), optx.adamw(1e-3))
            step = optx.make_step(loss_fn, tx)
            params, state, _ = step(copy(params), tx.init(params), x, y)
            params, state, _ = step(params, state, x, y)
    assert len(compiled) == 1, compiled
    assert optx.make_step(loss_fn, optx.adam(1e-3)) is optx.make_step(loss_fn, optx.adam(1e-3))
    # Another loss function, transform or option: another step.
    assert optx.make_step(loss_fn, optx.adam(1e-3)) is not optx.make_step(
        loss_fn, optx.adam(1e-3, b1=0.8)
    )
    assert optx.make_step(loss_fn, optx.adam(1e-3)) is not optx.make_step(
        loss_with_aux, optx.adam(1e-3), has_aux=True
    )
    assert optx.make_step(loss_fn, optx.adam(1e-3)) is not optx.make_step(
        loss_fn, optx.adam(1e-3), donate=False
    )


def test_changing_a_hyperparameter_does_not_recompile():
    params, x, y = make_data()
    tx = optx.adam(1e-3)
    step = optx.make_step(loss_fn, tx)
    state = tx.init(params)
    params = copy(params)
    with count_compiles("train_step") as compiled:
        params, state, _ = step(params, state, x, y)
        state = optx.set_hyperparams(state, learning_rate=1e-4)
        params, state, _ = step(params, state, x, y)
    assert len(compiled) <= 1, compiled
    assert float(optx.get_hyperparams(state)["learning_rate"]) == pytest.approx(1e-4)


@pytest.mark.parametrize("name", ["adam", "lion", "clip_adamw_ema"])
def test_donates_without_copies(name):
    tx = TRANSFORMS[name]()
    params, x, y = make_data()
    state = tx.init(params)
    step = optx.make_step(loss_fn, tx)
    hlo = step.lower(params, state, x, y).compile().as_text()
    # Every parameter and state array is an alias of an output, and XLA copies none of them.
    donated = len(jax.tree.leaves((params, state)))
    module = hlo.splitlines()[0]  # HloModule ..., input_output_alias={ {0}: (0, {}, may-alias), ...
    assert len(re.findall(r"\{\d*\}: \(\d+, \{\d*\}, (?:may|must)-alias\)", module)) == donated
    copies = re.findall(r"= \S+ copy\(", hlo)
    assert not copies, f"{len(copies)} copies in the compiled step"


def test_the_manual_step_in_the_wrong_order_copies():
    # The check above can fail: outputs (state, params) make XLA copy the arrays back.
    tx = optx.adam(1e-2)
    params, x, y = make_data()
    state = tx.init(params)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def wrong(params, state, x, y):
        grads = jax.grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return state, optx.apply_updates(params, updates)

    hlo = wrong.lower(params, state, x, y).compile().as_text()
    assert re.findall(r"= \S+ copy\(", hlo)


def test_donate_false_keeps_the_inputs():
    tx = optx.adam(1e-2)
    params, x, y = make_data()
    state = tx.init(params)
    step = optx.make_step(loss_fn, tx, donate=False)
    new, _, _ = step(params, state, x, y)
    assert not any(a.is_deleted() for a in jax.tree.leaves((params, state)))
    assert not np.array_equal(new["w1"], params["w1"])
    donated = optx.make_step(loss_fn, tx)
    donated(params, state, x, y)
    assert all(a.is_deleted() for a in jax.tree.leaves(params))


def test_has_aux():
    tx = optx.sgd(1e-2)
    params, x, y = make_data()
    step = optx.make_step(loss_with_aux, tx, has_aux=True)
    _, _, (loss, aux) = step(copy(params), tx.init(params), x, y)
    np.testing.assert_array_equal(aux["twice"], 2 * loss)  # one program: exact
    # The loss at the parameters before the step, as an eager call computes it: jit may
    # contract and reorder the two matrix products (5 and 8 terms) and the mean of 32
    # squares, a few tens of float32 roundings of the loss's size (tests/TOLERANCES.md).
    np.testing.assert_allclose(loss, loss_fn(params, x, y), rtol=64 * EPS32)


@pytest.mark.parametrize("has_aux", [False, True])
def test_value_for_reduce_on_plateau(has_aux):
    tx = optx.chain(optx.sgd(1e-2), optx.reduce_on_plateau(patience=1, factor=0.5))
    params, x, y = make_data()
    state = tx.init(params)
    fn = loss_with_aux if has_aux else loss_fn
    step = optx.make_step(fn, tx, has_aux=has_aux, extra_args=("value",))
    # The same x every step: the loss keeps falling, so the scale stays 1; then a batch
    # whose loss is far higher twice in a row halves it.
    params, state, _ = step(copy(params), state, x, y)
    for _ in range(3):
        params, state, _ = step(params, state, x, 100 * y)
    assert float(state[1].scale) < 1.0


def test_grad_and_value_fn_reach_update():
    def update(updates, state, params=None, *, value, grad, value_fn):
        # `grad` is the very array passed as the updates: u - g is exactly 0.
        zeros = jax.tree.map(lambda u, g: u - g, updates, grad)
        return zeros, (value, value_fn(params))

    tx = optax.GradientTransformationExtraArgs(lambda p: (jnp.zeros(()), jnp.zeros(())), update)
    params, x, y = make_data()
    step = optx.make_step(loss_fn, tx, extra_args=("value", "grad", "value_fn"), donate=False)
    new, (value, again), loss = step(params, tx.init(params), x, y)
    for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(value, loss)
    # value_fn recomputes the loss, a mean of 32 squares: each evaluation is off by at most
    # 32 eps of it (positive terms), whatever the order.
    np.testing.assert_allclose(again, loss, rtol=2 * 32 * np.finfo(np.float32).eps)


def test_optax_transform():
    tx = optax.adam(1e-2)
    params, x, y = make_data()
    mine, _, _ = optx.make_step(loss_fn, tx)(copy(params), tx.init(params), x, y)
    theirs, _, _ = hand_written(tx)(copy(params), tx.init(params), x, y)
    for a, b in zip(jax.tree.leaves(mine), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_array_equal(a, b)


def test_shardings_are_passed_to_jit():
    device = jax.devices()[0]
    replicated = jax.sharding.SingleDeviceSharding(device)
    tx = optx.adam(1e-2)
    params, x, y = make_data()
    step = optx.make_step(loss_fn, tx, out_shardings=(replicated, replicated, replicated))
    new, state, loss = step(copy(params), tx.init(params), x, y)
    assert all(a.sharding == replicated for a in jax.tree.leaves((new, state, loss)))
    # An equal sharding tree: the same step.
    assert step is optx.make_step(loss_fn, tx, out_shardings=(replicated, replicated, replicated))


def test_repr():
    step = optx.make_step(loss_with_aux, optx.adam(1e-3), has_aux=True)
    assert repr(step) == f"TrainStep(loss_with_aux, {optx.adam(1e-3)!r}, has_aux=True)"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"loss_fn": 3}, TypeError, "needs loss_fn to be a function"),
        ({"tx": "adam"}, TypeError, "needs tx to be a gradient transformation"),
        ({"has_aux": "yes"}, TypeError, "needs has_aux to be a bool. Received: has_aux='yes'"),
        ({"donate": 1}, TypeError, "needs donate to be a bool. Received: donate=1"),
        ({"extra_args": ("valu",)}, ValueError, "one of value, grad, value_fn. Received: 'valu'"),
        ({"compiler_options": [1]}, TypeError, "needs compiler_options to be a dict or None"),
    ],
)
def test_errors(kwargs, error, message):
    args = {"loss_fn": loss_fn, "tx": optx.adam(1e-3), **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        optx.make_step(args.pop("loss_fn"), args.pop("tx"), **args)
