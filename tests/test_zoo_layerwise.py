"""Layer-wise optimizers: `scale_by_trust_ratio`, `lamb`, `lars`, `scale_by_novograd`,
`novograd` and `fromage`.

Parity with optax (100 jitted steps), float64 NumPy reference loops and Keras's `Lamb`, all
run in float64 and compared within bounds worked out from optx's float32 hyperparameters
(`ROUNDOFF64`); convergence, bfloat16 (tolerances from where a run stops and from
bfloat16's rounding), masks in every form `masked` accepts, and every error message of the
family.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32
from helpers import assert_close as _close

import optx

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)

# Parity with optax, NumPy and Keras runs in float64 (`_run64`): then the one difference left
# is optx's float32 hyperparameters (DESIGN D2), each off by at most EPS32 / 2 relative; the
# float32 arithmetic itself is covered by tests/test_conformance.py. Each step's update is off
# by at most ``k * EPS32 / 2`` of its size for ``k`` such roundings (see tests/TOLERANCES.md),
# so the parameters by at most ``k * EPS32 / 2 * sum_t max|u_t|`` per leaf (`_bounds`), plus
# float64 round-off: ~32 roundings a step and two norms of up to 12 terms, of a leaf's scale.
ROUNDOFF64 = STEPS * (32 + 2 * 12) * EPS64
# Adam's direction m_hat / (sqrt(v_hat) + eps) (tests/test_zoo_adam.py): the lags of b1 = 0.9
# and b2 = 0.999 (9, and min(STEPS, 999) / 2 through the root), 1 - b1 and 1 - b2 (1 + 1/2),
# the bias corrections (3 + 3/2), eps.
K_ADAM_DIRECTION = 9 + 50 + 2 + 3 + 2 + 1
# A trust ratio ||p|| / ||d|| makes the update d's direction times a norm: a relative error of
# d moves both, so the roundings before it count twice.
K_LAMB = 2 * (K_ADAM_DIRECTION + 1) + 1  # the weight decay inside the ratio; the learning rate


def _trace_k(b: float, k_in: float) -> float:
    """Roundings ``k`` of a momentum trace ``m = b m + d`` (plain or Nesterov) whose inputs
    ``d`` carry ``k_in`` roundings, relative to the trace's own updates.

    The parameters move by ``-sum_s d_s c_s`` with ``c_s = sum_n b**n <= 1 / (1 - b)``, and
    ``b`` rounded to float32 moves ``c_s`` by at most ``b / (1 - b)**2 * EPS32 / 2``; the
    inputs' roundings are carried with weight ``c_s``. ``sum_s max|d_s| <= (1 + b) sum_t
    max|u_t|`` (``d_t = u_t - b u_{t-1}``; with Nesterov ``(1 + b) d_t = u_t - b u_{t-1} +
    b d_{t-1}``): no cancellation of the trace can hide the terms. 209 for ``b = 0.9`` and
    ``k_in = 2``.
    """
    return (1 + b) * (k_in / (1 - b) + b / (1 - b) ** 2)


def _params() -> dict[str, Any]:
    """Matrices, a zero vector (a fresh bias: trust ratio 1), a 3-D kernel, a scalar."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "dense": {"kernel": normal(3, 4), "bias": jnp.zeros(4, jnp.float32)},
        "blocks": [{"conv": normal(2, 3, 2)}, normal(5)],
        "scale": normal(),
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
    """Updates under one `jax.jit` of a `lax.scan`; the final params and state."""

    def run(params: Any, grads: Any) -> tuple[Any, Any]:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), grads)[0]

    return jax.jit(run)(params, grads)


def _sized_run(tx: Any, apply_updates: Any, params: Any, grads: Any) -> tuple:
    """`_run`, with per parameter leaf ``sum_t max|u_t|`` and ``max_t max|u_t|`` of the
    updates and ``max_t max|p_t|`` of the parameters; NumPy trees out.
    """

    def run(params: Any, grads: Any) -> tuple:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            p = apply_updates(p, u)
            size = lambda x: jnp.max(jnp.abs(x))  # noqa: E731
            return (p, s), (jax.tree.map(size, u), jax.tree.map(size, p))

        (p, s), (sizes, p_sizes) = jax.lax.scan(step, (params, tx.init(params)), grads)
        p_max = jax.tree.map(
            lambda a, b: jnp.maximum(jnp.max(a), jnp.max(jnp.abs(b))), p_sizes, params
        )
        return p, s, jax.tree.map(jnp.sum, sizes), jax.tree.map(jnp.max, sizes), p_max

    return jax.tree.map(np.asarray, jax.jit(run)(params, grads))


