"""`serialize` and `deserialize` of learning-rate schedules, in Keras 3's and tf.keras's formats."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from optx._src import reprs
from optx._src.schedules import base
from optx._src.schedules.base import Schedule
from optx._src.schedules.keras import _MODULE, LearningRateSchedule


def serialize(schedule: Schedule, use_legacy_format: bool = False) -> dict[str, Any]:
    """A schedule's JSON-serialisable description, as Keras's `serialize` gives it.

    Args:
      schedule: a `LearningRateSchedule` (built-in or a subclass), or one of
        `optx.schedules`' schedules.
      use_legacy_format: return tf.keras's ``{"class_name", "config"}`` only.

    Returns:
      ``{"module": "keras.optimizers.schedules", "class_name": ..., "config": {...},
      "registered_name": None}`` for the built-in classes (Keras 3's format). A subclass of
      your own gets its module and ``registered_name`` = its class name; an
      `optx.schedules` schedule gets ``module="optx.schedules"`` and its nested config.

    Raises:
      TypeError: ``schedule`` is not an optx schedule.

    Example:
      >>> import optx
      >>> s = optx.optimizers.schedules.ExponentialDecay(0.1, 100, 0.9)
      >>> optx.optimizers.schedules.serialize(s, use_legacy_format=True)
      {'class_name': 'ExponentialDecay', 'config': {'initial_learning_rate': 0.1, \
'decay_steps': 100, 'decay_rate': 0.9, 'staircase': False, 'name': 'ExponentialDecay'}}
    """
    if isinstance(schedule, LearningRateSchedule):
        cls = type(schedule)
        class_name, config = cls.__name__, schedule.get_config()
        builtin = base.registered().get(class_name) is cls
        module = _MODULE if builtin else cls.__module__
        registered_name = None if builtin else class_name
    elif isinstance(schedule, Schedule):
        outer = schedule.get_config()
        class_name, config = outer["class_name"], outer["config"]
        module, registered_name = "optx.schedules", None
    else:
        raise TypeError(
            f"`serialize` needs an optx schedule (a LearningRateSchedule or an "
            f"optx.schedules schedule). Received: schedule={schedule!r}."
        )
    if use_legacy_format:
        return {"class_name": class_name, "config": config}
    return {
        "module": module,
        "class_name": class_name,
        "config": config,
        "registered_name": registered_name,
    }


def deserialize(
    config: Mapping[str, Any], custom_objects: Mapping[str, type] | None = None
) -> Schedule:
    """Rebuilds a schedule from `serialize`'s output, Keras 3's or tf.keras's.

    Reads both formats (``"module"`` and ``"registered_name"`` are optional), configs
    written by Keras itself, tf.keras configs with ``"name": None`` (the default name is
    used), and `optx.schedules` configs (lowercase ``class_name``).

    Args:
      config: ``{"class_name": ..., "config": {...}}``, with or without Keras 3's extra keys.
      custom_objects: extra classes by name, looked up first (by ``class_name``, then
        ``registered_name``); each is rebuilt with its ``from_config``.

    Returns:
      The schedule.

    Raises:
      TypeError: ``config``, its parts or ``custom_objects`` have the wrong type, or the
        config's arguments do not fit the class.
      ValueError: a key is missing, or the class is unknown.

    Example:
      >>> import json, optx
      >>> s = optx.optimizers.schedules.CosineDecay(0.1, 1000, alpha=0.01)
      >>> text = json.dumps(optx.optimizers.schedules.serialize(s))
      >>> optx.optimizers.schedules.deserialize(json.loads(text)) == s
      True
    """
    if not isinstance(config, Mapping):
        raise TypeError(
            f"`deserialize` needs a dict such as `serialize` returns. "
            f"Received: config={reprs.short(config)}."
        )
    missing = [key for key in ("class_name", "config") if key not in config]
    if missing:
        raise ValueError(
            f"`deserialize` needs the keys 'class_name' and 'config'. Missing: {missing}. "
            f"Received: config={reprs.short(dict(config))}."
        )
    class_name, inner = config["class_name"], config["config"]
    if not isinstance(class_name, str):
        raise TypeError(
            f"`deserialize` needs class_name to be a string. "
            f"Received: class_name={reprs.short(class_name)}."
        )
    if isinstance(inner, Mapping) and not all(isinstance(k, str) for k in inner):
        raise TypeError(
            f"`deserialize` needs argument names (strings) as the keys of 'config'. "
            f"Received: config={reprs.short(inner)}."
        )
    if not isinstance(inner, Mapping):
        raise TypeError(
            f"`deserialize` needs 'config' to be a dict of arguments. "
            f"Received: config={reprs.short(inner)}."
        )
    if custom_objects is None:
        custom_objects = {}
    if not isinstance(custom_objects, Mapping):
        raise TypeError(
            f"`deserialize` needs custom_objects to be a dict of classes by name. "
            f"Received: custom_objects={reprs.short(custom_objects)}."
        )
    known = base.registered()
    key, registered_name = class_name, config.get("registered_name")
    if key not in custom_objects and isinstance(registered_name, str):
        key = registered_name
    cls: Any = custom_objects.get(key)
    if cls is not None and not callable(getattr(cls, "from_config", None)):
        raise TypeError(
            f"`deserialize` needs custom_objects[{reprs.short(key)}] to be a class with "
            f"`from_config`. "
            f"Received: {reprs.short(cls)}."
        )
    if cls is None and class_name in known:
        cls = known[class_name]
        if not issubclass(cls, LearningRateSchedule):  # optx.schedules' nested format
            return base.from_config({"class_name": class_name, "config": inner})
    if cls is None:
        raise ValueError(
            f"`deserialize` does not know the schedule "
            f"class_name={reprs.short(class_name)}. Known: "
            f"{sorted(set(known) | set(custom_objects))}. Pass custom_objects="
            f"{{{reprs.short(class_name)}: YourClass}} for a class of your own."
        )
    rebuild = cls.from_config
    if dataclasses.is_dataclass(cls):
        fields = dataclasses.fields(cls)
        unknown = sorted(set(inner) - {f.name for f in fields})
        if unknown:
            raise TypeError(
                f"`deserialize` got arguments that {class_name} does not take: "
                f"{reprs.short(unknown)}. "
                f"It takes: {[f.name for f in fields]}."
            )
        needed = [f.name for f in fields if f.default is dataclasses.MISSING]
        lacking = [name for name in needed if name not in inner]
        if lacking:
            raise TypeError(
                f"`deserialize` needs the arguments {lacking} of {class_name}, which the "
                f"config lacks. Received: config={reprs.short(dict(inner))}."
            )
    return rebuild(dict(inner))
