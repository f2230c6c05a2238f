"""Newer methods: Muon, ADOPT, AdEMAMix and Prodigy.

Parity with optax.contrib (100 jitted steps on a nested pytree), float64 NumPy loops (Keras's
Muon convention among them, and Keras's Muon itself), convergence on a parabola and the
Rosenbrock function, bfloat16 with float32 moments, Muon's routing, and every error message
of these modules.
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
# float32 round-off: the same formula evaluated twice agrees to a few ulps after 100 steps,
# measured against each leaf's largest entry (see `assert_close`).
RTOL, ATOL = 1e-6, 1e-7
# Where optax's float32 `1 - b` (1 - float32(0.999) is off by 1.3e-5 relative, 1.7e-4 for
# 0.9999) or its bias correction `1 - float32(b)**t` differs from optx's exact `1 - b` and
# `-expm1(t log1p(-(1 - b)))` (DESIGN D2): optx is the one that matches the float64 loops
# at RTOL.
BIAS_RTOL, BIAS_ATOL = 1e-5, 1e-5
# A float32 decay b = 1 - (1 - b) is up to 3e-8 off; a moment carries b^t, so after 100
# steps of b2 = 0.9999 it is ~3e-6 off the float64 loop's (optax's and optx's alike).
MOMENT_RTOL, MOMENT_ATOL = 1e-5, 1e-7
# Newton-Schulz magnifies a last-bit change of its input (up to ~15 times, measured): a
# float32 Muon run against a float64 loop agrees to 8e-7 of each leaf's scale (measured).
NS_RTOL, NS_ATOL = 3e-6, 3e-7


# ---------------------------------------------------------------------------------------
# Helpers.


def nested_params(conv: bool = False) -> Any:
    """A nested float32 pytree: dicts and a list, matrices, vectors, a scalar (a 3-D kernel)."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    block: dict[str, Any] = {"w": normal(5, 2)}
    if conv:
        block["conv"] = normal(2, 3, 2)
    return {
        "dense": {"kernel": normal(3, 4), "bias": normal(4)},
        "blocks": [block, normal(5)],
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


def as_numpy(tree: Any) -> Any:
    return jax.tree.map(lambda x: np.asarray(x, np.float64), tree)


def numpy_steps(params: Any, grads: Any) -> tuple[list, list, Any]:
    """Flat float64 leaves of ``params``, per-step flat gradients, and the treedef."""
    leaves, treedef = jax.tree.flatten(as_numpy(params))
    g_leaves = jax.tree.leaves(as_numpy(grads))
    steps = g_leaves[0].shape[0]
    return leaves, [[g[t] for g in g_leaves] for t in range(steps)], treedef


def run_optx(tx: Any, params: Any, grads: Any) -> tuple:
    return run_steps(tx, optx.apply_updates, params, grads)


def run_noisy_parabola(tx: Any, params: Any, noise: Any) -> tuple:
    """Jitted steps on the gradients ``params - 1 + noise_t``; returns (params, state)."""

    def run(params: Any, noise: Any) -> tuple:
        def step(carry: tuple, n: Any) -> tuple:
            p, s = carry
            g = jax.tree.map(lambda x, e: x - 1 + e, p, n)
            u, s = tx.update(g, s, p)
            return (optx.apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), noise)[0]

    return jax.jit(run)(params, noise)


# ---------------------------------------------------------------------------------------
# Parity with optax.contrib.


def muon_states(state: Any) -> Any:
    """Muon's momentum and AdamW's moments, from an optx or optax `partition` state."""
    inner = state.inner_states
    return (inner["muon"].inner_state[0].mu, inner["adam"].inner_state[0][1:3])


def adopt_states(state: Any) -> Any:
    return (state[0].count, state[0].mu, state[0].nu)


def ademamix_states(state: Any) -> Any:
    return (state[0].count, state[0].m1, state[0].m2, state[0].nu)


def prodigy_states(state: Any) -> Any:
    s = state[0] if isinstance(state, tuple) and not hasattr(state, "_fields") else state
    return (s.count, s.exp_avg, s.exp_avg_sq, s.grad_sum, s.estim_lr, s.numerator_weighted)


def b3_schedule(count: jax.Array) -> jax.Array:
    return jnp.minimum(1.0 - 0.1 / (1.0 + count), 0.999)


def alpha_schedule(count: jax.Array) -> jax.Array:
    return jnp.minimum(0.5 * (1.0 + count), 5.0)


def lr_multiplier(count: jax.Array) -> jax.Array:
    return 0.5 * (1 + jnp.cos(jnp.pi * jnp.minimum(count, STEPS).astype(jnp.float32) / STEPS))


