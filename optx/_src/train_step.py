"""A jitted training step that is right by default: `make_step`.

The step a user would write by hand — ``jax.value_and_grad``, ``update``, `apply_updates`
under ``jax.jit`` — is fast only with three details right: the parameters and the state
donated, the outputs returned in the order of the donated inputs (otherwise XLA copies every
array back), and on CPU `compiler_options`. `make_step` writes that step once, and keeps
the compiled function in a cache keyed on ``(loss_fn, tx, options)``: building the step
again with the same loss function and an equal transform (re-running a notebook cell)
returns the step already compiled.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from optx._src.base import GradientTransformationLike, Params, apply_updates
from optx._src.compiler import compiler_options as default_compiler_options
from optx._src.flat_tree import FlatTree

# What ``update`` may receive besides the gradients, state and parameters, by name.
EXTRA_ARGS = ("value", "grad", "value_fn")
# Steps kept compiled; the least recently built are dropped first.
CACHE_SIZE = 64


class TrainStep:
    """A compiled training step ``(params, state, *batch) -> (params, state, loss)``.

    Made by `make_step`; call it as a function. With ``has_aux=True`` the third output is
    ``(loss, aux)``. The parameters and the state passed in are donated (when ``donate``):
    use the returned ones.

    Attributes:
      loss_fn: the loss function, ``loss_fn(params, *batch)``.
      tx: the gradient transformation.
      jitted: the underlying ``jax.jit`` function (``.lower(...)``, ``.trace(...)``).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> def loss_fn(params, x):
      ...     return jnp.sum((params["w"] - x) ** 2), {"x": x}
      >>> step = optx.make_step(loss_fn, optx.sgd(0.25), has_aux=True)
      >>> step
      TrainStep(loss_fn, chain(identity(), scale_by_learning_rate(learning_rate=0.25)),
                has_aux=True)
      >>> params = {"w": jnp.zeros(2)}
      >>> params, state, (loss, aux) = step(params, step.tx.init(params), jnp.ones(2))
      >>> params["w"], float(loss)
      (Array([0.5, 0.5], dtype=float32), 2.0)
    """

    __slots__ = ("has_aux", "jitted", "loss_fn", "tx")

    def __init__(
        self, loss_fn: Callable[..., Any], tx: GradientTransformationLike, has_aux: bool, jitted
    ) -> None:
        self.loss_fn = loss_fn
        self.tx = tx
        self.has_aux = has_aux
        self.jitted = jitted

    def __call__(self, params: Params, state: Any, *batch: Any) -> tuple[Params, Any, Any]:
        return self.jitted(params, state, *batch)

    def lower(self, params: Params, state: Any, *batch: Any) -> Any:
        """``jax.jit``'s ``lower`` of the step: its HLO, its compiled form, its cost."""
        return self.jitted.lower(params, state, *batch)

    def __repr__(self) -> str:
        name = getattr(self.loss_fn, "__qualname__", None) or repr(self.loss_fn)
        aux = ", has_aux=True" if self.has_aux else ""
        return f"TrainStep({name}, {self.tx!r}{aux})"


_CACHE: collections.OrderedDict[Any, TrainStep] = collections.OrderedDict()
_LOCK = threading.Lock()


