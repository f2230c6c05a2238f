"""FTRL-Proximal: TensorFlow's formula in a NumPy float64 loop, Keras's `Ftrl`, sparsity,
the dynamic initial accumulator, jit against eager, convergence, bfloat16, and errors.

optax has no FTRL. Runs are 100 steps of one jitted `lax.scan` on a nested pytree with
gradients that change every step; errors are measured relative to each leaf's largest
entry. FTRL's linear term ``z`` is a sum of large terms that cancel (``|z|`` up to tens,
with elements near zero), so an element's error is the round-off of its terms, not of its
own size. The comparisons with the loop and with Keras run in float64 (`run64`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is imported

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import EPS32, assert_close

import optx

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)
# The loop (`np_ftrl`) and Keras take the hyperparameters as optx holds them, float32 values
# (DESIGN D2), and all run in float64. Without l1, FTRL's weight follows
# ``w_t = w_{t-1} - g~_t / q_t`` (``q_t = n_t**p / lr + 2 l2'``: the ``sigma_t w`` terms of
# ``z`` telescope), so the one difference left, optx's float32 ``l2' = l2 + beta / (2 lr)``
# (a division and a sum, L2_ROUNDINGS, where beta > 0; l2 itself otherwise), is a relative
# error of ``q_t`` below ``L2_ROUNDINGS * EPS32 / 2 * 2 l2' / q_t``, which moves each step
# of ``w`` by that much of its size: ``|dw| <= L2_ROUNDINGS * EPS32 / 2 * sum_t
# |w_t - w_{t-1}| 2 l2' / q_t`` per element (`Reference.path`). It reaches ``z`` through
# ``sigma_t w`` and the shrinkage: ``sum_t (2 l2_shrinkage + sigma_t) |dw_{t-1}|``
# (`Reference.z_gain`). With a schedule, ``l2'`` changes with the learning rate, and
# ``(l2'_t - l2'_{t-1}) w`` enters each changing step with both roundings (`schedule`).
# Plus float64 round-off: ROUNDOFF64 of each leaf's scale (32 roundings a step).
L2_ROUNDINGS = 2
ROUNDINGS64 = 32  # float64 roundings of a step's elementwise operations, both sides
ROUNDOFF64 = STEPS * ROUNDINGS64 * EPS64


def make_params() -> dict[str, Any]:
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "dense": {"kernel": normal(3, 4), "bias": normal(4)},
        "blocks": [{"conv": normal(2, 3, 2)}, normal(5)],
        "scale": normal(),
    }


def make_grads(params: Any) -> Any:
    """Per-step gradients (leading axis: step), magnitude swinging between 0.2 and 2.2."""
    rng = np.random.default_rng(1)
    magnitude = 0.2 + 2.0 * np.sin(0.3 * np.arange(STEPS)) ** 2

    def draw(p: jax.Array) -> jax.Array:
        g = rng.standard_normal((STEPS, *p.shape)) * magnitude.reshape((STEPS,) + (1,) * p.ndim)
        return jnp.asarray(g, jnp.float32)

    return jax.tree.map(draw, params)


def run(tx: Any, params: Any, grads: Any) -> tuple[Any, Any]:
    """`STEPS` jitted steps; returns the final params and state."""

    @jax.jit
    def scan(params: Any, grads: Any) -> tuple[Any, Any]:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (optx.apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), grads)[0]

    return scan(params, grads)


def schedule(count: jax.Array) -> jax.Array:
    """A learning rate warming up from 0.02 to 0.2 over 10 steps."""
    return 0.02 * jnp.minimum(count + 1, 10).astype(jnp.float32)


def np_schedule(t: int) -> float:
    """`schedule` at step count ``t``, evaluated in float32 as optx does."""
    return float(np.float32(0.02) * np.float32(min(t + 1, 10)))


# Keras's argument names; "learning_rate" is a number or (optx, NumPy) schedules.
CASES: dict[str, dict[str, Any]] = {
    "default": dict(learning_rate=0.1),
    "regularized": dict(
        learning_rate=0.1,
        learning_rate_power=-0.7,
        initial_accumulator_value=0.5,
        l1_regularization_strength=0.05,
        l2_regularization_strength=0.02,
        l2_shrinkage_regularization_strength=0.03,
        beta=0.5,
    ),
    "constant_rate": dict(
        learning_rate=0.05, learning_rate_power=0.0, l2_regularization_strength=0.1
    ),
    "zero_accumulator": dict(
        learning_rate=0.3, initial_accumulator_value=0.0, l1_regularization_strength=0.01
    ),
    "schedule": dict(learning_rate=(schedule, np_schedule), beta=1.0),
}


def optx_kwargs(case: str) -> dict[str, Any]:
    kwargs = dict(CASES[case])
    if isinstance(kwargs["learning_rate"], tuple):
        kwargs["learning_rate"] = kwargs["learning_rate"][0]
    return kwargs


def f32(x: float) -> float:
    """``x`` rounded to float32, as optx holds a hyperparameter (DESIGN D2)."""
    return float(np.float32(x))


class Reference(NamedTuple):
    """`np_ftrl`'s results, per leaf: the weights ``w``, accumulators ``n``, linear terms
    ``z``, and per element the bounds' ingredients (see the top of the module).
    """

    w: list
    n: list
    z: list
    k: int  # L2_ROUNDINGS where beta > 0, else 0
    path: list  # sum_t |w_t - w_{t-1}| 2 l2' / q_t
    z_gain: list  # sum_t (2 l2_shrinkage + sigma_t) * path_{t-1}
    schedule: list  # sum over changing l2' of 2 (l2'_t + l2'_{t-1}) / q_t * |w_{t-1}|
    z_terms: list  # sum_t (|z_{t-1}| + |g~_t| + (n_t**p + n_{t-1}**p) / lr |w_{t-1}|)
    w_terms: list  # sum_t (z_terms of the step / q_t + |w_t|)
    feedback: list  # sum_t (sigma_t + 2 l2_shrinkage) / q_t
    g_path: list  # sum_t |g_t| / q_t

    def w_atol(self, i: int) -> float:
        return self.k * EPS32 / 2 * float(np.max(self.path[i] + self.schedule[i]))

    def z_atol(self, i: int) -> float:
        return self.k * EPS32 / 2 * float(np.max(self.z_gain[i] + self.schedule[i]))


def np_ftrl(params: Any, grads: Any, case: str, steps: int = STEPS) -> Reference:
    """TF's ApplyFtrlV2 in float64, with the hyperparameters rounded to float32 as optx holds
    them (the schedule evaluated in float32, as optx does).
    """
    c = {
        "learning_rate_power": -0.5,
        "initial_accumulator_value": 0.1,
        "l1_regularization_strength": 0.0,
        "l2_regularization_strength": 0.0,
        "l2_shrinkage_regularization_strength": 0.0,
        "beta": 0.0,
        **CASES[case],
    }
    lr_of = c["learning_rate"]
    if isinstance(lr_of, tuple):
        lr_of = lr_of[1]
    else:
        constant = f32(lr_of)
        lr_of = lambda t: constant  # noqa: E731
    p = -f32(c["learning_rate_power"])
    l1, l2, beta = (
        f32(c[k]) for k in ("l1_regularization_strength", "l2_regularization_strength", "beta")
    )
    shrinkage = 2 * f32(c["l2_shrinkage_regularization_strength"])
    ws = [np.asarray(x, np.float64) for x in jax.tree.leaves(params)]
    gs = [np.asarray(x, np.float64) for x in jax.tree.leaves(grads)]
    ns = [np.full(w.shape, f32(c["initial_accumulator_value"])) for w in ws]
    zs = [np.zeros(w.shape) for w in ws]
    path, z_gain, scheduled, z_terms, w_terms, feedback, g_path = (
        [np.zeros(w.shape) for w in ws] for _ in range(7)
    )
    for t in range(steps):
        lr = lr_of(t)
        l2_eff = l2 + beta / (2 * lr)
        l2_before = l2 + beta / (2 * lr_of(t - 1)) if t else l2_eff
        for i in range(len(ws)):
            g, w, n = gs[i][t], ws[i], ns[i]
            shrunk = g + shrinkage * w
            new_n = n + g * g
            sigma = (new_n**p - n**p) / lr
            terms = np.abs(zs[i]) + np.abs(shrunk) + (new_n**p + n**p) / lr * np.abs(w)
            zs[i] = zs[i] + shrunk - sigma * w
            quadratic = new_n**p / lr + 2 * l2_eff
            z = zs[i]
            # The kernel's form: 0 where |z| <= l1, else (sign(z) l1 - z) / quadratic.
            ws[i] = np.where(np.abs(z) > l1, (np.sign(z) * l1 - z) / quadratic, 0.0)
            ns[i] = new_n
            z_terms[i] += terms
            feedback[i] += (sigma + shrinkage) / quadratic
            g_path[i] += np.abs(g) / quadratic
            w_terms[i] += terms / quadratic + np.abs(ws[i])
            z_gain[i] += (shrinkage + sigma) * path[i]
            path[i] += np.abs(ws[i] - w) * 2 * l2_eff / quadratic
            if l2_eff != l2_before:
                scheduled[i] += 2 * (l2_eff + l2_before) / quadratic * np.abs(w)
    k = L2_ROUNDINGS if beta else 0
    return Reference(ws, ns, zs, k, path, z_gain, scheduled, z_terms, w_terms, feedback, g_path)


def run64(tx: Any, params: Any, grads: Any) -> tuple[Any, Any]:
    """`run` in float64 (`jax.enable_x64`); NumPy trees out (compared outside x64:
    tests/TOLERANCES.md).
    """
    with jax.enable_x64(True):
        params, grads = jax.tree.map(
            lambda x: jnp.asarray(np.asarray(x, np.float64)), (params, grads)
        )
        return jax.tree.map(np.asarray, run(tx, params, grads))


def optx_kwargs32(case: str) -> dict[str, Any]:
    """`optx_kwargs` with the numbers rounded to float32 (they are all held so)."""
    return {k: f32(v) if isinstance(v, float) else v for k, v in optx_kwargs(case).items()}


def check_against(name: str, ref: Reference, w: list, n: list, z: list, expected=None) -> None:
    """Weights, accumulators and linear terms against ``expected`` (``ref``'s by default)
    with ``ref``'s bounds (see the top of the module); the accumulators are sums of the same
    squares: float64 round-off.
    """
    w_ref, n_ref, z_ref = (ref.w, ref.n, ref.z) if expected is None else expected
    for i, (a, e) in enumerate(zip(w, w_ref, strict=True)):
        assert_close(f"{name} params", a, e, ROUNDOFF64, ref.w_atol(i))
    assert_close(f"{name} accumulator", n, n_ref, ROUNDOFF64)
    for i, (a, e) in enumerate(zip(z, z_ref, strict=True)):
        assert_close(f"{name} linear", a, e, ROUNDOFF64, ref.z_atol(i))


@pytest.mark.parametrize("case", sorted(CASES))
def test_ftrl_matches_tensorflow_formula_in_numpy(case: str) -> None:
    params = make_params()
    grads = make_grads(params)
    p, state = run64(optx.ftrl(**optx_kwargs(case)), params, grads)
    ref = np_ftrl(params, grads, case)
    assert all(x.dtype == np.float64 for x in jax.tree.leaves(p))
    leaves = jax.tree.leaves
    check_against(case, ref, leaves(p), leaves(state[0].accumulator), leaves(state[0].linear))
    assert int(state[0].count) == STEPS


@pytest.mark.parametrize("case", ["default", "regularized"])
def test_bounds_catch_a_learning_rate_off_by_1e3(case: str) -> None:
    """The weights' bounds see a learning rate 1.001x too large."""
    params = make_params()
    grads = make_grads(params)
    kwargs = optx_kwargs(case)
    kwargs["learning_rate"] *= 1.001
    p, _ = run64(optx.ftrl(**kwargs), params, grads)
    ref = np_ftrl(params, grads, case)
    errors = [
        float(np.max(np.abs(a - e))) / (ref.w_atol(i) + ROUNDOFF64 * float(np.max(np.abs(e))))
        for i, (a, e) in enumerate(zip(jax.tree.leaves(p), ref.w, strict=True))
    ]
    print(f"{case}, learning rate x 1.001: max error / bound {max(errors):.3g}")
    assert max(errors) > 10


@pytest.mark.parametrize("case", ["regularized", "zero_accumulator"])
def test_ftrl_matches_keras(case: str) -> None:
    """`keras.optimizers.Ftrl` (JAX backend, float64), stepped with its jitted
    `stateless_apply`, given the hyperparameters as optx holds them (float32 values; Keras
    keeps its learning rate in a float32 variable).
    """
    import keras

    assert keras.backend.backend() == "jax"
    params = make_params()
    grads = make_grads(params)
    p, state = run64(optx.ftrl(**optx_kwargs(case)), params, grads)

    with jax.enable_x64(True):
        leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(params)]
        variables = [keras.Variable(x, dtype="float64") for x in leaves]
        opt = keras.optimizers.Ftrl(**optx_kwargs32(case))
        opt.build(variables)
        weights, slots = [v.value for v in variables], [v.value for v in opt.variables]
        apply = jax.jit(opt.stateless_apply)
        g_leaves = [np.asarray(g, np.float64) for g in jax.tree.leaves(grads)]
        for t in range(STEPS):
            weights, slots = apply(slots, [g[t] for g in g_leaves], weights)
        position = {id(v): i for i, v in enumerate(opt.variables)}
        accumulators = [np.asarray(slots[position[id(v)]]) for v in opt._accumulators]
        linears = [np.asarray(slots[position[id(v)]]) for v in opt._linears]
        weights = [np.asarray(w) for w in weights]
    assert all(w.dtype == np.float64 for w in weights)
    # Keras computes l2' in float64 from the same values, as the loop does: the loop's
    # bounds apply between optx and Keras.
    ref = np_ftrl(params, grads, case)
    state, leaves = state[0], jax.tree.leaves
    got = leaves(p), leaves(state.accumulator), leaves(state.linear)
    check_against(f"{case} vs keras", ref, *got, expected=(weights, accumulators, linears))


