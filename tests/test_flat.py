"""`optx.FlatTree`, `optx.flatten_tree` and `optx.flatten`: flat buffers between steps.

The reference is the per-leaf optx optimizer (itself checked against NumPy and optax
elsewhere). Elementwise maths on a buffer is the same arithmetic as on the leaves, so float32
leaves agree to ``rtol=1e-6`` of the leaf's scale; global norms sum in another order, which
can move a bfloat16 result by one bfloat16 ulp (``2**-8`` of the leaf's scale).
"""

from __future__ import annotations

import dataclasses
import re
import tempfile

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_close, count_compiles
from multidevice import run_on_devices

import optx

STEPS = 20
BF16_ULP = 2.0**-8


def make_tree(seed: int, scale: float = 1.0) -> dict:
    """Mixed dtypes: float32 matrices and a scalar, bfloat16 vectors, a tuple, a None."""
    rng = np.random.RandomState(seed)

    def a(shape, dtype=jnp.float32):
        return jnp.asarray(scale * rng.standard_normal(shape), dtype)

    return {
        "dense": {"kernel": a((4, 3)), "bias": a((3,), jnp.bfloat16)},
        "layers": (a((2, 5)), {"w": a((5,), jnp.bfloat16)}),
        "scale": a(()),
        "frozen": None,
    }


def loss(params: dict) -> jax.Array:
    leaves = [x.astype(jnp.float32) for x in jax.tree.leaves(params)]
    return sum(jnp.sum(jnp.cos(x) + 0.5 * x**2) for x in leaves)


def check_close(name: str, actual, expected, bf16_rtol: float = 1e-6) -> None:
    """Per leaf: float32 to 1e-6, bfloat16 to ``bf16_rtol``, of the leaf's scale or 1.

    The leaves start at scale 1: a leaf that trains towards 0 keeps the round-off of the
    larger numbers it was computed from.
    """
    for path, a in jax.tree_util.tree_leaves_with_path(actual):
        e = _at(expected, path)
        assert jnp.result_type(a) == jnp.result_type(e), (name, path)
        rtol = bf16_rtol if jnp.result_type(e) == jnp.bfloat16 else 1e-6
        assert_close(f"{name}{jax.tree_util.keystr(path)}", a, e, rtol=rtol, atol=rtol)


def _at(tree, path):
    for key in path:
        tree = tree[getattr(key, "key", getattr(key, "idx", None))]
    return tree


# ---------------------------------------------------------------------------------------
# FlatTree: round trip, gradients, apply_updates.


def test_round_trip_groups_by_dtype() -> None:
    tree = make_tree(0)
    flat = optx.flatten_tree(tree)
    assert [(b.dtype, b.shape) for b in flat.buffers] == [
        (jnp.bfloat16, (8,)),
        (jnp.float32, (23,)),
    ]
    assert flat.paths == ("dense/bias", "dense/kernel", "layers/0", "layers/1/w", "scale")
    chex.assert_trees_all_equal(flat.unflatten(), tree)
    assert flat.unflatten()["frozen"] is None
    assert repr(flat) == "FlatTree(5 leaves; bfloat16: bfloat16[8], float32: float32[23])"
    # Inside jit, and as a jit argument and result.
    chex.assert_trees_all_equal(jax.jit(lambda f: f.unflatten())(flat), tree)
    chex.assert_trees_all_equal(jax.jit(optx.flatten_tree)(tree).buffers, flat.buffers)


@pytest.mark.parametrize(
    "tree",
    [{}, [], None, jnp.float32(2.0), 3.0, {"a": jnp.zeros((0, 2)), "b": jnp.ones(2)}],
    ids=["empty_dict", "empty_list", "none", "scalar_leaf", "python_float", "zero_size"],
)
def test_round_trip_edge_cases(tree) -> None:
    flat = optx.flatten_tree(tree)
    back = flat.unflatten()
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    for got, want in zip(jax.tree.leaves(back), jax.tree.leaves(tree), strict=True):
        np.testing.assert_array_equal(got, want)
        assert np.shape(got) == np.shape(want)
    assert len(flat.buffers) == len({jnp.result_type(x) for x in jax.tree.leaves(tree)})


