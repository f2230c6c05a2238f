"""`inject_hyperparams`: any transform factory's numeric arguments held in the state.

optx's own transforms keep their hyperparameters in their state already (any of them a
number or a schedule); this wrapper is for code written against optax, and for factories of
other libraries: it calls the factory again at every step with the values it keeps, as
optax's ``inject_hyperparams`` does, and gives the same numbers.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import checks
from optx._src.base import OptState, Params, Transform, Updates, safe_increment, zero_count
from optx._src.protocol import with_extra_args_support


class InjectStatefulHyperparamsState(NamedTuple):
    """State of `inject_hyperparams`: optax's fields and names.

    Attributes:
      count: the number of updates (saturating int32).
      hyperparams: ``{name: value}`` of the numeric arguments, scheduled ones included (the
        value in force). A constant one can be changed here (or with `set_hyperparams`).
      hyperparams_states: the state of each schedule (`WrappedSchedule` keeps a count).
      inner_state: the state of the transform the factory builds.
    """

    count: jax.Array
    hyperparams: dict[str, Any]
    hyperparams_states: dict[str, Any]
    inner_state: OptState


class InjectHyperparamsState(NamedTuple):
    """The state optax's ``inject_hyperparams`` kept before 0.1.9 (no schedule states).

    Kept under its name for code that refers to it; `inject_hyperparams` returns an
    `InjectStatefulHyperparamsState`.

    Attributes:
      count: the number of updates.
      hyperparams: ``{name: value}`` of the numeric arguments.
      inner_state: the inner transform's state.
    """

    count: jax.Array
    hyperparams: dict[str, Any]
    inner_state: OptState


@runtime_checkable
class StatefulSchedule(Protocol):
    """A schedule with a state of its own, as optax's ``StatefulSchedule``.

    ``init() -> state``; ``update(state, **extra) -> state``; ``__call__(state, **extra)
    -> value``. The ``extra`` keyword arguments are those given to the transform's
    ``update`` (``value=loss``, ...), so a schedule can follow the loss.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> class Halving:  # halves the value at every step
      ...     def init(self):
      ...         return jnp.asarray(1.0)
      ...     def update(self, state, **extra):
      ...         return state / 2
      ...     def __call__(self, state, **extra):
      ...         return state
      >>> isinstance(Halving(), optx.schedules.StatefulSchedule)
      True
      >>> tx = optx.inject_hyperparams(optx.sgd)(learning_rate=Halving())
      >>> state = tx.init({"w": jnp.ones(1)})
      >>> for _ in range(3):
      ...     updates, state = tx.update({"w": jnp.ones(1)}, state)
      >>> updates
      {'w': Array([-0.25], dtype=float32)}
    """

    def init(self) -> Any:
        """The schedule's initial state."""

    def update(self, state: Any, **extra: Any) -> Any:
        """The schedule's next state."""

    def __call__(self, state: Any, **extra: Any) -> Any:
        """The value in force in ``state``."""


class WrappedScheduleState(NamedTuple):
    """State of a `WrappedSchedule`: its step count."""

    count: jax.Array


@dataclasses.dataclass(frozen=True)
class WrappedSchedule:
    """A function of the step count as a `StatefulSchedule` (its state counts the steps).

    Attributes:
      schedule_fn: ``step -> value``.

    Example:
      >>> import optx
      >>> s = optx.WrappedSchedule(optx.linear_schedule(1.0, 0.0, 10))
      >>> state = s.update(s.init())
      >>> float(s(state))
      0.9
    """

    schedule_fn: Callable[[jax.Array], Any]

    def init(self) -> WrappedScheduleState:
        """A count of 0."""
        return WrappedScheduleState(zero_count())

    def update(self, state: WrappedScheduleState, **extra: Any) -> WrappedScheduleState:
        """One more step."""
        del extra
        return WrappedScheduleState(safe_increment(state.count))

    def __call__(self, state: WrappedScheduleState, **extra: Any) -> Any:
        """The schedule's value at the state's count."""
        del extra
        return self.schedule_fn(state.count)


def _widest_float(params: Params | None) -> Any:
    """The widest float dtype among the parameters' leaves (float32 if none is a float)."""
    dtype = None
    for leaf in jax.tree.leaves(params):
        kind = jnp.result_type(leaf)
        if jnp.issubdtype(kind, jnp.floating):
            dtype = kind if dtype is None else jnp.promote_types(dtype, kind)
    return jnp.float32 if dtype is None else dtype


