"""Conformance entries of SM3, gradient noise, optimistic methods, Polyak SGD and FTRL."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset(
    {
        "add_noise",
        "ftrl",
        "noisy_sgd",
        "optimistic_adam",
        "optimistic_adam_v2",
        "optimistic_gradient_descent",
        "scale_by_ftrl",
        "sm3",
    }
)

# The conformance gradients have a squared global norm of about 110, so with this loss
# Polyak's step size is about 0.9: below max_learning_rate = 1, so f_min and eps show, and
# above the 0.5 the suite sets max_learning_rate to, so that shows too.
POLYAK_LOSS = {"value": 100.0}


def ftrl_schedule(count: jax.Array) -> jax.Array:
    """0.025, 0.05, 0.075, ... capped at 0.1 (module level: equal across factory calls)."""
    return jnp.minimum(0.025 * (count + 1), 0.1)


def _optimistic_adam() -> optx.Transform:
    """optax's deprecated first interface (it warns, as optax's does)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return optx.optimistic_adam(1e-2, 0.1)


def entries(register) -> None:
    # SM3.
    register("scale_by_sm3", optx.scale_by_sm3)
    register("scale_by_sm3/decaying", lambda: optx.scale_by_sm3(b1=0.5, b2=0.99))
    register("sm3", lambda: optx.sm3(0.1), repr_prefix="chain(")

    # Gradient noise.
    register("add_noise", lambda: optx.add_noise(0.01, 0.55, key=0))
    register("add_noise/typed_key", lambda: optx.add_noise(0.1, 0.3, key=jax.random.key(3)))
    register("noisy_sgd", lambda: optx.noisy_sgd(0.1, key=1), repr_prefix="chain(")

    # Optimistic methods.
    register("scale_by_optimistic_gradient", optx.scale_by_optimistic_gradient)
    register(
        "optimistic_gradient_descent",
        lambda: optx.optimistic_gradient_descent(0.1, alpha=0.5, beta=2.0),
        repr_prefix="chain(",
    )
    register("optimistic_adam_v2", lambda: optx.optimistic_adam_v2(1e-2), repr_prefix="chain(")
    register(
        "optimistic_adam_v2/no_nesterov",
        lambda: optx.optimistic_adam_v2(1e-2, beta=0.5, nesterov=False),
        repr_prefix="chain(",
    )
    register("optimistic_adam", _optimistic_adam, repr_prefix="chain(")

    # Polyak's step size: `update` needs the loss.
    register("scale_by_polyak", optx.scale_by_polyak, update_kwargs=POLYAK_LOSS)
    register(
        "scale_by_polyak/sps_plus",
        lambda: optx.scale_by_polyak(variant="sps+"),
        update_kwargs=POLYAK_LOSS,
    )
    register("polyak_sgd", optx.polyak_sgd, repr_prefix="chain(", update_kwargs=POLYAK_LOSS)

    # FTRL. Its linear slot z is a sum of large terms that cancel, so the suite compares
    # jit with eager relative to each leaf's scale (XLA fuses multiply-adds under jit).
    register("scale_by_ftrl", lambda: optx.scale_by_ftrl(0.1), needs_params=True)
    register(
        "scale_by_ftrl/f32_accumulator",
        lambda: optx.scale_by_ftrl(0.1, accumulator_dtype=jnp.float32),
        needs_params=True,
    )
    register("ftrl", lambda: optx.ftrl(0.1), needs_params=True, repr_prefix="chain(")
    register(
        "ftrl/schedule", lambda: optx.ftrl(ftrl_schedule), needs_params=True, repr_prefix="chain("
    )
    register(
        "ftrl/regularised",
        lambda: optx.ftrl(
            0.3,
            l1_regularization_strength=0.01,
            l2_regularization_strength=0.02,
            l2_shrinkage_regularization_strength=0.01,
            beta=0.5,
        ),
        needs_params=True,
        repr_prefix="chain(",
    )