def _run64(tx: Any, apply_updates: Any, params: Any, grads: Any) -> tuple:
    """`_sized_run` in float64 (`jax.enable_x64`), without ``max_t max|p_t|``. NumPy trees
    out: compared outside x64 (see tests/TOLERANCES.md).
    """
    with jax.enable_x64(True):
        params, grads = jax.tree.map(
            lambda x: jnp.asarray(np.asarray(x, np.float64)), (params, grads)
        )
        return _sized_run(tx, apply_updates, params, grads)[:4]


def _bounds(k: float, path: Any) -> list[float]:
    """Per parameter leaf: ``k * EPS32 / 2 * sum_t max|u_t|`` (see `ROUNDOFF64`)."""
    return [k * EPS32 / 2 * float(u) for u in jax.tree.leaves(path)]


def _excess(actual: Any, expected: Any, k: float, path: Any) -> float:
    """The largest ``|actual - expected|`` over its bound, `_bounds` plus `ROUNDOFF64`."""
    leaves = zip(jax.tree.leaves(actual), jax.tree.leaves(expected), _bounds(k, path), strict=True)
    return max(
        float(np.max(np.abs(a - e))) / (atol + ROUNDOFF64 * float(np.max(np.abs(e))))
        for a, e, atol in leaves
    )


def _close64(name: str, actual: Any, expected: Any, k: float, path: Any) -> None:
    """`_close` leaf by leaf, float64 results, `_bounds` as absolute tolerances."""
    leaves = zip(jax.tree.leaves(actual), jax.tree.leaves(expected), _bounds(k, path), strict=True)
    for i, (a, e, atol) in enumerate(leaves):
        assert np.asarray(a).dtype == np.float64, name
        _close(f"{name}[{i}]", a, e, ROUNDOFF64, atol)
    print(f"{name}: max error / bound {_excess(actual, expected, k, path):.3g}")


def _matrices(params: Any) -> Any:
    return jax.tree.map(lambda p: p.ndim >= 2, params)


# The same selection as a regular expression (optx) and as a tree (optax).
KERNELS = "kernel|conv"
KERNELS_TREE = {
    "dense": {"kernel": True, "bias": False},
    "blocks": [{"conv": True}, False],
    "scale": False,
}


# --------------------------------------------------------------------------------------
# Parity with optax.

# name: (optx, optax, k roundings of float32 hyperparameters, see `ROUNDOFF64`).
PARITY = {
    "lamb": (
        lambda: optx.lamb(1e-2, weight_decay=1e-2, mask=KERNELS),
        lambda: optax.lamb(1e-2, weight_decay=1e-2, mask=KERNELS_TREE),
        K_LAMB,
    ),
    # The trust coefficient and the learning rate, before the momentum 0.9.
    "lars": (lambda: optx.lars(0.1), lambda: optax.lars(0.1), _trace_k(0.9, 2)),
    "lars_masks_nesterov": (
        lambda: optx.lars(
            0.1,
            1e-3,
            _matrices,
            trust_coefficient=0.01,
            eps=1e-3,
            trust_ratio_mask=KERNELS,
            nesterov=True,
        ),
        lambda: optax.lars(
            0.1,
            1e-3,
            _matrices,
            trust_coefficient=0.01,
            eps=1e-3,
            trust_ratio_mask=KERNELS_TREE,
            nesterov=True,
        ),
        _trace_k(0.9, 2 + 3),  # the weight decay (inside the ratio: twice), c, eps, lr
    ),
    "novograd": (
        lambda: optx.novograd(1e-2, weight_decay=1e-3, eps_root=1e-8),
        lambda: optax.novograd(1e-2, weight_decay=1e-3, eps_root=1e-8),
        1 + _trace_k(0.9, 3),  # eps, eps_root, weight decay; the learning rate after
    ),
    # min_norm in both norms; optx computes -lr / sqrt(1 + lr**2) and the shrinkage
    # -lr**2 / (root * (1 + root)) in float32 from float32 lr: lr twice and six operations.
    "fromage": (lambda: optx.fromage(1e-2), lambda: optax.fromage(1e-2), 2 + 2 + 6),
    "scale_by_trust_ratio": (  # both floors, c, eps, the scale
        lambda: optx.chain(optx.scale_by_trust_ratio(0.5, 0.3, 1e-3), optx.scale(-1e-2)),
        lambda: optax.chain(optax.scale_by_trust_ratio(0.5, 0.3, 1e-3), optax.scale(-1e-2)),
        5,
    ),
}


