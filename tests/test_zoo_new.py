"""Newer methods: Muon, ADOPT, AdEMAMix and Prodigy.

Parity with optax.contrib (100 jitted steps on a nested pytree) and NumPy loops (Keras's
Muon convention among them, and Keras's Muon itself), run in float64 (Prodigy's in float32),
convergence on a parabola and the Rosenbrock function, bfloat16 with float32 moments, Muon's
routing, and every error message of these modules.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, assert_close, run64

import optx
from optx._src.algorithms.newton_schulz import NS_COEFFS_PRESETS, orthogonalize

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)

# Parity with optax and with the NumPy loops runs in float64 (`run64`), as in
# tests/test_zoo_adam.py: in float32, the divisions by sqrt(v) and the Newton-Schulz
# iteration magnify round-off, which differs between CPUs. In float64 the one difference
# left is optx's float32 hyperparameters (DESIGN D2), each off by at most EPS32 / 2
# relative: a fixed perturbation, the same on every machine. Each step's update is then off
# by at most ``k * EPS32 / 2`` of its size for ``k`` roundings (`Case.k`): 1 for a learning
# rate, a weight decay, an epsilon, each ``1 - b``; a float32 decay ``b`` makes ``b**n``
# ``n EPS32 / 2`` off, ``n`` averaging `lag` (``b / (1 - b)``, at most STEPS) over a moving
# average's weights, half of it through a square root; each float32 bias correction
# (``-expm1(t log1p(-(1 - b)))``) 3, half for b2. The parameters are then off by at most
# ``k * EPS32 / 2 * sum_t max|u_t|`` per leaf (``u_t`` the reference's updates), plus float64
# round-off, ROUNDOFF64 of each leaf's scale (32 roundings a step). A slot that is an
# average is off by its roundings of its terms' size (max|g|: it can cancel to near 0); a
# sum of squares by twice them (the full lag, no square root) of its value. Muon's matrices
# add the Newton-Schulz iteration's gain (`MuonSpec`). A learning rate 1.001x too large
# lands far outside (`test_parity_bounds_catch_a_learning_rate_off_by_1e3`).
ROUNDOFF64 = STEPS * 32 * EPS64
DION = NS_COEFFS_PRESETS["dion"]


def lag(b: float, steps: int = STEPS) -> float:
    """The roundings a float32 decay ``b`` costs a moving average over ``steps`` steps."""
    return min(steps, b / (1 - b))


# lr, b1 lag, b2 lag through the root, 1 - b1 and 1 - b2 (1 + 1/2), bias corrections, eps;
# Nesterov's extra b1 * m, its bias correction (3) and its division.
K_ADAM = 1 + lag(0.9) + lag(0.999) / 2 + 1.5 + 3 + 1.5 + 1
K_NESTEROV = 1 + 3 + 1
# ADOPT: lr; 1 - b1, b1's lag; sqrt(v): b2's lag (v_1 = g_1**2 keeps the weight b2**(t-1))
# and 1 - b2 through the root; eps; the clip bound t**0.25 (a float32 power, 2).
K_ADOPT = 1 + 1 + lag(0.9) + lag(0.9999) / 2 + 1 + 1 + 2
# AdEMAMix: lr, weight decay; m1 (1 - b1, lag, bias correction); m2 (1 - b3, lag); alpha;
# nu (1 - b2, lag, bias correction, through the root); eps.
K_ADEMAMIX = 2 + (1 + lag(0.9) + 3) + (1 + lag(0.9999)) + 1 + (1 + lag(0.999) + 3) / 2 + 1

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


def f32(x: Any) -> Any:
    """Numbers rounded to float32, as optx holds them (DESIGN D2); nested tuples too."""
    return jax.tree.map(lambda v: float(np.float32(v)), x)


# ---------------------------------------------------------------------------------------
# Muon's bounds. The Newton-Schulz iteration magnifies a perturbation of its input that is
# not along it (up to 3.4445**5 for a small singular value), so the references get Muon's
# momentum decay and coefficients as optx holds them, float32 values (`f32`): optax then
# computes ``m = beta m + (1 - beta) g`` with optx's ``beta``, and optx's momentum, which
# uses its float32 ``1 - beta``, is optax's times ``q = (1 - beta)32 / (1 - beta32)``, a
# common factor that the normalisation before the iteration removes (its epsilon, 1e-8
# against norms above 1e-2, moves nothing). What is left (`MuonSpec`):
# - scalars on the direction, relative to the update: the learning rate, the shape factor
#   (2 roundings: a float32 ratio, its root; 3 with consistent_rms), a weight decay;
# - Nesterov's ``k_m m + k_g g``: optx's bias corrections are float32 (3 roundings and a
#   division each) and come from ``1 - (1 - beta)32`` rather than ``beta32`` (``f(t)``,
#   `muon_scalars`): the part common to both terms is along the input, the rest, at most
#   ``K_NS * EPS32 / 2 * |k_g g_t|``, is magnified by the iteration's gain ``G_t``, the
#   norm of its Jacobian at the reference's input (`ns_gains`);
# - ``adaptive`` scales by ``<m_hat, O>``, linear in the common factors: ``|q - 1|`` and
#   the bias corrections' roundings, relative to the update.


def muon_scalars(beta: float) -> tuple[float, float]:
    """``(K_NS, K_COMMON)`` for the decay ``beta`` (in units of EPS32 / 2): Nesterov's
    differential roundings, and the roundings common to the direction.
    """
    b, c = f32(beta), f32(1 - beta)
    t = np.arange(1, STEPS + 2, dtype=np.float64)
    f = ((1 - b**t) / (1 - (1 - c) ** t) - 1) / (EPS32 / 2)
    q = abs(c / (1 - b) - 1) / (EPS32 / 2)
    return 2 * (3 + 1) + float(np.max(np.abs(np.diff(f)))), q + float(np.max(np.abs(f))) + 3 + 1


@functools.partial(jax.jit, static_argnames=("preconditioning", "adaptive"))
def _gains(m_hat: jax.Array, coeffs: jax.Array, preconditioning: str, adaptive: bool) -> Any:
    steps = coeffs.shape[0] if coeffs.ndim == 2 else 5
    eps = jnp.asarray(1e-8, m_hat.dtype)

    def direction(x: jax.Array) -> jax.Array:
        out = orthogonalize(x, coeffs, steps, preconditioning, eps)
        return jnp.sum(x * out) * out if adaptive else out

    def gain(x: jax.Array) -> jax.Array:
        return jnp.linalg.norm(jax.jacfwd(direction)(x).reshape(x.size, x.size), 2)

    return jax.vmap(gain)(m_hat)


def ns_gains(m_hat: np.ndarray, coeffs: Any, preconditioning: str, adaptive: bool) -> np.ndarray:
    """Per step (leading axis), the operator norm of the Jacobian of Muon's direction (the
    Newton-Schulz iteration, ``adaptive``'s scaling) at ``m_hat``, in float64. It is optx's
    own iteration, used only to size a bound.
    """
    with jax.enable_x64(True):
        coeffs = jnp.asarray(np.asarray(coeffs, np.float64))
        return np.asarray(_gains(jnp.asarray(m_hat), coeffs, preconditioning, adaptive))


@dataclasses.dataclass(frozen=True)
class MuonSpec:
    """A Muon configuration's bound on its matrices (see above): ``k`` scalar roundings of
    the update, and with ``nesterov`` (optax's convention: its bias corrections leave a part
    off the input's direction; Keras's convention has none) the magnified part, from the
    reference's momentum.
    """

    k: float
    lr: float = 1e-2
    beta: float = 0.95
    nesterov: bool = True
    preconditioning: str = "frobenius"
    adaptive: bool = False
    coeffs: Any = (3.4445, -4.7750, 2.0315)
    rms: float | None = None

    def atol(self, grads: np.ndarray, path: float) -> float:
        """``EPS32 / 2 * (k sum_t max|u_t| + lr s K_NS sum_t G_t |k_g g_t|)`` for a matrix
        with per-step gradients ``grads`` and reference updates ``path``.
        """
        k_ns, k_common = muon_scalars(self.beta)
        k = self.k + (k_common if self.adaptive else 0.0)
        bound = k * path
        if self.nesterov:
            m_hat, side = nesterov_momentum(grads, f32(self.beta))
            gains = ns_gains(m_hat, f32(self.coeffs), self.preconditioning, self.adaptive)
            fan_in, fan_out = grads.shape[1:]
            scale = (
                np.sqrt(max(1.0, fan_out / fan_in))
                if self.rms is None
                else np.sqrt(max(fan_in, fan_out)) * self.rms
            )
            bound += self.lr * scale * k_ns * float(np.sum(gains * side))
        return EPS32 / 2 * bound


def nesterov_momentum(grads: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """optax's Nesterov ``m_hat_t`` in float64 for per-step gradients (leading axis), and
    ``|k_g g_t|`` (Frobenius norm) of its gradient term.
    """
    m, out, side = np.zeros(grads.shape[1:]), [], []
    for t, g in enumerate(np.asarray(grads, np.float64), 1):
        m = beta * m + (1 - beta) * g
        k_g = (1 - beta) / (1 - beta**t)
        out.append(beta * m / (1 - beta ** (t + 1)) + k_g * g)
        side.append(np.linalg.norm(k_g * g))
    return np.stack(out), np.asarray(side)


# ---------------------------------------------------------------------------------------
# Parity with optax.contrib.


def muon_slots(state: Any) -> dict[str, Any]:
    """Muon's momentum and AdamW's moments, from an optx or optax `partition` state."""
    inner = state.inner_states
    adam = inner["adam"].inner_state[0]
    return {"muon mu": inner["muon"].inner_state[0].mu, "adam mu": adam[1], "adam nu": adam[2]}


def adopt_slots(state: Any) -> dict[str, Any]:
    return {"count": state[0].count, "mu": state[0].mu, "nu": state[0].nu}


def ademamix_slots(state: Any) -> dict[str, Any]:
    s = state[0]
    return {"count": s.count, "m1": s.m1, "m2": s.m2, "nu": s.nu}


def b3_schedule(count: jax.Array) -> jax.Array:
    return jnp.minimum(1.0 - 0.1 / (1.0 + count), 0.999)


def alpha_schedule(count: jax.Array) -> jax.Array:
    return jnp.minimum(0.5 * (1.0 + count), 5.0)


def lr_decay(count: jax.Array) -> jax.Array:
    """A float32 linear decay from 1 to 0.5: 3 roundings of its value (a cosine's ``1 +
    cos`` would cancel digits near its end).
    """
    return 1 - 0.5 * jnp.minimum(count, STEPS).astype(jnp.float32) / STEPS


@dataclasses.dataclass(frozen=True)
class Case:
    """One float64 parity case (see the top of the module): ``k`` roundings of each update
    (Muon's matrices: ``muon``); ``slots`` names the compared state entries, and ``slot_k``
    gives each ``(roundings, kind)``: ``"avg"`` relative to its terms' size (``terms``, by
    default max|g|), ``"sq"`` relative to its value, ``"exact"``.
    """

    optx_tx: Any
    optax_tx: Any
    slots: Callable[[Any], dict[str, Any]]
    k: float
    slot_k: dict[str, tuple[float, str]]
    muon: MuonSpec | None = None
    terms: float | None = None


ADOPT_SLOTS = {
    "count": (0, "exact"),
    # 1 - b1, b1's lag, and the normalised gradient's roundings (K_ADOPT's but the lr's).
    "mu": (K_ADOPT - 1, "avg"),
    "nu": (2 * (1 + lag(0.9999)), "sq"),
}
ADEMAMIX_SLOTS = {
    "count": (0, "exact"),
    "m1": (1 + lag(0.9), "avg"),
    "m2": (1 + lag(0.9999), "avg"),
    "nu": (2 * (1 + lag(0.999)), "sq"),
}
MUON_SLOTS = {
    "muon mu": (muon_scalars(0.95)[1], "avg"),
    "adam mu": (1 + lag(0.9), "avg"),
    "adam nu": (2 * (1 + lag(0.999)), "sq"),
}
MUON = optx.muon(1e-2)

PARITY = {
    "adopt": Case(
        optx.adopt(1e-2),
        optax.contrib.adopt(1e-2),
        adopt_slots,
        K_ADOPT,
        ADOPT_SLOTS,
        terms=STEPS**0.25,  # the clip bound of the normalised gradient
    ),
    "adopt/nesterov_b2": Case(
        optx.adopt(1e-2, b2=0.99, nesterov=True),
        optax.contrib.adopt(1e-2, b2=0.99, nesterov=True),
        adopt_slots,
        K_ADOPT + 2,  # Nesterov's extra b1 and 1 - b1 (b2 = 0.99: a shorter lag than counted)
        {**ADOPT_SLOTS, "mu": (K_ADOPT + 1, "avg")},
        terms=STEPS**0.25,
    ),
    "ademamix": Case(
        optx.ademamix(1e-2, weight_decay=0.1),
        optax.contrib.ademamix(1e-2, weight_decay=0.1),
        ademamix_slots,
        K_ADEMAMIX,
        ADEMAMIX_SLOTS,
    ),
    # No weight decay; the schedules: alpha's values are exact in float32, b3's are rounded
    # (`ademamix_schedule_atol`).
    "ademamix/schedules": Case(
        optx.ademamix(1e-2, b3=b3_schedule, alpha=alpha_schedule, eps_root=1e-8),
        optax.contrib.ademamix(1e-2, b3=b3_schedule, alpha=alpha_schedule, eps_root=1e-8),
        ademamix_slots,
        K_ADEMAMIX - 1,
        ADEMAMIX_SLOTS,
    ),
    "muon": Case(
        MUON,
        optax.contrib.muon(1e-2, ns_coeffs=f32((3.4445, -4.7750, 2.0315)), beta=f32(0.95)),
        muon_slots,
        K_ADAM + K_NESTEROV,
        MUON_SLOTS,
        MuonSpec(k=1 + 2),  # lr, shape factor
    ),
    "muon/spectral_rms_decay": Case(
        optx.muon(
            1e-2,
            nesterov=False,
            weight_decay=0.1,
            adam_weight_decay=0.05,
            consistent_rms=0.2,
            preconditioning="spectral",
            adam_learning_rate=lr_decay,
        ),
        optax.contrib.muon(
            1e-2,
            ns_coeffs=f32((3.4445, -4.7750, 2.0315)),
            beta=f32(0.95),
            nesterov=False,
            weight_decay=0.1,
            adam_weight_decay=0.05,
            consistent_rms=0.2,
            preconditioning="spectral",
            adam_learning_rate=lr_decay,
        ),
        muon_slots,
        K_ADAM + 1 + 3,  # the weight decay, lr_decay's roundings
        MUON_SLOTS,
        # lr, shape factor with consistent_rms, weight decay
        MuonSpec(k=1 + 3 + 1, nesterov=False, preconditioning="spectral", rms=0.2),
    ),
    "muon/aol_adaptive": Case(
        optx.muon(1e-2, preconditioning="aol", adaptive=True, beta=0.9),
        optax.contrib.muon(
            1e-2,
            ns_coeffs=f32((3.4445, -4.7750, 2.0315)),
            beta=f32(0.9),
            preconditioning="aol",
            adaptive=True,
        ),
        muon_slots,
        K_ADAM + K_NESTEROV,
        {**MUON_SLOTS, "muon mu": (muon_scalars(0.9)[1], "avg")},
        MuonSpec(k=1 + 2, beta=0.9, preconditioning="aol", adaptive=True),
    ),
    "muon/schatten_dion": Case(
        optx.muon(1e-2, ns_coeffs="dion", preconditioning="schatten"),
        optax.contrib.muon(1e-2, ns_coeffs=f32(DION), beta=f32(0.95), preconditioning="schatten"),
        muon_slots,
        K_ADAM + K_NESTEROV,
        MUON_SLOTS,
        MuonSpec(k=1 + 2, preconditioning="schatten", coeffs=DION),
    ),
}


def ademamix_schedule_atol(grads: np.ndarray) -> float:
    """The scheduled ``b3`` is rounded to float32 (up to EPS32 / 2, absolutely), and optx's
    ``1 - b3`` is computed from it, so each weight of ``m2`` is off by up to EPS32 / 2 of
    its gradient, not of its own size: ``alpha_t * EPS32 / 2 * sum_s |g_s|`` per step, over
    ``sqrt(v_hat_t) + eps``, times the learning rate.
    """
    g = np.asarray(grads, np.float64)
    t = np.arange(1, len(g) + 1, dtype=np.float64).reshape((-1,) + (1,) * (g.ndim - 1))
    nu, v = 0.0, []
    for x in g:
        nu = 0.999 * nu + 0.001 * x * x
        v.append(nu)
    v_hat = np.stack(v) / (1 - 0.999**t)
    alpha = np.minimum(0.5 * t, 5.0)
    steps = alpha * EPS32 / 2 * np.cumsum(np.abs(g), axis=0) / (np.sqrt(v_hat + 1e-8) + 1e-8)
    return 1e-2 * float(np.sum(np.max(steps.reshape(len(g), -1), axis=1)))


def parity_atols(name: str, case: Case, grads: Any, path: Any) -> list[float]:
    """Per parameter leaf: the bound on its distance from optax's (see `Case`)."""
    atols = []
    for g, u in zip(jax.tree.leaves(grads), jax.tree.leaves(path), strict=True):
        g = np.asarray(g, np.float64)
        if case.muon is not None and g.ndim == 3:  # a matrix (leading axis: step)
            atols.append(case.muon.atol(g, float(u)))
            continue
        atol = case.k * EPS32 / 2 * float(u)
        if name == "ademamix/schedules":
            atol += ademamix_schedule_atol(g)
        atols.append(atol)
    return atols


