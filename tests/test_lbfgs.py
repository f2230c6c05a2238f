"""L-BFGS and the line searches: convergence, parity with optax, jit, keyword arguments, errors.

The numeric tests run in float64 (`jax.enable_x64`), where round-off (eps64 = 2.2e-16) is
many orders of magnitude below any change a mistake in the maths would make.
"""

from __future__ import annotations

import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_close, roundoff_rtol
from jax.flatten_util import ravel_pytree

import optx

EPS64 = float(np.finfo(np.float64).eps)


def rosenbrock(w: jax.Array) -> jax.Array:
    """The n-dimensional Rosenbrock function; its minimum is 0, at all ones."""
    return jnp.sum(100.0 * (w[1:] - w[:-1] ** 2) ** 2 + (1.0 - w[:-1]) ** 2)


def logistic_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(0)
    x = rng.standard_normal((64, 4))
    y = np.where(x @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.3 * rng.standard_normal(64) > 0, 1, -1)
    return x, y.astype(np.float64)


LAM = 1e-2  # the L2 penalty: the loss is LAM-strongly convex, its minimiser unique


def logistic(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean logistic loss of a linear model with a bias, plus ``LAM / 2 * |w|**2``."""
    z = x @ params["w"] + params["b"]
    return jnp.mean(jnp.logaddexp(0.0, -y * z)) + 0.5 * LAM * jnp.sum(params["w"] ** 2)


def solve(opt: Any, f: Any, w0: Any, steps: int, gtol: float, **data: Any) -> tuple:
    """``opt`` in a jitted `jax.lax.while_loop` until ``|grad| <= gtol`` or ``steps``.

    Returns the parameters, the gradient norm and the number of iterations.
    """
    value_and_grad = optx.value_and_grad_from_state(f)

    def body(carry: tuple) -> tuple:
        w, state, _, k = carry
        value, grad = value_and_grad(w, state=state, **data)
        updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f, **data)
        w = optx.apply_updates(w, updates)
        _, new_grad = value_and_grad(w, state=state, **data)
        return w, state, optx.tree.norm(new_grad), k + 1

    def keep_going(carry: tuple) -> jax.Array:
        return (carry[2] > gtol) & (carry[3] < steps)

    @jax.jit
    def run(w: Any) -> tuple:
        start = (w, opt.init(w), jnp.asarray(jnp.inf, jnp.float64), 0)
        w, _, gnorm, k = jax.lax.while_loop(keep_going, body, start)
        return w, gnorm, k

    return run(w0)


def lowest_curvature(f: Any, w: Any, **data: Any) -> float:
    """The least eigenvalue of the Hessian of ``f`` at ``w`` (a flat vector of parameters)."""
    flat, unravel = ravel_pytree(w)
    h = jax.hessian(lambda v: f(unravel(v), **data))(flat)
    return float(np.linalg.eigvalsh(np.asarray(h)).min())


# --- Convergence (each run is one jitted while_loop: the whole loop compiles and runs) -------

# Near a minimiser w* with Hessian H, |w - w*| <= |grad f(w)| / lambda_min(H) (to first
# order). float64 evaluates these gradients to ~1e-13 (eps64 times terms of size <= 1e3), so
# asking |grad| <= 1e-10 is well above that floor; the distance bound follows from it.
GTOL = 1e-10


def test_rosenbrock_10d_converges() -> None:
    with jax.enable_x64(True):
        w0 = jnp.tile(jnp.array([-1.2, 1.0]), 5)
        w, gnorm, k = solve(optx.lbfgs(), rosenbrock, w0, 300, GTOL)
        bound = float(gnorm) / lowest_curvature(rosenbrock, jnp.ones(10))
    assert float(gnorm) <= GTOL, (float(gnorm), int(k))
    np.testing.assert_allclose(np.asarray(w), 1.0, rtol=0, atol=1.01 * bound)


def newton(data: dict[str, Any], w0: Any) -> tuple[np.ndarray, float]:
    """The minimiser of `logistic` by Newton's method (quadratically convergent on this
    smooth, strongly convex loss: 30 steps from 0 leave it at float64 round-off), and the
    least eigenvalue of the Hessian there."""
    flat0, unravel = ravel_pytree(w0)
    f = jax.jit(lambda v: logistic(unravel(v), **data))
    step = jax.jit(lambda v: v - jnp.linalg.solve(jax.hessian(f)(v), jax.grad(f)(v)))
    v = flat0
    for _ in range(30):
        v = step(v)
    return np.asarray(v), lowest_curvature(logistic, unravel(v), **data)


def test_logistic_regression_converges_to_newtons_solution() -> None:
    x, y = logistic_data()
    with jax.enable_x64(True):
        data = {"x": jnp.asarray(x), "y": jnp.asarray(y)}
        w0 = {"w": jnp.zeros(4), "b": jnp.zeros(())}
        w, gnorm, _ = solve(optx.lbfgs(), logistic, w0, 100, GTOL, **data)
        best, curvature = newton(data, w0)
        got = np.asarray(ravel_pytree(w)[0])
    assert float(gnorm) <= GTOL
    # |w - w*| <= |grad| / lambda_min, plus Newton's own round-off (eps64 x its size, ~1).
    np.testing.assert_allclose(got, best, rtol=0, atol=1.01 * float(gnorm) / curvature + 1e-14)


# --- Parity with optax, step for step ----------------------------------------------------------


def f32(v: float) -> float:
    """``v`` as optx holds a hyperparameter (float32), for optax to use the same number."""
    return float(np.float32(v))


def trajectory(opt: Any, f: Any, w0: Any, steps: int, **data: Any) -> list[tuple]:
    """Per iteration: parameters, the search's value and step, and its evaluations."""
    value_and_grad = optx.value_and_grad_from_state(f)

    @jax.jit
    def step(w: Any, state: Any) -> tuple:
        value, grad = value_and_grad(w, state=state, **data)
        updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f, **data)
        return optx.apply_updates(w, updates), state

    w, state, out = w0, opt.init(w0), []
    for _ in range(steps):
        w, state = step(w, state)
        search = state[-1]
        out.append((w, search.value, search.learning_rate, int(search.info.num_linesearch_steps)))
    return out


