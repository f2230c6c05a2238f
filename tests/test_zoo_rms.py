"""The RMS-style family (rmsprop, adagrad, adadelta) and SGD's momentum conventions.

Parity with optax over 100 jitted steps; float64 NumPy transcriptions of optax's and of
Keras's formulas (Keras's conventions are options of the same building blocks); Keras itself
on the JAX backend for a few steps; convergence; bfloat16 parameters with float32 slots;
every error message.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is imported

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, run64
from helpers import assert_close as _assert_close

import optx

STEPS = 100
ATOL = 1e-7  # `assert_close`'s default here: leaves that stay near zero
EPS64 = float(np.finfo(np.float64).eps)
# Float64 round-off of a float64 run (`run64`): 32 roundings a step of each leaf's scale.
ROUNDOFF64 = STEPS * 32 * EPS64


# ---------------------------------------------------------------------------------------
# Data and runners.


def assert_close(name: str, actual: Any, expected: Any, rtol: float, atol: float = ATOL) -> float:
    """`helpers.assert_close` with this file's default absolute tolerance."""
    return _assert_close(name, actual, expected, rtol, atol)


def make_params() -> Any:
    """A nested float32 pytree: dicts and lists, matrices, vectors, a 3-D kernel, a scalar."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "dense": {"kernel": normal(3, 4), "bias": normal(4)},
        "blocks": [{"conv": normal(2, 3, 2)}, normal(5)],
        "scale": normal(),
    }


def small_params() -> Any:
    """A matrix and a vector: the tree of the NumPy and bfloat16 checks (compiles faster)."""
    params = make_params()
    return {"w": params["dense"]["kernel"], "b": params["blocks"][1]}


def make_grads(params: Any, steps: int = STEPS) -> Any:
    """Gradients for each step (leading axis), their magnitude swinging between 0.2 and 2.2."""
    rng = np.random.default_rng(1)
    magnitude = 0.2 + 2.0 * np.sin(0.3 * np.arange(steps)) ** 2

    def draw(p: jax.Array) -> jax.Array:
        g = rng.standard_normal((steps, *p.shape)) * magnitude.reshape((steps,) + (1,) * p.ndim)
        return jnp.asarray(g, jnp.float32)

    return jax.tree.map(draw, params)


def run(tx: Any, apply_updates: Callable[..., Any], params: Any, grads: Any) -> tuple[Any, Any]:
    """The parameters and state after one jitted `lax.scan` of ``tx`` over ``grads``."""

    def go(params: Any, grads: Any) -> tuple[Any, Any]:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), grads)[0]

    return jax.jit(go)(params, grads)


# State entries both libraries keep, by attribute name, in tree order.
SLOTS = ("nu", "mu", "sum_of_squares", "e_g", "e_x", "trace", "count")
_COUNTED = (
    "ScaleByRmsState",
    "ScaleByRStdDevState",
    "ScaleByRmsWithCountState",
    "ScaleByRStdDevWithCountState",
)


def slots(state: Any) -> dict[str, list[Any]]:
    """The leaves under each `SLOTS` attribute (counts of the RMS states only)."""
    out: dict[str, list[Any]] = {}

    def visit(node: Any) -> bool:
        fields = getattr(node, "_fields", None)
        if fields is None:
            return False
        for field in fields:
            if field in SLOTS and (field != "count" or type(node).__name__ in _COUNTED):
                out.setdefault(field, []).extend(jax.tree.leaves(getattr(node, field)))
        return True

    jax.tree_util.tree_flatten(state, is_leaf=visit)
    return out


def halving(count: jax.Array) -> jax.Array:
    """A learning rate that changes every step: 0.1 * 0.5**count."""
    return 0.1 * 0.5 ** jnp.asarray(count, jnp.float32)


def decaying(count: jax.Array) -> jax.Array:
    """0.05 * 0.97**count: decays over the 100 steps."""
    return 0.05 * 0.97 ** jnp.asarray(count, jnp.float32)


# ---------------------------------------------------------------------------------------
# Parity with optax.

# (id, optx transform, optax transform, slots compared). The building blocks run inside
# the optimizers; `scale_by_stddev` is also checked alone.
PARITY = [
    (
        "scale_by_stddev/bias_correction_outside",
        lambda: optx.scale_by_stddev(0.95, 1e-4, 0.1, False, True),
        lambda: optax.scale_by_stddev(0.95, 1e-4, 0.1, False, True),
        ("mu", "nu", "count"),
    ),
    (
        "rmsprop/momentum",
        lambda: optx.rmsprop(1e-2, momentum=0.9),
        lambda: optax.rmsprop(1e-2, momentum=0.9),
        ("nu", "trace"),
    ),
    (
        "rmsprop/centered_nesterov_schedule",
        lambda: optx.rmsprop(decaying, 0.95, 1e-7, centered=True, momentum=0.8, nesterov=True),
        lambda: optax.rmsprop(decaying, 0.95, 1e-7, centered=True, momentum=0.8, nesterov=True),
        ("mu", "nu", "trace"),
    ),
    (
        # eps outside the root, initial scale 1, momentum, bias correction (b = 0.99).
        "rmsprop/all_options",
        lambda: optx.rmsprop(1e-2, 0.99, 1e-6, 1.0, False, False, 0.5, False, True),
        lambda: optax.rmsprop(1e-2, 0.99, 1e-6, 1.0, False, False, 0.5, False, True),
        ("nu", "trace", "count"),
    ),
    (
        "adagrad",
        lambda: optx.adagrad(decaying, 0.0, 1e-5),
        lambda: optax.adagrad(decaying, 0.0, 1e-5),
        ("sum_of_squares",),
    ),
    (
        # optax's `None` ascends (see test_adadelta_default_learning_rate_descends): compare
        # optx's default with optax's explicit 1.0.
        "adadelta/default",
        lambda: optx.adadelta(),
        lambda: optax.adadelta(1.0),
        ("e_g", "e_x"),
    ),
    (
        "adadelta/weight_decay_schedule",
        lambda: optx.adadelta(decaying, 0.95, 1e-7, weight_decay=0.1),
        lambda: optax.adadelta(decaying, 0.95, 1e-7, weight_decay=0.1),
        ("e_g", "e_x"),
    ),
    (
        # The Keras convention is optax's trace after the learning rate.
        "sgd/keras_convention_nesterov",
        lambda: optx.sgd(halving, 0.8, True, momentum_convention="keras"),
        lambda: optax.chain(optax.scale_by_learning_rate(halving), optax.trace(0.8, True)),
        ("trace",),
    ),
]


# Parity runs in float64 (`run64`): the one difference left is optx's float32
# hyperparameters (DESIGN D2), each off by at most EPS32 / 2 relative. Per case
# (k, trace_gain): ``k`` counts the roundings a step's update goes through: 1 for a learning
# rate, epsilon, weight decay, initial scale; a decay ``b`` is used as float32 ``b`` in
# ``b * nu`` (``1 - b`` is exact), so ``b**n`` is off by ``n * EPS32 / 2``, ``n`` averaging
# ``b / (1 - b)`` over the weights (19 for 0.95, 9 for 0.9, 4 for 0.8, 1 for 0.5; 99 for 0.99),
# halved through a square root, doubled for the centred ``nu - mu**2`` (both moments), plus
# 3 for a float32 bias correction. The parameters are off by at most
# ``k * EPS32 / 2 * sum_t max|u_t|`` per leaf, plus float64 round-off (ROUNDOFF64).
# ``trace_gain``: ``1 / (1 - b)`` of a momentum trace, how far below its terms' size it can
# cancel. A learning rate 1.001x too large lands far outside (`test_parity_bounds_catch...`).
PARITY_K = {
    # No learning rate: eps; b = 0.95 on mu and nu (19 each, the stddev's difference), the
    # bias correction; the initial scale.
    "scale_by_stddev/bias_correction_outside": (1 + 2 * 19 + 3 + 1, 1.0),
    "rmsprop/momentum": (1 + 9 / 2 + 1 + 9, 10.0),  # lr, b = 0.9, eps, momentum 0.9
    # lr (a float32 schedule on both sides), b = 0.95 centred, eps, momentum 0.8, Nesterov.
    "rmsprop/centered_nesterov_schedule": (1 + 19 + 1 + 4 + 1, 5.0),
    # lr, b = 0.99, eps, initial scale, momentum 0.5, bias correction.
    "rmsprop/all_options": (1 + 99 / 2 + 1 + 1 + 1 + 3, 2.0),
    "adagrad": (1 + 1, 1.0),  # the schedule, eps (no decay)
    # lr, rho = 0.9 on e_g and e_x (9 / 2 each through the roots), eps; e_x feeds back the
    # squared updates: twice again.
    "adadelta/default": (1 + 2 * (9 + 1), 1.0),
    "adadelta/weight_decay_schedule": (1 + 2 * (19 + 1) + 1, 1.0),  # rho = 0.95, weight decay
    # The trace of lr * g with a learning rate halving each step: its oldest terms dominate,
    # so the lag of b = 0.8 is not 4 but up to STEPS; Nesterov's extra b.
    "sgd/keras_convention_nesterov": (STEPS + 1, 5.0),
}


@pytest.mark.parametrize(
    ("ours", "theirs", "compared", "k", "trace_gain"),
    [(*c[1:], *PARITY_K[c[0]]) for c in PARITY],
    ids=[c[0] for c in PARITY],
)
def test_parity_with_optax(
    ours: Callable, theirs: Callable, compared: tuple[str, ...], k: float, trace_gain: float
) -> None:
    params = make_params()
    grads = make_grads(params)
    p1, s1, _ = run64(ours(), optx.apply_updates, params, grads)
    p2, s2, path = run64(theirs(), optax.apply_updates, params, grads)
    # Per leaf: k roundings of EPS32 / 2 on every step's update (see `PARITY_K`).
    for a, e, u in zip(
        jax.tree.leaves(p1), jax.tree.leaves(p2), jax.tree.leaves(path), strict=True
    ):
        assert a.dtype == np.float64
        assert_close("params", a, e, ROUNDOFF64, k * EPS32 / 2 * float(u))
    ours_slots, theirs_slots = slots(s1), slots(s2)
    assert set(compared) <= set(ours_slots), sorted(ours_slots)
    for name in compared:
        # The same roundings, b's full lag (no square root): 2 k; a trace can cancel to
        # trace_gain times below its terms' size.
        rtol = 2 * k * EPS32 / 2 * (trace_gain if name == "trace" else 1.0) + ROUNDOFF64
        assert_close(name, ours_slots[name], theirs_slots[name], rtol, 0.0)


@pytest.mark.parametrize("case_id", ["rmsprop/momentum", "adadelta/default"])
def test_parity_bounds_catch_a_learning_rate_off_by_1e3(case_id: str) -> None:
    """`test_parity_with_optax`'s bounds see a learning rate 1.001x too large."""
    _, ours, theirs, _ = next(c for c in PARITY if c[0] == case_id)
    k, _ = PARITY_K[case_id]
    params = make_params()
    grads = make_grads(params)
    p1, _, _ = run64(optx.chain(ours(), optx.scale(1.001)), optx.apply_updates, params, grads)
    p2, _, path = run64(theirs(), optax.apply_updates, params, grads)
    leaves = zip(jax.tree.leaves(p1), jax.tree.leaves(p2), jax.tree.leaves(path), strict=True)
    errors = [
        float(np.max(np.abs(a - e)))
        / (k * EPS32 / 2 * float(u) + ROUNDOFF64 * float(np.max(np.abs(e))))
        for a, e, u in leaves
    ]
    print(f"{case_id} x 1.001: max error / bound {max(errors):.3g}")
    assert max(errors) > 10


