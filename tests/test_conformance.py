"""Conformance suite: every registered transform and optimizer keeps optx's contract.

Parametrised over `registry.REGISTRY` (a new transform is not done until it is registered
there). Each entry runs a few steps on a small nested pytree of parameters with
deterministic gradients and must show: jit equals eager; updates in the parameters' dtypes
(float32, bfloat16, mixed, and float16 gradients of float32 parameters); a state whose
structure, shapes and dtypes do not change; no recompilation on the second step nor on a
hyperparameter change (which changes the result); extra keyword arguments accepted; the
same numbers inside `optx.chain` and `optax.chain`; equality and hashing by configuration;
a `repr` named after its factory.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import roundoff_rtol

import optx
from optx._src import hyperparams as hyperparams_lib  # which are scheduled

try:
    from tests import registry
except ImportError:  # tests/ is not a package: pytest put it on sys.path.
    import registry

ENTRIES = list(registry.REGISTRY.values())
IDS = [e.key for e in ENTRIES]
STEPS = 3
# Jit against eager: XLA may fuse or reorder float32 arithmetic, nothing more. Per value and
# step, up to 8 roundings done differently (Adam's m, v, two bias corrections, rsqrt, divide,
# learning rate, add) and global reductions (norms, means) over the tree's 28 entries summed
# in another order, for STEPS steps (tests/TOLERANCES.md): 1.3e-5 of each leaf's scale.
RTOL = roundoff_rtol(STEPS, roundings=8, reduced=28)

parametrize_entries = pytest.mark.parametrize("entry", ENTRIES, ids=IDS)


# ---------------------------------------------------------------------------------------
# Data: a nested tree (dict with a nested dict and a list; matrices, vectors, a scalar).


def _array(rng: np.random.RandomState, shape: tuple[int, ...], scale: float) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def _tree(seed: int, scale: float) -> dict[str, Any]:
    rng = np.random.RandomState(seed)
    return {
        "dense": {"kernel": _array(rng, (3, 4), scale), "bias": _array(rng, (4,), scale)},
        "layers": [{"w": _array(rng, (2, 3), scale)}, _array(rng, (5,), scale)],
        "scale": _array(rng, (), scale),
    }


def _cast(tree: Any, dtype: str) -> Any:
    """The tree in ``dtype``; "mixed" puts the dense layer in bfloat16, the rest in float32."""
    if dtype != "mixed":
        return jax.tree.map(lambda x: jnp.asarray(x, dtype), tree)
    return {k: _cast(v, "bfloat16" if k == "dense" else "float32") for k, v in tree.items()}


def make_params(dtype: str = "float32") -> Any:
    return _cast(_tree(0, 1.0), dtype)


def make_grads(dtype: str = "float32", steps: int = STEPS) -> list[Any]:
    # Scale 2: some elements exceed 1 and the global norm exceeds 1, so clipping acts.
    return [_cast(_tree(100 + t, 2.0), dtype) for t in range(steps)]


# ---------------------------------------------------------------------------------------
# Helpers.


@functools.cache
def jitted_update(key: str) -> Callable[..., Any]:
    """One jitted ``update`` per entry, shared by the tests (compile once, count deltas)."""
    entry = registry.REGISTRY[key]
    tx, extra = entry(), entry.extra
    return jax.jit(lambda g, s, p: tx.update(g, s, p, **extra))


@functools.cache
def eager_run(key: str) -> tuple[list[Any], list[Any]]:
    """The updates and states of `STEPS` eager steps of an entry, shared by the tests."""
    entry = registry.REGISTRY[key]
    tx, params = entry(), make_params()
    with jax.numpy_rank_promotion("raise"):  # no accidental broadcasting either
        return run(tx.update, tx.init(params), params, make_grads(), **entry.extra)


def cache_size(jitted: Callable[..., Any]) -> int:
    """How many programs ``jax.jit`` has compiled for ``jitted``."""
    return jitted._cache_size()  # type: ignore[attr-defined]


def run(
    update: Callable[..., Any], state: Any, params: Any, grads: list[Any], **extra: Any
) -> tuple[list[Any], list[Any]]:
    """A few steps of ``update``, applying the updates; returns the updates and states."""
    all_updates, states = [], []
    for g in grads:
        updates, state = update(g, state, params, **extra)
        params = optx.apply_updates(params, updates)
        all_updates.append(updates)
        states.append(state)
    return all_updates, states


def signature(tree: Any) -> tuple[Any, dict[str, tuple[Any, ...]]]:
    """Structure and (shape, dtype, weak type) by leaf path: what decides a recompilation."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return treedef, {
        jax.tree_util.keystr(path): (
            jnp.shape(x),
            jnp.result_type(x),
            bool(getattr(x, "weak_type", False)),
        )
        for path, x in flat
    }


