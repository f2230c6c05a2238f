r"""L-BFGS: `scale_by_lbfgs` and the optimizer `lbfgs` (with a zoom line search)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, placement
from optx._src import hyperparams as hp
from optx._src import linesearch_maths as lm
from optx._src.base import (
    GradientTransformationLike,
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    identity,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import Chain, chain
from optx._src.linesearch import scale_by_zoom_linesearch
from optx._src.scaling import scale, scale_by_learning_rate


class ScaleByLBFGSState(NamedTuple):
    r"""State of `scale_by_lbfgs`.

    Attributes:
      count: the number of updates so far (int32, saturating).
      params: the parameters of the last update.
      updates: the updates (gradients) of the last update.
      diff_params_memory: the last ``memory_size`` parameter differences
        :math:`s_k = w_{k+1} - w_k`, stacked on a leading axis of each leaf (a ring
        buffer).
      diff_updates_memory: the matching gradient differences :math:`y_k = g_{k+1} - g_k`.
      weights_memory: the matching :math:`\rho_k = 1 / \langle y_k, s_k\rangle` (0 where
        the product is 0).
    """

    count: jax.Array
    params: Params
    updates: Params
    diff_params_memory: Params
    diff_updates_memory: Params
    weights_memory: jax.Array


def _stacked_zeros(p: jax.Array, size: int) -> jax.Array:
    # Derived from the parameter: placed like it (on its sharding) along its own axes.
    zeros = placement.zeros_like(p)
    return jnp.broadcast_to(zeros[None], (size, *jnp.shape(p)))


def _two_loop(
    updates: Updates,
    s_memory: Params,
    y_memory: Params,
    rho: jax.Array,
    gamma: jax.Array,
    start: jax.Array,
) -> Updates:
    r""":math:`H_k g` by the two-loop recursion (Nocedal and Wright, algorithm 7.4).

    ``start`` is the oldest entry of the ring buffers; empty entries have :math:`\rho = 0`
    and change nothing.
    """
    size = rho.shape[0]
    order = (start + jnp.arange(size)) % size

    def pair(i: jax.Array) -> tuple[Params, Params]:
        return jax.tree.map(lambda x: x[i], s_memory), jax.tree.map(lambda x: x[i], y_memory)

    def newest_first(q: Updates, i: jax.Array) -> tuple[Updates, jax.Array]:
        s, y = pair(i)
        alpha = rho[i] * jnp.real(lm.inner(s, q))
        return lm.add_scaled(q, -alpha, y), alpha

    q, alphas = jax.lax.scan(newest_first, updates, order, reverse=True)
    r = lm.scaled(gamma, q)

    def oldest_first(r: Updates, i_alpha: tuple[jax.Array, jax.Array]) -> tuple[Updates, None]:
        i, alpha = i_alpha
        s, y = pair(i)
        beta = rho[i] * jnp.real(lm.inner(y, r))
        return lm.add_scaled(r, alpha - beta, s), None

    return jax.lax.scan(oldest_first, r, (order, alphas))[0]


@transform
class ScaleByLBFGS(Transform):
    """See `scale_by_lbfgs`."""

    name = "scale_by_lbfgs"
    memory_size: int = 10
    scale_init_precond: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        size = checks.nonneg_int(self.name, "memory_size", self.memory_size, minimum=1)
        object.__setattr__(self, "memory_size", size)

    def init(self, params: Params) -> ScaleByLBFGSState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        stacked = jax.tree.map(lambda p: _stacked_zeros(p, self.memory_size), params)
        return ScaleByLBFGSState(
            count=zero_count(),
            params=jax.tree.map(placement.zeros_like, params),
            updates=jax.tree.map(placement.zeros_like, params),
            diff_params_memory=stacked,
            diff_updates_memory=stacked,
            weights_memory=jnp.zeros([self.memory_size], lm.scalar_dtype(params)),
        )

    def update(
        self, updates: Updates, state: ScaleByLBFGSState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByLBFGSState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.float_params(api, params, complex_ok=True)
        checks.same_tree(api, params, state.params, "params", "the state")
        checks.same_tree(api, updates, state.updates, "updates", "the state")
        size, count = self.memory_size, state.count
        # The memory is updated first, with the step just taken, then used: chained before a
        # line search, the pair (s, y) enters once the search has chosen its step.
        s = jax.tree.map(jnp.subtract, params, state.params)
        y = jax.tree.map(jnp.subtract, updates, state.updates)
        sy = jnp.real(lm.inner(y, s))
        rho = jnp.where(sy == 0.0, 0.0, 1.0 / sy)
        # No pair before the first step.
        s, y, rho = jax.tree.map(lambda x: jnp.where(count > 0, x, jnp.zeros_like(x)), (s, y, rho))
        slot = (count - 1) % size
        s_memory, y_memory, rhos = jax.tree.map(
            lambda buffer, x: buffer.at[slot].set(x.astype(buffer.dtype)),
            (state.diff_params_memory, state.diff_updates_memory, state.weights_memory),
            (s, y, rho),
        )
        if self.scale_init_precond:
            yy = lm.sq_norm(y)
            gamma = jnp.where(yy > 0.0, jnp.real(lm.inner(y, s)) / yy, 1.0)
            # First step: at most a unit step (a capped reciprocal of the gradient norm).
            first = jnp.minimum(1.0, 1.0 / jnp.sqrt(lm.sq_norm(jax.lax.stop_gradient(updates))))
            gamma = jnp.where(count > 0, gamma, first)
        else:
            gamma = jnp.ones([], rhos.dtype)
        direction = _two_loop(updates, s_memory, y_memory, rhos, gamma, count % size)
        new_state = ScaleByLBFGSState(
            count=safe_increment(count),
            params=lm.cast_like(params, state.params),
            updates=lm.cast_like(updates, state.updates),
            diff_params_memory=s_memory,
            diff_updates_memory=y_memory,
            weights_memory=rhos,
        )
        return lm.cast_like(direction, updates), new_state


def scale_by_lbfgs(memory_size: int = 10, scale_init_precond: bool = True) -> ScaleByLBFGS:
    r"""L-BFGS's direction: the updates multiplied by an estimate of the inverse Hessian.

    From the last :math:`m` parameter and gradient differences
    :math:`s_j = w_{j+1} - w_j`, :math:`y_j = g_{j+1} - g_j`, with
    :math:`\rho_j = 1 / \langle y_j, s_j\rangle`, the estimate is :math:`H_k = H_{k,k}`:

    .. math::
       H_{k,k-m} = \gamma_k I, \qquad
       H_{k,j+1} = V_j^\top H_{k,j} V_j + \rho_j s_j s_j^\top, \qquad
       V_j = I - \rho_j y_j s_j^\top,

    with :math:`\gamma_k = \langle s_{k-1}, y_{k-1}\rangle / \|y_{k-1}\|^2` if
    ``scale_init_precond`` (else 1), and at the first step
    :math:`\gamma_0 = \min(1, 1 / \|g_0\|)`: a first step of length at most 1. The
    updates returned are :math:`H_k g_k`, computed by the two-loop recursion in
    :math:`O(m n)`; the memory takes :math:`2 m` copies of the parameters. Chain it with
    a sign flip and a line search (as `lbfgs` does): the pair :math:`(s_k, y_k)` enters
    at the next update, once the step is known.

    Args:
      memory_size: :math:`m`, the number of pairs kept (a static int >= 1).
      scale_init_precond: scale the initial estimate by :math:`\gamma_k` (see above).

    Returns:
      The transform (its ``update`` needs ``params``).

    Raises:
      ValueError: ``memory_size`` is not an int >= 1.
      TypeError: ``scale_init_precond`` is not a bool.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_lbfgs()
      >>> w = jnp.array([3.0, 4.0])
      >>> tx.update(w, tx.init(w), w)[0]  # the first step: g / |g|
      Array([0.6, 0.8], dtype=float32)

    References:
      Liu and Nocedal, "On the limited memory BFGS method for large scale optimization",
      Mathematical Programming, 1989; Nocedal and Wright, "Numerical Optimization",
      Springer, 1999 (algorithms 7.4 and 7.5).
    """
    return ScaleByLBFGS(memory_size, scale_init_precond)


# optax's default: at most 20 evaluations, from a first guess of 1 (a quasi-Newton step).
_ZOOM = scale_by_zoom_linesearch(max_linesearch_steps=20, initial_guess_strategy="one")


def lbfgs(
    learning_rate: ScalarOrSchedule | None = None,
    memory_size: int = 10,
    scale_init_precond: bool = True,
    linesearch: GradientTransformationLike | None = _ZOOM,
) -> Chain:
    r"""The L-BFGS optimizer: quasi-Newton steps of a length chosen by a line search.

    .. math::
       w_{k+1} = w_k - \eta_k H_k \nabla f(w_k)

    with :math:`H_k` L-BFGS's estimate of the inverse Hessian (see `scale_by_lbfgs`) and
    :math:`\eta_k` the step of the line search, times ``learning_rate`` where given. The
    default line search is `scale_by_zoom_linesearch` (at most 20 evaluations, from a
    first guess of 1): its ``update`` needs ``value=``, ``grad=`` and ``value_fn=`` (see
    the example), and `value_and_grad_from_state` reuses the value and gradient it
    computed at the accepted step. For a deterministic, full-batch objective; it keeps
    :math:`2m + 2` copies of the parameters.

    Complex parameters are optimised as the real pairs :math:`(\operatorname{Re} w,
    \operatorname{Im} w)`: inner products are :math:`\operatorname{Re}\langle a, b\rangle`.
    As optax asks, pass the conjugate of `jax.grad`'s gradient as the updates and as
    ``grad``; `value_and_grad_from_state` returns the gradient as `jax.value_and_grad`
    does, so conjugate what it returns too.

    Args:
      learning_rate: a factor of the step (a number or a schedule); ``None``: the line
        search's step alone.
      memory_size: :math:`m`, the number of pairs kept (a static int >= 1).
      scale_init_precond: scale the initial inverse Hessian estimate (see
        `scale_by_lbfgs`).
      linesearch: the line search, last in the chain (any transform); ``None``: none.

    Returns:
      ``chain(scale_by_lbfgs(memory_size, scale_init_precond), scale(-1.0) or
      scale_by_learning_rate(learning_rate), linesearch)``.

    Raises:
      ValueError: an argument is out of range.
      TypeError: ``linesearch`` is not a transform.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> def f(w): return jnp.sum((w - 1.0) ** 2) + jnp.sum(w**4)
      >>> tx = optx.lbfgs()
      >>> value_and_grad = optx.value_and_grad_from_state(f)
      >>> @jax.jit  # one compiled step: the line search is a loop, slow op by op
      ... def step(w, state):
      ...     value, grad = value_and_grad(w, state=state)
      ...     updates, state = tx.update(grad, state, w, value=value, grad=grad, value_fn=f)
      ...     return optx.apply_updates(w, updates), state
      >>> w = jnp.zeros(3)
      >>> state = tx.init(w)
      >>> for _ in range(10):
      ...     w, state = step(w, state)
      >>> w.round(5)  # the minimiser: 2 w**3 + w - 1 = 0
      Array([0.58975, 0.58975, 0.58975], dtype=float32)

    References:
      Liu and Nocedal, "On the limited memory BFGS method for large scale optimization",
      Mathematical Programming, 1989; Nocedal and Wright, "Numerical Optimization",
      Springer, 1999 (algorithms 7.4, 7.5, 3.5 and 3.6).
    """
    with hp.caller("lbfgs"):
        if linesearch is not None:
            checks.transform("lbfgs", "linesearch", linesearch)
        sign = scale(-1.0) if learning_rate is None else scale_by_learning_rate(learning_rate)
        return chain(
            scale_by_lbfgs(memory_size, scale_init_precond),
            sign,
            identity() if linesearch is None else linesearch,
        )