def test_adadelta_default_learning_rate_descends() -> None:
    """``adadelta()`` (``learning_rate=None``) is Zeiler's method with learning rate 1.

    optax 0.2.8's ``adadelta(None)`` drops the learning-rate stage and its sign flip, so it
    climbs; optx's ``None`` means 1.0 and descends.
    """
    f = lambda p: jnp.sum(p**2)  # noqa: E731
    x0 = jnp.array([1.0, -2.0, 3.0])

    def final(tx: Any, apply: Callable) -> jax.Array:
        x, state = x0, tx.init(x0)
        for _ in range(20):
            u, state = tx.update(jax.grad(f)(x), state, x)
            x = apply(x, u)
        return x

    ours = final(optx.adadelta(), optx.apply_updates)
    assert f(ours) < f(x0)
    # The same float32 maths on both sides: where the two round p + u differently they end up
    # one ulp apart (at most EPS32 of |p|, which stays above 0.9), a step. The updates are
    # below 4e-3 of |p|; with a few dozen roundings (EPS32 / 2 each) they differ by under
    # 0.1 EPS32 of |p|. Over 20 steps: 20 * 1.1 * EPS32, elementwise.
    theirs = final(optax.adadelta(1.0), optax.apply_updates)
    np.testing.assert_allclose(ours, theirs, rtol=20 * 1.1 * EPS32)
    assert float(optx.get_hyperparams(optx.adadelta().init(x0))["learning_rate"]) == 1.0


