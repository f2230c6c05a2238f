"""`optx.aggregate_gradients` and the stateful classes' ``axis_name`` (DESIGN D8).

The conformance suite cannot run `aggregate_gradients` (its ``update`` needs a bound named
axis; see ``NEEDS_MAPPED_AXIS`` in tests/registry.py), so this file checks it: against
the single-device step on the mean gradient under `jax.pmap` and `jax.shard_map` on 8 CPU
devices (float32, to the round-off bound ``ATOL`` worked out in `PRELUDE`), and, on one
device, under `jax.vmap` with ``axis_name`` (jit, dtypes, chains, errors).
"""

from __future__ import annotations

import re

import chex
import jax
import jax.numpy as jnp
import optax
import pytest
from multidevice import run_on_devices

import optx

# Shared by the 8-device subprocesses: 8 replicas' gradients and the reference step.
PRELUDE = """
import jax, jax.numpy as jnp, numpy as np, optx
from jax.sharding import PartitionSpec as P
assert jax.device_count() == 8
params = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.array([0.5, -0.5])}
grads = {  # one gradient per replica
    "w": jax.random.normal(jax.random.key(0), (8, 2, 3)),
    "b": jax.random.normal(jax.random.key(1), (8, 2)),
}
mean = jax.tree.map(lambda g: g.mean(0), grads)
replicate = lambda t: jax.tree.map(lambda x: jnp.broadcast_to(x, (8, *x.shape)), t)

# How far a replica's parameters can be from the single device's (tests/TOLERANCES.md).
# Both run the same elementwise maths in other programs: per value and step, up to ROUNDINGS
# roundings done differently (XLA contracts a * b + c into a fused multiply-add in one and
# not the other; x / sqrt(v) becomes x * rsqrt(v)) and one in the add to the parameter, each
# off by eps of the values' size, at most SIZE (|params| <= 1, plus 3 steps of at most
# lr = 0.1). And `pmean` sums the 8 gradients in another order than `mean`: off by at most
# 8 * eps * mean_i |g_i| (Higham 2002, section 3.1), which reaches a parameter times lr,
# times 1 + 1.9 + 2.71 over 3 steps of momentum 0.9; Adam's step lr * g / (|g| + eps)
# hardly moves with it, its slope lr * eps / g**2 being below 1e-5 for |mean| >= 0.1.
EPS32 = float(np.finfo(np.float32).eps)
ROUNDINGS, STEPS, SIZE, LR = 8, 3, 1.3, 0.1
G = max(float(np.max(np.mean(np.abs(g), 0))) for g in jax.tree.leaves(grads))
assert min(float(np.min(np.abs(m))) for m in jax.tree.leaves(mean)) >= 0.1
ATOL = STEPS * (ROUNDINGS + 1) * EPS32 * SIZE + LR * (1 + 1.9 + 2.71) * 8 * EPS32 * G

def close(replicated, single, atol=ATOL):
    for r, s in zip(jax.tree.leaves(replicated), jax.tree.leaves(single)):
        r = np.asarray(r)
        for i in range(8):
            np.testing.assert_allclose(r[i], s, rtol=0, atol=atol)
"""


