"""`optx.constrain` and the constraints of `optx.constraints`, against NumPy and Keras."""

from __future__ import annotations

import dataclasses
import re

import chex
import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optx

cs = optx.constraints
EPS = 1e-7  # Keras's backend.epsilon()

# ---------------------------------------------------------------------------------------
# NumPy references (float64).


def np_norms(w, axis):
    return np.sqrt(np.sum(np.square(w), axis=axis, keepdims=True))


def np_nonneg(w):
    return w * (w >= 0)


def np_max_norm(w, max_value=2.0, axis=0):
    n = np_norms(w, axis)
    return w * np.clip(n, 0, max_value) / (EPS + n)


def np_unit_norm(w, axis=0):
    return w / (EPS + np_norms(w, axis))


def np_min_max_norm(w, min_value=0.0, max_value=1.0, rate=1.0, axis=0):
    n = np_norms(w, axis)
    desired = rate * np.clip(n, min_value, max_value) + (1 - rate) * n
    return w * desired / (EPS + n)


def np_simplex(x, scale=1.0):
    """Duchi et al. 2008, Figure 1, written as a loop."""
    v = np.asarray(x, np.float64).ravel()
    u = np.sort(v)[::-1]
    total, rho, theta = 0.0, 0, 0.0
    for j, uj in enumerate(u, 1):
        total += uj
        if uj - (total - scale) / j > 0:
            rho, theta = j, (total - scale) / j
    assert rho >= 1
    return np.maximum(v - theta, 0).reshape(np.shape(x))


def np_l1_ball(x, scale=1.0):
    x = np.asarray(x, np.float64)
    if np.abs(x).sum() <= scale:
        return x
    return np.sign(x) * np_simplex(np.abs(x), scale)


def np_l2_ball(x, scale=1.0):
    x = np.asarray(x, np.float64)
    n = np.sqrt(np.sum(x**2))
    return x if n <= scale else x * scale / n


