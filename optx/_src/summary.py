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

from optx._src import display, reprs
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


class SummaryGroup(NamedTuple):
    """Rows of a `Summary` that its grouped display shows as one line (`Summary.groups`).

    Attributes:
      where: as its rows'.
      owner: as its rows'.
      kind: as its rows'.
      name: a slot's name (``"mu"``) for a slot's arrays, or for its scalars (the slot of
        scalar parameters) when there are several; else its row's name.
      rows: the `SummaryRow` s it stands for (one, but for slots).
      nbytes: their bytes in total.
      value: a scalar's value, as its row's; ``None`` for arrays and several scalars.
      scheduled: whether a hyperparameter follows a schedule (``value`` is the one in force).
    """

    where: str
    owner: str
    kind: str
    name: str
    rows: tuple[SummaryRow, ...]
    nbytes: int
    value: float | int | bool | None
    scheduled: bool


@dataclasses.dataclass(frozen=True, repr=False)
class Summary:
    """An optimizer state as a table: what `optx.summary` returns.

    Plain data: ``rows`` (one `SummaryRow` per array, a NamedTuple with the fields
    ``where, owner, kind, name, shape, dtype, nbytes, value, sharding``), ``total_bytes``
    and ``num_arrays``; ``groups`` folds each slot's arrays into one `SummaryGroup`,
    ``bytes_by_dtype`` sums the bytes per dtype. ``str``/``repr`` give an aligned text
    table, ``_repr_html_`` an HTML one; ``pandas.DataFrame(summary.rows)`` gives a data
    frame. A state of at most 30 rows shows them all; a larger one shows totals, then
    its groups, then the first arrays of its slots (10 in HTML, folded; 5 in text).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> s = optx.summary(optx.sgd(0.1, momentum=0.9).init({"w": jnp.zeros(3)}))
      >>> s.total_bytes, s.num_arrays, s.bytes_by_dtype
      (24, 4, {'float32': 20, 'int32': 4})
      >>> [(r.where, r.kind, r.name, round(r.value, 6)) for r in s.rows if r.kind != "slot"]
      [('0', 'hyperparameter', 'momentum', 0.9), ('1', 'hyperparameter', 'learning_rate', 0.1),
       ('1', 'counter', 'count', 0)]
      >>> [(g.name, len(g.rows), g.nbytes) for g in s.groups if g.kind == "slot"]
      [('trace', 1, 12)]
    """

    rows: tuple[SummaryRow, ...]
    total_bytes: int
    num_arrays: int

    @property
    def groups(self) -> tuple[SummaryGroup, ...]:
        """The rows with each slot's arrays folded into one group, in the rows' order.

        A slot is named by the first part of its rows' names (``"mu"`` of
        ``"mu/dense/kernel"``); its arrays are one group, its scalars another. Every other
        row is a group of its own.
        """
        scheduled = {
            (r.where, r.owner, r.name.removesuffix(_SCALE))
            for r in self.rows
            if r.kind == "scalar" and r.name.endswith(_SCALE)
        }
        grouped: dict[tuple[str, ...], list[SummaryRow]] = {}
        for i, r in enumerate(self.rows):
            slot = r.name.split("/", 1)[0] if _in_slot(r) else str(i)
            grouped.setdefault((r.where, r.owner, r.kind, slot), []).append(r)
        return tuple(
            SummaryGroup(
                where,
                owner,
                kind,
                slot if kind == "slot" or len(rows) > 1 else rows[0].name,
                tuple(rows),
                sum(r.nbytes for r in rows),
                None if kind == "slot" or len(rows) > 1 else rows[0].value,
                kind == "hyperparameter" and (where, owner, rows[0].name) in scheduled,
            )
            for (where, owner, kind, slot), rows in grouped.items()
        )

    @property
    def bytes_by_dtype(self) -> dict[str, int]:
        """``{dtype name: bytes}`` of the rows, largest first; the values sum to `total_bytes`."""
        totals: dict[str, int] = {}
        for r in self.rows:
            totals[r.dtype] = totals.get(r.dtype, 0) + r.nbytes
        return dict(sorted(totals.items(), key=lambda item: -item[1]))

    @property
    def num_parameters(self) -> int:
        """How many parameters the slots hold arrays for.

        The distinct names of slot rows after their slot's name (``"dense/kernel"`` of
        ``"mu/dense/kernel"``).
        """
        return len({r.name.partition("/")[2] for r in self.rows if _in_slot(r)})

    def _folds(self) -> bool:
        return len(self.rows) > display.FULL

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

    def _group_headers(self) -> list[str]:
        headers = ["where", "owner", "kind", "name", "arrays", "shape", "dtype", "bytes"]
        return headers + ["value"] + (["sharding"] if any(r.sharding for r in self.rows) else [])

    def _group_cells(self) -> list[tuple[str, ...]]:
        sharded = any(r.sharding for r in self.rows)
        cells, last = [], None
        for g in self.groups:
            section = (g.where, g.owner)
            first = section != last
            last = section
            value = "" if g.value is None else display.short(g.value)
            row = (
                (g.where or _TOP) if first else "",
                g.owner if first else "",
                g.kind,
                g.name,
                str(len(g.rows)),
                display.counted(r.shape for r in g.rows),
                display.counted(r.dtype for r in g.rows),
                str(g.nbytes),
                f"schedule: {value}" if g.scheduled else value,
            )
            sharding = display.counted(r.sharding for r in g.rows)
            cells.append(row + ((sharding,) if sharded else ()))
        return cells

    def _slot_rows(self) -> list[SummaryRow]:
        return [r for r in self.rows if _in_slot(r)]

    def _slot_cells(self) -> list[tuple[str, ...]]:
        return [
            (r.where or _TOP, r.owner, r.name, str(r.shape), r.dtype, str(r.nbytes))
            for r in self._slot_rows()
        ]

    def _slot_title(self) -> str:
        return f"{len(self._slot_rows())} slot arrays, one row each (all in `Summary.rows`)"

    _SLOT_HEADERS = ("where", "owner", "name", "shape", "dtype", "bytes")

    def _title(self) -> str:
        size = display.format_bytes(self.total_bytes)
        if self.total_bytes >= 1024:
            size += f" ({self.total_bytes} B)"
        return f"optimizer state: {self.num_arrays} arrays, {size}"

    def _totals(self) -> str:
        by_dtype = display.bytes_by_dtype(self.bytes_by_dtype.items())
        slots = f"slots for {self.num_parameters} parameters" if self.num_parameters else "no slots"
        return f"by dtype: {by_dtype}; {slots}"

    def __repr__(self) -> str:
        if not self.rows:
            return self._title()
        if not self._folds():
            return f"{self._title()}\n{display.text_table(self._headers(), self._cells())}"
        lines = [
            self._title(),
            self._totals(),
            display.text_table(self._group_headers(), self._group_cells(), limit=display.FULL),
        ]
        if self._slot_rows():
            lines.append(f"{self._slot_title()}:")
            lines.append(
                display.text_table(
                    self._SLOT_HEADERS, self._slot_cells(), indent="  ", limit=display.SHOWN_TEXT
                )
            )
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        title = f"<strong>{display.cell(self._title())}</strong>"
        if not self._folds():
            return f"<div>{title}{display.html_table(self._headers(), self._cells())}</div>"
        parts = [
            f"<div>{title}<p>{display.cell(self._totals())}</p>",
            display.html_table(self._group_headers(), self._group_cells(), limit=display.FULL),
        ]
        if self._slot_rows():
            table = display.html_table(self._SLOT_HEADERS, self._slot_cells(), display.SHOWN)
            parts.append(display.folded(self._slot_title(), table))
        return "".join(parts) + "</div>"


