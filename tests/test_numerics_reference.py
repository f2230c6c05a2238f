"""Numerics against float64 NumPy loops written here, and golden values from the docs.

optx runs in float32; the references run in float64 on the same (float32) inputs. So the
tolerances below are float32 round-off, stated per test.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from helpers import EPS32

import optx

# The float32 round-off of optx's recurrences is bounded elementwise by a running error
# bound (Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, section 3.3)
# computed along the float64 reference: each float32 operation rounds once, by at most
# HALF of its result; a float32 hyperparameter (``b``, ``1 - b``, epsilon, the learning
# rate) is off by HALF of itself; an error carried from the previous step is multiplied by
# the decay. The bound is first order in HALF (the second-order terms are 1e-7 of it).
# A moving average that cancels to near zero keeps the error of its terms, which the
# running bound follows element by element.
HALF = EPS32 / 2
# A bias correction ``1 - b**t = -expm1(t log1p(-(1 - b)))`` in float32 and the scalar it
# enters (``1 / (1 - b**t)``, or Nesterov's ``b / (1 - b**(t + 1))``): ``1 - b``'s
# rounding, an ulp each for log1p and expm1, the product, the quotient, ``b``'s rounding.
SCALAR = 8


def assert_close(name: str, actual: Any, expected: Any, rtol: float) -> float:
    """``|actual - expected| <= rtol * max|expected|`` elementwise; returns the error ratio."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    err = float(np.max(np.abs(actual - expected))) if expected.size else 0.0
    ratio = err / scale if scale else err
    print(f"{name}: max abs err {err:.3g}, / scale {ratio:.3g}")
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * scale, err_msg=name)
    return ratio


def assert_within(name: str, actual: Any, expected: Any, bound: Any) -> float:
    """``|actual - expected| <= bound`` elementwise; returns the largest error / bound."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    bound = np.broadcast_to(np.asarray(bound, np.float64), expected.shape)
    assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
    assert np.all(bound > 0), name
    ratio = float(np.max(np.abs(actual - expected) / bound))
    print(f"{name}: max error / bound {ratio:.3g}")
    assert ratio <= 1, f"{name}: the error is {ratio:.3g} times its bound"
    return ratio


def average_bound(
    b: float, terms: np.ndarray, values: np.ndarray, term_roundings: int, carry: bool = True
) -> np.ndarray:
    """Per step, the running error bound of float32 ``x_t = b x_{t-1} + term_t``.

    ``values`` are the exact ``x_t``, ``terms`` the exact ``term_t`` (``(1 - b) g_t``,
    ``(1 - b) g_t**2``, or ``g_t``), which float32 computes with ``term_roundings`` roundings
    (``1 - b`` and the product: 2; and ``g * g``: 3; none for ``g``). ``b x`` rounds twice
    (``b``, the product), the sum once. ``carry=False``: the previous ``x`` is exact.
    """
    bound, previous, out = np.zeros(values.shape[1:]), np.zeros(values.shape[1:]), []
    for term, x in zip(terms, values, strict=True):
        fresh = HALF * (2 * b * np.abs(previous) + term_roundings * np.abs(term) + np.abs(x))
        bound = (b * bound if carry else 0.0) + fresh
        out.append(bound)
        previous = x
    return np.stack(out)


def _grads(steps: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Float32 gradients of varying sign and size, as float64 (the exact values optx sees)."""
    rng = np.random.default_rng(seed)
    size = np.exp(rng.uniform(-2, 1, (steps,) + (1,) * len(shape)))
    g = rng.standard_normal((steps, *shape)) * size
    return g.astype(np.float32).astype(np.float64)


def _run_updates(tx: Any, params: np.ndarray, grads: np.ndarray) -> tuple[np.ndarray, Any]:
    """All updates (leading axis: step) of ``tx`` on fixed gradients, params fixed."""
    p = jnp.asarray(params, jnp.float32)

    @jax.jit
    def run(grads: jax.Array) -> tuple:
        def step(state: Any, g: jax.Array) -> tuple:
            u, state = tx.update(g, state, p)
            return state, u

        state, updates = jax.lax.scan(step, tx.init(p), grads)
        return updates, state

    updates, state = run(jnp.asarray(grads, jnp.float32))
    return np.asarray(updates, np.float64), state


