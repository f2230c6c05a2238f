"""Properties checked with hypothesis on random pytrees (small ``max_examples``).

Shapes come from a short list so that the eagerly run operations hit JAX's compile cache
across examples.
"""

from __future__ import annotations

from typing import Any

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optx

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None)

SHAPES = [(), (3,), (2, 3), (4, 1, 2)]

# Largest magnitude drawn: sums of squares of a few dozen entries stay far from float32
# overflow (3.4e38), so norms are finite.
MAX_ABS = 1e4

# Norms after clipping are computed here in float64 from the float32 result. The clipped
# leaves are ``u * (c / n)`` with ``n`` a float32 norm: a few float32 roundings, each 2**-24
# relative; 1e-6 is ~16 of them.
NORM_RTOL = 1e-6


def _floats(nonfinite: bool = False) -> st.SearchStrategy[float]:
    # No subnormals: XLA:CPU flushes them to zero in arithmetic, even in ``x * 1``.
    if nonfinite:
        return st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=False)
    return st.floats(-MAX_ABS, MAX_ABS, width=32, allow_subnormal=False)


def _leaf(nonfinite: bool = False) -> st.SearchStrategy[np.ndarray]:
    return st.sampled_from(SHAPES).flatmap(
        lambda shape: hnp.arrays(np.float32, shape, elements=_floats(nonfinite))
    )


def trees(nonfinite: bool = False) -> st.SearchStrategy[Any]:
    """Nested dicts and lists of float32 arrays of the shapes in `SHAPES`."""
    leaf = _leaf(nonfinite=nonfinite)
    return st.fixed_dictionaries(
        {
            "a": leaf,
            "nested": st.fixed_dictionaries({"b": leaf}),
            "list": st.lists(leaf, max_size=2),
        }
    ).map(lambda t: jax.tree.map(jnp.asarray, t))


def assert_bitwise_equal(actual: Any, expected: Any) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


def like(data: st.DataObject, tree: Any, dtype: Any = jnp.float32) -> Any:
    """Another tree with the structure and shapes of ``tree`` (finite values, in ``dtype``)."""
    return jax.tree.map(
        lambda x: jnp.asarray(
            data.draw(hnp.arrays(np.float32, x.shape, elements=_floats())), dtype
        ),
        tree,
    )


def _norm64(x: Any) -> float:
    return float(np.sqrt(sum(np.sum(np.asarray(v, np.float64) ** 2) for v in jax.tree.leaves(x))))


@SETTINGS
@given(trees(nonfinite=True))
def test_identity_is_a_no_op(updates: Any) -> None:
    tx = optx.identity()
    state = tx.init(updates)
    out, new_state = tx.update(updates, state, updates)
    assert_bitwise_equal(out, updates)
    assert new_state == state


@SETTINGS
@given(trees(nonfinite=True))
def test_scale_one_is_a_no_op(updates: Any) -> None:
    tx = optx.scale(1.0)
    assert_bitwise_equal(tx.update(updates, tx.init(updates))[0], updates)


@SETTINGS
@given(trees(), st.data())
def test_add_decayed_weights_zero_is_a_no_op(updates: Any, data: st.DataObject) -> None:
    params = like(data, updates)
    tx = optx.add_decayed_weights(0.0)
    assert_bitwise_equal(tx.update(updates, tx.init(params), params)[0], updates)


