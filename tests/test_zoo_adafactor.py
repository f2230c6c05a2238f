"""Adafactor: `scale_by_factored_rms`, `scale_by_param_block_rms` and `adafactor`.

Parity with optax (100 jitted steps), float64 NumPy reference loops of both conventions
(optax's and Keras's), parity with Keras's own `Adafactor`, convergence, bfloat16, state
layout and every error message of the family.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, roundoff_rtol
from helpers import assert_close as _close

import optx

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)
# Float64 round-off of a float64 run (`_run64`): 32 roundings a step of each leaf's scale.
ROUNDOFF64 = STEPS * 32 * EPS64

# Parity with optax, with the NumPy loops and with Keras runs in float64 (`_run64`): the
# differences left are optx's float32 hyperparameters (DESIGN D2), each off by at most
# EPS32 / 2 relative, and the decay ``b_t = 1 - t**-decay_rate``, which optx (and optax)
# compute in float32. ``k`` counts the roundings a step's update goes through, as in
# tests/test_zoo_adam.py: 1 for a learning rate, epsilon, clipping threshold, parameter
# scale floor, weight decay; a momentum b = 0.9 its lag, 9, and 1 for 1 - b; 2 for the
# momentum kept in float32 (``dtype_momentum``). The parameters are then off by at most
# ``k * EPS32 / 2 * sum_t max|u_t|`` per leaf, plus ROUNDOFF64 of each leaf's scale; an
# update 1.001x too large lands 600x outside (`test_bounds_catch_an_update_off_by_1e3`).
#
# ``b_t`` against a float64 one (the NumPy loops, Keras): b_t in [0.5, 1) rounds by at most
# EPS32 / 4 absolutely, so ``1 - b_t = t**-decay_rate`` by EPS32 / 4 / (1 - b_t), up to
# ``steps**decay_rate / 2`` roundings at the last step, and its lag (the product of b over
# the average's window, ~``1 / (1 - b_t)`` steps) as many again; halved through the root:
# ``steps**decay_rate / 2``, plus 3 for the float32 power (`k_decay`). optx against optax,
# both in float32 from the same power: only the power's few ulps, relative to 1 - b_t, and
# as many for the lag (`K_DECAY32`).
K_DECAY32 = 3 + 3


def k_decay(decay_rate: float, steps: int = STEPS) -> float:
    """The roundings of the float32 decay ``b_t`` against a float64 one (see above)."""
    return steps**decay_rate / 2 + 3


def _params() -> dict[str, Any]:
    """Matrices, vectors, a scalar, a 3-D kernel and a 128 x 136 matrix, nested."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "dense": {"kernel": normal(3, 4), "bias": normal(4)},
        # The two largest axes of (5, 2, 3) are 0 and 2, the last two 1 and 2.
        "blocks": [{"conv": normal(5, 2, 3)}, normal(5)],
        "scale": normal(),
        "big": normal(128, 136),
    }


def _grads(params: Any, steps: int = STEPS) -> Any:
    """Per-step gradients (leading axis: step) whose magnitude swings between 0.2 and 2.2."""
    rng = np.random.default_rng(1)
    magnitude = 0.2 + 2.0 * np.sin(0.3 * np.arange(steps)) ** 2

    def draw(p: jax.Array) -> jax.Array:
        g = rng.standard_normal((steps, *p.shape)) * magnitude.reshape((steps,) + (1,) * p.ndim)
        return jnp.asarray(g, jnp.float32)

    return jax.tree.map(draw, params)


def _run(tx: Any, apply_updates: Any, params: Any, grads: Any) -> tuple[Any, Any]:
    """``STEPS`` updates under one `jax.jit` of a `lax.scan`; the final params and state."""

    def run(params: Any, grads: Any) -> tuple[Any, Any]:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), grads)[0]

    return jax.jit(run)(params, grads)