PARITY = {
    # name: (optx, optax, states, (params rtol, atol), (state rtol, atol))
    "adopt": (
        optx.adopt(1e-2),
        optax.contrib.adopt(1e-2),
        adopt_states,
        (BIAS_RTOL, BIAS_ATOL),
        (BIAS_RTOL, BIAS_ATOL),
    ),
    "adopt/nesterov_b2": (
        optx.adopt(1e-2, b2=0.99, nesterov=True),
        optax.contrib.adopt(1e-2, b2=0.99, nesterov=True),
        adopt_states,
        (BIAS_RTOL, BIAS_ATOL),
        (BIAS_RTOL, BIAS_ATOL),
    ),
    "ademamix": (
        optx.ademamix(1e-2, weight_decay=0.1),
        optax.contrib.ademamix(1e-2, weight_decay=0.1),
        ademamix_states,
        (BIAS_RTOL, BIAS_ATOL),
        (RTOL, ATOL),
    ),
    "ademamix/schedules": (
        optx.ademamix(1e-2, b3=b3_schedule, alpha=alpha_schedule, eps_root=1e-8),
        optax.contrib.ademamix(1e-2, b3=b3_schedule, alpha=alpha_schedule, eps_root=1e-8),
        ademamix_states,
        (BIAS_RTOL, BIAS_ATOL),
        (RTOL, ATOL),
    ),
    "prodigy": (
        optx.prodigy(),
        optax.contrib.prodigy(),
        prodigy_states,
        (BIAS_RTOL, BIAS_ATOL),
        (BIAS_RTOL, BIAS_ATOL),
    ),
    "prodigy/options": (
        optx.prodigy(lr_multiplier, (0.8, 0.99), 0.9, 1e-6, 1e-3, 2.0, 0.1, True),
        optax.contrib.prodigy(lr_multiplier, (0.8, 0.99), 0.9, 1e-6, 1e-3, 2.0, 0.1, True),
        prodigy_states,
        (BIAS_RTOL, BIAS_ATOL),
        (BIAS_RTOL, BIAS_ATOL),
    ),
    "muon": (
        optx.muon(1e-2),
        optax.contrib.muon(1e-2),
        muon_states,
        (BIAS_RTOL, BIAS_ATOL),
        (BIAS_RTOL, BIAS_ATOL),
    ),
    "muon/spectral_rms_decay": (
        optx.muon(
            1e-2,
            nesterov=False,
            weight_decay=0.1,
            adam_weight_decay=0.05,
            consistent_rms=0.2,
            preconditioning="spectral",
            adam_learning_rate=lr_multiplier,
        ),
        optax.contrib.muon(
            1e-2,
            nesterov=False,
            weight_decay=0.1,
            adam_weight_decay=0.05,
            consistent_rms=0.2,
            preconditioning="spectral",
            adam_learning_rate=lr_multiplier,
        ),
        muon_states,
        (BIAS_RTOL, BIAS_ATOL),
        (BIAS_RTOL, BIAS_ATOL),
    ),
    "muon/aol_adaptive": (
        optx.muon(1e-2, preconditioning="aol", adaptive=True, beta=0.9),
        optax.contrib.muon(1e-2, preconditioning="aol", adaptive=True, beta=0.9),
        muon_states,
        (BIAS_RTOL, BIAS_ATOL),
        (BIAS_RTOL, BIAS_ATOL),
    ),
    "muon/schatten_dion": (
        optx.muon(1e-2, ns_coeffs="dion", preconditioning="schatten"),
        optax.contrib.muon(1e-2, ns_coeffs="dion", preconditioning="schatten"),
        muon_states,
        (BIAS_RTOL, BIAS_ATOL),
        (BIAS_RTOL, BIAS_ATOL),
    ),
}


@pytest.mark.parametrize("name", list(PARITY))
def test_parity_with_optax(name: str) -> None:
    tx, reference, states, params_tol, state_tol = PARITY[name]
    params = nested_params(conv=name.startswith("muon"))
    grads = step_grads(params)
    p, s = run_optx(tx, params, grads)
    p_ref, s_ref = run_steps(reference, optax.apply_updates, params, grads)
    assert_close(f"{name} params", p, p_ref, *params_tol)
    assert_close(f"{name} state", states(s), states(s_ref), *state_tol)


# ---------------------------------------------------------------------------------------
# Float64 NumPy loops.


def numpy_adopt(params, grads, lr, b1=0.9, b2=0.9999, eps=1e-6, nesterov=False, clip=True):
    x, steps, treedef = numpy_steps(params, grads)
    m = [np.zeros_like(p) for p in x]
    v = [np.zeros_like(p) for p in x]
    for t, g in enumerate(steps):
        for i, gi in enumerate(g):
            if t == 0:  # records g^2 only: the update is zero
                v[i] = gi * gi
                continue
            s = gi / np.maximum(np.sqrt(v[i]), eps)
            if clip:
                s = np.clip(s, -(t**0.25), t**0.25)
            m[i] = b1 * m[i] + (1 - b1) * s
            u = b1 * m[i] + (1 - b1) * s if nesterov else m[i]
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            x[i] = x[i] - lr * u
    return treedef.unflatten(x), (treedef.unflatten(m), treedef.unflatten(v))


