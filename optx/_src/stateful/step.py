"""The compiled step of the stateful wrapper, the checks of its inputs, and `StepMixin`.

`StepMixin` holds the methods that run the step (`apply_gradients`, `stateless_apply`, the
cache of compiled steps); `StatefulBase.apply` runs it on the optimizer's own state.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from optx._src.base import GradientTransformationLike, Params, apply_updates, safe_increment
from optx._src.compiler import compiler_options
from optx._src.missing import skip_missing
from optx._src.stateful.layout import Layout, check_keys
from optx._src.stateful.locking import locked
from optx._src.stateful.variable import (
    _assign,
    _is_variable,
    _value,
    merge_repeated,
    variable_names,
)
from optx._src.tree import path_name

ITERATIONS = "iterations"


def spec(params: Params) -> list[tuple[str, tuple[int, ...], Any]]:
    return [
        (path_name(path), np.shape(p), jnp.result_type(p))
        for path, p in jax.tree_util.tree_flatten_with_path(params)[0]
    ]


# Outputs come in the order of the donated inputs. JAX hands each output the buffer of the
# first unused donated input of the same shape and dtype, in order: new parameters listed
# before the state would take the buffers of the moments and make XLA copy them back
# (392 copies per step on the GPT-shaped tree of `bench/`: 26 ms against 19 ms).


def _step(
    transform: GradientTransformationLike, state: Any, count: jax.Array, grads: Any, params: Params
) -> tuple[Any, jax.Array, Params]:
    """``(state, count, grads, params) -> (state, count, new params)``; donates the first two."""
    # A `None` gradient skips its parameter and leaves its slots as they are (a no-op
    # when every gradient is there).
    updates, state = skip_missing(transform).update(grads, state, params)
    return state, safe_increment(count), apply_updates(params, updates)


def _stateless(
    transform: GradientTransformationLike,
    layout: Layout,
    variables: Mapping[str, Any],
    grads: Any,
    params: Params,
) -> tuple[dict[str, Any], Params]:
    """``(variables, grads, params) -> (variables, new params)``; donates variables, params."""
    state = layout.from_dict(
        "stateless_apply", {k: v for k, v in variables.items() if k != ITERATIONS}
    )
    state, count, new_params = _step(transform, state, variables[ITERATIONS], grads, params)
    return {ITERATIONS: count, **layout.to_dict(state)}, new_params


STEPS: dict[str, Callable[..., Any]] = {"step": _step, "stateless": _stateless}
_JIT_ARGS = {"step": (0, (1, 2)), "stateless": ((0, 1), (2, 4))}  # static, donated


@functools.cache
def jitted(kind: str, options: tuple[tuple[str, Any], ...]) -> Callable[..., Any]:
    """The jitted step ``kind``, its transform (and layout) static, compiled with ``options``.

    One per kind and options: optimizers with equal chains share its compile cache.
    """
    static, donate = _JIT_ARGS[kind]
    return jax.jit(
        STEPS[kind],
        static_argnums=static,
        donate_argnums=donate,
        compiler_options=dict(options) or None,
    )


def check_params(
    api: str, params: Params, treedef: Any, expected: list[tuple[str, tuple[int, ...], Any]]
) -> None:
    """Raises a `ValueError` unless ``params`` have the structure, shapes and dtypes built."""
    leaves, got = jax.tree.flatten(params)
    if got != treedef:
        raise ValueError(
            f"`{api}` needs the parameter tree this optimizer was built with. "
            f"Received: {got}; expected: {treedef}."
        )
    # The fast path (every step): shapes and dtypes only; names only to report a mismatch.
    fast = [(np.shape(x), getattr(x, "dtype", None)) for x in leaves]
    if fast == [(shape, dtype) for _, shape, dtype in expected]:
        return
    for (path, shape, dtype), (_, want_shape, want_dtype) in zip(
        spec(params), expected, strict=True
    ):
        if shape != want_shape or dtype != want_dtype:
            raise ValueError(
                f"`{api}` needs the parameters this optimizer was built with. Received: "
                f"{path!r} of shape {shape} and dtype {dtype}; expected shape "
                f"{want_shape} and dtype {want_dtype}."
            )


def check_grads(api: str, grads: Any, params: Params) -> None:
    """Raises a `ValueError` unless ``grads`` have the parameters' structure and shapes."""
    g_leaves, g_def = jax.tree.flatten(grads, is_leaf=_is_none)
    p_leaves, p_def = jax.tree.flatten(params, is_leaf=_is_none)
    if g_def != p_def:
        raise ValueError(
            f"`{api}` needs gradients with the structure of the parameters. "
            f"Received: {jax.tree.structure(grads)}; expected: {jax.tree.structure(params)}."
        )
    # A transform without state would broadcast a wrong shape into the parameters.
    if all(
        g is None or p is None or np.shape(g) == np.shape(p)
        for g, p in zip(g_leaves, p_leaves, strict=True)
    ):
        return
    flat = jax.tree_util.tree_flatten_with_path(grads, is_leaf=_is_none)[0]
    for (path, g), p in zip(flat, p_leaves, strict=True):
        if g is not None and p is not None and np.shape(g) != np.shape(p):
            raise ValueError(
                f"`{api}` needs gradients with the shapes of the parameters. Received: "
                f"{path_name(path)!r} of shape {np.shape(g)}; expected shape {np.shape(p)}."
            )


