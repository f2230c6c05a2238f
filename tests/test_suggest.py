"""Unknown keyword arguments name the close ones and the full list; a swapped `update` says so.

Every API family: the functional factories and functions of each namespace, the
Keras-style classes, `set_hyperparams` / `scale_hyperparams`; and the hint for
``tx.update(grads, params, state)``.
"""

import inspect
import pickle
import re

import jax
import jax.numpy as jnp
import pytest

import optx

OX = optx.optimizers
PARAMS = {"w": jnp.ones(3), "b": jnp.zeros(2)}
GRADS = {"w": jnp.full(3, 0.5), "b": jnp.ones(2)}

ADAM_TAKES = (
    "It takes: learning_rate, b1, b2, eps, eps_root, mu_dtype, nesterov, nu_dtype, "
    "eps_placement, momentum_decay."
)


def raises(error, message, fn, *args, **kwargs):
    with pytest.raises(error, match=re.escape(message)) as info:
        fn(*args, **kwargs)
    return info.value


# ---------------------------------------------------------------------------------------
# Functional factories and functions (every namespace)


def test_factory_suggests_optax_name_for_keras_and_torch_spellings():
    error = raises(
        TypeError,
        "`optx.adam` got an unexpected keyword argument 'beta1'. Received: beta1=0.9. "
        "Did you mean 'b1'? " + ADAM_TAKES,
        optx.adam,
        1e-3,
        beta1=0.9,
    )
    assert str(error) == (
        "`optx.adam` got an unexpected keyword argument 'beta1'. Received: beta1=0.9. "
        "Did you mean 'b1'? " + ADAM_TAKES
    )
    # Python's own "adam() got an unexpected keyword argument" is not chained to it.
    assert error.__suppress_context__ and error.__cause__ is None


@pytest.mark.parametrize(
    ("given", "suggested"),
    [
        ("beta_1", "'b1'"),
        ("beta_2", "'b2'"),
        ("epsilon", "'eps'"),
        ("lr", "'learning_rate'"),
        ("learningRate", "'learning_rate'"),
        ("betas", "'b1' or 'b2'"),
        ("epsilon_root", "'eps_root'"),
        ("learning_rat", "'learning_rate'"),
    ],
)
def test_factory_spellings(given, suggested):
    raises(
        TypeError,
        f"`optx.adam` got an unexpected keyword argument '{given}'. Received: {given}=0.5. "
        f"Did you mean {suggested}? " + ADAM_TAKES,
        optx.adam,
        learning_rate=1e-3,
        **{given: 0.5},
    )


def test_factory_lists_every_argument_without_a_close_one():
    raises(
        TypeError,
        "`optx.sgd` got an unexpected keyword argument 'foo'. Received: foo=1. It takes: "
        "learning_rate, momentum, nesterov, accumulator_dtype, momentum_convention.",
        optx.sgd,
        0.1,
        foo=1,
    )


def test_several_unknown_keywords_are_named_together():
    raises(
        TypeError,
        "`optx.adam` got unexpected keyword arguments 'beta_1', 'epsilon', 'foo'. Received: "
        "beta_1=0.9, epsilon=1e-07, foo=2. Did you mean 'b1' for beta_1; 'eps' for epsilon? "
        + ADAM_TAKES,
        optx.adam,
        1e-3,
        beta_1=0.9,
        epsilon=1e-7,
        foo=2,
    )


def test_keras_rho_suggests_optax_decay():
    raises(
        TypeError,
        "`optx.rmsprop` got an unexpected keyword argument 'rho'. Received: rho=0.9. "
        "Did you mean 'decay'?",
        optx.rmsprop,
        0.1,
        rho=0.9,
    )


def test_decay_suggests_weight_decay():
    raises(
        TypeError,
        "`optx.adamw` got an unexpected keyword argument 'decay'. Received: decay=0.01. "
        "Did you mean 'weight_decay'?",
        optx.adamw,
        1e-3,
        decay=0.01,
    )


