"""`optx.get_hyperparams` / `optx.set_hyperparams`: names, errors, storage and vmap sweeps.

DESIGN D2: every numeric hyperparameter is a float32 scalar in the state (a decay rate with
the residual that keeps ``1 - b`` exact to float32 round-off); changing them never
recompiles, and `jax.vmap` can sweep them in one compiled program.
"""

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import count_compiles
from hypothesis import given, settings
from hypothesis import strategies as st

import optx

PARAMS = {"bias": jnp.ones(2), "kernel": jnp.ones((2, 2))}


def names(tx: optx.GradientTransformationLike) -> list[str]:
    return list(optx.get_hyperparams(tx.init(PARAMS)))


def as_floats(hyperparams: dict[str, jax.Array]) -> dict[str, float]:
    return {k: float(v) for k, v in hyperparams.items()}


# ---------------------------------------------------------------------------------------
# Names


def test_flat_names_of_one_optimizer():
    state = optx.adamw(1e-3, weight_decay=1e-2).init(PARAMS)
    got = as_floats(optx.get_hyperparams(state))
    assert list(got) == ["b1", "b2", "eps", "eps_root", "weight_decay", "learning_rate"]
    np.testing.assert_allclose(list(got.values()), [0.9, 0.999, 1e-8, 0.0, 1e-2, 1e-3], rtol=1e-6)


def test_shared_name_is_qualified_by_position():
    tx = optx.chain(optx.clip_by_global_norm(1.0), optx.clip_by_global_norm(2.0), optx.sgd(0.1))
    got = as_floats(optx.get_hyperparams(tx.init(PARAMS)))
    assert got == {"0/max_norm": 1.0, "1/max_norm": 2.0, "learning_rate": np.float32(0.1)}


def test_shared_name_in_nested_chains_is_qualified_by_the_full_position():
    tx = optx.chain(optx.adam(1e-3), optx.adam(1e-2))
    assert names(tx) == [
        "0/0/b1",
        "0/0/b2",
        "0/0/eps",
        "0/0/eps_root",
        "0/1/learning_rate",
        "1/0/b1",
        "1/0/b2",
        "1/0/eps",
        "1/0/eps_root",
        "1/1/learning_rate",
    ]


def test_named_chain_qualifies_by_name():
    tx = optx.named_chain(
        ("clip", optx.clip_by_global_norm(1.0)),
        ("opt", optx.chain(optx.clip_by_global_norm(2.0), optx.adam(1e-3))),
    )
    got = as_floats(optx.get_hyperparams(tx.init(PARAMS)))
    assert list(got) == [
        "clip/max_norm",
        "opt/0/max_norm",
        "b1",
        "b2",
        "eps",
        "eps_root",
        "learning_rate",
    ]
    assert got["clip/max_norm"] == 1.0
    assert got["opt/0/max_norm"] == 2.0


def test_partition_qualifies_by_label():
    tx = optx.partition(
        {"decayed": optx.adamw(1e-3), "plain": optx.adam(1e-2)},
        {"kernel": "decayed", "bias": "plain"},
    )
    got = as_floats(optx.get_hyperparams(tx.init(PARAMS)))
    assert list(got) == [
        "decayed/0/b1",
        "decayed/0/b2",
        "decayed/0/eps",
        "decayed/0/eps_root",
        "weight_decay",  # only one transform has it: not qualified
        "decayed/2/learning_rate",
        "plain/0/b1",
        "plain/0/b2",
        "plain/0/eps",
        "plain/0/eps_root",
        "plain/1/learning_rate",
    ]
    assert got["decayed/2/learning_rate"] == np.float32(1e-3)
    assert got["plain/1/learning_rate"] == np.float32(1e-2)


def test_no_hyperparams():
    assert optx.get_hyperparams(optx.identity().init(PARAMS)) == {}
    state = optx.identity().init(PARAMS)
    assert optx.set_hyperparams(state) is state


