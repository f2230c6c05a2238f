"""Conformance entries of Schedule-Free learning, Lookahead and Sophia."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset({"lookahead", "schedule_free", "sophia"})


# Module-level callables: a transform built twice with them compares equal.
def rising_schedule(count: jax.Array) -> jax.Array:
    """0.05, 0.1, 0.15, ... capped at 0.2: the averaging weights of schedule_free vary."""
    return jnp.minimum(0.05 * (count + 1), 0.2)


def sophia_loss(params: optx.Params) -> jax.Array:
    """A loss coupling every parameter, with a positive Hessian diagonal (>= 1)."""
    leaves = jax.tree.leaves(params)
    total = sum(jnp.sum(x.astype(jnp.float32)) for x in leaves)
    return sum(jnp.sum(jnp.cosh(x.astype(jnp.float32))) for x in leaves) + 0.1 * total**2


def bounded_loss(params: optx.Params) -> jax.Array:
    """A coupled loss whose Hessian is bounded: applied as updates, its diagonal stays finite."""
    leaves = jax.tree.leaves(params)
    total = sum(jnp.sum(x.astype(jnp.float32)) for x in leaves)
    return sum(jnp.sum(0.5 * x**2 - 0.1 * jnp.cos(x)) for x in leaves) + 0.05 * total**2


OBJ_FN = {"obj_fn": sophia_loss}
BOUNDED = {"obj_fn": bounded_loss}
SF = "schedule_free("


def entries(register) -> None:
    # Schedule-Free. With a constant learning rate the averaging weights are 1/t whatever
    # the power, and the wrapper's learning rate cancels from them unless it scales the
    # step (apply_learning_rate); `scale_by_rms`'s initial_scale is read by `init` only.
    # Its update depends on y - z, a difference of parameter-sized numbers, which XLA's
    # fused multiply-adds under jit move by an ulp of the parameters: the suite compares jit
    # with eager relative to each leaf's scale.
    register(
        "schedule_free/sgd_0.1",
        lambda: optx.schedule_free(optx.sgd(0.1), 0.1),
        needs_params=True,
        unobservable=("learning_rate", "weight_lr_power"),
    )
    register(
        "schedule_free",
        lambda: optx.schedule_free(optx.sgd(0.05), 0.05),
        needs_params=True,
        unobservable=("learning_rate", "weight_lr_power"),
    )
    register(
        "schedule_free/schedule",
        lambda: optx.schedule_free(optx.sgd(rising_schedule), rising_schedule, b1=0.8),
        needs_params=True,
    )
    register(
        "schedule_free/apply_learning_rate",
        lambda: optx.schedule_free(optx.scale_by_adam(b1=0.0), 0.1, apply_learning_rate=True),
        needs_params=True,
        unobservable=("weight_lr_power",),
    )
    register(
        "schedule_free/keras",
        lambda: optx.schedule_free(
            optx.identity(),
            rising_schedule,
            weight_lr_power=0.0,
            apply_learning_rate=True,
            schedule_convention="keras",
        ),
        needs_params=True,
    )
    register(
        "schedule_free/f32_state",
        lambda: optx.schedule_free(optx.adam(0.1, b1=0.0), 0.1, state_dtype=jnp.float32),
        needs_params=True,
        unobservable=("learning_rate", "weight_lr_power"),
    )
    register(
        "schedule_free_adamw",
        lambda: optx.schedule_free_adamw(0.01, weight_decay=1e-3),
        needs_params=True,
        repr_prefix=SF,
        unobservable=("initial_scale", "weight_lr_power"),
    )
    register(
        "schedule_free_adamw/keras_warmup",
        lambda: optx.schedule_free_adamw(
            0.01,
            warmup_steps=2,
            weight_lr_power=0.0,
            nu_dtype=jnp.float32,
            schedule_convention="keras",
        ),
        needs_params=True,
        repr_prefix=SF,
        unobservable=("initial_scale",),
    )
    register(
        "schedule_free_sgd",
        lambda: optx.schedule_free_sgd(0.05, weight_decay=1e-2),
        needs_params=True,
        repr_prefix=SF,
        unobservable=("weight_lr_power",),
    )
    register(
        "schedule_free_sgd/warmup",
        lambda: optx.schedule_free_sgd(0.1, warmup_steps=2),
        needs_params=True,
        repr_prefix=SF,
    )

    # Lookahead: a synchronisation on the second step.
    register(
        "lookahead",
        lambda: optx.lookahead(optx.sgd(0.1, momentum=0.9), sync_period=2, slow_step_size=0.5),
        needs_params=True,
    )
    register(
        "lookahead/reset_state",
        lambda: optx.lookahead(optx.adam(0.1), sync_period=2, slow_step_size=0.3, reset_state=True),
        needs_params=True,
    )

    # Sophia: `update` needs the loss as a function of the parameters. With a Hessian
    # estimate every step, a large gamma and a small b2 some updates escape the clipping,
    # so each hyperparameter shows within three steps.
    register(
        "sophia",
        lambda: optx.sophia(0.1, b2=0.5, eps=1e-3, gamma=1.0, update_interval=1),
        needs_params=True,
        repr_prefix="chain(",
        update_kwargs=OBJ_FN,
    )
    register(
        "sophia/interval",
        lambda: optx.sophia(0.1, b2=0.5, eps=1e-3, gamma=1.0, update_interval=2),
        needs_params=True,
        repr_prefix="chain(",
        update_kwargs=OBJ_FN,
    )
    register(
        "scale_by_sophia",
        lambda: optx.scale_by_sophia(b2=0.5, eps=1e-3, gamma=1.0, update_interval=1),
        needs_params=True,
        update_kwargs=OBJ_FN,
    )
    register(
        "scale_by_sophia/no_clip_f32_moments",
        lambda: optx.scale_by_sophia(
            eps=0.5,
            gamma=1.0,
            clip_threshold=None,
            update_interval=1,
            mu_dtype=jnp.float32,
            nu_dtype=jnp.float32,
        ),
        needs_params=True,
        update_kwargs=OBJ_FN,
    )
    register(
        "hutchinson_estimator_diag_hessian",
        optx.hutchinson_estimator_diag_hessian,
        needs_params=True,
        update_kwargs=BOUNDED,
    )
    register(
        "hutchinson_estimator_diag_hessian/typed_key",
        lambda: optx.hutchinson_estimator_diag_hessian(jax.random.key(3)),
        needs_params=True,
        update_kwargs=BOUNDED,
    )