def test_schedule_function_suggests():
    # Schedules live at the top level, as in optax; the message names that path.
    raises(
        TypeError,
        "`optx.warmup_cosine_decay_schedule` got an unexpected keyword argument "
        "'warmup_step'. Received: warmup_step=10. Did you mean 'warmup_steps'? It takes: "
        "init_value, peak_value, warmup_steps, decay_steps, end_value, exponent.",
        optx.schedules.warmup_cosine_decay_schedule,
        0.0,
        1.0,
        warmup_step=10,
        decay_steps=100,
    )


def test_tree_function_suggests():
    raises(
        TypeError,
        "`optx.tree.norm` got an unexpected keyword argument 'order'. Received: order=1. "
        "Did you mean 'ord'? It takes: tree, ord, squared.",
        optx.tree.norm,
        PARAMS,
        order=1,
    )


def test_constraint_class_suggests():
    raises(
        TypeError,
        "`MaxNorm` got an unexpected keyword argument 'max_val'. Received: max_val=2.0. "
        "Did you mean 'max_value'? It takes: max_value, axis.",
        optx.constraints.MaxNorm,
        max_val=2.0,
    )


def test_keras_schedule_class_suggests():
    raises(
        TypeError,
        "`CosineDecay` got an unexpected keyword argument 'alpa'. Received: alpa=0.1. "
        "Did you mean 'alpha'? It takes: initial_learning_rate, decay_steps, alpha, name, "
        "warmup_target, warmup_steps.",
        OX.schedules.CosineDecay,
        0.1,
        100,
        alpa=0.1,
    )


def test_function_without_keywords():
    raises(
        TypeError,
        "`optx.chain` got an unexpected keyword argument 'transforms'. Received: "
        "transforms=[]. It takes no keyword arguments.",
        optx.chain,
        transforms=[],
    )


def test_other_type_errors_are_left_as_they_are():
    # Missing arguments and errors raised inside the function keep their own messages.
    with pytest.raises(TypeError, match=r"missing 1 required positional argument"):
        optx.adam()
    with pytest.raises(TypeError, match=re.escape("`adam` needs b1 to be a real number")):
        optx.adam(1e-3, b1="0.9")
    with pytest.raises(TypeError, match="multiple values for argument 'learning_rate'"):
        optx.adam(1e-3, learning_rate=1e-3)


def _public_callables():
    namespaces = [
        optx,
        optx.schedules,
        optx.tree,
        optx.constraints,
        optx.optimizers,
        optx.optimizers.schedules,
    ]
    for module in namespaces:
        for name in sorted(vars(module)):
            value = getattr(module, name)
            if name.startswith("_") or not callable(value) or inspect.ismodule(value):
                continue
            target = value.__init__ if inspect.isclass(value) else value
            try:
                params = inspect.signature(target).parameters.values()
            except (TypeError, ValueError):
                continue
            if inspect.isclass(value) and (
                issubclass(value, tuple) or "__init__" not in vars(value)
            ):
                continue  # NamedTuple states; classes built through a base class's __init__
            if any(p.kind is p.VAR_KEYWORD for p in params):
                continue  # takes any keyword (the Keras classes check theirs themselves)
            yield f"{module.__name__}.{name}", value


@pytest.mark.parametrize(("name", "fn"), list(_public_callables()))
def test_every_public_callable_names_an_unknown_keyword(name, fn):
    with pytest.raises(TypeError) as info:
        fn(not_an_argument_of_anything=1)
    message = str(info.value)
    assert "got an unexpected keyword argument 'not_an_argument_of_anything'" in message, (
        name,
        message,
    )
    assert "It takes" in message, (name, message)