def test_l1_gives_exact_zeros() -> None:
    params = make_params()
    grads = make_grads(params)
    p, state = run(optx.ftrl(0.1, l1_regularization_strength=5.0), params, grads)
    w = np.concatenate([np.ravel(x) for x in jax.tree.leaves(p)])
    z = np.concatenate([np.ravel(x) for x in jax.tree.leaves(state[0].linear)])
    small = np.abs(z) <= 5.0
    assert 5 <= small.sum() <= small.size - 5  # both kinds occur
    np.testing.assert_array_equal(w[small], 0.0)  # exact zeros, through apply_updates
    assert np.all(w[~small] != 0.0)


def test_initial_accumulator_value_is_read_at_the_first_update() -> None:
    params = make_params()
    grads = make_grads(params)
    tx = optx.ftrl(0.1)
    # Set between `init` and the first update: the same as building with that value.
    state = optx.set_hyperparams(tx.init(params), initial_accumulator_value=0.7)
    step = jax.jit(tx.update)
    g0 = jax.tree.map(lambda g: g[0], grads)
    u, _ = step(g0, state, params)
    other = optx.ftrl(0.1, initial_accumulator_value=0.7)
    u_other, _ = jax.jit(other.update)(g0, other.init(params), params)
    assert_close("updates", u, u_other, 0.0, 0.0)
    # Set after the first update: no effect (the accumulator has started).
    _, s1 = step(g0, tx.init(params), params)
    g1 = jax.tree.map(lambda g: g[1], grads)
    a, _ = step(g1, s1, params)
    b, _ = step(g1, optx.set_hyperparams(s1, initial_accumulator_value=0.7), params)
    assert_close("updates", a, b, 0.0, 0.0)


