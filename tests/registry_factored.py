"""Registry entries of the factored and layer-wise family (adafactor, lamb, lars, novograd,
fromage and their building blocks), loaded by `tests/registry.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset({"fromage", "lamb", "lars", "novograd"})

CHAIN = "chain("


def rising_schedule(count: jax.Array) -> jax.Array:
    """0.01, 0.02, 0.03, ... capped at 0.05: a learning rate that changes every step."""
    return jnp.minimum(0.01 * (count + 1.0), 0.05)


def matrices(params: optx.Params) -> optx.Params:
    """A mask callable: the leaves of rank >= 2."""
    return jax.tree.map(lambda p: jnp.ndim(p) >= 2, params)


def entries(register: Callable[..., None]) -> None:
    """Registers this family's entries."""
    # 1e-30 added to squared gradients of order 1, and a floor of 1e-3 under parameter
    # scales of order 1, cannot show in a few steps.
    tiny = ("epsilon", "min_scale")
    # The norms of the test's parameters and updates are far above any small floor.
    floor = ("min_norm",)

    register("scale_by_factored_rms", optx.scale_by_factored_rms, unobservable=tiny[:1])
    register(
        "scale_by_factored_rms/factored",
        lambda: optx.scale_by_factored_rms(min_dim_size_to_factor=2, decay_rate=0.5),
        unobservable=tiny[:1],
    )
    register(
        "scale_by_factored_rms/keras_last_axes",
        lambda: optx.scale_by_factored_rms(min_dim_size_to_factor=1, factor_axes="last"),
        unobservable=tiny[:1],
    )
    register(
        "scale_by_factored_rms/f32_nu",
        lambda: optx.scale_by_factored_rms(min_dim_size_to_factor=1, nu_dtype=jnp.float32),
        unobservable=tiny[:1],
    )
    register(
        "scale_by_factored_rms/unfactored",
        lambda: optx.scale_by_factored_rms(factored=False),
        unobservable=tiny[:1],
    )
    register(
        "scale_by_param_block_rms",
        optx.scale_by_param_block_rms,
        needs_params=True,
        unobservable=tiny[1:],
    )
    register("adafactor", optx.adafactor, needs_params=True, repr_prefix=CHAIN, unobservable=tiny)
    register(
        "adafactor/factored_momentum_decay",
        lambda: optx.adafactor(
            1e-2,
            min_dim_size_to_factor=2,
            momentum=0.9,
            weight_decay_rate=1e-3,
            weight_decay_mask="kernel",
        ),
        needs_params=True,
        repr_prefix=CHAIN,
        unobservable=tiny,
    )
    register(
        "adafactor/keras",
        lambda: optx.adafactor(
            0.8,
            min_dim_size_to_factor=1,
            eps=1e-30,
            factor_axes="last",
            relative_step=True,
        ),
        needs_params=True,
        repr_prefix=CHAIN,
        unobservable=tiny,
    )
    register(
        "adafactor/schedule_f32_nu",
        lambda: optx.adafactor(
            rising_schedule,
            min_dim_size_to_factor=1,
            clipping_threshold=None,
            multiply_by_parameter_scale=False,
            nu_dtype=jnp.float32,
        ),
        repr_prefix=CHAIN,
        unobservable=tiny[:1],
    )

    register("scale_by_trust_ratio", optx.scale_by_trust_ratio, needs_params=True)
    register(
        "scale_by_trust_ratio/min_norm_coefficient",
        lambda: optx.scale_by_trust_ratio(min_norm=1e-3, trust_coefficient=0.1, eps=1e-3),
        needs_params=True,
        unobservable=floor,
    )
    register("lamb", lambda: optx.lamb(1e-2), needs_params=True, repr_prefix=CHAIN)
    register(
        "lamb/mask",
        lambda: optx.lamb(1e-2, weight_decay=0.1, mask="kernel"),
        needs_params=True,
        repr_prefix=CHAIN,
    )
    register(
        "lamb/keras_decay_outside",
        lambda: optx.lamb(1e-2, eps=1e-7, weight_decay=0.1, weight_decay_placement="outside"),
        needs_params=True,
        repr_prefix=CHAIN,
    )
    register(
        "lamb/f32_moments",
        lambda: optx.lamb(1e-2, mu_dtype=jnp.float32, nu_dtype=jnp.float32),
        needs_params=True,
        repr_prefix=CHAIN,
    )
    register("lars", lambda: optx.lars(0.1), needs_params=True, repr_prefix=CHAIN)
    register(
        "lars/masks_nesterov",
        lambda: optx.lars(
            0.1,
            weight_decay=1e-2,
            weight_decay_mask=matrices,
            trust_ratio_mask="kernel|layers",
            nesterov=True,
        ),
        needs_params=True,
        repr_prefix=CHAIN,
    )
    register(
        "lars/schedule_f32_trace",
        lambda: optx.lars(rising_schedule, accumulator_dtype=jnp.float32),
        needs_params=True,
        repr_prefix=CHAIN,
    )
    register("scale_by_novograd", optx.scale_by_novograd, needs_params=True)
    register(
        "scale_by_novograd/f32_moments",
        lambda: optx.scale_by_novograd(mu_dtype=jnp.float32, nu_dtype=jnp.float32),
        needs_params=True,
    )
    register("novograd", lambda: optx.novograd(1e-2), needs_params=True, repr_prefix=CHAIN)
    register(
        "novograd/weight_decay",
        lambda: optx.novograd(1e-2, weight_decay=1e-2, eps_root=1e-8),
        needs_params=True,
        repr_prefix=CHAIN,
    )
    register(
        "fromage",
        lambda: optx.fromage(1e-2),
        needs_params=True,
        repr_prefix=CHAIN,
        unobservable=floor,
    )
    register(
        "fromage/schedule",
        lambda: optx.fromage(rising_schedule),
        needs_params=True,
        repr_prefix=CHAIN,
        unobservable=floor,
    )
