"""Slots and weights of the stateful wrapper: `get_slot`, `get_weights`, save and load."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import hyperparams as hp
from optx._src.stateful.layout import Layout, check_keys
from optx._src.stateful.step import ITERATIONS


class WeightsMixin:
    """`Optimizer`'s access to its variables by slot, by position and by name."""

    if TYPE_CHECKING:
        _count: jax.Array
        _state: Any
        _params_paths: list[str]
        _lock: Any

        @property
        def variables(self) -> dict[str, jax.Array]: ...

        def _require_built(self, api: str) -> Layout: ...

    def get_slot(self, param_path: str, slot: str) -> jax.Array:
        """The ``slot`` (``"mu"``, Keras's ``"momentum"``) of the parameter at ``param_path``."""
        layout = self._require_built("get_slot")
        key = layout.slots.get((param_path, slot))
        if key is None:
            raise KeyError(
                f"`get_slot` got no slot {slot!r} for parameter {param_path!r}. "
                f"Received: param_path={param_path!r}, slot={slot!r}. Slots: "
                f"{', '.join(repr(s) for s in self.get_slot_names()) or 'none'}; parameters: "
                f"{', '.join(map(repr, self._params_paths))}."
            )
        return self.variables[key]

    def get_slot_names(self) -> list[str]:
        """The slot names, in order of first appearance."""
        layout = self._require_built("get_slot_names")
        return list(dict.fromkeys(slot for _, slot in layout.slots))

    def get_weights(self) -> list[np.ndarray]:
        """The variables' values as NumPy arrays, in `variables` order."""
        return [np.asarray(v) for v in self.variables.values()]

    def set_weights(self, weights: list[Any]) -> None:
        """Sets the variables from a list in `variables` order (lengths and shapes checked)."""
        self._require_built("set_weights")
        keys = list(self.variables)
        if len(weights) != len(keys):
            raise ValueError(
                f"`set_weights` needs {len(keys)} arrays, one per variable. "
                f"Received: {len(weights)} arrays."
            )
        self._load(dict(zip(keys, weights, strict=True)), "set_weights")

    def save_own_variables(self, store: dict[str, Any]) -> None:
        """Writes every variable into ``store`` under its name."""
        for key, value in self.variables.items():
            store[key] = np.asarray(value)

    def load_own_variables(self, store: Mapping[str, Any]) -> None:
        """Reads every variable from ``store`` by name; a missing or extra key is an error."""
        layout = self._require_built("load_own_variables")
        keys = [ITERATIONS, *layout.order]
        if hp.is_legacy(store):  # an earlier release's names and stored form
            store = layout.upgrade_legacy(store, self.variables)
        check_keys("load_own_variables", keys, store)
        self._load({k: store[k] for k in keys}, "load_own_variables")

    def _load(self, values: Mapping[str, Any], api: str) -> None:
        with self._lock:  # see StatefulBase: thread safety
            self._load_locked(values, api)

    def _load_locked(self, values: Mapping[str, Any], api: str) -> None:
        current = self.variables
        new = {}
        for key, old in current.items():
            value = np.asarray(values[key])
            if value.shape != old.shape or value.dtype != old.dtype:
                raise ValueError(
                    f"`{api}` needs {key!r} of shape {old.shape} and dtype {old.dtype}. "
                    f"Received: shape {value.shape} and dtype {value.dtype}."
                )
            # Sharded parameters: back onto the shardings the state had.
            placed = getattr(self, "_placement", None) is not None
            new[key] = jax.device_put(value, old.sharding) if placed else jnp.asarray(value)
        layout = self._require_built(api)
        self._count = new.pop(ITERATIONS)
        self._state = layout.from_dict(api, new)
