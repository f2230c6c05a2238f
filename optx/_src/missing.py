"""Missing gradients: `skip_missing`."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from optx._src import checks, placement
from optx._src import tree as tree_lib
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    Transform,
    Updates,
    transform,
)
from optx._src.combine import accepts_extra, call_update

# `None` (a missing gradient) and `MaskedNode` (a leaf a `masked` inner does not see) are
# both leaves here, so that flattening updates, parameters and state slots lines them up.
_is_placeholder = tree_lib._is_placeholder


@transform
class SkipMissing(Transform):
    """See `skip_missing`."""

    name = "skip_missing"
    inner: GradientTransformationLike = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        checks.transform(self.name, "inner", self.inner)

    def init(self, params: Params) -> OptState:
        return self.inner.init(params)

    def update(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, OptState]:
        accepts = accepts_extra(self.inner)
        leaves, treedef = jax.tree.flatten(updates, is_leaf=_is_placeholder)
        missing = [x is None for x in leaves]
        if params is not None and any(missing):
            # `None` where the parameters hold `None` too (an Equinox-style filtered tree) is
            # no parameter, not a missing gradient.
            like = _flatten_up_to(treedef, params)
            missing = [m and p is not None for m, p in zip(missing, like, strict=True)]
        # Which leaves are `None` is known while tracing: without one this is `inner`.
        if not any(missing):
            return call_update(self.inner, accepts, updates, state, params, extra)
        paths = [tree_lib.path_name(p) for p, _ in _flatten_with_path(updates)]
        missing_paths = [p for p, m in zip(paths, missing, strict=True) if m]
        present = [x for x in leaves if not _is_placeholder(x)]
        if not present:
            raise ValueError(
                f"`skip_missing` needs a gradient for at least one parameter. Received: no "
                f"gradients (all {len(missing_paths)} are None: {_listing(missing_paths)})."
            )
        zeros = self._zeros(treedef, leaves, missing, missing_paths, state, params)
        filled = jax.tree.unflatten(
            treedef, [z if m else x for x, m, z in zip(leaves, missing, zeros, strict=True)]
        )
        new_updates, new_state = call_update(self.inner, accepts, filled, state, params, extra)
        new_updates = jax.tree.map(
            lambda u, n: None if u is None else n, updates, new_updates, is_leaf=tree_lib.is_none
        )
        return new_updates, _restore(new_state, state, filled, missing)

    def _zeros(
        self,
        treedef: Any,
        leaves: list[Any],
        missing: list[bool],
        missing_paths: list[str],
        state: OptState,
        params: Params | None,
    ) -> list[Any]:
        """Zero gradients for the missing leaves (``None`` at the others)."""
        if params is not None:
            like = _flatten_up_to(treedef, params)
            return [_zeros_like(p) if m else None for p, m in zip(like, missing, strict=True)]
        # No parameters: take each missing leaf's shape and dtype from a slot of the state.
        found: list[Any] = [None] * len(leaves)
        stand_in = jax.tree.unflatten(treedef, leaves)  # `None` matches a slot of any shape
        for _, node in tree_lib.params_shaped_subtrees(state, stand_in):
            slots = jax.tree.leaves(node, is_leaf=_is_placeholder)
            for i, (m, slot) in enumerate(zip(missing, slots, strict=True)):
                if m and found[i] is None and not _is_placeholder(slot):
                    found[i] = _zeros_like(slot)
        unknown = [
            p for p, i in zip(missing_paths, _indices(missing), strict=True) if found[i] is None
        ]
        if unknown:
            raise ValueError(
                f"`skip_missing` needs the parameters to fill in missing gradients when the "
                f"state of `{_name(self.inner)}` holds no per-parameter slot to take their "
                f"shapes from. Received: params=None and no gradient for "
                f"{_listing(unknown)}. Call `update(updates, state, params)`."
            )
        return found


def _indices(flags: list[bool]) -> list[int]:
    return [i for i, f in enumerate(flags) if f]


def _flatten_with_path(tree: Any) -> list[tuple[Any, Any]]:
    return jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_placeholder)[0]


def _zeros_like(x: Any) -> jax.Array:
    # A Flax `nnx.Variable` holds its array at `.value`.
    x = x if hasattr(x, "dtype") else getattr(x, "value", x)
    return placement.zeros_like(x)


def _flatten_up_to(treedef: Any, params: Params) -> list[Any]:
    """The parameters at the updates' leaf positions."""
    try:
        return treedef.flatten_up_to(params)
    except (ValueError, TypeError):
        raise ValueError(
            f"`skip_missing` needs params with the structure of the updates. Received: "
            f"params {jax.tree.structure(params, is_leaf=_is_placeholder)} for updates "
            f"{treedef}."
        ) from None


