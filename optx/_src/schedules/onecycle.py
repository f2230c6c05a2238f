"""The one-cycle policies: up to a peak and back down, along lines or half cosines."""

from __future__ import annotations

import itertools
from typing import Any

from optx._src.schedules.base import (
    Schedule,
    check_number,
    check_positive,
    check_steps,
    register,
    set_fields,
)
from optx._src.schedules.join import Composite
from optx._src.schedules.piecewise import PiecewiseInterpolateSchedule


def _onecycle_steps(api: str, transition_steps: Any, **fractions: Any) -> dict[str, Any]:
    """Checks the arguments that place a one-cycle schedule's phases; returns them normalised."""
    steps = check_steps(api, "transition_steps", transition_steps)
    checked = {}
    for name, fraction in fractions.items():
        fraction = check_number(api, name, fraction)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"`{api}` needs 0 <= {name} <= 1. Received: {name}={fraction!r}.")
        checked[name] = fraction
    bounds = [int(fraction * steps) for fraction in checked.values()] + [steps]
    if any(a >= b for a, b in itertools.pairwise(bounds)):
        places = " < ".join(f"int({name} * transition_steps)" for name in checked)
        given = ", ".join(f"{name}={value!r}" for name, value in checked.items())
        raise ValueError(
            f"`{api}` needs {places} < transition_steps, so that each phase lasts a step at "
            f"least. Received: transition_steps={steps!r}, {given}: boundaries {bounds}."
        )
    return {"transition_steps": steps, **checked}


@register
class LinearOnecycleSchedule(Composite):
    """See `linear_onecycle_schedule`."""

    class_name = "linear_onecycle_schedule"
    transition_steps: int
    peak_value: float
    pct_start: float = 0.3
    pct_final: float = 0.85
    div_factor: float = 25.0
    final_div_factor: float = 1e4

    def __post_init__(self) -> None:
        api = self.class_name
        set_fields(
            self,
            peak_value=check_number(api, "peak_value", self.peak_value),
            div_factor=check_positive(api, "div_factor", self.div_factor),
            final_div_factor=check_positive(api, "final_div_factor", self.final_div_factor),
            **_onecycle_steps(
                api, self.transition_steps, pct_start=self.pct_start, pct_final=self.pct_final
            ),
        )
        super().__post_init__()

    def build(self) -> Schedule:
        steps = self.transition_steps
        return PiecewiseInterpolateSchedule(
            "linear",
            self.peak_value / self.div_factor,
            (
                (int(self.pct_start * steps), self.div_factor),
                (int(self.pct_final * steps), 1.0 / self.div_factor),
                (steps, 1.0 / self.final_div_factor),
            ),
        )


