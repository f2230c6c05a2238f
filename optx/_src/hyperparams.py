"""Hyperparameters held in the optimizer state: declared once, stored in one place.

A transform declares each numeric hyperparameter as a dataclass field made by `field`:
its default, its range rule and whether it is a decay rate. ``init`` puts a `HyperParams`
node in the state (a registered pytree); its static part carries each hyperparameter's
public name, rule, encoding and whether it is scheduled, its leaves the float32 values in
force. This module alone builds and changes them; every other module reads a state's
hyperparameters through `HyperParams`, `find`, `get_hyperparams` and `set_hyperparams`.

A decay ``b`` is used as ``1 - b`` (Adam's ``(1 - b2) g**2``), which float32 cancels: in
float32, ``0.999`` is off by 1.3e-8, which is 1.3e-5 relative of ``1 - 0.999``. So the
state also keeps what float32 rounded off ``b`` (computed in float64), and ``1 - b`` is
recovered to float32 round-off. The value in force itself is ``b``, as the user wrote it.

Any hyperparameter may be a schedule (a function of the step count). The node then also
holds the schedule's step count and a multiplier (``scale``, initially 1); each ``update``
evaluates ``scale * schedule(count)`` before the transform's maths and keeps that value in
force in the state, where `get_hyperparams` reads it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from optx._src import reprs

_DTYPE = jnp.float32
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_META = "optx_hyperparam"


@dataclasses.dataclass(frozen=True)
class Range:
    """A range rule: ``description`` for messages, ``check`` on a finite float."""

    description: str
    check: Callable[[float], bool] = dataclasses.field(compare=True)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.description, self.check))


def _nonneg(v: float) -> bool:
    return v >= 0


def _unit_open(v: float) -> bool:
    return 0 <= v < 1


def _unit_closed(v: float) -> bool:
    return 0 <= v <= 1


def _positive(v: float) -> bool:
    return v > 0


def _any(v: float) -> bool:
    del v
    return True


NONNEG = Range("finite and >= 0", _nonneg)
UNIT_OPEN = Range("in [0, 1)", _unit_open)
UNIT_CLOSED = Range("in [0, 1]", _unit_closed)
POSITIVE = Range("finite and > 0", _positive)
FINITE = Range("finite", _any)


@dataclasses.dataclass(frozen=True)
class Spec:
    """How a transform declares one numeric hyperparameter (see `field`)."""

    rule: Range = FINITE
    decay: bool = False
    optional: bool = False


_RULE_NAMES = {
    "finite": FINITE,
    ">= 0": NONNEG,
    "> 0": POSITIVE,
    "[0, 1)": UNIT_OPEN,
    "[0, 1]": UNIT_CLOSED,
}


def hyperparam(
    default: Any = dataclasses.MISSING,
    rule: Range | str = FINITE,
    *,
    decay: bool = False,
    optional: bool = False,
) -> Any:
    """Declares a numeric hyperparameter of a transform (a dataclass field).

    Args:
      default: the default value (a number, or ``None`` where ``optional``).
      rule: the values it accepts: ``"finite"``, ``">= 0"``, ``"> 0"``, ``"[0, 1)"`` or
        ``"[0, 1]"`` (or a `Range`).
      decay: a decay rate ``b``, kept in the state as ``1 - b`` (for precision).
      optional: ``None`` switches it off (it is then not in the state).

    Returns:
      A `dataclasses.field` that `Transform` validates in ``__post_init__`` and stores in
      the state's `HyperParams` at ``init``. A schedule (any callable) is accepted in place
      of a number.

    Example:
      >>> import dataclasses, typing, jax, jax.numpy as jnp, optx
      >>> class DecayState(typing.NamedTuple):
      ...     hyperparams: optx.HyperParams
      >>> @dataclasses.dataclass(frozen=True, repr=False)
      ... class Shrink(optx.Transform):
      ...     name = "shrink"
      ...     rate: float = optx.hyperparam(0.9, "[0, 1]")
      ...
      ...     def init(self, params):
      ...         return DecayState(self.init_hyperparams())
      ...
      ...     def update(self, updates, state, params=None, **extra):
      ...         r = state.hyperparams["rate"]
      ...         return jax.tree.map(lambda u: u * r, updates), state
      >>> Shrink(1.5)
      Traceback (most recent call last):
      ValueError: `shrink` needs rate in [0, 1]. Received: rate=1.5.
      >>> tx = Shrink(lambda count: 0.5 ** count)  # a schedule
      >>> state = tx.init(None)
      >>> tx.update({"w": jnp.ones(1)}, state)[0]
      {'w': Array([1.], dtype=float32)}
    """
    if isinstance(rule, str):
        if rule not in _RULE_NAMES:
            raise ValueError(
                f"`optx.hyperparam` needs rule to be one of "
                f"{', '.join(map(repr, _RULE_NAMES))}. Received: rule={rule!r}."
            )
        rule = _RULE_NAMES[rule]
    spec = Spec(rule, decay, optional)
    return dataclasses.field(default=default, metadata={_META: spec})


# The short name the built-in transforms declare their fields with (``hp.field(0.9, ...)``).
field = hyperparam


@functools.cache
def specs(cls: type) -> tuple[tuple[str, Spec], ...]:
    """``(field name, Spec)`` of each hyperparameter a transform class declares, in order."""
    if not dataclasses.is_dataclass(cls):
        return ()
    return tuple(
        (f.name, f.metadata[_META]) for f in dataclasses.fields(cls) if _META in f.metadata
    )


_CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("optx_caller", default=None)
_NAMES: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "optx_caller_names", default=None
)


@contextlib.contextmanager
def caller(api: str, names: Mapping[str, str] | None = None) -> Iterator[None]:
    """Names ``api`` in the errors of the building blocks built inside this context.

    An optimizer factory such as `adam` builds its building blocks in ``caller("adam")``, so
    ``adam(learning_rate=-1)`` reports "`adam` needs ...", the call the user made.
    ``names`` maps a building block's argument names to the caller's (``{"b1": "adam_b1"}``)
    so that the message names the argument the user gave. The outermost caller wins.
    """
    token = _CALLER.set(_CALLER.get() or api)
    names_token = _NAMES.set(_NAMES.get() or names)
    try:
        yield
    finally:
        _NAMES.reset(names_token)
        _CALLER.reset(token)


def current(api: str) -> str:
    """The name to report in errors: the enclosing `caller`'s, else ``api``."""
    return _CALLER.get() or api


