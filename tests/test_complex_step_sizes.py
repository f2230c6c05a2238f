"""Complex parameters in the optimizers that set their own step size, against NumPy loops.

Prodigy, D-Adaptation, Mechanic, COCOB, MoMo, MoMo-Adam and layer-wise DoG train complex
parameters with real estimates: an inner product inside a real quantity is its real part
``Re<x, y> = Re(sum(conj(x) * y))``, a norm or a per-coordinate size is of moduli, second
moments are ``|g|**2`` in real slots, and first moments, sums of gradients and updates stay
complex. optax has no complex rule for these (it mixes complex values into its real
estimates), so each is compared with a float64 NumPy loop of the complex rule written here,
run by optx in complex128 (with a float64 leaf beside the complex ones) on a quadratic loss
whose minimum moves at each step. The gradient is used as given: the loops pass
``a * (x - c_t)``, the conjugate of JAX's gradient of ``0.5 * sum a |x - c_t|**2``, as a
caller of optax's complex support does.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import EPS32, FAST_COMPILE

import optx

STEPS = 60
EPS64 = float(np.finfo(np.float64).eps)


def f32(value: float) -> float:
    """``value`` rounded to float32, as optx holds hyperparameters (DESIGN D2)."""
    return float(np.float32(value))


# ---------------------------------------------------------------------------------------
# The problem: ``0.5 * sum a |x - c_t|**2`` on a nested tree of complex leaves and a real
# one, curvatures ``a`` in [0.5, 2], per-step targets ``c_t`` near 1 + 1j (1 for the real
# leaf).


def problem(real_imag: bool = True) -> tuple[Any, Any, Any]:
    """Parameters, curvatures and targets (leading axis: step) as NumPy trees.

    Without ``real_imag`` the complex leaves have a zero imaginary part (still complex128).
    """
    rng = np.random.default_rng(0)

    def draw(shape: tuple[int, ...], is_complex: bool, centre: float) -> np.ndarray:
        x = centre + 0.5 * rng.standard_normal(shape)
        if not is_complex:
            return x
        imag = centre + 0.5 * rng.standard_normal(shape)
        return x + 1j * imag if real_imag else x + 0j

    def tree(lead: tuple[int, ...], centre: float) -> Any:
        return {
            "dense": {
                "kernel": draw((*lead, 3, 2), True, centre),
                "bias": draw((*lead, 3), False, centre),
            },
            "layers": [draw((*lead, 4), True, centre)],
            "scale": draw(lead, True, centre),
        }

    params = tree((), 0.0)
    curv = jax.tree.map(lambda p: rng.uniform(0.5, 2.0, np.shape(p)), params)
    return params, curv, tree((STEPS,), 1.0)


def _leaves(tree: Any) -> list[np.ndarray]:
    return [np.array(x) for x in jax.tree.leaves(tree)]


def _value(x: list[np.ndarray], a: list[np.ndarray], c: list[np.ndarray]) -> float:
    return float(
        sum(0.5 * np.sum(ai * np.abs(xi - ci) ** 2) for xi, ai, ci in zip(x, a, c, strict=True))
    )


def _re_vdot(x: list[np.ndarray], y: list[np.ndarray]) -> float:
    """``Re<x, y>`` over every leaf."""
    return float(sum(np.real(np.vdot(xi, yi)) for xi, yi in zip(x, y, strict=True)))


def _sq_norm(x: list[np.ndarray]) -> float:
    return float(sum(np.sum(np.abs(xi) ** 2) for xi in x))


def _bias_correction(b: float, t: int) -> float:
    """``1 - b**t`` without cancellation."""
    return float(-np.expm1(t * np.log1p(-(1 - b))))


def numpy_loop(step: Callable[..., list[np.ndarray]], real_imag: bool = True) -> tuple:
    """``step(g, x, value, t)`` (returning the updates) over STEPS steps of the problem.

    Returns the final parameters (a tree) and per leaf ``sum_t max|u_t|``.
    """
    params, curv, targets = problem(real_imag)
    treedef = jax.tree.structure(params)
    x, a = _leaves(params), _leaves(curv)
    path = [0.0] * len(x)
    for t in range(1, STEPS + 1):
        c = [ct[t - 1] for ct in _leaves(targets)]
        g = [ai * (xi - ci) for xi, ai, ci in zip(x, a, c, strict=True)]
        u = step(g, x, _value(x, a, c), t)
        path = [s + float(np.max(np.abs(ui))) for s, ui in zip(path, u, strict=True)]
        x = [xi + ui for xi, ui in zip(x, u, strict=True)]
    return treedef.unflatten(x), path


@functools.lru_cache(maxsize=32)
def _runner(tx: Any, with_value: bool) -> Callable:
    @functools.partial(jax.jit, compiler_options=FAST_COMPILE)
    def go(params: Any, curv: Any, targets: Any) -> tuple:
        def step(carry: tuple, c: Any) -> tuple:
            x, s = carry
            g = jax.tree.map(lambda xi, ai, ci: ai * (xi - ci), x, curv, c)
            terms = jax.tree.map(
                lambda xi, ai, ci: 0.5 * jnp.sum(ai * jnp.abs(xi - ci) ** 2), x, curv, c
            )
            extra = {"value": sum(jax.tree.leaves(terms))} if with_value else {}
            u, s = tx.update(g, s, x, **extra)
            return (optx.apply_updates(x, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), targets)[0]

    return go


def run_optx(tx: Any, with_value: bool, real_imag: bool = True, real: bool = False) -> tuple:
    """``tx`` over STEPS steps in complex128 and float64 (``real``: float64 everywhere, the
    real parts of the complex leaves); NumPy results (final parameters, state)."""
    data = problem(real_imag)
    if real:
        data = jax.tree.map(np.real, data)
    with jax.enable_x64(True):
        data = jax.tree.map(jnp.asarray, data)
        return jax.tree.map(np.asarray, _runner(tx, with_value)(*data))


# ---------------------------------------------------------------------------------------
# The references: float64 NumPy loops of the complex rules, as each docstring states them,
# given the hyperparameters as optx holds them (`f32`; then optx's ``1 - b`` of a float32
# ``b`` is exact too).


def numpy_prodigy(lr, b1, b2, b3, eps, d0, coef, wd, safeguard):
    """Prodigy; also the estimate's condition (as tests/test_zoo_new.py's `numpy_prodigy`):
    over the steps, the largest ``c sum|terms of r_t| / |s_t|_1`` relative to ``d_{t+1}``
    plus ``sum|terms of s_t| / |s_t|_1`` (moduli of the complex terms)."""
    b3 = np.sqrt(b2) if b3 is None else b3
    st: dict[str, Any] = {"d": d0, "d0": d0, "r": 0.0, "r_abs": 0.0, "cond": 1.0}

    def step(g, x, value, t):
        if t == 1:
            st["x0"] = [xi.copy() for xi in x]
            st["m"], st["s"] = [np.zeros_like(xi) for xi in x], [np.zeros_like(xi) for xi in x]
            st["v"] = [np.zeros(np.shape(xi)) for xi in x]
            st["s_abs"] = [np.zeros(np.shape(xi)) for xi in x]
        d = st["d"]
        dlr = d * lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        weight = d if safeguard else dlr
        terms = [
            np.real(np.conj(gi) * (p0 - xi)) for gi, p0, xi in zip(g, st["x0"], x, strict=True)
        ]
        for i, gi in enumerate(g):
            st["m"][i] = b1 * st["m"][i] + (1 - b1) * d * gi
            st["v"][i] = b2 * st["v"][i] + (1 - b2) * np.abs(d * gi) ** 2
            st["s"][i] = b3 * st["s"][i] + weight * d * gi / d0
            st["s_abs"][i] = b3 * st["s_abs"][i] + np.abs(weight * d * gi / d0)
        st["r"] = b3 * st["r"] + (d / d0) * dlr * sum(float(np.sum(z)) for z in terms)
        st["r_abs"] = b3 * st["r_abs"] + (d / d0) * dlr * sum(
            float(np.sum(np.abs(z))) for z in terms
        )
        den = sum(float(np.sum(np.abs(si))) for si in st["s"])
        new_d = max(d, coef * st["r"] / den)
        s_ratio = sum(float(np.sum(a)) for a in st["s_abs"]) / den
        st["cond"] = max(st["cond"], coef * st["r_abs"] / den / new_d + s_ratio)
        st["d"] = new_d
        return [
            -wd * dlr * xi - dlr * mi / (np.sqrt(vi) + new_d * eps)
            for xi, mi, vi in zip(x, st["m"], st["v"], strict=True)
        ]

    return step, st


def numpy_dadapt(lr, b1, b2, eps, d0, wd):
    """D-Adaptation AdamW."""
    sb2 = np.sqrt(b2)
    st: dict[str, Any] = {"d": d0, "d0": d0, "r": 0.0}

    def step(g, x, value, t):
        if t == 1:
            st["m"], st["s"] = [np.zeros_like(xi) for xi in x], [np.zeros_like(xi) for xi in x]
            st["v"] = [np.zeros(np.shape(xi)) for xi in x]
        d = st["d"]
        dlr = d * lr * np.sqrt(_bias_correction(b2, t)) / _bias_correction(b1, t)
        num = _re_vdot(
            g, [si / (np.sqrt(vi) + eps) for si, vi in zip(st["s"], st["v"], strict=True)]
        )
        st["m"] = [b1 * mi + (1 - b1) * dlr * gi for mi, gi in zip(st["m"], g, strict=True)]
        st["v"] = [b2 * vi + (1 - b2) * np.abs(gi) ** 2 for vi, gi in zip(st["v"], g, strict=True)]
        st["s"] = [sb2 * si + (1 - sb2) * dlr * gi for si, gi in zip(st["s"], g, strict=True)]
        st["r"] = sb2 * st["r"] + (1 - sb2) * dlr * num
        den = (1 - sb2) * sum(float(np.sum(np.abs(si))) for si in st["s"])
        if den > 0:
            st["d"] = max(d, st["r"] / den)
        return [
            -wd * dlr * xi - mi / (np.sqrt(vi) + eps)
            for xi, mi, vi in zip(x, st["m"], st["v"], strict=True)
        ]

    return step, st


def numpy_mechanic(lr, momentum, wd, eps, s_init, n):
    """Mechanic around SGD with Nesterov momentum (``lr``, ``momentum``)."""
    betas = 1 - 0.1 ** np.arange(1, n + 1)
    st: dict[str, Any] = {
        "r": np.zeros(n),
        "m": np.zeros(n),
        "v": np.zeros(n),
        "s": np.full(n, s_init),
    }

    def step(g, x, value, t):
        if t == 1:
            st["x0"] = [xi.copy() for xi in x]
            st["trace"] = [np.zeros_like(xi) for xi in x]
        st["trace"] = [gi + momentum * ti for gi, ti in zip(g, st["trace"], strict=True)]
        base = [-lr * (gi + momentum * ti) for gi, ti in zip(g, st["trace"], strict=True)]
        s_sum = np.sum(st["s"])
        decay = wd * s_sum * np.sqrt(_sq_norm(g)) / (np.sqrt(_sq_norm(x)) + eps)
        delta = [(p0 - xi) / (s_sum + eps) for p0, xi in zip(st["x0"], x, strict=True)]
        h = _re_vdot([gi + decay * xi for gi, xi in zip(g, x, strict=True)], delta)
        clipped = np.clip(h, -st["m"], st["m"])
        st["m"] = np.maximum(betas * st["m"], abs(h) + eps)
        st["v"] = betas**2 * st["v"] + h**2
        st["r"] = betas * st["r"] + clipped * st["s"]
        wealth = (s_init / n) * st["m"] + np.maximum(st["r"], 0.0)
        st["s"] = wealth / (np.sqrt(st["v"]) + eps)
        total = np.sum(st["s"])
        new = [p0 - total * (di - ui) for p0, di, ui in zip(st["x0"], delta, base, strict=True)]
        return [ni - xi for ni, xi in zip(new, x, strict=True)]

    return step, st


def numpy_cocob(lr, alpha, eps, wd, decays):
    """COCOB-Backprop on ``lr (g + wd x)`` (``wd`` on the leaves ``decays`` selects): each
    complex coordinate a coin in the plane."""
    st: dict[str, Any] = {}

    def step(g, x, value, t):
        if t == 1:
            st["x0"] = [xi.copy() for xi in x]
            st["c"] = [np.zeros_like(xi) for xi in x]
            st["l"] = [np.full(np.shape(xi), eps) for xi in x]
            st["g"], st["r"] = (
                [np.zeros(np.shape(xi)) for xi in x],
                [np.zeros(np.shape(xi)) for xi in x],
            )
        out = []
        for i, (gi, xi, p0) in enumerate(zip(g, x, st["x0"], strict=True)):
            gi = lr * (gi + (wd * xi if decays[i] else 0))
            st["l"][i] = np.maximum(st["l"][i], np.abs(gi))
            st["g"][i] = st["g"][i] + np.abs(gi)
            st["r"][i] = np.maximum(st["r"][i] - np.real(np.conj(gi) * (xi - p0)), 0.0)
            st["c"][i] = st["c"][i] - gi
            big_l = st["l"][i]
            bet = (
                st["c"][i]
                / (big_l * np.maximum(st["g"][i] + big_l, alpha * big_l))
                * (big_l + st["r"][i])
            )
            out.append(p0 + bet - xi)
        return out

    return step, st


def _polyak(st, lr, wd, lower, adapt, barf, gamma, iprod, norm, bc1):
    decay = 1 + lr * wd
    lb = st["lb"] if adapt else lower
    if adapt:
        cap = decay * (barf - gamma) + iprod
        if cap < decay * bc1 * lb:
            lb = max(cap / (2 * bc1 * decay), lower)
    gap = max(decay * (barf - bc1 * lb - gamma) + iprod, 0.0)
    tau = min(lr / bc1, 0.0 if norm <= EPS64 else gap / norm)
    if adapt:
        lb = max(((barf + iprod - gamma) - tau * norm / 2) / bc1, lower)
    st["lb"] = lb
    return tau


def numpy_momo(lr, beta, lower, wd, adapt):
    """MoMo: the averages start at the first gradient and loss."""
    st: dict[str, Any] = {"barf": 0.0, "gamma": 0.0, "lb": lower}

    def step(g, x, value, t):
        b, c = (0.0, 1.0) if t == 1 else (beta, 1 - beta)
        if t == 1:
            st["d"] = [np.zeros_like(xi) for xi in x]
        st["barf"] = b * st["barf"] + c * value
        st["d"] = [b * di + c * gi for di, gi in zip(st["d"], g, strict=True)]
        st["gamma"] = b * st["gamma"] + c * _re_vdot(g, x)
        norm, iprod = _sq_norm(st["d"]), _re_vdot(st["d"], x)
        tau = _polyak(st, lr, wd, lower, adapt, st["barf"], st["gamma"], iprod, norm, 1.0)
        shrink = lr * wd / (1 + lr * wd)
        return [-shrink * xi - tau * di for xi, di in zip(x, st["d"], strict=True)]

    return step, st


def numpy_momo_adam(lr, b1, b2, eps, lower, wd, adapt):
    """MoMo-Adam."""
    st: dict[str, Any] = {"barf": 0.0, "gamma": 0.0, "lb": lower}

    def step(g, x, value, t):
        if t == 1:
            st["m"] = [np.zeros_like(xi) for xi in x]
            st["v"] = [np.zeros(np.shape(xi)) for xi in x]
        st["barf"] = b1 * st["barf"] + (1 - b1) * value
        st["m"] = [b1 * mi + (1 - b1) * gi for mi, gi in zip(st["m"], g, strict=True)]
        st["v"] = [b2 * vi + (1 - b2) * np.abs(gi) ** 2 for vi, gi in zip(st["v"], g, strict=True)]
        bc1, bc2 = _bias_correction(b1, t), _bias_correction(b2, t)
        w = [mi / (eps + np.sqrt(vi / bc2)) for mi, vi in zip(st["m"], st["v"], strict=True)]
        norm = _re_vdot(st["m"], w)
        st["gamma"] = b1 * st["gamma"] + (1 - b1) * _re_vdot(g, x)
        iprod = _re_vdot(st["m"], x)
        tau = _polyak(st, lr, wd, lower, adapt, st["barf"], st["gamma"], iprod, norm, bc1)
        shrink = lr * wd / (1 + lr * wd)
        return [-shrink * xi - tau * wi for xi, wi in zip(x, w, strict=True)]

    return step, st


def numpy_layerwise_dog(reps, eps, scale):
    """Layer-wise DoG: per leaf, its distance from the start over its gradients' norms."""
    st: dict[str, Any] = {}

    def step(g, x, value, t):
        if t == 1:
            st["x0"] = [xi.copy() for xi in x]
            st["d"] = [reps * (1 + np.sqrt(_sq_norm([xi]))) for xi in x]
            st["sos"] = [0.0 for _ in x]
        out = []
        for i, (gi, xi, p0) in enumerate(zip(g, x, st["x0"], strict=True)):
            st["d"][i] = max(st["d"][i], np.sqrt(_sq_norm([xi - p0])))
            st["sos"][i] += _sq_norm([gi])
            out.append(scale * st["d"][i] / np.sqrt(st["sos"][i] + eps) * gi)
        return out

    return step, st