def hessian_condition(f: Any, ws: list[Any], **data: Any) -> float:
    """The largest condition number of the Hessian of ``f`` along ``ws`` (float64 NumPy)."""
    unravel = ravel_pytree(ws[0])[1]
    flat = jnp.stack([ravel_pytree(w)[0] for w in ws])
    hessians = jax.jit(jax.vmap(jax.hessian(lambda v: f(unravel(v), **data))))(flat)
    eig = np.abs(np.linalg.eigvalsh(np.asarray(hessians)))
    return float(np.max(eig.max(axis=1) / eig.min(axis=1)))


def compare(ours: list[tuple], theirs: list[tuple], rtol: float) -> None:
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        # The same decisions: the same number of evaluations in every search.
        assert a[3] == b[3], f"iteration {k}: {a[3]} evaluations, optax {b[3]}"
        assert_close(f"iteration {k}", a[:3], b[:3], rtol=rtol)


# Both sides compute the same float64 operations with the same hyperparameters (optax is
# given optx's float32 values), so they differ only where XLA orders them differently: per
# iteration up to ~10 contracted multiply-adds and reductions over the parameters and the
# memory (n + 2m terms, n <= 10, m = 10), each eps64 relative. An error in the direction is
# magnified by at most the condition number of the Hessian (the step is a Newton-like
# solve), and errors add over the iterations (tests/TOLERANCES.md, "Steps").
ITERATIONS = 35


def optax_zoom_lbfgs(memory_size: int = 10) -> Any:
    """optax's L-BFGS with optx's default zoom search (optx's float32 hyperparameters)."""
    return optax.lbfgs(
        memory_size=memory_size,
        linesearch=optax.scale_by_zoom_linesearch(
            max_linesearch_steps=20,
            initial_guess_strategy="one",
            slope_rtol=f32(1e-4),
            curv_rtol=f32(0.9),
            approx_dec_rtol=f32(1e-6),
            stepsize_precision=f32(1e-5),
        ),
    )


def test_zoom_lbfgs_matches_optax_on_rosenbrock() -> None:
    opt_optax = optax_zoom_lbfgs()
    with jax.enable_x64(True):
        w0 = jnp.array([-1.2, 1.0])
        ours = trajectory(optx.lbfgs(), rosenbrock, w0, ITERATIONS)
        theirs = trajectory(opt_optax, rosenbrock, w0, ITERATIONS)
        kappa = hessian_condition(rosenbrock, [w0] + [t[0] for t in theirs])
        end = float(rosenbrock(ours[-1][0]))
    rtol = roundoff_rtol(ITERATIONS, roundings=10, reduced=2 + 2 * 10, eps=EPS64) * kappa
    compare(ours, theirs, rtol)
    assert sum(t[3] for t in theirs) > ITERATIONS  # the searches did more than accept 1
    # And the minimum is reached: |w - 1| <= 1e-10 gives f <= 1e-17 (the Hessian's largest
    # eigenvalue there is ~1e3).
    assert end <= 1e-17