# ---------------------------------------------------------------------------------------
# NumPy (float64) transcriptions.


def reference(step: Callable[..., Any], params: Any, grads: Any, **slots0: Any) -> tuple:
    """Runs ``step(p, g, t, slots) -> p`` (``slots`` a dict it updates) leaf by leaf in
    float64, with ``t`` the 1-based step; returns the final leaves and per leaf
    ``sum_t max|u_t|`` of the updates.
    """
    out, paths = [], []
    for p, gs in zip(jax.tree.leaves(params), jax.tree.leaves(grads), strict=True):
        p = np.asarray(p, np.float64)
        state = {k: np.full(p.shape, v, np.float64) for k, v in slots0.items()}
        path = 0.0
        for t, g in enumerate(np.asarray(gs, np.float64), 1):
            new = step(p, g, t, state)
            path += float(np.max(np.abs(new - p)))
            p = new
        out.append(p)
        paths.append(path)
    return out, paths


# The transcriptions are compared with optx run in float64 (`run64`), so the one difference
# left is optx's float32 hyperparameters (DESIGN D2), counted as in `PARITY_K`: ``k``
# roundings of EPS32 / 2 on each step's update (1 for a learning rate or a schedule, an
# epsilon, an initial value, a weight decay; the lag ``b / (1 - b)`` of a decay, halved
# through a square root and doubled when centred; STEPS for the Keras-convention trace of a
# halving learning rate, whose oldest terms dominate). The parameters are then off by at
# most ``k * EPS32 / 2 * sum_t max|u_t|`` per leaf, plus ROUNDOFF64 of each leaf's scale;
# a learning rate 1.001x too large is 1e-3 of the path, over 100 times that
# (`test_reference_bounds_catch_a_learning_rate_off_by_1e3`).


def check_reference(name: str, tx: Any, step: Callable, k: float, **slots0: Any) -> None:
    """``tx`` in float64 against the NumPy ``step`` over 100 steps on a matrix and a
    vector, to ``k`` roundings of optx's float32 hyperparameters (see above).
    """
    params = small_params()
    grads = make_grads(params)
    ours, _, _ = run64(tx, optx.apply_updates, params, grads)
    expected, paths = reference(step, params, grads, **slots0)
    for a, e, path in zip(jax.tree.leaves(ours), expected, paths, strict=True):
        assert a.dtype == np.float64
        assert_close(name, a, e, ROUNDOFF64, k * EPS32 / 2 * path)


def lr_at(lr: Any, t: int) -> float:
    """The learning rate of 1-based step ``t`` (schedules see the 0-based count)."""
    return float(lr(jnp.asarray(t - 1))) if callable(lr) else lr


def np_rmsprop(lr, decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt=True, centered=False,
               momentum=None, nesterov=False, bias_correction=False):  # fmt: skip
    """optax's rmsprop: the learning rate before the momentum trace (``initial_scale`` is
    the start of the ``nu`` slot, given to `reference`).
    """

    def step(p, g, t, s):
        s["nu"] = decay * s["nu"] + (1 - decay) * g * g
        s["mu"] = decay * s["mu"] + (1 - decay) * g
        bc = 1 - decay**t if bias_correction else 1.0
        d = s["nu"] / bc - (s["mu"] / bc) ** 2 if centered else s["nu"] / bc
        u = -lr_at(lr, t) * (g / np.sqrt(d + eps) if eps_in_sqrt else g / (np.sqrt(d) + eps))
        if momentum is not None:
            s["tr"] = u + momentum * s["tr"]
            u = u + momentum * s["tr"] if nesterov else s["tr"]
        return p + u

    return step


# (id, options, k): k as in `check_reference`.
RMSPROP_REFERENCE = [
    (
        "initial_scale_outside",
        dict(learning_rate=1e-2, decay=0.8, initial_scale=0.5, eps_in_sqrt=False),
        1 + 4 / 2 + 1 + 1,  # lr, decay 0.8, initial scale, eps
    ),
    (
        "centered_momentum",
        dict(learning_rate=decaying, centered=True, momentum=0.9),
        1 + 9 + 1 + 9,  # the schedule, decay 0.9 centred, eps, momentum 0.9
    ),
    (
        "everything",
        dict(
            learning_rate=decaying,
            eps=1e-4,
            initial_scale=1.0,
            eps_in_sqrt=False,
            centered=True,
            momentum=0.7,
            nesterov=True,
            bias_correction=True,
        ),
        # The schedule, decay 0.9 centred, eps, initial scale, momentum 0.7, Nesterov's
        # extra momentum, the bias correction.
        1 + 9 + 1 + 1 + 7 / 3 + 1 + 3,
    ),
]


@pytest.mark.parametrize(
    ("kwargs", "k"),
    [c[1:] for c in RMSPROP_REFERENCE],
    ids=[c[0] for c in RMSPROP_REFERENCE],
)
def test_rmsprop_matches_numpy(kwargs: dict, k: float) -> None:
    step = np_rmsprop(
        kwargs["learning_rate"], **{k: v for k, v in kwargs.items() if k != "learning_rate"}
    )
    nu0 = kwargs.get("initial_scale", 0.0)
    check_reference("rmsprop", optx.rmsprop(**kwargs), step, k, nu=nu0, mu=0.0, tr=0.0)


