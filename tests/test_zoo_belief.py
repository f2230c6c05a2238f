"""AdaBelief, Yogi and Adan: parity with optax, float64 NumPy loops, convergence, bfloat16,
and every error message of these modules.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, assert_close

import optx

try:
    from tests import test_zoo_sign as common
except ImportError:  # tests/ is not a package: pytest put it on sys.path.
    import test_zoo_sign as common

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)
# Float64 round-off of a float64 run: 32 roundings a step of each leaf's scale.
ROUNDOFF64 = STEPS * 32 * EPS64

# Parity with optax and with the NumPy loops runs in float64 (`run64`): the one difference
# left is optx's float32 hyperparameters (DESIGN D2), each off by at most EPS32 / 2
# relative. As in tests/test_zoo_adam.py, ``k`` counts the roundings a step's update goes
# through: 1 for a learning rate, an epsilon, an initial value, a weight decay; a decay
# ``b`` is used as float32 ``b`` (``1 - b`` is exact), so ``b**n`` is off by
# ``n * EPS32 / 2``, ``n`` averaging ``b / (1 - b)`` (at most STEPS) over a moving
# average's weights, halved through a square root; ``1 - b`` as float32 1 (1/2 through a
# root); a float32 bias correction 3 (2 through a root). The parameters are then off by at
# most ``k * EPS32 / 2 * sum_t max|u_t|`` per leaf, plus ROUNDOFF64 of each leaf's scale; a
# learning rate 1.001x too large lands over 100x outside
# (`test_bounds_catch_a_learning_rate_off_by_1e3`).
K_ADAM = 1 + 9 + 50 + 2 + 3 + 2 + 1  # lr, b1 = 0.9, b2 = 0.999, 1 - b, corrections, eps


def k_adam(b1: float, b2: float) -> float:
    """`K_ADAM`'s count for other decays: lr, the lags, ``1 - b``, corrections, eps."""
    return 1 + b1 / (1 - b1) + min(STEPS, b2 / (1 - b2)) / 2 + 2 + 3 + 2 + 1


# AdaBelief's s averages (g - m)**2: m's lag once more (twice through the square, halved by
# the root), and eps_root.
K_BELIEF = K_ADAM + 9 + 1
# Yogi moves v additively by (1 - b2) g**2 (no b2 * v, no lag): lr, b1's lag, 1 - b1 and
# 1 - b2, the corrections, eps, eps_root, the initial value.
K_YOGI = 1 + 9 + 2 + 3 + 2 + 1 + 1 + 1
# Adan: lr, the lags of b1 = 0.98, b2 = 0.92 and b3 = 0.99 (through the root), 1 - b for
# each, three corrections, eps, eps_root.
K_ADAN = 1 + 49 + 11.5 + 99 / 2 + 3 + 3 + 3 + 2 + 1 + 1


def run64(tx: Any, apply_updates: Callable[..., Any], params: Any, grads: Any) -> tuple:
    """`helpers.run64` with the parameters of every step (leading axis: step)."""
    return helpers.run64(tx, apply_updates, params, grads, trajectory=True)


def check_moments(name: str, ours: Any, theirs: Any, kinds: str, k: float, g_max: float):
    """Moments to ``k`` roundings: an average of gradients (kind ``m``) can cancel, so its
    error is relative to its terms, up to ``g_max`` (``2 g_max`` for Adan's differences,
    kind ``d``); an average of squares (``v``) does not, so relative to its values, with the
    decay's full lag (no root): ``2 k``. Kind ``=``: the same numbers.
    """
    for i, kind in enumerate(kinds):
        a, e = jax.tree.leaves(ours[i]), jax.tree.leaves(theirs[i])
        if kind == "=":
            assert_close(f"{name} {i}", a, e, 0.0)
        elif kind == "v":
            assert_close(f"{name} {i}", a, e, 2 * k * EPS32 / 2 + ROUNDOFF64)
        else:
            size = (2 if kind == "d" else 1) * g_max
            assert_close(f"{name} {i}", a, e, ROUNDOFF64, k * EPS32 / 2 * size)


def _adam_like(s: Any) -> Any:
    return (s[0].count, s[0].mu, s[0].nu)


def _adan(s: Any) -> Any:
    return (s[0].m, s[0].v, s[0].n, s[0].g)