def _slots(case: str, ours: Any, theirs: Any, g_max: float, u_max: Any) -> list[tuple]:
    """State entries both libraries keep: ``(name, ours, theirs, rtol, atol per leaf)``.

    ``g_max`` is the largest gradient; ``u_max`` per leaf ``max_t max|u_t|``.
    """
    n = len(jax.tree.leaves(u_max))
    k = PARITY[case][2]
    if case == "lamb":
        # mu, an average that can cancel: 1 - b1 and b1's lag (9) of its terms' size, max|g|.
        # nu, a sum of squares: 1 - b2 and b2's full lag (STEPS), relative to its values.
        mu, nu = 10 * EPS32 / 2 * g_max, (1 + STEPS) * EPS32 / 2 + ROUNDOFF64
        return [
            ("mu", ours[0].mu, theirs[0].mu, ROUNDOFF64, [mu] * n),
            ("nu", ours[0].nu, theirs[0].nu, nu, [0.0] * n),
            ("count", ours[0].count, theirs[0].count, 0.0, [0.0]),
        ]
    if case.startswith("lars"):
        # The last trace holds the terms of the updates, with the weights `_trace_k` counts.
        trace = [k * EPS32 / 2 * float(u) for u in jax.tree.leaves(u_max)]
        return [("trace", ours[3].trace, theirs[3].trace, ROUNDOFF64, trace)]
    if case == "novograd":
        # mu is the trace (u = lr mu); nu is exact: b2 = 0.25 and 1 - b2 are float32 numbers.
        mu = [(k - 1) * EPS32 / 2 * float(u) / 1e-2 for u in jax.tree.leaves(u_max)]
        return [
            ("mu", ours[0].mu, theirs[0].mu, ROUNDOFF64, mu),
            ("nu", ours[0].nu, theirs[0].nu, ROUNDOFF64, [0.0] * n),
            ("count", ours[0].count, theirs[0].count, 0.0, [0.0]),
        ]
    return []


@pytest.mark.parametrize("case", sorted(PARITY))
def test_matches_optax(case: str) -> None:
    params = _params()
    grads = _grads(params)
    make_ours, make_theirs, k = PARITY[case]
    ours, our_state, _, _ = _run64(make_ours(), optx.apply_updates, params, grads)
    theirs, their_state, path, u_max = _run64(make_theirs(), optax.apply_updates, params, grads)
    _close64(f"{case} params", ours, theirs, k, path)
    g_max = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads))
    for name, a, b, rtol, atols in _slots(case, our_state, their_state, g_max, u_max):
        a_leaves, b_leaves = jax.tree.leaves(a), jax.tree.leaves(b)
        worst = 0.0
        for i, (x, y, atol) in enumerate(zip(a_leaves, b_leaves, atols, strict=True)):
            _close(f"{case} {name}[{i}]", x, y, rtol, atol)
            bound = atol + rtol * float(np.max(np.abs(y)))
            worst = max(worst, float(np.max(np.abs(x - y))) / bound if bound else 0.0)
        print(f"{case} {name}: max error / bound {worst:.3g}")


@pytest.mark.parametrize("case", ["lamb", "lars_masks_nesterov", "novograd"])
def test_parity_bounds_catch_a_learning_rate_off_by_1e3(case: str) -> None:
    """`test_matches_optax`'s bounds see a learning rate 1.001x too large."""
    params = _params()
    grads = _grads(params)
    make_ours, make_theirs, k = PARITY[case]
    wrong = optx.chain(make_ours(), optx.scale(1.001))
    ours, _, _, _ = _run64(wrong, optx.apply_updates, params, grads)
    theirs, _, path, _ = _run64(make_theirs(), optax.apply_updates, params, grads)
    excess = _excess(ours, theirs, k, path)
    print(f"{case} x 1.001: max error / bound {excess:.3g}")
    assert excess > 10


