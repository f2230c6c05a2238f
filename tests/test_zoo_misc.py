"""SM3, gradient noise, optimistic methods and Polyak SGD: parity with optax, NumPy
reference loops, convergence, bfloat16, and every error message.

Parity and reference runs are 100 steps of one jitted `lax.scan` on a nested pytree (dicts
and a list; matrices, a 3-D kernel, vectors, a scalar) with gradients that change every
step, run in float64 and compared within bounds worked out from optx's float32
hyperparameters (`ROUNDOFF64`); convergence tolerances come from where each run must stop,
bfloat16 ones from bfloat16's rounding (tests/TOLERANCES.md).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, assert_close, roundoff_rtol

import optx

# `optimistic_adam` warns that it is deprecated, as optax's does (tests/test_optax_deprecations.py).
pytestmark = [
    pytest.mark.filterwarnings("ignore:`optimistic_adam` is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:`add_noise`'s seed is deprecated:DeprecationWarning"),
]

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)
# Parity with optax and the NumPy loops runs in float64 (`run64`): then the one difference
# left is optx's float32 hyperparameters (DESIGN D2), each off by at most EPS32 / 2 relative
# (the float32 arithmetic itself is covered by tests/test_conformance.py). ``k`` such
# roundings on each step's update move the parameters by at most ``k * EPS32 / 2 * sum_t
# max|u_t|`` per leaf (tests/TOLERANCES.md; `bounds`), plus float64 round-off: ~32 roundings a
# step and a norm of the 34 parameters (Polyak's step), relative to a leaf's scale.
ROUNDOFF64 = STEPS * (32 + 34) * EPS64


def trace_k(b: float, k_in: float, b_exact: bool = False) -> float:
    """Roundings ``k`` of a moving average or momentum ``m = b m + d`` whose inputs ``d``
    carry ``k_in`` roundings, relative to its own outputs.

    The outputs sum to ``sum_s d_s c_s`` with ``c_s = sum_n b**n <= 1 / (1 - b)``; ``b``
    rounded to float32 moves ``c_s`` by at most ``b / (1 - b)**2 * EPS32 / 2``; the inputs'
    roundings are carried with weight ``c_s``; and ``sum_s max|d_s| <= (1 + b) sum_t max|m_t|``
    (``d_t = m_t - b m_{t-1}``), so no cancellation in ``m`` hides its terms.
    """
    lag = 0.0 if b_exact else b / (1 - b) ** 2
    return (1 + b) * (k_in / (1 - b) + lag)


# add_noise's ``std = sqrt(eta / t**gamma)`` is computed in float32 from float32 eta and
# gamma. ``t**gamma = exp(gamma log t)`` with ``gamma log t <= 0.55 log(STEPS) = 2.5``: gamma,
# log t and their product, each off by EPS32 / 2 of it, move it by 3 * 2.5 roundings; exp 1,
# eta and the division 2; the square root halves these and adds 1.
K_STD = (3 * 0.55 * float(np.log(STEPS)) + 1 + 2) / 2 + 1


# ---------------------------------------------------------------------------------------
# Data and helpers.


def make_params(scalar: bool = True) -> dict[str, Any]:
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    params = {
        "dense": {"kernel": normal(3, 4), "bias": normal(4)},
        "blocks": [{"conv": normal(2, 3, 2)}, normal(5)],
        "scale": normal(),
    }
    if not scalar:  # optax's scale_by_sm3 fails on scalar leaves
        del params["scale"]
    return params


def make_grads(params: Any, seed: int = 1) -> Any:
    """Per-step gradients (leading axis: step), magnitude swinging between 0.2 and 2.2."""
    rng = np.random.default_rng(seed)
    magnitude = 0.2 + 2.0 * np.sin(0.3 * np.arange(STEPS)) ** 2

    def draw(p: jax.Array) -> jax.Array:
        g = rng.standard_normal((STEPS, *p.shape)) * magnitude.reshape((STEPS,) + (1,) * p.ndim)
        return jnp.asarray(g, jnp.float32)

    return jax.tree.map(draw, params)


# Losses passed as `value=` to Polyak's step size; some fall below f_min = 1 (sps+ clips).
VALUES = jnp.asarray(1.5 + 2.0 * np.cos(0.2 * np.arange(STEPS)), jnp.float32)


def run(
    tx: Any,
    params: Any,
    grads: Any,
    apply: Callable[..., Any] = optx.apply_updates,
    values: jax.Array | None = None,
) -> tuple[Any, Any, Any]:
    """`STEPS` jitted steps; returns the final params and state, and every step's updates."""

    @jax.jit
    def scan(params: Any, grads: Any, values: Any) -> tuple[Any, Any, Any]:
        def step(carry: tuple, xs: tuple) -> tuple:
            p, s = carry
            g, v = xs
            extra = {} if v is None else {"value": v}
            u, s = tx.update(g, s, p, **extra)
            return (apply(p, u), s), u

        (p, s), us = jax.lax.scan(step, (params, tx.init(params)), (grads, values))
        return p, s, us

    return scan(params, grads, values)


def np_tree(tree: Any) -> list[np.ndarray]:
    return [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]


def run64(
    tx: Any,
    params: Any,
    grads: Any,
    apply: Callable[..., Any] = optx.apply_updates,
    values: jax.Array | None = None,
) -> tuple[Any, Any, Any]:
    """`run` in float64 (`jax.enable_x64`); NumPy trees out (compared outside x64, see
    tests/TOLERANCES.md).
    """
    with jax.enable_x64(True):
        params, grads, values = jax.tree.map(
            lambda x: jnp.asarray(np.asarray(x, np.float64)), (params, grads, values)
        )
        out = run(tx, params, grads, apply, values)
    # Typed keys (optax's noise state) stay JAX arrays.
    keys = jax.dtypes.prng_key
    return jax.tree.map(lambda x: x if jnp.issubdtype(x.dtype, keys) else np.asarray(x), out)


def sizes(us: Any) -> tuple[list[float], list[float]]:
    """Per leaf of the stacked updates ``us``: ``sum_t max|u_t|`` and ``max_t max|u_t|``."""
    per_step = [np.max(np.abs(u.reshape(len(u), -1)), axis=1) for u in np_tree(us)]
    return [float(np.sum(m)) for m in per_step], [float(np.max(m)) for m in per_step]