def test_backtracking_lbfgs_matches_optax_on_logistic_regression() -> None:
    x, y = logistic_data()
    # `increase_factor=inf`: every search starts at the step 1, as a quasi-Newton step wants.
    ours_opt = optx.lbfgs(
        memory_size=5,
        linesearch=optx.scale_by_backtracking_linesearch(
            20, increase_factor=math.inf, store_grad=True
        ),
    )
    optax_opt = optax.lbfgs(
        memory_size=5,
        linesearch=optax.scale_by_backtracking_linesearch(
            20,
            slope_rtol=f32(1e-4),
            decrease_factor=f32(0.8),
            increase_factor=math.inf,
            store_grad=True,
        ),
    )
    with jax.enable_x64(True):
        data = {"x": jnp.asarray(x), "y": jnp.asarray(y)}
        w0 = {"w": jnp.zeros(4), "b": jnp.zeros(())}
        ours = trajectory(ours_opt, logistic, w0, ITERATIONS, **data)
        theirs = trajectory(optax_opt, logistic, w0, ITERATIONS, **data)
        kappa = hessian_condition(logistic, [w0] + [t[0] for t in theirs], **data)
        best, curvature = newton(data, w0)
        gnorm = float(optx.tree.norm(jax.grad(logistic)(ours[-1][0], **data)))
        got = np.asarray(ravel_pytree(ours[-1][0])[0])
    rtol = roundoff_rtol(ITERATIONS, roundings=10, reduced=5 + 2 * 5 + 64, eps=EPS64) * kappa
    compare(ours, theirs, rtol)
    # Converged too (on a convex loss <s, y> > 0: L-BFGS needs no curvature condition).
    assert gnorm <= GTOL
    np.testing.assert_allclose(got, best, rtol=0, atol=1.01 * gnorm / curvature + 1e-14)


def test_zoom_search_with_sgd_matches_optax() -> None:
    # The zoom search on its own (after plain gradient steps), keeping the last step as the
    # next guess, bounded, and with Armijo's decrease only: the other branches.
    kwargs = {
        "max_learning_rate": 0.75,
        "slope_rtol": f32(1e-3),
        "curv_rtol": f32(0.5),
        "stepsize_precision": f32(1e-5),
        "increase_factor": 3.0,
    }
    ours_opt = optx.chain(
        optx.sgd(1.0), optx.scale_by_zoom_linesearch(15, approx_dec_rtol=None, **kwargs)
    )
    optax_opt = optax.chain(
        optax.sgd(1.0), optax.scale_by_zoom_linesearch(15, approx_dec_rtol=None, **kwargs)
    )
    with jax.enable_x64(True):
        w0 = jnp.array([-1.2, 1.0, 0.5])
        ours = trajectory(ours_opt, rosenbrock, w0, ITERATIONS)
        theirs = trajectory(optax_opt, rosenbrock, w0, ITERATIONS)
        kappa = hessian_condition(rosenbrock, [w0] + [t[0] for t in theirs])
    # Gradient steps: no memory; the step is the search's, its error magnified by kappa.
    rtol = roundoff_rtol(ITERATIONS, roundings=10, reduced=3, eps=EPS64) * kappa
    compare(ours, theirs, rtol)


# --- Complex parameters ------------------------------------------------------------------------
# A complex z is the real pair (Re z, Im z): L-BFGS on z, with its real inner products
# Re<a, b>, is L-BFGS on the pair. As optax asks, the caller passes the conjugate of
# `jax.grad`'s gradient (the pair's gradient as a complex number, Re g + i Im g) as updates
# and as ``grad``; `value_and_grad_from_state` returns the gradient as `jax.value_and_grad`
# does, so the caller conjugates it too.


def complex_rosenbrock(z: jax.Array) -> jax.Array:
    return rosenbrock(jnp.concatenate([jnp.real(z), jnp.imag(z)]))


