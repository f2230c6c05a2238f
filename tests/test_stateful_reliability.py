"""The stateful optimizers under loads, pickles, copies and repeated variables.

Loading variables checks them as the constructor checks its arguments; a pickled or
copied optimizer is independent and continues to the same numbers; a variable listed twice
in `apply_gradients` gets the sum of its gradients.
"""

from __future__ import annotations

import copy
import os
import pickle
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close

import optx

OX = optx.optimizers
EPS32 = float(np.finfo(np.float32).eps)
PARAMS = {"w": jnp.array([1.0, -2.0, 3.0]), "b": jnp.array([0.5, -0.5])}
GRADS = {"w": jnp.array([0.1, -0.2, 0.3]), "b": jnp.array([1.0, -1.0])}
LEGACY = Path(__file__).parent / "data" / "keras_adamw_0.1.0.dev0.npz"


def stepped(opt: Any, steps: int = 3, params: Any = None) -> Any:
    """``params`` after ``steps`` steps of ``opt`` on `GRADS`."""
    params = PARAMS if params is None else params
    for _ in range(steps):
        params = opt.apply(GRADS, params)
    return params


def fresh() -> Any:
    """A copy of `PARAMS` (`stateless_apply` donates the parameters it is given)."""
    return jax.tree.map(jnp.array, PARAMS)


def saved(opt: Any) -> dict[str, np.ndarray]:
    store: dict[str, np.ndarray] = {}
    opt.save_own_variables(store)
    return store


def assert_same_state(a: Any, b: Any) -> None:
    va, vb = a.get_weights(), b.get_weights()
    assert list(a.variables) == list(b.variables)
    for key, x, y in zip(a.variables, va, vb, strict=True):
        np.testing.assert_array_equal(x, y, err_msg=key)


# -- load_own_variables checks what it loads -----------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "learning_rate",
            -5.0,
            "needs learning_rate finite and >= 0. Received: learning_rate=-5.0.",
        ),
        (
            "learning_rate",
            np.nan,
            "needs learning_rate finite and >= 0. Received: learning_rate=nan.",
        ),
        (
            "learning_rate",
            np.inf,
            "needs learning_rate finite and >= 0. Received: learning_rate=inf.",
        ),
        ("beta_1", 2.0, "needs beta_1 in [0, 1). Received: beta_1=2.0."),
        ("beta_2", -0.5, "needs beta_2 in [0, 1). Received: beta_2=-0.5."),
        ("epsilon", np.nan, "needs epsilon "),
        ("weight_decay", np.nan, "needs weight_decay "),
    ],
)
def test_load_own_variables_refuses_hyperparameters_out_of_range(
    key: str, value: float, message: str
) -> None:
    opt = OX.AdamW(0.01, weight_decay=0.1)
    stepped(opt)
    before = saved(opt)
    store = dict(before)
    store[key] = np.float32(value)
    with pytest.raises(ValueError, match=re.escape(f"`load_own_variables` {message}")):
        opt.load_own_variables(store)
    with pytest.raises(ValueError, match=re.escape(f"`set_weights` {message}")):
        opt.set_weights(list(store.values()))
    # Nothing changed, and it still steps.
    for k, v in saved(opt).items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    stepped(opt, 1)


def test_load_own_variables_refuses_a_residual_that_is_not_a_rounding_error() -> None:
    opt = OX.Adam(0.01)
    stepped(opt)
    store = saved(opt)
    store["beta_2/residual"] = np.float32(np.nan)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`load_own_variables` needs beta_2/residual to be what float32 rounded off beta_2 "
            "(finite, at most 5.96e-08 in magnitude). Received: beta_2/residual=nan."
        ),
    ):
        opt.load_own_variables(store)
    store["beta_2/residual"] = np.float32(0.1)
    with pytest.raises(ValueError, match=re.escape("Received: beta_2/residual=0.1")):
        opt.load_own_variables(store)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (np.int32(-3), "-3 of dtype int32"),
        (np.float32(1.5), "1.5 of dtype float32"),
        (np.float32(2.0), "2.0 of dtype float32"),
        (np.int64(2**31), "2147483648 of dtype int64"),
        (np.zeros(2, np.int32), "'an array of shape (2,)' of dtype int32"),
    ],
)
def test_load_own_variables_needs_iterations_an_integer_at_least_zero(
    value: Any, shown: str
) -> None:
    opt = OX.SGD(0.1, momentum=0.9)
    stepped(opt)
    store = saved(opt)
    store["iterations"] = value
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`load_own_variables` needs iterations to be an integer in [0, 2147483647] (a step "
            f"count, of shape ()). Received: iterations={shown}."
        ),
    ):
        opt.load_own_variables(store)
    assert int(opt.iterations) == 3


