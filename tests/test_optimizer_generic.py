"""The generic `optx.optimizers.Optimizer(transform)`: buffers, config and serialization.

* A transform whose ``init`` puts one array object in two state leaves (or puts the
  parameters themselves in its state): the wrapper's step donates each state leaf, so it
  must hold its own buffers. Checked against a NumPy loop of the same rule (exact: the
  maths is an addition of small integers).
* ``get_config`` reports the current learning rate, as Keras's classes do, and
  ``deserialize(serialize(...))`` rebuilds an equal optimizer, recorded under its public
  module ``optx.optimizers``.
"""

import re
import typing

import jax
import jax.numpy as jnp
import keras
import numpy as np
import pytest

import optx

OX = optx.optimizers


class SharedState(typing.NamedTuple):
    a: typing.Any
    b: typing.Any


class SharedZeros:
    """``a += g``, ``b += 2 g``, update ``-(a + b)``; ``init`` shares one zeros array."""

    def init(self, params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return SharedState(a=zeros, b=zeros)

    def update(self, updates, state, params=None, **extra):
        a = jax.tree.map(lambda s, g: s + g, state.a, updates)
        b = jax.tree.map(lambda s, g: s + 2 * g, state.b, updates)
        return jax.tree.map(lambda x, y: -(x + y), a, b), SharedState(a, b)


class ParamsInState(SharedZeros):
    """The same rule, its state starting at the parameters' own arrays (``a = params``)."""

    def init(self, params):
        return SharedState(a=params, b=jax.tree.map(jnp.zeros_like, params))


def _reference(params, grads, a0):
    a, b, p = dict(a0), {k: np.zeros_like(v) for k, v in params.items()}, dict(params)
    for g in grads:
        a = {k: a[k] + g[k] for k in p}
        b = {k: b[k] + 2 * g[k] for k in p}
        p = {k: p[k] - (a[k] + b[k]) for k in p}
    return p


@pytest.mark.parametrize("tx", [SharedZeros(), ParamsInState()], ids=["shared", "params"])
def test_state_leaves_sharing_a_buffer_step_apply_and_stateless(tx):
    params = {"w": jnp.array([1.0, -2.0]), "b": jnp.array([0.5])}
    grads = [{"w": jnp.array([1.0, 2.0]), "b": jnp.array([-1.0])}] * 3
    np_params = jax.tree.map(np.asarray, params)
    a0 = np_params if isinstance(tx, ParamsInState) else jax.tree.map(np.zeros_like, np_params)
    expected = _reference(np_params, [jax.tree.map(np.asarray, g) for g in grads], a0)

    opt = OX.Optimizer(tx)
    p = params
    for g in grads:
        p = opt.apply(g, p)
    jax.tree.map(np.testing.assert_array_equal, p, expected)
    # `apply` does not donate the parameters: the caller's arrays are intact.
    jax.tree.map(np.testing.assert_array_equal, params, np_params)

    opt = OX.Optimizer(tx)
    opt.build(params)
    v, p = opt.variables, jax.tree.map(jnp.copy, params)
    for g in grads:
        p, v = opt.stateless_apply(v, g, p)
    jax.tree.map(np.testing.assert_array_equal, p, expected)


# ---------------------------------------------------------------------------------------
# Config and serialization.

PARAMS = {"w": jnp.array([1.0, -2.0, 0.5])}
GRAD = {"w": jnp.array([0.5, 1.0, -2.0])}


def _sgd_reference(lr, steps):
    p = np.asarray(PARAMS["w"])
    for _ in range(steps):
        p = p - np.float32(lr) * np.asarray(GRAD["w"])
    return p


def test_serialize_reports_the_public_module_and_round_trips():
    tx = optx.sgd(0.1)
    opt = OX.Optimizer(tx, name="plain", clipnorm=10.0)
    out = OX.serialize(opt)
    assert out == {
        "module": "optx.optimizers",
        "class_name": "Optimizer",
        "config": {"name": "plain", "transform": tx, "clipnorm": 10.0},
        "registered_name": None,
    }
    back = OX.deserialize(out)  # no custom_objects needed
    assert type(back) is OX.Optimizer and back.transform == opt.transform
    assert OX.serialize(back) == out
    np.testing.assert_array_equal(back.apply(GRAD, PARAMS)["w"], _sgd_reference(0.1, 1))
    assert OX.get(out).get_config() == out["config"]


def test_get_config_reports_the_current_learning_rate_and_round_trips():
    opt = OX.Optimizer(optx.sgd(0.1))
    p = opt.apply(GRAD, PARAMS)
    opt.learning_rate = 0.3
    config = opt.get_config()
    # As Keras's classes: the current value, as float32 holds it.
    assert config["learning_rate"] == float(np.float32(0.3))
    assert set(config) == {"name", "transform", "learning_rate"}
    assert config["transform"] == optx.sgd(0.1)
    back = OX.deserialize(OX.serialize(opt))
    assert float(back.apply(GRAD, PARAMS)["w"][0]) == float(_sgd_reference(0.3, 1)[0])
    np.testing.assert_array_equal(back.learning_rate, np.float32(0.3))
    stepped = np.asarray(p["w"]) - np.float32(0.3) * np.asarray(GRAD["w"])
    np.testing.assert_array_equal(opt.apply(GRAD, p)["w"], stepped)  # the original steps on
    # A common argument set as an attribute is used, and reported.
    clipped = OX.Optimizer(optx.sgd(1.0), clipvalue=10.0)
    clipped.apply(GRAD, PARAMS)
    clipped.clipvalue = 0.25
    assert clipped.get_config()["clipvalue"] == 0.25
    np.testing.assert_array_equal(
        clipped.apply(GRAD, PARAMS)["w"], PARAMS["w"] - np.clip(GRAD["w"], -0.25, 0.25)
    )


def test_a_learning_rate_with_a_transform_starts_its_state():
    opt = OX.Optimizer(transform=optx.sgd(0.1), learning_rate=0.5)
    assert opt.get_config()["learning_rate"] == 0.5  # before build too
    np.testing.assert_array_equal(opt.apply(GRAD, PARAMS)["w"], _sgd_reference(0.5, 1))
    assert "learning_rate=0.5" in repr(opt)


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
def test_keras_classes_report_current_values_as_keras_does():
    ours, theirs = OX.Adam(0.1), keras.optimizers.Adam(0.1)
    ours.apply(GRAD, PARAMS)
    for opt in (ours, theirs):
        opt.learning_rate = 0.3
        opt.beta_1 = 0.4
    for key in ("learning_rate", "beta_1"):
        assert ours.get_config()[key] == theirs.get_config()[key]
    inner = OX.SGD(0.1)
    multi = OX.MultiOptimizer({"w": inner})
    multi.apply(GRAD, PARAMS)
    inner.learning_rate = 0.3
    inner = multi.get_config()["optimizer_map"]["w"]["config"]
    assert inner["learning_rate"] == float(np.float32(0.3))


def test_bad_learning_rate_with_a_transform():
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`Optimizer` wrapping a transform needs learning_rate to be a number (the "
            "initial value of the transform's own learning rate). Received: learning_rate="
        ),
    ):
        OX.Optimizer(transform=optx.sgd(0.1), learning_rate=lambda step: 0.1)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`Optimizer` needs a transform whose state holds one hyperparameter called "
            "learning_rate, to start it at learning_rate=0.5. Received: "
            "transform=scale_by_adam(b1=0.9, b2=0.999, eps=1e-08, eps_root=0.0), whose state "
            "holds none."
        ),
    ):
        OX.Optimizer(transform=optx.scale_by_adam(), learning_rate=0.5)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`Optimizer` wrapping a transform has no learning rate to multiply a weight decay "
            "by. Received: weight_decay=0.1."
        ),
    ):
        OX.Optimizer(optx.sgd(0.1)).weight_decay = 0.1