TRANSFORMS = {
    "sgd_momentum": lambda: optx.sgd(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: optx.adam(1e-2),
    "adamw": lambda: optx.adamw(1e-2, weight_decay=0.1),
    "clip_by_global_norm": lambda: optx.clip_by_global_norm(1.0),
    "clip_by_norm": lambda: optx.clip_by_norm(1.0),
    "ema": lambda: optx.ema(0.9),
    "centralize": optx.centralize,
}


@SETTINGS
@given(st.sampled_from(sorted(TRANSFORMS)), trees(), st.integers(1, 3))
def test_chain_with_identity_changes_nothing(name: str, grads: Any, steps: int) -> None:
    tx = TRANSFORMS[name]()
    chained = optx.chain(optx.identity(), tx, optx.identity())
    params = jax.tree.map(lambda g: jnp.ones_like(g) * 0.5, grads)
    state, chained_state = tx.init(params), chained.init(params)
    for _ in range(steps):
        updates, state = tx.update(grads, state, params)
        chained_updates, chained_state = chained.update(grads, chained_state, params)
        assert_bitwise_equal(chained_updates, updates)
    assert_bitwise_equal(chained_state[1], state)


@SETTINGS
@given(trees(), st.floats(1e-3, 1e3))
def test_global_norm_after_clip_by_global_norm_is_at_most_the_bound(
    updates: Any, max_norm: float
) -> None:
    tx = optx.clip_by_global_norm(max_norm)
    out = tx.update(updates, tx.init(updates))[0]
    norm_in, norm_out = _norm64(updates), _norm64(out)
    assert norm_out <= max_norm * (1 + NORM_RTOL)
    if norm_in < max_norm * (1 - NORM_RTOL):
        assert_bitwise_equal(out, updates)
    else:  # Rescaled, direction kept: onto the sphere of radius max_norm.
        np.testing.assert_allclose(norm_out, max_norm, rtol=NORM_RTOL)


@SETTINGS
@given(trees(), st.floats(1e-3, 1e3))
def test_per_leaf_norm_after_clip_by_norm_is_at_most_the_bound(
    updates: Any, max_norm: float
) -> None:
    tx = optx.clip_by_norm(max_norm)
    out = tx.update(updates, tx.init(updates))[0]
    for u, o in zip(jax.tree.leaves(updates), jax.tree.leaves(out), strict=True):
        n_in, n_out = _norm64(u), _norm64(o)
        assert n_out <= max_norm * (1 + NORM_RTOL)
        if n_in <= max_norm:
            np.testing.assert_allclose(np.asarray(o), np.asarray(u), rtol=2**-23)
        else:
            np.testing.assert_allclose(n_out, max_norm, rtol=NORM_RTOL)


@SETTINGS
@given(trees(), st.floats(0.0, 1e3, width=32))
def test_clip_keeps_values_in_range(updates: Any, max_delta: float) -> None:
    tx = optx.clip(max_delta)
    out = tx.update(updates, tx.init(updates))[0]
    for u, o in zip(jax.tree.leaves(updates), jax.tree.leaves(out), strict=True):
        o = np.asarray(o)
        assert o.dtype == np.float32
        assert np.all(o <= max_delta) and np.all(o >= -max_delta)
        np.testing.assert_array_equal(o, np.clip(np.asarray(u), -max_delta, max_delta))


DTYPES = [jnp.float32, jnp.bfloat16, jnp.float16]


@SETTINGS
@given(trees(), st.sampled_from(DTYPES), st.sampled_from(DTYPES), st.data())
def test_apply_updates_keeps_dtypes(tree: Any, p_dtype: Any, u_dtype: Any, data: Any) -> None:
    params = jax.tree.map(lambda x: x.astype(p_dtype), tree)
    updates = like(data, tree, u_dtype)
    new = optx.apply_updates(params, updates)
    assert jax.tree.structure(new) == jax.tree.structure(params)
    for p, u, n in zip(*map(jax.tree.leaves, (params, updates, new)), strict=True):
        assert n.dtype == p.dtype and n.shape == p.shape
        # The sum, rounded to the parameter's dtype (at most twice: float32, then p's dtype).
        exact = np.asarray(p, np.float64) + np.asarray(u, np.float64)
        finfo = jnp.finfo(p_dtype)
        bound = float(finfo.eps) * np.abs(exact) + float(finfo.tiny)
        assert np.all(np.abs(np.asarray(n, np.float64) - exact) <= bound)


@SETTINGS
@given(trees())
def test_apply_updates_none_leaves_keep_params(params: Any) -> None:
    updates = jax.tree.map(lambda p: None, params)
    assert_bitwise_equal(optx.apply_updates(params, updates), params)


# Hyperparameters and their ranges (DESIGN D2: float32 scalars; decays stored as 1 - b).
HYPERPARAMS = [
    ("adam", lambda: optx.adam(1e-3), "learning_rate", st.floats(0.0, 10.0)),
    ("adam", lambda: optx.adam(1e-3), "eps", st.floats(0.0, 1.0)),
    ("adam", lambda: optx.adam(1e-3), "eps_root", st.floats(0.0, 1.0)),
    ("adam", lambda: optx.adam(1e-3), "b1", st.floats(0.0, 0.999999, exclude_max=True)),
    ("adam", lambda: optx.adam(1e-3), "b2", st.floats(0.0, 0.9999999, exclude_max=True)),
    ("sgd", lambda: optx.sgd(0.1, momentum=0.9), "momentum", st.floats(0.0, 1.0)),
    ("trace", lambda: optx.trace(0.9), "decay", st.floats(0.0, 1.0)),
    (
        "clip_by_global_norm",
        lambda: optx.clip_by_global_norm(1.0),
        "max_norm",
        st.floats(1e-30, 1e6),
    ),
    ("ema_params", lambda: optx.ema_params(0.99), "momentum", st.floats(0.0, 1.0)),
    ("ema", lambda: optx.ema(0.9), "decay", st.floats(0.0, 1.0)),
]
DECAYS = {("adam", "b1"), ("adam", "b2"), ("ema_params", "momentum"), ("ema", "decay")}


# One jitted setter per hyperparameter name, reused across examples.
_JITTED_SETTERS: dict[str, Any] = {}


@settings(max_examples=10, deadline=None, derandomize=True, database=None)
@given(st.data())
@pytest.mark.parametrize(
    "index", range(len(HYPERPARAMS)), ids=[f"{h[0]}-{h[2]}" for h in HYPERPARAMS]
)
def test_set_then_get_hyperparams_round_trips(index: int, data: st.DataObject) -> None:
    api, make, name, values = HYPERPARAMS[index]
    value = data.draw(values, label=name)
    state = make().init({"w": jnp.zeros(3)})
    set_traced = _JITTED_SETTERS.setdefault(
        name, jax.jit(lambda s, v: optx.set_hyperparams(s, **{name: v}))
    )
    concrete = optx.set_hyperparams(state, **{name: value})
    traced = set_traced(state, jnp.float32(value))
    for new_state in (concrete, traced):
        got = optx.get_hyperparams(new_state)[name]
        assert got.dtype == jnp.float32 and got.shape == ()
        assert jax.tree.structure(new_state) == jax.tree.structure(state)
        # The value itself is kept (a decay's residual beside it): exact in float32.
        assert float(got) == np.float32(value)
        # The other hyperparameters are untouched.
        for other, before in optx.get_hyperparams(state).items():
            if other != name:
                assert float(optx.get_hyperparams(new_state)[other]) == float(before)
    if (api, name) in DECAYS:
        # From a Python float, 1 - b is computed in float64 and kept to float32 round-off
        # (one rounding more for b < 0.5, where 1 - b >= 0.5: one ulp, 2**-23 relative).
        (h,) = [
            n
            for n in jax.tree.leaves(concrete, is_leaf=lambda x: isinstance(x, optx.HyperParams))
            if isinstance(n, optx.HyperParams) and name in [e.name for e in n.entries]
        ]
        field = next(e.field for e in h.entries if e.name == name)
        np.testing.assert_allclose(
            h.complement(field), np.float32(1.0 - value), rtol=2.0**-23, atol=0
        )
