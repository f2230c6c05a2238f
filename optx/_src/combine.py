"""Combining transforms: `chain`, `named_chain`, `masked` and `partition`."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Hashable, Mapping
from typing import Any, NamedTuple

import jax

from optx._src import checks, sparse
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    StateMismatchError,
    Transform,
    Updates,
    built_as,
    describe,
    foreign,
    mismatch,
    swapped_hint,
)
from optx._src.base import transform as _transform
from optx._src.tree import is_none, is_param, path_name


def accepts_extra(tx: Any) -> bool:
    """Whether ``tx.update`` takes ``**extra`` keyword arguments."""
    if isinstance(tx, Transform):
        return True
    try:
        parameters = inspect.signature(tx.update).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def call_update(
    tx: Any, accepts: bool, updates: Updates, state: OptState, params: Params, extra: dict
) -> tuple[Updates, OptState]:
    """``tx.update``, passing ``extra`` only to transforms that take it."""
    if not isinstance(tx, Transform):
        # Foreign (optax) transforms would treat a row-sparse leaf as two arrays.
        sparse.reject(f"{type(tx).__module__.split('.')[0]}.{type(tx).__name__}", updates)
    if accepts:
        return tx.update(updates, state, params, **extra)
    return tx.update(updates, state, params)


@_transform
class Chain(Transform):
    """See `chain`."""

    name = "chain"
    elementwise = True
    row_sparse = True  # each transform checks for itself
    transforms: tuple[GradientTransformationLike, ...] = ()
    _accepts: tuple[bool, ...] = dataclasses.field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        for i, tx in enumerate(self.transforms):
            checks.transform("chain", f"transforms[{i}]", tx)
        object.__setattr__(self, "_accepts", tuple(accepts_extra(t) for t in self.transforms))

    def init(self, params: Params) -> tuple[OptState, ...]:
        return tuple(tx.init(params) for tx in self.transforms)

    def update(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, tuple[OptState, ...]]:
        if not isinstance(state, tuple) or len(state) != len(self.transforms):
            raise StateMismatchError(
                f"`chain.update` needs the state made by this chain's `init` (a tuple of "
                f"{len(self.transforms)} states). Received: state of type "
                f"{type(state).__name__}"
                + (f" with {len(state)} entries." if isinstance(state, tuple) else ".")
                + _mismatch_hint(self, state, params)
            )
        for i, (tx, s) in enumerate(zip(self.transforms, state, strict=True)):
            # Checked here for all of them first, to say where each state belongs.
            if isinstance(tx, Transform) and foreign(tx, s):
                raise StateMismatchError(self._misplaced(i, state))
        new_state = []
        for tx, accepts, s in zip(self.transforms, self._accepts, state, strict=True):
            updates, s = call_update(tx, accepts, updates, s, params, extra)
            new_state.append(s)
        return updates, tuple(new_state)

    def __repr__(self) -> str:
        return f"chain({', '.join(map(repr, self.transforms))})"

    def _misplaced(self, i: int, state: tuple[OptState, ...]) -> str:
        """The message for ``state[i]``, made by another transform than ``transforms[i]``."""
        name, tx = built_as(self), self.transforms[i]
        own = [t for t in self.transforms if isinstance(t, Transform)]
        shuffled = all(any(not foreign(t, s) for t in own) for s in state)
        order = (
            " The states are those of this chain's transforms in another order." if shuffled else ""
        )
        return (
            f"`{name}.update` needs the state made by its own `init`: a tuple with the state "
            f"of each of its transforms, in order. Received: {describe(state)}; at "
            f"state[{i}], for `{_shown_name(tx)}`: {describe(state[i])}"
            f"{mismatch(tx, state[i]) or ''}.{order} "
            f"Pass the state returned by `init` of this same transform (`{name}`)."
        )


def _mismatch_hint(tx: Transform, state: OptState, params: Params | None) -> str:
    """The end of a message on a state of the wrong structure: who made it, what to pass."""
    fix = swapped_hint(state, params)
    if fix:  # `update(grads, params, state)`: the order is the fix
        return fix
    return (
        f" That is {describe(state)}; pass the state returned by `init` of this same "
        f"transform (`{built_as(tx)}`)."
    )


def _shown_name(tx: Any) -> str:
    """A transform's name in a message: a chain goes by its factory's (`adam`)."""
    if isinstance(tx, Chain | NamedChain):
        return built_as(tx)
    return getattr(tx, "name", type(tx).__name__)


def chain(*transforms: GradientTransformationLike) -> Chain:
    """Applies transforms one after the other; the state is the tuple of their states.

    optax transforms work inside, and an optx chain works inside ``optax.chain``. Extra
    keyword arguments of ``update`` (e.g. ``value=loss``) reach every transform that
    accepts them.

    Args:
      *transforms: optx or optax transforms, applied in order.

    Returns:
      The chained transform.

    Raises:
      TypeError: an argument has no ``init``/``update``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.chain(optx.clip_by_global_norm(1.0), optx.scale_by_adam(), optx.scale(-0.1))
      >>> params = {"w": jnp.ones(3)}
      >>> updates, state = tx.update({"w": jnp.full(3, 10.0)}, tx.init(params), params)
      >>> updates["w"]
      Array([-0.1, -0.1, -0.1], dtype=float32)
    """
    return Chain(tuple(transforms))


@_transform
class NamedChain(Transform):
    """See `named_chain`."""

    name = "named_chain"
    elementwise = True
    row_sparse = True  # each transform checks for itself
    transforms: tuple[tuple[str, GradientTransformationLike], ...] = ()
    _accepts: tuple[bool, ...] = dataclasses.field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        names = [n for n, _ in self.transforms]
        for i, (n, tx) in enumerate(self.transforms):
            if not isinstance(n, str):
                raise TypeError(
                    f"`named_chain` needs (str, transform) pairs. Received: name={n!r} at "
                    f"position {i}."
                )
            checks.transform("named_chain", repr(n), tx)
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(
                f"`named_chain` needs distinct names. Received: {', '.join(map(repr, duplicates))} "
                f"more than once."
            )
        object.__setattr__(self, "_accepts", tuple(accepts_extra(t) for _, t in self.transforms))

    def init(self, params: Params) -> dict[str, OptState]:
        return {n: tx.init(params) for n, tx in self.transforms}

    def update(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, dict[str, OptState]]:
        expected = [n for n, _ in self.transforms]
        if not isinstance(state, Mapping) or sorted(state) != sorted(expected):
            raise StateMismatchError(
                f"`named_chain.update` needs the state made by its `init`, keyed by "
                f"{expected}. Received: state of type {type(state).__name__}"
                + (f" keyed by {list(state)}." if isinstance(state, Mapping) else ".")
                + _mismatch_hint(self, state, params)
            )
        for n, tx in self.transforms:
            if isinstance(tx, Transform) and foreign(tx, state[n]):
                raise StateMismatchError(
                    f"`{built_as(self)}.update` needs the state made by its own `init`. "
                    f"Received: at state[{n!r}], for `{_shown_name(tx)}`: "
                    f"{describe(state[n])}{mismatch(tx, state[n]) or ''}. Pass the state "
                    f"returned by `init` of this same transform (`{built_as(self)}`)."
                )
        new_state = {}
        for (n, tx), accepts in zip(self.transforms, self._accepts, strict=True):
            updates, new_state[n] = call_update(tx, accepts, updates, state[n], params, extra)
        return updates, new_state

    def __repr__(self) -> str:
        inner = ", ".join(f"({n!r}, {tx!r})" for n, tx in self.transforms)
        return f"named_chain({inner})"


def named_chain(*transforms: tuple[str, GradientTransformationLike]) -> NamedChain:
    """Like `chain`, with each transform named; the state is a dict keyed by the names.

    Names qualify hyperparameters that several transforms share in `get_hyperparams`.

    Args:
      *transforms: ``(name, transform)`` pairs, applied in order.

    Returns:
      The chained transform.

    Raises:
      TypeError: a pair is not ``(str, transform)``.
      ValueError: a name appears twice.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.named_chain(("clip", optx.clip(1.0)), ("sgd", optx.sgd(0.1)))
      >>> sorted(tx.init({"w": jnp.zeros(2)}))
      ['clip', 'sgd']
    """
    return NamedChain(tuple((n, t) for n, t in transforms))


class MaskedNode(NamedTuple):
    """Stands in for a leaf that a `masked` inner transform does not see (an empty pytree)."""


class MaskedState(NamedTuple):
    """State of `masked`: the inner transform's state over the masked leaves."""

    inner_state: OptState


