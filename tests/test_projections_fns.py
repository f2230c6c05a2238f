"""`optx.projections`: each projection against optax's and against its defining property.

A Euclidean projection ``p = P(x)`` onto a closed convex set ``S`` is characterised by
``p in S`` and ``<x - p, y - p> <= 0`` for every ``y in S`` (the obtuse-angle criterion), so
it is checked with NumPy on feasible points sampled from ``S``; it is also idempotent. The
spheres are not convex: their projection is checked to be at least as close as every
sampled point of the sphere. Then the derivative of the simplex projection, the
constraints built on these functions, and every error message.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, assert_close

import optx

P = optx.projections


def _tree(seed: int = 0, scale: float = 1.0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(scale * rng.standard_normal(shape), jnp.float32)

    return {"w": normal(2, 3), "b": [normal(3), normal()]}


N = 10  # elements of `_tree`


def _flat(tree: Any) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(tree)])


# name -> (optx's or optax's call on (module, tree), set membership on a flat float64
# vector (with tolerance tol), a sampler of feasible flat points (rng, count) -> (count, N),
# whether the set is convex).
SCALE = 1.5
LOWER, UPPER = -0.5, 0.75


def _simplex_points(rng: np.random.Generator, count: int) -> np.ndarray:
    return SCALE * rng.dirichlet(np.full(N, 0.3), count)


def _l1_points(rng: np.random.Generator, count: int, sphere: bool = False) -> np.ndarray:
    radius = SCALE if sphere else SCALE * rng.uniform(size=(count, 1)) ** (1 / N)
    signs = rng.choice([-1.0, 1.0], (count, N))
    return radius * signs * rng.dirichlet(np.full(N, 0.3), count)


def _l2_points(rng: np.random.Generator, count: int, sphere: bool = False) -> np.ndarray:
    d = rng.standard_normal((count, N))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return d * (SCALE if sphere else SCALE * rng.uniform(size=(count, 1)) ** (1 / N))


def _box_points(rng: np.random.Generator, count: int, lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, (count, N))


def _bounds(module: Any, tree: Any, lower: float, upper: float) -> tuple[Any, Any]:
    """Scalar bounds for optx; trees of them for optax (whose box maps over the bounds)."""
    if module is P:
        return lower, upper
    return tuple(jax.tree.map(lambda x, v=v: jnp.full_like(x, v), tree) for v in (lower, upper))


CASES: dict[str, tuple[Callable, Callable, Callable, bool]] = {
    "non_negative": (
        lambda m, t: m.projection_non_negative(t),
        lambda p, tol: np.all(p >= -tol),
        lambda rng, c: np.abs(rng.standard_normal((c, N))),
        True,
    ),
    "box": (
        lambda m, t: m.projection_box(t, *_bounds(m, t, LOWER, UPPER)),
        lambda p, tol: np.all((p >= LOWER - tol) & (p <= UPPER + tol)),
        lambda rng, c: _box_points(rng, c, LOWER, UPPER),
        True,
    ),
    "hypercube": (
        lambda m, t: (
            m.projection_hypercube(t, SCALE)
            if m is P
            else m.projection_box(t, *_bounds(m, t, 0.0, SCALE))
        ),
        lambda p, tol: np.all((p >= -tol) & (p <= SCALE + tol)),
        lambda rng, c: _box_points(rng, c, 0, SCALE),
        True,
    ),
    "linf_ball": (
        lambda m, t: m.projection_linf_ball(t, SCALE),
        lambda p, tol: np.all(np.abs(p) <= SCALE + tol),
        lambda rng, c: _box_points(rng, c, -SCALE, SCALE),
        True,
    ),
    "simplex": (
        lambda m, t: m.projection_simplex(t, SCALE),
        lambda p, tol: np.all(p >= 0) and abs(np.sum(p) - SCALE) <= tol,
        _simplex_points,
        True,
    ),
    "l1_ball": (
        lambda m, t: m.projection_l1_ball(t, SCALE),
        lambda p, tol: np.sum(np.abs(p)) <= SCALE + tol,
        _l1_points,
        True,
    ),
    "l1_sphere": (
        lambda m, t: m.projection_l1_sphere(t, SCALE),
        lambda p, tol: abs(np.sum(np.abs(p)) - SCALE) <= tol,
        lambda rng, c: _l1_points(rng, c, sphere=True),
        False,
    ),
    "l2_ball": (
        lambda m, t: m.projection_l2_ball(t, SCALE),
        lambda p, tol: np.linalg.norm(p) <= SCALE + tol,
        _l2_points,
        True,
    ),
    "l2_sphere": (
        lambda m, t: m.projection_l2_sphere(t, SCALE),
        lambda p, tol: abs(np.linalg.norm(p) - SCALE) <= tol,
        lambda rng, c: _l2_points(rng, c, sphere=True),
        False,
    ),
}

# Inputs: inside and outside the sets (a tree of scale 0.1 lies inside the balls).
INPUTS = {"large": _tree(0, 2.0), "small": _tree(1, 0.1), "mixed": _tree(2, 0.6)}


# float32 round-off, relative to the input's scale max|x|: a reduction over the N elements
# (a norm, a cumulative sum of the sorted values) is off by N EPS32 of the sum of its
# terms' sizes, at most N max|x| (Higham), and a few roundings follow (a root, a division,
# the threshold's subtraction and the scale): (N * N + 8) EPS32 of max|x|. Where both
# libraries compute it, twice that.
def _tol(x: Any) -> float:
    return (N * N + 8) * EPS32 * float(np.max(np.abs(_flat(x))))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("which", sorted(INPUTS))
def test_matches_optax_and_is_the_projection(name: str, which: str) -> None:
    _, member, sample, convex = CASES[name]
    x = INPUTS[which]
    ours, again, theirs = (r[which] for r in _projected(name))
    assert jax.tree.structure(ours) == jax.tree.structure(x)
    jax.tree.map(lambda a, b: np.testing.assert_equal(a.dtype, b.dtype), ours, x)
    tol = _tol(x)
    np.testing.assert_allclose(_flat(ours), _flat(theirs), rtol=0, atol=2 * tol)

    p, xf = _flat(ours), _flat(x)
    assert member(p, tol), f"{name}: the projection is not in the set"
    # Idempotent: a point of the set projects onto itself.
    np.testing.assert_allclose(_flat(again), p, rtol=0, atol=2 * tol)
    # Closest: against feasible points, by the obtuse-angle criterion (convex sets) or by
    # distance (spheres). With p off by tol per element, an inner product <y - p, x - p> of
    # N terms moves by at most N tol (|y - p| + |x - p|) <= N tol 5 max(max|x|, SCALE)
    # (every point involved lies within max(max|x|, SCALE) of 0), plus its own float64
    # round-off, far smaller.
    ys = sample(np.random.default_rng(5), 500)
    assert all(member(y, 1e-9) for y in ys[:10])
    size = max(float(np.max(np.abs(xf))), SCALE)
    if convex:
        angles = (ys - p) @ (xf - p)
        assert np.max(angles) <= N * tol * 5 * size
    else:
        gap = np.linalg.norm(xf - p) - np.linalg.norm(ys - xf, axis=1)
        assert np.max(gap) <= np.sqrt(N) * tol


@functools.cache
def _projected(name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Case ``name`` on every input: optx's projection, optx's projection of it again, and
    optax's (one jitted program each).
    """
    project = CASES[name][0]

    def ours(inputs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        out = {k: project(P, x) for k, x in inputs.items()}
        return out, {k: project(P, p) for k, p in out.items()}

    def theirs(inputs: dict[str, Any]) -> dict[str, Any]:
        return {k: project(optax.projections, x) for k, x in inputs.items()}

    return (*jax.jit(ours)(INPUTS), jax.jit(theirs)(INPUTS))


def test_simplex_matches_a_brute_force_projection() -> None:
    # The projection onto the simplex in 3-D: the closest of a dense grid of its points.
    x = jnp.array([0.9, 0.4, -0.3])
    p = np.asarray(P.projection_simplex(x), np.float64)
    grid = np.linspace(0, 1, 401)
    a, b = np.meshgrid(grid, grid)
    pts = np.stack([a.ravel(), b.ravel(), 1 - a.ravel() - b.ravel()], 1)
    pts = pts[pts[:, 2] >= 0]
    best = pts[np.argmin(np.sum((pts - np.asarray(x)) ** 2, 1))]
    np.testing.assert_allclose(p, best, atol=1 / 400)  # the grid's spacing
    np.testing.assert_allclose(p, [0.75, 0.25, 0.0], atol=4 * EPS32)


@pytest.mark.parametrize(
    "name", ["projection_vector", "projection_hyperplane", "projection_halfspace"]
)
def test_affine_projections_match_optax_and_properties(name: str) -> None:
    x, a = _tree(3), _tree(4)
    b = 0.3
    args = (x, a) if name == "projection_vector" else (x, a, b)
    ours = getattr(P, name)(*args)
    theirs = getattr(optax.projections, name)(*args)
    tol = _tol(x) + _tol(a)
    np.testing.assert_allclose(_flat(ours), _flat(theirs), rtol=0, atol=2 * tol)
    p, xf, af = _flat(ours), _flat(x), _flat(a)
    residual = xf - p
    if name == "projection_vector":
        # p is along a, and x - p orthogonal to it.
        np.testing.assert_allclose(p - (p @ af) / (af @ af) * af, 0, atol=4 * tol)
        np.testing.assert_allclose(residual @ af, 0, atol=4 * tol * N)
    else:
        # x - p is along a (its component orthogonal to a vanishes).
        ortho = residual - (residual @ af) / (af @ af) * af
        np.testing.assert_allclose(ortho, 0, atol=4 * tol)
        inside = name == "projection_halfspace" and xf @ af <= b
        target = xf @ af if inside else b
        np.testing.assert_allclose(p @ af, target, atol=4 * tol * N)
    # The half-space leaves a point inside it unchanged.
    inner = jax.tree.map(lambda v: v * 0, x)
    jax.tree.map(np.testing.assert_array_equal, P.projection_halfspace(inner, a, b), inner)


def test_simplex_derivative_matches_optax() -> None:
    # optax differentiates its projection by a custom JVP; optx's is the same formula.
    x = jnp.array([0.9, 0.4, -0.3, 0.35, 0.1])
    ours = jax.jit(jax.jacobian(P.projection_simplex))(x)
    theirs = jax.jit(jax.jacobian(optax.projections.projection_simplex))(x)
    np.testing.assert_allclose(ours, theirs, atol=4 * EPS32)
    # On the support {0, 1, 3}: the identity less the mean; zero elsewhere.
    on = np.array([1.0, 1.0, 0.0, 1.0, 0.0])
    np.testing.assert_allclose(ours, np.diag(on) - np.outer(on, on) / 3, atol=4 * EPS32)
    # A finite gradient of the L2 ball's projection at zero.
    g = jax.grad(lambda t: jnp.sum(P.projection_l2_ball(t)))(jnp.zeros(3))
    assert np.all(np.isfinite(g))


def test_scalar_bounds_broadcast_and_python_leaves() -> None:
    tree = {"a": jnp.array([-1.0, 2.0]), "b": 0.5}
    out = P.projection_box(tree, 0.0, 1.0)
    np.testing.assert_array_equal(out["a"], [0.0, 1.0])
    upper = {"a": jnp.array([0.5, 0.5]), "b": 0.25}
    np.testing.assert_array_equal(P.projection_box(tree, 0.0, upper)["a"], [0.0, 0.5])
    assert float(P.projection_box(tree, 0.0, upper)["b"]) == 0.25
    np.testing.assert_allclose(
        float(optx.tree.norm(P.projection_l1_ball({"w": jnp.array([2.5, 3.2]), "b": 0.5}), 1)),
        1.0,
        rtol=N * EPS32,
    )


def test_constraints_apply_the_projections_per_leaf() -> None:
    w = jnp.array([[0.5, 1.0, -1.0], [2.0, -3.0, 0.25]])
    c = optx.constraints
    pairs = [
        (c.Box(-1.0, 1.0), P.projection_box(w, -1.0, 1.0)),
        (c.Simplex(2.0), P.projection_simplex(w, 2.0)),
        (c.L1Ball(2.0), P.projection_l1_ball(w, 2.0)),
        (c.L2Ball(2.0), P.projection_l2_ball(w, 2.0)),
    ]
    # The same maths, jitted against eager: reductions over the 6 elements may be summed
    # in another order (6 EPS32 of 6 max|w|), then a few roundings.
    tol = (6 * 6 + 8) * EPS32 * float(np.max(np.abs(w)))
    for constraint, expected in pairs:
        np.testing.assert_allclose(jax.jit(constraint)(w), expected, rtol=0, atol=tol)
    # bfloat16 weights are projected in float32 and rounded once.
    wb = w.astype(jnp.bfloat16)
    out = c.L2Ball(2.0)(wb)
    assert out.dtype == jnp.bfloat16
    expected = P.projection_l2_ball(wb.astype(jnp.float32), 2.0).astype(jnp.bfloat16)
    np.testing.assert_array_equal(out, expected)


ERRORS = [
    (
        lambda: P.projection_simplex(jnp.ones(2), 0.0),
        "`projection_simplex` needs scale > 0. Received: scale=0.0.",
    ),
    (
        lambda: P.projection_l1_ball(jnp.ones(2), -1.0),
        "`projection_l1_ball` needs scale > 0. Received: scale=-1.0.",
    ),
    (
        lambda: P.projection_l1_sphere(jnp.ones(2), 0),
        "`projection_l1_sphere` needs scale > 0. Received: scale=0.",
    ),
    (
        lambda: P.projection_l2_ball(jnp.ones(2), float("nan")),
        "`projection_l2_ball` needs scale > 0. Received: scale=nan.",
    ),
    (
        lambda: P.projection_l2_sphere(jnp.ones(2), -2.0),
        "`projection_l2_sphere` needs scale > 0. Received: scale=-2.0.",
    ),
    (
        lambda: P.projection_linf_ball(jnp.ones(2), -1.0),
        "`projection_linf_ball` needs scale >= 0. Received: scale=-1.0.",
    ),
    (
        lambda: P.projection_hypercube(jnp.ones(2), -1.0),
        "`projection_hypercube` needs scale >= 0. Received: scale=-1.0.",
    ),
    (
        lambda: P.projection_box(jnp.ones(2), 1.0, 0.0),
        "`projection_box` needs lower <= upper. Received: lower=1.0, upper=0.0.",
    ),
    (
        lambda: P.projection_vector({"a": jnp.ones(2)}, {"b": jnp.ones(2)}),
        "`projection_vector` needs a with the structure of x. Received: x is "
        "PyTreeDef({'a': *}), a is PyTreeDef({'b': *}).",
    ),
    (
        lambda: P.projection_hyperplane({"a": jnp.ones(2)}, {"a": jnp.ones(3)}, 1.0),
        "`projection_hyperplane` needs a with the shapes of x. Received: a['a'] of shape "
        "(3,), x['a'] of shape (2,).",
    ),
    (
        lambda: P.projection_halfspace([jnp.ones(2)], [jnp.ones(2), 1.0], 1.0),
        "`projection_halfspace` needs a with the structure of x.",
    ),
]


@pytest.mark.parametrize(("call", "message"), ERRORS)
def test_errors(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_traced_radii_are_not_checked() -> None:
    # A radius given as an array is the caller's to keep positive (jit-able sweeps).
    out = jax.jit(P.projection_l2_ball)(jnp.array([3.0, 4.0]), jnp.float32(2.5))
    assert_close("traced", out, np.array([1.5, 2.0]), 4 * EPS32)
