"""Finding, reading and writing the hyperparameters of a state, by their public names."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from optx._src import reprs
from optx._src.hyperparams.node import (
    FINITE,
    Entry,
    HyperParams,
    _checked,
    _like,
    _unwrap,
    legacy_key,
    upgrade_value,
)
from optx._src.suggest import did_you_mean

# --- Finding hyperparameters in a state --------------------------------------------------

# The path key of a packed node's one leaf of values (see `HyperParams.pack`).
_PACKED = jax.tree_util.GetAttrKey("packed")


def is_node(x: Any) -> bool:
    """Whether ``x`` holds hyperparameters: a `HyperParams`, or optax's injected ones."""
    return isinstance(x, HyperParams) or _is_optax_injected(x)


def _is_optax_injected(x: Any) -> bool:
    # optax's `inject_hyperparams` state: a NamedTuple with a dict of arrays `hyperparams`.
    fields = getattr(x, "_fields", ())
    return (
        "hyperparams" in fields
        and "hyperparams_states" in fields
        and isinstance(getattr(x, "hyperparams", None), dict)
    )


class _Injected:
    """optax's injected hyperparameters seen as a node: constants, any finite value."""

    def __init__(self, state: Any) -> None:
        self.state = state
        names = sorted(state.hyperparams)
        self.entries = tuple(Entry(n, n, FINITE, False, False) for n in names)
        self.in_force = tuple(state.hyperparams[n] for n in names)

    def replaced(self, i: int, new: Any, api: str, shown_name: str) -> Any:
        e, leaf = self.entries[i], self.in_force[i]
        new = _checked(api, shown_name, e, new, _unwrap(leaf))
        hyperparams = dict(self.state.hyperparams)
        hyperparams[e.name] = _like(new, leaf)
        return self.state._replace(hyperparams=hyperparams)

    def multiplied(self, i: int, factor: Any, api: str, shown_name: str) -> Any:
        return self.replaced(i, _unwrap(self.in_force[i]) * jnp.asarray(factor), api, shown_name)


def nodes(state: Any) -> list[tuple[tuple[Any, ...], HyperParams]]:
    """``(path, node)`` of each `HyperParams` in ``state``, in tree order.

    optax's `inject_hyperparams` states count too (as a view with the same reading and
    writing methods), so that `get_hyperparams` and `set_hyperparams` reach them.
    """
    flat = jax.tree_util.tree_flatten_with_path(state, is_leaf=is_node)[0]
    out: list[tuple[tuple[Any, ...], Any]] = []
    for p, n in flat:
        if isinstance(n, HyperParams):
            out.append((tuple(p), n))
        elif _is_optax_injected(n):
            out.append(((*p, jax.tree_util.GetAttrKey("hyperparams")), _Injected(n)))
    return out


@dataclasses.dataclass(frozen=True)
class Found:
    """One hyperparameter of a state, as the public accessors name it.

    Attributes:
      flat: the shortest unique name (``"b1"``, or ``"0/max_norm"`` where shared).
      qualified: the name qualified by the transform's place in the state.
      node_path: the path of its `HyperParams` node in the state.
      index: its position in that node.
      entry: its static part.
      leaf_path: the path of its value's leaf in the state.
      aux_paths: the paths of its other leaves (a decay's residual, a schedule's scale and,
        for the node's first schedule, the step count), with their kinds.

    In a packed node (`HyperParams.pack`) the value, residual and scale share one leaf, at
    ``leaf_path``; `packed` says so.
    """

    flat: str
    qualified: str
    node_path: tuple[Any, ...]
    index: int
    entry: Entry
    leaf_path: tuple[Any, ...]
    aux_paths: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    @property
    def packed(self) -> bool:
        """Whether its node holds its values as one leaf (`HyperParams.pack`)."""
        return bool(self.leaf_path) and self.leaf_path[-1] == _PACKED


def _owner_prefix(node_path: tuple[Any, ...]) -> tuple[Any, ...]:
    # The node sits in its transform's state, usually as the field `hyperparams`.
    return node_path[:-1] if node_path else node_path


def _qualifiers(prefixes: list[tuple[Any, ...]]) -> list[str]:
    """Short, unique names for the transforms at ``prefixes`` (positions and dict keys)."""

    def short(prefix: tuple[Any, ...]) -> str:
        parts = [
            str(k.idx) if isinstance(k, jax.tree_util.SequenceKey) else str(k.key)
            for k in prefix
            if isinstance(k, jax.tree_util.SequenceKey | jax.tree_util.DictKey)
        ]
        return "/".join(parts)

    names = [short(p) for p in prefixes]
    if len(set(names)) != len(set(prefixes)):
        names = [jax.tree_util.keystr(p, simple=True, separator="/") for p in prefixes]
    return names


