"""`monitored`: per-step figures of an optimizer, recorded in its state for logging."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, tree_reduce
from optx._src import hyperparams as hp
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    Transform,
    Updates,
    find_one,
    find_states,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import accepts_extra, call_update
from optx._src.loss_scale import DynamicLossScaleState
from optx._src.summary import walk_transforms

_F32 = jnp.float32
METRICS = (
    "count",
    "grad_norm",
    "learning_rate",
    "skipped_steps",
    "update_norm",
    "update_ratio",
)


class MonitoredState(NamedTuple):
    """State of `monitored`.

    Attributes:
      metrics: the figures of the last step, by name (see `monitored`): float32 scalars, and
        int32 ``count`` and ``skipped_steps``.
      inner_state: the wrapped transform's state.
    """

    metrics: dict[str, jax.Array]
    inner_state: OptState


@transform
class Monitored(Transform):
    """See `monitored`."""

    name = "monitored"
    # Its own maths is global norms only: it computes the same on flat buffers.
    elementwise = True
    inner: GradientTransformationLike = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        checks.transform(self.name, "inner", self.inner)

    def init(self, params: Params) -> MonitoredState:
        metrics = {name: jnp.zeros([], _F32) for name in METRICS}
        metrics["count"] = zero_count()
        metrics["skipped_steps"] = zero_count()
        metrics["learning_rate"] = jnp.full([], jnp.nan, _F32)
        return MonitoredState(metrics, self.inner.init(params))

    def update(
        self, updates: Updates, state: MonitoredState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, MonitoredState]:
        checks.float_updates("monitored.update", updates, complex_ok=True)
        old_inner = state.inner_state
        grad_norm = _norm(updates)
        param_norm = _norm(params) if params is not None else jnp.zeros([], _F32)
        # XLA:CPU does not fuse a reduction into the inner update's elementwise loops, and
        # sharing the gradients' reads with them made the step up to 2x slower: reduce the
        # gradients first, on their own.
        (grad_norm, param_norm), updates = jax.lax.optimization_barrier(
            ((grad_norm, param_norm), updates)
        )
        new_updates, new_inner = call_update(
            self.inner, accepts_extra(self.inner), updates, old_inner, params, extra
        )
        update_norm = _norm(new_updates)
        positive = param_norm > 0
        ratio = jnp.where(positive, update_norm / jnp.where(positive, param_norm, 1), 0)
        old = state.metrics
        metrics = {
            "count": safe_increment(old["count"]),
            "grad_norm": grad_norm,
            "learning_rate": _learning_rate(self.inner, old_inner, new_inner),
            "skipped_steps": _add_saturating(old["skipped_steps"], _skips(old_inner, new_inner)),
            "update_norm": update_norm,
            "update_ratio": ratio.astype(_F32),
        }
        return new_updates, MonitoredState(metrics, new_inner)


def _norm(tree: Any) -> jax.Array:
    """The global L2 norm in float32, whatever the leaves' dtypes (moduli of complex ones)."""
    return tree_reduce.norm(jax.tree.map(_single, tree)).astype(_F32)


def _single(x: Any) -> jax.Array:
    return jnp.asarray(x, jnp.complex64 if jnp.iscomplexobj(x) else _F32)


def _add_saturating(count: jax.Array, n: jax.Array) -> jax.Array:
    """``count + n`` for int32 counters, saturating at the maximum."""
    room = jnp.iinfo(jnp.int32).max - count
    return jnp.where(n > room, jnp.iinfo(jnp.int32).max, count + n).astype(jnp.int32)


def _skips(old: OptState, new: OptState) -> jax.Array:
    """Non-finite steps the skipping wrappers inside counted in this update."""
    total = jnp.zeros([], jnp.int32)
    # `apply_if_finite`'s state, optx's or optax's: counts every non-finite step.
    for o, n in zip(_counting(old), _counting(new), strict=True):
        total = total + (n.total_notfinite - o.total_notfinite).astype(jnp.int32)
    # `dynamic_loss_scale` counts applied steps only: a skip leaves that count and changes
    # the scale or the growth count (which a step that did not reach it leaves alone).
    pairs = zip(
        find_states(old, DynamicLossScaleState),
        find_states(new, DynamicLossScaleState),
        strict=True,
    )
    for o, n in pairs:
        touched = (n.scale != o.scale) | (n.growth_count != o.growth_count)
        total = total + ((n.applied_count == o.applied_count) & touched).astype(jnp.int32)
    return total


def _counting(state: OptState) -> list[Any]:
    found: list[Any] = []

    def visit(node: Any) -> bool:
        if isinstance(node, tuple) and "total_notfinite" in getattr(node, "_fields", ()):
            found.append(node)
            return True
        return False

    jax.tree_util.tree_flatten(state, is_leaf=visit)
    return found


