"""The schedule base class, its configuration format, and `from_config`.

A schedule is a pure function of the step count, ``schedule(count) -> value``, held in a
frozen dataclass: equal and hashable by its configuration, so a transform that
holds one stays hashable and two identical optimizers share a compiled step. The count is
an int32 that never overflows; it is converted to float32 inside.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import numbers
import sys
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, dataclass_transform

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer
from jax.typing import ArrayLike

from optx._src import reprs
from optx._src.checks import INT32_MAX, too_large

_REGISTRY: dict[str, type[Schedule]] = {}
S = TypeVar("S", bound="type[Schedule]")


class Schedule:
    """Base class of optx's schedules: frozen dataclasses whose call maps a step to a value.

    Subclasses set ``class_name`` (the public factory's name, also the ``class_name`` of
    their config) and implement ``value(count)`` on a float32 count. Fields that hold other
    schedules are listed in ``schedule_fields`` so configs nest. The factory, a function
    named ``class_name`` in the class's module, sets which keys a config must and may hold.

    Example:
      >>> import optx
      >>> s = optx.schedules.linear_schedule(1.0, 0.0, transition_steps=4)
      >>> [round(float(s(t)), 2) for t in range(6)]
      [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
      >>> s.get_config()
      {'class_name': 'linear_schedule', 'config': {'init_value': 1.0, 'end_value': 0.0, \
'transition_steps': 4, 'transition_begin': 0}}
    """

    __slots__ = ()
    class_name: ClassVar[str] = "schedule"
    schedule_fields: ClassVar[tuple[str, ...]] = ()

    def __call__(self, count: ArrayLike) -> jax.Array:
        """The value at step ``count`` (an int or an int32 array; 0 is the first step)."""
        count = jnp.asarray(count)
        return jnp.asarray(self.value(count.astype(jnp.float32)), jnp.float32)

    def value(self, count: jax.Array) -> jax.Array:
        """The value at a float32 step count."""
        raise NotImplementedError

    def bounds(self) -> tuple[float, float] | None:
        """The least and the greatest value over every step, or ``None`` if unknown.

        Computed from the configuration, over the steps 0 to ``2**31 - 1`` (step counters
        are int32 and stop there): exact where the schedule reaches them, else an
        enclosing interval (a decay towards 0 states 0). A schedule built to grow without
        end states ``inf``. A transform checks a schedule's bounds against its
        hyperparameter's range (``adam(constant_schedule(-0.1))`` is refused as
        ``adam(-0.1)`` is). A subclass that overrides ``value`` or ``__call__`` without
        stating bounds has none (``None``): it is accepted as any function is.

        Example:
          >>> import optx
          >>> optx.schedules.linear_schedule(0.1, -0.5, transition_steps=10).bounds()
          (-0.5, 0.1)
          >>> print(optx.schedules.Schedule().bounds())
          None
        """
        mro = type(self).__mro__
        owner = next(c for c in mro if "_bounds" in c.__dict__)
        for method in ("value", "__call__"):
            defining = next(c for c in mro if method in c.__dict__)
            if not issubclass(owner, defining):
                return None  # the values were redefined below the class that knew them
        return self._bounds()

    def _bounds(self) -> tuple[float, float] | None:
        """`bounds` of this class's own ``value``; ``None`` where unknown."""
        return None

    def get_config(self) -> dict[str, Any]:
        """A JSON-serialisable description: ``{"class_name": ..., "config": {...}}``."""
        config = {}
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if field.name in self.schedule_fields:
                value = _encode(value)
            config[field.name] = _plain(value)
        return {"class_name": self.class_name, "config": config}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Schedule:
        """Rebuilds a schedule of this class from the ``config`` part of `get_config`."""
        kwargs = dict(config)
        for name in cls.schedule_fields:
            if name in kwargs:
                kwargs[name] = _decode(kwargs[name])
        return cls(**kwargs)

    def __repr__(self) -> str:
        args = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if f.repr
        )
        return f"{self.class_name}({args})"


@dataclass_transform(frozen_default=True)
def register(cls: S) -> S:
    """Class decorator: a frozen dataclass, registered for `from_config` under its name."""
    cls = dataclasses.dataclass(frozen=True, repr=False)(cls)
    if cls.class_name in _REGISTRY and _REGISTRY[cls.class_name] is not cls:
        raise ValueError(f"Two schedules share the name {cls.class_name!r}.")
    _REGISTRY[cls.class_name] = cls
    return cls


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _encode(value: Any) -> Any:
    if isinstance(value, Schedule):
        config = value.get_config()
        # Keras-style schedules return a flat config (Keras's format): nest it.
        if "class_name" not in config:
            config = {"class_name": value.class_name, "config": config}
        return config
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if isinstance(value, numbers.Number):
        return value
    raise TypeError(
        f"`get_config` needs schedules or numbers in schedule fields. Received: {value!r}. A "
        f"plain Python function has no config: wrap it in an optx schedule."
    )


def _decode(value: Any) -> Any:
    if isinstance(value, Mapping):
        return from_config(value)
    if isinstance(value, list | tuple):
        return tuple(_decode(v) for v in value)
    return value


