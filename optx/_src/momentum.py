"""Moving averages of the updates: `trace` (momentum) and `ema`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from jax.typing import DTypeLike

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
from optx._src.moments import decay_pair, unzip, zeros_like
from optx._src.options import dtype_options


class TraceState(NamedTuple):
    """State of `trace`: the momentum buffer and the decay."""

    trace: Params
    hyperparams: dict[str, jax.Array]


@transform
class Trace(Transform):
    """See `trace`."""

    name = "trace"
    elementwise = True
    decay: ScalarOrSchedule = hp.field(0.9, hp.UNIT_CLOSED)
    nesterov: bool = False
    accumulator_dtype: Any = None
    # The name the decay goes by in the state: `sgd` calls it "momentum", as its argument.
    hyperparam_name: str = "decay"

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "accumulator_dtype")

    def public_names(self) -> dict[str, str]:
        return {"decay": self.hyperparam_name}

    def init(self, params: Params) -> TraceState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        checks.complex_slot(
            f"{self.name}.init", "accumulator_dtype", self.accumulator_dtype, params
        )
        return TraceState(zeros_like(params, self.accumulator_dtype), self.init_hyperparams())

    def update(
        self, updates: Updates, state: TraceState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, TraceState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.trace, "updates", "the state")
        d = state.hyperparams["decay"]

        def leaf(g: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
            new_t = g + d * t
            out = g + d * new_t if self.nesterov else new_t
            return out.astype(g.dtype), new_t.astype(t.dtype)

        out, trace = unzip(jax.tree.map(leaf, updates, state.trace), updates, 2)
        return out, state._replace(trace=trace)


def trace(
    decay: float, nesterov: bool = False, accumulator_dtype: DTypeLike | None = None
) -> Trace:
    r"""Momentum: accumulates a trace of past updates.

    .. math::
       t \leftarrow g + \mu\,t, \qquad u = t \ \text{(or } g + \mu\,t
       \text{ with Nesterov)}

    Args:
      decay: :math:`\mu \in [0, 1]` (a dynamic hyperparameter, ``"decay"``).
      nesterov: use Nesterov's accelerated gradient.
      accumulator_dtype: dtype of the trace; ``None`` uses each parameter's dtype.

    Returns:
      The transform.

    Raises:
      ValueError: ``decay`` is outside [0, 1].
      TypeError: ``accumulator_dtype`` is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.trace(0.5)
      >>> state = tx.init({"w": jnp.zeros(1)})
      >>> for _ in range(2):
      ...     updates, state = tx.update({"w": jnp.ones(1)}, state)
      >>> updates
      {'w': Array([1.5], dtype=float32)}

    References:
      Polyak, "Some methods of speeding up the convergence of iteration methods", 1964;
      Sutskever, Martens, Dahl and Hinton, "On the importance of initialization and
      momentum in deep learning", ICML 2013.
    """
    return Trace(decay, nesterov, accumulator_dtype)


class EmaState(NamedTuple):
    """State of `ema`: the step count, the average and the decay."""

    count: jax.Array
    ema: Params
    hyperparams: dict[str, jax.Array]


@transform
class Ema(Transform):
    """See `ema`."""

    name = "ema"
    elementwise = True
    decay: ScalarOrSchedule = hp.field(0.9, hp.UNIT_CLOSED, decay=True)
    debias: bool = True
    accumulator_dtype: Any = None
    # The name the decay goes by in the state: `signum` calls it "beta", as its argument.
    hyperparam_name: str = "decay"

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "accumulator_dtype")

    def public_names(self) -> dict[str, str]:
        return {"decay": self.hyperparam_name}

    def init(self, params: Params) -> EmaState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        checks.complex_slot(
            f"{self.name}.init", "accumulator_dtype", self.accumulator_dtype, params
        )
        return EmaState(
            zero_count(), zeros_like(params, self.accumulator_dtype), self.init_hyperparams()
        )

    def update(
        self, updates: Updates, state: EmaState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, EmaState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.ema, "updates", "the state")
        h, count = state.hyperparams, safe_increment(state.count)
        d, c = decay_pair(h, "decay")
        new = jax.tree.map(lambda g, t: c * g + d * t, updates, state.ema)
        if self.debias:
            correction = hp.bias_correction(h, "decay", count)
            out = jax.tree.map(lambda t, g: (t / correction).astype(g.dtype), new, updates)
        else:
            out = jax.tree.map(lambda t, g: t.astype(g.dtype), new, updates)
        ema = jax.tree.map(lambda t, old: t.astype(old.dtype), new, state.ema)
        return out, EmaState(count, ema, state.hyperparams)


def ema(decay: float, debias: bool = True, accumulator_dtype: DTypeLike | None = None) -> Ema:
    r"""An exponential moving average of the updates (not of the parameters: `ema_params`).

    .. math::
       m \leftarrow (1 - \beta)\,g + \beta\,m, \qquad u = m / (1 - \beta^t)
       \ \text{(debiased)}

    Args:
      decay: :math:`\beta \in [0, 1]` (a dynamic hyperparameter, ``"decay"``).
      debias: divide by :math:`1 - \beta^t` so early averages are not biased to zero.
      accumulator_dtype: dtype of the average; ``None`` uses each parameter's dtype.

    Returns:
      The transform.

    Raises:
      ValueError: ``decay`` is outside [0, 1].

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.ema(0.9)
      >>> updates, _ = tx.update({"w": jnp.ones(1)}, tx.init({"w": jnp.zeros(1)}))
      >>> updates
      {'w': Array([1.], dtype=float32)}
    """
    return Ema(decay, debias, accumulator_dtype)