def parity_errors(name: str, scale: float = 1.0) -> list[float]:
    """Per parameter leaf, optx's (its updates times ``scale``) distance from optax's after
    STEPS float64 steps, over its bound.
    """
    case = PARITY[name]
    params = nested_params(conv=name.startswith("muon"))
    grads = step_grads(params)
    tx = optx.chain(case.optx_tx, optx.scale(scale))
    p, _, _ = run64(tx, optx.apply_updates, params, grads)
    p_ref, _, path = run64(case.optax_tx, optax.apply_updates, params, grads)
    atols = parity_atols(name, case, grads, path)
    leaves = zip(jax.tree.leaves(p), jax.tree.leaves(p_ref), atols, strict=True)
    return [
        float(np.max(np.abs(a - e))) / (atol + ROUNDOFF64 * float(np.max(np.abs(e))))
        for a, e, atol in leaves
    ]


@pytest.mark.parametrize("name", list(PARITY))
def test_parity_with_optax(name: str) -> None:
    case = PARITY[name]
    params = nested_params(conv=name.startswith("muon"))
    grads = step_grads(params)
    p, s, _ = run64(case.optx_tx, optx.apply_updates, params, grads)
    p_ref, s_ref, path = run64(case.optax_tx, optax.apply_updates, params, grads)
    atols = parity_atols(name, case, grads, path)
    for a, e, atol in zip(jax.tree.leaves(p), jax.tree.leaves(p_ref), atols, strict=True):
        assert a.dtype == np.float64
        assert_close(f"{name} params", a, e, ROUNDOFF64, atol)
    g_max = max(float(np.max(np.abs(g))) for g in jax.tree.leaves(grads))
    ours, theirs = case.slots(s), case.slots(s_ref)
    for slot, (k, kind) in case.slot_k.items():
        if kind == "exact":
            np.testing.assert_array_equal(ours[slot], theirs[slot])
        elif kind == "avg":
            atol = k * EPS32 / 2 * (case.terms or g_max)
            assert_close(f"{name} {slot}", ours[slot], theirs[slot], ROUNDOFF64, atol)
        else:
            assert_close(f"{name} {slot}", ours[slot], theirs[slot], k * EPS32 / 2 + ROUNDOFF64)


