"""AdaBelief, Yogi and Adan: parity with optax, float64 NumPy loops, convergence, bfloat16,
and every error message of these modules.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optx

try:
    from tests import test_zoo_sign as common
except ImportError:  # tests/ is not a package: pytest put it on sys.path.
    import test_zoo_sign as common

RTOL, ATOL = common.RTOL, common.ATOL

# The bias corrections: optx computes 1 - b**t from the stored 1 - b (exact to round-off,
# see hyperparams.bias_correction); optax computes it from float32(b), 1.3e-5 (relative)
# off at b = 0.999 and a few 1e-6 at the other betas. Moments carry no bias correction and
# agree to RTOL; parameters moved by bias-corrected updates (size ~1, learning rate 1e-2,
# 100 steps) agree to ~1e-5 relative to their scale (observed maxima in comments).
BIAS_TOL = (1e-5, 1e-5)
BF16_TOL = common.BF16_TOL


def _adam_like(s: Any) -> Any:
    return (s[0].count, s[0].mu, s[0].nu)


def _adan(s: Any) -> Any:
    return (s[0].m, s[0].v, s[0].n, s[0].g)


def _adan_ref(s: Any) -> Any:
    return (s[0].m, s[0].v, s[0].n, s[0].g)


PARITY = {
    # (optx, optax, optx state, optax state)
    "adabelief": (
        lambda: optx.adabelief(1e-2),
        lambda: optax.adabelief(1e-2),
        _adam_like,
        _adam_like,
    ),
    "adabelief_nesterov": (
        lambda: optx.adabelief(1e-2, b1=0.8, eps=1e-8, eps_root=0.0, nesterov=True),
        lambda: optax.adabelief(1e-2, b1=0.8, eps=1e-8, eps_root=0.0, nesterov=True),
        _adam_like,
        _adam_like,
    ),
    "yogi": (lambda: optx.yogi(1e-2), lambda: optax.yogi(1e-2), _adam_like, _adam_like),
    "scale_by_yogi": (
        lambda: optx.chain(
            optx.scale_by_yogi(0.8, 0.99, 1e-6, 1e-8, 0.5), optx.scale_by_learning_rate(1e-2)
        ),
        lambda: optax.chain(
            optax.scale_by_yogi(0.8, 0.99, 1e-6, 1e-8, 0.5), optax.scale_by_learning_rate(1e-2)
        ),
        _adam_like,
        _adam_like,
    ),
    "adan": (lambda: optx.adan(1e-2), lambda: optax.adan(1e-2), _adan, _adan_ref),
    "adan_weight_decay": (
        lambda: optx.adan(1e-2, 0.9, 0.8, 0.95, weight_decay=0.1, mask=common.kernel_mask),
        lambda: optax.adan(1e-2, 0.9, 0.8, 0.95, weight_decay=0.1, mask=common.kernel_mask),
        _adan,
        _adan_ref,
    ),
}


@pytest.mark.parametrize("case", sorted(PARITY))
def test_matches_optax(case: str) -> None:
    make, make_ref, states, ref_states = PARITY[case]
    common.check_parity(make(), make_ref(), states, ref_states, params_tol=BIAS_TOL)


def test_adan_count_matches_optax_t() -> None:
    """optax names Adan's step count ``t``; optx calls it ``count``, as every state does."""
    tx, ref, g = optx.scale_by_adan(), optax.scale_by_adan(), {"w": jnp.ones(2)}
    s, s_ref = tx.init(g), ref.init(g)
    for _ in range(3):
        s, s_ref = tx.update(g, s)[1], ref.update(g, s_ref)[1]
    assert int(s.count) == int(s_ref.t) == 3


# ---------------------------------------------------------------------------------------
# float64 NumPy loops, written from the papers' formulas.


def numpy_adabelief(grads, lr, b1, b2, eps, eps_root, nesterov=False):
    m, s, w = (np.zeros(grads.shape[1:]) for _ in range(3))
    out = []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        s = b2 * s + (1 - b2) * (g - m) ** 2 + eps_root
        if nesterov:
            m_hat = b1 * m / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1**t)
        else:
            m_hat = m / (1 - b1**t)
        w = w - lr * m_hat / (np.sqrt(s / (1 - b2**t)) + eps)
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
    # (optx, reference(grads, w0) -> (trajectory, moments), state -> moments)
    "adabelief": (
        lambda: optx.adabelief(1e-2, eps=1e-8, eps_root=1e-12),
        lambda g, w0: numpy_adabelief(g, 1e-2, 0.9, 0.999, 1e-8, 1e-12),
        lambda s: (s[0].mu, s[0].nu),
    ),
    "adabelief_nesterov": (
        lambda: optx.adabelief(1e-2, b1=0.8, b2=0.99, eps=1e-8, eps_root=0.0, nesterov=True),
        lambda g, w0: numpy_adabelief(g, 1e-2, 0.8, 0.99, 1e-8, 0.0, nesterov=True),
        lambda s: (s[0].mu, s[0].nu),
    ),
    "yogi": (
        lambda: optx.chain(optx.scale_by_yogi(0.9, 0.999, 1e-3, 1e-8, 1e-2), optx.scale(-1e-2)),
        lambda g, w0: numpy_yogi(g, 1e-2, 0.9, 0.999, 1e-3, 1e-8, 1e-2),
        lambda s: (s[0].mu, s[0].nu),
    ),
    "adan": (
        lambda: optx.adan(1e-2, weight_decay=0.05),
        lambda g, w0: numpy_adan(g, 1e-2, 0.98, 0.92, 0.99, 1e-8, 1e-8, 0.05, w0),
        lambda s: (s[0].m, s[0].v, s[0].n),
    ),
}


