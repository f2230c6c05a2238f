"""Keras's learning-rate schedule classes, with Keras 3's names, arguments and numerics.

These back `optx.optimizers.schedules`: a Keras user who replaces
``keras.optimizers`` with ``optx.optimizers`` keeps the same schedule calls and configs.
Each class is an optx `Schedule` (a frozen dataclass, equal and hashable by its arguments)
whose ``get_config()`` is Keras's flat dict, ``name`` included, and whose
``from_config(config)`` is ``cls(**config)``. The step is converted to float32 and every
operation runs in float32 in the order Keras uses, so values agree with Keras's to rounding.
`serialize` and `deserialize` (keras_serialization.py) read and write Keras 3's format
and tf.keras's legacy one.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from optx._src import reprs
from optx._src.schedules.base import (
    Schedule,
    check_nonnegative,
    check_positive,
    register,
    set_fields,
)

_MODULE = "keras.optimizers.schedules"
_F32 = jnp.float32


def _steps(api: str, name: str, value: Any, positive: bool = True) -> int | float:
    """A step count > 0 (or >= 0); Keras takes floats too. Ints stay ints, as in its config."""
    check = check_positive if positive else check_nonnegative
    number = check(api, name, value)
    return int(value) if isinstance(value, numbers.Integral) else number


def _flag(api: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise TypeError(
            f"`{api}` needs {name} to be a bool. Received: {name}={reprs.short(value)}."
        )
    return bool(value)


def _numbers(api: str, name: str, value: Any) -> tuple:
    if isinstance(value, np.ndarray | jax.Array) and np.ndim(value) == 1:
        value = np.asarray(value).tolist()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(
            f"`{api}` needs {name} to be a list of numbers. Received: {name}={reprs.short(value)}."
        )
    return tuple(value)


def _check_rate_decay(s: Any) -> None:
    """The checks `ExponentialDecay` and `InverseTimeDecay` share (their arguments match)."""
    api = s.class_name
    set_fields(
        s,
        initial_learning_rate=check_nonnegative(
            api, "initial_learning_rate", s.initial_learning_rate
        ),
        decay_steps=_steps(api, "decay_steps", s.decay_steps),
        decay_rate=check_nonnegative(api, "decay_rate", s.decay_rate),
        staircase=_flag(api, "staircase", s.staircase),
    )
    s._check_name()


def _progress(s: Any, count: jax.Array) -> jax.Array:
    """``step / decay_steps``, floored with ``staircase``."""
    p = count / _F32(s.decay_steps)
    return jnp.floor(p) if s.staircase else p


class LearningRateSchedule(Schedule):
    """Base class of the Keras-style schedules: ``schedule(step) -> learning rate``.

    Subclass it as in Keras: override ``__call__(self, step)`` (or, for a frozen dataclass,
    ``value(count)`` on a float32 count), and ``get_config()`` if the subclass is not a
    dataclass. ``get_config()`` returns the flat dict of constructor arguments, and the
    class method ``from_config(config)`` is ``cls(**config)``. `serialize` wraps the config
    with the class name.

    Example:
      >>> import optx
      >>> s = optx.optimizers.schedules.InverseTimeDecay(0.1, decay_steps=1.0, decay_rate=0.5)
      >>> [round(float(s(t)), 4) for t in range(4)]
      [0.1, 0.0667, 0.05, 0.04]
      >>> s.get_config()
      {'initial_learning_rate': 0.1, 'decay_steps': 1.0, 'decay_rate': 0.5, \
'staircase': False, 'name': 'InverseTimeDecay'}
    """

    class_name: ClassVar[str] = "LearningRateSchedule"

    def value(self, count: jax.Array) -> jax.Array:
        """The learning rate at a float32 step; subclasses override this or ``__call__``."""
        raise NotImplementedError(
            f"Learning-rate schedule {type(self).__name__!r} must override "
            f"`__call__(self, step)` or `value(self, count)`."
        )

    def get_config(self) -> dict[str, Any]:
        """Keras's config: the constructor's arguments by name (lists as lists)."""
        if not dataclasses.is_dataclass(self):
            raise NotImplementedError(
                f"Learning-rate schedule {type(self).__name__!r} must override "
                f"`get_config()` to be serialisable."
            )
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in dataclasses.fields(self)
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LearningRateSchedule:
        """Rebuilds a schedule from `get_config`'s dict: ``cls(**config)``."""
        api = f"{cls.__name__}.from_config"
        if not isinstance(config, Mapping):
            raise TypeError(
                f"`{api}` needs config to be a dict of arguments, as `get_config` returns. "
                f"Received: config={reprs.short(config)}."
            )
        if dataclasses.is_dataclass(cls):
            fields = [f for f in dataclasses.fields(cls) if f.init]
            names = [f.name for f in fields]
            unknown = [k for k in config if k not in names]
            if unknown:
                raise TypeError(
                    f"`{api}` got arguments that {cls.__name__} does not take: "
                    f"{reprs.short(unknown)}. It takes: {names}."
                )
            lacking = [
                f.name
                for f in fields
                if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING
                and f.name not in config
            ]
            if lacking:
                raise TypeError(
                    f"`{api}` needs the arguments {lacking} of {cls.__name__}, which the "
                    f"config lacks. Received: config={reprs.short(dict(config))}."
                )
        return cls(**config)

    def __repr__(self) -> str:
        if not dataclasses.is_dataclass(self):
            return object.__repr__(self)
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"

    def _check_name(self) -> None:
        name = getattr(self, "name", None)
        if name is None:  # tf.keras's default, kept in legacy configs
            set_fields(self, name=self.__dataclass_fields__["name"].default)  # type: ignore[attr-defined]
        elif not isinstance(name, str):
            raise TypeError(
                f"`{self.class_name}` needs name to be a string. Received: name={name!r}."
            )