def _rand(shape, seed=0, scale=1.0):
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def _close(got, expected, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------
# The constraints: NumPy references.

SHAPES = [(5,), (3, 4), (2, 3, 4)]


@pytest.mark.parametrize("shape", SHAPES)
def test_norm_constraints_match_numpy(shape):
    w = _rand(shape, scale=2.0)
    w64 = w.astype(np.float64)
    _close(cs.NonNeg()(w), np_nonneg(w64))
    axes = [0, -1, None] + ([(0, len(shape) - 1)] if len(shape) > 1 else [])
    for axis in axes:
        _close(cs.MaxNorm(1.5, axis)(w), np_max_norm(w64, 1.5, axis))
        _close(cs.UnitNorm(axis)(w), np_unit_norm(w64, axis))
        _close(cs.MinMaxNorm(1.0, 2.0, 0.5, axis)(w), np_min_max_norm(w64, 1.0, 2.0, 0.5, axis))


@pytest.mark.parametrize("shape", SHAPES)
def test_projections_match_numpy(shape):
    w = _rand(shape, seed=1, scale=2.0)
    w64 = w.astype(np.float64)
    _close(cs.Box(-0.5, 1.0)(w), np.clip(w64, -0.5, 1.0))
    _close(cs.Box(0.0, np.inf)(w), np.maximum(w64, 0))
    for scale in [0.5, 1.0, 3.0]:
        _close(cs.Simplex(scale)(w), np_simplex(w64, scale))
        _close(cs.L1Ball(scale)(w), np_l1_ball(w64, scale))
        _close(cs.L2Ball(scale)(w), np_l2_ball(w64, scale))


def test_projections_match_optax():
    x = jnp.asarray(_rand((7,), seed=2, scale=2.0))
    _close(cs.Simplex(2.0)(x), np.asarray(optax.projections.projection_simplex(x, 2.0)))
    _close(cs.L1Ball(2.0)(x), np.asarray(optax.projections.projection_l1_ball(x, 2.0)))
    _close(cs.L2Ball(2.0)(x), np.asarray(optax.projections.projection_l2_ball(x, 2.0)))
    _close(cs.Box(-1.0, 0.5)(x), np.asarray(optax.projections.projection_box(x, -1.0, 0.5)))


def test_projections_inside_the_set_are_the_identity():
    inside = jnp.array([0.1, -0.2, 0.3])
    chex.assert_trees_all_equal(cs.L1Ball(1.0)(inside), inside)
    chex.assert_trees_all_equal(cs.L2Ball(1.0)(inside), inside)
    chex.assert_trees_all_equal(cs.Box(-1.0, 1.0)(inside), inside)
    on_simplex = jnp.array([0.25, 0.5, 0.25])
    _close(cs.Simplex()(on_simplex), np.asarray(on_simplex, np.float64))


def test_l2_ball_and_norms_are_finite_at_zero():
    zero = jnp.zeros((2, 3))
    for c in [cs.L2Ball(), cs.MaxNorm(), cs.UnitNorm(), cs.MinMaxNorm(), cs.L1Ball()]:
        out = c(zero)
        chex.assert_tree_all_finite(out)
        chex.assert_trees_all_equal(out, zero)
    grad = jax.grad(lambda w: jnp.sum(cs.L2Ball()(w)))(jnp.zeros(3))
    chex.assert_tree_all_finite(grad)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_constraints_keep_the_dtype(dtype):
    w = jnp.asarray(_rand((3, 4), scale=2.0), dtype)
    for c in [
        cs.NonNeg(),
        cs.MaxNorm(),
        cs.UnitNorm(),
        cs.MinMaxNorm(),
        cs.Box(-1.0, 1.0),
        cs.Simplex(),
        cs.L1Ball(),
        cs.L2Ball(),
    ]:
        assert c(w).dtype == dtype, c
        assert c(w).shape == w.shape, c


def test_constraints_jit_and_empty_leaves():
    w = jnp.asarray(_rand((4, 3), seed=3, scale=2.0))
    for c in [cs.MaxNorm(), cs.Simplex(2.0), cs.L1Ball(), cs.L2Ball(0.5)]:
        _close(jax.jit(c)(w), np.asarray(c(w), np.float64))
    for c in [cs.Simplex(), cs.L1Ball()]:
        assert c(jnp.zeros((0,))).shape == (0,)


# Simplex and L1 ball on random vectors: in the set, and the closest point of it. For a
# convex set K, y = P(x) iff <x - y, z - y> <= 0 for every z in K; the left side is linear
# in z, so checking the vertices of the polytope (s e_i; +-s e_i for the L1 ball) suffices.

vectors = hnp.arrays(
    np.float64,
    st.integers(1, 12),
    elements=st.floats(-10, 10, allow_nan=False, allow_subnormal=False),
)
scales = st.sampled_from([0.1, 1.0, 2.5])


@settings(max_examples=40, deadline=None)
@given(x=vectors, scale=scales)
def test_simplex_is_the_closest_point_of_the_simplex(x, scale):
    y = np.asarray(jax.jit(cs.Simplex(scale))(jnp.asarray(x, jnp.float32)), np.float64)
    tol = 1e-5 * (1 + np.abs(x).max() + scale) * len(x)
    assert (y >= 0).all() and abs(y.sum() - scale) <= tol
    vertices = scale * np.eye(len(x))
    assert np.max((vertices - y) @ (x - y)) <= tol
    np.testing.assert_allclose(y, np_simplex(x, scale), atol=tol)


@settings(max_examples=40, deadline=None)
@given(x=vectors, scale=scales)
def test_l1_ball_is_the_closest_point_of_the_ball(x, scale):
    y = np.asarray(jax.jit(cs.L1Ball(scale))(jnp.asarray(x, jnp.float32)), np.float64)
    x32 = np.asarray(jnp.asarray(x, jnp.float32), np.float64)
    tol = 1e-5 * (1 + np.abs(x).max() + scale) * len(x)
    assert np.abs(y).sum() <= scale + tol
    vertices = scale * np.concatenate([np.eye(len(x)), -np.eye(len(x))])
    assert np.max((vertices - y) @ (x32 - y)) <= tol
    # No random point of the ball is closer.
    rng = np.random.default_rng(len(x))
    z = rng.dirichlet(np.ones(len(x)), 64) * rng.choice([-1, 1], (64, len(x)))
    z *= scale * rng.uniform(0, 1, (64, 1))
    assert np.linalg.norm(x32 - y) <= np.linalg.norm(x32 - z, axis=1).min() + tol
    np.testing.assert_allclose(y, np_l1_ball(x32, scale), atol=tol)


# ---------------------------------------------------------------------------------------
# Keras parity.


def _keras_cases():
    return [
        ("NonNeg", {}),
        ("MaxNorm", {}),
        ("MaxNorm", {"max_value": 0.5, "axis": 1}),
        ("MaxNorm", {"max_value": 1.0, "axis": [0, 1]}),
        ("UnitNorm", {}),
        ("UnitNorm", {"axis": -1}),
        ("MinMaxNorm", {}),
        ("MinMaxNorm", {"min_value": 1.0, "max_value": 1.5, "rate": 0.3, "axis": 1}),
    ]


@pytest.mark.parametrize(("name", "kwargs"), _keras_cases())
def test_keras_parity(name, kwargs):
    keras = pytest.importorskip("keras")
    w = _rand((3, 4, 2), seed=4, scale=1.5)
    ours = getattr(cs, name)(**kwargs)
    theirs = getattr(keras.constraints, name)(**kwargs)
    np.testing.assert_allclose(np.asarray(ours(w)), np.asarray(theirs(w)), rtol=1e-6, atol=1e-7)
    assert ours.get_config() == theirs.get_config()
    assert type(ours).from_config(theirs.get_config()) == ours


def test_configs_round_trip_and_hash():
    for c in [
        cs.NonNeg(),
        cs.MaxNorm(3.0, [0, 1]),
        cs.UnitNorm(None),
        cs.MinMaxNorm(0.5, 2.0, 0.5, 1),
        cs.Box(-1.0, 2.0),
        cs.Simplex(2.0),
        cs.L1Ball(0.5),
        cs.L2Ball(3.0),
    ]:
        again = type(c).from_config(c.get_config())
        assert again == c and hash(again) == hash(c)
    assert cs.MaxNorm(axis=[0, 1]).get_config() == {"max_value": 2.0, "axis": [0, 1]}
    assert cs.Box(0.0, 1.0).get_config() == {"lower": 0.0, "upper": 1.0}
    assert cs.MaxNorm(1.0) != cs.MaxNorm(2.0)


# ---------------------------------------------------------------------------------------
# The transform.


def _params():
    return {
        "dense": {"kernel": jnp.asarray(_rand((3, 4), 5)), "bias": jnp.asarray(_rand((4,), 6))},
        "out": {"kernel": jnp.asarray(_rand((4, 2), 7))},
        "scale": jnp.asarray(_rand((), 8)),
    }


def _grads(seed):
    return jax.tree.map(lambda p: jnp.asarray(_rand(p.shape, seed, 2.0)), _params())


def test_projected_sgd_keeps_params_non_negative_and_matches_numpy():
    tx = optx.chain(optx.sgd(0.5), optx.constrain(cs.NonNeg()))
    params = _params()
    expected = jax.tree.map(lambda p: np.asarray(p, np.float64), params)
    state = tx.init(params)
    for t in range(5):
        g = _grads(10 + t)
        updates, state = tx.update(g, state, params)
        params = optx.apply_updates(params, updates)
        expected = jax.tree.map(
            lambda p, gg: np_nonneg(p - 0.5 * np.asarray(gg, np.float64)), expected, g
        )
        assert all(bool((leaf >= 0).all()) for leaf in jax.tree.leaves(params))
    jax.tree.map(lambda a, b: _close(a, b), params, expected)


def test_apply_updates_gives_the_constrained_param():
    params, g = _params(), _grads(1)
    c = cs.L2Ball(0.5)
    tx = optx.constrain(c)
    updates, _ = tx.update(g, tx.init(params), params)
    got = optx.apply_updates(params, updates)
    want = jax.tree.map(lambda p, u: c(p + u), params, g)
    chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-6)