def _run64(tx: Any, apply_updates: Any, params: Any, grads: Any) -> tuple:
    """`_run` in float64 (`jax.enable_x64`); NumPy trees out (compared outside x64, see
    tests/TOLERANCES.md), and per parameter leaf ``sum_t max|u_t|`` and ``max_t max|u_t|``.
    """
    with jax.enable_x64(True):
        params, grads = jax.tree.map(
            lambda x: jnp.asarray(np.asarray(x, np.float64)), (params, grads)
        )

        def run(params: Any, grads: Any) -> tuple:
            def step(carry: tuple, g: Any) -> tuple:
                p, s = carry
                u, s = tx.update(g, s, p)
                return (apply_updates(p, u), s), jax.tree.map(lambda x: jnp.max(jnp.abs(x)), u)

            (p, s), sizes = jax.lax.scan(step, (params, tx.init(params)), grads)
            return p, s, jax.tree.map(jnp.sum, sizes), jax.tree.map(jnp.max, sizes)

        return jax.tree.map(np.asarray, jax.jit(run)(params, grads))


def _check_params(name: str, ours: Any, expected: Any, k: float, path: Any) -> None:
    """Per leaf ``k * EPS32 / 2 * sum_t max|u_t|`` (``path``), plus ROUNDOFF64."""
    leaves = zip(
        jax.tree.leaves(ours), jax.tree.leaves(expected), jax.tree.leaves(path), strict=True
    )
    for a, e, u in leaves:
        assert np.asarray(a).dtype == np.float64
        _close(name, a, e, ROUNDOFF64, k * EPS32 / 2 * float(u))


def _mask(params: Any) -> Any:
    """Decay the matrices only."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def _schedule(count: jax.Array) -> jax.Array:
    return 0.05 * 0.98 ** count.astype(jnp.float32)


# --------------------------------------------------------------------------------------
# Parity with optax.

# (optx or optax) -> transform; its k in `PARITY_K`.
PARITY = {
    "defaults": lambda m: m.adafactor(),
    "factored_momentum_decay": lambda m: m.adafactor(
        1e-2,
        min_dim_size_to_factor=2,
        decay_rate=0.6,
        momentum=0.9,
        weight_decay_rate=1e-3,
        weight_decay_mask=_mask,
    ),
    "schedule_unclipped_unscaled": lambda m: m.adafactor(
        _schedule,
        min_dim_size_to_factor=1,
        clipping_threshold=None,
        multiply_by_parameter_scale=False,
        eps=1e-3,
    ),
    "unfactored": lambda m: m.adafactor(1e-2, factored=False, clipping_threshold=0.5),
}
PARITY_K = {
    "defaults": K_DECAY32 + 1 + 1 + 1,  # eps, the clipping threshold, the scale floor
    # lr, eps, threshold, floor, momentum 0.9 (lag, 1 - b, kept in float32), weight decay.
    "factored_momentum_decay": K_DECAY32 + 4 + 9 + 1 + 2 + 1,
    "schedule_unclipped_unscaled": K_DECAY32 + 1 + 1,  # the schedule (float32), eps
    "unfactored": K_DECAY32 + 4,  # lr, eps, threshold, floor
}


@functools.cache
def _optax64(case: str) -> tuple:
    """optax's float64 run of `PARITY` ``case`` (`_run64`), shared by two tests."""
    params = _params()
    return _run64(PARITY[case](optax), optax.apply_updates, params, _grads(params))