def numpy_ademamix(params, grads, lr, b1=0.9, b2=0.999, b3=0.9999, alpha=5.0, eps=1e-8, wd=0.0):
    x, steps, treedef = numpy_steps(params, grads)
    m1, m2, v = ([np.zeros_like(p) for p in x] for _ in range(3))
    for t, g in enumerate(steps, 1):
        for i, gi in enumerate(g):
            m1[i] = b1 * m1[i] + (1 - b1) * gi
            m2[i] = b3 * m2[i] + (1 - b3) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            u = (m1[i] / (1 - b1**t) + alpha * m2[i]) / (np.sqrt(v[i] / (1 - b2**t)) + eps)
            x[i] = x[i] - lr * (u + wd * x[i])
    return treedef.unflatten(x), tuple(treedef.unflatten(s) for s in (m1, m2, v))


def numpy_prodigy(params, noise, lr=1.0, b1=0.9, b2=0.999, b3=None, eps=1e-8, d0=1e-6, coef=1.0,
                  wd=0.0, safeguard=False):  # fmt: skip
    """Prodigy on the noisy parabola: gradients ``x - 1 + noise_t``."""
    x, steps, treedef = numpy_steps(params, noise)
    x0 = [p.copy() for p in x]
    m, v, s = ([np.zeros_like(p) for p in x] for _ in range(3))
    b3 = np.sqrt(b2) if b3 is None else b3
    d, r = d0, 0.0
    for t, n in enumerate(steps, 1):
        g = [xi - 1 + ni for xi, ni in zip(x, n, strict=True)]
        dlr = d * lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        numerator = sum(float(np.sum(gi * (p0 - p))) for gi, p0, p in zip(g, x0, x, strict=True))
        for i, gi in enumerate(g):
            m[i] = b1 * m[i] + (1 - b1) * d * gi
            v[i] = b2 * v[i] + (1 - b2) * (d * gi) ** 2
            s[i] = b3 * s[i] + (d if safeguard else dlr) * d * gi / d0
        r = b3 * r + (d / d0) * dlr * numerator
        new_d = max(d, coef * r / sum(float(np.sum(np.abs(si))) for si in s))
        for i in range(len(x)):
            x[i] = x[i] - wd * dlr * x[i] - dlr * m[i] / (np.sqrt(v[i]) + new_d * eps)
        d = new_d
    return treedef.unflatten(x), (d, r)


def numpy_orthogonalize(x, coeffs=(3.4445, -4.7750, 2.0315), steps=5, eps=1e-8):
    wide = x.shape[0] <= x.shape[1]
    x = x if wide else x.T
    x = x / (np.linalg.norm(x) + eps)
    for _ in range(steps):
        a = x @ x.T
        x = coeffs[0] * x + (coeffs[1] * a + coeffs[2] * a @ a) @ x
    return x if wide else x.T


def numpy_muon(params, grads, lr, beta=0.95, eps=1e-8, wd=0.0, nesterov=True, keras=False,
               rms=None, adam_b1=0.9, adam_b2=0.999, adam_wd=0.0, adam_nesterov=None,
               adam_keras_eps=False):  # fmt: skip
    """Muon on the 2-D leaves, AdamW on the others."""
    adam_nesterov = nesterov if adam_nesterov is None else adam_nesterov
    x, steps, treedef = numpy_steps(params, grads)
    m = [np.zeros_like(p) for p in x]
    v = [np.zeros_like(p) for p in x]
    for t, g in enumerate(steps, 1):
        for i, gi in enumerate(g):
            if x[i].ndim == 2:
                if keras:
                    m[i] = beta * m[i] + gi
                    mh = gi + beta * m[i] if nesterov else m[i]
                else:
                    m[i] = beta * m[i] + (1 - beta) * gi
                    mh = m[i] / (1 - beta**t)
                    if nesterov:
                        mh = beta * m[i] / (1 - beta ** (t + 1)) + (1 - beta) * gi / (1 - beta**t)
                fan_in, fan_out = x[i].shape
                scale = (
                    np.sqrt(max(1.0, fan_out / fan_in))
                    if rms is None
                    else np.sqrt(max(fan_in, fan_out)) * rms
                )
                u, decay = scale * numpy_orthogonalize(mh, eps=eps), wd
            else:
                m[i] = adam_b1 * m[i] + (1 - adam_b1) * gi
                v[i] = adam_b2 * v[i] + (1 - adam_b2) * gi * gi
                mh = m[i] / (1 - adam_b1**t)
                if adam_nesterov:
                    mh = adam_b1 * m[i] / (1 - adam_b1 ** (t + 1)) + (1 - adam_b1) * gi / (
                        1 - adam_b1**t
                    )
                if adam_keras_eps:  # eps on the uncorrected sqrt(v)
                    u = mh * np.sqrt(1 - adam_b2**t) / (np.sqrt(v[i]) + eps)
                else:
                    u = mh / (np.sqrt(v[i] / (1 - adam_b2**t)) + eps)
                decay = adam_wd
            x[i] = x[i] - lr * (u + decay * x[i])
    return treedef.unflatten(x), treedef.unflatten(m)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"nesterov": True, "use_clipping": False, "b2": 0.99}],
    ids=["default", "nesterov_no_clipping"],
)
def test_adopt_matches_numpy(kwargs: dict) -> None:
    params = nested_params()
    grads = step_grads(params)
    p, s = run_optx(optx.adopt(1e-2, **kwargs), params, grads)
    names = {"nesterov": "nesterov", "use_clipping": "clip", "b2": "b2"}
    expected, moments = numpy_adopt(params, grads, 1e-2, **{names[k]: v for k, v in kwargs.items()})
    # Without clipping, g / sqrt(v) of a small v is large and so is its round-off.
    tol = (RTOL, ATOL) if kwargs.get("use_clipping", True) else (BIAS_RTOL, BIAS_ATOL)
    assert_close("adopt params", p, expected, *tol)
    assert_close("adopt moments", (s[0].mu, s[0].nu), moments, MOMENT_RTOL, MOMENT_ATOL)


