"""`StatefulBase`: the state, layout and compiled step shared by every stateful optimizer."""

from __future__ import annotations

import abc
import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from optx._src import hyperparams as hp
from optx._src import reprs
from optx._src.base import GradientTransformationLike, Params
from optx._src.compiler import compiler_options
from optx._src.sharding import sharded_init
from optx._src.stateful import views
from optx._src.stateful.checkpoint import CheckpointMixin
from optx._src.stateful.gradients import GradientsMixin
from optx._src.stateful.keras_args import config_arguments
from optx._src.stateful.layout import Layout, carry_over, check_keys, own_buffers
from optx._src.stateful.step import (
    ITERATIONS,
    STEPS,
    check_dtypes,
    check_grads,
    check_params,
    jitted,
    missing_gradients,
    spec,
)
from optx._src.stateful.variable import _assign, _is_variable, _value
from optx._src.stateful.weights import WeightsMixin
from optx._src.tree import is_param, path_name


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Runs ``method`` holding the optimizer's lock (see `StatefulBase`, thread safety)."""

    @functools.wraps(method)
    def locked(self: StatefulBase, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class StatefulBase(GradientsMixin, WeightsMixin, CheckpointMixin, metaclass=abc.ABCMeta):
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
    once, one after the other; `iterations` and hyperparameters read meanwhile are copies
    of one consistent state. The arrays `variables` returns are the state's own buffers,
    which the next step donates: read them in the thread that steps (or between steps). A
    copy (`copy.deepcopy`) gets a lock of its own.

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

    def __getstate__(self) -> dict[str, Any]:
        # A lock cannot be copied or pickled; a copy gets a new one (`__setstate__`).
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__["_lock"] = threading.RLock()

    @_locked
    def _replace_transform(self, transform: GradientTransformationLike) -> None:
        """Swaps the chain; a built optimizer carries its state over, key by key."""
        if not self.built:
            self._set_transform(transform)
            return
        old = dict(self.variables)
        self._set_transform(transform)
        leaves = [jnp.zeros(shape, dtype) for _, shape, dtype in self._spec]
        params = jax.tree.unflatten(self._treedef, leaves)
        if self._placement is not None:
            params = jax.device_put(params, self._placement[0])
        self._state, _, self._placement = sharded_init(transform, params)
        self._record(params)
        self._load(carry_over(old, self.variables), "rebuild")

    def _inner_changed(self) -> None:
        """Called by an inner optimizer whose chain changed (see `MultiOptimizer`)."""

    @_locked
    def _steps_taken(self) -> jax.Array:
        """The step count schedules see (steps applied): a copy, which no step donates."""
        return jnp.array(self._count, copy=True)

    @property
    def built(self) -> bool:
        """Whether `build` has run (it runs on the first step)."""
        return self._state is not None

    @_locked
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
        # Sharded parameters: each slot on its parameter's sharding (DESIGN D8).
        state, self._count, self._placement = sharded_init(self.transform, params)
        self._state = own_buffers(state, params)  # each donated leaf its own buffer
        self._record(params)

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

    def _function(
        self, kind: str, skip_aggregation: bool = False, nested: bool = False
    ) -> Callable[..., Any]:
        """The step (``"step"``: on the state; ``"stateless"``: on the variables' dict).

        ``nested``: called inside another transformation (``jit``, ``pmap``), where XLA
        options cannot be given (the outer ``jit`` compiles the program).
        """
        key = f"{kind}/skip_aggregation" if skip_aggregation else kind
        key += "/nested" if nested else ""
        fn = self._compiled.get(key)
        if fn is None:
            statics: tuple[Any, ...] = (self._step_transform(skip_aggregation),)
            if kind == "stateless":
                statics += (self._require_built("stateless_apply"),)
            try:
                hash(statics)
                hashable = True
            except TypeError:
                hashable = False
            # XLA options for a donated step (`optx.compiler_options`), for the default backend.
            options = {} if nested else compiler_options()
            if not self.jit_compile:
                fn = functools.partial(STEPS[kind], *statics)
            elif self._placement is not None:
                fn = self._sharded_step(kind, statics, options)
            elif hashable:
                # Shared by every optimizer with an equal chain: a rebuilt optimizer (a
                # re-run notebook cell) hits the compile cache.
                fn = functools.partial(jitted(kind, tuple(sorted(options.items()))), *statics)
            else:
                # Argument numbers of the partial: the statics are bound already.
                donate = (0, 1) if kind == "step" else (0, 2)
                fn = jax.jit(
                    functools.partial(STEPS[kind], *statics),
                    donate_argnums=donate,
                    compiler_options=options or None,
                )
            self._compiled[key] = fn
        return fn

    def _sharded_step(
        self, kind: str, statics: tuple[Any, ...], options: dict[str, Any]
    ) -> Callable[..., Any]:
        """The step pinned to the shardings `build` found: outputs keep them step after step."""
        params_sh, state_sh, replicated = self._placement
        if kind == "step":  # (state, count, grads, params) -> (state, count, params)
            donate, out = (0, 1), (state_sh, replicated, params_sh)
        else:  # (variables, grads, params) -> (variables, params)
            layout = self._require_built("stateless_apply")
            variables = {ITERATIONS: replicated, **layout.to_dict(state_sh)}
            donate, out = (0, 2), (variables, params_sh)
        return jax.jit(
            functools.partial(STEPS[kind], *statics),
            donate_argnums=donate,
            out_shardings=out,
            compiler_options=options or None,
        )

    @_locked
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

    def _check_inputs(self, api: str, grads: Any, params: Params) -> bool:
        """Raises unless ``params`` are those built and ``grads`` match them; warns of None.

        Returns whether the inputs are traced (the call is inside ``jit``, ``pmap``, ...).

        The full checks walk the trees in Python (several microseconds per leaf). Their
        verdict depends only on the trees' structure and each leaf's shape and dtype, so
        inputs whose structure and abstract values (`aval`, interned by JAX: compared by
        identity) equal those of the last inputs that passed are accepted after one C++
        flatten of each tree.
        """
        p_leaves, p_def = jax.tree.flatten(params)
        g_leaves, g_def = jax.tree.flatten(grads)
        nested = any(isinstance(x[0], Tracer) for x in (p_leaves, g_leaves) if x)
        same_trees = p_def == self._treedef and g_def == p_def  # no None gradient either
        try:
            avals = ([x.aval for x in p_leaves], [g.aval for g in g_leaves])
        except AttributeError:  # numbers or NumPy arrays: no aval
            avals = None
        if same_trees and avals is not None and avals == self._checked:
            return nested
        check_params(api, params, self._treedef, self._spec)
        check_grads(api, grads, params)
        missing_gradients(api, grads, params)
        if same_trees and avals is not None:
            self._checked = avals
        return nested

    @_locked
    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]]) -> jax.Array:
        """Applies ``(gradient, variable)`` pairs to the variables in place; Keras's API.

        Variables are `Variable` objects or Flax ``nnx.Variable`` objects; their names (or
        positions) are their parameter paths. Returns the new `iterations`.
        """
        pairs = list(grads_and_vars)
        for i, (_, var) in enumerate(pairs):
            if not _is_variable(var):
                raise TypeError(
                    f"`apply_gradients` needs (gradient, variable) pairs whose variables are "
                    f"optx.optimizers.Variable or flax.nnx.Variable. Received: pair {i} with "
                    f"a {type(var).__name__}."
                )
        names = views.variable_names([v for _, v in pairs])
        if not self.built:
            self._names_by_id = {id(v): n for n, (_, v) in zip(names, pairs, strict=True)}
        params = {n: _value(v) for n, (_, v) in zip(names, pairs, strict=True)}
        grads = {n: g for n, (g, _) in zip(names, pairs, strict=True)}
        self._calling = "apply_gradients"
        try:
            new = self.apply(grads, params)
        finally:
            self._calling = None
        for n, (_, var) in zip(names, pairs, strict=True):
            _assign(var, new[n])
        return self.iterations

    def _clip_transform(self) -> Any:
        """The clipping of the gradients, or ``None`` (the Keras classes override it)."""
        return None

    def _step_transform(self, skip_aggregation: bool) -> GradientTransformationLike:
        """The chain a step runs: without its `aggregate_gradients` if skipped (same state)."""
        del skip_aggregation
        return self.transform

    @_locked
    def stateless_apply(
        self,
        optimizer_variables: Mapping[str, Any],
        grads: Any,
        params: Params,
        skip_gradients_aggregation: bool = False,
    ) -> tuple[Params, dict[str, Any]]:
        """The pure step: ``(variables, grads, params) -> (new params, new variables)``.

        ``optimizer_variables`` is a dict like `variables`. Both it and ``params`` are
        donated to the compiled step: do not use them afterwards.

        With ``axis_name=`` set, the step averages ``grads`` over that axis first, so it
        runs inside `jax.pmap` / `jax.shard_map`; ``skip_gradients_aggregation=True`` skips
        that (the gradients are already reduced). Each variant is compiled once.

        Raises:
          ValueError: the optimizer is not built, the variables' keys differ from
            `variables`', or the parameters differ from those it was built with.
        """
        layout = self._require_built("stateless_apply")
        if not isinstance(optimizer_variables, Mapping):
            raise TypeError(
                f"`stateless_apply` needs optimizer_variables to be a dict keyed like "
                f"`optimizer.variables`. Received: a {type(optimizer_variables).__name__}."
            )
        check_keys("stateless_apply", [ITERATIONS, *layout.order], optimizer_variables)
        nested = self._check_inputs("stateless_apply", grads, params)
        # The optimizer's own buffers (`variables` hands them out) are copied, not donated:
        # the optimizer stays usable after a loop started from `opt.variables`.
        own = set(map(id, jax.tree.leaves((self._state, self._count))))
        variables = dict(optimizer_variables)
        if not own.isdisjoint(map(id, variables.values())):  # built-ins: no Python loop
            variables = {
                k: jnp.array(v, copy=True) if id(v) in own else v for k, v in variables.items()
            }
        step = self._function("stateless", bool(skip_gradients_aggregation), nested)
        new_variables, new_params = step(variables, grads, params)
        # jit returns dicts with sorted keys; hand them back in `variables` order.
        return new_params, {k: new_variables[k] for k in (ITERATIONS, *layout.order)}

    # -- state access ---------------------------------------------------------------------

    @property
    @_locked
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

    @_locked
    def _get_hyper(self, name: str) -> Any:
        if not self.built:
            raise ValueError(
                f"`{name}` of an optimizer wrapping a transform is read from its state: "
                f"build it first. Received: an optimizer {self.name!r} that was never built."
            )
        keys = self._hyper_keys(name)
        if len(keys) != 1:
            raise AttributeError(
                f"`{name}` needs exactly one hyperparameter of that name in the state. "
                f"Received: a state holding {len(keys)} ({', '.join(map(repr, keys)) or 'none'}); "
                f"use `optx.get_hyperparams` / `optx.set_hyperparams`."
            )
        return jnp.array(self.variables[keys[0]], copy=True)

    def _set_hyper(self, name: str, value: Any) -> None:
        self._get_hyper(name)
        (key,) = self._hyper_keys(name)
        self._write(key, value)

    @_locked
    def _write(self, key: str, value: Any, rule: Any = None) -> None:
        """Writes the public ``value`` of the hyperparameter held at ``key`` in the state."""
        layout = self._require_built(key)
        values = layout.to_dict(self._state)
        old = values[key]
        if isinstance(value, jax.core.Tracer) or np.ndim(value) != 0:
            raise TypeError(f"`{key}` needs a number. Received: {key}={value!r}.")
        stored = key.rpartition("/")[2]
        public = stored.removeprefix(hp._ONE_MINUS)
        value = hp.validate(self.name, public, value, rule)
        if stored != public:  # a decay, kept as 1 - value (computed in float64)
            value = 1.0 - float(value)
        values[key] = jnp.asarray(value, old.dtype)
        self._state = layout.from_dict(key, values)

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