@register
class ExponentialDecay(LearningRateSchedule):
    r"""The initial rate times ``decay_rate`` to the power ``step / decay_steps``.

    .. math:: \eta(s) = \eta_0 \, r^{s / D}, \qquad
       \text{or } \eta_0 \, r^{\lfloor s / D \rfloor} \text{ with staircase}.

    Args:
      initial_learning_rate: :math:`\eta_0 \ge 0`.
      decay_steps: :math:`D > 0`, the number of steps over which the rate is multiplied by
        ``decay_rate`` once.
      decay_rate: :math:`r \ge 0`.
      staircase: decay at multiples of ``decay_steps`` only (integer division).
      name: the name kept in the config; ``None`` means the default.

    Raises:
      ValueError: ``decay_steps <= 0`` (as Keras), or a negative rate.
      TypeError: an argument of the wrong type.

    Example:
      >>> import optx
      >>> s = optx.optimizers.schedules.ExponentialDecay(1.0, decay_steps=2, decay_rate=0.5)
      >>> [float(s(t)) for t in (0, 2, 4)]
      [1.0, 0.5, 0.25]
    """

    class_name = "ExponentialDecay"
    initial_learning_rate: float
    decay_steps: int | float
    decay_rate: float
    staircase: bool = False
    name: str = "ExponentialDecay"

    def __post_init__(self) -> None:
        _check_rate_decay(self)

    def value(self, count: jax.Array) -> jax.Array:
        """The learning rate at a float32 step."""
        p = _progress(self, count)
        return _F32(self.initial_learning_rate) * jnp.power(_F32(self.decay_rate), p)

    def _bounds(self) -> tuple[float, float]:
        v0, r = self.initial_learning_rate, self.decay_rate
        if r == 1.0 or v0 == 0.0:
            return v0, v0
        return (0.0, v0) if r < 1.0 else (v0, math.inf)  # towards 0, or without end