def without_hyperparams(state: Any) -> list[Any]:
    """The leaves of ``state`` outside its ``hyperparams`` dicts."""
    return [
        leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
        if not any(getattr(k, "name", None) == "hyperparams" for k in path)
    ]


def all_close(a: Any, b: Any) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=1e-6, atol=0)
        for x, y in zip(la, lb, strict=True)
    )


def sub_transforms(tx: Any) -> Iterator[optx.Transform]:
    """``tx`` and every optx transform nested in its configuration."""
    if isinstance(tx, optx.Transform):
        yield tx
        for field in dataclasses.fields(tx):  # type: ignore[arg-type]
            yield from sub_transforms(getattr(tx, field.name))
    elif isinstance(tx, tuple | list):
        for item in tx:
            yield from sub_transforms(item)


# A changed value for each hyperparameter name, chosen to show in a few steps. Names not
# listed get ``0.5 * old`` (or 0.1), valid for the usual ranges; add a line for a new name
# when that is not right.
NEW_VALUES: dict[str, Callable[[float], float]] = {
    "learning_rate": lambda v: 3 * v + 0.05,
    "b1": lambda v: 0.5 if v != 0.5 else 0.7,
    "b2": lambda v: 0.5 if v != 0.5 else 0.7,
    "decay": lambda v: 0.5 if v != 0.5 else 0.7,
    "momentum": lambda v: 0.5 if v != 0.5 else 0.7,
    "eps": lambda v: v + 0.5,
    "eps_root": lambda v: v + 0.5,
    "weight_decay": lambda v: v + 0.5,
    "max_delta": lambda v: v / 20,
    "max_norm": lambda v: v / 20,
    # clip_by_block_rms's bound shrinks; radam's rectifier threshold (>= 4) grows.
    "threshold": lambda v: v / 20 if v < 4 else v + 1,
    "loss_scale_factor": lambda v: 4 * v,
    "eta_plus": lambda v: v + 0.5,  # rprop's growth factor must stay >= 1
    "step_size": lambda v: 3 * v if v else 1.0,
}


def new_value(name: str, old: float) -> float:
    rule = NEW_VALUES.get(name.rsplit("/", 1)[-1], lambda v: 0.5 * v if v else 0.1)
    return rule(old)


# ---------------------------------------------------------------------------------------
# The contract.


@parametrize_entries
def test_builds_a_transform(entry: registry.Entry) -> None:
    tx = entry()
    assert isinstance(tx, optx.Transform)
    assert isinstance(tx, optx.GradientTransformationLike)
    init, update = tx  # optax's tuple unpacking
    assert init == tx.init and update == tx.update


def check_stable(params: Any, state: Any, updates: list[Any], states: list[Any]) -> None:
    """Updates shaped and typed like ``params`` and finite; every state with the structure,
    shapes, dtypes and weak types of ``state`` (the init's): nothing recompiles a step.
    """
    expected = signature(state)
    for step, (u, s) in enumerate(zip(updates, states, strict=True), 1):
        chex.assert_trees_all_equal_structs(u, params)
        chex.assert_trees_all_equal_shapes_and_dtypes(u, params)
        chex.assert_tree_all_finite(u)
        got = signature(s)
        assert got[0] == expected[0], f"step {step}: state structure changed"
        changed = {k: (v, expected[1][k]) for k, v in got[1].items() if v != expected[1][k]}
        assert not changed, f"step {step}: state leaves changed (now, at init): {changed}"
    # Hyperparameters are float32 scalars whatever the parameters' dtype (DESIGN D2).
    for name, value in optx.get_hyperparams(states[-1]).items():
        assert jnp.shape(value) == () and jnp.result_type(value) == jnp.float32, name


