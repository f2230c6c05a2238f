"""optax.contrib's second batch in `optx.contrib`: MADGRAD, ACProp, Simplified AdEMAMix,
SAM and `normalize`, GaLore, DP-SGD and `split_real_and_imaginary`.

Parity with optax.contrib over 100 jitted steps on a nested pytree, both sides in float64
(`run64`), with hyperparameters float32 holds exactly (powers of two, ``1 - b`` too), so
that optx's float32 hyperparameters (DESIGN D2) are the same numbers as optax's. What is
left, per case:

* float64 round-off: ROUNDOFF64 of each leaf's scale (32 roundings a step, and a matrix
  product's ``n`` terms where there is one);
* scalars optx computes once per step in float32 (a bias correction through ``expm1`` /
  ``log1p``: 3 roundings, 1 more for its inverse, halved through a square root; MADGRAD's
  ``(lr + eps) sqrt(k + 1)``: 3), each off by ``EPS32 / 2`` per rounding, bounded as
  tests/TOLERANCES.md says: ``k * EPS32 / 2 * sum_t max|u_t|`` per leaf (the float64 run's
  updates), or MADGRAD's own bound (`numpy_madgrad`).

`test_bounds_catch_a_learning_rate_off_by_1e3` checks that a 1.001x learning rate lands far
outside these bounds. Every error message of these modules has a test at the end.
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Any

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib
import pytest
from helpers import EPS32, assert_close

import optx

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)
ROUNDOFF64 = STEPS * 32 * EPS64
# Hyperparameters float32 holds exactly.
LR, B1, B2, EPS = 2.0**-7, 0.875, 0.9375, 2.0**-20
WD = 2.0**-5


def nested_params() -> Any:
    """A nested float32 pytree: dicts and a list, a matrix, a 3-D kernel, a scalar."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    # Three leaves (compiling a 100-step scan costs about a second per leaf and side).
    return {
        "dense": {"kernel": normal(6, 4)},
        "blocks": [{"conv": normal(2, 3, 5)}],
        "scale": normal(),
    }


def step_grads(params: Any, steps: int = STEPS, seed: int = 1, batch: int = 0) -> Any:
    """Per-step gradients (leading axis: step; then ``batch`` examples if given)."""
    rng = np.random.default_rng(seed)
    magnitude = 0.2 + 2.0 * np.sin(0.3 * np.arange(steps)) ** 2
    extra = (batch,) if batch else ()

    def draw(p: jax.Array) -> jax.Array:
        shape = (steps, *extra, *p.shape)
        g = rng.standard_normal(shape) * magnitude.reshape((steps,) + (1,) * (len(shape) - 1))
        return jnp.asarray(g, jnp.float32)

    return jax.tree.map(draw, params)


def kernel_mask(params: Any) -> Any:
    """Decay the rank-2 leaves only (a callable both libraries accept)."""
    return jax.tree.map(lambda p: jnp.ndim(p) == 2, params)


def alpha_schedule(count: jax.Array) -> jax.Array:
    """0.5, 1, 1.5, ... capped at 4: exact in float32."""
    return jnp.minimum(0.5 * (jnp.asarray(count) + 1.0), 4.0)


def run64(tx: Any, apply_updates: Any, params: Any, grads: Any) -> tuple:
    """``tx`` over the steps of ``grads`` in float64 (`jax.enable_x64`), one jitted scan.

    Returns NumPy trees: the final parameters and, per parameter leaf, ``sum_t max|u_t|``
    (not the state: optax's DP state holds a typed key, which NumPy refuses).
    """
    with jax.enable_x64(True):
        params, grads = jax.tree.map(
            lambda x: jnp.asarray(np.asarray(x, np.float64)), (params, grads)
        )

        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (apply_updates(p, u), s), jax.tree.map(lambda x: jnp.max(jnp.abs(x)), u)

        @jax.jit
        def go(params: Any, grads: Any) -> tuple:
            (p, _), sizes = jax.lax.scan(step, (params, tx.init(params)), grads)
            return p, jax.tree.map(jnp.sum, sizes)

        return jax.tree.map(np.asarray, go(params, grads))