class Frozen:
    """A hashable, comparable snapshot of a pytree of Python scalars (masks, labels).

    A flat dict keeps its insertion order (regex maps are matched in order).
    """

    __slots__ = ("leaves", "treedef")

    def __init__(self, tree: Any) -> None:
        if isinstance(tree, dict) and not any(
            isinstance(v, Mapping | list | tuple) for v in tree.values()
        ):
            self.treedef, self.leaves = None, tuple(tree.items())
            return
        leaves, self.treedef = jax.tree.flatten(tree)
        self.leaves = tuple(leaves)

    @property
    def tree(self) -> Any:
        """The pytree."""
        if self.treedef is None:
            return dict(self.leaves)
        return jax.tree.unflatten(self.treedef, self.leaves)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Frozen)
            and self.treedef == other.treedef
            and self.leaves == other.leaves
        )

    def __hash__(self) -> int:
        return hash((self.treedef, self.leaves))

    def __repr__(self) -> str:
        return repr(self.tree)


MaskSpec = Any
"""A pytree of bools, a callable ``params -> pytree of bools``, or regex(es) on paths."""


def freeze_mask(api: str, mask: MaskSpec) -> Any:
    """Normalises a mask argument to a hashable form (see `MaskSpec`)."""
    if isinstance(mask, str):
        return _patterns(api, "mask", (mask,))
    if isinstance(mask, list | tuple) and mask and all(isinstance(m, str) for m in mask):
        return _patterns(api, "mask", tuple(mask))
    if callable(mask) and not isinstance(mask, Mapping):
        return mask
    leaves, _ = jax.tree.flatten(mask)
    for leaf in leaves:
        if not _is_bool(leaf):
            raise TypeError(
                f"`{api}` needs mask to be a pytree of bools, a callable returning one, or "
                f"regular expressions on parameter paths. Received: a mask with leaf {leaf!r}."
            )
    return Frozen(jax.tree.map(bool, mask))