# --------------------------------------------------------------------------------------
# Adam


def adam_reference(
    grads: np.ndarray,
    b1: float,
    b2: float,
    eps: float,
    eps_root: float = 0.0,
    nesterov: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adam's updates (before the learning rate), and the final moments, in float64."""
    m = np.zeros(grads.shape[1:])
    v = np.zeros(grads.shape[1:])
    out = []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        if nesterov:
            m_hat = b1 * m / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1**t)
        else:
            m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        out.append(m_hat / (np.sqrt(v_hat + eps_root) + eps))
    return np.stack(out), m, v


def adam_bounds(
    grads: np.ndarray,
    b1: float,
    b2: float,
    eps: float,
    eps_root: float = 0.0,
    nesterov: bool = False,
    bfloat16_mu: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Running error bounds of optx's float32 Adam (see `HALF`): the updates at each step,
    and the final moments. optx computes ``m = (1 - b1) g + b1 m``, ``v = (1 - b2) g**2 +
    b2 v``, ``m_hat = m k_m (+ g k_g)``, ``v_hat = v k_v`` with float32 scalars (`SCALAR`),
    then ``m_hat / (sqrt(v_hat + eps_root) + eps)``. With ``bfloat16_mu`` the stored first
    moment is the reference's (rounded alike): no error carried from step to step.
    """
    ms, vs, m, v = [], [], 0.0, 0.0
    for g in grads:
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        ms.append(m)
        vs.append(v)
        if bfloat16_mu:
            m = m.astype(ml_dtypes.bfloat16).astype(np.float64)
    ms, vs = np.stack(ms), np.stack(vs)
    if bfloat16_mu:
        previous = np.concatenate([np.zeros((1, *grads.shape[1:])), ms[:-1]])
        previous = previous.astype(ml_dtypes.bfloat16).astype(np.float64)
        e_m = HALF * (2 * b1 * np.abs(previous) + 2 * (1 - b1) * np.abs(grads) + np.abs(ms))
    else:
        e_m = average_bound(b1, (1 - b1) * grads, ms, 2)
    e_v = average_bound(b2, (1 - b2) * grads**2, vs, 3)
    t = np.arange(1, len(grads) + 1).reshape((-1,) + (1,) * (grads.ndim - 1))
    k_v = 1 / (1 - b2**t)
    if nesterov:
        k_m, k_g = b1 / (1 - b1 ** (t + 1)), (1 - b1) / (1 - b1**t)
        m_hat = ms * k_m + grads * k_g
        e_hat = e_m * k_m + HALF * (
            (SCALAR + 1) * (np.abs(ms * k_m) + np.abs(grads * k_g)) + np.abs(m_hat)
        )
    else:
        k_m = 1 / (1 - b1**t)
        m_hat = ms * k_m
        e_hat = e_m * k_m + HALF * (SCALAR + 1) * np.abs(m_hat)
    v_hat = vs * k_v
    e_s = e_v * k_v + HALF * ((SCALAR + 1) * v_hat + eps_root + (v_hat + eps_root))
    root = np.sqrt(v_hat + eps_root)
    e_root = e_s / (2 * root) + HALF * root
    denominator = root + eps
    e_denominator = e_root + HALF * (eps + denominator)
    u = m_hat / denominator
    e_u = e_hat / denominator + np.abs(u) * e_denominator / denominator + HALF * np.abs(u)
    return e_u, e_m[-1], e_v[-1]


ADAM_CONFIGS = [
    dict(b1=0.9, b2=0.999, eps=1e-8),
    dict(b1=0.9, b2=0.999, eps=1e-8, nesterov=True),
    dict(b1=0.8, b2=0.99, eps=1e-3, eps_root=1e-6),
    dict(b1=0.95, b2=0.99999, eps=1e-8),
    dict(b1=0.0, b2=0.5, eps=1e-8),
]


@pytest.mark.parametrize(
    "config", ADAM_CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items())
)
def test_scale_by_adam_matches_numpy(config: dict) -> None:
    grads = _grads(40, (3, 5))
    updates, state = _run_updates(optx.scale_by_adam(**config), np.zeros((3, 5)), grads)
    expected, m, v = adam_reference(grads, **config)
    e_u, e_m, e_v = adam_bounds(grads, **config)
    assert_within("updates", updates, expected, e_u)
    assert_within("mu", state.mu, m, e_m)
    assert_within("nu", state.nu, v, e_v)
    assert int(state.count) == len(grads)


def test_adam_params_match_numpy() -> None:
    """`adam` end to end: the parameters after 50 steps with a schedule."""
    grads = _grads(50, (4,), seed=1)
    p0 = np.array([0.5, -1.0, 2.0, 0.0])

    def schedule(count: jax.Array) -> jax.Array:
        return 0.05 / (1.0 + 0.1 * count.astype(jnp.float32))

    tx = optx.adam(schedule, b1=0.9, b2=0.999)
    p = jnp.asarray(p0, jnp.float32)
    state = tx.init(p)

    @jax.jit
    def step(g: jax.Array, state: Any, p: jax.Array) -> tuple:
        updates, state = tx.update(g, state, p)
        return optx.apply_updates(p, updates), state

    for g in grads:
        p, state = step(jnp.asarray(g, jnp.float32), state, p)

    u, _, _ = adam_reference(grads, 0.9, 0.999, 1e-8)
    lr = 0.05 / (1.0 + 0.1 * np.arange(len(grads)))
    path = p0 - np.cumsum(lr[:, None] * u, axis=0)
    # Per step: the update's own bound (`adam_bounds`), the float32 schedule (the count's
    # product, the sum, the quotient: 3 roundings of lr) and lr * u (1), and the rounding of
    # p + lr * u, half an ulp of the new parameter.
    e_u = adam_bounds(grads, 0.9, 0.999, 1e-8)[0]
    bound = np.sum(lr[:, None] * (e_u + 4 * HALF * np.abs(u)) + HALF * np.abs(path), axis=0)
    assert_within("params", p, path[-1], bound)


@pytest.mark.parametrize("b2", [0.999, 0.9999, 0.99999, 0.999999])
def test_adam_decay_near_one_is_kept_precisely(b2: float) -> None:
    """optx keeps ``1 - b2``: the first Adam step with eps=0 is exactly -lr * g/|g|.

    Rounding ``b2 = 0.99999`` to float32 and computing ``1 - b2**t`` would be 3e-3 off
    (``float32(0.99999)`` is 3e-8 away), making the first step 1.5e-3 off.
    """
    g = np.array([0.3, -2.0, 1e-3, -5e4], np.float32)
    tx = optx.adam(1.0, b2=b2, eps=0.0)
    for update in (tx.update, jax.jit(tx.update)):
        u, state = update(jnp.asarray(g), tx.init(jnp.zeros(4)), jnp.zeros(4))
        np.testing.assert_allclose(np.asarray(u), -np.sign(g), rtol=1e-6, atol=0)
    assert float(optx.get_hyperparams(state)["b2"]) == np.float32(b2)

    # Later steps too, against the float64 loop.
    grads = _grads(30, (4,), seed=2)
    updates, _ = _run_updates(optx.scale_by_adam(b2=b2, eps=0.0), np.zeros(4), grads)
    expected, bound = adam_reference(grads, 0.9, b2, 0.0)[0], adam_bounds(grads, 0.9, b2, 0.0)[0]
    assert_within(f"updates b2={b2}", updates, expected, bound)


def test_ema_decay_near_one_is_debiased_precisely() -> None:
    """`ema` with decay 0.99999: the debiased first average is the first update itself,
    and later ones match the float64 loop.
    """
    decay = 0.99999
    g = jnp.array([0.3, -2.0, 7.0])
    tx = optx.ema(decay)
    u, _ = tx.update(g, tx.init(g))
    np.testing.assert_allclose(np.asarray(u), np.asarray(g), rtol=1e-6, atol=0)

    grads = _grads(30, (3,), seed=9)
    updates, _ = _run_updates(tx, np.zeros(3), grads)
    ema, averages, expected = np.zeros(3), [], []
    for t, g in enumerate(grads, start=1):
        ema = decay * ema + (1 - decay) * g
        averages.append(ema)
        expected.append(ema / (1 - decay**t))
    expected = np.stack(expected)
    # The average's running bound, then the float32 debiasing scalar and its product.
    t = np.arange(1, len(grads) + 1)[:, None]
    e_ema = average_bound(decay, (1 - decay) * grads, np.stack(averages), 2)
    bound = e_ema / (1 - decay**t) + HALF * (SCALAR + 1) * np.abs(expected)
    assert_within("debiased ema", updates, expected, bound)


def test_adam_mu_bfloat16_matches_numpy() -> None:
    """mu_dtype=bfloat16: float32 arithmetic, only the stored first moment is rounded.

    The reference rounds mu to bfloat16 after each step (round to nearest even), as optx
    documents. Its float64 arithmetic can still land on the other side of a bfloat16
    rounding boundary than optx's float32 arithmetic; that is one bfloat16 ulp (2**-8 of the
    value) and rare (none here), so mu agrees to one bfloat16 ulp in at most two entries,
    and the updates to float32 round-off (to 2**-7 if an entry did flip).
    """
    grads = _grads(40, (3, 5), seed=3)
    b1, b2, eps = 0.9, 0.999, 1e-8
    tx = optx.scale_by_adam(b1, b2, eps, mu_dtype=jnp.bfloat16)
    updates, state = _run_updates(tx, np.zeros((3, 5)), grads)
    m = np.zeros(grads.shape[1:])
    v = np.zeros(grads.shape[1:])
    expected = []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        expected.append((m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps))
        m = m.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert state.mu.dtype == jnp.bfloat16
    mu = np.asarray(state.mu, np.float64)
    flips = np.abs(mu - m) > 0
    print(f"bfloat16 mu entries that differ by an ulp: {int(flips.sum())} / {mu.size}")
    np.testing.assert_allclose(mu, m, rtol=2**-8, atol=0)
    assert flips.sum() <= 2
    # With the stored moments equal, the updates agree to float32 round-off.
    if flips.any():
        assert_close("updates", updates, np.stack(expected), rtol=2**-7)
    else:
        bound = adam_bounds(grads, b1, b2, eps, bfloat16_mu=True)[0]
        assert_within("updates", updates, np.stack(expected), bound)


# --------------------------------------------------------------------------------------
# SGD


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_matches_numpy(nesterov: bool) -> None:
    grads = _grads(60, (2, 3), seed=4)
    lr, mu = 0.05, 0.9
    updates, state = _run_updates(optx.sgd(lr, mu, nesterov), np.zeros((2, 3)), grads)
    trace = np.zeros(grads.shape[1:])
    traces, expected = [], []
    for g in grads:
        trace = g + mu * trace
        traces.append(trace)
        expected.append(-lr * (g + mu * trace if nesterov else trace))
    traces, expected = np.stack(traces), np.stack(expected)
    # The trace's running bound (g enters exactly); Nesterov's g + mu trace rounds twice
    # more; the float32 learning rate and the product with it, twice.
    e_trace = average_bound(mu, grads, traces, 0)
    e_step = mu * e_trace + HALF * (2 * mu * np.abs(traces) + np.abs(expected / lr))
    e_u = lr * (e_step if nesterov else e_trace) + 2 * HALF * np.abs(expected)
    assert_within("updates", updates, expected, e_u)
    assert_within("trace", state[0].trace, trace, e_trace[-1])


# --------------------------------------------------------------------------------------
# Clipping


def keras_clip_by_norm(g: np.ndarray, c: float) -> np.ndarray:
    """Keras's ``clipnorm`` (per variable): ``g * c / max(||g||, c)``."""
    return g * c / max(np.sqrt(np.sum(g * g)), c)