def np_keras_rmsprop(lr, rho, momentum, epsilon, centered):
    """Keras 3's RMSprop.update_step, in its own variables (velocity, average gradient)."""

    def step(w, g, t, s):
        s["velocity"] = rho * s["velocity"] + (1 - rho) * g * g
        if centered:
            s["average_gradient"] = rho * s["average_gradient"] + (1 - rho) * g
            denominator = s["velocity"] - s["average_gradient"] ** 2 + epsilon
        else:
            denominator = s["velocity"] + epsilon
        increment = lr * g / np.sqrt(denominator)
        if momentum > 0:
            s["momentum"] = momentum * s["momentum"] + increment
            return w - s["momentum"]
        return w - increment

    return step


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("centered", [False, True])
def test_rmsprop_equals_keras_formula(momentum: float, centered: bool) -> None:
    """Keras's RMSprop is optax's with matched hyperparameters (keras-semantics §2.2, §2.15)."""
    tx = optx.rmsprop(1e-2, decay=0.8, eps=1e-7, centered=centered, momentum=momentum or None)
    step = np_keras_rmsprop(1e-2, 0.8, momentum, 1e-7, centered)
    # lr, decay 0.8 (doubled when centred), eps, momentum 0.9.
    k = 1 + (4 if centered else 4 / 2) + 1 + (9 if momentum else 0)
    slots0 = dict(velocity=0.0, average_gradient=0.0, momentum=0.0)
    check_reference("keras rmsprop", tx, step, k, **slots0)


def np_adagrad(lr, initial, eps, eps_in_sqrt):
    """Keras 3 (eps inside the root) or TF OptimizerV2's ApplyAdagradV2 (eps outside)."""

    def step(w, g, t, s):
        s["accumulator"] = s["accumulator"] + g * g
        a = s["accumulator"]
        with np.errstate(divide="ignore", invalid="ignore"):
            u = g / np.sqrt(a + eps) if eps_in_sqrt else g / (np.sqrt(a) + eps)
        return w - lr_at(lr, t) * np.where(a > 0, u, 0.0)

    return step


@pytest.mark.parametrize(
    ("lr", "initial", "eps", "eps_in_sqrt"),
    [(0.1, 0.1, 1e-7, True), (decaying, 0.0, 1e-3, False)],
    ids=["keras", "tf_legacy_schedule"],
)
def test_adagrad_matches_numpy(lr: Any, initial: float, eps: float, eps_in_sqrt: bool) -> None:
    tx = optx.adagrad(lr, initial, eps, eps_in_sqrt=eps_in_sqrt)
    step = np_adagrad(lr, initial, eps, eps_in_sqrt)
    # The learning rate, the initial accumulator, eps (no decay).
    check_reference("adagrad", tx, step, 1 + 1 + 1, accumulator=initial)


def test_adagrad_zero_accumulator_gives_zero_update() -> None:
    for eps_in_sqrt in (True, False):
        tx = optx.scale_by_rss(0.0, 0.0, eps_in_sqrt=eps_in_sqrt)
        g = {"w": jnp.array([0.0, 3.0])}
        u, _ = tx.update(g, tx.init(g))
        np.testing.assert_array_equal(u["w"], [0.0, 1.0])


def np_keras_adadelta(lr, rho, epsilon, weight_decay=0.0):
    """Keras 3's Adadelta.update_step (Δ negative, w ← w + η Δ), after optax's coupled decay."""

    def step(w, g, t, s):
        g = g + weight_decay * w
        s["accumulated_grad"] = rho * s["accumulated_grad"] + (1 - rho) * g * g
        delta = -np.sqrt(s["accumulated_delta_var"] + epsilon) * g
        delta = delta / np.sqrt(s["accumulated_grad"] + epsilon)
        s["accumulated_delta_var"] = rho * s["accumulated_delta_var"] + (1 - rho) * delta**2
        return w + lr_at(lr, t) * delta

    return step


@pytest.mark.parametrize(
    ("args", "weight_decay", "k"),
    [
        # The learning rate (or schedule); rho's lag on e_g and on e_x, halved through
        # each root (19 / 2 each for rho = 0.95, 1 / 2 for 0.5), and eps, twice again as
        # e_x feeds back the squared updates; the weight decay.
        ((1e-3, 0.95, 1e-7), 0.0, 1 + 2 * (19 + 1)),
        ((decaying, 0.5, 1e-4), 0.05, 1 + 2 * (1 + 1) + 1),
    ],
    ids=["keras_defaults", "weight_decay_schedule"],
)
def test_adadelta_matches_keras_formula(args: tuple, weight_decay: float, k: float) -> None:
    tx = optx.adadelta(*args, weight_decay=weight_decay)
    step = np_keras_adadelta(*args, weight_decay)
    check_reference("adadelta", tx, step, k, accumulated_grad=0.0, accumulated_delta_var=0.0)


def np_sgd(lr, momentum, nesterov, convention):
    def step(w, g, t, s):
        eta = lr_at(lr, t)
        if convention == "keras":  # v = m v - lr g; w += v (Nesterov: w += m v - lr g)
            s["v"] = momentum * s["v"] - eta * g
            return w + (momentum * s["v"] - eta * g if nesterov else s["v"])
        s["v"] = g + momentum * s["v"]  # t = g + m t; w -= lr t (Nesterov: lr (g + m t))
        return w - eta * (g + momentum * s["v"] if nesterov else s["v"])

    return step


@pytest.mark.parametrize("convention", ["optax", "keras"])
@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_conventions_match_numpy(nesterov: bool, convention: str) -> None:
    tx = optx.sgd(halving, 0.9, nesterov, momentum_convention=convention)
    step = np_sgd(halving, 0.9, nesterov, convention)
    # The schedule, momentum 0.9 (its lag; STEPS for the Keras trace of a halving learning
    # rate, see `check_reference`), Nesterov's extra momentum.
    k = 1 + (STEPS if convention == "keras" else 9) + nesterov
    check_reference(f"sgd {convention}", tx, step, k, v=0.0)