def _check_state(api: str, state: Any) -> None:
    """Refuses what is not a state: a transform, or a stateful optimizer."""
    if callable(getattr(state, "init", None)) and callable(getattr(state, "update", None)):
        raise TypeError(
            f"`{api}` needs an optimizer state (what `init` returns), not a transform. "
            f"Received: state={reprs.short(state)}. Call it on `tx.init(params)`."
        )
    if hasattr(state, "variables") and callable(getattr(state, "apply_gradients", None)):
        raise TypeError(
            f"`{api}` needs an optimizer state (what `init` returns), not a stateful "
            f"optimizer. Received: state={type(state).__name__}(...). Read and set its "
            f"hyperparameters as attributes (`opt.learning_rate = 0.01`), or in "
            f"`opt.variables`."
        )


def find(state: Any) -> list[Found]:
    """Every hyperparameter of ``state``, with its public names, in tree order."""
    raw = []
    key, attr = jax.tree_util.DictKey, jax.tree_util.GetAttrKey
    for node_path, node in nodes(state):
        first = True
        packed = isinstance(node, HyperParams) and node.packed
        for i, e in enumerate(node.entries):
            leaf = (*node_path, _PACKED) if packed else (*node_path, key(e.name))
            aux = []
            if e.decay and not packed:
                aux.append(("residual", (*node_path, attr("residual"), key(e.name))))
            if e.scheduled:
                if not packed:
                    aux.append(("scale", (*node_path, attr("scale"), key(e.name))))
                if first:
                    aux.append(("count", (*node_path, attr("count"))))
                    first = False
            raw.append((node_path, i, e, leaf, tuple(aux)))
    qualifiers = _qualifiers([_owner_prefix(r[0]) for r in raw])
    counts: dict[str, int] = {}
    for r in raw:
        counts[r[2].name] = counts.get(r[2].name, 0) + 1
    out = []
    for (node_path, i, e, leaf_path, aux), q in zip(raw, qualifiers, strict=True):
        qualified = f"{q}/{e.name}" if q else e.name
        flat = e.name if counts[e.name] == 1 else qualified
        out.append(Found(flat, qualified, node_path, i, e, leaf_path, aux))
    return out


def renamed(state: Any, rename: Callable[[type | None, str], str | None]) -> Any:
    """``state`` with hyperparameters renamed by ``rename(owner state type, name)``.

    ``rename`` returns the new public name, or ``None`` to keep the name.

    The stateful Keras classes use it so that their state speaks their arguments' names
    (``beta_1`` for `scale_by_adam`'s ``b1``). Updates keep the names they are given.
    """
    replacements = {}
    for path, node in nodes(state):
        owner = type(node_at(state, path[:-1])) if path else None
        entries = tuple(
            dataclasses.replace(e, name=new, base=e.base or e.name)
            if (new := rename(owner, e.name)) and new != e.name
            else e
            for e in node.entries
        )
        if entries != node.entries:
            replacements[path] = node._replace(entries=entries)
    return _replace_nodes(state, replacements)


def set_found(state: Any, found: Found, new: Any, api: str) -> Any:
    """``state`` with the hyperparameter ``found`` (from `find`) set to ``new``."""
    return _apply_one(state, {}, found, new, api, found.entry.name, "set")


def _node(state: Any, path: tuple[Any, ...]) -> Any:
    """The `HyperParams` at ``path``, or a view of optax's injected ones."""
    node = node_at(state, path)
    if isinstance(node, HyperParams):
        return node
    return _Injected(node_at(state, path[:-1]))


def _apply_one(
    state: Any,
    done: dict[tuple[Any, ...], Any],
    found: Found,
    new: Any,
    api: str,
    name: str,
    how: str,
) -> Any:
    """Writes one hyperparameter; ``done`` holds the nodes already rewritten (by path)."""
    path = found.node_path
    key = path if isinstance(node_at(state, path), HyperParams) else path[:-1]
    if key in done:
        node = done[key] if isinstance(done[key], HyperParams) else _Injected(done[key])
    else:
        node = _node(state, path)
    if how == "set":
        done[key] = node.replaced(found.index, new, api, name)
    else:
        done[key] = node.multiplied(found.index, new, api, name)
    return _replace_nodes(state, done)