@pytest.mark.multidevice
def test_pmap_and_shard_map_equal_the_single_device_step_on_the_mean() -> None:
    run_on_devices(
        PRELUDE
        + """
tx = optx.chain(optx.aggregate_gradients("data"), optx.adam(0.1))
ref_updates, ref_state = optx.adam(0.1).update(mean, optx.adam(0.1).init(params), params)
ref_params = optx.apply_updates(params, ref_updates)

def step(g, p):
    state = tx.init(p)
    for _ in range(2):  # two steps: the state is the same on every replica
        u, state = tx.update(g, state, p)
        p = optx.apply_updates(p, u)
    return p
ref2 = ref_params
u2, _ = optx.adam(0.1).update(mean, ref_state, ref_params)
ref2 = optx.apply_updates(ref_params, u2)

close(jax.pmap(step, axis_name="data")(grads, replicate(params)), ref2)

mesh = jax.make_mesh((8,), ("data",))
smap = jax.shard_map(
    lambda g, p: step(jax.tree.map(lambda x: x[0], g), p),
    mesh=mesh, in_specs=(P("data"), P()), out_specs=P(), check_vma=False,
)
from jax.sharding import NamedSharding
sharded = jax.device_put(grads, NamedSharding(mesh, P("data")))
out = jax.jit(smap)(sharded, jax.device_put(params, NamedSharding(mesh, P())))
for r, s in zip(jax.tree.leaves(out), jax.tree.leaves(ref2)):
    np.testing.assert_allclose(r, s, rtol=0, atol=ATOL)

# reduce="sum"; a None leaf stays None; bfloat16 stays bfloat16.
summed = optx.aggregate_gradients("data", reduce="sum")
g = {"w": grads["w"], "b": None}
out = jax.pmap(lambda g: summed.update(g, summed.init(None))[0], axis_name="data")(g)
assert out["b"] is None
# psum and sum add the 8 terms in other orders: each off by 8 * eps * sum_i |g_i|.
close({"w": out["w"]}, {"w": grads["w"].sum(0)},
      atol=2 * 8 * EPS32 * float(np.max(np.abs(grads["w"]).sum(0))))
bf = jax.pmap(lambda g: summed.update(g, summed.init(None))[0], axis_name="data")(
    grads["w"].astype(jnp.bfloat16))
assert bf.dtype == jnp.bfloat16

# A tuple of axes: shard_map over a (2, 4) mesh averages over all 8 replicas.
both = optx.aggregate_gradients(("hosts", "devices"))
mesh2 = jax.make_mesh((2, 4), ("hosts", "devices"))
spec = P(("hosts", "devices"))
out = jax.jit(jax.shard_map(lambda g: both.update(g, both.init(None))[0],
                            mesh=mesh2, in_specs=spec, out_specs=spec))(
    jax.device_put(grads["w"], NamedSharding(mesh2, spec)))
close({"w": out}, {"w": mean["w"]}, atol=2 * 8 * EPS32 * G)  # as psum, divided by 8
print("ok")
"""
    )


@pytest.mark.multidevice
def test_stateful_axis_name_inside_pmap_equals_the_single_device_run() -> None:
    run_on_devices(
        PRELUDE
        + """
O = optx.optimizers
def run(opt, skip=False, steps=3):
    opt.build(params)
    f = jax.pmap(
        lambda v, g, p: opt.stateless_apply(v, g, p, skip_gradients_aggregation=skip),
        axis_name="data",
    )
    v, p = replicate(opt.variables), replicate(params)
    for _ in range(steps):
        p, v = f(v, grads, p)
    return p, v

ref = O.Adam(0.1)
p_ref = params
for _ in range(3):
    p_ref = ref.apply(mean, p_ref)

opt = O.Adam(0.1, axis_name="data", clipnorm=1.0)
ref_clip = O.Adam(0.1, clipnorm=1.0)
p_clip = params
for _ in range(3):
    p_clip = ref_clip.apply(mean, p_clip)
p, v = run(opt)
close(p, p_clip)
assert sorted(v) == sorted(opt.variables)  # pmap sorts dict keys
close({"i": v["iterations"]}, {"i": np.int32(3)})

# skip_gradients_aggregation: each replica steps on its own gradient.
opt = O.Adam(0.1, axis_name="data")
p, _ = run(opt, skip=True, steps=1)
for i in range(8):
    own = O.Adam(0.1).apply(jax.tree.map(lambda g: g[i], grads), params)
    for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(own)):
        np.testing.assert_allclose(a[i], b, rtol=0, atol=ATOL)
p, _ = run(opt, steps=1)  # the aggregating variant next to the skipping one
close(p, O.Adam(0.1).apply(mean, params))
# Inside pmap: the nested variants (no XLA options of their own).
assert sorted(opt._compiled) == ["stateless/nested", "stateless/skip_aggregation/nested"]

# SGD with momentum and a loss scale: aggregated before unscaling.
opt = O.SGD(0.1, momentum=0.9, axis_name="data", loss_scale_factor=4.0)
p, _ = run(opt)
ref = O.SGD(0.1, momentum=0.9, loss_scale_factor=4.0)
p_ref = params
for _ in range(3):
    p_ref = ref.apply(mean, p_ref)
close(p, p_ref)

# LossScaleOptimizer: aggregated before its finiteness check, so every replica skips
# the same steps (replica 0 has an inf: all skip).
lso = O.LossScaleOptimizer(O.Adam(0.1, axis_name="data"))
lso.build(params)
bad = jax.tree.map(lambda g: g.at[0].set(jnp.inf), grads)
f = jax.pmap(lambda v, g, p: lso.stateless_apply(v, g, p), axis_name="data")
p, v = f(replicate(lso.variables), bad, replicate(params))
close(p, params)
p, v = f(v, grads, p)
lso_ref = O.LossScaleOptimizer(O.Adam(0.1))
lso_ref.apply(jax.tree.map(lambda g: g * np.inf, mean), params)
close(p, lso_ref.apply(mean, params))

# MultiOptimizer of optimizers with axis_name, with and without aggregation.
multi = O.MultiOptimizer({"w": O.Adam(0.1, axis_name="data"), "b": O.SGD(0.1, axis_name="data")})
p, _ = run(multi, steps=1)
ref = O.MultiOptimizer({"w": O.Adam(0.1), "b": O.SGD(0.1)})
close(p, ref.apply(mean, params))
multi = O.MultiOptimizer({"w": O.Adam(0.1, axis_name="data"), "b": O.SGD(0.1, axis_name="data")})
p, _ = run(multi, skip=True, steps=1)
ref = O.MultiOptimizer({"w": O.Adam(0.1), "b": O.SGD(0.1)})
own = ref.apply(jax.tree.map(lambda g: g[3], grads), params)
for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(own)):
    np.testing.assert_allclose(a[3], b, rtol=0, atol=ATOL)
print("ok")
"""
    )


