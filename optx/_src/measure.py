"""Measurements of the updates kept in the state: `snapshot`, `measure_with_ema`, `monitor`.

These are optax's ``snapshot``, ``measure_with_ema`` and ``monitor``; optx's wrapper that
records an optimizer's norms and learning rate is `monitored`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import (
    EmptyState,
    GradientTransformationLike,
    OptState,
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
)
from optx._src.combine import accepts_extra, call_update
from optx._src.momentum import Ema, EmaState
from optx._src.reprs import short

Measure = Callable[[Updates], Any]


def _measured(measure: Measure, tree: Any) -> Any:
    """``measure(tree)``, its bool and integer leaves as float32 (so they can be averaged)."""
    result = measure(tree)
    return jax.tree.map(
        lambda x: x if jnp.issubdtype(jnp.result_type(x), jnp.inexact) else jnp.float32(x),
        result,
    )


def _check_measure(api: str, name: str, measure: Any) -> None:
    if not callable(measure) or isinstance(measure, GradientTransformationLike):
        raise TypeError(
            f"`{api}` needs {name} to be a callable updates -> measurement. "
            f"Received: {name}={short(measure)}."
        )


class SnapshotState(NamedTuple):
    """State of `snapshot`.

    Attributes:
      measurement: ``{measure_name: measure(updates)}`` of the last call (of the
        parameters, after `init`).
    """

    measurement: dict[str, Any]


@transform
class Snapshot(Transform):
    """See `snapshot`."""

    name = "snapshot"
    measure_name: str = ""
    measure: Measure = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not isinstance(self.measure_name, str):
            raise TypeError(
                f"`snapshot` needs measure_name to be a str. "
                f"Received: measure_name={short(self.measure_name)}."
            )
        _check_measure(self.name, "measure", self.measure)

    def init(self, params: Params) -> SnapshotState:
        checks.array_leaves(f"{self.name}.init", params, "params")
        return SnapshotState({self.measure_name: self.measure(params)})

    def update(
        self, updates: Updates, state: SnapshotState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, SnapshotState]:
        checks.array_leaves(f"{self.name}.update", updates)
        del state, params, extra
        return updates, SnapshotState({self.measure_name: self.measure(updates)})


def snapshot(measure_name: str, measure: Measure) -> Snapshot:
    r"""Records ``measure(updates)`` in the state and passes the updates on unchanged.

    .. math::
       u = g, \qquad \text{state.measurement[name]} = \mathrm{measure}(g)

    In a chain it sees the updates as the transforms before it left them (for example
    the norm before clipping). `init` records ``measure(params)``, so the state has the
    same structure before and after each step.

    Args:
      measure_name: the key of the measurement in ``state.measurement``.
      measure: a function of the updates (any pytree of arrays out).

    Returns:
      The transform; its state is `SnapshotState`.

    Raises:
      TypeError: ``measure_name`` is not a str, or ``measure`` is not callable.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.chain(optx.snapshot("norm", optx.tree.norm), optx.clip_by_global_norm(1.0))
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([3.0, 4.0])}, state)
      >>> state[0].measurement["norm"], updates["w"]
      (Array(5., dtype=float32), Array([0.6, 0.8], dtype=float32))
    """
    return Snapshot(measure_name, measure)


@transform
class MeasureWithEma(Transform):
    """See `measure_with_ema`."""

    name = "measure_with_ema"
    # A measurement is any function of the whole tree (shapes, paths): not elementwise.
    elementwise = False
    measure: Measure = None  # type: ignore[assignment]
    # The average, with its decay declared there (a dynamic hyperparameter, "decay").
    ema: Ema = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        _check_measure(self.name, "measure", self.measure)

    def init(self, params: Params) -> EmaState:
        return self.ema.init(_measured(self.measure, params))

    def update(
        self, updates: Updates, state: EmaState, params: Params | None = None, **extra: Any
    ) -> tuple[Any, EmaState]:
        checks.array_leaves(f"{self.name}.update", updates)
        del params, extra
        return self.ema.update(_measured(self.measure, updates), state)


def measure_with_ema(
    measure: Measure,
    decay: ScalarOrSchedule,
    debias: bool = True,
    accumulator_dtype: DTypeLike | None = None,
) -> MeasureWithEma:
    r"""A moving average of ``measure(updates)``: a measurement for `monitor`.

    With :math:`m_t` = ``measure`` of the ``t``-th updates and :math:`\beta` = ``decay``,

    .. math::
       a_t = \beta\,a_{t-1} + (1 - \beta)\,m_t, \qquad
       \text{out} = a_t / (1 - \beta^t) \ \text{(debiased)}

    as `ema` computes it. Its ``update`` returns the average (not updates): use it inside
    `monitor`, which passes the updates on. A bool or integer measurement (``norm > 1``)
    is averaged as float32 (a frequency).

    Args:
      measure: a function of the updates (a pytree of arrays out).
      decay: :math:`\beta \in [0, 1]` (a dynamic hyperparameter, ``"decay"``; a schedule
        is accepted).
      debias: divide by :math:`1 - \beta^t`.
      accumulator_dtype: dtype of the average (``None``: the measurement's).

    Returns:
      The measurement transform; its state is `EmaState`.

    Raises:
      TypeError: ``measure`` is not callable.
      ValueError: ``decay`` is outside [0, 1].

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.monitor({"big": optx.measure_with_ema(lambda u: optx.tree.norm(u) > 1, 0.5)})
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> for g in (2.0, 0.0, 0.0):
      ...     _, state = tx.update({"w": jnp.full(2, g)}, state)
      >>> state.measurements["big"]  # (0.125 + 0 + 0) / (1 - 0.5**3)
      Array(0.14285715, dtype=float32)
    """
    _check_measure("measure_with_ema", "measure", measure)
    with hp.caller("measure_with_ema"):
        return MeasureWithEma(measure, Ema(decay, debias, accumulator_dtype))


class MonitorState(NamedTuple):
    """State of `monitor`.

    Attributes:
      measurements: ``{name: measurement}`` of the last call (zeros after `init`).
      measure_states: the states of the measurements that keep one, in ``measures``'
        order (an `EmptyState` for a plain function).
    """

    measurements: dict[str, Any]
    measure_states: tuple[OptState, ...]


@transform
class Measurement(Transform):
    """A plain function of the updates as a measurement transform of `monitor`."""

    name = "measurement"
    # A measurement is any function of the whole tree (shapes, paths): not elementwise.
    elementwise = False
    fn: Measure = None  # type: ignore[assignment]

    def init(self, params: Params) -> EmptyState:
        del params
        return EmptyState()

    def update(
        self, updates: Updates, state: EmptyState, params: Params | None = None, **extra: Any
    ) -> tuple[Any, EmptyState]:
        del params, extra
        return self.fn(updates), state


@transform
class Monitor(Transform):
    """See `monitor`."""

    name = "monitor"
    measures: tuple[tuple[str, GradientTransformationLike], ...] = ()

    def init(self, params: Params) -> MonitorState:
        checks.array_leaves(f"{self.name}.init", params, "params")
        states = tuple(m.init(params) for _, m in self.measures)

        def measure_all() -> dict[str, Any]:
            return self._measure(params, states, params, {})[0]

        # Zeros of the measurements' shapes: the state keeps one structure from `init` on.
        shapes = jax.eval_shape(measure_all)
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return MonitorState(zeros, states)

    def _measure(
        self, updates: Updates, states: tuple[OptState, ...], params: Any, extra: dict
    ) -> tuple[dict[str, Any], tuple[OptState, ...]]:
        values, new_states = {}, []
        for (name, m), s in zip(self.measures, states, strict=True):
            values[name], s = call_update(m, accepts_extra(m), updates, s, params, extra)
            new_states.append(s)
        return values, tuple(new_states)

    def update(
        self, updates: Updates, state: MonitorState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, MonitorState]:
        checks.array_leaves(f"{self.name}.update", updates)
        values, states = self._measure(updates, state.measure_states, params, extra)
        return updates, MonitorState(values, states)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n!r}: {m!r}" for n, m in self.measures)
        return f"monitor({{{inner}}})"


MOVED = (
    "To wrap an optimizer and record its norms and learning rate (optx's former "
    "`monitor(inner)`), use `optx.monitored(inner)`."
)


def monitor(measures: Mapping[str, GradientTransformationLike | Measure]) -> Monitor:
    r"""Records measurements of the updates in the state and passes the updates on.

    .. math::
       u = g, \qquad \text{state.measurements[name]} = \mathrm{measure}(g)

    Each measurement is a function of the updates (as `snapshot`), or a transform whose
    ``update`` returns the measurement and keeps a state (as `measure_with_ema`). Before
    the first step every measurement is zeros (optax's state is then empty).

    Args:
      measures: ``{name: function or measurement transform}``.

    Returns:
      The transform; its state is `MonitorState`.

    Raises:
      TypeError: ``measures`` is not a dict of functions and transforms (given a
        transform, the message points to `monitored`).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.chain(
      ...     optx.monitor({"norm": optx.tree.norm}), optx.clip_by_global_norm(1.0)
      ... )
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([3.0, 4.0])}, state)
      >>> state[0].measurements["norm"], updates["w"]
      (Array(5., dtype=float32), Array([0.6, 0.8], dtype=float32))
    """
    if isinstance(measures, GradientTransformationLike):
        raise TypeError(
            f"`monitor` needs measures to be a dict of measurement names to functions or "
            f"transforms. Received: measures={short(measures)}. {MOVED}"
        )
    if not isinstance(measures, Mapping):
        raise TypeError(
            f"`monitor` needs measures to be a dict of measurement names to functions or "
            f"transforms. Received: measures={short(measures)}."
        )
    items = []
    for name, m in measures.items():
        if not isinstance(name, str):
            raise TypeError(f"`monitor` needs str measurement names. Received: {name!r}.")
        if not isinstance(m, GradientTransformationLike):
            if not callable(m):
                raise TypeError(
                    f"`monitor` needs each measurement to be a function or a transform. "
                    f"Received: measures[{name!r}]={short(m)}."
                )
            m = Measurement(m)
        else:
            checks.transform("monitor", f"measures[{name!r}]", m)
        items.append((name, m))
    return Monitor(tuple(items))