def test_a_lone_leaf_keeps_its_shape_and_a_donated_step_copies_nothing() -> None:
    tree = {"w": jnp.ones((64, 32)), "h": jnp.ones((3, 2), jnp.bfloat16), "b": jnp.ones(5)}
    flat = optx.flatten_tree({"w": tree["w"], "h": tree["h"]})
    assert [b.shape for b in flat.buffers] == [(3, 2), (64, 32)]  # one leaf per dtype
    assert repr(flat) == "FlatTree(2 leaves; bfloat16: bfloat16[3, 2], float32: float32[64, 32])"
    chex.assert_trees_all_equal(flat.unflatten(), {"w": tree["w"], "h": tree["h"]})
    assert [b.shape for b in optx.flatten_tree(tree).buffers] == [(2053,), (3, 2)]
    # adamw reads the parameters twice (its decay, then apply_updates): were the lone leaf
    # raveled, XLA would copy the donated parameters instead of updating them in place.
    params = {"w": jnp.ones((256, 128))}
    for tx in (optx.adamw(0.1), optx.flatten(optx.adamw(0.1))):

        def step(p, s, g, tx=tx):
            u, s = tx.update(g, s, p)
            return optx.apply_updates(p, u), s

        compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, tx.init(params), params)
        temp = compiled.compile().memory_analysis().temp_size_in_bytes
        assert temp < 256 * 128 * 4, (tx, temp)


def test_like_lays_out_another_tree() -> None:
    flat = optx.flatten_tree(make_tree(0))
    other = optx.flatten_tree(jax.tree.map(lambda x: x.astype(jnp.float32), make_tree(1)), flat)
    assert other.layout == flat.layout  # cast to each buffer's dtype
    chex.assert_trees_all_equal(
        other.unflatten(),
        jax.tree.map(lambda x: x.astype(jnp.float32).astype(x.dtype), make_tree(1)),
    )


def test_grad_of_flat_tree_is_flat_and_matches_per_leaf() -> None:
    tree = make_tree(0)
    flat = optx.flatten_tree(tree)
    grads = jax.jit(jax.grad(lambda f: loss(f.unflatten())))(flat)
    assert isinstance(grads, optx.FlatTree) and grads.layout == flat.layout
    chex.assert_trees_all_equal(grads.unflatten(), jax.jit(jax.grad(loss))(tree))
    # Unflattening under grad is one split per buffer: its transpose is one concatenation.
    jaxpr = jax.make_jaxpr(jax.grad(lambda f: loss(f.unflatten())))(flat)
    names = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert names.count("split") == 2 and names.count("concatenate") == 2
    assert "pad" not in names and "dynamic_update_slice" not in names


def test_apply_updates_on_flat_trees() -> None:
    flat = optx.flatten_tree(make_tree(0))
    updates = optx.flatten_tree(make_tree(1), flat)
    new = optx.apply_updates(flat, updates)
    assert isinstance(new, optx.FlatTree)
    chex.assert_trees_all_equal(
        new.unflatten(), optx.apply_updates(make_tree(0), updates.unflatten())
    )


# ---------------------------------------------------------------------------------------
# Numerics: flat state, flat parameters and the per-leaf path agree over 20 steps.


def _adamw():
    return optx.adamw(0.05, weight_decay=0.1)


def _clip_adamw_ema():
    return optx.chain(optx.clip_by_global_norm(1.0), _adamw(), optx.ema_params(0.9))


OPTIMIZERS = {
    "adam": (lambda: optx.adam(0.05), 1e-6),
    "adamw": (_adamw, 1e-6),
    "sgd_momentum": (lambda: optx.sgd(0.05, momentum=0.9, nesterov=True), 1e-6),
    "lion": (lambda: optx.lion(0.01), 1e-6),
    "rmsprop": (lambda: optx.rmsprop(0.01, momentum=0.5, centered=True), 1e-6),
    # The global norm is summed in another order: a bfloat16 leaf may move by an ulp.
    "clip_adamw_ema": (_clip_adamw_ema, BF16_ULP),
}


