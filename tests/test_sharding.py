"""`optx.state_shardings`, `optx.shard_state` (ZeRO-1) and the stateful wrapper under sharding.

The multi-device checks run on 8 CPU devices in a subprocess (`multidevice.run_on_devices`),
several per subprocess to keep the file fast.

Sharded and unsharded runs sum the gradient in different orders (per shard, then across
shards), so they are compared in float64, where the order cannot matter at the tolerance
used. In float32 it can: a gradient element near zero is known only to
``n * eps32 * sum|terms|`` (n terms summed), and Adam's update ``lr * m / (sqrt(v) + eps)``
has slope ``lr / eps`` there, so with ``eps=1e-8`` round-off alone can move an update by
up to ``2 * lr``. In float64 the same bound, worked out in `PRELUDE` for the model below, is
below 1e-7 after three steps, under ``TOL``'s ``atol=1e-6`` (see tests/TOLERANCES.md).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P
from multidevice import run_on_devices

import optx

# Shared by the subprocesses: a linear model, its data and a jitted, donated step.
PRELUDE = """
import re
import jax, jax.numpy as jnp, numpy as np, optax, pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
import optx

assert jax.device_count() == 8
jax.config.update("jax_enable_x64", True)  # see the module docstring
EPS64 = float(np.finfo(np.float64).eps)

def mesh_of(shape, names):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names))

def model(seed=0):
    k = jax.random.split(jax.random.key(seed), 4)
    params = {"w": jax.random.normal(k[0], (32, 16)) / 4, "b": jax.random.normal(k[1], (16,))}
    x, y = jax.random.normal(k[2], (64, 32)), jax.random.normal(k[3], (64, 16))
    return jax.tree.map(lambda a: a.astype(jnp.float64), (params, x, y))

def grad_error_bound(params, x, y):
    # Worst-case float64 error of each gradient element of `loss`, whatever the summation
    # order: the forward pass sums n_in + 2 terms per output, the backward pass n_rows; a
    # sum of n terms is off by at most n * eps * sum|terms| (Higham, Accuracy and Stability
    # of Numerical Algorithms, 2002, section 3.1).
    x, y, w, b = (np.abs(np.asarray(a, np.float64)) for a in (x, y, params["w"], params["b"]))
    (rows, n_in), scale = x.shape, 2.0 / y.size
    r = x @ w + b + y  # at least |residual|
    dr = (n_in + 2) * EPS64 * r
    return scale * max(np.max(rows * EPS64 * (x.T @ r) + x.T @ dr),
                       np.max(rows * EPS64 * r.sum(0) + dr.sum(0)))

# Three steps of Adam move a parameter by at most 12 * (lr / eps) * grad_error_bound
# (the slope of m / (sqrt(v) + eps) in each of the 6 (step, gradient) pairs is at most
# 2 / eps), twice that between two runs; momentum SGD's slope is smaller, and Adafactor's
# and Muon's normalisers (row means of g**2, singular values of the momentum) are far from
# zero for this model. For Adam(1e-2, eps=1e-8) the bound (5.3e-7) is below TOL's atol:
TOL = dict(rtol=0, atol=1e-6)
assert 2 * 12 * (1e-2 / 1e-8) * grad_error_bound(*model()) < TOL["atol"]