def shown(name: str) -> str:
    """The name to report for a building block's argument ``name`` (see `caller`)."""
    return (_NAMES.get() or {}).get(name, name)


def validate(
    api: str, name: str, value: Any, range_rule: Any = None, *, schedules: bool = True
) -> float:
    """Checks a concrete hyperparameter value and returns it as a Python float.

    ``schedules``: whether the caller also takes a schedule (said in the message).

    Raises:
      TypeError: ``value`` is not a real number (or is traced: a transform holds no arrays).
      ValueError: ``value`` is outside ``range_rule`` (default `FINITE`), or not finite in
        float32 (the dtype it is held in).
    """
    api = _CALLER.get() or api
    # The rule is the building block's field's; the message names the caller's argument.
    field_name, name = name, shown(name)
    if isinstance(value, Tracer):
        raise TypeError(
            f"`{api}` needs {name} to be a concrete number when the transform is built "
            f"(transforms hold no arrays). Received: {name}={value!r}. To change it inside a "
            f"traced function, use `optx.set_hyperparams(state, {field_name}=...)`."
        )
    if isinstance(value, bool | np.bool_) or not _is_real_scalar(value):
        what = "a real number or a schedule (a function of the step count)"
        hint = ""
        if not schedules:
            what = "a real number"
            if is_schedule(value):
                hint = " A schedule is given when the transform is built."
        raise TypeError(
            f"`{api}` needs {name} to be {what}. Received: {name}={reprs.short(value)} of "
            f"type {type(value).__name__}.{hint}"
        )
    number = float(value)
    description, ok = range_rule or FINITE
    if not math.isfinite(number) or not ok(number):
        raise ValueError(f"`{api}` needs {name} {description}. Received: {name}={value!r}.")
    if abs(number) > _FLOAT32_MAX:
        raise ValueError(
            f"`{api}` needs {name} {description} in float32 (hyperparameters are float32 "
            f"scalars, at most {_FLOAT32_MAX:.4g} in magnitude). Received: {name}={value!r}."
        )
    return number


def _is_real_scalar(value: Any) -> bool:
    if isinstance(value, numbers.Real):
        return True
    if isinstance(value, np.ndarray | jax.Array | np.generic):
        return (
            np.shape(value) == ()
            # jnp.issubdtype knows ml_dtypes' floats (bfloat16, float8); np.issubdtype does not.
            and jnp.issubdtype(np.asarray(value).dtype, jnp.number)
            and (not jnp.issubdtype(np.asarray(value).dtype, jnp.complexfloating))
        )
    return False


def is_schedule(value: Any) -> bool:
    """Whether a hyperparameter's value is a schedule (a function of the step count)."""
    return callable(value) and not isinstance(value, type)