# --------------------------------------------------------------------------------------
# NumPy references (float64), one loop per optimizer.


def _np(tree: Any) -> list[np.ndarray]:
    return [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]


def _trust(u: np.ndarray, p: np.ndarray, floor: float = 0.0, c: float = 1.0, eps: float = 0.0):
    pn, un = max(np.linalg.norm(p), floor), max(np.linalg.norm(u), floor)
    return 1.0 if pn == 0 or un == 0 else c * pn / (un + eps)


def _np_lamb(params: Any, grads: Any, lr: float, wd: float, decayed: list[bool], outside: bool):
    ps, gs = _np(params), _np(grads)
    b1, b2, eps = 0.9, 0.999, 1e-6
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    for t in range(1, gs[0].shape[0] + 1):
        for i, p in enumerate(ps):
            g = gs[i][t - 1]
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            r = (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps)
            decay = wd * p if decayed[i] else 0.0
            inner = r if outside else r + decay
            u = _trust(inner, p) * inner + (decay if outside else 0.0)
            ps[i] = p - lr * u
    return ps


def _np_lars(params: Any, grads: Any, lr: float, wd: float, c: float, eps: float, mu: float):
    ps, gs = _np(params), _np(grads)
    decayed = [p.ndim >= 2 for p in ps]  # `_matrices`
    trusted = jax.tree.leaves(KERNELS_TREE)
    tr = [np.zeros_like(p) for p in ps]
    for t in range(gs[0].shape[0]):
        for i, p in enumerate(ps):
            d = gs[i][t] + (wd * p if decayed[i] else 0.0)
            d = d * (_trust(d, p, 0.0, c, eps) if trusted[i] else 1.0)
            d = -lr * d
            tr[i] = d + mu * tr[i]
            ps[i] = p + d + mu * tr[i]  # Nesterov
    return ps


def _np_novograd(params: Any, grads: Any, lr: float, wd: float):
    ps, gs = _np(params), _np(grads)
    b1, b2, eps = 0.9, 0.25, 1e-6
    m = [np.zeros_like(p) for p in ps]
    v = [0.0 for _ in ps]
    for t in range(gs[0].shape[0]):
        for i, p in enumerate(ps):
            g = gs[i][t]
            sq = float(np.sum(g * g))
            v[i] = sq if t == 0 else b2 * v[i] + (1 - b2) * sq
            m[i] = b1 * m[i] + g / (np.sqrt(v[i]) + eps) + wd * p
            ps[i] = p - lr * m[i]
    return ps


def _np_fromage(params: Any, grads: Any, lr: float, floor: float):
    ps, gs = _np(params), _np(grads)
    for t in range(gs[0].shape[0]):
        for i, p in enumerate(ps):
            g = gs[i][t]
            ps[i] = (p - lr * _trust(g, p, floor) * g) / np.sqrt(1 + lr * lr)
    return ps


# name: (optx, NumPy loop, k roundings of float32 hyperparameters as in `PARITY`).
REFERENCES = {
    "lamb": (
        lambda: optx.lamb(1e-2, weight_decay=0.1, mask=KERNELS),
        lambda p, g: _np_lamb(p, g, 1e-2, 0.1, jax.tree.leaves(KERNELS_TREE), outside=False),
        K_LAMB,
    ),
    "lamb_outside": (
        lambda: optx.lamb(1e-2, weight_decay=0.1, mask=KERNELS, weight_decay_placement="outside"),
        lambda p, g: _np_lamb(p, g, 1e-2, 0.1, jax.tree.leaves(KERNELS_TREE), outside=True),
        K_LAMB,  # one rounding fewer: the decay outside the ratio counts once
    ),
    "lars": (
        PARITY["lars_masks_nesterov"][0],
        lambda p, g: _np_lars(p, g, 0.1, 1e-3, 0.01, 1e-3, 0.9),
        PARITY["lars_masks_nesterov"][2],
    ),
    "novograd": (
        lambda: optx.novograd(1e-2, weight_decay=1e-3),
        lambda p, g: _np_novograd(p, g, 1e-2, 1e-3),
        1 + _trace_k(0.9, 2),  # eps, weight decay; the learning rate
    ),
    "fromage": (
        lambda: optx.fromage(0.05, 0.5),
        lambda p, g: _np_fromage(p, g, 0.05, 0.5),
        PARITY["fromage"][2],
    ),
}