def assert_within(name: str, actual: Any, expected: Any, atols: list[float], rtol: float = 0.0):
    """`assert_close` leaf by leaf with absolute tolerances ``atols`` (float64 values), plus
    `ROUNDOFF64` and ``rtol`` of each leaf's scale; returns the largest error over its bound.
    """
    worst = 0.0
    leaves = zip(np_tree(actual), np_tree(expected), atols, strict=True)
    for i, (a, e, atol) in enumerate(leaves):
        rel = rtol + ROUNDOFF64
        assert_close(f"{name}[{i}]", a, e, rel, atol)
        bound = atol + rel * float(np.max(np.abs(e), initial=0.0))
        worst = max(worst, float(np.max(np.abs(a - e), initial=0.0)) / bound if bound else 0.0)
    print(f"{name}: max error / bound {worst:.3g}")
    return worst


def bounds(k: float, us: Any) -> list[float]:
    """Per leaf ``k * EPS32 / 2 * sum_t max|u_t|`` (see `ROUNDOFF64`)."""
    return [k * EPS32 / 2 * total for total in sizes(us)[0]]


# ---------------------------------------------------------------------------------------
# SM3.


# (optx, optax, b1, b2, eps, k). SM3's ``acc = c2 g**2 + b2 min(covers)`` is a sum of
# squares and maxima: no cancellation. With b2 = 1 (and c2 = 1) it is exact; b2 = 0.99 adds
# 1 - b2 and b2's full lag (STEPS), halved through the square root, and eps 1/2. The moment
# nu averages g / sqrt(acc + eps) with b1 (its 1 - b1 1, b1's lag unless b1 = 0.5 is exact):
# `trace_k`. The learning rate (or scale) after it: 1.
K_SM3_ACC = (1 + STEPS) / 2 + 1 / 2
SM3_CASES = {
    "default": (
        lambda: optx.scale_by_sm3(),
        lambda: optax.scale_by_sm3(),
        0.9,
        1.0,
        1e-8,
        1 + trace_k(0.9, 1 + 1),
    ),
    "decaying": (
        lambda: optx.scale_by_sm3(b1=0.5, b2=0.99, eps=1e-3),
        lambda: optax.scale_by_sm3(b1=0.5, b2=0.99, eps=1e-3),
        0.5,
        0.99,
        1e-3,
        1 + trace_k(0.5, K_SM3_ACC, b_exact=True),
    ),
}


def sm3_slot_bounds(k: float, b2: float, lr: float, us: Any) -> tuple[float, list[float]]:
    """(rtol of the covers ``mu``, atol per leaf of the moment ``nu``): ``mu`` relative to its
    values (b2 = 1: exact; else `K_SM3_ACC` before the root); ``nu``, the last average, holds
    the terms of every ``u / lr`` with the weights `trace_k` counts.
    """
    mu = 0.0 if b2 == 1.0 else 2 * K_SM3_ACC * EPS32 / 2
    return mu, [(k - 1) * EPS32 / 2 * m / lr for m in sizes(us)[1]]


@pytest.mark.parametrize("case", sorted(SM3_CASES))
def test_scale_by_sm3_matches_optax(case: str) -> None:
    make_optx, make_optax, _, b2, _, k = SM3_CASES[case]
    params = make_params(scalar=False)
    grads = make_grads(params)
    p, s, _ = run64(optx.chain(make_optx(), optx.scale(-0.05)), params, grads)
    tx = optax.chain(make_optax(), optax.scale(-0.05))
    q, t, us = run64(tx, params, grads, optax.apply_updates)
    assert_within("params", p, q, bounds(k, us))
    mu_rtol, nu_atols = sm3_slot_bounds(k, b2, 0.05, us)
    assert_within("mu", s[0].mu, t[0].mu, [0.0] * len(np_tree(t[0].mu)), mu_rtol)
    assert_within("nu", s[0].nu, t[0].nu, nu_atols)


def test_sm3_matches_optax() -> None:
    params = make_params(scalar=False)
    grads = make_grads(params)
    k = 1 + trace_k(0.8, 1 + 1)
    p, s, _ = run64(optx.sm3(0.1, momentum=0.8), params, grads)
    q, t, us = run64(optax.sm3(0.1, momentum=0.8), params, grads, optax.apply_updates)
    assert_within("params", p, q, bounds(k, us))
    assert_within("nu", s[0].nu, t[0].nu, sm3_slot_bounds(k, 1.0, 0.1, us)[1])


def np_sm3(params: Any, grads: Any, lr: float, b1: float, b2: float, eps: float) -> list:
    """SM3-II with momentum in float64: covers by axis; vectors and scalars per element."""
    ps = np_tree(params)
    gs = np_tree(grads)
    mus = [[np.zeros(n) for n in p.shape] if p.ndim >= 2 else [np.zeros(p.shape)] for p in ps]
    nus = [np.zeros_like(p) for p in ps]
    c = 1.0 if b2 == 1.0 else 1.0 - b2
    for t in range(STEPS):
        for i, p in enumerate(ps):
            g = gs[i][t]
            if p.ndim < 2:
                previous = mus[i][0]
            else:
                shaped = [
                    v.reshape([1] * a + [-1] + [1] * (p.ndim - a - 1)) for a, v in enumerate(mus[i])
                ]
                previous = functools.reduce(np.minimum, shaped)
            acc = c * g**2 + b2 * previous
            scaled = np.where(acc > 0, g / np.sqrt(acc + eps), 0.0)
            nus[i] = (1 - b1) * scaled + b1 * nus[i]
            if p.ndim < 2:
                mus[i] = [acc]
            else:
                axes = range(p.ndim)
                mus[i] = [acc.max(axis=tuple(b for b in axes if b != a)) for a in axes]
            ps[i] = p - lr * nus[i]
    return ps


@pytest.mark.parametrize("case", sorted(SM3_CASES))
def test_sm3_matches_numpy(case: str) -> None:
    make_optx, _, b1, b2, eps, k = SM3_CASES[case]
    params = make_params()  # with the scalar leaf, which optax's SM3 rejects
    grads = make_grads(params)
    tx = optx.chain(make_optx(), optx.scale_by_learning_rate(0.05))
    p, _, us = run64(tx, params, grads)
    expected = np_sm3(params, grads, 0.05, b1, b2, eps)
    assert_within("params", p, expected, bounds(k, us))