def loss(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

def place(tree, shardings):
    return jax.tree.map(lambda a, s: jax.device_put(np.asarray(a), s), tree, shardings)

def train(tx, params, x, y, steps, shardings=None):
    # shardings: (params', state's, data's) or None for a single-device run.
    def step(params, state, x, y):
        updates, state = tx.update(jax.grad(loss)(params, x, y), state, params)
        return optx.apply_updates(params, updates), state
    if shardings is None:
        state = tx.init(params)
        fn = jax.jit(step, donate_argnums=(0, 1))
        history = []
    else:
        p_sh, s_sh, d_sh = shardings
        state = jax.jit(tx.init, out_shardings=s_sh)(params)
        fn = jax.jit(step, in_shardings=(p_sh, s_sh, d_sh, d_sh),
                     out_shardings=(p_sh, s_sh), donate_argnums=(0, 1))
        history = []
    for _ in range(steps):
        params, state = fn(params, state, x, y)
        if shardings is not None:
            history.append((jax.tree.map(lambda a: a.sharding, params),
                            jax.tree.map(lambda a: a.sharding, state)))
    return params, state, history

def specs(shardings):
    return jax.tree.map(lambda s: tuple(s.spec), shardings)

def per_device_bytes(tree):
    out = {}
    for a in jax.tree.leaves(tree):
        for shard in a.addressable_shards:
            out[shard.device] = out.get(shard.device, 0) + shard.data.nbytes
    return max(out.values())
"""


@pytest.mark.multidevice
def test_state_shardings_follow_params_on_1d_and_2d_meshes() -> None:
    out = run_on_devices(
        PRELUDE
        + """
def check(name, tx, mesh, p_specs, expect):
    # expect: {state key path: spec}, checked on top of "every other leaf is replicated".
    params, x, y = model()
    p_sh = {k: NamedSharding(mesh, v) for k, v in p_specs.items()}
    params = place(params, p_sh)
    s_sh = optx.state_shardings(tx, params)
    assert jax.tree.structure(s_sh) == jax.tree.structure(jax.eval_shape(tx.init, params))
    got = {optx.tree.path_name(p): tuple(s.spec)
           for p, s in jax.tree_util.tree_flatten_with_path(s_sh)[0]}
    for path, spec in got.items():
        assert spec == expect.get(path, ()), (name, path, spec, expect.get(path, ()))
    assert set(expect) <= set(got), (name, set(expect) - set(got))
    d_sh = NamedSharding(mesh, P("data"))
    sharded, state, history = train(tx, params, place(x, d_sh), place(y, d_sh), 3,
                                    (p_sh, s_sh, d_sh))
    for p_got, s_got in history:  # shardings kept step after step
        assert specs(p_got) == specs(p_sh) and specs(s_got) == specs(s_sh), name
    assert all(a.sharding.mesh == mesh for a in jax.tree.leaves(state))
    ref, _, _ = train(tx, *model(), 3)
    for k in ref:
        np.testing.assert_allclose(np.asarray(sharded[k]), np.asarray(ref[k]), **TOL)
    print(name, "ok")

w2, b2 = ("data", "model"), ("model",)
mesh1, mesh2 = mesh_of((8,), ("data",)), mesh_of((4, 2), ("data", "model"))
for mesh, pw, pb in ((mesh1, ("data",), ()), (mesh2, w2, b2)):
    tag = "x".join(map(str, mesh.devices.shape))
    P_ = {"w": P(*pw), "b": P(*pb)}
    pad = pw + (None,) * (2 - len(pw))
    check(f"sgd {tag}", optx.sgd(0.1, momentum=0.9), mesh, P_,
          {"0/trace/w": pw, "0/trace/b": pb})
    check(f"adam {tag}", optx.adam(1e-2), mesh, P_,
          {f"0/{m}/{k}": s for m in ("mu", "nu") for k, s in (("w", pw), ("b", pb))})
    check(f"optax.adam {tag}", optax.adam(1e-2), mesh, P_,
          {f"0/{m}/{k}": s for m in ("mu", "nu") for k, s in (("w", pw), ("b", pb))})
    # Adafactor factors w (32, 16): v_row drops axis 0 (the largest) and keeps w's spec of
    # axis 1; v_col drops axis 1. b is not factored: its full v follows b. The (1,)
    # placeholders are replicated.
    check(f"adafactor {tag}", optx.adafactor(1e-2, min_dim_size_to_factor=4), mesh, P_,
          {"0/v_row/w": pad[1:2] if pad[1] else (), "0/v_col/w": pad[:1], "0/v/b": pb})
    # Muon: momentum of the matrix follows it; the coefficients are replicated.
    check(f"muon {tag}", optx.muon(1e-2), mesh, P_,
          {"inner_states/muon/inner_state/0/mu/w": pw,
           "inner_states/adam/inner_state/0/mu/b": pb,
           "inner_states/adam/inner_state/0/nu/b": pb})
    check(f"partition {tag}",
          optx.partition({"a": optx.adam(1e-2), "s": optx.sgd(0.1, momentum=0.9)},
                         {"w": "a", "b": "s"}), mesh, P_,
          {"inner_states/a/inner_state/0/mu/w": pw, "inner_states/a/inner_state/0/nu/w": pw,
           "inner_states/s/inner_state/0/trace/b": pb})
    check(f"multi_transform {tag}",
          optx.multi_transform({"a": optx.adam(1e-2), "z": optx.set_to_zero()},
                               {"w": "a", "b": "z"}), mesh, P_,
          {"inner_states/a/inner_state/0/mu/w": pw, "inner_states/a/inner_state/0/nu/w": pw})

# The default `make_mesh` (explicit axes) gives the same shardings, and init follows them.
mesh = jax.make_mesh((8,), ("data",))
params = place(model()[0], {"w": NamedSharding(mesh, P("data")), "b": NamedSharding(mesh, P())})
tx = optx.adam(1e-2)
state = jax.jit(tx.init, out_shardings=optx.state_shardings(tx, params))(params)
assert tuple(state[0].nu["w"].sharding.spec) == ("data",)
assert tuple(state[0].count.sharding.spec) == ()
print("explicit ok")
"""
    )
    assert out.count(" ok") == 15, out


@pytest.mark.multidevice
def test_shard_state_zero_same_numbers_less_memory_and_errors() -> None:
    out = run_on_devices(
        PRELUDE
        + """
mesh = mesh_of((8,), ("data",))
rep = NamedSharding(mesh, P())
k = jax.random.split(jax.random.key(1), 3)
# ~1M parameters, replicated over the data axis (plain data parallelism).
params = {"w": jax.random.normal(k[0], (1024, 1024), jnp.float64) / 32,
          "b": jnp.zeros(1024, jnp.float64)}
def big_loss(p, x, y):
    return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)