def check(api: str, name: str, value: Any, spec: Spec) -> Any:
    """A declared hyperparameter's value as a transform keeps it: a float or a schedule."""
    if value is None and spec.optional:
        return None
    if is_schedule(value):
        return value
    return validate(api, name, value, spec.rule)


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
    """

    name: str
    field: str
    rule: Range
    decay: bool
    scheduled: bool
    base: str = ""


def _named(entries: tuple[Entry, ...], which: str) -> list[str]:
    return [e.name for e in entries if getattr(e, which)]


@jax.tree_util.register_pytree_with_keys_class
class HyperParams:
    """The hyperparameters of one transform, as its state holds them.

    Its leaves are the values in force, float32 scalars keyed by public name, in
    declaration order; then, where there are any, the decays' rounding residuals
    (``.residual[name]``), the schedules' scales (``.scale[name]``) and the schedules' step
    count (``.count``). The static part (an `Entry` per hyperparameter) carries names,
    rules and encodings.

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

    __slots__ = ("count", "entries", "in_force", "residuals", "scales")

    def __init__(
        self,
        entries: tuple[Entry, ...],
        values: tuple[Any, ...],
        residuals: tuple[Any, ...] = (),
        scales: tuple[Any, ...] = (),
        count: Any = None,
    ) -> None:
        self.entries = entries
        self.in_force = tuple(values)
        self.residuals = tuple(residuals)
        self.scales = tuple(scales)
        self.count = count

    # -- pytree --
    def tree_flatten_with_keys(self) -> tuple[list[tuple[Any, Any]], Any]:
        key, attr = jax.tree_util.DictKey, jax.tree_util.GetAttrKey
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
        return children, self.entries

    @classmethod
    def tree_unflatten(cls, entries: tuple[Entry, ...], children: list[Any]) -> HyperParams:
        n = len(entries)
        rest = list(children[n:])

        def take(which: str) -> tuple[Any, ...]:
            names = _named(entries, which)
            if not names:
                return ()
            d = rest.pop(0)
            if isinstance(d, Mapping):
                return tuple(d[k] for k in names)
            return tuple(d) if isinstance(d, list | tuple) else (d,) * len(names)

        residuals = take("decay")
        scales = take("scheduled")
        count = rest.pop(0) if scales else None
        return cls(entries, tuple(children[:n]), residuals, scales, count)

    def __eq__(self, other: object) -> bool:
        # As a NamedTuple of its parts: a tree of shardings compares equal to another.
        if not isinstance(other, HyperParams):
            return NotImplemented
        return (self.entries, self.in_force, self.residuals, self.scales, self.count) == (
            other.entries,
            other.in_force,
            other.residuals,
            other.scales,
            other.count,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        items = ", ".join(f"{e.name}={_shown(v)}" for e, v in self.public_items())
        return f"HyperParams({items})"

    def _replace(self, **changes: Any) -> HyperParams:
        fields = {
            "entries": self.entries,
            "values": self.in_force,
            "residuals": self.residuals,
            "scales": self.scales,
            "count": self.count,
        }
        fields.update(changes)
        return HyperParams(**fields)

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

    # -- writing, by public name --
    def replaced(self, i: int, new: Any, api: str, shown_name: str) -> HyperParams:
        """A copy with hyperparameter ``i`` set to ``new`` (the rule of `set_hyperparams`)."""
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
    bad = [v for v in values if not (math.isfinite(v) and entry.rule.check(float(v)))]
    if bad or (values.size and np.max(np.abs(values)) > _FLOAT32_MAX):
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
        entries.append(Entry(name, field_name, spec.rule, spec.decay, scheduled))
        if scheduled:
            # The value in force before the first step is the schedule's at step 0.
            value = jnp.asarray(value(jnp.zeros([], jnp.int32)), _DTYPE)
            scales.append(jnp.ones([], _DTYPE))
        v, r = _split(spec.decay, value)
        values.append(v)
        if spec.decay:
            residuals.append(r)
    for name, value in extra:
        entries.append(Entry(name, name, FINITE, False, False))
        values.append(_split(False, value)[0])
    count = jnp.zeros([], jnp.int32) if scales else None
    return HyperParams(tuple(entries), tuple(values), tuple(residuals), tuple(scales), count)


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
    c = complement(stored, name)
    return -jnp.expm1(jnp.asarray(count, c.dtype) * jnp.log1p(-c))


# --- Finding hyperparameters in a state --------------------------------------------------


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
    """

    flat: str
    qualified: str
    node_path: tuple[Any, ...]
    index: int
    entry: Entry
    leaf_path: tuple[Any, ...]
    aux_paths: tuple[tuple[str, tuple[Any, ...]], ...] = ()


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
        for i, e in enumerate(node.entries):
            aux = []
            if e.decay:
                aux.append(("residual", (*node_path, attr("residual"), key(e.name))))
            if e.scheduled:
                aux.append(("scale", (*node_path, attr("scale"), key(e.name))))
                if first:
                    aux.append(("count", (*node_path, attr("count"))))
                    first = False
            raw.append((node_path, i, e, ((*node_path, key(e.name))), tuple(aux)))
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
    node = _get_node(state, path)
    if isinstance(node, HyperParams):
        return node
    return _Injected(_get_node(state, path[:-1]))


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
    key = path if isinstance(_get_node(state, path), HyperParams) else path[:-1]
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
    return _get_node(state, path)


def _get_node(state: Any, path: tuple[Any, ...]) -> Any:
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
        hint = _did_you_mean(name, [f.flat for f in named])
        raise KeyError(
            f"`{api}` got an unknown hyperparameter {name!r}. Received: "
            f"{name}={reprs.short(new)}. This state has: {known}.{hint}"
        )
    return matches[0]


def _did_you_mean(name: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, known, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


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
        out[name_of(f.leaf_path)] = value
        for kind, path in f.aux_paths:
            if kind == "residual":
                out[name_of(path)] = residual
    return out


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
        out[f.flat] = _unwrap(_node(state, f.node_path).in_force[f.index])
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
