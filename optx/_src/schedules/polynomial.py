"""Constant, linear and polynomial schedules."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from optx._src.schedules.base import (
    Schedule,
    check_number,
    check_steps,
    hull,
    register,
    set_fields,
)


@register
class ConstantSchedule(Schedule):
    """See `constant_schedule`."""

    class_name = "constant_schedule"
    value_: float = 0.0

    def __post_init__(self) -> None:
        set_fields(self, value_=check_number(self.class_name, "value", self.value_))

    def value(self, count: jax.Array) -> jax.Array:
        return jnp.full(jnp.shape(count), self.value_, jnp.float32)

    def _bounds(self) -> tuple[float, float]:
        return self.value_, self.value_

    def get_config(self) -> dict:
        """A JSON-serialisable description: ``{"class_name": ..., "config": {...}}``."""
        return {"class_name": self.class_name, "config": {"value": self.value_}}

    @classmethod
    def from_config(cls, config: dict) -> ConstantSchedule:
        """Rebuilds the schedule from the ``config`` part of `get_config`."""
        return cls(**{"value_" if k == "value" else k: v for k, v in config.items()})

    def __repr__(self) -> str:
        return f"{self.class_name}(value={self.value_!r})"


def constant_schedule(value: float) -> ConstantSchedule:
    """The same value at every step.

    Args:
      value: the value.

    Returns:
      The schedule.

    Raises:
      TypeError, ValueError: ``value`` is not a finite number.

    Example:
      >>> import optx
      >>> float(optx.schedules.constant_schedule(0.1)(1000))
      0.10000000149011612
    """
    return ConstantSchedule(value)


@register
class PolynomialSchedule(Schedule):
    """See `polynomial_schedule`."""

    class_name = "polynomial_schedule"
    init_value: float = 1.0
    end_value: float = 0.0
    power: float = 1.0
    transition_steps: int = 1
    transition_begin: int = 0

    def __post_init__(self) -> None:
        set_fields(
            self,
            init_value=check_number(self.class_name, "init_value", self.init_value),
            end_value=check_number(self.class_name, "end_value", self.end_value),
            power=_check_power(self.class_name, self.power),
            transition_steps=check_steps(
                self.class_name, "transition_steps", self.transition_steps
            ),
            transition_begin=check_steps(
                self.class_name, "transition_begin", self.transition_begin, minimum=0
            ),
        )

    def value(self, count: jax.Array) -> jax.Array:
        count = jnp.clip(count - self.transition_begin, 0, self.transition_steps)
        # Clipped: under jit XLA computes count * (1 / T), which can pass 1 by an ulp; a
        # negative base would make a fractional power NaN.
        frac = jnp.clip(1 - count / self.transition_steps, 0.0, 1.0)
        return (self.init_value - self.end_value) * frac**self.power + self.end_value

    def _bounds(self) -> tuple[float, float]:
        if self.power == 0:  # frac ** 0 is 1, also at frac = 0
            return self.init_value, self.init_value
        return hull(self.init_value, self.end_value)


def _check_power(api: str, power: object) -> float:
    power = check_number(api, "power", power)
    if power < 0:
        raise ValueError(
            f"`{api}` needs power >= 0 (with a negative power the value is infinite from "
            f"the end of the transition on). Received: power={power!r}."
        )
    return power


def polynomial_schedule(
    init_value: float,
    end_value: float,
    power: float,
    transition_steps: int,
    transition_begin: int = 0,
) -> PolynomialSchedule:
    r"""Goes from ``init_value`` to ``end_value`` along a polynomial, then stays there.

    .. math:: v(t) = (v_0 - v_1)\,(1 - \min(\max(t - b, 0), T) / T)^p + v_1

    Args:
      init_value: :math:`v_0`, the value up to ``transition_begin``.
      end_value: :math:`v_1`, the value from ``transition_begin + transition_steps`` on.
      power: :math:`p \ge 0` (a negative power would make the value infinite at
        :math:`t \ge b + T`, where the base is 0).
      transition_steps: :math:`T > 0`.
      transition_begin: :math:`b \ge 0`, the step at which the transition starts.

    Returns:
      The schedule.

    Raises:
      TypeError, ValueError: a value is not finite, ``power < 0``, or a step count is not
        an int in range (at most ``2**31 - 1``, where step counters stop).

    Example:
      >>> import optx
      >>> s = optx.schedules.polynomial_schedule(1.0, 0.0, power=2, transition_steps=10)
      >>> [round(float(s(t)), 2) for t in (0, 5, 10, 20)]
      [1.0, 0.25, 0.0, 0.0]
    """
    return PolynomialSchedule(init_value, end_value, power, transition_steps, transition_begin)


@register
class LinearSchedule(PolynomialSchedule):
    """See `linear_schedule`."""

    class_name = "linear_schedule"

    def get_config(self) -> dict:
        """A JSON-serialisable description: ``{"class_name": ..., "config": {...}}``."""
        config = super().get_config()
        del config["config"]["power"]
        return config

    @classmethod
    def from_config(cls, config: dict) -> LinearSchedule:
        """Rebuilds the schedule from the ``config`` part of `get_config`."""
        return linear_schedule(**config)

    def __repr__(self) -> str:
        return (
            f"{self.class_name}(init_value={self.init_value!r}, end_value={self.end_value!r}, "
            f"transition_steps={self.transition_steps!r}, "
            f"transition_begin={self.transition_begin!r})"
        )


def linear_schedule(
    init_value: float, end_value: float, transition_steps: int, transition_begin: int = 0
) -> LinearSchedule:
    r"""Goes linearly from ``init_value`` to ``end_value``, then stays there.

    .. math:: v(t) = v_0 + (v_1 - v_0)\,\min(\max(t - b, 0), T) / T

    Args:
      init_value: :math:`v_0`, the value up to ``transition_begin``.
      end_value: :math:`v_1`, the value from ``transition_begin + transition_steps`` on.
      transition_steps: :math:`T > 0`.
      transition_begin: :math:`b \ge 0`.

    Returns:
      The schedule.

    Raises:
      TypeError, ValueError: a value is not finite, or a step count is not an int in range.

    Example:
      >>> import optx
      >>> s = optx.schedules.linear_schedule(0.0, 1.0, transition_steps=4, transition_begin=2)
      >>> [float(s(t)) for t in range(8)]
      [0.0, 0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    """
    return LinearSchedule(init_value, end_value, 1.0, transition_steps, transition_begin)
