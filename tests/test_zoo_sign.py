"""Sign-based optimizers: scale_by_sign, sign_sgd, signum, scale_by_lion, lion, rprop.

Parity with optax (100 jitted steps on a nested pytree), float64 NumPy loops (Keras's Lion
formula among them), convergence, bfloat16, and every error message of these modules. The
helpers at the top are shared with `test_zoo_belief.py`.
"""

from __future__ import annotations

import re
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

# float32 round-off: both libraries (or optx and a float64 loop) evaluate the same formula,
# so after 100 steps they agree to a few ulps, measured against the largest entry of each
# leaf (a parameter that sums updates of both signs can cancel to near zero).
RTOL = 1e-6
ATOL = 1e-7

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


def run_steps(tx: Any, apply_updates: Callable[..., Any], params: Any, grads: Any) -> tuple:
    """One jitted `lax.scan` of ``tx`` over ``grads``; returns the final (params, state)."""

    def run(params: Any, grads: Any) -> tuple:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), grads)[0]

    return jax.jit(run)(params, grads)


def check_parity(
    tx: Any,
    reference: Any,
    states: Callable[[Any], Any],
    reference_states: Callable[[Any], Any],
    params_tol: tuple[float, float] = (RTOL, ATOL),
) -> None:
    """100 jitted steps of optx's ``tx`` and optax's ``reference``: params and state agree."""
    params = nested_params()
    grads = step_grads(params)
    p, s = run_steps(tx, optx.apply_updates, params, grads)
    p_ref, s_ref = run_steps(reference, optax.apply_updates, params, grads)
    assert_close("params", p, p_ref, *params_tol)
    assert_close("state", states(s), reference_states(s_ref), RTOL, ATOL)


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


def run_numpy_case(tx: Any, params: np.ndarray, grads: np.ndarray) -> tuple[np.ndarray, Any]:
    """All parameters (leading axis: step) of ``tx`` from ``params`` on fixed ``grads``."""

    @jax.jit
    def run(p: jax.Array, grads: jax.Array) -> tuple:
        def step(carry: tuple, g: jax.Array) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            p = optx.apply_updates(p, u)
            return (p, s), p

        (_, state), trajectory = jax.lax.scan(step, (p, tx.init(p)), grads)
        return trajectory, state

    trajectory, state = run(jnp.asarray(params, jnp.float32), jnp.asarray(grads, jnp.float32))
    return np.asarray(trajectory, np.float64), state


def kernel_mask(params: Any) -> Any:
    """A mask callable both libraries accept: decay the rank-2 leaves only."""
    return jax.tree.map(lambda p: jnp.ndim(p) == 2, params)


# ---------------------------------------------------------------------------------------
# Parity with optax.


PARITY = {
    "lion": (
        lambda: optx.lion(1e-2),
        lambda: optax.lion(1e-2),
        lambda s: (s[0].count, s[0].mu),
    ),
    "lion_mask_f32_mu": (
        lambda: optx.lion(
            3e-3, b1=0.8, b2=0.95, mu_dtype=jnp.float32, weight_decay=0.1, mask=kernel_mask
        ),
        lambda: optax.lion(
            3e-3, b1=0.8, b2=0.95, mu_dtype=jnp.float32, weight_decay=0.1, mask=kernel_mask
        ),
        lambda s: (s[0].count, s[0].mu),
    ),
    "lion_smooth": (
        lambda: optx.chain(
            optx.scale_by_lion(mode="smooth", smooth_beta=2.0), optx.scale_by_learning_rate(0.01)
        ),
        lambda: optax.chain(
            optax.scale_by_lion(mode="smooth", smooth_beta=2.0), optax.scale_by_learning_rate(0.01)
        ),
        lambda s: (s[0].count, s[0].mu),
    ),
    "lion_refined": (
        lambda: optx.chain(
            optx.scale_by_lion(b2=0.9, mode="refined"), optx.scale_by_learning_rate(0.01)
        ),
        lambda: optax.chain(
            optax.scale_by_lion(b2=0.9, mode="refined"), optax.scale_by_learning_rate(0.01)
        ),
        lambda s: (s[0].count, s[0].mu),
    ),
    "sign_sgd": (lambda: optx.sign_sgd(1e-2), lambda: optax.sign_sgd(1e-2), lambda s: ()),
    "signum": (
        lambda: optx.signum(1e-2, beta=0.8),
        lambda: optax.signum(1e-2, beta=0.8),
        lambda s: (s[0].count, s[0].ema),
    ),
}


