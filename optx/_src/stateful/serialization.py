"""`get`, `serialize` and `deserialize` of the stateful optimizers, in Keras's formats.

The top of the stateful layer: it knows every class. The classes below describe the
optimizers they hold (and `save` the optimizer it writes) with the functions installed here
(`config.use_codec`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optx._src import reprs
from optx._src.stateful import (
    keras_adam,
    keras_classes,
    keras_muon,
    loss_scale_optimizer,
    multi,
)
from optx._src.stateful.config import config_arguments, use_codec
from optx._src.stateful.optimizer import Optimizer

_MODULE = "keras.optimizers"
_CLASSES: dict[str, type[Optimizer]] = {
    cls.__name__.lower(): cls
    for cls in (
        keras_classes.SGD,
        keras_classes.RMSprop,
        keras_adam.Adam,
        keras_adam.AdamW,
        keras_classes.Adadelta,
        keras_classes.Adagrad,
        keras_adam.Adamax,
        keras_classes.Adafactor,
        keras_adam.Nadam,
        keras_classes.Ftrl,
        keras_classes.Lion,
        keras_adam.Lamb,
        keras_muon.Muon,
        multi.MultiOptimizer,
        loss_scale_optimizer.LossScaleOptimizer,
        Optimizer,
    )
}
# optx's own class (no Keras class takes a transform): recorded under its public module.
_MODULES: dict[type, str] = {Optimizer: "optx.optimizers"}


def serialize(optimizer: Optimizer) -> dict[str, Any]:
    """An optimizer's description, in Keras 3's format.

    Args:
      optimizer: an optx stateful optimizer.

    Returns:
      ``{"module": "keras.optimizers", "class_name": ..., "config": get_config(),
      "registered_name": None}`` (the module is ``"optx.optimizers"`` for the generic
      `Optimizer`, whose config holds its transform object: not JSON); a class of your
      own gets its module and ``registered_name`` = its class name.

    Raises:
      TypeError: ``optimizer`` is not an optx stateful optimizer.

    Example:
      >>> import optx
      >>> optx.optimizers.serialize(optx.optimizers.SGD())["class_name"]
      'SGD'
    """
    if not isinstance(optimizer, Optimizer):
        raise TypeError(
            f"`serialize` needs an optx.optimizers optimizer. Received: optimizer={optimizer!r}."
        )
    cls = type(optimizer)
    builtin = _CLASSES.get(cls.__name__.lower()) is cls
    return {
        "module": _MODULES.get(cls, _MODULE) if builtin else cls.__module__,
        "class_name": cls.__name__,
        "config": optimizer.get_config(),
        "registered_name": None if builtin else cls.__name__,
    }


def deserialize(
    config: Mapping[str, Any], custom_objects: Mapping[str, type] | None = None
) -> Optimizer:
    """Rebuilds an optimizer from `serialize`'s output (Keras 3's or tf.keras's format).

    Class names are matched without regard to case among the built-in classes, then in
    ``custom_objects``; ``"module"`` and ``"registered_name"`` are optional.

    Args:
      config: ``{"class_name": ..., "config": {...}}`` (plus optional keys).
      custom_objects: ``{name: class}`` for optimizers of your own.

    Returns:
      A new, unbuilt optimizer.

    Raises:
      ValueError: the class name is unknown, or ``config`` is not such a dict.

    Example:
      >>> import optx
      >>> opt = optx.optimizers.deserialize(
      ...     {"class_name": "Adam", "config": {"learning_rate": 0.01}})
      >>> type(opt).__name__, float(opt.learning_rate)
      ('Adam', 0.009999999776482582)
    """
    if not isinstance(config, Mapping) or "class_name" not in config:
        raise ValueError(
            f"`deserialize` needs a dict with 'class_name' and 'config'. "
            f"Received: {reprs.short(config)}."
        )
    name = config["class_name"]
    if not isinstance(name, str):
        raise TypeError(
            f"`deserialize` needs class_name to be a string. "
            f"Received: class_name={reprs.short(name)}."
        )
    custom = dict(custom_objects or {})
    cls = custom.get(name) or _CLASSES.get(str(name).lower())
    if (
        cls is None
        and isinstance(config.get("registered_name"), str)
        and (config["registered_name"] in custom)
    ):
        cls = custom[config["registered_name"]]
    if cls is None:
        raise ValueError(
            f"`deserialize` got an unknown optimizer class {reprs.short(name)}. Received: "
            f"class_name={reprs.short(name)}. "
            f"Known: {', '.join(c.__name__ for c in _CLASSES.values())}; "
            f"pass your own classes in custom_objects."
        )
    inner = config_arguments(f"{cls.__name__}.from_config", config.get("config", {}))
    return cls.from_config(inner, custom_objects)


def get(identifier: Any) -> Optimizer | None:
    """An optimizer from a name (``"adam"``), a config dict, or an optimizer (returned as is).

    Args:
      identifier: ``None``, a class name (any case), a `serialize`-style dict, or an
        optimizer.

    Returns:
      The optimizer (``None`` for ``None``).

    Raises:
      ValueError: the identifier cannot be interpreted.

    Example:
      >>> import optx
      >>> type(optx.optimizers.get("lamb")).__name__
      'Lamb'
    """
    if identifier is None or isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        return deserialize({"class_name": identifier, "config": {}})
    if isinstance(identifier, Mapping):
        return deserialize(identifier)
    raise ValueError(
        f"`get` could not interpret the optimizer identifier. Received: identifier="
        f"{reprs.short(identifier)}; expected a name, a config dict or an optimizer."
    )


# `MultiOptimizer`, `LossScaleOptimizer` and `save` describe optimizers with these.
use_codec(serialize, deserialize)
