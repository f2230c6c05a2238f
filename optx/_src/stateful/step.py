"""The compiled step of the stateful wrapper, and the checks of its inputs."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from optx._src.base import GradientTransformationLike, Params, apply_updates, safe_increment
from optx._src.missing import skip_missing
from optx._src.stateful.layout import Layout
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