@pytest.mark.parametrize("name", ["ademamix/schedules", "muon"])
def test_parity_bounds_catch_a_learning_rate_off_by_1e3(name: str) -> None:
    """`test_parity_with_optax`'s bounds see a learning rate 1.001x too large."""
    errors = parity_errors(name, 1.001)
    print(f"{name} x 1.001: max error / bound {max(errors):.3g}")
    assert max(errors) > 10


# Prodigy's parity runs in float64 on a noisy parabola (`parabola64`), with hyperparameters
# that float32 holds exactly (powers of two, 1 - 2**-k), so that DESIGN D2's float32
# storage rounds none of them. Two differences are left:
# - the bias correction ``sqrt(1 - b2**t) / (1 - b1**t)`` is computed in float32 from the
#   float32 decays: 3 roundings for each correction (half of b2's through the root), the
#   root and the division, K_PRODIGY_BC of every step's size;
# - the estimate ``d = c r / |s|_1`` divides sums whose terms cancel: a relative error e of
#   their weights (the same bias correction) moves ``r`` and ``s`` by ``e * sum|terms|``,
#   that is ``d`` by ``e * cond`` (`numpy_prodigy` returns ``cond``, the worst ratio
#   ``sum|terms| / |sum|`` of ``r`` plus that of ``|s|_1`` over the steps), and ``d``
#   scales every later step.
# Per leaf the parameters are then off by at most
# ``K_PRODIGY_BC * (1 + cond) * EPS32 / 2 * sum_t max|u_t|`` plus float64 round-off
# (ROUNDOFF64 times cond, of each leaf's scale); ``d`` and ``r`` by
# ``K_PRODIGY_BC * cond * EPS32 / 2 + ROUNDOFF64 * cond`` relative.
K_PRODIGY_BC = 3 + 3 / 2 + 1 + 1
EXACT_BETAS = (0.875, 1 - 2**-10)


