"""Registry entries of optax.contrib's learning-rate-free methods (see `registry.py`).

Families: `dadapt.py` (dadapt_adamw), `dog.py` (dog, dowg, scale_by_distance_over_gradients),
`cocob.py`, `mechanic.py` (mechanize) and `momo.py` (momo, momo_adam; their ``update`` reads
the loss as ``value=``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset({"mechanize"})

CHAIN = "chain("
LOSS = {"value": 1.0}


# Module-level callables (a lambda in a factory would make every build a new configuration).
def cosine_multiplier(count: jax.Array) -> jax.Array:
    """A learning-rate multiplier from 1 down over 10 steps."""
    t = jnp.minimum(count, 10).astype(jnp.float32) / 10
    return 0.5 * (1 + jnp.cos(jnp.pi * t))


def entries(register) -> None:
    """Registers this family's entries."""
    # D-Adaptation. The default d0 = 1e-6 makes steps of 1e-6; a larger d0 and a schedule
    # show the weight decay and the multiplier.
    register("dadapt_adamw", optx.dadapt_adamw, needs_params=True)
    register(
        "dadapt_adamw/schedule_decay",
        lambda: optx.dadapt_adamw(cosine_multiplier, (0.8, 0.99), estim_lr0=1e-2, weight_decay=0.1),
        needs_params=True,
    )

    # DoG and DoWG: eps is added to sums of squared norms of order 1 or more (DoG) or
    # divides a step of order eps (DoWG's first steps), see the entries.
    register("dog", optx.dog, needs_params=True, repr_prefix=CHAIN, unobservable=("eps",))
    register(
        "dog/learning_rate_decay",
        lambda: optx.dog(0.5, ("learning_rate", 0.1), eps=1e-2, weight_decay=0.1, mask="kernel"),
        needs_params=True,
        repr_prefix=CHAIN,
    )
    register("dowg", optx.dowg, needs_params=True, repr_prefix=CHAIN)
    register(
        "dowg/decay",
        lambda: optx.dowg(cosine_multiplier, 1e-2, eps=1e-3, weight_decay=0.1),
        needs_params=True,
        repr_prefix=CHAIN,
    )
    register(
        "scale_by_distance_over_gradients",
        optx.scale_by_distance_over_gradients,
        needs_params=True,
        unobservable=("eps",),
    )
    register(
        "scale_by_distance_over_gradients/descent",
        lambda: optx.scale_by_distance_over_gradients(1e-2, 0.5, jnp.bfloat16, -1.0),
        needs_params=True,
    )

    # COCOB.
    register("scale_by_cocob", optx.scale_by_cocob, needs_params=True)
    register("cocob", optx.cocob, needs_params=True, repr_prefix=CHAIN)
    register(
        "cocob/schedule_decay",
        lambda: optx.cocob(cosine_multiplier, alpha=10.0, weight_decay=0.1, mask="kernel"),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    # Mechanic around an optx and an optax optimizer.
    register("mechanize", lambda: optx.mechanize(optx.sgd(0.1)), needs_params=True)
    register(
        "mechanize/adam_three_betas",
        lambda: optx.mechanize(optx.adam(1.0), weight_decay=0.1, s_init=1e-3, num_betas=3),
        needs_params=True,
    )

    # MoMo. With a loss of 100 the Polyak step exceeds the learning rate, which is then the
    # step size (so the lower bound cannot show); a loss of 1 near the lower bound 0 makes the
    # step a ratio of cancelling sums (ill-conditioned for the jit-against-eager check), so
    # the variants take the bound at -1.
    register(
        "momo",
        optx.momo,
        needs_params=True,
        update_kwargs={"value": 100.0},
        unobservable=("lower_bound",),
    )
    register(
        "momo/adaptive",
        lambda: optx.momo(0.5, 0.8, -1.0, 0.1, adapt_lower_bound=True),
        needs_params=True,
        update_kwargs=LOSS,
    )
    register("momo_adam", optx.momo_adam, needs_params=True, update_kwargs=LOSS)
    register(
        "momo_adam/adaptive",
        lambda: optx.momo_adam(cosine_multiplier, weight_decay=0.1, adapt_lower_bound=True),
        needs_params=True,
        update_kwargs=LOSS,
    )