def train_all(make) -> tuple:
    """`STEPS` steps of ``make()`` per leaf, of ``flatten(make())``, and on flat parameters.

    One jitted program runs the three (one compilation); returns each one's parameters (as
    the tree) and state.
    """
    tx, flat_tx = make(), optx.flatten(make())
    tree = make_tree(0)
    flat = optx.flatten_tree(tree)

    def train(tx, params, state, unflatten):
        def step(_, carry):
            params, state = carry
            grads = jax.grad(lambda p: loss(unflatten(p)))(params)
            updates, state = tx.update(grads, state, params)
            return optx.apply_updates(params, updates), state

        return jax.lax.fori_loop(0, STEPS, step, (params, state))

    @jax.jit
    def run(tree, flat, states):
        same = lambda p: p  # noqa: E731
        return (
            train(tx, tree, states[0], same),
            train(flat_tx, tree, states[1], same),
            train(tx, flat, states[2], optx.FlatTree.unflatten),
        )

    return run(tree, flat, (tx.init(tree), flat_tx.init(tree), tx.init(flat)))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_flat_state_and_flat_params_match_per_leaf(name: str) -> None:
    make, bf16_rtol = OPTIMIZERS[name]
    (reference, ref_state), (flat_state, state), (flat_params, _) = train_all(make)
    check_close(f"{name}/flatten", flat_state, reference, bf16_rtol)
    check_close(f"{name}/flat_params", flat_params.unflatten(), reference, bf16_rtol)
    # The slots too (moments, momentum, the EMA of the parameters), laid out as the tree.
    flat_slots, ref_slots = _slots(state), _slots(ref_state)
    assert len(flat_slots) == len(ref_slots) >= 1
    for flat_slot, ref_slot in zip(flat_slots, ref_slots, strict=True):
        check_close(f"{name}/slot", flat_slot.unflatten(), ref_slot, bf16_rtol)


def _is_slot(x) -> bool:
    return isinstance(x, optx.FlatTree) or (isinstance(x, dict) and "dense" in x)


def _slots(state) -> list:
    """The per-parameter slots of a state (FlatTrees in a flat state), in tree order."""
    return [x for x in jax.tree.leaves(state, is_leaf=_is_slot) if _is_slot(x)]


def test_every_accepted_registry_entry_computes_the_same_flat() -> None:
    """Each transform marked elementwise, through a registry entry that holds it.

    Two float32 leaves (mixed dtypes are tested above), run op by op: the entries then
    share most of XLA's compiled primitives, which keeps the test fast.
    """
    from registry import REGISTRY

    rng = np.random.RandomState(0)

    def tree(scale):
        return {
            "a": jnp.asarray(scale * rng.standard_normal(3), jnp.float32),
            "c": jnp.asarray(scale * rng.standard_normal(()), jnp.float32),
        }

    params, grads = tree(1.0), [tree(2.0) for _ in range(2)]
    covered: set[type] = set()
    with jax.disable_jit():
        for key, entry in REGISTRY.items():
            tx = entry()
            kinds = {type(t) for t in _transforms(tx)}
            if kinds <= covered:
                continue
            try:
                flat_tx = optx.flatten(tx)
            except ValueError:
                continue
            covered |= kinds
            p, fp, s, fs = params, params, tx.init(params), flat_tx.init(params)
            for g in grads:
                u, s = tx.update(g, s, p, **entry.extra)
                fu, fs = flat_tx.update(g, fs, fp, **entry.extra)
                check_close(key, fu, u)
                p, fp = optx.apply_updates(p, u), optx.apply_updates(fp, fu)
    marked = {cls for cls in _subclasses(optx.Transform) if cls.elementwise and "name" in vars(cls)}
    assert marked - {optx.Transform} <= covered, sorted(c.name for c in marked - covered)


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def _transforms(tx):
    yield tx
    for field in dataclasses.fields(tx):
        yield from _nested(getattr(tx, field.name))


def _nested(value):
    if isinstance(value, optx.Transform):
        yield from _transforms(value)
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _nested(item)


