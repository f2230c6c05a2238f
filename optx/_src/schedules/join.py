"""Joining schedules end to end, and the base of the schedules built from simpler ones."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from optx._src.schedules.base import (
    Schedule,
    ScheduleLike,
    check_number,
    check_steps,
    register,
    set_fields,
    union,
)
from optx._src.schedules.polynomial import LinearSchedule, constant_schedule


def value_at(schedule: ScheduleLike, count: jax.Array) -> jax.Array:
    """The value of an optx schedule, or of a plain function, at a float32 count."""
    if isinstance(schedule, Schedule):
        return schedule.value(count)
    return jnp.asarray(schedule(count), jnp.float32)


class Composite(Schedule):
    """A schedule whose value is that of another one, built from its own arguments.

    Subclasses validate their arguments in ``__post_init__`` (so errors name their factory),
    then call ``super().__post_init__()``, which builds the inner schedule once with
    `build`. Equality, hashing and ``get_config`` see only the dataclass fields: the
    subclass's arguments.
    """

    def __post_init__(self) -> None:
        set_fields(self, _inner=self.build())

    def build(self) -> Schedule:
        """The schedule this one computes, built from the subclass's fields."""
        raise NotImplementedError

    def value(self, count: jax.Array) -> jax.Array:
        return self._inner.value(count)  # type: ignore[attr-defined]

    def _bounds(self) -> tuple[float, float] | None:
        return self._inner.bounds()  # type: ignore[attr-defined]


def warmup_then(
    init_value: float, peak_value: float, warmup_steps: int, after: Schedule
) -> JoinSchedules:
    """A linear warmup from ``init_value`` to ``peak_value``, then ``after`` (restarted at 0).

    With no warmup steps the first piece is never used; it is a constant so that it needs
    no ``transition_steps >= 1``.
    """
    if warmup_steps > 0:
        warmup: Schedule = LinearSchedule(init_value, peak_value, 1.0, warmup_steps, 0)
    else:
        warmup = constant_schedule(init_value)
    return JoinSchedules((warmup, after), (warmup_steps,))


@register
class JoinSchedules(Schedule):
    """See `join_schedules`."""

    class_name = "join_schedules"
    schedule_fields = ("schedules",)
    schedules: tuple[ScheduleLike, ...]
    boundaries: tuple[int, ...]

    def __post_init__(self) -> None:
        api = self.class_name
        schedules = _sequence(api, "schedules", self.schedules)
        boundaries = _sequence(api, "boundaries", self.boundaries)
        if not schedules:
            raise ValueError(f"`{api}` needs at least one schedule. Received: schedules=[].")
        for i, schedule in enumerate(schedules):
            if not callable(schedule):
                raise TypeError(
                    f"`{api}` needs schedules to be callables step -> value. "
                    f"Received: schedules[{i}]={schedule!r}."
                )
        if len(boundaries) != len(schedules) - 1:
            raise ValueError(
                f"`{api}` needs one boundary fewer than schedules (a boundary between each "
                f"two). Received: {len(schedules)} schedules and boundaries={list(boundaries)!r}."
            )
        boundaries = tuple(
            check_steps(api, f"boundaries[{i}]", b, minimum=0) for i, b in enumerate(boundaries)
        )
        if any(a >= b for a, b in itertools.pairwise(boundaries)):
            raise ValueError(
                f"`{api}` needs strictly increasing boundaries. "
                f"Received: boundaries={list(boundaries)!r}."
            )
        set_fields(self, schedules=schedules, boundaries=boundaries)

    def value(self, count: jax.Array) -> jax.Array:
        out = value_at(self.schedules[0], count)
        for boundary, schedule in zip(self.boundaries, self.schedules[1:], strict=True):
            out = jnp.where(count < boundary, out, value_at(schedule, count - boundary))
        return out

    def _bounds(self) -> tuple[float, float] | None:
        # Each part runs from its own step 0; a first part before a boundary at 0 never runs.
        skip_first = bool(self.boundaries) and self.boundaries[0] == 0
        return union(self.schedules[1:] if skip_first else self.schedules)