def test_adopt_first_update_is_zero() -> None:
    tx = optx.adopt(0.1, use_clipping=False)
    params = {"w": jnp.ones(3)}
    updates, state = tx.update({"w": jnp.array([1.0, -2.0, 0.0])}, tx.init(params), params)
    np.testing.assert_array_equal(updates["w"], 0.0)
    np.testing.assert_array_equal(state[0].nu["w"], [1.0, 4.0, 0.0])


def test_ademamix_matches_numpy() -> None:
    params = nested_params()
    grads = step_grads(params)
    p, s = run_optx(optx.ademamix(1e-2, b3=0.99, weight_decay=0.1), params, grads)
    expected, moments = numpy_ademamix(params, grads, 1e-2, b3=0.99, wd=0.1)
    assert_close("ademamix params", p, expected, RTOL, ATOL)
    assert_close("ademamix moments", (s[0].m1, s[0].m2, s[0].nu), moments, RTOL, ATOL)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"beta3": 0.9, "estim_lr0": 1e-3, "weight_decay": 0.1, "safeguard_warmup": True}],
    ids=["default", "options"],
)
def test_prodigy_matches_numpy(kwargs: dict) -> None:
    # A parabola under noise, so that the estimate grows (on pure noise it stays at d0).
    # From zero: x0 - x is then exact in float32 (from x0 ~ 1, the first steps' ~1e-6
    # distances would lose ~10% to rounding, in optax as in optx).
    params = jax.tree.map(jnp.zeros_like, nested_params())
    noise = jax.tree.map(lambda g: 0.1 * g, step_grads(params))
    p, s = run_noisy_parabola(optx.prodigy(0.5, **kwargs), params, noise)
    names = {
        "beta3": "b3",
        "estim_lr0": "d0",
        "weight_decay": "wd",
        "safeguard_warmup": "safeguard",
    }
    expected, (d, r) = numpy_prodigy(params, noise, 0.5, **{names[k]: v for k, v in kwargs.items()})
    assert float(d) > 10 * kwargs.get("estim_lr0", 1e-6)  # the estimate grew
    assert_close("prodigy params", p, expected, RTOL, ATOL)
    # r_t sums terms of both signs once past the minimum: its float32 sum cancels digits.
    estimate = (s[0].estim_lr, s[0].numerator_weighted)
    assert_close("prodigy estimate", estimate, (d, r), MOMENT_RTOL, 0)


MUON_CASES = {
    "optax": ({}, {}),
    "optax/plain_rms_decay": (
        {"nesterov": False, "consistent_rms": 0.2, "weight_decay": 0.1, "adam_weight_decay": 0.1},
        {"nesterov": False, "rms": 0.2, "wd": 0.1, "adam_wd": 0.1},
    ),
    # Keras's Muon in optx's terms (keras-semantics.md 2.13).
    "keras": (
        {
            "eps": 1e-7,
            "weight_decay": 0.004,
            "adam_weight_decay": 0.004,
            "consistent_rms": 0.2,
            "momentum_convention": "keras",
            "adam_nesterov": False,
            "adam_eps_placement": "keras",
        },
        {
            "eps": 1e-7,
            "wd": 0.004,
            "adam_wd": 0.004,
            "rms": 0.2,
            "keras": True,
            "adam_nesterov": False,
            "adam_keras_eps": True,
        },
    ),
    "keras/plain": (
        {"momentum_convention": "keras", "nesterov": False, "adam_eps_placement": "keras"},
        {"keras": True, "nesterov": False, "adam_keras_eps": True},
    ),
}


