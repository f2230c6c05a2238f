"""Checks of user input that raise at the call that caused the problem.

Messages follow the house form: "`api` needs <constraint>. Received: <name>=<value>.", and
name the pytree path of the offending leaf.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from optx._src.hyperparams import current
from optx._src.tree import is_none, path_name

_FLOAT_DTYPES = (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64)
_SHOWN = 5


def _listing(names: list[str], quote: bool = True) -> str:
    shown = ", ".join(repr(n) if quote else n for n in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def float_params(api: str, params: Any, what: str = "params") -> None:
    """Raises `TypeError` naming the first leaf of ``params`` that is not a float array."""
    bad = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        dtype = jnp.result_type(leaf) if _is_arraylike(leaf) else None
        if dtype is None or not any(dtype == d for d in _FLOAT_DTYPES):
            shown = f"dtype {dtype.name}" if dtype is not None else f"type {type(leaf).__name__}"
            bad.append(f"{what}[{path_name(path)!r}] of {shown}")
    if bad:
        raise TypeError(
            f"`{api}` needs floating-point {what} (float16, bfloat16, float32 or float64). "
            f"Received: {_listing(bad, quote=False)}. Keep other leaves out of the optimised "
            f"tree, or route them to `optx.set_to_zero()` with `optx.partition`."
        )


def _is_arraylike(leaf: Any) -> bool:
    return hasattr(leaf, "dtype") or isinstance(leaf, float | int | complex | bool)


def needs_params(api: str, params: Any) -> None:
    """Raises `ValueError` if a transform that reads the parameters got none."""
    if params is None:
        raise ValueError(
            f"`{api}` needs the current parameters. Received: params=None. "
            f"Call `update(updates, state, params)`."
        )


def same_tree(api: str, got: Any, expected: Any, got_name: str, expected_name: str) -> None:
    """Raises `ValueError` if two trees differ in structure or leaf shapes.

    The message lists the paths missing from, and unexpected in, ``got``; or the first
    leaf whose shape differs, with both shapes.
    """
    got_flat, got_def = jax.tree_util.tree_flatten_with_path(got, is_leaf=is_none)
    exp_flat, exp_def = jax.tree_util.tree_flatten_with_path(expected, is_leaf=is_none)
    if got_def != exp_def:
        got_paths = [path_name(p) for p, _ in got_flat]
        exp_paths = [path_name(p) for p, _ in exp_flat]
        missing = [p for p in exp_paths if p not in set(got_paths)]
        extra = [p for p in got_paths if p not in set(exp_paths)]
        detail = []
        if missing:
            detail.append(f"missing from {got_name}: {_listing(missing)}")
        if extra:
            detail.append(f"not in {expected_name}: {_listing(extra)}")
        if not detail:
            detail.append(f"{got_name} is {got_def}, {expected_name} is {exp_def}")
        raise ValueError(
            f"`{api}` needs {got_name} with the structure of {expected_name}. "
            f"Received: {'; '.join(detail)}."
        )
    for (path, g), (_, e) in zip(got_flat, exp_flat, strict=True):
        if g is None or e is None:
            continue
        if np.shape(g) != np.shape(e):
            raise ValueError(
                f"`{api}` needs {got_name} with the shapes of {expected_name}. "
                f"Received: {got_name}[{path_name(path)!r}] of shape {np.shape(g)}, "
                f"expected {np.shape(e)}."
            )


def transform(api: str, name: str, value: Any) -> None:
    """Raises `TypeError` if ``value`` does not have the ``init``/``update`` protocol."""
    if not (callable(getattr(value, "init", None)) and callable(getattr(value, "update", None))):
        raise TypeError(
            f"`{api}` needs {name} to be a transform with `init` and `update` methods "
            f"(an optx or optax transform). Received: {name}={value!r}."
        )


def nonneg_int(api: str, name: str, value: Any, minimum: int = 0) -> int:
    """Checks a structural integer option."""
    api = current(api)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(
            f"`{api}` needs {name} to be an int >= {minimum}. Received: {name}={value!r}."
        )
    return int(value)


def dtype_option(api: str, name: str, value: Any) -> np.dtype | None:
    """Normalises a dtype option (``None`` or a floating dtype) to a hashable numpy dtype."""
    api = current(api)
    if value is None:
        return None
    try:
        dtype = jnp.dtype(value)
    except TypeError:
        dtype = None
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(
            f"`{api}` needs {name} to be None or a floating dtype. Received: {name}={value!r}."
        )
    return dtype