# ---------------------------------------------------------------------------------------
# One device: `jax.vmap` with ``axis_name`` binds the axis too.


def _vmapped(tx: optx.Transform, grads: jax.Array, axis: str = "data") -> jax.Array:
    return jax.vmap(lambda g: tx.update({"w": g}, tx.init({"w": g}))[0]["w"], axis_name=axis)(grads)


def test_vmap_mean_sum_jit_and_optax_chain() -> None:
    grads = jnp.array([[1.0, 2.0], [3.0, -2.0], [5.0, 3.0]])
    mean = optx.aggregate_gradients("data")
    chex.assert_trees_all_close(_vmapped(mean, grads), jnp.broadcast_to(grads.mean(0), (3, 2)))
    summed = optx.aggregate_gradients("data", reduce="sum")
    chex.assert_trees_all_close(_vmapped(summed, grads), jnp.broadcast_to(grads.sum(0), (3, 2)))
    jitted = jax.jit(lambda g: _vmapped(optx.chain(mean, optx.sgd(1.0)), g))(grads)
    chex.assert_trees_all_close(jitted, jnp.broadcast_to(-grads.mean(0), (3, 2)))
    in_optax = optax.chain(mean, optax.sgd(1.0))
    chex.assert_trees_all_close(_vmapped(in_optax, grads), jitted)
    half = _vmapped(mean, grads.astype(jnp.bfloat16))
    assert half.dtype == jnp.bfloat16


def test_config_hash_state() -> None:
    tx = optx.aggregate_gradients("data")
    assert tx == optx.aggregate_gradients("data") and hash(tx) == hash(
        optx.aggregate_gradients("data")
    )
    assert tx != optx.aggregate_gradients("data", reduce="sum")
    assert repr(optx.aggregate_gradients(("a", "b"), "sum")) == (
        "aggregate_gradients(axis_name=('a', 'b'), reduce='sum')"
    )
    assert tx.init({"w": jnp.ones(3)}) == optx.EmptyState()
    assert optx.get_hyperparams(tx.init(None)) == {}


