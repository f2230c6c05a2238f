"""Schedule-Free learning, Lookahead and Sophia: parity with optax (and Keras), NumPy
reference loops, convergence, bfloat16, and every error message.

Parity and reference runs are 100 steps of one jitted `lax.scan` on a nested float32 pytree
(dicts and a list; matrices, a 3-D kernel, vectors, a scalar) with gradients that change
every step. Errors are measured relative to each leaf's largest entry (`assert_close`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_close as _assert_close

import optx

STEPS = 100
# float32 round-off of the same formulas evaluated in a different order (a few ulps).
RTOL, ATOL = 1e-6, 1e-7
# Where a second-moment bias correction enters: optx's `-expm1(t log1p(-(1 - b)))` is exact
# to round-off, optax's (and Keras's) `1 - float32(b)**t` is up to ~1e-5 (relative) off for
# b = 0.999, which moves the parameters by ~1e-6..1e-5 of their scale in 100 steps.
BC_TOL = 1e-5
# Schedule-Free against optax: optax forms each update as y_t - y_{t-1}, a difference of
# parameter-sized numbers (an ulp of the parameters, 6e-8 of their scale, per step); optx
# from the step and y - z, accurate to the update's own size (it matches the float64
# NumPy loop at RTOL). Over 100 steps optax's round-off reaches ~1e-6 of the scale.
SF_TOL = 5e-6


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


def raises(error: type[Exception], message: str, fn: Callable[[], Any]) -> None:
    with pytest.raises(error) as info:
        fn()
    assert str(info.value) == message


# ---------------------------------------------------------------------------------------
# Schedule-Free: parity with optax.


SF_ADAMW = {
    "constant": dict(learning_rate=0.01, weight_decay=1e-3),
    "warmup": dict(learning_rate=0.02, warmup_steps=10, b1=0.95, weight_lr_power=1.0),
}


@pytest.mark.parametrize("case", sorted(SF_ADAMW))
def test_schedule_free_adamw_matches_optax(case: str) -> None:
    kwargs = SF_ADAMW[case]
    params = make_params()
    grads = make_grads(params)
    p, s = run(optx.schedule_free_adamw(**kwargs), params, grads)
    q, t = run(optax.contrib.schedule_free_adamw(**kwargs), params, grads, optax.apply_updates)
    # scale_by_rms's bias correction (see BC_TOL).
    assert_close("params", p, q, BC_TOL, BC_TOL)
    assert_close("z", s.z, t.z, BC_TOL, BC_TOL)
    assert_close("nu", s.base_optimizer_state[0].nu, t.base_optimizer_state[0].nu, RTOL, ATOL)
    x, y = optx.schedule_free_eval_params(s, p), optax.contrib.schedule_free_eval_params(t, q)
    assert_close("eval params", x, y, BC_TOL, BC_TOL)
    assert_close("scalars", (s.weight_sum, s.max_lr), (t.weight_sum, t.max_lr), RTOL, 0)


def test_schedule_free_sgd_and_wrapper_match_optax() -> None:
    params = make_params()
    grads = make_grads(params)
    kwargs = dict(learning_rate=0.1, warmup_steps=5, b1=0.8, weight_decay=1e-2)
    p, s = run(optx.schedule_free_sgd(**kwargs), params, grads)
    q, t = run(optax.contrib.schedule_free_sgd(**kwargs), params, grads, optax.apply_updates)
    assert_close("sgd params", p, q, SF_TOL, SF_TOL)
    assert_close("sgd z", s.z, t.z, SF_TOL, SF_TOL)
    x, y = optx.schedule_free_eval_params(s, p), optax.contrib.schedule_free_eval_params(t, q)
    assert_close("sgd eval params", x, y, SF_TOL, SF_TOL)

    # The wrapper over a base optimizer holding its own (scheduled) learning rate.
    ours = optx.schedules.warmup_constant_schedule(0.0, 0.05, 8)
    theirs = optax.schedules.warmup_constant_schedule(0.0, 0.05, 8)
    tx = optx.schedule_free(optx.sgd(ours, momentum=0.5), ours, b1=0.9, weight_lr_power=3.0)
    p, s = run(tx, params, grads)
    tx = optax.contrib.schedule_free(optax.sgd(theirs, 0.5), theirs, 0.9, 3.0)
    q, t = run(tx, params, grads, optax.apply_updates)
    assert_close("wrapper params", p, q, SF_TOL, SF_TOL)
    assert_close("wrapper z", s.z, t.z, SF_TOL, SF_TOL)
    trace, trace_optax = s.base_optimizer_state[0].trace, t.base_optimizer_state[0].trace
    assert_close("wrapper trace", trace, trace_optax, RTOL, ATOL)


def test_schedule_free_matches_keras() -> None:
    import keras

    assert keras.backend.backend() == "jax"
    params = make_params()
    grads = make_grads(params)
    steps = 30
    flat = [np.asarray(x) for x in jax.tree.leaves(params)]
    opt = keras.optimizers.ScheduleFreeAdamW(learning_rate=0.01, warmup_steps=5)
    variables = [keras.Variable(x) for x in flat]
    opt.build(variables)
    for t in range(steps):
        gs = [jnp.asarray(g[t]) for g in jax.tree.leaves(grads)]
        opt.apply_gradients(list(zip(gs, variables, strict=True)))
    tx = optx.schedule_free_adamw(
        0.01, warmup_steps=5, weight_lr_power=0.0, schedule_convention="keras"
    )
    p, s = run(tx, params, jax.tree.map(lambda g: g[:steps], grads))
    # Keras's `1 - beta_2**t` in float32 (see BC_TOL).
    assert_close("params", jax.tree.leaves(p), [v.value for v in variables], BC_TOL, BC_TOL)
    assert_close("z", jax.tree.leaves(s.z), [m.value for m in opt._momentums], BC_TOL, BC_TOL)


def test_schedule_free_jit_matches_eager_relative_to_leaf_scale() -> None:
    # The configurations the conformance registry leaves out: their update, a difference of
    # parameter-sized numbers, moves by an ulp of the parameters under XLA's fusion.
    params = make_params()
    grads = [jax.tree.map(lambda g, t=t: g[t], make_grads(params)) for t in range(3)]
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
        assert_close("updates", results[1][0], results[0][0], RTOL, ATOL)
        assert_close("params and z", results[1][1:], results[0][1:], RTOL, ATOL)


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
    p, s = run(tx, params, grads)
    y, x = np_schedule_free_adamw(params, grads, 0.02, 10, 0.9, 0.99, 1e-6, 1e-2, power, convention)
    assert_close("params", p, y, RTOL, ATOL)
    assert_close("eval params", optx.schedule_free_eval_params(s, p), x, RTOL, ATOL)


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
    # b1 = 1 is plain averaging of the z iterates: y = x.
    tx = optx.schedule_free_sgd(0.1, b1=1.0)
    grads = make_grads(params)
    p, s = run(tx, params, grads)
    assert_close("x", optx.schedule_free_eval_params(s, p), p, RTOL, ATOL)


# ---------------------------------------------------------------------------------------
# Lookahead.


@pytest.mark.parametrize("reset_state", [False, True])
def test_lookahead_matches_optax(reset_state: bool) -> None:
    params = make_params()
    grads = make_grads(params)
    for fast, fast_optax, tol in (
        (optx.sgd(0.1, momentum=0.9), optax.sgd(0.1, momentum=0.9), RTOL),
        # Adam's bias correction (see BC_TOL).
        (optx.adam(0.05), optax.adam(0.05), BC_TOL),
    ):
        p, s = run(optx.lookahead(fast, 5, 0.5, reset_state), params, grads)
        tx = optax.lookahead(fast_optax, 5, 0.5, reset_state)

        @jax.jit
        def scan(params: Any, grads: Any, tx: Any = tx) -> tuple[Any, Any]:
            def step(carry: tuple, g: Any) -> tuple:
                lp, st = carry
                u, st = tx.update(g, st, lp)
                return (optax.apply_updates(lp, u), st), None

            lp = optax.LookaheadParams.init_synced(params)
            return jax.lax.scan(step, (lp, tx.init(lp)), grads)[0]

        lp, t = scan(params, grads)
        assert_close("fast", p, lp.fast, tol, tol)
        assert_close("slow", s.slow, lp.slow, tol, tol)
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
    tx = optx.lookahead(optx.sgd(0.05, momentum=0.8), 3, 0.7, reset_state=reset_state)
    p, s = run(tx, params, grads)
    fast, slow = np_lookahead_momentum(params, grads, 0.05, 0.8, 3, 0.7, reset_state)
    assert_close("fast", p, fast, RTOL, ATOL)
    assert_close("slow", s.slow, slow, RTOL, ATOL)


def test_lookahead_reset_keeps_hyperparams() -> None:
    params = {"w": jnp.ones(3)}
    tx = optx.lookahead(optx.adam(0.1), sync_period=2, slow_step_size=0.5, reset_state=True)
    state = optx.set_hyperparams(tx.init(params), learning_rate=0.3, b1=0.5)
    for _ in range(2):
        updates, state = tx.update({"w": jnp.ones(3)}, state, params)
        params = optx.apply_updates(params, updates)
    assert int(state.fast_state[0].count) == 0  # reset at the synchronisation
    hyper = optx.get_hyperparams(state)
    np.testing.assert_allclose([hyper["learning_rate"], hyper["b1"]], [0.3, 0.5], rtol=1e-6)
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


def run_sophia(tx: Any, params: Any, loss: Callable[..., Any], apply=optx.apply_updates):
    @jax.jit
    def scan(params: Any, data: Any) -> tuple[Any, Any]:
        def step(carry: tuple, d: tuple) -> tuple:
            p, s = carry

            def obj_fn(q: Any) -> jax.Array:
                return loss(q, *d)

            u, s = tx.update(jax.grad(obj_fn)(p), s, p, obj_fn=obj_fn)
            return (apply(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), data)[0]

    return scan(params, sophia_data())


# (arguments, tolerance on the parameters). Unclipped, the first step (h = 0) is m / eps:
# a large eps keeps it small; and optax's first-moment bias correction `1 - float32(b1)**t`
# (~1e-6 off, relative) then shows in every update (see BC_TOL): optx matches the float64
# NumPy loop at RTOL (test_sophia_matches_numpy).
SOPHIA = {
    "default": (dict(learning_rate=0.02), RTOL),
    "every_step": (
        dict(learning_rate=0.05, b2=0.9, gamma=0.5, update_interval=1, eps=1e-4),
        RTOL,
    ),
    "no_clip": (
        dict(learning_rate=0.01, eps=0.5, gamma=2.0, clip_threshold=None, update_interval=3),
        BC_TOL,
    ),
}


@pytest.mark.parametrize("case", sorted(SOPHIA))
def test_sophia_matches_optax(case: str) -> None:
    kwargs, tol = SOPHIA[case]
    params = make_params()
    p, s = run_sophia(optx.sophia(**kwargs), params, coupled_loss)
    tx = optax.contrib.sophia(**kwargs)
    q, t = run_sophia(tx, params, coupled_loss, optax.apply_updates)
    assert_close("params", p, q, tol, tol * ATOL / RTOL)
    assert_close("mu", s[0].mu, t[0].mu, tol, tol * ATOL / RTOL)
    assert_close("nu", s[0].nu, t[0].nu, RTOL, ATOL)
    np.testing.assert_array_equal(s[0].hessian_fn_state.key, t[0].hessian_fn_state.key)


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
    p, _ = run_sophia(tx, params, separable_loss)
    expected = np_sophia(params, 0.03, 0.9, 0.95, eps, 1e-2, gamma, clip, 4)
    assert_close("params", p, expected, RTOL, ATOL)


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
    assert_close("diag", d1, d2, RTOL, ATOL)
    np.testing.assert_array_equal(s1.key, s2.key)
    # An int seed is the same key.
    seeded = optx.hutchinson_estimator_diag_hessian(7)
    np.testing.assert_array_equal(seeded.init(params).key, ours.init(params).key)
    # A custom estimator (here optax's) in scale_by_sophia gives the same numbers.
    p, _ = run_sophia(optx.sophia(0.05, hessian_diagonal_fn=theirs), params, coupled_loss)
    q, _ = run_sophia(optx.sophia(0.05, hessian_diagonal_fn=ours), params, coupled_loss)
    assert_close("custom estimator", p, q, RTOL, ATOL)


# ---------------------------------------------------------------------------------------
# Convergence (jitted, fixed step counts).


def parabola(p: jax.Array) -> jax.Array:
    return jnp.sum((p - jnp.array([1.0, -2.0])) ** 2 * jnp.array([1.0, 4.0]))


def rosenbrock(p: jax.Array) -> jax.Array:
    return (1.0 - p[0]) ** 2 + 100.0 * (p[1] - p[0] ** 2) ** 2


def minimise(tx: Any, f: Callable[[jax.Array], jax.Array], start: Any, steps: int, obj=False):
    @jax.jit
    def go(p: jax.Array) -> tuple[jax.Array, Any]:
        def step(carry: tuple, _: None) -> tuple:
            p, s = carry
            extra = {"obj_fn": f} if obj else {}
            u, s = tx.update(jax.grad(f)(p), s, p, **extra)
            return (optx.apply_updates(p, u), s), None

        return jax.lax.scan(step, (p, tx.init(p)), None, length=steps)[0]

    return go(jnp.asarray(start, jnp.float32))


PROBLEMS = {"parabola": (parabola, [1.0, -2.0]), "rosenbrock": (rosenbrock, [1.0, 1.0])}
# (optimizer, problem, steps, tolerance on max |p - p*|), from (-1.5, 2.0). Schedule-Free
# is evaluated at its average x (`schedule_free_eval_params`), which weighs every iterate
# equally and so converges like 1/t; Schedule-Free SGD, without any preconditioning, crawls
# along Rosenbrock's valley: a looser tolerance. Lookahead is evaluated at its slow weights.
CONVERGENCE = {
    "schedule_free_adamw/parabola": (lambda: optx.schedule_free_adamw(0.05), 2000, 1e-3),
    "schedule_free_adamw/rosenbrock": (lambda: optx.schedule_free_adamw(0.05), 5000, 2e-2),
    "schedule_free_sgd/parabola": (lambda: optx.schedule_free_sgd(0.1), 2000, 1e-3),
    "schedule_free_sgd/rosenbrock": (lambda: optx.schedule_free_sgd(2e-3), 20000, 0.15),
    "sophia/parabola": (lambda: optx.sophia(0.01, weight_decay=0.0), 2000, 1e-3),
    "sophia/rosenbrock": (lambda: optx.sophia(0.01, weight_decay=0.0), 5000, 1e-3),
    "lookahead/parabola": (lambda: optx.lookahead(optx.adam(0.02), 5, 0.5), 2000, 1e-3),
    "lookahead/rosenbrock": (lambda: optx.lookahead(optx.adam(0.02), 5, 0.5), 5000, 1e-3),
}


@pytest.mark.parametrize("case", sorted(CONVERGENCE))
def test_convergence(case: str) -> None:
    make, steps, tol = CONVERGENCE[case]
    name, problem = case.split("/")
    f, minimum = PROBLEMS[problem]
    p, s = minimise(make(), f, [-1.5, 2.0], steps, obj=name == "sophia")
    if name.startswith("schedule_free"):
        p = optx.schedule_free_eval_params(s, p)
    elif name == "lookahead":
        p = s.slow
    err = float(np.max(np.abs(np.asarray(p) - np.asarray(minimum))))
    print(f"{case}: |p - p*| = {err:.2g}")
    assert err < tol, (case, err)


# ---------------------------------------------------------------------------------------
# bfloat16 parameters with float32 state.


def test_bfloat16_params_stay_close_to_float32() -> None:
    params = make_params()
    grads = make_grads(params)
    bf16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    f32 = jnp.float32
    cases = {
        "schedule_free_adamw": lambda: optx.schedule_free_adamw(
            0.05, state_dtype=f32, nu_dtype=f32
        ),
        "lookahead": lambda: optx.lookahead(optx.adam(0.05, mu_dtype=f32, nu_dtype=f32), 5, 0.5),
    }
    for name, make in cases.items():
        p32, s32 = run(make(), params, grads)
        p16, s16 = run(make(), bf16, grads)
        assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16)), name
        slots = s16.z if name.startswith("schedule") else s16.fast_state[0].mu
        assert all(x.dtype == f32 for x in jax.tree.leaves(slots)), name
        # bfloat16 keeps 8 significant bits: each of the 100 steps rounds the parameters by
        # up to 2^-9 of their size, and steps about that size move them by whole ulps.
        assert_close(name, p16, p32, 5e-2, 0)
        if name.startswith("schedule"):
            x16, x32 = (optx.schedule_free_eval_params(*a) for a in ((s16, p16), (s32, p32)))
            assert_close(name + " eval params", x16, x32, 5e-2, 0)
    # Sophia's steps are clipped to +-lr: where a small moment changes sign between the two
    # runs, a parameter moves the other way, so the runs stay within a few learning rates.
    lr = 0.05
    tx = optx.sophia(lr, gamma=1.0, update_interval=1, mu_dtype=f32, nu_dtype=f32)
    p32, _ = run_sophia(tx, params, coupled_loss)
    p16, s16 = run_sophia(tx, bf16, coupled_loss)
    assert all(x.dtype == f32 for x in jax.tree.leaves((s16[0].mu, s16[0].nu)))
    assert_close("sophia", p16, p32, 0, 2 * lr)


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
