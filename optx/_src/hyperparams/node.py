"""The stored form of hyperparameters: the `HyperParams` node a transform's state holds.

Its leaves are the values in force (float32 scalars, by public name), a decay's float32
rounding residual, and a schedule's scale and step count; its static part an `Entry` per
hyperparameter. This module alone builds and changes them (and reads an earlier release's
stored form); the others go through its methods.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from optx._src import reprs
from optx._src.hyperparams.declare import (
    _DTYPE,
    _FLOAT32_MAX,
    FINITE,
    Range,
    allows,
    is_schedule,
    specs,
    validate,
)
from optx._src.tree_moments import complement_power

# --- The stored form ---------------------------------------------------------------------


def _split(decay: bool, value: Any) -> tuple[jax.Array, jax.Array | None]:
    """``(value, residual)``: the float32 value, and for a decay what float32 rounded off.

    A Python or NumPy number's residual is ``value - float32(value)`` computed in float64,
    so ``1 - value`` is recovered to float32 round-off as ``(1 - v) - residual`` (``1 - v``
    is exact for ``v`` in [0.5, 1]): in float32, ``0.999`` is off by 1.3e-8, which is
    1.3e-5 of ``1 - 0.999``. An array's (a traced value's) residual is 0.
    """
    if isinstance(value, Tracer | jax.Array):
        v = jnp.asarray(value, _DTYPE)
        return v, (jnp.zeros_like(v) if decay else None)
    exact = np.asarray(value, np.float64)
    v = np.asarray(exact, np.float32)
    if not decay:
        return jnp.asarray(v), None
    return jnp.asarray(v), jnp.asarray(np.asarray(exact - v.astype(np.float64), np.float32))


@dataclasses.dataclass(frozen=True)
class Entry:
    """The static part of one hyperparameter in a state.

    Attributes:
      name: its public name (the argument the user passed: ``"b1"``, ``"beta_1"``).
      field: the transform's field that holds its value or schedule.
      rule: the values it accepts.
      decay: a decay rate: the state also keeps its float32 rounding residual.
      scheduled: given as a schedule (the state also keeps a scale and a step count).
      base: the name its transform gave it, where `renamed` changed ``name``.
      given: given as a JAX array (`declare.is_array`): every ``update`` puts the value
        its transform holds in force, and `set_hyperparams` refuses it.
    """

    name: str
    field: str
    rule: Range
    decay: bool
    scheduled: bool
    base: str = ""
    given: bool = False


class Owner:
    """The transform that made a `HyperParams` node (the static part of a state).

    ``cls`` is its class and ``label`` the name it was built under (the public factory:
    ``"adam"`` for the `scale_by_adam` of `adam`). Two owners are equal when their classes
    are: the label is for messages only, so a state made by ``optx.adam`` and one made by
    the equal ``optx.chain(optx.scale_by_adam(), ...)`` have the same tree structure.
    """

    __slots__ = ("cls", "label")

    def __init__(self, cls: type, label: str) -> None:
        self.cls, self.label = cls, label

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Owner) and self.cls is other.cls

    def __hash__(self) -> int:
        return hash(self.cls)

    def __repr__(self) -> str:
        return f"Owner({self.cls.__name__}, {self.label!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return Owner, (self.cls, self.label)


# `HyperParams(..., packed=True)` without a vector stacks the values given.
_STACK = object()


def _taken(group: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The leaves of a group of children (residuals or scales) in ``names``'s order.

    A dict of them; in a tree of other leaves (shardings, ``None``s) a list or one leaf.
    """
    if type(group) is dict:
        return tuple([group[k] for k in names])
    if isinstance(group, Mapping):
        return tuple(group[k] for k in names)
    return tuple(group) if isinstance(group, list | tuple) else (group,) * len(names)


def _named(entries: tuple[Entry, ...], which: str) -> list[str]:
    return [e.name for e in entries if getattr(e, which)]