def test_bad_reduce_and_axis_name() -> None:
    with pytest.raises(
        ValueError,
        match=re.escape(
            '`aggregate_gradients` needs reduce to be "mean" or "sum". Received: reduce=\'max\'.'
        ),
    ):
        optx.aggregate_gradients("data", reduce="max")
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`aggregate_gradients` needs axis_name to be a string or a non-empty tuple of "
            "strings. Received: axis_name=['data']."
        ),
    ):
        optx.aggregate_gradients(["data"])  # type: ignore[arg-type]
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`Adam` needs axis_name to be a string, a non-empty tuple of strings or None. "
            "Received: axis_name=3."
        ),
    ):
        optx.optimizers.Adam(axis_name=3)


def test_unbound_axis_names_the_axis_and_the_bound_ones() -> None:
    tx = optx.aggregate_gradients("data")
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`aggregate_gradients` needs to run inside pmap/shard_map over axis 'data'. "
            "Received: axis_name='data', which is not bound here (bound axes: none)."
        ),
    ):
        tx.update({"w": jnp.ones(2)}, tx.init(None))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "Received: axis_name='data', which is not bound here (bound axes: 'batch')."
        ),
    ):
        _vmapped(tx, jnp.ones((2, 2)), axis="batch")
    # The stateful class outside any mapped axis: the same message, from `apply`.
    opt = optx.optimizers.Adam(0.1, axis_name="data")
    with pytest.raises(ValueError, match=re.escape("over axis 'data'. Received: axis_name=")):
        opt.apply({"w": jnp.ones(2)}, {"w": jnp.zeros(2)})


def test_stateful_axis_name_config_and_variables() -> None:
    params = {"w": jnp.ones(2)}
    opt = optx.optimizers.Adam(0.1, axis_name="data")
    assert opt.get_config()["axis_name"] == "data"
    assert "axis_name" not in optx.optimizers.Adam(0.1).get_config()
    again = optx.optimizers.Adam.from_config(opt.get_config())
    assert (
        again.axis_name == "data" and again.transform.transforms[0] == opt.transform.transforms[0]
    )
    opt.build(params)
    # The skipped variant has the same state: the same `variables`.
    skipped = opt._step_transform(True)
    # (The optimizer's state names its hyperparameters by Keras's arguments: `beta_1`.)
    fresh = opt._public_names(skipped.init(params))
    assert jax.tree.structure(fresh) == jax.tree.structure(opt._state)
    # Outside pmap, skipping the aggregation is an ordinary step.
    new, _ = opt.stateless_apply(  # donates the params: pass a copy
        opt.variables, {"w": jnp.ones(2)}, {"w": jnp.ones(2)}, skip_gradients_aggregation=True
    )
    ref = optx.optimizers.Adam(0.1).apply({"w": jnp.ones(2)}, params)
    chex.assert_trees_all_close(new, ref)


