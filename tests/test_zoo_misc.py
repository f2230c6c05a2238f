"""SM3, gradient noise, optimistic methods and Polyak SGD: parity with optax, NumPy
reference loops, convergence, bfloat16, and every error message.

Parity and reference runs are 100 steps of one jitted `lax.scan` on a nested float32 pytree
(dicts and a list; matrices, a 3-D kernel, vectors, a scalar) with gradients that change
every step. Errors are measured relative to each leaf's largest entry (`assert_close`).
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
from helpers import assert_close

import optx

STEPS = 100
# float32 round-off of the same formulas evaluated in a different order (a few ulps).
RTOL, ATOL = 1e-6, 1e-7
# Adam inside optimistic Adam: optx's bias corrections are exact to round-off, optax's
# `1 - float32(b2)**t` is 1.3e-5 (relative) off, which moves the parameters ~1e-6..1e-5 in
# 100 steps (see tests/test_numerics_optax.py). NumPy's float64 loop agrees with optx at
# RTOL/ATOL.
ADAM_TOL = 1e-5


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


# ---------------------------------------------------------------------------------------
# SM3.


SM3_CASES = {
    "default": (lambda: optx.scale_by_sm3(), lambda: optax.scale_by_sm3(), 0.9, 1.0, 1e-8),
    "decaying": (
        lambda: optx.scale_by_sm3(b1=0.5, b2=0.99, eps=1e-3),
        lambda: optax.scale_by_sm3(b1=0.5, b2=0.99, eps=1e-3),
        0.5,
        0.99,
        1e-3,
    ),
}


@pytest.mark.parametrize("case", sorted(SM3_CASES))
def test_scale_by_sm3_matches_optax(case: str) -> None:
    make_optx, make_optax, *_ = SM3_CASES[case]
    params = make_params(scalar=False)
    grads = make_grads(params)
    p, s, _ = run(optx.chain(make_optx(), optx.scale(-0.05)), params, grads)
    tx = optax.chain(make_optax(), optax.scale(-0.05))
    q, t, _ = run(tx, params, grads, optax.apply_updates)
    assert_close("params", p, q, RTOL, ATOL)
    assert_close("mu", s[0].mu, t[0].mu, RTOL, ATOL)
    assert_close("nu", s[0].nu, t[0].nu, RTOL, ATOL)


def test_sm3_matches_optax() -> None:
    params = make_params(scalar=False)
    grads = make_grads(params)
    p, s, _ = run(optx.sm3(0.1, momentum=0.8), params, grads)
    q, t, _ = run(optax.sm3(0.1, momentum=0.8), params, grads, optax.apply_updates)
    assert_close("params", p, q, RTOL, ATOL)
    assert_close("nu", s[0].nu, t[0].nu, RTOL, ATOL)


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
    make_optx, _, b1, b2, eps = SM3_CASES[case]
    params = make_params()  # with the scalar leaf, which optax's SM3 rejects
    grads = make_grads(params)
    p, _, _ = run(optx.chain(make_optx(), optx.scale_by_learning_rate(0.05)), params, grads)
    assert_close("params", p, np_sm3(params, grads, 0.05, b1, b2, eps), RTOL, ATOL)


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
        tx = optx.chain(optx.add_noise(0.3, 0.55, 7), optx.scale(-0.1))
        ref = optax.chain(optax.add_noise(0.3, 0.55, 7), optax.scale(-0.1))
    else:  # a typed key
        tx = optx.noisy_sgd(0.1, eta=0.2, gamma=0.3, key=jax.random.key(5))
        ref = optax.noisy_sgd(0.1, eta=0.2, gamma=0.3, key=jax.random.key(5))
    p, s, _ = run(tx, params, grads)
    q, t, _ = run(ref, params, grads, optax.apply_updates)
    assert_close("params", p, q, RTOL, ATOL)
    assert int(s[0].count) == int(t[0].count) == STEPS
    np.testing.assert_array_equal(s[0].rng_key, jax.random.key_data(t[0].rng_key))


@jax.jit
def documented_noise(key: jax.Array, like: Any) -> Any:
    """The standard normal draws of every step, from the key sequence `add_noise` documents:
    split the key into (next key, sampling key), split the sampling key once per leaf.
    """

    def step(key: jax.Array, _: Any) -> tuple:
        key, sample = jax.random.split(key)
        leaves, treedef = jax.tree.flatten(like)
        keys = jax.random.split(sample, len(leaves))
        draws = [
            jax.random.normal(k, x.shape, jnp.float32) for k, x in zip(keys, leaves, strict=True)
        ]
        return key, jax.tree.unflatten(treedef, draws)

    return jax.lax.scan(step, key, length=STEPS)[1]


def test_add_noise_matches_numpy() -> None:
    """u_t = g_t + sqrt(eta / t**gamma) * xi_t, with xi_t from the documented key sequence."""
    eta, gamma, seed = 0.3, 0.55, 11
    params = make_params()
    grads = make_grads(params)
    _, _, us = run(optx.add_noise(eta, gamma, key=seed), params, grads)
    noise = np_tree(documented_noise(jax.random.key(seed), params))
    std = np.sqrt(eta / np.arange(1.0, STEPS + 1) ** gamma)
    expected = [
        g + std.reshape((STEPS,) + (1,) * (g.ndim - 1)) * xi
        for g, xi in zip(np_tree(grads), noise, strict=True)
    ]
    assert_close("updates", us, expected, RTOL, ATOL)


def test_add_noise_is_deterministic_and_jit_equals_eager() -> None:
    params = make_params()
    grads = [jax.tree.map(lambda g, t=t: g[t], make_grads(params)) for t in range(3)]
    tx = optx.add_noise(0.5, 0.55, key=jax.random.key(2))
    step = jax.jit(tx.update)
    eager, jitted = tx.init(params), tx.init(params)
    for g in grads:
        u_eager, eager = tx.update(g, eager)
        u_jit, jitted = step(g, jitted)
        assert_close("updates", u_jit, u_eager, RTOL, ATOL)
        np.testing.assert_array_equal(eager.rng_key, jitted.rng_key)

    def first_update(tx: Any) -> Any:
        return tx.update(grads[0], tx.init(params))[0]

    # Rebuilt from the same seed (an int, `seed=`, or the typed key of that seed): the same
    # noise; another seed: other noise.
    same = first_update(tx)
    for again in (optx.add_noise(0.5, 0.55, key=2), optx.add_noise(0.5, 0.55, seed=2)):
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
    p, s, _ = run(tx, params, grads)
    ref = optax.chain(optax.scale_by_optimistic_gradient(0.5, 2.0), optax.scale(-0.01))
    q, t, _ = run(ref, params, grads, optax.apply_updates)
    assert_close("params", p, q, RTOL, ATOL)
    assert_close("previous", s[0].previous_gradient, t[0].previous_gradient, RTOL, ATOL)
    assert not bool(s[0].is_initial_step) and not bool(t[0].is_initial_step)


def test_optimistic_gradient_descent_matches_optax_and_numpy() -> None:
    params = make_params()
    grads = make_grads(params)
    p, _, _ = run(optx.optimistic_gradient_descent(0.02, alpha=0.7, beta=1.5), params, grads)
    ref = optax.optimistic_gradient_descent(0.02, alpha=0.7, beta=1.5)
    q, _, _ = run(ref, params, grads, optax.apply_updates)
    assert_close("params vs optax", p, q, RTOL, ATOL)
    expected = np_tree(params)
    for i, g in enumerate(np_tree(grads)):
        for t in range(STEPS):
            previous = g[max(t - 1, 0)]
            expected[i] = expected[i] - 0.02 * ((0.7 + 1.5) * g[t] - 1.5 * previous)
    assert_close("params vs numpy", p, expected, RTOL, ATOL)


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


@pytest.mark.parametrize("nesterov", [True, False])
def test_optimistic_adam_v2_matches_optax_and_numpy(nesterov: bool) -> None:
    params = make_params()
    grads = make_grads(params)
    kwargs = dict(alpha=0.8, beta=0.6, b1=0.8, b2=0.99, eps=1e-6, nesterov=nesterov)
    p, s, _ = run(optx.optimistic_adam_v2(0.01, **kwargs), params, grads)
    q, t, _ = run(optax.optimistic_adam_v2(0.01, **kwargs), params, grads, optax.apply_updates)
    assert_close("params vs optax", p, q, ADAM_TOL, ADAM_TOL)
    assert_close("mu", s[0].mu, t[0].mu, RTOL, ATOL)
    assert_close("nu", s[0].nu, t[0].nu, RTOL, ATOL)
    expected = np_optimistic_adam(params, grads, 0.01, 0.8, 0.6, 0.8, 0.99, 1e-6, nesterov)
    assert_close("params vs numpy", p, expected, RTOL, ATOL)


def test_optimistic_adam_matches_optax() -> None:
    params = make_params()
    grads = make_grads(params)
    p, _, _ = run(optx.optimistic_adam(0.01, 0.5), params, grads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # optax's, for this interface
        ref = optax.optimistic_adam(0.01, 0.5)
    q, _, _ = run(ref, params, grads, optax.apply_updates)
    assert_close("params", p, q, ADAM_TOL, ADAM_TOL)
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
    p, _, _ = run(optx.polyak_sgd(**kwargs), params, grads, values=VALUES)
    q, _, _ = run(optax.polyak_sgd(**kwargs), params, grads, optax.apply_updates, VALUES)
    assert_close("params vs optax", p, q, RTOL, ATOL)
    s = kwargs.get("scaling", 1.0)
    f_min, eps, gamma_max = kwargs["f_min"], kwargs.get("eps", 0.0), kwargs["max_learning_rate"]
    expected = np_tree(params)
    gs = np_tree(grads)
    for t in range(STEPS):
        scaled = [s * g[t] for g in gs]
        gap = float(VALUES[t]) - f_min
        gap = max(gap, 0.0) if kwargs.get("variant") == "sps+" else gap
        norm2 = sum(float(np.sum(x**2)) for x in scaled)
        step = min(gap / (norm2 + eps), gamma_max)
        expected = [p_ - step * x for p_, x in zip(expected, scaled, strict=True)]
    assert_close("params vs numpy", p, expected, RTOL, ATOL)


def test_polyak_step_is_zero_for_a_zero_gradient() -> None:
    tx = optx.scale_by_polyak()
    g = {"w": jnp.zeros(3)}
    updates, _ = tx.update(g, tx.init(g), value=2.0)
    np.testing.assert_array_equal(updates["w"], np.zeros(3))


# ---------------------------------------------------------------------------------------
# Convergence: an ill-conditioned parabola and Rosenbrock from (-1.5, 2).

CURVATURE = jnp.array([1.0, 10.0, 0.1])
CENTER = jnp.array([1.0, -2.0, 3.0])


def parabola(x: jax.Array) -> jax.Array:
    return jnp.sum(CURVATURE * (x - CENTER) ** 2)


def rosenbrock(x: jax.Array) -> jax.Array:
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


def minimise(tx: Any, f: Callable[[jax.Array], jax.Array], x0: jax.Array, steps: int) -> jax.Array:
    @jax.jit
    def go(x0: jax.Array) -> jax.Array:
        def step(carry: tuple, _: Any) -> tuple:
            x, s = carry
            value, g = jax.value_and_grad(f)(x)
            u, s = tx.update(g, s, x, value=value)
            return (optx.apply_updates(x, u), s), None

        return jax.lax.scan(step, (x0, tx.init(x0)), length=steps)[0][0]

    return go(x0)


def cosine(peak: float, steps: int) -> Callable[[jax.Array], jax.Array]:
    def schedule(count: jax.Array) -> jax.Array:
        return peak * 0.5 * (1 + jnp.cos(jnp.pi * jnp.minimum(count, steps) / steps))

    return schedule


# (optimizer, steps, tolerance on the max-norm distance to the minimum). Observed distances
# in comments. Adagrad-like SM3 and plain gradient steps (noisy SGD, optimistic GD) need
# many steps on Rosenbrock's flat valley; noisy SGD ends within its noise floor
# (lr * sigma_t ~ 2e-4); optimistic GD needs lr <= 5e-4 there (it cycles at 1e-3).
PARABOLA = {
    "sm3": (lambda: optx.sm3(3.0), 2000, 1e-5),  # 2e-7
    "noisy_sgd": (lambda: optx.noisy_sgd(0.02, key=0), 5000, 5e-3),  # 9e-4
    "optimistic_gradient_descent": (lambda: optx.optimistic_gradient_descent(0.02), 5000, 1e-4),
    "optimistic_adam_v2": (lambda: optx.optimistic_adam_v2(1e-2), 2000, 1e-4),  # 5e-6
    "polyak_sgd": (lambda: optx.polyak_sgd(), 2000, 1e-5),  # 5e-7
}
ROSENBROCK = {
    "sm3": (lambda: optx.sm3(3.0), 5000, 1e-4),  # 6e-5
    "noisy_sgd": (lambda: optx.noisy_sgd(1e-3, key=0), 50000, 1e-3),  # 1.4e-4
    "optimistic_gradient_descent": (
        lambda: optx.optimistic_gradient_descent(5e-4),
        50000,
        1e-3,
    ),  # 1.3e-4
    "optimistic_adam_v2": (lambda: optx.optimistic_adam_v2(cosine(0.03, 5000)), 5000, 1e-3),
    "polyak_sgd": (lambda: optx.polyak_sgd(), 2000, 1e-4),  # 9e-6
}


@pytest.mark.parametrize("name", sorted(PARABOLA))
def test_converges_on_a_parabola(name: str) -> None:
    make, steps, tol = PARABOLA[name]
    x = minimise(make(), parabola, jnp.zeros(3), steps)
    assert float(jnp.max(jnp.abs(x - CENTER))) < tol


@pytest.mark.parametrize("name", sorted(ROSENBROCK))
def test_converges_on_rosenbrock(name: str) -> None:
    make, steps, tol = ROSENBROCK[name]
    x = minimise(make(), rosenbrock, jnp.array([-1.5, 2.0]), steps)
    assert float(jnp.max(jnp.abs(x - 1.0))) < tol


# ---------------------------------------------------------------------------------------
# bfloat16 parameters stay close to the float32 run (100 steps).

BF16 = {
    "sm3": (lambda: optx.sm3(0.05), None),
    "noisy_sgd": (lambda: optx.noisy_sgd(0.01, key=0), None),
    "optimistic_gradient_descent": (lambda: optx.optimistic_gradient_descent(0.01), None),
    "optimistic_adam_v2": (lambda: optx.optimistic_adam_v2(0.01, mu_dtype=jnp.float32), None),
    "polyak_sgd": (lambda: optx.polyak_sgd(max_learning_rate=0.05), VALUES),
}
# bfloat16 keeps 8 significant bits: a parameter of size ~2.5 moves in steps of 2**-6 =
# 0.016, the size of these updates (lr * |g| ~ 0.01..0.05), so rounding at every step
# drifts. Observed: the parameters end within 2.2% (noisy_sgd) to 5.1% (sm3, whose
# accumulators are bfloat16 too: optax's SM3 has no dtype option) of each leaf's scale of
# the float32 run; Adam's float32 moments do not help (3.4%): parameter rounding dominates.
BF16_RTOL = 1e-1


@pytest.mark.parametrize("name", sorted(BF16))
def test_bfloat16_params_stay_close_to_float32(name: str) -> None:
    make, values = BF16[name]
    params = make_params()
    grads = make_grads(params)
    p32, _, _ = run(make(), params, grads, values=values)
    params16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    grads16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), grads)
    p16, _, _ = run(make(), params16, grads16, values=values)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16))
    assert_close("bf16 vs f32", p16, p32, BF16_RTOL, 0.0)


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
