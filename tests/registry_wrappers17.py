"""Registry entries of optax's wrapper transforms (see `registry.py`).

`MultiSteps` (and `accumulate_gradients`' new options), `apply_every`, `snapshot`,
`monitor` with `measure_with_ema`, `conditionally_transform`, `conditionally_mask`,
`freeze` and `selective_transform`. `measure_with_ema` returns a measurement, not updates:
it is exercised inside `monitor` (``repr`` then starts with ``monitor(``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset(
    {
        "conditionally_mask",
        "conditionally_transform",
        "freeze",
        "measure_with_ema",
        "monitor",
        "selective_transform",
        "snapshot",
    }
)
NOT_FACTORIES = frozenset(
    {
        "incremental_update",
        "microbatch",
        "periodic_update",
        "skip_large_updates",
        "skip_not_finite",
    }
)


# Module-level callables (a lambda in a factory would make every build a new configuration).
def growing_k(gradient_step: jax.Array) -> jax.Array:
    """Micro-steps per update: 1, 2, 3, then 3."""
    return jnp.minimum(gradient_step + 1, 3)


def odd_steps(step: jax.Array) -> jax.Array:
    """Every other call, from the second."""
    return step % 2 == 1


def after_first(step: jax.Array) -> jax.Array:
    """Every call but the first."""
    return step >= 1


def is_large(updates: optx.Updates) -> jax.Array:
    """Whether the global norm exceeds 1."""
    return optx.tree.norm(updates) > 1.0


def decay_warmup(count: jax.Array) -> jax.Array:
    """An EMA decay schedule: 0.5, 0.75, ... capped at 0.9."""
    return jnp.minimum(1.0 - 0.5 / (1.0 + count), 0.9)


def vectors(params: optx.Params) -> optx.Params:
    """A mask: the leaves of rank < 2."""
    return jax.tree.map(lambda p: jnp.ndim(p) < 2, params)


def entries(register) -> None:
    """Registers this area's entries."""
    register("MultiSteps", lambda: optx.MultiSteps(optx.adam(1e-2), every_k_schedule=2))
    register(
        "MultiSteps/schedule_sum_skip",
        lambda: optx.MultiSteps(
            optx.sgd(0.1, momentum=0.9),
            every_k_schedule=growing_k,
            use_grad_mean=False,
            should_skip_update_fn=optx.skip_not_finite,
        ),
    )
    register(
        "accumulate_gradients/schedule_skip",
        lambda: optx.accumulate_gradients(
            optx.adam(1e-2), growing_k, should_skip_update_fn=optx.skip_not_finite
        ),
    )
    register("apply_every", lambda: optx.apply_every(2))
    register("snapshot", lambda: optx.snapshot("norm", optx.tree.norm))
    register("monitor", lambda: optx.monitor({"norm": optx.tree.norm}))
    register(
        "measure_with_ema",
        lambda: optx.monitor(
            {"norm": optx.tree.norm, "large": optx.measure_with_ema(is_large, 0.9)}
        ),
        repr_prefix="monitor(",
    )
    register(
        "measure_with_ema/schedule",
        lambda: optx.monitor({"norm": optx.measure_with_ema(optx.tree.norm, decay_warmup)}),
        repr_prefix="monitor(",
    )
    register(
        "conditionally_transform",
        lambda: optx.conditionally_transform(optx.adam(1e-2), odd_steps),
    )
    register(
        "conditionally_mask",
        lambda: optx.conditionally_mask(optx.sgd(0.1, momentum=0.9), after_first),
    )
    register("freeze", lambda: optx.freeze(vectors), repr_prefix="masked(")
    register(
        "selective_transform",
        lambda: optx.selective_transform(optx.adam(1e-2), freeze_mask=False),
        repr_prefix="partition(",
    )
