"""Sign-based optimizers: scale_by_sign, sign_sgd, signum, scale_by_lion, lion, rprop.

Parity with optax (100 jitted steps on a nested pytree) and NumPy loops (Keras's Lion
formula among them), both run in float64, convergence, bfloat16, and every error message of
these modules. The helpers at the top are shared with `test_zoo_belief.py`.
"""

from __future__ import annotations

import dataclasses
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

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)

# The comparisons here run in float64 (`run64`, `run_numpy_case64`): a sign turns a last-bit
# change of a direction near 0 into a step of 2 lr, so float32 round-off, which differs from
# one CPU to another, has no small bound. In float64 the one difference left is optx's
# float32 hyperparameters (DESIGN D2), each off by at most EPS32 / 2 relative: a fixed
# perturbation, the same on every machine. `Bounds` counts its roundings: ``k_u`` on each
# update, relative to its size (the learning rate, a weight decay); ``k_c`` on the direction
# ``c`` (Lion's ``b1 m + (1 - b1) g``, signum's average), relative to its terms' size: 1 for
# each of ``b1``, ``1 - b1``, ``1 - b2``, and the lag of ``b2`` (``b**n`` off by
# ``n EPS32 / 2``, ``n`` averaging ``b / (1 - b)`` over a moving average's weights, at most
# STEPS). A sign does not see ``c``'s error unless ``|c|`` is within it, which `check_signs`
# rules out for these data; smooth and refined modes pass it on with their slope. Plus
# float64 round-off, ROUNDOFF64 of each leaf's scale (32 roundings a step). A learning rate
# 1.001x too large lands far outside (`test_parity_bounds_catch_a_learning_rate_off_by_1e3`).
ROUNDOFF64 = STEPS * 32 * EPS64

# ---------------------------------------------------------------------------------------
# Helpers (also used by test_zoo_belief.py).


def nested_params() -> Any:
    """A nested float32 pytree: dicts and a list, matrices, vectors, a 3-D kernel, a scalar."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "dense": {"kernel": normal(3, 4), "bias": normal(4)},
        "blocks": [{"conv": normal(2, 3, 2)}, normal(5)],
        "scale": normal(),
    }


def step_grads(params: Any, steps: int = STEPS, seed: int = 1) -> Any:
    """Per-step float32 gradients (leading axis: step) of varying sign and size."""
    rng = np.random.default_rng(seed)
    magnitude = 0.2 + 2.0 * np.sin(0.3 * np.arange(steps)) ** 2

    def draw(p: jax.Array) -> jax.Array:
        g = rng.standard_normal((steps, *p.shape)) * magnitude.reshape((steps,) + (1,) * p.ndim)
        return jnp.asarray(g, jnp.float32)

    return jax.tree.map(draw, params)


def cosine(peak: float, steps: int) -> Callable[[jax.Array], jax.Array]:
    """Cosine decay from ``peak`` to 0: fixed-length (sign) steps need it to settle."""

    def schedule(count: jax.Array) -> jax.Array:
        t = jnp.minimum(count, steps).astype(jnp.float32) / steps
        return peak * 0.5 * (1 + jnp.cos(jnp.pi * t))

    return schedule


CURVATURE = jnp.array([1.0, 10.0, 0.1])
CENTER = jnp.array([1.0, -2.0, 3.0])


def parabola(x: jax.Array) -> jax.Array:
    """Curvatures 2, 20 and 0.2; minimum 0 at CENTER."""
    return jnp.sum(CURVATURE * (x - CENTER) ** 2)


def rosenbrock(x: jax.Array) -> jax.Array:
    """The 2-D Rosenbrock function; minimum 0 at (1, 1)."""
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


PROBLEMS = {
    "parabola": (parabola, jnp.zeros(3), CENTER),
    "rosenbrock": (rosenbrock, jnp.array([-1.5, 2.0]), jnp.array([1.0, 1.0])),
}


def minimise(tx: Any, problem: str, steps: int, dtype: Any = jnp.float32) -> jax.Array:
    """``steps`` jitted steps of ``tx`` on ``problem`` from its start; returns the end point."""
    f, x0, _ = PROBLEMS[problem]
    x0 = x0.astype(dtype)

    @jax.jit
    def run(x0: jax.Array) -> jax.Array:
        def step(carry: tuple, _: None) -> tuple:
            x, state = carry
            updates, state = tx.update(jax.grad(f)(x), state, x)
            return (optx.apply_updates(x, updates), state), None

        return jax.lax.scan(step, (x0, tx.init(x0)), None, length=steps)[0][0]

    x = run(x0)
    assert x.dtype == dtype
    return x


def distance(x: jax.Array, problem: str) -> float:
    return float(jnp.max(jnp.abs(x.astype(jnp.float32) - PROBLEMS[problem][2])))


def check_message(make: Callable[[], Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        make()
    assert str(info.value) == message


def numpy_grads(shape: tuple[int, ...] = (4, 3), steps: int = STEPS, seed: int = 2) -> np.ndarray:
    """float32 gradients as float64 (the exact values optx sees), sizes over 3 decades."""
    rng = np.random.default_rng(seed)
    size = np.exp(rng.uniform(-3, 1, (steps,) + (1,) * len(shape)))
    return (rng.standard_normal((steps, *shape)) * size).astype(np.float32).astype(np.float64)


def kernel_mask(params: Any) -> Any:
    """A mask callable both libraries accept: decay the rank-2 leaves only."""
    return jax.tree.map(lambda p: jnp.ndim(p) == 2, params)


def run64(tx: Any, apply_updates: Callable[..., Any], params: Any, grads: Any) -> tuple:
    """`helpers.run64` with the parameters of every step (leading axis: step)."""
    return helpers.run64(tx, apply_updates, params, grads, trajectory=True)


def run_numpy_case64(tx: Any, params: np.ndarray, grads: np.ndarray) -> tuple:
    """`run64` of ``tx`` from ``params`` (an array) on fixed ``grads`` (leading axis: step)."""
    return run64(tx, optx.apply_updates, params, grads)


def lag(b: float) -> float:
    """The roundings a float32 decay ``b`` costs a moving average: ``b / (1 - b)``, at most
    STEPS (see the top of the module).
    """
    return min(STEPS, b / (1 - b))


def directions(grads: np.ndarray, b1: float, b2: float) -> tuple[np.ndarray, np.ndarray]:
    """Lion's directions ``c_t = b1 m_{t-1} + (1 - b1) g_t`` (``m_t = b2 m_{t-1} + (1 - b2)
    g_t``) in float64 for per-step gradients (leading axis: step), and their terms' size (the
    same sums of ``|g|``). Signum's average is ``b1 = b2 = beta``; signSGD's is ``b1 = 0``.
    """
    m, size = np.zeros(grads.shape[1:]), np.zeros(grads.shape[1:])
    out, out_terms = [], []
    for g in np.asarray(grads, np.float64):
        c, terms = b1 * m + (1 - b1) * g, b1 * size + (1 - b1) * np.abs(g)
        m, size = b2 * m + (1 - b2) * g, b2 * size + (1 - b2) * np.abs(g)
        out.append(c)
        out_terms.append(terms)
    return np.stack(out), np.stack(out_terms)


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The roundings of optx's float32 hyperparameters in one comparison (see the top of the
    module): ``k_u`` on each update relative to its size, ``k_c`` on the direction relative
    to its terms' size, which reaches the update with ``slope`` (0 for a sign, the tanh's
    ``smooth_beta``, 1 for the refined clip) times the learning rate ``lr``; ``b1``, ``b2``
    give the directions (`directions`); ``k_slot`` is the state's average's roundings.
    """

    k_u: float
    k_c: float = 0.0
    slope: float = 0.0
    lr: float = 0.0
    b1: float = 0.0
    b2: float = 0.0
    k_slot: float = 0.0


