"""The Adam family beyond `adam` / `adamw`: nadam, nadamw, amsgrad, adamax, adamaxw, radam and
the Keras conventions of their building blocks.

- Parity with optax: 100 jitted steps (`lax.scan`) on a nested float32 pytree with gradients
  that vary per step; parameters and the state entries both libraries keep.
- Float64 NumPy loops written here, for optax's numerics and for each Keras convention.
- Keras itself (``stateless_apply`` on the JAX backend): 50 steps.
- Convergence on a parabola and the 2-D Rosenbrock function, bfloat16 parameters with
  float32 moments, and every error message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, assert_close, run64

import optx

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)
# The float32 comparisons that remain (radam's moments, bfloat16 parameters with float32
# moments, the NumPy loops' updates): a moment gets 3 roundings a step (two products, a sum),
# each EPS32 / 2 of its terms' size, and b2 = 0.999 forgets them too slowly to count on over
# STEPS steps: STEPS * 3 * EPS32 / 2 = 1.8e-5 of a leaf's scale. A bias correction or a
# learning rate off by 1e-3 is 50x that. ATOL: leaves that stay near zero.
RTOL, ATOL = STEPS * 3 * EPS32 / 2, 1e-7
# optax computes ``1 - b**t`` from ``b`` rounded to float32 (``float32(0.999)`` is 1.3e-8 off,
# so ``1 - b2**t`` is 1.3e-5 off relative at t = 1); optx computes it from the exact ``1 - b``
# it stores. Keras does as optax (`test_matches_keras`).
BIAS_RTOL = 1e-5

# Parity with optax runs in float64 (`run64`): then the one difference left is optx's float32
# hyperparameters (DESIGN D2), each off by at most EPS32 / 2 relative. Each step's update is
# off by at most ``k * EPS32 / 2`` of its size for ``k`` roundings (`Case.k`): 1 for the
# learning rate, the weight decay, epsilon; a decay ``b`` is used as float32 ``b`` in
# ``b * m`` (``1 - b`` is exact), so ``b**n`` is off by ``n * EPS32 / 2``, ``n`` averaging
# ``b / (1 - b)`` (at most STEPS) over a moving average's weights: 9 for 0.9, 4 for 0.8, and
# min(STEPS, 999) / 2 = 50 for Adam's b2 (through the square root); AdaMax's decayed maximum
# ``b2**n |g|`` takes the full ``n <= STEPS``; each float32 bias correction 3 (half for b2).
# The parameters are then off by at most ``k * EPS32 / 2 * sum_t max|u_t|`` per leaf, plus
# float64 round-off, ``STEPS * 32 * EPS64`` of each leaf's scale (32 roundings a step).
ROUNDOFF64 = STEPS * 32 * EPS64
# lr, b1 lag, b2 lag, 1 - b1 and 1 - b2 as float32 (1 + 1/2), bias corrections, eps
K_ADAM = 1 + 9 + 50 + 2 + 3 + 2 + 1
K_NADAM = K_ADAM + 1 + 3  # Nesterov's extra b1 * m, with its own bias correction
K_ADAMAX = 1 + 9 + STEPS + 3 + 1  # lr, b1 lag, b2 lag (a maximum: no square root), eps


# ---------------------------------------------------------------------------------------
# Data and runners.


def make_params() -> Any:
    """A nested float32 pytree: dicts and a list; matrices, vectors, a 3-D kernel, a scalar."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "dense": {"kernel": normal(3, 4), "bias": normal(4)},
        "blocks": [{"conv": normal(2, 3, 2)}, normal(5)],
        "scale": normal(),
    }


def make_grads(params: Any, steps: int = STEPS) -> Any:
    """Gradients for each step (leading axis), their size swinging between 0.2 and 2.2."""
    rng = np.random.default_rng(1)
    size = 0.2 + 2.0 * np.sin(0.3 * np.arange(steps)) ** 2

    def draw(p: jax.Array) -> jax.Array:
        g = rng.standard_normal((steps, *p.shape)) * size.reshape((steps,) + (1,) * p.ndim)
        return jnp.asarray(g, p.dtype)

    return jax.tree.map(draw, params)


def run(tx: Any, apply_updates: Callable[..., Any], params: Any, grads: Any) -> tuple:
    """All steps under one `jax.jit` of a `lax.scan`; returns the final params and state."""

    @jax.jit
    def go(params: Any, grads: Any) -> tuple:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), grads)[0]

    return go(params, grads)


SLOTS = ("mu", "nu", "nu_max")


def slots(state: Any) -> dict[str, list[Any]]:
    """The leaves under each slot attribute of ``state``, and the step counts of the states
    that hold moments.
    """
    out: dict[str, list[Any]] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        names = [k.name for k in path if isinstance(k, jax.tree_util.GetAttrKey)]
        slot = next((n for n in names if n in SLOTS), None)
        if slot is not None:
            out.setdefault(slot, []).append(leaf)

    def visit(node: Any) -> bool:
        if hasattr(node, "_fields") and {"count", "mu"} <= set(node._fields):
            out.setdefault("count", []).append(node.count)
            return True
        return False

    jax.tree_util.tree_flatten(state, is_leaf=visit)
    return out


