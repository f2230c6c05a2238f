"""`CheckpointMixin`: `save` and `load` of the stateful optimizers (config and variables).

A checkpoint is one orbax checkpoint (`optx.save_state`'s format) of the ``variables`` dict,
keyed by name, with the optimizer's `optx.optimizers.serialize` description (JSON) in its
custom metadata. `load` rebuilds the optimizer from that description, builds it on the
parameters given, and reads each variable by name onto the sharding the new optimizer gives
it (no gather to one host), so a checkpoint saved on one mesh loads onto another. The
values loaded are checked as `load_own_variables` checks a store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Self

import jax.numpy as jnp
import numpy as np

from optx._src import checkpoint as ckpt
from optx._src import hyperparams as hp
from optx._src.base import Params
from optx._src.stateful.config import deserialize, serialize
from optx._src.stateful.layout import check_keys
from optx._src.stateful.step import ITERATIONS
from optx._src.stateful.weights import check_counter, check_hyperparams

_KEY = "optx"
_FORMAT = 1


def save(optimizer: Any, directory: str | os.PathLike[str], force: bool) -> None:
    """See `CheckpointMixin.save` (``optimizer`` is a `StatefulBase`)."""
    api = "save"
    with optimizer._lock:
        # One whole state, copied: a step in another thread donates the state's buffers,
        # perhaps while orbax is still reading them.
        optimizer._require_built(api)
        description = serialize(optimizer)
        variables = {k: jnp.array(v, copy=True) for k, v in optimizer.variables.items()}
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
    metadata = {_KEY: {"format": _FORMAT, "optimizer": description}}
    ckpt._save(api, directory, variables, metadata, force)


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
        raw = ckpt._restore_raw(api, directory)
        upgraded = layout.upgrade_legacy(dict(raw), current)
        check_keys(api, list(current), upgraded)
        optimizer.load_own_variables({k: upgraded[k] for k in current})
        return optimizer
    check_keys(api, list(current), dict.fromkeys(saved_keys))
    # Read onto the shardings the new optimizer gave its variables (its parameters').
    values = ckpt._restore(api, directory, dict(current))
    values = {k: values[k] for k in current}
    # Checked as `load_own_variables` checks a store (which would gather every variable to
    # this host): the step counts and the hyperparameters, before the state holds them.
    for key, old in current.items():
        if key == ITERATIONS or (key.endswith("count") and jnp.issubdtype(old.dtype, jnp.integer)):
            check_counter(api, key, np.asarray(values[key]), old)
    check_hyperparams(api, layout, values)
    with optimizer._lock:
        optimizer._count = values.pop(ITERATIONS)
        optimizer._state = layout.from_dict(api, values)
        optimizer._loaded()  # the attributes and `get_config` show the values loaded
    return optimizer


def _saved_keys(tree: Any) -> list[str]:
    return list(tree.keys()) if isinstance(tree, Mapping) else []


class CheckpointMixin:
    """`save` and `load` of a stateful optimizer (the config and the variables)."""

    def save(self, directory: str | os.PathLike[str], *, force: bool = False) -> None:
        """Saves the config (JSON) and the variables (by name) to ``directory`` with orbax.

        The variables saved are one whole state, copied under the optimizer's lock: a step
        in another thread waits for the copy, then goes on while the copy is written. A
        sharded optimizer is written shard by shard, without a gather to one host. The
        checkpoint appears at ``directory`` whole or not at all, as with `optx.save_state`:
        of writers saving to one directory at once, one wins and the others raise. The
        generic ``Optimizer(transform)`` has no JSON config: save its state with
        `optx.save_state` instead (the error says how).

        Raises:
          ValueError: the optimizer is not built, ``directory`` exists (and not
            ``force``), or another writer published there while this call was saving.
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
        The values are checked as `load_own_variables` checks them (each hyperparameter in
        its declared range, step counts integers >= 0), and the attributes and `get_config`
        show the values loaded. ``Optimizer.load`` loads any class; ``Adam.load`` requires
        an ``Adam``.

        Raises:
          ValueError: the checkpoint is incomplete, was not written by `save`, its
            variables differ from the new optimizer's (missing or extra names, or shapes),
            or a value is out of its range (the message names the variable).
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