# ---------------------------------------------------------------------------------------
# The cases: optx's transform and the reference, with hyperparameters float32 holds
# exactly where optx computes in float32 (Prodigy's bias corrections), else rounded to
# float32 on both sides (`f32`).

KERNEL_DECAYS = [False, True, False, False]  # leaves in path order: bias, kernel, layers, scale
EXACT_BETAS = (0.875, 1 - 2**-10)


CASES: dict[str, Callable[[float], tuple[Any, Callable[[], tuple], bool]]] = {
    "prodigy": lambda k: (
        optx.prodigy(k, EXACT_BETAS, None, 2.0**-27, 2.0**-10, 1.0, 2.0**-6),
        lambda: numpy_prodigy(1.0, *EXACT_BETAS, None, 2.0**-27, 2.0**-10, 1.0, 2.0**-6, False),
        False,
    ),
    "scale_by_prodigy/safeguard": lambda k: (
        optx.scale_by_prodigy(k, EXACT_BETAS, 1 - 2**-5, 2.0**-20, 2.0**-8, 2.0, 0.0, True),
        lambda: numpy_prodigy(1.0, *EXACT_BETAS, 1 - 2**-5, 2.0**-20, 2.0**-8, 2.0, 0.0, True),
        False,
    ),
    "dadapt_adamw": lambda k: (
        optx.dadapt_adamw(f32(0.5) * k, (f32(0.8), f32(0.99)), f32(1e-6), f32(1e-3), f32(0.1)),
        lambda: numpy_dadapt(f32(0.5), f32(0.8), f32(0.99), f32(1e-6), f32(1e-3), f32(0.1)),
        False,
    ),
    "mechanize": lambda k: (
        optx.mechanize(
            optx.sgd(0.5 * k, momentum=0.5, nesterov=True), f32(0.1), f32(1e-6), f32(1e-4), 4
        ),
        lambda: numpy_mechanic(0.5, 0.5, f32(0.1), f32(1e-6), f32(1e-4), 4),
        False,
    ),
    "cocob": lambda k: (
        optx.contrib.cocob(0.5 * k, 10.0, f32(1e-6), f32(0.1), mask="kernel"),
        lambda: numpy_cocob(0.5, 10.0, f32(1e-6), f32(0.1), KERNEL_DECAYS),
        False,
    ),
    "momo/adaptive": lambda k: (
        optx.contrib.momo(0.5 * k, f32(0.8), -1.0, f32(0.1), adapt_lower_bound=True),
        lambda: numpy_momo(0.5, f32(0.8), -1.0, f32(0.1), True),
        True,
    ),
    "momo_adam": lambda k: (
        optx.contrib.momo_adam(f32(0.1) * k, f32(0.8), f32(0.99), f32(1e-6), -1.0, f32(0.1)),
        lambda: numpy_momo_adam(f32(0.1), f32(0.8), f32(0.99), f32(1e-6), -1.0, f32(0.1), False),
        True,
    ),
    "momo_adam/adaptive": lambda k: (
        optx.contrib.momo_adam(0.5 * k, 0.875, 0.9921875, 2.0**-20, -1.0, 0.0, True),
        lambda: numpy_momo_adam(0.5, 0.875, 0.9921875, 2.0**-20, -1.0, 0.0, True),
        True,
    ),
    "scale_by_distance_over_gradients": lambda k: (
        optx.scale_by_distance_over_gradients(f32(1e-3), f32(1e-4), None, -0.5 * k),
        lambda: numpy_layerwise_dog(f32(1e-3), f32(1e-4), -0.5),
        False,
    ),
}

