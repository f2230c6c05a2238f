"""Checkpoints with orbax: `optx.save_state`, `optx.restore_state`, the optimizers' `save` / `load`.

Resuming in a new process is bit-identical to training straight through; a state saved on
8 sharded devices restores onto a 2x4 mesh, 4 devices and 1 device (`multidevice`
subprocesses import this module's helpers).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from multidevice import run_on_devices

import optx


def model(seed: int = 0) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    """A linear model's parameters and data (8 divides every leading axis)."""
    k = jax.random.split(jax.random.key(seed), 4)
    params = {"w": jax.random.normal(k[0], (16, 8)) / 4, "b": jax.random.normal(k[1], (8,))}
    x, y = jax.random.normal(k[2], (32, 16)), jax.random.normal(k[3], (32, 8))
    return params, x, y


def loss(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def make_step(tx: optx.GradientTransformationLike):
    def step(params, state, x, y):
        updates, state = tx.update(jax.grad(loss)(params, x, y), state, params)
        return optx.apply_updates(params, updates), state

    return jax.jit(step)


def train(tx, params, state, x, y, steps):
    step = make_step(tx)
    for _ in range(steps):
        params, state = step(params, state, x, y)
    return params, state


def train_stateful(opt, params, x, y, steps):
    for _ in range(steps):
        params = opt.apply(jax.grad(loss)(params, x, y), params)
    return params


RESUME_TX = optx.chain(optx.clip_by_global_norm(1.0), optx.adam(1e-2))


def assert_trees_equal(a, b) -> None:
    """Same structure (NamedTuple types included), dtypes and bits."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# -- round trips --------------------------------------------------------------------------

ROUND_TRIPS = {
    "adam": optx.adam(1e-2),
    "adafactor_factored": optx.adafactor(1e-2, min_dim_size_to_factor=4),
    "muon_partition": optx.muon(1e-2),  # a `partition`: MaskedNode placeholders
    "ema_accumulate": optx.chain(
        optx.accumulate_gradients(optx.adam(1e-2), every_k=2), optx.ema_params(0.9)
    ),
    "optax_adam": optax.adam(1e-2),
}


@pytest.mark.parametrize("name", ROUND_TRIPS)
def test_round_trip(name: str, tmp_path) -> None:
    tx = ROUND_TRIPS[name]
    params, x, y = model()
    params, state = train(tx, params, tx.init(params), x, y, 3)
    optx.save_state(tmp_path / "ckpt", state)
    # Into an abstract state (the usual case) and into a real one.
    restored = optx.restore_state(tmp_path / "ckpt", jax.eval_shape(tx.init, params))
    assert_trees_equal(restored, state)
    assert_trees_equal(optx.restore_state(tmp_path / "ckpt", tx.init(params)), state)
    # The restored state steps on: same numbers as the original.
    assert_trees_equal(train(tx, params, restored, x, y, 1), train(tx, params, state, x, y, 1))


def test_round_trip_keeps_placeholders_and_dtypes(tmp_path) -> None:
    params, _, _ = model()
    state = optx.muon(1e-2).init(params)
    optx.save_state(tmp_path / "ckpt", state)
    restored = optx.restore_state(tmp_path / "ckpt", jax.eval_shape(optx.muon(1e-2).init, params))
    muon_state = restored.inner_states["muon"].inner_state[0]
    assert muon_state.mu["b"] == optx.MaskedNode()
    assert muon_state.count.dtype == jnp.int32
    assert muon_state.hyperparams["beta"].dtype == jnp.float32
    # An abstract target without shardings restores onto the first local device.
    assert muon_state.mu["w"].sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])


# -- resuming in a new process: bit-identical ---------------------------------------------

RESUME = """
import sys, jax, numpy as np, optx
from test_checkpoint import RESUME_TX, model, train, train_stateful
directory, out = sys.argv[-2], sys.argv[-1]
params, x, y = model()
target = jax.eval_shape(lambda p: {"params": p, "opt_state": RESUME_TX.init(p)}, params)
saved = optx.restore_state(directory + "/functional", target)
final, _ = train(RESUME_TX, saved["params"], saved["opt_state"], x, y, 3)
params_k = optx.restore_state(directory + "/params", params)
opt = optx.optimizers.Optimizer.load(directory + "/stateful", params_k)
assert int(opt.iterations) == 2, opt.iterations
stateful = train_stateful(opt, params_k, x, y, 4)
np.savez(out, w=final["w"], b=final["b"], sw=stateful["w"], sb=stateful["b"])
"""


def test_resume_in_new_process_is_bit_identical(tmp_path) -> None:
    params, x, y = model()
    # Functional: 6 steps straight, or 3, save, restore elsewhere, 3 more.
    straight, _ = train(RESUME_TX, params, RESUME_TX.init(params), x, y, 6)
    p3, s3 = train(RESUME_TX, params, RESUME_TX.init(params), x, y, 3)
    optx.save_state(tmp_path / "functional", {"params": p3, "opt_state": s3})
    # Stateful: 6 steps straight, or 2, save, load elsewhere, 4 more.
    opt = optx.optimizers.Adam(1e-2, weight_decay=1e-3, use_ema=True)
    straight_stateful = train_stateful(opt, params, x, y, 6)
    opt = optx.optimizers.Adam(1e-2, weight_decay=1e-3, use_ema=True)
    p2 = train_stateful(opt, params, x, y, 2)
    opt.save(tmp_path / "stateful")
    optx.save_state(tmp_path / "params", p2)

    code = f"import sys; sys.argv += {[str(tmp_path), str(tmp_path / 'out.npz')]!r}\n"
    run_on_devices(code + RESUME.strip(), devices=1)
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["w"], straight["w"])
    np.testing.assert_array_equal(out["b"], straight["b"])
    np.testing.assert_array_equal(out["sw"], straight_stateful["w"])
    np.testing.assert_array_equal(out["sb"], straight_stateful["b"])


# -- another mesh ----------------------------------------------------------------------------

OTHER_MESH = """
import sys, jax, numpy as np, optx
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from test_checkpoint import model, train, train_stateful
directory = sys.argv[-1]
assert jax.device_count() == 8
auto = lambda n: (AxisType.Auto,) * n

def placed(params, mesh, specs):
    return {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in params.items()}

def abstract_state(tx, params):
    sh = optx.state_shardings(tx, params)
    shapes = jax.eval_shape(tx.init, params)
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        shapes, sh)