# ---------------------------------------------------------------------------------------
# Setting


def test_set_by_bare_name():
    tx = optx.chain(optx.clip_by_global_norm(1.0), optx.clip_by_global_norm(2.0), optx.sgd(0.1))
    state = optx.set_hyperparams(tx.init(PARAMS), learning_rate=0.5)
    assert as_floats(optx.get_hyperparams(state)) == {
        "0/max_norm": 1.0,
        "1/max_norm": 2.0,
        "learning_rate": 0.5,
    }
    updates, _ = tx.update({"bias": jnp.full(2, 0.1), "kernel": jnp.zeros((2, 2))}, state)
    np.testing.assert_allclose(updates["bias"], [-0.05, -0.05], rtol=1e-6)


def test_set_by_qualified_name():
    tx = optx.chain(optx.scale_by_learning_rate(1e-3), optx.scale_by_learning_rate(1e-2))
    state = tx.init(PARAMS)
    assert names(tx) == ["0/learning_rate", "1/learning_rate"]
    new = optx.set_hyperparams(state, {"1/learning_rate": 0.1})
    got = as_floats(optx.get_hyperparams(new))
    assert got == {"0/learning_rate": np.float32(1e-3), "1/learning_rate": np.float32(0.1)}
    updates, _ = tx.update({"bias": jnp.ones(2), "kernel": jnp.ones((2, 2))}, new)
    np.testing.assert_allclose(updates["bias"], [1e-4, 1e-4], rtol=1e-6)  # (-1e-3) * (-0.1)
    # The input state is not modified.
    assert float(optx.get_hyperparams(state)["1/learning_rate"]) == np.float32(1e-2)


def test_set_unshared_name_by_its_qualified_name_too():
    state = optx.adam(1e-3).init(PARAMS)
    by_qualified = optx.set_hyperparams(state, {"1/learning_rate": 0.1, "0/b1": 0.5})
    by_bare = optx.set_hyperparams(state, learning_rate=0.1, b1=0.5)
    chex.assert_trees_all_equal(by_qualified, by_bare)


def test_set_in_named_chain_and_partition():
    tx = optx.named_chain(
        ("clip", optx.clip_by_global_norm(1.0)),
        ("opt", optx.chain(optx.clip_by_global_norm(2.0), optx.adam(1e-3))),
    )
    state = optx.set_hyperparams(tx.init(PARAMS), {"clip/max_norm": 3.0}, learning_rate=0.25)
    got = as_floats(optx.get_hyperparams(state))
    assert (got["clip/max_norm"], got["opt/0/max_norm"], got["learning_rate"]) == (3.0, 2.0, 0.25)

    tx = optx.partition(
        {"decayed": optx.adamw(1e-3), "plain": optx.adam(1e-2)},
        {"kernel": "decayed", "bias": "plain"},
    )
    state = optx.set_hyperparams(tx.init(PARAMS), {"plain/1/learning_rate": 0.0})
    updates, _ = tx.update(PARAMS, state, PARAMS)
    np.testing.assert_array_equal(updates["bias"], np.zeros(2))
    assert np.all(np.asarray(updates["kernel"]) < 0)


def test_set_keeps_structure_shapes_and_dtypes():
    tx = optx.chain(optx.clip_by_global_norm(1.0), optx.adamw(1e-3))
    state = tx.init({"w": jnp.ones(3, jnp.bfloat16)})
    new = optx.set_hyperparams(state, learning_rate=np.float64(0.1), b2=jnp.asarray(0.99))
    chex.assert_trees_all_equal_shapes_and_dtypes(new, state)
    for value in optx.get_hyperparams(new).values():
        assert value.dtype == jnp.float32


# ---------------------------------------------------------------------------------------
# Errors (each message checked against its exact text)


