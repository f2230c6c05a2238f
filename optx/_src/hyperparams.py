"""Dynamic hyperparameters kept in the optimizer state (DESIGN D2).

Every numeric hyperparameter of a built-in transform lives in its state, in a dict field
named ``hyperparams``, as a float32 scalar. Decay rates ``b`` (``b1``, ``b2``, EMA momenta)
are stored as ``one_minus_<name> = 1 - b``, computed in float64 from the Python value: in
float32, ``0.999`` is not exactly representable and ``1 - float32(0.999)`` is off by 1.3e-5
relative, while ``float32(1 - 0.999)`` is exact to round-off. The public accessors
(`get_hyperparams`, `set_hyperparams`) speak of ``b`` itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from optx._src import reprs

_FIELD = "hyperparams"
_ONE_MINUS = "one_minus_"
_DTYPE = jnp.float32

# Ranges by hyperparameter name; names are conventional across transforms, so one table
# serves the factories and `set_hyperparams`. Unknown names need only be finite.
# A rule is (description for the error message, predicate on a finite float).
NONNEG = _NONNEG = ("finite and >= 0", lambda v: v >= 0)
UNIT_OPEN = _UNIT_OPEN = ("in [0, 1)", lambda v: 0 <= v < 1)
UNIT_CLOSED = _UNIT_CLOSED = ("in [0, 1]", lambda v: 0 <= v <= 1)
POSITIVE = _POSITIVE = ("finite and > 0", lambda v: v > 0)
FINITE = _FINITE = ("finite", lambda v: True)
_RULES: dict[str, tuple[str, Any]] = {
    "learning_rate": _NONNEG,
    "b1": _UNIT_OPEN,
    "b2": _UNIT_OPEN,
    "eps": _NONNEG,
    "eps_root": _NONNEG,
    "weight_decay": _NONNEG,
    "decay": _UNIT_CLOSED,
    "momentum": _UNIT_CLOSED,
    "max_delta": _NONNEG,
    # A zero norm bound would turn an all-zero gradient into 0/0 = NaN.
    "max_norm": _POSITIVE,
    "threshold": _POSITIVE,
    "loss_scale_factor": _POSITIVE,
    "step_size": _FINITE,
    "rho": _UNIT_OPEN,
    "initial_scale": _NONNEG,
    "initial_accumulator_value": _NONNEG,
    "momentum_decay": _NONNEG,
    # Tolerances and floors of reduce_on_plateau.
    "rtol": _UNIT_CLOSED,
    "atol": _NONNEG,
    "min_scale": _NONNEG,
}


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


def rule(name: str) -> tuple[str, Any]:
    """The range rule (description, predicate) of a hyperparameter name."""
    return _RULES.get(name, _FINITE)


def validate(api: str, name: str, value: Any, range_rule: tuple[str, Any] | None = None) -> float:
    """Checks a concrete hyperparameter value and returns it as a Python float.

    ``range_rule`` overrides the rule of ``name`` in the table (`NONNEG`, `UNIT_OPEN`, ...).

    Raises:
      TypeError: ``value`` is not a real number (or is traced: a transform holds no arrays).
      ValueError: ``value`` is non-finite or outside the range of ``name``.
    """
    api = _CALLER.get() or api
    # The rule is the building block's field's; the message names the caller's argument.
    field, name = name, shown(name)
    if isinstance(value, Tracer):
        raise TypeError(
            f"`{api}` needs {name} to be a concrete number when the transform is built "
            f"(transforms hold no arrays). Received: {name}={value!r}. To change it inside a "
            f"traced function, use `optx.set_hyperparams(state, {field}=...)`."
        )
    if isinstance(value, bool) or not _is_real_scalar(value):
        raise TypeError(
            f"`{api}` needs {name} to be a real number. Received: {name}={reprs.short(value)} "
            f"of type {type(value).__name__}."
        )
    number = float(value)
    description, ok = range_rule or rule(field)
    if not math.isfinite(number) or not ok(number):
        raise ValueError(f"`{api}` needs {name} {description}. Received: {name}={value!r}.")
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


def initial(values: Mapping[str, float], decays: tuple[str, ...]) -> dict[str, jax.Array]:
    """The stored form of hyperparameters: float32 scalars, decays as ``1 - value``."""
    stored = {}
    for name, value in values.items():
        if name in decays:
            stored[_ONE_MINUS + name] = jnp.asarray(1.0 - float(value), _DTYPE)
        else:
            stored[name] = jnp.asarray(float(value), _DTYPE)
    return stored


def scheduled(
    value_or_schedule: Any, stored: Mapping[str, jax.Array], name: str, count: jax.Array
) -> jax.Array:
    """A hyperparameter that may be a schedule: ``schedule(count)`` (float32), else stored."""
    if callable(value_or_schedule):
        return jnp.asarray(value_or_schedule(count), jnp.float32)
    return stored[name]


def value(stored: Mapping[str, jax.Array], name: str) -> jax.Array:
    """Reads hyperparameter ``name`` from a state's ``hyperparams`` dict."""
    if _ONE_MINUS + name in stored:
        return 1 - stored[_ONE_MINUS + name]
    return stored[name]