# ---------------------------------------------------------------------------------------
# Parity with optax.


@dataclasses.dataclass(frozen=True)
class Case:
    """One parity case: optx and optax transforms, and ``k``, the roundings of float32
    hyperparameters a step's update goes through (see `ROUNDOFF64`).
    """

    id: str
    optx_tx: Callable[[], Any]
    optax_tx: Callable[[], Any]
    k: float = K_ADAM


CASES = [
    Case("nadam", lambda: optx.nadam(1e-2), lambda: optax.nadam(1e-2), K_NADAM),
    Case(
        "nadamw",
        lambda: optx.nadamw(1e-2, b1=0.8, weight_decay=1e-2),
        lambda: optax.nadamw(1e-2, b1=0.8, weight_decay=1e-2),
        K_NADAM + 1,  # the weight decay (b1 = 0.8: a shorter lag than counted)
    ),
    Case(
        "amsgrad",
        lambda: optx.amsgrad(1e-2, eps_root=1e-8),
        lambda: optax.amsgrad(1e-2, eps_root=1e-8),
    ),
    Case(
        "amsgrad/no_bias_correction",
        lambda: optx.amsgrad(1e-2, bias_correction_mu=False, bias_correction_nu=False),
        lambda: optax.amsgrad(1e-2, bias_correction_mu=False, bias_correction_nu=False),
    ),
    Case("adamax", lambda: optx.adamax(1e-2), lambda: optax.adamax(1e-2), K_ADAMAX),
    Case(
        "adamaxw",
        lambda: optx.adamaxw(1e-2, b2=0.99, eps=1e-3, weight_decay=1e-2),
        lambda: optax.adamaxw(1e-2, b2=0.99, eps=1e-3, weight_decay=1e-2),
        K_ADAMAX + 1,  # the weight decay
    ),
]


def parity_bounds(case: Case, path: Any) -> list[float]:
    """Per parameter leaf: ``k * EPS32 / 2 * sum_t max|u_t|`` (see `ROUNDOFF64`)."""
    return [case.k * EPS32 / 2 * float(u) for u in jax.tree.leaves(path)]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_matches_optax(case: Case) -> None:
    params = make_params()
    grads = make_grads(params)
    p_optx, s_optx, _ = run64(case.optx_tx(), optx.apply_updates, params, grads)
    p_optax, s_optax, path = run64(case.optax_tx(), optax.apply_updates, params, grads)
    for a, e, atol in zip(
        jax.tree.leaves(p_optx), jax.tree.leaves(p_optax), parity_bounds(case, path), strict=True
    ):
        assert a.dtype == np.float64
        assert_close(f"{case.id} params", a, e, ROUNDOFF64, atol)
    ours, theirs = slots(s_optx), slots(s_optax)
    assert set(ours) == set(theirs) and {"mu", "nu", "count"} <= set(ours), (ours, theirs)
    # mu can cancel to near zero: its error is relative to its terms' size, max|g|. nu and
    # nu_max are sums of squares or maxima (no cancellation): relative to their values, with
    # b2's full lag (no square root): 2 k roundings.
    g_max = max(float(np.max(np.abs(g))) for g in jax.tree.leaves(grads))
    for name in ours:
        if name == "mu":
            rtol, atol = ROUNDOFF64, case.k * EPS32 / 2 * g_max
        else:
            rtol, atol = 2 * case.k * EPS32 / 2 + ROUNDOFF64, 0.0
        assert_close(f"{case.id} {name}", ours[name], theirs[name], rtol, atol)


@pytest.mark.parametrize("case_id", ["nadam", "adamax"])
def test_parity_bounds_catch_a_learning_rate_off_by_1e3(case_id: str) -> None:
    """`test_matches_optax`'s bounds are tight enough to see a learning rate 1.001x too large."""
    case = next(c for c in CASES if c.id == case_id)
    params = make_params()
    grads = make_grads(params)
    wrong = optx.chain(case.optx_tx(), optx.scale(1.001))
    p_wrong, _, _ = run64(wrong, optx.apply_updates, params, grads)
    p_optax, _, path = run64(case.optax_tx(), optax.apply_updates, params, grads)
    errors = [
        float(np.max(np.abs(a - e))) / (atol + ROUNDOFF64 * float(np.max(np.abs(e))))
        for a, e, atol in zip(
            jax.tree.leaves(p_wrong),
            jax.tree.leaves(p_optax),
            parity_bounds(case, path),
            strict=True,
        )
    ]
    print(f"{case_id} x 1.001: max error / bound {max(errors):.3g}")
    assert max(errors) > 10


# RAdam's rho_t = rho_inf - 2 t b2^t / (1 - b2^t) subtracts two numbers of size ~2000 to get
# one of size ~t: optax's float32 evaluation is up to 1.3e-2 off in the first steps (a 0.3%
# error of the rectifier at t = 6), while optx evaluates it without cancellation. So optx is
# compared with optax run in float64 (x64 mode) to round-off, and with optax in float32 to
# that error: its effect on 100 steps of learning rate 1e-2 is 1.6e-5 of each leaf.
RADAM_F32_RTOL = 5e-5