def test_reference_bounds_catch_a_learning_rate_off_by_1e3() -> None:
    """`check_reference`'s bounds see a learning rate 1.001x too large."""
    params = small_params()
    grads = make_grads(params)
    cases = [
        (
            "rmsprop/centered_momentum",
            RMSPROP_REFERENCE[1][2],
            optx.rmsprop(decaying, centered=True, momentum=0.9),
            np_rmsprop(decaying, centered=True, momentum=0.9),
            dict(nu=0.0, mu=0.0, tr=0.0),
        ),
        (
            "adadelta/keras_defaults",
            1 + 2 * (19 + 1),
            optx.adadelta(1e-3, 0.95, 1e-7),
            np_keras_adadelta(1e-3, 0.95, 1e-7),
            dict(accumulated_grad=0.0, accumulated_delta_var=0.0),
        ),
    ]
    for label, k, tx, step, slots0 in cases:
        ours, _, _ = run64(optx.chain(tx, optx.scale(1.001)), optx.apply_updates, params, grads)
        expected, paths = reference(step, params, grads, **slots0)
        leaves = zip(jax.tree.leaves(ours), expected, paths, strict=True)
        errors = [
            float(np.max(np.abs(a - e)))
            / (k * EPS32 / 2 * path + ROUNDOFF64 * float(np.max(np.abs(e))))
            for a, e, path in leaves
        ]
        print(f"{label} x 1.001: max error / bound {max(errors):.3g}")
        assert max(errors) > 10


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_conventions_agree_for_a_constant_learning_rate_only(nesterov: bool) -> None:
    params = small_params()
    grads = make_grads(params)

    def final(lr: Any, convention: str, runner: Callable[..., tuple] = run64) -> Any:
        tx = optx.sgd(lr, 0.9, nesterov, momentum_convention=convention)
        return runner(tx, optx.apply_updates, params, grads)[0]

    # Constant: v = -lr * t, the same numbers in float64 (both with float32 lr = 0.05 and
    # m = 0.9) up to float64 round-off: per step each side rounds at most 6 values of size
    # at most 2 W, W = lr max|g| (1 / (1 - m) + 1) bounding |v| + lr |g| (the traces, the
    # Nesterov sum, lr * t), carried by the trace: / (1 - m); and each rounds p + u, EPS64 / 2
    # of |p|. Per leaf, over STEPS steps: STEPS * EPS64 * (max|p| + 12 W / (1 - m)).
    lr, m = 0.05, 0.9
    by_keras, by_optax = final(lr, "keras"), final(lr, "optax")
    leaves = zip(
        jax.tree.leaves(by_keras), jax.tree.leaves(by_optax), jax.tree.leaves(grads), strict=True
    )
    for a, e, g in leaves:
        w = lr * float(np.max(np.abs(g))) * (1 / (1 - m) + 1)
        p_max = float(np.max(np.abs(e))) + STEPS * w  # |p_t| <= |p_T| + sum_t |u_t|
        assert_close("constant", a, e, 0.0, STEPS * EPS64 * (p_max + 12 * w / (1 - m)))
    # Scheduled: the Keras velocity keeps each gradient at its own step's learning rate.
    diff = jax.tree.map(lambda a, b: jnp.max(jnp.abs(a - b)), final(halving, "keras", run),
                        final(halving, "optax", run))  # fmt: skip
    assert max(map(float, jax.tree.leaves(diff))) > 0.1


def test_sgd_keras_convention_state_names() -> None:
    tx = optx.sgd(0.1, 0.9, momentum_convention="keras")
    state = tx.init(make_params())
    assert isinstance(state[0], optx.ScaleByLearningRateState)
    assert isinstance(state[1], optx.TraceState)
    assert sorted(optx.get_hyperparams(state)) == ["learning_rate", "momentum"]
    assert tx != optx.sgd(0.1, 0.9)
    # Without momentum the convention changes only the order of the chain.
    plain = optx.sgd(0.1, momentum_convention="keras")
    g = {"w": jnp.array([1.0, -2.0])}
    np.testing.assert_array_equal(
        plain.update(g, plain.init(g))[0]["w"],
        optx.sgd(0.1).update(g, optx.sgd(0.1).init(g))[0]["w"],
    )


# ---------------------------------------------------------------------------------------
# Keras itself (JAX backend), a few steps.


# Roundings of one step's update, at most 16 (the centred RMSProp with momentum): g * g; two
# products and a sum for each moving average (6); the centred mean's square and difference
# (2); eps, the root and the division (3, one more where XLA writes x / sqrt(v) as
# x * rsqrt(v)); the learning rate; the momentum's product and sum (2). Keras's learning-rate
# schedule (a float32 power) adds a few.
KERAS_ROUNDINGS = 20


def _keras_cases() -> list:
    return [
        ("RMSprop", dict(learning_rate=0.01, rho=0.8), lambda: optx.rmsprop(0.01, 0.8, 1e-7)),
        (
            "RMSprop",
            dict(learning_rate=0.01, momentum=0.9, centered=True),
            lambda: optx.rmsprop(0.01, 0.9, 1e-7, centered=True, momentum=0.9),
        ),
        ("Adagrad", dict(learning_rate=0.1), lambda: optx.adagrad(0.1)),
        ("Adadelta", dict(learning_rate=0.5), lambda: optx.adadelta(0.5, 0.95, 1e-7)),
        (
            "SGD",
            dict(learning_rate="halving", momentum=0.9, nesterov=True),
            lambda: optx.sgd(halving, 0.9, True, momentum_convention="keras"),
        ),
    ]


@pytest.mark.parametrize("case", _keras_cases(), ids=lambda c: f"{c[0]}{sorted(c[1])}")
def test_matches_keras(case: tuple) -> None:
    import keras

    assert keras.backend.backend() == "jax"
    cls, kwargs, ours = case
    if kwargs["learning_rate"] == "halving":
        kwargs = {
            **kwargs,
            "learning_rate": keras.optimizers.schedules.ExponentialDecay(0.1, 1, 0.5),
        }
    rng = np.random.default_rng(3)
    values = [
        rng.standard_normal((3, 2)).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
    ]
    grads = [[rng.standard_normal(v.shape).astype(np.float32) for v in values] for _ in range(5)]
    variables = [keras.Variable(v) for v in values]
    optimizer = getattr(keras.optimizers, cls)(**kwargs)
    optimizer.build(variables)
    tx = ours()
    params = [jnp.asarray(v) for v in values]
    state = tx.init(params)
    path, p_max = np.zeros(len(params)), np.zeros(len(params))
    for g in grads:
        optimizer.apply_gradients(zip(g, variables, strict=True))
        updates, state = tx.update([jnp.asarray(x) for x in g], state, params)
        params = optx.apply_updates(params, updates)
        path += [float(jnp.max(jnp.abs(u))) for u in updates]
        p_max = np.maximum(p_max, [float(jnp.max(jnp.abs(p))) for p in params])
    # Both sides evaluate the same elementwise float32 maths in their own order, from the
    # same float32 hyperparameters (Keras keeps 1 - rho as float32(1 - rho), optx stores it
    # exactly, the same float32 number): an update is off by at most KERAS_ROUNDINGS
    # roundings of its own step and of each earlier one (the slots carry them), EPS32 / 2
    # each, on each side; and each side rounds p + u, EPS32 / 2 of p. Per leaf, over T steps:
    # T * EPS32 * max|p| + T * KERAS_ROUNDINGS * EPS32 * sum_t max|u_t|.
    steps = len(grads)
    for i, (a, v) in enumerate(zip(params, variables, strict=True)):
        bound = steps * EPS32 * (p_max[i] + KERAS_ROUNDINGS * path[i])
        assert_close(f"keras {cls}", a, np.asarray(v), 0.0, bound)