def check_signs(grads: np.ndarray, bounds: Bounds) -> None:
    """No direction is within its error of 0, so the signs are float64's on every machine."""
    if bounds.slope or not bounds.k_c:
        return
    c, terms = directions(grads, bounds.b1, bounds.b2)
    margin = float(np.min(np.abs(c) / (bounds.k_c * EPS32 / 2 * terms)))
    print(f"smallest |c| / its error bound: {margin:.3g}")
    assert margin > 1


def param_atol(bounds: Bounds, sizes: float, grads: np.ndarray) -> float:
    """``EPS32 / 2 * (k_u sum_t max|u_t| + slope k_c lr sum_t max(terms of c_t))``."""
    direction = 0.0
    if bounds.slope:
        terms = directions(grads, bounds.b1, bounds.b2)[1]
        direction = bounds.slope * bounds.k_c * bounds.lr * float(np.sum(_max_per_step(terms)))
    return EPS32 / 2 * (bounds.k_u * sizes + direction)


def average_atol(bounds: Bounds, grads: np.ndarray) -> float:
    """The final average's bound: ``k_slot`` roundings of its terms' size (the same average
    of ``|g|``), not of its value, which can cancel to near 0.
    """
    terms = directions(grads, bounds.b2, bounds.b2)[1][-1]
    return bounds.k_slot * EPS32 / 2 * float(np.max(terms))


def _max_per_step(x: np.ndarray) -> np.ndarray:
    return np.max(np.abs(x).reshape(x.shape[0], -1), axis=1)


# ---------------------------------------------------------------------------------------
# Parity with optax.


