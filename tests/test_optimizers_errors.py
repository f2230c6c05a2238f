"""Every error message of the stateful wrapper `optx.optimizers`, and that a failing call
changes nothing.

Each case asserts the exception type and the distinctive part of the message (the call,
the constraint and the received value), in the form "`api` needs .... Received: ...".
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optx

OX = optx.optimizers

PARAMS = {"dense": {"bias": jnp.zeros(2), "kernel": jnp.ones((3, 2))}}
GRADS = jax.tree.map(jnp.ones_like, PARAMS)


def built(opt, params=PARAMS):
    opt.apply(GRADS, params)
    return opt


def raises(error, message, fn, *args, **kwargs):
    with pytest.raises(error, match=re.escape(message)):
        fn(*args, **kwargs)


# ---------------------------------------------------------------------------------------
# Constructor arguments

CONSTRUCTOR = {
    "unknown kwarg": (
        lambda: OX.Adam(0.1, foo=1),
        TypeError,
        "`Adam` got an unexpected keyword argument 'foo'. Received: foo=1.",
    ),
    "unknown kwarg of a class": (
        lambda: OX.SGD(beta_1=0.9),
        TypeError,
        "`SGD` got an unexpected keyword argument 'beta_1'. Received: beta_1=0.9.",
    ),
    "two clip options": (
        lambda: OX.Adam(clipnorm=1.0, clipvalue=0.5),
        ValueError,
        "`Adam` needs at most one of `clipnorm`, `clipvalue` and `global_clipnorm`. "
        "Received: clipnorm=1.0, clipvalue=0.5.",
    ),
    "three clip options": (
        lambda: OX.SGD(clipnorm=1.0, clipvalue=0.5, global_clipnorm=2.0),
        ValueError,
        "Received: clipnorm=1.0, clipvalue=0.5, global_clipnorm=2.0.",
    ),
    "negative clipnorm": (
        lambda: OX.SGD(clipnorm=-1.0),
        ValueError,
        "`SGD` needs clipnorm to be a non-negative finite number. Received: clipnorm=-1.0.",
    ),
    "negative clipvalue": (
        lambda: OX.Adam(clipvalue=-0.5),
        ValueError,
        "`Adam` needs clipvalue to be a non-negative finite number. Received: clipvalue=-0.5.",
    ),
    "negative global_clipnorm": (
        lambda: OX.Lion(global_clipnorm=-2),
        ValueError,
        "`Lion` needs global_clipnorm to be a non-negative finite number. "
        "Received: global_clipnorm=-2.0.",
    ),
    "infinite clipnorm": (
        lambda: OX.SGD(clipnorm=float("inf")),
        ValueError,
        "`SGD` needs clipnorm to be a non-negative finite number. Received: clipnorm=inf.",
    ),
    "clipnorm not a number": (
        lambda: OX.SGD(clipnorm="1"),
        ValueError,
        "`SGD` needs clipnorm to be a number. Received: clipnorm='1'.",
    ),
    "negative decay": (
        lambda: OX.SGD(decay=-0.1),
        ValueError,
        "`SGD` needs decay to be a non-negative finite number. Received: decay=-0.1.",
    ),
    "negative weight_decay": (
        lambda: OX.Adam(weight_decay=-0.1),
        ValueError,
        "`Adam` needs weight_decay to be a non-negative finite number. "
        "Received: weight_decay=-0.1.",
    ),
    "negative learning_rate": (
        lambda: OX.Adam(-0.1),
        ValueError,
        "`Adam` needs learning_rate to be a non-negative finite number. "
        "Received: learning_rate=-0.1.",
    ),
    "nan learning_rate": (
        lambda: OX.RMSprop(float("nan")),
        ValueError,
        "`RMSprop` needs learning_rate to be a non-negative finite number. "
        "Received: learning_rate=nan.",
    ),
    "learning_rate of a wrong type": (
        lambda: OX.Adam("fast"),
        ValueError,
        "`Adam` needs learning_rate to be a float, a LearningRateSchedule or a callable. "
        "Received: learning_rate='fast'.",
    ),
    "learning_rate a bool": (
        lambda: OX.SGD(True),
        ValueError,
        "`SGD` needs learning_rate to be a float, a LearningRateSchedule or a callable. "
        "Received: learning_rate=True.",
    ),
    "learning_rate an array": (
        lambda: OX.SGD(np.array([0.1, 0.2])),
        ValueError,
        "`SGD` needs learning_rate to be a float, a LearningRateSchedule or a callable. "
        "Received: learning_rate=array([0.1, 0.2]).",
    ),
    "gradient_accumulation_steps 1": (
        lambda: OX.Adam(gradient_accumulation_steps=1),
        ValueError,
        "`Adam` needs gradient_accumulation_steps to be an integer >= 2 (or None). "
        "Received: gradient_accumulation_steps=1.",
    ),
    "gradient_accumulation_steps 0": (
        lambda: OX.Adam(gradient_accumulation_steps=0),
        ValueError,
        "Received: gradient_accumulation_steps=0.",
    ),
    "gradient_accumulation_steps a float": (
        lambda: OX.Adam(gradient_accumulation_steps=2.0),
        ValueError,
        "`Adam` needs gradient_accumulation_steps to be an integer >= 2 (or None). "
        "Received: gradient_accumulation_steps=2.0.",
    ),
    "ema_momentum above 1": (
        lambda: OX.Adam(use_ema=True, ema_momentum=1.5),
        ValueError,
        "`Adam` needs ema_momentum in [0, 1] when use_ema=True. Received: ema_momentum=1.5.",
    ),
    "ema_momentum below 0": (
        lambda: OX.SGD(use_ema=True, ema_momentum=-0.1),
        ValueError,
        "`SGD` needs ema_momentum in [0, 1] when use_ema=True. Received: ema_momentum=-0.1.",
    ),
    "ema_overwrite_frequency 0": (
        lambda: OX.Adam(use_ema=True, ema_overwrite_frequency=0),
        ValueError,
        "`Adam` needs ema_overwrite_frequency to be an integer >= 1 (or None). "
        "Received: ema_overwrite_frequency=0.",
    ),
    "ema_start": (
        lambda: OX.Adam(use_ema=True, ema_start="later"),
        ValueError,
        "`Adam` needs ema_start to be 'initial' or 'first_step'. Received: ema_start='later'.",
    ),
    "loss_scale_factor 0": (
        lambda: OX.Adam(loss_scale_factor=0.0),
        ValueError,
        "`Adam` needs loss_scale_factor to be positive. Received: loss_scale_factor=0.0.",
    ),
    "SGD momentum above 1": (
        lambda: OX.SGD(momentum=1.5),
        ValueError,
        "`SGD` needs momentum to be a float in [0, 1]. Received: momentum=1.5.",
    ),
    "SGD momentum below 0": (
        lambda: OX.SGD(momentum=-0.5),
        ValueError,
        "`SGD` needs momentum to be a float in [0, 1]. Received: momentum=-0.5.",
    ),
    "Lion beta_1 0": (
        lambda: OX.Lion(beta_1=0),
        ValueError,
        "`Lion` needs beta_1 in (0, 1]. Received: beta_1=0.",
    ),
    "AdamW weight_decay None": (
        lambda: OX.AdamW(weight_decay=None),
        ValueError,
        "`AdamW` needs a weight_decay (a number >= 0). Received: weight_decay=None.",
    ),
    "Optimizer not a transform": (
        lambda: OX.Optimizer(optx.adam),
        TypeError,
        "`Optimizer` needs a transform with `init` and `update` (optx's or optax's), or a "
        "subclass with an `update_step`. Received: transform=<function adam",
    ),
    "Optimizer name not a string": (
        lambda: OX.Optimizer(optx.sgd(0.1), name=3),
        TypeError,
        "`Optimizer` needs name to be a string. Received: name=3.",
    ),
}


@pytest.mark.parametrize(("make", "error", "message"), CONSTRUCTOR.values(), ids=CONSTRUCTOR)
def test_constructor_errors(make, error, message):
    raises(error, message, make)


def test_ema_options_are_not_checked_without_use_ema():
    # As in Keras: the EMA's arguments are only validated when the EMA is on.
    OX.Adam(ema_momentum=1.5, ema_overwrite_frequency=0)


# ---------------------------------------------------------------------------------------
# Applying: parameters and gradients other than those built with


def _treedef(tree):
    return str(jax.tree.structure(tree))


def test_apply_with_another_parameter_structure():
    opt = built(OX.Adam(0.1))
    other = {"dense": {"bias": jnp.zeros(2)}}
    raises(
        ValueError,
        f"`apply` needs the parameter tree this optimizer was built with. "
        f"Received: {_treedef(other)}; expected: {_treedef(PARAMS)}.",
        opt.apply,
        {"dense": {"bias": jnp.ones(2)}},
        other,
    )


def test_apply_with_another_shape_names_the_leaf_and_both_shapes():
    opt = built(OX.Adam(0.1))
    params = {"dense": {"bias": jnp.zeros(3), "kernel": jnp.ones((3, 2))}}
    raises(
        ValueError,
        "`apply` needs the parameters this optimizer was built with. Received: 'dense/bias' "
        "of shape (3,) and dtype float32; expected shape (2,) and dtype float32.",
        opt.apply,
        jax.tree.map(jnp.ones_like, params),
        params,
    )


def test_apply_with_another_dtype():
    opt = built(OX.SGD(0.1))
    params = {"dense": {"bias": jnp.zeros(2), "kernel": jnp.ones((3, 2), jnp.bfloat16)}}
    raises(
        ValueError,
        "Received: 'dense/kernel' of shape (3, 2) and dtype bfloat16; expected shape (3, 2) "
        "and dtype float32.",
        opt.apply,
        jax.tree.map(jnp.ones_like, params),
        params,
    )


def test_apply_with_gradients_of_another_structure():
    opt = OX.Adam(0.1)
    grads = {"dense": {"bias": jnp.ones(2)}}
    raises(
        ValueError,
        f"`apply` needs gradients with the structure of the parameters. "
        f"Received: {_treedef(grads)}; expected: {_treedef(PARAMS)}.",
        opt.apply,
        grads,
        PARAMS,
    )


@pytest.mark.parametrize("shape", [(2, 2), (3,), ()], ids=["broadcasts", "mismatch", "scalar"])
def test_apply_with_gradients_of_another_shape(shape):
    # SGD holds no slot that would catch it: (2, 2) would broadcast into the parameters.
    opt = built(OX.SGD(0.1))
    grads = {"dense": {"bias": jnp.ones(shape), "kernel": jnp.ones((3, 2))}}
    raises(
        ValueError,
        f"`apply` needs gradients with the shapes of the parameters. Received: 'dense/bias' "
        f"of shape {shape}; expected shape (2,).",
        opt.apply,
        grads,
        PARAMS,
    )
    assert int(opt.iterations) == 1
    # A None gradient is no gradient, not a shape error.
    opt.apply({"dense": {"bias": None, "kernel": jnp.ones((3, 2))}}, PARAMS)
    var = OX.Variable(np.zeros(2, np.float32), "w")
    opt = OX.SGD(0.1)
    raises(
        ValueError,
        "`apply_gradients` needs gradients with the shapes of the parameters. Received: 'w' "
        "of shape (1, 2); expected shape (2,).",
        opt.apply_gradients,
        [(jnp.ones((1, 2)), var)],
    )


def _snapshot(opt):
    return {k: np.array(v) for k, v in opt.variables.items()}


def _assert_unchanged(opt, before):
    after = _snapshot(opt)
    assert list(after) == list(before)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)


@pytest.mark.parametrize(
    "make",
    [
        lambda: OX.Adam(0.1, use_ema=True, gradient_accumulation_steps=2),
        lambda: OX.MultiOptimizer({".*bias": OX.SGD(0.1)}, default_optimizer=OX.Adam(0.1)),
        lambda: OX.LossScaleOptimizer(OX.Adam(0.1)),
    ],
    ids=["adam", "multi", "loss_scale"],
)
def test_nothing_is_half_applied(make):
    opt = make()
    params = built(opt).apply(GRADS, PARAMS)
    before, iterations = _snapshot(opt), int(opt.iterations)
    bad_shape = {"dense": {"bias": jnp.zeros(3), "kernel": jnp.ones((3, 2))}}
    bad_grads = {"dense": {"bias": jnp.ones(2)}}
    for grads, p in (
        (jax.tree.map(jnp.ones_like, bad_shape), bad_shape),
        ({"dense": {"bias": jnp.ones(2)}}, {"dense": {"bias": jnp.zeros(2)}}),
        (bad_grads, params),
    ):
        with pytest.raises(ValueError, match=re.escape("`apply` needs")):
            opt.apply(grads, p)
        _assert_unchanged(opt, before)
        assert int(opt.iterations) == iterations
    # A failing load or set_weights changes nothing either (the last key has a bad shape).
    store = {}
    opt.save_own_variables(store)
    last = list(store)[-1]
    store[last] = np.zeros((*store[last].shape, 2), store[last].dtype)
    with pytest.raises(ValueError, match=re.escape(f"`load_own_variables` needs {last!r}")):
        opt.load_own_variables(store)
    with pytest.raises(ValueError, match=re.escape(f"`set_weights` needs {last!r}")):
        opt.set_weights(list(store.values()))
    _assert_unchanged(opt, before)
    # And the optimizer still steps.
    opt.apply(GRADS, params)
    assert int(opt.iterations) >= iterations


def test_apply_gradients_needs_variables():
    opt = OX.SGD(0.1)
    raises(
        TypeError,
        "`apply_gradients` needs (gradient, variable) pairs whose variables are "
        "optx.optimizers.Variable or flax.nnx.Variable. Received: pair 1 with a ArrayImpl.",
        opt.apply_gradients,
        [(jnp.ones(2), OX.Variable(np.zeros(2))), (jnp.ones(2), jnp.zeros(2))],
    )
    assert not opt.built


def test_variable_assign_with_another_shape():
    var = OX.Variable(np.zeros(2), "w")
    raises(
        ValueError,
        "`Variable.assign` needs a value of shape (2,). Received: a value of shape (3,).",
        var.assign,
        np.zeros(3),
    )


# ---------------------------------------------------------------------------------------
# State I/O


def test_load_own_variables_from_another_optimizer_names_missing_and_extra_keys():
    adam, sgd = built(OX.Adam(0.1)), built(OX.SGD(0.1, momentum=0.9))
    store = {}
    sgd.save_own_variables(store)
    with pytest.raises(ValueError) as info:
        adam.load_own_variables(store)
    message = str(info.value)
    assert message.startswith(
        "`load_own_variables` needs the variables of this optimizer, keyed by name. "
        "Received: variables with missing "
    )
    assert "missing 'beta_1'" in message
    assert "'adam/momentum/dense/bias'" in message
    assert "and unexpected 'momentum', 'sgd/0/count', 'sgd/momentum/dense/bias'" in message


def test_load_own_variables_with_one_key_missing():
    opt = built(OX.Adam(0.1))
    store = {}
    opt.save_own_variables(store)
    del store["adam/velocity/dense/kernel"]
    raises(
        ValueError,
        "Received: variables with missing 'adam/velocity/dense/kernel'.",
        opt.load_own_variables,
        store,
    )


def test_load_own_variables_lists_at_most_eight_keys():
    opt = built(OX.Adam(0.1, use_ema=True, gradient_accumulation_steps=2))
    raises(ValueError, " more.", opt.load_own_variables, {})


def test_load_own_variables_with_a_wrong_shape():
    opt = built(OX.Adam(0.1))
    store = {}
    opt.save_own_variables(store)
    store["adam/momentum/dense/bias"] = np.zeros(3, np.float32)
    raises(
        ValueError,
        "`load_own_variables` needs 'adam/momentum/dense/bias' of shape (2,) and dtype float32. "
        "Received: shape (3,) and dtype float32.",
        opt.load_own_variables,
        store,
    )
    store["adam/momentum/dense/bias"] = np.zeros(2, np.float64)
    raises(ValueError, "Received: shape (2,) and dtype float64.", opt.load_own_variables, store)


def test_set_weights_with_a_wrong_length():
    opt = built(OX.Adam(0.1))
    n = len(opt.variables)
    raises(
        ValueError,
        f"`set_weights` needs {n} arrays, one per variable. Received: {n - 1} arrays.",
        opt.set_weights,
        opt.get_weights()[:-1],
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda o: o.stateless_apply({}, GRADS, PARAMS),
        lambda o: o.set_weights([]),
        lambda o: o.load_own_variables({}),
        lambda o: o.get_slot("dense/bias", "momentum"),
        lambda o: o.get_slot_names(),
        lambda o: o.finalize_variable_values(PARAMS),
    ],
    ids=["stateless_apply", "set_weights", "load_own_variables", "get_slot", "slots", "final"],
)
def test_calls_that_need_a_built_optimizer(call):
    opt = OX.Adam(0.1)
    with pytest.raises(ValueError, match=r"^`\w+` needs a built optimizer") as info:
        call(opt)
    assert str(info.value).endswith(
        "Call `optimizer.build(params)` first (`apply` builds on its first call). "
        "Received: an optimizer 'adam' that was never built."
    )


def test_stateless_apply_before_build():
    raises(
        ValueError,
        "`stateless_apply` needs a built optimizer. Call `optimizer.build(params)` first",
        OX.SGD(0.1).stateless_apply,
        {},
        GRADS,
        PARAMS,
    )


def test_stateless_apply_with_missing_or_extra_keys():
    opt = OX.Adam(0.1)
    opt.build(PARAMS)
    variables = dict(opt.variables)
    del variables["adam/velocity/dense/bias"]
    variables["adam/typo"] = jnp.zeros(())
    raises(
        ValueError,
        "`stateless_apply` needs the variables of this optimizer, keyed by name. Received: "
        "variables with missing 'adam/velocity/dense/bias' and unexpected 'adam/typo'.",
        opt.stateless_apply,
        variables,
        GRADS,
        PARAMS,
    )
    variables = dict(opt.variables)
    del variables["iterations"]
    raises(ValueError, "missing 'iterations'", opt.stateless_apply, variables, GRADS, PARAMS)
    raises(
        TypeError,
        "`stateless_apply` needs optimizer_variables to be a dict keyed like "
        "`optimizer.variables`. Received: a list.",
        opt.stateless_apply,
        list(opt.variables.values()),
        GRADS,
        PARAMS,
    )


def test_stateless_apply_with_other_parameters():
    opt = OX.Adam(0.1)
    opt.build(PARAMS)
    params = {"dense": {"bias": jnp.zeros(2), "kernel": jnp.ones((2, 3))}}
    raises(
        ValueError,
        "`stateless_apply` needs the parameters this optimizer was built with. Received: "
        "'dense/kernel' of shape (2, 3) and dtype float32; expected shape (3, 2)",
        opt.stateless_apply,
        opt.variables,
        jax.tree.map(jnp.ones_like, params),
        params,
    )


def test_get_slot_unknown():
    opt = built(OX.Adam(0.1))
    raises(
        KeyError,
        "`get_slot` got no slot 'mu' for parameter 'dense/bias'. Received: "
        "param_path='dense/bias', slot='mu'. Slots: 'momentum', 'velocity'; parameters: "
        "'dense/bias', 'dense/kernel'.",
        opt.get_slot,
        "dense/bias",
        "mu",
    )
    raises(
        KeyError, "got no slot 'momentum' for parameter 'bias'", opt.get_slot, "bias", "momentum"
    )


def test_finalize_variable_values_with_other_variables():
    var = OX.Variable(np.zeros(2, np.float32), "w")
    opt = OX.SGD(0.1, use_ema=True)
    opt.apply_gradients([(jnp.ones(2), var)])
    raises(
        ValueError,
        "`finalize_variable_values` needs the variables the optimizer was built with. "
        "Received: ['v']; expected: ['w'].",
        opt.finalize_variable_values,
        [OX.Variable(np.zeros(2, np.float32), "v")],
    )
    raises(
        ValueError,
        "`finalize_variable_values` needs the parameter tree this optimizer was built with.",
        opt.finalize_variable_values,
        {"v": jnp.zeros(2)},
    )


# ---------------------------------------------------------------------------------------
# Learning rate and weight-decay exclusions


def test_learning_rate_errors():
    opt = built(OX.Adam(0.1))
    raises(
        ValueError,
        "`Adam.learning_rate` needs learning_rate to be a non-negative finite number. "
        "Received: learning_rate=-1.0.",
        setattr,
        opt,
        "learning_rate",
        -1.0,
    )
    raises(
        ValueError,
        "`Adam.learning_rate` needs learning_rate to be a float, a LearningRateSchedule or a "
        "callable. Received: learning_rate='0.1'.",
        setattr,
        opt,
        "lr",
        "0.1",
    )
    np.testing.assert_allclose(opt.learning_rate, 0.1)
    sched = OX.Adam(OX.schedules.ExponentialDecay(0.1, 10, 0.5))
    raises(
        TypeError,
        "`Adam.learning_rate` was created with a schedule (or callable), so a number cannot "
        "replace it. Received: learning_rate=0.01. Build a new optimizer, or pass a schedule.",
        setattr,
        sched,
        "learning_rate",
        0.01,
    )


def test_learning_rate_of_a_generic_wrapper():
    opt = OX.Optimizer(optx.adam(0.1), name="w")
    raises(
        ValueError,
        "`learning_rate` of an optimizer wrapping a transform is read from its state: build it "
        "first. Received: an optimizer 'w' that was never built.",
        getattr,
        opt,
        "learning_rate",
    )
    built(opt)
    raises(
        TypeError,
        "`learning_rate` needs a number. Received: learning_rate=Array([0.1, 0.2]",
        setattr,
        opt,
        "learning_rate",
        jnp.array([0.1, 0.2]),
    )
    raises(
        ValueError,
        "`w` needs learning_rate",
        setattr,
        opt,
        "learning_rate",
        -0.5,
    )
    np.testing.assert_allclose(opt.learning_rate, 0.1)
    # An optax transform holds no hyperparameter.
    plain = built(OX.Optimizer(optax.adam(0.1)))
    raises(
        AttributeError,
        "`learning_rate` needs exactly one hyperparameter of that name in the state. "
        "Received: a state holding 0 (none); give the transform one (an optx optimizer, or "
        "optax's `inject_hyperparams`).",
        getattr,
        plain,
        "learning_rate",
    )
    # Two learning rates, not tied: the wrapper does not guess.
    two = built(OX.Optimizer(optx.chain(optx.sgd(0.1), optx.sgd(0.2))))
    raises(AttributeError, "Received: a state holding 2 (", getattr, two, "lr")


def test_exclude_from_weight_decay_after_build():
    opt = built(OX.AdamW(0.1))
    raises(
        ValueError,
        "`exclude_from_weight_decay` needs an optimizer that is not built yet (it changes the "
        "chain). Received: 'adam_w', built for 2 parameters.",
        opt.exclude_from_weight_decay,
        var_names=["bias"],
    )


def test_exclude_from_weight_decay_other_errors():
    raises(
        TypeError,
        "`exclude_from_weight_decay` needs var_names to be strings. Received: 3.",
        OX.AdamW().exclude_from_weight_decay,
        var_names=["bias", 3],
    )
    raises(
        TypeError,
        "`exclude_from_weight_decay` needs a Keras-style optimizer class "
        "(optx.optimizers.Adam, ...).",
        OX.Optimizer(optx.adamw(0.1)).exclude_from_weight_decay,
        var_names=["bias"],
    )


# ---------------------------------------------------------------------------------------
# MultiOptimizer and LossScaleOptimizer

_NESTED = "(not a MultiOptimizer or LossScaleOptimizer)"


def test_multi_optimizer_needs_optimizers():
    raises(
        TypeError,
        f"`MultiOptimizer` needs optimizer_map['.*bias'] to be an optx.optimizers optimizer "
        f"{_NESTED}. Received: optimizer_map['.*bias']='sgd'.",
        OX.MultiOptimizer,
        {".*bias": "sgd"},
    )
    raises(
        TypeError,
        f"`MultiOptimizer` needs optimizer_map['k'] to be an optx.optimizers optimizer "
        f"{_NESTED}. Received: optimizer_map['k']=GradientTransformation",
        OX.MultiOptimizer,
        {"k": optax.sgd(0.1)},
    )
    raises(
        TypeError,
        f"`MultiOptimizer` needs default_optimizer to be an optx.optimizers optimizer "
        f"{_NESTED}. Received: default_optimizer=3.",
        OX.MultiOptimizer,
        {".*": OX.SGD()},
        3,
    )
    raises(
        TypeError,
        "`MultiOptimizer` needs string patterns as keys. Received: key 1.",
        OX.MultiOptimizer,
        {1: OX.SGD()},
    )
    raises(
        TypeError,
        "`MultiOptimizer` needs optimizer_map to be a dict {pattern: optimizer} or a callable "
        "path -> optimizer. Received: optimizer_map=[1].",
        OX.MultiOptimizer,
        [1],
    )


def test_multi_optimizer_rejects_nested_wrappers():
    inner = OX.MultiOptimizer({".*": OX.SGD()})
    raises(
        TypeError,
        f"`MultiOptimizer` needs optimizer_map['.*'] to be an optx.optimizers optimizer {_NESTED}.",
        OX.MultiOptimizer,
        {".*": inner},
    )
    raises(
        TypeError,
        f"`MultiOptimizer` needs default_optimizer to be an optx.optimizers optimizer {_NESTED}.",
        OX.MultiOptimizer,
        {},
        OX.LossScaleOptimizer(OX.SGD()),
    )
    # A callable is checked when it routes (at build).
    multi = OX.MultiOptimizer(lambda path: inner)
    raises(
        TypeError,
        f"`MultiOptimizer` needs optimizer_map('dense/bias') to be an optx.optimizers "
        f"optimizer {_NESTED}.",
        multi.apply,
        GRADS,
        PARAMS,
    )
    assert not multi.built


def test_multi_optimizer_routing_errors():
    two = OX.MultiOptimizer({".*bias": OX.SGD(), "dense/.*": OX.Adam()}, OX.SGD())
    raises(
        ValueError,
        "`MultiOptimizer` needs each parameter to match at most one pattern. "
        "Received: 'dense/bias', which matches ['.*bias', 'dense/.*'].",
        two.apply,
        GRADS,
        PARAMS,
    )
    assert not two.built
    none = OX.MultiOptimizer({".*bias": OX.SGD()})
    raises(
        ValueError,
        "`MultiOptimizer` needs a default_optimizer for the parameters no pattern matches. "
        "Received: 'dense/kernel', patterns ['.*bias'].",
        none.apply,
        GRADS,
        PARAMS,
    )
    raises(
        ValueError,
        "`MultiOptimizer` needs loss_scale_factor to be a positive number. "
        "Received: loss_scale_factor=-1.0.",
        OX.MultiOptimizer,
        {".*": OX.SGD()},
        None,
        -1.0,
    )


def test_multi_optimizer_learning_rate():
    multi = OX.MultiOptimizer({".*bias": OX.SGD()}, default_optimizer=OX.Adam())
    for opt in (multi, built(OX.MultiOptimizer({".*bias": OX.SGD()}, OX.Adam()))):
        raises(
            AttributeError,
            "`MultiOptimizer.learning_rate` is not defined: each inner optimizer has its own. "
            "Read or set `opt.optimizers[i].learning_rate` instead.",
            getattr,
            opt,
            "learning_rate",
        )
        raises(
            AttributeError,
            "`MultiOptimizer.learning_rate` cannot be set: each inner optimizer has its own. "
            "Received: learning_rate=0.1; set `opt.optimizers[i].learning_rate` instead.",
            setattr,
            opt,
            "learning_rate",
            0.1,
        )
        raises(AttributeError, "is not defined", getattr, opt, "lr")


def test_loss_scale_optimizer_errors():
    raises(
        ValueError,
        "`LossScaleOptimizer` needs dynamic=True (a fixed scale is `loss_scale_factor` of any "
        "optimizer). Received: dynamic=False.",
        OX.LossScaleOptimizer,
        OX.SGD(),
        dynamic=False,
    )
    raises(
        ValueError,
        "`LossScaleOptimizer` does not support `weight_decay`. Received: weight_decay=0.1. "
        "Instead, set `weight_decay` on the `inner_optimizer`.",
        OX.LossScaleOptimizer,
        OX.SGD(),
        weight_decay=0.1,
    )
    raises(
        TypeError,
        "`LossScaleOptimizer` got an unexpected keyword argument 'momentum'. "
        "Received: momentum=0.9.",
        OX.LossScaleOptimizer,
        OX.SGD(),
        momentum=0.9,
    )
    raises(
        TypeError,
        f"`LossScaleOptimizer` needs inner_optimizer to be an optx.optimizers optimizer "
        f"{_NESTED}. Received: inner_optimizer=",
        OX.LossScaleOptimizer,
        OX.LossScaleOptimizer(OX.SGD()),
    )
    # Keras's configs write the common arguments at their defaults: accepted.
    OX.LossScaleOptimizer(OX.SGD(), weight_decay=None, clipnorm=None, use_ema=False)


# ---------------------------------------------------------------------------------------
# Serialization


def test_serialization_errors():
    raises(
        ValueError,
        "`deserialize` got an unknown optimizer class 'Sophia'. Received: class_name='Sophia'. "
        "Known: SGD, RMSprop, Adam,",
        OX.deserialize,
        {"class_name": "Sophia", "config": {}},
    )
    raises(ValueError, "pass your own classes in custom_objects.", OX.get, "sophia")
    raises(
        ValueError,
        "`deserialize` needs a dict with 'class_name' and 'config'. Received: {'config': {}}.",
        OX.deserialize,
        {"config": {}},
    )
    raises(
        ValueError,
        "`get` could not interpret the optimizer identifier. Received: identifier=42; "
        "expected a name, a config dict or an optimizer.",
        OX.get,
        42,
    )
    raises(
        TypeError,
        "`serialize` needs an optx.optimizers optimizer. "
        "Received: optimizer=GradientTransformation",
        OX.serialize,
        optax.sgd(0.1),
    )
    raises(
        TypeError,
        "`Adam` got an unexpected keyword argument 'momentum'. Received: momentum=0.9.",
        OX.deserialize,
        {"class_name": "Adam", "config": {"momentum": 0.9}},
    )


def test_custom_class_is_found_in_custom_objects():
    class MySGD(OX.SGD):
        pass

    config = OX.serialize(MySGD(0.1))
    assert config["registered_name"] == "MySGD" and config["module"] == __name__
    raises(ValueError, "got an unknown optimizer class 'MySGD'", OX.deserialize, config)
    assert type(OX.deserialize(config, custom_objects={"MySGD": MySGD})) is MySGD
