"""`optx.tree` as a drop-in for `optax.tree`, and optax's top-level utilities in `optx`.

Each function is compared with optax 0.2.8's on small nested trees: the same signature
(parameter names in order), the same numbers, the same warnings; where optax is less
accurate or differs on purpose (a bias correction without cancellation, `p = 3` roots), with
a NumPy float64 reference instead. Tolerances are derived in the comments
(tests/TOLERANCES.md).
"""

from __future__ import annotations

import inspect
import re
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, assert_close
from registry_tree import NOT_FACTORIES

import optx

EPS64 = float(np.finfo(np.float64).eps)

TOP_LEVEL = sorted(NOT_FACTORIES)  # optax's top-level utilities


def _tree(seed: int, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return {
        "a": jnp.asarray(rng.normal(size=(2, 3)), dtype),
        "b": [jnp.asarray(rng.normal(size=4), dtype), jnp.asarray(rng.normal(), dtype)],
    }


X, Y, Z = _tree(0), _tree(1), _tree(2)


def _names(fn) -> list[tuple[str, str, object]]:
    """``(name, kind, default)`` of each parameter."""
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(fn).parameters.values()]


def _optax_tree_names() -> list[str]:
    return sorted(n for n in dir(optax.tree) if not n.startswith("_"))


# -- the same names and signatures ------------------------------------------------------------


def _same_signature(ours, theirs):
    """Parameter names, kinds and defaults in order; optx may add keyword-only ones."""
    expected = _names(theirs)
    got = [p for p in _names(ours) if p in expected or p[1] != "KEYWORD_ONLY"]
    assert got == expected


@pytest.mark.parametrize("name", _optax_tree_names())
def test_tree_has_optax_name_and_signature(name):
    _same_signature(getattr(optx.tree, name), getattr(optax.tree, name))


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_has_optax_name_and_signature(name):
    _same_signature(getattr(optx, name), getattr(optax, name))


def test_top_level_shares_the_tree_functions():
    assert optx.bias_correction is optx.tree.bias_correction
    assert optx.update_moment is optx.tree.update_moment
    assert optx.update_infinity_moment is optx.tree.update_infinity_moment
    assert optx.update_moment_per_elem_norm is optx.tree.update_moment_per_elem_norm
    assert optx.tree_map_params is optx.tree.map_params
    assert optx.safe_int32_increment is optx.safe_increment


