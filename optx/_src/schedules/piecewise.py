"""Piecewise schedules (constant, or interpolated between steps) and the one-cycle policies."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from optx._src.checks import COUNTER_LIMIT, INT32_MAX
from optx._src.schedules.base import (
    Schedule,
    check_nonnegative,
    check_number,
    hull,
    register,
    set_fields,
)

INTERPOLATE_TYPES = ("linear", "cosine")

Pairs = tuple[tuple[int, float], ...]


def _pairs(api: str, given: Any) -> Pairs:
    """``boundaries_and_scales`` as sorted ``(step, scale)`` pairs: hashable, and checked.

    Takes a dict ``{step: scale}``, ``None``, or the pairs themselves (as stored).
    """
    name = "boundaries_and_scales"
    if given is None:
        return ()
    if isinstance(given, Mapping):
        items = list(given.items())
    elif isinstance(given, list | tuple) and all(
        isinstance(p, list | tuple) and len(p) == 2 for p in given
    ):
        items = [tuple(p) for p in given]
    else:
        raise TypeError(
            f"`{api}` needs {name} to be a dict {{step: scale}}. Received: {name}={given!r}."
        )
    pairs = []
    for step, scale in items:
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(
                f"`{api}` needs the keys of {name} to be int steps >= 0. "
                f"Received: {name}={given!r}, with key {step!r}."
            )
        if step > INT32_MAX:
            raise ValueError(
                f"`{api}` needs the keys of {name} to be int steps in [0, 2**31 - 1] "
                f"({COUNTER_LIMIT}). Received: {name}={given!r}, with key {step!r}."
            )
        scale = check_nonnegative(api, f"{name}[{step!r}]", scale)
        pairs.append((int(step), scale))
    pairs.sort()
    steps = [step for step, _ in pairs]
    if len(set(steps)) != len(steps):
        raise ValueError(f"`{api}` needs distinct steps in {name}. Received: {name}={given!r}.")
    return tuple(pairs)


def _pairs_from_json(api: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A config with ``boundaries_and_scales`` keys back to ints (JSON makes them strings)."""
    config = dict(config)
    given = config.get("boundaries_and_scales")
    if isinstance(given, Mapping):
        parsed = {}
        for key, scale in given.items():
            if isinstance(key, str):
                try:
                    key = int(key)
                except ValueError:
                    raise ValueError(
                        f"`{api}` needs the keys of boundaries_and_scales to be int steps. "
                        f"Received: boundaries_and_scales={dict(given)!r}, with key {key!r}."
                    ) from None
            parsed[key] = scale
        config["boundaries_and_scales"] = parsed
    return config


class _Piecewise(Schedule):
    """Shared config and repr of the two schedules with ``boundaries_and_scales``."""

    boundaries_and_scales: Pairs

    def get_config(self) -> dict[str, Any]:
        """A JSON-serialisable description: ``{"class_name": ..., "config": {...}}``.

        The ``{step: scale}`` dict has string keys, as JSON would make them anyway.
        """
        config = super().get_config()
        config["config"]["boundaries_and_scales"] = {
            str(step): scale for step, scale in self.boundaries_and_scales
        }
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Schedule:
        """Rebuilds the schedule from the ``config`` part of `get_config`."""
        return cls(**_pairs_from_json(cls.class_name, config))

    def __repr__(self) -> str:
        args = ", ".join(
            f"{f.name}={dict(value) if f.name == 'boundaries_and_scales' else value!r}"
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            for value in [getattr(self, f.name)]
        )
        return f"{self.class_name}({args})"


@register
class PiecewiseConstantSchedule(_Piecewise):
    """See `piecewise_constant_schedule`."""

    class_name = "piecewise_constant_schedule"
    init_value: float
    boundaries_and_scales: Pairs = ()

    def __post_init__(self) -> None:
        api = self.class_name
        set_fields(
            self,
            init_value=check_number(api, "init_value", self.init_value),
            boundaries_and_scales=_pairs(api, self.boundaries_and_scales),
        )

    def value(self, count: jax.Array) -> jax.Array:
        # One multiplication per boundary passed, in order, as in optax.
        out = jnp.full(jnp.shape(count), self.init_value, jnp.float32)
        for step, scale in self.boundaries_and_scales:
            out = jnp.where(count >= step, scale * out, out)
        return out

    def _bounds(self) -> tuple[float, float]:
        return hull(*_knots(self.init_value, self.boundaries_and_scales))


def piecewise_constant_schedule(
    init_value: float, boundaries_and_scales: dict[int, float] | None = None
) -> PiecewiseConstantSchedule:
    r"""A constant that is multiplied by a scale at each of a few steps.

    .. math:: v(t) = v_0 \prod_{i:\, b_i \le t} s_i

    Args:
      init_value: :math:`v_0`, the value up to the first step given.
      boundaries_and_scales: ``{b_i: s_i}``: from step :math:`b_i \ge 0` on, the value is
        multiplied by :math:`s_i \ge 0`. ``None`` or ``{}``: a constant.

    Returns:
      The schedule. Its config holds ``boundaries_and_scales`` with string keys (as JSON
      writes them); `from_config` reads them back as ints.

    Raises:
      TypeError: ``init_value`` or a scale is not a real number, or
        ``boundaries_and_scales`` is not a dict.
      ValueError: a value is not finite, a step is not an int >= 0, or a scale is negative.

    Example:
      >>> import optx
      >>> s = optx.schedules.piecewise_constant_schedule(1.0, {2: 0.5, 4: 0.1})
      >>> [float(s(t)) for t in range(6)]
      [1.0, 1.0, 0.5, 0.5, 0.05000000074505806, 0.05000000074505806]
    """
    return PiecewiseConstantSchedule(init_value, boundaries_and_scales)  # type: ignore[arg-type]