@pytest.mark.parametrize("nesterov", [False, True], ids=["plain", "nesterov"])
def test_radam_matches_optax(nesterov: bool) -> None:
    params = make_params()
    grads = make_grads(params)
    tx = optx.radam(1e-2, eps_root=1e-8, nesterov=nesterov)
    ref = optax.radam(1e-2, eps_root=1e-8, nesterov=nesterov)
    p_optx, s_optx = run(tx, optx.apply_updates, params, grads)
    p_optax, s_optax = run(ref, optax.apply_updates, params, grads)
    assert_close("radam params (optax f32)", p_optx, p_optax, RADAM_F32_RTOL, ATOL)
    for name in ("mu", "nu"):
        assert_close(f"radam {name}", slots(s_optx)[name], slots(s_optax)[name], RTOL)

    # In float64, optx's hyperparameters are float32 (DESIGN D2): Adam's roundings, and the
    # rectifier computed in float32 from them (3 more); see `ROUNDOFF64`.
    p_optx64, _, _ = run64(tx, optx.apply_updates, params, grads)
    p_optax64, _, path = run64(ref, optax.apply_updates, params, grads)
    radam = Case("radam", lambda: tx, lambda: ref, K_ADAM + 3)
    for a, e, atol in zip(
        jax.tree.leaves(p_optx64),
        jax.tree.leaves(p_optax64),
        parity_bounds(radam, path),
        strict=True,
    ):
        assert a.dtype == np.float64
        assert_close("radam params (optax f64)", a, e, ROUNDOFF64, atol)


def test_default_conventions_are_optax() -> None:
    """The Keras options default to optax's numerics: the same transforms as without them."""
    assert optx.nadam(1e-3) == optx.adam(1e-3, nesterov=True)
    assert optx.nadamw(1e-3) == optx.adamw(1e-3, nesterov=True)
    assert optx.scale_by_adam() == optx.scale_by_adam(eps_placement="optax", momentum_decay=None)
    assert optx.scale_by_amsgrad() == optx.scale_by_amsgrad(eps_placement="optax")
    assert optx.scale_by_adamax() == optx.scale_by_adamax(eps_placement="optax")
    assert repr(optx.scale_by_adam(nesterov=True)) == (
        "scale_by_adam(b1=0.9, b2=0.999, eps=1e-08, eps_root=0.0, nesterov=True)"
    )
    assert repr(optx.scale_by_adam(nesterov=True, momentum_decay=1.0)).endswith(
        "nesterov=True, momentum_decay=1.0)"
    )


# ---------------------------------------------------------------------------------------
# Float64 NumPy references (optx's building blocks, learning rate excluded).


