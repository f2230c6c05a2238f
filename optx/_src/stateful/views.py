"""What the stateful wrapper reads out of a functional state, and how it shows it.

The EMA weights, the loss scale, and the text and HTML displays of an optimizer. Each
function takes the optimizer (a `StatefulBase`) as its argument: `StatefulBase` calls them.
"""

from __future__ import annotations

import html as html_lib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from optx._src.base import find_states
from optx._src.combine import MaskedNode
from optx._src.display import FULL, SHOWN, bytes_by_dtype, counted, folded, html_table, more
from optx._src.display import format_bytes as _bytes
from optx._src.display import short as _short
from optx._src.ema_params import EmaParamsState
from optx._src.loss_scale import DynamicLossScaleState, UnscaleGradientsState
from optx._src.stateful.step import check_params
from optx._src.stateful.variable import _assign, _is_variable, _value, variable_names

_MASKED = lambda x: isinstance(x, MaskedNode)  # noqa: E731


def ema_weights(state: Any) -> Any | None:
    """The moving average of the parameters held in ``state`` (merged over partitions)."""
    found = find_states(state, EmaParamsState)
    if not found:
        return None
    trees = [s.ema for s in found]
    flat = [jax.tree.flatten(t, is_leaf=_MASKED) for t in trees]
    merged = []
    for leaves in zip(*(f[0] for f in flat), strict=True):
        real = [x for x in leaves if not _MASKED(x)]
        merged.append(real[0] if real else MaskedNode())
    return jax.tree.unflatten(flat[0][1], merged)


def finalize(opt: Any, params: Any) -> Any:
    """`Optimizer.finalize_variable_values`."""
    opt._require_built("finalize_variable_values")
    ema = ema_weights(opt._state)
    leaves = jax.tree.leaves(params, is_leaf=_is_variable)
    if leaves and all(_is_variable(v) for v in leaves):
        if ema is None:
            return params
        names = variable_names(leaves)
        if sorted(names) != sorted(opt._params_paths):
            raise ValueError(
                f"`finalize_variable_values` needs the variables the optimizer was built "
                f"with. Received: {names}; expected: {opt._params_paths}."
            )
        for name, var in zip(names, leaves, strict=True):
            _assign(var, ema[name].astype(_value(var).dtype))
        return params
    check_params("finalize_variable_values", params, opt._treedef, opt._spec)
    if ema is None:
        return params
    return jax.tree.map(lambda e, p: jnp.asarray(e, jnp.result_type(p)), ema, params)


def loss_scale(state: Any) -> jax.Array:
    """The loss-scale factor held in ``state`` (1 when there is none)."""
    dynamic = find_states(state, DynamicLossScaleState)
    if dynamic:
        return dynamic[0].scale
    static = find_states(state, UnscaleGradientsState)
    if static:
        return static[0].hyperparams["loss_scale_factor"]
    return jnp.ones((), jnp.float32)


def initial_loss_scale(opt: Any) -> jax.Array:
    """The factor an unbuilt optimizer will scale the loss by."""
    return jnp.asarray(getattr(opt, "_initial_loss_scale", 1.0), jnp.float32)


def hyperparameters(opt: Any) -> dict[str, float]:
    """The hyperparameters by their public names, as the variables hold them."""
    if not opt.built:
        return {}
    out = {}
    for key in opt._require_built("repr").hyperparams:
        value = np.asarray(opt._hyper_value(key))
        out[key] = float(value) if value.shape == () else value
    return out


def _scheduled(opt: Any) -> set[str]:
    """The keys of the hyperparameters that follow a schedule."""
    found = opt._require_built("repr").found or {}
    return {key for key, f in found.items() if f and f[0].entry.scheduled}


def _slots(opt: Any, values: dict[str, Any]) -> dict[str, list[tuple[str, Any]]]:
    """``{slot: [(parameter path, array), ...]}``, slots and parameters in layout order."""
    out: dict[str, list[tuple[str, Any]]] = {}
    for (path, slot), key in opt._require_built("repr").slots.items():
        out.setdefault(slot, []).append((path, values[key]))
    return out


def _header(opt: Any) -> str:
    args = opt._repr_args()
    return f"{type(opt).__name__}({args})"


