"""Registry entries of the newer methods (see `registry.py`).

Families: `muon.py` (scale_by_muon, scale_by_shape, muon), `adopt.py`, `ademamix.py` and
`prodigy.py`. `scale_by_muon` and `scale_by_shape` need matrices, so their entries are
masked to the suite's 2-D leaves (``repr`` then starts with ``masked(``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset({"ademamix", "adopt", "muon"})

CHAIN = "chain("
MASKED = "masked("
PARTITION = "partition("


# Module-level callables (a lambda in a factory would make every build a new configuration).
def matrices(params: optx.Params) -> optx.Params:
    """A mask: the 2-D leaves."""
    return jax.tree.map(lambda p: jnp.ndim(p) == 2, params)


def transposed_matrices(params: optx.Params) -> optx.Params:
    """Muon dimension numbers: the 2-D leaves as ``(out, in)``, the rest left to AdamW."""
    return jax.tree.map(
        lambda p: optx.contrib.MuonDimensionNumbers(1, 0) if jnp.ndim(p) == 2 else None, params
    )


def b3_warmup(count: jax.Array) -> jax.Array:
    """A slow-EMA decay schedule: 0.9, 0.95, 0.97, ... towards 0.999."""
    return jnp.minimum(1.0 - 0.1 / (1.0 + count), 0.999)


def alpha_warmup(count: jax.Array) -> jax.Array:
    """An alpha schedule: 1, 2, 3, ... capped at 5."""
    return jnp.minimum(1.0 + count, 5.0)


def cosine_multiplier(count: jax.Array) -> jax.Array:
    """A learning-rate multiplier from 1 down over 10 steps."""
    t = jnp.minimum(count, 10).astype(jnp.float32) / 10
    return 0.5 * (1 + jnp.cos(jnp.pi * t))


def adopt_bound(count: jax.Array) -> jax.Array:
    """A tighter clipping bound than ADOPT's default: ``0.5 * count ** 0.25``."""
    return 0.5 * jnp.asarray(count, jnp.float32) ** 0.25


def entries(register) -> None:
    """Registers this family's entries."""
    # ADOPT. The first update is zero; b1 shows from the second step.
    register("scale_by_adopt", optx.scale_by_adopt)
    register(
        "scale_by_adopt/nesterov_no_clipping",
        lambda: optx.scale_by_adopt(nesterov=True, use_clipping=False),
    )
    register(
        "scale_by_adopt/f32_moments",
        lambda: optx.scale_by_adopt(
            mu_dtype=jnp.float32, nu_dtype=jnp.float32, clip_value_fn=adopt_bound
        ),
    )
    register("adopt", lambda: optx.adopt(1e-2), repr_prefix=CHAIN)

    # AdEMAMix.
    register("scale_by_ademamix", optx.scale_by_ademamix)
    register(
        "scale_by_ademamix/schedules",
        lambda: optx.scale_by_ademamix(b3=b3_warmup, alpha=alpha_warmup, eps_root=1e-8),
    )
    register("scale_by_ademamix/f32_moments", lambda: optx.scale_by_ademamix(mu_dtype=jnp.float32))
    register("ademamix", lambda: optx.ademamix(1e-2), needs_params=True, repr_prefix=CHAIN)
    register(
        "ademamix/weight_decay",
        lambda: optx.ademamix(1e-2, b3=0.99, weight_decay=0.1, mask="kernel"),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    # Prodigy. The estimate grows only when <g_t, x0 - x_t> is positive enough; with the
    # suite's independent random gradients it does not within three steps at the default
    # coefficient, so estim_lr_coef cannot show. With d0 = 1e-2 and a coefficient of 100 it
    # grows at the third step.
    register(
        "scale_by_prodigy",
        optx.scale_by_prodigy,
        needs_params=True,
        unobservable=("estim_lr_coef",),
    )
    register(
        "scale_by_prodigy/large_d0",
        lambda: optx.scale_by_prodigy(
            estim_lr0=1e-2, estim_lr_coef=100.0, beta3=0.9, weight_decay=0.01
        ),
        needs_params=True,
    )
    register(
        "scale_by_prodigy/safeguard_schedule",
        lambda: optx.scale_by_prodigy(
            cosine_multiplier, estim_lr0=1e-2, estim_lr_coef=100.0, safeguard_warmup=True
        ),
        needs_params=True,
    )
    register(
        "prodigy",
        lambda: optx.prodigy(estim_lr0=1e-2, estim_lr_coef=100.0),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    # Muon and its shape factor. AOL and Schatten rescale without eps (as optax), so eps
    # cannot show with them.
    register(
        "scale_by_muon", lambda: optx.masked(optx.scale_by_muon(), matrices), repr_prefix=MASKED
    )
    register(
        "scale_by_muon/keras",
        lambda: optx.masked(optx.scale_by_muon(eps=1e-7, momentum_convention="keras"), matrices),
        repr_prefix=MASKED,
    )
    register(
        "scale_by_muon/adaptive_aol_dion",
        lambda: optx.masked(
            optx.scale_by_muon(
                "dion", nesterov=False, adaptive=True, preconditioning="aol", mu_dtype=jnp.float32
            ),
            matrices,
        ),
        repr_prefix=MASKED,
        unobservable=("eps",),
    )
    register(
        "scale_by_muon/schatten",
        lambda: optx.masked(optx.scale_by_muon(preconditioning="schatten"), matrices),
        repr_prefix=MASKED,
        unobservable=("eps",),
    )
    register(
        "scale_by_muon/spectral",
        lambda: optx.masked(optx.scale_by_muon(preconditioning="spectral"), matrices),
        repr_prefix=MASKED,
    )
    # Dimension numbers (the suite's leaves are at most 2-D: transposed matrices take the
    # N-D path, a batch of one).
    register(
        "scale_by_muon/dimension_numbers",
        lambda: optx.masked(
            optx.scale_by_muon(
                weight_dimension_numbers=optx.contrib.MuonDimensionNumbers((-1,), 0)
            ),
            matrices,
        ),
        repr_prefix=MASKED,
    )
    register(
        "scale_by_shape", lambda: optx.masked(optx.scale_by_shape(), matrices), repr_prefix=MASKED
    )
    register(
        "scale_by_shape/consistent_rms",
        lambda: optx.masked(optx.scale_by_shape(0.2), matrices),
        repr_prefix=MASKED,
    )
    register("muon", lambda: optx.muon(1e-2), needs_params=True, repr_prefix=PARTITION)
    register(
        "muon/keras",
        lambda: optx.muon(
            1e-2,
            eps=1e-7,
            weight_decay=0.004,
            adam_weight_decay=0.004,
            consistent_rms=0.2,
            momentum_convention="keras",
            adam_nesterov=False,
            adam_eps_placement="keras",
        ),
        needs_params=True,
        repr_prefix=PARTITION,
    )
    register(
        "muon/dimension_numbers",
        lambda: optx.muon(
            1e-2, consistent_rms=0.2, muon_weight_dimension_numbers=transposed_matrices
        ),
        needs_params=True,
        repr_prefix=PARTITION,
    )
    register(
        "muon/mask",
        lambda: optx.muon(
            1e-2,
            weight_decay=0.1,
            weight_decay_mask="kernel",
            muon_mask=r"dense/kernel",
            adam_learning_rate=cosine_multiplier,
            mu_dtype=jnp.float32,
        ),
        needs_params=True,
        repr_prefix=PARTITION,
    )