@pytest.mark.parametrize("name", list(MUON_CASES))
def test_muon_matches_numpy(name: str) -> None:
    kwargs, numpy_kwargs = MUON_CASES[name]
    params = nested_params()
    grads = step_grads(params)
    p, s = run_optx(optx.muon(1e-2, **kwargs), params, grads)
    expected, m = numpy_muon(params, grads, 1e-2, **numpy_kwargs)
    assert_close(f"muon {name} params", p, expected, NS_RTOL, NS_ATOL)
    got_m = s.inner_states["muon"].inner_state[0].mu
    expected_m = jax.tree.map(lambda g, x: x if g.ndim == 2 else optx.MaskedNode(), params, m)
    assert_close(f"muon {name} momentum", got_m, expected_m, RTOL, ATOL)


def test_muon_matches_keras_itself() -> None:
    """`keras.optimizers.Muon` (JAX backend) against the Keras convention of `muon`."""
    import keras

    assert keras.backend.backend() == "jax"
    params = {
        "bias": nested_params()["dense"]["bias"],
        "kernel": nested_params()["dense"]["kernel"],
    }
    grads = step_grads(params, steps=10)
    opt = keras.optimizers.Muon(learning_rate=1e-2)
    variables = {k: keras.Variable(np.asarray(v), name=k) for k, v in params.items()}
    opt.build(list(variables.values()))
    for t in range(10):
        opt.apply_gradients([(grads[k][t], variables[k]) for k in variables])
    kwargs = MUON_CASES["keras"][0]
    p, _ = run_optx(optx.muon(1e-2, **kwargs), params, grads)
    expected = {k: np.asarray(v.value) for k, v in variables.items()}
    assert_close("muon vs keras", p, expected, NS_RTOL, NS_ATOL)


def test_newton_schulz_nearly_orthogonalises() -> None:
    """Singular values of the result lie in about [0.7, 1.2], whatever the input's scale."""
    rng = np.random.default_rng(5)
    tx = optx.scale_by_muon(nesterov=False)
    for shape in [(8, 3), (3, 8), (6, 6)]:
        g = {"w": jnp.asarray(rng.standard_normal(shape) * 100, jnp.float32)}
        u, _ = tx.update(g, tx.init(g))
        sv = np.linalg.svd(np.asarray(u["w"]), compute_uv=False)
        assert np.all((sv > 0.6) & (sv < 1.25)), (shape, sv)
        assert_close("NS", u["w"], numpy_orthogonalize(np.asarray(g["w"], np.float64)), 1e-5, 1e-6)


# ---------------------------------------------------------------------------------------
# Muon's routing.


def muon_leaves(tx: Any, params: Any) -> list[str]:
    """The path names of the leaves with a Muon momentum in ``tx.init(params)``."""
    mu = tx.init(params).inner_states["muon"].inner_state[0].mu
    return [name for name, _ in optx.tree.leaves_with_paths(mu)]


def test_muon_routes_matrices_to_muon_and_the_rest_to_adamw() -> None:
    params = nested_params(conv=True)  # a 3-D kernel goes to AdamW by default, as in optax
    assert muon_leaves(optx.muon(1e-2), params) == ["blocks/0/w", "dense/kernel"]
    only_kernel = ["dense/kernel"]
    assert muon_leaves(optx.muon(1e-2, muon_mask="kernel"), params) == only_kernel
    with pytest.raises(TypeError) as info:
        optx.muon(1e-2, muon_mask=optx.tree.paths).init(params)
    assert str(info.value) == (
        "`muon` needs its mask callable to return a pytree of bools. Received: a leaf "
        "'blocks/0/conv'."
    )
    nothing = optx.muon(1e-2, muon_mask=False)
    assert muon_leaves(nothing, params) == []
    updates, _ = nothing.update(params, nothing.init(params), params)
    assert jax.tree.structure(updates) == jax.tree.structure(params)
    mask = {"dense": {"kernel": True, "bias": False}, "blocks": False, "scale": False}
    assert muon_leaves(optx.muon(1e-2, muon_mask=mask), params) == only_kernel
    wide = optx.muon(1e-2, muon_mask=lambda p: jax.tree.map(lambda x: x.shape[1:] == (4,), p))
    assert muon_leaves(wide, nested_params()) == only_kernel
    # Equal configurations are equal (they share compiled code), whatever the mask's form.
    assert optx.muon(1e-2, muon_mask="kernel") == optx.muon(1e-2, muon_mask="kernel")
    assert optx.muon(1e-2, muon_mask=mask) == optx.muon(1e-2, muon_mask=dict(mask))