def np_grads(steps: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Float32 gradients as float64; the last row is ~1e-6, where the epsilons show."""
    rng = np.random.default_rng(seed)
    size = np.exp(rng.uniform(-2, 1, (steps,) + (1,) * len(shape)))
    g = rng.standard_normal((steps, *shape)) * size
    g[:, -1] *= 1e-6
    return g.astype(np.float32).astype(np.float64)


def run_block(tx: Any, grads: np.ndarray) -> tuple[np.ndarray, Any]:
    """All updates (leading axis: step) of a building block on fixed gradients."""

    @jax.jit
    def go(grads: jax.Array) -> tuple:
        def step(state: Any, g: jax.Array) -> tuple:
            u, state = tx.update(g, state)
            return state, u

        state, updates = jax.lax.scan(step, tx.init(grads[0]), grads)
        return updates, state

    updates, state = go(jnp.asarray(grads, jnp.float32))
    return np.asarray(updates, np.float64), state


def adam_reference(
    grads: np.ndarray,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    nesterov: bool = False,
    eps_placement: str = "optax",
    momentum_decay: float | None = None,
) -> np.ndarray:
    """Adam / NAdam, optax's or Keras's epsilon, constant or scheduled NAdam momentum."""
    m, v, product, out = 0.0, 0.0, 1.0, []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        if momentum_decay is not None:  # Keras's Nadam (0.96 ** t for momentum_decay = 1).
            mu = b1 * (1 - 0.5 * 0.96 ** (momentum_decay * t))
            mu_next = b1 * (1 - 0.5 * 0.96 ** (momentum_decay * (t + 1)))
            product *= mu
            m_hat = mu_next * m / (1 - product * mu_next) + (1 - mu) * g / (1 - product)
        elif nesterov:
            m_hat = b1 * m / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1**t)
        else:
            m_hat = m / (1 - b1**t)
        if eps_placement == "keras":  # Keras: lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps)
            out.append(m_hat * np.sqrt(1 - b2**t) / (np.sqrt(v + eps_root) + eps))
        else:
            out.append(m_hat / (np.sqrt(v / (1 - b2**t) + eps_root) + eps))
    return np.stack(out)


def amsgrad_reference(
    grads: np.ndarray,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
    eps_placement: str = "optax",
) -> np.ndarray:
    """AMSGrad: optax's maximum of the corrected v, or Keras's of the raw v."""
    m, v, v_max, out = 0.0, 0.0, 0.0, []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t) if bias_correction_mu else m
        if eps_placement == "keras":  # v_hat = max(v_hat, v); alpha m / (sqrt(v_hat) + eps)
            v_max = np.maximum(v_max, v)
            alpha = np.sqrt(1 - b2**t) if bias_correction_nu else 1.0
            out.append(alpha * m_hat / (np.sqrt(v_max + eps_root) + eps))
        else:
            v_max = np.maximum(v_max, v / (1 - b2**t) if bias_correction_nu else v)
            out.append(m_hat / (np.sqrt(v_max + eps_root) + eps))
    return np.stack(out)


def adamax_reference(
    grads: np.ndarray,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_placement: str = "optax",
) -> np.ndarray:
    """AdaMax: optax's eps inside the maximum, or Keras's in the denominator."""
    m, u, out = 0.0, 0.0, []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        if eps_placement == "keras":  # u = max(b2 u, |g|); m / ((1 - b1^t)(u + eps))
            u = np.maximum(b2 * u, np.abs(g))
            out.append(m / ((1 - b1**t) * (u + eps)))
        else:
            u = np.maximum(b2 * u, np.abs(g) + eps)
            out.append(m / (1 - b1**t) / u)
    return np.stack(out)


def radam_reference(
    grads: np.ndarray,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    threshold: float = 5.0,
    nesterov: bool = False,
) -> np.ndarray:
    """RAdam, with rho_t evaluated in float64 as written."""
    m, v, out = 0.0, 0.0, []
    rho_inf = 2 / (1 - b2) - 1
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        if nesterov:
            m_hat = b1 * m / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1**t)
        else:
            m_hat = m / (1 - b1**t)
        rho = rho_inf - 2 * t * b2**t / (1 - b2**t)
        if rho >= threshold:
            r = np.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
            out.append(r * m_hat / (np.sqrt(v / (1 - b2**t) + eps_root) + eps))
        else:
            out.append(m_hat)
    return np.stack(out)


REFERENCES = [
    ("adam/keras", optx.scale_by_adam, adam_reference, dict(eps=1e-7, eps_placement="keras")),
    (
        "adam/keras_eps_root",
        optx.scale_by_adam,
        adam_reference,
        dict(b1=0.8, b2=0.99, eps=1e-3, eps_root=1e-6, eps_placement="keras"),
    ),
    ("nadam", optx.scale_by_adam, adam_reference, dict(nesterov=True)),
    (
        "nadam/keras",
        optx.scale_by_adam,
        adam_reference,
        dict(eps=1e-7, nesterov=True, momentum_decay=1.0),
    ),
    (
        "nadam/torch_schedule_keras_eps",
        optx.scale_by_adam,
        adam_reference,
        dict(b1=0.95, nesterov=True, momentum_decay=4e-3, eps_placement="keras"),
    ),
    ("amsgrad", optx.scale_by_amsgrad, amsgrad_reference, dict(eps_root=1e-8)),
    (
        "amsgrad/no_bias_correction",
        optx.scale_by_amsgrad,
        amsgrad_reference,
        dict(bias_correction_mu=False, bias_correction_nu=False),
    ),
    (
        "amsgrad/keras",
        optx.scale_by_amsgrad,
        amsgrad_reference,
        dict(eps=1e-7, eps_placement="keras"),
    ),
    (
        "amsgrad/keras_no_nu_correction",
        optx.scale_by_amsgrad,
        amsgrad_reference,
        dict(b2=0.99, bias_correction_nu=False, eps_placement="keras"),
    ),
    ("adamax", optx.scale_by_adamax, adamax_reference, {}),
    ("adamax/keras", optx.scale_by_adamax, adamax_reference, dict(eps=1e-7, eps_placement="keras")),
    (
        "adamax/keras_large_eps",
        optx.scale_by_adamax,
        adamax_reference,
        dict(b2=0.9, eps=1e-6, eps_placement="keras"),
    ),
    ("radam", optx.scale_by_radam, radam_reference, dict(b2=0.99)),
    (
        "radam/nesterov",
        optx.scale_by_radam,
        radam_reference,
        dict(b1=0.8, b2=0.999, eps_root=1e-8, threshold=6.0, nesterov=True),
    ),
]


@pytest.mark.parametrize(
    ("factory", "reference", "config"),
    [r[1:] for r in REFERENCES],
    ids=[r[0] for r in REFERENCES],
)
def test_matches_numpy(factory: Callable[..., Any], reference: Callable[..., Any], config: dict):
    grads = np_grads(60, (3, 5))
    updates, state = run_block(factory(**config), grads)
    expected = reference(grads, **config)
    # Per row: the last row's gradients are 1e-6 of the others' (epsilon-dominated).
    for row in range(grads.shape[1]):
        assert_close(f"row {row}", updates[:, row], expected[:, row], 2 * RTOL)
    assert int(state.count) == len(grads)


def test_keras_conventions_differ_from_optax() -> None:
    """The gradients of `np_grads` expose each convention: optax's numerics are far off."""
    grads = np_grads(60, (3, 5))
    # AdaMax's two placements differ by ~(1 - b2) eps where the decayed maximum wins.
    adamax = dict(b2=0.9, eps=1e-6)
    pairs = [
        (adam_reference, dict(eps=1e-7, eps_placement="keras"), dict(eps=1e-7)),
        (adam_reference, dict(nesterov=True, momentum_decay=1.0), dict(nesterov=True)),
        (amsgrad_reference, dict(eps_placement="keras"), {}),
        (adamax_reference, dict(eps_placement="keras", **adamax), adamax),
    ]
    for reference, keras_config, optax_config in pairs:
        keras_like, optax_like = reference(grads, **keras_config), reference(grads, **optax_config)
        # The last row, where the gradients are ~1e-6.
        difference = np.max(np.abs(keras_like - optax_like)[:, -1])
        assert difference > 1e-2 * np.max(np.abs(optax_like[:, -1])), reference


def test_nadam_schedule_state() -> None:
    """Keras's ``u_product`` is kept in the state: the product of the scheduled momenta."""
    tx = optx.scale_by_adam(nesterov=True, momentum_decay=1.0)
    _, state = run_block(tx, np_grads(10, (2,)))
    assert isinstance(state, optx.ScaleByNadamState)
    expected = np.prod([0.9 * (1 - 0.5 * 0.96**t) for t in range(1, 11)])
    np.testing.assert_allclose(float(state.u_product), expected, rtol=1e-6)
    assert state.u_product.dtype == jnp.float32
    assert float(optx.get_hyperparams(state)["momentum_decay"]) == 1.0


# ---------------------------------------------------------------------------------------
# Keras (JAX backend): `stateless_apply` of the Keras classes against optx's options.


# Keras runs in float64 too (float64 variables under `jax.enable_x64`), so it computes
# ``1 - b**t`` in float64 and what is left is optx's float32 hyperparameters, counted as for
# `ROUNDOFF64` over KERAS_STEPS steps: K_ADAM less the learning rate (float32 on both sides:
# Keras's learning-rate variable is `floatx`) and half of b2's lag (50 steps, not 100).
KERAS_STEPS = 50
K_KERAS_ADAM = K_ADAM - 1 - 25
K_KERAS_NADAM = K_KERAS_ADAM + 1 + 3 + 5  # Nesterov; optx's float32 0.96**t and its product
K_KERAS_ADAMAX = K_ADAMAX - 1 - (STEPS - KERAS_STEPS)  # b2 decays a maximum: its full lag


def test_matches_keras() -> None:
    import keras

    assert keras.backend.backend() == "jax"
    rng = np.random.default_rng(3)
    p0 = [rng.standard_normal((3, 4)), rng.standard_normal(4)]
    # The second variable's gradients are ~1e-6, where Keras's epsilon placement shows.
    grads = [
        [
            (rng.standard_normal(p.shape) * np.exp(rng.uniform(-3, 1)) * s).astype(np.float32)
            for p, s in zip(p0, (1.0, 1e-6), strict=True)
        ]
        for _ in range(KERAS_STEPS)
    ]
    p0 = [p.astype(np.float32).astype(np.float64) for p in p0]
    grads = [[g.astype(np.float64) for g in step] for step in grads]
    cases = [
        (
            lambda: keras.optimizers.Adam(1e-2),
            lambda: optx.adam(1e-2, eps=1e-7, eps_placement="keras"),
            K_KERAS_ADAM,
        ),
        (
            lambda: keras.optimizers.Adam(1e-2, amsgrad=True),
            lambda: optx.amsgrad(1e-2, eps=1e-7, eps_placement="keras"),
            K_KERAS_ADAM,  # the maximum of v: as v
        ),
        (
            lambda: keras.optimizers.AdamW(1e-2, weight_decay=4e-3),
            lambda: optx.adamw(1e-2, eps=1e-7, weight_decay=4e-3, eps_placement="keras"),
            K_KERAS_ADAM + 1,  # the weight decay
        ),
        (
            lambda: keras.optimizers.Nadam(1e-2),
            lambda: optx.nadam(1e-2, eps=1e-7, momentum_decay=1.0),
            K_KERAS_NADAM,
        ),
        (
            lambda: keras.optimizers.Adamax(1e-2),
            lambda: optx.adamax(1e-2, eps=1e-7, eps_placement="keras"),
            K_KERAS_ADAMAX,
        ),
    ]
    for make_optimizer, make_tx, k in cases:
        with jax.enable_x64(True):
            optimizer = make_optimizer()
            variables = [keras.Variable(p) for p in p0]
            optimizer.build(variables)
            apply = jax.jit(optimizer.stateless_apply)
            keras_state = [v.value for v in optimizer.variables]
            keras_params = [v.value for v in variables]
            tx = make_tx()
            params = [jnp.asarray(p) for p in p0]
            state = tx.init(params)
            step = jax.jit(lambda g, s, p, tx=tx: tx.update(g, s, p))
            path = [0.0 for _ in p0]  # per leaf, sum_t max|u_t| of Keras's updates
            for g in grads:
                g = [jnp.asarray(x) for x in g]
                new_params, keras_state = apply(keras_state, g, keras_params)
                path = [
                    u + float(jnp.max(jnp.abs(new - old)))
                    for u, new, old in zip(path, new_params, keras_params, strict=True)
                ]
                keras_params = new_params
                updates, state = step(g, state, params)
                params = optx.apply_updates(params, updates)
            params, keras_params = jax.tree.map(np.asarray, (params, keras_params))
        name = f"keras {type(optimizer).__name__}"
        for a, e, u in zip(params, keras_params, path, strict=True):
            assert a.dtype == e.dtype == np.float64, (name, a.dtype, e.dtype)
            assert_close(name, a, e, ROUNDOFF64, k * EPS32 / 2 * u)


# ---------------------------------------------------------------------------------------
# Convergence: a parabola and the Rosenbrock function from (-1.5, 2), minimised together (the
# family is elementwise, so this is the same as two runs).


def problem(p: Any) -> jax.Array:
    x, y = p["rosenbrock"][0], p["rosenbrock"][1]
    weights = jnp.array([1.0, 10.0, 100.0])
    return jnp.sum(weights * (p["parabola"] - 1) ** 2) + (1 - x) ** 2 + 100 * (y - x**2) ** 2


def radam_warmup(count: jax.Array) -> jax.Array:
    """RAdam's first ~5 steps are momentum SGD: a small step while the Rosenbrock gradient is
    ~150, then 0.05.
    """
    return jnp.where(count < 6, 1e-3, 0.05)


def radam_nesterov_warmup(count: jax.Array) -> jax.Array:
    """As `radam_warmup`, then 0.02."""
    return jnp.where(count < 6, 1e-3, 0.02)


CONVERGENCE = [
    ("nadam", lambda: optx.nadam(0.02), 1e-2),
    ("nadamw", lambda: optx.nadamw(0.02), 1e-2),
    ("nadam/keras", lambda: optx.nadam(0.02, eps=1e-7, momentum_decay=1.0), 1e-2),
    ("adam/keras", lambda: optx.adam(0.05, eps=1e-7, eps_placement="keras"), 1e-2),
    ("adamw/keras", lambda: optx.adamw(0.05, eps=1e-7, eps_placement="keras"), 1e-2),
    # optax's AMSGrad keeps the maximum of the bias-corrected v: the first Rosenbrock
    # gradients (~150) keep its steps small for long. A large rate and a looser tolerance.
    ("amsgrad", lambda: optx.amsgrad(1.0), 1e-1),
    ("amsgrad/keras", lambda: optx.amsgrad(0.05, eps=1e-7, eps_placement="keras"), 1e-2),
    ("adamax", lambda: optx.adamax(0.1), 1e-2),
    ("adamaxw", lambda: optx.adamaxw(0.1), 1e-2),
    ("adamax/keras", lambda: optx.adamax(0.1, eps=1e-7, eps_placement="keras"), 1e-2),
    ("radam", lambda: optx.radam(radam_warmup), 1e-2),
    ("radam/nesterov", lambda: optx.radam(radam_nesterov_warmup, nesterov=True), 1e-2),
]


@pytest.mark.parametrize(
    ("factory", "rosenbrock_tol"),
    [c[1:] for c in CONVERGENCE],
    ids=[c[0] for c in CONVERGENCE],
)
def test_convergence(factory: Callable[[], Any], rosenbrock_tol: float) -> None:
    tx = factory()
    params = {"parabola": jnp.array([3.0, -2.0, 0.5]), "rosenbrock": jnp.array([-1.5, 2.0])}

    @jax.jit
    def go(params: Any) -> Any:
        def step(carry: tuple, _: None) -> tuple:
            p, s = carry
            u, s = tx.update(jax.grad(problem)(p), s, p)
            return (optx.apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), None, length=3000)[0][0]

    found = go(params)
    # Weight decay 1e-4 (nadamw, adamaxw) moves the minimum by ~1e-5.
    np.testing.assert_allclose(found["parabola"], 1.0, rtol=0, atol=1e-4)
    np.testing.assert_allclose(found["rosenbrock"], 1.0, rtol=0, atol=rosenbrock_tol)