def test_routing_by_regex_first_match_wins():
    tx = optx.constrain({"kernel": cs.MaxNorm(0.1), "dense": cs.NonNeg()})
    params, g = _params(), _grads(2)
    updates, _ = tx.update(g, tx.init(params), params)
    new = optx.apply_updates(params, updates)
    raw = optx.apply_updates(params, g)
    _close(new["dense"]["kernel"], np_max_norm(np.asarray(raw["dense"]["kernel"], float), 0.1))
    _close(new["out"]["kernel"], np_max_norm(np.asarray(raw["out"]["kernel"], float), 0.1))
    _close(new["dense"]["bias"], np_nonneg(np.asarray(raw["dense"]["bias"], float)))
    # Matched by no pattern: unconstrained, the update passes through as it is.
    chex.assert_trees_all_equal(updates["scale"], g["scale"])


def test_mask_restricts_further():
    tx = optx.constrain({"kernel": cs.NonNeg(), ".*": cs.Box(-0.1, 0.1)}, mask="dense")
    params, g = _params(), _grads(3)
    updates, _ = tx.update(g, tx.init(params), params)
    new = optx.apply_updates(params, updates)
    raw = optx.apply_updates(params, g)
    _close(new["dense"]["kernel"], np_nonneg(np.asarray(raw["dense"]["kernel"], float)))
    _close(new["dense"]["bias"], np.clip(np.asarray(raw["dense"]["bias"], float), -0.1, 0.1))
    chex.assert_trees_all_equal(updates["out"], g["out"])
    chex.assert_trees_all_equal(updates["scale"], g["scale"])
    # A callable mask and a tree of bools select the same leaves.
    by_tree = optx.constrain(
        {"kernel": cs.NonNeg(), ".*": cs.Box(-0.1, 0.1)},
        mask={"dense": True, "out": False, "scale": False},
    )
    chex.assert_trees_all_equal(by_tree.update(g, by_tree.init(params), params)[0], updates)