def _warnings_of(call) -> list[tuple[type, str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [(w.category, str(w.message)) for w in caught]


def _top_level_calls(lib):
    a = jnp.array([[2.0]])  # 1 x 1: the loops compile small
    return {
        "bias_correction": lambda: lib.bias_correction(X, 0.9, 3),
        "global_norm": lambda: lib.global_norm(X),
        "matrix_inverse_pth_root": lambda: lib.matrix_inverse_pth_root(a, 2, num_iters=1),
        "multi_normal": lambda: lib.multi_normal(jnp.zeros(2), jnp.zeros(2)),
        "nnls": lambda: lib.nnls(a, jnp.ones(1), 1),
        "power_iteration": lambda: lib.power_iteration(a, num_iters=1),
        "safe_increment": lambda: lib.safe_increment(jnp.int32(1)),
        "safe_int32_increment": lambda: lib.safe_int32_increment(jnp.int32(1)),
        "safe_norm": lambda: lib.safe_norm(jnp.ones(2), 0.1),
        "safe_root_mean_squares": lambda: lib.safe_root_mean_squares(jnp.ones(2), 0.1),
        "tree_map_params": lambda: lib.tree_map_params(
            lib.sgd(0.1), lambda x: x, lib.sgd(0.1).init(X)
        ),
        "update_infinity_moment": lambda: lib.update_infinity_moment(X, Y, 0.9, 1e-8),
        "update_moment": lambda: lib.update_moment(X, Y, 0.9, 2),
        "update_moment_per_elem_norm": lambda: lib.update_moment_per_elem_norm(X, Y, 0.9, 2),
    }


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_warns_as_optax_does(name):
    theirs = _warnings_of(_top_level_calls(optax)[name])
    ours = _warnings_of(_top_level_calls(optx)[name])
    assert [c for c, _ in ours] == [c for c, _ in theirs]
    for (_, mine), (_, optax_message) in zip(ours, theirs, strict=True):
        assert mine == optax_message.replace("optax", "optx")


# -- arithmetic -------------------------------------------------------------------------------


def _bits_equal(ours, theirs):
    """Elementwise maths with one rounding per element: no order to differ in."""
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


ELEMENTWISE = {
    "add": lambda m: m.add(X, Y),
    "add3": lambda m: m.add(X, Y, Z),
    "sub": lambda m: m.sub(X, Y),
    "mul": lambda m: m.mul(X, Y),
    "div": lambda m: m.div(X, Y),
    "scale": lambda m: m.scale(0.5, X),
    "scale_promotes": lambda m: m.scale(
        jnp.float32(0.5), {"i": jnp.array([1, 3]), "h": jnp.ones(2, jnp.bfloat16)}
    ),
    "conj": lambda m: m.conj({"c": jnp.array([1 + 2j, 3 - 1j])}),
    "real": lambda m: m.real({"c": jnp.array([1 + 2j, 3 - 1j])}),
    "clip": lambda m: m.clip(X, -0.5, 0.5),
    "clip_min": lambda m: m.clip(X, min_value=0.0),
    "batch_shape": lambda m: m.batch_shape(X, (2, 1)),
    "where": lambda m: m.where(True, X, Y),
    "zeros_like": lambda m: m.zeros_like(X, jnp.bfloat16),
    "ones_like": lambda m: m.ones_like(X),
    "full_like": lambda m: m.full_like(X, 3.0),
    "cast": lambda m: m.cast(X, jnp.float16),
    "cast_like": lambda m: m.cast_like(X, {"a": jnp.ones(1, jnp.bfloat16), "b": [1.0, Y["b"][1]]}),
    "update_moment": lambda m: m.update_moment(X, Y, 0.9, 2),
    "update_moment_1": lambda m: m.update_moment(X, Y, 0.75, 1),
    "update_infinity_moment": lambda m: m.update_infinity_moment(X, Y, 0.9, 1e-3),
    "update_moment_per_elem_norm": lambda m: m.update_moment_per_elem_norm(X, Y, 0.9, 2),
    "unwrap_random_key_data": lambda m: m.unwrap_random_key_data(
        {"k": jax.random.key(3), "x": X["a"]}
    ),
    "split_key_like": lambda m: m.unwrap_random_key_data(m.split_key_like(jax.random.key(1), X)),
    "random_like": lambda m: m.random_like(jax.random.key(1), X),
    "random_like_uniform": lambda m: m.random_like(
        jax.random.key(1), X, jax.random.uniform, jnp.float16
    ),
}


@pytest.mark.parametrize("case", sorted(ELEMENTWISE))
def test_elementwise_bit_identical_to_optax(case):
    # One rounding per element on both sides (a * b + c contracted the same way: eager
    # ops, one op per call), so the results are equal to the bit.
    _bits_equal(ELEMENTWISE[case](optx.tree), ELEMENTWISE[case](optax.tree))


def test_add_scale_and_none_leaves_as_optax():
    x = {"a": jnp.array([1.0, 2.0]), "n": None}
    y = {"a": jnp.array([3.0, -1.0]), "n": None}
    _bits_equal(optx.tree.add_scale(x, 0.25, y), optax.tree.add_scale(x, 0.25, y))
    assert optx.tree.update_moment(x, y, 0.9, 2)["n"] is None


def test_complex_moments_as_optax():
    g = {"c": jnp.array([1 + 2j, -3 + 0.5j], jnp.complex64)}
    m = {"c": jnp.array([0.5, 2.0], jnp.float32)}
    for order in (1, 2, 3):
        ours = optx.tree.update_moment_per_elem_norm(g, m, 0.8, order)
        theirs = optax.tree.update_moment_per_elem_norm(g, m, 0.8, order)
        # |g|**order through |g|**2 ** (order / 2): a power, a product, a sum: 4 roundings.
        assert_close(f"order {order}", ours, theirs, rtol=4 * EPS32)


def _terms(*trees) -> int:
    return sum(int(np.size(x)) for t in trees for x in jax.tree.leaves(t))


def test_reductions_as_optax():
    n = _terms(X)
    # A sum of n terms in another order: n * eps * sum|terms| (Higham 3.1).
    for ours, theirs, terms in [
        (
            optx.tree.sum(X),
            optax.tree.sum(X),
            optax.tree.sum(optax.tree.real(jax.tree.map(abs, X))),
        ),
        (
            optx.tree.vdot(X, Y),
            optax.tree.vdot(X, Y),
            optax.tree.vdot(jax.tree.map(abs, X), jax.tree.map(abs, Y)),
        ),
        (
            optx.tree.norm(X, squared=True),
            optax.tree.norm(X, squared=True),
            optax.tree.norm(X, squared=True),
        ),
        (optx.tree.norm(X, 1), optax.tree.norm(X, 1), optax.tree.norm(X, 1)),
    ]:
        assert abs(float(ours) - float(theirs)) <= 2 * n * EPS32 * float(terms)
    # sqrt halves a relative error and adds one rounding.
    assert abs(float(optx.tree.norm(X)) - float(optax.tree.norm(X))) <= (n + 1) * EPS32 * float(
        optax.tree.norm(X)
    )
    # Maxima, minima and the infinity norm pick an element: exact.
    for ord_ in ("inf", "infinity", jnp.inf):
        assert float(optx.tree.norm(X, ord_)) == float(optax.tree.norm(X, ord_))
    assert float(optx.tree.max(X)) == float(optax.tree.max(X))
    assert float(optx.tree.min(X)) == float(optax.tree.min(X))
    assert float(optx.tree.norm(X, 1, squared=True)) == pytest.approx(
        float(optax.tree.norm(X, 1, squared=True)), rel=2 * (n + 1) * EPS32
    )
    assert optx.tree.size(X) == optax.tree.size(X) == 11
    assert float(optx.tree.sum(X, associative_reduction=True)) == pytest.approx(
        float(optax.tree.sum(X)), abs=2 * n * EPS32 * float(optax.tree.norm(X, 1))
    )
    # Empty leaves are skipped, an empty tree gives the identity of the reduction.
    assert float(optx.tree.max({"e": jnp.zeros(0), "x": 1.0})) == 1.0
    assert float(optx.tree.max({})) == float(optax.tree.max({})) == -np.inf
    assert float(optx.tree.min({})) == float(optax.tree.min({})) == np.inf
    # Integer trees keep their dtype, as optax's docstring example shows.
    ints = {"a": jnp.array([1, 2]), "b": jnp.array([1, 2])}
    assert (
        optx.tree.vdot(ints, {"a": jnp.array([-1, -1]), "b": jnp.array([1, 1])}).dtype == jnp.int32
    )


def test_norm_of_bfloat16_accumulates_in_float32():
    tree = {"a": jnp.full(300, 1.0, jnp.bfloat16)}
    assert optx.tree.norm(tree, squared=True).dtype == jnp.float32
    assert float(optx.tree.norm(tree, squared=True)) == 300.0


def test_allclose_as_optax():
    near = jax.tree.map(lambda x: x * (1 + 1e-6), X)
    for a, b, kw in [(X, near, {}), (X, Y, {}), (X, near, {"rtol": 0.0, "atol": 0.0})]:
        assert bool(optx.tree.allclose(a, b, **kw)) == bool(optax.tree.allclose(a, b, **kw))
    nan = {"x": jnp.array([np.nan])}
    assert bool(optx.tree.allclose(nan, nan, equal_nan=True))
    assert not bool(optx.tree.allclose(nan, nan))


def test_dtype_as_optax():
    mixed = {"a": jnp.ones(1, jnp.float16), "b": jnp.ones(1, jnp.float32)}
    for tree in (X, mixed, {}, {"i": jnp.ones(1, jnp.int32), "u": jnp.ones(1, jnp.uint32)}):
        for handler in ("promote", "highest", "lowest", None):
            try:
                expected = optax.tree.dtype(tree, handler)
            except ValueError:
                with pytest.raises(ValueError):
                    optx.tree.dtype(tree, handler)
                continue
            assert optx.tree.dtype(tree, handler) == expected


# -- bias correction ----------------------------------------------------------------------


@pytest.mark.parametrize("decay", [0.9, 0.999, 0.99999])
def test_bias_correction_against_float64_and_optax(decay):
    m = {"a": jnp.array([1e-3, -2.0]), "h": jnp.array([4.0], jnp.bfloat16)}
    for count in (1, 10, 1000):
        ours = optx.tree.bias_correction(m, decay, count)
        theirs = optax.tree.bias_correction(m, decay, count)
        b = np.float64(np.float32(decay))  # the float32 decay both sides use
        exact = 1 - b**count
        reference = {k: np.asarray(v, np.float64) / exact for k, v in m.items()}
        # optx: 1 - b**t as -expm1(t log1p(-(1 - b))): 1 - b exact (Sterbenz), log1p,
        # a product, expm1: 4 roundings, then the cast and the division: 2 more, each
        # eps/2 relative; bfloat16 leaves round the correction and the quotient in bf16.
        assert_close("float32", ours["a"], reference["a"], rtol=3 * EPS32)
        assert_close("bfloat16", ours["h"], reference["h"], rtol=2**-7)
        assert ours["h"].dtype == jnp.bfloat16
        # optax: b**t is within a few eps of its value (pow: 2 eps, say), and 1 - b**t
        # turns that into 2 eps * b**t / (1 - b**t) relative; then the division.
        optax_rtol = 2 * EPS32 * b**count / exact + 2 * EPS32
        assert_close("optax", theirs["a"], reference["a"], rtol=optax_rtol)
        assert_close("optx-optax", ours["a"], theirs["a"], rtol=optax_rtol + 3 * EPS32)


def test_bias_correction_is_the_one_transforms_use():
    # scale_by_adam's first step: the corrected moment of g is g (1 - b1) / (1 - b1) = g.
    g = {"w": jnp.array([0.5, -1.5])}
    mu = optx.tree.update_moment(g, optx.tree.zeros_like(g), 0.9, 1)
    np.testing.assert_allclose(optx.tree.bias_correction(mu, 0.9, 1)["w"], g["w"], rtol=2 * EPS32)


# -- state access: get, set, get_all_with_path, map_params ----------------------------------


class Inner(NamedTuple):
    count: jax.Array
    learning_rate: jax.Array


class Outer(NamedTuple):
    inner: Inner
    other: dict


NESTED = (
    Outer(Inner(jnp.int32(0), jnp.float32(0.1)), {"learning_rate": jnp.float32(0.2), "z": [1.0]}),
    {"count": jnp.int32(5)},
)


def _shown(found):
    return [(jax.tree_util.keystr(p), jax.tree.map(np.asarray, v)) for p, v in found]


@pytest.mark.parametrize("key", ["count", "learning_rate", "Inner", "z", "absent"])
def test_get_all_with_path_as_optax(key):
    ours = _shown(optx.tree.get_all_with_path(NESTED, key))
    theirs = _shown(optax.tree_utils.tree_get_all_with_path(NESTED, key))
    assert [p for p, _ in ours] == [p for p, _ in theirs]
    _bits_equal([v for _, v in ours], [v for _, v in theirs])


def test_get_and_set_as_optax_on_plain_trees():
    def is_outer(path, _):  # the dict's entry, not the NamedTuple field
        return isinstance(path[-1], jax.tree_util.DictKey)

    assert float(optx.tree.get(NESTED, "learning_rate", filtering=is_outer)) == float(
        optax.tree.get(NESTED, "learning_rate", filtering=is_outer)
    )
    assert optx.tree.get(NESTED, "absent", default=7) == 7
    ours = optx.tree.set(NESTED, count=jnp.int32(9), z=[2.0])
    theirs = optax.tree.set(NESTED, count=jnp.int32(9), z=[2.0])
    _bits_equal(ours, theirs)
    replaced = optx.tree.set(NESTED, is_outer, learning_rate=jnp.float32(1.0))
    _bits_equal(replaced, optax.tree.set(NESTED, is_outer, learning_rate=jnp.float32(1.0)))
    whole = optx.tree.set(NESTED, Inner=Inner(jnp.int32(1), jnp.float32(1.0)))
    _bits_equal(whole, optax.tree.set(NESTED, Inner=Inner(jnp.int32(1), jnp.float32(1.0))))


def test_get_finds_optx_hyperparameters_as_optax_finds_injected_ones():
    params = {"w": jnp.array([1.0, -2.0, 3.0])}
    grads = {"w": jnp.array([0.5, 0.1, -0.3])}
    state = optx.adam(1e-3).init(params)
    assert float(optx.tree.get(state, "learning_rate")) == float(np.float32(1e-3))
    assert float(optx.tree.get(state, "b2")) == float(np.float32(0.999))
    ((path, _),) = optx.tree.get_all_with_path(state, "learning_rate")
    assert jax.tree_util.keystr(path) == "[1]ScaleByLearningRateState.hyperparams['learning_rate']"
    # A scheduled learning rate: the value in force, step after step, as optax's injected one.
    schedule = optax.linear_schedule(1.0, 0.1, 5)
    tx, ref = optx.adam(schedule), optax.inject_hyperparams(optax.adam)(learning_rate=schedule)
    s, r = tx.init(params), ref.init(params)
    for _ in range(3):
        _, s = tx.update(grads, s)
        _, r = ref.update(grads, r)
        # optax reads it at the count before the step, optx at the count of the step:
        # both the schedule's float32 value at the same step.
        assert float(optx.tree.get(s, "learning_rate")) == float(r.hyperparams["learning_rate"])
    # Inside jit too (the node is a pytree, its values traced).
    assert float(jax.jit(lambda st: optx.tree.get(st, "learning_rate"))(s)) == float(
        optx.tree.get(s, "learning_rate")
    )


def test_set_writes_an_optx_hyperparameter_in_force():
    params = {"w": jnp.array([1.0, -2.0, 3.0])}
    grads = {"w": jnp.array([0.5, 0.1, -0.3])}
    tx = optx.sgd(0.1, momentum=0.9)
    state = optx.tree.set(tx.init(params), learning_rate=0.5, momentum=0.5)
    assert float(optx.tree.get(state, "learning_rate")) == 0.5
    assert float(optx.get_hyperparams(state)["momentum"]) == 0.5
    updates, _ = tx.update(grads, state)
    # First step: the trace is g, the update -lr * g.
    np.testing.assert_array_equal(updates["w"], -0.5 * grads["w"])
    # The structure is unchanged: the same compiled step takes it.
    assert jax.tree.structure(state) == jax.tree.structure(tx.init(params))
    # A scheduled one is recomputed at the next step, as optax's injected one.
    sched = optx.adam(optax.constant_schedule(0.1))
    s = optx.tree.set(sched.init(params), learning_rate=0.3)
    assert float(optx.tree.get(s, "learning_rate")) == pytest.approx(0.3)
    _, s = sched.update(grads, s)
    assert float(optx.tree.get(s, "learning_rate")) == pytest.approx(0.1)


def test_get_and_set_on_packed_hyperparameters_and_under_jit():
    # `flatten` holds each node's hyperparameters packed in one vector: read and written the same.
    params = {"w": jnp.zeros(3)}
    state = optx.flatten(optx.adam(1e-3)).init(params)
    assert float(optx.tree.get(state, "b1")) == float(np.float32(0.9))
    new = optx.tree.set(state, learning_rate=0.5, b2=0.99)
    got = optx.get_hyperparams(new)
    assert (float(got["learning_rate"]), float(got["b2"])) == (0.5, float(np.float32(0.99)))
    assert jax.tree.structure(new) == jax.tree.structure(state)
    # A traced value (a jitted sweep): the state keeps its structure and dtypes.
    swept = jax.jit(lambda st, lr: optx.tree.set(st, learning_rate=lr))(state, 0.25)
    assert float(optx.tree.get(swept, "learning_rate")) == 0.25


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw", "lion", "rmsprop"])
def test_map_params_as_optax(name):
    params = {"a": jnp.ones((2, 3)), "b": [jnp.ones(4)]}
    specs = jax.tree.map(lambda x: x.shape, params)
    kwargs = {"momentum": 0.9} if name == "sgd" else {}

    def mapped(lib):
        tx = getattr(lib, name)(1e-3, **kwargs)
        return lib.tree_map_params(
            tx,
            lambda _, spec: ("P", spec),
            tx.init(params),
            specs,
            transform_non_params=lambda _: "other",
            is_leaf=lambda x: isinstance(x, tuple),
        )

    def slots(tree):
        leaves = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, tuple) and x[:1] == ("P",))
        return sorted(str(x) for x in leaves if isinstance(x, tuple))

    assert slots(mapped(optx)) == slots(mapped(optax)) != []