def test_ftrl_vmaps_over_the_initial_accumulator() -> None:
    # In float64: both sides hold the same float32 values, and differ by no more than float64
    # round-off (ROUNDINGS64 a step) of the update's terms (see `test_jit_equals_eager`).
    with jax.enable_x64(True):
        params = {"w": jnp.array([1.0, -2.0])}
        tx = optx.ftrl(0.5)
        g = {"w": jnp.array([0.3, -0.1])}

        def first_update(value: jax.Array) -> jax.Array:
            state = optx.set_hyperparams(tx.init(params), initial_accumulator_value=value)
            return tx.update(g, state, params)[0]["w"]

        swept = np.asarray(jax.vmap(first_update)(jnp.array([0.1, 1.0])))
        singles = []
        for v in (0.1, 1.0):
            single = optx.ftrl(0.5, initial_accumulator_value=v)
            singles.append(np.asarray(single.update(g, single.init(params), params)[0]["w"]))
    assert swept.dtype == np.float64
    for i, v in enumerate((0.1, 1.0)):
        n, w = f32(v), np.array([1.0, -2.0])
        new_n = n + np.array([0.3, -0.1]) ** 2
        terms = 0.3 + (np.sqrt(new_n) + np.sqrt(n)) / f32(0.5) * np.abs(w)
        atol = ROUNDINGS64 * EPS64 * float(np.max(terms / (np.sqrt(new_n) / f32(0.5)) + w))
        assert_close(f"first update, n0 = {v}", swept[i], singles[i], 0.0, atol)


