r"""Line searches: `scale_by_zoom_linesearch`, and `value_and_grad_from_state`.

A line search scales the incoming updates (a descent direction :math:`u`) by a step
:math:`\eta` chosen by evaluating the function to minimise along :math:`w + \eta u`.
Their ``update`` takes, as optax's do, the keyword arguments ``value`` (:math:`f(w)`), ``grad``
(:math:`\nabla f(w)`) and ``value_fn`` (:math:`f`), and passes ``value_fn`` the other
keyword arguments that its signature names (a batch, for example). The value and gradient
at the accepted step are kept in the state, where `value_and_grad_from_state` finds them
for the next step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src import linesearch_maths as lm
from optx._src import linesearch_zoom as zoom
from optx._src.base import OptState, Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.tree import zeros_like

# --- Zoom ------------------------------------------------------------------------------------


class ZoomLinesearchInfo(NamedTuple):
    """What the last zoom search did.

    Attributes:
      num_linesearch_steps: the number of function evaluations it made.
      decrease_error: how far its step is from a sufficient decrease (0: reached).
      curvature_error: how far it is from the curvature condition (0: reached; a positive
        value may only mean that ``max_learning_rate`` is too small).
    """

    num_linesearch_steps: jax.Array
    decrease_error: jax.Array
    curvature_error: jax.Array


class ScaleByZoomLinesearchState(NamedTuple):
    """State of `scale_by_zoom_linesearch`.

    Attributes:
      learning_rate: the step of the last search.
      value: the function's value at the accepted step.
      grad: its gradient there (see `value_and_grad_from_state`).
      info: a `ZoomLinesearchInfo`.
      hyperparams: the dynamic hyperparameters.
    """

    learning_rate: jax.Array
    value: jax.Array
    grad: Updates
    info: ZoomLinesearchInfo
    hyperparams: hp.HyperParams


_GUESSES = ("one", "keep")


@transform
class ScaleByZoomLinesearch(Transform):
    """See `scale_by_zoom_linesearch`."""

    name = "scale_by_zoom_linesearch"
    max_linesearch_steps: int = None  # type: ignore[assignment]
    max_learning_rate: ScalarOrSchedule | None = hp.field(None, lm.POSITIVE_OR_INF, optional=True)
    tol: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    increase_factor: ScalarOrSchedule = hp.field(2.0, hp.POSITIVE)
    slope_rtol: ScalarOrSchedule = hp.field(1e-4, hp.NONNEG)
    curv_rtol: ScalarOrSchedule = hp.field(0.9, lm.NONNEG_OR_INF)
    approx_dec_rtol: ScalarOrSchedule | None = hp.field(1e-6, hp.NONNEG, optional=True)
    stepsize_precision: ScalarOrSchedule = hp.field(1e-5, hp.NONNEG)
    initial_guess_strategy: str = "keep"
    verbose: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        steps = checks.nonneg_int(
            self.name, "max_linesearch_steps", self.max_linesearch_steps, minimum=1
        )
        object.__setattr__(self, "max_linesearch_steps", steps)
        if self.initial_guess_strategy not in _GUESSES:
            raise ValueError(
                f"`{hp.current(self.name)}` needs initial_guess_strategy to be 'one' or "
                f"'keep'. Received: initial_guess_strategy={self.initial_guess_strategy!r}."
            )

    def init(self, params: Params) -> ScaleByZoomLinesearchState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        dtype = lm.scalar_dtype(params)
        inf = jnp.full([], jnp.inf, dtype)
        return ScaleByZoomLinesearchState(
            learning_rate=jnp.ones([], dtype),
            value=inf,
            grad=zeros_like(params),
            info=ZoomLinesearchInfo(jnp.zeros([], jnp.int32), inf, inf),
            hyperparams=self.init_hyperparams(),
        )

    def update(
        self,
        updates: Updates,
        state: ScaleByZoomLinesearchState,
        params: Params | None = None,
        *,
        value: Any = None,
        grad: Updates | None = None,
        value_fn: Callable[..., Any] | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByZoomLinesearchState]:
        api = f"{self.name}.update"
        lm.check_trees(api, updates, params)
        dtype = lm.scalar_dtype(params)
        obj = lm.objective(api, params, value, grad, value_fn, extra, dtype)
        h = lm.settings(state, self.hyperparam_fields(), dtype)
        settings = zoom.ZoomSettings(
            max_steps=self.max_linesearch_steps,
            max_stepsize=h["max_learning_rate"],
            tol=h["tol"],
            increase_factor=h["increase_factor"],
            slope_rtol=h["slope_rtol"],
            curv_rtol=h["curv_rtol"],
            approx_dec_rtol=h["approx_dec_rtol"],
            interval_threshold=h["stepsize_precision"],
        )
        guess = 1.0 if self.initial_guess_strategy == "one" else state.learning_rate
        start = zoom.zoom_start(params, updates, obj, guess, dtype)
        step = functools.partial(zoom.zoom_step, settings, obj, self.verbose, api)
        end = jax.lax.while_loop(zoom.zoom_continues, step, start)
        new_state = ScaleByZoomLinesearchState(
            learning_rate=end.stepsize,
            value=end.value,
            grad=end.grad,
            info=ZoomLinesearchInfo(end.count, end.decrease_error, end.curvature_error),
            hyperparams=state.hyperparams,
        )
        return lm.scaled(end.stepsize, updates), lm.cast_like(new_state, state)


def scale_by_zoom_linesearch(
    max_linesearch_steps: int,
    max_learning_rate: float | None = None,
    tol: float = 0.0,
    increase_factor: float = 2.0,
    slope_rtol: float = 1e-4,
    curv_rtol: float = 0.9,
    approx_dec_rtol: float | None = 1e-6,
    stepsize_precision: float = 1e-5,
    initial_guess_strategy: str = "keep",
    verbose: bool = False,
) -> ScaleByZoomLinesearch:
    r"""Zoom line search: a step satisfying the strong Wolfe conditions.

    It looks for a step :math:`\eta` with a sufficient decrease and a small slope,

    .. math::
       f(w + \eta u) \le f(w) + c_1 \eta \langle u, \nabla f(w)\rangle + \epsilon,
       \qquad
       |\langle \nabla f(w + \eta u), u\rangle| \le c_2 |\langle \nabla f(w), u\rangle|
       + \epsilon,

    with :math:`w` the parameters, :math:`u` the incoming updates (a descent direction),
    :math:`c_1` = ``slope_rtol``, :math:`c_2` = ``curv_rtol`` and :math:`\epsilon` =
    ``tol``. It multiplies a first guess (1, or the last step) by ``increase_factor`` until
    an interval is known to hold such a step, then shrinks the interval with cubic,
    quadratic or bisection steps (Nocedal and Wright, algorithms 3.5 and 3.6). Where
    :math:`f(w + \eta u) \le f(w) + c_3 |f(w)|` (:math:`c_3` = ``approx_dec_rtol``), the
    decrease may instead be Hager and Zhang's approximate one,
    :math:`\langle \nabla f(w + \eta u), u\rangle \le (2 c_1 - 1) \langle \nabla f(w),
    u\rangle`, which float round-off does not hide near a minimum. The updates returned are
    :math:`\eta u`. A search that fails within ``max_linesearch_steps`` evaluations
    returns the best step with a sufficient decrease, if any.

    ``update`` takes the keyword arguments ``value`` (:math:`f(w)`), ``grad``
    (:math:`\nabla f(w)`) and ``value_fn`` (:math:`f`); ``value_fn`` is called with the
    parameters and those other keyword arguments of ``update`` that its signature names.
    Without ``value`` or ``grad``, they are computed from ``value_fn`` at ``params``
    (optax requires them; other unused keyword arguments are ignored where optax raises).
    The state keeps the value and gradient at the accepted step: with
    `value_and_grad_from_state` the next step does not compute them again.

    For complex parameters (as optax's): ``grad`` is the conjugate of `jax.grad`'s, slopes
    are :math:`\operatorname{Re}\langle u, \nabla f\rangle`, and the state keeps the
    gradient as `jax.grad` gives it.

    Args:
      max_linesearch_steps: the most function evaluations per search (a static int >= 1).
      max_learning_rate: the largest step (> 0); ``None``: no bound. A bound may keep the
        curvature condition out of reach.
      tol: :math:`\epsilon \ge 0`.
      increase_factor: the growth of the step while looking for an interval (> 0).
      slope_rtol: :math:`c_1 \ge 0`.
      curv_rtol: :math:`c_2 \ge 0`; ``inf`` drops the curvature condition.
      approx_dec_rtol: :math:`c_3 \ge 0`; ``None`` uses Armijo's decrease only.
      stepsize_precision: once the interval is shorter, a step with a sufficient decrease
        is accepted even without the curvature condition.
      initial_guess_strategy: ``"keep"`` starts from the last step (for gradient
        descent), ``"one"`` from 1 (for Newton and quasi-Newton directions, L-BFGS's).
      verbose: print a diagnosis (with `jax.debug.print`) when a search fails.

    Returns:
      The transform; its numeric arguments are dynamic hyperparameters.

    Raises:
      ValueError: an argument is out of range, or ``initial_guess_strategy`` is unknown.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> def f(w): return jnp.sum((w - 1.0) ** 2)
      >>> tx = optx.chain(optx.sgd(1.0), optx.scale_by_zoom_linesearch(15))
      >>> w = jnp.zeros(2)
      >>> state = tx.init(w)
      >>> value, grad = jax.value_and_grad(f)(w)
      >>> updates, state = tx.update(grad, state, w, value=value, grad=grad, value_fn=f)
      >>> optx.apply_updates(w, updates), float(state[1].learning_rate)
      (Array([1., 1.], dtype=float32), 0.5)

    References:
      Nocedal and Wright, "Numerical Optimization", Springer, 1999 (algorithms 3.5, 3.6);
      Hager and Zhang, "Algorithm 851: CG_DESCENT, a Conjugate Gradient Method with
      Guaranteed Descent", ACM Transactions on Mathematical Software, 2006.
    """
    return ScaleByZoomLinesearch(
        max_linesearch_steps,
        max_learning_rate,
        tol,
        increase_factor,
        slope_rtol,
        curv_rtol,
        approx_dec_rtol,
        stepsize_precision,
        initial_guess_strategy,
        verbose,
    )


# --- Reusing the search's value and gradient -------------------------------------------------


def _found(state: OptState, key: str) -> list[Any]:
    """Every field or dict entry named ``key`` in ``state`` (its NamedTuples, dicts, lists)."""
    found: list[Any] = []

    def visit(node: Any) -> None:
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            items = list(zip(node._fields, node, strict=True))
        elif isinstance(node, dict):
            items = list(node.items())
        elif isinstance(node, tuple | list):
            items = [(None, child) for child in node]
        else:
            return
        for name, child in items:
            if name == key:
                found.append(child)
            visit(child)

    visit(state)
    return found


def value_and_grad_from_state(
    value_fn: Callable[..., Any],
) -> Callable[..., tuple[jax.Array, Updates]]:
    r"""Like `jax.value_and_grad`, but reads the value and gradient a line search kept.

    `scale_by_zoom_linesearch` (and `scale_by_backtracking_linesearch` with
    ``store_grad=True``) evaluate the function and its gradient at the step they accept:
    the parameters of the next iteration. The function returned reads them from the
    optimizer state (the one field named ``value`` and the one named ``grad``) instead of
    computing them again; where the value is not finite (before the first step) it calls
    ``jax.value_and_grad(value_fn)``. Both are in ``jax.lax.cond``: it works under
    `jax.jit`. Only for a deterministic function: with a new batch at every step the kept
    values are the previous batch's.

    Args:
      value_fn: the function to minimise, returning a scalar.

    Returns:
      ``value_and_grad(params, *args, state, **kwargs) -> (value, grad)``; ``args`` and
      ``kwargs`` are passed to ``value_fn`` where it is called.

    Raises:
      TypeError: ``value_fn`` is not callable.

    The function returned raises `ValueError` for a state without exactly one ``value``
    and one ``grad`` (``grad`` is ``None`` in a backtracking search without
    ``store_grad``).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> def f(w): return jnp.sum((w - 1.0) ** 2)
      >>> tx = optx.lbfgs()
      >>> w = jnp.zeros(2)
      >>> state = tx.init(w)
      >>> value_and_grad = optx.value_and_grad_from_state(f)
      >>> for _ in range(2):
      ...     value, grad = value_and_grad(w, state=state)
      ...     updates, state = tx.update(grad, state, w, value=value, grad=grad, value_fn=f)
      ...     w = optx.apply_updates(w, updates)
      >>> w
      Array([1., 1.], dtype=float32)
    """
    if not callable(value_fn):
        raise TypeError(
            "`value_and_grad_from_state` needs value_fn to be a function of the parameters. "
            f"Received: value_fn={value_fn!r}."
        )

    def value_and_grad(
        params: Params, *fn_args: Any, state: OptState, **fn_kwargs: Any
    ) -> tuple[jax.Array, Updates]:
        kept = {}
        for key in ("value", "grad"):
            found = [x for x in _found(state, key) if x is not None]
            if len(found) != 1:
                raise ValueError(
                    f"`value_and_grad_from_state` needs a state holding exactly one {key} "
                    f"(kept by a line search). Received: a state holding {len(found)}. Use "
                    "`scale_by_zoom_linesearch`, or `scale_by_backtracking_linesearch` with "
                    "store_grad=True, once in the optimizer."
                )
            kept[key] = found[0]
        value, grad = kept["value"], kept["grad"]

        def compute(p: Params, args: tuple, kwargs: dict) -> tuple[jax.Array, Updates]:
            return lm.cast_like(jax.value_and_grad(value_fn)(p, *args, **kwargs), (value, grad))

        return jax.lax.cond(
            jnp.isfinite(value),
            lambda *_: (value, grad),
            compute,
            params,
            fn_args,
            fn_kwargs,
        )

    return value_and_grad