PARITY = {
    # (optx, optax, state -> compared moments, their kinds (see `check_moments`), k)
    "adabelief": (
        lambda: optx.adabelief(1e-2),
        lambda: optax.adabelief(1e-2),
        _adam_like,
        "=mv",
        K_BELIEF,
    ),
    "adabelief_nesterov": (
        lambda: optx.adabelief(1e-2, b1=0.8, eps=1e-8, eps_root=0.0, nesterov=True),
        lambda: optax.adabelief(1e-2, b1=0.8, eps=1e-8, eps_root=0.0, nesterov=True),
        _adam_like,
        "=mv",
        k_adam(0.8, 0.999) + 4 + 1 + 3,  # s sees b1's lag; Nesterov's extra b1 and correction
    ),
    # optax main's weight_decay and weight_decay_mask: add_decayed_weights before the
    # learning rate (optax 0.2.8 has not these arguments: its building blocks).
    "adabelief_weight_decay": (
        lambda: optx.adabelief(1e-2, weight_decay=0.1, weight_decay_mask=common.kernel_mask),
        lambda: optax.chain(
            optax.scale_by_belief(),
            optax.add_decayed_weights(0.1, common.kernel_mask),
            optax.scale_by_learning_rate(1e-2),
        ),
        _adam_like,
        "=mv",
        K_BELIEF + 1,  # the weight decay
    ),
    "yogi": (lambda: optx.yogi(1e-2), lambda: optax.yogi(1e-2), _adam_like, "=mv", K_YOGI),
    "scale_by_yogi": (
        lambda: optx.chain(
            optx.scale_by_yogi(0.8, 0.99, 1e-6, 1e-8, 0.5), optx.scale_by_learning_rate(1e-2)
        ),
        lambda: optax.chain(
            optax.scale_by_yogi(0.8, 0.99, 1e-6, 1e-8, 0.5), optax.scale_by_learning_rate(1e-2)
        ),
        _adam_like,
        "=mv",
        K_YOGI,  # b1 = 0.8: a shorter lag than counted
    ),
    "adan": (lambda: optx.adan(1e-2), lambda: optax.adan(1e-2), _adan, "mdv=", K_ADAN),
    "adan_weight_decay": (
        lambda: optx.adan(1e-2, 0.9, 0.8, 0.95, weight_decay=0.1, mask=common.kernel_mask),
        lambda: optax.adan(1e-2, 0.9, 0.8, 0.95, weight_decay=0.1, mask=common.kernel_mask),
        _adan,
        "mdv=",
        K_ADAN + 1,  # the weight decay (shorter lags than counted)
    ),
}


def bounds(k: float, path: Any) -> list[float]:
    """Per parameter leaf: ``k * EPS32 / 2 * sum_t max|u_t|``."""
    return [k * EPS32 / 2 * float(u) for u in jax.tree.leaves(path)]


@functools.cache
def optax64(case: str) -> tuple:
    """optax's float64 run of `PARITY` ``case`` (`run64`), shared by two tests."""
    params = common.nested_params()
    return run64(PARITY[case][1](), optax.apply_updates, params, common.step_grads(params))


@pytest.mark.parametrize("case", sorted(PARITY))
def test_matches_optax(case: str) -> None:
    make, _, states, kinds, k = PARITY[case]
    params = common.nested_params()
    grads = common.step_grads(params)
    ours, s, _ = run64(make(), optx.apply_updates, params, grads)
    theirs, s_ref, path = optax64(case)
    leaves = zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), bounds(k, path), strict=True)
    for a, e, atol in leaves:
        assert a.dtype == np.float64
        assert_close(f"{case} params", a[-1], e[-1], ROUNDOFF64, atol)
    g_max = max(float(np.max(np.abs(g))) for g in jax.tree.leaves(grads))
    check_moments(case, states(s), states(s_ref), kinds, k, g_max)
    if "yogi" in case:
        b2, v0 = (0.999, 1e-6) if case == "yogi" else (0.99, 0.5)
        for g in jax.tree.leaves(grads):
            assert yogi_sign_gap(np.asarray(g, np.float64), b2, v0) > 2 * k * EPS32 / 2