def node_at(state: Any, path: tuple[Any, ...]) -> Any:
    """The node of ``state`` at ``path``."""
    node = state
    for key in path:
        if isinstance(key, jax.tree_util.SequenceKey):
            node = node[key.idx]
        elif isinstance(key, jax.tree_util.DictKey):
            node = node[key.key]
        elif isinstance(key, jax.tree_util.GetAttrKey):
            node = getattr(node, key.name)
        else:  # FlattenedIndexKey: a custom node; go through its children
            node = _children(node)[key.key]
    return node


def _children(node: Any) -> list[Any]:
    return jax.tree_util.tree_flatten(node, is_leaf=lambda x: x is not node)[0]


def _replace_nodes(state: Any, replacements: Mapping[tuple[Any, ...], HyperParams]) -> Any:
    def swap(path: Any, x: Any) -> Any:
        return replacements.get(tuple(path), x)

    return jax.tree_util.tree_map_with_path(swap, state, is_leaf=is_node)


def _resolve(api: str, named: list[Found], name: str, new: Any) -> Found:
    matches = [f for f in named if name in (f.flat, f.qualified)]
    if not matches:
        matches = [f for f in named if f.qualified.rsplit("/", 1)[-1] == name]
        if len(matches) > 1:
            raise KeyError(
                f"`{api}` got {name!r}, which {len(matches)} transforms of this state share. "
                f"Received: {name}={reprs.short(new)}. Use one of the qualified names: "
                f"{', '.join(repr(m.qualified) for m in matches)}."
            )
    if not matches:
        known = ", ".join(repr(f.flat) for f in named) or "none"
        hint = did_you_mean(name, [f.flat for f in named])
        raise KeyError(
            f"`{api}` got an unknown hyperparameter {name!r}. Received: "
            f"{name}={reprs.short(new)}. This state has: {known}.{hint}"
        )
    return matches[0]


def _apply(api: str, state: Any, requested: Mapping[str, Any], how: str) -> Any:
    _check_state(api, state)
    if not requested:
        return state
    named = find(state)
    done: dict[tuple[Any, ...], Any] = {}
    out = state
    for name, new in requested.items():
        f = _resolve(api, named, name, new)
        out = _apply_one(state, done, f, new, api, name, how)
    return out


def upgrade_legacy(
    saved: Mapping[str, Any], target: Any, name_of: Callable[[tuple[Any, ...]], str]
) -> dict[str, Any]:
    """The leaves of ``target``'s hyperparameters from an earlier store, by leaf name.

    ``saved`` maps an earlier store's leaf names to arrays; ``name_of`` names a leaf path
    as its keys do. A decay's value and residual are recovered exactly from its float32
    ``1 - b`` (``1 - c`` is exact in float64). A schedule's value in force, scale and count
    (not stored then) keep ``target``'s. Leaves other than hyperparameters are not
    returned: they are stored under the same names as before.

    Raises:
      KeyError: a hyperparameter of ``target`` is not in ``saved`` (the message names it).
    """
    out: dict[str, Any] = {}
    packed: dict[tuple[Any, ...], HyperParams] = {}  # nodes that hold one leaf, rewritten
    for f in find(target):
        node = _node(target, f.node_path)
        if isinstance(node, _Injected):
            continue
        e = f.entry
        key = legacy_key(name_of(f.node_path), e)
        if key not in saved:
            if e.scheduled:
                continue
            raise KeyError(key)
        value, residual = upgrade_value(e, saved[key])
        if f.packed:
            node = packed.get(f.node_path, node)
            packed[f.node_path] = node.restored(f.index, value, residual)
            continue
        out[name_of(f.leaf_path)] = value
        for kind, path in f.aux_paths:
            if kind == "residual":
                out[name_of(path)] = residual
    for node_path, node in packed.items():
        out[name_of((*node_path, _PACKED))] = node.packed_leaf
    return out


def value_of(state: Any, found: Found) -> Any:
    """The value in force of the hyperparameter ``found`` (from `find`) in ``state``."""
    return _unwrap(_node(state, found.node_path).in_force[found.index])


def packed(state: Any) -> Any:
    """``state`` with each `HyperParams` node packed into one leaf (`HyperParams.pack`)."""
    return jax.tree.map(
        lambda x: x.pack() if isinstance(x, HyperParams) else x,
        state,
        is_leaf=lambda x: isinstance(x, HyperParams),
    )