# name: (optx, optax, the state's average (both libraries' field), `Bounds`)
PARITY = {
    # lr, weight decay; b1, 1 - b1, 1 - b2, and b2 = 0.99's lag.
    "lion": (
        lambda: optx.lion(1e-2),
        lambda: optax.lion(1e-2),
        lambda s: s[0].mu,
        Bounds(k_u=2, k_c=3 + lag(0.99), b1=0.9, b2=0.99, k_slot=1 + lag(0.99)),
    ),
    # The momentum kept in float32 on both sides: each rounds it by EPS32 / 2 a step, which
    # b2 = 0.95 keeps for 1 / (1 - b2) = 20 steps: 2 * 20 more roundings.
    "lion_mask_f32_mu": (
        lambda: optx.lion(
            3e-3, b1=0.8, b2=0.95, mu_dtype=jnp.float32, weight_decay=0.1, mask=kernel_mask
        ),
        lambda: optax.lion(
            3e-3, b1=0.8, b2=0.95, mu_dtype=jnp.float32, weight_decay=0.1, mask=kernel_mask
        ),
        lambda s: s[0].mu,
        Bounds(k_u=2, k_c=3 + lag(0.95) + 40, b1=0.8, b2=0.95, k_slot=1 + lag(0.95) + 40),
    ),
    "lion_smooth": (
        lambda: optx.chain(
            optx.scale_by_lion(mode="smooth", smooth_beta=2.0), optx.scale_by_learning_rate(0.01)
        ),
        lambda: optax.chain(
            optax.scale_by_lion(mode="smooth", smooth_beta=2.0), optax.scale_by_learning_rate(0.01)
        ),
        lambda s: s[0].mu,
        Bounds(1, 3 + lag(0.99), slope=2.0, lr=0.01, b1=0.9, b2=0.99, k_slot=1 + lag(0.99)),
    ),
    "lion_refined": (
        lambda: optx.chain(
            optx.scale_by_lion(b2=0.9, mode="refined"), optx.scale_by_learning_rate(0.01)
        ),
        lambda: optax.chain(
            optax.scale_by_lion(b2=0.9, mode="refined"), optax.scale_by_learning_rate(0.01)
        ),
        lambda s: s[0].mu,
        Bounds(1, 3 + lag(0.9), slope=1.0, lr=0.01, b1=0.9, b2=0.9, k_slot=1 + lag(0.9)),
    ),
    # The sign of the gradient itself: the same on both sides.
    "sign_sgd": (lambda: optx.sign_sgd(1e-2), lambda: optax.sign_sgd(1e-2), None, Bounds(1)),
    # The direction is the average: 1 - beta and beta = 0.8's lag.
    "signum": (
        lambda: optx.signum(1e-2, beta=0.8),
        lambda: optax.signum(1e-2, beta=0.8),
        lambda s: s[0].ema,
        Bounds(k_u=1, k_c=1 + lag(0.8), b1=0.8, b2=0.8, k_slot=1 + lag(0.8)),
    ),
}


def parity_errors(case: str, scale: float = 1.0) -> list[float]:
    """Per parameter leaf: optx's (its updates times ``scale``) distance from optax's after
    STEPS float64 steps, over its bound (`Bounds`, ROUNDOFF64).
    """
    make, make_ref, _, bounds = PARITY[case]
    params = nested_params()
    grads = step_grads(params)
    p, _, _ = run64(optx.chain(make(), optx.scale(scale)), optx.apply_updates, params, grads)
    p_ref, _, sizes = run64(make_ref(), optax.apply_updates, params, grads)
    leaves = zip(*map(jax.tree.leaves, (p, p_ref, sizes, grads)), strict=True)
    return [
        float(np.max(np.abs(a[-1] - e[-1])))
        / (param_atol(bounds, float(u), np.asarray(g)) + ROUNDOFF64 * float(np.max(np.abs(e[-1]))))
        for a, e, u, g in leaves
    ]


@pytest.mark.parametrize("case", sorted(PARITY))
def test_matches_optax(case: str) -> None:
    make, make_ref, average, bounds = PARITY[case]
    params = nested_params()
    grads = step_grads(params)
    p, s, _ = run64(make(), optx.apply_updates, params, grads)
    p_ref, s_ref, sizes = run64(make_ref(), optax.apply_updates, params, grads)
    leaves = zip(*map(jax.tree.leaves, (p, p_ref, sizes, grads)), strict=True)
    for a, e, u, g in leaves:
        g = np.asarray(g)
        check_signs(g, bounds)
        assert a.dtype == np.float64
        assert_close(f"{case} params", a[-1], e[-1], ROUNDOFF64, param_atol(bounds, float(u), g))
    if average is None:
        return
    np.testing.assert_array_equal(s[0].count, s_ref[0].count)
    leaves = zip(*map(jax.tree.leaves, (average(s), average(s_ref), grads)), strict=True)
    for a, e, g in leaves:
        assert_close(f"{case} average", a, e, ROUNDOFF64, average_atol(bounds, np.asarray(g)))


@pytest.mark.parametrize("case", ["lion", "signum"])
def test_parity_bounds_catch_a_learning_rate_off_by_1e3(case: str) -> None:
    """`test_matches_optax`'s bounds see a learning rate 1.001x too large."""
    errors = parity_errors(case, 1.001)
    print(f"{case} x 1.001: max error / bound {max(errors):.3g}")
    assert max(errors) > 10


def test_rprop_matches_optax_but_for_its_stale_update() -> None:
    """optax 0.2.8's `scale_by_rprop` emits the previous step's update (zeroed where the
    sign flips now; all zeros on the first step): optax PR #1725. Its step sizes and stored
    updates evolve as optx's do, so after 100 steps the states agree, and at every step
    optax's update is optx's previous one, zeroed where optx's current one skips.
    """
    params = nested_params()
    grads = step_grads(params)
    tx = optx.scale_by_rprop(1e-2, eta_minus=0.4, max_step_size=0.05)
    ref = optax.scale_by_rprop(1e-2, eta_minus=0.4, max_step_size=0.05)

    def updates(tx: Any) -> Callable[..., Any]:
        def run(grads: Any) -> tuple:
            def step(s: Any, g: Any) -> tuple:
                u, s = tx.update(g, s, params)
                return s, u

            return jax.lax.scan(step, tx.init(params), grads)

        return jax.jit(run)

    state, u = updates(tx)(grads)
    ref_state, u_ref = updates(ref)(grads)
    assert_close("rprop state", state[:2], ref_state, 0.0, 0.0)

    def expected(u: jax.Array, g: jax.Array) -> jax.Array:
        previous = jnp.concatenate([jnp.zeros_like(u[:1]), u[:-1]])
        flipped = jnp.sign(g) * jnp.sign(previous) < 0
        return jnp.where(flipped, 0.0, previous)

    assert_close("rprop updates", u_ref, jax.tree.map(expected, u, grads), 0.0, 0.0)