def clip_rtol(n: int) -> float:
    """Relative round-off of clipping by a float32 norm of ``n`` elements: the squares and
    their sum of positive terms, ``(n + 1) EPS32 / 2``, halved by the root, plus its own
    rounding, the scale ``c / norm`` and the product (tests/TOLERANCES.md).
    """
    return ((n + 1) / 4 + 1.5) * EPS32


def test_clip_by_norm_matches_keras_formula() -> None:
    rng = np.random.default_rng(5)
    c = 1.5
    tree = {
        "big": rng.standard_normal((4, 3)) * 3,  # norm ~10: clipped
        "small": rng.standard_normal(5) * 0.1,  # norm ~0.2: kept
        "at_bound": np.array([0.9, 1.2]),  # norm exactly 1.5
        "scalar": np.array(-7.0),
        "zero": np.zeros(3),
    }
    tree = {k: v.astype(np.float32) for k, v in tree.items()}
    tx = optx.clip_by_norm(c)
    for update in (tx.update, jax.jit(tx.update)):
        out, _ = update(jax.tree.map(jnp.asarray, tree), tx.init(None))
        for key, g in tree.items():
            expected = keras_clip_by_norm(g.astype(np.float64), c)
            assert_close(f"clip_by_norm {key}", out[key], expected, rtol=clip_rtol(g.size))
            assert out[key].dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(out["zero"]), np.zeros(3))
        assert np.linalg.norm(np.asarray(out["big"], np.float64)) <= c * (1 + 1e-6)