x = jax.random.normal(k[1], (64, 1024), jnp.float64)
y = jax.random.normal(k[2], (64, 1024), jnp.float64)
tx = optx.adam(1e-3)
p_sh = {"w": rep, "b": rep}
d_sh = NamedSharding(mesh, P("data"))

def run(s_sh, steps=3):
    p = place(params, p_sh)
    state = jax.jit(tx.init, out_shardings=s_sh)(p)
    def step(p, state, x, y):
        updates, state = tx.update(jax.grad(big_loss)(p, x, y), state, p)
        return optx.apply_updates(p, updates), state
    fn = jax.jit(step, in_shardings=(p_sh, s_sh, d_sh, d_sh), out_shardings=(p_sh, s_sh),
                 donate_argnums=(0, 1))
    xs, ys = place(x, d_sh), place(y, d_sh)
    for _ in range(steps):
        p, state = fn(p, state, xs, ys)
        assert specs(jax.tree.map(lambda a: a.sharding, state)) == specs(s_sh)
    return p, state

full = optx.state_shardings(tx, place(params, p_sh))
zero = optx.shard_state(tx, mesh, "data", params=params)
assert tuple(zero[0].mu["w"].spec) == ("data",) and tuple(zero[0].nu["b"].spec) == ("data",)
assert tuple(zero[0].count.spec) == () and tuple(full[0].mu["w"].spec) == ()
p_full, s_full = run(full)
p_zero, s_zero = run(zero)
ref = params
def ref_step(p, state):
    updates, state = tx.update(jax.grad(big_loss)(p, x, y), state, p)
    return optx.apply_updates(p, updates), state
ref_state = tx.init(ref)
for _ in range(3):
    ref, ref_state = jax.jit(ref_step)(ref, ref_state)
# Float64 (see the module docstring): the bound on what the order of the sums can change,
# for this model and Adam(1e-3, eps=1e-8), is below TOL's atol.
assert 2 * 12 * (1e-3 / 1e-8) * grad_error_bound(params, x, y) < TOL["atol"]
for name in ("w", "b"):
    d_ref = float(np.max(np.abs(np.asarray(p_zero[name]) - np.asarray(ref[name]))))
    d_full = float(np.max(np.abs(np.asarray(p_zero[name]) - np.asarray(p_full[name]))))
    print(f"{name}: max |ZeRO - single device| {d_ref:.2e}, max |ZeRO - replicated| {d_full:.2e}")
    np.testing.assert_allclose(np.asarray(p_zero[name]), np.asarray(ref[name]), **TOL)
    np.testing.assert_allclose(np.asarray(p_zero[name]), np.asarray(p_full[name]), **TOL)
moments = lambda s: (s[0].mu, s[0].nu)
b_full, b_zero = per_device_bytes(moments(s_full)), per_device_bytes(moments(s_zero))
print(f"adam moments bytes/device: replicated {b_full}, ZeRO {b_zero}, "
      f"ratio {b_full / b_zero:.2f}")
