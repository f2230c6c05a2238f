"""The flat view of an optimizer state: ``"<name>/<slot>/<param path>"`` keys (DESIGN D7).

A `Layout` is computed once per parameter structure. It names every leaf of a functional
state:

* a hyperparameter by its key in the state (``"learning_rate"``, ``"one_minus_b1"``; a
  name two transforms share is qualified by the transform's position, ``"0/max_norm"``).
  Names listed as *tied* (the Keras classes tie ``"learning_rate"``) are one entry however
  many transforms hold them;
* a slot (a subtree shaped like the parameters: Adam's ``mu``) by
  ``"<name>/<slot>/<param path>"``;
* anything else (step counts, factored moments) by ``"<name>/<path in the state>"``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import hyperparams as hp
from optx._src.tree import is_param, params_shaped_subtrees, path_name


def _key_name(key: Any) -> str | None:
    if isinstance(key, jax.tree_util.GetAttrKey):
        return key.name
    if isinstance(key, jax.tree_util.DictKey) and isinstance(key.key, str):
        return key.key
    return None


@dataclasses.dataclass(frozen=True)
class Layout:
    """Keys of the leaves of one state, and the way back.

    Attributes:
      keys: one key per state leaf, in the state's leaf order (tied leaves repeat a key).
      order: the distinct keys, in display order (hyperparameters first).
      slots: ``{(param path, slot name): key}``.
      hyperparams: the keys that hold hyperparameters.
      treedef: the state's structure.
    """

    keys: tuple[str, ...]
    order: tuple[str, ...]
    slots: Mapping[tuple[str, str], str] = dataclasses.field(compare=False)
    hyperparams: tuple[str, ...]
    treedef: Any

    @classmethod
    def of(
        cls,
        state: Any,
        params: Any,
        name: str,
        tied: tuple[str, ...] = (),
        slot_aliases: Mapping[str, str] | None = None,
        tie_scope: Any = None,
        owner: Any = None,
    ) -> Layout:
        """The layout of ``state``, made by an optimizer called ``name`` for ``params``.

        ``tie_scope(leaf path)`` (optional) returns the scope within which a tied name is
        one entry (``"adam"`` gives the key ``"adam/learning_rate"``), or ``None`` for a
        hyperparameter that is not tied. ``owner(leaf path)`` (optional) returns
        ``(name, slot aliases, n)`` for a leaf that belongs to an inner optimizer (a
        `MultiOptimizer`'s): its keys use that name and drop the first ``n`` path keys.
        """
        aliases = dict(slot_aliases or {})

        def owner_of(path: tuple[Any, ...]) -> tuple[str, Mapping[str, str], int]:
            found = owner(path) if owner is not None else None
            return found if found is not None else (name, aliases, 0)

        flat, treedef = jax.tree_util.tree_flatten_with_path(state)
        index = {tuple(p): i for i, (p, _) in enumerate(flat)}
        keys: list[str | None] = [None] * len(flat)
        hyper: list[str] = []
        for flat_name, _, path, stored, _ in hp._named_entries(state):
            public = stored.removeprefix(hp._ONE_MINUS)
            scope = tie_scope(path) if tie_scope is not None else ""
            if public in tied and stored == public and scope is not None:
                key = f"{scope}/{public}" if scope else public
            else:
                qualifier = flat_name.rpartition("/")[0]
                key = f"{qualifier}/{stored}" if qualifier else stored
            keys[index[tuple(path)]] = key
            if key not in hyper:
                hyper.append(key)

        slots: dict[tuple[str, str], str] = {}
        # (leaf index, short key, qualified key, slot, param path)
        candidates: list[tuple[int, str, str, str, str]] = []
        pnames = {
            tuple(p): path_name(p)
            for p, _ in jax.tree_util.tree_flatten_with_path(params, is_leaf=is_param)[0]
        }
        for node_path, node in params_shaped_subtrees(state, params):
            nm, al, drop = owner_of(tuple(node_path))
            named = [n for n in map(_key_name, node_path) if n is not None]
            slot = al.get(named[-1], named[-1]) if named else "slot"
            where = path_name(node_path[drop:-1])
            sub = jax.tree_util.tree_flatten_with_path(node)[0]
            for sub_path, _ in sub:
                full = tuple(node_path) + tuple(sub_path)
                if full not in index or keys[index[full]] is not None:
                    continue
                ppath = pnames.get(tuple(sub_path), path_name(sub_path))
                short = f"{nm}/{slot}/{ppath}"
                long = f"{nm}/{where}/{slot}/{ppath}" if where else short
                candidates.append((index[full], short, long, slot, ppath))
        counts: dict[str, int] = {}
        for _, short, *_ in candidates:
            counts[short] = counts.get(short, 0) + 1
        for i, short, long, slot, ppath in candidates:
            key = short if counts[short] == 1 else long
            keys[i] = key
            slots.setdefault((ppath, slot), key)
        for i, (path, _) in enumerate(flat):
            if keys[i] is None:
                nm, _, drop = owner_of(tuple(path))
                keys[i] = f"{nm}/{path_name(path[drop:])}"
        done = [k for k in keys if k is not None]
        rest = [k for k in dict.fromkeys(done) if k not in hyper]
        return cls(tuple(done), tuple(hyper + rest), slots, tuple(hyper), treedef)

    def to_dict(self, state: Any) -> dict[str, Any]:
        """``{key: leaf}`` for ``state`` (a tied key takes its first leaf)."""
        leaves = jax.tree.leaves(state)
        out: dict[str, Any] = {}
        for key, leaf in zip(self.keys, leaves, strict=True):
            out.setdefault(key, leaf)
        return {k: out[k] for k in self.order}

    def from_dict(self, api: str, values: Mapping[str, Any]) -> Any:
        """The state holding ``values``; every key must be present, and no other."""
        check_keys(api, self.order, values)
        seen: set[str] = set()
        leaves = []
        for k in self.keys:
            value = values[k]
            if (
                k in seen
                and isinstance(value, jax.Array)
                and not isinstance(value, jax.core.Tracer)
            ):
                value = jnp.array(value, copy=True)  # one buffer per leaf: steps donate them
            seen.add(k)
            leaves.append(value)
        return jax.tree.unflatten(self.treedef, leaves)


def own_buffers(state: Any, params: Any) -> Any:
    """``state`` with every array leaf its own buffer, distinct from each other and ``params``.

    A step donates every state leaf: an ``init`` that puts one array object in two leaves
    (``zeros = jnp.zeros_like(p); return State(a=zeros, b=zeros)``) or a parameter itself in
    its state would have one buffer donated twice, or the caller's parameters donated. Such
    a leaf is copied, once, where the wrapper stores the state (`build`).
    """
    seen = {id(x) for x in jax.tree.leaves(params)}

    def own(leaf: Any) -> Any:
        if not isinstance(leaf, jax.Array) or isinstance(leaf, jax.core.Tracer):
            return leaf
        if id(leaf) in seen:
            return jnp.array(leaf, copy=True)
        seen.add(id(leaf))
        return leaf

    return jax.tree.map(own, state)


def check_keys(api: str, expected: list[str] | tuple[str, ...], values: Mapping[str, Any]) -> None:
    """Raises a `ValueError` naming the keys of ``values`` missing from ``expected`` or extra."""
    known = set(expected)
    missing = [k for k in expected if k not in values]
    extra = [k for k in values if k not in known]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {_listing(missing)}")
        if extra:
            parts.append(f"unexpected {_listing(extra)}")
        raise ValueError(
            f"`{api}` needs the variables of this optimizer, keyed by name. "
            f"Received: variables with {' and '.join(parts)}."
        )


def _listing(keys: list[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:8])
    return shown + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")


def carry_over(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The new variables, each taken from the old ones where it is the same variable.

    Same key: the same variable. A key the old state lacks (a wrapper added or removed
    moved it in the chain: ``adam/0/count`` becomes ``adam/step/1/0/count``) takes the old
    variable whose key ends with the longest common run of path parts, if exactly one does
    and its shape and dtype agree; otherwise its fresh initial value.
    """
    out = {k: old.get(k, v) for k, v in new.items()}
    spare = [k for k in old if k not in new]
    for key, value in new.items():
        if key in old:
            continue
        scored = [
            (_common_suffix(key, k), k)
            for k in spare
            if np.shape(old[k]) == np.shape(value) and old[k].dtype == value.dtype
        ]
        best = max((s for s, _ in scored), default=0)
        winners = [k for s, k in scored if s == best]
        if best >= 2 and len(winners) == 1:
            out[key] = old[winners[0]]
    return out


def _common_suffix(a: str, b: str) -> int:
    """How many ``/``-separated parts ``a`` and ``b`` share at their ends."""
    n = 0
    for x, y in zip(reversed(a.split("/")), reversed(b.split("/")), strict=False):
        if x != y:
            break
        n += 1
    return n