# ---------------------------------------------------------------------------------------
# Hyperparameters, checkpoints, donation.


def test_hyperparams_live_in_the_flat_state() -> None:
    tx, flat_tx = optx.adam(0.05), optx.flatten(optx.adam(0.05))
    params, grads = make_tree(0), make_tree(1)
    state = optx.set_hyperparams(tx.init(params), learning_rate=0.2, b1=0.5)
    flat_state = optx.set_hyperparams(flat_tx.init(params), learning_rate=0.2, b1=0.5)
    assert optx.get_hyperparams(flat_state).keys() == optx.get_hyperparams(state).keys()
    np.testing.assert_allclose(optx.get_hyperparams(flat_state)["learning_rate"], 0.2)
    step = jax.jit(flat_tx.update)
    with count_compiles("update") as compiled:
        check_close("lr", step(grads, flat_state, params)[0], tx.update(grads, state)[0])
        step(grads, optx.set_hyperparams(flat_state, learning_rate=0.3), params)
    assert len(compiled) == 1


def _unpacked(state):
    """``state`` with each `HyperParams` node holding a leaf per value (the per-leaf form)."""

    def unpack(x):
        if not isinstance(x, optx.HyperParams):
            return x
        return optx.HyperParams(
            x.entries, x.in_force, x.residuals, x.scales, x.count, owner=x.owner
        )

    return jax.tree.map(unpack, state, is_leaf=lambda x: isinstance(x, optx.HyperParams))


def test_hyperparams_are_packed_into_one_array_per_transform() -> None:
    sched = optx.schedules.linear_schedule(0.9, 0.5, 4)
    inner = optx.chain(optx.clip_by_global_norm(2.0), optx.adamw(sched, b1=0.95, b2=0.999))
    tx, flat_tx = inner, optx.flatten(inner)
    params, grads = make_tree(0), make_tree(1)
    state, flat_state = tx.init(params), flat_tx.init(params)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(flat_state)]
    packed = [p for p in paths if p.endswith(".hyperparams.packed")]
    # clip (max_norm), adam (b1, b2, eps, eps_root and 2 residuals), weight decay, lr (scale).
    assert len(packed) == 4, paths
    assert not [p for p in paths if "residual" in p or "scale" in p], paths
    sizes = [
        x.shape
        for p, x in jax.tree_util.tree_leaves_with_path(flat_state)
        if jax.tree_util.keystr(p).endswith("packed")
    ]
    assert sizes == [(1,), (6,), (1,), (2,)]
    # Read, written, scaled and stepped as the per-leaf state's, by the same names.
    for name, value in optx.get_hyperparams(state).items():
        assert float(optx.get_hyperparams(flat_state)[name]) == float(value), name
    set_to = {"b2": 0.99, "max_norm": 0.5, "learning_rate": 0.45}
    state = optx.scale_hyperparams(optx.set_hyperparams(state, **set_to), weight_decay=3.0)
    flat_state = optx.set_hyperparams(flat_state, **set_to)
    flat_state = optx.scale_hyperparams(flat_state, weight_decay=3.0)
    assert float(flat_state.inner_state[1][0].hyperparams.complement("b2")) == float(
        state[1][0].hyperparams.complement("b2")
    )
    step, flat_step = jax.jit(tx.update), jax.jit(flat_tx.update)
    for _ in range(5):
        updates, state = step(grads, state, params)
        flat_updates, flat_state = flat_step(grads, flat_state, params)
        check_close("packed", flat_updates, updates)
    got, want = optx.get_hyperparams(flat_state), optx.get_hyperparams(state)
    assert {k: float(v) for k, v in got.items()} == {k: float(v) for k, v in want.items()}
    # Unpacked, the flat state holds exactly the per-leaf form's hyperparameters.
    flat_nodes = [n for _, n in optx._src.hyperparams.nodes(_unpacked(flat_state))]
    nodes = [n for _, n in optx._src.hyperparams.nodes(state)]
    chex.assert_trees_all_equal(flat_nodes, nodes)