def make_step(
    loss_fn: Callable[..., Any],
    tx: GradientTransformationLike,
    *,
    has_aux: bool = False,
    extra_args: Sequence[str] = (),
    donate: bool = True,
    in_shardings: Any = None,
    out_shardings: Any = None,
    compiler_options: dict[str, Any] | None = None,
) -> TrainStep:
    """A jitted training step: gradients, ``tx.update`` and `apply_updates` in one program.

    The step computes ``jax.value_and_grad(loss_fn)(params, *batch)``, then
    ``tx.update(grads, state, params)`` and `apply_updates`, and returns
    ``(params, state, loss)``. It is the step one writes by hand, with what makes it fast:

    - the parameters and the state are donated (XLA writes the new ones in place);
    - the outputs come in the order of the donated inputs (parameters, then state): JAX
      gives each output the buffer of the first unused donated input of its shape and
      dtype, so ``-> (state, params)`` would make XLA copy every array back;
    - it is compiled with `compiler_options` for the backend (on CPU, in-place updates of
      a buffer that two loops read);
    - it is cached on ``(loss_fn, tx, options)``: calling `make_step` again with the same
      function and an equal transform (optx's transforms compare by configuration), as a
      re-run notebook cell does, returns the step already compiled.

    Parameters held flat (an `optx.FlatTree`, from `optx.flatten_tree`) are unflattened for
    ``loss_fn``, which always sees the tree; the gradients, the update and the new parameters
    stay flat. The batch arguments are neither donated nor changed.

    Args:
      loss_fn: ``loss_fn(params, *batch) -> loss`` (a scalar), or ``-> (loss, aux)`` with
        ``has_aux``. Compared by identity: define it once, outside the cell you re-run.
      tx: the gradient transformation (optx's or optax's).
      has_aux: ``loss_fn`` returns ``(loss, aux)``; the step's third output is then
        ``(loss, aux)``.
      extra_args: what ``tx.update`` also receives, by name: ``"value"`` (the loss, for
        `optx.reduce_on_plateau`, Polyak step sizes, ...), ``"grad"`` (the gradients), and
        ``"value_fn"`` (``params -> loss`` on this batch, for line searches).
      donate: donate the parameters and the state (the default). ``False`` keeps the
        arrays passed in usable, at the cost of new buffers every step.
      in_shardings: passed to ``jax.jit``: one entry per argument, ``(params, state,
        *batch)``. ``None``: from the arguments.
      out_shardings: passed to ``jax.jit``: ``(params, state, loss)``. ``None``: what XLA
        chooses.
      compiler_options: XLA options; ``None``: `optx.compiler_options()` for the default
        backend.

    Returns:
      A `TrainStep`: ``step(params, state, *batch) -> (params, state, loss)``.

    Raises:
      TypeError: ``loss_fn`` is not callable, ``tx`` has no ``init``/``update``, or an
        option has the wrong type.
      ValueError: an unknown name in ``extra_args``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> def loss_fn(params, x, y):
      ...     return jnp.mean((x @ params["w"] - y) ** 2)
      >>> tx = optx.adam(0.1)
      >>> step = optx.make_step(loss_fn, tx)
      >>> params = {"w": jnp.zeros(2)}
      >>> state = tx.init(params)
      >>> x, y = jnp.eye(2), jnp.array([1.0, -1.0])
      >>> for _ in range(3):
      ...     params, state, loss = step(params, state, x, y)
      >>> round(float(loss), 4)
      0.6407
      >>> optx.make_step(loss_fn, optx.adam(0.1)) is step  # an equal transform: no recompile
      True
    """
    api = "optx.make_step"
    if not callable(loss_fn):
        raise TypeError(
            f"`{api}` needs loss_fn to be a function `loss_fn(params, *batch) -> loss`. "
            f"Received: loss_fn={loss_fn!r}."
        )
    if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
        raise TypeError(
            f"`{api}` needs tx to be a gradient transformation (with `init` and `update`). "
            f"Received: tx={tx!r}."
        )
    for name, value in (("has_aux", has_aux), ("donate", donate)):
        if not isinstance(value, bool | np.bool_):
            raise TypeError(f"`{api}` needs {name} to be a bool. Received: {name}={value!r}.")
    has_aux, donate = bool(has_aux), bool(donate)
    if isinstance(extra_args, str):
        extra_args = (extra_args,)
    extra = tuple(extra_args)
    for name in extra:
        if name not in EXTRA_ARGS:
            raise ValueError(
                f"`{api}` needs each of extra_args to be one of {', '.join(EXTRA_ARGS)}. "
                f"Received: {name!r}."
            )
    if compiler_options is None:
        compiler_options = default_compiler_options()
    elif not isinstance(compiler_options, dict):
        raise TypeError(
            f"`{api}` needs compiler_options to be a dict or None. "
            f"Received: compiler_options={compiler_options!r}."
        )
    options = (
        has_aux,
        extra,
        donate,
        _hashable(in_shardings),
        _hashable(out_shardings),
        tuple(sorted(compiler_options.items())),
    )
    key = (loss_fn, _hashable(tx), options)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    jit_kwargs: dict[str, Any] = {"compiler_options": dict(compiler_options) or None}
    if donate:
        jit_kwargs["donate_argnums"] = (0, 1)
    if in_shardings is not None:
        jit_kwargs["in_shardings"] = in_shardings
    if out_shardings is not None:
        jit_kwargs["out_shardings"] = out_shardings
    train_step = TrainStep(
        loss_fn, tx, has_aux, jax.jit(_body(loss_fn, tx, has_aux, extra), **jit_kwargs)
    )
    with _LOCK:
        train_step = _CACHE.setdefault(key, train_step)
        _CACHE.move_to_end(key)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return train_step


def _body(
    loss_fn: Callable[..., Any],
    tx: GradientTransformationLike,
    has_aux: bool,
    extra: tuple[str, ...],
) -> Callable[..., Any]:
    """The step's Python function, written as a user would write it."""

    def loss_of(params: Any, *batch: Any) -> Any:
        tree = params.unflatten() if isinstance(params, FlatTree) else params
        return loss_fn(tree, *batch)

    def train_step(params: Params, state: Any, *batch: Any) -> tuple[Params, Any, Any]:
        out, grads = jax.value_and_grad(loss_of, has_aux=has_aux)(params, *batch)
        kwargs: dict[str, Any] = {}
        if "value" in extra:
            kwargs["value"] = out[0] if has_aux else out
        if "grad" in extra:
            kwargs["grad"] = grads
        if "value_fn" in extra:
            if has_aux:
                kwargs["value_fn"] = lambda p: loss_of(p, *batch)[0]
            else:
                kwargs["value_fn"] = lambda p: loss_of(p, *batch)
        updates, state = tx.update(grads, state, params, **kwargs)
        return apply_updates(params, updates), state, out

    return train_step


class _ById:
    """A key for an unhashable object: its identity (it is kept alive by the cache)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ById) and other.obj is self.obj


def _hashable(obj: Any) -> Any:
    """``obj`` if it can be a dict key; else a pytree of its leaves, else its identity."""
    try:
        hash(obj)
        return obj
    except TypeError:
        pass
    leaves, treedef = jax.tree.flatten(obj)
    try:
        hash(tuple(leaves))
        return (treedef, tuple(leaves))
    except TypeError:
        return _ById(obj)
