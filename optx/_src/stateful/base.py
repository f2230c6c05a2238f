"""`StatefulBase`: the state, layout and compiled step shared by every stateful optimizer."""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import hyperparams as hp
from optx._src import reprs
from optx._src.base import GradientTransformationLike, Params
from optx._src.sharding import sharded_init
from optx._src.stateful import views
from optx._src.stateful.checkpoint import CheckpointMixin
from optx._src.stateful.config import config_arguments
from optx._src.stateful.gradients import GradientsMixin
from optx._src.stateful.layout import Layout, carry_over, own_buffers
from optx._src.stateful.locking import CopyMixin, locked
from optx._src.stateful.step import ITERATIONS, StepMixin, check_dtypes, spec
from optx._src.stateful.variable import _is_variable, _value
from optx._src.stateful.weights import WeightsMixin
from optx._src.tree import is_param, path_name


class StatefulBase(
    CopyMixin, StepMixin, GradientsMixin, WeightsMixin, CheckpointMixin, metaclass=abc.ABCMeta
):
    """The state, its flat view and the compiled step shared by every stateful optimizer.

    The state is the transform's own, viewed as a flat dict (`variables`) keyed by
    ``"<name>/<slot>/<param path>"`` plus ``"iterations"`` and the hyperparameters. A step is
    ``transform.update`` and `optx.apply_updates` under one `jax.jit`, compiled once per
    chain and parameter structure; the optimizer's state buffers are donated to it. The
    public classes are `optx.optimizers.Optimizer` (and its subclasses), `MultiOptimizer`
    and `LossScaleOptimizer`.

    Thread safety: an optimizer may be shared between threads. Each one holds a reentrant
    lock (`threading.RLock`) that serialises whatever reads and replaces its state: `apply`,
    `apply_gradients` (reading the variables, stepping, assigning them), `stateless_apply`,
    `build`, setting a hyperparameter, loading variables, and reading `variables`,
    `iterations` or a hyperparameter. Two threads stepping one optimizer apply every step
    once, one after the other; `iterations`, hyperparameters, `get_weights`,
    `save_own_variables`, `get_slot` and ``repr`` read meanwhile are copies of one
    consistent state. The arrays `variables` returns are the state's own buffers, which the
    next step donates: read them in the thread that steps (or between steps).

    Copies and pickles: `copy.copy`, `copy.deepcopy` and `pickle` give an independent
    optimizer (its own state buffers, lock and configuration) at any time, built or not;
    it continues to the same numbers. Compiled steps are not pickled: the copy compiles
    its own on its first step (or finds them in JAX's cache, for an equal chain).

    Args:
      transform: any transform with optax's ``init``/``update`` protocol (optx's, optax's).
      name: the prefix of the variables' keys; ``None`` uses ``"optimizer"``.
      jit_compile: compile the step with `jax.jit`; ``False`` runs it eagerly (debugging).
    """

    _tied: ClassVar[tuple[str, ...]] = ()
    _slot_aliases: ClassVar[dict[str, str]] = {}
    _default_name: ClassVar[str] = "optimizer"
    # A subclass whose chain depends on the parameters passes `None` and sets it in `_prepare`.
    _deferred: ClassVar[bool] = False
    # MultiOptimizer and LossScaleOptimizer, which nest no further.
    _wraps_optimizers: ClassVar[bool] = False
    _owner: tuple[StatefulBase, str] | None = None
    # (param shardings, state shardings, replicated) of parameters on several devices.
    _placement: Any = None

    def __init__(
        self,
        transform: GradientTransformationLike,
        name: str | None = None,
        *,
        jit_compile: bool = True,
    ) -> None:
        self._lock = threading.RLock()
        deferred = self._deferred and transform is None
        if not deferred and not (
            callable(getattr(transform, "init", None))
            and callable(getattr(transform, "update", None))
        ):
            raise TypeError(
                f"`Optimizer` needs a transform with `init` and `update` (optx's or optax's). "
                f"Received: transform={transform!r}."
            )
        if name is not None and not isinstance(name, str):
            raise TypeError(
                f"`{type(self).__name__}` needs name to be a string. "
                f"Received: name={reprs.short(name)}."
            )
        self.name = name or self._default_name
        self.jit_compile = bool(jit_compile)
        self._set_transform(transform)
        self._state: Any = None
        self._count: jax.Array = jnp.zeros((), jnp.int32)
        self._layout: Layout | None = None
        self._spec: Any = None
        self._treedef: Any = None
        # (param avals, grad avals) of the last inputs that passed the full checks.
        self._checked: Any = None
        self._params_paths: list[str] = []
        self._names_by_id: dict[int, str] = {}
        self._grad_fns: dict[Any, Callable[..., Any]] = {}

    # -- building -------------------------------------------------------------------------

    def _set_transform(self, transform: GradientTransformationLike) -> None:
        self.transform = transform
        self._compiled: dict[str, Callable[..., Any]] = {}

    @locked
    def _replace_transform(self, transform: GradientTransformationLike) -> None:
        """Swaps the chain; a built optimizer carries its state over, key by key."""
        if not self.built:
            self._set_transform(transform)
            return
        old = dict(self.variables)
        was_scheduled = _scheduled(self._require_built("rebuild"))
        self._set_transform(transform)
        leaves = [jnp.zeros(shape, dtype) for _, shape, dtype in self._spec]
        params = jax.tree.unflatten(self._treedef, leaves)
        if self._placement is not None:
            params = jax.device_put(params, self._placement[0])
        self._state, _, self._placement = self._init(transform, params)
        self._record(params)
        fresh = self.variables
        values = carry_over(old, fresh)
        layout = self._require_built("rebuild")
        # A hyperparameter that became a schedule, or a constant, starts as the new
        # configuration says (its value in force, scale and count), not as it was.
        for key, scheduled in _scheduled(layout).items():
            if was_scheduled.get(key, scheduled) != scheduled:
                for k in (key, f"{key}/scale", f"{key}/count"):
                    if k in fresh:
                        values[k] = fresh[k]
        # A schedule new to the chain continues at the steps taken, as if it had been there.
        steps = self._steps_taken() // self._every_k()
        for key in layout.schedule_counts:
            if key not in old or not was_scheduled.get(key.rpartition("/")[0], True):
                values[key] = jnp.asarray(steps, values[key].dtype)
        self._load(values, "rebuild")

    def _inner_changed(self) -> None:
        """Called by an inner optimizer whose chain changed (see `MultiOptimizer`)."""

    @locked
    def _steps_taken(self) -> jax.Array:
        """The step count schedules see (steps applied): a copy, which no step donates."""
        return jnp.array(self._count, copy=True)

    @property
    def built(self) -> bool:
        """Whether `build` has run (it runs on the first step)."""
        return self._state is not None

    @locked
    def build(self, params: Params) -> None:
        """Creates the state for ``params`` (a pytree of arrays, or of `Variable` objects).

        A second call does nothing, as in Keras.
        """
        if self.built:
            return
        names = dict(self._names_by_id)
        for path, leaf in jax.tree_util.tree_flatten_with_path(params, is_leaf=_is_variable)[0]:
            names.setdefault(id(leaf), path_name(path))
        params = jax.tree.map(
            lambda v: _value(v) if _is_variable(v) else v, params, is_leaf=_is_variable
        )
        check_dtypes("build", params)
        self._prepare(params, names)
        self._names_by_id = {}
        # Sharded parameters: each slot on its parameter's sharding.
        state, self._count, self._placement = self._init(self.transform, params)
        self._state = own_buffers(state, params)  # each donated leaf its own buffer
        self._record(params)

    def _init(self, transform: GradientTransformationLike, params: Params) -> tuple[Any, ...]:
        """`sharded_init`, the state (and its shardings) named by `_public_names`."""
        state, count, placement = sharded_init(transform, params)
        if placement is not None:
            placement = (placement[0], self._public_names(placement[1]), placement[2])
        return self._public_names(state), count, placement

    def _public_names(self, state: Any) -> Any:
        """Hook: the state as built, its hyperparameters named as the user knows them."""
        return state

    def _prepare(self, params: Params, names_by_id: Mapping[int, str]) -> None:
        """Hook run by `build` before ``init``, for options that depend on the parameters.

        ``names_by_id`` maps ``id(object)`` to the path of each parameter (arrays and
        variables), for options given by identity.
        """

    def _record(self, params: Params) -> None:
        self._treedef = jax.tree.structure(params)
        self._spec = spec(params)
        self._checked = None
        self._params_paths = [
            path_name(p)
            for p, _ in jax.tree_util.tree_flatten_with_path(params, is_leaf=is_param)[0]
        ]
        aliases = {**getattr(self, "_base_aliases", {}), **self._slot_aliases}
        self._layout = Layout.of(
            self._state, params, self.name, self._tied, aliases, self._tie_scope(), self._owners()
        )

    def _tie_scope(self) -> Any:
        """See `Layout.of`; ``None`` ties names across the whole state."""
        return None

    def _owners(self) -> Any:
        """See `Layout.of`; ``None`` names every key after this optimizer."""
        return None

    def _require_built(self, api: str) -> Layout:
        if self._layout is None:
            raise ValueError(
                f"`{api}` needs a built optimizer. Call `optimizer.build(params)` first "
                f"(`apply` builds on its first call). Received: an optimizer {self.name!r} "
                f"that was never built."
            )
        return self._layout

    # -- stepping -------------------------------------------------------------------------

    @locked
    def apply(self, grads: Any, params: Params) -> Params:
        """Applies one step of ``grads`` to ``params`` and returns the new parameters.

        Builds the optimizer on the first call. ``params`` are not donated (the caller may
        keep them); the optimizer's own state is.

        Args:
          grads: gradients, with the structure of ``params``.
          params: a pytree of arrays.

        Returns:
          The new parameters.

        Raises:
          ValueError: ``params`` differ from those the optimizer was built with, or
            ``grads`` do not match them.
        """
        self.build(params)
        if not self.built:  # a subclass's `build` that does not call `super().build`
            StatefulBase.build(self, params)
        nested = self._check_inputs(self.__dict__.get("_calling") or "apply", grads, params)
        self._state, self._count, new_params = self._function("step", nested=nested)(
            self._state, self._count, grads, params
        )
        return new_params

    def _clip_transform(self) -> Any:
        """The clipping of the gradients, or ``None`` (the Keras classes override it)."""
        return None

    def _step_transform(self, skip_aggregation: bool) -> GradientTransformationLike:
        """The chain a step runs: without its `aggregate_gradients` if skipped (same state)."""
        del skip_aggregation
        return self.transform

    # -- state access ---------------------------------------------------------------------

    @property
    @locked
    def variables(self) -> dict[str, jax.Array]:
        """The state as ``{name: array}`` (a snapshot; the next step donates its buffers)."""
        layout = self._require_built("variables") if self.built else None
        if layout is None:
            return {}
        return {ITERATIONS: self._count, **layout.to_dict(self._state)}

    @property
    def iterations(self) -> jax.Array:
        """The number of steps applied (int32; Keras counts accumulated steps with accumulation).

        Inside a custom ``update_step``, the number of steps before this one (traced).
        """
        tracing = self.__dict__.get("_tracing_iterations")
        if tracing is not None:
            return tracing
        if self._owner is not None and self._owner[0].built:
            # Held by a MultiOptimizer or LossScaleOptimizer: the steps it applied to us.
            # (Its lock, not ours: a thread stepping it may read our attributes.)
            return self._owner[0]._steps_taken() // self._every_k()
        return self._steps_taken() // self._every_k()

    def _every_k(self) -> int:
        return 1

    def _hyper_keys(self, name: str) -> list[str]:
        layout = self._require_built(f"{name}")
        return [k for k in layout.hyperparams if k == name or k.endswith("/" + name)]

    @property
    def learning_rate(self) -> Any:
        """The learning rate (a float32 array); settable with a number, never recompiling."""
        return self._get_hyper("learning_rate")

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._set_hyper("learning_rate", value)

    lr = learning_rate

    @locked
    def _get_hyper(self, name: str) -> Any:
        if not self.built:
            raise ValueError(
                f"`{name}` of an optimizer wrapping a transform is read from its state: "
                f"build it first. Received: an optimizer {self.name!r} that was never built."
            )
        keys = self._hyper_keys(name)
        if len(keys) != 1:
            fix = (
                "read and write `variables` by those keys instead."
                if keys
                else "give the transform one (an optx optimizer, or optax's `inject_hyperparams`)."
            )
            raise AttributeError(
                f"`{name}` needs exactly one hyperparameter of that name in the state. "
                f"Received: a state holding {len(keys)} ({', '.join(map(repr, keys)) or 'none'}); "
                f"{fix}"
            )
        return jnp.array(self._hyper_value(keys[0]), copy=True)

    def _hyper_value(self, key: str) -> Any:
        """The value of the hyperparameter at ``key`` of the built layout.

        Its variable, or where its node is packed (`HyperParams.pack`), read from the state.
        """
        found = self._require_built(key).found[key][0]
        return hp.value_of(self._state, found) if found.packed else self.variables[key]

    def _set_hyper(self, name: str, value: Any) -> None:
        self._get_hyper(name)
        (key,) = self._hyper_keys(name)
        self._write(key, value)

    @locked
    def _write(self, key: str, value: Any, rule: Any = None) -> None:
        """Writes the public ``value`` of the hyperparameter held at ``key`` in the state."""
        layout = self._require_built(key)
        if isinstance(value, jax.core.Tracer) or np.ndim(value) != 0:
            raise TypeError(f"`{key}` needs a number. Received: {key}={value!r}.")
        if rule is not None:
            hp.validate(self.name, key.rpartition("/")[2], value, rule)
        state = self._state
        for found in layout.found[key]:
            state = hp.set_found(state, found, value, self.name)
        self._state = state

    def finalize_variable_values(self, params: Any) -> Any:
        """The parameters replaced by their moving average, where the state keeps one.

        Given `Variable` objects (a list or pytree), assigns them in place instead.
        """
        return views.finalize(self, params)

    def loss_scale(self) -> jax.Array:
        """The factor `scale_loss` multiplies by (1 without loss scaling)."""
        return views.loss_scale(self._state) if self.built else views.initial_loss_scale(self)

    def scale_loss(self, loss: Any) -> jax.Array:
        """``loss`` times the loss-scale factor (``loss`` itself without loss scaling)."""
        return jnp.asarray(loss) * self.loss_scale()

    def exclude_from_weight_decay(
        self, var_list: Iterable[Any] | None = None, var_names: Iterable[str] | None = None
    ) -> None:
        """Only the Keras classes hold a weight decay to exclude variables from."""
        raise TypeError(
            f"`exclude_from_weight_decay` needs a Keras-style optimizer class "
            f"(optx.optimizers.Adam, ...). Received: a wrapper of {self.transform!r}; "
            f"mask its weight-decay transform instead."
        )

    # -- config and display ---------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments (the transform itself for this generic wrapper)."""
        return {"name": self.name, "transform": self.transform, "jit_compile": self.jit_compile}

    @classmethod
    def from_config(cls, config: Mapping[str, Any], custom_objects: Any = None) -> StatefulBase:
        """Rebuilds an optimizer from `get_config`'s output."""
        del custom_objects
        return cls(**config_arguments(f"{cls.__name__}.from_config", config, cls))

    def _repr_args(self) -> str:
        return f"{self.transform!r}, name={self.name!r}"

    def __repr__(self) -> str:
        return views.text(self)

    def _repr_html_(self) -> str:
        return views.html(self)


def _scheduled(layout: Any) -> dict[str, bool]:
    """``{hyperparameter key: whether it is scheduled}`` of a layout."""
    return {key: founds[0].entry.scheduled for key, founds in layout.found.items()}
