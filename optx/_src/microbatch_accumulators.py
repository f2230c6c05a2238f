"""How microbatch results combine: `Accumulator` and `AccumulationType` (see `microbatch`)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from optx._src.reprs import short


@dataclasses.dataclass(frozen=True)
class Accumulator:
    """How the results of the microbatches combine into one (see `microbatch`).

    With ``x_i`` the result of microbatch ``i`` of ``n``, the combined result is::

        carry = init(shape_dtype_of(x_0))
        for i in range(n):
            carry = update(carry, x_i, i)
        result = finalize(carry)

    ``aggregate`` reduces a stack of results (leading axis) in one go, as `micro_vmap`
    does inside each microbatch. Each function may act on pytrees.

    Attributes:
      init: the initial carry, from a `jax.ShapeDtypeStruct` tree of one result.
      update: ``(carry, value, index) -> carry``.
      finalize: ``carry -> result``.
      aggregate: ``stacked values -> result``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> largest = optx.microbatching.Accumulator(
      ...     init=lambda s: jnp.full(s.shape, -jnp.inf, s.dtype),
      ...     update=lambda carry, x, i: jnp.maximum(carry, x),
      ...     finalize=lambda carry: carry,
      ...     aggregate=lambda xs: jnp.max(xs, axis=0),
      ... )
      >>> f = optx.microbatch(lambda x: jnp.max(x), 0, 2, accumulator=largest)
      >>> f(jnp.array([1.0, 5.0, 3.0, 2.0]))
      Array(5., dtype=float32)
    """

    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], Any]
    finalize: Callable[[Any], Any]
    aggregate: Callable[[Any], Any]


class AccumulationType(enum.Enum):
    """The built-in ways of combining microbatch results (see `microbatch`).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> mean = optx.microbatching.AccumulationType.MEAN
      >>> optx.microbatch(jnp.mean, 0, 2, accumulator=mean)(jnp.arange(6.0))
      Array(2.5, dtype=float32)
    """

    MEAN = enum.auto()
    """The mean of the results (floating-point results only)."""
    SUM = enum.auto()
    """The sum of the results."""
    RUNNING_MEAN = enum.auto()
    """The mean over the microbatches run (``num_real_microbatches`` of them)."""
    CONCAT = enum.auto()
    """The results concatenated along their axis 0, in the batch's order."""


def _floating(api: str, s: Any) -> None:
    if not jnp.issubdtype(s.dtype, jnp.floating):
        raise ValueError(
            f"`{api}` needs floating-point results for a MEAN or RUNNING_MEAN accumulator. "
            f"Received: a result of dtype {s.dtype}."
        )


def _zeros(s: Any) -> jax.Array:
    return jnp.zeros(s.shape, s.dtype)


def _leafwise(
    init: Callable, update: Callable, finalize: Callable, aggregate: Callable
) -> Accumulator:
    """An `Accumulator` applying array functions to each leaf of the results."""
    return Accumulator(
        lambda shapes: jax.tree.map(init, shapes),
        lambda carry, value, i: jax.tree.map(lambda c, v: update(c, v, i), carry, value),
        lambda carry: jax.tree.map(finalize, carry),
        lambda values: jax.tree.map(aggregate, values),
    )


def _concat_finalize(carry: jax.Array) -> jax.Array:
    # (n, microbatch_size, ...) -> (batch, ...): row r of microbatch i is batch row
    # i + n * r (`reshape_batch_axis`'s column-major split), undone in column-major order.
    shape = (-1, *carry.shape[2:])
    sharding = getattr(jax.typeof(carry), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is not None and not mesh.empty and mesh.are_all_axes_explicit:
        spec = jax.sharding.PartitionSpec(*tuple(sharding.spec)[1:])
        out = jax.sharding.NamedSharding(mesh, spec)
        return carry.reshape(shape, order="F", out_sharding=out)
    return carry.reshape(shape, order="F")


def _builtin(api: str, kind: AccumulationType, n: int) -> Accumulator:
    if kind is AccumulationType.SUM:
        return _leafwise(_zeros, lambda c, v, i: c + v, lambda c: c, lambda v: jnp.sum(v, 0))
    if kind is AccumulationType.MEAN:

        def init_mean(s: Any) -> jax.Array:
            _floating(api, s)
            return _zeros(s)

        return _leafwise(
            init_mean, lambda c, v, i: c + v, lambda c: c / n, lambda v: jnp.mean(v, 0)
        )
    if kind is AccumulationType.RUNNING_MEAN:

        def init_running(s: Any) -> jax.Array:
            _floating(api, s)
            return _zeros(s)

        def running(c: jax.Array, v: jax.Array, i: Any) -> jax.Array:
            kept = i / (i + 1)  # the mean of i values, then one more
            return c * kept + v * (1 - kept)

        return _leafwise(init_running, running, lambda c: c, lambda v: jnp.mean(v, 0))

    def init_concat(s: Any) -> jax.Array:
        return jnp.zeros((n, *s.shape), s.dtype)

    return _leafwise(init_concat, lambda c, v, i: c.at[i].set(v), _concat_finalize, lambda v: v)


def resolve(api: str, accumulator: Any, n: int) -> Accumulator:
    """One `Accumulator` from a pytree (a prefix of the results) of accumulators/types."""

    def one(acc: Any) -> Accumulator:
        if isinstance(acc, Accumulator):
            return acc
        if isinstance(acc, AccumulationType):
            return _builtin(api, acc, n)
        raise TypeError(
            f"`{api}` needs accumulator to be an Accumulator, an AccumulationType or a pytree "
            f"of them. Received: {short(acc)}."
        )

    is_acc = lambda x: isinstance(x, Accumulator | AccumulationType)  # noqa: E731
    tree = jax.tree.map(one, accumulator, is_leaf=is_acc)
    leaf = lambda x: isinstance(x, Accumulator)  # noqa: E731

    def each(fn: str, *trees: Any) -> Any:
        return jax.tree.map(lambda a, *xs: getattr(a, fn)(*xs), tree, *trees, is_leaf=leaf)

    return Accumulator(
        lambda shapes: each("init", shapes),
        lambda carry, value, i: jax.tree.map(
            lambda a, c, v: a.update(c, v, i), tree, carry, value, is_leaf=leaf
        ),
        lambda carry: each("finalize", carry),
        lambda values: each("aggregate", values),
    )