@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_matches_a_float64_reference(case: str) -> None:
    params = _params()
    grads = _grads(params)
    make, reference, k = REFERENCES[case]
    ours, _, path, _ = _run64(make(), optx.apply_updates, params, grads)
    # `path` is optx's: the reference's to first order.
    _close64(f"{case} vs float64", jax.tree.leaves(ours), reference(params, grads), k, path)


def _keras_lamb(params: Any, grads: Any, steps: int, weight_decay: float | None) -> list:
    """Keras's ``Lamb`` on float64 variables (its learning rate is a float32 variable)."""
    import keras

    assert keras.backend.backend() == "jax"
    with jax.enable_x64(True):
        variables = [keras.Variable(np.asarray(p, np.float64)) for p in jax.tree.leaves(params)]
        opt = keras.optimizers.Lamb(learning_rate=1e-2, weight_decay=weight_decay)
        for t in range(steps):
            opt.apply_gradients(
                [
                    (jnp.asarray(np.asarray(g[t], np.float64)), v)
                    for g, v in zip(jax.tree.leaves(grads), variables, strict=True)
                ]
            )
        assert all(v.value.dtype == np.float64 for v in variables)
        return [np.asarray(v.value) for v in variables]


def test_lamb_matches_keras() -> None:
    params = _params()
    grads = _grads(params, 20)
    keras_params = _keras_lamb(params, grads, 20, None)
    tx = optx.lamb(1e-2, eps=1e-7, weight_decay_placement="outside")
    ours, _, path, _ = _run64(tx, optx.apply_updates, params, grads)
    # Keras computes in float64 from float64 b1, b2 and epsilon: optx's float32 ones differ
    # (`K_LAMB`, whose b2 lag of STEPS / 2 covers these 20 steps).
    _close64("keras lamb", jax.tree.leaves(ours), keras_params, K_LAMB, path)


def test_lamb_decay_outside_is_keras_to_first_order() -> None:
    # Keras decays w by lr * wd * w, then takes its trust ratio from the decayed w: (1 - lr *
    # wd) times ours. Each step its trust-ratio step is lr * wd times smaller than ours, a
    # difference of at most lr * wd * (max|u_t| + lr * wd * max|w|) (u_t = -lr (trust step +
    # wd w)), with max|w| <= max|w_0| + sum_t max|u_t|. Over 20 steps, to first order:
    lr, wd, steps = 1e-2, 0.1, 20
    params = _params()
    grads = _grads(params, steps)
    keras_params = _keras_lamb(params, grads, steps, wd)
    excess = {}
    for placement in ("inside", "outside"):
        tx = optx.lamb(lr, eps=1e-7, weight_decay=wd, weight_decay_placement=placement)
        ours, _, path, _ = _run64(tx, optx.apply_updates, params, grads)
        leaves = zip(
            jax.tree.leaves(ours),
            keras_params,
            jax.tree.leaves(path),
            jax.tree.leaves(params),
            strict=True,
        )
        ratios = []
        for a, e, s, w0 in leaves:
            w_max = float(jnp.max(jnp.abs(w0))) + float(s)
            bound = lr * wd * (float(s) + steps * lr * wd * w_max) + K_LAMB * EPS32 / 2 * float(s)
            ratios.append(
                float(np.max(np.abs(a - e))) / (bound + ROUNDOFF64 * float(np.max(np.abs(e))))
            )
        excess[placement] = max(ratios)
        print(f"keras lamb, decay {placement}: max error / bound {excess[placement]:.3g}")
    # Inside the trust ratio the decay changes the step's direction, not only its size.
    assert excess["outside"] <= 1 < 10 < excess["inside"]


# --------------------------------------------------------------------------------------
# Masks, convergence, bfloat16.

MASKS = [KERNELS, ["kernel", "conv"], KERNELS_TREE, _matrices]


