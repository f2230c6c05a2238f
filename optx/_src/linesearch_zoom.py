r"""The zoom search's iteration (Nocedal and Wright, algorithms 3.5 and 3.6).

It first grows the step :math:`\eta` until an interval holds a step satisfying the strong
Wolfe conditions, then shrinks that interval by cubic, quadratic or bisection steps.
`scale_by_zoom_linesearch` runs it in a ``jax.lax.while_loop``; this module holds its
loop's carry and body.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src.base import Params, Updates
from optx._src.linesearch_maths import Objective, add_scaled, bad_to_inf, cast_like, conj, inner


class ZoomSettings(NamedTuple):
    """The zoom search's numbers (traced scalars) and static switches."""

    max_steps: int
    max_stepsize: jax.Array | None
    tol: jax.Array
    increase_factor: jax.Array
    slope_rtol: jax.Array
    curv_rtol: jax.Array
    approx_dec_rtol: jax.Array | None
    interval_threshold: jax.Array


class ZoomSearch(NamedTuple):
    """The carry of the zoom search's loop.

    ``low`` and ``high`` bound an interval holding an acceptable step; ``low`` is the end
    with the lower value, not the smaller step. ``safe_*`` is the best step found with a
    sufficient decrease, kept in case the curvature condition cannot be met.
    """

    count: jax.Array
    params: Params
    updates: Updates
    guess: jax.Array
    stepsize: jax.Array
    value: jax.Array
    grad: Updates
    slope: jax.Array
    value_init: jax.Array
    slope_init: jax.Array
    decrease_error: jax.Array
    curvature_error: jax.Array
    error: jax.Array
    interval_found: jax.Array
    done: jax.Array
    failed: jax.Array
    low: jax.Array
    value_low: jax.Array
    slope_low: jax.Array
    high: jax.Array
    value_high: jax.Array
    slope_high: jax.Array
    cubic_ref: jax.Array
    value_cubic_ref: jax.Array
    safe_stepsize: jax.Array
    safe_value: jax.Array
    safe_grad: Updates


def zoom_start(
    params: Params, updates: Updates, obj: Objective, guess: jax.Array, dtype: Any
) -> ZoomSearch:
    """The search's first carry: nothing tried yet, the step 0 known."""
    slope = jnp.real(inner(updates, obj.grad)).astype(dtype)
    zero, inf, no = jnp.zeros([], dtype), jnp.full([], jnp.inf, dtype), jnp.zeros([], bool)
    v = obj.value
    return ZoomSearch(
        count=jnp.zeros([], jnp.int32),
        params=params,
        updates=updates,
        guess=jnp.asarray(guess).astype(dtype),
        stepsize=zero,
        value=v,
        grad=conj(obj.grad),
        slope=slope,
        value_init=v,
        slope_init=slope,
        decrease_error=inf,
        curvature_error=inf,
        error=inf,
        interval_found=no,
        done=no,
        failed=no,
        low=zero,
        value_low=v,
        slope_low=slope,
        high=zero,
        value_high=v,
        slope_high=slope,
        cubic_ref=zero,
        value_cubic_ref=v,
        safe_stepsize=zero,
        safe_value=v,
        safe_grad=conj(obj.grad),
    )


def _on_line(
    s: ZoomSearch, obj: Objective, stepsize: jax.Array
) -> tuple[jax.Array, Updates, jax.Array]:
    """Value, gradient and slope of the function at ``params + stepsize * updates``."""
    point = add_scaled(s.params, stepsize, s.updates)
    value, grad = jax.value_and_grad(obj.fn)(point, **obj.kwargs)
    slope = jnp.real(inner(conj(grad), s.updates))
    return value, grad, slope