def galore_dims(lib: Any) -> Any:
    """Project the kernel as it is and the 3-D conv as (2, 3 * 5); not the scalar."""
    d = lib.contrib.GaLoreDimensionNumbers
    return {"dense": {"kernel": d()}, "blocks": [{"conv": d(0, (1, 2))}], "scale": None}


def galore_base() -> Any:
    # optax's Adam in both: the comparison then sees GaLore's maths only.
    return optax.scale_by_adam(B1, B2, eps=EPS)


# case: (optx, optax, k: float32 roundings of each update (see the module docstring)).
PARITY = {
    "acprop": (
        lambda: optx.contrib.acprop(LR, B1, B2, EPS, 2.0**-30, WD, kernel_mask),
        lambda: optax.contrib.acprop(LR, B1, B2, EPS, 2.0**-30, WD, kernel_mask),
        # The previous step's 1 / (1 - b2^(t-1)): 3 + 1 roundings, halved by the root.
        2,
    ),
    "simplified_ademamix_schedule": (
        lambda: optx.contrib.simplified_ademamix(LR, 0.5, B2, alpha_schedule, mask=kernel_mask),
        lambda: optax.contrib.simplified_ademamix(LR, 0.5, B2, alpha_schedule, mask=kernel_mask),
        2,
    ),
    "sam": (
        lambda: optx.contrib.sam(
            optx.sgd(LR), optx.chain(optx.contrib.normalize(), optx.sgd(2.0**-4))
        ),
        lambda: optax.contrib.sam(
            optax.sgd(LR), optax.chain(optax.contrib.normalize(), optax.sgd(2.0**-4))
        ),
        0,  # no float32 scalar
    ),
    "sam_adam_no_reset": (
        lambda: optx.contrib.sam(
            optax.adam(LR, B1, B2, EPS),
            optax.chain(optx.contrib.normalize(), optax.sgd(2.0**-4, momentum=0.5)),
            sync_period=3,
            reset_state=False,
        ),
        lambda: optax.contrib.sam(
            optax.adam(LR, B1, B2, EPS),
            optax.chain(optax.contrib.normalize(), optax.sgd(2.0**-4, momentum=0.5)),
            sync_period=3,
            reset_state=False,
        ),
        0,  # optax's own optimizers inside optx's SAM
    ),
    "galore": (
        lambda: optx.contrib.galore(
            LR, 2, 7, 0.5, galore_base(), WD, kernel_mask, galore_dims(optx)
        ),
        lambda: optax.contrib.galore(
            LR, 2, 7, 0.5, galore_base(), WD, kernel_mask, galore_dims(optax)
        ),
        0,  # optax's Adam inside optx's GaLore
    ),
    "dpsgd": (
        lambda: optx.contrib.dpsgd(LR, 1.0, 0.5, seed=3, momentum=B1, nesterov=True),
        lambda: optax.contrib.dpsgd(LR, 1.0, 0.5, seed=3, momentum=B1, nesterov=True),
        0,  # the same key splits give the same noise (std 0.5: any other noise fails)
    ),
}


def case_data(case: str) -> tuple[Any, Any]:
    params = nested_params()
    if case == "dpsgd":
        # Each leaf's noise is a threefry draw that XLA:CPU takes a second to compile: two
        # leaves (a nested dict, a matrix and a scalar), three examples a step.
        params = {"dense": params["dense"], "scale": params["scale"]}
        return params, step_grads(params, batch=3)
    return params, step_grads(params)


@functools.cache
def optax64(case: str) -> tuple:
    """optax's float64 run of `PARITY` ``case``, shared by two tests."""
    with pytest.warns(DeprecationWarning) if case == "dpsgd" else contextlib.nullcontext():
        return run64(PARITY[case][1](), optax.apply_updates, *case_data(case))


def bounds(k: float, path: Any) -> list[float]:
    """Per parameter leaf: ``k * EPS32 / 2 * sum_t max|u_t|``."""
    return [k * EPS32 / 2 * float(u) for u in jax.tree.leaves(path)]


# GaLore's projections add matrix products of up to 30 terms (the 3-D kernel seen as 6 x 5).
ROUNDOFF64_PRODUCTS = STEPS * (32 + 2 * 30) * EPS64