@pytest.mark.parametrize("shape", [(0, 2), (0, 0), (2, 0)])
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"consistent_rms": 0.2}, {"adaptive": True, "preconditioning": "spectral"}],
    ids=["default", "consistent_rms", "adaptive"],
)
def test_muon_on_a_zero_size_matrix_gives_a_zero_size_update(
    shape: tuple[int, int], kwargs: dict[str, Any]
) -> None:
    # A zero-size matrix has no fan ratio: it once raised ZeroDivisionError.
    params = {"empty": jnp.zeros(shape), "w": jnp.ones((2, 3)), "b": jnp.ones(3)}
    tx = optx.muon(1e-2, **kwargs)
    for update in (tx.update, jax.jit(tx.update)):
        updates, _ = update(params, tx.init(params), params)
        assert updates["empty"].shape == shape and updates["empty"].dtype == jnp.float32
        assert all(bool(jnp.all(jnp.isfinite(u))) for u in jax.tree.leaves(updates))
    alone = optx.scale_by_shape()
    updates, _ = alone.update({"e": jnp.zeros(shape)}, alone.init({"e": jnp.zeros(shape)}))
    assert updates["e"].shape == shape


def test_muon_forced_on_a_3d_kernel_names_it() -> None:
    params = nested_params(conv=True)
    tx = optx.muon(1e-2, muon_mask=["conv", "kernel"])
    with pytest.raises(ValueError) as info:
        tx.init(params)
    assert str(info.value) == (
        "`scale_by_muon.init` needs 2-D parameters (matrices). Received: "
        "params['blocks/0/conv'] of shape (2, 3, 2). Route it to the AdamW fallback (in "
        "`muon`, leave it out of muon_mask: by default every leaf that is not 2-D goes "
        "there) or reshape it to a matrix."
    )
    with pytest.raises(ValueError) as info:
        optx.scale_by_muon().init({"b": jnp.ones(3)})
    assert "params['b'] of shape (3,)" in str(info.value)
    with pytest.raises(ValueError) as info:
        optx.scale_by_shape().init({"w": jnp.ones((2, 2, 2))})
    assert str(info.value).startswith(
        "`scale_by_shape.init` needs 2-D parameters (matrices). Received: params['w'] of "
        "shape (2, 2, 2)."
    )


# ---------------------------------------------------------------------------------------
# Convergence.


def minimise(tx: Any, loss: Callable[[Any], jax.Array], params: Any, steps: int) -> Any:
    def run(params: Any) -> Any:
        def step(carry: tuple, _: Any) -> tuple:
            p, s = carry
            u, s = tx.update(jax.grad(loss)(p), s, p)
            return (optx.apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), None, length=steps)[0][0]

    return jax.jit(run)(params)


def parabola(p: Any) -> jax.Array:
    return sum(
        jnp.sum(w * (x - 1.0) ** 2) for w, x in zip((1.0, 3.0), jax.tree.leaves(p), strict=True)
    )


def rosenbrock(p: Any) -> jax.Array:
    x, y = jnp.ravel(p["xy"])
    return (1 - x) ** 2 + 100 * (y - x**2) ** 2


def cosine(peak: float, steps: int) -> Callable[[jax.Array], jax.Array]:
    def schedule(count: jax.Array) -> jax.Array:
        return peak * 0.5 * (1 + jnp.cos(jnp.pi * jnp.minimum(count, steps) / steps))

    return schedule


# name: (optimizer for the parabola, for Rosenbrock, steps, Rosenbrock tolerance)
CONVERGENCE = {
    # The default b2 = 0.9999 remembers the steep start for 10,000 steps and stalls a
    # 3,000-step run in the valley; b2 = 0.99 forgets it.
    "adopt": (optx.adopt(cosine(0.1, 300)), optx.adopt(cosine(0.05, 3000), b2=0.99), 3000, 1e-4),
    # A short run: a slow EMA of 100 steps (b3 = 0.99), not the default 10,000.
    "ademamix": (
        optx.ademamix(0.05, b3=0.99),
        optx.ademamix(cosine(0.02, 3000), b3=0.99, alpha=1.0),
        3000,
        1e-4,
    ),
    # Learning-rate free: the schedule is a multiplier of Prodigy's own estimate.
    "prodigy": (optx.prodigy(), optx.prodigy(cosine(1.0, 3000)), 3000, 1e-4),
    # Muon's steps have a fixed spectral norm: a decaying learning rate lands them.
    "muon": (
        optx.muon(cosine(0.1, 300)),
        optx.muon(cosine(0.02, 3000), adam_learning_rate=0.0),
        3000,
        1e-3,
    ),
}


