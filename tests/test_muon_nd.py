"""Muon on leaves of any rank through `MuonDimensionNumbers`: stacked layers and convolution
kernels equal their 2-D runs, parity with optax's dimension numbers, and the errors.

Runs are in float64 (`run64`). Bounds: a Newton-Schulz step multiplies a perturbation of
its input by at most ``a = 3.4445`` (its polynomial's largest slope on [0, 1.2]), so five
steps by ``G = a**5``; each step rounds ``R = 2 + 2 * n`` times per entry (three products
of reduction length at most ``n``, tests/TOLERANCES.md), relative to the entries' size
(about 1 after the normalisation). Muon's update does not depend on the parameters, so
the steps' errors add: over ``T`` steps at learning rate ``lr`` and shape factor ``s``,
``T * lr * s * G * (R + 8) * EPS64`` (8: the normalisation and the momentum).
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, assert_close, run64
from multidevice import run_on_devices
from test_zoo_new import K_ADAM, ROUNDOFF64, STEPS, f32, step_grads

import optx

DN = optx.contrib.MuonDimensionNumbers
EPS64 = float(np.finfo(np.float64).eps)
GAIN = 3.4445**5


def ns_atol(steps: int, lr: float, shape_factor: float, n: int) -> float:
    """The float64 bound of the module docstring, for reductions of length at most ``n``."""
    return steps * lr * shape_factor * GAIN * (2 + 2 * n + 8) * EPS64


def normal(rng: np.random.Generator, *shape: int) -> jax.Array:
    return jnp.asarray(rng.standard_normal(shape), jnp.float32)


def test_stacked_layers_equal_per_layer_runs() -> None:
    rng = np.random.default_rng(0)
    # A scan-stacked (layers, in, out) weight, and one whose batch axis is in the middle.
    params = {"stack": normal(rng, 3, 4, 5), "middle": normal(rng, 4, 2, 3)}
    dims = {"stack": DN(1, 2), "middle": DN(reduction_axis=0, output_axis=-1)}
    tx = optx.muon(0.1, muon_weight_dimension_numbers=dims)
    split = {
        **{f"stack{i}": params["stack"][i] for i in range(3)},
        **{f"middle{i}": params["middle"][:, i] for i in range(2)},
    }
    grads = step_grads(params, steps=10)
    split_grads = {
        **{f"stack{i}": grads["stack"][:, i] for i in range(3)},
        **{f"middle{i}": grads["middle"][:, :, i] for i in range(2)},
    }
    p, _, _ = run64(tx, optx.apply_updates, params, grads)
    q, _, _ = run64(optx.muon(0.1), optx.apply_updates, split, split_grads)
    atol = ns_atol(10, 0.1, np.sqrt(5 / 4), 5)
    for i in range(3):
        assert_close(f"stack[{i}]", p["stack"][i], q[f"stack{i}"], 0.0, atol)
    for i in range(2):
        assert_close(f"middle[:, {i}]", p["middle"][:, i], q[f"middle{i}"], 0.0, atol)


def test_conv_kernel_equals_its_reshaped_matrix() -> None:
    rng = np.random.default_rng(1)
    kernel = normal(rng, 2, 2, 3, 4)  # (h, w, in, out): fan_in 12, fan_out 4
    grads = step_grads({"k": kernel}, steps=10)
    for rms in (None, 0.2):  # both shape factors take the merged fans
        tx = optx.muon(
            0.1, muon_weight_dimension_numbers={"k": DN((0, 1, 2), 3)}, consistent_rms=rms
        )
        p, _, _ = run64(tx, optx.apply_updates, {"k": kernel}, grads)
        flat_grads = {"k": grads["k"].reshape(10, 12, 4)}
        flat = {"k": kernel.reshape(12, 4)}
        q, _, _ = run64(optx.muon(0.1, consistent_rms=rms), optx.apply_updates, flat, flat_grads)
        factor = 1.0 if rms is None else rms * np.sqrt(12)
        assert_close("kernel", p["k"].reshape(12, 4), q["k"], 0.0, ns_atol(10, 0.1, factor, 12))


def nd_params() -> Any:
    rng = np.random.default_rng(2)
    return {
        "blocks": [
            {"stack": normal(rng, 3, 4, 5), "conv": normal(rng, 2, 2, 3, 4)},
            {"middle": normal(rng, 4, 2, 3)},
        ],
        "dense": {"kernel": normal(rng, 4, 3), "bias": normal(rng, 3)},
    }


def nd_dims(tree: Any = None) -> Any:
    """The dimension numbers of `nd_params` (as a callable, it takes the parameters)."""
    del tree
    return {
        "blocks": [
            {"stack": DN(1, 2), "conv": DN((0, 1, 2), 3)},
            {"middle": DN(0, 2)},
        ],
        "dense": {"kernel": DN(), "bias": None},  # the bias takes AdamW
    }


def test_parity_with_optax_dimension_numbers() -> None:
    # Without Nesterov, optx's float32 momentum decay and bias correction scale the
    # momentum by a common factor, which the normalisation removes (its eps, 1e-8 against
    # norms near 1, moves nothing); what is left: the learning rate and the shape factor
    # (2 roundings: a ratio, its root), 1 + 2 float32 roundings of the update, and
    # AdamW's K_ADAM on the bias (tests/test_zoo_new.py).
    params = nd_params()
    grads = step_grads(params)
    optax_dims = jax.tree.map(
        lambda d: optax.contrib.MuonDimensionNumbers(*d),
        nd_dims(),
        is_leaf=lambda x: isinstance(x, DN),
    )
    ref = optax.contrib.muon(
        1e-2, beta=f32(0.95), nesterov=False, muon_weight_dimension_numbers=optax_dims
    )
    p_ref, _, path = run64(ref, optax.apply_updates, params, grads)
    flat_path = jax.tree_util.tree_flatten_with_path(path)[0]
    for spec in (nd_dims(), nd_dims):
        tx = optx.muon(1e-2, nesterov=False, muon_weight_dimension_numbers=spec)
        p, _, _ = run64(tx, optx.apply_updates, params, grads)
        leaves = zip(jax.tree.leaves(p), jax.tree.leaves(p_ref), flat_path, strict=True)
        for a, e, (key, size) in leaves:
            name = jax.tree_util.keystr(key)
            k = K_ADAM if "bias" in name else 1 + 2
            atol = k * EPS32 / 2 * float(size) + ns_atol(STEPS, 1e-2, np.sqrt(5 / 3), 12)
            assert_close(name, a, e, ROUNDOFF64, atol)
    # optax's dimension numbers are taken as they are: the same configuration.
    assert optx.muon(1e-2, muon_weight_dimension_numbers=optax_dims) == optx.muon(
        1e-2, muon_weight_dimension_numbers=nd_dims()
    )


def test_scale_by_muon_alone_and_prefix() -> None:
    # One MuonDimensionNumbers for the whole tree (a prefix), and jit equal to eager.
    rng = np.random.default_rng(3)
    params = {"a": normal(rng, 2, 3, 4), "b": normal(rng, 5, 3, 2)}
    tx = optx.contrib.scale_by_muon(weight_dimension_numbers=DN(1, 2))
    grads = {k: normal(rng, *v.shape) for k, v in params.items()}
    state = tx.init(params)
    eager, _ = tx.update(grads, state)
    jitted, _ = jax.jit(tx.update)(grads, state)
    alone = optx.scale_by_muon()
    for k, v in params.items():
        for i in range(v.shape[0]):
            one, _ = alone.update({"x": grads[k][i]}, alone.init({"x": v[i]}))
            # float32: the same program per matrix, batched; 5 steps of 3 products.
            atol = GAIN * (2 + 2 * 4 + 8) * EPS32
            assert_close(f"{k}[{i}]", eager[k][i], one["x"], 0.0, atol)
            assert_close(f"{k}[{i}] jit", jitted[k][i], one["x"], 0.0, atol)
    assert tx == optx.contrib.scale_by_muon(weight_dimension_numbers=DN([1], (2,)))
    shape = optx.scale_by_shape(weight_dimension_numbers=DN(1, 2))
    out, _ = shape.update(grads, shape.init(params))
    # Width rule sqrt(max(1, fan_out / fan_in)): 4 / 3 for "a", 1 for "b" (2 roundings).
    assert_close("a", out["a"], grads["a"] * np.sqrt(4 / 3), 2 * EPS32, 0.0)
    assert_close("b", out["b"], grads["b"], 0.0, 0.0)


def test_bad_dimension_numbers_name_the_leaf() -> None:
    params = {"layers": {"w": jnp.ones((2, 3, 4))}, "b": jnp.ones(3)}
    name = "muon_weight_dimension_numbers"
    cases = [
        (
            {"layers": {"w": DN(1, (2, 1))}, "b": None},
            f"`muon` needs distinct, non-empty reduction and output axes in {name}. "
            "Received: params['layers/w'] of shape (2, 3, 4) with "
            "MuonDimensionNumbers(reduction_axis=(1,), output_axis=(2, 1)).",
        ),
        (
            {"layers": {"w": DN(1, -4)}, "b": None},
            f"`muon` needs the axes of {name} within the rank of each parameter. "
            "Received: params['layers/w'] of shape (2, 3, 4) with "
            "MuonDimensionNumbers(reduction_axis=(1,), output_axis=(-4,)).",
        ),
        (
            {"layers": {"w": DN(1, 3)}, "b": None},
            f"`muon` needs the axes of {name} within the rank of each parameter. "
            "Received: params['layers/w'] of shape (2, 3, 4) with "
            "MuonDimensionNumbers(reduction_axis=(1,), output_axis=(3,)).",
        ),
        (
            {"layers": {"w": DN(1, 2)}, "b": DN()},
            "`muon` needs parameters of rank 2 or more (matrices, or batches of them). "
            "Received: params['b'] of shape (3,) with "
            "MuonDimensionNumbers(reduction_axis=(0,), output_axis=(1,)). Route it to the "
            f"AdamW fallback (in `muon`: None in {name}, or leave it out of muon_mask).",
        ),
        (
            {"layers": DN(1, 2)},
            f"`muon` needs {name} with the structure of the parameters (or a prefix of "
            "it). Received: PyTreeDef({'layers': *}) for parameters "
            "PyTreeDef({'b': *, 'layers': {'w': *}}).",
        ),
    ]
    for dims, message in cases:
        tx = optx.muon(1e-2, muon_weight_dimension_numbers=dims)
        with pytest.raises(ValueError, match=re.escape(message)):
            tx.init(params)
    # In scale_by_muon, a leaf without dimension numbers must be a matrix.
    tx = optx.scale_by_muon(weight_dimension_numbers={"w": None, "v": DN(1, 2)})
    with pytest.raises(ValueError, match=re.escape("params['w'] of shape (2, 3, 4)")):
        tx.init({"w": params["layers"]["w"], "v": params["layers"]["w"]})
    with pytest.raises(ValueError, match=re.escape("`scale_by_muon.update` needs distinct")):
        optx.scale_by_muon(weight_dimension_numbers=DN(0, 0)).update(
            {"w": jnp.ones((2, 2))}, optx.scale_by_muon().init({"w": jnp.ones((2, 2))})
        )
    with pytest.raises(
        TypeError,
        match=re.escape(
            f"`muon` needs {name} to be a pytree of MuonDimensionNumbers (None for leaves left "
            "out), or a callable returning one. Received: a leaf 2."
        ),
    ):
        optx.muon(1e-2, muon_weight_dimension_numbers={"w": 2})
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`scale_by_muon` needs the axes of weight_dimension_numbers to be ints or sequences "
            "of ints. Received: MuonDimensionNumbers(reduction_axis=0.5, output_axis=1)."
        ),
    ):
        optx.scale_by_muon(weight_dimension_numbers=DN(0.5, 1))
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"`muon` needs muon_mask or {name}, not both: the leaves with dimension numbers "
            "take Muon. Received: muon_mask='w'."
        ),
    ):
        optx.muon(1e-2, muon_mask="w", muon_weight_dimension_numbers={"w": DN()})


SHARDED = """
import jax, numpy as np, optx
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

