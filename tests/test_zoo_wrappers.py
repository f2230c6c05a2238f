"""Schedule-Free learning, Lookahead and Sophia: parity with optax (and Keras), NumPy
reference loops, convergence, bfloat16, and every error message.

Parity and reference runs are 100 steps of one jitted `lax.scan` on a nested pytree (dicts
and a list; matrices, a 3-D kernel, vectors, a scalar) with gradients that change every
step, run in float64 and compared within bounds worked out from optx's float32
hyperparameters (`ROUNDOFF64`); the float32 checks (jit against eager, bfloat16) and the
convergence tolerances say where theirs come from (tests/TOLERANCES.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, roundoff_rtol
from helpers import assert_close as _assert_close

import optx

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)
# Parity with optax, Keras and the NumPy loops runs in float64 (`run64`): then the one
# difference left is optx's float32 hyperparameters and scalars (DESIGN D2), each off by at
# most EPS32 / 2 relative (the float32 arithmetic itself is covered by
# tests/test_conformance.py). ``k`` such roundings on each step's update move the parameters
# by at most ``k * EPS32 / 2 * sum_t max|u_t|`` per leaf (tests/TOLERANCES.md), plus float64
# round-off: ~32 roundings a step and sums over the 34 parameters (Sophia's coupled loss),
# relative to a leaf's scale. In float64 optax's and Keras's bias corrections are exact too.
ROUNDOFF64 = STEPS * (32 + 34) * EPS64


def trace_k(b: float, k_in: float) -> float:
    """Roundings ``k`` of a moving average or momentum ``m = b m + d`` whose inputs ``d``
    carry ``k_in`` roundings, relative to its own outputs: they sum to ``sum_s d_s c_s``
    with ``c_s = sum_n b**n <= 1 / (1 - b)``; float32 ``b`` moves ``c_s`` by at most ``b / (1
    - b)**2 * EPS32 / 2``; and ``sum_s max|d_s| <= (1 + b) sum_t max|m_t|``.
    """
    return (1 + b) * (k_in / (1 - b) + b / (1 - b) ** 2)


def adam_k(b1: float, b2: float, steps: int = STEPS) -> float:
    """Roundings of Adam's direction (tests/test_zoo_adam.py): the lags of b1 and b2 (capped
    at ``steps``, halved through the root), 1 - b1 and 1 - b2 (1 + 1/2), the bias
    corrections (3 + 3/2), eps.
    """
    return b1 / (1 - b1) + min(steps, b2 / (1 - b2)) / 2 + 1.5 + 4.5 + 1


# ---------------------------------------------------------------------------------------
# Data and helpers.


def assert_close(name: str, actual: Any, expected: Any, rtol: float, atol: float) -> float:
    """`helpers.assert_close`, also requiring finite expected values."""
    return _assert_close(name, actual, expected, rtol, atol, finite=True)


def make_params() -> dict[str, Any]:
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "dense": {"kernel": normal(3, 4), "bias": normal(4)},
        "blocks": [{"conv": normal(2, 3, 2)}, normal(5)],
        "scale": normal(),
    }


def make_grads(params: Any, seed: int = 1) -> Any:
    """Per-step gradients (leading axis: step), magnitude swinging between 0.2 and 2.2."""
    rng = np.random.default_rng(seed)
    magnitude = 0.2 + 2.0 * np.sin(0.3 * np.arange(STEPS)) ** 2

    def draw(p: jax.Array) -> jax.Array:
        g = rng.standard_normal((STEPS, *p.shape)) * magnitude.reshape((STEPS,) + (1,) * p.ndim)
        return jnp.asarray(g, jnp.float32)

    return jax.tree.map(draw, params)


def run(tx: Any, params: Any, grads: Any, apply: Callable[..., Any] = optx.apply_updates):
    """`STEPS` jitted steps with the given gradients; returns the final params and state."""

    @jax.jit
    def scan(params: Any, grads: Any) -> tuple[Any, Any]:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (apply(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), grads)[0]

    return scan(params, grads)


def np_tree(tree: Any) -> list[np.ndarray]:
    return [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]


@functools.lru_cache(maxsize=32)
def _scan64(tx: Any, apply: Callable[..., Any], probe: Callable[..., Any] | None) -> Callable:
    """`run64`'s jitted scan, one per transform: runs of equal shapes (Lookahead's chunks)
    compile once.
    """

    @jax.jit
    def scan(params: Any, grads: Any) -> tuple:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, new = tx.update(g, s, p)
            seen = None if probe is None else probe(p, s, new)
            sizes = jax.tree.map(lambda x: jnp.max(jnp.abs(x)), u)
            return (apply(p, u), new), (sizes, seen)

        (p, s), (sizes, seen) = jax.lax.scan(step, (params, tx.init(params)), grads)
        return p, s, sizes, seen

    return scan


def run64(
    tx: Any,
    params: Any,
    grads: Any,
    apply: Callable[..., Any] = optx.apply_updates,
    probe: Callable[..., Any] | None = None,
) -> tuple[Any, Any, Any, Any]:
    """`run` in float64 (`jax.enable_x64`): the final params and state, per step and leaf
    ``max|u_t|``, and ``probe(p, state, new_state)`` per step; NumPy trees out (compared
    outside x64, see tests/TOLERANCES.md).
    """
    with jax.enable_x64(True):
        params, grads = jax.tree.map(
            lambda x: jnp.asarray(np.asarray(x, np.float64)), (params, grads)
        )
        return jax.tree.map(np.asarray, _scan64(tx, apply, probe)(params, grads))


def assert_within(name: str, actual: Any, expected: Any, atols: Any, rtol: float = 0.0) -> None:
    """`assert_close` leaf by leaf with absolute tolerances ``atols``, plus `ROUNDOFF64` and
    ``rtol`` of each leaf's scale; prints the largest error over its bound.
    """
    worst = 0.0
    leaves = zip(np_tree(actual), np_tree(expected), atols, strict=True)
    for i, (a, e, atol) in enumerate(leaves):
        rel = rtol + ROUNDOFF64
        assert_close(f"{name}[{i}]", a, e, rel, atol)
        bound = atol + rel * float(np.max(np.abs(e)))
        worst = max(worst, float(np.max(np.abs(a - e))) / bound if bound else 0.0)
    print(f"{name}: max error / bound {worst:.3g}")


def path(sizes: Any) -> list[float]:
    """Per leaf ``sum_t max|u_t|`` from `run64`'s sizes."""
    return [float(np.sum(x)) for x in jax.tree.leaves(sizes)]


def raises(error: type[Exception], message: str, fn: Callable[[], Any]) -> None:
    with pytest.raises(error) as info:
        fn()
    assert str(info.value) == message


# ---------------------------------------------------------------------------------------
# Schedule-Free: parity with optax.


def sf_probe(p: Any, state: Any, new: Any) -> tuple[Any, Any]:
    """Per leaf: the step's size max|z_t - z_{t-1}| and max|y_{t-1} - z_{t-1}|."""
    size = lambda x: jnp.max(jnp.abs(x))  # noqa: E731
    return (
        jax.tree.map(lambda a, b: size(a - b), new.z, state.z),
        jax.tree.map(lambda y, z: size(y - z), p, state.z),
    )


def sf_weights(schedule: Callable[[int], float], power: float) -> np.ndarray:
    """Schedule-Free's averaging weights c_t = w_t / sum_s w_s, w_t = max_{s<=t} lr_s**power."""
    lrs = np.maximum.accumulate([schedule(t) for t in range(1, STEPS + 1)])
    w = lrs**power
    total = np.cumsum(w)
    return np.where(w > 0, w / np.where(total > 0, total, 1.0), 0.0)