def test_scale_by_sign_matches_optax() -> None:
    g = step_grads(nested_params(), steps=1)
    g["dense"]["bias"] = g["dense"]["bias"].at[0, 1].set(0.0)
    tx = optx.scale_by_sign()
    got = tx.update(g, tx.init(None))[0]
    assert got["dense"]["bias"][0, 1] == 0
    ref = optax.scale_by_sign()
    assert_close("sign", got, ref.update(g, ref.init(g))[0], 0.0, 0.0)


# ---------------------------------------------------------------------------------------
# float64 NumPy loops.


def keras_lion(params, grads, lr, b1, b2, wd):
    """Keras 3's `Lion` as it is written there (weight decay applied first, by the base
    optimizer), in float64: ``w -= lr*wd*w``; ``w -= lr*sign(b1*m + (1-b1)*g)``;
    ``m = b2*m + (1-b2)*g``.
    """
    w, m, out = params.copy(), np.zeros_like(params), []
    for g in grads:
        w = w - lr * wd * w
        w = w - lr * np.sign(b1 * m + (1 - b1) * g)
        m = b2 * m + (1 - b2) * g
        out.append(w)
    return np.stack(out), m


def path_length(params: np.ndarray, trajectory: np.ndarray) -> float:
    """``sum_t max|u_t|`` of a reference trajectory (leading axis: step) from ``params``."""
    steps = np.diff(np.concatenate([np.asarray(params, np.float64)[None], trajectory]), axis=0)
    return float(np.sum(_max_per_step(steps)))


def check_numpy_case(
    name: str, bounds: Bounds, params: np.ndarray, grads: np.ndarray, got: np.ndarray,
    expected: np.ndarray, average: Any = None, expected_average: Any = None,
) -> None:  # fmt: skip
    """A float64 trajectory and average against a NumPy reference's (see `Bounds`)."""
    check_signs(grads, bounds)
    atol = param_atol(bounds, path_length(params, expected), grads)
    assert_close(name, got, expected, ROUNDOFF64, atol)
    if average is not None:
        atol = average_atol(bounds, grads)
        assert_close(f"{name} average", average, expected_average, ROUNDOFF64, atol)


@pytest.mark.parametrize(("b1", "b2", "wd"), [(0.9, 0.99, 0.0), (0.9, 0.99, 0.1), (0.5, 0.8, 0.02)])
def test_lion_matches_keras_formula(b1: float, b2: float, wd: float) -> None:
    """Keras's Lion numbers equal optax's with matched hyperparameters (keras-semantics §2.10)."""
    grads = numpy_grads()
    params = np.random.default_rng(3).standard_normal(grads.shape[1:]).astype(np.float32)
    got, state, _ = run_numpy_case64(optx.lion(1e-2, b1, b2, weight_decay=wd), params, grads)
    expected, m = keras_lion(params.astype(np.float64), grads, 1e-2, b1, b2, wd)
    # The learning rate and the weight decay; b1, 1 - b1, 1 - b2 and b2's lag.
    bounds = Bounds(k_u=2, k_c=3 + lag(b2), b1=b1, b2=b2, k_slot=1 + lag(b2))
    check_numpy_case("lion", bounds, params, grads, got, expected, state[0].mu, m)


def test_lion_matches_keras_itself() -> None:
    """The same check against `keras.optimizers.Lion` (JAX backend), both in float64."""
    import keras

    assert keras.backend.backend() == "jax"
    grads = numpy_grads(steps=20)
    params = np.random.default_rng(3).standard_normal(grads.shape[1:]).astype(np.float32)
    with jax.enable_x64(True):
        opt = keras.optimizers.Lion(learning_rate=1e-2, beta_1=0.9, beta_2=0.99, weight_decay=0.1)
        var = keras.Variable(params.astype(np.float64), dtype="float64")
        opt.build([var])
        expected = []
        for g in grads:
            opt.apply_gradients([(jnp.asarray(g), var)])
            expected.append(np.asarray(var.value))
    got, _, _ = run_numpy_case64(optx.lion(1e-2, 0.9, 0.99, weight_decay=0.1), params, grads)
    # Keras keeps its learning rate in a float32 variable, as optx does: the weight decay;
    # b1, 1 - b1, 1 - b2 and b2's lag (20 steps).
    bounds = Bounds(k_u=1, k_c=3 + min(20, lag(0.99)), b1=0.9, b2=0.99)
    check_numpy_case("lion vs keras", bounds, params, grads, got, np.stack(expected))


