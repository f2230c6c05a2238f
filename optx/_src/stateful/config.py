"""The configs of the stateful optimizers: `from_config` arguments, and nested optimizers.

`config_arguments` checks a `from_config` dict. `MultiOptimizer` and `LossScaleOptimizer`
hold optimizers in their configs, and `save` writes an optimizer's description: they
describe and rebuild optimizers with `serialize` and `deserialize` here, which call those
of `optx.optimizers` (serialization.py, which knows every class and installs them with
`use_codec` when it is imported, as `import optx` does).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from optx._src import reprs
from optx._src.suggest import did_you_mean

# `optx.optimizers.serialize` and `deserialize`, installed by serialization.py.
_codec: dict[str, Callable[..., Any]] = {}


def use_codec(serialize: Callable[[Any], dict[str, Any]], deserialize: Callable[..., Any]) -> None:
    """Installs the `serialize` and `deserialize` that know every class (serialization.py)."""
    _codec["serialize"] = serialize
    _codec["deserialize"] = deserialize


def serialize(optimizer: Any) -> dict[str, Any]:
    """`optx.optimizers.serialize` (Keras 3's description of ``optimizer``)."""
    return _codec["serialize"](optimizer)


def deserialize(config: Mapping[str, Any], custom_objects: Mapping[str, type] | None = None) -> Any:
    """`optx.optimizers.deserialize` (an optimizer rebuilt from its description)."""
    return _codec["deserialize"](config, custom_objects)


def config_arguments(
    api: str, config: Any, cls: type | None = None, required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Checks a `from_config` dict and returns a copy.

    It must be a mapping with string keys, hold the ``required`` keys, and (when ``cls``
    takes no ``**kwargs``) only arguments of ``cls``.
    """
    if not isinstance(config, Mapping):
        raise TypeError(
            f"`{api}` needs config to be a dict of arguments, as `get_config` returns. "
            f"Received: config={reprs.short(config)}."
        )
    bad = [k for k in config if not isinstance(k, str)]
    if bad:
        raise TypeError(
            f"`{api}` needs the keys of config to be argument names (strings). "
            f"Received: key {reprs.short(bad[0])}."
        )
    missing = [k for k in required if k not in config]
    if missing:
        raise ValueError(
            f"`{api}` needs config to hold {missing[0]!r}. "
            f"Received: config with keys {reprs.short(list(config))}."
        )
    if cls is not None:
        params = inspect.signature(cls.__init__).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            allowed = [n for n in params if n != "self"]
            unknown = [k for k in config if k not in allowed]
            if unknown:
                raise TypeError(
                    f"`{api}` got an unexpected argument {reprs.short(unknown[0])} in config. "
                    f"Received: {reprs.name(unknown[0])}="
                    f"{reprs.short(config[unknown[0]])}."
                    f"{did_you_mean(unknown[0], allowed)} Allowed: {', '.join(allowed)}."
                )
    return dict(config)