@pytest.mark.parametrize("case", sorted(PARITY))
def test_matches_optax(case: str) -> None:
    make, _, k = PARITY[case]
    ours, _ = run64(make(), optx.apply_updates, *case_data(case))
    theirs, path = optax64(case)
    leaves = zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), bounds(k, path), strict=True)
    for a, e, atol in leaves:
        assert a.dtype == np.float64
        assert_close(f"{case} params", a, e, ROUNDOFF64_PRODUCTS, atol)


def test_bounds_catch_a_learning_rate_off_by_1e3() -> None:
    """A 1.001x learning rate lands far outside `test_matches_optax`'s bound (the loosest)."""
    case = "acprop"
    make, _, k = PARITY[case]
    wrong = optx.chain(make(), optx.scale(1.001))
    ours, _ = run64(wrong, optx.apply_updates, *case_data(case))
    theirs, path = optax64(case)
    ratios = [
        float(np.max(np.abs(a - e))) / (atol + ROUNDOFF64_PRODUCTS * float(np.max(np.abs(e))))
        for a, e, atol in zip(
            jax.tree.leaves(ours), jax.tree.leaves(theirs), bounds(k, path), strict=True
        )
    ]
    print(f"x 1.001: max error / bound {max(ratios):.3g}")
    assert max(ratios) > 10


# ---------------------------------------------------------------------------------------
# MADGRAD: its float32 step scalar needs its own bound (from a float64 NumPy loop).


def numpy_madgrad(x0, grads, lr, momentum, eps, wd):
    """MADGRAD in float64 (Defazio and Jelassi's algorithm 1, optax's eps placement).

    Returns the parameters of every step and, per element, ``max_k S_k / sigma_k`` with
    ``S_k = sum_j lambda_j |g_j|``: a relative error ``d`` of each ``lambda_j`` moves
    ``s / sigma`` by at most ``(3 d S + d |s|) / sigma``-ish (see `test_madgrad_matches`).
    """
    x, big_g, s, worst = x0.copy(), np.zeros_like(x0), np.zeros_like(x0), np.zeros_like(x0)
    s_abs, out = np.zeros_like(x0), []
    for k, g in enumerate(grads):
        g = g + wd * x
        lamb = (lr + eps) * np.sqrt(k + 1)
        big_g, s, s_abs = big_g + lamb * g**2, s + lamb * g, s_abs + lamb * np.abs(g)
        sigma = np.cbrt(big_g) + eps
        z = x0 - s / sigma
        x = (1 - momentum) * z + momentum * x
        worst = np.maximum(worst, s_abs / sigma)
        out.append(x)
    return np.stack(out), worst


def test_madgrad_matches_optax_and_numpy() -> None:
    """MADGRAD's ``lambda_k = (lr + eps) sqrt(k + 1)``: optx computes it in float32 (3
    roundings: the sum, the root, the product) and optax perhaps the root (1): each
    ``lambda_k`` off by ``d <= 4 EPS32 / 2`` relative. Then ``G`` (a sum of positive terms)
    is off by ``d`` relative, its cube root by ``d / 3``, ``s = sum lambda_j g_j`` by ``d
    S`` with ``S = sum lambda_j |g_j|``; so ``z = x0 - s / sigma`` by ``(d + d / 3) S /
    sigma`` and the parameters, an average of the ``z`` with weights summing to at most 1,
    by ``2 d max_k S_k / sigma_k`` (rounded up). Plus float64 round-off.
    """
    lr, momentum, eps, wd = LR, B1, 2.0**-20, WD
    params = {"w": nested_params()["dense"]["kernel"], "b": nested_params()["scale"]}
    grads = step_grads(params)
    tx = optx.contrib.madgrad(lr, momentum, wd, eps)
    ours, _ = run64(tx, optx.apply_updates, params, grads)
    theirs, _ = run64(
        optax.contrib.madgrad(lr, momentum, wd, eps), optax.apply_updates, params, grads
    )
    for name in ("w", "b"):
        x0 = np.asarray(params[name], np.float64)
        ref, worst = numpy_madgrad(x0, np.asarray(grads[name], np.float64), lr, momentum, eps, wd)
        atol = 2 * 4 * EPS32 / 2 * float(np.max(worst))
        assert_close(f"madgrad {name} vs optax", ours[name], theirs[name], ROUNDOFF64, atol)
        assert_close(f"madgrad {name} vs numpy", ours[name], ref[-1], ROUNDOFF64, atol)
        # The bound is tight enough to see a 1.001x learning rate.
        wrong, _ = numpy_madgrad(x0, np.asarray(grads[name]), 1.001 * lr, momentum, eps, wd)
        assert np.max(np.abs(wrong - ref)) > 10 * (atol + ROUNDOFF64 * np.max(np.abs(ref)))