def sf_bounds(seen: Any, c: np.ndarray, power: float, k_lr: float, k_base: float) -> tuple:
    """Per leaf atol of (y, z) after `run64` with `sf_probe`.

    optx's update is ``k_step s - c_t (y - z)``, ``k_step = (1 - b1) + b1 c_t``: its float32
    ``c_t = w_t / sum w`` holds the float32 sum of t weights (t roundings), ``w = max_lr**power``
    (power k_lr, the power 2, the division 1), ``k_step`` 2 more; the step s = z_t - z_{t-1}
    carries the learning rate's (k_lr) and the base optimizer's (k_base) roundings. y - z is
    pulled back by c_t each step: errors in it are averaged away, not amplified.
    """
    dz, dyz = (jax.tree.leaves(x) for x in seen)
    t = np.arange(1, len(c) + 1)
    k_c = t + power * k_lr + 3
    k_s = k_lr + k_base
    y = [
        EPS32 / 2 * np.sum((k_c + 2 + k_s) * a + k_c * c * b) for a, b in zip(dz, dyz, strict=True)
    ]
    z = [EPS32 / 2 * k_s * np.sum(a) for a in dz]
    return y, z


def eval_bounds(b1: float, y: list, z: list, p: Any, state_z: Any) -> list[float]:
    """Per leaf atol of the evaluation point x = z + (y - z) / b1, from those of y and z and
    float32 b1 (1 rounding of (y - z) / b1).
    """
    return [
        (a + b) / b1 + EPS32 / 2 * float(np.max(np.abs(q - r))) / b1
        for a, b, q, r in zip(y, z, np_tree(p), np_tree(state_z), strict=True)
    ]


# Schedule-Free AdamW's base step: scale_by_rms (b2 = 0.999: min(STEPS, 999) / 2 through the
# root, 1 - b2 1/2, the bias correction 3/2, eps 1) and the weight decay.
K_SF_RMS = 50 + 0.5 + 1.5 + 1 + 1
# name: (arguments, b1, weight_lr_power, the schedule, k_lr: 1, or 3 for a float32 warmup).
SF_ADAMW = {
    "constant": (dict(learning_rate=0.01, weight_decay=1e-3), 0.9, 2.0, lambda t: 0.01, 1),
    "warmup": (
        dict(learning_rate=0.02, warmup_steps=10, b1=0.95, weight_lr_power=1.0),
        0.95,
        1.0,
        lambda t: 0.02 * min(t / 10, 1.0),
        3,
    ),
}


@pytest.mark.parametrize("case", sorted(SF_ADAMW))
def test_schedule_free_adamw_matches_optax(case: str) -> None:
    kwargs, b1, power, schedule, k_lr = SF_ADAMW[case]
    params = make_params()
    grads = make_grads(params)
    p, s, _, _ = run64(optx.schedule_free_adamw(**kwargs), params, grads)
    tx = optax.contrib.schedule_free_adamw(**kwargs)
    q, t, _, seen = run64(tx, params, grads, optax.apply_updates, sf_probe)
    y_tol, z_tol = sf_bounds(seen, sf_weights(schedule, power), power, k_lr, K_SF_RMS)
    assert_within("params", p, q, y_tol)
    assert_within("z", s.z, t.z, z_tol)
    # nu, a sum of squares: 1 - b2 and b2's lag (at most STEPS), relative to its values.
    nu_rtol = (1 + STEPS) * EPS32 / 2
    assert_within(
        "nu", s.base_optimizer_state[0].nu, t.base_optimizer_state[0].nu, [0] * 5, nu_rtol
    )
    x, x_ref = optx.schedule_free_eval_params(s, p), optax.contrib.schedule_free_eval_params(t, q)
    assert_within("eval params", x, x_ref, eval_bounds(b1, y_tol, z_tol, q, t.z))
    # optx sums the weights in float32 (STEPS roundings, and the weights' own).
    assert_within(
        "weight_sum", s.weight_sum, t.weight_sum, [0.0], (STEPS + power * k_lr + 2) * EPS32 / 2
    )
    assert_within("max_lr", s.max_lr, t.max_lr, [0.0], k_lr * EPS32 / 2)


def test_schedule_free_sgd_and_wrapper_match_optax() -> None:
    params = make_params()
    grads = make_grads(params)
    kwargs = dict(learning_rate=0.1, warmup_steps=5, b1=0.8, weight_decay=1e-2)
    p, s, _, _ = run64(optx.schedule_free_sgd(**kwargs), params, grads)
    tx = optax.contrib.schedule_free_sgd(**kwargs)
    q, t, _, seen = run64(tx, params, grads, optax.apply_updates, sf_probe)
    # The float32 warmup (3), the weight decay (1).
    c = sf_weights(lambda t: 0.1 * min(t / 5, 1.0), 2.0)
    y_tol, z_tol = sf_bounds(seen, c, 2.0, 3, 1)
    assert_within("sgd params", p, q, y_tol)
    assert_within("sgd z", s.z, t.z, z_tol)
    x, x_ref = optx.schedule_free_eval_params(s, p), optax.contrib.schedule_free_eval_params(t, q)
    assert_within("sgd eval params", x, x_ref, eval_bounds(0.8, y_tol, z_tol, q, t.z))

    # The wrapper over a base optimizer holding its own (scheduled) learning rate.
    ours = optx.schedules.warmup_constant_schedule(0.0, 0.05, 8)
    theirs = optax.schedules.warmup_constant_schedule(0.0, 0.05, 8)
    tx = optx.schedule_free(optx.sgd(ours, momentum=0.5), ours, b1=0.9, weight_lr_power=3.0)
    p, s, _, _ = run64(tx, params, grads)
    tx = optax.contrib.schedule_free(optax.sgd(theirs, 0.5), theirs, 0.9, 3.0)
    q, t, _, seen = run64(tx, params, grads, optax.apply_updates, sf_probe)
    # The float32 schedule (3) in the step and in the weights; the trace's b = 0.5 is exact.
    c = sf_weights(lambda t: 0.05 * min(t / 8, 1.0), 3.0)
    y_tol, z_tol = sf_bounds(seen, c, 3.0, 3, 0)
    assert_within("wrapper params", p, q, y_tol)
    assert_within("wrapper z", s.z, t.z, z_tol)
    trace, trace_optax = s.base_optimizer_state[0].trace, t.base_optimizer_state[0].trace
    assert_within("wrapper trace", trace, trace_optax, [0.0] * 5)


def test_schedule_free_matches_keras() -> None:
    import keras

    assert keras.backend.backend() == "jax"
    params = make_params()
    steps = 30
    grads = jax.tree.map(lambda g: g[:steps], make_grads(params))
    # Keras on float64 variables (its learning rate is a float32 variable, as optx's).
    with jax.enable_x64(True):
        flat = [np.asarray(x, np.float64) for x in jax.tree.leaves(params)]
        opt = keras.optimizers.ScheduleFreeAdamW(learning_rate=0.01, warmup_steps=5)
        variables = [keras.Variable(x) for x in flat]
        opt.build(variables)
        for t in range(steps):
            gs = [jnp.asarray(np.asarray(g[t], np.float64)) for g in jax.tree.leaves(grads)]
            opt.apply_gradients(list(zip(gs, variables, strict=True)))
        keras_params = [np.asarray(v.value) for v in variables]
        keras_z = [np.asarray(m.value) for m in opt._momentums]
    assert all(x.dtype == np.float64 for x in keras_params)
    tx = optx.schedule_free_adamw(
        0.01, warmup_steps=5, weight_lr_power=0.0, schedule_convention="keras"
    )
    p, s, _, seen = run64(tx, params, grads, probe=sf_probe)
    # Keras's weights are 1 / t; optx's float32 warmup (3) and `K_SF_RMS` (its b2 lag of
    # STEPS / 2 covers these 30 steps); the bounds from optx's own float64 run (Keras's to
    # first order).
    c = sf_weights(lambda t: 1.0, 0.0)
    y_tol, z_tol = sf_bounds(jax.tree.map(lambda x: x[:steps], seen), c[:steps], 0.0, 3, K_SF_RMS)
    assert_within("params", jax.tree.leaves(p), keras_params, y_tol)
    assert_within("z", jax.tree.leaves(s.z), keras_z, z_tol)