def prodigy_step_lr(count: jax.Array) -> jax.Array:
    """A learning-rate multiplier whose values are exact in float32."""
    return jnp.where(count < STEPS // 2, 1.0, 0.5)


# name: (keyword arguments of both factories, of `numpy_prodigy`).
PRODIGY_CASES = {
    "prodigy": (
        {"betas": EXACT_BETAS, "eps": 2.0**-27, "estim_lr0": 2.0**-20},
        {"b1": 0.875, "b2": 1 - 2**-10, "eps": 2.0**-27, "d0": 2.0**-20},
    ),
    "prodigy/options": (
        {
            "learning_rate": prodigy_step_lr,
            "betas": EXACT_BETAS,
            "beta3": 1 - 2**-5,
            "eps": 2.0**-20,
            "estim_lr0": 2.0**-10,
            "estim_lr_coef": 2.0,
            "weight_decay": 0.125,
            "safeguard_warmup": True,
        },
        {
            "lr": lambda t: 1.0 if t - 1 < STEPS // 2 else 0.5,
            "b1": 0.875,
            "b2": 1 - 2**-10,
            "b3": 1 - 2**-5,
            "eps": 2.0**-20,
            "d0": 2.0**-10,
            "coef": 2.0,
            "wd": 0.125,
            "safeguard": True,
        },
    ),
}


def parabola64(tx: Any, params: Any, noise: Any) -> tuple:
    """`run_noisy_parabola` in float64; NumPy results (compare them outside x64)."""
    with jax.enable_x64(True):
        params, noise = jax.tree.map(
            lambda x: jnp.asarray(np.asarray(x, np.float64)), (params, noise)
        )
        return jax.tree.map(np.asarray, run_noisy_parabola(tx, params, noise))


def prodigy_parity_errors(
    name: str, lr_factor: float = 1.0, masked: bool = False, loop_masked: bool = True
) -> list[float]:
    """Errors of optx's and optax's Prodigy against `numpy_prodigy`, each over its bound.

    ``masked``: optax main's ``weight_decay_mask`` (the matrices), optx's alone (optax
    0.2.8 has not the argument), against the loop masked alike (or not: ``loop_masked``).
    """
    kwargs, loop = PRODIGY_CASES[name]
    params = jax.tree.map(jnp.zeros_like, nested_params())
    noise = jax.tree.map(lambda g: 0.1 * g, step_grads(params))
    if masked:
        kwargs = {**kwargs, "weight_decay_mask": matrices_mask}
        if loop_masked:
            loop = {**loop, "decays": [jnp.ndim(p) == 2 for p in jax.tree.leaves(params)]}
    expected, (d, r), path, cond = numpy_prodigy(params, noise, **loop)
    assert float(d) > 10 * loop["d0"]  # the estimate grew
    if lr_factor != 1.0:
        kwargs = {**kwargs, "learning_rate": lr_factor}
    k = K_PRODIGY_BC * (1 + cond)
    errors = []
    txs = [optx.prodigy(**kwargs)] + ([] if masked else [optax.contrib.prodigy(**kwargs)])
    for tx in txs:
        p, s = parabola64(tx, params, noise)
        for x, e, u in zip(jax.tree.leaves(p), jax.tree.leaves(expected), path, strict=True):
            bound = k * EPS32 / 2 * u + ROUNDOFF64 * cond * np.max(np.abs(e))
            errors.append(float(np.max(np.abs(x - e))) / bound)
        rtol = K_PRODIGY_BC * cond * EPS32 / 2 + ROUNDOFF64 * cond
        state = s if hasattr(s, "estim_lr") else s[0]  # optax's, or optx's chain
        estimate = (state.estim_lr, state.numerator_weighted)
        for a, b in zip(estimate, (d, r), strict=True):
            errors.append(abs(float(a) - b) / (rtol * abs(b)))
    return errors


@pytest.mark.parametrize("name", list(PRODIGY_CASES))
def test_prodigy_parity_with_optax_and_numpy(name: str) -> None:
    errors = prodigy_parity_errors(name)
    print(f"{name}: max error / bound {max(errors):.3g}")
    assert max(errors) <= 1


def matrices_mask(params: Any) -> Any:
    """A weight-decay mask: the matrices."""
    return jax.tree.map(lambda p: jnp.ndim(p) == 2, params)


def test_prodigy_weight_decay_mask_matches_numpy() -> None:
    errors = prodigy_parity_errors("prodigy/options", masked=True)
    print(f"prodigy/options with a mask: max error / bound {max(errors):.3g}")
    assert max(errors) <= 1
    # The mask shows: against the loop that decays every leaf, far outside the bounds.
    assert max(prodigy_parity_errors("prodigy/options", masked=True, loop_masked=False)) > 10


def test_prodigy_bounds_catch_a_learning_rate_off_by_1e3() -> None:
    errors = prodigy_parity_errors("prodigy", 1.001)
    print(f"prodigy x 1.001: max error / bound {max(errors):.3g}")
    assert max(errors) > 10


def test_prodigy_float64_params_keep_a_float64_estimate() -> None:
    params = {"w": jnp.zeros(3), "h": jnp.zeros(2, jnp.bfloat16)}
    assert optx.prodigy().init(params)[0].estim_lr.dtype == jnp.float32
    with jax.enable_x64(True):
        state = optx.prodigy().init({"w": jnp.zeros(3, jnp.float64)})
        assert state[0].estim_lr.dtype == jnp.float64
        assert state[0].numerator_weighted.dtype == jnp.float64


# ---------------------------------------------------------------------------------------
# Float64 NumPy loops.


def numpy_adopt(params, grads, lr, b1=0.9, b2=0.9999, eps=1e-6, nesterov=False, clip=True):
    """ADOPT in float64; also per leaf ``sum_t max|u_t|`` and the largest normalised gradient
    (the first moment's terms).
    """
    x, steps, treedef = numpy_steps(params, grads)
    m = [np.zeros_like(p) for p in x]
    v = [np.zeros_like(p) for p in x]
    path, terms = [0.0] * len(x), [0.0] * len(x)
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
            path[i] += float(np.max(np.abs(lr * u)))
            terms[i] = max(terms[i], float(np.max(np.abs(s))))
    return treedef.unflatten(x), (treedef.unflatten(m), treedef.unflatten(v)), path, max(terms)


def numpy_ademamix(params, grads, lr, b1=0.9, b2=0.999, b3=0.9999, alpha=5.0, eps=1e-8, wd=0.0):
    x, steps, treedef = numpy_steps(params, grads)
    m1, m2, v = ([np.zeros_like(p) for p in x] for _ in range(3))
    path = [0.0] * len(x)
    for t, g in enumerate(steps, 1):
        for i, gi in enumerate(g):
            m1[i] = b1 * m1[i] + (1 - b1) * gi
            m2[i] = b3 * m2[i] + (1 - b3) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            u = (m1[i] / (1 - b1**t) + alpha * m2[i]) / (np.sqrt(v[i] / (1 - b2**t)) + eps)
            path[i] += float(np.max(np.abs(lr * (u + wd * x[i]))))
            x[i] = x[i] - lr * (u + wd * x[i])
    return treedef.unflatten(x), tuple(treedef.unflatten(s) for s in (m1, m2, v)), path


def numpy_prodigy(params, noise, lr=1.0, b1=0.9, b2=0.999, b3=None, eps=1e-8, d0=1e-6, coef=1.0,
                  wd=0.0, safeguard=False, decays=None):  # fmt: skip
    """Prodigy on the noisy parabola: gradients ``x - 1 + noise_t``. ``lr`` a number or a
    function of the step (from 1); ``decays`` per leaf whether ``wd`` applies (default
    all, optax main's ``weight_decay_mask``). Also per leaf ``sum_t max|u_t|``, and the estimate's
    condition: over the steps, the largest ``c sum|terms of r_t| / |s_t|_1`` relative to
    ``d_{t+1}`` plus ``sum|terms of s_t| / |s_t|_1``.
    """
    x, steps, treedef = numpy_steps(params, noise)
    x0 = [p.copy() for p in x]
    m, v, s, s_abs = ([np.zeros_like(p) for p in x] for _ in range(4))
    b3 = np.sqrt(b2) if b3 is None else b3
    d, r, r_abs, cond = d0, 0.0, 0.0, 1.0
    path = [0.0] * len(x)
    for t, n in enumerate(steps, 1):
        g = [xi - 1 + ni for xi, ni in zip(x, n, strict=True)]
        lr_t = lr(t) if callable(lr) else lr
        dlr = d * lr_t * np.sqrt(1 - b2**t) / (1 - b1**t)
        terms = [gi * (p0 - p) for gi, p0, p in zip(g, x0, x, strict=True)]
        numerator = sum(float(np.sum(z)) for z in terms)
        for i, gi in enumerate(g):
            m[i] = b1 * m[i] + (1 - b1) * d * gi
            v[i] = b2 * v[i] + (1 - b2) * (d * gi) ** 2
            s[i] = b3 * s[i] + (d if safeguard else dlr) * d * gi / d0
            s_abs[i] = b3 * s_abs[i] + np.abs((d if safeguard else dlr) * d * gi / d0)
        r = b3 * r + (d / d0) * dlr * numerator
        r_abs = b3 * r_abs + (d / d0) * dlr * sum(float(np.sum(np.abs(z))) for z in terms)
        denominator = sum(float(np.sum(np.abs(si))) for si in s)
        new_d = max(d, coef * r / denominator)
        # The estimate's error relative to d (the estimate is at most d).
        s_ratio = sum(float(np.sum(a)) for a in s_abs) / denominator
        cond = max(cond, coef * r_abs / denominator / new_d + s_ratio)
        for i in range(len(x)):
            decay = wd if decays is None or decays[i] else 0.0
            u = -decay * dlr * x[i] - dlr * m[i] / (np.sqrt(v[i]) + new_d * eps)
            path[i] += float(np.max(np.abs(u)))
            x[i] = x[i] + u
        d = new_d
    return treedef.unflatten(x), (d, r), path, cond


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
               adam_keras_eps=False, coeffs=(3.4445, -4.7750, 2.0315)):  # fmt: skip
    """Muon on the 2-D leaves, AdamW on the others; also per leaf ``sum_t max|u_t|``."""
    adam_nesterov = nesterov if adam_nesterov is None else adam_nesterov
    x, steps, treedef = numpy_steps(params, grads)
    m = [np.zeros_like(p) for p in x]
    v = [np.zeros_like(p) for p in x]
    path = [0.0] * len(x)
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
                u, decay = scale * numpy_orthogonalize(mh, coeffs, eps=eps), wd
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
            path[i] += float(np.max(np.abs(lr * (u + decay * x[i]))))
            x[i] = x[i] - lr * (u + decay * x[i])
    return treedef.unflatten(x), treedef.unflatten(m), path