@register
class PiecewiseConstantDecay(LearningRateSchedule):
    r"""A constant rate on each interval between boundaries.

    .. math:: \eta(s) = v_0 \text{ for } s \le b_0, \quad v_{i+1} \text{ for }
       b_i < s \le b_{i+1}, \quad v_n \text{ for } s > b_{n-1}.

    A boundary belongs to the interval on its left. For an integer step the comparison is
    exact at every int32 step (Keras compares in the step's integer dtype too).

    Args:
      boundaries: :math:`b_0 < b_1 < \dots`, non-negative step numbers.
      values: :math:`v_0, \dots, v_n`, one more than ``boundaries``, each ``>= 0``.
      name: the name kept in the config; ``None`` means the default.

    Raises:
      ValueError: ``len(boundaries) != len(values) - 1`` (as Keras), boundaries that are
        negative or not strictly increasing, or a negative value.
      TypeError: an argument of the wrong type.

    Example:
      >>> import optx
      >>> s = optx.optimizers.schedules.PiecewiseConstantDecay([2, 4], [1.0, 0.5, 0.1])
      >>> [float(s(t)) for t in range(6)]
      [1.0, 1.0, 1.0, 0.5, 0.5, 0.1]
    """

    class_name = "PiecewiseConstantDecay"
    boundaries: tuple[int | float, ...]
    values: tuple[float, ...]
    name: str = "PiecewiseConstant"

    def __post_init__(self) -> None:
        api = self.class_name
        boundaries = _numbers(api, "boundaries", self.boundaries)
        values = _numbers(api, "values", self.values)
        if len(boundaries) != len(values) - 1:
            raise ValueError(
                f"`{api}` needs len(boundaries) == len(values) - 1. Received: "
                f"boundaries={list(boundaries)!r} (length {len(boundaries)}) and "
                f"values={list(values)!r} (length {len(values)})."
            )
        boundaries = tuple(
            _steps(api, f"boundaries[{i}]", b, positive=False) for i, b in enumerate(boundaries)
        )
        if any(a >= b for a, b in itertools.pairwise(boundaries)):
            raise ValueError(
                f"`{api}` needs strictly increasing boundaries. "
                f"Received: boundaries={list(boundaries)!r}."
            )
        values = tuple(check_nonnegative(api, f"values[{i}]", v) for i, v in enumerate(values))
        set_fields(self, boundaries=boundaries, values=values)
        self._check_name()

    def __call__(self, count: ArrayLike) -> jax.Array:
        """The learning rate at step ``count`` (an int, an int array or a float array)."""
        count = jnp.asarray(count)
        if not jnp.issubdtype(count.dtype, jnp.integer):
            return self.value(count.astype(jnp.float32))
        # For integer steps, s <= b is s <= floor(b): exact beyond float32's 2**24.
        top = jnp.iinfo(count.dtype).max
        return self._select(count, [min(math.floor(b), top) for b in self.boundaries])

    def value(self, count: jax.Array) -> jax.Array:
        """The learning rate at a float32 step."""
        return self._select(count, [_F32(b) for b in self.boundaries])

    def _bounds(self) -> tuple[float, float]:
        return min(self.values), max(self.values)

    def _select(self, count: jax.Array, boundaries: list) -> jax.Array:
        index = jnp.zeros(jnp.shape(count), jnp.int32)
        for b in boundaries:
            index = index + (count > b).astype(jnp.int32)
        return jnp.asarray(self.values, jnp.float32)[index]


