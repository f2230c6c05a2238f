"""Complex parameters in MADGRAD, AcProp, simplified AdEMAMix, Adadelta, SM3 and DP-SGD.

optax runs these on complex values with no rule of its own, so each is compared with a
float64 NumPy loop of the complex rule written here: accumulators of squares hold
``|g|**2`` (real), first moments and updates stay complex, norms are of the moduli. optx
runs in complex128 (with a float64 leaf beside), so only its float32 hyperparameters
differ from the loop (tests/TOLERANCES.md). Each loop also returns the scale that bounds
how far those roundings can move the parameters (see `_bound`). `ema_params` and
`kahan_summation` act componentwise: a complex leaf must give what its real and imaginary
parts give as two real leaves.
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
from helpers import EPS32

import optx

T = 50
B = 4  # DP-SGD's examples per step
EPS64 = float(np.finfo(np.float64).eps)
# float64 round-off per step, relative to the parameters' scale: the elementwise operations
# of a step and norms over at most 21 coordinates (as tests/test_complex.py).
ROUNDINGS64 = 32


def _tree(seed: int, lead: tuple[int, ...], imag: bool = True) -> dict[str, Any]:
    """NumPy leaves: complex kernel, layer and scale (zero imaginary part unless ``imag``),
    a real bias; ``lead`` axes in front (steps, examples)."""
    rng = np.random.default_rng(seed)

    def draw(shape: tuple[int, ...], complex_: bool) -> np.ndarray:
        x = rng.standard_normal((*lead, *shape))
        if complex_:
            x = x + 1j * (rng.standard_normal(x.shape) if imag else 0)
        return x

    return {
        "dense": {"kernel": draw((2, 3), True), "bias": draw((3,), False)},
        "layers": [draw((2,), True)],
        "scale": draw((), True),
    }


def _real(tree: Any) -> Any:
    return jax.tree.map(lambda x: np.real(x).astype(np.float64), tree)


def _optx_run(tx: Any, params: Any, grads: Any) -> Any:
    """``tx`` over the leading axis of ``grads``, jitted, in float64 / complex128."""
    with jax.enable_x64(True):

        @jax.jit
        def go(params: Any, grads: Any) -> Any:
            def step(carry: tuple, g: Any) -> tuple:
                p, s = carry
                u, s = tx.update(g, s, p)
                return (optx.apply_updates(p, u), s), None

            return jax.lax.scan(step, (params, tx.init(params)), grads)[0][0]

        return jax.tree.map(np.asarray, go(params, grads))


# --- The NumPy loops, per leaf: (final parameter, scale of the float32 roundings' effect) ----
# A float32 hyperparameter is off by at most EPS32 / 2 relative; K counts the roundings a
# quantity goes through, a decay b counted with its lag b / (1 - b) (at most T) as the
# sensitivity of an average to b. The scale is what K * EPS32 / 2 multiplies: the sum over
# the steps of max|terms| of the update, where terms that can cancel (m = g + b m, g - m)
# are taken with their moduli, so that the bound is relative to them, not to their sum.


def numpy_madgrad(p: np.ndarray, gs: np.ndarray, lr: float, mom: float, eps: float) -> tuple:
    x0, big_g, s, s_abs, scale = p, 0.0, 0.0, 0.0, 0.0
    for k, g in enumerate(gs):
        lamb = (lr + eps) * np.sqrt(k + 1)
        big_g = big_g + lamb * np.abs(g) ** 2
        s, s_abs = s + lamb * g, s_abs + lamb * np.abs(g)
        z = x0 - s / (np.cbrt(big_g) + eps)
        # The parameters contract towards z at rate mom, so an error of z, or of the
        # rounded (1 - mom) z + mom p (mom and 1 - mom off by one rounding each), is
        # forgotten at that rate: the scale is a maximum, not a sum.
        size = s_abs / (np.cbrt(big_g) + eps) + np.abs(z) + mom / (1 - mom) * np.abs(p)
        scale = max(scale, float(np.max(size)))
        p = p + ((1 - mom) * z + mom * p - p)
    return p, scale


def numpy_acprop(p: np.ndarray, gs: np.ndarray, lr: float, b1: float, b2: float, eps: float):
    m = m_abs = belief = belief_abs = 0.0
    scale = 0.0
    for t, g in enumerate(gs, 1):
        if t == 1:
            u, cond = g / (1 + eps), 1.0
        else:
            u = g / (np.sqrt(belief / (1 - b2 ** (t - 1))) + eps)
            cond = belief_abs / belief  # the belief's condition: |g - m| may cancel
        scale += float(np.max(lr * np.abs(u) * cond))
        belief = (1 - b2) * np.abs(g - m) ** 2 + b2 * belief
        belief_abs = (1 - b2) * (np.abs(g) + m_abs) ** 2 + b2 * belief_abs
        m, m_abs = (1 - b1) * g + b1 * m, (1 - b1) * np.abs(g) + b1 * m_abs
        p = p - lr * u
    return p, scale


def numpy_simplified_ademamix(p, gs, lr: float, b1: float, b2: float, alpha: float, eps: float):
    m = m_abs = v = 0.0
    scale = 0.0
    for t, g in enumerate(gs, 1):
        m, m_abs = g + b1 * m, np.abs(g) + b1 * m_abs
        v = (1 - b2) * np.abs(g) ** 2 + b2 * v
        den = np.sqrt(v / (1 - b2**t)) + eps
        scale += float(np.max(lr * (m_abs + alpha * np.abs(g)) / den))
        p = p - lr * (m + alpha * g) / den
    return p, scale


def numpy_adadelta(p: np.ndarray, gs: np.ndarray, lr: float, rho: float, eps: float) -> tuple:
    e_g = e_x = 0.0
    scale = 0.0
    for g in gs:
        e_g = (1 - rho) * np.abs(g) ** 2 + rho * e_g
        u = np.sqrt(e_x + eps) / np.sqrt(e_g + eps) * g
        e_x = (1 - rho) * np.abs(u) ** 2 + rho * e_x
        scale += float(np.max(lr * np.abs(u)))
        p = p - lr * u
    return p, scale


def numpy_sm3(p: np.ndarray, gs: np.ndarray, lr: float, b1: float, eps: float) -> tuple:
    # b2 = 1 (sm3's): the accumulators sum |g|^2 over the cover.
    covers = [np.zeros(p.shape)] if p.ndim < 2 else [np.zeros(n) for n in p.shape]
    nu = nu_abs = 0.0
    scale = 0.0
    for g in gs:
        # An element's accumulator: the smallest of its covers' (row and column) maxima.
        previous = covers[0] if p.ndim < 2 else np.minimum.outer(covers[0], covers[1])
        acc = np.abs(g) ** 2 + previous
        covers = [acc] if p.ndim < 2 else [acc.max(axis=1), acc.max(axis=0)]
        scaled = np.where(acc > 0, g / np.sqrt(acc + eps), 0)
        nu, nu_abs = (1 - b1) * scaled + b1 * nu, (1 - b1) * np.abs(scaled) + b1 * nu_abs
        scale += float(np.max(lr * nu_abs))
        p = p - lr * nu
    return p, scale


def numpy_dpsgd(params: Any, grads: Any, lr: float, clip: float, mom: float) -> tuple:
    """On whole trees: the clip factor is per example, over all leaves (moduli)."""
    leaves, treedef = jax.tree.flatten(params)
    per_example = jax.tree.leaves(grads)  # each (T, B, *shape)
    trace = [0.0] * len(leaves)
    trace_abs = [0.0] * len(leaves)
    scale = [0.0] * len(leaves)
    for t in range(T):
        gs = [g[t] for g in per_example]
        norms = np.sqrt(sum(np.sum(np.abs(g.reshape(B, -1)) ** 2, axis=1) for g in gs))
        factor = np.minimum(1.0, clip / norms)
        for i, g in enumerate(gs):
            mean = np.tensordot(factor, g, axes=1) / B
            mean_abs = np.tensordot(factor, np.abs(g), axes=1) / B
            trace[i] = mean + mom * trace[i]
            trace_abs[i] = mean_abs + mom * trace_abs[i]
            scale[i] += float(np.max(lr * trace_abs[i]))
            leaves[i] = leaves[i] - lr * trace[i]
    return jax.tree.unflatten(treedef, leaves), jax.tree.unflatten(treedef, scale)


def _per_leaf(numpy_fn: Callable[..., tuple], **hyper: float) -> Callable[[Any, Any], tuple]:
    def run(params: Any, grads: Any) -> tuple:
        out = jax.tree.map(lambda p, g: numpy_fn(p, g, **hyper), params, grads)
        is_pair = lambda x: isinstance(x, tuple)  # noqa: E731
        return (
            jax.tree.map(lambda x: x[0], out, is_leaf=is_pair),
            jax.tree.map(lambda x: x[1], out, is_leaf=is_pair),
        )

    return run


# name: (optx transform, NumPy loop, K, per-example gradients).
# K for each, counting float32 roundings (EPS32 / 2 each) with lags b / (1 - b):
# - MADGRAD: lambda = (lr + eps) sqrt(k + 1) is 5 float32 roundings (lr, eps, the sum, the
#   root, the product), so s is off by 5 of s_abs, G by 5 of itself, G^(1/3) by 5 / 3, eps
#   in the denominator 1: 7.7 of the scale's first term; mom and 1 - mom one each on
#   |z| and mom / (1 - mom) |p| (the scale is already divided by 1 - mom): K = 10.
# - AcProp (b1 = 0.9, b2 = 0.99): m off by 1 + 1 + lag 9 = 11 of m_abs, so |g - m|^2 by 22
#   of (|g| + m_abs)^2; the belief adds 1 - b2 (1) and b2's lag (99, capped at T = 50):
#   73, plus its bias correction (3): 76 of belief_abs, half of it through the root (38),
#   times cond; eps 1, lr 1: K = 48.
# - simplified AdEMAMix (b1 = 0.9, b2 = 0.95): m off by 1 + lag 9 of m_abs, alpha 1; v by
#   1 + lag 19 + bias correction 3 + its reciprocal 1 = 24, half through the root (12);
#   eps 1, lr 1: 25, K = 32.
# - Adadelta (rho = 0.9): E[g^2] off by 1 + 1 + lag 9 = 11; u_t by half of E[u^2]_{t-1}'s
#   error and of E[g^2]'s, plus eps: e_u <= e_x / 2 + 7; E[u^2] then takes twice e_u plus
#   11: e_x(t) <= e_x(t-1) + 25, so e_u(T) <= 25 (T - 1) / 2 + 7 + lr 1 = 620.5: K = 640
#   (the error of the step size feeds back through E[u^2], so it grows with the steps).
# - SM3 (b1 = 0.9, b2 = 1): the accumulators are exact sums (1 and b2 = 1 exact); eps 1/2
#   through the root, 1 - b1 and b1 one each, b1's lag 9, lr 1: 12.5, K = 16.
# - DP-SGD (clip 3, momentum 0.9, no noise): the clip 1 on the clipped examples' factors
#   (relative to sum |factor g|), momentum 1 and its lag 9, lr 1: K = 16.
# Over the run each leaf is then off by at most K * EPS32 / 2 * scale, plus float64
# round-off: ROUNDINGS64 per step of the leaf's scale.
CASES: dict[str, tuple[Any, Callable[[Any, Any], tuple], float, bool]] = {
    "madgrad": (
        optx.contrib.scale_by_madgrad(1e-2, momentum=0.9, eps=1e-6),
        _per_leaf(numpy_madgrad, lr=1e-2, mom=0.9, eps=1e-6),
        10,
        False,
    ),
    "acprop": (
        optx.contrib.acprop(1e-2, b1=0.9, b2=0.99, eps=1e-6, eps_root=0.0),
        _per_leaf(numpy_acprop, lr=1e-2, b1=0.9, b2=0.99, eps=1e-6),
        48,
        False,
    ),
    "simplified_ademamix": (
        optx.contrib.simplified_ademamix(1e-2, b1=0.9, b2=0.95, alpha=2.0, eps=1e-3),
        _per_leaf(numpy_simplified_ademamix, lr=1e-2, b1=0.9, b2=0.95, alpha=2.0, eps=1e-3),
        32,
        False,
    ),
    "adadelta": (
        optx.adadelta(0.5, rho=0.9, eps=1e-6),
        _per_leaf(numpy_adadelta, lr=0.5, rho=0.9, eps=1e-6),
        640,
        False,
    ),
    "sm3": (optx.sm3(0.1, momentum=0.9), _per_leaf(numpy_sm3, lr=0.1, b1=0.9, eps=1e-8), 16, False),
    "dpsgd": (
        optx.contrib.dpsgd(0.1, l2_norm_clip=3.0, noise_multiplier=0.0, seed=0, momentum=0.9),
        functools.partial(numpy_dpsgd, lr=0.1, clip=3.0, mom=0.9),
        16,
        True,
    ),
}


def _data(per_example: bool, imag: bool = True) -> tuple[Any, Any]:
    return _tree(0, (), imag), _tree(1, (T, B) if per_example else (T,), imag)


def _bound(k: float, scale: float, expected: np.ndarray) -> float:
    return k * EPS32 / 2 * scale + T * ROUNDINGS64 * EPS64 * float(np.max(np.abs(expected)))


def _leaves(tree: Any) -> list[tuple[str, Any]]:
    return [(optx.tree.path_name(p), x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]]


def _check(ours: Any, expected: Any, scales: Any, k: float) -> None:
    for (path, a), (_, b), (_, scale) in zip(
        _leaves(ours), _leaves(expected), _leaves(scales), strict=True
    ):
        assert a.dtype == b.dtype, (path, a.dtype, b.dtype)
        error, bound = float(np.max(np.abs(a - b))), _bound(k, scale, b)
        assert error <= bound, (path, error, bound)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_the_numpy_complex_rule(name: str) -> None:
    tx, numpy_fn, k, per_example = CASES[name]
    params, grads = _data(per_example)
    expected, scales = numpy_fn(params, grads)
    _check(_optx_run(tx, params, grads), expected, scales, k)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_zero_imaginary_part_gives_the_real_rule(name: str) -> None:
    # The complex run of real values against the real run of the same values, both in
    # optx: they differ only by float64 round-off (a complex product or quotient rounds
    # differently from a real one), which moves a step as a float32 hyperparameter does,
    # by EPS64 in place of EPS32: the same bound with ROUNDINGS64 * EPS64 per rounding.
    tx, numpy_fn, k, per_example = CASES[name]
    params, grads = _data(per_example, imag=False)
    complex_run = _optx_run(tx, params, grads)
    real_run = _optx_run(tx, _real(params), _real(grads))
    _, scales = numpy_fn(_real(params), _real(grads))
    for (path, a), (_, b), (_, scale) in zip(
        _leaves(complex_run), _leaves(real_run), _leaves(scales), strict=True
    ):
        bound = k * ROUNDINGS64 * EPS64 * scale + T * ROUNDINGS64 * EPS64 * np.max(np.abs(b))
        assert np.max(np.abs(a.imag)) == 0, path
        assert np.max(np.abs(a.real - b)) <= bound, (path, np.max(np.abs(a.real - b)), bound)


def test_the_bound_catches_a_decay_off_by_1e3() -> None:
    params, grads = _data(False)
    expected, scales = CASES["simplified_ademamix"][1](params, grads)
    wrong = optx.contrib.simplified_ademamix(1e-2, b1=0.9009, b2=0.95, alpha=2.0, eps=1e-3)
    ours = _optx_run(wrong, params, grads)
    for (path, a), (_, b), (_, scale) in zip(
        _leaves(ours), _leaves(expected), _leaves(scales), strict=True
    ):
        error = float(np.max(np.abs(a - b)))
        assert error > 10 * _bound(CASES["simplified_ademamix"][2], scale, b), (path, error)


def test_accumulators_of_squares_are_real() -> None:
    def single(x: np.ndarray) -> jax.Array:
        return jnp.asarray(x, jnp.complex64 if np.iscomplexobj(x) else jnp.float32)

    params = jax.tree.map(single, _tree(0, ()))
    real = {np.dtype("float32")}

    def dtypes(tree: Any) -> set[np.dtype]:
        return {x.dtype for x in jax.tree.leaves(tree)}

    madgrad = optx.contrib.scale_by_madgrad(1e-2).init(params)
    assert dtypes(madgrad.grad_sum_sq) == real
    assert dtypes(madgrad.s) == {np.dtype("complex64"), np.dtype("float32")}
    assert dtypes(optx.contrib.scale_by_acprop().init(params).nu) == real
    assert dtypes(optx.contrib.scale_by_simplified_ademamix().init(params).n) == real
    adadelta = optx.scale_by_adadelta().init(params)
    assert dtypes((adadelta.e_g, adadelta.e_x)) == real
    assert dtypes(optx.scale_by_sm3().init(params).mu) == real


# --- DP-SGD's noise: the privacy guarantee needs the full standard deviation per real part ---


def test_dp_noise_has_the_full_std_in_each_real_and_imaginary_part() -> None:
    # A complex leaf is a point of R^{2n}: the clip bounds its L2 sensitivity there, so the
    # Gaussian mechanism needs std sigma * C on each of the 2n real coordinates. With zero
    # gradients and one example the update is the noise: the sample variance of n draws of
    # N(0, s^2) is s^2 (1 +- 6 sqrt(2 / n)) but for about one key in 1e8, and the correlation of
    # the two parts is below 6 / sqrt(n); half the variance (JAX's complex normal) fails.
    n, clip, sigma = 20000, 2.0, 1.5
    tx = optx.contrib.differentially_private_aggregate(clip, sigma, key=5)
    grads = {"z": jnp.zeros((1, n), jnp.complex64), "w": jnp.zeros((1, n), jnp.float32)}
    u, _ = tx.update(grads, tx.init(None))
    z, w = np.asarray(u["z"], np.complex128), np.asarray(u["w"], np.float64)
    assert u["z"].dtype == jnp.complex64
    std = clip * sigma
    for part in (z.real, z.imag, w):
        assert abs(np.mean(part**2) / std**2 - 1) <= 6 * np.sqrt(2 / n)
    assert abs(np.mean(z.real * z.imag)) / std**2 <= 6 / np.sqrt(n)


def test_dp_noise_of_a_real_leaf_is_unchanged() -> None:
    # A real leaf's noise is still jax.random.normal of its dtype, from the key split as
    # optax splits it (the same seed gives optax's noise).
    tx = optx.contrib.differentially_private_aggregate(1.0, 1.0, key=0)
    grads = {"a": jnp.zeros((1, 5)), "b": jnp.zeros((1, 3), jnp.complex64)}
    u, _ = tx.update(grads, tx.init(None))
    _, key_a, _ = jax.random.split(jax.random.key(0), 3)
    np.testing.assert_array_equal(u["a"], jax.random.normal(key_a, (5,), jnp.float32))


def test_dp_clips_by_the_modulus_norm() -> None:
    tx = optx.contrib.differentially_private_aggregate(1.0, 0.0)
    grads = {"z": jnp.array([[3.0 + 4.0j]]), "w": jnp.array([[0.0]])}  # norm 5
    u, _ = tx.update(grads, tx.init(None))
    np.testing.assert_allclose(np.asarray(u["z"]), [0.6 + 0.8j], rtol=4 * EPS32)


# --- Componentwise transforms: a complex leaf is its two real parts -------------------------


def _split(tree: Any) -> Any:
    return jax.tree.map(
        lambda x: {"re": np.real(x), "im": np.imag(x)} if np.iscomplexobj(x) else x, tree
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: optx.ema_params(0.9),
        lambda: optx.ema_params(0.9, overwrite_frequency=3, start="first_step"),
        optx.kahan_summation,
    ],
    ids=["ema_params", "ema_params/overwrite", "kahan_summation"],
)
def test_componentwise_transforms_act_on_each_part(make: Callable[[], Any]) -> None:
    # SGD with momentum multiplies and adds by real scalars: exact per component, and so
    # are the average and the compensated sum. Complex and split runs agree to the last bit
    # but for a fused multiply-add XLA may form in one and not the other: one rounding of
    # each of the T steps' two products, EPS64 of the values.
    tx = optx.chain(optx.sgd(0.1, momentum=0.9), make())
    params, grads = _data(False)
    together = _split(_optx_run(tx, params, grads))
    apart = _optx_run(tx, _split(params), _split(grads))
    for (path, a), (_, b) in zip(_leaves(together), _leaves(apart), strict=True):
        assert np.max(np.abs(a - b)) <= 2 * T * EPS64 * np.max(np.abs(b)), path


def test_ema_params_average_is_complex() -> None:
    params = {"z": jnp.array([1.0 + 2.0j], jnp.complex64), "w": jnp.array([1.0])}
    tx = optx.ema_params(0.5)
    state = tx.init(params)
    _, state = tx.update(
        {"z": jnp.array([2.0j], jnp.complex64), "w": jnp.array([2.0])}, state, params
    )
    np.testing.assert_array_equal(optx.ema_params_value(state)["z"], [1.0 + 3.0j])
    assert optx.kahan_summation().init(params).residual == {"z": None, "w": None}


def test_a_real_ema_dtype_is_refused_for_complex_params() -> None:
    tx = optx.ema_params(0.9, ema_dtype=jnp.float32)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`ema_params.init` needs a complex ema_dtype for complex params (a real slot would "
            "drop the imaginary part). Received: ema_dtype='float32' for params['z'] of dtype "
            "complex64. Pass ema_dtype=jnp.complex64 (or None, the parameters' dtypes)."
        ),
    ):
        tx.init({"z": jnp.zeros(2, jnp.complex64)})


# --- GaLore: a complex SVD, P^H g projected and P u back --------------------------------------
# With one projector (update_proj_gap > T) and a linear base optimizer (a trace), each step
# is u_t = -lr s m_t P P^H for the kernel (m_t = g_t + b m_{t-1} at full size; the kernel is
# 2 x 3, so P holds right singular vectors), which depends on the projector P P^H alone, not
# on the phase of each singular vector. optx computes the SVD in complex64 (as optax, in
# float32): by Wedin's theorem its projector is off by at most ||E|| / gap, with ||E|| the
# SVD's backward error p * EPS32 * ||G_0|| (LAPACK Users' Guide, section 4.9; p = 64 for a
# 2 x 3 matrix, with the cast to complex64 and the columns' orthogonality error), and gap
# the distance from the kept singular values to the others. The hyperparameters: lr 1,
# b 1 plus its lag 9, scale 0.5 exact: K = 16, on m_abs = |g| + b m_abs.
GALORE_LR, GALORE_B, GALORE_SCALE, GALORE_RANK, SVD_P = 0.1, 0.9, 0.5, 1, 64


def _galore() -> Any:
    return optx.contrib.galore(
        GALORE_LR,
        rank=GALORE_RANK,
        update_proj_gap=1000,
        scale=GALORE_SCALE,
        base_optimizer=optx.trace(GALORE_B),
    )


def numpy_galore(params: Any, grads: Any) -> tuple[Any, Any]:
    """Returns the final parameters and each leaf's bound on optx's distance from them."""
    g0 = grads["dense"]["kernel"][0]
    sv = np.linalg.svd(g0, compute_uv=False)
    vh = np.linalg.svd(g0)[2]
    v = vh[:GALORE_RANK].conj().T
    projector = v @ v.conj().T
    angle = SVD_P * EPS32 * np.linalg.norm(g0) / (sv[GALORE_RANK - 1] - sv[GALORE_RANK])

    def leaf(p: np.ndarray, gs: np.ndarray, projected: bool) -> tuple[np.ndarray, float]:
        m = m_abs = 0.0
        bound = 0.0
        for g in gs:
            m, m_abs = g + GALORE_B * m, np.abs(g) + GALORE_B * m_abs
            if projected:
                p = p - GALORE_LR * GALORE_SCALE * (m @ projector)
                size = GALORE_LR * GALORE_SCALE * np.linalg.norm(m_abs)
                bound += (16 * EPS32 / 2 + angle) * size
            else:
                p = p - GALORE_LR * m
                bound += 16 * EPS32 / 2 * GALORE_LR * float(np.max(m_abs))
        return p, bound + T * ROUNDINGS64 * EPS64 * float(np.max(np.abs(p)))

    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    out = [
        leaf(p, g, optx.tree.path_name(path) == "dense/kernel")
        for (path, p), g in zip(flat, jax.tree.leaves(grads), strict=True)
    ]
    treedef = jax.tree.structure(params)
    return (
        jax.tree.unflatten(treedef, [x[0] for x in out]),
        jax.tree.unflatten(treedef, [x[1] for x in out]),
    )


def test_galore_matches_the_numpy_complex_rule() -> None:
    params, grads = _data(False)
    expected, bounds = numpy_galore(params, grads)
    ours = _optx_run(_galore(), params, grads)
    for (path, a), (_, b), (_, bound) in zip(
        _leaves(ours), _leaves(expected), _leaves(bounds), strict=True
    ):
        assert a.dtype == b.dtype, path
        assert np.max(np.abs(a - b)) <= bound, (path, np.max(np.abs(a - b)), bound)
    # The projection matters: without it (P P^H = I) the kernel is far outside the bound.
    kernel, m = params["dense"]["kernel"], 0.0
    for g in grads["dense"]["kernel"]:
        m = g + GALORE_B * m
        kernel = kernel - GALORE_LR * GALORE_SCALE * m
    assert np.max(np.abs(kernel - expected["dense"]["kernel"])) > 100 * bounds["dense"]["kernel"]


def test_galore_zero_imaginary_part_gives_the_real_rule() -> None:
    # Both runs are within the bound of the NumPy loop (the real SVD and the complex SVD of
    # the same real matrix each have the backward error above): twice the bound apart.
    params, grads = _data(False, imag=False)
    _, bounds = numpy_galore(_real(params), _real(grads))
    complex_run = _optx_run(_galore(), params, grads)
    real_run = _optx_run(_galore(), _real(params), _real(grads))
    for (path, a), (_, b), (_, bound) in zip(
        _leaves(complex_run), _leaves(real_run), _leaves(bounds), strict=True
    ):
        assert np.max(np.abs(a.imag)) <= 2 * bound, path
        assert np.max(np.abs(a.real - b)) <= 2 * bound, path


def test_galore_with_adam_does_not_see_the_singular_vectors_phase() -> None:
    # Each column of P is a singular vector up to a phase. Adam is elementwise with a real
    # second moment |R|^2, so P e^{i theta} turns R = g P, and Adam's step, by e^{i theta},
    # which the way back u P^H takes out: the same run. (With P^T for P^H, the way back
    # would turn it once more, by e^{2 i theta}.) Both runs start after the first step's
    # refresh (count 1, no refresh within T steps) from the projector given here; they
    # differ by float64 round-off, which Adam (its steps at most 7.3 lr per element for
    # b1 = 0.9, b2 = 0.999, tests/TOLERANCES.md) passes on at its relative size: ROUNDINGS64
    # per step of the parameters' and of the steps' scales.
    tx = optx.chain(optx.contrib.scale_by_galore(rank=1, update_proj_gap=1000), optx.scale(-0.01))
    params, grads = _data(False)
    v = np.linalg.svd(grads["dense"]["kernel"][0])[2][:1].conj().T

    def run(projector: np.ndarray) -> np.ndarray:
        with jax.enable_x64(True):

            @jax.jit
            def go(params: Any, grads: Any, projector: Any) -> Any:
                galore, rest = tx.init(params)
                kernels = {**galore.projector, "dense": {**galore.projector["dense"]}}
                kernels["dense"]["kernel"] = projector
                state = (galore._replace(count=jnp.ones((), jnp.int32), projector=kernels), rest)

                def step(carry: tuple, g: Any) -> tuple:
                    p, s = carry
                    u, s = tx.update(g, s, p)
                    return (optx.apply_updates(p, u), s), None

                return jax.lax.scan(step, (params, state), grads)[0][0]

            return np.asarray(go(params, grads, projector)["dense"]["kernel"])

    a, b = run(v), run(v * np.exp(0.7j))
    bound = T * ROUNDINGS64 * EPS64 * (np.max(np.abs(a)) + T * 0.01 * 7.3)
    assert np.max(np.abs(a - b)) <= bound
    # Not vacuous: the run moves the kernel far more than the bound.
    assert np.max(np.abs(a - params["dense"]["kernel"])) > 1e6 * bound
