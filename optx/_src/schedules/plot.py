"""Plotting schedules with matplotlib (an optional dependency)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from optx._src.schedules.base import Schedule


def plot(
    schedule_or_list: Callable[[jax.Array], jax.Array] | Sequence[Callable[[jax.Array], jax.Array]],
    steps: int | ArrayLike,
    *,
    ax: Any = None,
    labels: Sequence[str] | None = None,
    logy: bool = False,
) -> Any:
    """Draws one or several schedules against the step, with matplotlib.

    Each schedule is evaluated at every step in one `jax.vmap`-ed call.

    Args:
      schedule_or_list: a schedule (any function ``step -> value`` that `jax.vmap` can
        map), or a list of them.
      steps: an int ``n`` for steps ``0, ..., n - 1``, or the steps to show (an array of
        ints).
      ax: a matplotlib ``Axes`` to draw on; by default a new figure.
      labels: one legend label per schedule; by default an optx schedule's factory name,
        else the function's name. The legend shows when there are several schedules or
        ``labels`` are given.
      logy: a logarithmic value axis.

    Returns:
      The matplotlib ``Figure`` (that of ``ax`` when given).

    Raises:
      ImportError: matplotlib is not installed.
      TypeError: a schedule is not callable.
      ValueError: ``steps`` is not a positive int or a 1-D array of ints, or ``labels`` does
        not have one label per schedule.

    Example:
      >>> import optx
      >>> wsd = optx.schedules.warmup_stable_decay_schedule(
      ...     1e-3, 100, 700, 200, decay_type="1-sqrt")
      >>> linear = optx.schedules.linear_schedule(1e-3, 0.0, 1000)
      >>> fig = optx.schedules.plot([wsd, linear], 1000, labels=["WSD", "linear"])
      >>> len(fig.axes[0].get_lines())
      2
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "`optx.schedules.plot` needs matplotlib, which is not installed. "
            "Install it with `pip install matplotlib`."
        ) from error

    schedules = (
        list(schedule_or_list) if isinstance(schedule_or_list, list | tuple) else [schedule_or_list]
    )
    s: Any
    for i, s in enumerate(schedules):
        if not callable(s):
            raise TypeError(
                f"`plot` needs schedules: functions step -> value. Received: schedule {i} = {s!r}."
            )
    if labels is not None and (isinstance(labels, str) or len(labels) != len(schedules)):
        raise ValueError(
            f"`plot` needs one label per schedule ({len(schedules)}). Received: labels={labels!r}."
        )
    x = _steps(steps)

    if ax is None:
        # A figure outside pyplot's global state: nothing to close, shown once in notebooks.
        fig = Figure()
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    for i, s in enumerate(schedules):
        values = np.asarray(jax.vmap(s)(jnp.asarray(x, jnp.int32)), np.float64)
        ax.plot(x, values, label=labels[i] if labels is not None else _name(s))
    ax.set_xlabel("step")
    ax.set_ylabel("value")
    if logy:
        ax.set_yscale("log")
    if labels is not None or len(schedules) > 1:
        ax.legend()
    return fig


def _steps(steps: int | ArrayLike) -> np.ndarray:
    if isinstance(steps, int | np.integer) and not isinstance(steps, bool):
        if steps < 1:
            raise ValueError(f"`plot` needs steps >= 1. Received: steps={steps!r}.")
        return np.arange(int(steps))
    x = np.asarray(steps)
    if x.ndim != 1 or x.size == 0 or not np.issubdtype(x.dtype, np.integer):
        raise ValueError(
            f"`plot` needs steps to be an int or a non-empty 1-D array of int steps. "
            f"Received: steps={steps!r}."
        )
    return x


def _name(schedule: Callable[..., Any]) -> str:
    if isinstance(schedule, Schedule):
        return schedule.class_name
    return getattr(schedule, "__name__", type(schedule).__name__)