assert b_full == 2 * 8 * (1024 * 1024 + 1024)  # float64
assert b_zero == b_full // 8
total_full, total_zero = per_device_bytes(s_full), per_device_bytes(s_zero)
print(f"adam state bytes/device: replicated {total_full}, ZeRO {total_zero}")
assert total_full / total_zero > 7.9

# On a 2-D mesh the slots keep the parameters' model-axis sharding and add the data axis.
mesh2 = mesh_of((4, 2), ("data", "model"))
p2 = place(params, {"w": NamedSharding(mesh2, P(None, "model")),
                    "b": NamedSharding(mesh2, P("model"))})
z2 = optx.shard_state(tx, mesh2, "data", params=p2)
assert tuple(z2[0].mu["w"].spec) == ("data", "model")
assert tuple(z2[0].mu["b"].spec) == ("model",)  # its only axis is sharded already
with pytest.raises(ValueError, match=re.escape(
        "`shard_state` needs every per-parameter slot to have a dimension, not sharded "
        "already, that the size of axis 'data' (4) divides (require=True). Received: "
        "'0/mu/b' of shape (1024,) with P('model',).")):
    optx.shard_state(tx, mesh2, "data", params=p2, require=True)
# Parameters sharded over the data axis already (FSDP-style) keep it.
p3 = place(params, {"w": NamedSharding(mesh, P("data")), "b": rep})
assert tuple(optx.shard_state(tx, mesh, params=p3)[0].nu["w"].spec) == ("data",)

# Bad input.
small = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
zero_small = optx.shard_state(tx, mesh, params=small)
assert tuple(zero_small[0].mu["w"].spec) == () and tuple(zero_small[0].mu["b"].spec) == ()
with pytest.raises(ValueError, match=re.escape(
        "`shard_state` needs every per-parameter slot to have a dimension, not sharded "
        "already, that the size of axis 'data' (8) divides (require=True). Received: "
        "'0/mu/b' of shape (3,) with P().")):
    optx.shard_state(tx, mesh, params=small, require=True)
with pytest.raises(ValueError, match=re.escape(
        "`state_shardings` needs shardings that divide their parameter's shape. Received: "
        "'b' of shape (3,) with P('data',): the mesh axes 'data' of size 8 do "
        "not divide dimension 0 (3).")):
    optx.state_shardings(tx, small, {"w": rep, "b": NamedSharding(mesh, P("data"))})
other = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
with pytest.raises(ValueError, match=re.escape(
        "`state_shardings` needs every parameter on one mesh. Received: 'b' on a mesh "
        "{'data': 8} on devices [0, 1, 2, 3, 4, 5, 6, 7] and 'w' on a mesh {'data': 4} "
        "on devices [0, 1, 2, 3].")):
    optx.state_shardings(tx, {"b": jax.device_put(jnp.ones(3), rep),
                              "w": jax.device_put(jnp.ones(3), NamedSharding(other, P()))})
with pytest.raises(ValueError, match=re.escape(
        "`shard_state` needs every parameter on one mesh. Received: 'b' on a mesh "
        "{'data': 4} on devices [0, 1, 2, 3] and 'w' on a mesh {'data': 8} on devices "
        "[0, 1, 2, 3, 4, 5, 6, 7].")):
    optx.shard_state(tx, mesh, params={"b": jax.device_put(jnp.ones(4), NamedSharding(other, P())),
                                       "w": jnp.ones(4)})
print("zero ok")
"""
    )
    assert "zero ok" in out, out
    print(out)


@pytest.mark.multidevice
def test_stateful_optimizer_keeps_shardings() -> None:
    out = run_on_devices(
        PRELUDE
        + """
mesh = mesh_of((4, 2), ("data", "model"))
p_sh = {"w": NamedSharding(mesh, P("data", "model")), "b": NamedSharding(mesh, P("model"))}
params0, x, y = model()
grad = jax.jit(jax.grad(loss))