# ---------------------------------------------------------------------------------------
# Convergence.

# The minima are at 0: near 0 float32 resolves a distance to its own relative precision, so
# no float32 stall point (a step below half an ulp of the parameter, 6e-8 near 1) limits how
# close a run gets, and float32 moves where a run ends by a relative round-off only (on this
# machine at most 4.5e-2 of the distance, Adadelta's feedback amplifying it on Rosenbrock;
# 1e-4 for most).
# Where a run ends is then its maths', the same on every machine.
CURVATURE = jnp.array([1.0, 10.0, 0.1])


def parabola(y: jax.Array) -> jax.Array:
    """Curvatures 2, 20 and 0.2; minimum 0 at 0."""
    return jnp.sum(CURVATURE * y**2)


def rosenbrock(y: jax.Array) -> jax.Array:
    """The 2-D Rosenbrock function of x = y + (1, 1), ``(1 - x0)**2 + 100 (x1 - x0**2)**2``,
    expanded so that no sum with 1 rounds y to 1's ulp; minimum 0 at y = 0.
    """
    return y[0] ** 2 + 100 * (y[1] - y[0] * (2 + y[0])) ** 2


def cosine(peak: float, steps: int) -> Callable[[jax.Array], jax.Array]:
    """Cosine decay to 0: RMS-normalised steps do not shrink with the gradient."""

    def schedule(count: jax.Array) -> jax.Array:
        t = jnp.minimum(count, steps).astype(jnp.float32) / steps
        return peak * 0.5 * (1 + jnp.cos(jnp.pi * t))

    return schedule


# (the function, the start): the parabola from (-1, 2, -3), Rosenbrock from x = (-1.5, 2).
PROBLEMS = {
    "parabola": (parabola, jnp.array([-1.0, 2.0, -3.0])),
    "rosenbrock": (rosenbrock, jnp.array([-2.5, 1.0])),
}

# Every run must end within TOL of the minimum (max norm). TOL is a requirement on the maths,
# not a round-off tolerance (see above); what sets each end point: RMSProp takes steps of
# about the learning rate whatever the gradient, so it needs a schedule decaying to 0 to
# settle, and so does Adadelta (with a constant rate it circles at ~0.5 from Rosenbrock's
# minimum, and on the parabola's stiff coordinate it settles at the edge of stability,
# oscillating at 9e-3 after 1,000 steps). Adagrad's rates shrink like 1 / sqrt(sum g**2):
# on Rosenbrock's valley floor (curvature 0.4) its final rates (~1e-3) contract the
# distance by 5.5e-4 a step, e**-5.5 over the last 10,000 steps; it ends at 2.0e-5, and
# Adadelta's run on Rosenbrock at 2.0e-5, both 5x below TOL; the others end below 3e-6
# (float64 runs of the same steps; see `-s` for float32's).
TOL = 1e-4
CONVERGENCE = [
    ("rmsprop", lambda: optx.rmsprop(cosine(0.05, 1000)), "parabola", 1000),
    (
        "rmsprop_centered_momentum",
        lambda: optx.rmsprop(cosine(0.01, 1000), centered=True, momentum=0.9),
        "parabola",
        1000,
    ),
    ("adagrad", lambda: optx.adagrad(0.5), "parabola", 1000),
    ("adadelta", lambda: optx.adadelta(cosine(1.0, 2000)), "parabola", 2000),
    ("sgd_keras", lambda: optx.sgd(0.02, 0.9, momentum_convention="keras"), "parabola", 500),
    ("rmsprop", lambda: optx.rmsprop(cosine(0.01, 3000), momentum=0.9), "rosenbrock", 3000),
    ("adagrad", lambda: optx.adagrad(1.0), "rosenbrock", 20000),
    ("adadelta", lambda: optx.adadelta(cosine(0.5, 20000)), "rosenbrock", 20000),
    (
        "sgd_keras_nesterov",
        lambda: optx.sgd(1e-3, 0.9, True, momentum_convention="keras"),
        "rosenbrock",
        3000,
    ),
]


@pytest.mark.parametrize(
    ("make", "problem", "steps"),
    [c[1:] for c in CONVERGENCE],
    ids=[f"{c[0]}-{c[2]}" for c in CONVERGENCE],
)
def test_convergence(make: Callable, problem: str, steps: int) -> None:
    f, x0 = PROBLEMS[problem]
    tx = make()

    @jax.jit
    def go(x0: jax.Array) -> jax.Array:
        def step(carry: tuple, _: None) -> tuple:
            x, state = carry
            updates, state = tx.update(jax.grad(f)(x), state, x)
            return (optx.apply_updates(x, updates), state), None

        return jax.lax.scan(step, (x0, tx.init(x0)), None, length=steps)[0][0]

    err = float(jnp.max(jnp.abs(go(x0))))
    print(f"distance to the minimum {err:.3g}")
    assert err < TOL


# ---------------------------------------------------------------------------------------
# bfloat16 parameters, float32 slots.

BF16_STEPS = 20
BF16_HALF_ULP = 2.0**-8  # half of bfloat16's eps, 2**-7: one rounding, relative


def run_sizes(tx: Any, params: Any, grads: Any) -> tuple:
    """`run`, and per leaf ``sum_t max|u_t|`` and ``max_t max|p_t|`` (in float32)."""

    def size(x: jax.Array) -> jax.Array:
        return jnp.max(jnp.abs(x.astype(jnp.float32)))

    def go(params: Any, grads: Any) -> tuple:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            p = optx.apply_updates(p, u)
            return (p, s), (jax.tree.map(size, u), jax.tree.map(size, p))

        (p, s), (u, p_max) = jax.lax.scan(step, (params, tx.init(params)), grads)
        return p, s, jax.tree.map(jnp.sum, u), jax.tree.map(jnp.max, p_max)

    return jax.jit(go)(params, grads)


