"""FTRL-Proximal: TensorFlow's formula in a NumPy float64 loop, Keras's `Ftrl`, sparsity,
the dynamic initial accumulator, jit against eager, convergence, bfloat16, and errors.

optax has no FTRL. Runs are 100 steps of one jitted `lax.scan` on a nested float32 pytree
with gradients that change every step; errors are measured relative to each leaf's
largest entry. FTRL's linear term ``z`` is a sum of large terms that cancel (``|z|`` up to
tens, with elements near zero), so an element's error is the round-off of its terms, not
of its own size: relative to the leaf's scale it is float32 round-off.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is imported

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close

import optx

STEPS = 100
# float32 round-off relative to each leaf's scale after 100 steps (observed against float64:
# up to 5.5e-7 on the parameters and the slots; against Keras in float32: up to 7.3e-7, and
# the accumulators bit for bit).
RTOL, ATOL = 1e-6, 1e-7


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
    return 0.02 * min(t + 1, 10)


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


# learning_rate_power = -0.7: float32 `x ** 0.7` (exp and log) is a few ulps off, and z
# takes differences of such powers times w over 100 steps: 1.1e-6 of the leaf's scale
# observed (on z); -0.5 and 0 stay within RTOL.
TOLERANCES = {"regularized": 3e-6}


def optx_kwargs(case: str) -> dict[str, Any]:
    kwargs = dict(CASES[case])
    if isinstance(kwargs["learning_rate"], tuple):
        kwargs["learning_rate"] = kwargs["learning_rate"][0]
    return kwargs


def np_ftrl(params: Any, grads: Any, case: str) -> tuple[list, list, list]:
    """TF's ApplyFtrlV2 in float64: returns the parameters, accumulators and linear terms."""
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
    lr_of = lr_of[1] if isinstance(lr_of, tuple) else (lambda t, v=lr_of: v)
    p = -c["learning_rate_power"]
    l1 = c["l1_regularization_strength"]
    ws = [np.asarray(x, np.float64) for x in jax.tree.leaves(params)]
    gs = [np.asarray(x, np.float64) for x in jax.tree.leaves(grads)]
    ns = [np.full(w.shape, c["initial_accumulator_value"]) for w in ws]
    zs = [np.zeros(w.shape) for w in ws]
    for t in range(STEPS):
        lr = lr_of(t)
        l2 = c["l2_regularization_strength"] + c["beta"] / (2 * lr)
        for i in range(len(ws)):
            g, w, n = gs[i][t], ws[i], ns[i]
            shrunk = g + 2 * c["l2_shrinkage_regularization_strength"] * w
            new_n = n + g * g
            zs[i] = zs[i] + shrunk - (new_n**p - n**p) / lr * w
            quadratic = new_n**p / lr + 2 * l2
            z = zs[i]
            # The kernel's form: 0 where |z| <= l1, else (sign(z) l1 - z) / quadratic.
            ws[i] = np.where(np.abs(z) > l1, (np.sign(z) * l1 - z) / quadratic, 0.0)
            ns[i] = new_n
    return ws, ns, zs


@pytest.mark.parametrize("case", sorted(CASES))
def test_ftrl_matches_tensorflow_formula_in_numpy(case: str) -> None:
    params = make_params()
    grads = make_grads(params)
    p, state = run(optx.ftrl(**optx_kwargs(case)), params, grads)
    ws, ns, zs = np_ftrl(params, grads, case)
    rtol = TOLERANCES.get(case, RTOL)
    assert_close("params", p, ws, rtol, ATOL)
    assert_close("accumulator", state[0].accumulator, ns, rtol, ATOL)
    assert_close("linear", state[0].linear, zs, rtol, ATOL)
    assert int(state[0].count) == STEPS


