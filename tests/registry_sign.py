"""Registry entries of the sign-based, belief-based and Adan optimizers (see `registry.py`).

Families: `lion.py` (scale_by_sign, sign_sgd, signum, scale_by_lion, lion), `rprop.py`,
`belief.py` (AdaBelief, Yogi) and `adan.py`.
"""

from __future__ import annotations

import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset(
    {"adabelief", "adan", "lion", "rprop", "scale_by_rprop", "sign_sgd", "signum", "yogi"}
)

CHAIN = "chain("

# Read by `init` only: a change after `init` cannot show (documented).
RPROP_INIT_ONLY = ("learning_rate",)
YOGI_INIT_ONLY = ("initial_accumulator_value",)
# See the Lion entries.
LION_B1 = ("b1",)


def entries(register) -> None:
    """Registers this family's entries."""
    # Signs.
    register("scale_by_sign", optx.scale_by_sign)
    register("sign_sgd", lambda: optx.sign_sgd(0.1), repr_prefix=CHAIN)
    register("signum", lambda: optx.signum(0.1), repr_prefix=CHAIN)
    register(
        "signum/f32_accumulator",
        lambda: optx.signum(0.1, beta=0.5, accumulator_dtype=jnp.float32),
        repr_prefix=CHAIN,
    )

    # Lion. With the default b2 = 0.99 the momentum is ~1% of a gradient after a step, too
    # small to flip a sign when b1 changes within the suite's three steps; with b2 = 0.5
    # ("fast_momentum", "refined", "mask") b1 shows.
    register("scale_by_lion", optx.scale_by_lion, unobservable=LION_B1)
    register("scale_by_lion/fast_momentum", lambda: optx.scale_by_lion(b2=0.5))
    register("scale_by_lion/smooth", lambda: optx.scale_by_lion(mode="smooth", smooth_beta=2.0))
    register("scale_by_lion/refined", lambda: optx.scale_by_lion(b2=0.5, mode="refined"))
    register(
        "scale_by_lion/f32_mu",
        lambda: optx.scale_by_lion(mu_dtype=jnp.float32),
        unobservable=LION_B1,
    )
    register(
        "lion", lambda: optx.lion(1e-2), needs_params=True, repr_prefix=CHAIN, unobservable=LION_B1
    )
    # Keras's `Lion` defaults (no weight decay): the same numbers as optax's with wd = 0.
    register(
        "lion/keras_defaults",
        lambda: optx.lion(1e-3, b1=0.9, b2=0.99, weight_decay=0.0),
        needs_params=True,
        repr_prefix=CHAIN,
        unobservable=LION_B1,
    )
    register(
        "lion/mask",
        lambda: optx.lion(1e-2, b2=0.5, mu_dtype=jnp.float32, weight_decay=0.1, mask="kernel"),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    # Rprop. With the default bounds (1e-6, 50) no step is clipped in a few steps. With
    # (0.055, 0.15) and an initial step 0.1, three steps show every factor and bound: a
    # shrink (0.05) is clipped at the floor, a growth then a shrink (0.06) is not, and a
    # growth (0.12) meets a halved ceiling.
    register(
        "scale_by_rprop",
        lambda: optx.scale_by_rprop(0.1),
        unobservable=(*RPROP_INIT_ONLY, "min_step_size", "max_step_size"),
    )
    register(
        "scale_by_rprop/tight_bounds",
        lambda: optx.scale_by_rprop(0.1, min_step_size=0.055, max_step_size=0.15),
        unobservable=RPROP_INIT_ONLY,
    )
    register(
        "rprop",
        lambda: optx.rprop(0.1, min_step_size=0.055, max_step_size=0.15),
        repr_prefix=CHAIN,
        unobservable=RPROP_INIT_ONLY,
    )

    # AdaBelief and Yogi.
    register("scale_by_belief", optx.scale_by_belief)
    register("scale_by_belief/nesterov", lambda: optx.scale_by_belief(nesterov=True))
    register("adabelief", lambda: optx.adabelief(1e-2), repr_prefix=CHAIN)
    register(
        "adabelief/nesterov",
        lambda: optx.adabelief(1e-2, eps=1e-8, eps_root=0.0, nesterov=True),
        repr_prefix=CHAIN,
    )
    register("scale_by_yogi", optx.scale_by_yogi, unobservable=YOGI_INIT_ONLY)
    register(
        "scale_by_yogi/eps_root",
        lambda: optx.scale_by_yogi(eps_root=1e-8, initial_accumulator_value=0.0),
        unobservable=YOGI_INIT_ONLY,
    )
    register("yogi", lambda: optx.yogi(1e-2), repr_prefix=CHAIN, unobservable=YOGI_INIT_ONLY)

    # Adan.
    register("scale_by_adan", optx.scale_by_adan)
    register("adan", lambda: optx.adan(1e-2), needs_params=True, repr_prefix=CHAIN)
    register(
        "adan/weight_decay",
        lambda: optx.adan(1e-2, weight_decay=0.02, mask="kernel"),
        needs_params=True,
        repr_prefix=CHAIN,
    )
