"""Options checked where they are given: switches, step counts, schedules' values.

A boolean option given a truthy string (``nesterov="False"``) is refused, not obeyed; an
integer step count or period that an int32 counter never reaches is refused at
construction, not by JAX at the first update; a schedule whose values leave a
hyperparameter's range is refused as that value would be; a schedule must return a scalar.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx

S = optx.schedules
K = optx.optimizers
INT32_MAX = 2**31 - 1
COUNTER = (
    "step counters are int32 and stop at 2**31 - 1 = 2147483647, so a larger count is never reached"
)

# ---------------------------------------------------------------------------------------
# Boolean options: every public factory, transform and Keras class.

# Public callables whose boolean argument is not a transform's option: internal
# declarations and utilities. Each is named with the reason.
NOT_OPTIONS = {
    "HyperParams": "its `packed` is the storage layout, set by optx itself",
    "embedding_grad": "a gradient helper (`has_aux` as in jax.grad), not a transform",
    "save_state": "a checkpoint function",
    "shard_state": "a sharding function",
    "norm": "optx.tree.norm, pytree arithmetic",
    "plot": "optx.schedules.plot, a figure",
    "MultiOptimizer": "checked below with its own arguments",
    "LossScaleOptimizer": "checked below with its own arguments",
    "TrainStep": "made by `make_step`, which checks has_aux",
    "micro_grad": "a gradient function (`has_aux` as in jax.grad), not a transform",
}
# Options that take a bool or something else (a mask).
NOT_ONLY_BOOL = {("lars", "weight_decay_mask"), ("lars", "trust_ratio_mask")}

# Values for the required arguments of the factories that have boolean options.
REQUIRED: dict[str, Any] = {
    "learning_rate": 0.1,
    "decay": 0.9,
    "fast_optimizer": optx.sgd(0.1),
    "loss_fn": lambda params: params,
    "tx": optx.sgd(0.1),
    "base_optimizer": optx.sgd(0.1),
    "sync_period": 2,
    "slow_step_size": 0.5,
    "init_value": 1.0,
    "peak_value": 1.0,
    "warmup_steps": 2,
    "transition_steps": 10,
    "decay_rate": 0.5,
    "opt": optx.sgd(0.1),
    "every_k_schedule": 2,
    "every_k": 2,
    "inner": optx.sgd(0.1),
    "should_transform_fn": lambda step: step > 0,
    "mask": True,
    "transforms": {"a": optx.sgd(0.1)},
    "param_labels": "a",
    "measure": optx.tree.norm,
    "optimizer": optx.sgd(0.1),
    "adv_optimizer": optx.sgd(0.1),
    "l2_norm_clip": 1.0,
    "noise_multiplier": 0.1,
    "seed": 0,
    "grads": {"w": np.ones((2, 3), np.float32)},
    "global_l2_norm_clip": 1.0,
    "max_linesearch_steps": 5,
    "max_backtracking_steps": 5,
    "x": np.ones(3, np.float32),
    "min_norm": 0.0,
    "a": {"w": np.ones(3, np.float32)},
    "b": {"w": np.ones(3, np.float32)},
    "tree": {"w": np.ones(3, np.float32)},
}


def _public_callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    modules = {"optx": optx}
    for name in dir(optx):
        value = getattr(optx, name)
        # `optx.demo` is a program (`python -m optx.demo`), not an API, and is an attribute
        # of `optx` only once some test has imported it: walking it would make the cases
        # depend on the order the tests run in.
        if (
            isinstance(value, types.ModuleType)
            and value.__name__.startswith("optx")
            and value.__name__ != "optx.demo"
        ):
            modules[f"optx.{name}"] = value
    seen = set()
    for module_name, module in modules.items():
        for name in sorted(dir(module)):
            value = getattr(module, name)
            if name.startswith("_") or not callable(value) or id(value) in seen:
                continue
            seen.add(id(value))
            yield f"{module_name}.{name}", value


def _bool_options(fn: Callable[..., Any]) -> list[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if isinstance(p.default, bool) or p.annotation == "bool"]


def _cases() -> list[tuple[str, Callable[..., Any], str]]:
    cases = []
    for qualified, fn in _public_callables():
        short = qualified.rsplit(".", 1)[1]
        if short in NOT_OPTIONS:
            continue
        for option in _bool_options(fn):
            if (short, option) not in NOT_ONLY_BOOL:
                cases.append((qualified, fn, option))
    return cases


CASES = _cases()


def test_the_walk_finds_the_options_reported() -> None:
    found = {(q.rsplit(".", 1)[1], o) for q, _, o in CASES}
    reported = {
        ("sgd", "nesterov"),
        ("SGD", "nesterov"),
        ("rmsprop", "centered"),
        ("trace", "nesterov"),
        ("ema", "debias"),
        ("adafactor", "factored"),
        ("adafactor", "multiply_by_parameter_scale"),
        ("scale_by_learning_rate", "flip_sign"),
        ("Adam", "amsgrad"),
        ("RMSprop", "centered"),
    }
    assert reported <= found, reported - found
    assert len(CASES) >= 55, len(CASES)


# Arguments some options need beside them (`relative_step=True` needs a learning rate).
EXTRA: dict[str, dict[str, Any]] = {"adafactor": {"learning_rate": 0.1}}


def _required(fn: Callable[..., Any]) -> dict[str, Any]:
    kwargs = dict(EXTRA.get(fn.__name__, {}))
    for p in inspect.signature(fn).parameters.values():
        if p.default is inspect.Parameter.empty and p.kind not in (
            p.VAR_POSITIONAL,
            p.VAR_KEYWORD,
        ):
            assert p.name in REQUIRED, f"add a value for {p.name!r} to REQUIRED"
            kwargs[p.name] = REQUIRED[p.name]
    return kwargs


@pytest.mark.parametrize(
    ("fn", "option"), [(fn, o) for _, fn, o in CASES], ids=[f"{q}:{o}" for q, _, o in CASES]
)
@pytest.mark.parametrize("bad", ["False", 1, None])
def test_every_boolean_option_refuses_a_non_bool(
    fn: Callable[..., Any], option: str, bad: Any
) -> None:
    kwargs = _required(fn)
    fn(**kwargs, **{option: False})  # the option is accepted as a bool
    fn(**kwargs, **{option: np.bool_(True)})
    with pytest.raises(TypeError, match=re.escape(f"needs {option} to be a bool. Received: ")):
        fn(**kwargs, **{option: bad})


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: optx.sgd(0.1, momentum=0.5, nesterov="False"),
            "`sgd` needs nesterov to be a bool. Received: nesterov='False'.",
        ),
        (
            lambda: optx.rmsprop(0.1, centered="no"),
            "`rmsprop` needs centered to be a bool. Received: centered='no'.",
        ),
        (
            lambda: optx.trace(0.9, nesterov="x"),
            "`trace` needs nesterov to be a bool. Received: nesterov='x'.",
        ),
        (
            lambda: optx.ema(0.9, debias="x"),
            "`ema` needs debias to be a bool. Received: debias='x'.",
        ),
        (
            lambda: optx.adafactor(factored="x"),
            "`adafactor` needs factored to be a bool. Received: factored='x'.",
        ),
        (
            lambda: optx.adafactor(multiply_by_parameter_scale="x"),
            "`adafactor` needs multiply_by_parameter_scale to be a bool. "
            "Received: multiply_by_parameter_scale='x'.",
        ),
        (
            lambda: optx.scale_by_learning_rate(0.1, flip_sign="x"),
            "`scale_by_learning_rate` needs flip_sign to be a bool. Received: flip_sign='x'.",
        ),
        (
            lambda: K.SGD(nesterov="False"),
            "`SGD` needs nesterov to be a bool. Received: nesterov='False'.",
        ),
        (
            lambda: K.Adam(use_ema="false"),
            "`Adam` needs use_ema to be a bool. Received: use_ema='false'.",
        ),
        (
            lambda: K.Adam(amsgrad="false"),
            "`Adam` needs amsgrad to be a bool. Received: amsgrad='false'.",
        ),
        (
            lambda: K.RMSprop(centered="no"),
            "`RMSprop` needs centered to be a bool. Received: centered='no'.",
        ),
        (
            lambda: K.Adam(jit_compile="no"),
            "`Adam` needs jit_compile to be a bool. Received: jit_compile='no'.",
        ),
        (
            lambda: K.LossScaleOptimizer(K.SGD(), dynamic="False"),
            "`LossScaleOptimizer` needs dynamic to be a bool. Received: dynamic='False'.",
        ),
        (
            lambda: K.LossScaleOptimizer(K.SGD(), jit_compile="no"),
            "`LossScaleOptimizer` needs jit_compile to be a bool. Received: jit_compile='no'.",
        ),
        (
            lambda: K.MultiOptimizer({"w": K.SGD()}, jit_compile="no"),
            "`MultiOptimizer` needs jit_compile to be a bool. Received: jit_compile='no'.",
        ),
    ],
)
def test_reported_boolean_options(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        call()


def _keras_classes() -> list[type]:
    return [
        v
        for name, v in vars(K).items()
        if isinstance(v, type) and issubclass(v, K.Optimizer) and not name.startswith("_")
    ]


def test_keras_common_boolean_options_of_every_class() -> None:
    checked = 0
    for cls in _keras_classes():
        if cls.__name__ in NOT_OPTIONS or cls is K.Optimizer:
            continue
        for option in ("use_ema", "jit_compile", *_bool_options(cls)):
            with pytest.raises(TypeError, match=re.escape(f"needs {option} to be a bool.")):
                cls(**{option: "False"})
            checked += 1
    assert checked >= 30, checked


def test_keras_get_config_keeps_a_python_bool() -> None:
    opt = K.SGD(momentum=0.9, nesterov=np.bool_(True))
    assert opt.get_config()["nesterov"] is True
    with pytest.raises(TypeError, match=re.escape("`SGD.nesterov` needs nesterov to be a bool.")):
        opt.nesterov = "False"
    assert opt.get_config()["nesterov"] is True


def test_a_new_transform_has_its_boolean_fields_checked() -> None:
    # The check is the base class's: a subclass with a `__post_init__` of its own that does
    # not call `super().__post_init__()` cannot forget it.
    @dataclasses.dataclass(frozen=True, repr=False)
    class Flip(optx.Transform):
        name = "flip"
        negate: bool = False

        def __post_init__(self) -> None:
            pass

        def init(self, params: Any) -> optx.EmptyState:
            return optx.EmptyState()

        def update(self, updates: Any, state: Any, params: Any = None, **extra: Any) -> Any:
            return updates, state

    assert Flip(np.bool_(True)).negate is True
    with pytest.raises(
        TypeError, match=re.escape("`flip` needs negate to be a bool. Received: negate='yes'.")
    ):
        Flip("yes")


# ---------------------------------------------------------------------------------------
# Integers that int32 counters never reach.


def _counter_message(api: str, name: str, minimum: int, value: int) -> str:
    return (
        f"`{api}` needs {name} to be an int in [{minimum}, 2**31 - 1] ({COUNTER}). "
        f"Received: {name}={value!r}."
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: optx.accumulate_gradients(optx.sgd(0.1), every_k=2**31),
            _counter_message("accumulate_gradients", "every_k", 1, 2**31),
        ),
        (
            lambda: optx.lookahead(optx.sgd(0.1), sync_period=10**12, slow_step_size=0.5),
            _counter_message("lookahead", "sync_period", 1, 10**12),
        ),
        (
            lambda: optx.apply_if_finite(optx.sgd(0.1), 2**31),
            _counter_message("apply_if_finite", "max_consecutive_errors", 0, 2**31),
        ),
        (
            lambda: optx.dynamic_loss_scale(optx.sgd(0.1), growth_interval=2**31),
            _counter_message("dynamic_loss_scale", "growth_interval", 1, 2**31),
        ),
        (
            lambda: S.linear_schedule(0.1, 0.0, 2**31),
            _counter_message("linear_schedule", "transition_steps", 1, 2**31),
        ),
        (
            lambda: S.piecewise_constant_schedule(0.1, {10**12: 0.5}),
            "`piecewise_constant_schedule` needs the keys of boundaries_and_scales to be int "
            f"steps in [0, 2**31 - 1] ({COUNTER}). Received: "
            "boundaries_and_scales={1000000000000: 0.5}, with key 1000000000000.",
        ),
        (
            lambda: K.Adam(gradient_accumulation_steps=10**12),
            "`Adam` needs gradient_accumulation_steps to be an int in [2, 2**31 - 1] "
            f"({COUNTER}). Received: gradient_accumulation_steps=1000000000000.",
        ),
        (
            lambda: K.Adam(use_ema=True, ema_overwrite_frequency=10**12),
            "`Adam` needs ema_overwrite_frequency to be an int in [1, 2**31 - 1] "
            f"({COUNTER}). Received: ema_overwrite_frequency=1000000000000.",
        ),
        (
            lambda: K.LossScaleOptimizer(K.SGD(), dynamic_growth_steps=2**31),
            _counter_message("LossScaleOptimizer", "dynamic_growth_steps", 1, 2**31),
        ),
        (
            lambda: S.sgdr_schedule(
                [dict(init_value=0.0, peak_value=1.0, warmup_steps=1, decay_steps=2**30)] * 3
            ),
            "`sgdr_schedule` needs the cycles before the last to last at most 2**31 - 1 steps "
            f"in all ({COUNTER}). Received: cycles before the last whose decay_steps add up "
            "to 2147483648.",
        ),
    ],
)
def test_counts_past_int32_are_refused_at_construction(
    call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_counts_at_int32_max_are_accepted_and_run() -> None:
    params = {"w": jnp.ones(2)}
    grads = {"w": jnp.ones(2)}
    for tx in (
        optx.accumulate_gradients(optx.sgd(0.1), every_k=INT32_MAX),
        optx.lookahead(optx.sgd(0.1), sync_period=INT32_MAX, slow_step_size=0.5),
        optx.apply_if_finite(optx.sgd(0.1), INT32_MAX),
        optx.dynamic_loss_scale(optx.sgd(0.1), growth_interval=INT32_MAX),
        optx.sgd(S.linear_schedule(0.1, 0.0, INT32_MAX)),
        optx.sgd(S.piecewise_constant_schedule(0.1, {INT32_MAX: 0.5})),
    ):
        updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
        assert np.all(np.isfinite(updates["w"])), tx


def _schedule_factories() -> list[tuple[str, Callable[..., Any]]]:
    return [
        (name, fn)
        for name, fn in vars(S).items()
        if inspect.isfunction(fn) and name.endswith(("_schedule", "_decay"))
    ]


def _step_arguments(fn: Callable[..., Any]) -> list[str]:
    hints = typing.get_type_hints(fn)
    return [
        name
        for name in inspect.signature(fn).parameters
        if hints.get(name) is int and ("step" in name or "boundar" in name or "begin" in name)
    ]


# Typical arguments of each schedule factory, valid together.
SCHEDULE_ARGS: dict[str, dict[str, Any]] = {
    "constant_schedule": {"value": 0.1},
    "polynomial_schedule": {
        "init_value": 1.0,
        "end_value": 0.0,
        "power": 2.0,
        "transition_steps": 10,
    },
    "linear_schedule": {"init_value": 1.0, "end_value": 0.0, "transition_steps": 10},
    "cosine_decay_schedule": {"init_value": 1.0, "decay_steps": 10},
    "warmup_cosine_decay_schedule": {
        "init_value": 0.0,
        "peak_value": 1.0,
        "warmup_steps": 2,
        "decay_steps": 10,
    },
    "warmup_constant_schedule": {"init_value": 0.0, "peak_value": 1.0, "warmup_steps": 2},
    "exponential_decay": {"init_value": 1.0, "transition_steps": 10, "decay_rate": 0.5},
    "warmup_exponential_decay_schedule": {
        "init_value": 0.0,
        "peak_value": 1.0,
        "warmup_steps": 2,
        "transition_steps": 10,
        "decay_rate": 0.5,
    },
    "linear_onecycle_schedule": {"transition_steps": 100, "peak_value": 1.0},
    "cosine_onecycle_schedule": {"transition_steps": 100, "peak_value": 1.0},
    "warmup_stable_decay_schedule": {
        "peak_value": 1.0,
        "warmup_steps": 2,
        "stable_steps": 5,
        "decay_steps": 10,
    },
    "warmup_inverse_sqrt_schedule": {"peak_value": 1.0, "warmup_steps": 2},
    "piecewise_constant_schedule": {"init_value": 1.0, "boundaries_and_scales": {5: 0.5}},
    "piecewise_interpolate_schedule": {
        "interpolate_type": "linear",
        "init_value": 1.0,
        "boundaries_and_scales": {5: 0.5},
    },
    "join_schedules": {
        "schedules": [S.constant_schedule(1.0), S.constant_schedule(0.5)],
        "boundaries": [5],
    },
    "sgdr_schedule": {
        "cosine_kwargs": [dict(init_value=0.0, peak_value=1.0, warmup_steps=1, decay_steps=4)]
    },
}


def test_every_schedule_factory_has_typical_arguments() -> None:
    assert {name for name, _ in _schedule_factories()} <= set(SCHEDULE_ARGS)


@pytest.mark.parametrize(
    ("name", "fn"), _schedule_factories(), ids=[name for name, _ in _schedule_factories()]
)
def test_every_schedule_refuses_step_counts_past_int32(name: str, fn: Callable[..., Any]) -> None:
    args = SCHEDULE_ARGS[name]
    schedule = fn(**args)
    assert np.isfinite(schedule(INT32_MAX)), name
    for step_arg in _step_arguments(fn):
        if step_arg not in args:
            continue
        with pytest.raises(ValueError, match=re.escape(f"2**31 - 1] ({COUNTER})")):
            fn(**{**args, step_arg: 2**31})
        # The largest count is taken (where the other arguments allow it), and the schedule
        # still computes: no OverflowError.
        try:
            big = fn(**{**args, step_arg: INT32_MAX})
        except ValueError as error:
            assert "2**31" not in str(error), error
            continue
        assert np.isfinite(big(5)) and np.isfinite(big(INT32_MAX)), (name, step_arg)


def test_warmup_stable_decay_with_phases_past_int32_in_all() -> None:
    # Each count fits int32, their sum does not: the cooldown is never reached, no overflow.
    s = S.warmup_stable_decay_schedule(1.0, 10, INT32_MAX, 10)
    assert float(s(5)) == 0.5 and float(s(INT32_MAX)) == 1.0
    assert float(jax.jit(s)(jnp.int32(INT32_MAX))) == 1.0


# ---------------------------------------------------------------------------------------
# Schedules: finite, in the hyperparameter's range, scalar.


def test_polynomial_schedule_refuses_a_negative_power() -> None:
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`polynomial_schedule` needs power >= 0 (with a negative power the value is "
            "infinite from the end of the transition on). Received: power=-1.0."
        ),
    ):
        S.polynomial_schedule(0.1, 0.0, power=-1.0, transition_steps=10)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: optx.adam(S.constant_schedule(-0.1)),
            "`adam` needs learning_rate finite and >= 0 at every step. Received: "
            "learning_rate=constant_schedule(value=-0.1), whose least value is -0.1.",
        ),
        (
            lambda: optx.adam(S.linear_schedule(0.1, -0.5, 10)),
            "`adam` needs learning_rate finite and >= 0 at every step. Received: "
            "learning_rate=linear_schedule(init_value=0.1, end_value=-0.5, transition_steps=10, "
            "transition_begin=0), whose least value is -0.5.",
        ),
        (
            lambda: optx.adam(0.1, b1=S.linear_schedule(0.9, 1.0, 10)),
            "`adam` needs b1 in [0, 1) at every step. Received: b1=linear_schedule("
            "init_value=0.9, end_value=1.0, transition_steps=10, transition_begin=0), whose "
            "greatest value is 1.0.",
        ),
        (
            lambda: optx.sgd(
                S.join_schedules([S.constant_schedule(0.1), S.constant_schedule(-0.1)], [5])
            ),
            "whose least value is -0.1.",
        ),
        (
            lambda: optx.sgd(S.warmup_cosine_decay_schedule(-0.1, 1.0, 5, 10)),
            "whose least value is -0.1.",
        ),
        (
            lambda: K.Adam(learning_rate=S.linear_schedule(0.1, -0.5, 10)),
            "`Adam` needs learning_rate finite and >= 0 at every step.",
        ),
        (
            lambda: setattr(K.Adam(0.1), "learning_rate", S.constant_schedule(-0.1)),
            "`Adam.learning_rate` needs learning_rate finite and >= 0 at every step. Received: "
            "learning_rate=constant_schedule(value=-0.1), whose least value is -0.1.",
        ),
    ],
)
def test_a_schedule_out_of_range_is_refused(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_schedules_within_range_and_unknown_functions_are_accepted() -> None:
    optx.adam(S.linear_schedule(0.1, 0.0, 10))
    optx.adam(S.exponential_decay(0.1, 10, 1.5))  # grows without end: still >= 0
    optx.adam(0.1, b1=S.linear_schedule(0.8, 0.95, 10))
    # The warmup piece of a schedule without warmup never runs.
    optx.sgd(S.join_schedules([S.constant_schedule(-1.0), S.constant_schedule(0.1)], [0]))
    # A hyperparameter that must be > 0 may be given a schedule that decays to 0 (as Keras
    # allows), not one that goes below.
    optx.ftrl(S.linear_schedule(0.1, 0.0, 10))
    K.Ftrl(K.schedules.ExponentialDecay(0.1, 3, 0.5))
    # A plain function's values are unknown until it runs: accepted, as documented.
    optx.adam(lambda count: -0.1)

    class Custom(S.Schedule):  # an optx schedule that does not state its bounds
        def value(self, count: jax.Array) -> jax.Array:
            return -0.1 * jnp.ones_like(count)

    assert Custom().bounds() is None
    optx.sgd(Custom())


def _every_schedule() -> Iterator[Any]:
    for name, fn in _schedule_factories():
        yield fn(**SCHEDULE_ARGS[name])
    yield S.exponential_decay(1.0, 10, 0.5, staircase=True, end_value=0.2)
    yield S.exponential_decay(-1.0, 10, 1.5, end_value=-3.0)
    yield S.polynomial_schedule(-1.0, 2.0, power=0.5, transition_steps=7, transition_begin=3)
    yield S.warmup_inverse_sqrt_schedule(1.0, 0, timescale=3.0)
    yield K.schedules.ExponentialDecay(1.0, 10, 0.5)
    yield K.schedules.PiecewiseConstantDecay([3, 7], [1.0, 0.5, 0.1])
    yield K.schedules.PolynomialDecay(1.0, 10, 0.1, power=2.0, cycle=True)
    yield K.schedules.InverseTimeDecay(1.0, 10, 0.5)
    yield K.schedules.CosineDecay(0.0, 10, alpha=0.1, warmup_target=1.0, warmup_steps=5)
    yield K.schedules.CosineDecayRestarts(1.0, 4, m_mul=0.5)


@pytest.mark.parametrize("schedule", list(_every_schedule()), ids=repr)
def test_stated_bounds_hold_the_values_taken(schedule: Any) -> None:
    low, high = schedule.bounds()
    steps = np.concatenate([np.arange(200), [10**6, 10**9, INT32_MAX]]).astype(np.int32)
    values = np.asarray(jax.vmap(schedule)(jnp.asarray(steps)), np.float64)
    # Bounds come from the configuration in float64; the values are float32 roundings.
    slack = 2 * float(np.finfo(np.float32).eps) * max(abs(low), abs(high), 1e-30)
    assert values.min() >= low - slack and values.max() <= high + slack, (low, high)


def test_a_schedule_must_return_a_scalar() -> None:
    tx = optx.adam(lambda count: 0.1 * jnp.ones(3))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`scale_by_learning_rate.init` needs the schedule of learning_rate to return a "
            "scalar. Received: learning_rate=<function"
        ),
    ) as info:
        tx.init({"w": jnp.ones(3)})
    assert "which returned shape (3,) at step 0." in str(info.value)