_SCALE = " (schedule scale)"


def _in_slot(row: SummaryRow) -> bool:
    """Whether a row is one array of a slot: a slot's (``mu/w``), or a scalar one (``mu/b``).

    A scalar parameter's slot entries are scalars; grouped with their slot, a model of many
    of them still shows one line per slot.
    """
    return row.kind == "slot" or (row.kind == "scalar" and "/" in row.name)


def summary(state: OptState, transform: GradientTransformationLike | None = None) -> Summary:
    """Lists the hyperparameters, counters and slots of an optimizer state, with totals.

    Works for the states of optx's and optax's transforms (any pytree of NamedTuples,
    tuples and dicts), for concrete, sharded and traced arrays, and for abstract ones
    (`jax.ShapeDtypeStruct`, as `jax.eval_shape` gives), which show shapes without values.

    A state of more than 30 rows prints grouped: totals per dtype, one
    line per hyperparameter, counter and slot (``mu``: its arrays, shapes and bytes), then
    the first of the slots' arrays (10 in HTML, folded; 5 in text); ``rows`` holds them all.

    Args:
      state: the state, as ``init`` or ``update`` returned it; or a built stateful
        optimizer (`optx.optimizers.Adam`, ...), whose state is read.
      transform: the transform that made ``state`` (optional): sections are then named
        after its transforms (``"scale_by_adam"``) rather than their states' types.

    Returns:
      A `Summary`: rows of (where, owner, kind, name, shape, dtype, bytes, value, sharding),
      total bytes and number of arrays; it prints as a table.

    Raises:
      TypeError: ``state`` is a transform rather than a state, ``transform`` is not a
        transform, or ``transform`` is given with a stateful optimizer.
      ValueError: ``state``'s structure is not the one ``transform`` makes, or ``state``
        is a stateful optimizer that is not built.

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
    if _is_optimizer(state):
        return _optimizer_summary(state, transform)
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


def _is_optimizer(value: Any) -> bool:
    """Whether ``value`` is a stateful optimizer (`optx.optimizers`): it keeps its state."""
    kind = type(value)  # properties read on the class: reading them may take a lock
    return (
        isinstance(getattr(kind, "built", None), property)
        and isinstance(getattr(kind, "variables", None), property)
        and hasattr(value, "transform")
        and hasattr(value, "_state")
    )


def _optimizer_summary(opt: Any, transform: Any) -> Summary:
    """The summary of a stateful optimizer's state, read under its lock."""
    if transform is not None:
        raise TypeError(
            f"`summary` needs transform=None for a stateful optimizer, which knows its own. "
            f"Received: transform={reprs.short(transform)}."
        )
    if not opt.built:
        raise ValueError(
            f"`summary` needs a built optimizer. Call `optimizer.build(params)` first "
            f"(`apply` builds on its first call). Received: an optimizer {opt.name!r} that "
            f"was never built."
        )
    with opt._lock:  # a step in another thread donates the buffers read here
        try:
            return summary(opt._state, opt.transform)
        except ValueError:  # a wrapper whose state is not its transform's: types name it
            return summary(opt._state)


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
        rows.append(_row(_array(scale), path, section, "scalar", name + _SCALE))
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
    / ``X_optimizer`` (state field ``X_state`` or ``inner_X_state``). Other transforms are
    leaves of the walk.

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
        candidates += [f"{field.name}_state", f"{base}_state", f"inner_{field.name}_state"]
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
