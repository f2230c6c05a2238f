"""The flat view of an optimizer state: ``"<name>/<slot>/<param path>"`` keys.

A `Layout` is computed once per parameter structure. It names every leaf of a functional
state:

* a hyperparameter by its public name (``"learning_rate"``, ``"b1"``; a name two
  transforms share is qualified by the transform's position, ``"0/max_norm"``).
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
      hyperparams: the hyperparameters' keys. A packed node's (`HyperParams.pack`) name
        no leaf: its values share one, keyed by its path.
      treedef: the state's structure.
      found: ``{key: the hyperparameters it holds}`` (`hyperparams.Found`), for writing.
      schedule_counts: the keys of the schedules' step counts.
    """

    keys: tuple[str, ...]
    order: tuple[str, ...]
    slots: Mapping[tuple[str, str], str] = dataclasses.field(compare=False)
    hyperparams: tuple[str, ...]
    treedef: Any
    found: Mapping[str, tuple[hp.Found, ...]] = dataclasses.field(compare=False, default=None)  # type: ignore[assignment]
    schedule_counts: tuple[str, ...] = ()

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
        found: dict[str, list[hp.Found]] = {}
        schedule_counts: list[str] = []
        aux: list[str] = []  # a decay's residual, a schedule's scale and count
        leaves: set[str] = set()  # the hyperparameters' keys that name a leaf of their own
        for f in hp.find(state):
            public, path = f.entry.name, f.leaf_path
            scope = tie_scope(path) if tie_scope is not None else ""
            if public in tied and scope is not None:
                key = f"{scope}/{public}" if scope else public
            else:
                qualifier = f.flat.rpartition("/")[0]
                key = f"{qualifier}/{public}" if qualifier else public
            found.setdefault(key, []).append(f)
            if key not in hyper:
                hyper.append(key)
            if f.packed:  # one leaf for its node's values, named by its path (below)
                continue
            keys[index[tuple(path)]] = key
            leaves.add(key)
            for kind, aux_path in f.aux_paths:  # named after the hyperparameter
                if keys[index[aux_path]] is None:
                    keys[index[aux_path]] = f"{key}/{kind}"
                    aux.append(f"{key}/{kind}")
                    if kind == "count":
                        schedule_counts.append(f"{key}/{kind}")

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
        # Hyperparameters first, then what keeps them exact or scheduled, then the rest.
        rest = [k for k in dict.fromkeys(done) if k not in hyper and k not in aux]
        return cls(
            tuple(done),
            tuple([k for k in hyper if k in leaves] + aux + rest),
            slots,
            tuple(hyper),
            treedef,
            {k: tuple(v) for k, v in found.items()},
            tuple(schedule_counts),
        )

    def upgrade_legacy(self, values: Mapping[str, Any], current: Mapping[str, Any]) -> dict:
        """``values`` keyed as an earlier release kept them, keyed as this layout does.

        Releases up to 0.1.0.dev0 kept a decay as ``1 - b`` under another name (see
        `hyperparams.legacy_key`); the values are recovered exactly (see
        `hyperparams.upgrade_value`). A schedule's scale and step count, not kept then, take
        ``current``'s.
        """
        out = dict(values)
        for key, founds in self.found.items():
            qualifier = key.rpartition("/")[0]
            entry = founds[0].entry
            old = hp.legacy_key(qualifier, entry)
            if old not in values:
                continue
            value, residual = hp.upgrade_value(entry, values[old])
            del out[old]
            out[key] = value
            if residual is not None:
                out[f"{key}/residual"] = residual
            for kind in ("scale", "count"):
                if f"{key}/{kind}" in current and f"{key}/{kind}" not in out:
                    out[f"{key}/{kind}"] = current[f"{key}/{kind}"]
        return out

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