def _errors(
    c: ZoomSettings, s: ZoomSearch, stepsize: jax.Array, value: jax.Array, slope: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """How far a step is from the sufficient decrease and the curvature conditions (0: met).

    The decrease is Armijo's (Nocedal and Wright, eq. 3.7a), or, where the value is within
    ``approx_dec_rtol`` of the start, Hager and Zhang's approximate decrease (2006, eq. 23),
    which still tells values apart where Armijo's difference is lost to round-off.
    """
    decrease = value - s.value_init - c.slope_rtol * stepsize * s.slope_init
    if c.approx_dec_rtol is not None:
        approx = slope - (2 * c.slope_rtol - 1.0) * s.slope_init
        near = value - s.value_init - c.approx_dec_rtol * jnp.abs(s.value_init)
        decrease = jnp.minimum(jnp.maximum(approx, near), decrease)
    curvature = jnp.abs(slope) - c.curv_rtol * jnp.abs(s.slope_init)
    return bad_to_inf(decrease), bad_to_inf(curvature)


def _pick(cond: jax.Array, a: Any, b: Any) -> Any:
    return jax.tree.map(lambda x, y: jnp.where(cond, x, y), a, b)


def _search_interval(c: ZoomSettings, obj: Objective, s: ZoomSearch) -> ZoomSearch:
    """One step of the growth phase (algorithm 3.5): try a larger step."""
    stepsize = jnp.where(s.count == 0, s.guess, c.increase_factor * s.stepsize)
    if c.max_stepsize is not None:
        at_max = stepsize >= c.max_stepsize
        stepsize = jnp.minimum(stepsize, c.max_stepsize)
    else:
        at_max = jnp.zeros([], bool)
    value, grad, slope = _on_line(s, obj, stepsize)
    decrease_error, curvature_error = _errors(c, s, stepsize, value, slope)
    error = jnp.maximum(decrease_error, curvature_error)

    safe = _pick(
        decrease_error <= c.tol,
        (stepsize, value, grad),
        (s.safe_stepsize, s.safe_value, s.safe_grad),
    )
    # Too high, or higher than the last step: the acceptable step is below this one.
    high_is_new = (decrease_error > 0.0) | ((value >= s.value) & (s.count > 0))
    # Going up: the acceptable step is between the last one and this one.
    low_is_new = (slope >= 0.0) & ~high_is_new
    previous, new = (s.stepsize, s.value, s.slope), (stepsize, value, slope)
    low, high = _pick(low_is_new, (new, previous), (previous, new))
    found = high_is_new | low_is_new | (error <= c.tol)
    done = (error <= c.tol) | (at_max & ~found)
    failed = (s.count + 1 >= c.max_steps) & ~done
    return s._replace(
        count=s.count + 1,
        stepsize=stepsize,
        value=value,
        grad=grad,
        slope=slope,
        decrease_error=decrease_error,
        curvature_error=curvature_error,
        error=error,
        interval_found=found,
        done=done,
        failed=failed,
        low=low[0],
        value_low=low[1],
        slope_low=low[2],
        high=high[0],
        value_high=high[1],
        slope_high=high[2],
        cubic_ref=low[0],
        value_cubic_ref=low[1],
        safe_stepsize=safe[0],
        safe_value=safe[1],
        safe_grad=safe[2],
    )


def _zoom(c: ZoomSettings, obj: Objective, s: ZoomSearch) -> ZoomSearch:
    """One step of the shrinking phase (algorithm 3.6): try a step inside the interval."""
    width = jnp.abs(s.high - s.low)
    left, right = jnp.minimum(s.high, s.low), jnp.maximum(s.high, s.low)
    # An interpolated step too near an end is not trusted (it would shrink little).
    cubic = cubic_min(
        s.low, s.value_low, s.slope_low, s.high, s.value_high, s.cubic_ref, s.value_cubic_ref
    )
    use_cubic = (cubic > left + 0.2 * width) & (cubic < right - 0.2 * width)
    quad = quadratic_min(s.low, s.value_low, s.slope_low, s.high, s.value_high)
    use_quad = ~use_cubic & (quad > left + 0.1 * width) & (quad < right - 0.1 * width)
    middle = jnp.where(use_cubic, cubic, s.cubic_ref)
    middle = jnp.where(use_quad, quad, middle)
    middle = jnp.where(~use_cubic & ~use_quad, (s.low + s.high) / 2.0, middle)

    value, grad, slope = _on_line(s, obj, middle)
    decrease_error, curvature_error = _errors(c, s, middle, value, slope)
    error = jnp.maximum(decrease_error, curvature_error)
    safe = _pick(
        (decrease_error <= c.tol) & (value < s.safe_value),
        (middle, value, grad),
        (s.safe_stepsize, s.safe_value, s.safe_grad),
    )
    done = error <= c.tol

    new = (middle, value, slope)
    low, high = (s.low, s.value_low, s.slope_low), (s.high, s.value_high, s.slope_high)
    middle_is_high = (decrease_error > 0.0) | (value >= s.value_low)
    # The slope points away from high: the interval continues on low's other side.
    low_is_high = (slope * (s.high - s.low) >= 0.0) & ~middle_is_high
    new_high = _pick(low_is_high, low, _pick(middle_is_high, new, high))
    new_low = _pick(middle_is_high, low, new)
    # The point dropped from the interval serves the next cubic interpolation.
    ref = _pick(middle_is_high | low_is_high, (s.high, s.value_high), (s.low, s.value_low))
    # Stop once the interval is below the precision and a decrease was found; without
    # one, go on: a very steep function may need a very small step.
    stop = (s.count + 1 >= c.max_steps) | ((width <= c.interval_threshold) & (safe[0] > 0.0))
    return s._replace(
        count=s.count + 1,
        stepsize=middle,
        value=value,
        grad=grad,
        slope=slope,
        decrease_error=decrease_error,
        curvature_error=curvature_error,
        error=error,
        done=done,
        failed=stop & ~done,
        low=new_low[0],
        value_low=new_low[1],
        slope_low=new_low[2],
        high=new_high[0],
        value_high=new_high[1],
        slope_high=new_high[2],
        cubic_ref=ref[0],
        value_cubic_ref=ref[1],
        safe_stepsize=safe[0],
        safe_value=safe[1],
        safe_grad=safe[2],
    )


def _fall_back(s: ZoomSearch) -> ZoomSearch:
    """At a failure, the safe step if one was found (or if the last step left the domain)."""
    use_safe = (s.safe_stepsize > 0.0) | jnp.isinf(s.decrease_error)
    stepsize, value, grad = _pick(
        use_safe, (s.safe_stepsize, s.safe_value, s.safe_grad), (s.stepsize, s.value, s.grad)
    )
    return s._replace(stepsize=stepsize, value=value, grad=grad)


def zoom_step(
    c: ZoomSettings, obj: Objective, verbose: bool, api: str, s: ZoomSearch
) -> ZoomSearch:
    """One evaluation of the function: a growth step until an interval is found, then zoom."""
    # Each branch keeps the carry's dtypes (the function may return another float type).
    new = jax.lax.cond(
        s.interval_found,
        lambda x: cast_like(_zoom(c, obj, x), x),
        lambda x: cast_like(_search_interval(c, obj, x), x),
        s,
    )
    new = jax.lax.cond(new.failed, _fall_back, lambda x: x, new)
    if verbose:
        jax.lax.cond(new.failed, functools.partial(_report, api), lambda _: None, new)
    return new


def zoom_continues(s: ZoomSearch) -> jax.Array:
    """Whether the search goes on: neither done nor failed."""
    return ~(s.done | s.failed)


def _report(api: str, s: ZoomSearch) -> None:
    jax.debug.print(
        "`" + api + "`: the line search stopped without a step meeting both conditions. "
        "Value at the start: {v}, slope along the direction: {slope} (it must be negative), "
        "step returned: {step}, decrease error: {dec}, curvature error: {curv}. "
        "A step of 0 means no decrease was found.",
        v=s.value_init,
        slope=s.slope_init,
        step=s.stepsize,
        dec=s.decrease_error,
        curv=s.curvature_error,
        ordered=True,
    )


def cubic_min(
    a: jax.Array,
    fa: jax.Array,
    fpa: jax.Array,
    b: jax.Array,
    fb: jax.Array,
    c: jax.Array,
    fc: jax.Array,
) -> jax.Array:
    r"""The local minimiser of a cubic through three points, with a slope at the first.

    The cubic goes through ``(a, fa)``, ``(b, fb)``, ``(c, fc)`` with slope ``fpa`` at
    ``a``; the result is NaN where it has no minimiser (the caller then does not use it).

    With :math:`p(x) = A (x-a)^3 + B (x-a)^2 + f'_a (x-a) + f_a`, the minimiser is
    :math:`a + (-B + \sqrt{B^2 - 3 A f'_a}) / (3A)`.
    """
    db, dc = b - a, c - a
    denom = (db * dc) ** 2 * (db - dc)
    m = jnp.array([[dc**2, -(db**2)], [-(dc**3), db**3]])
    r = jnp.array([fb - fa - fpa * db, fc - fa - fpa * dc])
    big_a, big_b = jnp.dot(m, r, precision=jax.lax.Precision.HIGHEST) / denom
    return a + (-big_b + jnp.sqrt(big_b * big_b - 3.0 * big_a * fpa)) / (3.0 * big_a)


def quadratic_min(
    a: jax.Array, fa: jax.Array, fpa: jax.Array, b: jax.Array, fb: jax.Array
) -> jax.Array:
    """The minimiser of the parabola through ``(a, fa)``, ``(b, fb)``, slope ``fpa`` at ``a``."""
    db = b - a
    curvature = (fb - fa - fpa * db) / (db**2)
    return a - fpa / (2.0 * curvature)