@pytest.mark.parametrize("case", sorted(PARITY))
def test_adafactor_matches_optax(case: str) -> None:
    # The two libraries' programs differ (reductions, fusions), so not bit for bit: in
    # float64, to `PARITY_K` roundings.
    params = _params()
    grads = _grads(params)
    k = PARITY_K[case]
    ours, our_state, _, _ = _run64(PARITY[case](optx), optx.apply_updates, params, grads)
    theirs, their_state, path, u_max = _optax64(case)
    _check_params(f"{case} params", ours, theirs, k, path)
    mine, other = our_state[0], their_state[0]
    assert int(mine.count) == int(other.count) == STEPS
    # Means of squares: no cancellation, relative to their values with b_t's full lag
    # (no root): 2 k.
    for slot in ("v_row", "v_col", "v"):
        _close(f"{case} {slot}", getattr(mine, slot), getattr(other, slot), k * EPS32, 0.0)
    if case == "factored_momentum_decay":
        # The momentum (b = 0.9) can cancel: its error is relative to its terms x_s, the
        # scaled steps. u_t = ema_t + wd p (wd = 1e-3) and x_t = (ema_t - b ema_(t-1)) /
        # (1 - b), so |x| <= 19 (max|u| + wd max|p|), with max|p| <= |p_T| + sum_t |u_t|.
        for a, e, m, p, u in zip(
            jax.tree.leaves(our_state[4].ema),
            jax.tree.leaves(their_state[4].ema),
            jax.tree.leaves(u_max),
            jax.tree.leaves(theirs),
            jax.tree.leaves(path),
            strict=True,
        ):
            x_max = 19 * (float(m) + 1e-3 * (float(np.max(np.abs(p))) + float(u)))
            _close(f"{case} ema", a, e, 0.0, k * EPS32 / 2 * x_max)


def test_bounds_catch_an_update_off_by_1e3() -> None:
    """The parity and reference bounds see every update 1.001x too large."""
    params = _params()
    grads = _grads(params)
    case = "factored_momentum_decay"
    wrong = optx.chain(PARITY[case](optx), optx.scale(1.001))
    ours, _, _, _ = _run64(wrong, optx.apply_updates, params, grads)
    theirs, _, path, _ = _optax64(case)
    leaves = zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), jax.tree.leaves(path), strict=True)
    errors = [
        float(np.max(np.abs(a - e)))
        / (PARITY_K[case] * EPS32 / 2 * float(u) + ROUNDOFF64 * float(np.max(np.abs(e))))
        for a, e, u in leaves
    ]
    print(f"{case} x 1.001: max error / bound {max(errors):.3g}")
    assert max(errors) > 10


def test_statistics_follow_the_factored_axes() -> None:
    params = _params()
    largest = optx.scale_by_factored_rms(min_dim_size_to_factor=2).init(params)
    last = optx.scale_by_factored_rms(min_dim_size_to_factor=1, factor_axes="last").init(params)
    # (5, 2, 3): the largest axes 0 and 2 leave rows (2, 3) and columns (5, 2).
    assert largest.v_row["blocks"][0]["conv"].shape == (2, 3)
    assert largest.v_col["blocks"][0]["conv"].shape == (5, 2)
    assert largest.v["blocks"][0]["conv"].shape == (1,)
    # The last two axes: rows (5, 2) and columns (5, 3), as Keras keeps them.
    assert last.v_row["blocks"][0]["conv"].shape == (5, 2)
    assert last.v_col["blocks"][0]["conv"].shape == (5, 3)
    # Vectors and scalars keep a full second moment; min_dim_size_to_factor=2 leaves
    # (5, 2, 3) factored (2 >= 2) and so is the 3 x 4 kernel.
    assert largest.v["dense"]["bias"].shape == (4,) and largest.v_row["dense"]["bias"].shape == (1,)
    assert largest.v_row["dense"]["kernel"].shape == (3,)
    assert optx.scale_by_factored_rms().init(params).v["dense"]["kernel"].shape == (3, 4)


def test_both_factored_forms_agree_on_matrices() -> None:
    # mean(R) = mean(C) = mean(G): normalising rows or columns gives the same estimate.
    params = {"w": jnp.ones((6, 4)), "u": jnp.ones((4, 6))}
    grads = _grads(params, 20)
    a = optx.scale_by_factored_rms(min_dim_size_to_factor=1)
    b = optx.scale_by_factored_rms(min_dim_size_to_factor=1, factor_axes="last")

    def run(tx: Any) -> Any:
        def step(s: Any, g: Any) -> tuple:
            u, s = tx.update(g, s)
            return s, u

        return jax.jit(lambda g: jax.lax.scan(step, tx.init(params), g)[1])(grads)

    # The same factors, computed in another order: per step up to 8 roundings (the moving
    # averages, the outer product, the division by the mean, rsqrt) and row and column
    # means (4 + 6 positive terms: no cancellation), errors adding over the 20 steps
    # (tests/TOLERANCES.md). A wrong axis would be off by O(1).
    _close("updates", run(a), run(b), roundoff_rtol(20, roundings=8, reduced=10), 0.0)