def test_summary_and_stateful_wrapper_of_a_flat_state() -> None:
    params, grads = make_tree(0), make_tree(1)
    state = optx.flatten(optx.adam(0.05, b1=0.8)).init(params)
    table = optx.summary(state)
    rows = {row.name: row for row in table.rows}
    assert rows["b1"].kind == "hyperparameter" and rows["b1"].value == pytest.approx(0.8)
    assert rows["learning_rate"].value == pytest.approx(0.05)
    assert "layout" not in str(table)
    opt = optx.optimizers.Optimizer(optx.flatten(optx.adam(0.05, b1=0.8)))
    opt.build(params)
    assert [k for k in opt.variables if "hyperparams" in k] == [
        "optimizer/inner_state/0/hyperparams/packed",
        "optimizer/inner_state/1/hyperparams/packed",
    ]
    assert float(opt.learning_rate) == np.float32(0.05)
    opt.learning_rate = 0.5
    assert float(opt.learning_rate) == 0.5
    assert "learning_rate=0.5" in repr(opt) and "b1=0.8" in repr(opt)
    expected = optx.flatten(optx.adam(0.5, b1=0.8))
    updates = expected.update(grads, expected.init(params), params)[0]
    with pytest.warns(UserWarning, match="gradients do not exist for"):  # the None leaf
        new = opt.apply(grads, params)
    check_close("wrapper", new, optx.apply_updates(params, updates))


def test_restore_a_flat_store_of_the_previous_release(tmp_path) -> None:
    # Releases up to 0.1.0.dev0 kept a flat state's hyperparameters as the per-leaf state's,
    # a decay b as float32 1 - b under "one_minus_<name>" (see test_checkpoint.py).
    tx = optx.flatten(optx.adam(0.05, b1=0.95, b2=0.9995))
    params = make_tree(0)
    state = tx.update(make_tree(1), tx.init(params), params)[1]
    old: dict = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(_unpacked(state)):
        names = [str(getattr(k, "name", getattr(k, "key", getattr(k, "idx", None)))) for k in path]
        if "residual" in names:
            continue
        if names[-2] == "hyperparams" and names[-1] in ("b1", "b2"):
            complement = state.inner_state[0].hyperparams.complement(names[-1])
            names[-1], leaf = "one_minus_" + names[-1], complement
        node = old
        for name in names[:-1]:
            node = node.setdefault(name, {})
        node[names[-1]] = np.asarray(leaf)
    orbax = pytest.importorskip("orbax.checkpoint")
    with orbax.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "old", old)
    restored = optx.restore_state(tmp_path / "old", tx.init(params))
    # The values and 1 - b as stored (the residual, not stored then, is recovered from it).
    h, was = restored.inner_state[0].hyperparams, state.inner_state[0].hyperparams
    assert h.packed and float(h["b1"]) == float(np.float32(0.95))
    for name in ("b1", "b2"):
        assert float(h.complement(name)) == float(was.complement(name)), name
    assert optx.get_hyperparams(restored) == optx.get_hyperparams(state)
    no_hyper = lambda s: jax.tree.map(  # noqa: E731
        lambda x: None if isinstance(x, optx.HyperParams) else x,
        s,
        is_leaf=lambda x: isinstance(x, optx.HyperParams),
    )
    chex.assert_trees_all_equal(no_hyper(restored), no_hyper(state))


def test_checkpoint_round_trip() -> None:
    tx = optx.flatten(_clip_adamw_ema())
    params = make_tree(0)
    state = tx.update(make_tree(1), tx.init(params), params)[1]
    path = tempfile.mkdtemp() + "/flat"
    optx.save_state(path, {"params": optx.flatten_tree(params), "state": state})
    target = {"params": optx.flatten_tree(params), "state": tx.init(params)}
    restored = optx.restore_state(path, target)
    chex.assert_trees_all_equal(restored["state"], state)
    assert restored["state"].layout == state.layout