@pytest.mark.parametrize("case", ["regularized", "schedule"])
def test_jit_equals_eager(case: str) -> None:
    """In float64: XLA fuses multiply-adds under jit, which changes the float64 round-off of
    each step, ROUNDINGS64 roundings (two sides) of its terms: of ``z``'s terms for ``z``
    (elements near 0 have the error of their large terms), ``z``'s over ``q`` and ``w``'s
    for the weights (`Reference.z_terms`, `w_terms`); the weights' errors do not grow
    (``w_t = w_{t-1} - g~_t / q_t``, see the top of the module).
    """
    params = make_params()
    steps = 5
    grads = make_grads(params)
    tx = optx.ftrl(**optx_kwargs(case))
    with jax.enable_x64(True):
        p64, g64 = jax.tree.map(lambda x: jnp.asarray(np.asarray(x, np.float64)), (params, grads))
        step = jax.jit(tx.update)
        pe = pj = p64
        se = sj = tx.init(p64)
        for t in range(steps):
            g = jax.tree.map(lambda x, t=t: x[t], g64)
            ue, se = tx.update(g, se, pe)
            uj, sj = step(g, sj, pj)
            pe, pj = optx.apply_updates(pe, ue), optx.apply_updates(pj, uj)
        pe, pj, se, sj = jax.tree.map(np.asarray, (pe, pj, se, sj))
    ref = np_ftrl(params, grads, case, steps)
    leaves = jax.tree.leaves
    for a, e, terms in zip(leaves(pj), leaves(pe), ref.w_terms, strict=True):
        assert a.dtype == np.float64
        assert_close("params", a, e, 0.0, ROUNDINGS64 * EPS64 * float(np.max(terms)))
    for a, e, terms in zip(leaves(sj[0].linear), leaves(se[0].linear), ref.z_terms, strict=True):
        assert_close("linear", a, e, 0.0, ROUNDINGS64 * EPS64 * float(np.max(terms)))
    # Sums of the same squares: ROUNDINGS64 roundings a step of their size.
    assert_close("accumulator", sj[0].accumulator, se[0].accumulator, steps * ROUNDINGS64 * EPS64)
    assert int(sj[0].count) == int(se[0].count) == steps


