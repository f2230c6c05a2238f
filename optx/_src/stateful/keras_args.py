"""Keras's arguments as optx values: the learning rate of a step, weight-decay masks, checks."""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from optx._src import constraints as constraints_lib
from optx._src import projections as projections_lib
from optx._src import reprs
from optx._src.base import Params
from optx._src.checks import INT32_MAX, flag, too_large
from optx._src.constraints import Constraint
from optx._src.hyperparams import NONNEG, check_bounds, is_schedule, schedule_bounds
from optx._src.schedules.base import Schedule
from optx._src.stateful.config import config_arguments
from optx._src.tree import is_param, path_name

COMMON = {
    "weight_decay": None,
    "clipnorm": None,
    "clipvalue": None,
    "global_clipnorm": None,
    "use_ema": False,
    "ema_momentum": 0.99,
    "ema_overwrite_frequency": None,
    "loss_scale_factor": None,
    "gradient_accumulation_steps": None,
}
# optx's options beyond Keras 3's: OptimizerV2's `decay`, the EMA's start, and
# the named axis to average gradients over (`aggregate_gradients`, first in the chain).
EXTRA = {
    "decay": 0.0,
    "ema_start": "initial",
    "constraints": None,
    "jit_compile": True,
    "axis_name": None,
}


@dataclasses.dataclass(frozen=True)
class KerasLearningRate:
    r"""The learning rate a Keras optimizer sees at its ``count``-th update.

    ``schedule`` is evaluated at the micro-step :math:`s = k\,c + k - 1` (Keras evaluates
    schedules at the raw iteration count, also under gradient accumulation) and divided by
    :math:`1 + \text{decay}\cdot s` (OptimizerV2's inverse-time ``decay``). A callable
    that takes no argument (Keras's other callable learning rates) is called without one.
    """

    schedule: Any = 0.001
    every_k: int = 1
    decay: float = 0.0
    no_args: bool = False

    def __call__(self, count: Any) -> jax.Array:
        k = self.every_k
        step = jnp.asarray(count, jnp.int32) * k + (k - 1)
        if not callable(self.schedule):
            value = jnp.asarray(self.schedule, jnp.float32)
        elif self.no_args:
            value = jnp.asarray(self.schedule(), jnp.float32)
        else:
            value = jnp.asarray(self.schedule(step), jnp.float32)
        if self.decay:
            value = value / (1.0 + self.decay * step.astype(jnp.float32))
        return value

    def bounds(self) -> tuple[float, float] | None:
        """The least and greatest learning rate, where the schedule states its own."""
        if not callable(self.schedule):
            low = high = float(self.schedule)
        elif self.no_args or (found := schedule_bounds(self.schedule)) is None:
            return None
        else:
            low, high = found
        if self.decay:  # divided by 1 + decay * step: towards 0
            low, high = min(low, 0.0), max(high, 0.0)
        return low, high


@dataclasses.dataclass(frozen=True)
class DecayMask:
    """Weight-decay mask: ``True`` on every parameter whose path no pattern matches."""

    patterns: tuple[str, ...] = ()

    def __call__(self, params: Params) -> Any:
        compiled = [re.compile(p) for p in self.patterns]
        return jax.tree_util.tree_map_with_path(
            lambda path, _: not any(r.search(path_name(path)) for r in compiled),
            params,
            is_leaf=is_param,
        )


def keyword_names(cls: type, defaults: Mapping[str, Any]) -> list[str]:
    """Every keyword argument a Keras class takes, in order: its own, then the common ones.

    Its own are those of its ``__init__`` (``learning_rate`` first, which the class passes
    on by position) and of ``defaults``; then Keras's common ones, optx's and ``name``.
    """
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # not self
    except (TypeError, ValueError):
        params = []
    own = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return list(dict.fromkeys(["learning_rate", *own, *defaults, *COMMON, *EXTRA, "name"]))