def test_unknown_name_lists_known_names():
    state = optx.adam(1e-3).init(PARAMS)
    message = (
        "`set_hyperparams` got an unknown hyperparameter 'learning_rat'. "
        "Received: learning_rat=0.1. This state has: 'b1', 'b2', 'eps', 'eps_root', "
        "'learning_rate'. Did you mean 'learning_rate'?"
    )
    with pytest.raises(KeyError, match=re.escape(message)) as info:
        optx.set_hyperparams(state, learning_rat=0.1)
    assert info.value.args[0] == message


def test_unknown_name_on_a_state_without_hyperparams():
    message = (
        "`set_hyperparams` got an unknown hyperparameter 'learning_rate'. "
        "Received: learning_rate=0.1. This state has: none."
    )
    with pytest.raises(KeyError, match=re.escape(message)):
        optx.set_hyperparams(optx.identity().init(PARAMS), learning_rate=0.1)


def test_ambiguous_bare_name_lists_qualified_names():
    tx = optx.chain(optx.clip_by_global_norm(1.0), optx.clip_by_global_norm(2.0), optx.sgd(0.1))
    message = (
        "`set_hyperparams` got 'max_norm', which 2 transforms of this state share. "
        "Received: max_norm=3.0. Use one of the qualified names: '0/max_norm', '1/max_norm'."
    )
    with pytest.raises(KeyError, match=re.escape(message)) as info:
        optx.set_hyperparams(tx.init(PARAMS), max_norm=3.0)
    assert info.value.args[0] == message


def test_ambiguous_bare_name_in_nested_chains():
    tx = optx.chain(optx.adam(1e-3), optx.adam(1e-2))
    message = (
        "`set_hyperparams` got 'learning_rate', which 2 transforms of this state share. "
        "Received: learning_rate=0.1. Use one of the qualified names: '0/1/learning_rate', "
        "'1/1/learning_rate'."
    )
    with pytest.raises(KeyError, match=re.escape(message)):
        optx.set_hyperparams(tx.init(PARAMS), learning_rate=0.1)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "learning_rate",
            -0.1,
            "`set_hyperparams` needs learning_rate finite and >= 0. Received: learning_rate=-0.1.",
        ),
        (
            "learning_rate",
            float("nan"),
            "`set_hyperparams` needs learning_rate finite and >= 0. Received: learning_rate=nan.",
        ),
        ("b1", 1.0, "`set_hyperparams` needs b1 in [0, 1). Received: b1=1.0."),
        ("b2", -0.5, "`set_hyperparams` needs b2 in [0, 1). Received: b2=-0.5."),
        (
            "eps",
            float("inf"),
            "`set_hyperparams` needs eps finite and >= 0. Received: eps=inf.",
        ),
    ],
)
def test_out_of_range_value(name, value, message):
    state = optx.adam(1e-3).init(PARAMS)
    with pytest.raises(ValueError, match=re.escape(message)):
        optx.set_hyperparams(state, **{name: value})


def test_out_of_range_array_scalar():
    state = optx.adam(1e-3).init(PARAMS)
    message = "`set_hyperparams` needs b1 in [0, 1). Received: b1=np.float64(1.5)."
    with pytest.raises(ValueError, match=re.escape(message)):
        optx.set_hyperparams(state, b1=np.float64(1.5))