@register
class PolynomialDecay(LearningRateSchedule):
    r"""From the initial rate to ``end_learning_rate`` along a polynomial, optionally cycling.

    .. math:: \eta(s) = (\eta_0 - \eta_1)\,(1 - s' / D')^p + \eta_1

    Without ``cycle``, :math:`s' = \min(s, D)` and :math:`D' = D`: the rate stays at
    :math:`\eta_1` after ``decay_steps``. With ``cycle``, :math:`s' = s` and
    :math:`D' = D \lceil s / D \rceil` (:math:`D` at :math:`s = 0`): the rate reaches
    :math:`\eta_1` at each multiple of :math:`D` and jumps up the step after.

    Args:
      initial_learning_rate: :math:`\eta_0 \ge 0`.
      decay_steps: :math:`D > 0`.
      end_learning_rate: :math:`\eta_1 \ge 0`.
      power: :math:`p \ge 0`.
      cycle: restart the decay after each ``decay_steps``, over a longer period each time.
      name: the name kept in the config; ``None`` means the default.

    Raises:
      ValueError: ``decay_steps <= 0`` (as Keras), a negative rate or power.
      TypeError: an argument of the wrong type.

    Example:
      >>> import optx
      >>> s = optx.optimizers.schedules.PolynomialDecay(1.0, 4, end_learning_rate=0.0, cycle=True)
      >>> [float(s(t)) for t in range(7)]
      [1.0, 0.75, 0.5, 0.25, 0.0, 0.375, 0.25]
    """

    class_name = "PolynomialDecay"
    initial_learning_rate: float
    decay_steps: int | float
    end_learning_rate: float = 0.0001
    power: float = 1.0
    cycle: bool = False
    name: str = "PolynomialDecay"

    def __post_init__(self) -> None:
        api = self.class_name
        set_fields(
            self,
            initial_learning_rate=check_nonnegative(
                api, "initial_learning_rate", self.initial_learning_rate
            ),
            decay_steps=_steps(api, "decay_steps", self.decay_steps),
            end_learning_rate=check_nonnegative(api, "end_learning_rate", self.end_learning_rate),
            power=check_nonnegative(api, "power", self.power),
            cycle=_flag(api, "cycle", self.cycle),
        )
        self._check_name()

    def value(self, count: jax.Array) -> jax.Array:
        """The learning rate at a float32 step."""
        lr0, lr1 = _F32(self.initial_learning_rate), _F32(self.end_learning_rate)
        decay_steps = _F32(self.decay_steps)
        if self.cycle:
            decay_steps = decay_steps * jnp.where(count == 0, 1.0, jnp.ceil(count / decay_steps))
        else:
            count = jnp.minimum(count, decay_steps)
        return (lr0 - lr1) * jnp.power(1 - count / decay_steps, _F32(self.power)) + lr1

    def _bounds(self) -> tuple[float, float]:
        lr0, lr1 = self.initial_learning_rate, self.end_learning_rate
        return min(lr0, lr1), max(lr0, lr1)


@register
class InverseTimeDecay(LearningRateSchedule):
    r"""The initial rate divided by ``1 + decay_rate * step / decay_steps``.

    .. math:: \eta(s) = \frac{\eta_0}{1 + r\, s / D}, \qquad
       \text{or } \frac{\eta_0}{1 + r \lfloor s / D \rfloor} \text{ with staircase}.

    Args:
      initial_learning_rate: :math:`\eta_0 \ge 0`.
      decay_steps: :math:`D > 0`.
      decay_rate: :math:`r \ge 0`.
      staircase: decay at multiples of ``decay_steps`` only (integer division).
      name: the name kept in the config; ``None`` means the default.

    Raises:
      ValueError: ``decay_steps <= 0`` (as Keras), or a negative rate.
      TypeError: an argument of the wrong type.

    Example:
      >>> import optx
      >>> s = optx.optimizers.schedules.InverseTimeDecay(1.0, 2, 1.0, staircase=True)
      >>> [float(s(t)) for t in range(6)]
      [1.0, 1.0, 0.5, 0.5, 0.3333333432674408, 0.3333333432674408]
    """

    class_name = "InverseTimeDecay"
    initial_learning_rate: float
    decay_steps: int | float
    decay_rate: float
    staircase: bool = False
    name: str = "InverseTimeDecay"

    def __post_init__(self) -> None:
        _check_rate_decay(self)

    def value(self, count: jax.Array) -> jax.Array:
        """The learning rate at a float32 step."""
        p = _progress(self, count)
        return _F32(self.initial_learning_rate) / (_F32(1) + _F32(self.decay_rate) * p)

    def _bounds(self) -> tuple[float, float]:
        v0 = self.initial_learning_rate
        return (v0, v0) if self.decay_rate == 0 else (0.0, v0)  # towards 0


def _cosine(count: jax.Array, decay_steps: jax.Array, start: jax.Array, alpha: float) -> jax.Array:
    cosine = 0.5 * (1.0 + jnp.cos(_F32(math.pi) * (count / decay_steps)))
    return start * ((1 - alpha) * cosine + alpha)