# --------------------------------------------------------------------------------------
# NumPy references.


def _np_factored_dims(shape: tuple[int, ...], min_dim: int, axes: str) -> tuple | None:
    if len(shape) < 2:
        return None
    if axes == "last":
        d1, d0 = len(shape) - 2, len(shape) - 1
    else:
        d1, d0 = (int(i) for i in np.argsort(shape)[-2:])
    return None if min(shape[d0], shape[d1]) < min_dim else (d1, d0)


def _np_optax_adafactor(params: Any, grads: Any, **kw: Any) -> tuple[list, list]:
    """optax's convention, in float64: row/column statistics, then the chain's scalings.
    The final leaves, and per leaf ``sum_t max|u_t|``.
    """
    leaves = [np.asarray(p, np.float64) for p in jax.tree.leaves(params)]
    gleaves = [np.asarray(g, np.float64) for g in jax.tree.leaves(grads)]
    paths = [0.0] * len(leaves)
    stats = [{} for _ in leaves]
    mom = [np.zeros_like(p) for p in leaves]
    decay_mask = [p.ndim >= 2 for p in leaves]
    for t in range(gleaves[0].shape[0]):
        beta = 1.0 - (t + 1.0) ** -kw["decay_rate"]
        for i, p in enumerate(leaves):
            g = gleaves[i][t]
            big_g = g * g + kw["eps"]
            dims = _np_factored_dims(p.shape, kw["min_dim"], "largest")
            s = stats[i]
            if dims is None:
                s["v"] = beta * s.get("v", 0.0) + (1 - beta) * big_g
                u = g / np.sqrt(s["v"])
            else:
                d1, d0 = dims
                s["r"] = beta * s.get("r", 0.0) + (1 - beta) * big_g.mean(axis=d0)
                s["c"] = beta * s.get("c", 0.0) + (1 - beta) * big_g.mean(axis=d1)
                r_mean = s["r"].mean(axis=d1 - 1 if d1 > d0 else d1, keepdims=True)
                v = np.expand_dims(s["r"] / r_mean, d0) * np.expand_dims(s["c"], d1)
                u = g / np.sqrt(v)
            u = u / max(1.0, np.sqrt(np.mean(u * u)) / kw["clip"])
            u = kw["lr"] * u * max(np.sqrt(np.mean(p * p)), 1e-3)
            mom[i] = kw["momentum"] * mom[i] + (1 - kw["momentum"]) * u
            u = mom[i] + (kw["wd"] * p if decay_mask[i] else 0.0)
            leaves[i] = p - u
            paths[i] += float(np.max(np.abs(u)))
    return leaves, paths


