"""`CheckpointMixin`: `save` and `load` of the stateful optimizers (config and variables).

A checkpoint is one orbax checkpoint (`optx.save_state`'s format) of the ``variables`` dict,
keyed by name, with the optimizer's `optx.optimizers.serialize` description (JSON) in its
custom metadata. `load` rebuilds the optimizer from that description, builds it on the
parameters given, and reads each variable by name onto the sharding the new optimizer gives
it (no gather to one host), so a checkpoint saved on one mesh loads onto another.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Self

from optx._src import checkpoint as ckpt
from optx._src import hyperparams as hp
from optx._src.base import Params
from optx._src.stateful.config import deserialize, serialize
from optx._src.stateful.layout import check_keys
from optx._src.stateful.step import ITERATIONS

_KEY = "optx"
_FORMAT = 1


def save(optimizer: Any, directory: str | os.PathLike[str], force: bool) -> None:
    """See `CheckpointMixin.save` (``optimizer`` is a `StatefulBase`)."""
    api = "save"
    optimizer._require_built(api)
    description = serialize(optimizer)
    for key, value in description["config"].items():
        try:
            json.dumps(value)
        except TypeError:
            raise TypeError(
                f"`{api}` needs an optimizer whose config is JSON (a Keras-style class such "
                f"as optx.optimizers.Adam, a schedule from optx.optimizers.schedules). "
                f"Received: {key}={value!r} in the config of {optimizer.name!r}. Save the "
                f"state alone with `optx.save_state(directory, optimizer.variables)`, and "
                f"restore it into a new optimizer built on the same parameters with "
                f"`new.load_own_variables(optx.restore_state(directory, new.variables))`."
            ) from None
    ocp = ckpt._orbax(api)
    path = ckpt._path(directory)
    if path.exists() and not force:
        raise ValueError(
            f"`{api}` needs a directory that does not exist yet (or force=True to overwrite "
            f"it). Received: directory={str(path)!r}, which exists."
        )
    metadata = {_KEY: {"format": _FORMAT, "optimizer": description}}
    ckpt._save(ocp, path, dict(optimizer.variables), metadata, force)


def load(
    cls: type,
    directory: str | os.PathLike[str],
    params: Params,
    custom_objects: Mapping[str, type] | None,
) -> Any:
    """See `CheckpointMixin.load` (``cls`` is a `StatefulBase` subclass)."""
    api = "load"
    meta = ckpt._metadata(api, directory)
    custom = meta.custom_metadata or {}
    description = custom.get(_KEY, {}).get("optimizer") if isinstance(custom, Mapping) else None
    if description is None:
        raise ValueError(
            f"`{api}` needs a checkpoint written by `optimizer.save`. Received: "
            f"directory={os.fspath(directory)!r}, whose metadata holds no optimizer config "
            f"(a state saved with `optx.save_state` loads with `optx.restore_state`)."
        )
    optimizer = deserialize(description, custom_objects)
    if not isinstance(optimizer, cls):
        raise TypeError(
            f"`{cls.__name__}.load` needs a checkpoint of {cls.__name__}. Received: "
            f"a checkpoint of {type(optimizer).__name__}; load it with "
            f"`optx.optimizers.Optimizer.load`."
        )
    optimizer.build(params)
    layout = optimizer._require_built(api)
    current = optimizer.variables
    saved_keys = _saved_keys(meta.item_metadata.tree)
    if hp.is_legacy(saved_keys):  # an earlier release's names and stored form
        with ckpt._orbax(api).StandardCheckpointer() as checkpointer:
            raw = checkpointer.restore(ckpt._path(directory))
        upgraded = layout.upgrade_legacy(dict(raw), current)
        check_keys(api, list(current), upgraded)
        optimizer.load_own_variables({k: upgraded[k] for k in current})
        return optimizer
    check_keys(api, list(current), dict.fromkeys(saved_keys))
    # Read onto the shardings the new optimizer gave its variables (its parameters').
    values = ckpt._restore(api, directory, dict(current))
    values = {k: values[k] for k in current}
    optimizer._count = values.pop(ITERATIONS)
    optimizer._state = layout.from_dict(api, values)
    return optimizer


def _saved_keys(tree: Any) -> list[str]:
    return list(tree.keys()) if isinstance(tree, Mapping) else []


class CheckpointMixin:
    """`save` and `load` of a stateful optimizer (the config and the variables)."""

    def save(self, directory: str | os.PathLike[str], *, force: bool = False) -> None:
        """Saves the config (JSON) and the variables (by name) to ``directory`` with orbax.

        A sharded optimizer is written shard by shard, without a gather to one host. The
        generic ``Optimizer(transform)`` has no JSON config: save its state with
        `optx.save_state` instead (the error says how).

        Raises:
          ValueError: the optimizer is not built, or ``directory`` exists (and not
            ``force``).
          TypeError: the config is not JSON.

        Example:
          >>> import tempfile, jax.numpy as jnp, optx
          >>> opt = optx.optimizers.Adam(0.1)
          >>> params = opt.apply({"w": jnp.ones(2)}, {"w": jnp.zeros(2)})
          >>> path = tempfile.mkdtemp() + "/opt"
          >>> opt.save(path)
          >>> new = optx.optimizers.Optimizer.load(path, params)
          >>> type(new).__name__, int(new.iterations)
          ('Adam', 1)
        """
        save(self, directory, force)

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike[str],
        params: Params,
        *,
        custom_objects: Mapping[str, type] | None = None,
    ) -> Self:
        """An optimizer rebuilt from `save`'s config, built on ``params``, holding its variables.

        Each variable is read by name onto the sharding the new optimizer gives it (that
        of its parameter), so ``params`` on another mesh load the state onto that mesh.
        ``Optimizer.load`` loads any class; ``Adam.load`` requires an ``Adam``.

        Raises:
          ValueError: the checkpoint is incomplete, was not written by `save`, or its
            variables differ from the new optimizer's (missing or extra names, or shapes).
          TypeError: the checkpoint holds another class than ``cls``.

        Example:
          >>> import tempfile, jax.numpy as jnp, optx
          >>> params = {"w": jnp.zeros(2)}
          >>> opt = optx.optimizers.SGD(0.1, momentum=0.9)
          >>> opt.build(params)
          >>> path = tempfile.mkdtemp() + "/opt"
          >>> opt.save(path)
          >>> optx.optimizers.SGD.load(path, params).get_config()["momentum"]
          0.9
        """
        return load(cls, directory, params, custom_objects)
