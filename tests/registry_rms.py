"""Registry entries of the RMS-style family (rmsprop, adagrad, adadelta) and SGD's Keras
convention, loaded by `tests/registry.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset({"adagrad", "rmsprop"})

CHAIN = "chain("


def halving_schedule(count: jax.Array) -> jax.Array:
    """0.1, 0.05, 0.025, ...: a learning rate that changes every step."""
    return 0.1 * 0.5 ** count.astype(jnp.float32)


def entries(register: Callable[..., None]) -> None:
    """Registers this family's entries."""
    # Initial values of the slots are read by `init` only.
    rms_init = ("initial_scale",)
    register("scale_by_rms", optx.scale_by_rms, unobservable=rms_init)
    register(
        "scale_by_rms/bias_correction_eps_outside",
        lambda: optx.scale_by_rms(bias_correction=True, eps_in_sqrt=False, initial_scale=0.5),
        unobservable=rms_init,
    )
    register(
        "scale_by_rms/f32_nu",
        lambda: optx.scale_by_rms(nu_dtype=jnp.float32),
        unobservable=rms_init,
    )
    register("scale_by_stddev", optx.scale_by_stddev, unobservable=rms_init)
    register(
        "scale_by_stddev/bias_correction_eps_outside",
        lambda: optx.scale_by_stddev(bias_correction=True, eps_in_sqrt=False, initial_scale=0.5),
        unobservable=rms_init,
    )
    register(
        "scale_by_stddev/f32_moments",
        lambda: optx.scale_by_stddev(mu_dtype=jnp.float32, nu_dtype=jnp.float32),
        unobservable=rms_init,
    )
    register("rmsprop", lambda: optx.rmsprop(1e-2), repr_prefix=CHAIN, unobservable=rms_init)
    register(
        "rmsprop/momentum_nesterov",
        lambda: optx.rmsprop(1e-2, momentum=0.9, nesterov=True),
        repr_prefix=CHAIN,
        unobservable=rms_init,
    )
    # Keras's RMSprop(centered=True, momentum=0.9) with its epsilon.
    register(
        "rmsprop/keras_centered_momentum",
        lambda: optx.rmsprop(1e-2, eps=1e-7, centered=True, momentum=0.9),
        repr_prefix=CHAIN,
        unobservable=rms_init,
    )
    register(
        "rmsprop/schedule_bias_correction",
        lambda: optx.rmsprop(halving_schedule, eps_in_sqrt=False, bias_correction=True),
        repr_prefix=CHAIN,
        unobservable=rms_init,
    )
    register(
        "rmsprop/f32_accumulators",
        lambda: optx.rmsprop(
            1e-2, centered=True, momentum=0.5, initial_scale=1.0, accumulator_dtype=jnp.float32
        ),
        repr_prefix=CHAIN,
        unobservable=rms_init,
    )

    rss_init = ("initial_accumulator_value",)
    register("scale_by_rss", optx.scale_by_rss, unobservable=rss_init)
    register(
        "scale_by_rss/eps_outside",
        lambda: optx.scale_by_rss(eps_in_sqrt=False),
        unobservable=rss_init,
    )
    register(
        "scale_by_rss/f32_accumulator",
        lambda: optx.scale_by_rss(accumulator_dtype=jnp.float32),
        unobservable=rss_init,
    )
    register("adagrad", lambda: optx.adagrad(0.1), repr_prefix=CHAIN, unobservable=rss_init)
    register(
        "adagrad/eps_outside_schedule",
        lambda: optx.adagrad(halving_schedule, 0.0, eps_in_sqrt=False),
        repr_prefix=CHAIN,
        unobservable=rss_init,
    )

    register("scale_by_adadelta", optx.scale_by_adadelta)
    register(
        "scale_by_adadelta/f32_accumulators",
        lambda: optx.scale_by_adadelta(accumulator_dtype=jnp.float32),
    )
    register("adadelta", optx.adadelta, needs_params=True, repr_prefix=CHAIN)
    register(
        "adadelta/keras",
        lambda: optx.adadelta(1e-3, rho=0.95, eps=1e-7),
        needs_params=True,
        repr_prefix=CHAIN,
    )
    register(
        "adadelta/weight_decay_mask",
        lambda: optx.adadelta(0.5, weight_decay=1e-2, weight_decay_mask="kernel"),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    register(
        "sgd/keras_momentum",
        lambda: optx.sgd(0.1, momentum=0.9, momentum_convention="keras"),
        repr_prefix=CHAIN,
    )
    register(
        "sgd/keras_nesterov_schedule",
        lambda: optx.sgd(halving_schedule, 0.5, True, momentum_convention="keras"),
        repr_prefix=CHAIN,
    )
    register(
        "sgd/keras_f32_accumulator",
        lambda: optx.sgd(
            0.1, momentum=0.9, accumulator_dtype=jnp.float32, momentum_convention="keras"
        ),
        repr_prefix=CHAIN,
    )