def _patterns(api: str, name: str, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Checks that each of ``patterns`` is a regular expression."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(
                f"`{api}` needs {name} to be regular expressions on parameter paths. "
                f"Received: {pattern!r}, which does not compile ({error})."
            ) from None
    return patterns


def _is_bool(leaf: Any) -> bool:
    return isinstance(leaf, bool) or (
        hasattr(leaf, "dtype") and getattr(leaf, "shape", None) == () and leaf.dtype == bool
    )


def _broadcast(api: str, what: str, prefix: Any, tree: Any) -> Any:
    """``prefix``'s leaves repeated over the matching subtrees of ``tree``."""
    try:
        return jax.tree.map(
            lambda m, sub: jax.tree.map(lambda _: m, sub, is_leaf=is_none),
            prefix,
            tree,
            is_leaf=lambda x: isinstance(x, MaskedNode) or x is None,
        )
    except (ValueError, TypeError):
        raise ValueError(
            f"`{api}` needs {what} with the structure of the parameters (or a prefix of it). "
            f"Received: {what} {jax.tree.structure(prefix)} for parameters "
            f"{jax.tree.structure(tree)}."
        ) from None


def resolve_mask(api: str, mask: Any, tree: Any) -> Any:
    """The tree of bools that ``mask`` gives for ``tree``."""
    if isinstance(mask, tuple):
        patterns = [re.compile(m) for m in mask]
        return jax.tree_util.tree_map_with_path(
            lambda p, _: any(r.search(path_name(p)) for r in patterns), tree, is_leaf=is_param
        )
    if isinstance(mask, Frozen):
        return _broadcast(api, "mask", mask.tree, tree)
    result = mask(tree)
    for leaf in jax.tree.leaves(result):
        if not _is_bool(leaf):
            raise TypeError(
                f"`{api}` needs its mask callable to return a pytree of bools. "
                f"Received: a leaf {leaf!r}."
            )
    return _broadcast(api, "mask", jax.tree.map(bool, result), tree)


def _select(mask: Any, tree: Any) -> Any:
    return jax.tree.map(lambda m, x: x if m else MaskedNode(), mask, tree, is_leaf=is_none)


@_transform
class Masked(Transform):
    """See `masked`."""

    name = "masked"
    inner: GradientTransformationLike = None  # type: ignore[assignment]
    mask: MaskSpec = None
    mask_compatible_extra_args: bool = False

    def __post_init__(self) -> None:
        checks.transform("masked", "inner", self.inner)
        object.__setattr__(self, "mask", freeze_mask("masked", self.mask))

    def init(self, params: Params) -> MaskedState:
        mask = resolve_mask("masked", self.mask, params)
        return MaskedState(self.inner.init(_select(mask, params)))

    def update(
        self, updates: Updates, state: MaskedState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, MaskedState]:
        if params is not None:
            checks.same_tree("masked.update", params, updates, "params", "updates", allow_none=True)
        mask = resolve_mask("masked", self.mask, updates)
        inner_params = None if params is None else _select(mask, params)
        new, inner_state = call_update(
            self.inner,
            accepts_extra(self.inner),
            _select(mask, updates),
            state.inner_state,
            inner_params,
            _masked_extra(self.mask_compatible_extra_args, extra, updates, mask),
        )
        merged = jax.tree.map(lambda m, n, u: n if m else u, mask, new, updates, is_leaf=is_none)
        return merged, MaskedState(inner_state)


