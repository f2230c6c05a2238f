"""Convergence: sgd (with momentum), adam and adamw minimise a parabola and Rosenbrock.

Each run is one jitted `lax.scan` over a fixed number of steps from a fixed start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx

# An ill-conditioned parabola (curvatures 2, 20 and 0.2), minimum at CENTER.
CURVATURE = jnp.array([1.0, 10.0, 0.1])
CENTER = jnp.array([1.0, -2.0, 3.0])


def parabola(x: jax.Array) -> jax.Array:
    return jnp.sum(CURVATURE * (x - CENTER) ** 2)


def rosenbrock(x: jax.Array) -> jax.Array:
    """The 2-D Rosenbrock function; minimum 0 at (1, 1), in a curved, flat valley."""
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


ROSENBROCK_START = jnp.array([-1.5, 2.0])
ROSENBROCK_MIN = jnp.array([1.0, 1.0])

# Distance (max norm) to the minimum at the end (see tests/TOLERANCES.md). In exact
# arithmetic momentum SGD contracts far below TOL (heavy ball, underdamped on these
# curvatures: by sqrt(0.9) per step, 0.9487**500 ~ 4e-12); float32 stops it where a step no
# longer moves the parameter: lr * slope * |x - x*| / (1 - momentum) < eps * |x*| / 2, i.e.
# |x - x*| < 4.5e-6 on the parabola's flattest axis (lr 0.02, slope 0.2, x* = 3) and 1.5e-5
# along Rosenbrock's valley (lr 1e-3, slope ~0.4, x* = 1). Adam's steps are at most ~lr per
# coordinate, and the cosine schedule's last ones are 0.1 * (pi / N)**2 / 4: 1e-6 (N = 500)
# and 1.5e-8 (N = 4000). All below TOL = 1e-4. AdamW's decoupled decay moves the fixed
# point by the order of wd * |x*| (3e-4 for wd = 1e-4, |x*| <= 3): ADAMW_TOL = 1e-3.
TOL = 1e-4
ADAMW_WEIGHT_DECAY = 1e-4
ADAMW_TOL = 1e-3


def cosine(peak: float, steps: int) -> Callable[[jax.Array], jax.Array]:
    """Cosine decay from ``peak`` to 0 over ``steps``: Adam's step size does not shrink
    with the gradient, so it needs a decaying learning rate to settle.
    """

    def schedule(count: jax.Array) -> jax.Array:
        t = jnp.minimum(count, steps).astype(jnp.float32) / steps
        return peak * 0.5 * (1 + jnp.cos(jnp.pi * t))

    return schedule


def minimise(tx: Any, f: Callable[[jax.Array], jax.Array], x0: jax.Array, steps: int) -> tuple:
    """Runs ``steps`` jitted steps of ``tx`` on ``f`` from ``x0``; returns (x, f(x))."""

    @jax.jit
    def run(x0: jax.Array) -> jax.Array:
        def step(carry: tuple, _: None) -> tuple:
            x, state = carry
            updates, state = tx.update(jax.grad(f)(x), state, x)
            return (optx.apply_updates(x, updates), state), None

        return jax.lax.scan(step, (x0, tx.init(x0)), None, length=steps)[0][0]

    x = run(x0)
    assert x.dtype == x0.dtype
    return x, f(x)


CASES = [
    # (id, transform, problem, steps, tolerance)
    ("sgd_momentum", lambda: optx.sgd(0.02, momentum=0.9), "parabola", 500, TOL),
    ("sgd_nesterov", lambda: optx.sgd(0.02, momentum=0.9, nesterov=True), "parabola", 500, TOL),
    ("adam", lambda: optx.adam(cosine(0.1, 500)), "parabola", 500, TOL),
    (
        "adamw",
        lambda: optx.adamw(cosine(0.1, 500), weight_decay=ADAMW_WEIGHT_DECAY),
        "parabola",
        500,
        ADAMW_TOL,
    ),
    ("sgd_momentum", lambda: optx.sgd(1e-3, momentum=0.9), "rosenbrock", 3000, TOL),
    ("sgd_nesterov", lambda: optx.sgd(1e-3, momentum=0.9, nesterov=True), "rosenbrock", 3000, TOL),
    ("adam", lambda: optx.adam(cosine(0.1, 4000)), "rosenbrock", 4000, TOL),
    (
        "adamw",
        lambda: optx.adamw(cosine(0.1, 4000), weight_decay=ADAMW_WEIGHT_DECAY),
        "rosenbrock",
        4000,
        ADAMW_TOL,
    ),
]

PROBLEMS = {
    "parabola": (parabola, jnp.zeros(3), CENTER),
    "rosenbrock": (rosenbrock, ROSENBROCK_START, ROSENBROCK_MIN),
}


@pytest.mark.parametrize(
    ("make_tx", "problem", "steps", "tol"),
    [c[1:] for c in CASES],
    ids=[f"{c[0]}-{c[2]}" for c in CASES],
)
def test_converges(make_tx: Callable[[], Any], problem: str, steps: int, tol: float) -> None:
    f, x0, x_min = PROBLEMS[problem]
    assert float(f(x0)) > 1.0
    x, loss = minimise(make_tx(), f, x0, steps)
    err = float(jnp.max(jnp.abs(x - x_min)))
    print(f"{problem}: |x - x*| = {err:.3g}, f(x) = {float(loss):.3g} after {steps} steps")
    assert err < tol
    # f - f* <= lambda_max / 2 * |x - x*|_2**2 near the minimum; lambda_max is 20 for the
    # parabola and ~1002 for Rosenbrock at (1, 1), and |x - x*|_2**2 <= 3 * tol**2.
    assert np.isfinite(float(loss)) and float(loss) < 1e3 * tol**2


def test_adamw_without_decay_is_adam() -> None:
    x_adam, _ = minimise(optx.adam(cosine(0.1, 500)), parabola, jnp.zeros(3), 500)
    x_adamw, _ = minimise(
        optx.adamw(cosine(0.1, 500), weight_decay=0.0), parabola, jnp.zeros(3), 500
    )
    np.testing.assert_array_equal(np.asarray(x_adamw), np.asarray(x_adam))


def test_adamw_decay_shrinks_the_solution() -> None:
    """Weight decay moves AdamW's fixed point towards 0, by an amount that grows with it."""
    x_adam, _ = minimise(optx.adam(cosine(0.1, 500)), parabola, jnp.zeros(3), 500)
    shifts = []
    for wd in (1e-3, 1e-2):
        x, _ = minimise(optx.adamw(cosine(0.1, 500), weight_decay=wd), parabola, jnp.zeros(3), 500)
        assert np.all(np.abs(np.asarray(x)) < np.abs(np.asarray(x_adam)))
        shifts.append(float(jnp.max(jnp.abs(x - x_adam))))
    assert shifts[0] < shifts[1]