def takes_no_args(fn: Callable[..., Any]) -> bool:
    if isinstance(fn, Schedule):
        return False
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in sig.parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return not required and not any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())


def number(api: str, name: str, value: Any, *, allow_none: bool = True) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"`{api}` needs {name} to be a number. Received: {name}={reprs.short(value)}."
        )
    value = float(value)
    if not value >= 0 or value == float("inf"):
        raise ValueError(
            f"`{api}` needs {name} to be a non-negative finite number. Received: {name}={value!r}."
        )
    return value


def finite(api: str, name: str, value: Any) -> float:
    """A finite real number (of any sign), as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"`{api}` needs {name} to be a real number. Received: {name}={reprs.short(value)}."
        )
    if not math.isfinite(value):
        raise ValueError(f"`{api}` needs {name} to be finite. Received: {name}={value!r}.")
    return float(value)


def patterns(api: str, name: str, value: Any) -> tuple[str, ...]:
    """``None``, a regular expression or a list of them, as a tuple."""
    items = () if value is None else (value,) if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(v, str) for v in items):
        raise TypeError(
            f"`{api}` needs {name} to be None, a regular expression or a list of them. "
            f"Received: {name}={reprs.short(value)}."
        )
    for pattern in items:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(
                f"`{api}` needs {name} to be regular expressions. Received: {pattern!r} ({error})."
            ) from None
    return tuple(items)


def snake(name: str) -> str:
    """Keras's default optimizer names: ``"Adam"`` -> ``"adam"``, ``"AdamW"`` -> ``"adam_w"``."""
    out = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", out).lower()


def constraints_argument(api: str, value: Any) -> dict[str, Any]:
    """Checks ``constraints=``: ``{regex on the parameter path: callable}``."""
    if not isinstance(value, Mapping) or not value:
        raise TypeError(
            f"`{api}` needs constraints to be a non-empty dict {{regex on the parameter path: "
            f"constraint}}. Received: constraints={value!r}."
        )
    for pattern, fn in value.items():
        if not isinstance(pattern, str):
            raise TypeError(
                f"`{api}` needs the keys of constraints to be regular expressions. "
                f"Received: {pattern!r}."
            )
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(
                f"`{api}` needs the keys of constraints to be regular expressions. "
                f"Received: {pattern!r} ({error})."
            ) from None
        if not callable(fn):
            raise TypeError(
                f"`{api}` needs each constraint to be callable (optx.constraints.NonNeg(), "
                f"...). Received: constraints[{pattern!r}]={fn!r}."
            )
    return dict(value)


def serialize_constraint(fn: Any) -> Any:
    """An `optx.constraints` constraint as ``{"class_name", "config"}``; others as they are."""
    if isinstance(fn, Constraint):
        return {"class_name": type(fn).__name__, "config": fn.get_config()}
    return fn


def deserialize_constraint(value: Any, custom_objects: Mapping[str, Any] | None = None) -> Any:
    """Rebuilds a constraint from `serialize_constraint`'s output."""
    if not isinstance(value, Mapping):
        return value
    name = value.get("class_name")
    cls = (
        (custom_objects or {}).get(name)
        or getattr(constraints_lib, str(name), None)
        or getattr(projections_lib, str(name), None)
    )
    if not (isinstance(cls, type) and issubclass(cls, Constraint)):
        raise ValueError(
            f"`deserialize` got an unknown constraint {reprs.short(name)}. Received: "
            f"{reprs.short(value)}; expected a class of optx.constraints or of custom_objects."
        )
    return cls.from_config(config_arguments("deserialize", value.get("config", {})))


def check_learning_rate(api: str, lr: Any) -> Any:
    """Checks a learning rate: a number >= 0, a schedule or a callable.

    An optx schedule is checked to stay >= 0 at every step (its ``bounds()``); the values
    of another callable are known only when it runs.
    """
    if callable(lr):
        check_bounds(api, "learning_rate", lr, NONNEG)
        return lr
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise ValueError(
            f"`{api}` needs learning_rate to be a float, a LearningRateSchedule or a "
            f"callable. Received: learning_rate={reprs.short(lr)}."
        )
    return number(api, "learning_rate", lr, allow_none=False)