def _np_keras_adafactor(params: Any, grads: Any, **kw: Any) -> tuple[list, list]:
    """Keras's `Adafactor.update_step`, transcribed in float64. The final leaves, and per
    leaf ``sum_t max|u_t|``.
    """
    leaves = [np.asarray(p, np.float64) for p in jax.tree.leaves(params)]
    gleaves = [np.asarray(g, np.float64) for g in jax.tree.leaves(grads)]
    paths = [0.0] * len(leaves)
    r = [0.0] * len(leaves)
    c = [0.0] * len(leaves)
    v = [0.0] * len(leaves)

    def rms(x: np.ndarray) -> float:
        return float(np.sqrt(np.mean(x * x)))

    for step in range(gleaves[0].shape[0]):
        t = step + 1.0
        for i, w in enumerate(leaves):
            g = gleaves[i][step]
            rho = min(kw["lr"], 1 / np.sqrt(t))
            alpha = max(kw["epsilon_2"], rms(w)) * rho
            big_g = g * g + kw["epsilon_1"]
            beta = 1 - t ** kw["beta_2_decay"]
            if w.ndim >= 2:
                r[i] = beta * r[i] + (1 - beta) * big_g.mean(axis=-1)
                c[i] = beta * c[i] + (1 - beta) * big_g.mean(axis=-2)
                v[i] = np.expand_dims(r[i] / r[i].mean(axis=-1, keepdims=True), -1)
                v[i] = v[i] * np.expand_dims(c[i], -2)
            else:
                v[i] = beta * v[i] + (1 - beta) * big_g
            u = g / np.sqrt(v[i])
            u_hat = u / max(1.0, rms(u) / kw["clip_threshold"])
            leaves[i] = w - alpha * u_hat
            paths[i] += float(np.max(np.abs(alpha * u_hat)))
    return leaves, paths


def _keras_convention(lr: float, clip: float = 1.0) -> optx.Transform:
    return optx.adafactor(
        lr,
        min_dim_size_to_factor=1,
        decay_rate=0.8,
        eps=1e-30,
        clipping_threshold=clip,
        factor_axes="last",
        relative_step=True,
        min_scale=1e-3,
    )


# The NumPy loops compute b_t in float64: `k_decay`.
REF_K = {
    # lr, eps, threshold, floor, momentum 0.9 (lag, 1 - b, kept in float32), weight decay.
    "optax": k_decay(0.6) + 4 + 9 + 1 + 2 + 1,
    # The relative step min(lr, 1 / sqrt(t)) in float32 (2), eps, threshold, floor.
    "keras": k_decay(0.8) + 2 + 3,
}


def test_adafactor_matches_a_float64_reference_optax_convention() -> None:
    params = _params()
    grads = _grads(params)
    kw = dict(lr=1e-2, min_dim=2, decay_rate=0.6, eps=1e-30, clip=1.0, momentum=0.9, wd=1e-3)
    tx = PARITY["factored_momentum_decay"](optx)
    ours = _run64(tx, optx.apply_updates, params, grads)[0]
    expected, paths = _np_optax_adafactor(params, grads, **kw)
    _check_params("optax convention vs float64", ours, expected, REF_K["optax"], paths)


def test_adafactor_matches_a_float64_reference_keras_convention() -> None:
    params = _params()
    grads = _grads(params)
    # lr 0.8 > 1/sqrt(t) from t = 2 on: the relative step caps it.
    ours = _run64(_keras_convention(0.8), optx.apply_updates, params, grads)[0]
    expected, paths = _np_keras_adafactor(
        params,
        grads,
        lr=0.8,
        epsilon_1=1e-30,
        epsilon_2=1e-3,
        beta_2_decay=-0.8,
        clip_threshold=1.0,
    )
    _check_params("keras convention vs float64", ours, expected, REF_K["keras"], paths)


def test_adafactor_matches_keras() -> None:
    import keras

    assert keras.backend.backend() == "jax"
    steps = 20
    params = {k: v for k, v in _params().items() if k != "big"}
    grads = _grads(params, steps)
    # Both in float64 (Keras with floatx float64): the relative step feeds each leaf's scale
    # back into its steps and the sums of squares reduce in each library's order, which
    # float32 would bound only loosely. To `REF_K["keras"]` roundings over 20 steps.
    floatx = keras.config.floatx()
    with jax.enable_x64(True):
        keras.config.set_floatx("float64")
        try:
            variables = [keras.Variable(np.asarray(p, np.float64)) for p in jax.tree.leaves(params)]
            opt = keras.optimizers.Adafactor(learning_rate=0.8, clip_threshold=0.7)
            for t in range(steps):
                opt.apply_gradients(
                    [
                        (np.asarray(g[t], np.float64), v)
                        for g, v in zip(jax.tree.leaves(grads), variables, strict=True)
                    ]
                )
            expected = [np.asarray(v.value) for v in variables]
        finally:
            keras.config.set_floatx(floatx)
    tx = _keras_convention(0.8, clip=0.7)
    ours, _, path, _ = _run64(tx, optx.apply_updates, params, grads)
    k = k_decay(0.8, steps) + 2 + 3  # as `REF_K["keras"]`, over 20 steps
    _check_params("keras", jax.tree.leaves(ours), expected, k, jax.tree.leaves(path))