def test_bounds_catch_a_learning_rate_off_by_1e3() -> None:
    """`test_matches_optax`'s bounds see a learning rate 1.001x too large (Adan: the largest
    k; AdaBelief's and Yogi's land 137x and 515x outside).
    """
    case = "adan"
    make, _, _, _, k = PARITY[case]
    params = common.nested_params()
    grads = common.step_grads(params)
    wrong, _, _ = run64(optx.chain(make(), optx.scale(1.001)), optx.apply_updates, params, grads)
    theirs, _, path = optax64(case)
    leaves = zip(jax.tree.leaves(wrong), jax.tree.leaves(theirs), bounds(k, path), strict=True)
    errors = [
        float(np.max(np.abs(a[-1] - e[-1]))) / (atol + ROUNDOFF64 * float(np.max(np.abs(e[-1]))))
        for a, e, atol in leaves
    ]
    print(f"{case} x 1.001: max error / bound {max(errors):.3g}")
    assert max(errors) > 10


def test_adan_count_matches_optax_t() -> None:
    """optax names Adan's step count ``t``; optx calls it ``count``, as every state does."""
    tx, ref, g = optx.scale_by_adan(), optax.scale_by_adan(), {"w": jnp.ones(2)}
    s, s_ref = tx.init(g), ref.init(g)
    for _ in range(3):
        s, s_ref = tx.update(g, s)[1], ref.update(g, s_ref)[1]
    assert int(s.count) == int(s_ref.t) == 3


# ---------------------------------------------------------------------------------------
# float64 NumPy loops, written from the papers' formulas.


def numpy_adabelief(grads, lr, b1, b2, eps, eps_root, nesterov=False, wd=0.0, w0=None):
    m, s, w = (np.zeros(grads.shape[1:]) for _ in range(3))
    w = w if w0 is None else w0.copy()
    out = []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        s = b2 * s + (1 - b2) * (g - m) ** 2 + eps_root
        if nesterov:
            m_hat = b1 * m / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1**t)
        else:
            m_hat = m / (1 - b1**t)
        w = w - lr * (m_hat / (np.sqrt(s / (1 - b2**t)) + eps) + wd * w)
        out.append(w)
    return np.stack(out), (m, s)


def numpy_yogi(grads, lr, b1, b2, eps, eps_root, v0):
    m, v = np.full(grads.shape[1:], v0), np.full(grads.shape[1:], v0)
    w, out = np.zeros(grads.shape[1:]), []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = v - (1 - b2) * np.sign(v - g**2) * g**2
        w = w - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t) + eps_root) + eps)
        out.append(w)
    return np.stack(out), (m, v)


def numpy_adan(grads, lr, b1, b2, b3, eps, eps_root, wd, w0):
    """Adan's Algorithm 1 with the decoupled decay of `adan` (b_i weigh the old moments)."""
    m, v, n = (np.zeros(grads.shape[1:]) for _ in range(3))
    w, prev, out = w0.copy(), None, []
    for t, g in enumerate(grads, start=1):
        diff = np.zeros_like(g) if prev is None else g - prev
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * diff
        n = b3 * n + (1 - b3) * (g + (1 - b2) * diff) ** 2
        m_hat, v_hat, n_hat = m / (1 - b1**t), v / (1 - b2**t), n / (1 - b3**t)
        u = (m_hat + (1 - b2) * v_hat) / (np.sqrt(n_hat + eps_root) + eps)
        w = w - lr * (u + wd * w)
        prev = g
        out.append(w)
    return np.stack(out), (m, v, n)


