"""Reducing the step size when a monitored value (the loss) stops improving."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.scaling import scale_tree


class ReduceOnPlateauState(NamedTuple):
    """State of `reduce_on_plateau`.

    Attributes:
      scale: the factor the updates are multiplied by (1 at first); log it to see the
        reductions.
      best_value: the best mean value so far (``inf`` at first).
      plateau_count: accumulations without improvement since the last improvement or
        reduction.
      cooldown_count: accumulations left before plateaus are counted again.
      count: values accumulated into ``avg_value`` so far (reset every
        ``accumulation_size`` values).
      avg_value: the mean of the values accumulated so far.
      hyperparams: ``factor``, ``rtol``, ``atol`` and ``min_scale``.
    """

    scale: jax.Array
    best_value: jax.Array
    plateau_count: jax.Array
    cooldown_count: jax.Array
    count: jax.Array
    avg_value: jax.Array
    hyperparams: dict[str, jax.Array]


@transform
class ReduceOnPlateau(Transform):
    """See `reduce_on_plateau`."""

    name = "reduce_on_plateau"
    elementwise = True
    factor: ScalarOrSchedule = hp.field(0.1, hp.Range("in (0, 1)", lambda v: 0 < v < 1))
    patience: int = 10
    rtol: ScalarOrSchedule = hp.field(1e-4, hp.UNIT_CLOSED)
    atol: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    cooldown: int = 0
    accumulation_size: int = 1
    min_scale: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)

    def __post_init__(self) -> None:
        super().__post_init__()
        for field, minimum in (("patience", 1), ("cooldown", 0), ("accumulation_size", 1)):
            value = checks.nonneg_int(self.name, field, getattr(self, field), minimum)
            object.__setattr__(self, field, value)

    def init(self, params: Params) -> ReduceOnPlateauState:
        del params
        f32 = jnp.float32
        return ReduceOnPlateauState(
            scale=jnp.ones([], f32),
            best_value=jnp.full([], jnp.inf, f32),
            plateau_count=zero_count(),
            cooldown_count=zero_count(),
            count=zero_count(),
            avg_value=jnp.zeros([], f32),
            hyperparams=self.init_hyperparams(),
        )

    def update(
        self,
        updates: Updates,
        state: ReduceOnPlateauState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ReduceOnPlateauState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params
        if "value" not in extra:
            raise TypeError(
                f"`{self.name}` needs the monitored value (e.g. the loss) as "
                f"`update(updates, state, params, value=loss)`. Received: no value (extra "
                f"arguments: {sorted(extra) or 'none'}). `optx.chain` passes it on; inside "
                f"`optax.chain`, which drops extra arguments of other classes, wrap this "
                f"transform as `optax.GradientTransformationExtraArgs(tx.init, tx.update)`."
            )
        value = extra["value"]
        if np.shape(value) != ():
            raise ValueError(
                f"`{self.name}` needs value to be a scalar (e.g. the mean loss). "
                f"Received: value of shape {np.shape(value)}."
            )
        h = state.hyperparams
        count = safe_increment(state.count)
        avg = (state.count * state.avg_value + jnp.asarray(value).astype(jnp.float32)) / count
        avg = avg.astype(jnp.float32)
        full = count == self.accumulation_size

        # Once `accumulation_size` values are averaged: compare with the best value so far.
        improved = avg < (1 - h["rtol"]) * state.best_value - h["atol"]
        plateau = jnp.where(improved, 0, safe_increment(state.plateau_count))
        in_cooldown = state.cooldown_count > 0
        reduce = ~in_cooldown & (plateau == self.patience)
        reduced = jnp.where(reduce, state.scale * h["factor"], state.scale)
        new = ReduceOnPlateauState(
            scale=jnp.where(in_cooldown, state.scale, jnp.maximum(reduced, h["min_scale"])),
            best_value=jnp.where(improved, avg, state.best_value),
            plateau_count=jnp.where(in_cooldown | reduce, 0, plateau).astype(jnp.int32),
            cooldown_count=jnp.where(
                in_cooldown, state.cooldown_count - 1, jnp.where(reduce, self.cooldown, 0)
            ).astype(jnp.int32),
            count=zero_count(),
            avg_value=jnp.zeros([], jnp.float32),
            hyperparams=h,
        )
        accumulating = state._replace(count=count, avg_value=avg)
        state = ReduceOnPlateauState(
            *(jnp.where(full, a, b) for a, b in zip(new[:-1], accumulating[:-1], strict=True)),
            hyperparams=h,
        )
        return scale_tree(updates, state.scale), state


def reduce_on_plateau(
    factor: float = 0.1,
    patience: int = 10,
    rtol: float = 1e-4,
    atol: float = 0.0,
    cooldown: int = 0,
    accumulation_size: int = 1,
    min_scale: float = 0.0,
) -> ReduceOnPlateau:
    r"""Multiplies the updates by a scale that is cut when the loss stops improving.

    ``update`` needs the monitored value (e.g. the loss) as a keyword argument:
    ``tx.update(updates, state, params, value=loss)``. Every ``accumulation_size`` calls,
    the mean :math:`m` of the values given since the last check is compared with the best
    mean so far, :math:`b` (:math:`\infty` at first):

    - if :math:`m < (1 - r)\,b - a` it is an improvement: :math:`b \leftarrow m`, and the
      plateau count :math:`p` goes back to 0; otherwise :math:`p \leftarrow p + 1`;
    - during a cooldown (:math:`c > 0`): :math:`c \leftarrow c - 1` and :math:`p \leftarrow
      0`;
    - otherwise, when :math:`p` reaches ``patience``: :math:`s \leftarrow \max(f s,
      s_{\min})`, :math:`p \leftarrow 0` and :math:`c \leftarrow` ``cooldown``.

    The updates are multiplied by the scale :math:`s` (1 at first), after this check. Place
    it after the learning rate, e.g. ``optx.chain(optx.adam(1e-3), reduce_on_plateau())``.
    These are the semantics and float32 numerics of ``optax.contrib.reduce_on_plateau``;
    the scale and the values are float32 whatever the parameters' dtypes, and
    ``rtol = atol = 0`` (strict improvement) is allowed.

    Args:
      factor: :math:`f \in (0, 1)`, the scale's reduction (a dynamic hyperparameter).
      patience: checks without improvement before a reduction (an int >= 1).
      rtol: :math:`r \in [0, 1]`, the relative improvement that counts (dynamic).
      atol: :math:`a \ge 0`, the absolute improvement that counts (dynamic).
      cooldown: checks after a reduction during which plateaus are not counted (an int
        >= 0).
      accumulation_size: values averaged into each check (an int >= 1): 1 for a
        validation loss, more for noisy minibatch losses.
      min_scale: :math:`s_{\min} \ge 0`, the scale's floor (dynamic).

    Returns:
      The transform; its state is `ReduceOnPlateauState`, whose ``scale`` can be logged.

    Raises:
      TypeError, ValueError: a hyperparameter is not a number in its range, or an int
        option is not an int in its range.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.reduce_on_plateau(factor=0.5, patience=2)
      >>> state = tx.init(None)
      >>> for loss in [3.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0]:
      ...     updates, state = tx.update({"w": jnp.ones(1)}, state, value=loss)
      ...     print(float(state.scale), end=" ")
      1.0 1.0 1.0 0.5 0.5 0.5 0.25
      >>> updates
      {'w': Array([0.25], dtype=float32)}

    References:
      Keras's ``ReduceLROnPlateau`` callback; ``optax.contrib.reduce_on_plateau``.
    """
    return ReduceOnPlateau(factor, patience, rtol, atol, cooldown, accumulation_size, min_scale)