def test_schedule_free_jit_matches_eager_relative_to_leaf_scale() -> None:
    # The configurations the conformance registry leaves out: their update, k_step s - c_t (y
    # - z), takes y - z from parameters that the two programs may round an ulp apart (t
    # ulps of the parameters' scale after t steps, and of z's): c_t <= 1 times both, plus
    # the update's own multiply-adds (4 roundings). After 3 steps params and z are off by
    # the rounding of p + u and of the update (2 a step).
    params = make_params()
    grads = [jax.tree.map(lambda g, t=t: g[t], make_grads(params)) for t in range(3)]
    p_rtol = roundoff_rtol(steps=3, roundings=2)
    for tx in (
        optx.schedule_free(optx.sgd(0.1), 0.1),
        optx.schedule_free_sgd(0.1, weight_decay=1e-3),
    ):
        results = []
        for update in (tx.update, jax.jit(tx.update)):
            p, s, us = params, tx.init(params), []
            for g in grads:
                u, s = update(g, s, p)
                p = optx.apply_updates(p, u)
                us.append(u)
            results.append((us, p, s.z))
        p_max = [
            max(float(np.max(np.abs(x))) for x in leaves)
            for leaves in zip(*[np_tree(r[1]) for r in results], strict=True)
        ]
        for t, (u_jit, u_eager) in enumerate(zip(results[1][0], results[0][0], strict=True)):
            atols = [2 * t * p_rtol / 3 * m for m in p_max]
            leaves = zip(np_tree(u_jit), np_tree(u_eager), atols, strict=True)
            for i, (a, e, atol) in enumerate(leaves):
                assert_close(f"updates {t}[{i}]", a, e, roundoff_rtol(1, 4), atol)
        assert_close("params and z", results[1][1:], results[0][1:], p_rtol, 0.0)


# ---------------------------------------------------------------------------------------
# Schedule-Free: NumPy reference (x, y, z kept explicitly, as in the paper).


def np_schedule_free_adamw(
    params: Any,
    grads: Any,
    lr: float,
    warmup: int,
    b1: float,
    b2: float,
    eps: float,
    wd: float,
    power: float,
    convention: str,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    def schedule(k: int) -> float:
        return lr * min(k / warmup, 1.0) if warmup else lr

    zs, xs = np_tree(params), np_tree(params)
    vs = [np.zeros_like(z) for z in zs]
    gs = np_tree(grads)
    weight_sum = max_lr = 0.0
    for t in range(1, STEPS + 1):
        lr_step = schedule(t - 1 if convention == "optax" else t)
        max_lr = max(max_lr, schedule(t))
        weight = max_lr**power
        weight_sum += weight
        c = weight / weight_sum if weight else 0.0
        for i in range(len(zs)):
            g, y = gs[i][t - 1], (1 - b1) * zs[i] + b1 * xs[i]
            vs[i] = b2 * vs[i] + (1 - b2) * g**2
            d = g / (np.sqrt(vs[i] / (1 - b2**t)) + eps) + wd * y
            zs[i] = zs[i] - lr_step * d
            xs[i] = (1 - c) * xs[i] + c * zs[i]
    ys = [(1 - b1) * z + b1 * x for z, x in zip(zs, xs, strict=True)]
    return ys, xs


@pytest.mark.parametrize("convention", ["optax", "keras"])
def test_schedule_free_adamw_matches_numpy(convention: str) -> None:
    params = make_params()
    grads = make_grads(params)
    power = 2.0 if convention == "optax" else 0.0
    tx = optx.schedule_free_adamw(
        0.02,
        warmup_steps=10,
        b1=0.9,
        b2=0.99,
        eps=1e-6,
        weight_decay=1e-2,
        weight_lr_power=power,
        schedule_convention=convention,
    )
    p, s, _, seen = run64(tx, params, grads, probe=sf_probe)
    y, x = np_schedule_free_adamw(params, grads, 0.02, 10, 0.9, 0.99, 1e-6, 1e-2, power, convention)
    # b2 = 0.99 (min(STEPS, 99) / 2 through the root, 1 - b2, the bias correction, eps, the
    # weight decay) and the float32 warmup (3); the bounds from optx's own float64 run.
    c = sf_weights(lambda t: 0.02 * min(t / 10, 1.0), power)
    y_tol, z_tol = sf_bounds(seen, c, power, 3, 50 + 0.5 + 1.5 + 1 + 1)
    assert_within("params", p, y, y_tol)
    x_tol = eval_bounds(0.9, y_tol, z_tol, p, s.z)
    assert_within("eval params", optx.schedule_free_eval_params(s, p), x, x_tol)


def test_schedule_free_state_and_eval_params() -> None:
    params = make_params()
    tx = optx.chain(optx.clip_by_global_norm(10.0), optx.schedule_free_sgd(0.1))
    state = tx.init(params)
    sf = state[1]
    assert isinstance(sf, optx.ScheduleFreeState)
    assert sf.z["dense"]["kernel"] is not params["dense"]["kernel"]  # a copy: donatable
    assert sorted(optx.get_hyperparams(state)) == [
        "b1",
        "learning_rate",
        "max_norm",
        "weight_lr_power",
    ]
    # At the start x = y = z; found inside a chain.
    assert_close("x", optx.schedule_free_eval_params(state, params), params, 0, 0)
    # b1 = 1 is plain averaging of the z iterates: y = x, evaluated as z + (y - z) / 1 in
    # float32: two roundings, of |y - z| and of |y|.
    tx = optx.schedule_free_sgd(0.1, b1=1.0)
    grads = make_grads(params)
    p, s = run(tx, params, grads)
    y_z = [float(np.max(np.abs(y - z))) for y, z in zip(np_tree(p), np_tree(s.z), strict=True)]
    x = np_tree(optx.schedule_free_eval_params(s, p))
    for i, (a, e, d) in enumerate(zip(x, np_tree(p), y_z, strict=True)):
        assert_close(f"x[{i}]", a, e, EPS32 / 2, EPS32 / 2 * d)


# ---------------------------------------------------------------------------------------
# Lookahead.


def fast_path(fast: Any, params: Any, grads: Any, period: int, reset: bool) -> list[float]:
    """Per leaf ``sum_t max|u_t|`` of the fast optimizer's own updates (float64): the
    gradients do not depend on the parameters, so these are its updates inside lookahead;
    with ``reset`` its state restarts every ``period`` steps.
    """
    if not reset:
        return path(run64(fast, params, grads)[2])
    chunks = [
        jax.tree.map(lambda g, i=i: g[i : i + period], grads) for i in range(0, STEPS, period)
    ]
    sizes = [path(run64(fast, params, chunk)[2]) for chunk in chunks]
    return [float(sum(x)) for x in zip(*sizes, strict=True)]


@pytest.mark.parametrize("reset_state", [False, True])
def test_lookahead_matches_optax(reset_state: bool) -> None:
    params = make_params()
    grads = make_grads(params)
    for fast, fast_optax, k in (
        # The learning rate, and the momentum 0.9's lag (`trace_k`).
        (optx.sgd(0.1, momentum=0.9), optax.sgd(0.1, momentum=0.9), 1 + trace_k(0.9, 0)),
        (optx.adam(0.05), optax.adam(0.05), 1 + adam_k(0.9, 0.999)),
    ):
        p, s, _, _ = run64(optx.lookahead(fast, 5, 0.5, reset_state), params, grads)
        tx = optax.lookahead(fast_optax, 5, 0.5, reset_state)

        with jax.enable_x64(True):
            lp = optax.LookaheadParams.init_synced(
                jax.tree.map(lambda x: jnp.asarray(np.asarray(x, np.float64)), params)
            )
            g64 = jax.tree.map(lambda x: jnp.asarray(np.asarray(x, np.float64)), grads)

            @jax.jit
            def scan(lp: Any, grads: Any, tx: Any = tx) -> tuple[Any, Any]:
                def step(carry: tuple, g: Any) -> tuple:
                    lp, st = carry
                    u, st = tx.update(g, st, lp)
                    return (optax.apply_updates(lp, u), st), None

                return jax.lax.scan(step, (lp, tx.init(lp)), grads)[0]

            lp, t = jax.tree.map(np.asarray, scan(lp, g64))
        # The slow weights average the fast ones (slow_step_size 0.5 is exact): both are off
        # by at most the fast updates' roundings.
        atols = [k * EPS32 / 2 * u for u in fast_path(fast, params, grads, 5, reset_state)]
        assert_within("fast", p, lp.fast, atols)
        assert_within("slow", s.slow, lp.slow, atols)
        assert int(s.steps_since_sync) == int(t.steps_since_sync) == STEPS % 5


def np_lookahead_momentum(
    params: Any, grads: Any, lr: float, mu: float, k: int, alpha: float, reset: bool
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    fast, slow = np_tree(params), np_tree(params)
    traces = [np.zeros_like(p) for p in fast]
    gs = np_tree(grads)
    for t in range(STEPS):
        for i in range(len(fast)):
            traces[i] = gs[i][t] + mu * traces[i]
            stepped = fast[i] - lr * traces[i]
            if t % k == k - 1:
                slow[i] = slow[i] + alpha * (stepped - slow[i])
                fast[i] = slow[i].copy()
                if reset:
                    traces[i] = np.zeros_like(traces[i])
            else:
                fast[i] = stepped
    return fast, slow


@pytest.mark.parametrize("reset_state", [False, True])
def test_lookahead_matches_numpy(reset_state: bool) -> None:
    params = make_params()
    grads = make_grads(params)
    fast = optx.sgd(0.05, momentum=0.8)
    tx = optx.lookahead(fast, 3, 0.7, reset_state=reset_state)
    p, s, _, _ = run64(tx, params, grads)
    fast_np, slow_np = np_lookahead_momentum(params, grads, 0.05, 0.8, 3, 0.7, reset_state)
    # The learning rate, the momentum 0.8's lag (`trace_k`), the slow step size 0.7 (1).
    k = 1 + trace_k(0.8, 0) + 1
    atols = [k * EPS32 / 2 * u for u in fast_path(fast, params, grads, 3, reset_state)]
    assert_within("fast", p, fast_np, atols)
    assert_within("slow", s.slow, slow_np, atols)


def test_lookahead_reset_keeps_hyperparams() -> None:
    params = {"w": jnp.ones(3)}
    tx = optx.lookahead(optx.adam(0.1), sync_period=2, slow_step_size=0.5, reset_state=True)
    state = optx.set_hyperparams(tx.init(params), learning_rate=0.3, b1=0.5)
    for _ in range(2):
        updates, state = tx.update({"w": jnp.ones(3)}, state, params)
        params = optx.apply_updates(params, updates)
    assert int(state.fast_state[0].count) == 0  # reset at the synchronisation
    hyper = optx.get_hyperparams(state)
    # Float32 hyperparameters: each its value rounded once.
    np.testing.assert_allclose([hyper["learning_rate"], hyper["b1"]], [0.3, 0.5], rtol=EPS32 / 2)
    # Slow weights: a copy at init; after the sync, fast == slow.
    np.testing.assert_array_equal(params["w"], state.slow["w"])


# ---------------------------------------------------------------------------------------
# Sophia.


def sophia_data(seed: int = 2) -> tuple[jax.Array, jax.Array]:
    """Per-step curvature a_t in [0.5, 1.5] and centre c_t of the losses below."""
    rng = np.random.default_rng(seed)
    a = 1.0 + 0.5 * np.sin(0.2 * np.arange(STEPS))
    return jnp.asarray(a, jnp.float32), jnp.asarray(rng.standard_normal(STEPS), jnp.float32)


def coupled_loss(p: Any, a: jax.Array, c: jax.Array) -> jax.Array:
    """Non-separable: Hutchinson's estimate depends on its random signs."""
    leaves = jax.tree.leaves(p)
    total = sum(jnp.sum(x) for x in leaves)
    return sum(jnp.sum(0.5 * a * (x - c) ** 2 + 0.05 * x**4) for x in leaves) + 0.1 * total**2


def separable_loss(p: Any, a: jax.Array, c: jax.Array) -> jax.Array:
    """Separable: Hutchinson's estimate is the exact diagonal a + 3 x^2."""
    return sum(jnp.sum(0.5 * a * (x - c) ** 2 + 0.25 * x**4) for x in jax.tree.leaves(p))


def run_sophia(
    tx: Any,
    params: Any,
    loss: Callable[..., Any],
    apply=optx.apply_updates,
    steps: int = STEPS,
    probe: Callable[..., Any] | None = None,
) -> tuple[Any, Any, Any, Any]:
    """``steps`` jitted Sophia steps on ``loss`` with `sophia_data`: the final params and
    state, per step and leaf ``max|u_t|``, and ``probe(state, new_state)`` per step.
    """
    data = jax.tree.map(lambda d: d[:steps], sophia_data())
    if jax.config.jax_enable_x64:
        params, data = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), (params, data))

    @jax.jit
    def scan(params: Any, data: Any) -> tuple[Any, Any, Any, Any]:
        def step(carry: tuple, d: tuple) -> tuple:
            p, s = carry

            def obj_fn(q: Any) -> jax.Array:
                return loss(q, *d)

            u, new = tx.update(jax.grad(obj_fn)(p), s, p, obj_fn=obj_fn)
            seen = None if probe is None else probe(s, new)
            return (apply(p, u), new), (jax.tree.map(lambda x: jnp.max(jnp.abs(x)), u), seen)

        (p, s), (sizes, seen) = jax.lax.scan(step, (params, tx.init(params)), data)
        return p, s, sizes, seen

    return scan(params, data)


