"""Missing gradients: `skip_missing`."""

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close

import optx

try:
    from tests import registry
except ImportError:
    import registry

PARAMS = {"w": jnp.array([1.0, -2.0, 0.5]), "b": jnp.array([0.3, -0.1]), "k": jnp.ones((2, 3))}


def grads_at(step, params=PARAMS):
    """Gradients that differ per step and per leaf."""
    return jax.tree.map(lambda p: jnp.sin(p + 0.3 * step) + 0.1 * step, params)


def numpy_adam(grads, params, lr=0.1, b1=0.9, b2=0.999, eps=1e-8):
    """Keras's Adam with `None` gradients skipped: the count is global, advancing every step."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    mu = {k: np.zeros_like(v) for k, v in p.items()}
    nu = {k: np.zeros_like(v) for k, v in p.items()}
    for t, g in enumerate(grads, start=1):
        for k, gk in g.items():
            if gk is None:
                continue
            gk = np.asarray(gk, np.float64)
            mu[k] = b1 * mu[k] + (1 - b1) * gk
            nu[k] = b2 * nu[k] + (1 - b2) * gk**2
            m_hat, v_hat = mu[k] / (1 - b1**t), nu[k] / (1 - b2**t)
            p[k] = p[k] - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p, mu, nu


def numpy_momentum(grads, params, lr=0.1, momentum=0.9):
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    trace = {k: np.zeros_like(v) for k, v in p.items()}
    for g in grads:
        for k, gk in g.items():
            if gk is not None:
                trace[k] = np.asarray(gk, np.float64) + momentum * trace[k]
                p[k] = p[k] - lr * trace[k]
    return p, trace


def run(tx, grads, params=PARAMS, jit=False):
    update = jax.jit(tx.update) if jit else tx.update
    state = tx.init(params)
    for g in grads:
        updates, state = update(g, state, params)
        params = optx.apply_updates(params, updates)
    return params, state


def drop(grads, key):
    return {k: (None if k == key else v) for k, v in grads.items()}


@pytest.mark.parametrize("jit", [False, True])
def test_one_step_adam_leaves_the_missing_parameter_and_its_slots(jit):
    tx = optx.skip_missing(optx.adam(0.1))
    g0, g1 = grads_at(0), drop(grads_at(1), "b")
    params, before = run(tx, [g0], jit=jit)
    update = jax.jit(tx.update) if jit else tx.update
    updates, state = update(g1, before, params)
    assert updates["b"] is None
    new_params = optx.apply_updates(params, updates)
    chex.assert_trees_all_equal(new_params["b"], params["b"])
    adam_before, adam_after = before[0], state[0]
    chex.assert_trees_all_equal(adam_after.mu["b"], adam_before.mu["b"])
    chex.assert_trees_all_equal(adam_after.nu["b"], adam_before.nu["b"])
    assert int(adam_after.count) == 2  # the count is global
    expected, mu, nu = numpy_adam([g0, g1], PARAMS)
    assert_close("params", new_params, expected, rtol=1e-5)
    assert_close("mu", adam_after.mu, mu, rtol=1e-5)
    assert_close("nu", adam_after.nu, nu, rtol=1e-5)


def test_one_step_momentum_leaves_the_missing_trace():
    tx = optx.skip_missing(optx.sgd(0.1, momentum=0.9))
    g0, g1 = grads_at(0), drop(grads_at(1), "w")
    params, state = run(tx, [g0])
    updates, new_state = tx.update(g1, state, params)
    assert updates["w"] is None
    chex.assert_trees_all_equal(new_state[0].trace["w"], state[0].trace["w"])
    new_params = optx.apply_updates(params, updates)
    chex.assert_trees_all_equal(new_params["w"], params["w"])
    expected, trace = numpy_momentum([g0, g1], PARAMS)
    assert_close("params", new_params, expected, rtol=1e-5)
    assert_close("trace", new_state[0].trace, trace, rtol=1e-5)
    # The other leaves match the inner run on the subtree without the missing leaf.
    sub = {k: v for k, v in PARAMS.items() if k != "w"}
    inner = optx.sgd(0.1, momentum=0.9)
    sub_params, sub_state = run(inner, [{k: g0[k] for k in sub}, {k: g1[k] for k in sub}], sub)
    chex.assert_trees_all_close({k: new_params[k] for k in sub}, sub_params)
    chex.assert_trees_all_close({k: new_state[0].trace[k] for k in sub}, sub_state[0].trace)


def alternating(steps=20):
    keys = list(PARAMS)
    grads = []
    for t in range(steps):
        g = grads_at(t)
        if t % 4 != 3:  # every fourth step has all its gradients
            g = drop(g, keys[t % len(keys)])
        grads.append(g)
    return grads


@pytest.mark.parametrize("jit", [False, True])
def test_alternating_pattern_adam_matches_numpy(jit):
    grads = alternating()
    params, state = run(optx.skip_missing(optx.adam(0.1)), grads, jit=jit)
    expected, mu, nu = numpy_adam(grads, PARAMS)
    assert_close("params", params, expected, rtol=1e-5)
    assert_close("mu", state[0].mu, mu, rtol=1e-5)
    assert_close("nu", state[0].nu, nu, rtol=1e-5)
    assert int(state[0].count) == len(grads)


@pytest.mark.parametrize("jit", [False, True])
def test_alternating_pattern_momentum_matches_numpy(jit):
    grads = alternating()
    params, state = run(optx.skip_missing(optx.sgd(0.1, momentum=0.9)), grads, jit=jit)
    expected, trace = numpy_momentum(grads, PARAMS)
    assert_close("params", params, expected, rtol=1e-5)
    assert_close("trace", state[0].trace, trace, rtol=1e-5)


@pytest.mark.parametrize("jit", [False, True])
def test_without_none_it_is_the_inner_bit_for_bit(jit):
    inner = optx.adamw(0.1, weight_decay=0.1)
    tx = optx.skip_missing(inner)
    grads = [grads_at(t) for t in range(5)]
    got = run(tx, grads, jit=jit)
    expected = run(inner, grads, jit=jit)
    chex.assert_trees_all_equal(got, expected)


def test_state_is_the_inner_state():
    inner = optx.adam(0.1)
    state = optx.skip_missing(inner).init(PARAMS)
    chex.assert_trees_all_equal_structs(state, inner.init(PARAMS))
    # A state made by the inner works with the wrapper and back.
    _, state = optx.skip_missing(inner).update(drop(grads_at(0), "b"), state, PARAMS)
    inner.update(grads_at(1), state, PARAMS)
    assert optx.get_hyperparams(state)["learning_rate"] == pytest.approx(0.1)


def test_a_new_none_pattern_compiles_once_more():
    tx = optx.skip_missing(optx.adam(0.1))
    traces = []

    def step(g, s, p):
        traces.append(1)
        return tx.update(g, s, p)

    update = jax.jit(step)
    state = tx.init(PARAMS)
    for g in [drop(grads_at(0), "w"), drop(grads_at(1), "w"), grads_at(2), grads_at(3)]:
        _, state = update(g, state, PARAMS)
    assert len(traces) == 2


def test_inside_chain():
    grads = alternating(8)
    params, state = run(optx.chain(optx.skip_missing(optx.adam(0.1))), grads)
    expected, mu, _ = numpy_adam(grads, PARAMS)
    assert_close("params", params, expected, rtol=1e-5)
    assert_close("mu", state[0][0].mu, mu, rtol=1e-5)


def test_wrapping_a_chain_with_global_clipping():
    # The zeros filled in for a missing gradient leave the global norm as it is.
    tx = optx.skip_missing(optx.chain(optx.clip_by_global_norm(1.0), optx.sgd(0.1, 0.9)))
    grads = alternating(8)
    params, state = run(tx, grads)
    expected, trace = numpy_momentum([_clipped(g, 1.0) for g in grads], PARAMS)
    assert_close("params", params, expected, rtol=1e-5)
    assert_close("trace", state[1][0].trace, trace, rtol=1e-5)


def _clipped(g, max_norm):
    """``g`` clipped to a global norm of ``max_norm`` over its present leaves."""
    present = {k: np.asarray(v, np.float64) for k, v in g.items() if v is not None}
    norm = np.sqrt(sum(np.sum(v**2) for v in present.values()))
    factor = min(1.0, max_norm / norm)
    return {k: None if v is None else factor * present[k] for k, v in g.items()}


def test_muon_with_a_missing_matrix():
    params = {"k": jnp.ones((4, 3)) * 0.5, "m": jnp.arange(6.0).reshape(2, 3) / 6, "b": jnp.ones(3)}
    tx = optx.skip_missing(optx.muon(0.1))
    state = tx.init(params)
    g0 = grads_at(0, params)
    updates, state = tx.update(g0, state, params)
    params = optx.apply_updates(params, updates)
    g1 = drop(grads_at(1, params), "k")
    updates, new_state = tx.update(g1, state, params)
    assert updates["k"] is None
    new_params = optx.apply_updates(params, updates)
    chex.assert_trees_all_equal(new_params["k"], params["k"])
    slots = _slots_of(new_state, "k", params["k"].shape)
    assert len(slots) >= 1  # muon's momentum of `k`
    for path, new in slots.items():
        chex.assert_trees_all_equal(new, _slots_of(state, "k", params["k"].shape)[path])
    assert not np.allclose(new_params["m"], params["m"])
    assert not np.allclose(new_params["b"], params["b"])


def _slots_of(state, key, shape):
    """{path: leaf} of the state leaves under a dict key ``key`` with the parameter's shape."""
    return {
        jax.tree_util.keystr(path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
        if path[-1] == jax.tree_util.DictKey(key) and np.shape(leaf) == shape
    }


def test_masked_inner_with_a_missing_leaf():
    inner = optx.masked(optx.sgd(0.1, momentum=0.9), {"w": True, "b": True, "k": False})
    tx = optx.skip_missing(inner)
    grads = alternating(8)
    params, state = run(tx, grads)
    expected, trace = numpy_momentum(grads, PARAMS)
    assert_close("w, b", [params["w"], params["b"]], [expected["w"], expected["b"]], rtol=1e-5)
    assert_close(
        "trace", [state.inner_state[0].trace[k] for k in "wb"], [trace["w"], trace["b"]], 1e-5
    )
    # `k` is outside the mask: its updates pass through as the raw gradients.
    k = np.asarray(PARAMS["k"], np.float64)
    for g in grads:
        if g["k"] is not None:
            k = k + np.asarray(g["k"], np.float64)
    assert_close("k", params["k"], k, rtol=1e-5)


def test_adafactor_runs():
    params = {"w": jnp.ones((256, 256)), "b": jnp.ones(3)}
    tx = optx.skip_missing(optx.adafactor(0.1))
    state = tx.init(params)
    for t in range(3):
        g = grads_at(t, params)
        if t == 1:
            g = drop(g, "w")
        updates, new_state = tx.update(g, state, params)
        chex.assert_trees_all_equal_structs(new_state, state)
        params = optx.apply_updates(params, updates)
        state = new_state
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(params))