# The bounds. With the hyperparameters as optx holds them the two sides compute the same
# numbers in float64 (optx's estimates and bias corrections are in the estimates' dtype,
# float64 here), and differ by float64 round-off, as tests/test_contrib1.py's parity: per
# step a value goes through at most OPS = 32 roundings and reductions over the N real
# terms of the tree (a complex element is up to 4 real products: N = 4 * 11 + 3 = 47), each
# off by ``N * EPS64`` of its terms' size (Higham 2002, section 3.1); over STEPS steps these
# add, and GROWTH = 1e3 allows for the ratios of sums that may cancel (D-Adaptation's and
# MoMo's estimates, Mechanic's ``h``, COCOB's reward). Relative to a leaf's scale (at least
# 1): RTOL.
# Prodigy computes its bias corrections ``sqrt(1 - b2**t) / (1 - b1**t)`` in float32 (from
# the exact float32 decays): as tests/test_zoo_new.py, K_PRODIGY_BC = 3 + 3 / 2 + 1 + 1
# roundings of every step's size, times ``1 + cond`` for the estimate, a ratio of sums
# that may cancel (`numpy_prodigy`'s ``cond``); plus RTOL of each leaf's scale.
N = 4 * 11 + 3
OPS = 32
GROWTH = 1e3
RTOL = STEPS * (OPS + N) * EPS64 * GROWTH
K_PRODIGY_BC = 3 + 3 / 2 + 1 + 1