def check_flags(api: str, c: dict[str, Any], defaults: Mapping[str, Any]) -> None:
    """Checks (and normalises, in place) the boolean arguments: those whose default is one.

    ``nesterov="False"`` is refused rather than read as true; NumPy's bool becomes a
    Python bool (so `get_config` returns one).
    """
    for name, default in defaults.items():
        if isinstance(default, bool) and name in c:
            c[name] = flag(api, name, c[name])


def check_count(api: str, name: str, value: Any, minimum: int) -> int | None:
    """``None``, or an int in ``[minimum, 2**31 - 1]`` (a period an int32 counter reaches)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(
            f"`{api}` needs {name} to be an integer >= {minimum} (or None). "
            f"Received: {name}={value!r}."
        )
    if value > INT32_MAX:
        raise ValueError(too_large(api, name, value, minimum))
    return int(value)


def check_common(api: str, c: dict[str, Any], defaults: Mapping[str, Any] | None = None) -> None:
    """Checks (and normalises, in place) Keras's common arguments in a config.

    ``defaults`` are the class's own arguments' defaults: those that are bools are checked
    to be bools, as the common ones (``use_ema``, ``jit_compile``) are.
    """
    check_flags(api, c, {**(defaults or {}), **COMMON, **EXTRA})
    for name in ("clipnorm", "clipvalue", "global_clipnorm", "decay", "loss_scale_factor"):
        # A clipping threshold may be a schedule, as any hyperparameter held in the state.
        schedulable = name in ("clipnorm", "clipvalue", "global_clipnorm")
        if not (schedulable and is_schedule(c[name])):
            c[name] = number(api, name, c[name])
    c["decay"] = c["decay"] or 0.0
    clips = [n for n in ("clipnorm", "clipvalue", "global_clipnorm") if c[n] is not None]
    if len(clips) > 1:
        raise ValueError(
            f"`{api}` needs at most one of `clipnorm`, `clipvalue` and `global_clipnorm`. "
            f"Received: {', '.join(f'{n}={c[n]!r}' for n in clips)}."
        )
    if c["weight_decay"] is not None and not is_schedule(c["weight_decay"]):
        c["weight_decay"] = number(api, "weight_decay", c["weight_decay"])
    a = c["axis_name"]
    if a is not None and not (
        isinstance(a, str) or (isinstance(a, tuple) and a and all(isinstance(n, str) for n in a))
    ):
        raise TypeError(
            f"`{api}` needs axis_name to be a string, a non-empty tuple of strings or None. "
            f"Received: axis_name={a!r}."
        )
    if c["constraints"] is not None:
        c["constraints"] = constraints_argument(api, c["constraints"])
    if c["loss_scale_factor"] == 0.0:
        raise ValueError(
            f"`{api}` needs loss_scale_factor to be positive. Received: loss_scale_factor=0.0."
        )
    c["gradient_accumulation_steps"] = check_count(
        api, "gradient_accumulation_steps", c["gradient_accumulation_steps"], 2
    )
    if c["use_ema"]:
        m = c["ema_momentum"]
        if not is_schedule(m) and (
            isinstance(m, bool) or not isinstance(m, numbers.Real) or not 0 <= m <= 1
        ):
            raise ValueError(
                f"`{api}` needs ema_momentum in [0, 1] when use_ema=True. "
                f"Received: ema_momentum={m!r}."
            )
        c["ema_overwrite_frequency"] = check_count(
            api, "ema_overwrite_frequency", c["ema_overwrite_frequency"], 1
        )
        if c["ema_start"] not in ("initial", "first_step"):
            raise ValueError(
                f"`{api}` needs ema_start to be 'initial' or 'first_step'. "
                f"Received: ema_start={c['ema_start']!r}."
            )