def check_params64(name: str, p: Any, expected: Any, path: list, k: float, grads: Any,
                   muon: MuonSpec | None = None) -> None:  # fmt: skip
    """float64 parameters against a NumPy loop's: ``k`` roundings of each update (Muon's
    matrices: ``muon``'s bound; see the top of the module).
    """
    leaves = jax.tree.leaves(p), jax.tree.leaves(expected), path, jax.tree.leaves(grads)
    for a, e, u, g in zip(*leaves, strict=True):
        assert np.asarray(a).dtype == np.float64
        g = np.asarray(g, np.float64)
        atol = muon.atol(g, u) if muon is not None and g.ndim == 3 else k * EPS32 / 2 * u
        assert_close(name, a, e, ROUNDOFF64, atol)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"nesterov": True, "use_clipping": False, "b2": 0.99}],
    ids=["default", "nesterov_no_clipping"],
)
def test_adopt_matches_numpy(kwargs: dict) -> None:
    params = nested_params()
    grads = step_grads(params)
    p, s, _ = run64(optx.adopt(1e-2, **kwargs), optx.apply_updates, params, grads)
    names = {"nesterov": "nesterov", "use_clipping": "clip", "b2": "b2"}
    expected, (mu, nu), path, terms = numpy_adopt(
        params, grads, 1e-2, **{names[k]: v for k, v in kwargs.items()}
    )
    # Without clipping, g / sqrt(v) of a small v is large: so are its terms and updates,
    # to which the bounds are relative.
    k = K_ADOPT + (2 if kwargs.get("nesterov") else 0)
    check_params64("adopt params", p, expected, path, k, grads)
    assert_close("adopt mu", s[0].mu, mu, ROUNDOFF64, (k - 1) * EPS32 / 2 * terms)
    b2 = kwargs.get("b2", 0.9999)
    assert_close("adopt nu", s[0].nu, nu, 2 * (1 + lag(b2)) * EPS32 / 2 + ROUNDOFF64)