opt, ref_opt = optx.optimizers.Adam(0.01), optx.optimizers.Adam(0.01)
params, ref = place(params0, p_sh), params0
for _ in range(4):
    params = opt.apply(grad(params, x, y), params)
    ref = ref_opt.apply(grad(ref, x, y), ref)
    assert specs(jax.tree.map(lambda a: a.sharding, params)) == specs(p_sh)
    v = opt.variables
    for slot in ("momentum", "velocity"):
        for k in ("w", "b"):
            assert v[f"adam/{slot}/{k}"].sharding == p_sh[k], (slot, k)
    assert v["iterations"].sharding.spec == P()
for k in ref:
    np.testing.assert_allclose(np.asarray(params[k]), np.asarray(ref[k]), **TOL)
    np.testing.assert_allclose(np.asarray(opt.variables[f"adam/velocity/{k}"]),
                               np.asarray(ref_opt.variables[f"adam/velocity/{k}"]), **TOL)

# stateless_apply: sharded inputs in, same shardings and numbers out (inputs donated).
variables, ref_vars = opt.variables, ref_opt.variables
p, r = params, ref
for _ in range(2):
    g, gr = grad(p, x, y), grad(r, x, y)
    p, variables = opt.stateless_apply(variables, g, p)
    r, ref_vars = ref_opt.stateless_apply(ref_vars, gr, r)
    assert specs(jax.tree.map(lambda a: a.sharding, p)) == specs(p_sh)
    assert variables["adam/momentum/w"].sharding == p_sh["w"]
for k in r:
    np.testing.assert_allclose(np.asarray(p[k]), np.asarray(r[k]), **TOL)

# Rebuilding the chain (a new clipnorm) and set_weights keep the state on its shardings.
opt.clipnorm = 1.0
opt.set_weights(opt.get_weights())
assert opt.variables["adam/velocity/w"].sharding == p_sh["w"]
p = opt.apply(grad(p, x, y), p)
assert specs(jax.tree.map(lambda a: a.sharding, p)) == specs(p_sh)
assert opt.variables["adam/momentum/b"].sharding == p_sh["b"]
print("stateful ok")
"""
    )
    assert "stateful ok" in out, out


# Single-device checks, in this process.


def test_state_shardings_on_one_device_and_from_shapes() -> None:
    params = {"w": jnp.ones((4, 2)), "b": jnp.ones(2)}
    tx = optx.adam(1e-3)
    got = optx.state_shardings(tx, params)
    device = SingleDeviceSharding(jax.devices()[0])
    assert all(s == device for s in jax.tree.leaves(got))
    mesh = jax.make_mesh((1,), ("data",))
    shapes = {
        "w": jax.ShapeDtypeStruct((4, 2), jnp.float32, sharding=NamedSharding(mesh, P("data"))),
        "b": jax.ShapeDtypeStruct((2,), jnp.float32, sharding=NamedSharding(mesh, P())),
    }
    got = optx.state_shardings(tx, shapes)
    assert got[0].mu["w"].spec == P("data") and got[0].count.spec == P()
    host = jax.tree.map(np.asarray, params)
    given = {"w": NamedSharding(mesh, P(None, "data")), "b": NamedSharding(mesh, P())}
    got = optx.state_shardings(tx, host, given)
    assert got[0].nu["w"].spec == P(None, "data")
    state = jax.jit(tx.init, out_shardings=got)(jax.device_put(host, given))
    assert state[0].nu["w"].sharding.spec == P(None, "data")


def test_errors() -> None:
    tx = optx.adam(1e-3)
    mesh = jax.make_mesh((1,), ("data",))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`shard_state` needs an axis of the mesh. Received: axis='model'; "
            "the mesh has axes ('data',)."
        ),
    ):
        optx.shard_state(tx, mesh, axis="model", params={"w": jnp.ones(2)})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`state_shardings` needs parameters with a sharding (jax.Array, or "
            "jax.ShapeDtypeStruct with .sharding), or param_shardings. "
            "Received: 'w' of type ndarray."
        ),
    ):
        optx.state_shardings(tx, {"w": np.ones(2)})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`state_shardings` needs param_shardings with the structure of the parameters. "
            "Received: PyTreeDef({'v': *}); expected: PyTreeDef({'w': *})."
        ),
    ):
        optx.state_shardings(tx, {"w": np.ones(2)}, {"v": NamedSharding(mesh, P())})
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`state_shardings` needs param_shardings of jax.sharding.Sharding. "
            "Received: 'w': 'data'."
        ),
    ):
        optx.state_shardings(tx, {"w": np.ones(2)}, {"w": "data"})