# The float32 run starts from the bfloat16 parameters and gradients, so the runs differ by
# bfloat16's roundings alone (the float32 slots hold the same numbers in both, up to float32
# round-off, 2**15 times less). Each step rounds the parameter plus the update to bfloat16,
# BF16_HALF_ULP of the parameter, and each stage of the chain rounds the update it passes
# on, BF16_HALF_ULP of it. A float32 momentum trace (b = 0.9) carries the roundings made
# before it into every later step, 1 / (1 - b) times, of increments y_t = u_t - b u_(t-1),
# so |y| <= (1 + b) max|u|: 19 times each. The gradients are fixed data, so the parameters'
# roundings do not feed back into the updates: per leaf the runs differ by at most
# BF16_HALF_ULP * (BF16_STEPS * max_t max|p_t| + n * sum_t max|u_t|), n per configuration
# (one more for the float32 round-off). Each configuration moves its parameters by more than
# that, so the check is not vacuous.
BF16 = [
    (
        "rmsprop",
        lambda d: optx.rmsprop(1e-2, centered=True, momentum=0.9, accumulator_dtype=d),
        2 * 19 + 1 + 1,  # the root's and the learning rate's stages, carried; the trace's
    ),
    ("adagrad", lambda d: optx.adagrad(0.2, accumulator_dtype=d), 2 + 1),  # two stages
    # A large eps: the first steps are about sqrt(eps), and steps below half a bfloat16 ulp
    # of the parameter are lost. Two stages (the weight decay adds an exact 0).
    ("adadelta", lambda d: optx.adadelta(1.0, eps=1e-2, accumulator_dtype=d), 2 + 1),
    (
        "sgd_keras",
        lambda d: optx.sgd(decaying, 0.9, accumulator_dtype=d, momentum_convention="keras"),
        19 + 1 + 1,  # the learning rate's stage, carried; the trace's
    ),
]


@pytest.mark.parametrize(("make", "n"), [c[1:] for c in BF16], ids=[c[0] for c in BF16])
def test_bfloat16_params_with_float32_slots(make: Callable, n: int) -> None:
    p16 = jax.tree.map(lambda p: p.astype(jnp.bfloat16), small_params())
    g16 = jax.tree.map(lambda g: g.astype(jnp.bfloat16), make_grads(p16, steps=BF16_STEPS))
    as32 = jax.tree.map(lambda x: x.astype(jnp.float32), (p16, g16))
    p32, _, path, p_max = run_sizes(make(None), *as32)
    out, state = run(make(jnp.float32), optx.apply_updates, p16, g16)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(out))
    slot_leaves = [x for k, v in slots(state).items() if k != "count" for x in v]
    assert slot_leaves and all(x.dtype == jnp.float32 for x in slot_leaves)
    leaves = zip(
        jax.tree.leaves(out),
        jax.tree.leaves(p32),
        jax.tree.leaves(as32[0]),
        jax.tree.leaves(path),
        jax.tree.leaves(p_max),
        strict=True,
    )
    for a, e, p0, u, p in leaves:
        bound = BF16_HALF_ULP * (BF16_STEPS * float(p) + n * float(u))
        assert_close("bf16 vs f32", a, e, 0.0, bound)
        assert np.max(np.abs(np.asarray(e) - np.asarray(p0))) > bound


# ---------------------------------------------------------------------------------------
# Errors.