def _restore(new_state: OptState, old_state: OptState, like: Any, missing: list[bool]) -> Any:
    """``new_state`` with the old value of every slot of a missing leaf.

    A slot is a state leaf at the parameter's position in a subtree with the parameters'
    structure, with the parameter's shape: Adam's ``mu``, and also adafactor's ``v`` of an
    unfactored leaf, whose tree holds placeholders of another shape for factored ones.
    """
    shapes = [np.shape(x) for x in jax.tree.leaves(like, is_leaf=_is_placeholder)]
    any_shape = jax.tree.map(lambda _: None, like, is_leaf=_is_placeholder)
    keep: set[tuple[Any, ...]] = set()
    for path, node in tree_lib.params_shaped_subtrees(new_state, any_shape):
        for i, (sub_path, slot) in enumerate(_flatten_with_path(node)):
            if missing[i] and not _is_placeholder(slot) and np.shape(slot) == shapes[i]:
                keep.add(tuple(path) + tuple(sub_path))
    if not keep:
        return new_state
    return jax.tree_util.tree_map_with_path(
        lambda p, new, old: old if tuple(p) in keep else new, new_state, old_state
    )


def _listing(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _name(tx: Any) -> str:
    return getattr(tx, "name", type(tx).__name__)


def skip_missing(inner: GradientTransformationLike) -> SkipMissing:
    """Leaves parameters without a gradient (``None`` leaves) and their slots untouched.

    A ``None`` gradient leaf (a parameter that got no gradient, as in Keras's
    ``apply_gradients``; ``jax.grad`` never gives one) means: no update for that parameter
    and its per-parameter slots (Adam's ``mu`` and ``nu``, a momentum ``trace``) keep their
    values. The other leaves are updated by ``inner`` as usual.

    ``inner`` runs once on all leaves, the missing ones filled with zeros shaped like their
    parameters; then their updates are set to ``None`` (`apply_updates` leaves such a
    parameter as it is) and their slots get back their old values. A slot of a parameter is
    a state leaf at that parameter's position in a subtree with the parameters' tree
    structure, with the parameter's shape (Adam's ``mu`` and ``nu``, adafactor's ``v`` of
    an unfactored leaf). Every other state leaf takes its new value: the step count
    advances, as in Keras, where the iteration counter is global (so Adam's bias correction
    uses the global count); factored moments such as adafactor's ``v_row``/``v_col`` and
    other per-leaf statistics of another shape see a zero gradient for the missing leaf.

    The state is ``inner``'s own: wrapping never changes the state's structure, so
    ``skip_missing`` can be added or removed around a saved state. Without a ``None`` leaf
    (checked while tracing) the update is exactly ``inner``'s. Under ``jit`` a new pattern
    of ``None`` leaves compiles once more.

    Args:
      inner: the transform to run on the gradients that are present.

    Returns:
      The transform; its state is ``inner``'s state.

    Raises:
      TypeError: ``inner`` is not a transform.
      ValueError: (at ``update``) every gradient is ``None``; or a gradient is ``None``
        and ``params`` is not given, while ``inner``'s state holds no per-parameter slot
        to take its shape from; or ``params`` does not have the updates' structure.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.skip_missing(optx.sgd(0.1, momentum=0.9))
      >>> params = {"w": jnp.ones(2), "b": jnp.ones(2)}
      >>> updates, state = tx.update({"w": jnp.ones(2), "b": None}, tx.init(params), params)
      >>> updates["w"], updates["b"]
      (Array([-0.1, -0.1], dtype=float32), None)
      >>> optx.apply_updates(params, updates)["b"]
      Array([1., 1.], dtype=float32)
    """
    return SkipMissing(inner)
