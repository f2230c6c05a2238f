"""Registry entries of lazy Adam (`lazy_adam.py`), loaded by `tests/registry.py`.

The suite feeds dense gradients, on which lazy Adam is Adam; `tests/test_sparse.py` checks
its row-sparse path.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset({"lazy_adam"})


def entries(register: Callable[..., None]) -> None:
    """Registers this family's entries."""
    register("scale_by_lazy_adam", optx.scale_by_lazy_adam)
    register(
        "scale_by_lazy_adam/keras_f32_moments",
        lambda: optx.scale_by_lazy_adam(
            eps_placement="keras", mu_dtype=jnp.float32, nu_dtype=jnp.float32
        ),
    )
    register("lazy_adam", lambda: optx.lazy_adam(1e-2), repr_prefix="chain(")
    register(
        "lazy_adam/eps_root", lambda: optx.lazy_adam(1e-2, eps_root=1e-8), repr_prefix="chain("
    )