# -- numerics helpers -------------------------------------------------------------------------


def test_safe_norm_and_rms_as_optax_with_finite_gradients():
    x = jnp.array([[3.0, -4.0], [0.5, 2.0]])
    for kw in [{}, {"ord": 1}, {"axis": 1, "keepdims": True}]:
        ours, theirs = optx.safe_norm(x, 1.0, **kw), optax.safe_norm(x, 1.0, **kw)
        _bits_equal(ours, theirs)
    zero = jnp.zeros(3)
    for fn in (lambda v: optx.safe_norm(v, 1e-3), lambda v: optx.safe_root_mean_squares(v, 1e-3)):
        np.testing.assert_array_equal(jax.grad(fn)(zero), np.zeros(3))
    _bits_equal(optx.safe_norm(zero, 0.5), optax.safe_norm(zero, 0.5))
    _bits_equal(optx.safe_root_mean_squares(x, 0.1), optax.safe_root_mean_squares(x, 0.1))
    c = jnp.array([3 + 4j, 0j])
    _bits_equal(optx.safe_root_mean_squares(c, 0.1), optax.safe_root_mean_squares(c, 0.1))


def test_safe_increment_as_optax():
    for count in (
        jnp.int32(1),
        jnp.int32(2**31 - 1),
        jnp.float32(2.0),
        jnp.finfo(jnp.float32).max,
        jnp.array([1, 2**31 - 1], jnp.int32),
        jnp.uint8(255),
    ):
        _bits_equal(optx.safe_increment(count), optax.safe_increment(count))