# `_kinds` by the identity of the entries tuple (hashing one hashes every `Entry`).
_KINDS: dict[int, tuple[tuple[Entry, ...], tuple[tuple[str, ...], tuple[str, ...]]]] = {}


def _kinds(entries: tuple[Entry, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The public names of the decays and of the scheduled hyperparameters, in order."""
    hit = _KINDS.get(id(entries))
    if hit is not None and hit[0] is entries:
        return hit[1]
    kinds = tuple(_named(entries, "decay")), tuple(_named(entries, "scheduled"))
    if len(_KINDS) > 4096:
        _KINDS.clear()
    _KINDS[id(entries)] = (entries, kinds)
    return kinds


@jax.tree_util.register_pytree_with_keys_class
class HyperParams:
    """The hyperparameters of one transform, as its state holds them.

    Its leaves are the values in force, float32 scalars keyed by public name, in
    declaration order; then, where there are any, the decays' rounding residuals
    (``.residual[name]``), the schedules' scales (``.scale[name]``) and the schedules' step
    count (``.count``). The static part (an `Entry` per hyperparameter) carries names,
    rules and encodings, and the `Owner`: the class of the transform whose ``init`` made
    the node (``None`` for a node built by hand), by which ``update`` refuses another
    transform's state. A packed node (`pack`, which `flatten` uses) holds the values,
    residuals and scales as one float32 vector instead (and the count beside it): one array
    in and out of a jitted step; it reads and writes the same.

    A transform reads values in force with ``h[field]`` and ``1 - b`` of a decay with
    ``h.complement(field)``. It reads as a mapping from public names to values in force
    (``h.items()``, ``dict(h)``). Users read and change them with `get_hyperparams`,
    `set_hyperparams` and `scale_hyperparams`.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> state = optx.sgd(0.1, momentum=0.9).init({"w": jnp.zeros(2)})
      >>> state[0].hyperparams
      HyperParams(momentum=0.9)
      >>> state[0].hyperparams["decay"]  # `trace`'s field, which `sgd` calls momentum
      Array(0.9, dtype=float32)
    """

    __slots__ = ("_parts", "_vector", "count", "entries", "owner", "packed")

    def __init__(
        self,
        entries: tuple[Entry, ...],
        values: tuple[Any, ...],
        residuals: tuple[Any, ...] = (),
        scales: tuple[Any, ...] = (),
        count: Any = None,
        *,
        packed: bool = False,
        vector: Any = _STACK,
        owner: Owner | None = None,
    ) -> None:
        self.entries = entries
        self.count = count
        self.packed = packed
        # Which transform made the node: `update` refuses another transform's state.
        self.owner = owner
        if packed:
            self._parts = None
            self._vector = _stack((*values, *residuals, *scales)) if vector is _STACK else vector
        else:
            self._parts = (tuple(values), tuple(residuals), tuple(scales))
            self._vector = None

    # -- the stored leaves: one per value, or one float32 vector of them all (`pack`) --
    def _part(self, which: int) -> tuple[Any, ...]:
        if self._parts is not None:
            return self._parts[which]
        sizes = (len(self.entries), len(_named(self.entries, "decay")))
        sizes += (len(_named(self.entries, "scheduled")),)
        start = sum(sizes[:which])
        return tuple(_element(self._vector, start + i) for i in range(sizes[which]))

    @property
    def in_force(self) -> tuple[Any, ...]:
        """The values in force, in declaration order."""
        return self._part(0)

    @property
    def residuals(self) -> tuple[Any, ...]:
        """The decays' float32 rounding residuals, in declaration order."""
        return self._part(1)

    @property
    def scales(self) -> tuple[Any, ...]:
        """The schedules' scales, in declaration order."""
        return self._part(2)

    def pack(self) -> HyperParams:
        """The same hyperparameters held as one float32 leaf (and the schedules' count).

        A jitted step passes one array for them in and out instead of one per value,
        residual and scale: `flatten` holds its inner state's hyperparameters so. Reading
        and writing them is unchanged; the leaf is named ``packed`` in tree paths.
        """
        if self.packed:
            return self
        values, residuals, scales = self._parts  # type: ignore[misc]
        return HyperParams(
            self.entries, values, residuals, scales, self.count, packed=True, owner=self.owner
        )

    @property
    def packed_leaf(self) -> Any:
        """The one leaf of a packed node's values, residuals and scales."""
        return self._vector

    def restored(self, i: int, value: Any, residual: Any) -> HyperParams:
        """A copy with hyperparameter ``i``'s stored value (and residual) as given, unchecked.

        For stores of earlier releases (`upgrade_value` gives the pair).
        """
        values, residuals = list(self.in_force), list(self.residuals)
        values[i] = _like(value, values[i])
        if residual is not None:
            j = self._slot(i, "decay")
            residuals[j] = _like(residual, residuals[j])
        return self._replace(values=tuple(values), residuals=tuple(residuals))

    # -- pytree --
    # `tree_flatten` and `tree_unflatten` run on every call of a jitted step that takes a
    # state: they do no more than hand the leaves over. The keyed form is for paths.
    def tree_flatten(self) -> tuple[tuple[Any, ...], Any]:
        decays, scheduled = _kinds(self.entries)
        if self.packed:
            if scheduled:
                return (self._vector, self.count), (self.entries, True, self.owner)
            return (self._vector,), (self.entries, True, self.owner)
        values, residuals, scales = self._parts  # type: ignore[misc]
        children = values
        if decays:
            children = (*children, dict(zip(decays, residuals, strict=True)))
        if scheduled:
            children = (*children, dict(zip(scheduled, scales, strict=True)), self.count)
        return children, (self.entries, False, self.owner)

    def tree_flatten_with_keys(self) -> tuple[list[tuple[Any, Any]], Any]:
        key, attr = jax.tree_util.DictKey, jax.tree_util.GetAttrKey
        if self.packed:
            packed: list[tuple[Any, Any]] = [(attr("packed"), self._vector)]
            if _named(self.entries, "scheduled"):
                packed.append((attr("count"), self.count))
            return packed, (self.entries, True, self.owner)
        children: list[tuple[Any, Any]] = [
            (key(e.name), v) for e, v in zip(self.entries, self.in_force, strict=True)
        ]
        decays = _named(self.entries, "decay")
        if decays:
            children.append((attr("residual"), dict(zip(decays, self.residuals, strict=True))))
        # The structure follows the static entries alone (a tree of `None`s keeps it).
        scheduled = _named(self.entries, "scheduled")
        if scheduled:
            children.append((attr("scale"), dict(zip(scheduled, self.scales, strict=True))))
            children.append((attr("count"), self.count))
        return children, (self.entries, False, self.owner)

    @classmethod
    def tree_unflatten(cls, aux: tuple[Any, ...], children: Any) -> HyperParams:
        # Runs on every call of a jitted step that returns a state: plain indexing only.
        entries, packed = aux[0], aux[1]
        node = object.__new__(cls)
        node.entries, node.packed = entries, packed
        # A structure pickled by an earlier release has no owner.
        node.owner = aux[2] if len(aux) > 2 else None
        if packed:
            node._parts, node._vector = None, children[0]
            node.count = children[1] if len(children) > 1 else None
            return node
        n = len(entries)
        decays, scheduled = _kinds(entries)
        residuals = scales = ()
        count = None
        i = n
        if decays:
            residuals = _taken(children[i], decays)
            i += 1
        if scheduled:
            scales = _taken(children[i], scheduled)
            count = children[i + 1]
        node.count = count
        node._parts, node._vector = (tuple(children[:n]), residuals, scales), None
        return node

    def __eq__(self, other: object) -> bool:
        # As a NamedTuple of its parts: a tree of shardings compares equal to another.
        if not isinstance(other, HyperParams):
            return NotImplemented
        if self.packed != other.packed:
            return False
        if self.packed and not _same(self._vector, other._vector):
            return False
        return (self.entries, self._parts, self.count) == (
            other.entries,
            other._parts,
            other.count,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        items = ", ".join(f"{e.name}={_shown(v)}" for e, v in self.public_items())
        return f"HyperParams({items})"

    def _replace(self, **changes: Any) -> HyperParams:
        if self.packed and set(changes) <= {"entries", "count"}:
            entries = changes.get("entries", self.entries)
            count = changes.get("count", self.count)
            return HyperParams(
                entries, (), count=count, packed=True, vector=self._vector, owner=self.owner
            )
        fields = {
            "entries": self.entries,
            "values": self.in_force,
            "residuals": self.residuals,
            "scales": self.scales,
            "count": self.count,
        }
        fields.update(changes)
        return HyperParams(**fields, packed=self.packed, owner=self.owner)

    # -- reading, for transforms --
    @property
    def scheduled(self) -> bool:
        """Whether any hyperparameter here is a schedule."""
        return any(e.scheduled for e in self.entries)

    def _index(self, field_name: str) -> int:
        for i, e in enumerate(self.entries):
            if e.field == field_name:
                return i
        for i, e in enumerate(self.entries):  # by public name, as a dict of them reads
            if e.name == field_name:
                return i
        raise KeyError(
            f"This state holds no hyperparameter {field_name!r}. It holds: "
            f"{', '.join(repr(e.field) for e in self.entries) or 'none'}."
        )

    def _slot(self, i: int, which: str) -> int:
        """Position of entry ``i`` among the residuals (``"decay"``) or scales."""
        return sum(1 for e in self.entries[:i] if getattr(e, which))

    def __contains__(self, field_name: object) -> bool:
        return any(field_name in (e.field, e.name) for e in self.entries)

    # A read-only mapping from public names to values in force, as a dict of them was.
    def __iter__(self) -> Iterator[str]:
        return iter(e.name for e in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def keys(self) -> list[str]:
        """The public names, in declaration order."""
        return [e.name for e in self.entries]

    def values(self) -> list[Any]:
        """The values in force, in declaration order."""
        return list(self.in_force)

    def items(self) -> list[tuple[str, Any]]:
        """``(public name, value in force)`` pairs."""
        return [(e.name, v) for e, v in zip(self.entries, self.in_force, strict=True)]

    def __getitem__(self, field_name: str) -> Any:
        """The value in force of the hyperparameter held by field ``field_name``."""
        return self.in_force[self._index(field_name)]

    def complement(self, field_name: str) -> Any:
        """``1 - value``, to float32 round-off of the exact value for a decay."""
        i = self._index(field_name)
        v = self.in_force[i]
        if not self.entries[i].decay:
            return 1 - v
        return (1 - v) - self.residuals[self._slot(i, "decay")]

    def public_items(self) -> list[tuple[Entry, Any]]:
        """``(entry, value in force)`` of each hyperparameter."""
        return list(zip(self.entries, self.in_force, strict=True))

    def _with_value(self, i: int, new: Any, values: list[Any], residuals: list[Any]) -> None:
        e = self.entries[i]
        v, r = _split(e.decay, new)
        values[i] = _like(v, self.in_force[i])
        if e.decay:
            j = self._slot(i, "decay")
            residuals[j] = _like(r, self.residuals[j])

    # -- schedules --
    def owned_by(self, cls: type) -> bool:
        """Whether transforms of class ``cls`` declare these (scheduled) hyperparameters."""
        fields = {name for name, _ in specs(cls)}
        return all(e.field in fields for e in self.entries if e.scheduled)

    def advance(self, tx: Any) -> HyperParams:
        """Evaluates the schedules of ``tx`` at this step; the values go in force."""
        if not self.scheduled:
            return self
        values, residuals = list(self.in_force), list(self.residuals)
        for i, e in enumerate(self.entries):
            if e.scheduled:
                raw = jnp.asarray(getattr(tx, e.field)(self.count), _DTYPE)
                scaled = self.scales[self._slot(i, "scheduled")] * raw
                self._with_value(i, scaled, values, residuals)
        count = jnp.asarray(self.count)
        top = jnp.iinfo(count.dtype).max
        count = jnp.where(count < top, count + 1, top).astype(count.dtype)
        return self._replace(values=tuple(values), residuals=tuple(residuals), count=count)

    def at(self, tx: Any, field_name: str, count: Any) -> Any:
        """The value of ``field_name`` at step ``count``: its schedule there, or the constant.

        The schedule is multiplied by its scale. For a transform that reads a schedule at
        another step than the one in force (schedule-free's averaging weight).
        """
        i = self._index(field_name)
        if not self.entries[i].scheduled:
            return self.in_force[i]
        scale = self.scales[self._slot(i, "scheduled")]
        return scale * jnp.asarray(getattr(tx, field_name)(count), _DTYPE)

    def given_by(self, tx: Any) -> HyperParams:
        """The values ``tx`` was given as JAX arrays, put in force (see `Entry.given`)."""
        given = getattr(tx, "_given", ())
        values, residuals = list(self.in_force), list(self.residuals)
        for i, e in enumerate(self.entries):
            if e.field in given:
                self._with_value(i, getattr(tx, e.field), values, residuals)
        return self._replace(values=tuple(values), residuals=tuple(residuals))

    # -- writing, by public name --
    def _refuse_given(self, i: int, api: str, shown_name: str) -> None:
        if self.entries[i].given:
            raise ValueError(
                f"`{api}` cannot change {shown_name}: it was given as a JAX array when the "
                f"transform was built, so every update uses the value its transform holds "
                f"(as optax's `inject_hyperparams` passes them). Build the transform with a "
                f"Python number (`float(x)`) or a schedule to change {shown_name} in the "
                f"state, or pass the new value where the transform is built."
            )

    def replaced(self, i: int, new: Any, api: str, shown_name: str) -> HyperParams:
        """A copy with hyperparameter ``i`` set to ``new`` (the rule of `set_hyperparams`)."""
        self._refuse_given(i, api, shown_name)
        e, in_force = self.entries[i], _unwrap(self.in_force[i])
        new = _checked(api, shown_name, e, new, in_force)
        values, residuals, scales = list(self.in_force), list(self.residuals), list(self.scales)
        if e.scheduled:
            j = self._slot(i, "scheduled")
            if not isinstance(in_force, Tracer) and np.any(np.asarray(in_force) == 0):
                raise ValueError(
                    f"`{api}` cannot set the scheduled hyperparameter {shown_name}: the "
                    f"schedule's value in force is 0, so no factor of it gives the new "
                    f"value. Received: {shown_name}={reprs.short(new)}. Use "
                    f"`optx.scale_hyperparams(state, {shown_name}=factor)` to scale the "
                    f"schedule, or rebuild the optimizer with a constant."
                )
            factor = jnp.asarray(new, _DTYPE) / in_force
            scales[j] = _like(_unwrap(scales[j]) * factor, scales[j])
        self._with_value(i, new, values, residuals)
        return self._replace(values=tuple(values), residuals=tuple(residuals), scales=tuple(scales))

    def multiplied(self, i: int, factor: Any, api: str, shown_name: str) -> HyperParams:
        """A copy with hyperparameter ``i`` (and its schedule, from now on) times ``factor``."""
        self._refuse_given(i, api, shown_name)
        e, in_force = self.entries[i], _unwrap(self.in_force[i])
        what = f"the factor of {shown_name}"
        factor = _checked(api, what, dataclasses.replace(e, rule=FINITE), factor, in_force)
        values, residuals, scales = list(self.in_force), list(self.residuals), list(self.scales)
        new = in_force * jnp.asarray(factor, _DTYPE)
        if not isinstance(new, Tracer):
            _check_in_range(api, shown_name, e, new)
        self._with_value(i, new, values, residuals)
        if e.scheduled:
            j = self._slot(i, "scheduled")
            scales[j] = _like(_unwrap(scales[j]) * jnp.asarray(factor, _DTYPE), scales[j])
        return self._replace(values=tuple(values), residuals=tuple(residuals), scales=tuple(scales))


def _same(a: Any, b: Any) -> bool:
    """Whether two packed vectors (or stand-ins for them: shardings) are equal."""
    if a is b:
        return True
    arrays = (jax.Array, np.ndarray)
    if isinstance(a, Tracer) or isinstance(b, Tracer):
        return False
    if isinstance(a, arrays) or isinstance(b, arrays):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return bool(a == b)


def _element(vector: Any, i: int) -> Any:
    """Element ``i`` of a packed vector (its last axis: batched vectors stay batched).

    A stand-in for the vector (a sharding, ``None`` in a tree of them) stands for each.
    """
    if isinstance(vector, jax.Array | np.ndarray | Tracer):
        return vector[..., i]
    inner = _unwrap(vector)  # a container that holds the vector (a Flax `Variable`)
    if inner is not vector and isinstance(inner, jax.Array | np.ndarray | Tracer):
        return inner[..., i]
    return vector


def _stack(parts: tuple[Any, ...]) -> Any:
    """Scalars (or equally batched arrays) as one float32 vector along a new last axis."""
    arrays = [jnp.asarray(_unwrap(p), _DTYPE) for p in parts]
    shape = jnp.broadcast_shapes(*(a.shape for a in arrays)) if arrays else ()
    if not arrays:
        return jnp.zeros((0,), _DTYPE)
    return jnp.stack([jnp.broadcast_to(a, shape) for a in arrays], axis=-1)


def _shown(v: Any) -> str:
    if isinstance(v, jax.Array) and not isinstance(v, Tracer) and v.shape == ():
        return f"{float(v):.7g}"
    return reprs.short(v)


def _unwrap(leaf: Any) -> Any:
    """The array of a leaf; a container that holds one (a Flax `Variable`) gives it up."""
    if leaf is None or isinstance(leaf, jax.Array | np.ndarray | np.generic | float | int):
        return leaf
    inner = jax.tree.leaves(leaf)
    return inner[0] if len(inner) == 1 else leaf


def _like(new: Any, old: Any) -> Any:
    """``new`` shaped and typed as ``old``, in ``old``'s container if it has one."""
    raw = _unwrap(old)
    value = jnp.broadcast_to(jnp.asarray(_unwrap(new), jnp.result_type(raw)), np.shape(raw))
    if raw is old:
        return value
    return jax.tree.unflatten(jax.tree.structure(old), [value])


def _checked(api: str, name: str, entry: Entry, new: Any, leaf: Any) -> Any:
    """``new`` validated (where concrete) and shaped for ``leaf``."""
    if is_schedule(new) or (not isinstance(new, Tracer) and np.shape(new) == ()):
        new = validate(api, name, new, entry.rule, schedules=False)
    elif not isinstance(new, Tracer):
        _check_in_range(api, name, entry, new)
    shape = np.shape(new)
    if shape not in ((), np.shape(leaf)):
        raise ValueError(
            f"`{api}` needs {name} to be a scalar (or of the stored shape "
            f"{np.shape(leaf)}). Received: {name} of shape {shape}."
        )
    return new


def _check_in_range(api: str, name: str, entry: Entry, new: Any) -> None:
    values = np.asarray(new, np.float64).ravel()
    bad = [
        v
        for v in values
        if not ((math.isfinite(v) or allows(entry.rule, v)) and entry.rule.check(float(v)))
    ]
    finite = values[np.isfinite(values)]
    if bad or (finite.size and np.max(np.abs(finite)) > _FLOAT32_MAX):
        raise ValueError(
            f"`{api}` needs {name} {entry.rule.description}. Received: {name} holding "
            f"{reprs.short(bad[0] if bad else float(np.max(np.abs(values))))}."
        )


def create(tx: Any, extra: tuple[tuple[str, float], ...] = ()) -> HyperParams:
    """The initial `HyperParams` of transform ``tx``, from its declared fields.

    ``extra`` adds constants that ``tx`` holds in another form (a Keras-style subclass's own
    numbers): ``(name, value)`` pairs, any finite value.
    """
    names = tx.public_names()
    unused = tx.unused_hyperparams()
    entries, values, residuals, scales = [], [], [], []
    for field_name, spec in specs(type(tx)):
        value = getattr(tx, field_name)
        if (value is None and spec.optional) or field_name in unused:
            continue
        scheduled = is_schedule(value)
        name = names.get(field_name, field_name)
        given = field_name in getattr(tx, "_given", ())
        entries.append(Entry(name, field_name, spec.rule, spec.decay, scheduled, given=given))
        if scheduled:
            # The value in force before the first step is the schedule's at step 0.
            value = jnp.asarray(tx.initial(field_name), _DTYPE)
            scales.append(jnp.ones([], _DTYPE))
        v, r = _split(spec.decay, value)
        values.append(v)
        if spec.decay:
            residuals.append(r)
    for name, value in extra:
        entries.append(Entry(name, name, FINITE, False, False))
        values.append(_split(False, value)[0])
    count = jnp.zeros([], jnp.int32) if scales else None
    owner = Owner(type(tx), getattr(tx, "_built_as", None) or tx.name)
    return HyperParams(
        tuple(entries), tuple(values), tuple(residuals), tuple(scales), count, owner=owner
    )


def value(stored: HyperParams, name: str) -> jax.Array:
    """The value in force of hyperparameter (field) ``name``."""
    return stored[name]


def complement(stored: HyperParams, name: str) -> jax.Array:
    """``1 - name``, exactly where it is stored (a decay)."""
    return stored.complement(name)


def bias_correction(stored: HyperParams, name: str, count: jax.Array) -> jax.Array:
    """``1 - b**count`` for the decay ``b`` = ``name``, computed from the stored ``1 - b``.

    ``1 - b**t`` in float32 cancels the digits that storing ``1 - b`` keeps: ``float32(b)``
    is up to 3e-8 off, which is 3e-3 of ``1 - b`` for ``b = 0.99999``. As
    ``-expm1(t * log1p(-(1 - b)))`` it is exact to a few float32 ulps for every ``b``.
    """
    return complement_power(complement(stored, name), count)


# --- Stores of earlier releases -----------------------------------------------------------

# Releases up to 0.1.0.dev0 kept a transform's hyperparameters in a dict, a decay ``b``
# under the key ``"one_minus_<name>"`` holding float32 ``1 - b``.
_LEGACY_DECAY = "one_minus_"


def is_legacy(names: Iterable[str]) -> bool:
    """Whether leaf names (``"0/hyperparams/one_minus_b1"``) come from an earlier store."""
    return any(n.rpartition("/")[2].startswith(_LEGACY_DECAY) for n in names)


def legacy_key(node_name: str, entry: Entry) -> str:
    """The leaf name an earlier release stored ``entry`` under, in the node ``node_name``."""
    name = entry.base or entry.name
    key = _LEGACY_DECAY + name if entry.decay else name
    return f"{node_name}/{key}" if node_name else key


def upgrade_value(entry: Entry, old: Any) -> tuple[jax.Array, jax.Array | None]:
    """``(value, residual)`` of ``entry`` from what an earlier release stored for it."""
    old = np.asarray(old, np.float64)
    return _split(entry.decay, 1.0 - old if entry.decay else old)
