"""Slots and weights of the stateful wrapper: `get_slot`, `get_weights`, save and load.

Every read holds the optimizer's lock and returns copies: a step in another thread donates
the state's buffers. Every load is checked as the constructor checks its arguments (each
hyperparameter against its declared range; counters are integers >= 0) before the state is
replaced, so a failed load changes nothing.
"""

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
        """The ``slot`` (``"mu"``, Keras's ``"momentum"``) of the parameter at ``param_path``.

        A copy, which no later step changes.
        """
        with self._lock:  # see StatefulBase: thread safety
            layout = self._require_built("get_slot")
            key = layout.slots.get((param_path, slot))
            if key is None:
                raise KeyError(
                    f"`get_slot` got no slot {slot!r} for parameter {param_path!r}. "
                    f"Received: param_path={param_path!r}, slot={slot!r}. Slots: "
                    f"{', '.join(repr(s) for s in self.get_slot_names()) or 'none'}; "
                    f"parameters: {', '.join(map(repr, self._params_paths))}."
                )
            return jnp.array(self.variables[key], copy=True)

    def get_slot_names(self) -> list[str]:
        """The slot names, in order of first appearance."""
        layout = self._require_built("get_slot_names")
        return list(dict.fromkeys(slot for _, slot in layout.slots))

    def get_weights(self) -> list[np.ndarray]:
        """The variables' values as NumPy arrays (copies of one state), in `variables` order."""
        with self._lock:
            return [np.array(v) for v in self.variables.values()]

    def set_weights(self, weights: list[Any]) -> None:
        """Sets the variables from a list in `variables` order (checked as `load_own_variables`)."""
        with self._lock:
            self._require_built("set_weights")
            keys = list(self.variables)
            if len(weights) != len(keys):
                raise ValueError(
                    f"`set_weights` needs {len(keys)} arrays, one per variable. "
                    f"Received: {len(weights)} arrays."
                )
            self._load(dict(zip(keys, weights, strict=True)), "set_weights")

    def save_own_variables(self, store: dict[str, Any]) -> None:
        """Writes every variable into ``store`` under its name (NumPy copies of one state)."""
        with self._lock:
            values = {key: np.array(value) for key, value in self.variables.items()}
        store.update(values)

    def load_own_variables(self, store: Mapping[str, Any]) -> None:
        """Reads every variable from ``store`` by name, checked; then the state holds them.

        Each value needs the shape and dtype of the variable it replaces (``iterations``
        may be of any integer dtype); each hyperparameter must be in the range its
        constructor argument accepts (a learning rate finite and >= 0, ``beta_1`` in
        [0, 1), ...); a decay's ``.../residual`` must be what float32 rounded off its value;
        step counts must be integers >= 0. The attributes and `get_config` then show the
        values loaded. A store of an earlier release (which kept each decay ``b`` as its
        complement ``1 - b``, under another key) is read too.

        Raises:
          ValueError: a key is missing or extra, or a value is not as described above
            (the message names the variable). Nothing is changed then.

        Example:
          >>> import jax.numpy as jnp, numpy as np, optx
          >>> opt = optx.optimizers.Adam(0.1)
          >>> opt.build({"w": jnp.zeros(2)})
          >>> store = {}
          >>> opt.save_own_variables(store)
          >>> store["beta_1"] = np.float32(0.5)
          >>> opt.load_own_variables(store)
          >>> opt.beta_1, opt.get_config()["beta_1"]
          (0.5, 0.5)
          >>> store["learning_rate"] = np.float32(-1.0)
          >>> opt.load_own_variables(store)
          Traceback (most recent call last):
          ValueError: `load_own_variables` needs learning_rate finite and >= 0. Received: ...
        """
        with self._lock:
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
        layout = self._require_built(api)
        new: dict[str, np.ndarray] = {}
        for key, old in current.items():
            value = np.asarray(values[key])
            if key == ITERATIONS:
                value = check_counter(api, key, value, old)
            elif value.shape != old.shape or value.dtype != old.dtype:
                raise ValueError(
                    f"`{api}` needs {key!r} of shape {old.shape} and dtype {old.dtype}. "
                    f"Received: shape {value.shape} and dtype {value.dtype}."
                )
            elif key.endswith("count") and np.issubdtype(value.dtype, np.integer):
                value = check_counter(api, key, value, old)
            new[key] = value
        check_hyperparams(api, layout, new)
        # Sharded parameters: back onto the shardings the state had.
        placed = getattr(self, "_placement", None) is not None
        arrays = {
            k: jax.device_put(v, current[k].sharding) if placed else jnp.asarray(v)
            for k, v in new.items()
        }
        self._count = arrays.pop(ITERATIONS)
        self._state = layout.from_dict(api, arrays)
        self._loaded()

    def _loaded(self) -> None:
        """Hook run after a load: the `Optimizer` classes show the values as attributes."""