def test_multi_normal_as_optax():
    loc, log_scale = jnp.array([0.5, -1.0]), jnp.array([0.1, -0.3])
    ours, theirs = optx.multi_normal(loc, log_scale), optax.multi_normal(loc, log_scale)
    key = jax.random.key(4)
    _bits_equal(ours.sample((3,), key), theirs.sample((3,), key))
    x = jnp.array([[0.2, 0.1], [1.0, -2.0]])
    _bits_equal(ours.log_prob(x), theirs.log_prob(x))
    _bits_equal(ours.params, theirs.params)
    _bits_equal(ours.log_scale, theirs.log_scale)


# -- linear algebra ---------------------------------------------------------------------------


def _spd(eigenvalues, seed=0):
    """A symmetric matrix with the given eigenvalues (float64), and its eigenvectors."""
    n = len(eigenvalues)
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, n)))
    return (q * np.asarray(eigenvalues, np.float64)) @ q.T, q


def test_power_iteration_against_optax_and_numpy():
    a64, q = _spd([10.0, 5.0, 3.0, 2.0, 1.0])
    n = 5
    a = jnp.asarray(a64, jnp.float32)
    # Jitted: one compile per side instead of one per eager operation.
    value, vector = jax.jit(optx.power_iteration)(a)
    ref_value, _ = jax.jit(optax.power_iteration)(a)
    # The same iterations from the same start: each iterate is a matvec (n terms) and a
    # normalisation, off by (n + 3) eps relative per iteration on either side; the loop
    # stops on the residual, which both reach within the same iteration count here.
    assert_close("value vs optax", value, ref_value, rtol=2 * 100 * (n + 3) * EPS32)
    # Against the exact eigenpair (float64): the stop test |A v - l v| <= 1e-6 |l| bounds
    # the Rayleigh quotient's error by |r|**2 / gap and the vector's by |r| / gap (gap = 5),
    # plus float32 round-off of one matvec and vdot, 2 n eps relative.
    residual = 1e-6 * 10.0
    assert abs(float(value) - 10.0) <= residual**2 / 5 + 2 * n * EPS32 * 10.0 + 10.0 * EPS32
    v = np.asarray(vector, np.float64)
    v = v * np.sign(v @ q[:, 0])
    assert np.max(np.abs(v - q[:, 0])) <= residual / 5 + 2 * n * EPS32 + 1e-6
    # A function for the product, on a pytree vector.
    tree_value, _ = optx.power_iteration(
        lambda t: {"x": a @ t["x"]}, v0={"x": jnp.ones(n)}, num_iters=200
    )
    assert abs(float(tree_value) - 10.0) <= 1e-5 * 10.0