@pytest.mark.parametrize("case", ["regularized", "zero_accumulator"])
def test_ftrl_matches_keras(case: str) -> None:
    """`keras.optimizers.Ftrl` (JAX backend), stepped with its jitted `stateless_apply`."""
    import keras

    assert keras.backend.backend() == "jax"
    params = make_params()
    grads = make_grads(params)
    p, state = run(optx.ftrl(**optx_kwargs(case)), params, grads)

    leaves = jax.tree.leaves(params)
    variables = [keras.Variable(x) for x in leaves]
    opt = keras.optimizers.Ftrl(**CASES[case])
    opt.build(variables)
    weights, slots = [v.value for v in variables], [v.value for v in opt.variables]
    apply = jax.jit(opt.stateless_apply)
    g_leaves = jax.tree.leaves(grads)
    for t in range(STEPS):
        weights, slots = apply(slots, [g[t] for g in g_leaves], weights)
    position = {id(v): i for i, v in enumerate(opt.variables)}
    accumulators = [slots[position[id(v)]] for v in opt._accumulators]
    linears = [slots[position[id(v)]] for v in opt._linears]
    rtol = TOLERANCES.get(case, RTOL)
    assert_close("params", p, weights, rtol, ATOL)
    assert_close("accumulator", state[0].accumulator, accumulators, rtol, ATOL)
    assert_close("linear", state[0].linear, linears, rtol, ATOL)


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
    params = {"w": jnp.array([1.0, -2.0])}
    tx = optx.ftrl(0.5)
    g = {"w": jnp.array([0.3, -0.1])}

    def first_update(value: jax.Array) -> jax.Array:
        state = optx.set_hyperparams(tx.init(params), initial_accumulator_value=value)
        return tx.update(g, state, params)[0]["w"]

    values = jnp.array([0.1, 1.0])
    swept = jax.vmap(first_update)(values)
    for i, v in enumerate([0.1, 1.0]):
        single = optx.ftrl(0.5, initial_accumulator_value=v)
        np.testing.assert_allclose(
            swept[i], single.update(g, single.init(params), params)[0]["w"], rtol=1e-6
        )


@pytest.mark.parametrize("case", ["regularized", "schedule"])
def test_jit_equals_eager(case: str) -> None:
    """To float32 round-off of each leaf's scale: XLA fuses multiply-adds under jit, which
    moves near-zero elements of ``z`` by the round-off of its large terms.
    """
    params = make_params()
    grads = [jax.tree.map(lambda g, t=t: g[t], make_grads(params)) for t in range(5)]
    tx = optx.ftrl(**optx_kwargs(case))
    step = jax.jit(tx.update)
    pe = pj = params
    se = sj = tx.init(params)
    for g in grads:
        ue, se = tx.update(g, se, pe)
        uj, sj = step(g, sj, pj)
        pe, pj = optx.apply_updates(pe, ue), optx.apply_updates(pj, uj)
    assert_close("params", pj, pe, RTOL, ATOL)
    assert_close("state", sj, se, RTOL, ATOL)


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


def test_converges_on_a_parabola() -> None:
    x = minimise(optx.ftrl(1.0), parabola, jnp.zeros(3), 2000)
    assert float(jnp.max(jnp.abs(x - CENTER))) < 1e-5  # observed 5e-7


def test_converges_on_rosenbrock() -> None:
    # Adagrad-like steps along the flat valley: 20000 steps. z grows to ~1e3, whose float32
    # spacing (~1e-4) swamps the valley's tiny gradients: it stalls at ~1.1e-4.
    x = minimise(optx.ftrl(1.0), rosenbrock, jnp.array([-1.5, 2.0]), 20000)
    assert float(jnp.max(jnp.abs(x - 1.0))) < 1e-3


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
    # FTRL recomputes the weight from (z, n) each step, so bfloat16 rounding of the weight
    # does not accumulate: within a few bfloat16 spacings (2**-8 relative) of each leaf's
    # scale, through the feedback of the rounded weight into z (observed: 1.1e-2).
    assert_close("bf16 vs f32", p16, p32, 3e-2, 0.0)


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