def linear_onecycle_schedule(
    transition_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    pct_final: float = 0.85,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> LinearOnecycleSchedule:
    r"""The one-cycle policy in three linear phases: up to the peak, back down, then lower.

    With :math:`T` = ``transition_steps``, :math:`v_p` = ``peak_value``, :math:`d` =
    ``div_factor`` and :math:`f` = ``final_div_factor``, the value goes linearly from
    :math:`v_p / d` at step 0 to :math:`v_p` at step ``int(pct_start * T)``, back to
    :math:`v_p / d` at step ``int(pct_final * T)``, then to :math:`v_p / (d f)` at step
    :math:`T`, and stays there. It is `piecewise_interpolate_schedule` with ``"linear"``,
    as in optax.

    Args:
      transition_steps: :math:`T \ge 1`, the cycle's length.
      peak_value: :math:`v_p`, the largest value.
      pct_start: the fraction of the cycle spent going up.
      pct_final: the fraction of the cycle at whose end the value is back at :math:`v_p / d`.
      div_factor: :math:`d > 0`; the value starts at :math:`v_p / d`.
      final_div_factor: :math:`f > 0`; the value ends at :math:`v_p / (d f)`.

    Returns:
      The schedule.

    Raises:
      TypeError: a value is not a real number, or ``transition_steps`` is not an int.
      ValueError: a value is not finite, ``transition_steps < 1``, a fraction is outside
        [0, 1], a factor is not > 0, or the phases' steps ``int(pct_start * T) <
        int(pct_final * T) < T`` are not increasing (optax silently merges phases then).

    Example:
      >>> import optx
      >>> s = optx.schedules.linear_onecycle_schedule(10, peak_value=1.0, pct_start=0.2,
      ...     pct_final=0.6, div_factor=4.0, final_div_factor=10.0)
      >>> [round(float(s(t)), 3) for t in (0, 1, 2, 4, 6, 8, 10, 12)]
      [0.25, 0.625, 1.0, 0.625, 0.25, 0.138, 0.025, 0.025]

    References:
      Smith, Topin, "Super-Convergence: Very Fast Training of Neural Networks Using Large
      Learning Rates", arXiv:1708.07120, 2017.
    """
    return LinearOnecycleSchedule(
        transition_steps, peak_value, pct_start, pct_final, div_factor, final_div_factor
    )


@register
class CosineOnecycleSchedule(Composite):
    """See `cosine_onecycle_schedule`."""

    class_name = "cosine_onecycle_schedule"
    transition_steps: int
    peak_value: float
    pct_start: float = 0.3
    div_factor: float = 25.0
    final_div_factor: float = 1e4

    def __post_init__(self) -> None:
        api = self.class_name
        set_fields(
            self,
            peak_value=check_number(api, "peak_value", self.peak_value),
            div_factor=check_positive(api, "div_factor", self.div_factor),
            final_div_factor=check_positive(api, "final_div_factor", self.final_div_factor),
            **_onecycle_steps(api, self.transition_steps, pct_start=self.pct_start),
        )
        super().__post_init__()

    def build(self) -> Schedule:
        steps = self.transition_steps
        return PiecewiseInterpolateSchedule(
            "cosine",
            self.peak_value / self.div_factor,
            (
                (int(self.pct_start * steps), self.div_factor),
                (steps, 1.0 / (self.div_factor * self.final_div_factor)),
            ),
        )


def cosine_onecycle_schedule(
    transition_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> CosineOnecycleSchedule:
    r"""The one-cycle policy along half cosines: up to the peak, then down to a tiny value.

    With :math:`T` = ``transition_steps``, :math:`v_p` = ``peak_value``, :math:`d` =
    ``div_factor`` and :math:`f` = ``final_div_factor``, the value goes from
    :math:`v_p / d` at step 0 to :math:`v_p` at step ``int(pct_start * T)``, then to
    :math:`v_p / (d f)` at step :math:`T`, and stays there; each phase follows half a
    cosine. It is `piecewise_interpolate_schedule` with ``"cosine"``, as in optax.

    Args:
      transition_steps: :math:`T \ge 1`, the cycle's length.
      peak_value: :math:`v_p`, the largest value.
      pct_start: the fraction of the cycle spent going up, in [0, 1).
      div_factor: :math:`d > 0`; the value starts at :math:`v_p / d`.
      final_div_factor: :math:`f > 0`; the value ends at :math:`v_p / (d f)`.

    Returns:
      The schedule.

    Raises:
      TypeError: a value is not a real number, or ``transition_steps`` is not an int.
      ValueError: a value is not finite, ``transition_steps < 1``, ``pct_start`` is outside
        [0, 1] or leaves no step for the decay (``int(pct_start * T) < T`` is needed), or a
        factor is not > 0.

    Example:
      >>> import optx
      >>> s = optx.schedules.cosine_onecycle_schedule(10, peak_value=1.0, pct_start=0.2,
      ...     div_factor=4.0, final_div_factor=10.0)
      >>> [round(float(s(t)), 3) for t in (0, 1, 2, 6, 10, 12)]
      [0.25, 0.625, 1.0, 0.512, 0.025, 0.025]

    References:
      Smith, Topin, "Super-Convergence: Very Fast Training of Neural Networks Using Large
      Learning Rates", arXiv:1708.07120, 2017.
    """
    return CosineOnecycleSchedule(
        transition_steps, peak_value, pct_start, div_factor, final_div_factor
    )