def test_wrapper_keeps_name_docstring_signature_and_identity():
    from optx._src.algorithms import adam as adam_module
    from optx._src.combine import partition

    plain = optx.adam.__wrapped__
    assert inspect.isfunction(optx.adam) and not hasattr(plain, "__wrapped__")
    assert optx.adam.__name__ == "adam" and optx.adam.__module__ == adam_module.__name__
    assert optx.adam.__doc__ == plain.__doc__
    assert inspect.signature(optx.adam) == inspect.signature(plain)
    # One object by every name: the namespaces', an alias's and the defining module's.
    assert optx.adam is adam_module.adam
    assert optx.multi_transform is optx.partition is partition
    assert pickle.loads(pickle.dumps(optx.adam)) is optx.adam
    assert pickle.loads(pickle.dumps(optx.tree.norm)) is optx.tree.norm
    # Classes keep their identity: only their own __init__ is wrapped.
    assert isinstance(optx.constraints.MaxNorm(2.0), optx.constraints.Constraint)
    assert optx.constraints.MaxNorm(2.0) == optx.constraints.MaxNorm(max_value=2.0)
    # The wrapped functions still work inside jax.jit.
    norm = jax.jit(optx.tree.norm, static_argnames="squared")(PARAMS, squared=True)
    assert float(norm) == 3.0


# ---------------------------------------------------------------------------------------
# The Keras-style classes


KERAS_ADAM_TAKES = (
    "It takes: learning_rate, beta_1, beta_2, epsilon, amsgrad, weight_decay, clipnorm, "
    "clipvalue, global_clipnorm, use_ema, ema_momentum, ema_overwrite_frequency, "
    "loss_scale_factor, gradient_accumulation_steps, decay, ema_start, constraints, "
    "jit_compile, axis_name, name."
)


def test_keras_class_suggests_learning_rate_and_lists_it():
    raises(
        TypeError,
        "`Adam` got an unexpected keyword argument 'learning_rat'. Received: "
        "learning_rat=0.001. Did you mean 'learning_rate'? " + KERAS_ADAM_TAKES,
        OX.Adam,
        learning_rat=1e-3,
    )


def test_keras_class_suggests_keras_names_for_optax_spellings():
    raises(
        TypeError,
        "`Adam` got unexpected keyword arguments 'b1', 'eps'. Received: b1=0.9, eps=1e-08. "
        "Did you mean 'beta_1' for b1; 'epsilon' for eps? " + KERAS_ADAM_TAKES,
        OX.Adam,
        b1=0.9,
        eps=1e-8,
    )


def test_keras_subclass_lists_its_own_arguments():
    raises(
        TypeError,
        "`SGD` got an unexpected keyword argument 'momentun'. Received: momentun=0.9. "
        "Did you mean 'momentum'? It takes: learning_rate, momentum, nesterov, weight_decay,",
        OX.SGD,
        momentun=0.9,
    )
    raises(
        TypeError,
        "`AdamW` got an unexpected keyword argument 'weight_decay_rate'. Received: "
        "weight_decay_rate=0.1. Did you mean 'weight_decay'? It takes: learning_rate, "
        "weight_decay, beta_1,",
        OX.AdamW,
        weight_decay_rate=0.1,
    )


def test_keras_loss_scale_optimizer_lists_its_arguments():
    raises(
        TypeError,
        "`LossScaleOptimizer` got an unexpected keyword argument 'initial_scal'. Received: "
        "initial_scal=8.0. Did you mean 'initial_scale'? It takes: inner_optimizer, "
        "initial_scale, dynamic_growth_steps, name, dynamic, jit_compile.",
        OX.LossScaleOptimizer,
        OX.SGD(),
        initial_scal=8.0,
    )


def test_keras_from_config_suggests():
    raises(
        TypeError,
        "`MultiOptimizer.from_config` got an unexpected argument 'jit_compil' in config. "
        "Received: jit_compil=True. Did you mean 'jit_compile'? Allowed: optimizer_map, "
        "default_optimizer, loss_scale_factor, name, jit_compile.",
        OX.MultiOptimizer.from_config,
        {"optimizer_map": {}, "jit_compil": True},
    )


# ---------------------------------------------------------------------------------------
# set_hyperparams / scale_hyperparams