@pytest.mark.slow
@pytest.mark.multidevice
def test_shard_map_refuses_gradients_jax_already_summed_and_the_pcast_recipe_works() -> None:
    """Under `shard_map` (``check_vma=True``), the gradient of a replicated parameter comes
    back invariant over the axis: JAX summed it. Averaging it again would step by 8 times
    the gradient, so `aggregate_gradients` refuses it; differentiating with respect to
    ``pcast(params, to="varying")`` gives per-device gradients, whose mean is the full
    batch's (to the round-off of two sums of the gradient's terms in other orders)."""
    run_on_devices(
        PRELUDE
        + """
from jax.sharding import NamedSharding
mesh = jax.make_mesh((8,), ("data",))
x = jax.random.normal(jax.random.key(2), (32, 3))
y = jax.random.normal(jax.random.key(3), (32, 2))
def loss(p, x, y):
    return jnp.mean((x @ p["w"].T + p["b"] - y) ** 2)
xs, ys = (jax.device_put(a, NamedSharding(mesh, P("data"))) for a in (x, y))
tx = optx.chain(optx.aggregate_gradients("data"), optx.sgd(1.0))
ref = optx.apply_updates(params, optx.sgd(1.0).update(jax.grad(loss)(params, x, y),
                                                       optx.sgd(1.0).init(params))[0])
# Per device then across devices, or in one sum: the gradient's 32 rows (and 3 + 2 terms in
# the forward pass) summed in two orders, each off by at most (32 + 5) * eps * sum|terms|
# (Higham 2002, section 3.1); then one rounding each in the subtraction from the parameters.
r = np.abs(x) @ np.abs(params["w"]).T + np.abs(params["b"]) + np.abs(y)  # >= |residual|
terms = 2 / y.size * max(float(np.max(r.T @ np.abs(x))), float(np.max(r.sum(0))))
size = max(float(np.max(np.abs(a))) for a in jax.tree.leaves(ref))
ATOL_GRAD = 2 * (32 + 5) * EPS32 * terms + 2 * EPS32 * size

def run(step, reduce="mean"):
    tx = optx.chain(optx.aggregate_gradients("data", reduce), optx.sgd(1.0))
    f = jax.shard_map(lambda p, x, y: step(tx, p, x, y), mesh=mesh,
                      in_specs=(P(), P("data"), P("data")), out_specs=P())
    return jax.jit(f)(params, xs, ys)

def naive(tx, p, x, y):
    g = jax.grad(loss)(p, x, y)
    return optx.apply_updates(p, tx.update(g, tx.init(p), p)[0])

def recipe(tx, p, x, y):
    g = jax.grad(loss)(jax.lax.pcast(p, "data", to="varying"), x, y)
    return optx.apply_updates(p, tx.update(g, tx.init(p), p)[0])

for reduce, verb in (("mean", "averaging"), ("sum", "summing")):
    try:
        run(naive, reduce)
    except ValueError as e:
        message = str(e)
    else:
        raise AssertionError("no error for gradients JAX already summed")
    expected = (
        "`aggregate_gradients` needs gradients that vary over axis 'data' (one per device). "
        "Received: updates['b'] and updates['w'], invariant over 'data': JAX has already "
        "summed them over 'data' (the gradient of a parameter replicated over it), so "
        f"{verb} them again would scale them by the axis size. Differentiate with respect to "
        "`jax.lax.pcast(params, 'data', to='varying')` so that each device gets its own "
        "gradient, or drop `aggregate_gradients` and divide the gradient by the axis size."
    )
    assert message == expected, message

out = run(recipe)
for r, s in zip(jax.tree.leaves(out), jax.tree.leaves(ref)):
    np.testing.assert_allclose(r, s, rtol=0, atol=ATOL_GRAD)

# One leaf summed by JAX, one per device: the error names only the summed one.
def mixed(tx, p, x, y):
    g = jax.grad(loss)({"w": jax.lax.pcast(p["w"], "data", to="varying"), "b": p["b"]}, x, y)
    return optx.apply_updates(p, tx.update(g, tx.init(p), p)[0])
try:
    run(mixed)
except ValueError as e:
    assert "Received: updates['b'], invariant over 'data'" in str(e), str(e)
else:
    raise AssertionError("no error for a gradient JAX already summed")

# check_vma=False tracks nothing: aggregate_gradients cannot tell, and averages as asked.
f = jax.shard_map(lambda g: tx.update(g, tx.init(g))[0], mesh=mesh,
                  in_specs=P(), out_specs=P(), check_vma=False)
out = jax.jit(f)(params)
for r, s in zip(jax.tree.leaves(out), jax.tree.leaves(params)):
    np.testing.assert_allclose(r, -s, rtol=8 * EPS32)  # the mean of 8 copies: 8 eps

# The stateful classes' axis_name goes through the same check.
O = optx.optimizers
def stateful(g_of):
    opt = O.SGD(1.0, axis_name="data")
    opt.build(params)
    f = jax.shard_map(
        lambda v, p, x, y: opt.stateless_apply(v, jax.grad(loss)(g_of(p), x, y), p)[0],
        mesh=mesh, in_specs=(P(), P(), P("data"), P("data")), out_specs=P())
    return jax.jit(f)(dict(opt.variables), jax.tree.map(jnp.copy, params), xs, ys)
try:
    stateful(lambda p: p)
except ValueError as e:
    assert "invariant over 'data': JAX has already summed them" in str(e), str(e)
else:
    raise AssertionError("no error from the stateful class")
out = stateful(lambda p: jax.lax.pcast(p, "data", to="varying"))
for r, s in zip(jax.tree.leaves(out), jax.tree.leaves(ref)):
    np.testing.assert_allclose(r, s, rtol=0, atol=ATOL_GRAD)
print("ok")
"""
    )