def test_none_updates_pass_through():
    params = {"a": jnp.array([1.0, -1.0]), "b": jnp.array([-2.0])}
    tx = optx.constrain(cs.NonNeg())
    updates, _ = tx.update({"a": None, "b": jnp.array([1.0])}, tx.init(params), params)
    assert updates["a"] is None
    _close(updates["b"], np.array([2.0]))


# bfloat16: XLA's fusion under jit moves Adam's update by an ulp of bfloat16.
@pytest.mark.parametrize(("dtype", "tol"), [(jnp.float32, 1e-6), (jnp.bfloat16, 1e-2)])
def test_jit_equals_eager_and_dtypes(dtype, tol):
    tx = optx.chain(optx.adam(0.1), optx.constrain({"kernel": cs.UnitNorm(), ".*": cs.Simplex()}))
    params = jax.tree.map(lambda p: p.astype(dtype), _params())
    g = jax.tree.map(lambda p: p.astype(dtype), _grads(4))
    state = tx.init(params)
    eager, _ = tx.update(g, state, params)
    jitted, _ = jax.jit(tx.update)(g, state, params)
    chex.assert_trees_all_close(eager, jitted, rtol=tol, atol=tol)
    chex.assert_trees_all_equal_shapes_and_dtypes(eager, params)


def test_works_inside_optax_chain():
    ours = optx.chain(optx.sgd(0.5), optx.constrain(cs.L1Ball(0.5)))
    theirs = optax.chain(optax.sgd(0.5), optx.constrain(cs.L1Ball(0.5)))
    params, g = _params(), _grads(5)
    a, _ = ours.update(g, ours.init(params), params)
    b, _ = theirs.update(g, theirs.init(params), params)
    chex.assert_trees_all_close(a, b)
    new = optx.apply_updates(params, b)
    for leaf in jax.tree.leaves(new):
        assert float(jnp.abs(leaf).sum()) <= 0.5 + 1e-5


def test_equal_hashable_and_repr():
    def clamp(w):
        return jnp.clip(w, -1, 1)

    a = optx.constrain({"kernel": cs.MaxNorm(1.0)}, mask="dense")
    b = optx.constrain({"kernel": cs.MaxNorm(1.0)}, mask=["dense"])
    assert a == b and hash(a) == hash(b)
    assert a != optx.constrain({"kernel": cs.MaxNorm(2.0)}, mask="dense")
    assert optx.constrain(clamp) == optx.constrain(clamp)
    assert repr(a) == "constrain({'kernel': MaxNorm(max_value=1.0, axis=0)}, mask=('dense',))"
    assert repr(optx.constrain(cs.NonNeg())) == "constrain(NonNeg())"
    assert isinstance(a.init(_params()), optx.EmptyState)


# ---------------------------------------------------------------------------------------
# Errors.


def test_sparse_update_is_an_error():
    from jax.experimental import sparse

    params = {"emb": jnp.ones((4, 2)), "b": jnp.ones(2)}
    updates = {"emb": sparse.BCOO.fromdense(jnp.eye(4, 2)), "b": jnp.ones(2)}
    tx = optx.constrain(cs.NonNeg())
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`constrain` needs dense updates; a constraint on a sparse update is not "
            "defined. Received: a BCOO update at 'emb'."
        ),
    ):
        tx.update(updates, tx.init(params), params)


