"""Registry entries of `optx.contrib`'s second batch (see `registry.py`).

Families: `madgrad.py`, `acprop.py`, `ademamix.py` (the simplified variant), `sam.py`
(`sam`, `normalize`), `complex_valued.py`, `galore.py` and `privacy.py`. Names that optax
has only in ``optax.contrib`` are registered under ``contrib.<name>`` (`registry.resolve`).

`differentially_private_aggregate` and `dpsgd` take per-example gradients (a leading batch
axis); their entries put a `stateless` transform in front that makes two examples of each
gradient (``g`` and ``g / 2``), so that they run on the suite's trees (its 2-D leaves).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import optx

# Factories with required arguments are listed for top-level names only (`optx.contrib`'s are
# found through their registry keys).
FACTORIES_WITH_ARGS: frozenset[str] = frozenset()

CHAIN = "chain("
MASKED = "masked("


# Module-level callables (a lambda in a factory would make every build a new configuration).
def alpha_warmup(count: jax.Array) -> jax.Array:
    """A mixing-weight schedule: 0.5, 1, 1.5, ... capped at 3."""
    return jnp.minimum(0.5 * (count + 1.0), 3.0)


def madgrad_schedule(count: jax.Array) -> jax.Array:
    """A learning rate that halves each step from 1e-2."""
    return 1e-2 * 0.5 ** jnp.asarray(count, jnp.float32)


def matrices(params: optx.Params) -> optx.Params:
    """A mask: the 2-D leaves."""
    return jax.tree.map(lambda p: jnp.ndim(p) == 2, params)


def per_example(updates: optx.Updates, params: optx.Params | None) -> optx.Updates:
    """A ``stateless`` function: two examples of each gradient, ``g`` and ``g / 2``."""
    del params
    return jax.tree.map(lambda g: jnp.stack([g, 0.5 * g]), updates)


def entries(register) -> None:
    """Registers this family's entries."""
    c = optx.contrib

    # MADGRAD: the learning rate is inside the step.
    register("contrib.scale_by_madgrad", lambda: c.scale_by_madgrad(1e-2), needs_params=True)
    register(
        "contrib.scale_by_madgrad/schedule",
        lambda: c.scale_by_madgrad(madgrad_schedule, momentum=0.5, eps=1e-4),
        needs_params=True,
    )
    register(
        "contrib.madgrad",
        lambda: c.madgrad(1e-2, weight_decay=1e-2),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    # ACProp.
    register("contrib.scale_by_acprop", c.scale_by_acprop)
    register(
        "contrib.acprop",
        lambda: c.acprop(1e-2, b1=0.8, eps=1e-8, weight_decay=0.1, mask="kernel"),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    # Simplified AdEMAMix.
    register("contrib.scale_by_simplified_ademamix", c.scale_by_simplified_ademamix)
    register(
        "contrib.scale_by_simplified_ademamix/schedule",
        lambda: c.scale_by_simplified_ademamix(0.9, 0.99, alpha_warmup, eps_root=1e-8),
    )
    register(
        "contrib.simplified_ademamix",
        lambda: c.simplified_ademamix(1e-3, alpha=2.0, weight_decay=0.1),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    # SAM and its adversarial step's normalisation.
    register("contrib.normalize", c.normalize)
    register(
        "contrib.sam",
        lambda: c.sam(optx.sgd(1e-2), optx.chain(c.normalize(), optx.sgd(0.05))),
        needs_params=True,
    )
    register(
        "contrib.sam/adam_no_reset",
        lambda: c.sam(
            optx.adam(1e-2),
            optx.chain(c.normalize(), optx.sgd(0.05, momentum=0.5)),
            sync_period=3,
            reset_state=False,
        ),
        needs_params=True,
    )

    # Complex values as real pairs (the suite's parameters are real: passed through).
    register(
        "contrib.split_real_and_imaginary",
        lambda: c.split_real_and_imaginary(optx.adam(1e-2)),
    )

    # GaLore: projectors refreshed every other step, rank 2 on the suite's matrices.
    register(
        "contrib.scale_by_galore",
        lambda: c.scale_by_galore(rank=2, update_proj_gap=2, scale=0.5),
    )
    register(
        "contrib.galore",
        lambda: c.galore(1e-2, rank=1, update_proj_gap=2, weight_decay=0.1, mask="kernel"),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    # Differential privacy, on two examples per gradient. Masked to the rank-2 leaves: each
    # leaf's noise is a separate threefry draw, which XLA:CPU takes about a second to
    # compile; the other leaves go through unchanged.
    register(
        "contrib.differentially_private_aggregate",
        lambda: optx.masked(
            optx.chain(
                optx.stateless(per_example),
                optx.contrib.differentially_private_aggregate(1.0, 0.1, key=3),
            ),
            matrices,
        ),
        repr_prefix=MASKED,
    )
    register(
        "contrib.dpsgd",
        lambda: optx.masked(
            optx.chain(
                optx.stateless(per_example),
                optx.contrib.dpsgd(1e-2, 1.0, 0.1, seed=1, momentum=0.9, nesterov=True),
            ),
            matrices,
        ),
        repr_prefix=MASKED,
    )