@parametrize_entries
def test_jit_equals_eager_and_later_steps_do_not_recompile(entry: registry.Entry) -> None:
    """float32 parameters: the jitted steps equal the eager ones, the state keeps its
    signature (`check_stable`), and the second and later steps reuse the first's program.
    """
    tx = entry()
    params, grads = make_params(), make_grads()
    step = jitted_update(entry.key)
    state = tx.init(params)
    first = run(step, state, params, grads[:1])
    compiled = cache_size(step)
    later = run(step, first[1][0], optx.apply_updates(params, first[0][0]), grads[1:])
    assert cache_size(step) == compiled, "a later step recompiled the jitted update"
    jitted = (first[0] + later[0], first[1] + later[1])
    check_stable(params, state, *jitted)
    eager = eager_run(entry.key)
    # Relative to each leaf's scale: under jit XLA fuses multiply-adds, which moves a sum of
    # cancelling terms (FTRL's `linear`, schedule-free's y - z) by round-off of its terms.
    for path, (a, b) in zip(
        jax.tree_util.tree_flatten_with_path(eager)[0],
        zip(jax.tree.leaves(jitted), jax.tree.leaves(eager), strict=True),
        strict=True,
    ):
        b = np.asarray(b, np.float64)
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        np.testing.assert_allclose(
            np.asarray(a, np.float64),
            b,
            rtol=0,
            atol=RTOL * scale,
            err_msg=jax.tree_util.keystr(path[0]),
        )


# The dtype checks compile one program per batch of entries: a program per entry was most
# of their time (30 entries' bfloat16 steps: 12.7 s one by one, 7.9 s as one program). One
# test per batch, so that pytest-xdist never compiles a batch twice.
DTYPE_BATCHES = [IDS[i : i + 25] for i in range(0, len(IDS), 25)]