# --------------------------------------------------------------------------------------
# Convergence, bfloat16, hyperparameters.


def _minimise(tx: Any, loss: Any, x0: jax.Array, steps: int) -> jax.Array:
    def step(carry: tuple, _: Any) -> tuple:
        p, s = carry
        u, s = tx.update(jax.grad(loss)(p), s, p)
        return (optx.apply_updates(p, u), s), None

    run = jax.jit(lambda p: jax.lax.scan(step, (p, tx.init(p)), None, length=steps)[0][0])
    return run(x0)


def test_adafactor_minimises_a_parabola() -> None:
    target = jnp.array([[1.0, -2.0, 3.0], [0.5, 2.0, -1.0]])
    tx = optx.adafactor(0.03, min_dim_size_to_factor=1)
    x = _minimise(tx, lambda p: jnp.sum((p - target) ** 2), jnp.full((2, 3), 0.5), 500)
    np.testing.assert_allclose(x, target, atol=1e-4)


def test_adafactor_minimises_rosenbrock() -> None:
    # Without the parameter scale (the minimum's scale is 1) and with momentum. Its steps are
    # RMS-normalised: at a constant rate it circles the minimum at ~the rate's scale (1e-3 to
    # 5e-3 here, depending on rounding), so the rate decays to 0 over the run.
    rate = optx.schedules.cosine_decay_schedule(0.03, 2000)
    tx = optx.adafactor(rate, momentum=0.9, multiply_by_parameter_scale=False)

    def rosenbrock(p: jax.Array) -> jax.Array:
        return (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2

    x = _minimise(tx, rosenbrock, jnp.array([-1.5, 2.0]), 2000)
    np.testing.assert_allclose(x, [1.0, 1.0], atol=1e-3)


def test_bfloat16_params_with_float32_statistics_follow_float32() -> None:
    params = {k: v for k, v in _params().items() if k != "big"}
    grads = _grads(params, 20)
    tx = optx.adafactor(1e-2, min_dim_size_to_factor=1, momentum=0.9, nu_dtype=jnp.float32)
    ref, _ = _run(tx, optx.apply_updates, params, grads)
    half = jax.tree.map(lambda x: x.astype(jnp.bfloat16), (params, grads))
    got, state = _run(tx, optx.apply_updates, *half)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(got))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state[0].v_row))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state[4].ema))
    # bfloat16 parameters round by up to 2^-8 of their scale at each step (half bfloat16's
    # eps, 2^-7); the rounded gradients and parameters move the float32 statistics and
    # steps (~1e-2 of the scale) by far less. 20 steps: at most 20 * 2^-8 = 0.078.
    _close("bfloat16", got, ref, 20 * 2.0**-8, 0.0)


def test_decay_offset_and_relative_step_are_dynamic() -> None:
    tx = _keras_convention(0.8)
    params = {"w": jnp.ones((3, 2))}
    state = tx.init(params)
    assert optx.get_hyperparams(state)["step_offset"] == 0.0
    g = {"w": jnp.full((3, 2), 0.5)}
    # A larger learning rate changes nothing once 1/sqrt(t) caps it.
    state = tx.update(g, state, params)[1]
    a = tx.update(g, state, params)[0]
    b = tx.update(g, optx.set_hyperparams(state, learning_rate=5.0), params)[0]
    np.testing.assert_array_equal(a["w"], b["w"])
    c = tx.update(g, optx.set_hyperparams(state, learning_rate=0.1), params)[0]
    assert not np.allclose(a["w"], c["w"])