def test_clipping_before_ftrl_clips_its_gradient() -> None:
    params = make_params()
    grads = make_grads(params)
    clipped = optx.chain(optx.clip(0.5), optx.ftrl(0.1))
    p, _ = run(clipped, params, grads)
    q, _ = run(optx.ftrl(0.1), params, jax.tree.map(lambda g: jnp.clip(g, -0.5, 0.5), grads))
    assert_close("params", p, q, 0.0, 0.0)


# ---------------------------------------------------------------------------------------
# Convergence, bfloat16.

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
            u, s = tx.update(jax.grad(f)(x), s, x)
            return (optx.apply_updates(x, u), s), None

        return jax.lax.scan(step, (x0, tx.init(x0)), length=steps)[0][0]

    return go(x0)


def minimise_with_state(
    tx: Any, f: Callable[[jax.Array], jax.Array], x0: jax.Array, steps: int
) -> tuple[jax.Array, Any]:
    @jax.jit
    def go(x0: jax.Array) -> tuple:
        def step(carry: tuple, _: Any) -> tuple:
            x, s = carry
            u, s = tx.update(jax.grad(f)(x), s, x)
            return (optx.apply_updates(x, u), s), None

        return jax.lax.scan(step, (x0, tx.init(x0)), length=steps)[0]

    return go(x0)