def test_sm3_keeps_one_vector_per_axis() -> None:
    state = optx.scale_by_sm3().init({"w": jnp.zeros((3, 4, 5)), "b": jnp.zeros(4)})
    assert [v.shape for v in state.mu["w"]] == [(3,), (4,), (5,)]
    assert [v.shape for v in state.mu["b"]] == [(4,)]


# ---------------------------------------------------------------------------------------
# Gradient noise.


@pytest.mark.parametrize("case", ["add_noise", "noisy_sgd"])
def test_noise_matches_optax(case: str) -> None:
    params = make_params()
    grads = make_grads(params)
    if case == "add_noise":  # an int seed
        lr, tx = 0.1, optx.chain(optx.add_noise(0.3, 0.55, 7), optx.scale(-0.1))
        ref = optax.chain(optax.add_noise(0.3, 0.55, 7), optax.scale(-0.1))
    else:  # a typed key
        lr, tx = 0.1, optx.noisy_sgd(0.1, eta=0.2, gamma=0.3, key=jax.random.key(5))
        ref = optax.noisy_sgd(0.1, eta=0.2, gamma=0.3, key=jax.random.key(5))
    p, s, _ = run64(tx, params, grads)
    q, t, us = run64(ref, params, grads, optax.apply_updates)
    # Both draw the same float64 noise n (same keys). optx's float32 std is off by K_STD
    # roundings of it, where lr * std * |n| <= |u| + lr |g|; the learning rate by one.
    g_sums = [float(np.sum(np.max(np.abs(g.reshape(STEPS, -1)), axis=1))) for g in np_tree(grads)]
    atols = [
        EPS32 / 2 * ((1 + K_STD) * u + K_STD * lr * g)
        for u, g in zip(sizes(us)[0], g_sums, strict=True)
    ]
    assert_within("params", p, q, atols)
    assert int(s[0].count) == int(t[0].count) == STEPS
    np.testing.assert_array_equal(s[0].rng_key, jax.random.key_data(t[0].rng_key))


@functools.partial(jax.jit, static_argnames="dtype")
def documented_noise(key: jax.Array, like: Any, dtype: Any = jnp.float32) -> Any:
    """The standard normal draws of every step, from the key sequence `add_noise` documents:
    split the key into (next key, sampling key), split the sampling key once per leaf.
    """

    def step(key: jax.Array, _: Any) -> tuple:
        key, sample = jax.random.split(key)
        leaves, treedef = jax.tree.flatten(like)
        keys = jax.random.split(sample, len(leaves))
        draws = [jax.random.normal(k, x.shape, dtype) for k, x in zip(keys, leaves, strict=True)]
        return key, jax.tree.unflatten(treedef, draws)

    return jax.lax.scan(step, key, length=STEPS)[1]


def test_add_noise_matches_numpy() -> None:
    """u_t = g_t + sqrt(eta / t**gamma) * xi_t, with xi_t from the documented key sequence."""
    eta, gamma, seed = 0.3, 0.55, 11
    params = make_params()
    grads = make_grads(params)
    _, _, us = run64(optx.add_noise(eta, gamma, key=seed), params, grads)
    with jax.enable_x64(True):  # float64 draws, as optx's for float64 leaves
        noise = np_tree(documented_noise(jax.random.key(seed), params, jnp.float64))
    std = np.sqrt(eta / np.arange(1.0, STEPS + 1) ** gamma)
    noises = [std.reshape((STEPS,) + (1,) * (xi.ndim - 1)) * xi for xi in noise]
    expected = [g + n for g, n in zip(np_tree(grads), noises, strict=True)]
    # optx's float32 std: K_STD roundings of std * |xi|.
    atols = [K_STD * EPS32 / 2 * float(np.max(np.abs(n))) for n in noises]
    assert_within("updates", us, expected, atols)


# Jit against eager, in float32: the two programs may round the update g + std * xi
# differently where XLA contracts a multiply-add: the std (K_STD), the draw (K_NORMAL: erf_inv's
# degree-8 Horner polynomial, 8 multiply-adds whose terms reach 2.5x its value, 20; the log1p
# and products around it, 10) and g + std * xi itself (1), each of the update's size.
K_NORMAL = 30


def test_add_noise_is_deterministic_and_jit_equals_eager() -> None:
    params = make_params()
    grads = [jax.tree.map(lambda g, t=t: g[t], make_grads(params)) for t in range(3)]
    tx = optx.add_noise(0.5, 0.55, key=jax.random.key(2))
    step = jax.jit(tx.update)
    eager, jitted = tx.init(params), tx.init(params)
    rtol = roundoff_rtol(steps=1, roundings=K_STD + K_NORMAL + 1)
    for g in grads:
        u_eager, eager = tx.update(g, eager)
        u_jit, jitted = step(g, jitted)
        assert_close("updates", u_jit, u_eager, rtol)
        np.testing.assert_array_equal(eager.rng_key, jitted.rng_key)

    def first_update(tx: Any) -> Any:
        return tx.update(grads[0], tx.init(params))[0]

    # Rebuilt from the same seed (an int, `seed=`, or the typed key of that seed): the same
    # noise; another seed: other noise.
    same = first_update(tx)
    with pytest.warns(DeprecationWarning, match="seed is deprecated"):
        by_seed = optx.add_noise(0.5, 0.55, seed=2)
    for again in (optx.add_noise(0.5, 0.55, key=2), by_seed):
        assert_close("same seed", first_update(again), same, 0.0, 0.0)
    other = first_update(optx.add_noise(0.5, 0.55, key=3))
    assert not np.allclose(other["dense"]["kernel"], same["dense"]["kernel"])