def join_schedules(schedules: Sequence[ScheduleLike], boundaries: Sequence[int]) -> JoinSchedules:
    r"""Runs schedules one after the other, each restarted at 0 at its boundary.

    With boundaries :math:`b_1 < \dots < b_{n-1}` (and :math:`b_0 = 0`), the value at step
    :math:`t` with :math:`b_i \le t < b_{i+1}` is :math:`s_i(t - b_i)`; the first schedule
    also serves steps before :math:`b_1`, the last one every step from :math:`b_{n-1}` on.

    Args:
      schedules: :math:`s_0, \dots, s_{n-1}`: optx schedules, or plain functions of a
        float32 step count (a schedule holding plain functions has no ``get_config``).
      boundaries: :math:`b_1, \dots, b_{n-1}`: one int step >= 0 fewer than ``schedules``,
        strictly increasing.

    Returns:
      The schedule.

    Raises:
      TypeError: ``schedules`` or ``boundaries`` is not a list or tuple, a schedule is not
        callable, or a boundary is not an int.
      ValueError: there are no schedules, the numbers of schedules and boundaries do not
        match, or the boundaries are negative or not strictly increasing.

    Example:
      >>> import optx
      >>> s = optx.schedules.join_schedules(
      ...     [optx.schedules.linear_schedule(0.0, 1.0, transition_steps=2),
      ...      optx.schedules.constant_schedule(0.5)], boundaries=[3])
      >>> [float(s(t)) for t in range(5)]
      [0.0, 0.5, 1.0, 0.5, 0.5]
    """
    return JoinSchedules(schedules, boundaries)  # type: ignore[arg-type]


def _sequence(api: str, name: str, value: Any) -> tuple:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"`{api}` needs {name} to be a list or tuple. Received: {name}={value!r}.")
    return tuple(value)


@register
class WarmupConstantSchedule(Composite):
    """See `warmup_constant_schedule`."""

    class_name = "warmup_constant_schedule"
    init_value: float
    peak_value: float
    warmup_steps: int

    def __post_init__(self) -> None:
        api = self.class_name
        if isinstance(self.warmup_steps, numbers.Integral) and self.warmup_steps == 0:
            # optax's answer here is init_value forever, the value this schedule never ends at.
            raise ValueError(
                f"`{api}` needs warmup_steps >= 1. Received: warmup_steps=0. For no warmup, "
                f"use constant_schedule(peak_value)."
            )
        set_fields(
            self,
            init_value=check_number(api, "init_value", self.init_value),
            peak_value=check_number(api, "peak_value", self.peak_value),
            warmup_steps=check_steps(api, "warmup_steps", self.warmup_steps),
        )
        super().__post_init__()

    def build(self) -> Schedule:
        return LinearSchedule(self.init_value, self.peak_value, 1.0, self.warmup_steps, 0)


def warmup_constant_schedule(
    init_value: float, peak_value: float, warmup_steps: int
) -> WarmupConstantSchedule:
    r"""A linear warmup from ``init_value`` to ``peak_value``, then ``peak_value`` for good.

    .. math:: v(t) = v_0 + (v_p - v_0)\,\min(t, W) / W

    The same values as ``linear_schedule(init_value, peak_value, warmup_steps)``.

    Args:
      init_value: :math:`v_0`, the value at step 0.
      peak_value: :math:`v_p`, the value from step :math:`W` on.
      warmup_steps: :math:`W \ge 1`, the warmup's length.

    Returns:
      The schedule.

    Raises:
      TypeError: a value is not a real number, or ``warmup_steps`` is not an int.
      ValueError: a value is not finite, or ``warmup_steps < 1`` (optax returns
        ``init_value`` at every step for ``warmup_steps=0``).

    Example:
      >>> import optx
      >>> s = optx.schedules.warmup_constant_schedule(0.0, 1.0, warmup_steps=4)
      >>> [float(s(t)) for t in range(6)]
      [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    """
    return WarmupConstantSchedule(init_value, peak_value, warmup_steps)