# Where FTRL stops in float32. Near a minimum the accumulator ``n`` stops growing (``g**2``
# is below its spacing), so ``sigma = 0`` and ``z`` takes ``z + g`` each step: it stalls once
# ``|g| <= spacing(z) / 2``. The weight ``w = -z / q`` then stays, within ``|g| / curvature``
# of the minimum (plus the gradient's own float32 error), and its rounding, half a spacing
# of ``w``. Both are read from the final state.


def stall_distance(z: np.ndarray, grad_error: float, curvature: float, w: np.ndarray) -> float:
    """``(|spacing(z) / 2| + grad_error) / curvature + |spacing(w)|``, with ``|.|`` the
    Euclidean norm over the coordinates: a bound on ``max|x - x*|`` at the stall.
    """
    g = np.linalg.norm(np.spacing(np.abs(z).astype(np.float32)) / 2) + grad_error
    return float(g / curvature + np.linalg.norm(np.spacing(np.abs(w).astype(np.float32))))


def test_converges_on_a_parabola() -> None:
    # Separable, curvatures 2 * CURVATURE (at least 0.2); the gradient 2 c (x - x*) is exact
    # to a rounding of its size. Linear convergence at Adagrad's final rate reaches the
    # stall well within 2000 steps.
    x, state = minimise_with_state(optx.ftrl(1.0), parabola, jnp.zeros(3), 2000)
    z = np.asarray(state[0].linear)
    err = np.abs(np.asarray(x, np.float64) - np.asarray(CENTER))
    bound = (np.spacing(np.abs(z)) / 2) / (2 * np.asarray(CURVATURE)) + np.spacing(
        np.abs(np.asarray(CENTER, np.float32))
    )
    print(f"|x - x*| = {err}, bound {bound}")
    assert np.all(err <= bound)


# Rosenbrock's Hessian at (1, 1) is [[802, -400], [-400, 200]]: its smallest eigenvalue,
# 0.3994, bounds |x - x*| by |g| / 0.3994 near the minimum. The float32 gradient's error
# there: ``y - x**2`` carries the rounding of ``x**2`` (half a spacing of 1, 1.2e-7), times
# 400 x in g_x and 200 in g_y: 5.4e-5 in norm.
ROSENBROCK_CURVATURE = 0.3994
ROSENBROCK_GRAD_ERROR = float(np.hypot(400, 200)) * float(np.spacing(np.float32(1.0)))


def test_converges_on_rosenbrock() -> None:
    # Adagrad-like steps along the flat valley: 20000 steps. z grows to ~1e3, whose float32
    # spacing (6e-5) swamps the valley's tiny gradients: it stalls at ~1e-4 (`stall_distance`).
    x, state = minimise_with_state(optx.ftrl(1.0), rosenbrock, jnp.array([-1.5, 2.0]), 20000)
    z, w = np.asarray(state[0].linear), np.asarray(x)
    bound = stall_distance(z, ROSENBROCK_GRAD_ERROR, ROSENBROCK_CURVATURE, w)
    err = float(np.max(np.abs(np.asarray(x, np.float64) - 1.0)))
    print(f"|x - x*| = {err:.3g}, bound {bound:.3g}")
    assert err <= bound