def complex_trajectory(opt: Any, f: Any, z0: Any, steps: int) -> list[tuple]:
    """Per iteration: parameters, and every number the line search keeps."""
    value_and_grad = optx.value_and_grad_from_state(f)

    @jax.jit
    def step(z: Any, state: Any) -> tuple:
        value, grad = value_and_grad(z, state=state)
        grad = jnp.conj(grad)
        updates, state = opt.update(grad, state, z, value=value, grad=grad, value_fn=f)
        return optx.apply_updates(z, updates), state

    z, state, out = z0, opt.init(z0), []
    for _ in range(steps):
        z, state = step(z, state)
        search = state[-1]
        out.append((z, search.value, search.learning_rate, *jax.tree.leaves(search.info)))
    return out


def as_pair(z: Any) -> np.ndarray:
    z = np.asarray(z)
    return np.concatenate([z.real, z.imag]) if np.iscomplexobj(z) else z


COMPLEX_SEARCHES = {
    "zoom": lambda: optx.scale_by_zoom_linesearch(20, initial_guess_strategy="one"),
    # store_grad: the gradient at the accepted step comes from the search's own backward pass.
    "backtracking": lambda: optx.scale_by_backtracking_linesearch(20, store_grad=True),
}


@pytest.mark.parametrize("search", sorted(COMPLEX_SEARCHES))
def test_complex_parameters_are_the_real_pair(search: str) -> None:
    iterations = 25
    with jax.enable_x64(True):
        w0 = jnp.array([-1.2, 1.0, 0.5, -0.8, 0.3, 0.9])
        z0 = w0[:3] + 1j * w0[3:]
        opt = optx.lbfgs(memory_size=5, linesearch=COMPLEX_SEARCHES[search]())
        ours = complex_trajectory(opt, complex_rosenbrock, z0, iterations)
        pair = complex_trajectory(opt, rosenbrock, w0, iterations)
        kappa = hessian_condition(rosenbrock, [w0] + [t[0] for t in pair])
        start, end = float(rosenbrock(w0)), float(rosenbrock(pair[-1][0]))
    # The same maths in another order: a complex product and a real part against the pair's
    # products and sums (the inner products over 2n = 6 terms and the memory of 5), as in
    # the comparisons with optax above.
    rtol = roundoff_rtol(iterations, roundings=10, reduced=2 + 2 * 6 + 2 * 5, eps=EPS64) * kappa
    for k, (a, b) in enumerate(zip(ours, pair, strict=True)):
        # The same decisions: the same evaluations in every search.
        assert int(a[3]) == int(b[3]), f"iteration {k}: {a[3]} evaluations, pair {b[3]}"
        assert_close(
            f"iteration {k}",
            [as_pair(a[0]), *map(np.asarray, a[1:3] + a[4:])],
            [as_pair(b[0]), *map(np.asarray, b[1:3] + b[4:])],
            rtol=rtol,
        )
    assert end < start / 10  # and it descends


def test_complex_zoom_lbfgs_matches_optax() -> None:
    # optax's zoom search and L-BFGS take complex parameters with the same conventions.
    opt_optax = optax_zoom_lbfgs(memory_size=5)
    opt = optx.lbfgs(memory_size=5, linesearch=COMPLEX_SEARCHES["zoom"]())
    with jax.enable_x64(True):
        z0 = jnp.array([-1.2 - 0.8j, 1.0 + 0.3j, 0.5 + 0.9j])
        ours = complex_trajectory(opt, complex_rosenbrock, z0, ITERATIONS)
        theirs = complex_trajectory(opt_optax, complex_rosenbrock, z0, ITERATIONS)
        w = [as_pair(z0)] + [as_pair(t[0]) for t in theirs]
        kappa = hessian_condition(rosenbrock, [jnp.asarray(x) for x in w])
    rtol = roundoff_rtol(ITERATIONS, roundings=10, reduced=2 + 2 * 6 + 2 * 5, eps=EPS64) * kappa
    pairs = [[(as_pair(t[0]), *t[1:4]) for t in run] for run in (ours, theirs)]
    compare(*pairs, rtol)