NUMPY = {
    # (optx, reference(grads, w0) -> (trajectory, moments), state -> moments, their kinds
    # (see `check_moments`), k (see `K_ADAM`))
    "adabelief": (
        lambda: optx.adabelief(1e-2, eps=1e-8, eps_root=1e-12),
        lambda g, w0: numpy_adabelief(g, 1e-2, 0.9, 0.999, 1e-8, 1e-12),
        lambda s: (s[0].mu, s[0].nu),
        "mv",
        K_BELIEF,
    ),
    "adabelief_nesterov": (
        lambda: optx.adabelief(1e-2, b1=0.8, b2=0.99, eps=1e-8, eps_root=0.0, nesterov=True),
        lambda g, w0: numpy_adabelief(g, 1e-2, 0.8, 0.99, 1e-8, 0.0, nesterov=True),
        lambda s: (s[0].mu, s[0].nu),
        "mv",
        k_adam(0.8, 0.99) + 4 + 1 + 3,  # s sees b1's lag; Nesterov's extra b1 and correction
    ),
    "adabelief_weight_decay": (
        lambda: optx.adabelief(1e-2, eps=1e-8, eps_root=1e-12, weight_decay=0.05),
        lambda g, w0: numpy_adabelief(g, 1e-2, 0.9, 0.999, 1e-8, 1e-12, wd=0.05, w0=w0),
        lambda s: (s[0].mu, s[0].nu),
        "mv",
        K_BELIEF + 1,  # the weight decay
    ),
    "yogi": (
        lambda: optx.chain(optx.scale_by_yogi(0.9, 0.999, 1e-3, 1e-8, 1e-2), optx.scale(-1e-2)),
        lambda g, w0: numpy_yogi(g, 1e-2, 0.9, 0.999, 1e-3, 1e-8, 1e-2),
        lambda s: (s[0].mu, s[0].nu),
        "mv",
        K_YOGI,
    ),
    "adan": (
        lambda: optx.adan(1e-2, weight_decay=0.05),
        lambda g, w0: numpy_adan(g, 1e-2, 0.98, 0.92, 0.99, 1e-8, 1e-8, 0.05, w0),
        lambda s: (s[0].m, s[0].v, s[0].n),
        "mdv",
        K_ADAN + 1,  # the weight decay
    ),
}


@pytest.mark.parametrize("case", sorted(NUMPY))
def test_matches_numpy(case: str) -> None:
    make, reference, moments, kinds, k = NUMPY[case]
    grads = common.numpy_grads()
    decays = case in ("adan", "adabelief_weight_decay")
    w0 = np.linspace(-1, 1, 12).reshape(4, 3) if decays else np.zeros(grads.shape[1:])
    w0 = w0.astype(np.float32).astype(np.float64)
    got, state, path = run64(make(), optx.apply_updates, w0, grads)
    expected, expected_moments = reference(grads, w0)
    # Every step's parameters, to the final bound (the path only grows).
    assert_close(case, got, expected, ROUNDOFF64, k * EPS32 / 2 * float(path))
    check_moments(
        f"{case} moments", moments(state), expected_moments, kinds, k, np.abs(grads).max()
    )
    if case == "yogi":
        assert yogi_sign_gap(grads, 0.999, 1e-2) > 2 * k * EPS32 / 2


def yogi_sign_gap(grads: np.ndarray, b2: float, v0: float) -> float:
    """The smallest ``|v - g**2| / v`` over Yogi's steps (float64).

    Yogi moves v by ``-(1 - b2) sign(v - g**2) g**2``: where the two sides' v, up to
    ``2 k EPS32 / 2`` apart (`check_moments`), straddled g**2, the sign would flip and v jump
    by ``2 (1 - b2) g**2``. The tests' gradients keep v this far from g**2.
    """
    v, gap = np.full(grads.shape[1:], v0), np.inf
    for g in grads:
        gap = min(gap, float(np.min(np.abs(v - g**2) / v)))
        v = v - (1 - b2) * np.sign(v - g**2) * g**2
    return gap


def test_yogi_second_moment_moves_additively() -> None:
    """From a large v, Yogi's v falls by (1 - b2) g**2 per step; Adam's by (1 - b2) v."""
    tx = optx.scale_by_yogi(b2=0.9, initial_accumulator_value=100.0)
    state = tx.init({"w": jnp.zeros(1)})
    for _ in range(3):
        _, state = tx.update({"w": jnp.ones(1)}, state)
    # Three float32 steps v - 0.1: each rounds v (EPS32 / 2 of it) and takes 1 - b2 = 0.1
    # as float32 (EPS32 / 2 of the 0.1, 1e-3 of v). Adam's average would be at 72.9.
    np.testing.assert_allclose(state.nu["w"], [100.0 - 3 * 0.1], rtol=3 * (1 + 1e-3) * EPS32 / 2)


# ---------------------------------------------------------------------------------------
# Convergence: cosine-decayed learning rates; every run ends within TOL of the minimum.
#
# The minima are at 0: near 0 float32 resolves a distance to its own relative precision, so
# no float32 stall point (a step below half an ulp of the parameter, 1.2e-7 near 2) limits
# how close a run gets, and float32 moves where a run ends by a relative round-off only (on
# this machine at most 1e-4 of the distance, or 1.3e-8). Where a run ends is then its
# maths', the same on every machine. TOL is the requirement on that maths, not a round-off
# tolerance: these runs end at most at 4.1e-6 (Yogi on Rosenbrock; float64 runs of the same
# steps), 24x below it; see `-s` for float32's. Adan's b1 = 0.98 settles the parabola's
# slow coordinate (curvature 0.2) late: 6.6e-5 after 1,000 steps, so it runs 2,000.