@pytest.mark.parametrize("case", sorted(NUMPY))
def test_matches_numpy(case: str) -> None:
    make, reference, moments = NUMPY[case]
    grads = common.numpy_grads()
    w0 = np.zeros(grads.shape[1:]) if case != "adan" else np.linspace(-1, 1, 12).reshape(4, 3)
    got, state = common.run_numpy_case(make(), w0.astype(np.float32), grads)
    expected, expected_moments = reference(grads, w0.astype(np.float32).astype(np.float64))
    common.assert_close(case, got, expected, RTOL, ATOL)
    common.assert_close(f"{case} moments", moments(state), expected_moments, RTOL, ATOL)


def test_yogi_second_moment_moves_additively() -> None:
    """From a large v, Yogi's v falls by (1 - b2) g**2 per step; Adam's by (1 - b2) v."""
    tx = optx.scale_by_yogi(b2=0.9, initial_accumulator_value=100.0)
    state = tx.init({"w": jnp.zeros(1)})
    for _ in range(3):
        _, state = tx.update({"w": jnp.ones(1)}, state)
    np.testing.assert_allclose(state.nu["w"], [100.0 - 3 * 0.1], rtol=1e-6)


# ---------------------------------------------------------------------------------------
# Convergence: cosine-decayed learning rates; every run ends within TOL of the minimum.

TOL = 1e-4
CONVERGENCE = [
    ("adabelief", lambda: optx.adabelief(common.cosine(0.1, 500)), "parabola", 500),
    ("adabelief", lambda: optx.adabelief(common.cosine(0.1, 4000)), "rosenbrock", 4000),
    ("yogi", lambda: optx.yogi(common.cosine(0.1, 500)), "parabola", 500),
    ("yogi", lambda: optx.yogi(common.cosine(0.1, 4000)), "rosenbrock", 4000),
    ("adan", lambda: optx.adan(common.cosine(0.1, 1000)), "parabola", 1000),
    ("adan", lambda: optx.adan(common.cosine(0.1, 4000)), "rosenbrock", 4000),
]


@pytest.mark.parametrize(
    ("make", "problem", "steps"),
    [c[1:] for c in CONVERGENCE],
    ids=[f"{c[0]}-{c[2]}" for c in CONVERGENCE],
)
def test_converges(make: Callable[[], Any], problem: str, steps: int) -> None:
    err = common.distance(common.minimise(make(), problem, steps), problem)
    print(f"{problem}: |x - x*| = {err:.3g} after {steps} steps")
    assert err < TOL


# ---------------------------------------------------------------------------------------
# bfloat16 parameters. These optimizers have no moment-dtype options (neither has optax):
# moments follow the parameters into bfloat16. Once converged, the end points stay within
# 4 bf16 ulps (2**-6 at |x| in [2, 4)) of the float32 run's: < 0.0625 (observed: 0.031 for
# AdaBelief, 0.047 for Yogi, 7e-5 for Adan). Updates below half an ulp of a parameter are
# rounded away, so a bf16 run stops a few ulps short.


@pytest.mark.parametrize(
    ("name", "make", "steps"),
    [
        ("adabelief", lambda: optx.adabelief(common.cosine(0.1, 500)), 500),
        ("yogi", lambda: optx.yogi(common.cosine(0.1, 500)), 500),
        ("adan", lambda: optx.adan(common.cosine(0.1, 1000)), 1000),
    ],
)
def test_bfloat16_params_stay_close_to_float32(
    name: str, make: Callable[[], Any], steps: int
) -> None:
    x32 = common.minimise(make(), "parabola", steps)
    x16 = common.minimise(make(), "parabola", steps, jnp.bfloat16)
    err = float(jnp.max(jnp.abs(x16.astype(jnp.float32) - x32)))
    print(f"{name}: bf16 vs f32 {err:.3g}")
    assert err < BF16_TOL


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