@pytest.mark.parametrize("mask", MASKS, ids=["regex", "regexes", "tree", "callable"])
def test_masks_in_every_form_select_the_same_leaves(mask: Any) -> None:
    params = _params()
    grads = jax.tree.map(lambda g: g[0], _grads(params, 1))
    for build in (
        lambda m: optx.lamb(1e-2, weight_decay=0.5, mask=m),
        lambda m: optx.lars(0.1, 0.5, weight_decay_mask=m, trust_ratio_mask=m),
    ):
        tx, plain = build(mask), build(KERNELS_TREE)
        got = tx.update(grads, tx.init(params), params)[0]
        want = plain.update(grads, plain.init(params), params)[0]
        np.testing.assert_equal(jax.tree.map(np.asarray, got), jax.tree.map(np.asarray, want))
    # Unselected leaves are not decayed: they move as without weight decay.
    tx, free = optx.lamb(1e-2, weight_decay=0.5, mask=mask), optx.lamb(1e-2)
    got = tx.update(grads, tx.init(params), params)[0]
    want = free.update(grads, free.init(params), params)[0]
    np.testing.assert_array_equal(got["blocks"][1], want["blocks"][1])
    assert not np.allclose(got["dense"]["kernel"], want["dense"]["kernel"])


def _minimise(tx: Any, loss: Any, x0: jax.Array, steps: int) -> jax.Array:
    def step(carry: tuple, _: Any) -> tuple:
        p, s = carry
        u, s = tx.update(jax.grad(loss)(p), s, p)
        return (optx.apply_updates(p, u), s), None

    return jax.jit(lambda p: jax.lax.scan(step, (p, tx.init(p)), None, length=steps)[0][0])(x0)


def _decaying(lr: float, steps: int) -> Any:
    """``lr`` decaying geometrically to ``lr / 1000`` over ``steps``: trust-ratio steps have
    a size proportional to the weights' norm, so a constant rate keeps circling a minimum.
    """
    return lambda count: lr * 1e-3 ** (count.astype(jnp.float32) / steps)


TARGET = jnp.array([1.0, -2.0, 3.0])
ROSENBROCK_MIN = jnp.array([1.0, 1.0])
P_NORM, R_NORM = float(jnp.linalg.norm(TARGET)), float(jnp.linalg.norm(ROSENBROCK_MIN))

# Near a minimum these steps keep their length: a trust ratio makes it lr ||p|| (LAMB,
# Fromage; LARS's trust-ratio steps go through a momentum trace 0.9, up to 1 / (1 - 0.9) of
# them), NovoGrad's normalised gradient lr / (1 - 0.9) at most. So the iterate ends jittering
# by about one step at the final rate, lr / 1000 (`_decaying`), and a momentum 0.9 swings
# over ~10 steps before it turns (Fromage, without one, zigzags across Rosenbrock's valley):
# the tolerance is ten final steps, well above float32's stall (an ulp, 2.4e-7 at 3).
# (optimizer, length of a step at the final rate); 500 steps from (0.5, 0.5, 0.5).
PARABOLA = {
    "lamb": (optx.lamb(_decaying(0.1, 500)), 1e-4 * P_NORM),
    "lars": (optx.lars(_decaying(0.1, 500), trust_coefficient=1.0), 1e-4 * P_NORM / 0.1),
    "novograd": (optx.novograd(_decaying(1e-2, 500)), 1e-5 / 0.1),
    "fromage": (optx.fromage(_decaying(0.1, 500)), 1e-4 * P_NORM),
}
# Rosenbrock from (-1.5, 2.0), 2000 steps.
ROSENBROCK = {
    "lamb": (optx.lamb(_decaying(0.1, 2000)), 1e-4 * R_NORM),
    "lars": (optx.lars(_decaying(0.01, 2000), trust_coefficient=1.0), 1e-5 * R_NORM / 0.1),
    "novograd": (optx.novograd(_decaying(1e-2, 2000)), 1e-5 / 0.1),
    "fromage": (optx.fromage(_decaying(0.3, 2000)), 3e-4 * R_NORM),
}


@pytest.mark.parametrize("name", sorted(PARABOLA))
def test_minimises_a_parabola(name: str) -> None:
    tx, step = PARABOLA[name]
    x = _minimise(tx, lambda p: jnp.sum((p - TARGET) ** 2), jnp.full(3, 0.5), 500)
    distance = float(jnp.max(jnp.abs(x - TARGET)))
    print(f"{name} parabola: distance / tolerance {distance / (10 * step):.3g}")
    assert distance < 10 * step