def run_sophia64(
    tx: Any, params: Any, loss: Callable[..., Any], apply=optx.apply_updates, probe=None
):
    """`run_sophia` in float64; NumPy trees out (typed keys as key data)."""
    with jax.enable_x64(True):
        out = run_sophia(tx, params, loss, apply, probe=probe)

    def numpy(x: Any) -> Any:
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)

    return jax.tree.map(numpy, out)


def sophia_probe(b1: float, b2: float, gamma: float, eps: float) -> Callable[..., Any]:
    """A probe of Sophia's state: the largest term each moving average took in, ``(m_t - b
    m_{t-1}) / (1 - b)`` (the gradient for mu, the Hessian estimate or the kept h for nu), and
    per leaf the bias-corrected ``m_hat`` and the denominator ``max(gamma h, eps)`` of the step.
    """

    def terms(a: Any, b: Any, d: float) -> jax.Array:
        pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
        return jnp.max(jnp.stack([jnp.max(jnp.abs(x - d * y)) for x, y in pairs])) / (1 - d)

    def probe(state: Any, new: Any) -> tuple:
        old, new = state[0], new[0]
        m_hat = jax.tree.map(lambda m: m / (1 - b1 ** new.count.astype(m.dtype)), new.mu)
        denominator = jax.tree.map(lambda h: jnp.maximum(gamma * h, eps), old.nu)
        return terms(new.mu, old.mu, b1), terms(new.nu, old.nu, b2), m_hat, denominator

    return probe