def _masked_extra(on: bool, extra: dict, updates: Updates, mask: Any) -> dict:
    """``extra`` with each value of the updates' tree structure masked like the updates."""
    if not on or not extra:
        return extra
    structure = jax.tree.structure(updates)
    return {
        k: _select(mask, v) if jax.tree.structure(v) == structure else v for k, v in extra.items()
    }


def masked(
    inner: GradientTransformationLike, mask: MaskSpec, *, mask_compatible_extra_args: bool = False
) -> Masked:
    """Applies ``inner`` to the leaves ``mask`` selects; the others pass through unchanged.

    ``inner`` sees a tree in which unselected leaves are `MaskedNode` (empty subtrees), so
    its state holds nothing for them.

    Args:
      inner: the transform to apply to the selected leaves.
      mask: a pytree of bools with the structure of the parameters (or a prefix of it); a
        callable ``params -> pytree of bools``; or a regular expression, or a list of them,
        selecting the leaves whose path name (``"dense/kernel"``) they match
        (``re.search``).
      mask_compatible_extra_args: also mask the keyword arguments of ``update`` whose tree
        structure is the updates' (per-parameter values such as tags), so ``inner`` gets
        them over its leaves only.

    Returns:
      The masked transform.

    Raises:
      TypeError: ``inner`` is not a transform, or ``mask`` has non-bool leaves.
      ValueError: (at ``init``/``update``) the mask's structure does not match.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.masked(optx.scale(0.0), "bias")
      >>> params = {"kernel": jnp.ones(2), "bias": jnp.ones(2)}
      >>> updates, _ = tx.update(params, tx.init(params))
      >>> updates["bias"], updates["kernel"]
      (Array([0., 0.], dtype=float32), Array([1., 1.], dtype=float32))
    """
    return Masked(inner, mask, mask_compatible_extra_args)


class PartitionState(NamedTuple):
    """State of `partition`: each label's masked inner state."""

    inner_states: dict[Hashable, MaskedState]


MultiTransformState = PartitionState
"""optax's other name for the state of `partition` (`PartitionState`)."""


def _freeze_labels(labels: Any) -> Any:
    if callable(labels) and not isinstance(labels, Mapping):
        return labels
    return Frozen(labels)


@_transform
class Partition(Transform):
    """See `partition`."""

    name = "partition"
    transforms: tuple[tuple[Hashable, GradientTransformationLike], ...] = ()
    param_labels: Any = None
    mask_compatible_extra_args: bool = False

    def __post_init__(self) -> None:
        for label, tx in self.transforms:
            checks.transform("partition", f"transforms[{label!r}]", tx)
        object.__setattr__(self, "param_labels", _freeze_labels(self.param_labels))

    def labels(self, params: Params) -> Any:
        """The label of each leaf of ``params``."""
        spec = self.param_labels
        raw = spec.tree if isinstance(spec, Frozen) else spec(params)
        known = {label for label, _ in self.transforms}
        try:
            labels = _broadcast("partition", "param_labels", raw, params)
        except ValueError:
            if not _is_regex_map(raw):
                raise
            labels = _labels_from_regex("partition", raw, params)
        found = jax.tree_util.tree_flatten_with_path(labels)[0]
        unknown = [(path_name(p), lab) for p, lab in found if lab not in known]
        if unknown:
            path, label = unknown[0]
            raise ValueError(
                f"`partition` needs a transform for every label. Received: label {label!r} "
                f"(of parameter {path!r}) but transforms only for {sorted(known, key=repr)}."
            )
        return labels

    def init(self, params: Params) -> PartitionState:
        labels = self.labels(params)
        return PartitionState(
            {
                label: MaskedState(tx.init(_select(_equals(labels, label), params)))
                for label, tx in self.transforms
            }
        )

    def update(
        self, updates: Updates, state: PartitionState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, PartitionState]:
        if params is not None:
            checks.same_tree(
                "partition.update", params, updates, "params", "updates", allow_none=True
            )
        expected = [label for label, _ in self.transforms]
        inner_states = getattr(state, "inner_states", None)
        if not isinstance(inner_states, Mapping) or sorted(map(repr, inner_states)) != sorted(
            map(repr, expected)
        ):
            shown = list(inner_states) if isinstance(inner_states, Mapping) else None
            raise StateMismatchError(
                f"`{built_as(self)}.update` needs the state made by its own `init`, with a "
                f"state for each of its labels {expected}. Received: {describe(state)}"
                + (f", for the labels {shown}" if shown is not None else "")
                + f". Pass the state returned by `init` of this same transform "
                f"(`{built_as(self)}`)."
            )
        labels = self.labels(updates)
        new_states = {}
        merged = updates
        for label, tx in self.transforms:
            mask = _equals(labels, label)
            new, inner = call_update(
                tx,
                accepts_extra(tx),
                _select(mask, updates),
                state.inner_states[label].inner_state,
                None if params is None else _select(mask, params),
                _masked_extra(self.mask_compatible_extra_args, extra, updates, mask),
            )
            merged = jax.tree.map(lambda m, n, u: n if m else u, mask, new, merged, is_leaf=is_none)
            new_states[label] = MaskedState(inner)
        return merged, PartitionState(new_states)