TOL = 1e-4
CURVATURE = jnp.array([1.0, 10.0, 0.1])


def parabola(y: jax.Array) -> jax.Array:
    """Curvatures 2, 20 and 0.2; minimum 0 at 0."""
    return jnp.sum(CURVATURE * y**2)


def rosenbrock(y: jax.Array) -> jax.Array:
    """The 2-D Rosenbrock function of x = y + (1, 1), ``(1 - x0)**2 + 100 (x1 - x0**2)**2``,
    expanded so that no sum with 1 rounds y to 1's ulp; minimum 0 at y = 0.
    """
    return y[0] ** 2 + 100 * (y[1] - y[0] * (2 + y[0])) ** 2


# (the function, the start): the parabola from (-1, 2, -3), Rosenbrock from x = (-1.5, 2).
PROBLEMS = {
    "parabola": (parabola, jnp.array([-1.0, 2.0, -3.0])),
    "rosenbrock": (rosenbrock, jnp.array([-2.5, 1.0])),
}


def minimise(tx: Any, problem: str, steps: int, dtype: Any = jnp.float32) -> jax.Array:
    """``steps`` jitted steps of ``tx`` on ``problem`` from its start in ``dtype``; the end
    point, as float32.
    """
    f, x0 = PROBLEMS[problem]

    @jax.jit
    def run(x0: jax.Array) -> jax.Array:
        def step(carry: tuple, _: None) -> tuple:
            x, state = carry
            updates, state = tx.update(jax.grad(f)(x), state, x)
            return (optx.apply_updates(x, updates), state), None

        return jax.lax.scan(step, (x0, tx.init(x0)), None, length=steps)[0][0]

    x = run(x0.astype(dtype))
    assert x.dtype == dtype
    return x.astype(jnp.float32)


CONVERGENCE = [
    ("adabelief", lambda: optx.adabelief(common.cosine(0.1, 500)), "parabola", 500),
    ("adabelief", lambda: optx.adabelief(common.cosine(0.1, 4000)), "rosenbrock", 4000),
    ("yogi", lambda: optx.yogi(common.cosine(0.1, 500)), "parabola", 500),
    ("yogi", lambda: optx.yogi(common.cosine(0.1, 4000)), "rosenbrock", 4000),
    ("adan", lambda: optx.adan(common.cosine(0.1, 2000)), "parabola", 2000),
    ("adan", lambda: optx.adan(common.cosine(0.1, 4000)), "rosenbrock", 4000),
]


@pytest.mark.parametrize(
    ("make", "problem", "steps"),
    [c[1:] for c in CONVERGENCE],
    ids=[f"{c[0]}-{c[2]}" for c in CONVERGENCE],
)
def test_converges(make: Callable[[], Any], problem: str, steps: int) -> None:
    err = float(jnp.max(jnp.abs(minimise(make(), problem, steps))))
    print(f"{problem}: |x - x*| = {err:.3g} after {steps} steps")
    assert err < TOL


# ---------------------------------------------------------------------------------------
# bfloat16 parameters. These optimizers have no moment-dtype options (neither has optax):
# moments follow the parameters into bfloat16. With the minimum at 0, bfloat16 resolves the
# distance to it to its own relative precision (2**-8 a rounding) as float32 does (2**-24):
# no bfloat16 stall point (half an ulp of the parameter, 2**-7 near 3) limits the run, and
# its roundings, relative to the numbers they round, move its end point by a relative amount
# only. So the bfloat16 run meets the float32 runs' requirement, TOL (it ends at 6e-10 for
# AdaBelief, 2e-10 for Yogi, 6e-20 for Adan on this machine), and stays within 2 TOL of the
# float32 run.