def errors_over_bounds(name: str, factor: float = 1.0) -> list[float]:
    """Per leaf, optx's distance from the reference after STEPS steps, over its bound."""
    tx, reference, with_value = CASES[name](factor)
    step, st = reference()
    expected, path = numpy_loop(step)
    got, _ = run_optx(tx, with_value)
    start = jax.tree.leaves(problem()[0])
    out = []
    for a, e, x0, u in zip(
        jax.tree.leaves(got), jax.tree.leaves(expected), start, path, strict=True
    ):
        assert a.dtype == e.dtype, (name, a.dtype, e.dtype)
        assert np.max(np.abs(e - x0)) > 1e-3, f"{name}: a leaf did not move"
        bound = RTOL * max(float(np.max(np.abs(e))), 1.0)
        if "cond" in st:
            bound += K_PRODIGY_BC * (1 + st["cond"]) * EPS32 / 2 * u
        out.append(float(np.max(np.abs(a - e))) / bound)
    if "d0" in st:
        assert st["d"] > 10 * st["d0"], f"{name}: the estimate did not grow"
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_complex_run_matches_the_numpy_reference(name: str) -> None:
    errors = errors_over_bounds(name)
    print(f"{name}: max error / bound {max(errors):.3g}")
    assert max(errors) <= 1