def test_madgrad_keeps_x0_and_sums() -> None:
    params = {"w": jnp.array([1.0, -1.0])}
    tx = optx.contrib.scale_by_madgrad(0.5, eps=0.0)
    state = tx.init(params)
    g = {"w": jnp.array([2.0, 1.0])}
    _, state = tx.update(g, state, params)
    _, state = tx.update(g, state, params)
    lamb = 0.5 * (1 + np.sqrt(2))
    np.testing.assert_allclose(state.s["w"], lamb * np.array([2.0, 1.0]), rtol=1e-6)
    np.testing.assert_allclose(state.grad_sum_sq["w"], lamb * np.array([4.0, 1.0]), rtol=1e-6)
    np.testing.assert_array_equal(state.x0["w"], params["w"])
    assert int(state.count) == 2


# ---------------------------------------------------------------------------------------
# SAM: opaque mode, normalize, states.


def test_sam_opaque_mode_matches_optax() -> None:
    """With ``opaque_mode`` one update runs the whole cycle through ``grad_fn``."""
    target = {"a": jnp.array([1.0, -2.0, 0.5]), "b": jnp.array([[0.3, 0.0], [1.0, -1.0]])}

    def loss(p: Any, i: int) -> jax.Array:
        return sum(
            jnp.sum((x - t) ** 4) * (1 + i)
            for x, t in zip(jax.tree.leaves(p), jax.tree.leaves(target), strict=True)
        )

    grad_fn = jax.grad(loss)
    params = jax.tree.map(jnp.zeros_like, target)

    def run(tx: Any, apply: Any) -> Any:
        with jax.enable_x64(True):
            p = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params)
            state = tx.init(p)
            step = jax.jit(lambda g, s, p: tx.update(g, s, p, grad_fn=grad_fn))
            for _ in range(5):
                u, state = step(grad_fn(p, 0), state, p)
                p = apply(p, u)
            return jax.tree.map(np.asarray, p), state

    def make(lib: Any, contrib: Any) -> Any:
        adv = lib.chain(contrib.normalize(), lib.sgd(2.0**-3))
        return contrib.sam(lib.sgd(2.0**-5), adv, sync_period=3, opaque_mode=True)

    ours, state = run(make(optx, optx.contrib), optx.apply_updates)
    theirs, _ = run(make(optax, optax.contrib), optax.apply_updates)
    # Float64 round-off only: 5 steps, each 3 gradient evaluations of ~10 roundings.
    assert_close("sam opaque", ours, theirs, 5 * 3 * 32 * EPS64)
    assert state.cache is None and int(state.steps_since_sync) == 0


def test_sam_returns_to_the_cycle_start() -> None:
    """The outer step's update undoes the climb: params land at start + outer update."""
    adv = optx.chain(optx.contrib.normalize(), optx.sgd(0.5))
    tx = optx.contrib.sam(optx.sgd(0.25), adv, sync_period=2)
    params = jnp.array([3.0, 4.0])
    state = tx.init(params)
    u, state = tx.update(jnp.array([3.0, 4.0]), state, params)
    np.testing.assert_allclose(u, [0.3, 0.4], rtol=1e-6)  # up by 0.5 along g / |g|
    params = params + u
    u, state = tx.update(jnp.array([1.0, 2.0]), state, params)
    np.testing.assert_allclose(params + u, [3.0 - 0.25, 4.0 - 0.5], rtol=1e-6)
    assert int(state.steps_since_sync) == 0


def test_sam_reset_keeps_the_adversary_hyperparameters() -> None:
    adv = optx.chain(optx.contrib.normalize(), optx.sgd(0.5, momentum=0.5))
    tx = optx.contrib.sam(optx.sgd(0.25), adv)
    params = jnp.ones(2)
    state = tx.init(params)
    state = state._replace(adv_state=optx.set_hyperparams(state.adv_state, learning_rate=0.125))
    for _ in range(2):
        _, state = tx.update(jnp.ones(2), state, params)
    assert float(optx.get_hyperparams(state.adv_state)["learning_rate"]) == 0.125
    np.testing.assert_array_equal(state.adv_state[1][0].trace, np.zeros(2))  # restarted