def test_decay_offset_restarts_the_schedule() -> None:
    # After `count` steps, an offset of `count` makes the next decay 0 again (a fresh v).
    tx = optx.scale_by_factored_rms(factored=False)
    params = {"w": jnp.ones(3)}
    state = tx.init(params)
    for _ in range(5):
        _, state = tx.update({"w": jnp.array([1.0, 2.0, 3.0])}, state)
    restarted = optx.set_hyperparams(state, step_offset=5)
    _, state = tx.update({"w": jnp.array([4.0, 4.0, 4.0])}, restarted)
    np.testing.assert_allclose(state.v["w"], 16.0 + 1e-30)


# --------------------------------------------------------------------------------------
# Errors.

ERRORS = [
    (
        lambda: optx.scale_by_factored_rms(decay_rate=-0.8),
        ValueError,
        "`scale_by_factored_rms` needs decay_rate finite and >= 0. Received: decay_rate=-0.8.",
    ),
    (
        lambda: optx.scale_by_factored_rms(step_offset=-1),
        ValueError,
        "`scale_by_factored_rms` needs step_offset finite and >= 0. Received: step_offset=-1.",
    ),
    (
        lambda: optx.scale_by_factored_rms(epsilon=float("nan")),
        ValueError,
        "`scale_by_factored_rms` needs epsilon finite and >= 0. Received: epsilon=nan.",
    ),
    (
        lambda: optx.scale_by_factored_rms(min_dim_size_to_factor=1.5),
        ValueError,
        "`scale_by_factored_rms` needs min_dim_size_to_factor to be an int >= 0. "
        "Received: min_dim_size_to_factor=1.5.",
    ),
    (
        lambda: optx.scale_by_factored_rms(factor_axes="first"),
        ValueError,
        "`scale_by_factored_rms` needs factor_axes to be 'largest' or 'last'. "
        "Received: factor_axes='first'.",
    ),
    (
        lambda: optx.scale_by_factored_rms(decay_rate_fn=0.8),
        TypeError,
        "`scale_by_factored_rms` needs decay_rate_fn to be a callable (step, decay_rate) -> "
        "decay. Received: decay_rate_fn=0.8.",
    ),
    (
        lambda: optx.scale_by_factored_rms(nu_dtype=jnp.int32),
        TypeError,
        "`scale_by_factored_rms` needs nu_dtype to be None or a floating dtype. "
        "Received: nu_dtype=<class 'jax.numpy.int32'>.",
    ),
    (
        lambda: optx.scale_by_param_block_rms(-1e-3),
        ValueError,
        "`scale_by_param_block_rms` needs min_scale finite and >= 0. Received: min_scale=-0.001.",
    ),
    (
        lambda: optx.adafactor(-0.1),
        ValueError,
        "`adafactor` needs learning_rate finite and >= 0. Received: learning_rate=-0.1.",
    ),
    (
        lambda: optx.adafactor(min_dim_size_to_factor=-1),
        ValueError,
        "`adafactor` needs min_dim_size_to_factor to be an int >= 0. "
        "Received: min_dim_size_to_factor=-1.",
    ),
    (
        lambda: optx.adafactor(decay_rate=-1.0),
        ValueError,
        "`adafactor` needs decay_rate finite and >= 0. Received: decay_rate=-1.0.",
    ),
    (
        lambda: optx.adafactor(decay_offset=-2),
        ValueError,
        "`adafactor` needs decay_offset finite and >= 0. Received: decay_offset=-2.",
    ),
    (
        lambda: optx.adafactor(eps=-1e-30),
        ValueError,
        "`adafactor` needs eps finite and >= 0. Received: eps=-1e-30.",
    ),
    (
        lambda: optx.adafactor(clipping_threshold=0.0),
        ValueError,
        "`adafactor` needs clipping_threshold finite and > 0. Received: clipping_threshold=0.0.",
    ),
    (
        lambda: optx.adafactor(momentum=1.5),
        ValueError,
        "`adafactor` needs momentum in [0, 1]. Received: momentum=1.5.",
    ),
    (
        lambda: optx.adafactor(weight_decay_rate=-1e-3),
        ValueError,
        "`adafactor` needs weight_decay_rate finite and >= 0. Received: weight_decay_rate=-0.001.",
    ),
    (
        lambda: optx.adafactor(dtype_momentum="int8"),
        TypeError,
        "`adafactor` needs dtype_momentum to be None or a floating dtype. "
        "Received: dtype_momentum='int8'.",
    ),
    (
        lambda: optx.adafactor(nu_dtype="int8"),
        TypeError,
        "`adafactor` needs nu_dtype to be None or a floating dtype. Received: nu_dtype='int8'.",
    ),
    (
        lambda: optx.adafactor(factor_axes="all"),
        ValueError,
        "`adafactor` needs factor_axes to be 'largest' or 'last'. Received: factor_axes='all'.",
    ),
    (
        lambda: optx.adafactor(min_scale=-1.0),
        ValueError,
        "`adafactor` needs min_scale finite and >= 0. Received: min_scale=-1.0.",
    ),
    (
        lambda: optx.adafactor(relative_step=True),
        ValueError,
        "`adafactor` needs a learning_rate with relative_step=True. Received: learning_rate=None.",
    ),
    (
        lambda: optx.scale_by_factored_rms().init({"w": jnp.ones(2, jnp.int32)}),
        TypeError,
        "`scale_by_factored_rms.init` needs floating-point params (float16, bfloat16, float32 "
        "or float64). Received: params['w'] of dtype int32. Keep other leaves out of the "
        "optimised tree, or route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
    (
        lambda: optx.scale_by_factored_rms().update(
            {"v": jnp.ones(2)}, optx.scale_by_factored_rms().init({"w": jnp.ones(2)})
        ),
        ValueError,
        "`scale_by_factored_rms.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'w'; not in the state: 'v'.",
    ),
    (
        lambda: optx.scale_by_factored_rms(min_dim_size_to_factor=1).update(
            {"w": jnp.ones((2, 4))},
            optx.scale_by_factored_rms(min_dim_size_to_factor=1).init({"w": jnp.ones((2, 3))}),
        ),
        ValueError,
        "`scale_by_factored_rms.update` needs updates with the shapes of the parameters the "
        "state was made for. Received: updates['w'] of shape (2, 4).",
    ),
    (
        lambda: optx.scale_by_param_block_rms().update({"w": jnp.ones(2)}, None),
        ValueError,
        "`scale_by_param_block_rms.update` needs the current parameters. Received: "
        "params=None. Call `update(updates, state, params)`.",
    ),
    (
        lambda: optx.adafactor().update(
            {"w": jnp.ones(2)}, optx.adafactor().init({"w": jnp.ones(2)})
        ),
        ValueError,
        "`scale_by_param_block_rms.update` needs the current parameters. Received: "
        "params=None. Call `update(updates, state, params)`.",
    ),
]


@pytest.mark.parametrize("call, error, message", ERRORS)
def test_error_message(call: Any, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message


def test_every_numeric_argument_takes_a_schedule() -> None:
    tx = optx.adafactor(
        _schedule,
        decay_offset=_schedule,
        eps=_schedule,
        weight_decay_rate=_schedule,
        momentum=_schedule,
        clipping_threshold=_schedule,
    )
    params = _params()
    state = tx.init(params)
    grads = jax.tree.map(lambda g: g[0], _grads(params, 1))
    updates, state = jax.jit(tx.update)(grads, state, params)
    assert all(bool(jnp.all(jnp.isfinite(u))) for u in jax.tree.leaves(updates))
    got = optx.get_hyperparams(state)
    # The value in force at the first step: the schedule's at 0 (`weight_decay` in the chain).
    assert float(got["weight_decay"]) == float(_schedule(jnp.zeros([], jnp.int32)))