def _equals(labels: Any, label: Hashable) -> Any:
    return jax.tree.map(lambda lab: lab == label, labels)


def _is_regex_map(raw: Any) -> bool:
    return (
        isinstance(raw, Mapping)
        and all(isinstance(k, str) for k in raw)
        and not any(isinstance(v, Mapping | list | tuple) for v in raw.values())
    )


def _labels_from_regex(api: str, regexes: Mapping[str, Hashable], params: Params) -> Any:
    _patterns(api, "the keys of param_labels", tuple(regexes))
    compiled = [(re.compile(k), v) for k, v in regexes.items()]

    def label(path: Any, leaf: Any) -> Hashable:
        if leaf is None:  # an empty subtree (an Equinox-style filtered tree): no parameter
            return None
        name = path_name(path)
        for regex, value in compiled:
            if regex.search(name):
                return value
        raise ValueError(
            f"`{api}` needs every parameter to match one of the regular expressions of "
            f"param_labels. Received: parameter {name!r}, matched by none of "
            f"{list(regexes)}. Add a catch-all such as '.*'."
        )

    return jax.tree_util.tree_map_with_path(label, params, is_leaf=is_param)


def partition(
    transforms: Mapping[Hashable, GradientTransformationLike],
    param_labels: Any,
    *,
    mask_compatible_extra_args: bool = False,
) -> Partition:
    """Routes each parameter to the transform of its label (optax's ``multi_transform``).

    Args:
      transforms: a mapping from label to transform.
      param_labels: the labels, as one of: a pytree of labels with the structure of the
        parameters (or a prefix of it); a callable ``params -> pytree of labels``; or a dict
        ``{regex: label}`` whose first regular expression that matches a parameter's path
        name (``re.search``) gives its label (used when the dict is not a prefix of the
        parameters' structure).
      mask_compatible_extra_args: pass each transform the keyword arguments of ``update``
        whose tree structure is the updates' over its own parameters only (as `masked`).

    Returns:
      The partitioned transform; its state holds one masked state per label.

    Raises:
      TypeError: a value of ``transforms`` is not a transform.
      ValueError: (at ``init``/``update``) a parameter has no label, or a label has no
        transform.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.partition({"train": optx.sgd(0.1), "freeze": optx.set_to_zero()},
      ...                     {"encoder": "freeze", ".*": "train"})
      >>> params = {"encoder": jnp.ones(2), "head": jnp.ones(2)}
      >>> updates, _ = tx.update(params, tx.init(params))
      >>> updates["encoder"], updates["head"]
      (Array([0., 0.], dtype=float32), Array([-0.1, -0.1], dtype=float32))
    """
    if not isinstance(transforms, Mapping) or not transforms:
        raise TypeError(
            f"`partition` needs transforms to be a non-empty mapping from label to transform. "
            f"Received: transforms={transforms!r}."
        )
    # Labels are disjoint, so their order does not matter: sorting makes equal partitions
    # equal (and hash-equal) however their dicts were written.
    return Partition(
        tuple(sorted(transforms.items(), key=lambda kv: repr(kv[0]))),
        param_labels,
        mask_compatible_extra_args,
    )


multi_transform = partition