@pytest.mark.parametrize("mode", ["smooth", "refined"])
def test_scale_by_lion_modes_match_numpy(mode: str) -> None:
    grads = numpy_grads()
    params = np.zeros(grads.shape[1:], np.float32)
    tx = optx.chain(optx.scale_by_lion(0.8, 0.9, mode=mode, smooth_beta=3.0), optx.scale(-0.1))
    got, state, _ = run_numpy_case64(tx, params, grads)
    w, m, out = np.zeros(grads.shape[1:]), np.zeros(grads.shape[1:]), []
    for g in grads:
        c = 0.8 * m + 0.2 * g
        w = w - 0.1 * (np.tanh(3.0 * c) if mode == "smooth" else np.clip(c, -1, 1))
        m = 0.9 * m + 0.1 * g
        out.append(w)
    # The scale; b1, 1 - b1, 1 - b2, b2's lag on c, passed on with the tanh's slope 3 or 1.
    slope = 3.0 if mode == "smooth" else 1.0
    bounds = Bounds(1, 3 + lag(0.9), slope=slope, lr=0.1, b1=0.8, b2=0.9, k_slot=1 + lag(0.9))
    check_numpy_case(f"lion {mode}", bounds, params, grads, got, np.stack(out), state[0].mu, m)


def test_sign_sgd_and_signum_match_numpy() -> None:
    grads = numpy_grads()
    params = np.zeros(grads.shape[1:], np.float32)
    got, _, _ = run_numpy_case64(optx.sign_sgd(0.1), params, grads)
    expected = -0.1 * np.cumsum(np.sign(grads), axis=0)
    check_numpy_case("sign_sgd", Bounds(1), params, grads, got, expected)

    got, state, _ = run_numpy_case64(optx.signum(0.1, beta=0.7), params, grads)
    w, m, out = np.zeros(grads.shape[1:]), np.zeros(grads.shape[1:]), []
    for g in grads:
        m = 0.7 * m + 0.3 * g
        w = w - 0.1 * np.sign(m)
        out.append(w)
    bounds = Bounds(k_u=1, k_c=1 + lag(0.7), b1=0.7, b2=0.7, k_slot=1 + lag(0.7))
    check_numpy_case("signum", bounds, params, grads, got, np.stack(out), state[0].ema, m)


def numpy_rprop(grads, lr, eta_minus, eta_plus, lo, hi):
    """iRprop- in float64, written from the paper's case analysis (as PyTorch's `Rprop`).

    Also counts, per parameter, the roundings of optx's float32 hyperparameters in its step
    size (1 for ``lr`` or a bound it was clipped to, then 1 per ``eta`` it was multiplied by;
    a product within that error of a bound may be clipped on one side only, which moves it
    by no more), and sums ``roundings * step`` over the steps taken: in units of EPS32 / 2,
    the error of the parameters and of the step sizes.
    """
    step = np.full(grads.shape[1:], lr)
    rounds = np.ones(grads.shape[1:])
    last = np.zeros(grads.shape[1:])  # the last gradient taken into account (0 after a flip)
    w, error = np.zeros(grads.shape[1:]), np.zeros(grads.shape[1:])
    out, steps = [], []
    for g in grads:
        for i in np.ndindex(g.shape):
            if g[i] * last[i] != 0:
                grown = step[i] * (eta_plus if g[i] * last[i] > 0 else eta_minus)
                rounds[i] += 1
                step[i] = min(max(grown, lo), hi)
                margin = rounds[i] * EPS32 / 2 * grown
                if grown - margin > hi or grown + margin < lo:
                    rounds[i] = 1
                if g[i] * last[i] < 0:
                    last[i] = 0.0
                    continue
            w[i] -= step[i] * np.sign(g[i])
            error[i] += rounds[i] * step[i]
            last[i] = g[i]
        out.append(w.copy())
        steps.append(step.copy())
    return np.stack(out), np.stack(steps), error, rounds * step


def test_rprop_matches_numpy() -> None:
    grads = numpy_grads()
    # A slowly turning gradient, so signs hold for runs of steps and steps grow to the cap.
    grads = grads + 3 * np.sin(0.1 * np.arange(STEPS)).reshape(-1, 1, 1)
    grads = grads.astype(np.float32).astype(np.float64)
    params = np.zeros(grads.shape[1:], np.float32)
    got, state, _ = run_numpy_case64(optx.rprop(0.01, 0.5, 1.2, 6e-3, 0.05), params, grads)
    expected, steps, error, step_error = numpy_rprop(grads, 0.01, 0.5, 1.2, 6e-3, 0.05)
    # The decisions compare signs of the same float32 gradients: exact on both sides. The
    # roundings are systematic (float32(1.2) is 0.67 EPS32 / 2 above 1.2 in every product),
    # so the runs come within 2x of this bound: on every machine alike, being float64.
    atol = EPS32 / 2 * float(np.max(error))
    assert_close("rprop", got, expected, ROUNDOFF64, atol)
    atol = EPS32 / 2 * float(np.max(step_error))
    assert_close("rprop steps", state[0].step_sizes, steps[-1], ROUNDOFF64, atol)
    assert np.any(steps == 0.05) and np.any(steps == 6e-3)  # both bounds were exercised