def test_backtracking_slope_of_complex_parameters_is_the_derivative() -> None:
    # The backtracking search's slope is Re<u, g> with g the caller's gradient: for a
    # complex z along u = -g it is -|g|^2. (optax's Re<u, conj g> is not the derivative
    # along u for complex parameters: this test fails with it.)
    def f(z: jax.Array) -> jax.Array:
        return jnp.sum(jnp.abs(z - (1.0 + 2.0j)) ** 2)

    z = jnp.array([0.5 + 0.5j], jnp.complex64)
    value, grad = jax.value_and_grad(f)(z)
    grad = jnp.conj(grad)
    tx = optx.scale_by_backtracking_linesearch(0, slope_rtol=0.5, max_learning_rate=1.0)
    _, state = tx.update(-grad, tx.init(z), z, value=value, grad=grad, value_fn=f)
    # f(z + eta u) - f(z) - eta * c * slope at eta = 1: f at z - 2 (z - z*) is f(z), so
    # the error is c |g|^2 = 0.5 * 4 |z - z*|^2.
    expected = 0.5 * float(jnp.sum(jnp.abs(grad) ** 2))
    np.testing.assert_allclose(float(state.info.decrease_error), expected, rtol=4 * 1.2e-7)


# --- Keyword arguments ---------------------------------------------------------------------------


def test_value_and_grad_are_computed_when_not_given() -> None:
    w = jnp.array([-1.2, 1.0])
    opt = optx.lbfgs(linesearch=optx.scale_by_backtracking_linesearch(9))

    @jax.jit
    def both(w: jax.Array) -> tuple:
        state = opt.init(w)
        value, grad = jax.value_and_grad(rosenbrock)(w)
        given = opt.update(grad, state, w, value=value, grad=grad, value_fn=rosenbrock)
        return given, opt.update(grad, state, w, value_fn=rosenbrock)

    given, computed = both(w)
    jax.tree.map(np.testing.assert_array_equal, given, computed)


def test_data_reaches_value_fn_and_other_keywords_are_ignored() -> None:
    x, y = logistic_data()
    data = {"x": jnp.asarray(x, jnp.float32), "y": jnp.asarray(y, jnp.float32)}
    w = {"w": jnp.zeros(4), "b": jnp.zeros(())}
    opt = optx.lbfgs()

    @jax.jit
    def both(w: Any, data: dict) -> tuple:
        state = opt.init(w)
        value, grad = jax.value_and_grad(logistic)(w, **data)
        kw = {"value": value, "grad": grad, "value_fn": logistic, **data}
        plain = opt.update(grad, state, w, **kw)
        return value, plain, opt.update(grad, state, w, step=3, **kw)

    value, plain, more = both(w, data)
    jax.tree.map(np.testing.assert_array_equal, plain, more)
    assert float(plain[1][-1].value) < float(value)  # the search evaluated the loss on data


def test_value_and_grad_from_state_reads_the_search() -> None:
    opt = optx.lbfgs()
    value_and_grad = optx.value_and_grad_from_state(rosenbrock)

    @jax.jit
    def run(w: jax.Array) -> tuple:
        state = opt.init(w)
        value, grad = value_and_grad(w, state=state)  # nothing kept yet: computed
        _, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=rosenbrock)
        kept = value_and_grad(jnp.zeros(2), state=state)  # kept: the parameters are not read
        return (value, grad), jax.value_and_grad(rosenbrock)(w), kept, state[-1]

    computed, direct, kept, search = run(jnp.array([-1.2, 1.0]))
    jax.tree.map(np.testing.assert_array_equal, computed, direct)  # one program: same maths
    jax.tree.map(np.testing.assert_array_equal, kept, (search.value, search.grad))


def test_infinite_thresholds_are_accepted_and_settable() -> None:
    tx = optx.scale_by_zoom_linesearch(5, curv_rtol=math.inf)
    state = optx.set_hyperparams(tx.init(jnp.zeros(2)), curv_rtol=0.5)
    state = optx.set_hyperparams(state, curv_rtol=math.inf)
    assert optx.get_hyperparams(state)["curv_rtol"] == math.inf
    optx.scale_by_backtracking_linesearch(5, increase_factor=math.inf, max_learning_rate=math.inf)
    with pytest.raises(ValueError, match=re.escape("needs curv_rtol >= 0 (inf allowed)")):
        optx.set_hyperparams(state, curv_rtol=-math.inf)