def test_donated_steps_run_and_do_not_recompile() -> None:
    tx = optx.adam(0.05)
    tree = make_tree(0)
    params = optx.flatten_tree(tree)

    def step(params, state):
        grads = jax.grad(lambda p: loss(p.unflatten()))(params)
        updates, state = tx.update(grads, state, params)
        return optx.apply_updates(params, updates), state

    fn = jax.jit(step, donate_argnums=(0, 1))
    state = tx.init(params)
    with count_compiles("step") as compiled:
        for _ in range(3):
            old = params.buffers[0]
            params, state = fn(params, state)
    assert len(compiled) == 1
    assert old.is_deleted()  # donated: the step wrote in place
    assert not any(x.is_deleted() for x in jax.tree.leaves(tree))  # the buffers were copies
    check_close("donated", params.unflatten(), _steps(tx, 3))
    # The wrapper on plain parameters: one state buffer per dtype and slot, donated too.
    flat_tx = optx.flatten(optx.adam(0.05))
    plain = make_tree(0)
    state = flat_tx.init(plain)
    # mu, nu (2 dtypes each); 2 counts; each transform's hyperparameters (adam's 5 and
    # the residuals of b1 and b2; the learning rate) packed in one array.
    assert len(jax.tree.leaves(state)) == 2 * 2 + 2 + 2

    def plain_step(params, state):
        updates, state = flat_tx.update(jax.grad(loss)(params), state, params)
        return optx.apply_updates(params, updates), state

    fn = jax.jit(plain_step, donate_argnums=(0, 1))
    for _ in range(3):
        plain, state = fn(plain, state)
    check_close("donated/flatten", plain, _steps(tx, 3))


def _steps(tx, n: int):
    """``n`` jitted per-leaf steps on `loss` from ``make_tree(0)``."""

    @jax.jit
    def step(params, state):
        updates, state = tx.update(jax.grad(loss)(params), state, params)
        return optx.apply_updates(params, updates), state

    params = make_tree(0)
    state = tx.init(params)
    for _ in range(n):
        params, state = step(params, state)
    return params


# ---------------------------------------------------------------------------------------
# Errors.


@pytest.mark.parametrize(
    ("inner", "where", "why"),
    [
        (optx.clip_by_norm(1.0), "inner", "per-parameter reductions"),
        (
            optx.chain(optx.clip_by_global_norm(1.0), optx.lamb(0.1)),
            "inner.transforms[1].transforms[2]",
            "per-parameter reductions",
        ),
        (optx.adamw(0.1, mask="kernel"), "inner.transforms[1]", "selects parameters by path"),
        (
            optx.named_chain(("a", optx.adam(0.1)), ("b", optx.adafactor(0.1))),
            "inner.transforms['b'].transforms[0]",
            "each parameter's shape",
        ),
        (optax.adam(0.1), "inner", "not an optx transform"),
        (optx.stateless(lambda u, p: u), "inner", "a function of your own"),
    ],
    ids=["clip_by_norm", "lamb_in_chain", "masked_decay", "adafactor_named", "optax", "stateless"],
)
def test_flatten_refuses_non_elementwise_transforms(inner, where, why) -> None:
    with pytest.raises(ValueError, match=re.escape(f"Received: {where}=")) as error:
        optx.flatten(inner)
    assert why in str(error.value)
    assert "`flatten` needs an inner transform whose maths is elementwise" in str(error.value)