def test_update_errors():
    tx = optx.constrain(cs.NonNeg())
    params = {"w": jnp.ones(2)}
    with pytest.raises(
        ValueError,
        match=re.escape("`constrain.update` needs the current parameters. Received: params=None."),
    ):
        tx.update(params, tx.init(params))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`constrain.update` needs updates with the structure of params. Received: "
            "missing from updates: 'w'; not in params: 'v'."
        ),
    ):
        tx.update({"v": jnp.ones(2)}, tx.init(params), params)


@dataclasses.dataclass
class Unhashable:
    def __call__(self, w):
        return w


def test_constrain_argument_errors():
    cases = [
        (
            TypeError,
            "`constrain` needs constraint to be a callable array -> array or a dict "
            "{regex: callable}. Received: constraint=3.",
            lambda: optx.constrain(3),
        ),
        (
            ValueError,
            "`constrain` needs at least one (regex, constraint) pair. Received: constraint={}.",
            lambda: optx.constrain({}),
        ),
        (
            TypeError,
            "`constrain` needs the keys of a constraint dict to be regular expressions (str). "
            "Received: key 1.",
            lambda: optx.constrain({1: cs.NonNeg()}),
        ),
        (
            ValueError,
            "`constrain` needs valid regular expressions as keys. Received: '(' (",
            lambda: optx.constrain({"(": cs.NonNeg()}),
        ),
        (
            TypeError,
            "`constrain` needs a callable array -> array for each regex. Received: 2.0 for 'w'.",
            lambda: optx.constrain({"w": 2.0}),
        ),
        (
            TypeError,
            "`constrain` needs hashable constraints (the transform is hashed to reuse compiled "
            "steps). Received: constraint=Unhashable().",
            lambda: optx.constrain(Unhashable()),
        ),
        (
            TypeError,
            "`constrain` needs hashable constraints (the transform is hashed to reuse compiled "
            "steps). Received: constraint['w']=Unhashable().",
            lambda: optx.constrain({"w": Unhashable()}),
        ),
        (
            TypeError,
            "`constrain` needs mask to be a pytree of bools, a callable returning one, or "
            "regular expressions on parameter paths. Received: a mask with leaf 1.0.",
            lambda: optx.constrain(cs.NonNeg(), mask={"w": 1.0}),
        ),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=re.escape(message)):
            call()


@pytest.mark.parametrize(
    ("error", "message", "call"),
    [
        (
            ValueError,
            "`MaxNorm` needs max_value >= 0. Received: max_value=-1.0.",
            lambda: cs.MaxNorm(-1.0),
        ),
        (
            TypeError,
            "`MaxNorm` needs max_value to be a real number. Received: max_value='2' of type str.",
            lambda: cs.MaxNorm("2"),
        ),
        (
            TypeError,
            "`UnitNorm` needs axis to be an int, a list of ints or None. Received: axis=0.5.",
            lambda: cs.UnitNorm(0.5),
        ),
        (
            ValueError,
            "`MinMaxNorm` needs min_value >= 0. Received: min_value=-0.5.",
            lambda: cs.MinMaxNorm(-0.5),
        ),
        (
            ValueError,
            "`MinMaxNorm` needs max_value >= min_value (2.0). Received: max_value=1.0.",
            lambda: cs.MinMaxNorm(2.0, 1.0),
        ),
        (
            ValueError,
            "`MinMaxNorm` needs rate in [0, 1]. Received: rate=1.5.",
            lambda: cs.MinMaxNorm(rate=1.5),
        ),
        (
            ValueError,
            "`Box` needs upper >= lower (1.0). Received: upper=0.0.",
            lambda: cs.Box(1.0, 0.0),
        ),
        (
            ValueError,
            "`Box` needs lower < inf. Received: lower=nan.",
            lambda: cs.Box(float("nan"), 1.0),
        ),
        (
            ValueError,
            "`Simplex` needs scale > 0 and finite. Received: scale=0.0.",
            lambda: cs.Simplex(0.0),
        ),
        (
            ValueError,
            "`L1Ball` needs scale > 0 and finite. Received: scale=-1.0.",
            lambda: cs.L1Ball(-1.0),
        ),
        (
            ValueError,
            "`L2Ball` needs scale > 0 and finite. Received: scale=inf.",
            lambda: cs.L2Ball(float("inf")),
        ),
    ],
)
def test_constraint_argument_errors(error, message, call):
    with pytest.raises(error, match=re.escape(message)):
        call()