def test_load_own_variables_takes_iterations_of_any_integer_dtype() -> None:
    # Keras keeps `iterations` as int64.
    opt = OX.Adam(0.01)
    stepped(opt)
    store = saved(opt)
    store["iterations"] = np.int64(7)
    opt.load_own_variables(store)
    assert opt.iterations.dtype == jnp.int32 and int(opt.iterations) == 7


def test_load_own_variables_refuses_a_negative_step_count_of_a_transform() -> None:
    opt = OX.Adam(0.01)
    stepped(opt)
    store = saved(opt)
    store["adam/0/count"] = np.int32(-1)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`load_own_variables` needs adam/0/count to be an integer in [0, 2147483647]"
        ),
    ):
        opt.load_own_variables(store)


def test_load_own_variables_of_an_earlier_release_is_checked_too() -> None:
    # That release kept beta_1 as `one_minus_b1` (1 - beta_1): 2 stands for beta_1 = -1.
    old = dict(np.load(LEGACY))
    opt = OX.AdamW(1e-2, beta_1=0.95, beta_2=0.9995, weight_decay=0.1, use_ema=True)
    opt.build({"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)})
    opt.load_own_variables(old)  # as saved: loads
    assert opt.get_config()["beta_1"] == 0.95
    old["one_minus_b1"] = np.float32(2.0)
    with pytest.raises(
        ValueError,
        match=re.escape("`load_own_variables` needs beta_1 in [0, 1). Received: beta_1=-1.0."),
    ):
        opt.load_own_variables(old)


def test_loaded_hyperparameters_show_as_attributes_and_in_the_config() -> None:
    opt = OX.Adam(0.01, beta_1=0.9, clipnorm=1.0)
    stepped(opt)
    store = saved(opt)
    store["beta_1"] = np.float32(0.5)
    store["learning_rate"] = np.float32(0.25)
    store["clipnorm"] = np.float32(2.0)
    opt.load_own_variables(store)
    config = opt.get_config()
    assert (opt.beta_1, config["beta_1"]) == (0.5, 0.5)
    assert (float(opt.learning_rate), config["learning_rate"]) == (0.25, 0.25)
    assert (opt.clipnorm, config["clipnorm"]) == (2.0, 2.0)
    assert "beta_1=0.5" in repr(opt)
    # A value that float32 does not hold exactly shows as the decimal the user wrote.
    store["beta_1"] = np.float32(0.95)
    opt.load_own_variables(store)
    assert opt.beta_1 == 0.95
    # Values equal to the configured ones (to float32) keep the numbers given.
    again = OX.Adam(0.01, beta_2=0.9995)
    again.build(PARAMS)
    again.load_own_variables(saved(again))
    assert again.get_config()["beta_2"] == 0.9995


KERAS_CLASSES = [
    "SGD",
    "RMSprop",
    "Adam",
    "AdamW",
    "Adadelta",
    "Adagrad",
    "Adamax",
    "Adafactor",
    "Nadam",
    "Ftrl",
    "Lion",
    "Lamb",
    "Muon",
]


@pytest.mark.parametrize("name", KERAS_CLASSES)
def test_a_save_and_load_round_trip_keeps_the_config(name: str) -> None:
    opt = getattr(OX, name)(weight_decay=0.01, clipnorm=1.0)
    params = {"w": jnp.ones((3, 4)), "b": jnp.ones(3)}
    opt.apply(jax.tree.map(lambda p: 0.1 * p, params), params)
    before = opt.get_config()
    opt.load_own_variables(saved(opt))
    assert opt.get_config() == before


def test_a_decay_that_float32_rounds_to_one_loads_and_round_trips() -> None:
    # float32(1 - 1e-9) is 1.0, outside [0, 1): the residual says what it stands for.
    source = OX.Adam(0.01, beta_2=1 - 1e-9)
    stepped(source)
    store = saved(source)
    assert store["beta_2"] == np.float32(1.0)
    target = OX.Adam(0.01)
    target.build(PARAMS)
    target.load_own_variables(store)
    beta_2 = target.get_config()["beta_2"]
    assert beta_2 < 1 and abs(beta_2 - (1 - 1e-9)) < 1e-15
    OX.Adam.from_config(target.get_config())  # a valid config


class ScaledSGD(OX.Optimizer):
    """A custom optimizer (module level: picklable)."""

    def __init__(self, learning_rate: float = 0.1, scale: float = 2.0, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.scale = scale

    def build(self, params: Any) -> None:
        super().build(params)
        for p in jax.tree.leaves(params):
            self.add_variable_from_reference(p, "m")

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any, slots: Any) -> Any:
        m = 0.5 * slots["m"] + gradient
        return variable - learning_rate * self.scale * m, {"m": m}

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale}


def test_a_custom_optimizers_loaded_number_shows_as_its_attribute() -> None:
    opt = ScaledSGD()
    stepped(opt)
    store = saved(opt)
    (key,) = [k for k in store if k.endswith("scale")]
    store[key] = np.float32(3.0)
    opt.load_own_variables(store)
    assert opt.scale == 3.0 and opt.get_config()["scale"] == 3.0


# -- stateless_apply checks the dtypes it is given ---------------------------------------


def test_stateless_apply_refuses_a_slot_of_another_dtype() -> None:
    opt = OX.Adam(0.01)
    opt.build(PARAMS)
    variables = {k: jnp.array(v) for k, v in opt.variables.items()}
    variables["adam/momentum/w"] = variables["adam/momentum/w"].astype(jnp.bfloat16)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`stateless_apply` needs 'adam/momentum/w' of shape (3,) and dtype float32, as in "
            "`optimizer.variables`. Received: shape (3,) and dtype bfloat16."
        ),
    ):
        opt.stateless_apply(variables, GRADS, fresh())