def _learning_rate(inner: Any, old: OptState, new: OptState) -> jax.Array:
    """The learning rate of this step, or NaN where none can be read (see `monitored`)."""
    walks = zip(
        walk_transforms(inner, old, api="monitored"), walk_transforms(inner, new), strict=True
    )
    for (_, tx, _), (_, _, after) in walks:
        if isinstance(tx, Transform):
            # The value in force for this step (a schedule's is put there by `update`).
            stored = getattr(after, "hyperparams", None)
            if isinstance(stored, hp.HyperParams) and "learning_rate" in stored:
                return jnp.asarray(stored["learning_rate"], _F32)
        else:
            # Another library's transform: a hyperparameter in its state, as this step left
            # it (optax's `inject_hyperparams` stores the step's value during the update).
            found = _named_learning_rate(after)
            if found is not None:
                return found
    found = _named_learning_rate(new)
    return found if found is not None else jnp.full([], jnp.nan, _F32)


def _named_learning_rate(state: OptState) -> jax.Array | None:
    for name, value in hp.get_hyperparams(state).items():
        if (name == "learning_rate" or name.endswith("/learning_rate")) and jnp.shape(value) == ():
            return jnp.asarray(value, _F32)
    return None


def monitored(inner: GradientTransformationLike) -> Monitored:
    r"""Wraps ``inner`` to record, every step, figures worth plotting into the state.

    The figures are computed inside the same (jitted) ``update``, each norm as one
    reduction, and kept in ``state.metrics`` (read them anywhere in a chain with
    `monitor_metrics`) so a jitted training step can return them for logging:

    * ``grad_norm``: the global L2 norm of the updates ``inner`` receives (the gradients,
      when ``monitored`` comes first);
    * ``update_norm``: the global L2 norm of the updates ``inner`` returns;
    * ``update_ratio``: ``update_norm / param_norm``, with ``param_norm`` the global norm of
      the ``params`` given to ``update``; 0 when no ``params`` are given or their norm is 0
      (never NaN from the division);
    * ``learning_rate``: the learning rate this step used: the first transform inside
      ``inner`` (outer before inner, chains in order) with a ``learning_rate`` argument
      gives it, the schedule's value at its step count for a schedule, the value in its
      state otherwise; for a transform of another library (optax's
      ``inject_hyperparams``), a hyperparameter named ``learning_rate`` in its state after
      the step. NaN when ``inner`` has none (e.g. ``scale_by_adam`` alone), or when a
      schedule sits inside a transform the search cannot see into;
    * ``skipped_steps``: the non-finite steps counted since `init` by the `apply_if_finite`
      (optx's or optax's; counting the steps it applies after ``max_consecutive_errors``
      too) and `dynamic_loss_scale` states inside ``inner`` (int32; 0 if there are none);
    * ``count``: the steps this transform has seen (int32, saturating).

    Norms are float32 whatever the updates' dtype. Before the first step, every figure is
    0 but ``learning_rate``, which is NaN.

    Cost: each norm is one more pass over an array the step touches anyway, and the updates
    are written out once more to be reduced. For Adam on 1M float32 parameters under
    `jax.jit` with donated buffers, XLA:CPU's step moves 76 MB instead of 40 MB. Reading the
    parameters is 12 of those (XLA copies a donated buffer that two operations read): call
    ``update`` without ``params`` to skip it, and ``update_ratio`` stays 0.

    Args:
      inner: the transform to watch (an optimizer, a chain, an optax transform).

    Returns:
      The transform; its state is `MonitoredState`.

    Raises:
      TypeError: ``inner`` is not a transform.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.monitored(optx.sgd(0.5))
      >>> params = {"w": jnp.array([3.0, 4.0])}
      >>> step = jax.jit(tx.update)
      >>> updates, state = step({"w": jnp.array([0.6, 0.8])}, tx.init(params), params)
      >>> {k: round(float(v), 4) for k, v in optx.monitor_metrics(state).items()}
      {'count': 1.0, 'grad_norm': 1.0, 'learning_rate': 0.5, 'skipped_steps': 0.0,
       'update_norm': 0.5, 'update_ratio': 0.1}
    """
    return Monitored(inner)


def monitor_metrics(state: OptState) -> dict[str, jax.Array]:
    """The figures that `monitored` recorded, from a state that holds one anywhere.

    Args:
      state: a state holding exactly one `MonitoredState` (in a chain, a wrapper, optax's
        containers); traced states work, so a jitted step can return the figures.

    Returns:
      ``{"count", "grad_norm", "learning_rate", "skipped_steps", "update_norm",
      "update_ratio"}`` to scalar arrays (see `monitored`).

    Raises:
      ValueError: ``state`` holds no `MonitoredState`, or several.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.chain(optx.clip_by_global_norm(1.0), optx.monitored(optx.adam(1e-3)))
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> sorted(optx.monitor_metrics(state))
      ['count', 'grad_norm', 'learning_rate', 'skipped_steps', 'update_norm', 'update_ratio']
    """
    return dict(find_one(state, MonitoredState, "monitor_metrics", "monitored").metrics)