@pytest.mark.parametrize(
    ("name", "make", "steps"),
    [
        ("adabelief", lambda: optx.adabelief(common.cosine(0.1, 500)), 500),
        ("yogi", lambda: optx.yogi(common.cosine(0.1, 500)), 500),
        ("adan", lambda: optx.adan(common.cosine(0.1, 2000)), 2000),
    ],
)
def test_bfloat16_params_converge_as_float32(
    name: str, make: Callable[[], Any], steps: int
) -> None:
    x32 = minimise(make(), "parabola", steps)
    x16 = minimise(make(), "parabola", steps, jnp.bfloat16)
    err = float(jnp.max(jnp.abs(x16)))
    print(
        f"{name}: bf16 |x - x*| = {err:.3g}, bf16 vs f32 {float(jnp.max(jnp.abs(x16 - x32))):.3g}"
    )
    assert err < TOL


# ---------------------------------------------------------------------------------------
# Error messages.

P = {"a": jnp.ones(2), "b": {"c": jnp.ones((2, 3))}}

ERRORS = [
    (
        lambda: optx.adabelief(1e-3, b1=1.0),
        ValueError,
        "`adabelief` needs b1 in [0, 1). Received: b1=1.0.",
    ),
    (
        lambda: optx.adabelief(-1e-3),
        ValueError,
        "`adabelief` needs learning_rate finite and >= 0. Received: learning_rate=-0.001.",
    ),
    (
        lambda: optx.scale_by_belief(eps=-1.0),
        ValueError,
        "`scale_by_belief` needs eps finite and >= 0. Received: eps=-1.0.",
    ),
    (
        lambda: optx.adabelief(1e-3, eps_root=float("inf")),
        ValueError,
        "`adabelief` needs eps_root finite and >= 0. Received: eps_root=inf.",
    ),
    (lambda: optx.yogi(1e-3, b2=1.5), ValueError, "`yogi` needs b2 in [0, 1). Received: b2=1.5."),
    (
        lambda: optx.yogi(1e-3, eps=-1e-3),
        ValueError,
        "`yogi` needs eps finite and >= 0. Received: eps=-0.001.",
    ),
    (
        lambda: optx.scale_by_yogi(initial_accumulator_value=-1e-6),
        ValueError,
        "`scale_by_yogi` needs initial_accumulator_value finite and >= 0. "
        "Received: initial_accumulator_value=-1e-06.",
    ),
    (lambda: optx.adan(1e-3, b3=1.0), ValueError, "`adan` needs b3 in [0, 1). Received: b3=1.0."),
    (
        lambda: optx.scale_by_adan(b3=-0.5),
        ValueError,
        "`scale_by_adan` needs b3 in [0, 1). Received: b3=-0.5.",
    ),
    (
        lambda: optx.adan(1e-3, eps_root=-1.0),
        ValueError,
        "`adan` needs eps_root finite and >= 0. Received: eps_root=-1.0.",
    ),
    (
        lambda: optx.adan(1e-3, weight_decay=-0.1),
        ValueError,
        "`adan` needs weight_decay finite and >= 0. Received: weight_decay=-0.1.",
    ),
    (
        lambda: optx.scale_by_belief().update({"a": P["a"]}, optx.scale_by_belief().init(P)),
        ValueError,
        "`scale_by_belief.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'b/c'.",
    ),
    (
        lambda: optx.scale_by_yogi().update(
            {"a": jnp.ones(3), "b": P["b"]}, optx.scale_by_yogi().init(P)
        ),
        ValueError,
        "`scale_by_yogi.update` needs updates with the shapes of the state. "
        "Received: updates['a'] of shape (3,), expected (2,).",
    ),
    (
        lambda: optx.scale_by_adan().update({**P, "d": jnp.ones(1)}, optx.scale_by_adan().init(P)),
        ValueError,
        "`scale_by_adan.update` needs updates with the structure of the state. "
        "Received: not in the state: 'd'.",
    ),
    (
        lambda: optx.scale_by_adan().init({"w": jnp.ones(2, jnp.int32)}),
        TypeError,
        "`scale_by_adan.init` needs floating-point params (float16, bfloat16, float32 or "
        "float64). Received: params['w'] of dtype int32. Keep other leaves out of the "
        "optimised tree, or route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
]


@pytest.mark.parametrize(
    ("make", "error", "message"), ERRORS, ids=[re.sub(r"\W+", "_", e[2][:40]) for e in ERRORS]
)
def test_error_messages(make: Callable[[], Any], error: type[Exception], message: str) -> None:
    common.check_message(make, error, message)
