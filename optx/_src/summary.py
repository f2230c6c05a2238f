"""`summary`: an optimizer state as a table of hyperparameters, counters and slots.

The walk is generic: any pytree of NamedTuples, tuples and dicts (optax's states too).
Each NamedTuple whose type name ends in ``State`` starts a section; its leaves are rows,
except those inside a nested state, which start sections of their own. Given the
transform that made the state, sections are named after its transforms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.core import Tracer

from optx._src import display
from optx._src import hyperparams as hp
from optx._src.base import GradientTransformationLike, OptState
from optx._src.combine import Chain, NamedChain, Partition
from optx._src.tree import path_name

_TOP = "(top)"


class SummaryRow(NamedTuple):
    """One array of a state, as `Summary.rows` lists it.

    Attributes:
      where: the key path of its sub-state in the state (``"1"``, ``"inner_state/0"``;
        ``""`` for the top).
      owner: the transform that made that sub-state (``"scale_by_adam"``) when known, else
        the sub-state's type name (``"ScaleByAdamState"``).
      kind: ``"hyperparameter"``, ``"counter"`` (an integer scalar), ``"scalar"`` (another
        scalar) or ``"slot"`` (an array).
      name: its key path within the sub-state (``"mu/dense/kernel"``); a hyperparameter's
        public name (``"b1"``; a Keras class's ``"beta_1"``).
      shape: its shape.
      dtype: its dtype's name.
      nbytes: its size in bytes (over all devices, for a sharded array).
      value: a scalar's current value (``1 - stored`` for a decay); ``None`` for arrays,
        abstract arrays (`jax.ShapeDtypeStruct`) and traced values.
      sharding: its `PartitionSpec` (``"P('data', None)"``) for an array on several
        devices, else ``""``.
    """

    where: str
    owner: str
    kind: str
    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    value: float | int | bool | None
    sharding: str


@dataclasses.dataclass(frozen=True, repr=False)
class Summary:
    """An optimizer state as a table: what `optx.summary` returns.

    Plain data: ``rows`` (one `SummaryRow` per array, a NamedTuple with the fields
    ``where, owner, kind, name, shape, dtype, nbytes, value, sharding``), ``total_bytes``
    and ``num_arrays``. ``str``/``repr`` give an aligned text table, ``_repr_html_`` an
    HTML one; ``pandas.DataFrame(summary.rows)`` gives a data frame.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> s = optx.summary(optx.sgd(0.1, momentum=0.9).init({"w": jnp.zeros(3)}))
      >>> s.total_bytes, s.num_arrays
      (24, 4)
      >>> [(r.where, r.kind, r.name, round(r.value, 6)) for r in s.rows if r.kind != "slot"]
      [('0', 'hyperparameter', 'momentum', 0.9), ('1', 'hyperparameter', 'learning_rate', 0.1),
       ('1', 'counter', 'count', 0)]
    """

    rows: tuple[SummaryRow, ...]
    total_bytes: int
    num_arrays: int

    def _cells(self) -> list[tuple[str, ...]]:
        sharded = any(r.sharding for r in self.rows)
        cells, last = [], None
        for r in self.rows:
            section = (r.where, r.owner)
            first = section != last
            last = section
            row = (
                (r.where or _TOP) if first else "",
                r.owner if first else "",
                r.kind,
                r.name,
                str(r.shape),
                r.dtype,
                str(r.nbytes),
                "" if r.value is None else display.short(r.value),
            )
            cells.append(row + ((r.sharding,) if sharded else ()))
        return cells

    def _headers(self) -> list[str]:
        headers = ["where", "owner", "kind", "name", "shape", "dtype", "bytes", "value"]
        return headers + (["sharding"] if any(r.sharding for r in self.rows) else [])

    def _title(self) -> str:
        size = display.format_bytes(self.total_bytes)
        if self.total_bytes >= 1024:
            size += f" ({self.total_bytes} B)"
        return f"optimizer state: {self.num_arrays} arrays, {size}"

    def __repr__(self) -> str:
        if not self.rows:
            return self._title()
        return f"{self._title()}\n{display.text_table(self._headers(), self._cells())}"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        title = f"<strong>{display.cell(self._title())}</strong>"
        return f"<div>{title}{display.html_table(self._headers(), self._cells())}</div>"


def summary(state: OptState, transform: GradientTransformationLike | None = None) -> Summary:
    """Lists the hyperparameters, counters and slots of an optimizer state, with totals.

    Works for the states of optx's and optax's transforms (any pytree of NamedTuples,
    tuples and dicts), for concrete, sharded and traced arrays, and for abstract ones
    (`jax.ShapeDtypeStruct`, as `jax.eval_shape` gives), which show shapes without values.

    Args:
      state: the state, as ``init`` or ``update`` returned it.
      transform: the transform that made ``state`` (optional): sections are then named
        after its transforms (``"scale_by_adam"``) rather than their states' types.

    Returns:
      A `Summary`: rows of (where, owner, kind, name, shape, dtype, bytes, value, sharding),
      total bytes and number of arrays; it prints as a table.

    Raises:
      TypeError: ``state`` is a transform rather than a state, or ``transform`` is not a
        transform.
      ValueError: ``state``'s structure is not the one ``transform`` makes.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.adam(1e-3)
      >>> print(optx.summary(tx.init({"w": jnp.zeros((2, 3))}), tx))
      optimizer state: 11 arrays, 84 B
      where  owner                   kind            name           shape   dtype    bytes  value
      0      scale_by_adam           hyperparameter  b1             ()      float32  8      0.9
                                     hyperparameter  b2             ()      float32  8      0.999
                                     hyperparameter  eps            ()      float32  4      1e-08
                                     hyperparameter  eps_root       ()      float32  4      0
                                     counter         count          ()      int32    4      0
                                     slot            mu/w           (2, 3)  float32  24
                                     slot            nu/w           (2, 3)  float32  24
      1      scale_by_learning_rate  hyperparameter  learning_rate  ()      float32  4      0.001
                                     counter         count          ()      int32    4      0
    """
    if _is_transform(state):
        raise TypeError(
            f"`summary` needs an optimizer state (what `init` returns), not a transform. "
            f"Received: state={state!r}. Call `optx.summary(tx.init(params), tx)`."
        )
    if transform is not None and not _is_transform(transform):
        raise TypeError(
            f"`summary` needs transform to be a transform with `init` and `update`, or None. "
            f"Received: transform={transform!r}."
        )
    owners: dict[tuple[Any, ...], str] = {}
    if transform is not None:
        for path, tx, _ in walk_transforms(transform, state, api="summary"):
            owners.setdefault(path, display.transform_name(tx))
    rows: list[SummaryRow] = []
    _visit(state, (), ((), type(state).__name__), owners, rows)
    # A section's rows together (a wrapper's fields may follow its inner state's), then
    # hyperparameters by name, counters, scalars and slots, each in tree order.
    sections: dict[tuple[str, str], list[SummaryRow]] = {}
    for row in rows:
        sections.setdefault((row.where, row.owner), []).append(row)
    ordered = [
        row
        for group in sections.values()
        for row in sorted(group, key=lambda r: (_KINDS.index(r.kind), _hyper_key(r)))
    ]
    # A decay's residual shares its row: count the arrays themselves.
    return Summary(tuple(ordered), sum(r.nbytes for r in rows), len(jax.tree.leaves(state)))


_KINDS = ("hyperparameter", "counter", "scalar", "slot")


def _hyper_key(row: SummaryRow) -> str:
    return row.name if row.kind == "hyperparameter" else ""


def _is_transform(value: Any) -> bool:
    return callable(getattr(value, "init", None)) and callable(getattr(value, "update", None))


def _is_state(node: Any) -> bool:
    return (
        isinstance(node, tuple)
        and hasattr(node, "_fields")
        and type(node).__name__.endswith("State")
    )


def _children(node: Any) -> list[tuple[Any, Any]]:
    """The (key, child) pairs of a pytree node, one level down."""
    flat = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)[0]
    return [(path[0], child) for path, child in flat if path]


def _visit(
    node: Any,
    path: tuple[Any, ...],
    section: tuple[tuple[Any, ...], str],
    owners: dict[tuple[Any, ...], str],
    rows: list[SummaryRow],
) -> None:
    if _is_state(node):
        section = (path, owners.get(path, type(node).__name__))
    if isinstance(node, hp.HyperParams):
        _hyper_rows(node, path, section, rows)
        return
    children = _children(node)
    if children:
        for key, child in children:
            _visit(child, (*path, key), section, owners, rows)
        return
    if node is None or (isinstance(node, tuple | list | dict) and not node):
        return
    if not (hasattr(node, "dtype") or isinstance(node, bool | int | float)):
        return  # a node with no leaves (`flatten`'s static layout)
    rows.append(_row(node, path, section))


def _hyper_rows(
    node: hp.HyperParams,
    path: tuple[Any, ...],
    section: tuple[tuple[Any, ...], str],
    rows: list[SummaryRow],
) -> None:
    """A row per hyperparameter (its value in force, by its public name).

    Then the schedules' scales and step count. A decay's rounding residual counts in its
    bytes.
    """
    decays = [e.name for e in node.entries if e.decay]
    residuals = dict(zip(decays, node.residuals, strict=True))
    for entry, leaf in node.public_items():
        key = jax.tree_util.DictKey(entry.name)
        row = _row(_array(leaf), (*path, key), section, "hyperparameter", entry.name)
        if entry.name in residuals:
            extra = _row(_array(residuals[entry.name]), path, section).nbytes
            row = row._replace(nbytes=row.nbytes + extra)
        rows.append(row)
    scheduled = [e.name for e in node.entries if e.scheduled]
    for name, scale in zip(scheduled, node.scales, strict=True):
        rows.append(_row(_array(scale), path, section, "scalar", f"{name} (schedule scale)"))
    if node.count is not None:
        rows.append(_row(_array(node.count), path, section, "counter", "schedule count"))


def _array(leaf: Any) -> Any:
    """The array in a leaf (a Flax variable holds one)."""
    leaves = jax.tree.leaves(leaf)
    return leaves[0] if leaves else leaf


def _row(
    leaf: Any,
    path: tuple[Any, ...],
    section: tuple[tuple[Any, ...], str],
    kind: str | None = None,
    name: str | None = None,
) -> SummaryRow:
    start, owner = section
    inner = path[len(start) :]
    shape = tuple(int(d) for d in np.shape(leaf)) if not hasattr(leaf, "shape") else leaf.shape
    dtype = np.dtype(type(leaf)) if isinstance(leaf, bool | int | float) else leaf.dtype
    nbytes = int(np.prod(shape, dtype=np.int64)) * int(dtype.itemsize)
    value = _value(leaf, shape)
    if kind is not None and name is not None:
        pass
    elif _is_injected_hyperparam(inner):  # optax's inject_hyperparams: a dict of them
        kind, name = "hyperparameter", str(inner[-1].key)
    elif shape == ():
        integer = np.issubdtype(dtype, np.integer) if isinstance(dtype, np.dtype) else False
        kind, name = ("counter" if integer else "scalar"), path_name(inner)
    else:
        kind, name = "slot", path_name(inner)
    return SummaryRow(
        path_name(start),
        owner,
        kind,
        name,
        tuple(shape),
        _dtype_name(dtype),
        nbytes,
        value,
        _sharding(leaf),
    )


def _is_injected_hyperparam(inner: tuple[Any, ...]) -> bool:
    return (
        len(inner) >= 2
        and isinstance(inner[-1], jax.tree_util.DictKey)
        and getattr(inner[-2], "name", None) == "hyperparams"
    )


def _dtype_name(dtype: Any) -> str:
    return str(getattr(dtype, "name", dtype))


def _value(leaf: Any, shape: tuple[int, ...]) -> float | int | bool | None:
    """A concrete scalar's value as a Python number; None for arrays, tracers, abstract."""
    if shape != () or isinstance(leaf, Tracer | jax.ShapeDtypeStruct):
        return None
    if isinstance(leaf, bool | int | float):
        return leaf
    if not getattr(leaf, "is_fully_addressable", True):
        return None
    try:
        return np.asarray(leaf).item()
    except (TypeError, ValueError):  # key arrays and other values without a number
        return None


def _sharding(leaf: Any) -> str:
    """A compact sharding spec for an array on several devices; "" otherwise."""
    sharding = getattr(leaf, "sharding", None)
    if sharding is None or isinstance(leaf, Tracer):
        return ""
    try:
        devices = len(sharding.device_set)
    except (AttributeError, TypeError):
        return ""
    if devices <= 1:
        return ""
    spec = getattr(sharding, "spec", None)
    if spec is not None:
        return "P(" + ", ".join(repr(p) for p in spec) + ")"
    return f"{type(sharding).__name__}({devices} devices)"


# ---------------------------------------------------------------------------------------
# Pairing a transform with its state.


def walk_transforms(
    tx: Any, state: Any, path: tuple[Any, ...] = (), api: str = "summary"
) -> Iterator[tuple[tuple[Any, ...], Any, Any]]:
    """(key path in the state, transform, its sub-state) of ``tx`` and its inner ones.

    Depth first, outer transforms before inner ones, chains in order. Knows optx's
    combinators (`chain`, `named_chain`, `partition`) and wrappers whose inner transform
    sits in a field ``inner`` (state field ``inner_state``, or the state itself) or ``X``
    / ``X_optimizer`` (state field ``X_state``). Other transforms are leaves of the walk.

    Raises:
      ValueError: a combinator's state does not have the structure it makes.
    """
    yield path, tx, state
    for keys, child_tx, child_state in _paired_children(tx, state, path, api):
        yield from walk_transforms(child_tx, child_state, path + keys, api)


def _paired_children(
    tx: Any, state: Any, path: tuple[Any, ...], api: str
) -> list[tuple[tuple[Any, ...], Any, Any]]:
    seq, dkey, attr = (
        jax.tree_util.SequenceKey,
        jax.tree_util.DictKey,
        jax.tree_util.GetAttrKey,
    )
    if isinstance(tx, Chain):
        if not isinstance(state, tuple) or len(state) != len(tx.transforms):
            _mismatch(api, tx, state, path, f"a tuple of {len(tx.transforms)} states")
        return [
            ((seq(i),), t, s) for i, (t, s) in enumerate(zip(tx.transforms, state, strict=True))
        ]
    if isinstance(tx, NamedChain):
        names = [n for n, _ in tx.transforms]
        if not isinstance(state, dict) or sorted(state) != sorted(names):
            _mismatch(api, tx, state, path, f"a dict keyed by {names}")
        return [((dkey(n),), t, state[n]) for n, t in tx.transforms]
    if isinstance(tx, Partition):
        labels = [label for label, _ in tx.transforms]
        inner = getattr(state, "inner_states", None)
        if not isinstance(inner, dict) or sorted(inner, key=repr) != sorted(labels, key=repr):
            _mismatch(api, tx, state, path, f"a PartitionState with labels {labels}")
        return [
            ((attr("inner_states"), dkey(label), attr("inner_state")), t, inner[label].inner_state)
            for label, t in tx.transforms
        ]
    if not dataclasses.is_dataclass(tx):
        return []
    fields = getattr(state, "_fields", ())
    found = []
    for field in dataclasses.fields(tx):
        child = getattr(tx, field.name)
        if not _is_transform(child):
            continue
        base = field.name.removesuffix("_optimizer")
        candidates = ["inner_state"] if field.name == "inner" else []
        candidates += [f"{field.name}_state", f"{base}_state"]
        match = next((c for c in candidates if c in fields), None)
        if match is not None:
            found.append(((attr(match),), child, getattr(state, match)))
        elif field.name == "inner":
            found.append(((), child, state))  # the wrapper keeps the inner state as it is
    return found


def _mismatch(api: str, tx: Any, state: Any, path: tuple[Any, ...], expected: str) -> None:
    where = path_name(path) or _TOP
    raise ValueError(
        f"`{api}` needs the state made by the transform's `init`. Received: at {where!r}, "
        f"a state of type {type(state).__name__} for `{display.transform_name(tx)}`, which "
        f"makes {expected}."
    )