def test_without_params_shapes_come_from_the_state():
    tx = optx.skip_missing(optx.adam(0.1))
    state = tx.init(PARAMS)
    g = drop(grads_at(0), "k")
    with_params = tx.update(g, state, PARAMS)
    without = tx.update(g, state)
    chex.assert_trees_all_equal(with_params, without)


def test_all_none_raises():
    tx = optx.skip_missing(optx.adam(0.1))
    grads = {k: None for k in PARAMS}
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`skip_missing` needs a gradient for at least one parameter. Received: no "
            "gradients (all 3 are None: 'b', 'k', 'w')."
        ),
    ):
        tx.update(grads, tx.init(PARAMS), PARAMS)


def test_no_params_and_no_slots_raises():
    tx = optx.skip_missing(optx.sgd(0.1))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`skip_missing` needs the parameters to fill in missing gradients when the state "
            "of `chain` holds no per-parameter slot to take their shapes from. Received: "
            "params=None and no gradient for 'b'. Call `update(updates, state, params)`."
        ),
    ):
        tx.update(drop(grads_at(0), "b"), tx.init(PARAMS))


def test_params_of_another_structure_raise():
    tx = optx.skip_missing(optx.sgd(0.1))
    with pytest.raises(
        ValueError, match=re.escape("`skip_missing` needs params with the structure")
    ):
        tx.update(drop(grads_at(0), "b"), tx.init(PARAMS), {"w": PARAMS["w"]})