@pytest.mark.parametrize("case", sorted(PARITY))
def test_matches_optax(case: str) -> None:
    # The compared state fields have the same names and positions in both libraries.
    make, make_ref, states = PARITY[case]
    check_parity(make(), make_ref(), states, states)


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


@pytest.mark.parametrize(("b1", "b2", "wd"), [(0.9, 0.99, 0.0), (0.9, 0.99, 0.1), (0.5, 0.8, 0.02)])
def test_lion_matches_keras_formula(b1: float, b2: float, wd: float) -> None:
    """Keras's Lion numbers equal optax's with matched hyperparameters (keras-semantics §2.10).

    The sign makes the trajectories piecewise constant in the inputs: float32 and float64
    agree unless some interpolation lands within round-off of 0, which these seeds avoid.
    """
    grads = numpy_grads()
    params = np.random.default_rng(3).standard_normal(grads.shape[1:]).astype(np.float32)
    got, state = run_numpy_case(optx.lion(1e-2, b1, b2, weight_decay=wd), params, grads)
    expected, m = keras_lion(params.astype(np.float64), grads, 1e-2, b1, b2, wd)
    assert_close("lion params", got, expected, RTOL, ATOL)
    assert_close("lion momentum", state[0].mu, m, RTOL, ATOL)


def test_lion_matches_keras_itself() -> None:
    """The same check against `keras.optimizers.Lion` (JAX backend), where installed."""
    import keras

    assert keras.backend.backend() == "jax"
    grads = numpy_grads(steps=20)
    params = np.random.default_rng(3).standard_normal(grads.shape[1:]).astype(np.float32)
    opt = keras.optimizers.Lion(learning_rate=1e-2, beta_1=0.9, beta_2=0.99, weight_decay=0.1)
    var = keras.Variable(params)
    opt.build([var])
    for g in grads:
        opt.apply_gradients([(jnp.asarray(g, jnp.float32), var)])
    got, _ = run_numpy_case(optx.lion(1e-2, 0.9, 0.99, weight_decay=0.1), params, grads)
    assert_close("lion vs keras", got[-1], np.asarray(var.value), RTOL, ATOL)


@pytest.mark.parametrize("mode", ["smooth", "refined"])
def test_scale_by_lion_modes_match_numpy(mode: str) -> None:
    grads = numpy_grads()
    params = np.zeros(grads.shape[1:], np.float32)
    tx = optx.chain(optx.scale_by_lion(0.8, 0.9, mode=mode, smooth_beta=3.0), optx.scale(-0.1))
    got, state = run_numpy_case(tx, params, grads)
    w, m, out = np.zeros(grads.shape[1:]), np.zeros(grads.shape[1:]), []
    for g in grads:
        c = 0.8 * m + 0.2 * g
        w = w - 0.1 * (np.tanh(3.0 * c) if mode == "smooth" else np.clip(c, -1, 1))
        m = 0.9 * m + 0.1 * g
        out.append(w)
    assert_close(f"lion {mode}", got, np.stack(out), RTOL, ATOL)
    assert_close(f"lion {mode} momentum", state[0].mu, m, RTOL, ATOL)


def test_sign_sgd_and_signum_match_numpy() -> None:
    grads = numpy_grads()
    params = np.zeros(grads.shape[1:], np.float32)
    got, _ = run_numpy_case(optx.sign_sgd(0.1), params, grads)
    assert_close("sign_sgd", got, -0.1 * np.cumsum(np.sign(grads), axis=0), RTOL, ATOL)

    got, state = run_numpy_case(optx.signum(0.1, beta=0.7), params, grads)
    w, m, out = np.zeros(grads.shape[1:]), np.zeros(grads.shape[1:]), []
    for g in grads:
        m = 0.7 * m + 0.3 * g
        w = w - 0.1 * np.sign(m)
        out.append(w)
    assert_close("signum", got, np.stack(out), RTOL, ATOL)
    assert_close("signum average", state[0].ema, m, RTOL, ATOL)


def numpy_rprop(grads, lr, eta_minus, eta_plus, lo, hi):
    """iRprop- in float64, written from the paper's case analysis (as PyTorch's `Rprop`)."""
    step = np.full(grads.shape[1:], lr)
    last = np.zeros(grads.shape[1:])  # the last gradient taken into account (0 after a flip)
    w, out, steps = np.zeros(grads.shape[1:]), [], []
    for g in grads:
        for i in np.ndindex(g.shape):
            if g[i] * last[i] > 0:
                step[i] = min(step[i] * eta_plus, hi)
            elif g[i] * last[i] < 0:
                step[i] = max(step[i] * eta_minus, lo)
                last[i] = 0.0
                continue
            w[i] -= step[i] * np.sign(g[i])
            last[i] = g[i]
        out.append(w.copy())
        steps.append(step.copy())
    return np.stack(out), np.stack(steps)