@register
class CosineDecay(LearningRateSchedule):
    r"""An optional linear warmup, then a cosine decay to ``alpha`` times its start.

    Without ``warmup_target``, with :math:`s' = \min(s, D)`:

    .. math:: \eta(s) = \eta_0 \left((1 - \alpha)\,\tfrac12 (1 + \cos(\pi s' / D))
       + \alpha\right).

    With ``warmup_target`` :math:`\eta_w` and ``warmup_steps`` :math:`W`, and
    :math:`s' = \min(s, W + D)`, the rate goes linearly from :math:`\eta_0` to
    :math:`\eta_w` over :math:`W` steps, :math:`\eta_0 + (\eta_w - \eta_0)\, s' / W` for
    :math:`s' < W`, then decays as above from :math:`\eta_w` with :math:`s' - W` steps.
    ``warmup_steps`` is ignored when ``warmup_target`` is ``None``.

    Args:
      initial_learning_rate: :math:`\eta_0 \ge 0`.
      decay_steps: :math:`D > 0`.
      alpha: :math:`\alpha \ge 0`, the final rate as a fraction of the decay's start.
      name: the name kept in the config; ``None`` means the default.
      warmup_target: :math:`\eta_w \ge 0`, or ``None`` for no warmup.
      warmup_steps: :math:`W \ge 0`.

    Raises:
      ValueError: ``decay_steps <= 0`` (as Keras), or a negative rate, alpha or
        ``warmup_steps``.
      TypeError: an argument of the wrong type.

    Example:
      >>> import optx
      >>> s = optx.optimizers.schedules.CosineDecay(
      ...     0.0, 10, alpha=0.1, warmup_target=1.0, warmup_steps=5)
      >>> [round(float(s(t)), 3) for t in range(17)]
      [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 0.978, 0.914, 0.815, 0.689, 0.55, 0.411, 0.285, 0.186,
       0.122, 0.1, 0.1]

    References:
      Loshchilov and Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts", ICLR
      2017. Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour",
      arXiv:1706.02677, 2017 (linear warmup).
    """

    class_name = "CosineDecay"
    initial_learning_rate: float
    decay_steps: int | float
    alpha: float = 0.0
    name: str = "CosineDecay"
    warmup_target: float | None = None
    warmup_steps: int | float = 0

    def __post_init__(self) -> None:
        api = self.class_name
        target = self.warmup_target
        set_fields(
            self,
            initial_learning_rate=check_nonnegative(
                api, "initial_learning_rate", self.initial_learning_rate
            ),
            decay_steps=_steps(api, "decay_steps", self.decay_steps),
            alpha=check_nonnegative(api, "alpha", self.alpha),
            warmup_target=None
            if target is None
            else check_nonnegative(api, "warmup_target", target),
            warmup_steps=_steps(api, "warmup_steps", self.warmup_steps, positive=False),
        )
        self._check_name()

    def value(self, count: jax.Array) -> jax.Array:
        """The learning rate at a float32 step."""
        lr0, decay_steps = _F32(self.initial_learning_rate), _F32(self.decay_steps)
        if self.warmup_target is None:
            return _cosine(jnp.minimum(count, decay_steps), decay_steps, lr0, self.alpha)
        target, warmup = _F32(self.warmup_target), _F32(self.warmup_steps)
        count = jnp.minimum(count, decay_steps + warmup)
        # Only used where count < warmup_steps, so never divides by a zero warmup.
        warm = (target - lr0) * (count / _F32(self.warmup_steps or 1)) + lr0
        decay = _cosine(count - warmup, decay_steps, target, self.alpha)
        return jnp.where(count < warmup, warm, decay)

    def _bounds(self) -> tuple[float, float]:
        lr0, target = self.initial_learning_rate, self.warmup_target
        start = lr0 if target is None else target
        values = (start, start * self.alpha) if target is None else (lr0, start, start * self.alpha)
        return min(values), max(values)