def test_adopt_first_update_is_zero() -> None:
    tx = optx.adopt(0.1, use_clipping=False)
    params = {"w": jnp.ones(3)}
    updates, state = tx.update({"w": jnp.array([1.0, -2.0, 0.0])}, tx.init(params), params)
    np.testing.assert_array_equal(updates["w"], 0.0)
    np.testing.assert_array_equal(state[0].nu["w"], [1.0, 4.0, 0.0])


def test_ademamix_matches_numpy() -> None:
    params = nested_params()
    grads = step_grads(params)
    tx = optx.ademamix(1e-2, b3=0.99, weight_decay=0.1)
    p, s, _ = run64(tx, optx.apply_updates, params, grads)
    expected, (m1, m2, nu), path = numpy_ademamix(params, grads, 1e-2, b3=0.99, wd=0.1)
    # b3 = 0.99: its lag is min(STEPS, 99), as counted for 0.9999 in K_ADEMAMIX.
    check_params64("ademamix params", p, expected, path, K_ADEMAMIX, grads)
    g_max = max(float(np.max(np.abs(g))) for g in jax.tree.leaves(grads))
    for name, a, e, k in (("m1", s[0].m1, m1, 1 + lag(0.9)), ("m2", s[0].m2, m2, 1 + lag(0.99))):
        assert_close(f"ademamix {name}", a, e, ROUNDOFF64, k * EPS32 / 2 * g_max)
    assert_close("ademamix nu", s[0].nu, nu, 2 * (1 + lag(0.999)) * EPS32 / 2 + ROUNDOFF64)


