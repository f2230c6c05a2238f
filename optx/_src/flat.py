"""Optimizer state in a few flat buffers: `flatten` (optax's name and argument).

`flatten(inner)` keeps ``inner``'s state over per-dtype flat buffers (see `FlatTree`), so a
jitted step passes a few state arrays in and out instead of one per leaf and slot. With
plain trees of updates and parameters it concatenates them per dtype inside the step and
splits the result back; given `FlatTree` s (flat parameters held between steps) it passes
them straight through.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.core import Tracer

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import GradientTransformationLike, OptState, Params, Transform, Updates
from optx._src.base import transform as _transform
from optx._src.combine import call_update
from optx._src.flat_tree import FlatLayout, FlatTree, make_layout

# Why some non-elementwise transforms are refused; the others get the general reason.
_REASONS = {
    "masked": "it selects parameters by path or by a mask over the tree",
    "partition": "it routes parameters by label",
    "stateless": "it runs a function of your own, which may look at each leaf",
    "skip_missing": "it handles missing (None) leaves, which flat buffers do not have",
    "decay_before": "its mask selects parameters by path",
}
_GENERAL = (
    "its update depends on each parameter's shape, on per-parameter reductions or on "
    "parameter paths"
)


# Leaves larger than this keep their own state buffers (see `flatten`). Concatenating a
# leaf inside the step costs extra passes over it (its gradient and parameters in, its
# update out); passing it as an array of its own costs 2-5 us of dispatch per array. A
# donated Adam step on 256 float32 leaves of S elements, flat state over per-leaf
# (2 CPU cores): 0.35x at S=2**8, 0.68x at 2**10, 1.1x at 2**12, 1.9x at 2**14, 3.5x at
# 2**16.
MAX_CONCAT_SIZE = 2**11


class FlattenState(NamedTuple):
    """State of `flatten`: the inner state over flat buffers, and the buffers' layout.

    Attributes:
      inner_state: ``inner``'s state, its per-parameter slots `FlatTree` s and each
        transform's hyperparameters packed into one float32 leaf (`HyperParams.pack`).
      layout: where each parameter lives in the buffers (static: it holds no arrays).
    """

    inner_state: OptState
    layout: FlatLayout


def not_elementwise(tx: Any, where: str = "inner") -> tuple[str, Any, str] | None:
    """The first sub-transform of ``tx`` that is not elementwise: (where, it, why)."""
    if not isinstance(tx, Transform):
        return where, tx, "it is not an optx transform, so whether it is elementwise is unknown"
    if not type(tx).elementwise:
        return where, tx, _REASONS.get(tx.name, _GENERAL)
    if not dataclasses.is_dataclass(tx):
        return None
    for field in dataclasses.fields(tx):
        value = getattr(tx, field.name)
        items = [(f"{where}.{field.name}", value)]
        if isinstance(value, tuple | list):
            items = [
                (f"{where}.{field.name}[{_index(i, item)!r}]", _item(item))
                for i, item in enumerate(value)
            ]
        for place, item in items:
            if callable(getattr(item, "init", None)) and callable(getattr(item, "update", None)):
                found = not_elementwise(item, place)
                if found is not None:
                    return found
    return None


def _is_named(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)


def _index(i: int, item: Any) -> Any:
    return item[0] if _is_named(item) else i


def _item(item: Any) -> Any:
    return item[1] if _is_named(item) else item


@_transform
class Flatten(Transform):
    """See `flatten`."""

    name = "flatten"
    elementwise = True
    inner: GradientTransformationLike = None  # type: ignore[assignment]
    max_concat_size: int | None = MAX_CONCAT_SIZE

    def __post_init__(self) -> None:
        checks.transform(self.name, "inner", self.inner)
        size = self.max_concat_size
        integer = isinstance(size, int | np.integer) and not isinstance(size, bool)
        if size is not None and (not integer or size < 0):
            raise ValueError(
                f"`flatten` needs max_concat_size to be an int >= 0 or None. "
                f"Received: max_concat_size={size!r}."
            )
        found = not_elementwise(self.inner)
        if found is not None:
            where, sub, why = found
            raise ValueError(
                f"`flatten` needs an inner transform whose maths is elementwise (or uses only "
                f"global reductions), so that it computes the same on flat buffers. "
                f"Received: {where}={sub!r}: {why}. Apply it to the per-leaf tree instead, "
                f"outside `flatten`."
            )

    def init(self, params: Params) -> FlattenState:
        if isinstance(params, FlatTree):
            return FlattenState(hp.packed(self.inner.init(params)), params.layout)
        checks.float_params("flatten.init", params, complex_ok=True)
        layout = make_layout(params, "flatten.init", self.max_concat_size)
        flat = FlatTree(layout.flatten(params, "flatten.init", "params", "params"), layout)
        return FlattenState(hp.packed(_placed_like(self.inner.init(flat), flat)), layout)

    def update(
        self, updates: Updates, state: FlattenState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, FlattenState]:
        api = "flatten.update"
        if not isinstance(state, FlattenState):
            raise ValueError(
                f"`{api}` needs the state made by `flatten(...).init`. "
                f"Received: state of type {type(state).__name__}."
            )
        layout = state.layout
        flat_updates = _as_flat(api, "updates", updates, layout)
        flat_params = None if params is None else _as_flat(api, "params", params, layout)
        new, inner = call_update(
            self.inner, True, flat_updates, state.inner_state, flat_params, extra
        )
        if not isinstance(updates, FlatTree):
            new = new.unflatten()
        return new, FlattenState(hp.packed(inner), layout)


def _placed_like(state: OptState, flat: FlatTree) -> OptState:
    """``state`` with each per-parameter slot on the sharding of its parameters' buffer.

    A slot is a `FlatTree` of ``flat``'s layout (Adam's ``mu``); this is what
    `state_shardings` gives a per-leaf state, done here because the slots of a
    flat state do not have the parameters' tree structure. Traced arrays are left alone.
    """

    def place(node: Any) -> Any:
        if not (isinstance(node, FlatTree) and node.layout == flat.layout):
            return node
        placed = []
        for slot, buffer in zip(node.buffers, flat.buffers, strict=True):
            sharding = getattr(buffer, "sharding", None)
            # Only where it moves: a committed copy of an array already in place would make
            # the next jitted step compile again, for the committed outputs of the first.
            if (
                isinstance(slot, jax.Array)
                and not isinstance(slot, Tracer)
                and isinstance(sharding, jax.sharding.Sharding)
                and not slot.sharding.is_equivalent_to(sharding, slot.ndim)
            ):
                slot = jax.device_put(slot, sharding)
            placed.append(slot)
        return FlatTree(tuple(placed), node.layout)

    return jax.tree.map(place, state, is_leaf=lambda x: isinstance(x, FlatTree))


def _as_flat(api: str, what: str, tree: Any, layout: FlatLayout) -> FlatTree:
    """``tree`` as a `FlatTree` of ``layout``: concatenated if plain, checked if flat."""
    if isinstance(tree, FlatTree):
        if tree.layout != layout:
            raise ValueError(
                f"`{api}` needs {what} laid out as the parameters given to `init`. "
                f"Received: {what}={tree!r}, expected the layout {layout!r}. Flatten them "
                f"with `optx.flatten_tree(tree, like=...)`."
            )
        return tree
    return FlatTree(layout.flatten(tree, api, what, "the parameters given to `init`"), layout)


def flatten(
    inner: GradientTransformationLike, *, max_concat_size: int | None = MAX_CONCAT_SIZE
) -> Flatten:
    """Keeps ``inner``'s state in a few flat buffers, one per dtype, between steps.

    A jitted step then passes two or three state arrays per slot in and out (one per dtype)
    instead of one per parameter, which is what a step over many small parameters spends
    its time on. ``update`` takes either

    - plain trees of updates (and parameters): the leaves of up to ``max_concat_size``
      elements are concatenated per dtype (larger leaves keep buffers of their own, in their
      own shapes: concatenating them would cost more than passing them), ``inner`` runs on
      the buffers, and its updates are split back into the tree (in each parameter's
      dtype; complex leaves have buffers of their own, so an inner transform that takes
      complex parameters takes them here too); or
    - `FlatTree` s, e.g. gradients with respect to flat parameters held between steps (see
      `flatten_tree`): they pass straight through, and the updates come out flat.

    Concatenating inside every step costs time too: the full win is flat parameters
    (`FlatTree`), where nothing is concatenated. Only transforms whose maths is elementwise
    or uses global reductions (`clip_by_global_norm`) compute the same on buffers as on the
    tree; ``flatten`` refuses any other (per-leaf norms, factored moments, trust ratios,
    masks or labels by path). Leaves whose sharding is not fully replicated keep buffers
    of their own (see `FlatTree`); call ``init`` on concrete arrays, outside ``jit``, so
    that their shardings are seen.

    Args:
      inner: an optx transform (or chain) whose maths is elementwise.
      max_concat_size: with plain parameters at ``init``, leaves of more elements than
        this keep state buffers of their own; ``None`` concatenates every leaf. The default
        (``2**11``) is where, on a CPU, concatenating a leaf inside each step starts to
        cost more than passing it as an array of its own. Ignored for `FlatTree`
        parameters, whose layout is their own.

    Returns:
      The transform; its state is `FlattenState`. Hyperparameters stay in the inner state,
      each transform's packed into one float32 array (values, decays' residuals,
      schedules' scales; see `HyperParams.pack`): `get_hyperparams`, `set_hyperparams`
      and `scale_hyperparams` work unchanged.

    Raises:
      TypeError: ``inner`` is not a transform.
      ValueError: ``inner`` (or a transform inside it) is not elementwise; the message
        names it and says why. ``max_concat_size`` is not an int >= 0 or None. At
        ``update``: updates or parameters whose structure or leaf shapes differ from those
        given to ``init``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.flatten(optx.adam(0.1))
      >>> params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}
      >>> state = tx.init(params)
      >>> [b.shape for b in state.inner_state[0].mu.buffers]
      [(6,)]
      >>> updates, state = tx.update({"w": jnp.ones((2, 2)), "b": -jnp.ones(2)}, state)
      >>> updates["b"]
      Array([0.1, 0.1], dtype=float32)
    """
    return Flatten(inner, max_concat_size)
