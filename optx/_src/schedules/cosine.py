"""Cosine decay, with a linear warmup, and with warm restarts (SGDR)."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from optx._src.checks import COUNTER_LIMIT, INT32_MAX
from optx._src.schedules.base import (
    Schedule,
    check_nonnegative,
    check_number,
    check_steps,
    hull,
    register,
    set_fields,
)
from optx._src.schedules.join import Composite, JoinSchedules, warmup_then


@register
class CosineDecaySchedule(Schedule):
    """See `cosine_decay_schedule`."""

    class_name = "cosine_decay_schedule"
    init_value: float
    decay_steps: int
    alpha: float = 0.0
    exponent: float = 1.0

    def __post_init__(self) -> None:
        api = self.class_name
        set_fields(
            self,
            init_value=check_number(api, "init_value", self.init_value),
            decay_steps=check_steps(api, "decay_steps", self.decay_steps),
            alpha=check_number(api, "alpha", self.alpha),
            exponent=check_nonnegative(api, "exponent", self.exponent),
        )

    def value(self, count: jax.Array) -> jax.Array:
        # The operations and their order are optax's, so the float32 values agree exactly.
        count = jnp.minimum(count, float(self.decay_steps))
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * count / float(self.decay_steps)))
        decayed = (1 - self.alpha) * cosine**self.exponent + self.alpha
        return self.init_value * decayed

    def _bounds(self) -> tuple[float, float]:
        if self.exponent == 0:  # cosine ** 0 is 1, also where the cosine is 0
            return self.init_value, self.init_value
        return hull(self.init_value, self.init_value * self.alpha)


def cosine_decay_schedule(
    init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
) -> CosineDecaySchedule:
    r"""Decays ``init_value`` along half a cosine over ``decay_steps``, then stays there.

    .. math::

       v(t) = v_0 \left((1 - \alpha)
         \left[\tfrac12 \left(1 + \cos \frac{\pi \min(t, T)}{T}\right)\right]^p + \alpha\right)

    so :math:`v(0) = v_0` and :math:`v(t) = \alpha v_0` from :math:`t = T` on.

    Args:
      init_value: :math:`v_0`, the value at step 0.
      decay_steps: :math:`T \ge 1`, the decay's length.
      alpha: :math:`\alpha`, the final value as a fraction of ``init_value``.
      exponent: :math:`p \ge 0`, applied to the cosine factor (1: the plain cosine).

    Returns:
      The schedule.

    Raises:
      TypeError: a value is not a real number, or ``decay_steps`` is not an int.
      ValueError: a value is not finite, ``decay_steps < 1``, or ``exponent < 0`` (the
        value at step :math:`T` would be infinite).

    Example:
      >>> import optx
      >>> s = optx.schedules.cosine_decay_schedule(1.0, decay_steps=4, alpha=0.1)
      >>> [round(float(s(t)), 3) for t in range(6)]
      [1.0, 0.868, 0.55, 0.232, 0.1, 0.1]

    References:
      Loshchilov, Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts", ICLR 2017.
    """
    return CosineDecaySchedule(init_value, decay_steps, alpha, exponent)


@register
class WarmupCosineDecaySchedule(Composite):
    """See `warmup_cosine_decay_schedule`."""

    class_name = "warmup_cosine_decay_schedule"
    init_value: float
    peak_value: float
    warmup_steps: int
    decay_steps: int
    end_value: float = 0.0
    exponent: float = 1.0

    def __post_init__(self) -> None:
        api = self.class_name
        set_fields(
            self,
            init_value=check_number(api, "init_value", self.init_value),
            peak_value=check_number(api, "peak_value", self.peak_value),
            warmup_steps=check_steps(api, "warmup_steps", self.warmup_steps, minimum=0),
            decay_steps=check_steps(api, "decay_steps", self.decay_steps),
            end_value=check_number(api, "end_value", self.end_value),
            exponent=check_nonnegative(api, "exponent", self.exponent),
        )
        if self.decay_steps <= self.warmup_steps:
            raise ValueError(
                f"`{api}` needs decay_steps > warmup_steps: decay_steps is the whole "
                f"schedule's length, warmup included. Received: decay_steps="
                f"{self.decay_steps!r}, warmup_steps={self.warmup_steps!r}."
            )
        super().__post_init__()

    def build(self) -> Schedule:
        alpha = 0.0 if self.peak_value == 0.0 else self.end_value / self.peak_value
        decay = CosineDecaySchedule(
            self.peak_value, self.decay_steps - self.warmup_steps, alpha, self.exponent
        )
        return warmup_then(self.init_value, self.peak_value, self.warmup_steps, decay)


def warmup_cosine_decay_schedule(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    decay_steps: int,
    end_value: float = 0.0,
    exponent: float = 1.0,
) -> WarmupCosineDecaySchedule:
    r"""A linear warmup to ``peak_value``, then a cosine decay to ``end_value``.

    With :math:`W` = ``warmup_steps`` and :math:`T` = ``decay_steps`` (the whole length,
    warmup included):

    .. math::

       v(t) = \begin{cases}
         v_0 + (v_p - v_0)\, t / W & t < W \\
         v_1 + (v_p - v_1)
           \left[\tfrac12 \left(1 + \cos \frac{\pi \min(t - W, T - W)}{T - W}\right)\right]^p
           & t \ge W
       \end{cases}

    It is `join_schedules` of a `linear_schedule` and a `cosine_decay_schedule` with
    ``alpha = end_value / peak_value`` (0 when ``peak_value`` is 0), as in optax.

    Args:
      init_value: :math:`v_0`, the value at step 0.
      peak_value: :math:`v_p`, the value at step :math:`W`.
      warmup_steps: :math:`W \ge 0`, the warmup's length (0: start at the peak).
      decay_steps: :math:`T > W`, the schedule's length, warmup included.
      end_value: :math:`v_1`, the value from step :math:`T` on.
      exponent: :math:`p \ge 0`, applied to the cosine factor.

    Returns:
      The schedule.

    Raises:
      TypeError: a value is not a real number, or a step count is not an int.
      ValueError: a value is not finite, ``warmup_steps < 0``, ``decay_steps <=
        warmup_steps``, or ``exponent < 0``.

    Example:
      >>> import optx
      >>> s = optx.schedules.warmup_cosine_decay_schedule(
      ...     0.0, peak_value=1.0, warmup_steps=2, decay_steps=6, end_value=0.2)
      >>> [round(float(s(t)), 3) for t in range(8)]
      [0.0, 0.5, 1.0, 0.883, 0.6, 0.317, 0.2, 0.2]

    References:
      Loshchilov, Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts", ICLR 2017.
    """
    return WarmupCosineDecaySchedule(
        init_value, peak_value, warmup_steps, decay_steps, end_value, exponent
    )


_CYCLE_ARGS = inspect.signature(warmup_cosine_decay_schedule).parameters


@register
class SGDRSchedule(Composite):
    """See `sgdr_schedule`."""

    class_name = "sgdr_schedule"
    cosine_kwargs: tuple[WarmupCosineDecaySchedule, ...]

    def __post_init__(self) -> None:
        api = self.class_name
        given = self.cosine_kwargs
        if isinstance(given, Mapping | str) or not isinstance(given, Iterable):
            raise TypeError(
                f"`{api}` needs cosine_kwargs to be a list of dicts of arguments of "
                f"warmup_cosine_decay_schedule. Received: cosine_kwargs={given!r}."
            )
        cycles = tuple(_cycle(api, i, kwargs) for i, kwargs in enumerate(given))
        if not cycles:
            raise ValueError(
                f"`{api}` needs at least one cycle in cosine_kwargs. Received: cosine_kwargs=[]."
            )
        start = sum(cycle.decay_steps for cycle in cycles[:-1])
        if start > INT32_MAX:
            raise ValueError(
                f"`{api}` needs the cycles before the last to last at most 2**31 - 1 steps in "
                f"all ({COUNTER_LIMIT}). Received: cycles before the last whose decay_steps "
                f"add up to {start}."
            )
        set_fields(self, cosine_kwargs=cycles)
        super().__post_init__()

    def build(self) -> Schedule:
        boundaries, step = [], 0
        for cycle in self.cosine_kwargs[:-1]:
            step += cycle.decay_steps
            boundaries.append(step)
        return JoinSchedules(self.cosine_kwargs, tuple(boundaries))

    def get_config(self) -> dict[str, Any]:
        """A JSON-serialisable description: ``{"class_name": ..., "config": {...}}``."""
        cycles = [cycle.get_config()["config"] for cycle in self.cosine_kwargs]
        return {"class_name": self.class_name, "config": {"cosine_kwargs": cycles}}

    def __repr__(self) -> str:
        return f"{self.class_name}(cosine_kwargs={self.get_config()['config']['cosine_kwargs']!r})"


def _cycle(api: str, i: int, kwargs: Any) -> WarmupCosineDecaySchedule:
    if isinstance(kwargs, WarmupCosineDecaySchedule):
        return kwargs
    if not isinstance(kwargs, Mapping):
        raise TypeError(
            f"`{api}` needs each entry of cosine_kwargs to be a dict of arguments of "
            f"warmup_cosine_decay_schedule. Received: cosine_kwargs[{i}]={kwargs!r}."
        )
    unknown = sorted(set(kwargs) - set(_CYCLE_ARGS))
    missing = [
        name
        for name, p in _CYCLE_ARGS.items()
        if p.default is inspect.Parameter.empty and name not in kwargs
    ]
    if unknown or missing:
        raise TypeError(
            f"`{api}` needs each entry of cosine_kwargs to hold the arguments of "
            f"warmup_cosine_decay_schedule ({', '.join(_CYCLE_ARGS)}; the first four "
            f"required). Received: cosine_kwargs[{i}]={dict(kwargs)!r}, with unknown "
            f"{unknown} and missing {missing}."
        )
    try:
        return warmup_cosine_decay_schedule(**kwargs)
    except (TypeError, ValueError) as error:
        error.add_note(f"In `{api}`, for cosine_kwargs[{i}].")
        raise


def sgdr_schedule(cosine_kwargs: Iterable[Mapping[str, Any]]) -> SGDRSchedule:
    r"""Stochastic gradient descent with warm restarts: warmup-cosine cycles, one after another.

    Cycle :math:`i` is ``warmup_cosine_decay_schedule(**cosine_kwargs[i])`` and lasts its
    ``decay_steps``; the next one starts (at its own step 0) when it ends. It is
    `join_schedules` of those cycles, as in optax.

    Args:
      cosine_kwargs: one dict per cycle, with the arguments of
        `warmup_cosine_decay_schedule`: ``init_value``, ``peak_value``, ``warmup_steps``,
        ``decay_steps`` and optionally ``end_value`` and ``exponent``.

    Returns:
      The schedule.

    Raises:
      TypeError: ``cosine_kwargs`` is not a list of dicts, or a dict has unknown or missing
        arguments (or bad types, as `warmup_cosine_decay_schedule` raises them).
      ValueError: there is no cycle, or a cycle's arguments are out of range (as
        `warmup_cosine_decay_schedule` raises them, with a note naming the cycle).

    Example:
      >>> import optx
      >>> cycle = dict(init_value=0.0, peak_value=1.0, warmup_steps=1, decay_steps=3)
      >>> s = optx.schedules.sgdr_schedule([cycle, cycle])
      >>> [round(float(s(t)), 3) for t in range(7)]
      [0.0, 1.0, 0.5, 0.0, 1.0, 0.5, 0.0]

    References:
      Loshchilov, Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts", ICLR 2017.
    """
    return SGDRSchedule(cosine_kwargs)  # type: ignore[arg-type]
