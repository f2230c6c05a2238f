r"""The backtracking line search: `scale_by_backtracking_linesearch` (Armijo's condition).

Its ``update`` takes ``value``, ``grad`` and ``value_fn`` as optax's does; with
``store_grad=True``, `value_and_grad_from_state` reuses the value and gradient it kept.
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
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.tree import zeros_like

# --- Backtracking --------------------------------------------------------------------------


class BacktrackingLinesearchInfo(NamedTuple):
    """What the last backtracking search did.

    Attributes:
      num_linesearch_steps: the number of function evaluations it made.
      decrease_error: how far its step is from a sufficient decrease (0: reached).
    """

    num_linesearch_steps: jax.Array
    decrease_error: jax.Array


class ScaleByBacktrackingLinesearchState(NamedTuple):
    """State of `scale_by_backtracking_linesearch`.

    Attributes:
      learning_rate: the step of the last search (the next one starts from it).
      value: the function's value at the accepted step.
      grad: its gradient there if ``store_grad``, else ``None``.
      info: a `BacktrackingLinesearchInfo`.
      hyperparams: the dynamic hyperparameters.
    """

    learning_rate: jax.Array
    value: jax.Array
    grad: Updates | None
    info: BacktrackingLinesearchInfo
    hyperparams: hp.HyperParams


@transform
class ScaleByBacktrackingLinesearch(Transform):
    """See `scale_by_backtracking_linesearch`."""

    name = "scale_by_backtracking_linesearch"
    max_backtracking_steps: int = None  # type: ignore[assignment]
    slope_rtol: ScalarOrSchedule = hp.field(1e-4, hp.NONNEG)
    decrease_factor: ScalarOrSchedule = hp.field(0.8, lm.OPEN_UNIT)
    increase_factor: ScalarOrSchedule = hp.field(1.5, lm.POSITIVE_OR_INF)
    max_learning_rate: ScalarOrSchedule = hp.field(1.0, lm.POSITIVE_OR_INF)
    atol: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    rtol: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    store_grad: bool = False
    verbose: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        steps = checks.nonneg_int(self.name, "max_backtracking_steps", self.max_backtracking_steps)
        object.__setattr__(self, "max_backtracking_steps", steps)

    def init(self, params: Params) -> ScaleByBacktrackingLinesearchState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        dtype = lm.scalar_dtype(params)
        inf = jnp.full([], jnp.inf, dtype)
        return ScaleByBacktrackingLinesearchState(
            learning_rate=jnp.ones([], dtype),
            value=inf,
            grad=zeros_like(params) if self.store_grad else None,
            info=BacktrackingLinesearchInfo(jnp.zeros([], jnp.int32), inf),
            hyperparams=self.init_hyperparams(),
        )

    def update(
        self,
        updates: Updates,
        state: ScaleByBacktrackingLinesearchState,
        params: Params | None = None,
        *,
        value: Any = None,
        grad: Updates | None = None,
        value_fn: Callable[..., Any] | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByBacktrackingLinesearchState]:
        api = f"{self.name}.update"
        lm.check_trees(api, updates, params)
        dtype = lm.scalar_dtype(params)
        obj = lm.objective(api, params, value, grad, value_fn, extra, dtype)
        h = lm.settings(state, self.hyperparam_fields(), dtype)
        # <u, G> with G the caller's gradient (for complex parameters the conjugate of
        # `jax.grad`'s): the derivative of the value along u.
        slope = jnp.real(lm.inner(updates, obj.grad))
        fn = functools.partial(value_fn, **obj.kwargs)
        last = self.max_backtracking_steps

        def error(stepsize: jax.Array, new_value: jax.Array) -> jax.Array:
            excess = new_value - (1.0 + h["rtol"]) * obj.value
            return lm.bad_to_inf(excess - stepsize * h["slope_rtol"] * slope)

        def body(carry: tuple) -> tuple:
            stepsize, _, new_grad, _, i = carry
            # The first try is the guess; each later one is smaller.
            stepsize = jnp.where(i > 0, h["decrease_factor"] * stepsize, stepsize)
            point = lm.add_scaled(params, stepsize, updates)
            if self.store_grad:
                new_value, linear = jax.linearize(fn, point)
                err = error(stepsize, new_value)
                # The gradient only where the search ends: one backward pass in all.
                new_grad = jax.lax.cond(
                    (err <= h["atol"]) | (i == last),
                    lambda: jax.linear_transpose(linear, point)(jnp.ones_like(new_value))[0],
                    lambda: new_grad,
                )
            else:
                new_value = fn(point)
                err = error(stepsize, new_value)
            return lm.cast_like((stepsize, new_value, new_grad, err, i + 1), carry)

        def keep_going(carry: tuple) -> jax.Array:
            return ~(carry[3] <= h["atol"]) & (carry[4] <= last)

        guess = jnp.minimum(h["increase_factor"] * state.learning_rate, h["max_learning_rate"])
        start = (
            guess.astype(dtype),
            obj.value,
            zeros_like(params),
            jnp.full([], jnp.inf, dtype),
            jnp.zeros([], jnp.int32),
        )
        stepsize, new_value, new_grad, err, count = jax.lax.while_loop(keep_going, body, start)
        if self.verbose:
            jax.lax.cond(
                err > h["atol"],
                lambda: jax.debug.print(
                    "`" + api + "`: no step with a sufficient decrease found. Value: {v}, "
                    "slope along the direction: {s} (it must be negative), step: {t}, "
                    "decrease error: {e}.",
                    v=obj.value,
                    s=slope,
                    t=stepsize,
                    e=err,
                    ordered=True,
                ),
                lambda: None,
            )
        # No finite value anywhere on the path: no step at all.
        stepsize = jnp.where(jnp.isinf(err), 0.0, stepsize)
        new_state = ScaleByBacktrackingLinesearchState(
            learning_rate=stepsize,
            value=new_value,
            grad=new_grad if self.store_grad else None,
            info=BacktrackingLinesearchInfo(count, err),
            hyperparams=state.hyperparams,
        )
        return lm.scaled(stepsize, updates), lm.cast_like(new_state, state)


def scale_by_backtracking_linesearch(
    max_backtracking_steps: int,
    slope_rtol: float = 1e-4,
    decrease_factor: float = 0.8,
    increase_factor: float = 1.5,
    max_learning_rate: float = 1.0,
    atol: float = 0.0,
    rtol: float = 0.0,
    store_grad: bool = False,
    verbose: bool = False,
) -> ScaleByBacktrackingLinesearch:
    r"""Backtracking line search: the first step with a sufficient decrease (Armijo).

    Starting from :math:`\eta = \min(\gamma\,\eta_{\text{prev}}, \eta_{\max})`, the step
    is multiplied by :math:`\beta` until

    .. math::
       f(w + \eta u) \le (1 + \delta)\,f(w) + c\,\eta\,\langle u, \nabla f(w)\rangle
       + \epsilon,

    with :math:`w` the parameters, :math:`u` the incoming updates (a descent direction:
    :math:`\langle u, \nabla f(w)\rangle < 0`), :math:`c` = ``slope_rtol``, :math:`\beta`
    = ``decrease_factor``, :math:`\gamma` = ``increase_factor``, :math:`\eta_{\max}` =
    ``max_learning_rate``, :math:`\delta` = ``rtol`` and :math:`\epsilon` = ``atol``. The
    updates returned are :math:`\eta u`. After ``max_backtracking_steps`` reductions the
    last step is taken; if no finite value was found, the step is 0.

    ``update`` takes the keyword arguments ``value`` (:math:`f(w)`), ``grad``
    (:math:`\nabla f(w)`) and ``value_fn`` (:math:`f`); ``value_fn`` is called with the
    parameters and those other keyword arguments of ``update`` that its signature names.
    Without ``value`` or ``grad``, they are computed from ``value_fn`` at ``params``
    (optax requires them; other unused keyword arguments are ignored where optax raises).

    For complex parameters ``grad`` is the conjugate of `jax.grad`'s (as optax asks) and the
    slope is :math:`\operatorname{Re}\langle u, \nabla f(w)\rangle`, the derivative of
    :math:`f` along :math:`u`; optax's is :math:`\operatorname{Re}\langle u,
    \overline{\nabla f(w)}\rangle`, which is not, where the imaginary parts are nonzero.

    Args:
      max_backtracking_steps: the most reductions of the step (a static int >= 0).
      slope_rtol: :math:`c \ge 0`, the fraction of the linear decrease to obtain.
      decrease_factor: :math:`\beta \in (0, 1)`.
      increase_factor: :math:`\gamma > 0`; ``inf`` starts every search at
        ``max_learning_rate``, 1 at the last step found.
      max_learning_rate: :math:`\eta_{\max} > 0` (``inf`` allowed).
      atol: :math:`\epsilon \ge 0`.
      rtol: :math:`\delta \ge 0`.
      store_grad: also keep the gradient at the accepted step in the state (for
        `value_and_grad_from_state`); it costs one backward pass per search.
      verbose: print a diagnosis (with `jax.debug.print`) when a search fails.

    Returns:
      The transform; its numeric arguments are dynamic hyperparameters.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> def f(w): return jnp.sum((w - 1.0) ** 2)
      >>> tx = optx.chain(optx.sgd(1.0), optx.scale_by_backtracking_linesearch(15))
      >>> w = jnp.zeros(2)
      >>> value, grad = jax.value_and_grad(f)(w)
      >>> updates, state = tx.update(grad, tx.init(w), w, value=value, grad=grad, value_fn=f)
      >>> optx.apply_updates(w, updates)  # the step 1 reaches 2 (no decrease); 0.8 is taken
      Array([1.6, 1.6], dtype=float32)
      >>> int(state[1].info.num_linesearch_steps)
      2

    References:
      Nocedal and Wright, "Numerical Optimization", Springer, 1999 (algorithm 3.1);
      Vaswani, Mishkin, Laradji, Schmidt, Gidel and Lacoste-Julien, "Painless Stochastic
      Gradient: Interpolation, Line-Search, and Convergence Rates", NeurIPS 2019.
    """
    return ScaleByBacktrackingLinesearch(
        max_backtracking_steps,
        slope_rtol,
        decrease_factor,
        increase_factor,
        max_learning_rate,
        atol,
        rtol,
        store_grad,
        verbose,
    )
