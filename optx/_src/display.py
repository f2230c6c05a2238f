"""Tables in plain text and HTML, shared by every display of optx.

`Transform._repr_html_`, `optx.summary` and the stateful optimizers' displays render their
tables here, so they look alike and escape alike. Cells given as `Raw` are trusted HTML
(a nested table); every other cell is converted with `str` and escaped. A display of a big
model stays short: past `FULL` rows it groups them, and caps what it lists (`SHOWN` rows in
HTML, folded in a ``<details>`` element; `SHOWN_TEXT` in text) with ``"... and N more"``.
"""

from __future__ import annotations

import dataclasses
import html
import inspect
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from optx._src import hyperparams as hp


class Raw(str):
    """A cell that is already HTML (a nested table), inserted without escaping."""

    __slots__ = ()


def cell(value: Any) -> str:
    """One HTML cell's content: `Raw` as it is, anything else as escaped text."""
    return value if isinstance(value, Raw) else html.escape(str(value))


FULL = 30
"""A display lists every row of a table of at most this many rows; a longer one is grouped."""

SHOWN = 10
"""The rows a folded HTML table shows before its ``"... and N more"`` row."""

SHOWN_TEXT = 5
"""The rows a capped text table shows (text does not fold: it keeps to a screen)."""


def more(hidden: int) -> str:
    """The line that stands for ``hidden`` rows left out of a table.

    Example:
      >>> more(590)
      '... and 590 more'
    """
    return f"... and {hidden} more"


def html_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], limit: int | None = None
) -> str:
    """An HTML ``<table>``: a header row of ``headers``, then one row per item of ``rows``.

    With ``limit``, the first ``limit`` rows, then one row ``"... and N more"`` for the rest.

    Example:
      >>> html_table(["name", "value"], [["lr", "<0.1>"]])
      '<table><tr><th>name</th><th>value</th></tr><tr><td>lr</td><td>&lt;0.1&gt;</td></tr></table>'
      >>> html_table(["i"], [[0], [1], [2]], limit=1).removeprefix("<table><tr><th>i</th></tr>")
      '<tr><td>0</td></tr><tr><td colspan="1">... and 2 more</td></tr></table>'
    """
    rows = list(rows)
    shown, hidden = _cap(rows, limit)
    head = "".join(f"<th>{cell(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in shown)
    if hidden:
        body += f'<tr><td colspan="{len(headers)}">{cell(more(hidden))}</td></tr>'
    return f"<table><tr>{head}</tr>{body}</table>"


def text_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    indent: str = "",
    limit: int | None = None,
) -> str:
    """A plain-text table: columns left-aligned to their widest cell, two spaces apart.

    With ``limit``, the first ``limit`` rows, then a line ``"... and N more"`` for the rest.

    Example:
      >>> print(text_table(["name", "value"], [["learning_rate", 0.1], ["b1", 0.9]]))
      name           value
      learning_rate  0.1
      b1             0.9
      >>> print(text_table(["i"], [[0], [1], [2]], limit=1))
      i
      0
      ... and 2 more
    """
    shown, hidden = _cap(list(rows), limit)
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in shown]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    if hidden:
        lines.append(more(hidden))
    return "\n".join(indent + line for line in lines)


def _cap(rows: list[Any], limit: int | None) -> tuple[list[Any], int]:
    """The rows a table shows, and how many it leaves out."""
    if limit is None or len(rows) <= limit:
        return rows, 0
    return rows[:limit], len(rows) - limit


def folded(title: str, body: str) -> str:
    """HTML that shows ``title`` and unfolds ``body`` (a ``<details>`` element) on a click.

    Example:
      >>> folded("600 rows", "<table></table>")
      '<details><summary>600 rows</summary><table></table></details>'
    """
    return f"<details><summary>{cell(title)}</summary>{body}</details>"