ERRORS = [
    (lambda: optx.scale_by_rms(decay=1.0), ValueError,
     "`scale_by_rms` needs decay in [0, 1). Received: decay=1.0."),
    (lambda: optx.scale_by_rms(eps=-1e-8), ValueError,
     "`scale_by_rms` needs eps finite and >= 0. Received: eps=-1e-08."),
    (lambda: optx.scale_by_rms(initial_scale=-1.0), ValueError,
     "`scale_by_rms` needs initial_scale finite and >= 0. Received: initial_scale=-1.0."),
    (lambda: optx.scale_by_rms(nu_dtype="int32"), TypeError,
     "`scale_by_rms` needs nu_dtype to be None or a floating dtype. Received: nu_dtype='int32'."),
    (lambda: optx.scale_by_stddev(decay=-0.5), ValueError,
     "`scale_by_stddev` needs decay in [0, 1). Received: decay=-0.5."),
    (lambda: optx.scale_by_stddev(initial_scale=float("inf")), ValueError,
     "`scale_by_stddev` needs initial_scale finite and >= 0. Received: initial_scale=inf."),
    (lambda: optx.scale_by_stddev(mu_dtype="int8"), TypeError,
     "`scale_by_stddev` needs mu_dtype to be None or a floating dtype. Received: mu_dtype='int8'."),
    (lambda: optx.rmsprop(-1.0), ValueError,
     "`rmsprop` needs learning_rate finite and >= 0. Received: learning_rate=-1.0."),
    (lambda: optx.rmsprop(0.1, decay=1.5, centered=True), ValueError,
     "`rmsprop` needs decay in [0, 1). Received: decay=1.5."),
    (lambda: optx.rmsprop(0.1, eps=-1.0), ValueError,
     "`rmsprop` needs eps finite and >= 0. Received: eps=-1.0."),
    (lambda: optx.rmsprop(0.1, initial_scale=-0.1), ValueError,
     "`rmsprop` needs initial_scale finite and >= 0. Received: initial_scale=-0.1."),
    (lambda: optx.rmsprop(0.1, momentum=1.5), ValueError,
     "`rmsprop` needs momentum in [0, 1]. Received: momentum=1.5."),
    (lambda: optx.rmsprop(0.1, decay="0.9"), TypeError,
     "`rmsprop` needs decay to be a real number or a schedule (a function of the step "
     "count). Received: decay='0.9' of type str."),
    (lambda: optx.rmsprop(0.1, accumulator_dtype="int32"), TypeError,
     "`rmsprop` needs accumulator_dtype to be None or a floating dtype. "
     "Received: accumulator_dtype='int32'."),
    (lambda: optx.scale_by_rss(initial_accumulator_value=-0.1), ValueError,
     "`scale_by_rss` needs initial_accumulator_value finite and >= 0. "
     "Received: initial_accumulator_value=-0.1."),
    (lambda: optx.scale_by_rss(eps=float("nan")), ValueError,
     "`scale_by_rss` needs eps finite and >= 0. Received: eps=nan."),
    (lambda: optx.scale_by_rss(accumulator_dtype=bool), TypeError,
     "`scale_by_rss` needs accumulator_dtype to be None or a floating dtype. "
     "Received: accumulator_dtype=<class 'bool'>."),
    (lambda: optx.adagrad(0.1, initial_accumulator_value=-1.0), ValueError,
     "`adagrad` needs initial_accumulator_value finite and >= 0. "
     "Received: initial_accumulator_value=-1.0."),
    (lambda: optx.adagrad(0.1, eps=-1e-7), ValueError,
     "`adagrad` needs eps finite and >= 0. Received: eps=-1e-07."),
    (lambda: optx.adagrad(0.1, accumulator_dtype="int32"), TypeError,
     "`adagrad` needs accumulator_dtype to be None or a floating dtype. "
     "Received: accumulator_dtype='int32'."),
    (lambda: optx.scale_by_adadelta(rho=1.0), ValueError,
     "`scale_by_adadelta` needs rho in [0, 1). Received: rho=1.0."),
    (lambda: optx.scale_by_adadelta(eps=-1.0), ValueError,
     "`scale_by_adadelta` needs eps finite and >= 0. Received: eps=-1.0."),
    (lambda: optx.scale_by_adadelta(accumulator_dtype="int32"), TypeError,
     "`scale_by_adadelta` needs accumulator_dtype to be None or a floating dtype. "
     "Received: accumulator_dtype='int32'."),
    (lambda: optx.adadelta(-0.5), ValueError,
     "`adadelta` needs learning_rate finite and >= 0. Received: learning_rate=-0.5."),
    (lambda: optx.adadelta(rho=-0.1), ValueError,
     "`adadelta` needs rho in [0, 1). Received: rho=-0.1."),
    (lambda: optx.adadelta(weight_decay=-1e-4), ValueError,
     "`adadelta` needs weight_decay finite and >= 0. Received: weight_decay=-0.0001."),
    (lambda: optx.adadelta(accumulator_dtype="int32"), TypeError,
     "`adadelta` needs accumulator_dtype to be None or a floating dtype. "
     "Received: accumulator_dtype='int32'."),
    (lambda: optx.sgd(0.1, 0.9, momentum_convention="torch"), ValueError,
     "`sgd` needs momentum_convention to be 'optax' or 'keras'. "
     "Received: momentum_convention='torch'."),
    (lambda: optx.sgd(0.1, 1.5, momentum_convention="keras"), ValueError,
     "`sgd` needs momentum in [0, 1]. Received: momentum=1.5."),
]  # fmt: skip


@pytest.mark.parametrize(("make", "error", "message"), ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_error_messages(make: Callable, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        make()
    assert str(info.value) == message


P = {"a": jnp.ones(2), "b": jnp.ones((2, 3))}


@pytest.mark.parametrize(
    ("tx", "slot"),
    [
        (optx.scale_by_rms(), "scale_by_rms"),
        (optx.scale_by_stddev(), "scale_by_stddev"),
        (optx.scale_by_rss(), "scale_by_rss"),
        (optx.scale_by_adadelta(), "scale_by_adadelta"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_update_and_init_errors(tx: Any, slot: str) -> None:
    with pytest.raises(ValueError) as info:
        tx.update({"a": jnp.ones(2)}, tx.init(P))
    assert str(info.value) == (
        f"`{slot}.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'b'."
    )
    with pytest.raises(ValueError) as info:
        tx.update({"a": jnp.ones(2), "b": jnp.ones(3)}, tx.init(P))
    assert str(info.value) == (
        f"`{slot}.update` needs updates with the shapes of the state. "
        "Received: updates['b'] of shape (3,), expected (2, 3)."
    )
    with pytest.raises(TypeError) as info:
        tx.init({"a": jnp.ones(2, jnp.int32)})
    assert str(info.value).startswith(
        f"`{slot}.init` needs floating-point params (float16, bfloat16, float32 or float64). "
        "Received: params['a'] of dtype int32."
    )


def test_adadelta_needs_params() -> None:
    tx = optx.adadelta()
    with pytest.raises(ValueError) as info:
        tx.update(P, tx.init(P))
    assert str(info.value) == (
        "`add_decayed_weights.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`."
    )


# ---------------------------------------------------------------------------------------
# Hyperparameters held in the state.


@pytest.mark.parametrize(
    ("tx", "expected"),
    [
        (
            optx.rmsprop(0.1),
            {"decay": 0.9, "eps": 1e-8, "initial_scale": 0.0, "learning_rate": 0.1},
        ),
        (
            optx.rmsprop(0.1, 0.8, centered=True, momentum=0.5),
            {
                "decay": 0.8,
                "eps": 1e-8,
                "initial_scale": 0.0,
                "learning_rate": 0.1,
                "momentum": 0.5,
            },
        ),
        (optx.adagrad(0.1), {"initial_accumulator_value": 0.1, "eps": 1e-7, "learning_rate": 0.1}),
        (optx.adadelta(), {"weight_decay": 0.0, "rho": 0.9, "eps": 1e-6, "learning_rate": 1.0}),
    ],
    ids=["rmsprop", "rmsprop_centered_momentum", "adagrad", "adadelta"],
)
def test_hyperparams(tx: Any, expected: dict[str, float]) -> None:
    got = optx.get_hyperparams(tx.init(P))
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(float(got[name]), value, rtol=1e-7)
    # Decay rates keep 1 - value exact to float32 round-off (what float32 rounded off the
    # value is kept beside it); no stored encoding shows in the state's paths.
    state = tx.init(P)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
    assert not any("one_minus" in p for p in paths)
    for d in {"decay", "rho"} & set(expected):
        (h,) = [
            n
            for n in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, optx.HyperParams))
            if isinstance(n, optx.HyperParams) and d in [e.name for e in n.entries]
        ]
        field = next(e.field for e in h.entries if e.name == d)
        assert float(h.complement(field)) == float(np.float32(1 - expected[d]))
