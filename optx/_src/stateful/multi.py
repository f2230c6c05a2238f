"""`MultiOptimizer`: routes each parameter to one of several optimizers (a `partition`)."""

from __future__ import annotations

import itertools
import numbers
import re
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

import jax

from optx._src.base import Params
from optx._src.checks import flag
from optx._src.combine import chain, partition
from optx._src.loss_scale import unscale_gradients
from optx._src.stateful.base import StatefulBase
from optx._src.stateful.config import config_arguments, deserialize, serialize
from optx._src.stateful.optimizer import Optimizer
from optx._src.tree import is_param, path_name


def _inner_check(api: str, what: str, opt: Any, error: type[Exception] = TypeError) -> None:
    if not isinstance(opt, StatefulBase) or opt._wraps_optimizers:
        raise error(
            f"`{api}` needs {what} to be an optx.optimizers optimizer (not a MultiOptimizer "
            f"or LossScaleOptimizer). Received: {what}={opt!r}."
        )


class OptimizerMap(MutableMapping[str, StatefulBase]):
    """Which optimizer each parameter takes: ``{pattern: optimizer}`` and a default (Keras's).

    A parameter whose path equals a key takes that optimizer; otherwise the one whose key
    fully matches its path (`re.fullmatch`); otherwise ``default_optimizer``. Give it to
    `MultiOptimizer`.

    Args:
      default_optimizer: the optimizer of the parameters no key matches (``None``: every
        parameter must match).
      optimizer_map: the initial ``{pattern: optimizer}``.

    Raises:
      ValueError: a key is not a string or not a regular expression, is set twice, or its
        value is not an optx optimizer (or is a `MultiOptimizer` / `LossScaleOptimizer`).

    Example:
      >>> import optx
      >>> opt_map = optx.optimizers.OptimizerMap(optx.optimizers.Adam(1e-3))
      >>> opt_map[".*encoder.*"] = optx.optimizers.SGD(1e-2)
      >>> type(opt_map.lookup("model/encoder/kernel")).__name__
      'SGD'
    """

    def __init__(
        self,
        default_optimizer: StatefulBase | None = None,
        optimizer_map: Mapping[str, StatefulBase] | None = None,
    ) -> None:
        if default_optimizer is not None:
            _inner_check("OptimizerMap", "default_optimizer", default_optimizer, ValueError)
        self.default_optimizer = default_optimizer
        self._items: dict[str, StatefulBase] = {}
        for key, opt in (optimizer_map or {}).items():
            self[key] = opt

    def __setitem__(self, key: str, optimizer: StatefulBase) -> None:
        if not isinstance(key, str):
            raise ValueError(
                f"`OptimizerMap` needs string keys (regular expressions on parameter paths). "
                f"Received: key={key!r}."
            )
        try:
            re.compile(key)
        except re.error as error:
            raise ValueError(
                f"`OptimizerMap` needs keys that are regular expressions. Received: "
                f"key={key!r} ({error})."
            ) from None
        if key in self._items:
            raise ValueError(
                f"`OptimizerMap` needs each key once. Received: key={key!r}, which is "
                f"already set (delete it first)."
            )
        _inner_check("OptimizerMap", f"the optimizer of {key!r}", optimizer, ValueError)
        self._items[key] = optimizer

    def __getitem__(self, key: str) -> StatefulBase:
        return self._items[key]

    def __delitem__(self, key: str) -> None:
        del self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def lookup(self, path: str) -> StatefulBase:
        """The optimizer of the parameter at ``path``."""
        if path in self._items:
            return self._items[path]
        matches = [k for k in self._items if re.fullmatch(k, path)]
        if len(matches) > 1:
            raise ValueError(
                f"`MultiOptimizer` needs each parameter to match at most one pattern. "
                f"Received: {path!r}, which matches {matches}."
            )
        if matches:
            return self._items[matches[0]]
        if self.default_optimizer is None:
            raise ValueError(
                f"`MultiOptimizer` needs a default_optimizer for the parameters no pattern "
                f"matches. Received: {path!r}, patterns {list(self._items)}."
            )
        return self.default_optimizer

    def __repr__(self) -> str:
        return f"OptimizerMap({self.default_optimizer!r:.60}, {dict(self._items)!r:.200})"