def test_stateless_apply_refuses_float_iterations() -> None:
    opt = OX.Adam(0.01)
    opt.build(PARAMS)
    variables = {k: jnp.array(v) for k, v in opt.variables.items()}
    variables["iterations"] = jnp.float32(1.0)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`stateless_apply` needs 'iterations' of shape () and dtype int32, as in "
            "`optimizer.variables`. Received: shape () and dtype float32."
        ),
    ):
        opt.stateless_apply(variables, GRADS, fresh())
    # The right dtypes: it runs.
    variables["iterations"] = jnp.int32(0)
    new_params, _ = opt.stateless_apply(variables, GRADS, fresh())
    assert new_params["w"].dtype == jnp.float32


# -- pickling and copying ------------------------------------------------------------------


FACTORIES = {
    "Adam+ema": lambda: OX.Adam(0.01, use_ema=True, clipnorm=1.0),
    "SGD nesterov": lambda: OX.SGD(0.1, momentum=0.9, nesterov=True),
    "accumulation": lambda: OX.Adam(0.01, gradient_accumulation_steps=2),
    "wrapped": lambda: OX.Optimizer(optx.adam(0.01)),
    "LossScale": lambda: OX.LossScaleOptimizer(OX.Adam(0.01)),
    "Multi": lambda: OX.MultiOptimizer({"w": OX.Adam(0.01), "b": OX.SGD(0.1, momentum=0.5)}),
    "custom": lambda: ScaledSGD(),
}


@pytest.mark.parametrize("make", FACTORIES.values(), ids=FACTORIES)
def test_pickle_after_steps_continues_to_the_same_numbers(make: Any) -> None:
    opt = make()
    params = stepped(opt)
    twin = pickle.loads(pickle.dumps(opt))
    assert twin._lock is not opt._lock
    assert_same_state(opt, twin)
    # Same compiled arithmetic on the same inputs: bit for bit.
    a, b = stepped(opt, 3, params), stepped(twin, 3, params)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert_same_state(opt, twin)
    assert int(twin.iterations) == int(opt.iterations)