def from_config(config: Mapping[str, Any]) -> Schedule:
    """Rebuilds a schedule from its `get_config` (or a Keras ``{"class_name", "config"}``).

    Args:
      config: ``{"class_name": name, "config": {...}}`` as `Schedule.get_config` returns it
        (after a JSON round trip too); Keras's serialised form, with ``"module"`` and
        ``"registered_name"`` keys, is accepted for the Keras-style classes.

    Returns:
      An equal schedule.

    Raises:
      ValueError: ``config`` is malformed, or names an unknown class.
      TypeError: its ``config`` has arguments the class does not take, or lacks one that
        the class needs.

    Example:
      >>> import json, optx
      >>> s = optx.schedules.cosine_decay_schedule(1e-3, decay_steps=100, alpha=0.1)
      >>> optx.schedules.from_config(json.loads(json.dumps(s.get_config()))) == s
      True
    """
    if not isinstance(config, Mapping) or "class_name" not in config:
        raise ValueError(
            f"`from_config` needs a dict with 'class_name' and 'config' keys. "
            f"Received: {reprs.short(config)}."
        )
    name = config["class_name"]
    if not isinstance(name, str) or name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), _REGISTRY, n=1)
        hint = (
            f"Did you mean {close[0]!r}?"
            if close
            else "The names are those of the schedule factories, such as 'linear_schedule'."
        )
        raise ValueError(
            f"`from_config` needs the class_name of a known schedule. "
            f"Received: class_name={reprs.short(name)}. {hint}"
        )
    inner = config.get("config", {})
    if not isinstance(inner, Mapping):
        raise ValueError(
            f"`from_config` needs 'config' to be a dict of arguments. "
            f"Received: config={reprs.short(inner)}."
        )
    cls = _REGISTRY[name]
    required, known = _arguments(cls)
    unknown = sorted((k for k in inner if k not in known), key=repr)
    if unknown:
        raise TypeError(
            f"`from_config` got arguments that {name} does not take: "
            f"{reprs.short(unknown)}. It takes: {known}."
        )
    missing = [key for key in required if key not in inner]
    if missing:
        raise TypeError(
            f"`from_config` needs every required argument of {name}. Missing: {missing}. "
            f"Received: config={reprs.short(dict(inner))}."
        )
    return cls.from_config(inner)


def _arguments(cls: type[Schedule]) -> tuple[list[str], list[str]]:
    """The required and all argument names of a schedule's config, in order.

    They are the parameters of its factory, the function named ``class_name`` in the
    class's module (a config holds the factory's arguments, e.g. ``value`` for
    `constant_schedule`); without one, the dataclass's fields.
    """
    factory = getattr(sys.modules.get(cls.__module__), cls.class_name, None)
    if inspect.isfunction(factory):
        params = list(inspect.signature(factory).parameters.values())
        required = [p.name for p in params if p.default is inspect.Parameter.empty]
        return required, [p.name for p in params]
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    required = [
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    return required, [f.name for f in fields]


def registered() -> dict[str, type[Schedule]]:
    """The schedule classes known to `from_config`, by ``class_name``."""
    return dict(_REGISTRY)


# Argument checks shared by the schedules. They raise at construction, naming the factory.


def check_number(api: str, name: str, value: Any) -> float:
    """A finite real number, as a Python float."""
    if isinstance(value, Tracer):
        raise TypeError(
            f"`{api}` needs {name} to be a concrete number (schedules hold no arrays). "
            f"Received: {name}={value!r}."
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Real | np.generic | jax.Array):
        raise TypeError(
            f"`{api}` needs {name} to be a real number. Received: {name}={reprs.short(value)}."
        )
    if getattr(value, "shape", ()) != ():
        raise TypeError(
            f"`{api}` needs {name} to be a scalar. Received: {name}={reprs.short(value)}."
        )
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"`{api}` needs {name} to be finite. Received: {name}={value!r}.")
    return number


def check_positive(api: str, name: str, value: Any) -> float:
    """A finite number > 0."""
    number = check_number(api, name, value)
    if number <= 0:
        raise ValueError(f"`{api}` needs {name} > 0. Received: {name}={value!r}.")
    return number


def check_nonnegative(api: str, name: str, value: Any) -> float:
    """A finite number >= 0."""
    number = check_number(api, name, value)
    if number < 0:
        raise ValueError(f"`{api}` needs {name} >= 0. Received: {name}={value!r}.")
    return number


def check_steps(api: str, name: str, value: Any, minimum: int = 1) -> int:
    """A step count: an int in ``[minimum, 2**31 - 1]`` (the steps an int32 counter counts)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"`{api}` needs {name} to be an int. Received: {name}={reprs.short(value)}."
        )
    if value < minimum:
        raise ValueError(f"`{api}` needs {name} >= {minimum}. Received: {name}={value!r}.")
    if value > INT32_MAX:
        raise ValueError(too_large(api, name, value, minimum))
    return int(value)


def hull(*values: float) -> tuple[float, float]:
    """The least and greatest of ``values``: the bounds of a schedule that moves between them."""
    return min(values), max(values)


def union(parts: Any) -> tuple[float, float] | None:
    """The bounds of a schedule made of ``parts`` (schedules or functions); ``None`` if unknown."""
    found = [p.bounds() if isinstance(p, Schedule) else None for p in parts]
    if any(b is None for b in found):
        return None
    return min(b[0] for b in found), max(b[1] for b in found)


def set_fields(obj: Any, **values: Any) -> None:
    """Assigns normalised values to a frozen dataclass in ``__post_init__``."""
    for key, value in values.items():
        object.__setattr__(obj, key, value)


ScheduleLike = Schedule | Callable[[jax.Array], jax.Array]