# ---------------------------------------------------------------------------------------
# Convergence. A sign method moves every coordinate by exactly its learning rate ``lr_t``
# (Rprop: by its step size), so what sets its end point is the length of its last steps.
# The parabola is separable, and each coordinate steps towards its minimum:
# - signSGD: once ``|x - x*| <= lr_t`` it stays below ``max(lr_t, lr_{t-1} - lr_t)``, so it
#   ends within ``lr_{T-2}`` (a cosine decays as (T - t)**2 at the end), plus float32
#   rounding of x, below one spacing at |x| < 4 (SPACING).
# - Rprop: from the first sign change on, a coordinate stays within twice its step size of
#   the minimum (the step halves at a change and the next move is one step), and its step
#   size shrinks only at sign changes: `test_rprop_ends_within_its_step_sizes`.
# - Lion and signum overshoot while their averages (b = 0.9) turn: the bound is the length
#   of their last MOMENTUM_STEPS = 2 / (1 - b) = 20 steps (out and back), from
#   `travel`. How they oscillate within it depends on float32 rounding of directions near 0,
#   which differs between CPUs.
# Rosenbrock tests that each method follows the curved valley from (-1.5, 2), 2.7 away,
# round to the minimum; how far along the flat valley floor it gets by the end has no rate
# to derive it from (the zigzag across the valley depends on that rounding): the bound is
# ROSENBROCK_TOL, a tenth of a unit, and half a unit for signSGD, which without momentum
# zigzags slowest, and the same steps in float64 must end within a quarter of it (a float32
# run on any CPU is that run perturbed by roundings). A run that stalls before the bend or
# diverges is several times further.

SPACING = float(np.spacing(np.float32(4.0)))  # 4.8e-7: twice the rounding of x at |x| < 4
MOMENTUM_STEPS = 20
ROSENBROCK_TOL = 0.1


def travel(peak: float, steps: int, last: int, end: int | None = None) -> float:
    """The length of steps ``end - last`` to ``end - 1`` (``end`` defaults to ``steps``) of
    `cosine` ``(peak, steps)``.
    """
    end = steps if end is None else end
    schedule = cosine(peak, steps)
    return float(sum(schedule(jnp.asarray(t)) for t in range(end - last, end)))


def sign_sgd_tol(peak: float, steps: int) -> float:
    """``lr_{T-2}`` plus SPACING (see above)."""
    return float(cosine(peak, steps)(jnp.asarray(steps - 2))) + SPACING


CONVERGENCE = [
    # (id, transform, problem, steps, tolerance)
    (
        "lion",
        lambda: optx.lion(cosine(0.1, 500), weight_decay=0.0),
        "parabola",
        500,
        travel(0.1, 500, MOMENTUM_STEPS) + SPACING,
    ),
    (
        "lion",
        lambda: optx.lion(cosine(0.1, 4000), weight_decay=0.0),
        "rosenbrock",
        4000,
        ROSENBROCK_TOL,
    ),
    ("sign_sgd", lambda: optx.sign_sgd(cosine(0.1, 500)), "parabola", 500, sign_sgd_tol(0.1, 500)),
    ("sign_sgd", lambda: optx.sign_sgd(cosine(0.005, 20000)), "rosenbrock", 20000, 0.5),
    (
        "signum",
        lambda: optx.signum(cosine(0.1, 1000)),
        "parabola",
        1000,
        travel(0.1, 1000, MOMENTUM_STEPS) + SPACING,
    ),
    ("signum", lambda: optx.signum(cosine(0.05, 4000)), "rosenbrock", 4000, ROSENBROCK_TOL),
    ("rprop", lambda: optx.rprop(0.1), "rosenbrock", 3000, ROSENBROCK_TOL),
]


@pytest.mark.parametrize(
    ("make", "problem", "steps", "tol"),
    [c[1:] for c in CONVERGENCE],
    ids=[f"{c[0]}-{c[2]}" for c in CONVERGENCE],
)
def test_converges(make: Callable[[], Any], problem: str, steps: int, tol: float) -> None:
    err = distance(minimise(make(), problem, steps), problem)
    print(f"{problem}: |x - x*| = {err:.3g} after {steps} steps, bound {tol:.3g}")
    assert err < tol
    if problem == "rosenbrock":
        # No rate bounds these (see ROSENBROCK_TOL): the float64 run must end within a
        # quarter of the bound (tests/TOLERANCES.md "Convergence thresholds").
        with jax.enable_x64(True):
            x = np.asarray(minimise(make(), problem, steps, jnp.float64))
        err64 = float(np.max(np.abs(x - np.asarray(PROBLEMS[problem][2], np.float64))))
        print(f"float64: |x - x*| = {err64:.3g}")
        assert err64 <= tol / 4


def test_rprop_ends_within_its_step_sizes() -> None:
    """On the parabola, each coordinate ends within twice its final step size (see above);
    step sizes below the initial 0.1 show that every coordinate has changed sign.
    """
    tx = optx.rprop(0.1)

    @jax.jit
    def run(x0: jax.Array) -> tuple:
        def step(carry: tuple, _: None) -> tuple:
            x, state = carry
            updates, state = tx.update(jax.grad(parabola)(x), state, x)
            return (optx.apply_updates(x, updates), state), None

        return jax.lax.scan(step, (x0, tx.init(x0)), None, length=200)[0]

    x, state = run(jnp.zeros(3))
    sizes = np.asarray(state[0].step_sizes, np.float64)
    err = np.abs(np.asarray(x, np.float64) - np.asarray(CENTER))
    print(f"|x - x*| = {err}, step sizes {sizes}")
    assert np.all(sizes < 0.1)
    assert np.all(err <= 2 * sizes + SPACING)
    # The signs of 0.2 (x - x*) are exact, so every CPU takes the same steps: all reach the
    # floor of the step sizes, min_step_size = 1e-6 (RPROP_TOL).
    np.testing.assert_array_equal(sizes, np.float32(1e-6))


RPROP_TOL = 2 * 1e-6 + SPACING  # the float32 run's distance on the parabola (see above)


