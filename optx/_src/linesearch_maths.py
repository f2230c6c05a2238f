r"""The maths shared by the line searches: a function along an update direction.

A line search looks at :math:`\phi(\eta) = f(w + \eta u)` for parameters :math:`w` and a
direction :math:`u`: its value, and its slope :math:`\phi'(\eta) = \langle \nabla
f(w + \eta u), u\rangle`. Here: inner products and norms of trees (in float32 at least), steps
along the direction, the keyword arguments a line search's ``update`` receives, and the
range rules of its hyperparameters.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, placement
from optx._src import hyperparams as hp
from optx._src.base import OptState, Params, Updates
from optx._src.moments import real_dtype


def scalar_dtype(params: Params) -> Any:
    """The dtype of a line search's scalars: the first leaf's real dtype, at least float32."""
    leaves = jax.tree.leaves(params)
    dtype = jnp.result_type(leaves[0]) if leaves else jnp.float32
    return jnp.promote_types(real_dtype(dtype), jnp.float32)


def _wide(x: jax.Array) -> jax.Array:
    x = jnp.asarray(x)
    return x if jnp.finfo(x.dtype).bits >= 32 else x.astype(jnp.float32)


def inner(a: Updates, b: Updates) -> jax.Array:
    """``sum(vdot(a_leaf, b_leaf))`` over the leaves (``a`` conjugated), in float32 at least."""
    parts = [
        placement.vdot(_wide(x), _wide(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    ]
    # Starting from a float32 0: exact, and an empty tree gives 0.
    return functools.reduce(operator.add, parts, jnp.zeros([], jnp.float32))


def conj(tree: Updates) -> Updates:
    """The complex conjugate of every leaf (a real leaf as it is, with no operation).

    A complex gradient is passed to the searches as the conjugate of `jax.grad`'s, and
    kept in their states as `jax.grad` gives it (`value_and_grad_from_state` returns it as
    `jax.value_and_grad` would): the two differ by this conjugation.
    """
    return jax.tree.map(jnp.conj, tree)


def _sq(x: jax.Array) -> jax.Array:
    x = _wide(x)
    if jnp.iscomplexobj(x):
        return jnp.sum(jnp.square(jnp.real(x)) + jnp.square(jnp.imag(x)))
    return jnp.sum(jnp.square(x))


def sq_norm(a: Updates) -> jax.Array:
    """The squared global norm of ``a``, in float32 at least."""
    return functools.reduce(operator.add, [_sq(x) for x in jax.tree.leaves(a)], jnp.zeros([]))


def add_scaled(x: Params, step: jax.Array, u: Updates) -> Params:
    """``x + step * u`` leafwise, in each leaf of ``x``'s dtype."""
    return jax.tree.map(lambda a, b: (a + step * b).astype(a.dtype), x, u)


def scaled(step: jax.Array, u: Updates) -> Updates:
    """``step * u`` leafwise, in each leaf's dtype."""
    return jax.tree.map(lambda b: (step * b).astype(b.dtype), u)


def cast_like(tree: Any, like: Any) -> Any:
    """Each leaf of ``tree`` in the dtype of the matching leaf of ``like``."""
    return jax.tree.map(lambda x, y: jnp.asarray(x).astype(jnp.result_type(y)), tree, like)


def bad_to_inf(error: jax.Array) -> jax.Array:
    """``max(error, 0)``, with NaN (a step outside the function's domain) read as ``inf``."""
    error = jnp.maximum(error, 0.0)
    return jnp.where(jnp.isnan(error), jnp.inf, error)


def check_trees(api: str, updates: Updates, params: Params) -> None:
    """Refuses parameters that are not floating-point arrays, and updates not shaped like them."""
    checks.needs_params(api, params)
    checks.float_params(api, params, complex_ok=True)
    checks.same_tree(api, updates, params, "updates", "params")


def split_kwargs(value_fn: Callable[..., Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``extra`` that ``value_fn``'s signature names (the data)."""
    try:
        names = inspect.signature(value_fn).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): pass none
        return {}
    return {k: v for k, v in extra.items() if k in names}


class Objective(NamedTuple):
    """What a line search's ``update`` is given about the function it minimises."""

    value: jax.Array
    grad: Updates
    fn: Callable[..., Any]
    kwargs: dict[str, Any]


def objective(
    api: str,
    params: Params,
    value: Any,
    grad: Any,
    value_fn: Any,
    extra: dict[str, Any],
    dtype: Any,
) -> Objective:
    """Checks and completes ``update``'s ``value``, ``grad`` and ``value_fn``.

    ``value`` and ``grad`` not given (``None``) are computed from ``value_fn`` at
    ``params``; the gradient is cast to the parameters' dtypes. For complex parameters
    ``grad`` is the caller's: the conjugate of `jax.grad`'s (the direction of steepest
    ascent, as optax's users pass it), and one computed here is conjugated to match.
    """
    if not callable(value_fn):
        raise TypeError(
            f"`{api}` needs value_fn, the function to minimise (of the parameters, and of "
            f"the extra keyword arguments it names). Received: value_fn={value_fn!r}. Call "
            "`update(updates, state, params, value=value, grad=grad, value_fn=f)`."
        )
    kwargs = split_kwargs(value_fn, extra)
    if value is None or grad is None:
        v, g = jax.value_and_grad(value_fn)(params, **kwargs)
        value = v if value is None else value
        grad = conj(g) if grad is None else grad
    grad = cast_like(grad, params)
    return Objective(jnp.asarray(value).astype(dtype), grad, value_fn, kwargs)


# --- Hyperparameters -----------------------------------------------------------------------


def _positive(v: float) -> bool:
    return v > 0


def _nonneg(v: float) -> bool:
    return v >= 0


def _open_unit(v: float) -> bool:
    return 0 < v < 1


# `inf` is meaningful here: `curv_rtol=inf` drops the curvature condition, an infinite
# `increase_factor` starts each backtracking search at `max_learning_rate`.
POSITIVE_OR_INF = hp.Range("> 0 (inf allowed)", _positive, _nonneg, infinite=True)
NONNEG_OR_INF = hp.Range(">= 0 (inf allowed)", _nonneg, infinite=True)
OPEN_UNIT = hp.Range("in (0, 1)", _open_unit)


def settings(state: OptState, names: tuple[str, ...], dtype: Any) -> dict[str, jax.Array]:
    """The hyperparameters in force, in the dtype of the search's scalars."""
    h = state.hyperparams
    return {n: (h[n].astype(dtype) if n in h else None) for n in names}