def test_add_noise_bfloat16_leaves_get_the_float32_noise() -> None:
    tx = optx.add_noise(1.0, 0.55, key=0)
    g32 = {"w": jnp.zeros(8, jnp.float32)}
    g16 = {"w": jnp.zeros(8, jnp.bfloat16)}
    u32, _ = tx.update(g32, tx.init(g32))
    u16, _ = tx.update(g16, tx.init(g16))
    assert u16["w"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(u16["w"], u32["w"].astype(jnp.bfloat16))


# ---------------------------------------------------------------------------------------
# Optimistic methods.


def test_scale_by_optimistic_gradient_matches_optax() -> None:
    params = make_params()
    grads = make_grads(params)
    tx = optx.chain(optx.scale_by_optimistic_gradient(0.5, 2.0), optx.scale(-0.01))
    p, s, _ = run64(tx, params, grads)
    ref = optax.chain(optax.scale_by_optimistic_gradient(0.5, 2.0), optax.scale(-0.01))
    q, t, us = run64(ref, params, grads, optax.apply_updates)
    # alpha = 0.5 and beta = 2 are float32 numbers: the scale's rounding alone; the previous
    # gradient is a copy.
    assert_within("params", p, q, bounds(1, us))
    assert_within("previous", s[0].previous_gradient, t[0].previous_gradient, [0.0] * 5)
    assert not bool(s[0].is_initial_step) and not bool(t[0].is_initial_step)


def g_sums(grads: Any) -> list[float]:
    """Per leaf ``sum_t max|g_t|``."""
    return [float(np.sum(np.max(np.abs(g.reshape(STEPS, -1)), axis=1))) for g in np_tree(grads)]


def test_optimistic_gradient_descent_matches_optax_and_numpy() -> None:
    params = make_params()
    grads = make_grads(params)
    p, _, _ = run64(optx.optimistic_gradient_descent(0.02, alpha=0.7, beta=1.5), params, grads)
    ref = optax.optimistic_gradient_descent(0.02, alpha=0.7, beta=1.5)
    q, _, us = run64(ref, params, grads, optax.apply_updates)
    # u = lr ((alpha + beta) g_t - beta g_{t-1}) can cancel: float32 alpha and the float32
    # sum alpha + beta (beta = 1.5 is exact) are off by 2 roundings of (alpha + beta) |g_t|;
    # the learning rate by one of |u|.
    atols = [
        EPS32 / 2 * (u + 2 * 0.02 * 2.2 * g)
        for u, g in zip(sizes(us)[0], g_sums(grads), strict=True)
    ]
    assert_within("params vs optax", p, q, atols)
    expected = np_tree(params)
    for i, g in enumerate(np_tree(grads)):
        for t in range(STEPS):
            previous = g[max(t - 1, 0)]
            expected[i] = expected[i] - 0.02 * ((0.7 + 1.5) * g[t] - 1.5 * previous)
    assert_within("params vs numpy", p, expected, atols)


def np_optimistic_adam(
    params: Any,
    grads: Any,
    lr: float,
    alpha: float,
    beta: float,
    b1: float,
    b2: float,
    eps: float,
    nesterov: bool,
) -> list:
    """Adam (NAdam's momentum with ``nesterov``), then the optimistic step, in float64."""
    ps = np_tree(params)
    for i, g in enumerate(np_tree(grads)):
        m = v = np.zeros_like(ps[i])
        previous = None
        for t in range(1, STEPS + 1):
            m = b1 * m + (1 - b1) * g[t - 1]
            v = b2 * v + (1 - b2) * g[t - 1] ** 2
            if nesterov:
                m_hat = b1 * m / (1 - b1 ** (t + 1)) + (1 - b1) * g[t - 1] / (1 - b1**t)
            else:
                m_hat = m / (1 - b1**t)
            r = m_hat / (np.sqrt(v / (1 - b2**t)) + eps)
            previous = r if previous is None else previous
            ps[i] = ps[i] - lr * ((alpha + beta) * r - beta * previous)
            previous = r
    return ps


def adam_k(b1: float, b2: float, nesterov: bool = False) -> float:
    """Roundings of Adam's direction ``m_hat / (sqrt(v_hat) + eps)`` (tests/test_zoo_adam.py):
    the lags of b1 and b2 (the latter capped at STEPS, halved through the root), 1 - b1 and
    1 - b2 (1 + 1/2), the bias corrections (3 + 3/2), eps; Nesterov's extra b1 and its bias
    correction (1 + 3).
    """
    return b1 / (1 - b1) + min(STEPS, b2 / (1 - b2)) / 2 + 1.5 + 4.5 + 1 + 4 * nesterov


def optimistic_adam_bounds(
    adam: Any, lr: float, alpha: float, beta: float, k_r: float, params: Any, grads: Any, us: Any
) -> list[float]:
    """Per leaf: ``u_t = lr ((alpha + beta) r_t - beta r_{t-1})`` can cancel, so Adam's
    direction r (``k_r`` roundings), alpha, beta and their float32 sum (3) count relative to
    ``r``'s size, ``sum_t max|r_t|`` from a float64 run of ``adam``; the learning rate 1 of u.
    """
    _, _, rs = run64(adam, params, grads)
    terms = (k_r + 3) * (alpha + beta) + (k_r + 1) * beta
    return [
        EPS32 / 2 * (u + lr * terms * r) for u, r in zip(sizes(us)[0], sizes(rs)[0], strict=True)
    ]


@pytest.mark.parametrize("nesterov", [True, False])
def test_optimistic_adam_v2_matches_optax_and_numpy(nesterov: bool) -> None:
    params = make_params()
    grads = make_grads(params)
    kwargs = dict(alpha=0.8, beta=0.6, b1=0.8, b2=0.99, eps=1e-6, nesterov=nesterov)
    p, s, _ = run64(optx.optimistic_adam_v2(0.01, **kwargs), params, grads)
    q, t, us = run64(optax.optimistic_adam_v2(0.01, **kwargs), params, grads, optax.apply_updates)
    adam = optx.scale_by_adam(0.8, 0.99, 1e-6, nesterov=nesterov)
    k_r = adam_k(0.8, 0.99, nesterov)
    atols = optimistic_adam_bounds(adam, 0.01, 0.8, 0.6, k_r, params, grads, us)
    assert_within("params vs optax", p, q, atols)
    # mu averages g: 1 - b1 and b1's lag (4) of max|g|; nu, a sum of squares: 1 - b2 and its
    # lag (at most STEPS), relative to its values.
    g_max = max(float(np.max(np.abs(g))) for g in np_tree(grads))
    assert_within("mu", s[0].mu, t[0].mu, [5 * EPS32 / 2 * g_max] * 5)
    assert_within("nu", s[0].nu, t[0].nu, [0.0] * 5, (1 + STEPS) * EPS32 / 2)
    expected = np_optimistic_adam(params, grads, 0.01, 0.8, 0.6, 0.8, 0.99, 1e-6, nesterov)
    assert_within("params vs numpy", p, expected, atols)


def test_optimistic_adam_matches_optax() -> None:
    params = make_params()
    grads = make_grads(params)
    p, _, _ = run64(optx.optimistic_adam(0.01, 0.5), params, grads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # optax's, for this interface
        ref = optax.optimistic_adam(0.01, 0.5)
    q, _, us = run64(ref, params, grads, optax.apply_updates)
    # `optimistic_adam_v2` with learning rate 1, alpha 0.01, beta 0.5 (checked below).
    adam = optx.scale_by_adam()
    atols = optimistic_adam_bounds(adam, 1.0, 0.01, 0.5, adam_k(0.9, 0.999), params, grads, us)
    assert_within("params", p, q, atols)
    # The first interface is the second one with the learning rate as alpha.
    assert optx.optimistic_adam(0.01, 0.5) == optx.optimistic_adam_v2(1.0, alpha=0.01, beta=0.5)
    assert optx.optimistic_adam(0.01) == optx.optimistic_adam(0.01, 0.01)


# ---------------------------------------------------------------------------------------
# Polyak's step size.

POLYAK_CASES = {
    "sps": dict(max_learning_rate=0.05, f_min=1.0, eps=1e-3),
    "sps+": dict(max_learning_rate=0.05, f_min=1.0, eps=1e-3, variant="sps+"),
    "scaled": dict(max_learning_rate=0.5, scaling=0.3, f_min=0.2),
}


@pytest.mark.parametrize("case", sorted(POLYAK_CASES))
def test_polyak_sgd_matches_optax_and_numpy(case: str) -> None:
    kwargs = POLYAK_CASES[case]
    params = make_params()
    grads = make_grads(params)
    p, _, _ = run64(optx.polyak_sgd(**kwargs), params, grads, values=VALUES)
    q, _, us = run64(optax.polyak_sgd(**kwargs), params, grads, optax.apply_updates, VALUES)
    s = kwargs.get("scaling", 1.0)
    f_min, eps, gamma_max = kwargs["f_min"], kwargs.get("eps", 0.0), kwargs["max_learning_rate"]
    expected = np_tree(params)
    gs = np_tree(grads)
    # optx computes the gap f - f_min in float32 (the values are float32 numbers): f_min's
    # rounding, an absolute error of the gap, moves the step by it over the squared norm;
    # that subtraction, the scaling (in g and in the norm), eps and the maximum rate are 5
    # roundings of the update (tests/TOLERANCES.md).
    f_min_error = abs(float(np.float32(f_min)) - f_min)
    gap_terms = [0.0] * len(gs)
    for t in range(STEPS):
        scaled = [s * g[t] for g in gs]
        gap = float(VALUES[t]) - f_min
        gap = max(gap, 0.0) if kwargs.get("variant") == "sps+" else gap
        norm2 = sum(float(np.sum(x**2)) for x in scaled)
        step = min(gap / (norm2 + eps), gamma_max)
        expected = [p_ - step * x for p_, x in zip(expected, scaled, strict=True)]
        for i, x in enumerate(scaled):
            gap_terms[i] += f_min_error / (norm2 + eps) * float(np.max(np.abs(x)))
    atols = [5 * EPS32 / 2 * u + gap for u, gap in zip(sizes(us)[0], gap_terms, strict=True)]
    assert_within("params vs optax", p, q, atols)
    assert_within("params vs numpy", p, expected, atols)


def test_polyak_step_is_zero_for_a_zero_gradient() -> None:
    tx = optx.scale_by_polyak()
    g = {"w": jnp.zeros(3)}
    updates, _ = tx.update(g, tx.init(g), value=2.0)
    np.testing.assert_array_equal(updates["w"], np.zeros(3))


def wrong_by_1e3(tx: Any) -> Any:
    """``tx`` with a learning rate 1.001x too large."""
    return optx.chain(tx, optx.scale(1.001))


@pytest.mark.parametrize("case", ["sm3/default", "sm3/decaying", "noisy_sgd", "optimistic_adam"])
def test_parity_bounds_catch_a_learning_rate_off_by_1e3(case: str) -> None:
    """The parity bounds above see a learning rate 1.001x too large."""
    params = make_params(scalar=not case.startswith("sm3"))
    grads = make_grads(params)
    if case.startswith("sm3"):
        make_optx, make_optax, *_, k = SM3_CASES[case.split("/")[1]]
        ours = optx.chain(make_optx(), optx.scale(-0.05))
        theirs = optax.chain(make_optax(), optax.scale(-0.05))
        q, _, us = run64(theirs, params, grads, optax.apply_updates)
        atols = bounds(k, us)
    elif case == "noisy_sgd":
        ours = optx.noisy_sgd(0.1, eta=0.2, gamma=0.3, key=jax.random.key(5))
        theirs = optax.noisy_sgd(0.1, eta=0.2, gamma=0.3, key=jax.random.key(5))
        q, _, us = run64(theirs, params, grads, optax.apply_updates)
        atols = [
            EPS32 / 2 * ((1 + K_STD) * u + K_STD * 0.1 * g)
            for u, g in zip(sizes(us)[0], g_sums(grads), strict=True)
        ]
    else:
        kwargs = dict(alpha=0.8, beta=0.6, b1=0.8, b2=0.99, eps=1e-6, nesterov=True)
        ours = optx.optimistic_adam_v2(0.01, **kwargs)
        theirs = optax.optimistic_adam_v2(0.01, **kwargs)
        q, _, us = run64(theirs, params, grads, optax.apply_updates)
        adam = optx.scale_by_adam(0.8, 0.99, 1e-6, nesterov=True)
        k_r = adam_k(0.8, 0.99, True)
        atols = optimistic_adam_bounds(adam, 0.01, 0.8, 0.6, k_r, params, grads, us)
    p, _, _ = run64(wrong_by_1e3(ours), params, grads)
    excess = max(
        float(np.max(np.abs(a - e))) / (atol + ROUNDOFF64 * float(np.max(np.abs(e))))
        for a, e, atol in zip(np_tree(p), np_tree(q), atols, strict=True)
    )
    print(f"{case} x 1.001: max error / bound {excess:.3g}")
    assert excess > 10


# ---------------------------------------------------------------------------------------
# Convergence: an ill-conditioned parabola and Rosenbrock from (-1.5, 2).

CURVATURE = jnp.array([1.0, 10.0, 0.1])
CENTER = jnp.array([1.0, -2.0, 3.0])


def parabola(x: jax.Array) -> jax.Array:
    return jnp.sum(CURVATURE * (x - CENTER) ** 2)


def rosenbrock(x: jax.Array) -> jax.Array:
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


def minimise(tx: Any, f: Callable[[jax.Array], jax.Array], x0: jax.Array, steps: int) -> tuple:
    """``steps`` jitted steps of ``tx`` on ``f`` from ``x0``: the final point and state."""

    @jax.jit
    def go(x0: jax.Array) -> tuple:
        def step(carry: tuple, _: Any) -> tuple:
            x, s = carry
            value, g = jax.value_and_grad(f)(x)
            u, s = tx.update(g, s, x, value=value)
            return (optx.apply_updates(x, u), s), None

        return jax.lax.scan(step, (x0, tx.init(x0)), length=steps)[0]

    return go(x0)


def cosine(peak: float, steps: int) -> Callable[[jax.Array], jax.Array]:
    def schedule(count: jax.Array) -> jax.Array:
        return peak * 0.5 * (1 + jnp.cos(jnp.pi * jnp.minimum(count, steps) / steps))

    return schedule


# What sets where each run stops.
#
# The parabola sum_i k_i (x_i - c_i)**2: these deterministic methods contract to float32's
# stall, where a step eta_i * 2 k_i d_i is below half an ulp of c_i (the step rounds away):
# d_i < ulp(c_i) / 2 / (2 k_i eta_i), eta_i the rate a step applies to the gradient there (a
# moment equals the gradient once the point stops). Noisy SGD ends in its noise floor: x_i -
# c_i = (1 - 2 k_i lr)(x_i - c_i) - lr sigma_t xi_t has the stationary spread sigma_t
# sqrt(lr / (4 k_i)), sigma_t = sqrt(eta / t**gamma) (eta = 0.01, gamma = 0.55); a fixed key
# makes the end one draw of it, within 4 spreads but with probability 6e-5.
#
# Rosenbrock: the steps keep the point on the valley floor y = x**2 (its curvature across,
# ~1000, times the rate is < 2), where the gradient (-2 (1 - x), 0) moves x by 2 eta (1 - x)
# / (1 + 4 x**2) a step (a diagonal rate (eta_x, eta_y): 2 (1 - x) / (1 / eta_x + 4 x**2 /
# eta_y)). From x = -1.5 that rate is at least r1 = 2 / (1 / eta_x + 9 / eta_y) until 1 - x
# = 1, then r2 = 2 / (1 / eta_x + 4 / eta_y): 1 - x <= exp(-r2 (steps - log(2.5) / r1)),
# and |y - 1| = 2 (1 - x) there (`valley`). Polyak's step (gap / ||g||**2, between 1 / 2000
# and its cap 1) and the Adam step under a cosine schedule have no such rate to bound: for
# them the assertion is that the run found the minimum, 1e-2 away (the floor's loss 1e-4),
# where stalling on the floor or diverging ends 0.1 to 2.5 away.
def stall(k: jax.Array, c: jax.Array, eta: Any) -> float:
    """The largest distance at which a parabola coordinate can stall (see above): the step is
    computed in float32 (4 roundings), and where the rate changes (SM3's accumulator, Adam's
    v) the point may be one ulp behind it.
    """
    ulp = np.spacing(np.abs(np.asarray(c, np.float32))).astype(np.float64)
    return float(np.max(ulp / 2 / (2 * np.asarray(k) * np.asarray(eta)) * (1 + 4 * EPS32) + ulp))


def valley(eta_x: float, eta_y: float, steps: int) -> float:
    """The bound on Rosenbrock's max-norm distance from the floor's rate (see above)."""
    r1, r2 = 2 / (1 / eta_x + 9 / eta_y), 2 / (1 / eta_x + 4 / eta_y)
    return 2 * float(np.exp(-r2 * (steps - np.log(2.5) / r1)))


def noise_floor(lr: float, curvature: float, steps: int) -> float:
    """Four stationary spreads of noisy SGD (eta 0.01, gamma 0.55) at ``curvature``."""
    sigma = np.sqrt(0.01 / steps**0.55)
    return 4 * float(sigma * np.sqrt(lr / (2 * curvature)))


# Rosenbrock's Hessian at (1, 1): its small eigenvalue (the floor's direction, (1, 2) / sqrt 5).
ROSENBROCK_LOW = float(np.linalg.eigvalsh(np.array([[802.0, -400.0], [-400.0, 200.0]]))[0])


def sm3_rates(state: Any, lr: float) -> np.ndarray:
    """SM3's per-coordinate rate lr / sqrt(acc) (the accumulator only grows: the last is the
    smallest).
    """
    return lr / np.sqrt(np.asarray(state[0].mu[0], np.float64) + 1e-8)


def adam_rates(state: Any, lr: float, steps: int) -> np.ndarray:
    """Adam's rate lr / (sqrt(v_hat) + eps) at the end (b2 = 0.999, eps = 1e-8)."""
    nu = np.asarray(state[0].nu, np.float64) / (1 - 0.999**steps)
    return lr / (np.sqrt(nu) + 1e-8)


# name: (optimizer, steps, tolerance from the final point's state).
PARABOLA = {
    "sm3": (lambda: optx.sm3(3.0), 2000, lambda s: stall(CURVATURE, CENTER, sm3_rates(s, 3.0))),
    "noisy_sgd": (
        lambda: optx.noisy_sgd(0.02, key=0),
        5000,
        lambda s: noise_floor(0.02, 2 * float(jnp.min(CURVATURE)), 5000),
    ),
    "optimistic_gradient_descent": (
        lambda: optx.optimistic_gradient_descent(0.02),  # alpha = 1: rate lr
        5000,
        lambda s: stall(CURVATURE, CENTER, 0.02),
    ),
    "optimistic_adam_v2": (
        lambda: optx.optimistic_adam_v2(1e-2),
        2000,
        lambda s: stall(CURVATURE, CENTER, adam_rates(s, 1e-2, 2000)),
    ),
    # Polyak's rate min(f / ||g||**2, 1) >= 1 / (4 max k) on a parabola.
    "polyak_sgd": (
        lambda: optx.polyak_sgd(),
        2000,
        lambda s: stall(CURVATURE, CENTER, 1 / (4 * float(jnp.max(CURVATURE)))),
    ),
}
ROSENBROCK = {
    "sm3": (lambda: optx.sm3(3.0), 5000, lambda s: valley(*sm3_rates(s, 3.0), 5000)),
    "noisy_sgd": (
        lambda: optx.noisy_sgd(1e-3, key=0),
        50000,
        lambda s: valley(1e-3, 1e-3, 50000) + noise_floor(1e-3, ROSENBROCK_LOW, 50000),
    ),
    "optimistic_gradient_descent": (
        lambda: optx.optimistic_gradient_descent(5e-4),  # needs lr <= 5e-4: 1e-3 cycles
        50000,
        lambda s: valley(5e-4, 5e-4, 50000),
    ),
    "optimistic_adam_v2": (
        lambda: optx.optimistic_adam_v2(cosine(0.03, 5000)),
        5000,
        lambda s: 1e-2,
    ),
    "polyak_sgd": (lambda: optx.polyak_sgd(), 2000, lambda s: 1e-2),
}


@pytest.mark.parametrize("name", sorted(PARABOLA))
def test_converges_on_a_parabola(name: str) -> None:
    make, steps, tolerance = PARABOLA[name]
    x, state = minimise(make(), parabola, jnp.zeros(3), steps)
    distance, tol = float(jnp.max(jnp.abs(x - CENTER))), tolerance(state)
    print(f"{name} parabola: distance {distance:.3g}, tolerance {tol:.3g}")
    assert distance <= tol


@pytest.mark.parametrize("name", sorted(ROSENBROCK))
def test_converges_on_rosenbrock(name: str) -> None:
    make, steps, tolerance = ROSENBROCK[name]
    x, state = minimise(make(), rosenbrock, jnp.array([-1.5, 2.0]), steps)
    distance, tol = float(jnp.max(jnp.abs(x - 1.0))), tolerance(state)
    print(f"{name} rosenbrock: distance {distance:.3g}, tolerance {tol:.3g}")
    assert distance <= tol


# ---------------------------------------------------------------------------------------
# bfloat16 parameters follow the float32 run (20 steps).

BF16_STEPS = 20
BF16 = {
    "sm3": (lambda: optx.sm3(0.05), None),
    "noisy_sgd": (lambda: optx.noisy_sgd(0.01, key=0), None),
    "optimistic_gradient_descent": (lambda: optx.optimistic_gradient_descent(0.01), None),
    "optimistic_adam_v2": (lambda: optx.optimistic_adam_v2(0.01, mu_dtype=jnp.float32), None),
    "polyak_sgd": (lambda: optx.polyak_sgd(max_learning_rate=0.05), VALUES[:BF16_STEPS]),
}


def bf16_drift(name: str, params: Any, grads: Any) -> list[float]:
    """Per leaf, how far bfloat16 state moves the updates over the run, in units of 2**-8.

    SM3 keeps its accumulators and moment in the parameters' dtype (optax's has no dtype
    option): each step rounds the accumulator, a growing sum, by 2**-8 of it (t 2**-8 by step
    t, half that through the root) and the moment by 2**-8 of it (kept 1 / (1 - 0.9) = 10
    steps); with b2 = 1 the scaled gradient and the moment are at most 1, so a step moves by
    lr (t / 2 + 10) 2**-8 at most. Optimistic Adam's bfloat16 nu does the same to its
    direction r (t / 2), where u = lr (2 r_t - r_{t-1}) holds 3 |r| of terms; the other
    optimizers keep no bfloat16 state that rounds.
    """
    n, lr = len(jax.tree.leaves(params)), 0.05 if name == "sm3" else 0.01
    if name == "sm3":
        return [BF16_STEPS * lr * (BF16_STEPS / 2 + 10)] * n
    if name == "optimistic_adam_v2":
        _, _, rs = run(optx.scale_by_adam(), params, grads)
        return [BF16_STEPS / 2 * lr * 3 * r for r in sizes(rs)[0]]
    return [0.0] * n


@pytest.mark.parametrize("name", sorted(BF16))
def test_bfloat16_params_follow_float32(name: str) -> None:
    make, values = BF16[name]
    params = make_params()
    grads = jax.tree.map(lambda g: g[:BF16_STEPS], make_grads(params))
    params16, grads16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), (params, grads))
    p16, _, _ = run(make(), params16, grads16, values=values)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16))
    # The float32 run starts from the same numbers and sees the same gradients. bfloat16 keeps
    # 8 significant bits: each step rounds the update and then the parameter by up to 2**-8 of
    # its size (none of these updates depends on the parameters), plus `bf16_drift`: per leaf
    # 2**-8 (steps max|p| + sum_t max|u_t| + drift).
    as_f32 = jax.tree.map(lambda x: x.astype(jnp.float32), (params16, grads16))
    p32, _, us = run(make(), *as_f32, values=values)
    p_max = [float(np.max(np.abs(p))) + u for p, u in zip(np_tree(p32), sizes(us)[0], strict=True)]
    atols = [
        2.0**-8 * (BF16_STEPS * p + u + d)
        for p, u, d in zip(p_max, sizes(us)[0], bf16_drift(name, *as_f32), strict=True)
    ]
    worst = 0.0
    for i, (a, e, atol) in enumerate(zip(np_tree(p16), np_tree(p32), atols, strict=True)):
        assert_close(f"bf16 vs f32[{i}]", a, e, 0.0, atol)
        worst = max(worst, float(np.max(np.abs(a - e))) / atol)
    print(f"{name} bfloat16: max error / bound {worst:.3g}")