tx = optx.adam(1e-2)
params, x, y = model()
mesh8 = jax.make_mesh((8,), ("data",), axis_types=auto(1))
p8 = placed(params, mesh8, {"w": P("data", None), "b": P("data")})
state = jax.jit(tx.init, out_shardings=optx.state_shardings(tx, p8))(p8)
p8, state = train(tx, p8, state, x, y, 2)
assert len(state[0].mu["w"].sharding.device_set) == 8
optx.save_state(directory + "/functional", state)
np.savez(directory + "/expected.npz", mu=state[0].mu["w"], nu=state[0].nu["b"])
opt = optx.optimizers.Adam(1e-2)
train_stateful(opt, p8, x, y, 2)
opt.save(directory + "/stateful")

targets = {
    "2x4": (jax.make_mesh((2, 4), ("data", "model"), axis_types=auto(2)),
            {"w": P("data", "model"), "b": P("model")}),
    "4": (jax.make_mesh((4,), ("data",), axis_types=auto(1), devices=jax.devices()[4:]),
          {"w": P(None, "data"), "b": P()}),
}
for label, (mesh, specs) in targets.items():
    target = abstract_state(tx, placed(params, mesh, specs))
    restored = optx.restore_state(directory + "/functional", target)
    for got, want, t in zip(jax.tree.leaves(restored), jax.tree.leaves(state),
                            jax.tree.leaves(target), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert got.sharding.is_equivalent_to(t.sharding, got.ndim), (label, got.sharding)
    assert restored[0].mu["w"].sharding.spec == specs["w"]
    # Per-device bytes of `mu["w"]` (16x8 float32 = 512 bytes in all).
    shard = restored[0].mu["w"].addressable_shards[0].data
    print(label, "mu/w bytes per device:", shard.nbytes)
    loaded = optx.optimizers.Optimizer.load(directory + "/stateful",
                                            placed(params, mesh, specs))
    for k, v in opt.variables.items():
        np.testing.assert_array_equal(np.asarray(loaded.variables[k]), np.asarray(v))
    kernel = loaded.get_slot("w", "momentum")
    assert kernel.sharding.spec == specs["w"], (label, kernel.sharding)
"""


@pytest.mark.multidevice
def test_restore_onto_another_mesh(tmp_path) -> None:
    out = run_on_devices(f"import sys; sys.argv.append({str(tmp_path)!r})\n" + OTHER_MESH)
    assert "2x4 mu/w bytes per device: 64" in out, out
    assert "4 mu/w bytes per device: 128" in out, out
    # And onto this process's single device, from the 8-device checkpoint.
    params, _, _ = model()
    restored = optx.restore_state(
        tmp_path / "functional", jax.eval_shape(optx.adam(1e-2).init, params)
    )
    expected = np.load(tmp_path / "expected.npz")
    np.testing.assert_array_equal(restored[0].mu["w"], expected["mu"])
    np.testing.assert_array_equal(restored[0].nu["b"], expected["nu"])
    assert restored[0].mu["w"].sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
    loaded = optx.optimizers.Optimizer.load(tmp_path / "stateful", params)
    assert int(loaded.iterations) == 2


# -- bad input -------------------------------------------------------------------------------

HEAD = (
    "`restore_state` needs a checkpoint whose tree matches target's (the same leaf paths, "
    "shapes and dtypes; was it saved from another optimizer or other parameters?). Received: "
)


def raises(exc: type[Exception], message: str):
    return pytest.raises(exc, match=re.escape(message))


@pytest.fixture
def adam_checkpoint(tmp_path):
    optx.save_state(tmp_path / "adam", optx.adam(1e-2).init(model()[0]))
    return tmp_path / "adam"


def test_restore_other_optimizer_names_first_missing_leaf(adam_checkpoint) -> None:
    target = optx.sgd(0.1, momentum=0.9).init(model()[0])
    message = "a checkpoint without the leaf '0/trace/b' (target: shape (8,) and dtype float32)"
    with raises(
        ValueError,
        HEAD
        + message
        + "; 13 leaves saved, 5 in target. Saved leaves like it: '0/mu/b', '0/nu/b'.",
    ):
        optx.restore_state(adam_checkpoint, target)


def test_restore_config_adding_a_slot(tmp_path) -> None:
    params = model()[0]
    optx.save_state(tmp_path / "sgd", optx.sgd(0.1).init(params))
    with raises(ValueError, HEAD + "a checkpoint without the leaf '0/trace/b'"):
        optx.restore_state(tmp_path / "sgd", optx.sgd(0.1, momentum=0.9).init(params))
    # The other way round: the checkpoint holds slots the target lacks (sorted: the first).
    optx.save_state(tmp_path / "momentum", optx.sgd(0.1, momentum=0.9).init(params))
    message = "a checkpoint with the leaf '0/hyperparams/momentum' (shape () and dtype float32)"
    with raises(ValueError, HEAD + message + " that target lacks; 5 leaves saved, 2 in target."):
        optx.restore_state(tmp_path / "momentum", optx.sgd(0.1).init(params))


def test_restore_other_params_names_leaf_and_shapes(adam_checkpoint) -> None:
    init = optx.adam(1e-2).init
    message = "leaf '0/mu/w' of shape (16, 8) and dtype float32 in the checkpoint, "
    with raises(ValueError, HEAD + message + "shape (16, 4) and dtype float32 in target."):
        optx.restore_state(adam_checkpoint, init({"w": jnp.zeros((16, 4)), "b": jnp.zeros(8)}))
    target = init({"w": jnp.zeros((16, 8)), "b": jnp.zeros(8), "c": jnp.zeros(2)})
    with raises(ValueError, HEAD + "a checkpoint without the leaf '0/mu/c'"):
        optx.restore_state(adam_checkpoint, target)
    message = "a checkpoint with the leaf '0/mu/b' (shape (8,) and dtype float32) that target lacks"
    with raises(ValueError, HEAD + message):
        optx.restore_state(adam_checkpoint, init({"w": jnp.zeros((16, 8))}))


def test_restore_other_dtype_names_leaf(adam_checkpoint) -> None:
    target = optx.adam(1e-2, mu_dtype=jnp.bfloat16).init(model()[0])
    message = "leaf '0/mu/b' of shape (8,) and dtype float32 in the checkpoint, "
    with raises(ValueError, HEAD + message + "shape (8,) and dtype bfloat16 in target."):
        optx.restore_state(adam_checkpoint, target)


def test_incomplete_checkpoints_are_refused(adam_checkpoint, tmp_path) -> None:
    target = optx.adam(1e-2).init(model()[0])
    head = (
        "`restore_state` needs a finalized checkpoint (orbax renames a save's temporary "
        "folder and writes 'commit_success.txt' only once it is complete). Received: directory="
    )
    # A save cut short before its rename: orbax's temporary folder.
    tmp = tmp_path / "step.orbax-checkpoint-tmp-1234"
    shutil.copytree(adam_checkpoint, tmp)
    with raises(ValueError, head + repr(str(tmp)) + ", an incomplete or interrupted save"):
        optx.restore_state(tmp, target)
    # A folder without orbax's commit marker.
    (adam_checkpoint / "commit_success.txt").unlink()
    with raises(ValueError, head + repr(str(adam_checkpoint))):
        optx.restore_state(adam_checkpoint, target)
    missing = tmp_path / "nothing"
    message = "`restore_state` needs an existing checkpoint directory. Received: directory="
    with raises(FileNotFoundError, message + repr(str(missing)) + ", which does not exist."):
        optx.restore_state(missing, target)


def test_save_refuses_existing_directory_unless_forced(adam_checkpoint) -> None:
    state = optx.sgd(0.1, momentum=0.9).init(model()[0])
    message = (
        "`save_state` needs a directory that does not exist yet (or force=True to overwrite "
        f"it). Received: directory={str(adam_checkpoint)!r}, which exists."
    )
    with raises(ValueError, message):
        optx.save_state(adam_checkpoint, state)
    optx.save_state(adam_checkpoint, state, force=True)
    assert_trees_equal(optx.restore_state(adam_checkpoint, state), state)


# -- stateful ------------------------------------------------------------------------------

STATEFUL = {
    "adam": lambda: optx.optimizers.Adam(1e-2, amsgrad=True, use_ema=True),
    "adafactor": lambda: optx.optimizers.Adafactor(1e-2),
    "muon": lambda: optx.optimizers.Muon(1e-2),
    "loss_scale": lambda: optx.optimizers.LossScaleOptimizer(optx.optimizers.SGD(momentum=0.9)),
    "schedule": lambda: optx.optimizers.SGD(
        optx.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5), momentum=0.9
    ),
}


@pytest.mark.parametrize("name", STATEFUL)
def test_stateful_round_trip(name: str, tmp_path) -> None:
    params, x, y = model()
    opt = STATEFUL[name]()
    params = train_stateful(opt, params, x, y, 3)
    opt.save(tmp_path / "opt")
    loaded = optx.optimizers.Optimizer.load(tmp_path / "opt", params)
    assert type(loaded) is type(opt)
    assert loaded.get_config() == opt.get_config()
    assert_trees_equal(loaded.variables, opt.variables)
    # The next step is bit-identical.
    assert_trees_equal(
        train_stateful(loaded, params, x, y, 1), train_stateful(opt, params, x, y, 1)
    )


def test_stateful_errors(tmp_path) -> None:
    params = model()[0]
    generic = optx.optimizers.Optimizer(optx.sgd(0.1))
    with raises(ValueError, "`save` needs a built optimizer."):
        generic.save(tmp_path / "generic")
    generic.build(params)
    message = (
        "`save` needs an optimizer whose config is JSON (a Keras-style class such as "
        "optx.optimizers.Adam, a schedule from optx.optimizers.schedules). Received: "
        f"transform={optx.sgd(0.1)!r} in the config of 'optimizer'. Save the state alone "
        "with `optx.save_state(directory, optimizer.variables)`"
    )
    with raises(TypeError, message):
        generic.save(tmp_path / "generic")
    # ... which works, as the message says.
    optx.save_state(tmp_path / "generic", generic.variables)
    new = optx.optimizers.Optimizer(optx.sgd(0.1))
    new.build(params)
    new.load_own_variables(optx.restore_state(tmp_path / "generic", new.variables))
    assert_trees_equal(new.variables, generic.variables)

    opt = optx.optimizers.Adam(1e-2)
    opt.build(params)
    opt.save(tmp_path / "adam")
    message = (
        "`save` needs a directory that does not exist yet (or force=True to overwrite it). "
        f"Received: directory={str(tmp_path / 'adam')!r}, which exists."
    )
    with raises(ValueError, message):
        opt.save(tmp_path / "adam")
    message = (
        "`SGD.load` needs a checkpoint of SGD. Received: a checkpoint of Adam; load it with "
        "`optx.optimizers.Optimizer.load`."
    )
    with raises(TypeError, message):
        optx.optimizers.SGD.load(tmp_path / "adam", params)
    message = (
        "`load` needs the variables of this optimizer, keyed by name. Received: variables "
        "with missing 'adam/momentum/c', 'adam/velocity/c'."
    )
    with raises(ValueError, message):
        optx.optimizers.Optimizer.load(tmp_path / "adam", {**params, "c": jnp.zeros(2)})
    message = HEAD.replace("restore_state", "load") + (
        "leaf 'adam/momentum/b' of shape (8,) and dtype float32 in the checkpoint, "
        "shape (4,) and dtype float32 in target."
    )
    with raises(ValueError, message):
        optx.optimizers.Optimizer.load(tmp_path / "adam", {**params, "b": jnp.zeros(4)})
    message = (
        "`load` needs a checkpoint written by `optimizer.save`. Received: directory="
        f"{str(tmp_path / 'generic')!r}, whose metadata holds no optimizer config"
    )
    with raises(ValueError, message):
        optx.optimizers.Optimizer.load(tmp_path / "generic", params)


def edited_copy(source: Path, dest: Path, **values: float) -> Path:
    """A copy of the optimizer checkpoint ``source`` at ``dest`` with some variables edited.

    Written with orbax alone, as a user editing a checkpoint on disk would, keeping its
    metadata (the optimizer's config).
    """
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as checkpointer:
        tree = dict(checkpointer.restore(source.resolve()))
        custom = checkpointer.metadata(source.resolve()).custom_metadata
        for key, value in values.items():
            tree[key] = np.asarray(value, np.asarray(tree[key]).dtype)
        checkpointer.save(dest.resolve(), tree, custom_metadata=custom)
        checkpointer.wait_until_finished()
    return dest


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            {"learning_rate": -5.0},
            "`load` needs learning_rate finite and >= 0. Received: learning_rate=-5.0.",
        ),
        (
            {"learning_rate": np.nan},
            "`load` needs learning_rate finite and >= 0. Received: learning_rate=nan.",
        ),
        ({"beta_1": 1.0}, "`load` needs beta_1 in [0, 1). Received: beta_1=1.0."),
        (
            {"iterations": -3},
            "`load` needs iterations to be an integer in [0, 2147483647] (a step count, of "
            "shape ()). Received: iterations=-3 of dtype int32.",
        ),
    ],
)
def test_load_refuses_values_edited_out_of_range_on_disk(tmp_path, edit, message) -> None:
    params = model()[0]
    opt = optx.optimizers.Adam(1e-2)
    opt.build(params)
    opt.save(tmp_path / "opt")
    edited = edited_copy(tmp_path / "opt", tmp_path / "edited", **edit)
    with raises(ValueError, message):
        optx.optimizers.Optimizer.load(edited, params)


def test_load_shows_the_loaded_hyperparameters_as_attributes(tmp_path) -> None:
    params = model()[0]
    opt = optx.optimizers.Adam(1e-2, beta_1=0.5)
    opt.build(params)
    opt.learning_rate = 0.05  # changed after build: saved in the state and the config
    opt.save(tmp_path / "opt")
    loaded = optx.optimizers.Optimizer.load(tmp_path / "opt", params)
    assert (loaded.beta_1, loaded.learning_rate) == (0.5, 0.05)
    # The state on disk holds other values than the config: the loaded ones show.
    edited = edited_copy(tmp_path / "opt", tmp_path / "edited", beta_1=0.25, learning_rate=0.5)
    loaded = optx.optimizers.Optimizer.load(edited, params)
    assert (loaded.beta_1, loaded.learning_rate) == (0.25, 0.5)
    config = loaded.get_config()
    assert (config["beta_1"], config["learning_rate"]) == (0.25, 0.5)
    # ... and they are the ones the next step uses.
    fresh = optx.optimizers.Adam(0.5, beta_1=0.25)
    fresh.build(params)
    grads = jax.tree.map(jnp.ones_like, params)
    assert_trees_equal(loaded.apply(grads, params), fresh.apply(grads, params))


# A store written by release 0.1.0.dev0 (decays kept as ``one_minus_<name>`` = 1 - b), of
# chain(clip_by_global_norm(1.0), adamw(1e-2, b1=0.95, b2=0.9995, weight_decay=0.1)) after
# three steps; the .npz beside it holds its leaves by their old key paths.
LEGACY = Path(__file__).parent / "data" / "adamw_0.1.0.dev0"


def _legacy_tx() -> optx.Transform:
    return optx.chain(
        optx.clip_by_global_norm(1.0), optx.adamw(1e-2, b1=0.95, b2=0.9995, weight_decay=0.1)
    )


def test_restore_a_store_of_the_previous_release() -> None:
    params = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}
    tx = _legacy_tx()
    restored = optx.restore_state(LEGACY, tx.init(params))
    old = dict(np.load(str(LEGACY) + ".npz"))
    adam_state = restored[1][0]
    # Slots and counts as stored.
    np.testing.assert_array_equal(adam_state.mu["w"], old["[1][0].mu['w']"])
    np.testing.assert_array_equal(adam_state.nu["b"], old["[1][0].nu['b']"])
    assert int(adam_state.count) == int(old["[1][0].count"]) == 3
    # The decays: the values by their names, and 1 - b exactly as it was stored.
    h = adam_state.hyperparams
    assert float(h["b1"]) == float(np.float32(0.95))
    assert float(h.complement("b1")) == float(old["[1][0].hyperparams['one_minus_b1']"])
    assert float(h.complement("b2")) == float(old["[1][0].hyperparams['one_minus_b2']"])
    got = optx.get_hyperparams(restored)
    assert float(got["max_norm"]) == 1.0 and float(got["weight_decay"]) == np.float32(0.1)
    # It steps as a state made by this release does.
    grads = jax.tree.map(jnp.ones_like, params)
    fresh = jax.tree.map(lambda a, b: b, tx.init(params), restored)
    chex.assert_trees_all_equal(tx.update(grads, restored, params), tx.update(grads, fresh, params))


def test_restore_a_store_of_the_previous_release_into_another_optimizer() -> None:
    params = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}
    with raises(ValueError, "Received: a checkpoint of an earlier release without the"):
        optx.restore_state(LEGACY, optx.sgd(0.1, momentum=0.9).init(params))


# `optimizer.save` of release 0.1.0.dev0: AdamW(1e-2, beta_1=0.95, beta_2=0.9995,
# weight_decay=0.1, use_ema=True, ema_momentum=0.9) after three steps; the .npz holds its
# `variables` (keys `one_minus_b1`, `eps`, ...).
KERAS_LEGACY = Path(__file__).parent / "data" / "keras_adamw_0.1.0.dev0"


def _check_upgraded(opt: optx.optimizers.Optimizer, old: dict[str, np.ndarray]) -> None:
    new = opt.variables
    assert not any("one_minus" in k for k in new)
    assert int(new["iterations"]) == int(old["iterations"]) == 3
    for key in ("adam_w/momentum/w", "adam_w/velocity/b", "adam_w/average/w"):
        np.testing.assert_array_equal(new[key], old[key])
    assert float(new["beta_1"]) == float(np.float32(0.95))
    assert float(new["epsilon"]) == float(old["eps"])
    assert float(new["ema_momentum"]) == float(np.float32(0.9))
    # 1 - b exactly as it was stored: the steps go on with the same numbers.
    (adam,) = [
        n
        for n in jax.tree.leaves(opt._state, is_leaf=lambda x: isinstance(x, optx.HyperParams))
        if isinstance(n, optx.HyperParams) and "b1" in n
    ]
    assert float(adam.complement("b1")) == float(old["one_minus_b1"])
    assert float(adam.complement("b2")) == float(old["one_minus_b2"])


def test_load_an_optimizer_saved_by_the_previous_release() -> None:
    params = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}
    old = dict(np.load(str(KERAS_LEGACY) + ".npz"))
    opt = optx.optimizers.Optimizer.load(KERAS_LEGACY, params)
    assert type(opt).__name__ == "AdamW"
    _check_upgraded(opt, old)


def test_load_own_variables_of_the_previous_release() -> None:
    params = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}
    old = dict(np.load(str(KERAS_LEGACY) + ".npz"))
    opt = optx.optimizers.AdamW(
        1e-2, beta_1=0.95, beta_2=0.9995, weight_decay=0.1, use_ema=True, ema_momentum=0.9
    )
    opt.build(params)
    opt.load_own_variables(old)
    _check_upgraded(opt, old)


# -- Python scalars, 64-bit leaves and empty trees ------------------------------------------


def test_python_scalars_restore_into_the_tree_that_was_saved(tmp_path) -> None:
    # orbax stores a Python int as int64 and a float as float64; into a Python scalar of
    # target they come back as that Python type, exactly (2**40 does not fit in int32).
    tree = {"w": jnp.ones(3), "step": 5, "lr": 0.1, "flag": True, "big": 2**40}
    optx.save_state(tmp_path / "ckpt", tree)
    restored = optx.restore_state(tmp_path / "ckpt", tree)
    assert {k: type(v) for k, v in restored.items() if k != "w"} == {
        "step": int,
        "lr": float,
        "flag": bool,
        "big": int,
    }
    assert restored["step"] == 5 and restored["lr"] == 0.1 and restored["big"] == 2**40
    assert restored["flag"] is True
    assert_trees_equal(restored["w"], tree["w"])


def test_64_bit_leaves_restore_into_32_bit_targets(tmp_path) -> None:
    # Saved with NumPy's (or jax_enable_x64's) 64-bit dtypes, restored into the 32-bit arrays
    # JAX makes by default.
    saved = {
        "n": np.array([-(2**31), 3, 2**31 - 1], np.int64),
        "x": np.array([0.5, -1e38], np.float64),
        "step": 5,
        "lr": 0.1,
    }
    optx.save_state(tmp_path / "ckpt", saved)
    target = {
        "n": jnp.zeros(3, jnp.int32),
        "x": jnp.zeros(2, jnp.float32),
        "step": jnp.int32(0),
        "lr": jnp.float32(0),
    }
    restored = optx.restore_state(tmp_path / "ckpt", target)
    for key in target:
        assert restored[key].dtype == target[key].dtype, key
        assert isinstance(restored[key], jax.Array), key
    np.testing.assert_array_equal(restored["n"], saved["n"])
    np.testing.assert_array_equal(restored["x"], saved["x"].astype(np.float32))
    assert int(restored["step"]) == 5 and float(restored["lr"]) == np.float32(0.1)


def test_values_that_do_not_fit_the_target_dtype_are_refused(tmp_path) -> None:
    optx.save_state(tmp_path / "int", {"n": np.array([1, 2**40], np.int64)})
    message = (
        "`restore_state` needs checkpoint values that fit target's dtypes. Received: leaf "
        "'n' holds 1099511627776 (int64 in the checkpoint), outside the range of int32 in "
        "target [-2147483648, 2147483647]. Restore it into a target of dtype int64 (with "
        "jax.config.update('jax_enable_x64', True))."
    )
    with raises(ValueError, message):
        optx.restore_state(tmp_path / "int", {"n": jnp.zeros(2, jnp.int32)})
    # A NumPy int64 target is held in int32 by JAX (without jax_enable_x64): refused too,
    # never wrapped to 0.
    with raises(ValueError, message):
        optx.restore_state(tmp_path / "int", {"n": np.zeros(2, np.int64)})
    optx.save_state(tmp_path / "float", {"x": 1e300})
    message = (
        "`restore_state` needs checkpoint values that fit target's dtypes. Received: leaf "
        "'x' holds 1e+300 (float64 in the checkpoint), which overflows float32 in target. "
        "Restore it into a target of dtype float64 (with "
        "jax.config.update('jax_enable_x64', True))."
    )
    with raises(ValueError, message):
        optx.restore_state(tmp_path / "float", {"x": jnp.float32(0)})
    assert optx.restore_state(tmp_path / "float", {"x": 0.0}) == {"x": 1e300}
    # Another kind, or another 16/32-bit format, is another tree: refused as before.
    message = "leaf 'n' of shape (2,) and dtype int64 in the checkpoint, shape (2,) and dtype "
    with raises(ValueError, HEAD + message + "float32 in target."):
        optx.restore_state(tmp_path / "int", {"n": jnp.zeros(2)})
    with raises(ValueError, HEAD + "leaf 'x' of shape () and dtype float64 in the checkpoint"):
        optx.restore_state(tmp_path / "float", {"x": 0})


@pytest.mark.parametrize(
    "make",
    [
        lambda p: optx.identity().init(p),
        lambda p: optx.chain(optx.identity(), optx.set_to_zero()).init(p),
        lambda p: {},
    ],
    ids=["identity", "chain_of_stateless", "empty_dict"],
)
def test_empty_state_saves_and_restores(make, tmp_path, capfd) -> None:
    params = model()[0]
    state = make(params)
    assert jax.tree.leaves(state) == []
    optx.save_state(tmp_path / "step_1", state)
    restored = optx.restore_state(tmp_path / "step_1", make(params))
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    assert optx.latest_checkpoint(tmp_path) == str(tmp_path / "step_1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1"]
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "ERROR" not in out + err, out + err


def test_empty_and_full_trees_do_not_restore_into_each_other(tmp_path) -> None:
    params = model()[0]
    optx.save_state(tmp_path / "empty", optx.identity().init(params))
    message = (
        "a checkpoint without the leaf '0/trace/b' (target: shape (8,) and dtype float32); "
        "0 leaves saved, 5 in target. The checkpoint is of a tree without leaves (a stateless "
        "transform's)."
    )
    with raises(ValueError, HEAD + message):
        optx.restore_state(tmp_path / "empty", optx.sgd(0.1, momentum=0.9).init(params))
    optx.save_state(tmp_path / "full", optx.sgd(0.1).init(params))
    message = "a checkpoint with the leaf '1/count' (shape () and dtype int32) that target "
    with raises(ValueError, HEAD + message + "lacks; 2 leaves saved, 0 in target."):
        optx.restore_state(tmp_path / "full", optx.identity().init(params))