# ---------------------------------------------------------------------------------------
# bfloat16 parameters with float32 moments.


BF16 = [
    ("nadam", lambda: optx.nadam(1e-2, mu_dtype=jnp.float32, nu_dtype=jnp.float32)),
    (
        "amsgrad/keras",
        lambda: optx.amsgrad(
            1e-2, mu_dtype=jnp.float32, nu_dtype=jnp.float32, eps_placement="keras"
        ),
    ),
    ("adamax", lambda: optx.adamax(1e-2, mu_dtype=jnp.float32, nu_dtype=jnp.float32)),
    ("radam", lambda: optx.radam(1e-2, mu_dtype=jnp.float32, nu_dtype=jnp.float32)),
]


def run_bf16(tx: Any, params: Any, grads: Any) -> tuple:
    """`run`, and per parameter leaf the largest ``|p|`` it reaches (from the start) and
    ``sum_t max|u_t|`` of its updates."""

    def top(tree: Any) -> Any:
        return jax.tree.map(lambda x: jnp.max(jnp.abs(x.astype(jnp.float32))), tree)

    @jax.jit
    def go(params: Any, grads: Any) -> tuple:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            p = optx.apply_updates(p, u)
            return (p, s), (top(p), top(u))

        (p, s), (peaks, sizes) = jax.lax.scan(step, (params, tx.init(params)), grads)
        return p, s, jax.tree.map(jnp.max, peaks), jax.tree.map(jnp.sum, sizes)

    p, s, peaks, sizes = go(params, grads)
    start = jax.tree.leaves(top(params))
    peak = [max(float(a), float(b)) for a, b in zip(jax.tree.leaves(peaks), start, strict=True)]
    return p, s, peak, [float(u) for u in jax.tree.leaves(sizes)]