def test_rprop_matches_numpy() -> None:
    grads = numpy_grads()
    # A slowly turning gradient, so signs hold for runs of steps and steps grow to the cap.
    grads = grads + 3 * np.sin(0.1 * np.arange(STEPS)).reshape(-1, 1, 1)
    grads = grads.astype(np.float32).astype(np.float64)
    params = np.zeros(grads.shape[1:], np.float32)
    got, state = run_numpy_case(optx.rprop(0.01, 0.5, 1.2, 6e-3, 0.05), params, grads)
    expected, steps = numpy_rprop(grads, 0.01, 0.5, 1.2, 6e-3, 0.05)
    assert_close("rprop", got, expected, RTOL, ATOL)
    assert_close("rprop steps", state[0].step_sizes, steps[-1], RTOL, ATOL)
    assert np.any(steps == 0.05) and np.any(steps == 6e-3)  # both bounds were exercised


# ---------------------------------------------------------------------------------------
# Convergence. Lion and signum settle within the learning rate's last values, so they run
# a cosine decay to 0. signSGD without momentum zigzags across Rosenbrock's curved valley:
# it gets a looser tolerance and more steps. Rprop, without backtracking, creeps along the
# valley: 1e-2 in 3,000 steps.

TOL = 1e-4
CONVERGENCE = [
    # (id, transform, problem, steps, tolerance); observed distances in comments.
    ("lion", lambda: optx.lion(cosine(0.1, 500), weight_decay=0.0), "parabola", 500, TOL),
    ("lion", lambda: optx.lion(cosine(0.1, 4000), weight_decay=0.0), "rosenbrock", 4000, 1e-3),
    ("sign_sgd", lambda: optx.sign_sgd(cosine(0.1, 500)), "parabola", 500, TOL),
    ("sign_sgd", lambda: optx.sign_sgd(cosine(0.005, 20000)), "rosenbrock", 20000, 0.1),
    ("signum", lambda: optx.signum(cosine(0.1, 1000)), "parabola", 1000, TOL),
    ("signum", lambda: optx.signum(cosine(0.05, 4000)), "rosenbrock", 4000, 1e-2),
    ("rprop", lambda: optx.rprop(0.1), "parabola", 200, TOL),
    ("rprop", lambda: optx.rprop(0.1), "rosenbrock", 3000, 1e-2),
]


@pytest.mark.parametrize(
    ("make", "problem", "steps", "tol"),
    [c[1:] for c in CONVERGENCE],
    ids=[f"{c[0]}-{c[2]}" for c in CONVERGENCE],
)
def test_converges(make: Callable[[], Any], problem: str, steps: int, tol: float) -> None:
    err = distance(minimise(make(), problem, steps), problem)
    print(f"{problem}: |x - x*| = {err:.3g} after {steps} steps")
    assert err < tol


# ---------------------------------------------------------------------------------------
# bfloat16 parameters. The end points stay within 4 bf16 ulps (2**-6 at |x| in [2, 4)) of
# the float32 run's: updates below half an ulp of a parameter are rounded away, so a bf16
# run can stop a few ulps short (observed: 3e-2 for signum, <= 2e-5 for the others).

BF16_TOL = 4 * 2.0**-6


@pytest.mark.parametrize(
    ("name", "make"),
    [
        # Lion's momentum and signum's average in float32.
        ("lion", lambda: optx.lion(cosine(0.1, 500), weight_decay=0.0, mu_dtype=jnp.float32)),
        ("signum", lambda: optx.signum(cosine(0.1, 500), accumulator_dtype=jnp.float32)),
        ("sign_sgd", lambda: optx.sign_sgd(cosine(0.1, 500))),
        ("rprop", lambda: optx.rprop(0.1)),
    ],
)
def test_bfloat16_params_stay_close_to_float32(name: str, make: Callable[[], Any]) -> None:
    x32 = minimise(make(), "parabola", 500)
    x16 = minimise(make(), "parabola", 500, jnp.bfloat16)
    err = float(jnp.max(jnp.abs(x16.astype(jnp.float32) - x32)))
    print(f"{name}: bf16 vs f32 {err:.3g}")
    assert err < BF16_TOL


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