def counted(values: Iterable[Any], limit: int = 3) -> str:
    """Distinct values with how many times each occurs, most frequent first, the first ``limit``.

    One value alone shows without its count.

    Example:
      >>> counted([(64, 64), (64,), (64, 64), (64,), (8,)])
      '2 x (64, 64), 2 x (64,), 1 x (8,)'
      >>> counted(["float32", "float32"]), counted(range(5), limit=2)
      ('float32', '1 x 0, 1 x 1, 3 more')
    """
    counts: dict[Any, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    if len(counts) == 1:
        return str(next(iter(counts)))
    ranked = sorted(counts.items(), key=lambda item: -item[1])  # stable: ties keep their order
    shown = [f"{n} x {value}" for value, n in ranked[:limit]]
    if len(ranked) > limit:
        shown.append(f"{len(ranked) - limit} more")
    return ", ".join(shown)


def bytes_by_dtype(items: Iterable[tuple[str, int]]) -> str:
    """``(dtype, bytes)`` pairs summed per dtype, largest first: ``"float32 1.5 KiB, int32 4 B"``.

    Example:
      >>> bytes_by_dtype([("int32", 4), ("float32", 1024), ("float32", 512)])
      'float32 1.5 KiB, int32 4 B'
    """
    totals: dict[str, int] = {}
    for dtype, nbytes in items:
        totals[dtype] = totals.get(dtype, 0) + nbytes
    ranked = sorted(totals.items(), key=lambda item: -item[1])
    return ", ".join(f"{dtype} {format_bytes(n)}" for dtype, n in ranked)


def format_bytes(n: int) -> str:
    """A byte count for people: ``"512 B"``, ``"1.5 KiB"``, ``"3.0 MiB"``, ``"2.0 GiB"``.

    Example:
      >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 2**20)
      ('512 B', '1.5 KiB', '3.0 MiB')
    """
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def short(value: Any) -> str:
    """A value for a table cell: floats to 6 significant digits, callables by name.

    Example:
      >>> short(0.0010000000474974513), short(3), short(print)
      ('0.001', '3', 'print')
    """
    if isinstance(value, float | np.floating):
        return f"{float(value):.6g}"
    if isinstance(value, np.dtype):
        return value.name
    if inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value):
        return callable_name(value)
    return repr(value)


def callable_name(fn: Any) -> str:
    """A function's qualified name without ``<locals>`` parts (``"make.<locals>.f"`` → ``"f"``)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not isinstance(name, str):
        return type(fn).__name__
    return name.rsplit(".<locals>.", 1)[-1]


def transform_name(tx: Any) -> str:
    """The factory name of a transform: optx's ``name``; for optax's, its init's maker."""
    name = getattr(type(tx), "name", None)
    if isinstance(name, str):
        return name
    init = getattr(tx, "init", None)
    qualname = getattr(init, "__qualname__", "")
    if ".<locals>." in qualname:
        return qualname.split(".<locals>.", 1)[0]
    return type(tx).__name__


def _is_transform(value: Any) -> bool:
    return callable(getattr(value, "init", None)) and callable(getattr(value, "update", None))


def _is_pair(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and _is_transform(value[1])


def transform_html(tx: Any) -> str:
    """A transform's configuration as an HTML table; transforms inside it nest as tables.

    Columns: argument, value, kind (``dynamic``: a hyperparameter held in the state;
    ``schedule``: a hyperparameter given as a callable; ``static``: fixed by the
    configuration; blank for nested transforms). A transform that is not optx's shows its
    name only.
    """
    title = f"<strong>{html.escape(transform_name(tx))}</strong>"
    if not dataclasses.is_dataclass(tx):
        return f"<div>{title}</div>"
    rows = []
    for name, value in config_items(tx):
        cell_value = _value_cell(value)
        kind = "" if isinstance(cell_value, Raw) else "static"
        if name in _hyperparam_fields(tx) and value is not None:
            kind = "schedule" if callable(value) else "dynamic"
        rows.append((name, cell_value, kind))
    if not rows:
        return f"<div>{title}</div>"
    return f"<div>{title}{html_table(['argument', 'value', 'kind'], rows)}</div>"


def _value_cell(value: Any) -> Any:
    if _is_transform(value):
        return Raw(transform_html(value))
    if isinstance(value, tuple) and value and all(_is_transform(v) for v in value):
        rows = [(i, _value_cell(v)) for i, v in enumerate(value)]
        return Raw(html_table(["#", "transform"], rows))
    if isinstance(value, tuple) and value and all(_is_pair(v) for v in value):
        return Raw(html_table(["key", "transform"], [(k, _value_cell(v)) for k, v in value]))
    # A configuration holds exact Python numbers: shown as written (1.0, 1e-08).
    return repr(value) if isinstance(value, float) else short(value)


def config_items(tx: Any) -> list[tuple[str, Any]]:
    """The ``(argument, value)`` pairs a transform's ``repr`` shows.

    Every hyperparameter and required argument, and the other arguments where they differ
    from their defaults.
    """
    items = []
    hyperparams = _hyperparam_fields(tx)
    for field in dataclasses.fields(tx):
        if not field.repr:
            continue
        value = getattr(tx, field.name)
        shown = field.name in hyperparams or field.default is dataclasses.MISSING
        if not shown and _equal(value, field.default):
            continue
        items.append((field.name, value))
    return items


def _hyperparam_fields(tx: Any) -> set[str]:
    return {name for name, _ in hp.specs(type(tx))}


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # arrays or objects whose comparison is not a bool
        return False