@register
class CosineDecayRestarts(LearningRateSchedule):
    r"""Cosine decay with warm restarts (SGDR): periods ``t_mul`` times longer each time.

    With :math:`f = s / D_1`, the period :math:`i` and the fraction :math:`g` of it done are
    :math:`i = \lfloor f \rfloor`, :math:`g = f - i` when :math:`t = 1`, and otherwise
    :math:`i = \lfloor \log(1 - f(1 - t)) / \log t \rfloor`,
    :math:`g = (f - (1 - t^i)/(1 - t)) / t^i`. Then

    .. math:: \eta(s) = \eta_0 \left((1 - \alpha)\, m^i\, \tfrac12 (1 + \cos(\pi g))
       + \alpha\right).

    As in Keras, the floor :math:`\alpha\eta_0` is not scaled by :math:`m^i`. With
    ``t_mul < 1`` the periods shrink and add up to :math:`D_1 / (1 - t)` steps; from that
    step on the value is NaN, as in Keras.

    Args:
      initial_learning_rate: :math:`\eta_0 \ge 0`.
      first_decay_steps: :math:`D_1 > 0`, the length of the first period.
      t_mul: :math:`t > 0`, the factor by which each period is longer than the last.
      m_mul: :math:`m \ge 0`, the factor by which each restart's rate is scaled.
      alpha: :math:`\alpha \ge 0`, the floor as a fraction of ``initial_learning_rate``.
      name: the name kept in the config; ``None`` means the default.

    Raises:
      ValueError: ``first_decay_steps <= 0`` (as Keras), ``t_mul <= 0``, or a negative
        rate, ``m_mul`` or ``alpha``.
      TypeError: an argument of the wrong type.

    Example:
      >>> import optx
      >>> s = optx.optimizers.schedules.CosineDecayRestarts(1.0, 4, t_mul=2.0, m_mul=0.5)
      >>> [round(float(s(t)), 3) for t in range(13)]
      [1.0, 0.854, 0.5, 0.146, 0.5, 0.481, 0.427, 0.346, 0.25, 0.154, 0.073, 0.019, 0.25]

    References:
      Loshchilov and Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts", ICLR
      2017.
    """

    class_name = "CosineDecayRestarts"
    initial_learning_rate: float
    first_decay_steps: int | float
    t_mul: float = 2.0
    m_mul: float = 1.0
    alpha: float = 0.0
    name: str = "SGDRDecay"

    def __post_init__(self) -> None:
        api = self.class_name
        set_fields(
            self,
            initial_learning_rate=check_nonnegative(
                api, "initial_learning_rate", self.initial_learning_rate
            ),
            first_decay_steps=_steps(api, "first_decay_steps", self.first_decay_steps),
            t_mul=check_positive(api, "t_mul", self.t_mul),
            m_mul=check_nonnegative(api, "m_mul", self.m_mul),
            alpha=check_nonnegative(api, "alpha", self.alpha),
        )
        self._check_name()

    def value(self, count: jax.Array) -> jax.Array:
        """The learning rate at a float32 step."""
        t_mul, alpha = _F32(self.t_mul), _F32(self.alpha)
        fraction = count / _F32(self.first_decay_steps)
        if np.float32(self.t_mul) == 1:  # decided in float32, as Keras does
            restart = jnp.floor(fraction)
            fraction = fraction - restart
        else:
            restart = jnp.floor(jnp.log(1.0 - fraction * (1.0 - t_mul)) / jnp.log(t_mul))
            done = (1.0 - jnp.power(t_mul, restart)) / (1.0 - t_mul)
            fraction = (fraction - done) / jnp.power(t_mul, restart)
        scale = jnp.power(_F32(self.m_mul), restart)
        cosine = 0.5 * scale * (1.0 + jnp.cos(_F32(math.pi) * fraction))
        return _F32(self.initial_learning_rate) * ((1 - alpha) * cosine + alpha)

    def _bounds(self) -> tuple[float, float] | None:
        if np.float32(self.t_mul) < 1:
            return None  # NaN past its last period, as in Keras
        lr0, alpha = self.initial_learning_rate, self.alpha
        values = [lr0 * alpha, lr0]
        if self.m_mul > 1 and lr0 * (1 - alpha) != 0:
            # Restart i peaks at m_mul ** i times the first: without end.
            values.append(math.copysign(math.inf, lr0 * (1 - alpha)))
        return min(values), max(values)