@pytest.mark.parametrize("api", [optx.set_hyperparams, optx.scale_hyperparams])
def test_set_hyperparams_suggests_and_lists_the_state_names(api):
    state = optx.adam(1e-3).init(PARAMS)
    raises(
        KeyError,
        f"`{api.__name__}` got an unknown hyperparameter 'beta_1'. Received: beta_1=0.5. "
        "This state has: 'b1', 'b2', 'eps', 'eps_root', 'learning_rate'. "
        "Did you mean 'b1'?",
        api,
        state,
        beta_1=0.5,
    )
    raises(
        KeyError,
        f"`{api.__name__}` got an unknown hyperparameter 'lr'. Received: lr=0.5. "
        "This state has: 'b1', 'b2', 'eps', 'eps_root', 'learning_rate'. "
        "Did you mean 'learning_rate'?",
        api,
        state,
        lr=0.5,
    )


def test_set_hyperparams_suggests_qualified_names():
    state = optx.chain(optx.sgd(0.1), optx.sgd(0.2)).init(PARAMS)
    raises(
        KeyError,
        "`set_hyperparams` got an unknown hyperparameter 'lr'. Received: lr=0.5. This state "
        "has: '0/1/learning_rate', '1/1/learning_rate'. Did you mean '0/1/learning_rate' or "
        "'1/1/learning_rate'?",
        optx.set_hyperparams,
        state,
        lr=0.5,
    )


# ---------------------------------------------------------------------------------------
# A swapped update call

SWAPPED = "Did you pass (grads, params, state)? The order is update(updates, state, params)."

TRANSFORMS = {
    "adam": lambda: optx.adam(1e-3),
    "sgd": lambda: optx.sgd(0.1),
    "sgd_momentum": lambda: optx.sgd(0.1, momentum=0.9),
    "chain": lambda: optx.chain(optx.clip_by_global_norm(1.0), optx.scale_by_adam()),
    "named_chain": lambda: optx.named_chain(("adam", optx.scale_by_adam())),
    "flatten": lambda: optx.flatten(optx.adam(1e-3)),
    "scale_by_adam": optx.scale_by_adam,
    "identity": optx.identity,
    "masked": lambda: optx.masked(optx.adam(1e-3), {"w": True, "b": False}),
}


@pytest.mark.parametrize("key", sorted(TRANSFORMS))
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_swapped_update_says_the_order(key, jit):
    tx = TRANSFORMS[key]()
    state = tx.init(PARAMS)
    update = jax.jit(tx.update) if jit else tx.update
    with pytest.raises(ValueError, match=re.escape(SWAPPED)):
        update(GRADS, PARAMS, state)
    updates, _ = update(GRADS, state, PARAMS)  # the right order works
    assert jax.tree.structure(updates) == jax.tree.structure(PARAMS)


def test_swapped_update_message_in_full():
    tx = optx.adam(1e-3)
    raises(
        ValueError,
        "`chain.update` needs the state made by this chain's `init` (a tuple of 2 states). "
        "Received: state of type dict. " + SWAPPED,
        tx.update,
        GRADS,
        PARAMS,
        tx.init(PARAMS),
    )
    tx = optx.flatten(optx.adam(1e-3))
    raises(
        ValueError,
        "`flatten.update` needs the state made by its own `init` (a FlattenState). "
        "Received: a state of type dict. " + SWAPPED,
        tx.update,
        GRADS,
        PARAMS,
        tx.init(PARAMS),
    )


def test_no_swap_hint_for_another_transforms_state():
    tx = optx.adam(1e-3)
    with pytest.raises(ValueError) as info:
        tx.update(GRADS, optx.lion(1e-3).init(PARAMS), PARAMS)
    assert "Did you pass" not in str(info.value)
    with pytest.raises(ValueError) as info:
        tx.update(GRADS, PARAMS)  # the state missing, not swapped
    assert "Did you pass" not in str(info.value)