def test_clip_by_norm_gradient_is_finite_at_zero() -> None:
    """The clip is differentiable at a zero leaf: its Jacobian there is the identity."""
    tx = optx.clip_by_norm(1.0)
    state = tx.init(None)

    def clipped(g: jax.Array) -> jax.Array:
        return tx.update({"w": g}, state)[0]["w"]

    jacobian = jax.jacobian(clipped)(jnp.zeros(3))
    assert np.all(np.isfinite(np.asarray(jacobian)))
    np.testing.assert_array_equal(np.asarray(jacobian), np.eye(3))
    grad = jax.grad(lambda g: jnp.sum(clipped(g) ** 2))(jnp.zeros(3))
    np.testing.assert_array_equal(np.asarray(grad), np.zeros(3))
    # Away from zero, against the formula's derivative (by central differences in float64).
    g0 = np.array([3.0, -4.0, 0.5])
    numeric = np.stack(
        [
            (keras_clip_by_norm(g0 + h, 1.0) - keras_clip_by_norm(g0 - h, 1.0)) / 2e-6
            for h in np.eye(3) * 1e-6
        ],
        axis=1,
    )
    assert_close("jacobian", jax.jacobian(clipped)(jnp.asarray(g0, jnp.float32)), numeric, 1e-5)


@pytest.mark.parametrize("factor", [0.1, 0.999, 1.001, 10.0, 1e4])
def test_clip_by_global_norm_matches_numpy(factor: float) -> None:
    """Rescaled iff the global norm reaches the bound; Keras's ``global_clipnorm`` formula."""
    rng = np.random.default_rng(6)
    tree = [
        rng.standard_normal((3, 2)),
        {"b": rng.standard_normal(4), "s": rng.standard_normal(())},
    ]
    norm = np.sqrt(sum(np.sum(x**2) for x in jax.tree.leaves(tree)))
    tree = jax.tree.map(lambda x: (x * factor / norm).astype(np.float32), tree)
    norm = np.sqrt(sum(np.sum(x.astype(np.float64) ** 2) for x in jax.tree.leaves(tree)))
    c = 1.0
    tx = optx.clip_by_global_norm(c)
    out, _ = jax.jit(tx.update)(jax.tree.map(jnp.asarray, tree), tx.init(None))
    size = sum(x.size for x in jax.tree.leaves(tree))
    for x, y in zip(jax.tree.leaves(out), jax.tree.leaves(tree), strict=True):
        y = y.astype(np.float64)
        keras = y * c * min(1 / norm, 1 / c)  # keras: scale = c * min(1/n, 1/c)
        assert_close(f"global clip x{factor}", x, keras, rtol=clip_rtol(size))
        if norm < c:
            np.testing.assert_array_equal(np.asarray(x), y.astype(np.float32))
    out_norm = np.sqrt(sum(np.sum(np.asarray(x, np.float64) ** 2) for x in jax.tree.leaves(out)))
    assert out_norm <= c * (1 + 1e-6)