def check_counter(api: str, key: str, value: np.ndarray, old: Any) -> np.ndarray:
    """A step count as the state holds it: an integer >= 0 that fits its dtype."""
    top = np.iinfo(old.dtype).max
    if (
        value.shape != old.shape
        or not np.issubdtype(value.dtype, np.integer)
        or np.any(value < 0)
        or np.any(value > top)
    ):
        shown = value.item() if value.size == 1 else f"an array of shape {value.shape}"
        raise ValueError(
            f"`{api}` needs {key} to be an integer in [0, {top}] (a step count, of shape "
            f"{old.shape}). Received: {key}={shown!r} of dtype {value.dtype}."
        )
    return value.astype(old.dtype)


def check_hyperparams(api: str, layout: Layout, values: Mapping[str, Any]) -> None:
    """Raises a `ValueError` for a hyperparameter in ``values`` that its declaration refuses.

    Each value in force is checked against its declared range (the rule its transform's
    constructor and `optx.set_hyperparams` apply), a schedule's scale must be finite, and a
    decay's residual must be what float32 rounded off its value (at most one float32 ulp of
    it); a decay that float32 rounded out of its range is checked as the number it stands
    for (its value plus residual). The message names the variable's key.
    """
    if not layout.found:
        return
    names = {(f.node_path, f.index): key for key, fs in layout.found.items() for f in fs}
    state = layout.from_dict(api, {k: v for k, v in values.items() if k != ITERATIONS})
    for node_path, node in hp.nodes(state):
        entries = node.entries
        # A decay's value plus its residual, the number it stands for (float32 rounds a
        # decay of 1 - 1e-9 up to 1, outside [0, 1)).
        exact: list[Any] = [None] * len(entries)
        if isinstance(node, hp.HyperParams):
            decays = [i for i, e in enumerate(entries) if e.decay]
            for i, residual in zip(decays, node.residuals, strict=True):
                key = names.get((node_path, i), entries[i].name)
                r = np.asarray(residual, np.float64)
                value = np.asarray(node.in_force[i], np.float64)
                bound = np.spacing(np.abs(np.asarray(node.in_force[i], np.float32)))
                if not (np.all(np.isfinite(r)) and np.all(np.abs(r) <= bound)):
                    raise ValueError(
                        f"`{api}` needs {key}/residual to be what float32 rounded off {key} "
                        f"(finite, at most {float(np.max(bound)):.3g} in magnitude). "
                        f"Received: {key}/residual={_shown(r)}. Save it with its value "
                        f"(`save_own_variables`), or set it to 0."
                    )
                exact[i] = value + r
            scheduled = [i for i, e in enumerate(entries) if e.scheduled]
            for i, scale in zip(scheduled, node.scales, strict=True):
                key = names.get((node_path, i), entries[i].name)
                for v in np.asarray(scale, np.float64).ravel():
                    hp.validate(api, f"{key}/scale", float(v))
        # The rule of the constructor and of `optx.set_hyperparams` (optax's injected
        # hyperparameters: any finite value).
        for i, entry in enumerate(entries):
            key = names.get((node_path, i), entry.name)
            stored = np.asarray(node.in_force[i], np.float64).ravel()
            given = stored if exact[i] is None else np.ravel(exact[i])
            for v, e in zip(stored, given, strict=True):
                try:
                    hp.validate(api, key, float(v), entry.rule)
                except ValueError:
                    if e == v or not entry.rule.check(float(e)):
                        raise


def _shown(value: np.ndarray) -> Any:
    return float(value) if value.size == 1 else value.tolist()
