"""The transform protocol, the base class of the built-in transforms, and `apply_updates`.

A transform is an immutable value with two methods::

    init(params) -> state
    update(updates, state, params=None, **extra) -> (updates, state)

This is the protocol of optax's ``GradientTransformation``; optax, Flax's ``TrainState`` and
``nnx.Optimizer`` duck-type it, so optx transforms work there unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import checks, display, sparse
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
    force (``state.hyperparams["factor"]``). Changing them never recompiles.

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

    def update(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, OptState]:
        """Transforms ``updates``; returns them with the new state."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[Callable[..., Any]]:
        # `init, update = optx.adam(1e-3)` works as with optax's NamedTuple transforms.
        return iter((self.init, self.update))

    def __post_init__(self) -> None:
        names = self.public_names()
        for field, spec in hp.specs(type(self)):
            value = hp.check(self.name, names.get(field, field), getattr(self, field), spec)
            # A transform holds Python floats or schedules only (hashable, no arrays).
            object.__setattr__(self, field, value)

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
            return jnp.asarray(value(jnp.zeros([], jnp.int32)), jnp.float32)
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

    It rejects row-sparse leaves unless the transform takes them, and puts the scheduled
    hyperparameters of the step in force before the transform's maths.
    """

    @functools.wraps(update)
    def checked_update(
        self: Transform, updates: Updates, state: OptState, *args: Any, **kwargs: Any
    ) -> tuple[Updates, OptState]:
        if not self.row_sparse:
            sparse.reject(self.name, updates)
        h = getattr(state, "hyperparams", None)
        # Only the transform that declared them advances them: a wrapper whose state is
        # its inner transform's (`skip_missing`) passes it on untouched.
        if isinstance(h, hp.HyperParams) and h.scheduled and h.owned_by(type(self)):
            state = state._replace(hyperparams=h.advance(self))
        return update(self, updates, state, *args, **kwargs)

    return checked_update


def _short_repr(value: Any) -> str:
    if isinstance(value, np.dtype):
        return repr(value.name)
    return repr(value)


def transform(cls: type) -> type:
    """Class decorator of the built-in transforms: a frozen dataclass with optx's repr."""
    return dataclasses.dataclass(frozen=True, repr=False, eq=True)(cls)


def safe_increment(count: jax.Array) -> jax.Array:
    """Adds one to an integer counter, saturating at its dtype's maximum."""
    count = jnp.asarray(count)
    max_value = jnp.iinfo(count.dtype).max
    return jnp.where(count < max_value, count + 1, max_value).astype(count.dtype)


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
        return jnp.asarray(p + u).astype(p.dtype)

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
            lambda u: None if u is None else jnp.zeros_like(u), updates, is_leaf=is_none
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
    fn: Callable[[Updates, Params | None], Updates] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(
                f"`stateless` needs fn to be a callable (updates, params) -> updates. "
                f"Received: fn={self.fn!r}."
            )

    def init(self, params: Params) -> EmptyState:
        del params
        return EmptyState()

    def update(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, OptState]:
        del extra
        return self.fn(updates, params), state


def stateless(fn: Callable[[Updates, Params | None], Updates]) -> Stateless:
    """Makes a transform from a function ``fn(updates, params) -> updates`` that keeps no state.

    Args:
      fn: called with the updates and the parameters (``None`` if not given).

    Returns:
      The transform (its state is `EmptyState`); it compares equal to another built from
      the same function object.

    Raises:
      TypeError: ``fn`` is not callable.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.stateless(lambda u, p: jax.tree.map(lambda x: 2 * x, u))
      >>> tx.update({"w": jnp.ones(2)}, tx.init(None))[0]
      {'w': Array([2., 2.], dtype=float32)}
    """
    return Stateless(fn)
