"""The transform protocol, the base class of the built-in transforms, and `apply_updates`.

A transform is an immutable value with two methods::

    init(params) -> state
    update(updates, state, params=None, **extra) -> (updates, state)

This is the protocol of optax's ``GradientTransformation``; optax, Flax's ``TrainState`` and
``nnx.Optimizer`` duck-type it, so optx transforms work there unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from optx._src import checks, display, placement, sparse
from optx._src import hyperparams as hp
from optx._src.tree import is_none, path_name

Params = Any
"""A pytree of arrays: the parameters being optimised."""
Updates = Any
"""A pytree of arrays with the structure of the parameters: gradients or updates."""
OptState = Any
"""A pytree of arrays (usually NamedTuples): the state of a transform."""
Schedule = Callable[[jax.Array], jax.Array]
"""A function from the step count (an int32 scalar) to a value."""
ScalarOrSchedule = float | jax.Array | Schedule
"""A hyperparameter: a number (or a JAX scalar) or a schedule of the step count."""


@runtime_checkable
class GradientTransformationLike(Protocol):
    """Anything with optax's ``init`` / ``update`` protocol (optax transforms included).

    Example:
      >>> import optax, optx
      >>> isinstance(optx.adam(1e-3), optx.GradientTransformationLike)
      True
      >>> isinstance(optax.adam(1e-3), optx.GradientTransformationLike)
      True
    """

    def init(self, params: Params) -> OptState:
        """Returns the initial state for ``params``."""
        ...

    def update(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, OptState]:
        """Transforms ``updates`` and returns them with the new state."""
        ...


class EmptyState(NamedTuple):
    """The state of a transform that keeps none."""


class Transform:
    """Base class of optx's built-in transforms.

    Subclasses are frozen dataclasses: equal and hashable by their configuration, holding no
    arrays. Each numeric hyperparameter is a field declared with `optx.hyperparam` (its
    default, range rule and storage); ``__post_init__`` validates it (a number, or a
    schedule: any function of the step count), `init_hyperparams` makes the `HyperParams`
    the state keeps in a field named ``hyperparams``, and before each ``update`` the
    schedules among them are evaluated at their step, so ``update`` reads the values in
    force (``state.hyperparams["factor"]``). Changing them never recompiles. Before that,
    ``update`` refuses a state that another transform's ``init`` made (its hyperparameters
    name their class), and, given ``params``, casts floating updates narrower than their
    parameters up to the parameters' dtypes (float16 gradients of float32 parameters give
    float32 updates, computed in float32).

    Subclasses set ``name`` (the public factory's name, used in errors and ``repr``).

    Example:
      A transform of your own, with a dynamic hyperparameter:

      >>> import dataclasses, typing, jax, jax.numpy as jnp, optx
      >>> class ScaleByFactorState(typing.NamedTuple):
      ...     hyperparams: optx.HyperParams
      >>> @dataclasses.dataclass(frozen=True, repr=False)
      ... class ScaleByFactor(optx.Transform):
      ...     name = "scale_by_factor"
      ...     factor: float = optx.hyperparam(2.0)
      ...
      ...     def init(self, params):
      ...         return ScaleByFactorState(self.init_hyperparams())
      ...
      ...     def update(self, updates, state, params=None, **extra):
      ...         f = state.hyperparams["factor"]
      ...         return jax.tree.map(lambda u: (u * f).astype(u.dtype), updates), state
      >>> tx = ScaleByFactor(3.0)
      >>> tx
      scale_by_factor(factor=3.0)
      >>> state = optx.set_hyperparams(tx.init(None), factor=0.5)
      >>> tx.update({"w": jnp.ones(2)}, state)[0]
      {'w': Array([0.5, 0.5], dtype=float32)}

      The same transform with a schedule:

      >>> tx = ScaleByFactor(lambda count: 1.0 + count)
      >>> state = tx.init(None)
      >>> for _ in range(3):
      ...     updates, state = tx.update({"w": jnp.ones(2)}, state)
      >>> updates, float(optx.get_hyperparams(state)["factor"])
      ({'w': Array([3., 3.], dtype=float32)}, 3.0)
    """

    __slots__ = ()
    name: ClassVar[str] = "transform"
    # Whether `update` computes the same on a few flat buffers as on the per-leaf tree: its
    # maths is elementwise or uses only reductions over all leaves (a global norm), never a
    # leaf's shape, a per-leaf reduction or its path. `optx.flatten` accepts only these, and
    # of a transform that holds others (a chain, a wrapper) it checks them too. Declared by
    # each class: a subclass that does not say so again is not elementwise.
    elementwise: ClassVar[bool] = False
    # Whether `update` takes `optx.RowSparse` leaves (row-sparse gradients). Any other
    # transform given one raises a `TypeError` (see `sparse.reject`) rather than treat its
    # indices and values as two arrays.
    row_sparse: ClassVar[bool] = False

    def init(self, params: Params) -> OptState:
        """Returns the initial state of this transform for ``params``."""
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "elementwise" not in cls.__dict__:
            cls.elementwise = False
        if "update" in cls.__dict__ and cls.__dict__["update"] is not Transform.update:
            cls.update = _wrapped_update(cls.__dict__["update"])  # type: ignore[method-assign]
        if "__post_init__" in cls.__dict__:
            cls.__post_init__ = _flags_checked(cls.__dict__["__post_init__"])  # type: ignore[method-assign]

    def update(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, OptState]:
        """Transforms ``updates``; returns them with the new state."""
        raise NotImplementedError

    def __new__(cls, *args: Any, **kwargs: Any) -> Transform:
        self = super().__new__(cls)
        # The public factory that built it (`adam` for its `scale_by_adam`), for the message
        # of an `update` given another transform's state. Not part of the configuration:
        # equality, hashing and `repr` ignore it. A subclass with `__slots__` goes without.
        with contextlib.suppress(AttributeError):
            object.__setattr__(self, "_built_as", hp.current(cls.name))
        return self

    def __iter__(self) -> Iterator[Callable[..., Any]]:
        # `init, update = optx.adam(1e-3)` works as with optax's NamedTuple transforms.
        return iter((self.init, self.update))

    def __post_init__(self) -> None:
        _check_flags(self)
        names = self.public_names()
        given = []
        for field, spec in hp.specs(type(self)):
            raw = getattr(self, field)
            value = hp.check(self.name, names.get(field, field), raw, spec)
            # A transform holds Python floats or schedules (hashable, no arrays), except a
            # value traced where it is built (`hp.is_array`).
            object.__setattr__(self, field, value)
            if hp.is_array(raw):
                given.append(field)
        if given:
            # Not part of the configuration (equality, hashing and `repr` ignore it): which
            # values every `update` puts in force, as the caller gave them.
            object.__setattr__(self, "_given", frozenset(given))

    def public_names(self) -> dict[str, str]:
        """``{field: name}`` where a hyperparameter goes by another name than its field.

        The name is the one `get_hyperparams` and `set_hyperparams` speak: the argument the
        user passed (`sgd`'s ``momentum`` for `trace`'s ``decay``).
        """
        return {}

    @classmethod
    def hyperparam_fields(cls) -> tuple[str, ...]:
        """The fields this class declares as hyperparameters (with `optx.hyperparam`)."""
        return tuple(name for name, _ in hp.specs(cls))

    def hyperparam_names(self) -> tuple[str, ...]:
        """The names of the hyperparameters this transform keeps in its state.

        As `get_hyperparams` shows them (unqualified); a field whose value is ``None``
        (switched off) or that this configuration does not use is not kept.
        """
        return tuple(e.name for e in hp.create(self).entries)

    def initial(self, field: str) -> Any:
        """The value of hyperparameter ``field`` at step 0, for what ``init`` computes.

        The number, or the schedule's value at step 0 (a float32 array).
        """
        value = getattr(self, field)
        if hp.is_schedule(value):
            name = self.public_names().get(field, field)
            return hp.first_value(f"{self.name}.init", name, value)
        return value

    def unused_hyperparams(self) -> frozenset[str]:
        """Fields of declared hyperparameters that this configuration does not keep.

        For example a smoothing factor of a mode that is off: it is not in the state.
        """
        return frozenset()

    def init_hyperparams(self) -> hp.HyperParams:
        """The `HyperParams` of this transform's state: its declared hyperparameters."""
        return hp.create(self)

    def __repr__(self) -> str:
        args = [f"{name}={_short_repr(value)}" for name, value in display.config_items(self)]
        return f"{self.name}({', '.join(args)})"

    def _repr_html_(self) -> str:
        """The configuration as an HTML table (for notebooks); inner transforms nest.

        A transform holds no state: `optx.summary` shows a state's current values.
        """
        return display.transform_html(self)


def _wrapped_update(update: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps ``update`` with what every transform's update does first.

    It rejects row-sparse leaves unless the transform takes them, refuses a state made by
    another transform (`check_state`), casts updates narrower than their parameters up to
    the parameters' dtypes (`widened`), and puts the scheduled hyperparameters of the step
    in force before the transform's maths. The checks read types and static data only:
    under `jax.jit` they run when tracing, and add no operation to the step.
    """

    @functools.wraps(update)
    def checked_update(
        self: Transform, updates: Updates, state: OptState, *args: Any, **kwargs: Any
    ) -> tuple[Updates, OptState]:
        if not self.row_sparse:
            sparse.reject(self.name, updates)
        check_state(self, state, args[0] if args else kwargs.get("params"))
        h = getattr(state, "hyperparams", None)
        # Only the transform that declared them advances them: a wrapper whose state is
        # its inner transform's (`skip_missing`) passes it on untouched.
        if isinstance(h, hp.HyperParams) and h.scheduled and h.owned_by(type(self)):
            h = h.advance(self)
            state = state._replace(hyperparams=h)
        if getattr(self, "_given", None) and isinstance(h, hp.HyperParams):
            state = state._replace(hyperparams=h.given_by(self))
        params = args[0] if args else kwargs.get("params")
        if params is None or _WIDENED.get():
            return update(self, updates, state, *args, **kwargs)
        # The outermost transform widens; those it calls (a chain's) get its updates.
        updates = widened(updates, params)
        token = _WIDENED.set(True)
        try:
            return update(self, updates, state, *args, **kwargs)
        finally:
            _WIDENED.reset(token)

    return checked_update


# Whether an enclosing transform's `update` has already widened the updates (`widened`).
_WIDENED: contextvars.ContextVar[bool] = contextvars.ContextVar("optx_widened", default=False)


def _flags_checked(post_init: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a subclass's ``__post_init__`` so that its boolean options are checked first."""

    @functools.wraps(post_init)
    def checked(self: Transform) -> None:
        _check_flags(self)
        post_init(self)

    return checked


@functools.cache
def _flag_fields(cls: type) -> tuple[str, ...]:
    # Annotations are strings here (``from __future__ import annotations``).
    return tuple(f.name for f in dataclasses.fields(cls) if f.type in ("bool", bool))


def _check_flags(tx: Transform) -> None:
    """Checks every field annotated ``bool``: ``nesterov="False"`` is refused, not truthy."""
    if not dataclasses.is_dataclass(tx):
        return
    for field in _flag_fields(type(tx)):
        value = getattr(tx, field)
        if type(value) is not bool:
            # The message names the argument the user gave (`public_names`).
            name = tx.public_names().get(field, field) if not isinstance(value, np.bool_) else field
            object.__setattr__(tx, field, checks.flag(tx.name, name, value))


def built_as(tx: Any) -> str:
    """The name ``tx`` was built under: its public factory's (``"adam"``), else its own."""
    return getattr(tx, "_built_as", None) or getattr(tx, "name", None) or type(tx).__name__


def maker(state: OptState) -> tuple[str, type] | None:
    """``(name, class)`` of the first optx transform that made part of ``state``, if any.

    Read from the owner of the first `HyperParams` node in ``state`` (static data).
    """
    for node in find_states(state, hp.HyperParams):
        if node.owner is not None:
            return node.owner.label, node.owner.cls
    return None


def describe(state: OptState) -> str:
    """``state`` for a message: who made it and its type (``a state made by `adam` (...)``)."""
    kind = type(state).__name__
    if isinstance(state, tuple) and not hasattr(state, "_fields"):
        kind = f"a tuple of {len(state)} states"
    found = maker(state)
    if found is None:
        if isinstance(state, EmptyState):
            return "an EmptyState (the state of a transform that keeps none, such as `identity`)"
        return f"a state of type {kind}"
    label, cls = found
    if isinstance(getattr(state, "hyperparams", None), hp.HyperParams):
        of = "" if label == getattr(cls, "name", label) else f" of `{cls.name}`"
        return f"a state made by `{label}` ({kind}{of})"
    if type(state) is tuple:  # a chain's: its first maker names the chain (`adam`)
        return f"a state made by `{label}` ({kind})"
    return f"a {kind} holding a state made by `{label}`"


class StateMismatchError(ValueError):
    """A transform's `update` was given a state that another transform's `init` made."""


def check_state(tx: Transform, state: OptState, params: Params | None = None) -> None:
    """Refuses ``state`` if another transform made it (a `StateMismatchError`).

    A state is ``tx``'s own when it is of the type ``tx``'s ``init`` is annotated to return
    (where that names NamedTuple classes), and its own hyperparameters (its field
    ``hyperparams``) were made by ``tx``'s class with the same hyperparameters, each a
    schedule where ``tx``'s is, or by a class ``tx`` holds (a wrapper whose state is its
    inner transform's). A transform that declares hyperparameters refuses a state without
    them (an `EmptyState`, a chain's tuple, optax's); an earlier release's state (its
    hyperparameters a dict) is taken as it is. Types and static data only: under
    `jax.jit` this runs when tracing, and nothing is added to the step. ``params``, the
    call's third argument, is only read for the message (`swapped_hint`).
    """
    reason = mismatch(tx, state)
    if reason is not None:
        name = built_as(tx)
        kinds = _state_types(type(tx))
        expected = ""
        if kinds:
            names = " or ".join(k.__name__ for k in kinds)
            expected = f" ({'an' if names[0] in 'AEIOU' else 'a'} {names})"
        fix = swapped_hint(state, params) or (
            f" Pass the state returned by `init` of this same transform (`{name}`)."
        )
        raise StateMismatchError(
            f"`{name}.update` needs the state made by its own `init`{expected}. Received: "
            f"{describe(state)}{reason}.{fix}"
        )


SWAPPED = " Did you pass (grads, params, state)? The order is update(updates, state, params)."


def swapped_hint(state: OptState, params: Params | None) -> str:
    """`SWAPPED` if ``update`` seems to have been given the parameters and the state swapped.

    That is when ``params`` looks like a state (it holds what only states hold: a
    `HyperParams`, or a NamedTuple state of optx or optax, `EmptyState` included) and
    ``state`` does not; otherwise ``""``. Types only: it runs when tracing.
    """
    if params is None or not _holds_state(params) or _holds_state(state):
        return ""
    return SWAPPED


def _holds_state(tree: Any) -> bool:
    """Whether ``tree`` holds a node that only optimizer states hold."""
    found = []

    def visit(node: Any) -> bool:
        if isinstance(node, hp.HyperParams) or (
            isinstance(node, tuple)
            and hasattr(node, "_fields")
            and type(node).__module__.split(".")[0] in ("optx", "optax")
        ):
            found.append(node)
            return True
        return False

    jax.tree_util.tree_flatten(tree, is_leaf=visit)
    return bool(found)


def foreign(tx: Transform, state: OptState) -> bool:
    """Whether ``state`` was made by another transform than ``tx`` (see `check_state`)."""
    return mismatch(tx, state) is not None


def mismatch(tx: Transform, state: OptState) -> str | None:
    """``None`` if ``state`` may be ``tx``'s own, else what differs (``""``: its maker)."""
    if state is None:  # no state at all, not another transform's: `update` says what fails
        return None
    kinds = _state_types(type(tx))
    if kinds is not None and not isinstance(state, kinds):
        return ""
    h = getattr(state, "hyperparams", None)
    if not isinstance(h, hp.HyperParams):
        # A transform that declares hyperparameters keeps them in its state's field
        # `hyperparams` (an earlier release's as a dict): a state without one is another's.
        return "" if h is None and _declared(type(tx)) else None
    owner = h.owner
    if owner is None:
        return None
    if owner.cls is type(tx):
        expected = _own_fields(tx)
        declared = _declared(owner.cls)
        got = frozenset((e.field, e.scheduled) for e in h.entries if e.field in declared)
        if expected is None or got == expected:
            return None
        return (
            f", whose hyperparameters are {_listed(got)} where this `{tx.name}` keeps "
            f"{_listed(expected)}"
        )
    if _related(type(tx), owner.cls):
        return None
    held = _held_classes(tx)
    if held is None or any(_related(c, owner.cls) for c in held):
        return None
    return ""


def _listed(fields: frozenset[tuple[str, bool]]) -> str:
    shown = [f"{f} (a schedule)" if scheduled else f for f, scheduled in sorted(fields)]
    return ", ".join(shown) or "none"


@functools.cache
def _state_types(cls: type) -> tuple[type, ...] | None:
    """The NamedTuple classes ``cls.init`` is annotated to return; ``None`` if not that."""
    init = getattr(cls, "init", None)
    try:
        returned = typing.get_type_hints(init).get("return")
    except Exception:  # an annotation that does not resolve here: no claim
        return None
    members = typing.get_args(returned) if isinstance(returned, types.UnionType) else ()
    kinds = members or (returned,)
    if all(isinstance(k, type) and issubclass(k, tuple) and hasattr(k, "_fields") for k in kinds):
        return tuple(kinds)
    return None


def _related(a: type, b: type) -> bool:
    return a is b or issubclass(a, b) or issubclass(b, a)


@functools.cache
def _declared(cls: type) -> frozenset[str]:
    return frozenset(name for name, _ in hp.specs(cls))


def _own_fields(tx: Transform) -> frozenset[tuple[str, bool]] | None:
    """The declared hyperparameters ``tx``'s own state keeps; ``None`` if unknown."""
    try:
        return _own_fields_cached(tx)
    except TypeError:  # unhashable configuration
        return None


@functools.lru_cache(maxsize=4096)
def _own_fields_cached(tx: Transform) -> frozenset[tuple[str, bool]] | None:
    # `hp.create`'s choice, without making arrays (this may run inside a trace).
    try:
        unused = tx.unused_hyperparams()
        return frozenset(
            (f, hp.is_schedule(getattr(tx, f)))
            for f, spec in hp.specs(type(tx))
            if not ((getattr(tx, f) is None and spec.optional) or f in unused)
        )
    except Exception:  # a subclass's own encoding: do not guess
        return None


def _held_classes(tx: Transform) -> frozenset[type] | None:
    """Classes of the optx transforms in ``tx``'s configuration (recursively).

    ``None`` when it holds a transform that is not optx's (optax's): what that holds
    cannot be seen, so any state is possible.
    """
    try:
        return _held_cached(tx)
    except TypeError:  # unhashable configuration
        return _held(tx)


@functools.lru_cache(maxsize=4096)
def _held_cached(tx: Transform) -> frozenset[type] | None:
    return _held(tx)


def _held(tx: Any) -> frozenset[type] | None:
    found: set[type] = set()

    def visit(x: Any, depth: int) -> bool:
        if depth > 64:
            return True
        if isinstance(x, Transform):
            found.add(type(x))
            return all(visit(c, depth + 1) for c in _configuration(x))
        if isinstance(x, GradientTransformationLike):
            return False
        if isinstance(x, tuple | list):
            return all(visit(c, depth + 1) for c in x)
        if isinstance(x, dict):
            return all(visit(c, depth + 1) for c in x.values())
        return True

    if not all(visit(c, 0) for c in _configuration(tx)):
        return None
    return frozenset(found)


def _configuration(tx: Any) -> list[Any]:
    """The values of a transform's fields (of its attributes, if not a dataclass)."""
    if dataclasses.is_dataclass(tx):
        return [getattr(tx, f.name, None) for f in dataclasses.fields(tx)]
    return list(getattr(tx, "__dict__", {}).values())


def widened(updates: Updates, params: Params) -> Updates:
    """``updates`` with each floating leaf narrower than its parameter cast to its dtype.

    float16 gradients of float32 parameters (mixed precision) then give float32 updates,
    computed in float32: `sgd(1e-8)` scaling a float16 gradient would round the update to
    zero, and Adam's float16 cast of its update would round it to float16's subnormals.
    A leaf as wide as its parameter, or wider (float32 updates of bfloat16 parameters,
    which `apply_updates` rounds once, when adding), is left as it is. Where every dtype
    matches this returns ``updates`` itself, with no operation added.
    """
    u_leaves, u_def = jax.tree.flatten(updates, is_leaf=sparse.is_update_leaf)
    p_leaves, p_def = jax.tree.flatten(params, is_leaf=sparse.is_update_leaf)
    if len(u_leaves) != len(p_leaves):
        return updates
    casts = [_widening(u, p) for u, p in zip(u_leaves, p_leaves, strict=True)]
    if not any(casts) or u_def != p_def:
        return updates
    return u_def.unflatten(
        [u if d is None else u.astype(d) for u, d in zip(u_leaves, casts, strict=True)]
    )


def _widening(u: Any, p: Any) -> Any:
    ud, pd = getattr(u, "dtype", None), getattr(p, "dtype", None)
    if ud is None or pd is None or ud == pd or isinstance(u, sparse.RowSparse):
        return None
    return _wider(np.dtype(ud), np.dtype(pd))


@functools.cache
def _wider(ud: np.dtype, pd: np.dtype) -> np.dtype | None:
    """``pd`` if it holds every value of ``ud`` (a wider float of the same kind), else None."""
    for kind in (jnp.floating, jnp.complexfloating):
        if jnp.issubdtype(ud, kind) and jnp.issubdtype(pd, kind):
            return pd if jnp.promote_types(ud, pd) == pd else None
    return None


def _short_repr(value: Any) -> str:
    if isinstance(value, np.dtype):
        return repr(value.name)
    return repr(value)


def transform(cls: type) -> type:
    """Class decorator of the built-in transforms: a frozen dataclass with optx's repr."""
    return dataclasses.dataclass(frozen=True, repr=False, eq=True)(cls)


def safe_increment(count: ArrayLike) -> jax.Array:
    """Adds one to a counter, saturating at its dtype's largest value instead of wrapping.

    Args:
      count: an integer or floating-point counter (a scalar or an array).

    Returns:
      ``count + 1`` in ``count``'s dtype, or ``count`` where it is already the largest
      value of that dtype.

    Raises:
      ValueError: ``count`` is neither an integer nor a floating-point number.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.safe_increment(jnp.int32(2**31 - 1))
      Array(2147483647, dtype=int32)
    """
    count = jnp.asarray(count)
    if jnp.issubdtype(count.dtype, jnp.integer):
        max_value = jnp.iinfo(count.dtype).max
    elif jnp.issubdtype(count.dtype, jnp.floating):
        max_value = jnp.finfo(count.dtype).max
    else:
        raise ValueError(
            f"`optx.safe_increment` needs an integer or floating-point count. "
            f"Received: count of dtype {count.dtype}."
        )
    max_value = jnp.asarray(max_value, count.dtype)
    return jnp.where(count < max_value, count + jnp.ones([], count.dtype), max_value)


def zero_count() -> jax.Array:
    """A fresh int32 step counter."""
    return jnp.zeros([], jnp.int32)


def apply_updates(params: Params, updates: Updates) -> Params:
    """Adds ``updates`` to ``params``, keeping each parameter's dtype.

    A ``None`` update (a parameter without a gradient) leaves its parameter unchanged. A
    row-sparse update (`RowSparse`, from `sgd`, `adagrad` or `lazy_adam` given a row-sparse
    gradient) is added to its rows only: under `jax.jit` with the parameters donated, the
    other rows are neither read nor written.

    Args:
      params: the current parameters.
      updates: updates with the structure of ``params``, as returned by ``update``.

    On several devices each new parameter is brought back to its parameter's sharding
    (under ``jit``: the all-gather a replicated parameter needs after an update from sharded
    ZeRO-1 moments, see `shard_state`), so the parameters keep their shardings step after
    step.

    Returns:
      ``params + updates``, each leaf cast back to its parameter's dtype.

    Raises:
      ValueError: ``updates`` and ``params`` differ in structure, or a leaf's shape (or a
        row-sparse update's dense shape) is not its parameter's shape.
      TypeError: the cast back would change an update's value: a floating-point update of
        an integer parameter (truncated), or a complex update of a real one.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.apply_updates({"w": jnp.ones(2)}, {"w": jnp.array([0.5, -1.0])})
      {'w': Array([1.5, 0. ], dtype=float32)}
    """
    api = "optx.apply_updates"
    # Checked here: a mismatch would otherwise raise inside JAX, or broadcast silently.
    if jax.tree.structure(updates, is_leaf=sparse.is_update_leaf) != jax.tree.structure(
        params, is_leaf=sparse.is_update_leaf
    ):
        checks.same_tree(api, updates, params, "updates", "params", allow_none=True)

    several = jax.device_count() > 1  # asked once, not per leaf

    def add(path: Any, p: Any, u: Any) -> Any:
        if u is None:
            return p
        if isinstance(u, sparse.RowSparse):
            return sparse.add_to(api, path_name(path), p, u)
        try:
            p, u_dtype = jnp.asarray(p), jnp.result_type(u)
        except TypeError:
            bad, what = (p, "params") if not _is_numeric(p) else (u, "updates")
            raise TypeError(
                f"`{api}` needs numeric arrays as leaves. Received: {what}[{path_name(path)!r}] "
                f"of type {type(bad).__name__}."
            ) from None
        if np.shape(u) != p.shape:
            raise ValueError(
                f"`{api}` needs updates with the shapes of params. Received: "
                f"updates[{path_name(path)!r}] of shape {np.shape(u)}, expected {p.shape}."
            )
        if jnp.issubdtype(u_dtype, jnp.complexfloating) and not jnp.issubdtype(
            p.dtype, jnp.complexfloating
        ):
            lost = "drop its imaginary part"
        elif jnp.issubdtype(u_dtype, jnp.inexact) and not jnp.issubdtype(p.dtype, jnp.inexact):
            lost = "truncate it to an integer"
        else:
            lost = None
        if lost:
            raise TypeError(
                f"`{api}` needs updates that the parameter's dtype can hold. Received: "
                f"updates[{path_name(path)!r}] of dtype {u_dtype.name} for a parameter of "
                f"dtype {p.dtype.name}; the cast back would {lost}."
            )
        # Back on the parameter's sharding: with ZeRO-1 state the update comes out of
        # sharded moments, and a replicated parameter must stay replicated. The sum is
        # taken where the update is (sharded), then gathered: one all-gather of the new
        # parameters, no replicated pass over them.
        new = jnp.asarray(p + u).astype(p.dtype)
        return placement.like_param(new, p) if several else new

    return jax.tree_util.tree_map_with_path(add, params, updates, is_leaf=is_none)


def _is_numeric(x: Any) -> bool:
    try:
        jnp.result_type(x)
    except TypeError:
        return False
    return True


def find_states(state: OptState, kind: type | tuple[type, ...]) -> list[Any]:
    """Every sub-state of ``state`` that is an instance of ``kind``, in tree order."""
    found: list[Any] = []

    def visit(node: Any) -> bool:
        if isinstance(node, kind):
            found.append(node)
            return True
        return False

    jax.tree_util.tree_flatten(state, is_leaf=visit)
    return found


def find_one(state: OptState, kind: type, api: str, what: str) -> Any:
    """The one sub-state of ``state`` of type ``kind``; a `ValueError` for none or several.

    ``what`` names the transform that makes such states, for the message.
    """
    found = find_states(state, kind)
    if len(found) != 1:
        raise ValueError(
            f"`{api}` needs a state holding exactly one `{what}` state. "
            f"Received: a state holding {len(found)}."
        )
    return found[0]


@transform
class Identity(Transform):
    """See `identity`."""

    name = "identity"
    elementwise = True
    row_sparse = True

    def init(self, params: Params) -> EmptyState:
        del params
        return EmptyState()

    def update(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, OptState]:
        del params, extra
        return updates, state


def identity() -> Identity:
    """A transform that returns the updates unchanged.

    Returns:
      The identity transform (its state is `EmptyState`).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.identity()
      >>> tx.update({"w": jnp.ones(2)}, tx.init({"w": jnp.ones(2)}))[0]
      {'w': Array([1., 1.], dtype=float32)}
    """
    return Identity()


@transform
class SetToZero(Transform):
    """See `set_to_zero`."""

    name = "set_to_zero"
    elementwise = True

    def init(self, params: Params) -> EmptyState:
        del params
        return EmptyState()

    def update(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, OptState]:
        del params, extra
        checks.array_leaves(f"{self.name}.update", updates)
        return jax.tree.map(
            lambda u: None if u is None else placement.zeros_like(u), updates, is_leaf=is_none
        ), state


def set_to_zero() -> SetToZero:
    """A transform that replaces every update with zeros (freezes parameters).

    Returns:
      The transform (its state is `EmptyState`).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.set_to_zero()
      >>> tx.update({"w": jnp.ones(2)}, tx.init({"w": jnp.ones(2)}))[0]
      {'w': Array([0., 0.], dtype=float32)}
    """
    return SetToZero()


@transform
class Stateless(Transform):
    """See `stateless`."""

    name = "stateless"
    f: Callable[[Updates, Params | None], Updates] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not callable(self.f):
            raise TypeError(
                f"`stateless` needs f to be a callable (updates, params) -> updates. "
                f"Received: f={self.f!r}."
            )

    def init(self, params: Params) -> EmptyState:
        del params
        return EmptyState()

    def update(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, OptState]:
        del extra
        return self.f(updates, params), state


def stateless(f: Callable[[Updates, Params | None], Updates]) -> Stateless:
    """Makes a transform from a function ``f(updates, params) -> updates`` that keeps no state.

    Args:
      f: called with the updates and the parameters (``None`` if not given).

    Returns:
      The transform (its state is `EmptyState`); it compares equal to another built from
      the same function object.

    Raises:
      TypeError: ``f`` is not callable.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.stateless(lambda u, p: jax.tree.map(lambda x: 2 * x, u))
      >>> tx.update({"w": jnp.ones(2)}, tx.init(None))[0]
      {'w': Array([2., 2.], dtype=float32)}
    """
    return Stateless(f)