def sophia_bounds(kwargs: dict, seen: tuple, sizes: Any, b1: float = 0.965) -> list[float]:
    """Per leaf: how far float32 hyperparameters move Sophia's parameters (float64 runs).

    The step is ``lr (clip(r) + wd p)``, ``r = m_hat / D``, ``D = max(gamma h, eps)``. m is
    off by 1 - b1 and b1's lag, term by term (``dm``), h by ``k_h = 1 + min(refreshes, b2 /
    (1 - b2))`` roundings of its terms (max|estimate|): both can cancel, so r is off by ``dm /
    D + |m_hat| / D (gamma dh / D + EPS32 + 3 EPS32 / 2)`` (gamma, eps, the bias correction
    of m_hat, over ``1 - b1**t``); the clip is 1-Lipschitz and leaves both runs at the same
    bound where ``|r| > clip + dr``. The learning rate, the clip and the weight decay: 3 of
    |u|. The loss is convex: a parameter's error moves its next gradient to undo it.
    """
    lr, gamma = kwargs["learning_rate"], kwargs.get("gamma", 0.01)
    b2, interval = kwargs.get("b2", 0.99), kwargs.get("update_interval", 10)
    clip = kwargs.get("clip_threshold", 1.0)
    g, h, m_hats, denominators = seen
    # m_t = sum_n (1 - b1) b1**n g_{t-n}: 1 - b1 and b1**n are off by (1 + n) roundings, each
    # of its term; the bias correction 3 of m_hat.
    n = np.arange(STEPS)
    weights = (1 + n) * (1 - b1) * b1**n
    dm = np.array([EPS32 / 2 * np.sum(weights[:t] * g[t - 1 :: -1]) for t in range(1, STEPS + 1)])
    refreshes = -(-STEPS // interval)
    dh = (1 + min(refreshes, b2 / (1 - b2))) * EPS32 / 2 * float(np.max(h))
    out = []
    for m_hat, d, u in zip(
        jax.tree.leaves(m_hats), jax.tree.leaves(denominators), path(sizes), strict=True
    ):
        r = np.abs(m_hat) / d
        shape = (STEPS,) + (1,) * (d.ndim - 1)
        dm_t = (dm / (1 - b1 ** (1.0 + n))).reshape(shape)
        dr = dm_t / d + r * (gamma * dh / d + EPS32 + 3 * EPS32 / 2)
        if clip is not None:
            dr = np.where(r > clip + dr, 0.0, dr)
        per_step = np.max(dr.reshape(STEPS, -1), axis=1)
        out.append(lr * float(np.sum(per_step)) + 3 * EPS32 / 2 * u)
    return out


# Unclipped, the first step (h = 0) is m / eps: a large eps keeps it small. The separable
# loss: its curvature h >= 0.5 keeps r away from m / eps (where a last-bit change of m flips a
# clipped step's sign: ill-conditioned, tests/TOLERANCES.md); Hutchinson's estimate with
# random signs is checked in `test_hutchinson_estimator`.
SOPHIA = {
    "default": dict(learning_rate=0.02),
    "every_step": dict(learning_rate=0.05, b2=0.9, gamma=0.5, update_interval=1, eps=1e-4),
    "no_clip": dict(learning_rate=0.01, eps=0.5, gamma=2.0, clip_threshold=None, update_interval=3),
}


@pytest.mark.parametrize("case", sorted(SOPHIA))
def test_sophia_matches_optax(case: str) -> None:
    kwargs = SOPHIA[case]
    params = make_params()
    p, s, _, _ = run_sophia64(optx.sophia(**kwargs), params, separable_loss)
    tx = optax.contrib.sophia(**kwargs)
    b2 = kwargs.get("b2", 0.99)
    probe = sophia_probe(0.965, b2, kwargs.get("gamma", 0.01), kwargs.get("eps", 1e-8))
    q, t, sizes, seen = run_sophia64(tx, params, separable_loss, optax.apply_updates, probe)
    assert_within("params", p, q, sophia_bounds(kwargs, seen, sizes))
    # mu averages the gradients, nu the estimates: 1 - b and b's lag of their terms' size.
    mu_atol = (1 + 0.965 / 0.035) * EPS32 / 2 * float(np.max(seen[0]))
    nu_atol = (1 + b2 / (1 - b2)) * EPS32 / 2 * float(np.max(seen[1]))
    assert_within("mu", s[0].mu, t[0].mu, [mu_atol] * 5)
    assert_within("nu", s[0].nu, t[0].nu, [nu_atol] * 5)
    np.testing.assert_array_equal(s[0].hessian_fn_state.key, t[0].hessian_fn_state.key)


@pytest.mark.parametrize("case", ["schedule_free_adamw", "lookahead", "sophia"])
def test_parity_bounds_catch_a_learning_rate_off_by_1e3(case: str) -> None:
    """The parity bounds above see a learning rate 1.001x too large."""
    params = make_params()
    grads = make_grads(params)
    if case == "schedule_free_adamw":
        kwargs, _, power, schedule, k_lr = SF_ADAMW["warmup"]
        wrong = dict(kwargs, learning_rate=kwargs["learning_rate"] * 1.001)
        p, _, _, _ = run64(optx.schedule_free_adamw(**wrong), params, grads)
        tx = optax.contrib.schedule_free_adamw(**kwargs)
        q, _, _, seen = run64(tx, params, grads, optax.apply_updates, sf_probe)
        atols = sf_bounds(seen, sf_weights(schedule, power), power, k_lr, K_SF_RMS)[0]
    elif case == "lookahead":
        fast = optx.sgd(0.1 * 1.001, momentum=0.9)
        p, _, _, _ = run64(optx.lookahead(fast, 5, 0.5), params, grads)
        with jax.enable_x64(True):
            lp = optax.LookaheadParams.init_synced(
                jax.tree.map(lambda x: jnp.asarray(np.asarray(x, np.float64)), params)
            )
            g64 = jax.tree.map(lambda x: jnp.asarray(np.asarray(x, np.float64)), grads)
            tx = optax.lookahead(optax.sgd(0.1, momentum=0.9), 5, 0.5)

            def step(carry: tuple, g: Any) -> tuple:
                lp, st = carry
                u, st = tx.update(g, st, lp)
                return (optax.apply_updates(lp, u), st), None

            lp, _ = jax.jit(lambda lp, g: jax.lax.scan(step, (lp, tx.init(lp)), g)[0])(lp, g64)
            q = jax.tree.map(np.asarray, lp.fast)
        k = 1 + trace_k(0.9, 0)
        atols = [
            k * EPS32 / 2 * u
            for u in fast_path(optx.sgd(0.1, momentum=0.9), params, grads, 5, False)
        ]
    else:
        kwargs = SOPHIA["every_step"]
        wrong = dict(kwargs, learning_rate=kwargs["learning_rate"] * 1.001)
        p, _, _, _ = run_sophia64(optx.sophia(**wrong), params, separable_loss)
        probe = sophia_probe(0.965, 0.9, 0.5, 1e-4)
        tx = optax.contrib.sophia(**kwargs)
        q, _, sizes, seen = run_sophia64(tx, params, separable_loss, optax.apply_updates, probe)
        atols = sophia_bounds(kwargs, seen, sizes)
    excess = max(
        float(np.max(np.abs(a - e))) / (atol + ROUNDOFF64 * float(np.max(np.abs(e))))
        for a, e, atol in zip(np_tree(p), np_tree(q), atols, strict=True)
    )
    print(f"{case} x 1.001: max error / bound {excess:.3g}")
    assert excess > 10


def np_sophia(
    params: Any,
    lr: float,
    b1: float,
    b2: float,
    eps: float,
    wd: float,
    gamma: float,
    clip: float | None,
    k: int,
) -> list[np.ndarray]:
    a_s, c_s = (np.asarray(v, np.float64) for v in sophia_data())
    ps = np_tree(params)
    ms = [np.zeros_like(p) for p in ps]
    hs = [np.zeros_like(p) for p in ps]
    for t in range(1, STEPS + 1):
        a, c = a_s[t - 1], c_s[t - 1]
        for i, p in enumerate(ps):
            g = a * (p - c) + p**3
            ms[i] = b1 * ms[i] + (1 - b1) * g
            u = ms[i] / (1 - b1**t) / np.maximum(gamma * hs[i], eps)
            if clip is not None:
                u = np.clip(u, -clip, clip)
            if (t - 1) % k == 0:
                hs[i] = b2 * hs[i] + (1 - b2) * (a + 3 * p**2)
            ps[i] = p - lr * (u + wd * p)
    return ps


@pytest.mark.parametrize("clip", [1.0, None])
def test_sophia_matches_numpy(clip: float | None) -> None:
    params = make_params()
    # Unclipped, the first step (h = 0) is m / eps: a large eps keeps it small.
    eps, gamma = (1e-3, 0.2) if clip else (0.5, 1.0)
    kwargs = dict(b1=0.9, b2=0.95, eps=eps, weight_decay=1e-2, gamma=gamma)
    tx = optx.sophia(0.03, **kwargs, clip_threshold=clip, update_interval=4)
    probe = sophia_probe(0.9, 0.95, gamma, eps)
    p, _, sizes, seen = run_sophia64(tx, params, separable_loss, probe=probe)
    expected = np_sophia(params, 0.03, 0.9, 0.95, eps, 1e-2, gamma, clip, 4)
    # The bounds from optx's own float64 run: the reference's to first order.
    bound_args = dict(learning_rate=0.03, b2=0.95, eps=eps, gamma=gamma, update_interval=4)
    atols = sophia_bounds(dict(bound_args, clip_threshold=clip), seen, sizes, b1=0.9)
    assert_within("params", p, expected, atols)


def test_hutchinson_estimator() -> None:
    params = make_params()
    a, c = sophia_data()

    def loss(q: Any) -> jax.Array:
        return coupled_loss(q, a[0], c[0])

    # optax's estimator, with the same key, draws the same signs.
    key = jax.random.PRNGKey(7)
    ours = optx.hutchinson_estimator_diag_hessian(key)
    theirs = optax.contrib.hutchinson_estimator_diag_hessian(key)
    d1, s1 = ours.update(params, ours.init(params), params, obj_fn=loss)
    d2, s2 = theirs.update(params, theirs.init(params), params, obj_fn=loss)
    # v * (H v) in float32: the coupling 0.1 (sum p)**2 adds 0.2 sum v, a sum of signs
    # (exact); a few roundings per element that two programs may contract differently.
    assert_close("diag", d1, d2, roundoff_rtol(steps=1, roundings=6), 0.0)
    np.testing.assert_array_equal(s1.key, s2.key)
    # An int seed is the same key.
    seeded = optx.hutchinson_estimator_diag_hessian(7)
    np.testing.assert_array_equal(seeded.init(params).key, ours.init(params).key)
    # A custom estimator (here optax's) in scale_by_sophia gives the same numbers: in float64
    # the two estimators differ by round-off only.
    p, _, _, _ = run_sophia64(optx.sophia(0.05, hessian_diagonal_fn=theirs), params, coupled_loss)
    q, _, _, _ = run_sophia64(optx.sophia(0.05, hessian_diagonal_fn=ours), params, coupled_loss)
    assert_within("custom estimator", p, q, [0.0] * 5)


# ---------------------------------------------------------------------------------------
# Convergence (jitted, fixed step counts).


def parabola(p: jax.Array) -> jax.Array:
    return jnp.sum((p - jnp.array([1.0, -2.0])) ** 2 * jnp.array([1.0, 4.0]))


def rosenbrock(p: jax.Array) -> jax.Array:
    return (1.0 - p[0]) ** 2 + 100.0 * (p[1] - p[0] ** 2) ** 2


def minimise(
    tx: Any,
    f: Callable[[jax.Array], jax.Array],
    start: Any,
    steps: int,
    obj: bool = False,
    dtype: Any = jnp.float32,
):
    @jax.jit
    def go(p: jax.Array) -> tuple[jax.Array, Any]:
        def step(carry: tuple, _: None) -> tuple:
            p, s = carry
            extra = {"obj_fn": f} if obj else {}
            u, s = tx.update(jax.grad(f)(p), s, p, **extra)
            return (optx.apply_updates(p, u), s), None

        return jax.lax.scan(step, (p, tx.init(p)), None, length=steps)[0]

    return go(jnp.asarray(start, dtype))


PROBLEMS = {"parabola": (parabola, [1.0, -2.0]), "rosenbrock": (rosenbrock, [1.0, 1.0])}


def cosine(peak: float, steps: int) -> Callable[[jax.Array], jax.Array]:
    """A cosine decay from ``peak`` to 0 over ``steps``."""

    def schedule(count: jax.Array) -> jax.Array:
        return peak * 0.5 * (1 + jnp.cos(jnp.pi * jnp.minimum(count, steps) / steps))

    return schedule


def stall(k: np.ndarray, c: np.ndarray, eta: Any) -> float:
    """The largest distance at which a parabola coordinate sum k (p - c)**2 can stall: its
    step eta 2 k d below half an ulp of c rounds away (a moment equals the gradient once the
    point stops); the step is computed in float32 (4 roundings), and where the rate changes
    (Adam's v, Sophia's h) the point may be one ulp behind it.
    """
    ulp = np.spacing(np.abs(np.asarray(c, np.float32))).astype(np.float64)
    return float(np.max(ulp / 2 / (2 * np.asarray(k) * np.asarray(eta)) * (1 + 4 * EPS32) + ulp))


def sophia_parabola(s: Any) -> float:
    """Sophia on the separable parabola: h is the exact curvature 2k (Hutchinson is exact for
    a diagonal Hessian), averaged: the rate lr / (gamma h), with h from the final state.
    """
    return stall(np.array([1.0, 4.0]), np.array([1.0, -2.0]), 0.01 / (0.01 * np.asarray(s[0].nu)))


def sophia_rosenbrock(s: Any) -> float:
    """Sophia on Rosenbrock's valley floor y = x**2 (its steps keep the point there; the
    floor's gradient 2 (1 - x) < 8 = gamma h is not clipped): h averages the Hessian's
    diagonal, 800 x**2 + 2 and 200 there, so the rate lr / (gamma h) moves x by at least
    r1 = 2 / (1802 + 9 * 200) (1 - x) a step for x in [-1.5, 0] and r2 = 2 / (802 + 4 * 200)
    (1 - x) for x in [0, 1]: 1 - x <= exp(-r2 (steps - log(2.5) / r1)), |y - 1| = 2 (1 - x).
    """
    r1, r2 = 2 / (1802 + 9 * 200), 2 / (802 + 4 * 200)
    return 2 * float(np.exp(-r2 * (5000 - np.log(2.5) / r1)))


def adam_parabola(s: Any) -> float:
    """Lookahead's Adam on the parabola: the slow weights follow the fast ones, which stall at
    the rate lr / (sqrt(v_hat) + eps) of the final v (b2 = 0.999, eps = 1e-8).
    """
    fast = s.fast_state[0]
    nu = np.asarray(fast.nu, np.float64) / (1 - 0.999 ** int(fast.count))
    return stall(np.array([1.0, 4.0]), np.array([1.0, -2.0]), 0.02 / (np.sqrt(nu) + 1e-8))


# (optimizer, steps, tolerance on max |p - p*| from the final state), from (-1.5, 2.0).
# Sophia and Lookahead's Adam on the parabola stop where float32 stalls them (`stall`) or
# where the valley's rate gets them (`sophia_rosenbrock`). Schedule-Free is evaluated at its
# average x (`schedule_free_eval_params`), which weighs every iterate equally and so
# converges like 1/t; Schedule-Free SGD, without any preconditioning, crawls along
# Rosenbrock's valley; Lookahead's Adam on Rosenbrock lands with a cosine decay. These have
# no rate that bounds where they stop, so their tolerances come from the run itself
# (NO_RATE, tests/TOLERANCES.md "Convergence thresholds"): the same steps in float64 must end
# within a quarter of the tolerance. A float32 run, on any CPU, is that run perturbed by
# roundings, which would have to multiply its distance by 4 to fail.
CONVERGENCE = {
    "schedule_free_adamw/parabola": (lambda: optx.schedule_free_adamw(0.05), 2000, lambda s: 1e-3),
    "schedule_free_adamw/rosenbrock": (
        lambda: optx.schedule_free_adamw(0.05),
        5000,
        lambda s: 0.06,
    ),
    "schedule_free_sgd/parabola": (lambda: optx.schedule_free_sgd(0.1), 2000, lambda s: 1e-3),
    "schedule_free_sgd/rosenbrock": (lambda: optx.schedule_free_sgd(2e-3), 20000, lambda s: 0.4),
    "sophia/parabola": (lambda: optx.sophia(0.01, weight_decay=0.0), 2000, sophia_parabola),
    "sophia/rosenbrock": (lambda: optx.sophia(0.01, weight_decay=0.0), 5000, sophia_rosenbrock),
    "lookahead/parabola": (lambda: optx.lookahead(optx.adam(0.02), 5, 0.5), 2000, adam_parabola),
    "lookahead/rosenbrock": (
        lambda: optx.lookahead(optx.adam(cosine(0.05, 5000)), 5, 0.5),
        5000,
        lambda s: 1e-3,
    ),
}
NO_RATE = {
    "schedule_free_adamw/parabola",
    "schedule_free_adamw/rosenbrock",
    "schedule_free_sgd/parabola",
    "schedule_free_sgd/rosenbrock",
    "lookahead/rosenbrock",
}


def end_distance(case: str, dtype: Any = jnp.float32) -> tuple[float, Any]:
    """Max |p - p*| after `CONVERGENCE`'s run of ``case`` in ``dtype``, and the final state."""
    make, steps, _ = CONVERGENCE[case]
    name, problem = case.split("/")
    f, minimum = PROBLEMS[problem]
    p, s = minimise(make(), f, [-1.5, 2.0], steps, obj=name == "sophia", dtype=dtype)
    if name.startswith("schedule_free"):
        p = optx.schedule_free_eval_params(s, p)
    elif name == "lookahead":
        p = s.slow
    return float(np.max(np.abs(np.asarray(p, np.float64) - np.asarray(minimum)))), s


@pytest.mark.parametrize("case", sorted(CONVERGENCE))
def test_convergence(case: str) -> None:
    err, s = end_distance(case)
    tol = CONVERGENCE[case][2](s)
    print(f"{case}: |p - p*| = {err:.2g}, tolerance {tol:.2g}")
    assert err <= tol, (case, err)
    if case in NO_RATE:
        with jax.enable_x64(True):
            err64, _ = end_distance(case, jnp.float64)
        print(f"{case}: float64 |p - p*| = {err64:.2g}")
        assert err64 <= tol / 4, (case, err64)


# ---------------------------------------------------------------------------------------
# bfloat16 parameters with float32 state.

BF16_STEPS = 20


def bf16_bounds(p32: Any, sizes: Any, roundings: float) -> list[float]:
    """Per leaf ``2**-8 (roundings max_t max|p_t| + sum_t max|u_t|)``: bfloat16 keeps 8
    significant bits, each rounding of a parameter is off by 2**-8 of it, of an update by
    2**-8 of that; ``max_t |p_t| <= |p_T| + sum_t |u_t|``.
    """
    totals = path(sizes)
    return [
        2.0**-8 * (roundings * (float(np.max(np.abs(p))) + u) + u)
        for p, u in zip(np_tree(p32), totals, strict=True)
    ]


def test_bfloat16_params_stay_close_to_float32() -> None:
    params = make_params()
    grads = jax.tree.map(lambda g: g[:BF16_STEPS], make_grads(params))
    bf16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    as_f32 = jax.tree.map(lambda x: x.astype(jnp.float32), bf16)  # the same starting numbers
    f32 = jnp.float32
    # The gradients are given (they do not depend on the parameters). Schedule-Free rounds y
    # each step; its update pulls y - z back by c_t, so a rounding does not grow; z and the
    # moments are float32 and see the same numbers. Lookahead rounds the fast weights each
    # step and the slow ones at each of the steps / 5 synchronisations.
    cases = {
        "schedule_free_adamw": (
            lambda: optx.schedule_free_adamw(0.05, state_dtype=f32, nu_dtype=f32),
            BF16_STEPS,
        ),
        "lookahead": (
            lambda: optx.lookahead(optx.adam(0.05, mu_dtype=f32, nu_dtype=f32), 5, 0.5),
            BF16_STEPS + BF16_STEPS / 5,
        ),
    }
    for name, (make, roundings) in cases.items():
        p32, s32, sizes, _ = run64_like(make(), as_f32, grads)
        p16, s16 = run(make(), bf16, grads)
        assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16)), name
        slots = s16.z if name.startswith("schedule") else s16.fast_state[0].mu
        assert all(x.dtype == f32 for x in jax.tree.leaves(slots)), name
        atols = bf16_bounds(p32, sizes, roundings)
        check(name, p16, p32, atols)
        if name.startswith("schedule"):
            # x = z + (y - z) / b1 (b1 = 0.9), cast to bfloat16.
            x16, x32 = (optx.schedule_free_eval_params(*a) for a in ((s16, p16), (s32, p32)))
            x_atols = [
                a / 0.9 + 2.0**-8 * float(np.max(np.abs(x)))
                for a, x in zip(atols, np_tree(x32), strict=True)
            ]
            check(name + " eval params", x16, x32, x_atols)
    # Sophia on the separable loss, whose curvature h >= 0.5 keeps m / (gamma h) away from
    # the clip's sign steps; the loss is convex, so a parameter's rounding moves its next
    # gradient to undo it.
    lr = 0.05
    tx = optx.sophia(lr, gamma=1.0, update_interval=1, mu_dtype=f32, nu_dtype=f32)
    p32, _, sizes, _ = run_sophia(tx, as_f32, separable_loss, steps=BF16_STEPS)
    p16, s16, _, _ = run_sophia(tx, bf16, separable_loss, steps=BF16_STEPS)
    assert all(x.dtype == f32 for x in jax.tree.leaves((s16[0].mu, s16[0].nu)))
    check("sophia", p16, p32, bf16_bounds(p32, sizes, BF16_STEPS))


