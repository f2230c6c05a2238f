"""Row-sparse gradients: `RowSparse`, `embedding_grad`, and the optimizers that take them.

`sgd` and `adagrad` on a row-sparse gradient must give the dense update of its `todense()`
(sgd bit for bit, adagrad to float32 round-off; untouched rows exactly as they were);
`lazy_adam` must follow a float64 NumPy loop of TF's LazyAdam rule (touched rows only, the
global step count in the bias corrections). Mixed trees, jit with donation (only
the touched rows are read and written), the benchmark's smoke run, and every error message.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_close

import optx

ROWS, DIM, K = 50, 3, 40
# float32 against a float64 loop, relative to each leaf's largest entry (see `assert_close`).
RTOL, ATOL = 1e-6, 1e-7


def sparse_grads(steps: int, seed: int = 0, rows: int = ROWS) -> list[optx.RowSparse]:
    """Row-sparse gradients of ``K`` entries over a ``(rows, DIM)`` table, duplicates included.

    Each step touches a random subset of the rows (so some rows skip steps), and its first
    five indices repeat the next five. The last five rows are never touched.
    """
    rng = np.random.default_rng(seed)
    grads = []
    for _ in range(steps):
        ids = rng.integers(0, rows - 5, size=K)
        ids[:5] = ids[5:10]
        values = rng.standard_normal((K, DIM)).astype(np.float32)
        grads.append(optx.RowSparse(jnp.asarray(ids), jnp.asarray(values), (rows, DIM)))
    return grads


def dense_params(seed: int = 1) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "emb": jnp.asarray(rng.standard_normal((ROWS, DIM)), jnp.float32),
        "dense": {"w": jnp.asarray(rng.standard_normal((4, 2)), jnp.float32)},
    }


def dense_grads(steps: int, seed: int = 2) -> list[jax.Array]:
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal((4, 2)), jnp.float32) for _ in range(steps)]


def jitted_update(tx: Any) -> Callable[..., Any]:
    return jax.jit(lambda grads, state, params: tx.update(grads, state, params))


def jitted_step(tx: Any, donate: bool = False) -> Callable[..., Any]:
    def step(params: Any, state: Any, grads: Any) -> tuple[Any, Any, Any]:
        updates, state = tx.update(grads, state, params)
        return optx.apply_updates(params, updates), state, updates

    return jax.jit(step, donate_argnums=(0, 1) if donate else ())


def densify(tree: Any) -> Any:
    return jax.tree.map(
        lambda x: x.todense() if isinstance(x, optx.RowSparse) else x,
        tree,
        is_leaf=lambda x: isinstance(x, optx.RowSparse),
    )


# ---------------------------------------------------------------------------------------
# The type.


def test_todense_sums_duplicates_counts_negatives_from_the_end_and_drops_out_of_range():
    ids = np.array([3, 1, 3, -1, 7, -9, 3])
    values = np.arange(14, dtype=np.float32).reshape(7, 2)
    expected = np.zeros((5, 2), np.float32)
    for i, v in zip(ids, values, strict=True):
        if -5 <= i < 5:
            expected[i % 5] += v
    got = optx.RowSparse(jnp.asarray(ids), jnp.asarray(values), (5, 2)).todense()
    np.testing.assert_array_equal(got, expected)


def test_row_sparse_is_a_pytree_that_passes_through_jit():
    g = optx.RowSparse(np.array([2, 0], np.int64), jnp.ones((2, 3)), (4, 3))
    assert g.indices.dtype == jnp.int32 and g.shape == (4, 3) and g.dtype == jnp.float32
    paths = optx.tree.leaves_with_paths({"emb": g})
    assert [p for p, _ in paths] == ["emb/indices", "emb/values"]
    out = jax.jit(lambda t: t)({"emb": g})["emb"]
    assert isinstance(out, optx.RowSparse) and out.dense_shape == (4, 3)
    np.testing.assert_array_equal(out.todense(), g.todense())
    assert "RowSparse(indices=" in repr(g)


def test_embedding_grad_equals_the_dense_gradient_of_the_lookup():
    table = jnp.asarray(np.random.default_rng(0).standard_normal((ROWS, DIM)), jnp.float32)
    ids = jnp.array([[4, 9, 4], [0, 9, 4]])
    target = jnp.arange(DIM, dtype=jnp.float32)

    def loss(rows: jax.Array, target: jax.Array) -> jax.Array:
        return jnp.sum(jnp.sin(rows) * target)

    grad = optx.embedding_grad(loss, table, ids, target)
    assert grad.dense_shape == table.shape and grad.indices.shape == (6,)
    dense = jax.grad(lambda t: loss(t[ids], target))(table)
    np.testing.assert_array_equal(grad.todense(), dense)
    with_aux, aux = optx.embedding_grad(lambda r: (loss(r, target), 7), table, ids, has_aux=True)
    assert aux == 7
    np.testing.assert_array_equal(with_aux.values, grad.values)


# ---------------------------------------------------------------------------------------
# sgd and adagrad: the dense update of `todense()`.


SAME_AS_DENSE = {
    "sgd": lambda: optx.sgd(0.1),
    "sgd/schedule": lambda: optx.sgd(optx.schedules.linear_schedule(0.1, 0.01, 5)),
    "adagrad": lambda: optx.adagrad(0.5),
    "adagrad/zero_start_eps_outside": lambda: optx.adagrad(
        0.5, initial_accumulator_value=0.0, eps_in_sqrt=False
    ),
}


@pytest.mark.parametrize("name", sorted(SAME_AS_DENSE))
def test_sparse_update_equals_the_dense_update_of_todense(name):
    tx, steps = SAME_AS_DENSE[name](), 5
    # sgd: bit for bit. adagrad: to float32 round-off, as the two compiled programs may
    # round differently (XLA:CPU fuses `g * g + a` into one multiply-add in some programs
    # and not in others, and vectorises `rsqrt` in some).
    if name.startswith("sgd"):
        same = np.testing.assert_array_equal
    else:

        def same(actual: Any, expected: Any) -> None:
            np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)

    grads, g_dense = sparse_grads(steps), dense_grads(steps)
    # Updates jitted, `apply_updates` eager: in one jitted step XLA may fuse the dense
    # `p + (-lr) * g` into a multiply-add with one rounding (see the lazy_adam test).
    sparse_update, dense_update = jitted_update(tx), jitted_update(tx)
    params = dense_params()
    p_sparse, s_sparse = params, tx.init(params)
    p_dense, s_dense = params, tx.init(params)
    for g, gd in zip(grads, g_dense, strict=True):
        before = (s_sparse, s_dense)
        u_sparse, s_sparse = sparse_update({"emb": g, "dense": {"w": gd}}, s_sparse, p_sparse)
        u_dense, s_dense = dense_update({"emb": g.todense(), "dense": {"w": gd}}, s_dense, p_dense)
        p_sparse = optx.apply_updates(p_sparse, u_sparse)
        p_dense = optx.apply_updates(p_dense, u_dense)
        assert isinstance(u_sparse["emb"], optx.RowSparse)
        jax.tree.map(same, densify(u_sparse), u_dense)
        jax.tree.map(same, s_sparse, s_dense)
        # Rows without gradient: the dense update is exactly zero there and leaves their
        # state as it was, so updating the touched rows only is the dense update.
        untouched = np.setdiff1d(np.arange(ROWS), np.asarray(g.indices))
        assert untouched.size and not np.any(np.asarray(u_dense["emb"])[untouched])
        after = jax.tree.leaves((s_sparse, s_dense))
        for old, new in zip(jax.tree.leaves(before), after, strict=True):
            if np.shape(old) == (ROWS, DIM):
                np.testing.assert_array_equal(np.asarray(new)[untouched], old[untouched])
    jax.tree.map(same, p_sparse, p_dense)


# ---------------------------------------------------------------------------------------
# lazy_adam against a float64 NumPy loop of the lazy rule.


def lazy_adam_reference(
    table: np.ndarray, grads: list[optx.RowSparse], lr: float, eps: float, keras: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b1, b2 = 0.9, 0.999
    p = table.astype(np.float64)
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        ids = np.asarray(g.indices)
        dense = np.zeros_like(p)
        np.add.at(dense, ids, np.asarray(g.values, np.float64))
        rows = np.unique(ids)
        m[rows] = b1 * m[rows] + (1 - b1) * dense[rows]
        v[rows] = b2 * v[rows] + (1 - b2) * dense[rows] ** 2
        if keras:
            step = m[rows] * np.sqrt(1 - b2**t) / (1 - b1**t) / (np.sqrt(v[rows]) + eps)
        else:
            step = (m[rows] / (1 - b1**t)) / (np.sqrt(v[rows] / (1 - b2**t)) + eps)
        p[rows] -= lr * step
    return p, m, v


@pytest.mark.parametrize("placement", ["optax", "keras"])
def test_lazy_adam_follows_the_lazy_rule_and_is_adam_on_dense_leaves(placement):
    steps, lr, eps = 20, 0.05, 1e-7
    tx = optx.lazy_adam(lr, eps=eps, eps_placement=placement)
    adam = optx.adam(lr, eps=eps, eps_placement=placement)
    grads, g_dense = sparse_grads(steps, seed=3), dense_grads(steps)
    params = dense_params()
    step = jitted_step(tx, donate=True)
    p, s = jax.tree.map(jnp.copy, params), tx.init(params)
    p_adam, s_adam = {"w": params["dense"]["w"]}, adam.init({"w": params["dense"]["w"]})
    adam_step = jitted_step(adam)
    for g, gd in zip(grads, g_dense, strict=True):
        p, s, _ = step(p, s, {"emb": g, "dense": {"w": gd}})
        p_adam, s_adam, _ = adam_step(p_adam, s_adam, {"w": gd})
    ref_p, ref_m, ref_v = lazy_adam_reference(
        np.asarray(params["emb"]), grads, lr, eps, placement == "keras"
    )
    assert_close("params", p["emb"], ref_p, RTOL, ATOL)
    adam_state, (lazy_state, _) = s_adam[0], s
    assert_close("mu", lazy_state.mu["emb"], ref_m, RTOL, ATOL)
    assert_close("nu", lazy_state.nu["emb"], ref_v, RTOL, ATOL)
    # Rows never touched keep their values and zero moments, bit for bit.
    never = np.setdiff1d(np.arange(ROWS), np.concatenate([np.asarray(g.indices) for g in grads]))
    assert never.size
    np.testing.assert_array_equal(np.asarray(p["emb"])[never], np.asarray(params["emb"])[never])
    assert not np.any(np.asarray(lazy_state.mu["emb"])[never])
    # The dense leaf in the same state is plain Adam, bit for bit.
    np.testing.assert_array_equal(p["dense"]["w"], p_adam["w"])
    np.testing.assert_array_equal(lazy_state.nu["dense"]["w"], adam_state.nu["w"])
    assert int(lazy_state.count) == steps


def test_lazy_adam_on_a_dense_tree_is_adam():
    params, tx, adam = dense_params(), optx.lazy_adam(1e-2), optx.adam(1e-2)
    s_lazy, s_adam = tx.init(params), adam.init(params)
    for g in dense_grads(3):
        grads = {"emb": params["emb"] * g[0, 0], "dense": {"w": g}}
        u_lazy, s_lazy = tx.update(grads, s_lazy, params)
        u_adam, s_adam = adam.update(grads, s_adam, params)
        jax.tree.map(np.testing.assert_array_equal, u_lazy, u_adam)
    # The same leaves; the structures differ in the class that made them.
    jax.tree.map(np.testing.assert_array_equal, jax.tree.leaves(s_lazy), jax.tree.leaves(s_adam))


# ---------------------------------------------------------------------------------------
# Donated jitted steps read and write only the touched rows.


@pytest.mark.parametrize("name", ["sgd", "adagrad", "lazy_adam"])
def test_donated_step_allocates_rows_not_tables_and_compiles_once(name):
    tx = {"sgd": optx.sgd(0.1), "adagrad": optx.adagrad(0.1), "lazy_adam": optx.lazy_adam(0.1)}[
        name
    ]
    rows = 20_000
    params = {"emb": jnp.zeros((rows, DIM))}
    state = tx.init(params)
    grads = sparse_grads(2, rows=rows)
    step = jitted_step(tx, donate=True)
    memory = step.lower(params, state, {"emb": grads[0]}).compile().memory_analysis()
    table = rows * DIM * 4
    tables = len([x for x in jax.tree.leaves((params, state)) if x.size == rows * DIM])
    # Params and every slot are updated in place; the temporaries are row-sized.
    assert memory.alias_size_in_bytes >= tables * table
    assert memory.temp_size_in_bytes < table / 10, memory
    for g in grads:
        old = params["emb"]
        params, state, _ = step(params, state, {"emb": g})
        assert old.is_deleted()
    assert step._cache_size() == 1  # new indices and values: no recompilation


# ---------------------------------------------------------------------------------------
# Errors.


def g4() -> optx.RowSparse:
    return optx.RowSparse(jnp.array([1, 2]), jnp.ones((2, 3)), (4, 3))


def rejection(api: str, path: str) -> str:
    return re.escape(
        f"`{api}` needs dense updates; it does not take row-sparse ones. Received: "
        f"updates['{path}'] of type RowSparse with dense shape (4, 3). Pass `grad.todense()`"
    )


@pytest.mark.parametrize(
    ("factory", "api"),
    [
        (lambda: optx.adam(0.1), "scale_by_adam"),
        (lambda: optx.sgd(0.1, momentum=0.9), "trace"),
        (lambda: optx.clip_by_global_norm(1.0), "clip_by_global_norm"),
        (lambda: optx.chain(optx.scale(-1.0), optax.scale(2.0)), "optax.GradientTransformation"),
        (lambda: optx.adamw(0.1), "scale_by_adam"),
    ],
    ids=["adam", "sgd_momentum", "clip", "optax_in_chain", "adamw"],
)
def test_dense_only_transforms_reject_row_sparse_leaves(factory, api):
    params = {"layers": [{"emb": jnp.zeros((4, 3))}]}
    tx = factory()
    with pytest.raises(TypeError, match=rejection(api, "layers/0/emb")):
        tx.update({"layers": [{"emb": g4()}]}, tx.init(params), params)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (
            (jnp.array([1.0]), jnp.ones((1, 3)), (4, 3)),
            TypeError,
            "`optx.RowSparse` needs integer indices. Received: indices of dtype float32.",
        ),
        (
            (jnp.array([[1]]), jnp.ones((1, 3)), (4, 3)),
            ValueError,
            "`optx.RowSparse` needs 1-D indices. Received: indices of shape (1, 1).",
        ),
        (
            (jnp.array([1]), jnp.ones((1, 3), jnp.int32), (4, 3)),
            TypeError,
            "`optx.RowSparse` needs floating-point values. Received: values of dtype int32.",
        ),
        (
            (jnp.array([1, 2]), jnp.ones((2, 2)), (4, 3)),
            ValueError,
            "`optx.RowSparse` needs values of shape (len(indices), *dense_shape[1:]) = (2, 3). "
            "Received: values of shape (2, 2) with dense_shape=(4, 3).",
        ),
        (
            (jnp.array([1]), jnp.ones((1, 3)), (4.0, 3)),
            TypeError,
            "`optx.RowSparse` needs dense_shape to be a non-empty tuple of ints, the "
            "parameter's shape. Received: dense_shape=(4.0, 3).",
        ),
        (
            (jnp.array([1]), jnp.ones((1,)), ()),
            TypeError,
            "Received: dense_shape=().",
        ),
        (
            (jnp.array([1, 2]), jnp.ones((2, 3)), (2**31 - 2, 3)),
            ValueError,
            "`optx.RowSparse` needs dense_shape[0] + len(indices) <= 2**31 - 1. Received: "
            "dense_shape=(2147483646, 3) with 2 indices.",
        ),
        (
            (jnp.array([1]), jnp.ones((1, 3)), (-4, 3)),
            ValueError,
            "`optx.RowSparse` needs a dense_shape of non-negative sizes. Received: "
            "dense_shape=(-4, 3).",
        ),
    ],
    ids=[
        "float_indices",
        "2d_indices",
        "int_values",
        "values_shape",
        "float_shape",
        "empty",
        "too_many_rows",
        "negative",
    ],
)
def test_row_sparse_checks_its_arguments(args, error, message):
    with pytest.raises(error, match=re.escape(message)):
        optx.RowSparse(*args)


def test_apply_updates_needs_the_parameter_shape():
    message = (
        "`optx.apply_updates` needs each row-sparse update's dense shape to be its parameter's "
        "shape. Received: updates['emb'] of dense shape (4, 3) for params['emb'] of shape (5, 3)."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        optx.apply_updates({"emb": jnp.zeros((5, 3))}, {"emb": g4()})


def test_update_needs_the_state_shape():
    tx = optx.lazy_adam(0.1)
    message = "Received: updates['emb'] of shape (4, 3), expected (5, 3)."
    with pytest.raises(ValueError, match=re.escape(message)):
        tx.update({"emb": g4()}, tx.init({"emb": jnp.zeros((5, 3))}))


def test_embedding_grad_needs_integer_ids():
    message = "`optx.embedding_grad` needs integer ids. Received: ids of dtype float32."
    with pytest.raises(TypeError, match=re.escape(message)):
        optx.embedding_grad(jnp.sum, jnp.ones((4, 3)), jnp.array([1.0]))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"b1": 1.5}, ValueError, "`lazy_adam` needs b1"),
        ({"eps_placement": "tf"}, ValueError, "`lazy_adam` needs eps_placement to be 'optax'"),
        ({"mu_dtype": jnp.int32}, TypeError, "`lazy_adam` needs mu_dtype to be None or a float"),
    ],
)
def test_lazy_adam_checks_its_arguments(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        optx.lazy_adam(0.1, **kwargs)


# ---------------------------------------------------------------------------------------
# The benchmark's smoke run.


@pytest.mark.slow  # about 6 s: it compiles eleven steps
def test_benchmark_runs_at_tiny_size():
    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "sparse.py"
    spec = importlib.util.spec_from_file_location("bench_sparse", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--tiny", "--steps", "2", "--loops", "1"])
    assert [r["optimizer"] for r in rows] == ["sgd", "adagrad", "adam / lazy_adam", "gradient"]
    assert all(r["dense"].wall > 0 and r["sparse"].cpu > 0 for r in rows)