@pytest.mark.parametrize("factory", [b[1] for b in BF16], ids=[b[0] for b in BF16])
def test_bfloat16_params_float32_moments(factory: Callable[[], Any]) -> None:
    tx = factory()
    params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), make_params())
    grads = make_grads(params, steps=50)
    p16, s16, peak, path = run_bf16(tx, params, grads)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16))
    for name in ("mu", "nu", "nu_max"):
        assert all(x.dtype == jnp.float32 for x in slots(s16).get(name, []))
    as_f32 = jax.tree.map(lambda p: p.astype(jnp.float32), params)
    p32, s32 = run(
        tx, optx.apply_updates, as_f32, jax.tree.map(lambda g: g.astype(jnp.float32), grads)
    )
    # The moments see the same gradients: the same float32 numbers.
    for name in ("mu", "nu", "nu_max"):
        assert_close(f"bf16 {name}", slots(s16).get(name, []), slots(s32).get(name, []), RTOL)
    # The updates are the same float32 numbers. Each step rounds the update to bfloat16,
    # then the parameter, each by at most half an ulp, 2^-8 of its size: over 50 steps at
    # most 2^-8 (50 max_t |p_t| + sum_t max |u_t|) per leaf, about 0.2 of its scale; the
    # float32 run's own roundings are within RTOL. An update smaller than an ulp rounds the
    # same way step after step, so a run comes near the bound (0.02 to 0.075 of the scale).
    for a, e, top, u in zip(jax.tree.leaves(p16), jax.tree.leaves(p32), peak, path, strict=True):
        assert_close("bf16 params", a, e, 0.0, 2.0**-8 * (50 * top + u) + RTOL * top)