def _state_line(values: dict[str, Any]) -> str:
    """``"state 4.7 MiB (float32 4.7 MiB, int32 8 B)"``: the bytes, then per dtype."""
    items = [(np.dtype(v.dtype).name, int(v.nbytes)) for v in values.values()]
    total = sum(n for _, n in items)
    return f"state {_bytes(total)} ({bytes_by_dtype(items)})" if items else "state 0 B"


def text(opt: Any) -> str:
    """`Optimizer.__repr__`: one state, read under the optimizer's lock.

    (A step in another thread would donate the buffers being read.) An optimizer that is
    not built holds no state of its own: its owner's is read under the owner's lock.
    """
    if opt.built:
        with opt._lock:
            return _text(opt)
    return _text(opt)


def _text(opt: Any) -> str:
    lines = [_header(opt)]
    if not opt.built:
        owner = opt._owner
        if owner is not None and owner[0].built:
            lines.append(
                f"  held by {type(owner[0]).__name__} {owner[0].name!r}; "
                f"learning_rate={_short(float(opt.learning_rate))}; "
                f"iterations={int(opt.iterations)}"
            )
        else:
            lines.append("  not built (builds on the first step)")
        return "\n".join(lines)
    values = opt.variables
    lines.append(
        f"  built for {len(opt._params_paths)} parameters; iterations="
        f"{int(opt.iterations)}; {_state_line(values)}"
    )
    scheduled = _scheduled(opt)
    shown = [
        f"{k}={_short(v)}" + (" (schedule)" if k in scheduled else "")
        for k, v in hyperparameters(opt).items()
    ]
    lines.append(f"  hyperparameters: {_listed(shown, ', ') or 'none'}")
    slots = [
        f"{slot} ({len(arrays)} arrays, {_bytes(sum(int(a.nbytes) for _, a in arrays))})"
        for slot, arrays in _slots(opt, values).items()
    ]
    lines.append(f"  slots: {_listed(slots, '; ') or 'none'}")
    return "\n".join(lines)


def _listed(items: list[str], sep: str) -> str:
    """``items`` joined by ``sep``: the first `FULL`, then ``"... and N more"``."""
    if len(items) <= FULL:
        return sep.join(items)
    return sep.join([*items[:FULL], more(len(items) - FULL)])


def html(opt: Any) -> str:
    """`Optimizer._repr_html_`: the same as `text`, as tables (read under the lock).

    An optimizer of more than `FULL` slot arrays shows one row per slot (its arrays,
    shapes, dtypes and bytes) and folds the per-parameter rows, the first `SHOWN` of them,
    into a ``<details>`` element.
    """
    if opt.built:
        with opt._lock:
            return _html(opt)
    return _html(opt)


def _html(opt: Any) -> str:
    esc = html_lib.escape
    parts = [f"<div><strong>{esc(_header(opt))}</strong>"]
    if not opt.built:
        parts.append("<p>not built (builds on the first step)</p></div>")
        return "".join(parts)
    values = opt.variables
    parts.append(
        f"<p>{len(opt._params_paths)} parameters, iterations {int(opt.iterations)}, "
        f"{esc(_state_line(values))}</p>"
    )
    scheduled = _scheduled(opt)
    parts.append(
        html_table(
            ["hyperparameter", "value"],
            [
                (k, f"schedule: {_short(v)}" if k in scheduled else _short(v))
                for k, v in hyperparameters(opt).items()
            ],
            limit=FULL,
        )
    )
    slots = _slots(opt, values)
    rows = [
        (path, slot, tuple(a.shape), a.dtype)
        for slot, arrays in slots.items()
        for path, a in arrays
    ]
    headers = ["parameter", "slot", "shape", "dtype"]
    if len(rows) <= FULL:
        parts.append(html_table(headers, rows))
    else:
        grouped = [
            (
                slot,
                len(arrays),
                counted(tuple(a.shape) for _, a in arrays),
                counted(np.dtype(a.dtype).name for _, a in arrays),
                sum(int(a.nbytes) for _, a in arrays),
            )
            for slot, arrays in slots.items()
        ]
        parts.append(html_table(["slot", "arrays", "shape", "dtype", "bytes"], grouped, FULL))
        per_parameter = html_table(headers, rows, limit=SHOWN)
        parts.append(folded(f"{len(rows)} slot arrays, one row each", per_parameter))
    parts.append("</div>")
    return "".join(parts)