@pytest.mark.parametrize("p", [2, 3, 4])
def test_matrix_inverse_pth_root_against_numpy_and_optax(p):
    a64, _ = _spd([4.0, 3.0, 2.0, 1.5, 1.0], seed=p)
    n, lam_max = 5, 4.0
    a = jnp.asarray(a64, jnp.float32)
    root, error = jax.jit(optx.matrix_inverse_pth_root, static_argnums=1)(a, p)
    w, vecs = np.linalg.eigh(a64)
    exact = (vecs * (w + 1e-6 * lam_max) ** (-1.0 / p)) @ vecs.T
    # The coupled iteration keeps M = H**p A: when max|M - I| <= err, H = (I + E)**(1/p)
    # A**(-1/p) is off by |E|_2 / p <= n err / p relative. Float32 round-off drifts that
    # invariant by (p + 2) matmuls of n terms per iteration, over at most 100 iterations,
    # times the condition number 4 of A; the ridge's estimate is off by 1e-6 relative.
    assert float(error) <= 1e-6 * 4  # it converged (the stop test), within float32 noise
    bound = n * float(error) / p + 100 * (p + 2) * n * EPS32 * 4 + 1e-6
    assert_close("optx", root, exact, rtol=bound)
    if p in (2, 4):  # optax's powers are right for p in (1, 2, 4, 8) only
        ref, _ = jax.jit(optax.matrix_inverse_pth_root, static_argnums=1)(a, p)
        assert_close("optax", ref, exact, rtol=bound)
    if p == 2:  # a 1 x 1 matrix: a plain power
        scalar, err = optx.matrix_inverse_pth_root(jnp.array([[4.0]]), 2)
        assert float(err) == 0.0
        assert abs(float(scalar[0, 0]) - 0.5) <= 4 * EPS32