def one_minus(stored: Mapping[str, jax.Array], name: str) -> jax.Array:
    """Reads ``1 - name`` from a state's ``hyperparams`` dict, exactly where it is stored."""
    if _ONE_MINUS + name in stored:
        return stored[_ONE_MINUS + name]
    return 1 - stored[name]


def bias_correction(stored: Mapping[str, jax.Array], name: str, count: jax.Array) -> jax.Array:
    """``1 - b**count`` for the decay ``b`` = ``name``, computed from the stored ``1 - b``.

    ``1 - b**t`` in float32 cancels the digits that storing ``1 - b`` keeps: ``float32(b)``
    is up to 3e-8 off, which is 3e-3 of ``1 - b`` for ``b = 0.99999``. As
    ``-expm1(t * log1p(-(1 - b)))`` it is exact to a few float32 ulps for every ``b``.
    """
    c = one_minus(stored, name)
    return -jnp.expm1(jnp.asarray(count, c.dtype) * jnp.log1p(-c))


def _entries(state: Any) -> list[tuple[tuple[Any, ...], tuple[Any, ...], str, str, Any]]:
    """(leaf path, transform path, stored key, public name, leaf) of each hyperparameter."""
    entries = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        for i in range(len(path) - 1):
            key, sub = path[i], path[i + 1]
            if (
                getattr(key, "name", getattr(key, "key", None)) == _FIELD
                and isinstance(sub, jax.tree_util.DictKey)
                and isinstance(sub.key, str)
            ):
                stored = sub.key
                public = stored.removeprefix(_ONE_MINUS)
                entries.append((tuple(path), tuple(path[:i]), stored, public, leaf))
                break
    # Leaves come in sorted-key order (`one_minus_b1` after `eps`); order each transform's
    # hyperparameters by their public names instead, keeping the transforms' tree order.
    first: dict[tuple[Any, ...], int] = {}
    for i, entry in enumerate(entries):
        first.setdefault(entry[1], i)
    return sorted(entries, key=lambda e: (first[e[1]], e[3]))


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


def _named_entries(state: Any) -> list[tuple[str, str, tuple[Any, ...], str, Any]]:
    """(flat name, qualified name, leaf path, stored key, leaf) of each hyperparameter."""
    entries = _entries(state)
    qualifiers = _qualifiers([e[1] for e in entries])
    counts: dict[str, int] = {}
    for *_, public, _ in entries:
        counts[public] = counts.get(public, 0) + 1
    named = []
    for (path, _, stored, public, leaf), qualifier in zip(entries, qualifiers, strict=True):
        qualified = f"{qualifier}/{public}" if qualifier else public
        flat = public if counts[public] == 1 else qualified
        named.append((flat, qualified, path, stored, leaf))
    return named


