"""Checks of user input that raise at the call that caused the problem.

Messages follow the house form: "`api` needs <constraint>. Received: <name>=<value>.", and
name the pytree path of the offending leaf.
"""

from __future__ import annotations

import numbers
import sys
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from optx._src.hyperparams import current, shown
from optx._src.sparse import is_update_leaf
from optx._src.tree import path_name

_FLOAT_DTYPES = (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64)
_COMPLEX_DTYPES = (jnp.complex64, jnp.complex128)
_SHOWN = 5


def _listing(names: list[str], quote: bool = True) -> str:
    shown = ", ".join(repr(n) if quote else n for n in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def float_params(
    api: str,
    params: Any,
    what: str = "params",
    is_leaf: Callable[[Any], bool] | None = None,
    complex_ok: bool = False,
) -> None:
    """Raises `TypeError` naming the leaves of ``params`` that are not float arrays.

    With ``complex_ok`` complex64 and complex128 leaves pass (the transform supports complex
    parameters, as optax's does); without, they are refused in a message of their own.
    """
    bad, complex_leaves = [], []
    for path, leaf in jax.tree_util.tree_flatten_with_path(params, is_leaf=is_leaf)[0]:
        if leaf is None:
            continue
        dtype = jnp.result_type(leaf) if _is_arraylike(leaf) else None
        if dtype is not None and any(dtype == d for d in _COMPLEX_DTYPES):
            if not complex_ok:
                complex_leaves.append(f"{what}[{path_name(path)!r}] of dtype {dtype.name}")
        elif dtype is None or not any(dtype == d for d in _FLOAT_DTYPES):
            shown = f"dtype {dtype.name}" if dtype is not None else f"type {type(leaf).__name__}"
            bad.append(f"{what}[{path_name(path)!r}] of {shown}")
    if bad:
        raise TypeError(
            f"`{api}` needs floating-point {what} (float16, bfloat16, float32 or float64). "
            f"Received: {_listing(bad, quote=False)}. Keep other leaves out of the optimised "
            f"tree, or route them to `optx.set_to_zero()` with `optx.partition`."
        )
    if complex_leaves:
        raise TypeError(complex_message(api, what, _listing(complex_leaves, quote=False)))


def complex_message(api: str, what: str, received: str) -> str:
    """The message of a transform that refuses complex values.

    Such a transform's rule has no complex counterpart, or optax refuses them too.
    """
    return (
        f"`{api}` needs real {what}: it does not support complex values. Received: "
        f"{received}. Optimise the real and imaginary parts as separate real leaves, or use "
        f"an optimizer that supports complex parameters (see the README's 'Complex "
        f"parameters')."
    )


def array_leaves(api: str, tree: Any, what: str = "updates") -> None:
    """Raises `TypeError` naming the first leaf of ``tree`` that is neither array nor number.

    For the transforms that pass values through whatever their dtype (``None`` leaves pass).
    """
    leaves = jax.tree.leaves(tree, is_leaf=is_update_leaf)
    if all(leaf is None or _is_number_or_array(leaf) for leaf in leaves):
        return  # the common case, without computing paths
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_update_leaf)[0]:
        if not (leaf is None or _is_number_or_array(leaf)):
            raise TypeError(
                f"`{api}` needs numeric arrays as the leaves of {what}. Received: "
                f"{what}[{path_name(path)!r}] of type {type(leaf).__name__}."
            )


def _is_number_or_array(leaf: Any) -> bool:
    return _is_arraylike(leaf) or (isinstance(leaf, numbers.Number) and not isinstance(leaf, bool))


def float_updates(api: str, updates: Any, complex_ok: bool = False) -> None:
    """Raises `TypeError` naming the leaves of ``updates`` that are not float arrays.

    For the transforms that compute in each update's own dtype: an integer update would be
    truncated. Complex updates pass with ``complex_ok``. ``None`` leaves pass.
    """
    leaves = jax.tree.leaves(updates, is_leaf=is_update_leaf)
    if all(leaf is None or _is_float_array(leaf, complex_ok) for leaf in leaves):
        return  # the common case, without computing paths
    float_params(api, updates, "updates", is_leaf=is_update_leaf, complex_ok=complex_ok)


def _is_float_array(leaf: Any, complex_ok: bool = False) -> bool:
    kinds = _FLOAT_DTYPES + _COMPLEX_DTYPES if complex_ok else _FLOAT_DTYPES
    return _is_arraylike(leaf) and any(leaf.dtype == d for d in kinds)


def _is_arraylike(leaf: Any) -> bool:
    # Arrays only: a Python number has no dtype or shape for the transforms to keep.
    return hasattr(leaf, "dtype") and hasattr(leaf, "shape")


def needs_params(api: str, params: Any) -> None:
    """Raises `ValueError` if a transform that reads the parameters got none."""
    if params is None:
        raise ValueError(
            f"`{api}` needs the current parameters. Received: params=None. "
            f"Call `update(updates, state, params)`."
        )