class MultiOptimizer(StatefulBase):
    """Routes each parameter to one of several optimizers, by its path (Keras's ``MultiOptimizer``).

    Each inner optimizer keeps its own hyperparameters, weight decay, EMA and gradient
    accumulation; together they are one `partition` whose labels are the inner
    optimizers' names.

    Args:
      optimizer_map: an `OptimizerMap`, or ``{pattern: optimizer}``: a parameter whose
        path equals a key, or
        else fully matches exactly one pattern (`re.fullmatch`, as Keras's
        ``OptimizerMap``), goes to that optimizer; or a callable ``path -> optimizer``.
      default_optimizer: the optimizer of the parameters no pattern matches; required
        with a dict unless every parameter matches.
      loss_scale_factor: divides the gradients before routing; replaces the inner
        optimizers' own factors.
      name: the prefix of the variables' keys.
      jit_compile: compile the step.

    Raises:
      TypeError: an inner optimizer is not an optx stateful optimizer, or is itself a
        `MultiOptimizer` or `LossScaleOptimizer`.
      ValueError: (at `build`) a parameter matches several patterns, or none and there is
        no default.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.MultiOptimizer(
      ...     {".*bias": optx.optimizers.SGD(0.1)}, default_optimizer=optx.optimizers.Adam(0.1)
      ... )
      >>> params = {"kernel": jnp.zeros(2), "bias": jnp.zeros(2)}
      >>> new = opt.apply({"kernel": jnp.ones(2), "bias": jnp.ones(2)}, params)
      >>> new["bias"], [o.name for o in opt.optimizers]
      (Array([-0.1, -0.1], dtype=float32), ['sgd', 'adam'])
    """

    _default_name = "multi_optimizer"
    _wraps_optimizers = True
    _tied = ("learning_rate",)
    _deferred = True

    def __init__(
        self,
        optimizer_map: Mapping[str, StatefulBase] | Callable[[str], StatefulBase],
        default_optimizer: StatefulBase | None = None,
        loss_scale_factor: float | None = None,
        name: str | None = None,
        *,
        jit_compile: bool = True,
    ) -> None:
        api = "MultiOptimizer"
        if isinstance(optimizer_map, OptimizerMap):
            if default_optimizer is not None:
                raise TypeError(
                    f"`{api}` takes the default optimizer from its OptimizerMap. Received: "
                    f"default_optimizer={default_optimizer!r:.60} besides an OptimizerMap."
                )
            self._map: Any = optimizer_map
        elif isinstance(optimizer_map, Mapping):
            for key, opt in optimizer_map.items():
                if not isinstance(key, str):
                    raise TypeError(
                        f"`{api}` needs string patterns as keys. Received: key {key!r}."
                    )
                try:
                    re.compile(key)
                except re.error as error:
                    raise ValueError(
                        f"`{api}` needs keys that are regular expressions. Received: "
                        f"key={key!r} ({error})."
                    ) from None
                _inner_check(api, f"optimizer_map[{key!r}]", opt)
            if default_optimizer is not None:
                _inner_check(api, "default_optimizer", default_optimizer)
            self._map = OptimizerMap(default_optimizer, optimizer_map)
        elif callable(optimizer_map):
            self._map = optimizer_map
        else:
            raise TypeError(
                f"`{api}` needs optimizer_map to be a dict {{pattern: optimizer}} or a callable "
                f"path -> optimizer. Received: optimizer_map={optimizer_map!r}."
            )
        if loss_scale_factor is not None and (
            isinstance(loss_scale_factor, bool)
            or not isinstance(loss_scale_factor, numbers.Real)
            or not 0 < loss_scale_factor < float("inf")
        ):
            raise ValueError(
                f"`{api}` needs loss_scale_factor to be a positive number. "
                f"Received: loss_scale_factor={loss_scale_factor!r}."
            )
        self.loss_scale_factor = loss_scale_factor
        self._initial_loss_scale = loss_scale_factor or 1.0
        self._labels: dict[str, StatefulBase] = {}
        self._label_tree: Any = None
        jit_compile = flag(api, "jit_compile", jit_compile)
        super().__init__(None, name, jit_compile=jit_compile)  # the chain comes with `build`

    @property
    def optimizers(self) -> list[StatefulBase]:
        """The inner optimizers (after `build`: those that received parameters)."""
        if self._labels:
            return list(self._labels.values())
        if not isinstance(self._map, OptimizerMap):
            return []
        found = list(self._map.values())
        if self._map.default_optimizer is not None:
            found.append(self._map.default_optimizer)
        return list({id(o): o for o in found}.values())

    def _route(self, path: str) -> StatefulBase:
        if isinstance(self._map, OptimizerMap):
            return self._map.lookup(path)
        opt = self._map(path)
        _inner_check("MultiOptimizer", f"optimizer_map({path!r})", opt)
        return opt

    def _public_names(self, state: Any) -> Any:
        # Each inner optimizer names the hyperparameters of its own part of the state.
        inner = getattr(state, "inner_states", None)
        if not isinstance(inner, dict):
            return state
        renamed = {
            label: self._labels[label]._public_names(sub) if label in self._labels else sub
            for label, sub in inner.items()
        }
        return state._replace(inner_states=renamed)

    def _prepare(self, params: Params, names_by_id: Mapping[int, str]) -> None:
        flat, treedef = jax.tree_util.tree_flatten_with_path(params, is_leaf=is_param)
        chosen = [self._route(path_name(p)) for p, _ in flat]
        labels: dict[int, str] = {}
        used: set[str] = set()
        for opt in chosen:
            if id(opt) not in labels:
                label, i = opt.name, 1
                while label in used:
                    label, i = f"{opt.name}_{i}", i + 1
                labels[id(opt)] = label
                used.add(label)
        self._labels = {labels[id(o)]: o for o in {id(o): o for o in chosen}.values()}
        for label, opt in self._labels.items():
            if self.loss_scale_factor is not None and "_config" in opt.__dict__:
                opt._config["loss_scale_factor"] = None
                opt._rebuild()
            opt._prepare(params, names_by_id)
            opt._owner = (self, label)
        self._label_tree = jax.tree.unflatten(treedef, [labels[id(o)] for o in chosen])
        self._set_transform(self._partition())

    def _partition(self, skip_aggregation: bool = False) -> Any:
        transforms = {
            label: opt._step_transform(skip_aggregation) for label, opt in self._labels.items()
        }
        tx = partition(transforms, self._label_tree)
        if self.loss_scale_factor is not None:
            tx = chain(unscale_gradients(self.loss_scale_factor), tx)
        return tx

    def _step_transform(self, skip_aggregation: bool) -> Any:
        return self._partition(True) if skip_aggregation else self.transform

    def _inner_changed(self) -> None:
        if self._label_tree is not None:
            self._replace_transform(self._partition())

    def _tie_scope(self) -> Any:
        keras = {label for label, o in self._labels.items() if "_config" in o.__dict__}

        def scope(path: tuple[Any, ...]) -> str | None:
            for a, b in itertools.pairwise(path):
                if getattr(a, "name", None) == "inner_states":
                    label = getattr(b, "key", None)
                    return label if label in keras else None
            return None

        return scope

    def _owners(self) -> Any:
        def owner(path: tuple[Any, ...]) -> tuple[str, dict[str, str], int] | None:
            for i, (a, b) in enumerate(itertools.pairwise(path)):
                if getattr(a, "name", None) == "inner_states":
                    opt = self._labels.get(getattr(b, "key", None))
                    if opt is None:
                        return None
                    aliases = {**getattr(opt, "_base_aliases", {}), **opt._slot_aliases}
                    return b.key, aliases, i + 3  # past inner_states/<label>/inner_state
            return None

        return owner

    @property
    def learning_rate(self) -> Any:
        """Not defined: each inner optimizer has its own (see `optimizers`)."""
        raise AttributeError(
            "`MultiOptimizer.learning_rate` is not defined: each inner optimizer has its own. "
            "Read or set `opt.optimizers[i].learning_rate` instead."
        )

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        raise AttributeError(
            f"`MultiOptimizer.learning_rate` cannot be set: each inner optimizer has its own. "
            f"Received: learning_rate={value!r}; set `opt.optimizers[i].learning_rate` instead."
        )

    lr = learning_rate

    def get_config(self) -> dict[str, Any]:
        """The config: ``optimizer_map``, ``default_optimizer`` (serialised), and the rest."""
        if isinstance(self._map, OptimizerMap):
            mapping: Any = {k: serialize(v) for k, v in self._map.items()}
            default = self._map.default_optimizer
        else:
            mapping, default = self._map, None
        return {
            "optimizer_map": mapping,
            "default_optimizer": None if default is None else serialize(default),
            "loss_scale_factor": self.loss_scale_factor,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any], custom_objects: Any = None) -> StatefulBase:
        """Rebuilds a `MultiOptimizer` from `get_config`."""
        api = "MultiOptimizer.from_config"
        config = config_arguments(api, config, cls, required=("optimizer_map",))
        mapping = config.pop("optimizer_map")
        if isinstance(mapping, Mapping):
            mapping = {k: deserialize(v, custom_objects) for k, v in mapping.items()}
        default = config.pop("default_optimizer", None)
        if default is not None:
            default = deserialize(default, custom_objects)
        return cls(mapping, default, **config)

    def _repr_args(self) -> str:
        inner = ", ".join(f"{o.name}" for o in self.optimizers)
        return f"name={self.name!r}, optimizers=[{inner}]"


# A `MultiOptimizer` is an `optx.optimizers.Optimizer` to `isinstance`, as in Keras, without
# inheriting the Keras arguments it does not take.
Optimizer.register(MultiOptimizer)