def test_normalize_matches_optax_and_is_the_global_norm() -> None:
    g = {"a": jnp.array([3.0, 0.0]), "b": [jnp.array([[4.0]])]}
    ours = optx.contrib.normalize().update(g, optx.contrib.normalize().init(g))[0]
    theirs = optax.contrib.normalize().update(g, optax.contrib.normalize().init(g))[0]
    # One division by the same norm of exactly representable squares: the same numbers.
    jax.tree.map(np.testing.assert_array_equal, ours, theirs)
    assert optx.contrib.NormalizeState is optx.EmptyState


# ---------------------------------------------------------------------------------------
# GaLore: the default base optimizer, shapes, dimension numbers.


def test_galore_default_base_is_scale_by_adam() -> None:
    assert optx.contrib.scale_by_galore().base_optimizer == optx.scale_by_adam()
    params = {"w": jnp.ones((5, 3)), "v": jnp.ones((3, 4, 2)), "b": jnp.ones(3)}
    tx = optx.contrib.scale_by_galore(rank=2)
    state = tx.init(params)
    assert state.projector["w"].shape == (5, 2)  # m >= n: left vectors
    assert state.projector["v"] is None and state.projector["b"] is None
    assert state.base_optimizer_state.mu["w"].shape == (2, 3)
    dims = optx.contrib.GaLoreDimensionNumbers(reduction_axis=(0, 2), output_axis=1)
    tree = {"w": None, "v": dims, "b": None}
    state = optx.contrib.scale_by_galore(rank=2, weight_dimension_numbers=tree).init(params)
    assert state.projector["v"].shape == (6, 2)  # (3 * 2) x 4: left vectors
    assert state.base_optimizer_state.mu["v"].shape == (2, 4)


def test_galore_dimension_numbers_tree_and_callable() -> None:
    params = {"w": jnp.ones((2, 6)), "u": jnp.ones((4, 4))}
    d = optx.contrib.GaLoreDimensionNumbers()
    tree = {"w": d, "u": None}
    # Adam with decays float32 holds exactly: optax's float32 bias corrections are exact too.
    adam = (optx.scale_by_adam(B1, B2, EPS), optax.scale_by_adam(B1, B2, EPS))
    tx = optx.contrib.scale_by_galore(rank=1, base_optimizer=adam[0], weight_dimension_numbers=tree)
    same = optx.contrib.scale_by_galore(
        rank=1, base_optimizer=adam[0], weight_dimension_numbers=tree
    )
    assert hash(tx) == hash(same) and tx == same
    state = tx.init(params)
    assert state.projector["w"].shape == (6, 1) and state.projector["u"] is None
    grads = {"w": jnp.arange(12.0).reshape(2, 6), "u": jnp.ones((4, 4))}
    theirs = optax.contrib.scale_by_galore(
        rank=1, base_optimizer=adam[1], weight_dimension_numbers=tree
    )
    u, _ = jax.jit(tx.update)(grads, state)
    u_ref, _ = theirs.update(grads, theirs.init(params))
    # float32: Adam's first step is sign-like; one rank-1 projection and back.
    assert_close("galore tree", u, u_ref, helpers.roundoff_rtol(1, 16, 12))
    tx_fn = optx.contrib.scale_by_galore(rank=1, weight_dimension_numbers=lambda p: tree)
    assert tx_fn.init(params).projector["w"].shape == (6, 1)


# ---------------------------------------------------------------------------------------
# Differential privacy: clipping and noise (the same noise as optax: `test_matches_optax`).


def test_dp_aggregate_clips_per_example_exactly() -> None:
    tx = optx.contrib.differentially_private_aggregate(1.0, 0.0, key=0)
    grads = {"a": jnp.array([[3.0], [0.0], [0.0]]), "b": jnp.array([[4.0], [0.5], [0.0]])}
    u, state = tx.update(grads, tx.init(None))
    # Norms 5, 0.5, 0: factors 0.2, 1, 1 (0 / 0 keeps the example); sum / 3.
    np.testing.assert_allclose(u["a"], [0.6 / 3], rtol=1e-7)
    np.testing.assert_allclose(u["b"], [(0.8 + 0.5) / 3], rtol=1e-7)
    assert state.rng_key.dtype == jnp.uint32


