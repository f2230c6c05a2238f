"""Row-sparse gradients of embedding tables: `RowSparse`, `embedding_grad`, and row helpers.

A lookup ``table[ids]`` touches a few rows of a large table; its gradient is zero elsewhere.
`RowSparse` holds only the touched rows. `sgd` (without momentum), `adagrad` and
`lazy_adam` update only those rows, and `apply_updates` scatters the result, so a jitted
step with donated buffers reads and writes nothing else of the table.

A `RowSparse` is a pytree node (its ``indices`` and ``values`` are its children, so it
passes through `jax.jit` as an argument or a result). A transform that does not know the
type would see two unrelated arrays and compute nonsense, so `Transform` checks every
``update``: only transforms that declare ``row_sparse = True`` accept such leaves; the others
raise a `TypeError` naming the leaf (see `reject`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from optx._src.tree import path_name

_API = "optx.RowSparse"
_INT32_MAX = 2**31 - 1


@jax.tree_util.register_pytree_with_keys_class
class RowSparse:
    r"""A gradient that is zero outside a few rows: ``indices``, their ``values``, a dense shape.

    Row ``indices[i]`` of the dense array holds ``values[i]``; repeated indices add up, as
    the gradient of a lookup that reads a row several times does. ``todense()`` builds the
    array. Indices follow NumPy's rules: a negative index counts from the end; one outside
    ``[-dense_shape[0], dense_shape[0])`` is dropped.

    ``optx.sgd`` (without momentum), ``optx.adagrad`` and ``optx.lazy_adam`` take it as a
    gradient leaf and update only those rows; `optx.apply_updates` adds the row-sparse update
    they return to its rows of the parameter. ``sgd`` and ``adagrad`` give the dense update of
    ``todense()`` (to float32 rounding), whose rows without gradient are zero; ``lazy_adam``
    moves only the touched rows' moments (see `scale_by_lazy_adam`). Other transforms raise
    a `TypeError`: pass ``todense()`` to them.

    Args:
      indices: a 1-D integer array of ``k`` row numbers (stored as int32).
      values: the rows, of shape ``(k, *dense_shape[1:])``, in a floating dtype.
      dense_shape: the shape of the dense array (the parameter's), at least 1-D.

    Raises:
      TypeError: ``indices`` is not an integer array, ``values`` not a floating one, or
        ``dense_shape`` not a tuple of ints.
      ValueError: ``indices`` is not 1-D, ``dense_shape`` is empty or negative (or its
        rows and the indices number 2**31 or more), or ``values`` has the wrong shape.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> g = optx.RowSparse(jnp.array([2, 0, 2]), jnp.ones((3, 2)), (4, 2))
      >>> g.todense()
      Array([[1., 1.],
             [0., 0.],
             [2., 2.],
             [0., 0.]], dtype=float32)
      >>> params = {"emb": jnp.zeros((4, 2))}
      >>> tx = optx.sgd(0.5)
      >>> updates, _ = tx.update({"emb": g}, tx.init(params))
      >>> optx.apply_updates(params, updates)["emb"][:, 0]
      Array([-0.5,  0. , -1. ,  0. ], dtype=float32)
    """

    __slots__ = ("_coalesced", "dense_shape", "indices", "values")
    indices: jax.Array
    values: jax.Array
    dense_shape: tuple[int, ...]

    def __init__(self, indices: ArrayLike, values: ArrayLike, dense_shape: tuple[int, ...]) -> None:
        dense_shape = _dense_shape(dense_shape)
        indices, values = jnp.asarray(indices), jnp.asarray(values)
        if not jnp.issubdtype(indices.dtype, jnp.integer):
            raise TypeError(
                f"`{_API}` needs integer indices. Received: indices of dtype {indices.dtype}."
            )
        if indices.ndim != 1:
            raise ValueError(
                f"`{_API}` needs 1-D indices. Received: indices of shape {indices.shape}. "
                f"Flatten them, and the values to (k, *row_shape), or use `optx.embedding_grad`."
            )
        if not jnp.issubdtype(values.dtype, jnp.floating):
            raise TypeError(
                f"`{_API}` needs floating-point values. Received: values of dtype {values.dtype}."
            )
        if dense_shape[0] + indices.shape[0] > _INT32_MAX:
            # `coalesce` numbers its padding past the last row, in int32.
            raise ValueError(
                f"`{_API}` needs dense_shape[0] + len(indices) <= 2**31 - 1. Received: "
                f"dense_shape={dense_shape} with {indices.shape[0]} indices."
            )
        expected = (indices.shape[0], *dense_shape[1:])
        if values.shape != expected:
            raise ValueError(
                f"`{_API}` needs values of shape (len(indices), *dense_shape[1:]) = {expected}. "
                f"Received: values of shape {values.shape} with dense_shape={dense_shape}."
            )
        _set(self, indices.astype(jnp.int32), values, dense_shape, False)

    @property
    def shape(self) -> tuple[int, ...]:
        """The dense shape (as for an array, so shape checks treat both alike)."""
        return self.dense_shape

    @property
    def ndim(self) -> int:
        """The number of dimensions of the dense array."""
        return len(self.dense_shape)

    @property
    def dtype(self) -> Any:
        """The dtype of the values."""
        return self.values.dtype

    def todense(self) -> jax.Array:
        """The dense array: zeros, plus each value added at its row.

        Example:
          >>> import jax.numpy as jnp, optx
          >>> optx.RowSparse(jnp.array([1]), jnp.array([3.0]), (3,)).todense()
          Array([0., 3., 0.], dtype=float32)
        """
        zeros = jnp.zeros(self.dense_shape, self.values.dtype)
        return zeros.at[_rows(self.indices, self.dense_shape[0])].add(self.values, mode="drop")

    def tree_flatten_with_keys(self) -> tuple[tuple[tuple[Any, jax.Array], ...], Any]:
        """Children ``indices`` and ``values``; the dense shape is static."""
        keys = (jax.tree_util.GetAttrKey("indices"), jax.tree_util.GetAttrKey("values"))
        return tuple(zip(keys, (self.indices, self.values), strict=True)), (
            self.dense_shape,
            self._coalesced,
        )

    def tree_flatten(self) -> tuple[tuple[jax.Array, jax.Array], Any]:
        """Children ``indices`` and ``values``; the dense shape is static."""
        return (self.indices, self.values), (self.dense_shape, self._coalesced)

    @classmethod
    def tree_unflatten(cls, aux: Any, children: Any) -> RowSparse:
        """Rebuilds without checks (JAX passes tracers and placeholders)."""
        new = object.__new__(cls)
        _set(new, children[0], children[1], aux[0], aux[1])
        return new

    def __repr__(self) -> str:
        return (
            f"RowSparse(indices={self.indices!r}, values={self.values!r}, "
            f"dense_shape={self.dense_shape})"
        )


def _set(obj: RowSparse, indices: Any, values: Any, shape: tuple[int, ...], done: bool) -> None:
    object.__setattr__(obj, "indices", indices)
    object.__setattr__(obj, "values", values)
    object.__setattr__(obj, "dense_shape", shape)
    # Set by `coalesce`: the indices are sorted, unique, and rows but for the padding past
    # the last row.
    object.__setattr__(obj, "_coalesced", done)


def _dense_shape(value: Any) -> tuple[int, ...]:
    if (
        not isinstance(value, tuple | list)
        or not value
        or not all(isinstance(d, int | np.integer) and not isinstance(d, bool) for d in value)
    ):
        raise TypeError(
            f"`{_API}` needs dense_shape to be a non-empty tuple of ints, the parameter's "
            f"shape. Received: dense_shape={value!r}."
        )
    if any(d < 0 for d in value):
        raise ValueError(
            f"`{_API}` needs a dense_shape of non-negative sizes. Received: dense_shape={value!r}."
        )
    return tuple(int(d) for d in value)


def _rows(indices: jax.Array, n: int) -> jax.Array:
    """Indices with negative ones counted from the end and all others out of range set to n."""
    wrapped = jnp.where(indices < 0, indices + n, indices)
    return jnp.where((wrapped >= 0) & (wrapped < n), wrapped, n)


def is_row_sparse(x: Any) -> bool:
    """`is_leaf` predicate: a `RowSparse` is a leaf."""
    return isinstance(x, RowSparse)


def is_update_leaf(x: Any) -> bool:
    """`is_leaf` predicate for updates: ``None`` (no gradient) and `RowSparse` are leaves."""
    return x is None or isinstance(x, RowSparse)


def coalesce(g: RowSparse) -> RowSparse:
    """The same gradient with each row once: sorted unique indices, duplicates summed.

    The result keeps ``k`` entries (a static size). The unused ones get the indices
    ``n, n + 1, ...`` past the last row ``n - 1`` (so that all indices stay sorted and
    unique, which lets XLA scatter without ordering), as do indices out of range; they read
    as row ``n - 1`` in `gather`, are dropped by `scatter` and `apply_updates`, and `valid`
    tells them apart.
    """
    if g._coalesced:  # pyright: ignore[reportPrivateUsage]
        return g
    n, k = g.dense_shape[0], g.indices.shape[0]
    rows = _rows(g.indices, n)
    # A sort of the keys alone (XLA:CPU sorts one int32 array several times faster than
    # key-value pairs or `jnp.unique`) and a binary search give each entry its slot.
    ordered = jax.lax.sort(rows)
    first = jnp.concatenate([jnp.ones(min(k, 1), bool), ordered[1:] != ordered[:-1]])
    slot = jnp.cumsum(first, dtype=jnp.int32) - 1
    inverse = slot[jnp.searchsorted(ordered, rows, method="scan")]
    padding = n + jax.lax.iota(jnp.int32, k)
    unique = padding.at[slot].set(jnp.where(ordered < n, ordered, padding[slot]))
    values = jax.ops.segment_sum(g.values, inverse, num_segments=k)
    return with_values(g, unique, values)


def with_values(g: RowSparse, indices: jax.Array, values: jax.Array) -> RowSparse:
    """A coalesced `RowSparse` with ``g``'s dense shape (no checks: for the transforms)."""
    new = object.__new__(RowSparse)
    _set(new, indices, values, g.dense_shape, True)
    return new


def valid(g: RowSparse) -> jax.Array:
    """For a coalesced ``g``: which entries are rows (not padding), shaped to broadcast."""
    mask = g.indices < g.dense_shape[0]
    return mask.reshape(mask.shape + (1,) * (len(g.dense_shape) - 1))


def gather(x: jax.Array, g: RowSparse) -> jax.Array:
    """The rows of ``x`` at the coalesced ``g``'s indices (row ``n - 1`` at the padding)."""
    return x.at[g.indices].get(mode="clip", indices_are_sorted=True)


def scatter(x: jax.Array, g: RowSparse, rows: jax.Array) -> jax.Array:
    """``x`` with its rows at the coalesced ``g``'s indices set to ``rows`` (cast to its dtype)."""
    return x.at[g.indices].set(
        rows.astype(x.dtype), mode="drop", indices_are_sorted=True, unique_indices=True
    )


def put(x: jax.Array, g: RowSparse, rows: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`scatter`, and ``rows`` as the new ``x`` holds them, for computing further with them.

    Where ``x``'s dtype holds ``rows`` exactly, the rows are read back from the new ``x``:
    the same numbers, and each read then has one consumer, which XLA:CPU fuses it into
    (a lazy Adam step of 10,000 rows of 64 took half the CPU time so). Otherwise the rows
    themselves, unrounded, as the dense update uses them.
    """
    new = scatter(x, g, rows)
    return new, (gather(new, g) if rows.dtype == x.dtype else rows)


def scale(g: RowSparse, factor: jax.Array) -> RowSparse:
    """``factor * g``, coalesced first so that it equals the dense product exactly."""
    g = coalesce(g)
    return with_values(g, g.indices, (g.values * factor).astype(g.values.dtype))


def add_to(api: str, path: str, param: jax.Array, update: RowSparse) -> jax.Array:
    """``param`` plus ``update`` at its rows, in ``param``'s dtype (for `apply_updates`)."""
    param = jnp.asarray(param)
    if param.shape != update.dense_shape:
        raise ValueError(
            f"`{api}` needs each row-sparse update's dense shape to be its parameter's shape. "
            f"Received: updates[{path!r}] of dense shape {update.dense_shape} for "
            f"params[{path!r}] of shape {param.shape}."
        )
    values = update.values.astype(param.dtype)
    if update._coalesced:  # pyright: ignore[reportPrivateUsage]
        return param.at[update.indices].add(
            values, mode="drop", indices_are_sorted=True, unique_indices=True
        )
    return param.at[_rows(update.indices, update.dense_shape[0])].add(values, mode="drop")


def reject(api: str, updates: Any) -> None:
    """Raises `TypeError` if ``updates`` holds a `RowSparse` leaf (for dense-only transforms)."""
    # Paths are costly: look for them only once a row-sparse leaf is there.
    if any(isinstance(leaf, RowSparse) for leaf in jax.tree.leaves(updates, is_leaf=is_row_sparse)):
        flat = jax.tree_util.tree_flatten_with_path(updates, is_leaf=is_row_sparse)[0]
        found = [(path, leaf) for path, leaf in flat if isinstance(leaf, RowSparse)]
        path, leaf = found[0]
        raise TypeError(
            f"`{api}` needs dense updates; it does not take row-sparse ones. Received: "
            f"updates[{path_name(path)!r}] of type RowSparse with dense shape "
            f"{leaf.dense_shape}. Pass `grad.todense()`, or use an optimizer that updates "
            f"only the given rows: `optx.sgd` without momentum, `optx.adagrad` or "
            f"`optx.lazy_adam`."
        )


def embedding_grad(
    fn: Callable[..., Any],
    table: jax.Array,
    ids: ArrayLike,
    *args: Any,
    has_aux: bool = False,
) -> Any:
    """The row-sparse gradient of ``fn(table[ids], *args)`` with respect to ``table``.

    ``fn`` takes the looked-up rows (of shape ``ids.shape + table.shape[1:]``) rather than
    the table, so the gradient is taken with respect to those rows only and never built at
    the table's size. To get the gradients of other parameters in the same pass,
    differentiate with respect to the rows yourself and wrap their gradient::

        loss_value, (g_rows, g_dense) = jax.value_and_grad(loss, argnums=(0, 1))(
            params["emb"][ids], params["dense"], batch
        )
        grads = {
            "emb": optx.RowSparse(ids.reshape(-1), g_rows.reshape(-1, dim), params["emb"].shape),
            "dense": g_dense,
        }

    Args:
      fn: a scalar function of the rows and ``*args``; with ``has_aux``, it returns
        ``(value, aux)``.
      table: the embedding table, at least 1-D.
      ids: integer row numbers of any shape (see `RowSparse` for negative ones).
      *args: further arguments of ``fn`` (not differentiated).
      has_aux: as in `jax.grad`.

    Returns:
      A `RowSparse` of ``table``'s shape, with one entry per id (repeated ids are summed
      when it is used); with ``has_aux``, ``(gradient, aux)``.

    Raises:
      TypeError: ``ids`` is not an integer array.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> table, ids = jnp.ones((1000, 4)), jnp.array([[3, 7], [3, 9]])
      >>> loss = lambda rows, target: jnp.sum((rows.sum(axis=1) - target) ** 2)
      >>> grad = optx.embedding_grad(loss, table, ids, jnp.zeros(4))
      >>> grad.indices, grad.values.shape, grad.dense_shape
      (Array([3, 7, 3, 9], dtype=int32), (4, 4), (1000, 4))
      >>> tx = optx.lazy_adam(0.1)
      >>> updates, state = tx.update({"emb": grad}, tx.init({"emb": table}))
      >>> new = optx.apply_updates({"emb": table}, updates)["emb"]
      >>> new[3], new[0]
      (Array([0.9, 0.9, 0.9, 0.9], dtype=float32), Array([1., 1., 1., 1.], dtype=float32))
    """
    ids = jnp.asarray(ids)
    if not jnp.issubdtype(ids.dtype, jnp.integer):
        raise TypeError(
            f"`optx.embedding_grad` needs integer ids. Received: ids of dtype {ids.dtype}."
        )
    out = jax.grad(fn, has_aux=has_aux)(table[ids], *args)
    rows, aux = out if has_aux else (out, None)
    grad = RowSparse(ids.reshape(-1), rows.reshape(-1, *table.shape[1:]), table.shape)
    return (grad, aux) if has_aux else grad
