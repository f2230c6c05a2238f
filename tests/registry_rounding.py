"""Conformance entries of the low-precision update rounding: Kahan and stochastic rounding.

Both read the parameters; the suite's bfloat16 and mixed trees exercise their rounding, its
float32 trees their passthrough.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS: frozenset[str] = frozenset()


def entries(register) -> None:
    register("kahan_summation", optx.kahan_summation, needs_params=True)
    register(
        "kahan_summation/f32_residual",
        lambda: optx.kahan_summation(jnp.float32),
        needs_params=True,
    )
    register("stochastic_rounding", lambda: optx.stochastic_rounding(1), needs_params=True)
    register(
        "stochastic_rounding/typed_key",
        lambda: optx.stochastic_rounding(jax.random.key(3)),
        needs_params=True,
    )
