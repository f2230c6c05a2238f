"""Schedules of today's large-model training: warmup-stable-decay and inverse square root."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from optx._src.checks import INT32_MAX
from optx._src.schedules.base import (
    Schedule,
    check_number,
    check_positive,
    check_steps,
    hull,
    register,
    set_fields,
)

DECAY_TYPES = ("linear", "cosine", "1-sqrt")


@register
class WarmupStableDecaySchedule(Schedule):
    """See `warmup_stable_decay_schedule`."""

    class_name = "warmup_stable_decay_schedule"
    peak_value: float = 1.0
    warmup_steps: int = 0
    stable_steps: int = 0
    decay_steps: int = 1
    init_value: float = 0.0
    end_value: float = 0.0
    decay_type: str = "linear"

    def __post_init__(self) -> None:
        api = self.class_name
        if self.decay_type not in DECAY_TYPES:
            raise ValueError(
                f"`{api}` needs decay_type to be one of {', '.join(map(repr, DECAY_TYPES))}. "
                f"Received: decay_type={self.decay_type!r}."
            )
        set_fields(
            self,
            peak_value=check_number(api, "peak_value", self.peak_value),
            warmup_steps=check_steps(api, "warmup_steps", self.warmup_steps, minimum=0),
            stable_steps=check_steps(api, "stable_steps", self.stable_steps, minimum=0),
            decay_steps=check_steps(api, "decay_steps", self.decay_steps),
            init_value=check_number(api, "init_value", self.init_value),
            end_value=check_number(api, "end_value", self.end_value),
        )

    def value(self, count: jax.Array) -> jax.Array:
        warmup = self.warmup_steps
        # Warmup; with no warmup steps this branch is never selected.
        rise = count / max(warmup, 1)
        warm = self.init_value + (self.peak_value - self.init_value) * rise
        # Stable then cooldown: s goes from 0 at the start of the cooldown to 1 at its end.
        # A float: the sum of two int32 step counts may pass int32's range.
        s = jnp.clip((count - float(warmup + self.stable_steps)) / self.decay_steps, 0.0, 1.0)
        if self.decay_type == "linear":
            shape = 1.0 - s
        elif self.decay_type == "cosine":
            shape = 0.5 * (1.0 + jnp.cos(math.pi * s))
        else:
            shape = 1.0 - jnp.sqrt(s)
        cool = self.end_value + (self.peak_value - self.end_value) * shape
        return jnp.where(count < warmup, warm, cool)

    def _bounds(self) -> tuple[float, float]:
        warm = (self.init_value,) if self.warmup_steps > 0 else ()
        return hull(*warm, self.peak_value, self.end_value)


def warmup_stable_decay_schedule(
    peak_value: float,
    warmup_steps: int,
    stable_steps: int,
    decay_steps: int,
    init_value: float = 0.0,
    end_value: float = 0.0,
    decay_type: str = "linear",
) -> WarmupStableDecaySchedule:
    r"""Warmup-stable-decay (WSD): a linear warmup, a long constant phase, then a cooldown.

    With :math:`W` = ``warmup_steps``, :math:`S` = ``stable_steps``, :math:`D` =
    ``decay_steps`` and :math:`s = \min(\max(t - W - S, 0), D) / D`:

    .. math::

       v(t) = \begin{cases}
         v_0 + (v_p - v_0)\, t / W & t < W \\
         v_1 + (v_p - v_1)\, f(s) & t \ge W
       \end{cases}

    where the cooldown's shape :math:`f` is :math:`1 - s` (``"linear"``),
    :math:`(1 + \cos \pi s) / 2` (``"cosine"``) or :math:`1 - \sqrt{s}` (``"1-sqrt"``). So
    the value is :math:`v_0` at step 0, :math:`v_p` from step :math:`W` to :math:`W + S`,
    reaches :math:`v_1` at step :math:`W + S + D` and stays there. The constant phase can
    be extended, or branched from at any step into a cooldown, without retraining: one
    run serves several training lengths (Hu et al. 2024; Hägele et al. 2024, who found the
    ``"1-sqrt"`` cooldown the best of these shapes).

    Args:
      peak_value: :math:`v_p`, the value of the stable phase.
      warmup_steps: :math:`W \ge 0`, the warmup's length (0: start at the peak).
      stable_steps: :math:`S \ge 0`, the constant phase's length.
      decay_steps: :math:`D \ge 1`, the cooldown's length.
      init_value: :math:`v_0`, the value at step 0.
      end_value: :math:`v_1`, the value from step :math:`W + S + D` on.
      decay_type: the cooldown's shape: ``"linear"``, ``"cosine"`` or ``"1-sqrt"``.

    Returns:
      The schedule.

    Raises:
      TypeError: a value is not a real number, or a step count is not an int.
      ValueError: a value is not finite, a step count is out of range, or ``decay_type`` is
        unknown.

    Example:
      >>> import optx
      >>> s = optx.schedules.warmup_stable_decay_schedule(
      ...     1.0, warmup_steps=2, stable_steps=3, decay_steps=4, decay_type="1-sqrt")
      >>> [round(float(s(t)), 3) for t in range(11)]
      [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 0.5, 0.293, 0.134, 0.0, 0.0]

    References:
      Hu, Tu, Han, et al., "MiniCPM: Unveiling the Potential of Small Language Models with
      Scalable Training Strategies", arXiv:2404.06395, 2024.

      Hägele, Bakouch, Kosson, Ben Allal, Von Werra, Jaggi, "Scaling Laws and
      Compute-Optimal Training Beyond Fixed Training Durations", NeurIPS 2024.
    """
    return WarmupStableDecaySchedule(
        peak_value, warmup_steps, stable_steps, decay_steps, init_value, end_value, decay_type
    )


@register
class WarmupInverseSqrtSchedule(Schedule):
    """See `warmup_inverse_sqrt_schedule`."""

    class_name = "warmup_inverse_sqrt_schedule"
    peak_value: float = 1.0
    warmup_steps: int = 1
    init_value: float = 0.0
    timescale: float | None = None

    def __post_init__(self) -> None:
        api = self.class_name
        peak = check_number(api, "peak_value", self.peak_value)
        init = check_number(api, "init_value", self.init_value)
        warmup = check_steps(api, "warmup_steps", self.warmup_steps, minimum=0)
        timescale = None
        if self.timescale is not None:
            timescale = check_positive(api, "timescale", self.timescale)
        elif warmup < 1:
            raise ValueError(
                f"`{api}` needs warmup_steps >= 1 when timescale is None (the decay is "
                f"peak_value * sqrt(warmup_steps / t)). Received: warmup_steps={warmup!r}. "
                f"Give a timescale to decay from step 0."
            )
        set_fields(self, peak_value=peak, warmup_steps=warmup, init_value=init, timescale=timescale)

    def value(self, count: jax.Array) -> jax.Array:
        warmup = self.warmup_steps
        tau = self.timescale if self.timescale is not None else warmup
        warm = self.init_value + (self.peak_value - self.init_value) * (count / max(warmup, 1))
        # Clipped so that the unused branch stays finite (no NaN in gradients through where).
        after = jnp.maximum(count - warmup, 0.0)
        decay = self.peak_value * jax.lax.rsqrt(1.0 + after / tau)
        return jnp.where(count < warmup, warm, decay)

    def _bounds(self) -> tuple[float, float]:
        tau = self.timescale if self.timescale is not None else self.warmup_steps
        last = self.peak_value / math.sqrt(1.0 + (INT32_MAX - self.warmup_steps) / tau)
        warm = (self.init_value,) if self.warmup_steps > 0 else ()
        return hull(*warm, self.peak_value, last)


def warmup_inverse_sqrt_schedule(
    peak_value: float,
    warmup_steps: int,
    init_value: float = 0.0,
    timescale: float | None = None,
) -> WarmupInverseSqrtSchedule:
    r"""A linear warmup, then a decay in one over the square root of the step.

    With :math:`W` = ``warmup_steps`` and :math:`\tau` = ``timescale``:

    .. math::

       v(t) = \begin{cases}
         v_0 + (v_p - v_0)\, t / W & t < W \\
         v_p \,/ \sqrt{1 + (t - W) / \tau} & t \ge W
       \end{cases}

    Without a ``timescale``, :math:`\tau = W` and the decay is
    :math:`v_p \sqrt{W / t}`: the "noam" schedule of Vaswani et al. (2017),
    :math:`d^{-1/2} \min(t^{-1/2}, t\,W^{-3/2})`, with its peak :math:`d^{-1/2} W^{-1/2}`
    written :math:`v_p` (and :math:`v_0 = 0`). With a ``timescale`` it is big_vision's
    ``rsqrt`` decay (also Hugging Face's ``get_inverse_sqrt_schedule``): the decay's speed
    no longer depends on the warmup's length.

    Args:
      peak_value: :math:`v_p`, the value at step :math:`W`.
      warmup_steps: :math:`W`, the warmup's length: >= 1 without a ``timescale``, >= 0
        with one.
      init_value: :math:`v_0`, the value at step 0.
      timescale: :math:`\tau > 0`, in steps; ``None`` means :math:`\tau = W`.

    Returns:
      The schedule.

    Raises:
      TypeError: a value is not a real number, or ``warmup_steps`` is not an int.
      ValueError: a value is not finite, ``warmup_steps`` is out of range, or ``timescale``
        is not > 0.

    Example:
      >>> import optx
      >>> s = optx.schedules.warmup_inverse_sqrt_schedule(1.0, warmup_steps=4)
      >>> [round(float(s(t)), 3) for t in (0, 2, 4, 16, 64)]
      [0.0, 0.5, 1.0, 0.5, 0.25]
      >>> s = optx.schedules.warmup_inverse_sqrt_schedule(1.0, warmup_steps=0, timescale=10)
      >>> [round(float(s(t)), 3) for t in (0, 30, 90)]
      [1.0, 0.5, 0.316]

    References:
      Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser, Polosukhin, "Attention Is
      All You Need", NeurIPS 2017 (section 5.3).

      Beyer, Zhai, Kolesnikov, "big_vision", github.com/google-research/big_vision, 2022:
      ``big_vision.utils.create_learning_rate_schedule``, ``decay_type="rsqrt"``.
    """
    return WarmupInverseSqrtSchedule(peak_value, warmup_steps, init_value, timescale)
