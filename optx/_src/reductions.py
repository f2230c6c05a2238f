"""Scalars reduced over a whole tree, in a dtype wide enough for an optimizer's estimates.

Learning-rate-free methods (Prodigy, D-Adaptation, DoG, Mechanic, MoMo) keep scalars such
as a distance estimate, sums of squared gradient norms or inner products with the
parameters. They are held in `scalar_dtype`: float32, or float64 where a parameter is
float64, so bfloat16 parameters still get float32 estimates. Each reduction widens the
leaves first, then sums one term per leaf (one reduction per leaf, elementwise maths
otherwise).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from optx._src import hyperparams as hp
from optx._src import placement
from optx._src.base import Params
from optx._src.moments import real_dtype


def scalar_dtype(params: Params) -> Any:
    """The estimates' dtype: float32, or wider where a parameter is (float64 under x64).

    Real also for complex parameters (float32 for complex64): norms and distances are real.
    """
    return real_dtype(
        jnp.result_type(jnp.float32, *(jnp.result_type(p) for p in jax.tree.leaves(params)))
    )


def total(terms: Any, dtype: Any) -> jax.Array:
    """The sum of scalar ``terms`` in ``dtype`` (zero for none)."""
    return sum(terms, start=jnp.zeros([], dtype))


def _wide(x: Any, dtype: Any) -> jax.Array:
    return jnp.asarray(x, jnp.promote_types(jnp.result_type(x), dtype))


def vdot(x: Any, y: Any, dtype: Any) -> jax.Array:
    """``<x, y>`` over every leaf of two trees of one structure, summed in ``dtype``.

    Real: of complex leaves, the real part ``Re(sum(conj(x) * y))``, the inner product of
    their real and imaginary parts (what a real step size or estimate is made of).
    """
    return total(
        (
            jnp.real(placement.vdot(_wide(a, dtype), _wide(b, dtype)))
            for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True)
        ),
        dtype,
    )


def sq_norm(x: Any, dtype: Any) -> jax.Array:
    """``||x||^2`` over every leaf, summed in ``dtype`` (real: ``x^H x`` of a complex leaf)."""
    return vdot(x, x, dtype)


def sq_distance(x: Any, y: Any, dtype: Any) -> jax.Array:
    """``||x - y||^2`` over every leaf of two trees of one structure, in ``dtype``."""
    diff = jax.tree.map(lambda a, b: _wide(a, dtype) - _wide(b, dtype), x, y)
    return sq_norm(diff, dtype)


def l1_norm(x: Any, dtype: Any) -> jax.Array:
    """``||x||_1`` over every leaf, summed in ``dtype``."""
    return total((jnp.sum(jnp.abs(_wide(a, dtype))) for a in jax.tree.leaves(x)), dtype)


def bias_correction(h: hp.HyperParams, name: str, count: jax.Array, dtype: Any) -> jax.Array:
    """``1 - b**count`` for the decay ``b`` = ``name`` of ``h``, computed in ``dtype``.

    As `hp.bias_correction` (from the stored ``1 - b``, without cancellation), in the
    estimates' dtype: float64 parameters get a float64 correction.
    """
    c = hp.complement(h, name).astype(dtype)
    return -jnp.expm1(jnp.asarray(count, dtype) * jnp.log1p(-c))
