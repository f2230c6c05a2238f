"""One row of a workload's table: an optimizer step as optx (three variants) or a peer runs it.

Every JAX step has the signature ``(params, state, grads) -> (params, state)`` and is
compiled once per donation mode (donating the parameters and the state, or nothing); the
timed loop feeds each step's outputs to the next. PyTorch's optimizers update in place
(there is no donation to switch off) and compile nothing.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from typing import Any

import jax

import optx
from bench import optimizers, timing
from bench.workloads import copy_tree

Make = Callable[[], tuple[Callable[..., Any], Any, Any, Any]]  # -> (fn, params, state, grads)


@dataclasses.dataclass
class Row:
    """The figures of one optimizer in one implementation on one workload."""

    optimizer: str
    library: str  # optx, optax, keras or torch
    variant: str  # optx: per-leaf, flat state, flat params; peers: how it runs
    donated: timing.Timing | None = None
    plain: timing.Timing | None = None  # not donated
    compile_s: float | None = None
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    note: str = ""  # why there is no figure ("not installed", "n/a: ...", "error: ...")
    ratio: float | None = None  # filled by the report (see `report.ratios`)
    fraction: float | None = None  # of the bandwidth floor, donated

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["donated"] = self.donated.as_dict() if self.donated else None
        out["plain"] = self.plain.as_dict() if self.plain else None
        return out


def error_note(e: Exception) -> str:
    """The note of a row whose run raised (the run goes on; the CI smoke test fails)."""
    lines = str(e).splitlines() or [""]
    return f"error: {type(e).__name__}: {lines[0][:120]}"


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def run_jax(
    row: Row, make: Make, loops: int, nondonated: bool, options: dict[str, Any] | None = None
) -> Row:
    """Compiles (with XLA ``options``) and times ``make``'s step, donated (and not, if
    asked); fills ``row``."""
    for donate in (True, False) if nondonated else (True,):
        fn, params, state, grads = make()
        compiled, seconds = timing.compile_step(
            fn, (params, state, grads), (0, 1) if donate else (), options
        )
        box = [params, state]

        def step(compiled: Any = compiled, box: list[Any] = box, grads: Any = grads) -> Any:
            box[0], box[1] = compiled(box[0], box[1], grads)
            return box[0]

        t = timing.time_loop(step, loops)
        if donate:
            row.donated, row.compile_s, row.memory = t, seconds, timing.memory(compiled)
        else:
            row.plain = t
        del compiled, box, step, params, state
    return row


def _functional(tx: Any, apply: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def step(params: Any, state: Any, grads: Any) -> tuple[Any, Any]:
        updates, state = tx.update(grads, state, params)
        return apply(params, updates), state

    return step


def optx_make(name: str, variant: str, params: Any, grads: Any) -> Make:
    """optx's step: ``per-leaf`` (the tree as it is), ``flat state`` or ``flat params``."""

    def make() -> tuple[Callable[..., Any], Any, Any, Any]:
        tx = optimizers.optx_tx(name)
        p, g = copy_tree(params), grads
        if variant != "per-leaf":
            tx = optx.flatten(tx)
        if variant == "flat params":
            p, g = optx.flatten_tree(p), optx.flatten_tree(g)
        return _functional(tx, optx.apply_updates), p, tx.init(p), g

    return make


def optx_note(name: str, variant: str) -> str:
    """Why an optx variant has no figure in this run ("" when it runs)."""
    needs = {"flat state": ("flatten",), "flat params": ("flatten", "flatten_tree")}
    missing = [n for n in needs.get(variant, ()) if not hasattr(optx, n)]
    if missing:
        return f"not available (no optx.{missing[-1]} yet)"
    if variant != "per-leaf":
        try:
            optx.flatten(optimizers.optx_tx(name))
        except (ValueError, TypeError) as e:
            if "elementwise" in str(e):
                return "n/a: not elementwise (optx.flatten refuses it)"
            return f"n/a: {str(e).split('. ')[0][:70]}"
    return ""


def optax_make(name: str, params: Any, grads: Any) -> Make:
    import optax

    def make() -> tuple[Callable[..., Any], Any, Any, Any]:
        tx = optimizers.optax_tx(name)
        p = copy_tree(params)
        spec = optimizers.SPECS[name]
        if spec.ema is None:
            return _functional(tx, optax.apply_updates), p, tx.init(p), grads
        inner = _functional(tx, optax.apply_updates)

        def step(params: Any, state: Any, grads: Any) -> tuple[Any, Any]:
            params, inner_state = inner(params, state[0], grads)
            ema = optax.incremental_update(params, state[1], 1.0 - spec.ema)
            return params, (inner_state, ema)

        return step, p, (tx.init(p), copy_tree(params)), grads

    return make


def keras_note() -> str:
    if not installed("keras"):
        return "not installed"
    import keras

    backend = keras.backend.backend()
    return "" if backend == "jax" else f"n/a: Keras backend is {backend}, not jax"


def keras_make(name: str, params: Any, grads: Any) -> Make:
    """Keras's ``stateless_apply`` on the leaves as a list (its variables' order)."""
    import keras

    def make() -> tuple[Callable[..., Any], Any, Any, Any]:
        opt = optimizers.keras_optimizer(name)
        leaves = jax.tree.leaves(params)
        opt.build([keras.Variable(x, name=f"v{i}") for i, x in enumerate(leaves)])

        def step(params: Any, state: Any, grads: Any) -> tuple[Any, Any]:
            return opt.stateless_apply(state, grads, params)

        state = [jax.numpy.array(v.value, copy=True) for v in opt.variables]
        return step, copy_tree(leaves), state, jax.tree.leaves(grads)

    return make


def torch_mode() -> str:
    """``fused`` where this PyTorch has fused CPU kernels for AdamW, else ``foreach``."""
    import torch

    p = torch.nn.Parameter(torch.zeros(4))
    p.grad = torch.ones(4)
    try:
        torch.optim.AdamW([p], fused=True).step()
    except (RuntimeError, TypeError, ValueError):
        return "foreach"
    return "fused"


def run_torch(row: Row, params: Any, grads: Any, loops: int) -> Row:
    """PyTorch's optimizer in place on CPU tensors holding the same values."""
    import numpy as np
    import torch

    name = row.optimizer
    cls = getattr(torch.optim, optimizers.TORCH[name])
    mode = row.variant.split()[0]
    tensors = [torch.nn.Parameter(torch.from_numpy(np.array(x))) for x in jax.tree.leaves(params)]
    for t, g in zip(tensors, jax.tree.leaves(grads), strict=True):
        t.grad = torch.from_numpy(np.array(g))
    opt = cls(tensors, **{mode: True}, **optimizers.torch_kwargs(name))
    ema_rate = optimizers.SPECS[name].ema
    ema = [t.detach().clone() for t in tensors] if ema_rate is not None else []

    def step() -> None:
        if ema_rate is not None:
            torch.nn.utils.clip_grad_norm_(tensors, optimizers.CLIP, foreach=True)
        opt.step()
        if ema_rate is not None:
            with torch.no_grad():
                torch._foreach_lerp_(ema, [t.detach() for t in tensors], 1.0 - ema_rate)

    with torch.no_grad():
        row.donated = timing.time_loop(step, loops)
    row.note = "in place"
    return row