def get_hyperparams(state: Any) -> dict[str, jax.Array]:
    """Reads the hyperparameters held in an optimizer state: the values in force.

    Names are the arguments the user passed (``learning_rate``, ``b1``; a Keras class's
    ``beta_1``). A name that two transforms of a chain share is qualified by the
    transform's position or key in the chain, e.g. ``"0/max_norm"``. A scheduled
    hyperparameter shows the value its schedule gave for the last step (before the first
    step, its value at step 0): the number to log.

    Args:
      state: the state of any optx transform or chain (also inside optax's, Flax's or the
        stateful wrapper's containers).

    Returns:
      A flat dict from name to float32 scalar (or batched) array, in tree order.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> state = optx.adam(1e-3).init({"w": jnp.zeros(3)})
      >>> {k: round(float(v), 6) for k, v in optx.get_hyperparams(state).items()}
      {'b1': 0.9, 'b2': 0.999, 'eps': 0.0, 'eps_root': 0.0, 'learning_rate': 0.001}
    """
    _check_state("get_hyperparams", state)
    out = {}
    for f in find(state):
        out[f.flat] = value_of(state, f)
    return out


def set_hyperparams(state: Any, values: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
    """Returns ``state`` with some hyperparameters replaced; never recompiles a jitted step.

    Values may be Python numbers (checked against the hyperparameter's own range) or
    arrays, traced ones included, so `jax.vmap` can sweep a hyperparameter in one program.

    A constant hyperparameter takes the new value. A **scheduled** one is rescaled: the
    schedule is multiplied, from now on, by ``new / (its value in force)``, so the value in
    force becomes ``new`` and the schedule keeps its shape (cutting a cosine-decayed rate by
    10x keeps the cosine). Its value in force must not be 0 (a warmup's first step): use
    `scale_hyperparams` there.

    Args:
      state: the state of an optx transform or chain.
      values: optional mapping of names to values, for qualified names such as
        ``"1/learning_rate"`` that are not valid keyword arguments.
      **kwargs: names (as `get_hyperparams` shows them) and their new values.

    Returns:
      A new state with the same structure, shapes and dtypes.

    Raises:
      KeyError: a name is unknown, or shared by several transforms and not qualified.
      ValueError: a value is out of range, non-finite, or of the wrong shape.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.adam(1e-3)
      >>> state = optx.set_hyperparams(tx.init({"w": jnp.zeros(3)}), learning_rate=1e-2)
      >>> float(optx.get_hyperparams(state)["learning_rate"])
      0.009999999776482582

      A scheduled learning rate, cut by half mid-run:

      >>> tx = optx.adam(optx.schedules.exponential_decay(1.0, 1, 0.5))
      >>> state = tx.init({"w": jnp.zeros(3)})
      >>> _, state = tx.update({"w": jnp.ones(3)}, state)  # the rate of step 0: 1.0
      >>> state = optx.set_hyperparams(state, learning_rate=0.5)
      >>> _, state = tx.update({"w": jnp.ones(3)}, state)  # 0.5 * schedule(1)
      >>> float(optx.get_hyperparams(state)["learning_rate"])
      0.25
    """
    requested = dict(values or {})
    requested.update(kwargs)
    return _apply("set_hyperparams", state, requested, "set")


def scale_hyperparams(
    state: Any, factors: Mapping[str, Any] | None = None, /, **kwargs: Any
) -> Any:
    """Returns ``state`` with some hyperparameters multiplied by a factor, from now on.

    A constant is multiplied; a schedule is multiplied at every later step (and its value
    in force too). Factors may be traced, so `jax.vmap` can sweep the scale of a schedule
    in one compiled program. Never recompiles.

    Args:
      state: the state of an optx transform or chain.
      factors: optional mapping of (qualified) names to factors.
      **kwargs: names (as `get_hyperparams` shows them) and their factors.

    Returns:
      A new state with the same structure, shapes and dtypes.

    Raises:
      KeyError: a name is unknown, or shared by several transforms and not qualified.
      ValueError: a factor is not finite, or the product leaves the hyperparameter's range.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.sgd(optx.schedules.linear_schedule(0.0, 1.0, 10))
      >>> state = optx.scale_hyperparams(tx.init({"w": jnp.zeros(1)}), learning_rate=0.1)
      >>> for _ in range(6):
      ...     _, state = tx.update({"w": jnp.ones(1)}, state)
      >>> round(float(optx.get_hyperparams(state)["learning_rate"]), 6)  # 0.1 * schedule(5)
      0.05
    """
    requested = dict(factors or {})
    requested.update(kwargs)
    return _apply("scale_hyperparams", state, requested, "scale")