def run64_like(tx: Any, params: Any, grads: Any) -> tuple[Any, Any, Any, Any]:
    """`run` with `run64`'s outputs, in the parameters' own dtype."""

    @jax.jit
    def scan(params: Any, grads: Any) -> tuple:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (optx.apply_updates(p, u), s), jax.tree.map(lambda x: jnp.max(jnp.abs(x)), u)

        (p, s), sizes = jax.lax.scan(step, (params, tx.init(params)), grads)
        return p, s, sizes, None

    return scan(params, grads)


def check(name: str, actual: Any, expected: Any, atols: list[float]) -> None:
    """`assert_close` per leaf with ``atols``; prints the largest error over its bound."""
    worst = 0.0
    for i, (a, e, atol) in enumerate(zip(np_tree(actual), np_tree(expected), atols, strict=True)):
        assert_close(f"{name}[{i}]", a, e, 0.0, atol)
        worst = max(worst, float(np.max(np.abs(a - e))) / atol)
    print(f"{name} bfloat16: max error / bound {worst:.3g}")


# ---------------------------------------------------------------------------------------
# Errors.


def test_schedule_free_errors() -> None:
    sgd = optx.sgd(0.1)
    raises(
        TypeError,
        "`schedule_free` needs base_optimizer to be a transform with `init` and `update` "
        "methods (an optx or optax transform). Received: base_optimizer=0.1.",
        lambda: optx.schedule_free(0.1, 0.1),
    )
    raises(
        ValueError,
        "`schedule_free` needs b1 in (0, 1]. Received: b1=0.0.",
        lambda: optx.schedule_free(sgd, 0.1, b1=0.0),
    )
    raises(
        ValueError,
        "`schedule_free` needs weight_lr_power finite and >= 0. Received: weight_lr_power=-1.0.",
        lambda: optx.schedule_free(sgd, 0.1, weight_lr_power=-1.0),
    )
    raises(
        TypeError,
        "`schedule_free` needs state_dtype to be None or a floating dtype. "
        "Received: state_dtype='int32'.",
        lambda: optx.schedule_free(sgd, 0.1, state_dtype="int32"),
    )
    raises(
        TypeError,
        "`schedule_free` needs apply_learning_rate to be a bool. "
        "Received: apply_learning_rate='yes'.",
        lambda: optx.schedule_free(sgd, 0.1, apply_learning_rate="yes"),
    )
    raises(
        ValueError,
        "`schedule_free` needs schedule_convention to be 'optax' or 'keras'. "
        "Received: schedule_convention='torch'.",
        lambda: optx.schedule_free(sgd, 0.1, schedule_convention="torch"),
    )
    raises(
        ValueError,
        "`schedule_free` needs apply_learning_rate=True to use schedule_convention='keras' "
        "(the base optimizer applies its own learning rate otherwise). "
        "Received: schedule_convention='keras', apply_learning_rate=False.",
        lambda: optx.schedule_free(sgd, 0.1, schedule_convention="keras"),
    )
    raises(
        ValueError,
        "`schedule_free_adamw` needs b1 in (0, 1]. Received: b1=0.0.",
        lambda: optx.schedule_free_adamw(b1=0.0),
    )
    raises(
        ValueError,
        "`schedule_free_adamw` needs warmup_steps to be an int >= 0. Received: warmup_steps=-1.",
        lambda: optx.schedule_free_adamw(warmup_steps=-1),
    )
    raises(
        TypeError,
        "`schedule_free_adamw` needs learning_rate to be a number to add a warmup. "
        "Received: learning_rate=<function parabola>, warmup_steps=3.",
        lambda: optx.schedule_free_adamw(Named(parabola), warmup_steps=3),
    )
    raises(
        ValueError,
        "`schedule_free_adamw` needs learning_rate finite and >= 0. Received: learning_rate=-1.0.",
        lambda: optx.schedule_free_adamw(-1.0, warmup_steps=3),
    )
    raises(
        ValueError,
        "`schedule_free_sgd` needs weight_decay finite and >= 0. Received: weight_decay=-0.1.",
        lambda: optx.schedule_free_sgd(weight_decay=-0.1),
    )

    tx = optx.schedule_free_sgd()
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    raises(
        ValueError,
        "`schedule_free.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
        lambda: tx.update(params, state),
    )
    raises(
        ValueError,
        "`schedule_free.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'w'; not in the state: 'v'.",
        lambda: tx.update({"v": jnp.ones(2)}, state, params),
    )
    raises(
        ValueError,
        "`schedule_free_eval_params` needs a state holding exactly one `schedule_free` "
        "state. Received: a state holding 0.",
        lambda: optx.schedule_free_eval_params(optx.sgd(0.1).init(params), params),
    )
    raises(
        ValueError,
        "`schedule_free_eval_params` needs a state holding exactly one `schedule_free` "
        "state. Received: a state holding 2.",
        lambda: optx.schedule_free_eval_params((state, state), params),
    )
    raises(
        ValueError,
        "`schedule_free_eval_params` needs params with the shapes of the state. "
        "Received: params['w'] of shape (3,), expected (2,).",
        lambda: optx.schedule_free_eval_params(state, {"w": jnp.ones(3)}),
    )