def test_pickle_before_build() -> None:
    twin = pickle.loads(pickle.dumps(OX.Adam(0.01)))
    stepped(twin)
    assert int(twin.iterations) == 3


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
@pytest.mark.parametrize("make", FACTORIES.values(), ids=FACTORIES)
def test_a_copy_is_independent_and_both_keep_stepping(make: Any, how: Any) -> None:
    opt = make()
    params = stepped(opt)
    twin = how(opt)
    # Each steps on its own buffers (a shared one would be donated by the first step).
    a = stepped(twin, 2, params)
    b = stepped(opt, 2, params)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert_same_state(opt, twin)
    assert int(twin.iterations) == int(opt.iterations)


def test_a_copys_configuration_is_its_own() -> None:
    opt = OX.Adam(0.01, beta_1=0.9)
    params = stepped(opt)
    twin = copy.copy(opt)
    twin.beta_1 = 0.5
    twin.learning_rate = 0.5
    assert (opt.beta_1, float(opt.learning_rate)) == (0.9, np.float32(0.01))
    stepped(opt, 1, params)
    assert int(twin.iterations) == 3


def test_a_copy_keeps_the_variables_excluded_from_weight_decay() -> None:
    # Objects given by identity stay themselves in the copy, which finds them at build.
    opt = OX.AdamW(0.1, weight_decay=0.5)
    excluded = PARAMS["b"]
    opt.exclude_from_weight_decay(var_list=[excluded])
    twin = copy.deepcopy(opt)
    grads = jax.tree.map(jnp.zeros_like, PARAMS)
    a, b = opt.apply(grads, PARAMS), twin.apply(grads, PARAMS)
    np.testing.assert_array_equal(np.asarray(a["b"]), np.asarray(PARAMS["b"]))
    np.testing.assert_array_equal(np.asarray(b["b"]), np.asarray(PARAMS["b"]))


# -- a variable listed twice in apply_gradients ------------------------------------------


def _keras() -> Any:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    assert keras.backend.backend() == "jax"
    return keras


def test_a_repeated_variable_gets_the_sum_of_its_gradients_as_keras_sgd() -> None:
    keras = _keras()
    g1, g2 = np.array([1.0, 1.0], np.float32), np.array([0.5, 3.0], np.float32)
    kv = keras.Variable(np.array([1.0, 2.0], np.float32))
    kopt = keras.optimizers.SGD(0.1)
    w = OX.Variable(np.array([1.0, 2.0], np.float32), name="w")
    opt = OX.SGD(0.1)
    for _ in range(2):
        kopt.apply_gradients([(g1, kv), (g2, kv)])
        opt.apply_gradients([(jnp.asarray(g1), w), (jnp.asarray(g2), w)])
        # w - lr * (g1 + g2) against (w - lr * g1) - lr * g2: three roundings each, of
        # numbers at most 2 in size.
        assert_close("sgd", w.value, np.asarray(kv.value), rtol=6 * EPS32)
    assert int(opt.iterations) == 2
    # The case: w = 1, g = 1 twice, lr = 0.1: 0.8 as in Keras 3.
    v = OX.Variable(1.0, name="v")
    OX.SGD(0.1).apply_gradients([(jnp.array(1.0), v), (jnp.array(1.0), v)])
    assert float(v.value) == np.float32(0.8)


def test_a_repeated_variable_is_one_adam_step_on_the_summed_gradient() -> None:
    g1, g2 = jnp.array([1.0, 1.0]), jnp.array([0.5, 3.0])
    w = OX.Variable(jnp.array([1.0, 2.0]), name="w")
    alone = OX.Variable(jnp.array([1.0, 2.0]), name="w")
    opt, ref = OX.Adam(0.1), OX.Adam(0.1)
    for _ in range(2):
        opt.apply_gradients([(g1, w), (g2, w)])
        ref.apply_gradients([(g1 + g2, alone)])
    np.testing.assert_array_equal(np.asarray(w.value), np.asarray(alone.value))
    assert list(opt.variables) == list(ref.variables)  # one slot per variable
    # A `None` gradient adds nothing.
    before = np.asarray(w.value)
    opt.apply_gradients([(None, w), (g1, w)])
    ref.apply_gradients([(g1, alone)])
    np.testing.assert_array_equal(np.asarray(w.value), np.asarray(alone.value))
    assert not np.array_equal(before, np.asarray(w.value))