def _is_none(x: Any) -> bool:
    return x is None


_VALID_DTYPES = ("float16", "bfloat16", "float32", "float64")


def check_dtypes(api: str, params: Params) -> None:
    """Raises a `ValueError` for a parameter that is not float16/bfloat16/float32/float64."""
    for path, p in jax.tree_util.tree_flatten_with_path(params)[0]:
        dtype = jnp.result_type(p)
        if dtype.name not in _VALID_DTYPES:
            raise ValueError(
                f"`{api}` needs floating-point parameters ({', '.join(_VALID_DTYPES)}). "
                f"Received: {path_name(path)!r} of dtype {dtype.name}."
            )


def missing_gradients(api: str, grads: Any, params: Params) -> None:
    """Warns once, naming them, of parameters without a gradient; all missing is an error."""
    flat = jax.tree_util.tree_flatten_with_path(grads, is_leaf=_is_none)[0]
    missing = [path_name(path) for path, g in flat if g is None]
    if not missing:
        return
    if len(missing) == len(flat):
        raise ValueError(
            f"`{api}` needs a gradient for at least one parameter. Received: no gradients "
            f"(all {len(flat)} are None)."
        )
    warnings.warn(
        f"`{api}`: gradients do not exist for {missing}; those parameters and their "
        f"slots are left as they are.",
        stacklevel=3,
    )


class StepMixin:
    """`StatefulBase`'s compiled steps, its checks of their inputs, and the pure step."""

    if TYPE_CHECKING:
        jit_compile: bool
        built: bool
        _lock: Any
        _state: Any
        _count: jax.Array
        _compiled: dict[str, Callable[..., Any]]
        _placement: Any
        _treedef: Any
        _spec: Any
        _checked: Any
        _names_by_id: dict[int, str]

        @property
        def iterations(self) -> jax.Array: ...

        @property
        def variables(self) -> dict[str, jax.Array]: ...

        def apply(self, grads: Any, params: Params) -> Params: ...

        def _require_built(self, api: str) -> Layout: ...

        def _step_transform(self, skip_aggregation: bool) -> GradientTransformationLike: ...

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

    def _check_variables(self, api: str, layout: Layout, variables: Mapping[str, Any]) -> None:
        """Raises unless each variable has the shape and dtype of the optimizer's own.

        Exactly: a bfloat16 slot given to a float32 optimizer would change the state's
        dtype (and compile a second step), a float ``iterations`` fail inside JAX.
        """
        cached = self.__dict__.get("_variables_spec")
        if cached is None or cached[0] is not layout:
            expected = [(k, np.shape(v), v.dtype) for k, v in self.variables.items()]
            cached = self._variables_spec = (layout, expected)
        for key, shape, dtype in cached[1]:
            value = variables[key]
            got = getattr(value, "dtype", None)
            got = jnp.result_type(value) if got is None else got
            if np.shape(value) != shape or got != dtype:
                raise ValueError(
                    f"`{api}` needs {key!r} of shape {shape} and dtype {dtype}, as in "
                    f"`optimizer.variables`. Received: shape {np.shape(value)} and dtype "
                    f"{np.dtype(got)}."
                )

    @locked
    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]]) -> jax.Array:
        """Applies ``(gradient, variable)`` pairs to the variables in place; Keras's API.

        Variables are `Variable` objects or Flax ``nnx.Variable`` objects; their names (or
        positions) are their parameter paths. Returns the new `iterations`.

        A variable listed more than once (a shared weight) gets one step, with the sum of
        its gradients: the gradient of a weight used in several places is the sum of the
        gradients of its uses. (Keras 3 instead applies the pairs one after the other, each
        an update with the same slots and step count. For plain SGD that is the same step:
        ``w - lr * (g1 + g2)``; with momentum or Adam it is not: Keras's second update
        reads the slots its first wrote.)

        Example:
          >>> import jax.numpy as jnp, optx
          >>> w = optx.optimizers.Variable(1.0, name="w")
          >>> opt = optx.optimizers.SGD(0.1)
          >>> _ = opt.apply_gradients([(jnp.array(1.0), w), (jnp.array(1.0), w)])
          >>> w.value
          Array(0.8, dtype=float32)
        """
        pairs = list(grads_and_vars)
        for i, (_, var) in enumerate(pairs):
            if not _is_variable(var):
                raise TypeError(
                    f"`apply_gradients` needs (gradient, variable) pairs whose variables are "
                    f"optx.optimizers.Variable or flax.nnx.Variable. Received: pair {i} with "
                    f"a {type(var).__name__}."
                )
        pairs = merge_repeated(pairs)
        names = variable_names([v for _, v in pairs])
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

    @locked
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
        self._check_variables("stateless_apply", layout, optimizer_variables)
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