def test_the_bound_catches_a_learning_rate_off_by_1e3() -> None:
    # Prodigy's bound, the loosest (float32 bias corrections), still sees it.
    errors = errors_over_bounds("prodigy", 1.001)
    print(f"prodigy x 1.001: max error / bound {max(errors):.3g}")
    assert max(errors) > 10


@pytest.mark.parametrize("name", list(CASES))
def test_a_zero_imaginary_part_gives_the_real_run(name: str) -> None:
    # The complex rule reduces to the real one: complex leaves with a zero imaginary part
    # follow the run of their real parts (float64 everywhere), to float64 round-off.
    tx, _, with_value = CASES[name](1.0)
    got, _ = run_optx(tx, with_value, real_imag=False)
    real, _ = run_optx(tx, with_value, real_imag=False, real=True)
    for a, e in zip(jax.tree.leaves(got), jax.tree.leaves(real), strict=True):
        assert np.all(np.imag(a) == 0), name
        bound = RTOL * max(float(np.max(np.abs(e))), 1.0)
        assert np.max(np.abs(np.real(a) - e)) <= bound, name


def _dtypes(tree: Any) -> set[str]:
    return {np.dtype(x.dtype).name for x in jax.tree.leaves(tree)}


def test_estimates_and_moduli_are_real() -> None:
    params = jax.tree.map(
        lambda x: jnp.asarray(x, jnp.complex64 if np.iscomplexobj(x) else jnp.float32),
        problem()[0],
    )
    complex_, real = {"complex64", "float32"}, {"float32"}
    state = optx.prodigy().init(params)[0]
    assert _dtypes(state.exp_avg) == complex_ and _dtypes(state.exp_avg_sq) == real
    assert _dtypes((state.estim_lr, state.numerator_weighted)) == real
    state = optx.dadapt_adamw().init(params)
    assert _dtypes(state.grad_sum) == complex_ and _dtypes(state.exp_avg_sq) == real
    state = optx.contrib.scale_by_cocob().init(params)
    assert _dtypes(state.cumulative_gradients) == complex_
    assert _dtypes((state.scale, state.subgradients, state.reward)) == real
    state = optx.contrib.momo_adam().init(params)
    assert _dtypes(state.exp_avg_sq) == real and _dtypes((state.barf, state.gamma)) == real
    state = optx.contrib.mechanize(optx.sgd(0.1)).init(params)
    assert _dtypes((state.r, state.m, state.v, state.s)) == real
    state = optx.scale_by_distance_over_gradients(param_dtype=jnp.complex64).init(params)
    assert _dtypes(state.init_params) == {"complex64"}
    assert _dtypes((state.max_dist, state.grad_sum_of_squares)) == real


def test_layerwise_dog_refuses_a_real_copy_of_complex_params() -> None:
    params = {"w": jnp.zeros(2, jnp.float32), "z": jnp.zeros(3, jnp.complex64)}
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`scale_by_distance_over_gradients.init` needs a complex param_dtype for complex "
            "params (a real slot would drop the imaginary part). Received: "
            "param_dtype='float32' for params['z'] of dtype complex64. Pass "
            "param_dtype=jnp.complex64 (or None, the parameters' dtypes)."
        ),
    ):
        optx.scale_by_distance_over_gradients().init(params)