def _float_as(x: Any, dtype: Any) -> Any:
    """``x`` as ``dtype`` if it is a float without a dtype of its own (else unchanged)."""
    if isinstance(x, jax.Array) and not getattr(x, "weak_type", False):
        return x
    kind = x.dtype if hasattr(x, "dtype") else type(x)
    if jax.dtypes.issubdtype(kind, jnp.floating):
        return jnp.asarray(x, dtype=dtype)
    return x


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class InjectHyperparams(Transform):
    """See `inject_hyperparams`."""

    name = "inject_hyperparams"
    inner_factory: Callable[..., Any] = None  # type: ignore[assignment]
    static: tuple[tuple[str, Any], ...] = ()
    numeric: tuple[tuple[str, Any], ...] = ()
    scheduled: tuple[tuple[str, Any], ...] = ()
    hyperparam_dtype: Any = None

    def __post_init__(self) -> None:
        pass

    def _dtype(self, params: Params | None) -> Any:
        if self.hyperparam_dtype is not None:
            return self.hyperparam_dtype
        return _widest_float(params)

    def _inner(self, values: dict[str, Any]) -> Any:
        return with_extra_args_support(self.inner_factory(**dict(self.static), **values))

    def init(self, params: Params) -> InjectStatefulHyperparamsState:
        dtype = self._dtype(params)
        values = {k: jnp.asarray(_float_as(v, dtype)) for k, v in self.numeric}
        states = {k: s.init() for k, s in self.scheduled}
        values.update({k: _float_as(s(states[k]), dtype) for k, s in self.scheduled})
        inner = self._inner(values).init(params)
        return InjectStatefulHyperparamsState(zero_count(), values, states, inner)

    def update(
        self,
        updates: Updates,
        state: InjectStatefulHyperparamsState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, InjectStatefulHyperparamsState]:
        dtype = self._dtype(params)
        values = {k: _float_as(v, dtype) for k, v in state.hyperparams.items()}
        old = state.hyperparams_states
        values.update({k: _float_as(s(old[k], **extra), dtype) for k, s in self.scheduled})
        states = {k: s.update(old[k], **extra) for k, s in self.scheduled}
        updates, inner = self._inner(values).update(updates, state.inner_state, params, **extra)
        new = InjectStatefulHyperparamsState(safe_increment(state.count), values, states, inner)
        return updates, new

    def __repr__(self) -> str:
        factory = getattr(self.inner_factory, "__name__", repr(self.inner_factory))
        args = [f"{k}={v!r}" for k, v in (*self.static, *self.numeric, *self.scheduled)]
        return f"inject_hyperparams({factory})({', '.join(args)})"


def inject_hyperparams(
    inner_factory: Callable[..., Any],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: Any = None,
) -> Callable[..., InjectHyperparams]:
    """Wraps a transform factory so that its numeric arguments are held in the state.

    The wrapped factory takes the same arguments as ``inner_factory``; any numeric one may
    be a schedule (a function of the step count) or a `StatefulSchedule`. Its state is an
    `InjectStatefulHyperparamsState`: ``state.hyperparams`` holds every numeric argument's
    value in force, and a constant one can be changed there (or with `set_hyperparams`)
    without recompiling. Every ``update`` calls ``inner_factory`` again with the values in
    force, so any factory works (optax's too), with optax's numbers.

    optx's own factories need no wrapper: each of their numeric arguments already takes a
    schedule (``optx.adam(schedule, b1=schedule)``) and lives in the state
    (`get_hyperparams`, `set_hyperparams`). This function is for code written against
    optax, and for other libraries' factories.

    Args:
      inner_factory: a function returning a transform.
      static_args: the names of arguments that are not hyperparameters although callable
        (a callable is taken as a schedule otherwise). Booleans are always static.
      hyperparam_dtype: the dtype of the float hyperparameters; default: the widest float
        dtype of the parameters.

    Returns:
      A function with ``inner_factory``'s arguments that returns the wrapped transform.

    Raises:
      ValueError: ``static_args`` names an argument ``inner_factory`` does not take.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.inject_hyperparams(optx.sgd)(learning_rate=0.1)
      >>> state = tx.init({"w": jnp.ones(2)})
      >>> state.hyperparams["learning_rate"] = jnp.asarray(0.01)
      >>> tx.update({"w": jnp.ones(2)}, state)[0]
      {'w': Array([-0.01, -0.01], dtype=float32)}
    """
    static = {static_args} if isinstance(static_args, str) else set(static_args)
    signature = inspect.signature(inner_factory)
    if not static <= set(signature.parameters):
        raise ValueError(
            f"`inject_hyperparams` needs static_args to name arguments of inner_factory "
            f"({', '.join(signature.parameters)}). Received: "
            f"static_args={sorted(static)!r}."
        )

    def wrapped(*args: Any, **kwargs: Any) -> InjectHyperparams:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        fixed, numeric, scheduled = [], [], []
        for name, value in bound.arguments.items():
            if name in static or isinstance(value, bool):
                fixed.append((name, value))
            elif isinstance(value, StatefulSchedule):
                scheduled.append((name, value))
            elif callable(value):
                scheduled.append((name, WrappedSchedule(value)))
            elif isinstance(value, int | float | jax.Array | np.ndarray):
                numeric.append((name, value))
            else:
                fixed.append((name, value))
        return InjectHyperparams(
            inner_factory, tuple(fixed), tuple(numeric), tuple(scheduled), hyperparam_dtype
        )

    wrapped.__name__ = getattr(inner_factory, "__name__", "wrapped")
    wrapped.__doc__ = inner_factory.__doc__
    return wrapped


def inject_stateful_hyperparams(
    inner_factory: Callable[..., Any],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: Any = None,
) -> Callable[..., InjectHyperparams]:
    """Deprecated alias of `inject_hyperparams` (as in optax, which deprecated it in 0.1.9).

    Args:
      inner_factory: a function returning a transform.
      static_args: see `inject_hyperparams`.
      hyperparam_dtype: see `inject_hyperparams`.

    Returns:
      What `inject_hyperparams` returns.

    Example:
      >>> import warnings, optx
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore", DeprecationWarning)
      ...     tx = optx.inject_stateful_hyperparams(optx.sgd)(learning_rate=0.1)
    """
    checks.deprecated(
        "optx.inject_stateful_hyperparams is deprecated (as in optax): use "
        "optx.inject_hyperparams, which takes stateful schedules too."
    )
    return inject_hyperparams(inner_factory, static_args, hyperparam_dtype)