STANDARD = (3.4445, -4.7750, 2.0315)
# name: (optx's arguments, the loop's, AdamW's roundings, the matrices' `MuonSpec`). The
# loop takes beta and the coefficients as optx holds them (see `MuonSpec`).
MUON_CASES = {
    "optax": ({}, {}, K_ADAM + K_NESTEROV, MuonSpec(k=1 + 2)),
    "optax/plain_rms_decay": (
        {"nesterov": False, "consistent_rms": 0.2, "weight_decay": 0.1, "adam_weight_decay": 0.1},
        {"nesterov": False, "rms": 0.2, "wd": 0.1, "adam_wd": 0.1},
        K_ADAM + 1,  # the weight decay
        MuonSpec(k=1 + 3 + 1, nesterov=False, rms=0.2),
    ),
    # Keras's Muon in optx's terms (keras-semantics.md 2.13). Its momentum takes no bias
    # correction: with the same beta both sides' inputs to the iteration agree to float64
    # round-off, and nothing is magnified (``nesterov=False`` in the `MuonSpec`). AdamW's
    # Keras epsilon placement: the root of its bias correction, 1 more.
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
        K_ADAM + 1 + 1,
        MuonSpec(k=1 + 3 + 1, nesterov=False, rms=0.2),
    ),
    "keras/plain": (
        {"momentum_convention": "keras", "nesterov": False, "adam_eps_placement": "keras"},
        {"keras": True, "nesterov": False, "adam_keras_eps": True},
        K_ADAM + 1,
        MuonSpec(k=1 + 2, nesterov=False),
    ),
}


@pytest.mark.parametrize("name", list(MUON_CASES))
def test_muon_matches_numpy(name: str) -> None:
    kwargs, numpy_kwargs, k, spec = MUON_CASES[name]
    params = nested_params()
    grads = step_grads(params)
    p, s, _ = run64(optx.muon(1e-2, **kwargs), optx.apply_updates, params, grads)
    expected, m, path = numpy_muon(
        params, grads, 1e-2, beta=f32(0.95), coeffs=f32(STANDARD), **numpy_kwargs
    )
    check_params64(f"muon {name} params", p, expected, path, k, grads, spec)
    got_m = s.inner_states["muon"].inner_state[0].mu
    expected_m = jax.tree.map(lambda g, x: x if g.ndim == 2 else optx.MaskedNode(), params, m)
    # optax's convention: optx's momentum is the loop's times q (`muon_scalars`); Keras's:
    # the same sums, float64 round-off of their terms (up to max|g| / (1 - beta)).
    g_max = max(float(np.max(np.abs(g))) for g in jax.tree.leaves(grads))
    if kwargs.get("momentum_convention") == "keras":
        atol = ROUNDOFF64 * g_max / (1 - 0.95)
    else:
        atol = muon_scalars(0.95)[1] * EPS32 / 2 * g_max
    assert_close(f"muon {name} momentum", got_m, expected_m, ROUNDOFF64, atol)


def test_muon_matches_keras_itself() -> None:
    """`keras.optimizers.Muon` (JAX backend, float64) against the Keras convention of `muon`.

    Keras gets the momentum and the coefficients as optx holds them (see `MuonSpec`), and
    keeps its learning rate in a float32 variable, as optx does. What is left: the shape
    factor (3 roundings) and the weight decay on the matrices; AdamW's roundings over 10
    steps (b1's lag 9, b2's 10 / 2, 1 - b1 and 1 - b2, bias corrections and the root of the
    second, eps, the weight decay).
    """
    import keras

    assert keras.backend.backend() == "jax"
    params = {
        "bias": nested_params()["dense"]["bias"],
        "kernel": nested_params()["dense"]["kernel"],
    }
    steps = 10
    grads = step_grads(params, steps=steps)
    a, b, c = f32(STANDARD)
    with jax.enable_x64(True):
        opt = keras.optimizers.Muon(
            learning_rate=1e-2, momentum=f32(0.95), muon_a=a, muon_b=b, muon_c=c
        )
        variables = {
            k: keras.Variable(np.asarray(v, np.float64), name=k, dtype="float64")
            for k, v in params.items()
        }
        opt.build(list(variables.values()))
        path = dict.fromkeys(variables, 0.0)
        for t in range(steps):
            before = {k: np.asarray(v.value) for k, v in variables.items()}
            opt.apply_gradients(
                [
                    (jnp.asarray(np.asarray(grads[k][t], np.float64)), variables[k])
                    for k in variables
                ]
            )
            for k, v in variables.items():
                path[k] += float(np.max(np.abs(np.asarray(v.value) - before[k])))
        expected = {k: np.asarray(v.value) for k, v in variables.items()}
    p, _, _ = run64(optx.muon(1e-2, **MUON_CASES["keras"][0]), optx.apply_updates, params, grads)
    k_adam = lag(0.9, steps) + lag(0.999, steps) / 2 + 1.5 + 3 + 2.5 + 1 + 1
    assert_close("muon vs keras, bias", p["bias"], expected["bias"], ROUNDOFF64,
                 k_adam * EPS32 / 2 * path["bias"])  # fmt: skip
    assert_close("muon vs keras, kernel", p["kernel"], expected["kernel"], ROUNDOFF64,
                 (3 + 1) * EPS32 / 2 * path["kernel"])  # fmt: skip