@pytest.mark.parametrize("name", sorted(ROSENBROCK))
def test_minimises_rosenbrock(name: str) -> None:
    tx, step = ROSENBROCK[name]

    def rosenbrock(p: jax.Array) -> jax.Array:
        return (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2

    x = _minimise(tx, rosenbrock, jnp.array([-1.5, 2.0]), 2000)
    distance = float(jnp.max(jnp.abs(x - ROSENBROCK_MIN)))
    print(f"{name} rosenbrock: distance / tolerance {distance / (10 * step):.3g}")
    assert distance < 10 * step


BF16 = {
    "lamb": optx.lamb(1e-2, weight_decay=1e-2, mu_dtype=jnp.float32, nu_dtype=jnp.float32),
    "lars": optx.lars(0.1, 1e-3, accumulator_dtype=jnp.float32),
    "novograd": optx.novograd(1e-2, mu_dtype=jnp.float32, nu_dtype=jnp.float32),
    "fromage": optx.fromage(1e-2),
}


@pytest.mark.parametrize("name", sorted(BF16))
def test_bfloat16_params_with_float32_moments_follow_float32(name: str) -> None:
    steps = 20
    params = _params()
    params16, grads16 = jax.tree.map(jnp.bfloat16, (params, _grads(params, steps)))
    tx = BF16[name]
    got, state = _run(tx, optx.apply_updates, params16, grads16)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(got))
    moments = [x for x in jax.tree.leaves(state) if x.ndim or x.dtype != jnp.int32]
    assert all(x.dtype == jnp.float32 for x in moments), name
    # The float32 run starts from the same numbers and sees the same gradients. bfloat16 keeps
    # 8 significant bits: each step rounds the update and then the parameter by up to 2**-8 of
    # its size, and the parameters' difference, up to t 2**-8 of them by step t, moves the
    # next update by as much relative (the trust ratio's ||p||, the weight decay): per leaf
    # 2**-8 (steps max|p| + (1 + steps) sum_t max|u_t|).
    as_f32 = jax.tree.map(lambda x: x.astype(jnp.float32), (params16, grads16))
    ref, _, path, _, p_max = _sized_run(tx, optx.apply_updates, *as_f32)
    leaves = zip(
        jax.tree.leaves(got),
        jax.tree.leaves(ref),
        jax.tree.leaves(path),
        jax.tree.leaves(p_max),
        strict=True,
    )
    worst = 0.0
    for i, (a, e, u, p) in enumerate(leaves):
        bound = 2.0**-8 * (steps * float(p) + (1 + steps) * float(u))
        _close(f"{name} bfloat16[{i}]", a, e, 0.0, bound)
        worst = max(worst, float(np.max(np.abs(np.asarray(a, np.float64) - e))) / bound)
    print(f"{name} bfloat16: max error / bound {worst:.3g}")


# --------------------------------------------------------------------------------------
# Errors.

P = {"w": jnp.ones(2)}