def test_bfloat16_params_with_float32_accumulators_stay_close() -> None:
    params = make_params()
    grads = make_grads(params)
    kwargs = optx_kwargs("regularized")
    p32, _ = run(optx.ftrl(**kwargs), params, grads)
    tx = optx.ftrl(**kwargs, accumulator_dtype=jnp.float32)
    p16, s16 = run(
        tx,
        jax.tree.map(lambda x: x.astype(jnp.bfloat16), params),
        jax.tree.map(lambda x: x.astype(jnp.bfloat16), grads),
    )
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(s16[0].linear))
    # FTRL recomputes the weight from (z, n) each step: ``w_t = w_{t-1} - g~_t / q_t`` (see
    # the top of the module). A bfloat16 rounding (at most BF16_ROUNDING of the value) of
    # ``w_{t-1}`` enters ``z`` only through ``sigma_t w`` and the shrinkage, and so reaches
    # ``w_t`` scaled by ``(sigma_t + 2 l2_shrinkage) / q_t`` (`Reference.feedback`); each
    # rounded gradient moves ``w`` by BF16_ROUNDING of ``|g_t| / q_t`` (`g_path`); and the
    # result is rounded once more. The float32 run's round-off is far below.
    ref = np_ftrl(params, grads, "regularized")
    for i, (a, e) in enumerate(zip(jax.tree.leaves(p16), jax.tree.leaves(p32), strict=True)):
        w = float(np.max(np.abs(ref.w[i])))
        spread = w * (1 + float(np.max(ref.feedback[i]))) + float(np.max(ref.g_path[i]))
        assert_close("bf16 vs f32", a, e, 0.0, BF16_ROUNDING * spread)


BF16_ROUNDING = 2.0**-8  # half a spacing of bfloat16 (8 significant bits), relative


# ---------------------------------------------------------------------------------------
# Errors.


def check(error: type[Exception], message: str, fn: Callable[[], Any]) -> None:
    with pytest.raises(error) as info:
        fn()
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            dict(learning_rate=0.0),
            ValueError,
            "`ftrl` needs learning_rate finite and > 0. Received: learning_rate=0.0.",
        ),
        (
            dict(learning_rate_power=0.5),
            ValueError,
            "`ftrl` needs learning_rate_power finite and <= 0. Received: learning_rate_power=0.5.",
        ),
        (
            dict(initial_accumulator_value=-0.1),
            ValueError,
            "`ftrl` needs initial_accumulator_value finite and >= 0. "
            "Received: initial_accumulator_value=-0.1.",
        ),
        (
            dict(l1_regularization_strength=-1.0),
            ValueError,
            "`ftrl` needs l1_regularization_strength finite and >= 0. "
            "Received: l1_regularization_strength=-1.0.",
        ),
        (
            dict(l2_regularization_strength=-1.0),
            ValueError,
            "`ftrl` needs l2_regularization_strength finite and >= 0. "
            "Received: l2_regularization_strength=-1.0.",
        ),
        (
            dict(l2_shrinkage_regularization_strength=float("inf")),
            ValueError,
            "`ftrl` needs l2_shrinkage_regularization_strength finite and >= 0. "
            "Received: l2_shrinkage_regularization_strength=inf.",
        ),
        (
            dict(beta=-0.5),
            ValueError,
            "`ftrl` needs beta finite and >= 0. Received: beta=-0.5.",
        ),
        (
            dict(accumulator_dtype=jnp.int32),
            TypeError,
            "`ftrl` needs accumulator_dtype to be None or a floating dtype. "
            "Received: accumulator_dtype=<class 'jax.numpy.int32'>.",
        ),
    ],
)
def test_construction_errors(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    args = {"learning_rate": 0.1, **kwargs}
    check(error, message, lambda: optx.ftrl(**args))
    # The building block names itself.
    check(error, message.replace("`ftrl`", "`scale_by_ftrl`"), lambda: optx.scale_by_ftrl(**args))


def test_update_needs_params() -> None:
    tx = optx.ftrl(0.1)
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    check(
        ValueError,
        "`scale_by_ftrl.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
        lambda: tx.update(params, state),
    )
    check(
        ValueError,
        "`scale_by_ftrl.update` needs params with the shapes of the state. "
        "Received: params['w'] of shape (3,), expected (2,).",
        lambda: tx.update(params, state, {"w": jnp.ones(3)}),
    )