DN = optx.contrib.MuonDimensionNumbers
rng = np.random.default_rng(0)
host = {
    "stack": rng.standard_normal((4, 6, 8)).astype(np.float32),
    "conv": rng.standard_normal((2, 2, 4, 8)).astype(np.float32),
    "b": np.ones(8, np.float32),
}
specs = {"stack": P("a", None, "b"), "conv": P(None, None, "a", "b"), "b": P("b")}
dims = {"stack": DN(1, 2), "conv": DN((0, 1, 2), 3), "b": None}
tx = optx.muon(0.1, muon_weight_dimension_numbers=dims)


def step(p, s):
    u, s = tx.update(jax.tree.map(lambda x: 0.5 * x + 1.0, p), s, p)
    return optx.apply_updates(p, u), s


expected, _ = step(host, tx.init(host))
for kind in (AxisType.Auto, AxisType.Explicit):
    mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(kind, kind))
    with jax.set_mesh(mesh):
        params = {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in host.items()}
        new, _ = jax.jit(step)(params, jax.jit(tx.init)(params))
    for k, v in new.items():
        assert v.sharding.spec == specs[k], (kind, k, v.sharding.spec)
        # float32, one step: the Newton-Schulz bound of the module docstring (n = 16).
        atol = 0.1 * 3.4445**5 * (2 + 2 * 16 + 8) * float(np.finfo(np.float32).eps)
        assert np.max(np.abs(np.asarray(v) - expected[k])) <= atol, (kind, k)
    print(kind, "ok")
"""


@pytest.mark.multidevice
def test_stacked_and_conv_leaves_keep_their_shardings() -> None:
    # Sharded over the layer and the matrix axes, with Auto and Explicit mesh axes: each
    # matrix is orthogonalised whole, the parameters keep their shardings, one device's
    # numbers.
    out = run_on_devices(SHARDED)
    assert out.count(" ok") == 2, out