def test_dp_aggregate_noise_statistics() -> None:
    """Zero gradients: the update is pure noise of standard deviation clip * multiplier / B."""
    tx = optx.contrib.differentially_private_aggregate(2.0, 0.5, key=jax.random.key(7))
    grads = {"w": jnp.zeros((4, 20000))}
    u, _ = tx.update(grads, tx.init(None))
    std = 2.0 * 0.5 / 4
    # 20,000 draws: the sample mean's standard error is std / 141, the sample standard
    # deviation's std / 200; 5 standard errors.
    assert abs(float(jnp.mean(u["w"]))) < 5 * std / 141
    assert abs(float(jnp.std(u["w"])) - std) < 5 * std / 200


# ---------------------------------------------------------------------------------------
# Complex parameters.


def test_split_real_and_imaginary_matches_optax_and_real_pairs() -> None:
    rng = np.random.default_rng(3)
    z = rng.standard_normal((STEPS, 3, 2)) + 1j * rng.standard_normal((STEPS, 3, 2))
    w0 = np.array([[1 + 2j, -1j], [0.5, 2 - 1j], [0j, 3 + 0j]])

    def run(tx: Any, apply: Any, params: Any, grads: Any) -> Any:
        with jax.enable_x64(True):

            def step(carry: Any, g: Any) -> Any:
                p, s = carry
                u, s = tx.update(g, s, p)
                return (apply(p, u), s), None

            params = jax.tree.map(jnp.asarray, params)
            p, _ = jax.jit(lambda p, gs: jax.lax.scan(step, (p, tx.init(p)), gs)[0])(
                params, jax.tree.map(jnp.asarray, grads)
            )
            return jax.tree.map(np.asarray, p)

    adam = (LR, B1, B2, EPS)
    params, grads = {"z": w0, "r": w0.real.copy()}, {"z": z, "r": z.real.copy()}
    ours = run(
        optx.contrib.split_real_and_imaginary(optx.adam(*adam)), optx.apply_updates, params, grads
    )
    theirs = run(
        optax.contrib.split_real_and_imaginary(optax.adam(*adam)),
        optax.apply_updates,
        params,
        grads,
    )
    pairs = run(
        optx.adam(*adam), optx.apply_updates, (w0.real, w0.imag, w0.real), (z.real, z.imag, z.real)
    )
    assert ours["z"].dtype == np.complex128 and ours["r"].dtype == np.float64
    # The same optx Adam on each part as on the pairs: float64 round-off only (another
    # program may contract another a * b + c).
    assert_close("split vs pairs", [ours["z"].real, ours["z"].imag, ours["r"]], pairs, ROUNDOFF64)
    # Adam's float32 bias corrections (3 + 1 roundings, 2 through the root): 5 roundings
    # of each update, at most lr * 3.6 here (Cauchy-Schwarz on b1 = 0.875, b2 = 0.9375).
    atol = STEPS * 5 * EPS32 / 2 * LR * 3.6
    assert_close(
        "split vs optax", ours["z"].view(np.float64), theirs["z"].view(np.float64), ROUNDOFF64, atol
    )


# ---------------------------------------------------------------------------------------
# Errors.