# ---------------------------------------------------------------------------------------
# Errors.


def check(error: type[Exception], message: str, fn: Callable[[], Any]) -> None:
    with pytest.raises(error) as info:
        fn()
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("fn", "error", "message"),
    [
        (
            lambda: optx.scale_by_sm3(b1=1.0),
            ValueError,
            "`scale_by_sm3` needs b1 in [0, 1). Received: b1=1.0.",
        ),
        (
            lambda: optx.scale_by_sm3(b2=1.5),
            ValueError,
            "`scale_by_sm3` needs b2 in [0, 1]. Received: b2=1.5.",
        ),
        (
            lambda: optx.scale_by_sm3(eps=-1.0),
            ValueError,
            "`scale_by_sm3` needs eps finite and >= 0. Received: eps=-1.0.",
        ),
        (
            lambda: optx.sm3(0.1, momentum=1.0),
            ValueError,
            "`sm3` needs momentum in [0, 1). Received: momentum=1.0.",
        ),
        (
            lambda: optx.sm3(-0.1),
            ValueError,
            "`sm3` needs learning_rate finite and >= 0. Received: learning_rate=-0.1.",
        ),
        (
            lambda: optx.add_noise(-0.1, 0.55),
            ValueError,
            "`add_noise` needs eta finite and >= 0. Received: eta=-0.1.",
        ),
        (
            lambda: optx.add_noise(0.1, -1),
            ValueError,
            "`add_noise` needs gamma finite and >= 0. Received: gamma=-1.",
        ),
        (
            lambda: optx.noisy_sgd(0.1, eta=float("nan")),
            ValueError,
            "`noisy_sgd` needs eta finite and >= 0. Received: eta=nan.",
        ),
        (
            lambda: optx.add_noise(0.1, 0.5, key=1, seed=2),
            ValueError,
            "`add_noise` needs one of key and seed, not both. Received: key=1, seed=2.",
        ),
        (
            lambda: optx.noisy_sgd(0.1, key=1.5),
            TypeError,
            "`noisy_sgd` needs key to be an int seed or one typed PRNG key "
            "(`jax.random.key(seed)`). Received: key=1.5. Wrap a raw uint32 key with "
            "`jax.random.wrap_key_data(key)`.",
        ),
        (
            lambda: optx.add_noise(0.1, 0.5, key=np.array([0, 1], np.uint32)),
            TypeError,
            "`add_noise` needs key to be an int seed or one typed PRNG key "
            "(`jax.random.key(seed)`). Received: key=array([0, 1], dtype=uint32). Wrap a raw "
            "uint32 key with `jax.random.wrap_key_data(key)`.",
        ),
        (
            lambda: optx.scale_by_optimistic_gradient(alpha=float("inf")),
            ValueError,
            "`scale_by_optimistic_gradient` needs alpha finite. Received: alpha=inf.",
        ),
        (
            lambda: optx.optimistic_gradient_descent(0.1, beta="1"),
            TypeError,
            "`optimistic_gradient_descent` needs beta to be a real number or a schedule (a "
            "function of the step count). Received: beta='1' of type str.",
        ),
        (
            lambda: optx.optimistic_adam_v2(0.1, b2=1.0),
            ValueError,
            "`optimistic_adam_v2` needs b2 in [0, 1). Received: b2=1.0.",
        ),
        (
            lambda: optx.optimistic_adam(-0.1),
            ValueError,
            "`optimistic_adam` needs learning_rate finite and >= 0. Received: learning_rate=-0.1.",
        ),
        (
            lambda: optx.optimistic_adam(0.1, float("nan")),
            ValueError,
            "`optimistic_adam` needs optimism finite. Received: optimism=nan.",
        ),
        (
            lambda: optx.scale_by_polyak(variant="sps++"),
            ValueError,
            "`scale_by_polyak` needs variant to be 'sps' or 'sps+'. Received: variant='sps++'.",
        ),
        (
            lambda: optx.polyak_sgd(variant="SPS"),
            ValueError,
            "`polyak_sgd` needs variant to be 'sps' or 'sps+'. Received: variant='SPS'.",
        ),
        (
            lambda: optx.polyak_sgd(max_learning_rate=-1.0),
            ValueError,
            "`polyak_sgd` needs max_learning_rate finite and >= 0. "
            "Received: max_learning_rate=-1.0.",
        ),
        (
            lambda: optx.polyak_sgd(scaling=-1.0),
            ValueError,
            "`polyak_sgd` needs scaling finite and >= 0. Received: scaling=-1.0.",
        ),
        (
            lambda: optx.scale_by_polyak(eps=-1e-3),
            ValueError,
            "`scale_by_polyak` needs eps finite and >= 0. Received: eps=-0.001.",
        ),
    ],
)
def test_construction_errors(fn: Callable[[], Any], error: type[Exception], message: str) -> None:
    check(error, message, fn)


