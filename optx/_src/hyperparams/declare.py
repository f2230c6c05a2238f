"""Declaring a hyperparameter: `hyperparam`, its range rules, and the checks of its value.

A transform declares each numeric hyperparameter once, as a dataclass field made by
`hyperparam` (its default, its range rule, whether it is a decay rate); `Transform`
validates the value it is given with `check`: a number in range, or a schedule.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import numbers
from collections.abc import Callable, Iterator, Mapping
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
    """A range rule: ``description`` for messages, ``check`` on a finite float.

    ``schedule_check``, where given, is what a schedule's least and greatest values must
    pass instead (see `check_bounds`): ``> 0`` lets a schedule decay to 0, as Keras does.
    ``infinite``: ``+inf`` is accepted too (where it switches a criterion off, as a line
    search's ``curv_rtol=inf`` does).
    """

    description: str
    check: Callable[[float], bool] = dataclasses.field(compare=True)
    schedule_check: Callable[[float], bool] | None = None
    infinite: bool = False

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
POSITIVE = Range("finite and > 0", _positive, _nonneg)
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
    for name, value in (("decay", decay), ("optional", optional)):
        if not isinstance(value, bool | np.bool_):
            raise TypeError(
                f"`optx.hyperparam` needs {name} to be a bool. Received: {name}={value!r}."
            )
    decay, optional = bool(decay), bool(optional)
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

    A traced value (see `is_array`) is returned as it is, once checked to be a real scalar.

    Raises:
      TypeError: ``value`` is not a real number.
      ValueError: ``value`` is outside ``range_rule`` (default `FINITE`), or not finite in
        float32 (the dtype it is held in).
    """
    api = _CALLER.get() or api
    # The rule is the building block's field's; the message names the caller's argument.
    field_name, name = name, shown(name)
    if isinstance(value, Tracer):
        # A value traced where the transform is built (see `is_array`): checked for shape
        # and dtype only; its range is not known until it runs.
        return _traced(api, field_name, value)  # type: ignore[return-value]
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
    if not (math.isfinite(number) or allows(range_rule, number)) or not ok(number):
        raise ValueError(f"`{api}` needs {name} {description}. Received: {name}={value!r}.")
    if math.isfinite(number) and abs(number) > _FLOAT32_MAX:
        raise ValueError(
            f"`{api}` needs {name} {description} in float32 (hyperparameters are float32 "
            f"scalars, at most {_FLOAT32_MAX:.4g} in magnitude). Received: {name}={value!r}."
        )
    return number


def allows(range_rule: Any, number: float) -> bool:
    """Whether a non-finite ``number`` is in ``range_rule`` (``+inf`` where it says so)."""
    return number == math.inf and getattr(range_rule, "infinite", False)


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
    """A declared hyperparameter's value as a transform keeps it: a float or a schedule.

    A schedule that states the range of its values (optx's schedules do, with
    ``bounds()``) is checked against the range rule too; any other function of the step
    count is accepted as it is (its values are known only when it runs).
    """
    if value is None and spec.optional:
        return None
    if is_schedule(value):
        check_bounds(api, name, value, spec.rule)
        return value
    if isinstance(value, Tracer):
        return _traced(api, name, value)
    return validate(api, name, value, spec.rule)


def is_array(value: Any) -> bool:
    """Whether a hyperparameter is given as a JAX array (a traced one included).

    Such a value is the caller's value of the moment: a wrapper that builds the transform
    again at every step with the values it keeps (optax's ``inject_hyperparams`` calls a
    factory so) or a function traced over it (``jax.vmap``). Every ``update`` of the
    transform then uses the value the transform holds.
    """
    return isinstance(value, Tracer | jax.Array)


def _traced(api: str, name: str, value: Tracer) -> Tracer:
    """A traced hyperparameter, checked for what is known: a real scalar (not its range)."""
    api, shown_name = _CALLER.get() or api, shown(name)
    dtype = value.dtype
    if (
        np.shape(value) != ()
        or not jnp.issubdtype(dtype, jnp.number)
        or (jnp.issubdtype(dtype, jnp.complexfloating))
    ):
        raise TypeError(
            f"`{api}` needs {shown_name} to be a real scalar. Received: {shown_name} traced "
            f"with shape {np.shape(value)} and dtype {dtype}."
        )
    return value


def schedule_bounds(schedule: Any) -> tuple[float, float] | None:
    """``(least, greatest)`` value a schedule takes over every step, if it states them.

    optx's schedules state them (`optx.schedules.Schedule.bounds`); for any other
    function of the step count they are unknown (``None``).
    """
    bounds = getattr(schedule, "bounds", None)
    if not callable(bounds) or isinstance(schedule, type):
        return None
    try:
        found = bounds()
    except TypeError:  # a `bounds` attribute of another meaning
        return None
    if found is None:
        return None
    low, high = found
    return float(low), float(high)


def check_bounds(api: str, name: str, schedule: Any, range_rule: Any = None) -> None:
    """Raises `ValueError` if a schedule's stated values leave the range rule.

    The rules are intervals, so the least and the greatest value decide. An infinite
    bound (a schedule built to grow without end, such as an exponential growth) is
    compared as a number: it passes ">= 0" and fails "[0, 1)". For "> 0" a schedule may
    reach 0 (a decay to 0, as Keras's schedules allow); it may not go below.
    """
    description, ok = range_rule or FINITE
    ok = getattr(range_rule, "schedule_check", None) or ok
    if ok is _any:
        return
    bounds = schedule_bounds(schedule)
    if bounds is None:
        return
    for which, bound in zip(("least", "greatest"), bounds, strict=True):
        if math.isnan(bound) or not ok(bound):
            api, name = current(api), shown(name)
            raise ValueError(
                f"`{api}` needs {name} {description} at every step. Received: "
                f"{name}={reprs.short(schedule)}, whose {which} value is {bound!r}."
            )


def first_value(api: str, name: str, schedule: Callable[[Any], Any]) -> jax.Array:
    """A schedule's value at step 0 (what ``init`` keeps in force), checked to be a scalar.

    Raises:
      ValueError: the schedule returns an array of another shape than ``()`` (the value
        would broadcast over the updates, or fail inside JAX with a shape error).
      TypeError: it returns something that is not a number.
    """
    raw = schedule(jnp.zeros([], jnp.int32))
    try:
        value = jnp.asarray(raw, _DTYPE)
    except TypeError:
        raise TypeError(
            f"`{api}` needs the schedule of {name} to return a number. Received: "
            f"{name}={reprs.short(schedule)}, which returned {reprs.short(raw)} at step 0."
        ) from None
    if value.shape != ():
        raise ValueError(
            f"`{api}` needs the schedule of {name} to return a scalar. Received: "
            f"{name}={reprs.short(schedule)}, which returned shape {value.shape} at step 0."
        )
    return value