def test_wrong_shape():
    state = optx.adam(1e-3).init(PARAMS)
    message = (
        "`set_hyperparams` needs learning_rate to be a scalar (or of the stored shape ()). "
        "Received: learning_rate of shape (3,)."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        optx.set_hyperparams(state, learning_rate=jnp.ones(3))


def test_wrong_type():
    state = optx.adam(1e-3).init(PARAMS)
    message = (
        "`set_hyperparams` needs learning_rate to be a real number. "
        "Received: learning_rate='fast' of type str."
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        optx.set_hyperparams(state, learning_rate="fast")


def test_traced_values_are_not_range_checked_but_shape_checked():
    state = optx.adam(1e-3).init(PARAMS)
    # A traced value cannot be checked without a host sync; it is stored as given.
    new = jax.jit(lambda s, lr: optx.set_hyperparams(s, learning_rate=lr))(state, -1.0)
    assert float(optx.get_hyperparams(new)["learning_rate"]) == -1.0
    message = (
        "`set_hyperparams` needs learning_rate to be a scalar (or of the stored shape ()). "
        "Received: learning_rate of shape (2,)."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        jax.jit(lambda s, lr: optx.set_hyperparams(s, learning_rate=lr))(state, jnp.ones(2))


# ---------------------------------------------------------------------------------------
# Decays are stored as 1 - b


def test_decays_keep_their_complement_to_float32_round_off():
    state = optx.adam(1e-3, b1=0.9, b2=0.999).init(PARAMS)
    h = state[0].hyperparams
    assert isinstance(h, optx.HyperParams)
    # The state speaks the public names and holds the values themselves...
    assert [e.name for e in h.entries] == ["b1", "b2", "eps", "eps_root"]
    assert float(h["b2"]) == float(np.float32(0.999))
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(h)[0]]
    assert not any("one_minus" in p for p in paths)
    # ... and what float32 rounded off, so that 1 - b is float32(1 - b) (computed in
    # float64), not 1 - float32(b), which is off by ~1.3e-5 relative for b = 0.999.
    assert h["b2"].dtype == h.complement("b2").dtype == jnp.float32
    assert float(h.complement("b2")) == float(np.float32(1 - 0.999))
    assert float(h.complement("b1")) == float(np.float32(1 - 0.9))
    naive = np.float32(1) - np.float32(0.999)
    assert abs(float(h.complement("b2")) - 1e-3) < abs(float(naive) - 1e-3) / 100

    got = optx.get_hyperparams(state)
    np.testing.assert_allclose(got["b2"], 0.999, rtol=1e-7)
    np.testing.assert_allclose(got["b1"], 0.9, rtol=1e-7)

    new = optx.set_hyperparams(state, b2=0.99)
    assert float(new[0].hyperparams.complement("b2")) == float(np.float32(1 - 0.99))
    np.testing.assert_allclose(optx.get_hyperparams(new)["b2"], 0.99, rtol=1e-7)

    # A traced value has no float64 form: 1 - b in float32.
    traced = jax.jit(lambda s, b: optx.set_hyperparams(s, b2=b))(state, jnp.float32(0.99))
    np.testing.assert_allclose(traced[0].hyperparams.complement("b2"), 0.01, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    learning_rate=st.floats(0.0, 10.0, allow_subnormal=False),
    b1=st.floats(0.0, 0.9999, allow_subnormal=False),
)
def test_set_get_round_trip(learning_rate, b1):
    state = optx.set_hyperparams(optx.adam(1e-3).init(PARAMS), learning_rate=learning_rate, b1=b1)
    got = optx.get_hyperparams(state)
    assert float(got["learning_rate"]) == float(np.float32(learning_rate))
    # 1 - b from b and its float32 residual: exact for b >= 0.5 (1 - float32(b) is exact
    # there), one rounding more below, where 1 - b >= 0.5 (one ulp: 2**-23 relative).
    np.testing.assert_allclose(
        state[0].hyperparams.complement("b1"), np.float32(1 - b1), rtol=2.0**-23, atol=0
    )
    np.testing.assert_allclose(got["b1"], b1, rtol=0, atol=1e-7)


# ---------------------------------------------------------------------------------------
# vmap sweeps: one compiled program for a batch of hyperparameters

_CURVATURE = jnp.array([1.0, 2.0, 4.0])
_TARGET = jnp.array([1.0, -2.0, 3.0])
_STEPS = 25


def quadratic(p: jax.Array) -> jax.Array:
    return 0.5 * jnp.sum(_CURVATURE * (p - _TARGET) ** 2)


def train(tx: optx.GradientTransformationLike, state: optx.OptState) -> jax.Array:
    def body(_: int, carry: tuple[jax.Array, optx.OptState]) -> tuple[jax.Array, optx.OptState]:
        p, s = carry
        updates, s = tx.update(jax.grad(quadratic)(p), s, p)
        return optx.apply_updates(p, updates), s

    params, _ = jax.lax.fori_loop(0, _STEPS, body, (jnp.zeros(3), state))
    return params


_SWEEP_TX = optx.chain(optx.clip_by_global_norm(5.0), optx.adam(1e-3))
_SWEEP_TRACES = []


def train_with(learning_rate: jax.Array, b1: jax.Array) -> tuple[jax.Array, optx.OptState]:
    _SWEEP_TRACES.append(1)
    state = _SWEEP_TX.init(jnp.zeros(3))
    state = optx.set_hyperparams(state, learning_rate=learning_rate, b1=b1)
    return train(_SWEEP_TX, state), state


@jax.jit
def sweep(learning_rates: jax.Array, b1s: jax.Array) -> tuple[jax.Array, optx.OptState]:
    return jax.vmap(train_with)(learning_rates, b1s)


def test_vmap_sweep_is_one_program_and_matches_sequential_runs():
    learning_rates = jnp.array([0.01, 0.05, 0.1, 0.3])
    b1s = jnp.array([0.9, 0.5, 0.9, 0.0])
    _SWEEP_TRACES.clear()
    with count_compiles("sweep") as compiled:
        swept, states = sweep(learning_rates, b1s)
        again, _ = sweep(learning_rates[::-1], b1s[::-1])  # new values, same program
    assert len(compiled) == 1
    assert len(_SWEEP_TRACES) == 1
    chex.assert_trees_all_close(again, swept[::-1], rtol=1e-6, atol=1e-7)

    # The state is batched: one hyperparameter per run.
    got = optx.get_hyperparams(states)
    np.testing.assert_allclose(got["learning_rate"], learning_rates)
    np.testing.assert_allclose(got["b1"], b1s, rtol=1e-6)

    # Each run equals a sequential run of the optimizer built with that learning rate.
    for i, (lr, b1) in enumerate(zip(learning_rates.tolist(), b1s.tolist(), strict=True)):
        tx = optx.chain(optx.clip_by_global_norm(5.0), optx.adam(lr, b1=b1))
        expected = jax.jit(train, static_argnums=0)(tx, tx.init(jnp.zeros(3)))
        chex.assert_trees_all_close(swept[i], expected, rtol=1e-5, atol=1e-6)
    # and the learning rate matters: the runs differ.
    assert len({tuple(np.round(np.asarray(r), 4)) for r in swept}) == len(learning_rates)


def test_set_on_a_batched_state_outside_vmap():
    _, states = sweep(jnp.array([0.01, 0.02, 0.03]), jnp.full(3, 0.9))
    new = optx.set_hyperparams(states, learning_rate=jnp.array([0.1, 0.2, 0.3]))
    np.testing.assert_allclose(optx.get_hyperparams(new)["learning_rate"], [0.1, 0.2, 0.3])
    new = optx.set_hyperparams(states, max_norm=1.0)  # a scalar is broadcast
    np.testing.assert_array_equal(optx.get_hyperparams(new)["max_norm"], np.ones(3))
    message = (
        "`set_hyperparams` needs learning_rate to be a scalar (or of the stored shape (3,)). "
        "Received: learning_rate of shape (2,)."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        optx.set_hyperparams(states, learning_rate=jnp.ones(2))


# ---------------------------------------------------------------------------------------
# optax's inject_hyperparams inside an optx chain


def test_optax_inject_hyperparams_nested_in_optx_chain():
    tx = optx.chain(
        optx.clip_by_global_norm(1.0), optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
    )
    state = tx.init(PARAMS)
    got = as_floats(optx.get_hyperparams(state))
    assert list(got) == ["max_norm", "b1", "b2", "eps", "eps_root", "learning_rate"]
    assert got["learning_rate"] == np.float32(1e-3)
    np.testing.assert_allclose(got["b1"], 0.9, rtol=1e-7)

    new = optx.set_hyperparams(state, learning_rate=0.1, max_norm=0.5)
    assert float(new[1].hyperparams["learning_rate"]) == np.float32(0.1)
    chex.assert_trees_all_equal_structs(new, state)
    grads = {"bias": jnp.full(2, 3.0), "kernel": jnp.full((2, 2), -1.0)}
    ours, _ = jax.jit(tx.update)(grads, new, PARAMS)
    # The reference injects too: optax's adam with float32-array betas rounds differently
    # (by ~7e-6) from optax's adam with Python-float betas.
    reference = optax.chain(
        optax.clip_by_global_norm(0.5), optax.inject_hyperparams(optax.adam)(learning_rate=0.1)
    )
    theirs, _ = reference.update(grads, reference.init(PARAMS), PARAMS)
    chex.assert_trees_all_close(ours, theirs, rtol=1e-6)


def test_optax_inject_hyperparams_shares_names_with_optx():
    tx = optx.chain(
        optx.adam(1e-3), optax.inject_hyperparams(optax.sgd)(learning_rate=0.1, momentum=0.9)
    )
    state = tx.init(PARAMS)
    assert list(optx.get_hyperparams(state)) == [
        "b1",
        "b2",
        "eps",
        "eps_root",
        "0/1/learning_rate",
        "1/learning_rate",
        "momentum",
    ]
    new = optx.set_hyperparams(state, {"1/learning_rate": 0.2}, momentum=0.5)
    assert float(new[1].hyperparams["learning_rate"]) == np.float32(0.2)
    assert float(new[1].hyperparams["momentum"]) == 0.5
    assert float(new[0][1].hyperparams["learning_rate"]) == np.float32(1e-3)


def test_set_accepts_scalars_of_any_real_dtype():
    state = optx.adam(1e-3).init(PARAMS)
    for value in (jnp.bfloat16(0.5), np.float16(0.5), jnp.float32(0.5), np.int64(2), 2):
        new = optx.set_hyperparams(state, learning_rate=value)
        stored = optx.get_hyperparams(new)["learning_rate"]
        assert stored.dtype == jnp.float32
        assert float(stored) == float(value)


def test_set_hyperparams_checks_with_the_transforms_own_ranges():
    params = {"w": jnp.ones((2, 3))}
    # SM3 allows b2 = 1 (its default); Adam does not: the rule is the transform's, not the name's.
    state = optx.set_hyperparams(optx.scale_by_sm3().init(params), b2=1.0)
    assert float(optx.get_hyperparams(state)["b2"]) == 1.0
    with pytest.raises(ValueError) as info:
        optx.set_hyperparams(optx.adam(0.1).init(params), b2=1.0)
    assert str(info.value) == "`set_hyperparams` needs b2 in [0, 1). Received: b2=1.0."
    with pytest.raises(ValueError) as info:
        optx.set_hyperparams(optx.ftrl(0.1).init(params), beta=-1.0)
    assert str(info.value) == "`set_hyperparams` needs beta finite and >= 0. Received: beta=-1.0."


def test_a_renamed_decay_goes_by_its_optimizers_argument_name():
    params = {"w": jnp.ones(2)}
    state = optx.signum(0.1, beta=0.5).init(params)
    assert set(optx.get_hyperparams(state)) == {"beta", "learning_rate"}
    with pytest.raises(ValueError) as info:
        optx.set_hyperparams(state, beta=2.0)
    assert str(info.value) == "`set_hyperparams` needs beta in [0, 1]. Received: beta=2.0."
    state = optx.set_hyperparams(optx.sgd(0.1, momentum=0.9).init(params), momentum=0.5)
    assert float(optx.get_hyperparams(state)["momentum"]) == 0.5