@register
class PiecewiseInterpolateSchedule(_Piecewise):
    """See `piecewise_interpolate_schedule`."""

    class_name = "piecewise_interpolate_schedule"
    interpolate_type: str
    init_value: float
    boundaries_and_scales: Pairs = ()

    def __post_init__(self) -> None:
        api = self.class_name
        if self.interpolate_type not in INTERPOLATE_TYPES:
            raise ValueError(
                f"`{api}` needs interpolate_type to be 'linear' or 'cosine'. "
                f"Received: interpolate_type={self.interpolate_type!r}."
            )
        set_fields(
            self,
            init_value=check_number(api, "init_value", self.init_value),
            boundaries_and_scales=_pairs(api, self.boundaries_and_scales),
        )

    def value(self, count: jax.Array) -> jax.Array:
        # optax's operations, vectorised over the pieces as optax does (so that XLA compiles
        # them alike under jit), but selected with `where`, elementwise in ``count``.
        steps = np.array([0] + [step for step, _ in self.boundaries_and_scales], np.float32)
        scales = [self.init_value] + [scale for _, scale in self.boundaries_and_scales]
        values = jnp.cumprod(jnp.asarray(scales, jnp.float32))
        sizes = np.maximum(steps[1:] - steps[:-1], 1)
        count = jnp.maximum(count, 0.0)[..., None]
        pct = (count - steps[:-1]) / sizes
        start, end = values[:-1], values[1:]
        if self.interpolate_type == "linear":
            pieces = (end - start) * pct + start
        else:
            pieces = end + (start - end) / 2.0 * (jnp.cos(jnp.pi * pct) + 1)
        inside = (steps[:-1] <= count) & (count < steps[1:])
        out = jnp.sum(jnp.where(inside, pieces, 0.0), axis=-1)  # one piece, or none
        return jnp.where(count[..., 0] >= steps[-1], values[-1], out)

    def _bounds(self) -> tuple[float, float]:
        # Lines and half cosines between knots stay between the knots' values.
        return hull(*_knots(self.init_value, self.boundaries_and_scales))


def _knots(init_value: float, pairs: Pairs) -> list[float]:
    """The values at step 0 and at each boundary: the running products of the scales."""
    values = [init_value]
    for _, scale in pairs:
        values.append(values[-1] * scale)
    return values


def piecewise_interpolate_schedule(
    interpolate_type: str,
    init_value: float,
    boundaries_and_scales: dict[int, float] | None = None,
) -> PiecewiseInterpolateSchedule:
    r"""Goes from value to value, linearly or along a half cosine, between a few steps.

    The value at step :math:`b_i` is :math:`v_i = v_0 \prod_{j \le i} s_j` (with
    :math:`b_0 = 0`); between :math:`b_i` and :math:`b_{i+1}` it goes from :math:`v_i` to
    :math:`v_{i+1}`; after the last step it stays at the last value. With
    :math:`x = (t - b_i) / (b_{i+1} - b_i)`:

    .. math::

       v(t) = v_i + (v_{i+1} - v_i)\, x \quad \text{(linear)}, \qquad
       v(t) = v_{i+1} + \tfrac12 (v_i - v_{i+1}) (1 + \cos \pi x) \quad \text{(cosine)}

    The scales multiply: the value interpolates between their running products, not
    between the scales themselves.

    Args:
      interpolate_type: ``"linear"`` or ``"cosine"``.
      init_value: :math:`v_0`, the value at step 0.
      boundaries_and_scales: ``{b_i: s_i}``, steps :math:`b_i \ge 0` and scales
        :math:`s_i \ge 0`. ``None`` or ``{}``: a constant.

    Returns:
      The schedule. Its config holds ``boundaries_and_scales`` with string keys (as JSON
      writes them); `from_config` reads them back as ints.

    Raises:
      TypeError: ``init_value`` or a scale is not a real number, or
        ``boundaries_and_scales`` is not a dict.
      ValueError: ``interpolate_type`` is unknown, a value is not finite, a step is not an
        int >= 0, or a scale is negative.

    Example:
      >>> import optx
      >>> s = optx.schedules.piecewise_interpolate_schedule("linear", 1.0, {4: 0.5, 8: 0.5})
      >>> [float(s(t)) for t in range(0, 11, 2)]
      [1.0, 0.75, 0.5, 0.375, 0.25, 0.25]
    """
    return PiecewiseInterpolateSchedule(
        interpolate_type,
        init_value,
        boundaries_and_scales,  # type: ignore[arg-type]
    )