class Named:
    """A callable with a short repr, for messages that show the argument."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __repr__(self) -> str:
        return f"<function {self.fn.__name__}>"


def test_lookahead_errors() -> None:
    sgd = optx.sgd(0.1)
    raises(
        TypeError,
        "`lookahead` needs fast_optimizer to be a transform with `init` and `update` methods "
        "(an optx or optax transform). Received: fast_optimizer=None.",
        lambda: optx.lookahead(None, 2, 0.5),
    )
    raises(
        ValueError,
        "`lookahead` needs sync_period to be an int >= 1. Received: sync_period=0.",
        lambda: optx.lookahead(sgd, 0, 0.5),
    )
    raises(
        ValueError,
        "`lookahead` needs sync_period to be an int >= 1. Received: sync_period=2.0.",
        lambda: optx.lookahead(sgd, 2.0, 0.5),
    )
    raises(
        ValueError,
        "`lookahead` needs slow_step_size in [0, 1]. Received: slow_step_size=1.5.",
        lambda: optx.lookahead(sgd, 2, 1.5),
    )
    raises(
        TypeError,
        "`lookahead` needs reset_state to be a bool. Received: reset_state=1.",
        lambda: optx.lookahead(sgd, 2, 0.5, reset_state=1),
    )
    tx = optx.lookahead(sgd, 2, 0.5)
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    raises(
        ValueError,
        "`lookahead.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
        lambda: tx.update(params, state),
    )
    raises(
        ValueError,
        "`lookahead.update` needs updates with the shapes of the state. "
        "Received: updates['w'] of shape (3,), expected (2,).",
        lambda: tx.update({"w": jnp.ones(3)}, state, params),
    )


def test_sophia_errors() -> None:
    raises(
        ValueError,
        "`sophia` needs b1 in [0, 1). Received: b1=1.0.",
        lambda: optx.sophia(0.1, b1=1.0),
    )
    raises(
        ValueError,
        "`sophia` needs gamma finite and >= 0. Received: gamma=-1.0.",
        lambda: optx.sophia(0.1, gamma=-1.0),
    )
    raises(
        ValueError,
        "`sophia` needs clip_threshold finite and > 0. Received: clip_threshold=0.0.",
        lambda: optx.sophia(0.1, clip_threshold=0.0),
    )
    raises(
        ValueError,
        "`sophia` needs update_interval to be an int >= 1. Received: update_interval=0.",
        lambda: optx.sophia(0.1, update_interval=0),
    )
    raises(
        TypeError,
        "`sophia` needs mu_dtype to be None or a floating dtype. Received: mu_dtype='int8'.",
        lambda: optx.sophia(0.1, mu_dtype="int8"),
    )
    raises(
        TypeError,
        "`scale_by_sophia` needs hessian_diagonal_fn to be a transform with `init` and "
        "`update` methods (an optx or optax transform). Received: hessian_diagonal_fn='h'.",
        lambda: optx.scale_by_sophia(hessian_diagonal_fn="h"),
    )
    raises(
        TypeError,
        "`hutchinson_estimator_diag_hessian` needs random_seed to be an int or one concrete "
        "PRNG key (`jax.random.key(0)` or `jax.random.PRNGKey(0)`). "
        "Received: random_seed='seed'.",
        lambda: optx.hutchinson_estimator_diag_hessian("seed"),
    )
    tx = optx.scale_by_sophia()
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    raises(
        ValueError,
        "`scale_by_sophia.update` needs obj_fn, the loss as a function of the parameters "
        "alone, to estimate the Hessian's diagonal. Received: obj_fn=None. Call "
        "`update(grads, state, params, obj_fn=lambda p: loss(p, batch))`.",
        lambda: tx.update(params, state, params),
    )
    raises(
        ValueError,
        "`scale_by_sophia.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
        lambda: tx.update(params, state, obj_fn=jnp.sum),
    )
    hutchinson = optx.hutchinson_estimator_diag_hessian()
    raises(
        ValueError,
        "`hutchinson_estimator_diag_hessian.update` needs obj_fn, the loss as a function of "
        "the parameters alone, to estimate the Hessian's diagonal. Received: obj_fn=None. "
        "Call `update(grads, state, params, obj_fn=lambda p: loss(p, batch))`.",
        lambda: hutchinson.update(params, hutchinson.init(params), params),
    )
    raises(
        TypeError,
        "`scale_by_sophia.init` needs floating-point params (float16, bfloat16, float32 or "
        "float64). Received: params['w'] of dtype int32. Keep other leaves out of the "
        "optimised tree, or route them to `optx.set_to_zero()` with `optx.partition`.",
        lambda: tx.init({"w": jnp.ones(2, jnp.int32)}),
    )