# ---------------------------------------------------------------------------------------
# bfloat16 parameters, on the parabola (x* = 1, -2, 3). A bf16 parameter stops moving once
# the step is below half its spacing: at most BF16_HALF_ULP = 2**-7 for |x| < 4.
# - signSGD and Rprop keep ``|x - x*|`` within about a step (see the convergence bounds):
#   when they stop, within 1.5 half-spacings, which on the bf16 grid (x* is on it) is at
#   most one spacing, 2**-6; plus the float32 run's own distance (its convergence bound).
# - Lion and signum stop within the length of their last MOMENTUM_STEPS steps before the
#   step falls below BF16_HALF_ULP (`travel`), plus one spacing for the last rounding.

BF16_HALF_ULP = 2.0**-7


def bf16_momentum_tol(peak: float, steps: int) -> float:
    """`travel` of the MOMENTUM_STEPS steps before the cosine falls below BF16_HALF_ULP."""
    schedule = cosine(peak, steps)
    stop = next(t for t in range(steps) if float(schedule(jnp.asarray(t))) < BF16_HALF_ULP)
    return travel(peak, steps, MOMENTUM_STEPS, stop) + 2 * BF16_HALF_ULP


@pytest.mark.parametrize(
    ("name", "make", "tol"),
    [
        # Lion's momentum and signum's average in float32.
        (
            "lion",
            lambda: optx.lion(cosine(0.1, 500), weight_decay=0.0, mu_dtype=jnp.float32),
            bf16_momentum_tol(0.1, 500) + travel(0.1, 500, MOMENTUM_STEPS),
        ),
        (
            "signum",
            lambda: optx.signum(cosine(0.1, 500), accumulator_dtype=jnp.float32),
            bf16_momentum_tol(0.1, 500) + travel(0.1, 500, MOMENTUM_STEPS),
        ),
        (
            "sign_sgd",
            lambda: optx.sign_sgd(cosine(0.1, 500)),
            2 * BF16_HALF_ULP + sign_sgd_tol(0.1, 500),
        ),
        ("rprop", lambda: optx.rprop(0.1), 2 * BF16_HALF_ULP + RPROP_TOL),
    ],
)
def test_bfloat16_params_stay_close_to_float32(
    name: str, make: Callable[[], Any], tol: float
) -> None:
    x32 = minimise(make(), "parabola", 500)
    x16 = minimise(make(), "parabola", 500, jnp.bfloat16)
    err = float(jnp.max(jnp.abs(x16.astype(jnp.float32) - x32)))
    print(f"{name}: bf16 vs f32 {err:.3g}, bound {tol:.3g}")
    assert err < tol


def test_lion_mu_dtype_keeps_float32_momentum() -> None:
    params = {"w": jnp.ones(3, jnp.bfloat16)}
    tx = optx.lion(1e-2, mu_dtype=jnp.float32)
    updates, state = tx.update({"w": jnp.full(3, 1e-3, jnp.bfloat16)}, tx.init(params), params)
    assert state[0].mu["w"].dtype == jnp.float32 and updates["w"].dtype == jnp.bfloat16


# ---------------------------------------------------------------------------------------
# Behaviour.


def test_smooth_beta_is_kept_only_in_smooth_mode() -> None:
    params = {"w": jnp.zeros(2)}
    assert "smooth_beta" not in optx.get_hyperparams(optx.scale_by_lion().init(params))
    state = optx.scale_by_lion(mode="smooth", smooth_beta=2.0).init(params)
    assert float(optx.get_hyperparams(state)["smooth_beta"]) == 2.0


def test_lion_b1_one_follows_the_old_momentum() -> None:
    """b1 = 1 is allowed: the direction is the sign of the momentum before this step."""
    tx = optx.scale_by_lion(b1=1.0, b2=0.5)
    state = tx.init({"w": jnp.zeros(2)})
    u1, state = tx.update({"w": jnp.array([1.0, -1.0])}, state)
    u2, _ = tx.update({"w": jnp.array([-5.0, 5.0])}, state)
    np.testing.assert_array_equal(u1["w"], [0.0, 0.0])
    np.testing.assert_array_equal(u2["w"], [1.0, -1.0])


def test_rprop_learning_rate_is_read_by_init_only() -> None:
    tx = optx.rprop(0.1)
    params = {"w": jnp.zeros(2)}
    state = tx.init(params)
    np.testing.assert_array_equal(state[0].step_sizes["w"], np.full(2, 0.1, np.float32))
    changed = optx.set_hyperparams(state, learning_rate=0.5)
    g = {"w": jnp.array([1.0, -1.0])}
    np.testing.assert_allclose(tx.update(g, changed, params)[0]["w"], [-0.1, 0.1], rtol=1e-7)


def test_rprop_skips_the_step_after_a_sign_change() -> None:
    tx = optx.scale_by_rprop(0.1)
    state = tx.init({"w": jnp.zeros(1)})
    updates = []
    for g in (1.0, 1.0, -1.0, -1.0):
        u, state = tx.update({"w": jnp.array([g])}, state)
        updates.append(float(u["w"][0]))
    # 0.1; grown to 0.12; flip: skipped, shrunk to 0.06; the next step takes 0.06.
    np.testing.assert_allclose(updates, [0.1, 0.12, 0.0, -0.06], rtol=1e-6)