def get_hyperparams(state: Any) -> dict[str, jax.Array]:
    """Reads the hyperparameters held in an optimizer state.

    Names are the transforms' argument names (``learning_rate``, ``b1``, ...). A name that
    two transforms of a chain share is qualified by the transform's position or key in the
    chain, e.g. ``"0/max_norm"``.

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
    out = {}
    for flat, _, _, stored, leaf in _named_entries(state):
        out[flat] = 1 - leaf if stored.startswith(_ONE_MINUS) else leaf
    return out


def set_hyperparams(state: Any, values: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
    """Returns ``state`` with some hyperparameters replaced; never recompiles a jitted step.

    Values may be Python numbers (checked against the hyperparameter's range) or arrays,
    traced ones included, so `jax.vmap` can sweep a hyperparameter in one program.

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
    """
    requested = dict(values or {})
    requested.update(kwargs)
    if not requested:
        return state
    named = _named_entries(state)
    replacements: dict[tuple[Any, ...], Any] = {}
    for name, new in requested.items():
        matches = [e for e in named if name in (e[0], e[1])]
        if not matches:
            matches = [e for e in named if e[1].rsplit("/", 1)[-1] == name]
            if len(matches) > 1:
                raise KeyError(
                    f"`set_hyperparams` got {name!r}, which {len(matches)} transforms of this "
                    f"state share. Received: {name}={new!r}. Use one of the qualified names: "
                    f"{', '.join(repr(m[1]) for m in matches)}."
                )
        if not matches:
            known = ", ".join(repr(e[0]) for e in named) or "none"
            raise KeyError(
                f"`set_hyperparams` got an unknown hyperparameter {name!r}. "
                f"Received: {name}={new!r}. This state has: {known}."
            )
        (_, _, path, stored, leaf) = matches[0]
        owner = (
            _owner_type(state, path[: path.index(jax.tree_util.GetAttrKey(_FIELD))])
            if (jax.tree_util.GetAttrKey(_FIELD) in path)
            else None
        )
        replacements[path] = _stored_value(name, stored, new, leaf, owner)
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: replacements.get(tuple(path), leaf), state
    )


# Per-transform ranges, by the type of the state that holds the hyperparameters. Filled by
# `Transform.init` (see base.py), so `set_hyperparams` checks a value as the transform's
# own factory would (SM3's b2 may be 1; Adam's may not).
_STATE_RULES: dict[type, dict[str, tuple[str, Any]]] = {}


def register_state_rules(state_type: type, rules: Mapping[str, tuple[str, Any]]) -> None:
    """Records the range rules of the hyperparameters held by states of ``state_type``."""
    if rules:
        _STATE_RULES.setdefault(state_type, {}).update(rules)


def _owner_type(state: Any, path: tuple[Any, ...]) -> type | None:
    """The type of the node at ``path`` in ``state`` (the holder of a hyperparams dict)."""
    node = state
    for key in path:
        if isinstance(key, jax.tree_util.SequenceKey):
            node = node[key.idx]
        elif isinstance(key, jax.tree_util.DictKey):
            node = node[key.key]
        elif isinstance(key, jax.tree_util.GetAttrKey):
            node = getattr(node, key.name)
        else:
            return None
    return type(node)


def _stored_value(
    name: str, stored: str, new: Any, leaf: jax.Array, owner: type | None = None
) -> jax.Array:
    public = stored.removeprefix(_ONE_MINUS)
    concrete = not isinstance(new, Tracer)
    if concrete and np.shape(new) == ():
        rules = _STATE_RULES.get(owner, {}) if owner else {}
        new = validate("set_hyperparams", public, new, rules.get(public))
    shape = np.shape(new)
    if shape not in ((), np.shape(leaf)):
        raise ValueError(
            f"`set_hyperparams` needs {name} to be a scalar (or of the stored shape "
            f"{np.shape(leaf)}). Received: {name} of shape {shape}."
        )
    if stored.startswith(_ONE_MINUS):
        new = 1.0 - new if isinstance(new, float) else 1 - jnp.asarray(new, _DTYPE)
    return jnp.broadcast_to(jnp.asarray(new, leaf.dtype), np.shape(leaf))