ERRORS = [
    (
        lambda: optx.scale_by_trust_ratio(min_norm=-1.0),
        ValueError,
        "`scale_by_trust_ratio` needs min_norm finite and >= 0. Received: min_norm=-1.0.",
    ),
    (
        lambda: optx.scale_by_trust_ratio(trust_coefficient=-0.1),
        ValueError,
        "`scale_by_trust_ratio` needs trust_coefficient finite and >= 0. "
        "Received: trust_coefficient=-0.1.",
    ),
    (
        lambda: optx.scale_by_trust_ratio(eps=float("inf")),
        ValueError,
        "`scale_by_trust_ratio` needs eps finite and >= 0. Received: eps=inf.",
    ),
    (
        lambda: optx.scale_by_trust_ratio().update(P, optx.scale_by_trust_ratio().init(P)),
        ValueError,
        "`scale_by_trust_ratio.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
    ),
    (
        lambda: optx.scale_by_trust_ratio().update({"v": jnp.ones(2)}, None, P),
        ValueError,
        "`scale_by_trust_ratio.update` needs updates with the structure of params. "
        "Received: missing from updates: 'w'; not in params: 'v'.",
    ),
    (
        lambda: optx.lamb(-1e-3),
        ValueError,
        "`lamb` needs learning_rate finite and >= 0. Received: learning_rate=-0.001.",
    ),
    (lambda: optx.lamb(1e-3, b1=1.0), ValueError, "`lamb` needs b1 in [0, 1). Received: b1=1.0."),
    (
        lambda: optx.lamb(1e-3, eps=-1e-6),
        ValueError,
        "`lamb` needs eps finite and >= 0. Received: eps=-1e-06.",
    ),
    (
        lambda: optx.lamb(1e-3, weight_decay=-0.1),
        ValueError,
        "`lamb` needs weight_decay finite and >= 0. Received: weight_decay=-0.1.",
    ),
    (
        lambda: optx.lamb(1e-3, weight_decay_placement="keras"),
        ValueError,
        "`lamb` needs weight_decay_placement to be 'inside' or 'outside'. "
        "Received: weight_decay_placement='keras'.",
    ),
    (
        lambda: optx.lamb(1e-3, mask=[1, 2]),
        TypeError,
        "`masked` needs mask to be a pytree of bools, a callable returning one, or regular "
        "expressions on parameter paths. Received: a mask with leaf 1.",
    ),
    (
        lambda: optx.lamb(1e-3, mu_dtype=jnp.int8),
        TypeError,
        "`lamb` needs mu_dtype to be None or a floating dtype. "
        "Received: mu_dtype=<class 'jax.numpy.int8'>.",
    ),
    (
        lambda: optx.lars(0.1, momentum=1.5),
        ValueError,
        "`lars` needs momentum in [0, 1]. Received: momentum=1.5.",
    ),
    (
        lambda: optx.lars(0.1, trust_coefficient=-1.0),
        ValueError,
        "`lars` needs trust_coefficient finite and >= 0. Received: trust_coefficient=-1.0.",
    ),
    (
        lambda: optx.lars(0.1, eps=-1.0),
        ValueError,
        "`lars` needs eps finite and >= 0. Received: eps=-1.0.",
    ),
    (
        lambda: optx.lars(0.1, weight_decay=-1.0),
        ValueError,
        "`lars` needs weight_decay finite and >= 0. Received: weight_decay=-1.0.",
    ),
    (
        lambda: optx.lars(0.1, accumulator_dtype="int32"),
        TypeError,
        "`lars` needs accumulator_dtype to be None or a floating dtype. "
        "Received: accumulator_dtype='int32'.",
    ),
    (
        lambda: optx.novograd(1e-2, b2=1.0),
        ValueError,
        "`novograd` needs b2 in [0, 1). Received: b2=1.0.",
    ),
    (
        lambda: optx.novograd(1e-2, eps_root=-1.0),
        ValueError,
        "`novograd` needs eps_root finite and >= 0. Received: eps_root=-1.0.",
    ),
    (
        lambda: optx.novograd(1e-2, nu_dtype="int8"),
        TypeError,
        "`novograd` needs nu_dtype to be None or a floating dtype. Received: nu_dtype='int8'.",
    ),
    (
        lambda: optx.scale_by_novograd(weight_decay=-1.0),
        ValueError,
        "`scale_by_novograd` needs weight_decay finite and >= 0. Received: weight_decay=-1.0.",
    ),
    (
        lambda: optx.scale_by_novograd().init({"w": jnp.ones(2, jnp.int32)}),
        TypeError,
        "`scale_by_novograd.init` needs floating-point params (float16, bfloat16, float32 or "
        "float64). Received: params['w'] of dtype int32. Keep other leaves out of the "
        "optimised tree, or route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
    (
        lambda: optx.scale_by_novograd().update(P, optx.scale_by_novograd().init(P)),
        ValueError,
        "`scale_by_novograd.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
    ),
    (
        lambda: optx.scale_by_novograd().update(
            {"v": jnp.ones(2)}, optx.scale_by_novograd().init(P), P
        ),
        ValueError,
        "`scale_by_novograd.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'w'; not in the state: 'v'.",
    ),
    (
        lambda: optx.fromage(-0.1),
        ValueError,
        "`fromage` needs learning_rate finite and >= 0. Received: learning_rate=-0.1.",
    ),
    (
        lambda: optx.fromage(0.1, min_norm=-1e-6),
        ValueError,
        "`fromage` needs min_norm finite and >= 0. Received: min_norm=-1e-06.",
    ),
    (
        lambda: optx.fromage(0.1).update(P, optx.fromage(0.1).init(P)),
        ValueError,
        "`scale_by_trust_ratio.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
    ),
]


@pytest.mark.parametrize("call, error, message", ERRORS)
def test_error_message(call: Any, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message