def test_errors() -> None:
    with pytest.raises(ValueError, match=re.escape("`madgrad` needs momentum in [0, 1)")):
        optx.contrib.madgrad(0.1, momentum=1.0)
    with pytest.raises(ValueError, match=re.escape("`scale_by_madgrad.update` needs the current")):
        tx = optx.contrib.scale_by_madgrad(0.1)
        tx.update({"w": jnp.ones(1)}, tx.init({"w": jnp.ones(1)}))
    with pytest.raises(ValueError, match=re.escape("`acprop` needs b2 in [0, 1)")):
        optx.contrib.acprop(0.1, b2=1.0)
    with pytest.raises(ValueError, match=re.escape("`simplified_ademamix` needs alpha finite")):
        optx.contrib.simplified_ademamix(0.1, alpha=-1.0)
    sgd = optx.sgd(0.1)
    with pytest.raises(TypeError, match=re.escape("`sam` needs adv_optimizer to be a transform")):
        optx.contrib.sam(sgd, "sgd")
    with pytest.raises(ValueError, match=re.escape("`sam` needs sync_period to be an int >= 1.")):
        optx.contrib.sam(sgd, sgd, sync_period=0)
    with pytest.raises(TypeError, match=re.escape("`sam` needs batch_axis_name to be None or")):
        optx.contrib.sam(sgd, sgd, batch_axis_name=1)
    with pytest.raises(TypeError, match=re.escape("`sam` needs opaque_mode to be a bool.")):
        optx.contrib.sam(sgd, sgd, opaque_mode="yes")
    tx = optx.contrib.sam(sgd, sgd, opaque_mode=True)
    p = jnp.ones(2)
    with pytest.raises(ValueError, match=re.escape("`sam.update` needs grad_fn, a function")):
        tx.update(p, tx.init(p), p)
    with pytest.raises(ValueError, match=re.escape("`sam.update` needs the current parameters")):
        tx.update(p, tx.init(p))
    with pytest.raises(
        TypeError, match=re.escape("`split_real_and_imaginary` needs inner to be a transform")
    ):
        optx.contrib.split_real_and_imaginary(None)


def test_galore_errors() -> None:
    with pytest.raises(ValueError, match=re.escape("`galore` needs rank to be an int >= 1.")):
        optx.contrib.galore(0.1, rank=0)
    with pytest.raises(
        ValueError, match=re.escape("`scale_by_galore` needs rank to be an int >= 1.")
    ):
        optx.contrib.scale_by_galore(rank=2.0)
    with pytest.raises(ValueError, match=re.escape("`galore` needs update_proj_gap to be an int")):
        optx.contrib.galore(0.1, update_proj_gap=0)
    with pytest.raises(TypeError, match=re.escape("`galore` needs base_optimizer to be a")):
        optx.contrib.galore(0.1, base_optimizer=3)
    dims = optx.contrib.GaLoreDimensionNumbers
    tx = optx.contrib.scale_by_galore(weight_dimension_numbers={"w": dims()})
    with pytest.raises(ValueError, match=re.escape("needs parameters of rank >= 2 where it")):
        tx.init({"w": jnp.ones(3)})
    tx = optx.contrib.scale_by_galore(weight_dimension_numbers=dims(0, (0, 1)))
    with pytest.raises(ValueError, match=re.escape("needs reduction_axis and output_axis to")):
        tx.init({"w": jnp.ones((2, 3))})
    tx = optx.contrib.scale_by_galore(weight_dimension_numbers=dims(0, 1))
    with pytest.raises(ValueError, match=re.escape("needs reduction_axis and output_axis to")):
        tx.init({"w": jnp.ones((2, 3, 4))})
    tx = optx.contrib.scale_by_galore(weight_dimension_numbers={"v": dims()})
    with pytest.raises(ValueError, match=re.escape("needs weight_dimension_numbers with the")):
        tx.init({"w": jnp.ones((2, 3))})


def test_dp_errors() -> None:
    with pytest.raises(
        ValueError, match=re.escape("`differentially_private_aggregate` needs l2_norm_clip")
    ):
        optx.contrib.differentially_private_aggregate(-1.0, 1.0)
    with pytest.raises(ValueError, match=re.escape("`dpsgd` needs noise_multiplier finite")):
        optx.contrib.dpsgd(0.1, 1.0, -1.0, seed=0)
    with pytest.raises(ValueError, match=re.escape("needs one of key and seed, not both")):
        optx.contrib.differentially_private_aggregate(1.0, 1.0, key=0, seed=1)
    with pytest.raises(TypeError, match=re.escape("`dpsgd` needs nesterov to be a bool.")):
        optx.contrib.dpsgd(0.1, 1.0, 1.0, seed=0, nesterov="no")
    tx = optx.contrib.differentially_private_aggregate(1.0, 1.0)
    with pytest.raises(ValueError, match=re.escape("needs per-example gradients: every leaf")):
        tx.update({"a": jnp.ones((2, 3)), "b": jnp.ones((3,))}, tx.init(None))
    with pytest.raises(ValueError, match=re.escape("Received shapes: {'a': (2, 3), 'b': ()}")):
        tx.update({"a": jnp.ones((2, 3)), "b": jnp.ones(())}, tx.init(None))
