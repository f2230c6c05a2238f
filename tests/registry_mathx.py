"""Registry entries of the norm-based transforms (see `registry.py`).

`adaptive_grad_clip` (agc.py), `keep_params_nonnegative` (nonnegative.py),
`normalize_by_update_norm` and `scale_by_param_block_norm` (norm_scaling.py). The
per-example clipping functions and `scale_gradient` build no transform.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset({"adaptive_grad_clip"})
NOT_FACTORIES = frozenset(
    {"per_example_global_norm_clip", "per_example_layer_norm_clip", "scale_gradient"}
)


def clipping_warmup(count: jax.Array) -> jax.Array:
    """An AGC ratio schedule: 0.02, 0.04, ... capped at 0.1."""
    return jnp.minimum(0.02 * (count + 1), 0.1)


def entries(register) -> None:
    """Registers this family's entries."""
    # The suite's gradients (scale 2) are larger than its parameters (scale 1): a ratio of
    # 0.1 clips every unit, so the ratio shows.
    register("adaptive_grad_clip", lambda: optx.adaptive_grad_clip(0.1), needs_params=True)
    register(
        "adaptive_grad_clip/schedule",
        lambda: optx.adaptive_grad_clip(clipping_warmup, eps=0.5),
        needs_params=True,
    )
    register("keep_params_nonnegative", optx.keep_params_nonnegative, needs_params=True)
    register("normalize_by_update_norm", optx.normalize_by_update_norm)
    register(
        "normalize_by_update_norm/descent",
        lambda: optx.normalize_by_update_norm(scale_factor=-0.1, eps=0.0),
    )
    # The default floor (1e-3) is far below the suite's parameter norms; a floor of 3
    # exceeds the norms of its vectors and scalar, so it shows.
    register(
        "scale_by_param_block_norm",
        optx.scale_by_param_block_norm,
        needs_params=True,
        unobservable=("min_scale",),
    )
    register(
        "scale_by_param_block_norm/large_floor",
        lambda: optx.scale_by_param_block_norm(3.0),
        needs_params=True,
    )