def same_tree(
    api: str,
    got: Any,
    expected: Any,
    got_name: str,
    expected_name: str,
    *,
    allow_none: bool = False,
    real_slots: bool = False,
) -> None:
    """Raises `ValueError` if two trees differ in structure or leaf shapes.

    The message lists the paths missing from, and unexpected in, ``got``; or the first
    leaf whose shape differs, with both shapes. A ``None`` leaf of ``got`` (a parameter
    without a gradient) where ``expected`` has an array is refused unless ``allow_none``
    (the caller passes it through); a leaf of ``got`` that is not an array (a Python
    number, a string) or is complex where ``expected`` is real raises `TypeError` (unless
    ``real_slots``: ``expected`` holds real slots of complex parameters, such as ``|g|**2``).
    """
    # A row-sparse update stands for an array of its dense shape.
    got_flat, got_def = jax.tree_util.tree_flatten_with_path(got, is_leaf=is_update_leaf)
    exp_flat, exp_def = jax.tree_util.tree_flatten_with_path(expected, is_leaf=is_update_leaf)
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
        if e is None or (g is None and allow_none):
            continue
        if g is None:
            raise ValueError(
                f"`{api}` needs an array for every leaf of {expected_name}. Received: "
                f"{got_name}[{path_name(path)!r}]=None (a parameter without a gradient). "
                f"Wrap the transform in `optx.skip_missing(...)` to leave such parameters "
                f"unchanged."
            )
        if not _is_arraylike(g):
            raise TypeError(
                f"`{api}` needs arrays as the leaves of {got_name}. Received: "
                f"{got_name}[{path_name(path)!r}] of type {type(g).__name__}. Convert it "
                f"with `jnp.asarray`."
            )
        if (
            not real_slots
            and jnp.issubdtype(g.dtype, jnp.complexfloating)
            and not (_is_arraylike(e) and jnp.issubdtype(e.dtype, jnp.complexfloating))
        ):
            raise TypeError(
                f"`{api}` needs real {got_name} where {expected_name} holds real values (a "
                f"complex value would lose its imaginary part). Received: "
                f"{got_name}[{path_name(path)!r}] of dtype {g.dtype}."
            )
        if not jnp.issubdtype(g.dtype, jnp.inexact) and (
            _is_arraylike(e) and jnp.issubdtype(e.dtype, jnp.inexact)
        ):
            raise TypeError(
                f"`{api}` needs floating-point {got_name}, as {expected_name} holds (an "
                f"integer one would be truncated). Received: {got_name}[{path_name(path)!r}] "
                f"of dtype {g.dtype}."
            )
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


INT32_MAX = 2**31 - 1
"""The largest step count: optx's counters are int32 and saturate there (never wrap)."""


def nonneg_int(
    api: str, name: str, value: Any, minimum: int = 0, maximum: int | None = INT32_MAX
) -> int:
    """Checks a structural integer option: an int in ``[minimum, maximum]``.

    The default ``maximum`` is int32's: such an option is compared with an int32 counter
    (or enters int32 arithmetic), which stops at ``2**31 - 1``; a larger value would never
    be reached, and JAX refuses it as an int32 at the first update.
    """
    api, name = current(api), shown(name)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(
            f"`{api}` needs {name} to be an int >= {minimum}. Received: {name}={value!r}."
        )
    if maximum is not None and value > maximum:
        raise ValueError(too_large(api, name, value, minimum, maximum))
    return int(value)


COUNTER_LIMIT = (
    "step counters are int32 and stop at 2**31 - 1 = 2147483647, so a larger count is never reached"
)


def too_large(api: str, name: str, value: Any, minimum: int, maximum: int = INT32_MAX) -> str:
    """The message for a step count or period above ``maximum`` (int32's, by default)."""
    if maximum == INT32_MAX:
        return (
            f"`{api}` needs {name} to be an int in [{minimum}, 2**31 - 1] ({COUNTER_LIMIT}). "
            f"Received: {name}={value!r}."
        )
    return (
        f"`{api}` needs {name} to be an int in [{minimum}, {maximum}]. Received: {name}={value!r}."
    )


def flag(api: str, name: str, value: Any) -> bool:
    """Checks a boolean option: a structural switch, where a truthy string is a mistake.

    ``nesterov="False"`` would otherwise switch Nesterov momentum on. NumPy's bool is
    accepted and returned as a Python bool (hashable, and equal in configs).
    """
    if not isinstance(value, bool | np.bool_):
        api, name = current(api), shown(name)
        raise TypeError(f"`{api}` needs {name} to be a bool. Received: {name}={value!r}.")
    return bool(value)


def dtype_option(api: str, name: str, value: Any) -> np.dtype | None:
    """Normalises a dtype option (``None`` or a floating dtype) to a hashable numpy dtype.

    Complex dtypes are accepted, as optax accepts them (``mu_dtype=jnp.complex64``).
    """
    api = current(api)
    if value is None:
        return None
    try:
        dtype = jnp.dtype(value)
    except TypeError:
        dtype = None
    if dtype is None or not jnp.issubdtype(dtype, jnp.inexact):
        raise TypeError(
            f"`{api}` needs {name} to be None or a floating dtype. Received: {name}={value!r}."
        )
    return dtype


def deprecated(message: str) -> None:
    """Warns ``DeprecationWarning`` at the first caller outside optx (the user's line).

    optx's public functions may be wrapped (the keyword checks of `suggest`), so a fixed
    ``stacklevel`` would point into optx.
    """
    frame, level = sys._getframe(1), 2  # stacklevel 2: the caller of `deprecated`
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "optx":
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def complex_slot(api: str, name: str, dtype: Any, params: Any) -> None:
    """Raises `TypeError` if the real slot dtype option ``name`` meets a complex parameter.

    A slot that holds gradient-like values (a first moment, a trace) in a real dtype would
    drop the imaginary part of a complex parameter's gradient.
    """
    if dtype is None or jnp.issubdtype(dtype, jnp.complexfloating):
        return
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        if _is_arraylike(leaf) and jnp.issubdtype(leaf.dtype, jnp.complexfloating):
            api = current(api)
            raise TypeError(
                f"`{api}` needs a complex {name} for complex params (a real slot would drop "
                f"the imaginary part). Received: {name}={jnp.dtype(dtype).name!r} for "
                f"params[{path_name(path)!r}] of dtype {leaf.dtype}. Pass "
                f"{name}=jnp.complex64 (or None, the parameters' dtypes)."
            )