# ---------------------------------------------------------------------------------------
# Error messages.

P = {"a": jnp.ones(2), "b": {"c": jnp.ones((2, 3))}}

ERRORS = [
    (
        lambda: optx.scale_by_lion(mode="soft"),
        ValueError,
        "`scale_by_lion` needs mode to be one of 'hard', 'smooth', 'refined'. "
        "Received: mode='soft'.",
    ),
    (
        lambda: optx.scale_by_lion(b1=1.5),
        ValueError,
        "`scale_by_lion` needs b1 in [0, 1]. Received: b1=1.5.",
    ),
    (lambda: optx.lion(1e-3, b1=-0.1), ValueError, "`lion` needs b1 in [0, 1]. Received: b1=-0.1."),
    (lambda: optx.lion(1e-3, b2=1.0), ValueError, "`lion` needs b2 in [0, 1). Received: b2=1.0."),
    (
        lambda: optx.scale_by_lion(mode="smooth", smooth_beta=0.0),
        ValueError,
        "`scale_by_lion` needs smooth_beta finite and > 0. Received: smooth_beta=0.0.",
    ),
    (
        lambda: optx.lion(1e-3, mu_dtype="int32"),
        TypeError,
        "`lion` needs mu_dtype to be None or a floating dtype. Received: mu_dtype='int32'.",
    ),
    (
        lambda: optx.lion(-1e-3),
        ValueError,
        "`lion` needs learning_rate finite and >= 0. Received: learning_rate=-0.001.",
    ),
    (
        lambda: optx.lion(1e-3, weight_decay=-1.0),
        ValueError,
        "`lion` needs weight_decay finite and >= 0. Received: weight_decay=-1.0.",
    ),
    (
        lambda: optx.sign_sgd(float("nan")),
        ValueError,
        "`sign_sgd` needs learning_rate finite and >= 0. Received: learning_rate=nan.",
    ),
    (
        lambda: optx.signum(0.1, beta=1.5),
        ValueError,
        "`signum` needs beta in [0, 1]. Received: beta=1.5.",
    ),
    (
        lambda: optx.signum(0.1, beta="0.9"),
        TypeError,
        "`signum` needs beta to be a real number or a schedule (a function of the step "
        "count). Received: beta='0.9' of type str.",
    ),
    (
        lambda: optx.signum(-0.1),
        ValueError,
        "`signum` needs learning_rate finite and >= 0. Received: learning_rate=-0.1.",
    ),
    (
        lambda: optx.signum(0.1, accumulator_dtype="int8"),
        TypeError,
        "`signum` needs accumulator_dtype to be None or a floating dtype. "
        "Received: accumulator_dtype='int8'.",
    ),
    (
        lambda: optx.rprop(-1.0),
        ValueError,
        "`rprop` needs learning_rate finite and >= 0. Received: learning_rate=-1.0.",
    ),
    (
        lambda: optx.rprop(0.1, eta_minus=1.5),
        ValueError,
        "`rprop` needs eta_minus in [0, 1]. Received: eta_minus=1.5.",
    ),
    (
        lambda: optx.scale_by_rprop(0.1, eta_plus=0.9),
        ValueError,
        "`scale_by_rprop` needs eta_plus finite and >= 1. Received: eta_plus=0.9.",
    ),
    (
        lambda: optx.rprop(0.1, min_step_size=-1e-6),
        ValueError,
        "`rprop` needs min_step_size finite and >= 0. Received: min_step_size=-1e-06.",
    ),
    (
        lambda: optx.rprop(0.1, max_step_size=0.0),
        ValueError,
        "`rprop` needs max_step_size finite and > 0. Received: max_step_size=0.0.",
    ),
    (
        lambda: optx.rprop(0.1, min_step_size=1.0, max_step_size=0.5),
        ValueError,
        "`rprop` needs min_step_size <= max_step_size. Received: min_step_size=1.0, "
        "max_step_size=0.5.",
    ),
    (
        lambda: optx.scale_by_rprop(0.1, min_step_size=2.0, max_step_size=1.0),
        ValueError,
        "`scale_by_rprop` needs min_step_size <= max_step_size. Received: min_step_size=2.0, "
        "max_step_size=1.0.",
    ),
    (
        lambda: optx.scale_by_lion().init({"w": jnp.ones(2, jnp.int32)}),
        TypeError,
        "`scale_by_lion.init` needs floating-point params (float16, bfloat16, float32 or "
        "float64). Received: params['w'] of dtype int32. Keep other leaves out of the "
        "optimised tree, or route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
    (
        lambda: optx.scale_by_lion().update({"a": P["a"]}, optx.scale_by_lion().init(P)),
        ValueError,
        "`scale_by_lion.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'b/c'.",
    ),
    (
        lambda: optx.scale_by_rprop(0.1).update(
            {"a": jnp.ones(3), "b": P["b"]}, optx.scale_by_rprop(0.1).init(P)
        ),
        ValueError,
        "`scale_by_rprop.update` needs updates with the shapes of the state. "
        "Received: updates['a'] of shape (3,), expected (2,).",
    ),
]


@pytest.mark.parametrize(
    ("make", "error", "message"), ERRORS, ids=[re.sub(r"\W+", "_", e[2][:40]) for e in ERRORS]
)
def test_error_messages(make: Callable[[], Any], error: type[Exception], message: str) -> None:
    check_message(make, error, message)