@pytest.mark.parametrize("name", list(CONVERGENCE))
def test_convergence(name: str) -> None:
    tx_parabola, tx_rosenbrock, steps, tol = CONVERGENCE[name]
    start = {"a": jnp.zeros((2, 3)), "b": jnp.full((3, 2), -2.0)}
    got = minimise(tx_parabola, parabola, start, 300)
    assert float(parabola(got)) < 1e-3, float(parabola(got))
    # Rosenbrock from (-1.5, 2): a 1x2 matrix, so that Muon takes it.
    got = minimise(tx_rosenbrock, rosenbrock, {"xy": jnp.array([[-1.5, 2.0]])}, steps)
    assert float(rosenbrock(got)) < tol, float(rosenbrock(got))
    np.testing.assert_allclose(got["xy"], [[1.0, 1.0]], atol=0.1)


# ---------------------------------------------------------------------------------------
# bfloat16 parameters with float32 moments.

BF16 = {
    "adopt": lambda dt: optx.adopt(1e-2, mu_dtype=dt, nu_dtype=dt),
    "ademamix": lambda dt: optx.ademamix(1e-2, b3=0.99, mu_dtype=dt),
    "muon": lambda dt: optx.muon(1e-2, mu_dtype=dt, nu_dtype=dt),
    "prodigy": lambda dt: optx.prodigy(estim_lr0=1e-3),  # slots follow the parameters
}


@pytest.mark.parametrize("name", list(BF16))
def test_bfloat16_params_stay_close_to_float32(name: str) -> None:
    steps = 20
    params = nested_params()
    grads = step_grads(params, steps=steps)
    p32, s32 = run_optx(BF16[name](None), params, grads)
    bf16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    p16, s16 = run_optx(BF16[name](jnp.float32), bf16, grads)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16))
    # bfloat16 keeps 8 bits: each step rounds a parameter by up to half an ulp, 2^-9 of its
    # size, so after n steps the runs may differ by n half-ulps (they differ by far less).
    for a, b in zip(jax.tree.leaves(p16), jax.tree.leaves(p32), strict=True):
        scale = float(jnp.max(jnp.abs(b)))
        error = float(jnp.max(jnp.abs(a.astype(jnp.float32) - b)))
        assert error <= steps * 2.0**-9 * scale, (name, error, scale)
    if name == "prodigy":  # its slots follow the parameters' dtype (as optax's)
        return
    # The moments depend on the (float32) gradients only: kept in float32, they are the
    # float32 run's.
    moments = [x for x in jax.tree.leaves(s16) if jnp.ndim(x) > 0]
    assert all(x.dtype == jnp.float32 for x in moments), name
    assert_close(
        f"{name} bf16 moments",
        moments,
        [x for x in jax.tree.leaves(s32) if jnp.ndim(x) > 0],
        RTOL,
        ATOL,
    )


# ---------------------------------------------------------------------------------------
# Errors.