def test_flatten_errors() -> None:
    with pytest.raises(TypeError, match=re.escape("`flatten` needs inner to be a transform")):
        optx.flatten(3)
    tx = optx.flatten(optx.adam(0.1))
    state = tx.init(make_tree(0))
    missing = make_tree(1)
    del missing["scale"]
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`flatten.update` needs updates with the structure of the parameters given to "
            "`init`. Received: missing from updates: 'scale'."
        ),
    ):
        tx.update(missing, state)
    bad = make_tree(1)
    bad["dense"]["kernel"] = jnp.ones((3, 4))
    with pytest.raises(
        ValueError,
        match=re.escape("Received: updates['dense/kernel'] of shape (3, 4), expected (4, 3)."),
    ):
        tx.update(bad, state)
    no_grad = make_tree(1)
    no_grad["scale"] = None
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`flatten.update` needs an array for every leaf of the parameters given to "
            "`init`. Received: updates['scale']=None"
        ),
    ):
        tx.update(no_grad, state)
    other = optx.flatten_tree({"w": jnp.ones(2)})
    with pytest.raises(ValueError, match=re.escape("`flatten.update` needs params laid out as")):
        tx.update(make_tree(1), state, other)
    with pytest.raises(ValueError, match=re.escape("`flatten.update` needs the state made by")):
        tx.update(make_tree(1), optx.adam(0.1).init(make_tree(0)))
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`flatten.init` needs floating-point params (float16, bfloat16, "
            "float32 or float64). Received: params['n'] of dtype int32."
        ),
    ):
        tx.init({"n": jnp.arange(3), "w": jnp.ones(2)})
    for bad in (-1, 2.5, True, "8"):
        with pytest.raises(
            ValueError,
            match=re.escape(
                f"`flatten` needs max_concat_size to be an int >= 0 or None. "
                f"Received: max_concat_size={bad!r}."
            ),
        ):
            optx.flatten(optx.adam(0.1), max_concat_size=bad)


def test_large_leaves_keep_their_own_state_buffers() -> None:
    tree = {"big": jnp.linspace(0.0, 1.0, 40).reshape(8, 5), "b": jnp.ones(3), "c": -jnp.ones(4)}
    grads = jax.tree.map(lambda x: 0.1 * x + 0.05, tree)
    per_leaf = optx.adamw(0.1, weight_decay=0.1)
    expected = _steps_with(per_leaf, tree, grads, 3)
    for size, shapes in ((16, [(7,), (8, 5)]), (40, [(47,)]), (None, [(47,)]), (0, None)):
        tx = optx.flatten(per_leaf, max_concat_size=size)
        state = tx.init(tree)
        if shapes is None:  # every leaf keeps its own buffer
            shapes = [(3,), (8, 5), (4,)]
        assert [b.shape for b in state.inner_state[0].mu.buffers] == shapes, size
        check_close(f"max_concat_size={size}", _steps_with(tx, tree, grads, 3), expected)
    # The default concatenates small leaves only.
    assert optx.flatten(per_leaf).max_concat_size == 2**11
    tree = {"w": jnp.ones((32, 65)), "v": jnp.ones((32, 64)), "b": jnp.ones(2)}
    layout = optx.flatten(per_leaf).init(tree).layout
    want = "FlatLayout(3 leaves; float32: float32[2050], float32:w: float32[32, 65])"
    assert repr(layout) == want


def _steps_with(tx, params, grads, n):
    state = tx.init(params)
    step = jax.jit(lambda p, s: _apply(tx, p, s, grads))
    for _ in range(n):
        params, state = step(params, state)
    return params


def _apply(tx, params, state, grads):
    updates, state = tx.update(grads, state, params)
    return optx.apply_updates(params, updates), state


def test_flatten_tree_errors() -> None:
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`flatten_tree` needs a pytree of arrays. Received: tree['a/name'] of type str."
        ),
    ):
        optx.flatten_tree({"a": {"name": "x"}, "b": jnp.ones(1)})
    with pytest.raises(TypeError, match=re.escape("needs like to be a FlatTree or None")):
        optx.flatten_tree({"a": jnp.ones(1)}, like={"a": jnp.ones(1)})
    flat = optx.flatten_tree({"a": jnp.ones(2)})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`flatten_tree` needs tree with the shapes of like. Received: tree['a'] of "
            "shape (3,), expected (2,)."
        ),
    ):
        optx.flatten_tree({"a": jnp.ones(3)}, like=flat)
    with pytest.raises(ValueError, match=re.escape("needs one buffer per group of its layout")):
        optx.FlatTree((), flat.layout)


# ---------------------------------------------------------------------------------------
# Sharding: 8 CPU devices.


