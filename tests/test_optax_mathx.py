"""Norm-based transforms and functions against optax: AGC, block norms, normalisation,
non-negative parameters, per-example clipping and `scale_gradient`; their errors.

The transforms run 100 steps on a nested tree in float64 (`jax.enable_x64`), each step on
the same parameters and gradients for optx and optax (a fixed trajectory: these transforms
keep no statistics, so the comparison is per step, with no error carried between steps).
"""

from __future__ import annotations

import functools
import re
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, assert_close

import optx

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)


def _params() -> dict[str, Any]:
    """Every rank AGC distinguishes (0 to 5), nested; a zero bias exercises the floors."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape)

    return {
        "dense": {"kernel": normal(4, 3), "bias": np.zeros(3)},
        "blocks": [{"heads": normal(3, 2, 4), "conv": normal(2, 2, 3, 2)}, normal(5)],
        "conv3d": normal(2, 1, 2, 2, 3),
        "scale": normal(),
    }


N = sum(np.size(p) for p in jax.tree.leaves(_params()))  # the terms of a global norm


def _path(params: Any) -> Any:
    """Parameters of every step (leading axis: step): a random walk, the zero bias kept."""
    rng = np.random.default_rng(1)

    def walk(p: np.ndarray) -> np.ndarray:
        steps = 0.05 * rng.standard_normal((STEPS, *p.shape)) * np.any(p != 0)
        return p + np.cumsum(steps, axis=0)

    return jax.tree.map(walk, params)


def _grads(params: Any) -> Any:
    """Gradients whose size swings between 0.2 and 2.2: some units clip, some do not."""
    rng = np.random.default_rng(2)
    size = 0.2 + 2.0 * np.sin(0.3 * np.arange(STEPS)) ** 2
    return jax.tree.map(
        lambda p: rng.standard_normal((STEPS, *p.shape)) * size.reshape((-1,) + (1,) * p.ndim),
        params,
    )


def _updates64(txs: dict[str, Any], path: Any, grads: Any) -> dict[str, Any]:
    """Each transform's update at each step of the trajectory, in float64 (NumPy out).

    All of them in one jitted scan: one compilation per library.
    """
    with jax.enable_x64(True):
        path, grads = jax.tree.map(jnp.asarray, (path, grads))

        @jax.jit
        def run(path: Any, grads: Any) -> Any:
            def step(states: dict[str, Any], pg: tuple) -> tuple:
                out = {k: txs[k].update(pg[1], states[k], pg[0]) for k in txs}
                return {k: s for k, (_, s) in out.items()}, {k: u for k, (u, _) in out.items()}

            first = jax.tree.map(lambda x: x[0], path)
            states = {k: tx.init(first) for k, tx in txs.items()}
            return jax.lax.scan(step, states, (path, grads))[1]

        return jax.tree.map(np.asarray, run(path, grads))


# Per step, in float64: a unit or global norm sums at most N squares (N EPS64 relative,
# Higham; halved by the root), then a few roundings (a ratio, a product, the floor's max, a
# clip's division): each side's update is off by at most (N + 8) EPS64 of its size, the two
# sides by twice that, relative to each leaf's scale. A hyperparameter that float32 does not
# hold (optx keeps it in float32, optax in float64) adds EPS32 / 2 relative, per such
# hyperparameter (`CASES`' second entry): the rounding of a constant, the same on every
# machine (float32(1e-3) is 4.75e-8 off, within the 5.96e-8 bound; the float64 round-off
# term keeps a margin of about 100x on every CPU). A ratio 1e-9 off lands 100x outside
# (`test_the_bound_catches_a_ratio_off_by_1e9`).
RTOL64 = 2 * (N + 8) * EPS64

# name -> (factory of optx or optax, number of hyperparameters float32 does not hold).
CASES = {
    "agc": (lambda m: m.adaptive_grad_clip(0.125, eps=2**-10), 0),
    "agc_default_eps": (lambda m: m.adaptive_grad_clip(0.25), 1),
    "block_norm": (lambda m: m.scale_by_param_block_norm(2**-10), 0),
    "block_norm_default": (lambda m: m.scale_by_param_block_norm(), 1),
    "normalize": (lambda m: m.normalize_by_update_norm(-0.5, eps=2**-20), 0),
    "normalize_default": (lambda m: m.normalize_by_update_norm(), 1),
    "keep_nonnegative": (lambda m: m.keep_params_nonnegative(), 0),
}


@functools.cache
def _runs(library: str) -> dict[str, Any]:
    """Every case of `CASES` run by ``library`` ("optx" or "optax") on the same data."""
    module = {"optx": optx, "optax": optax}[library]
    txs = {case: make(module) for case, (make, _) in CASES.items()}
    if library == "optax":  # a ratio 1e-9 off, for the bound's own test
        txs["agc_off"] = optax.adaptive_grad_clip(0.125 * (1 + 1e-9), eps=2**-10)
    params = _params()
    return _updates64(txs, _path(params), _grads(params))


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_optax_over_100_steps(case: str) -> None:
    ours, theirs = _runs("optx")[case], _runs("optax")[case]
    if case == "keep_nonnegative":
        # where(p + u < 0, -p, u): one addition, a negation and a select on both sides.
        jax.tree.map(np.testing.assert_array_equal, ours, theirs)
        return
    assert_close(case, ours, theirs, RTOL64 + CASES[case][1] * EPS32 / 2)


def test_the_bound_catches_a_ratio_off_by_1e9() -> None:
    with pytest.raises(AssertionError):
        assert_close("off", _runs("optx")["agc"], _runs("optax")["agc_off"], 100 * RTOL64)


def _halves(count: jax.Array) -> jax.Array:
    """An AGC ratio schedule: 0.25 for 50 steps, then 0.5."""
    return jnp.where(count < 50, 0.25, 0.5)


def test_agc_axis_and_schedule_match_optax() -> None:
    params = {"a": np.ones((3, 4)), "b": np.arange(24.0).reshape(2, 3, 4) / 10}
    path = jax.tree.map(lambda p: np.broadcast_to(p, (STEPS, *p.shape)), params)
    grads = _grads(params)
    axes = {"last": -1, "first_two": (0, 1)}
    ours = {k: optx.adaptive_grad_clip(0.5, axis=a) for k, a in axes.items()}
    theirs = {k: optax.adaptive_grad_clip(0.5, axis=a) for k, a in axes.items()}
    ours["schedule"] = optx.adaptive_grad_clip(_halves)
    theirs |= {str(r): optax.adaptive_grad_clip(r) for r in (0.25, 0.5)}
    ours, theirs = _updates64(ours, path, grads), _updates64(theirs, path, grads)
    for k in axes:
        assert_close(k, ours[k], theirs[k], RTOL64 + EPS32 / 2)
    # The ratio in force at each step is the schedule's value at that step.
    for steps, ratio in ((slice(0, 50), 0.25), (slice(50, STEPS), 0.5)):
        mine, expected = (
            jax.tree.map(lambda x, s=steps: x[s], u[k])
            for u, k in ((ours, "schedule"), (theirs, str(ratio)))
        )
        assert_close(f"schedule {ratio}", mine, expected, RTOL64 + EPS32 / 2)


SHAPES = [(), (5,), (1, 5), (4, 3), (3, 2, 4), (2, 2, 3, 2), (2, 1, 2, 2, 3)]


def test_unitwise_functions_match_optax() -> None:
    rng = np.random.default_rng(3)
    xs = [jnp.asarray(rng.standard_normal(shape), jnp.float32) for shape in SHAPES]

    def both(module: Any) -> Any:
        def go(xs: list[jax.Array]) -> Any:
            norms = [module.unitwise_norm(x) for x in xs]
            # Clipped with optax's norms on both sides: the same two roundings.
            clipped = [
                module.unitwise_clip(optax.transforms.unitwise_norm(x), jnp.ones_like(x), x)
                for x in xs
            ]
            return norms, clipped, module.unitwise_norm(xs[4], axis=(0, 2))

        return jax.jit(go)(xs)

    ours, theirs = both(optx.transforms), both(optax.transforms)
    # A sum of at most 12 squares in float32 (12 EPS32 relative), halved by the root.
    assert_close("norms", ours[0], theirs[0], 2 * 12 * EPS32)
    jax.tree.map(np.testing.assert_array_equal, ours[1], theirs[1])
    assert_close("axis", ours[2], theirs[2], 2 * 12 * EPS32)


def test_agc_bfloat16_and_float32_updates() -> None:
    params = {"w": jnp.ones((3, 4), jnp.bfloat16), "b": jnp.zeros(4)}
    grads = {"w": jnp.full((3, 4), 2.0, jnp.bfloat16), "b": jnp.ones(4)}
    tx = optx.adaptive_grad_clip(0.5)
    updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
    assert updates["w"].dtype == jnp.bfloat16 and updates["b"].dtype == jnp.float32
    # Columns of norm 2 * sqrt(3) clipped to 0.5 * sqrt(3): 0.5 each; the bias to 0.5 eps.
    np.testing.assert_array_equal(np.asarray(updates["w"], np.float32), 0.5)
    np.testing.assert_allclose(updates["b"], 0.5 * np.float32(1e-3) / 2, rtol=4 * EPS32)


def test_block_norm_shares_the_rms_maths() -> None:
    # The norm is sqrt(n) times the RMS: with floors below both, the updates differ by it.
    norm = optx.scale_by_param_block_norm()
    rms = optx.scale_by_param_block_rms()
    grads = {"w": jnp.ones((2, 3))}

    def through(tx: Any, p: Any) -> jax.Array:
        return jnp.sum(tx.update(grads, tx.init(p), p)[0]["w"])

    @jax.jit
    def go(params: Any, zeros: Any) -> Any:
        # And a finite gradient through the update at zero parameters (a safe norm).
        return through(norm, params), through(rms, params), jax.grad(partial(through, norm))(zeros)

    a, b, g = go({"w": jnp.arange(1.0, 7.0).reshape(2, 3)}, {"w": jnp.zeros((2, 3))})
    # Each sums 6 squares (6 EPS32, halved by the root); the RMS divides once more, and the
    # products and roots round: 2 * (3 + 3) EPS32 apart.
    np.testing.assert_allclose(a, b * np.sqrt(6), rtol=12 * EPS32)
    assert np.all(np.isfinite(g["w"]))


# --------------------------------------------------------------------------------------
# Per-example clipping.

B = 8  # examples


def _batch() -> dict[str, Any]:
    rng = np.random.default_rng(4)
    size = np.linspace(0.1, 3.0, B)  # examples from well inside to well outside the bound

    def draw(*shape: int) -> jax.Array:
        g = rng.standard_normal((B, *shape)) * size.reshape((B,) + (1,) * len(shape)) / 3
        return jnp.asarray(g, jnp.float32)

    grads = {"dense": {"kernel": draw(4, 3), "bias": draw(3)}, "out": [draw(2), draw()]}
    grads["out"][1] = grads["out"][1].at[0].set(0.0)  # an example of zero gradient (leaf)
    return grads


def _numpy_clip(leaves: list[np.ndarray], bound: float) -> tuple[list[np.ndarray], int]:
    """The float64 reference: each example scaled to norm <= bound over ``leaves``, summed."""
    leaves = [np.asarray(g, np.float64).reshape(B, -1) for g in leaves]
    norms = np.sqrt(sum(np.sum(g * g, axis=1) for g in leaves))
    # No norm within 1e-4 of the bound: float32 round-off cannot change the counts.
    assert not np.any(np.isclose(norms, bound, rtol=1e-4, atol=0))
    with np.errstate(divide="ignore", invalid="ignore"):
        factors = np.nan_to_num(np.minimum(bound / norms, 1.0), nan=1.0)
    return [factors @ g for g in leaves], int(np.sum(factors < 1))


def _sum_bound(leaves: list[jax.Array], n: int) -> list[float]:
    # float32: each example's norm sums n squares (n EPS32 relative, halved by the root),
    # the factor one division, and the sum over the B examples of factor * g (factor <= 1)
    # is off by B EPS32 of sum_i max|g_i| (Higham). Per leaf, for either implementation
    # against the float64 reference: (n + B + 4) EPS32 * sum_i max|g_i|.
    return [
        (n + B + 4) * EPS32 * float(np.sum(np.max(np.abs(g).reshape(B, -1), 1))) for g in leaves
    ]


def test_per_example_global_norm_clip_matches_optax_and_numpy() -> None:
    grads = _batch()
    leaves = jax.tree.leaves(grads)
    n = sum(g[0].size for g in leaves)
    # Jitted, the bound traced: one program each for the four bounds.
    ours_fn = jax.jit(optx.per_example_global_norm_clip)
    theirs_fn = jax.jit(optax.per_example_global_norm_clip)
    for bound in (0.5, 1.5, np.inf, 0.0):
        sums, clipped = ours_fn(grads, jnp.float32(bound))
        their_sums, their_clipped = theirs_fn(grads, jnp.float32(bound))
        expected, count = _numpy_clip(leaves, bound)
        assert jax.tree.structure(sums) == jax.tree.structure(their_sums)
        # The bounds are far from every example's norm: the counts are exact.
        assert int(clipped) == int(their_clipped) == count
        bounds = _sum_bound(leaves, n)
        for got in (sums, their_sums):
            for a, e, tol in zip(jax.tree.leaves(got), expected, bounds, strict=True):
                np.testing.assert_allclose(np.ravel(a), e, rtol=0, atol=tol)


def test_per_example_layer_norm_clip_matches_optax_and_numpy() -> None:
    grads = _batch()
    leaves = jax.tree.leaves(grads)
    sizes = [g[0].size for g in leaves]
    bound = 2.0

    def both(module: Any) -> Any:
        return jax.jit(
            lambda g: [module.per_example_layer_norm_clip(g, bound, u) for u in (True, False)]
        )(grads)

    ours, theirs = both(optx), both(optax)
    for (sums, clipped), (their_sums, their_clipped), uniform in zip(
        ours, theirs, (True, False), strict=True
    ):
        assert jax.tree.structure(sums) == jax.tree.structure(grads)
        assert jax.tree.structure(clipped) == jax.tree.structure(grads)
        for i, g in enumerate(leaves):
            share = 1 / len(leaves) if uniform else sizes[i] / sum(sizes)
            expected, count = _numpy_clip([g], bound * share**0.5)
            counts = (jax.tree.leaves(clipped)[i], jax.tree.leaves(their_clipped)[i])
            assert int(counts[0]) == int(counts[1]) == count
            tol = _sum_bound([g], sizes[i])[0]
            for got in (sums, their_sums):
                np.testing.assert_allclose(np.ravel(jax.tree.leaves(got)[i]), expected[0], atol=tol)


def test_per_example_clipping_dtypes() -> None:
    def go(bf16: jax.Array, ints: jax.Array) -> Any:
        return (
            optx.per_example_global_norm_clip([bf16], 1.0)[0][0],
            optx.per_example_layer_norm_clip([ints], 1.0)[0][0],
        )

    bf16, ints = jax.jit(go)(jnp.ones((4, 3), jnp.bfloat16), jnp.array([[3, 4], [0, 0]]))
    assert bf16.dtype == jnp.bfloat16
    assert ints.dtype == jnp.float32
    np.testing.assert_allclose(ints, [0.6, 0.8], rtol=4 * EPS32)


# --------------------------------------------------------------------------------------
# scale_gradient.

SCALES = (0.5, -1.0, 0.0, 1.0, 3)


def test_scale_gradient_matches_optax() -> None:
    x = {"a": jnp.array([1.0, -2.0]), "b": jnp.array(3.0)}

    def grads(fn: Any) -> Any:
        def loss(x: Any, scale: float) -> jax.Array:
            y = fn(x, scale)
            return jnp.sum(y["a"] ** 2) + jnp.sin(y["b"])

        return jax.jit(lambda x: [jax.grad(loss)(x, s) for s in SCALES])(x)

    # The same cotangent times the same scale on both sides.
    jax.tree.map(
        np.testing.assert_array_equal, grads(optx.scale_gradient), grads(optax.scale_gradient)
    )
    plain = jax.grad(lambda x: jnp.sum(x["a"] ** 2) + jnp.sin(x["b"]))(x)
    for s, g in zip(SCALES, grads(optx.scale_gradient), strict=True):
        jax.tree.map(lambda a, b, s=s: np.testing.assert_array_equal(a, s * b), g, plain)
    for s in SCALES:  # the forward pass is the identity
        jax.tree.map(np.testing.assert_array_equal, optx.scale_gradient(x, s), x)


def test_scale_gradient_takes_a_traced_scale() -> None:
    f = jax.jit(jax.grad(lambda x, s: jnp.sum(optx.scale_gradient(x, s) ** 2)))
    np.testing.assert_array_equal(f(jnp.array([1.0, 2.0]), 0.25), [0.5, 1.0])
    bf16 = jax.grad(lambda x: jnp.sum(optx.scale_gradient(x, jnp.float32(0.5))))(
        jnp.ones(2, jnp.bfloat16)
    )
    assert bf16.dtype == jnp.bfloat16


# --------------------------------------------------------------------------------------
# Errors.

AGC, NONNEG = optx.adaptive_grad_clip(0.1), optx.keep_params_nonnegative()
ERRORS = [
    (
        lambda: optx.adaptive_grad_clip(-1.0),
        ValueError,
        "`adaptive_grad_clip` needs clipping finite and >= 0. Received: clipping=-1.0.",
    ),
    (
        lambda: optx.adaptive_grad_clip(0.1, axis="rows"),
        TypeError,
        "`adaptive_grad_clip` needs axis to be an int, a list of ints or None. "
        "Received: axis='rows'.",
    ),
    (
        lambda: optx.adaptive_grad_clip(0.1).update(
            {"w": jnp.ones(2)}, optx.adaptive_grad_clip(0.1).init(None)
        ),
        ValueError,
        "`adaptive_grad_clip.update` needs the current parameters. Received: params=None.",
    ),
    (
        lambda: optx.adaptive_grad_clip(0.1).update(
            {"w": jnp.ones((2,) * 6)},
            optx.adaptive_grad_clip(0.1).init(None),
            {"w": jnp.ones((2,) * 6)},
        ),
        ValueError,
        "`adaptive_grad_clip.update` needs arrays of rank at most 5, or axis to name the axes "
        "a unit spans. Received: updates['w'] of shape (2, 2, 2, 2, 2, 2).",
    ),
    (
        lambda: optx.transforms.unitwise_norm(jnp.ones((2,) * 6)),
        ValueError,
        "`unitwise_norm` needs arrays of rank at most 5, or axis to name the axes a unit "
        "spans. Received: x of shape (2, 2, 2, 2, 2, 2).",
    ),
    (
        lambda: optx.transforms.unitwise_clip(jnp.ones(2), jnp.ones(3), jnp.ones(2)),
        ValueError,
        "`unitwise_clip` needs g_norm, max_norm and grad of one shape. Received: shapes "
        "(2,), (3,) and (2,).",
    ),
    (
        lambda: optx.scale_by_param_block_norm(-1.0),
        ValueError,
        "`scale_by_param_block_norm` needs min_scale finite and >= 0. Received: min_scale=-1.0.",
    ),
    (
        lambda: optx.scale_by_param_block_norm().update(
            {"w": jnp.ones(2)}, optx.scale_by_param_block_norm().init(None)
        ),
        ValueError,
        "`scale_by_param_block_norm.update` needs the current parameters. Received: params=None.",
    ),
    (
        lambda: optx.normalize_by_update_norm(eps=-1e-6),
        ValueError,
        "`normalize_by_update_norm` needs eps finite and >= 0. Received: eps=-1e-06.",
    ),
    (
        lambda: optx.normalize_by_update_norm(float("nan")),
        ValueError,
        "`normalize_by_update_norm` needs scale_factor finite. Received: scale_factor=nan.",
    ),
    (
        lambda: optx.keep_params_nonnegative().update(
            {"w": jnp.ones(2)}, optx.NonNegativeParamsState()
        ),
        ValueError,
        "`keep_params_nonnegative.update` needs the current parameters. Received: params=None.",
    ),
    (
        lambda: optx.per_example_global_norm_clip(
            {"a": jnp.ones((3, 2)), "b": jnp.ones((2, 2))}, 1.0
        ),
        ValueError,
        "`per_example_global_norm_clip` needs every leaf of grads to have the examples' axis "
        "first, of one size (per-example gradients, as `jax.vmap(jax.grad(loss))` gives). "
        "Received: shapes {'a': (3, 2), 'b': (2, 2)}.",
    ),
    (
        lambda: optx.per_example_layer_norm_clip([jnp.ones(3), jnp.ones(())], 1.0),
        ValueError,
        "`per_example_layer_norm_clip` needs every leaf of grads to have the examples' axis "
        "first, of one size (per-example gradients, as `jax.vmap(jax.grad(loss))` gives). "
        "Received: shapes {'0': (3,), '1': ()}.",
    ),
    (
        lambda: optx.per_example_global_norm_clip({}, 1.0),
        ValueError,
        "`per_example_global_norm_clip` needs grads holding at least one array. Received: "
        "grads={}.",
    ),
    (
        lambda: optx.per_example_global_norm_clip([jnp.ones((2, 2))], -1.0),
        ValueError,
        "`per_example_global_norm_clip` needs l2_norm_clip >= 0. Received: l2_norm_clip=-1.0.",
    ),
    (
        lambda: optx.per_example_layer_norm_clip([jnp.ones((2, 2))], float("nan")),
        ValueError,
        "`per_example_layer_norm_clip` needs global_l2_norm_clip >= 0. Received: "
        "global_l2_norm_clip=nan.",
    ),
    (
        lambda: optx.per_example_layer_norm_clip([jnp.ones((2, 2))], 1.0, uniform="yes"),
        TypeError,
        "`per_example_layer_norm_clip` needs uniform to be a bool. Received: uniform='yes'.",
    ),
]


@pytest.mark.parametrize(("call", "kind", "message"), ERRORS)
def test_errors(call: Any, kind: type, message: str) -> None:
    with pytest.raises(kind, match=re.escape(message)):
        call()