ERRORS = [
    (
        lambda: optx.adopt(1e-2, clip_value_fn=1.0),
        TypeError,
        "`adopt` needs clip_value_fn to be a callable step -> bound. Received: clip_value_fn=1.0.",
    ),
    (
        lambda: optx.scale_by_adopt(use_clipping="yes"),
        TypeError,
        "`scale_by_adopt` needs use_clipping to be a bool. Received: use_clipping='yes'.",
    ),
    (
        lambda: optx.adopt(1e-2, nu_dtype="int32"),
        TypeError,
        "`adopt` needs nu_dtype to be None or a floating dtype. Received: nu_dtype='int32'.",
    ),
    (
        lambda: optx.adopt(1e-2, b2=1.0),
        ValueError,
        "`adopt` needs b2 in [0, 1). Received: b2=1.0.",
    ),
    (
        lambda: optx.ademamix(1e-2, alpha=-1.0),
        ValueError,
        "`ademamix` needs alpha finite and >= 0. Received: alpha=-1.0.",
    ),
    (
        lambda: optx.scale_by_ademamix(b3=1.0),
        ValueError,
        "`scale_by_ademamix` needs b3 in [0, 1). Received: b3=1.0.",
    ),
    (
        lambda: optx.ademamix(1e-2, mu_dtype="int8"),
        TypeError,
        "`ademamix` needs mu_dtype to be None or a floating dtype. Received: mu_dtype='int8'.",
    ),
    (
        lambda: optx.prodigy(betas=(0.9,)),
        ValueError,
        "`prodigy` needs betas to be a pair (b1, b2). Received: betas=(0.9,).",
    ),
    (
        lambda: optx.prodigy(estim_lr0=0.0),
        ValueError,
        "`prodigy` needs estim_lr0 finite and > 0. Received: estim_lr0=0.0.",
    ),
    (
        lambda: optx.scale_by_prodigy(beta3=1.0),
        ValueError,
        "`scale_by_prodigy` needs beta3 in [0, 1). Received: beta3=1.0.",
    ),
    (
        lambda: optx.prodigy(estim_lr_coef=-1.0),
        ValueError,
        "`prodigy` needs estim_lr_coef finite and >= 0. Received: estim_lr_coef=-1.0.",
    ),
    (
        lambda: optx.prodigy(safeguard_warmup=1),
        TypeError,
        "`prodigy` needs safeguard_warmup to be a bool. Received: safeguard_warmup=1.",
    ),
    (
        lambda: optx.muon(1e-2, ns_coeffs=(1.0, 2.0)),
        ValueError,
        "`muon` needs ns_coeffs to be a triple (a, b, c), a sequence of triples (one per "
        "step) or a preset name ('standard', 'dion'). Received: ns_coeffs=(1.0, 2.0).",
    ),
    (
        lambda: optx.scale_by_muon("polar"),
        ValueError,
        "`scale_by_muon` needs ns_coeffs to be a triple (a, b, c), a sequence of triples (one "
        "per step) or a preset name ('standard', 'dion'). Received: ns_coeffs='polar'.",
    ),
    (
        lambda: optx.muon(1e-2, ns_coeffs="dion", ns_steps=6),
        ValueError,
        "`muon` needs at least ns_steps triples in ns_coeffs. Received: 5 triples, ns_steps=6.",
    ),
    (
        lambda: optx.muon(1e-2, ns_steps=-1),
        ValueError,
        "`muon` needs ns_steps to be an int >= 0. Received: ns_steps=-1.",
    ),
    (
        lambda: optx.muon(1e-2, beta=1.0),
        ValueError,
        "`muon` needs beta in [0, 1). Received: beta=1.0.",
    ),
    (
        lambda: optx.muon(1e-2, preconditioning="newton"),
        ValueError,
        "`muon` needs preconditioning to be one of 'frobenius', 'spectral', 'aol', "
        "'schatten'. Received: preconditioning='newton'.",
    ),
    (
        lambda: optx.scale_by_muon(momentum_convention="torch"),
        ValueError,
        "`scale_by_muon` needs momentum_convention to be one of 'optax', 'keras'. "
        "Received: momentum_convention='torch'.",
    ),
    (
        lambda: optx.muon(1e-2, adaptive=None),
        TypeError,
        "`muon` needs adaptive to be a bool. Received: adaptive=None.",
    ),
    (
        lambda: optx.muon(1e-2, adam_nesterov="no"),
        TypeError,
        "`muon` needs adam_nesterov to be a bool. Received: adam_nesterov='no'.",
    ),
    (
        lambda: optx.muon(1e-2, adam_eps_placement="tf"),
        ValueError,
        "`muon` needs adam_eps_placement to be one of 'optax', 'keras'. "
        "Received: adam_eps_placement='tf'.",
    ),
    (
        lambda: optx.muon(1e-2, muon_mask={"w": 1}),
        TypeError,
        "`muon` needs muon_mask to be a pytree of bools, a callable returning one, or "
        "regular expressions on parameter paths. Received: muon_mask={'w': 1}.",
    ),
    (
        lambda: optx.muon(1e-2, consistent_rms=-0.2),
        ValueError,
        "`muon` needs consistent_rms finite and >= 0. Received: consistent_rms=-0.2.",
    ),
    (
        lambda: optx.scale_by_muon(mu_dtype=jnp.int32),
        TypeError,
        "`scale_by_muon` needs mu_dtype to be None or a floating dtype. "
        f"Received: mu_dtype={jnp.int32!r}.",
    ),
]


@pytest.mark.parametrize("build, error, message", ERRORS)
def test_error_messages(build: Callable[[], Any], error: type, message: str) -> None:
    with pytest.raises(error) as info:
        build()
    assert str(info.value) == message


def test_prodigy_needs_params() -> None:
    tx = optx.prodigy()
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    with pytest.raises(ValueError) as info:
        tx.update(params, state)
    assert str(info.value) == (
        "`scale_by_prodigy.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`."
    )
    with pytest.raises(ValueError, match=re.escape("needs params with the shapes of the state")):
        tx.update(params, state, {"w": jnp.ones(3)})


def test_prodigy_zero_gradients_keep_the_estimate() -> None:
    """optax's 0/0 would turn the estimate into NaN for good; optx keeps d0."""
    tx = optx.prodigy()
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    for _ in range(2):
        updates, state = tx.update({"w": jnp.zeros(2)}, state, params)
    assert float(state[0].estim_lr) == pytest.approx(1e-6)
    np.testing.assert_array_equal(updates["w"], 0.0)


def test_repr_shows_the_factories_arguments() -> None:
    assert repr(optx.scale_by_prodigy(betas=(0.8, 0.9))).startswith(
        "scale_by_prodigy(learning_rate=1.0, betas=(0.8, 0.9), beta3=None"
    )
    assert repr(optx.muon(0.1)).startswith("partition(")