# --------------------------------------------------------------------------------------
# EMA of the parameters


def ema_params_reference(
    p0: np.ndarray,
    updates: np.ndarray,
    momentum: float,
    overwrite_frequency: int | None,
    start: str,
) -> tuple[np.ndarray, np.ndarray]:
    """The parameters and the averages after each step, per the `ema_params` docstring."""
    p, avg = p0.copy(), p0.copy()
    params, averages = [], []
    for t, u in enumerate(updates, start=1):
        new_p = p + u
        m = 0.0 if (start == "first_step" and t == 1) else momentum
        avg = m * avg + (1 - m) * new_p
        if overwrite_frequency is not None and t % overwrite_frequency == 0:
            new_p = avg.copy()
        p = new_p
        params.append(p)
        averages.append(avg)
    return np.stack(params), np.stack(averages)


def ema_params_bounds(
    p0: np.ndarray,
    updates: np.ndarray,
    params: np.ndarray,
    averages: np.ndarray,
    momentum: float,
    overwrite_frequency: int | None,
    start: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Running error bounds of float32 SGD with `ema_params` (see `HALF`): the update
    ``-lr g`` (the learning rate and the product), the sum with the parameter, and the
    average ``m a + (1 - m) p`` as in `average_bound`; an overwrite adds ``a - p`` to ``p``."""
    e_p, e_a, out_p, out_a = np.zeros_like(p0), np.zeros_like(p0), [], []
    p, a = p0, p0
    for t, (u, new_p, new_a) in enumerate(zip(updates, params, averages, strict=True), start=1):
        stepped = p + u  # the parameter before an overwrite
        e_p = e_p + HALF * (2 * np.abs(u) + np.abs(stepped))
        m = 0.0 if (start == "first_step" and t == 1) else momentum
        e_a = (
            m * e_a
            + (1 - m) * e_p
            + HALF * (2 * m * np.abs(a) + 2 * (1 - m) * np.abs(stepped) + np.abs(new_a))
        )
        if overwrite_frequency and t % overwrite_frequency == 0:
            # The overwrite is the update ``a - p`` added to ``p``: two roundings.
            e_p = e_a + HALF * (np.abs(new_a - p) + np.abs(new_a))
        p, a = new_p, new_a
        out_p.append(e_p)
        out_a.append(e_a)
    return np.stack(out_p), np.stack(out_a)


@pytest.mark.parametrize("start", ["initial", "first_step"])
@pytest.mark.parametrize("overwrite_frequency", [None, 1, 3])
def test_ema_params_matches_numpy(overwrite_frequency: int | None, start: str) -> None:
    grads = _grads(12, (3,), seed=7)
    p0 = np.array([1.0, -2.0, 0.5])
    lr, momentum = 0.1, 0.8
    tx = optx.chain(optx.sgd(lr), optx.ema_params(momentum, overwrite_frequency, start=start))

    @jax.jit
    def run(p: jax.Array, grads: jax.Array) -> tuple:
        def step(carry: tuple, g: jax.Array) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            p = optx.apply_updates(p, u)
            return (p, s), (p, optx.ema_params_value(s))

        return jax.lax.scan(step, (p, tx.init(p)), grads)[1]

    params, averages = run(jnp.asarray(p0, jnp.float32), jnp.asarray(grads, jnp.float32))
    exp_params, exp_averages = ema_params_reference(
        p0, -lr * grads, momentum, overwrite_frequency, start
    )
    bound_params, bound_averages = ema_params_bounds(
        p0, -lr * grads, exp_params, exp_averages, momentum, overwrite_frequency, start
    )
    assert_within("params", params, exp_params, bound_params)
    assert_within("averages", averages, exp_averages, bound_averages)


def _sgd_ema_trajectory(tx: Any, p0: list[float], grad: float, steps: int) -> tuple:
    p = jnp.asarray(p0, jnp.float32)
    state = tx.init(p)
    params, averages = [], []
    for _ in range(steps):
        u, state = tx.update(jnp.full_like(p, grad), state, p)
        p = optx.apply_updates(p, u)
        params.append(np.asarray(p).tolist())
        averages.append(np.asarray(optx.ema_params_value(state)).tolist())
    return params, averages


def test_ema_golden_tf_keras_docs_example() -> None:
    """tf.keras ``SGD(learning_rate=1, use_ema=True, ema_momentum=0.5,
    ema_overwrite_frequency=3)``, ``var1, var2 = 2.0, 2.0``, loss ``var1 + var2``:
    [1.0, 1.0] after the first step, [0.0, 0.0] after the second, and [-0.125, -0.125]
    after the third (``2*0.5**3 + 1*0.5*0.5**2 + 0*0.5*0.5 + (-1)*0.5``).
    """
    tx = optx.chain(optx.sgd(1.0), optx.ema_params(0.5, overwrite_frequency=3))
    params, _ = _sgd_ema_trajectory(tx, [2.0, 2.0], 1.0, 3)
    assert params == [[1.0, 1.0], [0.0, 0.0], [-0.125, -0.125]]


def test_ema_golden_tf_keras_momentum_limits() -> None:
    """tf.keras docs: ``ema_momentum=1`` keeps the initial values, ``0`` tracks the weights."""
    _, averages = _sgd_ema_trajectory(
        optx.chain(optx.sgd(1.0), optx.ema_params(1.0)), [2.0], 1.0, 3
    )
    assert averages == [[2.0], [2.0], [2.0]]
    params, averages = _sgd_ema_trajectory(
        optx.chain(optx.sgd(1.0), optx.ema_params(0.0)), [2.0], 1.0, 3
    )
    assert averages == params == [[1.0], [0.0], [-1.0]]


def test_ema_golden_keras3_first_step() -> None:
    """Keras 3 ``SGD(learning_rate=0.1, use_ema=True, ema_momentum=0.5)``, g = 1, from 0:
    weights -0.1, -0.2, -0.3 and averages -0.1, -0.15, -0.225.
    """
    tx = optx.chain(optx.sgd(0.1), optx.ema_params(0.5, start="first_step"))
    params, averages = _sgd_ema_trajectory(tx, [0.0], 1.0, 3)
    np.testing.assert_allclose(np.ravel(params), [-0.1, -0.2, -0.3], rtol=1e-6)
    np.testing.assert_allclose(np.ravel(averages), [-0.1, -0.15, -0.225], rtol=1e-6)


def test_ema_golden_keras3_first_step_with_overwrite() -> None:
    """The tf.keras example under Keras 3's first-step copy ends at -0.25 (DESIGN D12)."""
    tx = optx.chain(optx.sgd(1.0), optx.ema_params(0.5, 3, start="first_step"))
    params, averages = _sgd_ema_trajectory(tx, [2.0, 2.0], 1.0, 3)
    assert params == [[1.0, 1.0], [0.0, 0.0], [-0.25, -0.25]]
    assert averages == [[1.0, 1.0], [0.5, 0.5], [-0.25, -0.25]]


# --------------------------------------------------------------------------------------
# Loss scaling


@pytest.mark.parametrize("factor", [1024.0, 3.0, 2.0**-5])
def test_unscale_gradients_undoes_scale_loss(factor: float) -> None:
    """Gradients of ``scale_loss(loss, s)`` unscaled equal the loss's own (NumPy) gradient."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    y = rng.standard_normal(6).astype(np.float32)
    w0 = rng.standard_normal(3).astype(np.float32)

    tx = optx.chain(optx.unscale_gradients(factor), optx.sgd(1.0))
    state = tx.init(jnp.asarray(w0))
    s = optx.get_hyperparams(state)["loss_scale_factor"]
    assert float(s) == np.float32(factor)

    def loss(w: jax.Array) -> jax.Array:
        return 0.5 * jnp.mean((jnp.asarray(x) @ w - jnp.asarray(y)) ** 2)

    scaled = jax.grad(lambda w: optx.scale_loss(loss(w), s))(jnp.asarray(w0))
    updates, _ = jax.jit(tx.update)(scaled, state, jnp.asarray(w0))

    x64, y64, w64 = x.astype(np.float64), y.astype(np.float64), w0.astype(np.float64)
    residual = x64 @ w64 - y64
    expected = x64.T @ residual / len(y64)
    # float32 sums of n terms are off by at most n EPS32 of the sum of their terms' sizes
    # (TOLERANCES.md): the residual (3 products and the subtraction of y), then the gradient
    # (6 products), each through 1 / n; the scaling by s and back, 2 roundings, and the
    # learning rate 1 (exact).
    e_residual = 4 * EPS32 * (np.abs(x64) @ np.abs(w64) + np.abs(y64))
    terms = np.abs(x64).T @ (e_residual + 6 * EPS32 * np.abs(residual))
    bound = terms / len(y64) + 2 * HALF * np.abs(expected)
    assert_within(f"unscaled gradient s={factor}", -np.asarray(updates), expected, bound)
    if np.log2(factor).is_integer():
        # A power of two scales exactly: the same bits as the unscaled gradient.
        np.testing.assert_array_equal(-np.asarray(updates), np.asarray(jax.grad(loss)(w0)))