def _dtype_steps(keys: list[str], dtype: str) -> dict[str, tuple[Any, list[Any], list[Any]]]:
    """`STEPS` jitted steps of each entry in one program: init state, updates, states."""
    txs = {k: registry.REGISTRY[k]() for k in keys}
    params = make_params(dtype)
    inits = {k: tx.init(params) for k, tx in txs.items()}

    @jax.jit
    def step(grads: Any, states: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        return {
            k: tx.update(grads, states[k], params[k], **registry.REGISTRY[k].extra)
            for k, tx in txs.items()
        }

    states, current = dict(inits), dict.fromkeys(keys, params)
    out: dict[str, tuple[Any, list[Any], list[Any]]] = {k: (inits[k], [], []) for k in keys}
    for grads in make_grads(dtype):
        results = step(grads, states, current)
        for k, (updates, state) in results.items():
            out[k][1].append(updates)
            out[k][2].append(state)
            states[k], current[k] = state, optx.apply_updates(current[k], updates)
    return out


@pytest.mark.parametrize("dtype", ["bfloat16", "mixed"])
@pytest.mark.parametrize(
    "batch", range(len(DTYPE_BATCHES)), ids=[f"{b[0]}..." for b in DTYPE_BATCHES]
)
def test_dtypes_and_state_are_stable(batch: int, dtype: str) -> None:
    """As `test_jit_equals_eager_and_later_steps_do_not_recompile`'s float32 checks."""
    keys = DTYPE_BATCHES[batch]
    try:
        runs = _dtype_steps(keys, dtype)
    except Exception:  # name the entry that breaks the batch's program
        for key in keys:
            _dtype_steps([key], dtype)
        raise
    failures = []
    for key, (state, updates, states) in runs.items():
        try:
            check_stable(make_params(dtype), state, updates, states)
        except AssertionError as error:
            failures.append(f"{key}: {error}")
    assert not failures, "\n".join(failures)


@parametrize_entries
def test_float16_gradients_of_float32_params_give_float32_updates(entry: registry.Entry) -> None:
    # Mixed precision (DESIGN D6): the updates come out in the parameters' dtype, computed
    # in it; float16 would round `sgd(1e-8)`'s steps to zero.
    tx, params = entry(), make_params()
    grads = _cast(_tree(100, 2.0), "float16")
    updates, _ = run(tx.update, tx.init(params), params, [grads, grads], **entry.extra)
    for u in updates:
        chex.assert_trees_all_equal_shapes_and_dtypes(u, params)
        chex.assert_tree_all_finite(u)


@parametrize_entries
def test_hyperparams_are_dynamic(entry: registry.Entry) -> None:
    tx = entry()
    step = jitted_update(entry.key)
    params, grads = make_params(), make_grads()
    state = tx.init(params)
    hyperparams = optx.get_hyperparams(state)
    assert set(entry.unobservable) <= set(hyperparams), "stale `unobservable` in the registry"

    # Every numeric option of every transform in the configuration is a hyperparameter.
    declared = set()
    for sub in sub_transforms(tx):
        for field in dataclasses.fields(sub):  # type: ignore[arg-type]
            value = getattr(sub, field.name)
            if isinstance(value, float):
                assert field.name in type(sub).hyperparam_fields(), (
                    f"{type(sub).name}.{field.name} is a float but not a dynamic hyperparameter"
                )
        declared |= set(sub.hyperparam_names())
    assert {n.rsplit("/", 1)[-1] for n in hyperparams} == declared

    baseline = run(step, state, params, grads)
    compiled = cache_size(step)
    scheduled = {f.flat for f in hyperparams_lib.find(state) if f.entry.scheduled}
    for name, old in hyperparams.items():
        value = new_value(name, float(old))
        if name in scheduled and float(old) == 0:
            # A schedule at 0 (a warmup's start) is scaled, not set: no factor reaches value.
            changed = optx.scale_hyperparams(state, **{name: 2.0})
        else:
            changed = optx.set_hyperparams(state, **{name: value})
            np.testing.assert_allclose(optx.get_hyperparams(changed)[name], value, rtol=1e-6)
        chex.assert_trees_all_equal_shapes_and_dtypes(changed, state)
        result = run(step, changed, params, grads)
        assert cache_size(step) == compiled, f"setting {name} recompiled the jitted update"
        after = optx.get_hyperparams(result[1][-1])[name]
        if name not in scheduled:  # the update keeps the value it was given
            np.testing.assert_allclose(after, value, rtol=1e-6)
        else:  # the schedule goes on, multiplied by the factor that gave value
            factor = 2.0 if float(old) == 0 else value / np.float32(old)
            unchanged = optx.get_hyperparams(baseline[1][-1])[name]
            np.testing.assert_allclose(after, factor * unchanged, rtol=1e-5)
        if name not in entry.unobservable:
            observed = (result[0], [without_hyperparams(s) for s in result[1]])
            before = (baseline[0], [without_hyperparams(s) for s in baseline[1]])
            assert not all_close(observed, before), f"setting {name}={value} changed nothing"


@parametrize_entries
def test_extra_keyword_arguments_are_accepted(entry: registry.Entry) -> None:
    tx = entry()
    params, grads = make_params(), make_grads(steps=1)
    extra = {"value": 1.0, "foo": 2, **entry.extra}
    updates, states = run(tx.update, tx.init(params), params, grads, **extra)
    plain_updates, plain_states = eager_run(entry.key)
    chex.assert_trees_all_equal((updates, states), (plain_updates[:1], plain_states[:1]))


@parametrize_entries
def test_needs_params_flag(entry: registry.Entry) -> None:
    tx = entry()
    params, grads = make_params(), make_grads(steps=1)
    state, extra = tx.init(params), entry.extra
    if entry.needs_params:
        with pytest.raises(ValueError, match="needs the current parameters"):
            tx.update(grads[0], state, None, **extra)
    else:
        chex.assert_trees_all_equal(
            tx.update(grads[0], state, **extra), tx.update(grads[0], state, params, **extra)
        )


@parametrize_entries
def test_inside_chains(entry: registry.Entry) -> None:
    params, grads = make_params(), make_grads(steps=2)
    alone, alone_states = (x[:2] for x in eager_run(entry.key))

    extra = {"value": 1.0, **entry.extra}
    in_optx = optx.chain(entry(), optx.identity())
    updates, states = run(in_optx.update, in_optx.init(params), params, grads, **extra)
    chex.assert_trees_all_equal(updates, alone)
    chex.assert_trees_all_equal(states[-1][0], alone_states[-1])

    # optax.chain passes extra arguments only to its own ExtraArgs class.
    tx = entry()
    tx = optax.GradientTransformationExtraArgs(tx.init, tx.update) if entry.extra else tx
    in_optax = optax.chain(optax.identity(), tx)
    updates, states = run(in_optax.update, in_optax.init(params), params, grads, **extra)
    chex.assert_trees_all_equal(updates, alone)
    chex.assert_trees_all_equal(states[-1][1], alone_states[-1])
    # Hyperparameters are found inside optax's chain state too.
    assert sorted(map(float, optx.get_hyperparams(states[-1]).values())) == sorted(
        map(float, optx.get_hyperparams(alone_states[-1]).values())
    )


@parametrize_entries
def test_equal_and_hashable_by_configuration(entry: registry.Entry) -> None:
    a, b = entry(), entry()
    assert a is not b
    assert a == b
    assert hash(a) == hash(b)
    # A transform holds no arrays (DESIGN D1).
    for sub in sub_transforms(a):
        for field in dataclasses.fields(sub):  # type: ignore[arg-type]
            leaves = jax.tree.leaves(getattr(sub, field.name))
            assert not any(isinstance(x, jax.Array | np.ndarray) for x in leaves), field.name
    # Rebuilding the same transform hits the compile cache: a static argument's cache key
    # is its hash and equality, whatever the function computes (a trivial one compiles fast).
    keyed = jax.jit(lambda tx, x: x, static_argnums=0)
    keyed(a, np.float32(0))
    compiled = cache_size(keyed)
    keyed(b, np.float32(0))
    assert cache_size(keyed) == compiled == 1


def test_different_configurations_are_unequal() -> None:
    built = [(e.key, e()) for e in ENTRIES]
    equal = [(k1, k2) for (k1, a), (k2, b) in itertools.combinations(built, 2) if a == b]
    assert not equal


@parametrize_entries
def test_repr(entry: registry.Entry) -> None:
    text = repr(entry())
    assert text
    assert text.startswith(entry.repr_prefix or f"{registry.resolve(entry.public)[1]}("), text
    assert text == repr(entry())


# ---------------------------------------------------------------------------------------
# Completeness.


def public_factories() -> tuple[set[str], list[str]]:
    """The public names of `optx` that build a `Transform`, and unclassified names."""
    factories, unclassified = set(), []
    for name in sorted(vars(optx)):
        value = getattr(optx, name)
        if name.startswith("_") or inspect.ismodule(value) or name in registry.NOT_FACTORIES:
            continue
        if inspect.isclass(value):
            if issubclass(value, optx.Transform) and value is not optx.Transform:
                factories.add(name)
            continue
        if not inspect.isroutine(value):
            continue  # type aliases
        if name in registry.FACTORIES_WITH_ARGS:
            factories.add(name)
            continue
        try:
            built = value()
        except TypeError as error:
            unclassified.append(f"{name} ({error})")
            continue
        if isinstance(built, optx.Transform):
            factories.add(name)
        else:
            unclassified.append(f"{name} (returned {type(built).__name__})")
    return factories, unclassified


def test_registry_covers_every_public_transform() -> None:
    factories, unclassified = public_factories()
    assert not unclassified, (
        "public callables of optx that are neither zero-argument transform factories nor "
        "listed in registry.FACTORIES_WITH_ARGS / registry.NOT_FACTORIES: "
        f"{unclassified}"
    )
    listed = registry.FACTORIES_WITH_ARGS | registry.NOT_FACTORIES
    assert not [n for n in listed if not hasattr(optx, n)], "stale names in the registry lists"
    # Keys of submodules' names (``contrib.madgrad``) are checked by `registry.resolve`.
    covered = {e.public for e in ENTRIES if "." not in e.public}
    for public in {e.public for e in ENTRIES} - covered:
        assert callable(getattr(*registry.resolve(public), None)), public
    assert not factories - covered, f"register these in tests/registry.py: {factories - covered}"
    assert not covered - factories, f"registry keys that name no factory: {covered - factories}"