# The iteration's polynomial has slope at most 4 on the singular values it meets ([0, 1.25]),
# so float64 round-off (32 roundings of an iteration's terms) grows by at most 4 per
# iteration: 5 iterations.
NS_ROUNDOFF64 = 5 * 32 * EPS64 * 4.0**5


def test_newton_schulz_nearly_orthogonalises() -> None:
    """Singular values of the result lie in about [0.7, 1.2], whatever the input's scale.

    In float64, with the loop given the coefficients as optx holds them: optx's float32
    bias correction scales the input by a factor that the normalisation removes, and what
    is left is float64 round-off (NS_ROUNDOFF64).
    """
    rng = np.random.default_rng(5)
    tx = optx.scale_by_muon(nesterov=False)
    for shape in [(8, 3), (3, 8), (6, 6)]:
        g = rng.standard_normal(shape) * 100
        with jax.enable_x64(True):
            u, _ = tx.update({"w": jnp.asarray(g)}, tx.init({"w": jnp.asarray(g)}))
            u = np.asarray(u["w"])
        assert u.dtype == np.float64
        sv = np.linalg.svd(u, compute_uv=False)
        assert np.all((sv > 0.6) & (sv < 1.25)), (shape, sv)
        assert_close("NS", u, numpy_orthogonalize(g, f32(STANDARD)), NS_ROUNDOFF64)


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
        "there), give it MuonDimensionNumbers (weight_dimension_numbers) or reshape it to a "
        "matrix."
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
    loss = float(parabola(minimise(tx_parabola, parabola, start, 300)))
    assert loss < 1e-3, loss
    # Rosenbrock from (-1.5, 2): a 1x2 matrix, so that Muon takes it.
    got = minimise(tx_rosenbrock, rosenbrock, {"xy": jnp.array([[-1.5, 2.0]])}, steps)
    assert float(rosenbrock(got)) < tol, float(rosenbrock(got))
    np.testing.assert_allclose(got["xy"], [[1.0, 1.0]], atol=0.1)
    # No rate bounds where these land: the float64 run must reach a quarter of the bounds
    # (tests/TOLERANCES.md "Convergence thresholds").
    with jax.enable_x64(True):
        start64 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), start)
        loss64 = float(parabola(minimise(tx_parabola, parabola, start64, 300)))
        xy64 = {"xy": jnp.array([[-1.5, 2.0]], jnp.float64)}
        got64 = np.asarray(minimise(tx_rosenbrock, rosenbrock, xy64, steps)["xy"])
        rosen64 = float(rosenbrock({"xy": got64}))
    print(f"{name}: float32 {loss:.3g} / {float(rosenbrock(got)):.3g}")
    print(f"{name}: float64 {loss64:.3g} / {rosen64:.3g}")
    assert loss64 <= 1e-3 / 4
    assert rosen64 <= tol / 4
    assert np.max(np.abs(got64 - 1.0)) <= 0.1 / 4


# ---------------------------------------------------------------------------------------
# bfloat16 parameters with float32 moments.

BF16 = {
    "adopt": (lambda dt: optx.adopt(1e-2, mu_dtype=dt, nu_dtype=dt), adopt_slots),
    "ademamix": (lambda dt: optx.ademamix(1e-2, b3=0.99, mu_dtype=dt), ademamix_slots),
    "muon": (lambda dt: optx.muon(1e-2, mu_dtype=dt, nu_dtype=dt), muon_slots),
    "prodigy": (lambda dt: optx.prodigy(estim_lr0=1e-3), None),  # slots follow the params
}
# bfloat16 keeps 8 significant bits: rounding to it moves a value by up to 2**-8 of its size.
BF16_ROUNDING = 2.0**-8
# The moments' float32 roundings a step: two products and a sum (g**2 too for nu).
MOMENT_ROUNDINGS = 4


@pytest.mark.parametrize("name", list(BF16))
def test_bfloat16_params_stay_close_to_float32(name: str) -> None:
    steps = 20
    params = nested_params()
    grads = step_grads(params, steps=steps)
    make, slots = BF16[name]
    p32, s32 = run_optx(make(None), params, grads)
    bf16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    p16, s16 = run_optx(make(jnp.float32), bf16, grads)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16))
    # The updates do not depend on the parameters (but for Prodigy's estimate, through
    # ``x0 - x``): the runs differ by the initial rounding and one per step, each at most
    # BF16_ROUNDING of the parameter.
    for a, b in zip(jax.tree.leaves(p16), jax.tree.leaves(p32), strict=True):
        scale = float(jnp.max(jnp.abs(b)))
        error = float(jnp.max(jnp.abs(a.astype(jnp.float32) - b)))
        print(f"{name}: bf16 against float32 {error / scale:.3g} of the scale")
        assert error <= (steps + 1) * BF16_ROUNDING * scale, (name, error, scale)
    if slots is None:  # Prodigy's slots follow the parameters' dtype (as optax's)
        return
    # The moments depend on the (float32) gradients only and are kept in float32: the two
    # programs compute the same sums, up to their float32 roundings (a multiply-add may be
    # contracted in one and not the other): MOMENT_ROUNDINGS a step, of the terms' size for
    # an average (max|g|, or ADOPT's clip bound), of its value for a sum of squares.
    terms = max(max(float(np.max(np.abs(g))) for g in jax.tree.leaves(grads)), steps**0.25)
    for label, a in slots(s16).items():
        b = slots(s32)[label]
        if label == "count":
            np.testing.assert_array_equal(a, b)
            continue
        assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(a)), (name, label)
        if label.endswith("nu"):
            assert_close(f"{name} {label}", a, b, steps * MOMENT_ROUNDINGS * EPS32 / 2)
        else:
            atol = steps * MOMENT_ROUNDINGS * EPS32 / 2 * terms
            assert_close(f"{name} {label}", a, b, 0.0, atol)


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
