"""Registry entries of the Adam family (nadam, nadamw, amsgrad, adamax, adamaxw, radam, their
building blocks, and the Keras conventions of `scale_by_adam`), loaded by `tests/registry.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset({"adamax", "adamaxw", "amsgrad", "nadam", "nadamw", "radam"})

CHAIN = "chain("


def falling_schedule(count: jax.Array) -> jax.Array:
    """0.05, 0.045, 0.0405, ...: a learning rate that changes every step."""
    return 0.05 * 0.9 ** count.astype(jnp.float32)


def entries(register: Callable[..., None]) -> None:
    """Registers this family's entries."""
    # RAdam's first steps (rho_t < 5) are momentum SGD: eps and eps_root act from step 6, and
    # the suite's 3 steps have rho_t <= 3, below any valid threshold (>= 4).
    radam_early = ("eps", "eps_root", "threshold")

    # Keras's conventions of Adam, AdamW and NAdam.
    register("scale_by_adam/keras_eps", lambda: optx.scale_by_adam(eps_placement="keras"))
    register(
        "scale_by_adam/nadam_schedule",
        lambda: optx.scale_by_adam(nesterov=True, momentum_decay=1.0),
    )
    register(
        "adam/keras",
        lambda: optx.adam(1e-2, eps=1e-7, eps_placement="keras"),
        repr_prefix=CHAIN,
    )
    register(
        "adamw/keras",
        lambda: optx.adamw(1e-2, eps=1e-7, weight_decay=4e-3, eps_placement="keras"),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    register("nadam", lambda: optx.nadam(3e-3), repr_prefix=CHAIN)
    register(
        "nadam/keras",
        lambda: optx.nadam(1e-2, eps=1e-7, momentum_decay=1.0),
        repr_prefix=CHAIN,
    )
    register(
        "nadam/torch_schedule_f32",
        lambda: optx.nadam(
            falling_schedule, momentum_decay=4e-3, mu_dtype=jnp.float32, nu_dtype=jnp.float32
        ),
        repr_prefix=CHAIN,
    )
    register("nadamw", lambda: optx.nadamw(3e-3), needs_params=True, repr_prefix=CHAIN)
    register(
        "nadamw/keras_mask",
        lambda: optx.nadamw(1e-2, eps=1e-7, weight_decay=0.1, mask="kernel", momentum_decay=1.0),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    register("scale_by_amsgrad", optx.scale_by_amsgrad)
    register("scale_by_amsgrad/keras", lambda: optx.scale_by_amsgrad(eps_placement="keras"))
    register(
        "scale_by_amsgrad/no_bias_correction",
        lambda: optx.scale_by_amsgrad(bias_correction_mu=False, bias_correction_nu=False),
    )
    register(
        "scale_by_amsgrad/f32_moments",
        lambda: optx.scale_by_amsgrad(mu_dtype=jnp.float32, nu_dtype=jnp.float32),
    )
    register("amsgrad", lambda: optx.amsgrad(1e-2), repr_prefix=CHAIN)
    register(
        "amsgrad/keras",
        lambda: optx.amsgrad(1e-2, eps=1e-7, eps_placement="keras"),
        repr_prefix=CHAIN,
    )
    register(
        "amsgrad/schedule",
        lambda: optx.amsgrad(falling_schedule, eps_root=1e-8),
        repr_prefix=CHAIN,
    )

    register("scale_by_adamax", optx.scale_by_adamax)
    register("scale_by_adamax/keras", lambda: optx.scale_by_adamax(eps_placement="keras"))
    register(
        "scale_by_adamax/f32_moments",
        lambda: optx.scale_by_adamax(mu_dtype=jnp.float32, nu_dtype=jnp.float32),
    )
    register("adamax", lambda: optx.adamax(1e-2), repr_prefix=CHAIN)
    register(
        "adamax/keras",
        lambda: optx.adamax(1e-2, eps=1e-7, eps_placement="keras"),
        repr_prefix=CHAIN,
    )
    register("adamaxw", lambda: optx.adamaxw(1e-2), needs_params=True, repr_prefix=CHAIN)
    register(
        "adamaxw/mask_keras",
        lambda: optx.adamaxw(1e-2, weight_decay=0.1, mask="kernel", eps_placement="keras"),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    register("scale_by_radam", optx.scale_by_radam, unobservable=radam_early)
    register(
        "scale_by_radam/nesterov_f32",
        lambda: optx.scale_by_radam(nesterov=True, mu_dtype=jnp.float32, nu_dtype=jnp.float32),
        unobservable=radam_early,
    )
    register("radam", lambda: optx.radam(1e-2), repr_prefix=CHAIN, unobservable=radam_early)
    register(
        "radam/schedule",
        lambda: optx.radam(falling_schedule, threshold=6.0),
        repr_prefix=CHAIN,
        unobservable=radam_early,
    )
