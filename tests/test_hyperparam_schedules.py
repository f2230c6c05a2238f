"""Scheduled hyperparameters: parity with optax's `inject_hyperparams`, and regressions.

Every numeric hyperparameter of an optx transform may be a schedule (a function of the
int32 step count). The parity cases run optx and ``optax.inject_hyperparams(optax.<name>)``
with the same schedule function, side by side, each under one `jax.jit` of a `lax.scan`
that records the parameters and the scheduled values in force after every step. The other
tests pin down behaviour that once failed: schedules for betas, momenta, clip bounds and
decays; `set_hyperparams` / `scale_hyperparams` on a schedule; the Keras-style classes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, assert_close

import optx

STEPS = 25

# Tolerance from the float32 arithmetic (EPS32 = 2**-23, an ulp of 1). Both libraries
# compute the same float32 maths in different orders; per step the parameters drift apart
# by at most: each library's rounding of p + u, half an ulp of the leaf's scale (1 ulp for
# the two); and the two updates' roundings, each at most UPDATE_ROUNDINGS half-ulps of the
# update's size (Adam's, the most: the learning rate, the two bias corrections, 3 each,
# the root, epsilon and the quotient, the moments' products and sums, 2 * 3), updates at
# most UPDATE_SHARE of their leaf's scale on these data (learning rates <= 0.1; the largest,
# 0.4, in the adamw case). That is STEPS * (1 + UPDATE_ROUNDINGS * UPDATE_SHARE) ulps.
# Round-off that the moments carry from earlier steps is not counted: a worst case adds up
# to 1.5 t half-ulps of the update at step t for b2 near 1 (3 roundings a step, through the
# root), and would put the bound near 100x what a run shows. On this machine the
# parameters differ by at most 8 ulps, on the three instruction sets; a schedule read one
# step early or late moves them by 5e-3 to 1e-1 of their scale within these 25 steps, 200x
# RTOL or more.
# `assert_close` measures errors against each leaf's largest entry; ATOL, the same bound
# against the parameters' initial scale, covers a scalar leaf that passes near zero.
UPDATE_ROUNDINGS = 16
UPDATE_SHARE = 0.4
RTOL = STEPS * (1 + UPDATE_ROUNDINGS * UPDATE_SHARE) * EPS32
PARAM_SCALE = 2.5  # >= max |initial parameter| (`test_param_scale`)
ATOL = RTOL * PARAM_SCALE


def _params() -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {"kernel": normal(3, 4), "bias": normal(4), "scale": normal()}


def _grads(params: Any) -> Any:
    """Per-step gradients (leading axis: step): fixed Gaussian draws times a magnitude.

    The magnitude swings between 0.2 and 2.2, so the global norm ranges over ~[0.5, 10]
    and the scheduled clip below binds on some steps and not on others.
    """
    rng = np.random.default_rng(1)
    magnitude = 0.2 + 2.0 * np.sin(0.3 * np.arange(STEPS)) ** 2

    def draw(p: jax.Array) -> jax.Array:
        g = rng.standard_normal((STEPS, *p.shape)) * magnitude.reshape((STEPS,) + (1,) * p.ndim)
        return jnp.asarray(g, jnp.float32)

    return jax.tree.map(draw, params)


# Schedules that vary substantially over the 25 steps; each is handed, as the same
# function, to both libraries.
B1 = optax.schedules.linear_schedule(0.5, 0.95, STEPS)
# b2 stays <= 0.995 within 25 steps, so ``1 - b2**t`` >= 0.1: optax's float32 cancellation
# in its bias correction (see ADAM_PARAMS_ATOL in test_numerics_optax.py) is ~1e-6 of it,
# under an ulp of the parameters after scaling by the learning rate.
B2 = optx.schedules.linear_schedule(0.9, 0.999, STEPS)
LR = optx.schedules.cosine_decay_schedule(0.1, STEPS, alpha=0.1)
WEIGHT_DECAY = optax.schedules.linear_schedule(0.0, 0.5, STEPS)
MOMENTUM = optx.schedules.linear_schedule(0.0, 0.9, STEPS)
MAX_NORM = optax.schedules.cosine_decay_schedule(6.0, STEPS, alpha=0.1)
EMA_DECAY = optx.schedules.linear_schedule(0.3, 0.95, STEPS)

inject = optax.inject_hyperparams


@dataclasses.dataclass(frozen=True)
class Case:
    """One parity case: ``scheduled`` names the hyperparameters given as schedules."""

    id: str
    optx_tx: Callable[[], Any]
    optax_tx: Callable[[], Any]
    scheduled: tuple[str, ...]


CASES = [
    Case(
        "adam_b1", lambda: optx.adam(0.05, b1=B1), lambda: inject(optax.adam)(0.05, b1=B1), ("b1",)
    ),
    Case(
        "adam_b2", lambda: optx.adam(0.05, b2=B2), lambda: inject(optax.adam)(0.05, b2=B2), ("b2",)
    ),
    Case(
        "adamw_lr_weight_decay",
        lambda: optx.adamw(LR, weight_decay=WEIGHT_DECAY),
        lambda: inject(optax.adamw)(LR, weight_decay=WEIGHT_DECAY),
        ("learning_rate", "weight_decay"),
    ),
    Case(
        "sgd_momentum",
        lambda: optx.sgd(0.05, momentum=MOMENTUM),
        lambda: inject(optax.sgd)(0.05, momentum=MOMENTUM),
        ("momentum",),
    ),
    Case(
        "clip_by_global_norm",
        lambda: optx.chain(optx.clip_by_global_norm(MAX_NORM), optx.sgd(0.05)),
        lambda: optax.chain(inject(optax.clip_by_global_norm)(max_norm=MAX_NORM), optax.sgd(0.05)),
        ("max_norm",),
    ),
    Case(
        "ema_decay",
        lambda: optx.chain(optx.ema(EMA_DECAY), optx.sgd(0.05)),
        lambda: optax.chain(inject(optax.ema)(decay=EMA_DECAY), optax.sgd(0.05)),
        ("decay",),
    ),
    Case(
        "lion_b1", lambda: optx.lion(0.01, b1=B1), lambda: inject(optax.lion)(0.01, b1=B1), ("b1",)
    ),
    Case(
        "rmsprop_decay",
        lambda: optx.rmsprop(0.01, decay=B2),
        lambda: inject(optax.rmsprop)(0.01, decay=B2),
        ("decay",),
    ),
]


INJECTED = (
    optax.InjectHyperparamsState,
    optax.InjectStatefulHyperparamsState,
    optx.InjectHyperparamsState,
    optx.InjectStatefulHyperparamsState,
)


def _optax_hyperparams(state: Any) -> dict[str, Any]:
    """The ``hyperparams`` of every `inject_hyperparams` state in an optax state, merged."""
    out: dict[str, Any] = {}

    def visit(node: Any) -> bool:
        if isinstance(node, INJECTED):
            out.update(node.hyperparams)
            return True
        return False

    jax.tree_util.tree_flatten(state, is_leaf=visit)
    return out


# One schedule's values computed in two programs (`_trajectory`'s): the same float32
# operations, but the compiler may contract a multiply-add in one program and not in the
# other, or take another code path for a cosine. Each value is at most 8 roundings
# (EPS32 / 2 each) of terms no larger than twice the schedule's largest value, in each
# program; `assert_close` scales this by that largest value.
SCHEDULE_RTOL = 2 * 8 * (EPS32 / 2) * 2


def _trajectory(tx: Any, apply_updates: Callable, read: Callable, names: tuple) -> tuple:
    """Parameters and the ``names`` hyperparameters in force after each step (one jit)."""

    def run(params: Any, grads: Any) -> tuple:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            p = apply_updates(p, u)
            hyper = read(s)
            return (p, s), (p, {n: hyper[n] for n in names})

        return jax.lax.scan(step, (params, tx.init(params)), grads)[1]

    return jax.jit(run)(_params(), _grads(_params()))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_parity_with_inject_hyperparams(case: Case) -> None:
    params, hyper = _trajectory(
        case.optx_tx(), optx.apply_updates, optx.get_hyperparams, case.scheduled
    )
    o_params, o_hyper = _trajectory(
        case.optax_tx(), optax.apply_updates, _optax_hyperparams, case.scheduled
    )
    # The value in force after step t is the schedule's at count t, as in optax.
    for name in case.scheduled:
        assert_close(name, hyper[name], o_hyper[name], rtol=SCHEDULE_RTOL)
    for t in range(STEPS):
        at_t = jax.tree.map(lambda x, t=t: x[t], (params, o_params))
        assert_close(f"{case.id} step {t}", *at_t, rtol=RTOL, atol=ATOL, finite=True)


def test_param_scale() -> None:
    assert max(float(jnp.max(jnp.abs(p))) for p in jax.tree.leaves(_params())) <= PARAM_SCALE


def test_gradients_exercise_the_scheduled_clip() -> None:
    grads = _grads(_params())
    norms = np.sqrt(sum(np.sum(np.square(g), axis=tuple(range(1, g.ndim))) for g in grads.values()))
    bounds = np.array([float(MAX_NORM(jnp.int32(t))) for t in range(STEPS)])
    clipped = norms > bounds
    assert 5 <= clipped.sum() <= STEPS - 5, (norms, bounds)


# --- Regressions ---------------------------------------------------------------------------

SCHED = optx.schedules.linear_schedule(0.5, 0.9, 10)
P = {"w": jnp.ones((3, 4)), "b": jnp.ones(4)}
G = jax.tree.map(lambda x: 0.1 * x, P)


def _steps(tx: Any, n: int = 2) -> tuple[Any, Any]:
    params, state = P, tx.init(P)
    for _ in range(n):
        updates, state = tx.update(G, state, params)
        params = optx.apply_updates(params, updates)
    return params, state


def _finite(tree: Any) -> bool:
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(tree))


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: optx.adam(1e-3, b1=SCHED), "b1"),
        (lambda: optx.adamw(1e-3, weight_decay=SCHED), "weight_decay"),
        (lambda: optx.sgd(1e-2, momentum=SCHED), "momentum"),
        (lambda: optx.lion(1e-3, b1=SCHED), "b1"),
        (lambda: optx.clip_by_global_norm(SCHED), "max_norm"),
        (lambda: optx.clip(SCHED), "max_delta"),
        (lambda: optx.clip_by_norm(SCHED), "max_norm"),
        (lambda: optx.clip_by_block_rms(SCHED), "threshold"),
        (lambda: optx.scale(SCHED), "step_size"),
        (lambda: optx.ema_params(SCHED), "momentum"),
    ],
    ids=[
        "adam_b1",
        "adamw_weight_decay",
        "sgd_momentum",
        "lion_b1",
        "clip_by_global_norm",
        "clip",
        "clip_by_norm",
        "clip_by_block_rms",
        "scale",
        "ema_params",
    ],
)
def test_schedule_accepted_and_steps(make: Callable[[], Any], name: str) -> None:
    params, state = _steps(make())
    assert _finite(params)
    # After two steps the value in force is the schedule's at count 1.
    np.testing.assert_allclose(optx.get_hyperparams(state)[name], SCHED(1), rtol=1e-6)


def test_lion_constant_schedule_inits_and_steps() -> None:
    params, state = _steps(optx.lion(1e-3, b1=lambda count: 0.9))
    assert _finite(params)
    np.testing.assert_allclose(optx.get_hyperparams(state)["b1"], 0.9, rtol=1e-7)


def test_set_scheduled_learning_rate_rescales_the_schedule() -> None:
    lr = optx.schedules.exponential_decay(0.1, 1, 0.5)
    tx = optx.sgd(lr)
    g = {"w": jnp.ones(3)}
    state = tx.init(g)
    np.testing.assert_allclose(optx.get_hyperparams(state)["learning_rate"], lr(0))
    for _ in range(2):
        _, state = tx.update(g, state)
    np.testing.assert_allclose(optx.get_hyperparams(state)["learning_rate"], lr(1), rtol=1e-6)
    x = 0.02
    state = optx.set_hyperparams(state, learning_rate=x)
    np.testing.assert_allclose(optx.get_hyperparams(state)["learning_rate"], x, rtol=1e-6)
    updates, state = tx.update(g, state)
    expected = x * lr(2) / lr(1)
    np.testing.assert_allclose(updates["w"], -expected * np.ones(3), rtol=1e-6)
    np.testing.assert_allclose(optx.get_hyperparams(state)["learning_rate"], expected, rtol=1e-6)


def test_set_scheduled_learning_rate_at_zero_names_scale_hyperparams() -> None:
    tx = optx.sgd(optx.schedules.linear_schedule(0.0, 1.0, 10))
    state = tx.init({"w": jnp.ones(3)})
    _, state = tx.update({"w": jnp.ones(3)}, state)  # the rate of step 0 is 0
    with pytest.raises(ValueError, match=re.escape("the schedule's value in force is 0")):
        optx.set_hyperparams(state, learning_rate=0.1)
    with pytest.raises(
        ValueError, match=re.escape("Use `optx.scale_hyperparams(state, learning_rate=factor)`")
    ):
        optx.set_hyperparams(state, learning_rate=0.1)


def test_lion_class_allows_beta_1_of_one_and_adam_does_not() -> None:
    lion = optx.optimizers.Lion(beta_1=1.0)
    assert _finite(lion.apply(G, P))
    assert float(lion.variables["beta_1"]) == 1.0

    lion = optx.optimizers.Lion()
    lion.apply(G, P)
    lion.beta_1 = 1.0  # Lion's rule is [0, 1]
    assert _finite(lion.apply(G, P))
    assert float(lion.variables["beta_1"]) == 1.0

    adam = optx.optimizers.Adam(1e-3)
    adam.apply(G, P)
    with pytest.raises(
        ValueError, match=re.escape("`Adam` needs beta_1 in [0, 1). Received: beta_1=1.0.")
    ):
        adam.beta_1 = 1.0


def test_no_stored_encoding_where_users_look() -> None:
    opt = optx.optimizers.AdamW(use_ema=True, ema_momentum=0.9)
    opt.apply(G, P)
    keys = list(opt.variables)
    assert not [k for k in keys if "one_minus" in k], keys
    assert {"beta_1", "beta_2", "epsilon", "ema_momentum"} <= set(keys), keys
    np.testing.assert_allclose(opt.variables["beta_1"], 0.9, rtol=1e-7)
    np.testing.assert_allclose(opt.variables["ema_momentum"], 0.9, rtol=1e-7)
    text = repr(opt)
    assert "beta_1=" in text and "ema_momentum=" in text, text
    assert "one_minus" not in text, text
    # The optimizer exposes no public state, so its `get_hyperparams` is not checked here.

    state = optx.adam(1e-3).init(P)
    summary = str(optx.summary(state))
    assert "one_minus" not in summary, summary
    assert re.search(r"\bb1\b", summary), summary
    assert set(optx.get_hyperparams(state)) >= {"b1", "b2"}


def test_keras_adamw_accepts_schedules() -> None:
    opt = optx.optimizers.AdamW(1e-3, beta_1=SCHED, weight_decay=SCHED)
    params = P
    for _ in range(3):
        params = opt.apply(G, params)
    assert _finite(params)
    assert not np.allclose(params["w"], P["w"])
    # After three steps the values in force are the schedule's at count 2.
    np.testing.assert_allclose(opt.variables["beta_1"], SCHED(2), rtol=1e-6)
    np.testing.assert_allclose(opt.variables["weight_decay"], SCHED(2), rtol=1e-6)


def test_vmap_sweep_over_the_scale_of_a_scheduled_learning_rate() -> None:
    tx = optx.adam(LR)
    _, state = _steps(tx)
    factors = [1.0, 0.5]

    def update(f: Any) -> Any:
        return tx.update(G, optx.scale_hyperparams(state, learning_rate=f), P)[0]

    swept = jax.vmap(update)(jnp.array(factors))
    for i, f in enumerate(factors):
        single = update(f)
        assert_close(
            f"factor {f}", jax.tree.map(lambda x, i=i: x[i], swept), single, rtol=4 * 2.0**-23
        )
    half = jax.tree.map(lambda x: 0.5 * x[0], swept)
    assert_close("half", jax.tree.map(lambda x: x[1], swept), half, rtol=4 * 2.0**-23)


def test_scale_scheduled_hyperparameter_multiplies_later_values() -> None:
    lr = optx.schedules.linear_schedule(0.1, 0.01, 10)
    tx = optx.sgd(lr)
    g = {"w": jnp.ones(3)}
    state = tx.init(g)
    _, state = tx.update(g, state)
    state = optx.scale_hyperparams(state, learning_rate=0.25)
    np.testing.assert_allclose(
        optx.get_hyperparams(state)["learning_rate"], 0.25 * lr(0), rtol=1e-6
    )
    for t in (1, 2, 3):
        updates, state = tx.update(g, state)
        rate = 0.25 * float(lr(t))
        np.testing.assert_allclose(updates["w"], -rate * np.ones(3), rtol=1e-6)
        np.testing.assert_allclose(optx.get_hyperparams(state)["learning_rate"], rate, rtol=1e-6)


def test_keras_attribute_switches_between_a_schedule_and_a_number() -> None:
    schedule = optx.optimizers.schedules.ExponentialDecay(0.9, 1, 0.9)
    opt = optx.optimizers.Adam(1e-3, beta_1=schedule)
    params = {"w": jnp.ones(3)}
    for _ in range(3):
        params = opt.apply({"w": jnp.ones(3)}, params)
    np.testing.assert_allclose(opt.variables["beta_1"], 0.9 * 0.9**2, rtol=1e-6)
    # A number replaces the schedule: in force at once, and kept by the steps.
    opt.beta_1 = 0.4
    assert float(opt.variables["beta_1"]) == np.float32(0.4)
    assert "beta_1/count" not in opt.variables
    params = opt.apply({"w": jnp.ones(3)}, params)
    assert float(opt.variables["beta_1"]) == np.float32(0.4)
    # A schedule again: it goes on at the steps taken (4), not from 0.
    opt.beta_1 = schedule
    assert int(opt.variables["beta_1/count"]) == 4
    opt.apply({"w": jnp.ones(3)}, params)
    np.testing.assert_allclose(opt.variables["beta_1"], 0.9 * 0.9**4, rtol=1e-6)


# --- optx factories inside optax's `inject_hyperparams`, and optx's `inject_hyperparams` ---
# `optax.inject_hyperparams(optx.adam)` calls optx's factory at every step with the values in
# force as arrays (traced under `jit`): the transform uses them as given. The same bound as
# above: the same maths as optax's, in another order.
WRAPPED = [
    ("adam_b1", "adam", (0.05,), {"b1": B1}),
    ("adamw_lr_weight_decay", "adamw", (LR,), {"weight_decay": WEIGHT_DECAY}),
    ("sgd_momentum", "sgd", (0.05,), {"momentum": MOMENTUM}),
    ("lion_b1", "lion", (0.01,), {"b1": B1}),
    ("rmsprop_decay", "rmsprop", (0.01,), {"decay": B2}),
    ("clip_by_global_norm", "clip_by_global_norm", (), {"max_norm": MAX_NORM}),
]


@pytest.mark.parametrize(("case", "name", "args", "kwargs"), WRAPPED, ids=[w[0] for w in WRAPPED])
@pytest.mark.parametrize("wrapper", ["optax", "optx"])
def test_inject_hyperparams_of_optx_factories_matches_optax(
    wrapper: str, case: str, name: str, args: tuple, kwargs: dict
) -> None:
    outer = optax.sgd(1.0) if name == "clip_by_global_norm" else optax.identity()
    wrap = optax.inject_hyperparams if wrapper == "optax" else optx.inject_hyperparams
    tx = optax.chain(wrap(getattr(optx, name))(*args, **kwargs), outer)
    reference = optax.chain(optax.inject_hyperparams(getattr(optax, name))(*args, **kwargs), outer)
    names = tuple(kwargs)
    params, hyper = _trajectory(tx, optax.apply_updates, _optax_hyperparams, names)
    o_params, o_hyper = _trajectory(reference, optax.apply_updates, _optax_hyperparams, names)
    for n in names:
        assert_close(n, hyper[n], o_hyper[n], rtol=SCHEDULE_RTOL)
    for t in range(STEPS):
        at_t = jax.tree.map(lambda x, t=t: x[t], (params, o_params))
        assert_close(f"{case} step {t}", *at_t, rtol=RTOL, atol=ATOL, finite=True)


def test_optx_inject_hyperparams_of_optax_factory_is_optax_s() -> None:
    # The same factory called with the same values: the same operations, so the same bits.
    tx = optx.inject_hyperparams(optax.adamw)(LR, b1=B1, weight_decay=WEIGHT_DECAY)
    reference = optax.inject_hyperparams(optax.adamw)(LR, b1=B1, weight_decay=WEIGHT_DECAY)
    names = ("learning_rate", "b1", "weight_decay")
    ours = _trajectory(tx, optax.apply_updates, _optax_hyperparams, names)
    theirs = _trajectory(reference, optax.apply_updates, _optax_hyperparams, names)
    jax.tree.map(np.testing.assert_array_equal, ours, theirs)


def test_optx_inject_hyperparams_state_is_changed_by_hand_and_by_set_hyperparams() -> None:
    params = {"w": jnp.ones(2)}
    grads = {"w": jnp.ones(2)}
    tx = optx.inject_hyperparams(optx.sgd)(learning_rate=0.1, momentum=MOMENTUM)
    state = tx.init(params)
    assert sorted(optx.get_hyperparams(state)) == ["learning_rate", "momentum"]
    state.hyperparams["learning_rate"] = jnp.asarray(0.01)  # optax's way
    updates, state = jax.jit(tx.update)(grads, state, params)
    np.testing.assert_allclose(updates["w"], [-0.01, -0.01], rtol=EPS32)
    state = optx.set_hyperparams(state, learning_rate=0.001)
    updates, state = jax.jit(tx.update)(grads, state, params)
    # momentum's schedule at step 1 is 0.9 / 25 * 1: the trace is 0.036 * 1 + 1.
    np.testing.assert_allclose(updates["w"], [-0.001 * 1.036] * 2, rtol=4 * EPS32)


def test_inject_hyperparams_rejects_unknown_static_args() -> None:
    with pytest.raises(ValueError, match=re.escape("needs static_args to name arguments")):
        optx.inject_hyperparams(optx.sgd, static_args=("nesterovv",))


def test_inject_stateful_hyperparams_warns_as_optax_does() -> None:
    with pytest.warns(DeprecationWarning, match="use optx.inject_hyperparams"):
        optx.inject_stateful_hyperparams(optx.sgd)(learning_rate=0.1)


def test_traced_hyperparameters_are_used_as_given() -> None:
    # A sweep by `vmap` over the factory's argument: each update uses the value it was built
    # with, and `get_hyperparams` reads it.
    params, grads = {"w": jnp.ones(3)}, {"w": jnp.ones(3)}
    lrs = jnp.asarray([0.1, 0.2, 0.3])

    def step(lr: jax.Array) -> tuple[Any, Any]:
        tx = optx.adam(lr, b1=0.9 * lr / lr)
        state = tx.init(params)
        updates, state = tx.update(grads, state, params)
        return updates, optx.get_hyperparams(state)["learning_rate"]

    updates, in_force = jax.jit(jax.vmap(step))(lrs)
    np.testing.assert_array_equal(in_force, lrs)
    # Adam's first update is -lr * g / (|g| + eps) = -lr (1 - 1e-8): to float32 round-off.
    np.testing.assert_allclose(updates["w"], -lrs[:, None] * np.ones(3), rtol=4 * EPS32)


def test_hyperparameter_given_as_an_array_cannot_be_set_in_the_state() -> None:
    state = optx.sgd(jnp.asarray(0.1)).init({"w": jnp.ones(2)})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`set_hyperparams` cannot change learning_rate: it was given as a JAX array when "
            "the transform was built"
        ),
    ):
        optx.set_hyperparams(state, learning_rate=0.01)
    with pytest.raises(ValueError, match=re.escape("cannot change learning_rate")):
        optx.scale_hyperparams(state, learning_rate=0.5)


def test_traced_hyperparameter_must_be_a_real_scalar() -> None:
    def build(lr: jax.Array) -> Any:
        return optx.sgd(lr).init({"w": jnp.ones(2)})

    with pytest.raises(
        TypeError,
        match=re.escape(
            "`sgd` needs learning_rate to be a real scalar. Received: learning_rate traced "
            "with shape (2,) and dtype float32."
        ),
    ):
        jax.jit(build)(jnp.ones(2))