def schedule(count: jax.Array) -> jax.Array:
    return 0.1 * jnp.ones_like(count, jnp.float32)


def test_optimistic_adam_rejects_a_schedule() -> None:
    check(
        TypeError,
        "`optimistic_adam` needs learning_rate to be a number; use `optimistic_adam_v2` for a "
        f"schedule. Received: learning_rate={schedule!r}.",
        lambda: optx.optimistic_adam(schedule),
    )


def test_add_noise_key_errors() -> None:
    message = (
        "`add_noise` needs key to be an int seed or one typed PRNG key (`jax.random.key(seed)`). "
        "Received: key={}. Wrap a raw uint32 key with `jax.random.wrap_key_data(key)`."
    )
    keys = jax.random.split(jax.random.key(0), 2)
    check(TypeError, message.format(repr(keys)), lambda: optx.add_noise(0.1, 0.5, key=keys))
    check(TypeError, message.format("True"), lambda: optx.add_noise(0.1, 0.5, key=True))

    def build(key: jax.Array) -> Any:
        with pytest.raises(TypeError) as info:
            optx.add_noise(0.1, 0.5, key=key)
        return str(info.value)

    traced: list[str] = []
    jax.eval_shape(lambda k: traced.append(build(k)) or k, jax.random.key(0))
    assert traced[0].startswith("`add_noise` needs key to be concrete when the transform is built")
    assert traced[0].endswith(
        "To draw other noise inside a traced function, replace the state's `rng_key` with "
        "`jax.random.key_data(new_key)`."
    )


def test_polyak_update_needs_a_scalar_value() -> None:
    tx = optx.polyak_sgd()
    params = {"w": jnp.ones(3)}
    state = tx.init(params)
    check(
        TypeError,
        "`scale_by_polyak.update` needs the loss at the current parameters as a keyword "
        "argument. Received: value=None. Call `update(updates, state, params, value=loss)`.",
        lambda: tx.update(params, state, params),
    )
    check(
        ValueError,
        "`scale_by_polyak.update` needs value to be a scalar (the loss). "
        "Received: value of shape (3,).",
        lambda: tx.update(params, state, params, value=jnp.ones(3)),
    )


@pytest.mark.parametrize(
    ("tx", "name"),
    [
        (optx.scale_by_sm3(), "scale_by_sm3"),
        (optx.scale_by_optimistic_gradient(), "scale_by_optimistic_gradient"),
    ],
)
def test_update_checks_the_tree(tx: Any, name: str) -> None:
    state = tx.init({"a": jnp.zeros(2)})
    check(
        ValueError,
        f"`{name}.update` needs updates with the shapes of the state. "
        "Received: updates['a'] of shape (3,), expected (2,).",
        lambda: tx.update({"a": jnp.zeros(3)}, state),
    )