@pytest.mark.multidevice
def test_sharded_leaves_keep_their_buffers_and_results_match() -> None:
    run_on_devices(
        """
        import jax, jax.numpy as jnp, numpy as np, optx
        from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

        mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
        rep, row = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        rng = np.random.RandomState(0)
        host = {"a": rng.randn(3, 4).astype(np.float32), "s": np.float32(0.5),
                "b": {"w": rng.randn(16, 4).astype(np.float32),
                      "h": rng.randn(5).astype(jnp.bfloat16)}}
        params = jax.device_put(host, {"a": rep, "s": rep, "b": {"w": row, "h": rep}})
        loss = lambda p: sum(jnp.sum(jnp.sin(x.astype(jnp.float32))) for x in jax.tree.leaves(p))
        # float32 and bfloat16 buffers replicated, then b/w on its own, split over "data".
        expected = [None, None, "data"]

        def split_over(buffers):
            return [None if b.sharding.is_fully_replicated else b.sharding.spec[0]
                    for b in buffers]

        def run(tx, params, flat):
            def step(params, state):
                grads = jax.grad(lambda p: loss(p.unflatten() if flat else p))(params)
                updates, state = tx.update(grads, state, params)
                return optx.apply_updates(params, updates), state
            if flat:
                params = optx.flatten_tree(params)
                state = jax.jit(tx.init, out_shardings=optx.state_shardings(tx, params))(params)
            else:
                state = tx.init(params)
            fn = jax.jit(step, donate_argnums=(0, 1))
            for _ in range(5):
                params, state = fn(params, state)
            return params, state

        reference, _ = run(optx.adam(0.1), jax.tree.map(jnp.asarray, host), False)

        flat, state = run(optx.adam(0.1), params, True)
        assert split_over(flat.buffers) == expected, flat.buffers
        assert flat.buffers[2].shape == (16, 4)  # kept in its shape, never gathered
        for slot in (state[0].mu, state[0].nu):
            assert split_over(slot.buffers) == expected

        out, state = run(optx.flatten(optx.adam(0.1)), params, False)
        for slot in (state.inner_state[0].mu, state.inner_state[0].nu):
            assert split_over(slot.buffers) == expected
        assert split_over([out["b"]["w"]]) == ["data"]

        for got in (flat.unflatten(), out):
            for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(reference)):
                np.testing.assert_allclose(np.float32(g), np.float32(r), rtol=1e-6, atol=1e-7)

        # Traced on a mesh with explicit axes, the sharded leaf is still seen.
        explicit = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
        eparams = jax.device_put(host, {"a": NamedSharding(explicit, P()),
            "s": NamedSharding(explicit, P()),
            "b": {"w": NamedSharding(explicit, P("data")), "h": NamedSharding(explicit, P())}})
        traced = jax.jit(optx.flatten_tree)(eparams)
        assert traced.layout == optx.flatten_tree(eparams).layout
        assert len(traced.buffers) == 3
        """
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: optx.adamw(1e-2),
        lambda: optx.chain(optx.clip_by_global_norm(1.0), optx.adam(1e-2), optx.ema_params(0.9)),
    ],
    ids=["adamw", "clip_adam_ema"],
)
def test_complex_leaves_flatten_beside_real_ones(make) -> None:
    # A complex buffer beside the real one: the same numbers as per leaf (the global norm
    # of the clip sums |g|^2 over both), compared as real and imaginary parts.
    rng = np.random.RandomState(0)

    def tree(scale):
        z = scale * (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3)))
        return {"z": jnp.asarray(z, jnp.complex64), "b": jnp.asarray(rng.standard_normal(3))}

    params, grads = tree(1.0), [tree(2.0) for _ in range(3)]
    tx, flat_tx = make(), optx.flatten(make())
    p, fp, s, fs = params, params, tx.init(params), flat_tx.init(params)
    for g in grads:
        u, s = tx.update(g, s, p)
        fu, fs = flat_tx.update(g, fs, fp)
        assert fu["z"].dtype == jnp.complex64 and fu["b"].dtype == jnp.float32
        parts = [jax.tree.map(f, t) for t in (fu, u) for f in (jnp.real, jnp.imag)]
        check_close("real", parts[0], parts[2])
        check_close("imag", parts[1], parts[3])
        p, fp = optx.apply_updates(p, u), optx.apply_updates(fp, fu)