def _nnls_numpy(a, b, iters):
    """The same fast projected gradient in NumPy float64."""
    q_mat, q = a.T @ a, a.T @ b
    lip = min(np.linalg.norm(q_mat, "fro"), np.linalg.norm(q_mat, 1))
    x = y = np.zeros(a.shape[1:] + b.shape[1:])
    c = 0.0
    for _ in range(iters):
        c_next = (1 + np.sqrt(1 + 4 * c**2)) / 2
        x_next = np.clip(y - (q_mat @ y - q) / lip, 0, None)
        y, x, c = x_next + (c - 1) / c_next * (x_next - x), x_next, c_next
    return x


def _nnls_exact(a, b):
    """The solution by its active set (few columns: every subset), NumPy float64.

    For each subset S of free columns, x_S solves the normal equations; the solution is the
    one with x_S >= 0 and gradient A^T (A x - b) >= 0 off S (the KKT conditions).
    """
    n = a.shape[1]
    for mask in range(2**n):
        free = [i for i in range(n) if mask >> i & 1]
        x = np.zeros(n)
        if free:
            x[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
        grad = a.T @ (a @ x - b)
        if np.all(x >= -1e-12) and np.all(np.delete(grad, free) >= -1e-12):
            return x
    raise AssertionError("no KKT point")


def test_nnls_against_numpy_and_optax():
    rng = np.random.default_rng(0)
    a64 = rng.normal(size=(6, 4))
    b64 = rng.normal(size=(6, 2))  # two right-hand sides at once
    # The trajectory: the same recurrence in float64. One step rounds the gradient (n = 4
    # terms) and the extrapolation, a few (n + 4) eps64 of the iterates' scale; the step
    # maps (x_k, x_(k-1)) with a gain of at most 1 + 2 s_k < 3 (projection contracts), so
    # after T steps the rounding of step k is magnified at most 3**(T - k): in all
    # 3**T / 2 * (n + 4) eps64 * scale. T = 20 keeps that near 1e-6 of the scale, far below
    # the O(1) difference of a wrong step.
    steps = 20
    expected = _nnls_numpy(a64, b64, steps)
    with jax.enable_x64(True):
        ours64 = np.asarray(jax.jit(optx.nnls, static_argnums=2)(a64, b64, steps))
        theirs64 = np.asarray(jax.jit(optax.nnls, static_argnums=2)(a64, b64, steps))
    scale = float(np.max(np.abs(expected)))
    bound = 3.0**steps / 2 * (4 + 4) * EPS64 * scale
    np.testing.assert_allclose(ours64, expected, rtol=0, atol=bound)
    np.testing.assert_allclose(theirs64, expected, rtol=0, atol=bound)
    # The solution, as a convergence threshold (tests/TOLERANCES.md): 500 steps in float64
    # come within a quarter of it, so float32 runs (float64's perturbed by roundings) must
    # come within it.
    exact = np.stack([_nnls_exact(a64, b64[:, k]) for k in range(2)], axis=1)
    threshold = 1e-4 * float(np.max(np.abs(exact)))
    np.testing.assert_allclose(_nnls_numpy(a64, b64, 500), exact, rtol=0, atol=threshold / 4)
    a32, b32 = jnp.asarray(a64, jnp.float32), jnp.asarray(b64, jnp.float32)
    for name, lib in [("optx", optx), ("optax", optax)]:
        x = jax.jit(lib.nnls, static_argnums=2)(a32, b32, 500)
        np.testing.assert_allclose(np.asarray(x), exact, rtol=0, atol=threshold, err_msg=name)
        assert np.all(np.asarray(x) >= 0)


def test_global_norm_is_the_tree_norm():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert float(optx.global_norm(X)) == float(optx.tree.norm(X))
    with pytest.warns(
        DeprecationWarning,
        match=re.escape("optx.global_norm is deprecated in favor of optx.tree.norm"),
    ):
        optx.global_norm(X)


# -- errors -----------------------------------------------------------------------------------

_MIXED = {"a": jnp.ones(1, jnp.float16), "b": jnp.ones(1, jnp.float32)}
_UNORDERED = {"i": jnp.ones(1, jnp.int8), "u": jnp.ones(1, jnp.uint8)}
_CHAIN = optx.chain(optx.clip_by_global_norm(1.0), optx.adam(1e-3))
_SGD = optx.sgd(0.1, momentum=0.9)

ERRORS = [
    (
        lambda: optx.tree.dtype(_MIXED),
        ValueError,
        "`optx.tree.dtype` needs leaves of one dtype (or a mixed_dtype_handler). "
        "Received: float16 at a, and b: float32.",
    ),
    (
        lambda: optx.tree.dtype(_MIXED, "max"),
        ValueError,
        "`optx.tree.dtype` needs mixed_dtype_handler in (None, 'promote', 'highest', "
        "'lowest'). Received: mixed_dtype_handler='max'.",
    ),
    (
        lambda: optx.tree.dtype(_UNORDERED, "lowest"),
        ValueError,
        "`optx.tree.dtype` needs dtypes that promote one to the other for this handler. "
        "Received: int8 and uint8, which promote to int16.",
    ),
    (
        lambda: optx.tree.norm(X, ord=3),
        ValueError,
        "`optx.tree.norm` needs ord in (1, 2, 'inf'). Received: ord=3.",
    ),
    (
        lambda: optx.tree.get(_CHAIN.init({"w": jnp.zeros(2)}), "count"),
        KeyError,
        "`optx.tree.get` needs one value for the key. Received: key='count', which 2 values "
        "match, at [1][0]ScaleByAdamState.count, [1][1]ScaleByLearningRateState.count. Pass a "
        "`filtering` function to choose.",
    ),
    (
        lambda: optx.tree.set(_CHAIN.init({"w": jnp.zeros(2)}), lr=0.1),
        KeyError,
        "`optx.tree.set` needs keys the tree holds. Received: lr=0.1, which matches no value.",
    ),
    (
        lambda: optx.tree.set(_CHAIN.init({"w": jnp.zeros(2)}), lambda p, v: False, count=0),
        KeyError,
        "`optx.tree.set` needs keys the tree holds. Received: count=0, which matches no value "
        "that the filtering keeps.",
    ),
    (
        lambda: optx.tree.set(_SGD.init({"w": jnp.zeros(2)}), learning_rate=-1.0),
        ValueError,
        "`optx.tree.set` needs learning_rate finite and >= 0. Received: learning_rate=-1.0.",
    ),
    (
        lambda: optx.tree.set(_SGD.init({"w": jnp.zeros(2)}), momentum=jnp.ones(3)),
        ValueError,
        "`optx.tree.set` needs momentum to be a scalar (or of the stored shape ()). "
        "Received: momentum of shape (3,).",
    ),
    (
        lambda: optx.safe_increment(jnp.array(True)),
        ValueError,
        "`optx.safe_increment` needs an integer or floating-point count. Received: count of "
        "dtype bool.",
    ),
    (
        lambda: optx.power_iteration(lambda v: v),
        ValueError,
        "`optx.power_iteration` needs v0 when matrix is a function (the vector's structure is "
        "unknown). Received: v0=None.",
    ),
    (
        lambda: optx.power_iteration(jnp.ones((2, 3))),
        ValueError,
        "`optx.power_iteration` needs a square matrix. Received: matrix of shape (2, 3).",
    ),
    *[
        (
            lambda p=p: optx.matrix_inverse_pth_root(jnp.eye(2), p),
            ValueError,
            "`optx.matrix_inverse_pth_root` needs p a positive integer (a Python number, not "
            f"traced). Received: p={p!r}.",
        )
        for p in (0, 1.5, True)
    ],
    (
        lambda: optx.matrix_inverse_pth_root(jnp.ones(3), 2),
        ValueError,
        "`optx.matrix_inverse_pth_root` needs a square matrix. Received: matrix of shape (3,).",
    ),
    (
        lambda: optx.nnls(jnp.ones(3), jnp.ones(3), 10),
        ValueError,
        "`optx.nnls` needs A a matrix. Received: A of shape (3,).",
    ),
    (
        lambda: optx.nnls(jnp.ones((3, 2)), jnp.ones(2), 10),
        ValueError,
        "`optx.nnls` needs b of shape (M,) or (M, K) with M = 3, A's rows. Received: b of "
        "shape (2,).",
    ),
    (
        lambda: optx.nnls(jnp.ones((3, 2)), jnp.ones(3), -1),
        ValueError,
        "`optx.nnls` needs iters >= 0. Received: iters=-1.",
    ),
]


@pytest.mark.parametrize(("call", "error", "message"), ERRORS, ids=[e[2][:50] for e in ERRORS])
def test_error_message(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()
