"""Exponential decay, and exponential decay after a linear warmup."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from optx._src.checks import INT32_MAX, flag
from optx._src.schedules.base import (
    Schedule,
    check_number,
    check_positive,
    check_steps,
    hull,
    register,
    set_fields,
)
from optx._src.schedules.join import Composite, warmup_then


def _check_decay(api: str, s: Any) -> dict[str, Any]:
    """The normalised arguments of the exponential decay, checked in the name of ``api``."""
    staircase = flag(api, "staircase", s.staircase)
    end_value = s.end_value
    if end_value is not None:
        end_value = check_number(api, "end_value", end_value)
    return dict(
        transition_steps=check_steps(api, "transition_steps", s.transition_steps),
        # optax returns a constant for decay_rate == 0; a negative rate gives NaN.
        decay_rate=check_positive(api, "decay_rate", s.decay_rate),
        transition_begin=check_steps(api, "transition_begin", s.transition_begin, minimum=0),
        end_value=end_value,
        staircase=staircase,
    )


@register
class ExponentialDecay(Schedule):
    """See `exponential_decay`."""

    class_name = "exponential_decay"
    init_value: float
    transition_steps: int
    decay_rate: float
    transition_begin: int = 0
    staircase: bool = False
    end_value: float | None = None

    def __post_init__(self) -> None:
        api = self.class_name
        init_value = check_number(api, "init_value", self.init_value)
        set_fields(self, init_value=init_value, **_check_decay(api, self))

    def value(self, count: jax.Array) -> jax.Array:
        # The operations and their order are optax's, so the float32 values agree exactly.
        elapsed = count - self.transition_begin
        p = elapsed / self.transition_steps
        if self.staircase:
            p = jnp.floor(p)
        decayed = jnp.where(
            elapsed <= 0, self.init_value, self.init_value * jnp.power(self.decay_rate, p)
        )
        if self.end_value is None:
            return decayed
        # The end value is a floor for a decay, a ceiling for a growth (decay_rate > 1).
        clip = jnp.maximum if self.decay_rate < 1.0 else jnp.minimum
        return clip(decayed, self.end_value)

    def _bounds(self) -> tuple[float, float]:
        v0, r = self.init_value, self.decay_rate
        if r == 1.0 or v0 == 0.0:
            decayed = (v0, v0)
        elif r < 1.0:
            # The value at the last step an int32 counter reaches, rounded as float32 holds it.
            p = (INT32_MAX - self.transition_begin) / self.transition_steps
            last = float(np.float32(v0 * r ** (math.floor(p) if self.staircase else p)))
            decayed = hull(v0, last)
        else:
            decayed = hull(v0, math.copysign(math.inf, v0))
        if self.end_value is None:
            return decayed
        clip = max if r < 1.0 else min
        return clip(decayed[0], self.end_value), clip(decayed[1], self.end_value)


def exponential_decay(
    init_value: float,
    transition_steps: int,
    decay_rate: float,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: float | None = None,
) -> ExponentialDecay:
    r"""Multiplies ``init_value`` by ``decay_rate`` every ``transition_steps`` steps.

    .. math::

       v(t) = v_0\, r^{\,p}, \qquad p = \max(t - b, 0) / T
       \quad (\lfloor \cdot \rfloor \text{ with } \texttt{staircase})

    then clipped to ``end_value``: from below when :math:`r < 1`, from above when
    :math:`r \ge 1`. With :math:`r > 1` and no ``end_value`` the value grows without bound
    (and overflows float32 to ``inf`` after enough steps).

    Args:
      init_value: :math:`v_0`, the value up to step :math:`b`.
      transition_steps: :math:`T \ge 1`, the steps over which the value is multiplied by
        :math:`r` once.
      decay_rate: :math:`r > 0`.
      transition_begin: :math:`b \ge 0`, the step at which the decay starts.
      staircase: if true, the value drops only every :math:`T` steps, in jumps.
      end_value: the bound the value stops at, or ``None`` for none.

    Returns:
      The schedule.

    Raises:
      TypeError: a value is not a real number, a step count is not an int, or
        ``staircase`` is not a bool.
      ValueError: a value is not finite, ``transition_steps < 1``, ``transition_begin <
        0``, or ``decay_rate <= 0`` (optax returns ``init_value`` at every step for
        ``transition_steps <= 0`` or ``decay_rate == 0``).

    Example:
      >>> import optx
      >>> s = optx.schedules.exponential_decay(1.0, transition_steps=2, decay_rate=0.5)
      >>> [round(float(s(t)), 3) for t in range(5)]
      [1.0, 0.707, 0.5, 0.354, 0.25]
      >>> s = optx.schedules.exponential_decay(1.0, 2, 0.5, staircase=True, end_value=0.3)
      >>> [round(float(s(t)), 3) for t in range(5)]
      [1.0, 1.0, 0.5, 0.5, 0.3]
    """
    return ExponentialDecay(
        init_value, transition_steps, decay_rate, transition_begin, staircase, end_value
    )


@register
class WarmupExponentialDecaySchedule(Composite):
    """See `warmup_exponential_decay_schedule`."""

    class_name = "warmup_exponential_decay_schedule"
    init_value: float
    peak_value: float
    warmup_steps: int
    transition_steps: int
    decay_rate: float
    transition_begin: int = 0
    staircase: bool = False
    end_value: float | None = None

    def __post_init__(self) -> None:
        api = self.class_name
        set_fields(
            self,
            init_value=check_number(api, "init_value", self.init_value),
            peak_value=check_number(api, "peak_value", self.peak_value),
            warmup_steps=check_steps(api, "warmup_steps", self.warmup_steps, minimum=0),
            **_check_decay(api, self),
        )
        super().__post_init__()

    def build(self) -> Schedule:
        decay = ExponentialDecay(
            self.peak_value,
            self.transition_steps,
            self.decay_rate,
            self.transition_begin,
            self.staircase,
            self.end_value,
        )
        return warmup_then(self.init_value, self.peak_value, self.warmup_steps, decay)


def warmup_exponential_decay_schedule(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    transition_steps: int,
    decay_rate: float,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: float | None = None,
) -> WarmupExponentialDecaySchedule:
    r"""A linear warmup to ``peak_value``, then `exponential_decay` from ``peak_value``.

    With :math:`W` = ``warmup_steps``:

    .. math::

       v(t) = \begin{cases}
         v_0 + (v_p - v_0)\, t / W & t < W \\
         \text{exponential\_decay}(v_p, T, r, b, \text{staircase}, \text{end\_value})(t - W)
           & t \ge W
       \end{cases}

    It is `join_schedules` of a `linear_schedule` and an `exponential_decay`, as in optax:
    ``transition_begin`` counts from the end of the warmup.

    Args:
      init_value: :math:`v_0`, the value at step 0.
      peak_value: :math:`v_p`, the value at step :math:`W`.
      warmup_steps: :math:`W \ge 0`, the warmup's length (0: start at the peak).
      transition_steps: :math:`T \ge 1`, see `exponential_decay`.
      decay_rate: :math:`r > 0`.
      transition_begin: :math:`b \ge 0`, steps after the warmup before the decay starts.
      staircase: if true, the value drops only every :math:`T` steps, in jumps.
      end_value: the bound the value stops at, or ``None`` for none.

    Returns:
      The schedule.

    Raises:
      TypeError: a value is not a real number, a step count is not an int, or
        ``staircase`` is not a bool.
      ValueError: a value is not finite, a step count is out of range, or ``decay_rate <=
        0``.

    Example:
      >>> import optx
      >>> s = optx.schedules.warmup_exponential_decay_schedule(
      ...     0.0, peak_value=1.0, warmup_steps=2, transition_steps=1, decay_rate=0.5)
      >>> [float(s(t)) for t in range(6)]
      [0.0, 0.5, 1.0, 0.5, 0.25, 0.125]
    """
    return WarmupExponentialDecaySchedule(
        init_value,
        peak_value,
        warmup_steps,
        transition_steps,
        decay_rate,
        transition_begin,
        staircase,
        end_value,
    )