# --- Errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (
            lambda: optx.scale_by_lbfgs(memory_size=0),
            ValueError,
            "`scale_by_lbfgs` needs memory_size to be an int >= 1. Received: memory_size=0.",
        ),
        (
            lambda: optx.lbfgs(memory_size=2.5),
            ValueError,
            "`lbfgs` needs memory_size to be an int >= 1. Received: memory_size=2.5.",
        ),
        (
            lambda: optx.scale_by_lbfgs(scale_init_precond="yes"),
            TypeError,
            "`scale_by_lbfgs` needs scale_init_precond to be a bool. "
            "Received: scale_init_precond='yes'.",
        ),
        (
            lambda: optx.lbfgs(linesearch="zoom"),
            TypeError,
            "`lbfgs` needs linesearch to be a transform with `init` and `update` methods",
        ),
        (
            lambda: optx.scale_by_zoom_linesearch(0),
            ValueError,
            "`scale_by_zoom_linesearch` needs max_linesearch_steps to be an int >= 1. "
            "Received: max_linesearch_steps=0.",
        ),
        (
            lambda: optx.scale_by_zoom_linesearch(5, initial_guess_strategy="two"),
            ValueError,
            "`scale_by_zoom_linesearch` needs initial_guess_strategy to be 'one' or 'keep'. "
            "Received: initial_guess_strategy='two'.",
        ),
        (
            lambda: optx.scale_by_zoom_linesearch(5, max_learning_rate=0.0),
            ValueError,
            "`scale_by_zoom_linesearch` needs max_learning_rate > 0 (inf allowed). "
            "Received: max_learning_rate=0.0.",
        ),
        (
            lambda: optx.scale_by_zoom_linesearch(5, curv_rtol=-0.1),
            ValueError,
            "`scale_by_zoom_linesearch` needs curv_rtol >= 0 (inf allowed). "
            "Received: curv_rtol=-0.1.",
        ),
        (
            lambda: optx.scale_by_zoom_linesearch(5, slope_rtol=math.inf),
            ValueError,
            "`scale_by_zoom_linesearch` needs slope_rtol finite and >= 0. "
            "Received: slope_rtol=inf.",
        ),
        (
            lambda: optx.scale_by_backtracking_linesearch(-1),
            ValueError,
            "`scale_by_backtracking_linesearch` needs max_backtracking_steps to be an int "
            ">= 0. Received: max_backtracking_steps=-1.",
        ),
        (
            lambda: optx.scale_by_backtracking_linesearch(5, decrease_factor=1.0),
            ValueError,
            "`scale_by_backtracking_linesearch` needs decrease_factor in (0, 1). "
            "Received: decrease_factor=1.0.",
        ),
        (
            lambda: optx.lbfgs(linesearch=optx.scale_by_zoom_linesearch(5, tol=-1.0)),
            ValueError,
            "`scale_by_zoom_linesearch` needs tol finite and >= 0. Received: tol=-1.0.",
        ),
        (
            lambda: optx.value_and_grad_from_state(3),
            TypeError,
            "`value_and_grad_from_state` needs value_fn to be a function of the parameters. "
            "Received: value_fn=3.",
        ),
    ],
)
def test_bad_arguments(build: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        build()


def test_update_without_value_fn() -> None:
    w = jnp.zeros(2)
    for tx in (optx.scale_by_zoom_linesearch(5), optx.scale_by_backtracking_linesearch(5)):
        with pytest.raises(
            TypeError,
            match=re.escape(
                f"`{tx.name}.update` needs value_fn, the function to minimise (of the "
                "parameters, and of the extra keyword arguments it names). "
                "Received: value_fn=None."
            ),
        ):
            tx.update(w, tx.init(w), w, value=0.0, grad=w)


@pytest.mark.parametrize(
    ("opt", "key", "held"),
    [
        (optx.sgd(0.1), "value", 0),
        (optx.scale_by_backtracking_linesearch(5), "grad", 0),  # kept only with store_grad
        (
            optx.chain(optx.scale_by_zoom_linesearch(5), optx.scale_by_zoom_linesearch(5)),
            "value",
            2,
        ),
    ],
    ids=["none", "no_store_grad", "two_searches"],
)
def test_value_and_grad_from_state_needs_one_search(opt: Any, key: str, held: int) -> None:
    value_and_grad = optx.value_and_grad_from_state(rosenbrock)
    w = jnp.zeros(2)
    message = (
        f"`value_and_grad_from_state` needs a state holding exactly one {key} (kept by a line "
        f"search). Received: a state holding {held}."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        value_and_grad(w, state=opt.init(w))