def test_inner_must_be_a_transform():
    with pytest.raises(TypeError, match=re.escape("`skip_missing` needs inner")):
        optx.skip_missing(3)


def _nested(seed, scale):
    rng = np.random.RandomState(seed)
    draw = lambda *shape: jnp.asarray(scale * rng.standard_normal(shape), jnp.float32)  # noqa: E731
    return {
        "dense": {"kernel": draw(3, 4), "bias": draw(4)},
        "layers": [{"w": draw(2, 3)}, draw(5)],
        "scale": draw(),
    }


@pytest.mark.parametrize("entry", list(registry.REGISTRY.values()), ids=list(registry.REGISTRY))
def test_every_registered_transform_takes_the_zero_filled_path(entry):
    """Each building block and optimizer runs on zeros for a missing leaf, keeping it as is."""
    tx = optx.skip_missing(entry())
    params = _nested(0, 1.0)
    state = tx.init(params)
    for t, (group, key) in enumerate([("dense", "bias"), (("layers", 0), "w")]):
        g = _nested(100 + t, 2.0)
        _at(g, group)[key] = None
        updates, new_state = tx.update(g, state, params, **entry.extra)
        chex.assert_trees_all_equal_structs(new_state, state)
        assert _at(updates, group)[key] is None
        new_params = optx.apply_updates(params, updates)
        chex.assert_trees_all_equal(_at(new_params, group)[key], _at(params, group)[key])
        chex.assert_tree_all_finite(new_params)
        old_slots, new_slots = (_slots(s, params, group, key) for s in (state, new_state))
        chex.assert_trees_all_equal(new_slots, old_slots)
        params, state = new_params, new_state


def _at(tree, group):
    return tree[group[0]][group[1]] if isinstance(group, tuple) else tree[group]


def _slots(state, params, group, key):
    """The state leaves at the path of ``params``'s leaf ``group/key``, with its shape."""
    shape = np.shape(_at(params, group)[key])
    at = tuple(
        jax.tree_util.SequenceKey(k) if isinstance(k, int) else jax.tree_util.DictKey(k)
        for k in (*(group if isinstance(group, tuple) else (group,)), key)
    )
    return {
        jax.tree_util.keystr(path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
        if tuple(path[-len(at) :]) == at and np.shape(leaf) == shape
    }