# ---------------------------------------------------------------------------------------
# Error messages.


def _update(tx: Any, grads: Any) -> Any:
    return tx.update(grads, tx.init({"a": jnp.ones(2), "b": jnp.ones(3)}))


ERRORS = [
    (
        lambda: optx.scale_by_adam(eps_placement="tf"),
        ValueError,
        "`scale_by_adam` needs eps_placement to be 'optax' or 'keras'. "
        "Received: eps_placement='tf'.",
    ),
    (
        lambda: optx.adam(1e-3, eps_placement="Keras"),
        ValueError,
        "`adam` needs eps_placement to be 'optax' or 'keras'. Received: eps_placement='Keras'.",
    ),
    (
        lambda: optx.scale_by_adam(momentum_decay=1.0),
        ValueError,
        "`scale_by_adam` needs nesterov=True to use momentum_decay (NAdam's momentum "
        "schedule). Received: momentum_decay=1.0, nesterov=False.",
    ),
    (
        lambda: optx.adamw(1e-3, momentum_decay=0.004),
        ValueError,
        "`adamw` needs nesterov=True to use momentum_decay (NAdam's momentum schedule). "
        "Received: momentum_decay=0.004, nesterov=False.",
    ),
    (
        lambda: optx.nadam(1e-3, momentum_decay=-1.0),
        ValueError,
        "`nadam` needs momentum_decay finite and >= 0. Received: momentum_decay=-1.0.",
    ),
    (
        lambda: optx.nadam(1e-3, momentum_decay="keras"),
        TypeError,
        "`nadam` needs momentum_decay to be a real number or a schedule (a function of the "
        "step count). Received: momentum_decay='keras' of type str.",
    ),
    (
        lambda: optx.nadam(1e-3, b1=1.0),
        ValueError,
        "`nadam` needs b1 in [0, 1). Received: b1=1.0.",
    ),
    (
        lambda: optx.nadam(-1e-3),
        ValueError,
        "`nadam` needs learning_rate finite and >= 0. Received: learning_rate=-0.001.",
    ),
    (
        lambda: optx.nadamw(1e-3, weight_decay=-1.0),
        ValueError,
        "`nadamw` needs weight_decay finite and >= 0. Received: weight_decay=-1.0.",
    ),
    (
        lambda: optx.nadamw(1e-3, eps_placement=None),
        ValueError,
        "`nadamw` needs eps_placement to be 'optax' or 'keras'. Received: eps_placement=None.",
    ),
    (
        lambda: optx.nadam(1e-3, nu_dtype="int32"),
        TypeError,
        "`nadam` needs nu_dtype to be None or a floating dtype. Received: nu_dtype='int32'.",
    ),
    (
        lambda: optx.scale_by_adam(nesterov="yes"),
        TypeError,
        "`scale_by_adam` needs nesterov to be a bool. Received: nesterov='yes'.",
    ),
    (
        lambda: optx.amsgrad(1e-3, b2=-0.1),
        ValueError,
        "`amsgrad` needs b2 in [0, 1). Received: b2=-0.1.",
    ),
    (
        lambda: optx.amsgrad(1e-3, eps_placement="torch"),
        ValueError,
        "`amsgrad` needs eps_placement to be 'optax' or 'keras'. Received: eps_placement='torch'.",
    ),
    (
        lambda: optx.scale_by_amsgrad(eps_root=-1.0),
        ValueError,
        "`scale_by_amsgrad` needs eps_root finite and >= 0. Received: eps_root=-1.0.",
    ),
    (
        lambda: optx.scale_by_amsgrad(bias_correction_mu=1),
        TypeError,
        "`scale_by_amsgrad` needs bias_correction_mu to be a bool. Received: bias_correction_mu=1.",
    ),
    (
        lambda: optx.amsgrad(1e-3, bias_correction_nu="no"),
        TypeError,
        "`amsgrad` needs bias_correction_nu to be a bool. Received: bias_correction_nu='no'.",
    ),
    (
        lambda: optx.amsgrad(1e-3, mu_dtype="int8"),
        TypeError,
        "`amsgrad` needs mu_dtype to be None or a floating dtype. Received: mu_dtype='int8'.",
    ),
    (
        lambda: optx.adamax(-1.0),
        ValueError,
        "`adamax` needs learning_rate finite and >= 0. Received: learning_rate=-1.0.",
    ),
    (
        lambda: optx.adamax(1e-3, b2=1.0),
        ValueError,
        "`adamax` needs b2 in [0, 1). Received: b2=1.0.",
    ),
    (
        lambda: optx.scale_by_adamax(eps=-1e-8),
        ValueError,
        "`scale_by_adamax` needs eps finite and >= 0. Received: eps=-1e-08.",
    ),
    (
        lambda: optx.adamaxw(1e-3, eps_placement="tf"),
        ValueError,
        "`adamaxw` needs eps_placement to be 'optax' or 'keras'. Received: eps_placement='tf'.",
    ),
    (
        lambda: optx.adamaxw(1e-3, weight_decay=float("nan")),
        ValueError,
        "`adamaxw` needs weight_decay finite and >= 0. Received: weight_decay=nan.",
    ),
    (
        lambda: optx.scale_by_adamax(nu_dtype="int32"),
        TypeError,
        "`scale_by_adamax` needs nu_dtype to be None or a floating dtype. "
        "Received: nu_dtype='int32'.",
    ),
    (
        lambda: optx.radam(1e-3, threshold=3.0),
        ValueError,
        "`radam` needs threshold finite and >= 4. Received: threshold=3.0.",
    ),
    (
        lambda: optx.radam(1e-3, b1=1.5),
        ValueError,
        "`radam` needs b1 in [0, 1). Received: b1=1.5.",
    ),
    (
        lambda: optx.scale_by_radam(nesterov=1),
        TypeError,
        "`scale_by_radam` needs nesterov to be a bool. Received: nesterov=1.",
    ),
    (
        lambda: optx.scale_by_radam(mu_dtype="int32"),
        TypeError,
        "`scale_by_radam` needs mu_dtype to be None or a floating dtype. "
        "Received: mu_dtype='int32'.",
    ),
    (
        lambda: optx.amsgrad(1e-3).init({"a": jnp.ones(2, jnp.int32)}),
        TypeError,
        "`scale_by_amsgrad.init` needs floating-point params (float16, bfloat16, float32 or "
        "float64). Received: params['a'] of dtype int32. Keep other leaves out of the optimised "
        "tree, or route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
    (
        lambda: optx.adamax(1e-3).init({"a": jnp.ones(2, jnp.int32)}),
        TypeError,
        "`scale_by_adamax.init` needs floating-point params (float16, bfloat16, float32 or "
        "float64). Received: params['a'] of dtype int32. Keep other leaves out of the optimised "
        "tree, or route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
    (
        lambda: optx.radam(1e-3).init({"a": jnp.ones(2, jnp.int32)}),
        TypeError,
        "`scale_by_radam.init` needs floating-point params (float16, bfloat16, float32 or "
        "float64). Received: params['a'] of dtype int32. Keep other leaves out of the optimised "
        "tree, or route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
    (
        lambda: _update(optx.scale_by_amsgrad(), {"a": jnp.ones(2)}),
        ValueError,
        "`scale_by_amsgrad.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'b'.",
    ),
    (
        lambda: _update(optx.scale_by_adamax(), {"a": jnp.ones(2), "b": jnp.ones(4)}),
        ValueError,
        "`scale_by_adamax.update` needs updates with the shapes of the state. "
        "Received: updates['b'] of shape (4,), expected (3,).",
    ),
    (
        lambda: _update(optx.scale_by_radam(), {"a": jnp.ones(2), "c": jnp.ones(3)}),
        ValueError,
        "`scale_by_radam.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'b'; not in the state: 'c'.",
    ),
    (
        lambda: _update(optx.scale_by_adam(nesterov=True, momentum_decay=1.0), [jnp.ones(2)]),
        ValueError,
        "`scale_by_adam.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'a', 'b'; not in the state: '0'.",
    ),
    (
        lambda: optx.adamaxw(1e-3).update(
            {"w": jnp.ones(2)}, optx.adamaxw(1e-3).init({"w": jnp.ones(2)})
        ),
        ValueError,
        "`add_decayed_weights.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
    ),
]


@pytest.mark.parametrize(("build", "error", "message"), ERRORS)
def test_error_messages(build: Callable[[], Any], error: type, message: str) -> None:
    with pytest.raises(error) as info:
        build()
    assert str(info.value) == message
