"""Sharded training with no bookkeeping, for every optimizer of the registry (8 CPU devices).

In a subprocess (tests/sharding_check.py): on a 4x2 mesh with ``Auto`` and with
``Explicit`` axes, a plain ``jax.jit(tx.init)`` puts every slot on its parameter's sharding
(factored moments on the axes they keep), and a donated step keeps the parameters' and the
state's shardings; ZeRO-1 state (`optx.shard_state`) with a plain donated step equals one
device and gives the parameters back replicated.
"""

from __future__ import annotations

import pytest
from multidevice import ROOT, run_on_devices

CHECK = ROOT / "tests" / "sharding_check.py"


def _run(*what: str) -> str:
    code = f"import runpy, sys; sys.argv = ['sharding_check', *{what!r}]; "
    code += f"runpy.run_path({str(CHECK)!r}, run_name='__main__')"
    return run_on_devices(code, timeout=600)


@pytest.mark.multidevice
@pytest.mark.slow
@pytest.mark.parametrize("axis_types", ["Auto", "Explicit"])
def test_every_optimizer_inits_on_its_parameters_shardings_and_keeps_them(axis_types: str) -> None:
    out = _run("init", axis_types)
    print(out)
    assert f"{axis_types}: " in out


@pytest.mark.multidevice
def test_zero1_with_a_plain_donated_step_equals_one_device() -> None:
    out = _run("zero")
    print(out)
    assert out.count("ZeRO-1 equals one device") == 8


EXPLICIT = """
import tempfile
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
import optx

mesh = jax.make_mesh((4, 2), ("data", "model"))  # JAX's default: Explicit axes
assert mesh.axis_types == (AxisType.Explicit,) * 2
p_sh = {"w": NamedSharding(mesh, P("data", "model")), "b": NamedSharding(mesh, P("model"))}
rng = np.random.default_rng(0)
w0, b0 = rng.standard_normal((8, 4)), rng.standard_normal(4)
params = jax.device_put({"w": w0, "b": b0}, p_sh)
grads = jax.device_put({"w": np.ones((8, 4)), "b": np.ones(4)}, p_sh)

def same(a, b):
    return a.is_equivalent_to(b, 2)

# The stateful classes: slots on the parameters' shardings, parameters kept, and under
# jax.set_mesh too.
for context in (None, mesh):
    opt = optx.optimizers.AdamW(1e-2, clipnorm=1.0)
    p = params
    with jax.set_mesh(context) if context is not None else __import__("contextlib").nullcontext():
        for _ in range(3):
            p = opt.apply(grads, p)
    for k in ("w", "b"):
        assert p[k].sharding.spec == p_sh[k].spec, (k, p[k].sharding)
        assert opt.variables[f"adam_w/momentum/{k}"].sharding.spec == p_sh[k].spec
ref = optx.optimizers.AdamW(1e-2, clipnorm=1.0)
r = {"w": jnp.asarray(w0), "b": jnp.asarray(b0)}
for _ in range(3):
    r = ref.apply({"w": jnp.ones((8, 4)), "b": jnp.ones(4)}, r)
for k in r:  # elementwise maths and a global norm of 36 terms (tests/TOLERANCES.md)
    np.testing.assert_allclose(np.asarray(p[k]), np.asarray(r[k]), rtol=0,
                               atol=3 * (8 + 36) * 1.2e-7 * float(np.max(np.abs(r[k]))))
print("stateful explicit ok")

# Checkpoints: saved from an Explicit mesh, restored onto the shardings a step expects.
tx = optx.adam(1e-3)
state = jax.jit(tx.init)(params)
step = jax.jit(lambda p, s, g: (lambda u, s: (optx.apply_updates(p, u), s))(*tx.update(g, s, p)))
p, state = step(params, state, grads)
directory = tempfile.mkdtemp() + "/ckpt"
optx.save_state(directory, state)
restored = optx.restore_state(directory, state)
for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
    assert a.sharding == b.sharding, (a.sharding, b.sharding)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
compiled = step._cache_size()
step(p, restored, grads)
assert step._cache_size() == compiled, "the step compiled again after the restore"
abstract = jax.tree.map(
    lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state
)
assert jax.tree.map(lambda a: a.sharding.spec, optx.restore_state(directory, abstract)) == (
    jax.tree.map(lambda a: a.sharding.spec, state))
print("restore explicit ok")

# flatten: state_shardings follows the parameters (a sharded one keeps its own buffer).
c = jax.device_put(np.ones(6), NamedSharding(mesh, P()))
for types in (AxisType.Auto, AxisType.Explicit):
    m = jax.make_mesh((4, 2), ("data", "model"), axis_types=(types, types))
    tree = jax.device_put({"w": w0, "b": b0, "c": np.ones(6)},
                          {"w": NamedSharding(m, P("data", "model")),
                           "b": NamedSharding(m, P()), "c": NamedSharding(m, P())})
    ftx = optx.flatten(optx.adam(1e-3))
    shardings = optx.state_shardings(ftx, tree)
    real = ftx.init(tree)
    assert jax.tree.structure(shardings) == jax.tree.structure(real)
    for leaf, s in zip(jax.tree.leaves(real), jax.tree.leaves(shardings), strict=True):
        if not s.is_fully_replicated:  # a sharded parameter's slot
            assert leaf.sharding.is_equivalent_to(s, leaf.ndim), (types, leaf.sharding, s)
    own = real.inner_state[0].mu.buffers
    assert any(b.sharding.spec == P("data", "model") for b in own), own
    if types == AxisType.Explicit:  # under Auto axes `jit` hides the shardings from flatten
        placed = jax.jit(ftx.init, out_shardings=shardings)(tree)
        assert jax.tree.structure(placed) == jax.tree.structure(real)
    zero = optx.shard_state(ftx, m, "data", params=tree)
    assert any(s.spec and s.spec[0] == "data" for s in jax.tree.leaves(zero)), zero
print("flatten ok")
"""


@pytest.mark.multidevice
def test_explicit_mesh_stateful_classes_checkpoints_and_flatten() -> None:
    out = run_on_devices(EXPLICIT)
    assert "stateful explicit ok" in out and "restore explicit ok" in out
    assert "flatten ok" in out


def test_restored_state_runs_the_step_without_compiling_again(tmp_path) -> None:
    """`restore_state` gives arrays placed as the target's: an uncommitted state (from
    ``tx.init``) restores uncommitted, so the step jitted before does not compile again.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    import optx

    tx = optx.adam(1e-3)
    params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}

    @jax.jit
    def step(p, s):
        u, s = tx.update(jax.tree.map(jnp.ones_like, p), s, p)
        return optx.apply_updates(p, u), s

    state = tx.init(params)
    params, state = step(params, state)
    optx.save_state(tmp_path / "ckpt", state)
    for target in (tx.init(params), jax.eval_shape(tx.init, params)):
        restored = optx.restore_state(tmp_path / "ckpt", target)
        assert not any(x.committed for x in jax.tree.leaves(restored))
        compiled = step._cache_size()
        step(params, restored)
        assert step._cache_size() == compiled
        for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # A target placed on purpose keeps its placement.
    device = jax.devices()[0]
    restored = optx.restore_state(tmp_path / "ckpt", jax.device_put(tx.init(params), device))
    assert all(x.committed for x in jax.tree.leaves(restored))
