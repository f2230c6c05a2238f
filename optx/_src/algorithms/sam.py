"""Sharpness-aware minimisation: `sam`, a wrapper of two optimizers, and `normalize`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, tree_reduce
from optx._src.algorithms.lookahead import restart_where
from optx._src.base import (
    EmptyState,
    GradientTransformationLike,
    OptState,
    Params,
    Transform,
    Updates,
    apply_updates,
    transform,
    zero_count,
)
from optx._src.combine import accepts_extra, call_update
from optx._src.tree import is_none

NormalizeState = EmptyState
"""The state of `normalize` (it keeps none): `EmptyState`, as in optax."""


@transform
class Normalize(Transform):
    """See `normalize`."""

    name = "normalize"
    elementwise = True

    def init(self, params: Params) -> EmptyState:
        del params
        return EmptyState()

    def update(
        self, updates: Updates, state: EmptyState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, EmptyState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        g_norm = tree_reduce.norm([u for u in jax.tree.leaves(updates) if u is not None])
        return jax.tree.map(
            lambda u: None if u is None else (u / g_norm).astype(u.dtype),
            updates,
            is_leaf=is_none,
        ), state


def normalize() -> Normalize:
    r"""Divides the updates by their global L2 norm.

    .. math:: u \leftarrow u / \lVert u \rVert, \qquad
       \lVert u \rVert = \sqrt{\textstyle\sum_\text{leaves} \sum u^2}

    SAM's adversarial step is ``chain(normalize(), sgd(rho))``: a step of length
    :math:`\rho` up the gradient (see `sam`). A zero update gives NaN, as in optax.

    Returns:
      The transform (its state is `NormalizeState`, an `EmptyState`).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.contrib.normalize()
      >>> tx.update({"a": jnp.array([3.0]), "b": jnp.array([-4.0])}, tx.init(None))[0]
      {'a': Array([0.6], dtype=float32), 'b': Array([-0.8], dtype=float32)}
    """
    return Normalize()


class SAMState(NamedTuple):
    """State of `sam`.

    Attributes:
      steps_since_sync: adversarial steps since the last outer step, in
        ``[0, sync_period)``.
      opt_state: the outer optimizer's state.
      adv_state: the adversarial optimizer's state.
      cache: the parameters at the last outer step (``None`` with ``opaque_mode``).
    """

    steps_since_sync: jax.Array
    opt_state: OptState
    adv_state: OptState
    cache: Params | None


def _where(cond: jax.Array, if_true: Any, if_false: Any) -> Any:
    return jax.tree.map(lambda a, b: jnp.where(cond, a, b).astype(b.dtype), if_true, if_false)


@transform
class Sam(Transform):
    """See `sam`."""

    name = "sam"
    optimizer: GradientTransformationLike = None  # type: ignore[assignment]
    adv_optimizer: GradientTransformationLike = None  # type: ignore[assignment]
    sync_period: int = 2
    reset_state: bool = True
    opaque_mode: bool = False
    batch_axis_name: str | None = None

    def __post_init__(self) -> None:
        checks.transform(self.name, "optimizer", self.optimizer)
        checks.transform(self.name, "adv_optimizer", self.adv_optimizer)
        period = checks.nonneg_int(self.name, "sync_period", self.sync_period, 1)
        object.__setattr__(self, "sync_period", period)
        if self.batch_axis_name is not None and not isinstance(self.batch_axis_name, str):
            raise TypeError(
                f"`sam` needs batch_axis_name to be None or an axis name (a str). "
                f"Received: batch_axis_name={self.batch_axis_name!r}."
            )
        super().__post_init__()

    def init(self, params: Params) -> SAMState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        # A copy, so that the parameters and the cache can both be donated to a jitted step.
        cache = None
        if not self.opaque_mode:
            cache = jax.tree.map(lambda p: jnp.array(p, jnp.result_type(p)), params)
        return SAMState(
            zero_count(), self.optimizer.init(params), self.adv_optimizer.init(params), cache
        )

    def update(
        self, updates: Updates, state: SAMState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, SAMState]:
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        grad_fn = extra.pop("grad_fn", None)
        if self.opaque_mode:
            return self._opaque(updates, state, params, grad_fn, extra)
        checks.same_tree(api, updates, state.cache, "updates", "the state")
        checks.same_tree(api, params, state.cache, "params", "the state")
        first = state.steps_since_sync == 0
        last = state.steps_since_sync == self.sync_period - 1
        adv, opt = self.adv_optimizer, self.optimizer
        adv_u, adv_state = call_update(
            adv, accepts_extra(adv), updates, state.adv_state, params, extra
        )
        # The adversarial optimizer descends: its negated step climbs the loss.
        adv_u = jax.tree.map(jnp.negative, adv_u)
        # The outer step starts from the cached parameters: it also undoes the climb.
        opt_u, opt_state = call_update(
            opt, accepts_extra(opt), updates, state.opt_state, state.cache, extra
        )
        opt_u = jax.tree.map(
            lambda c, p, u: (c - p + u).astype(u.dtype), state.cache, params, opt_u
        )
        if self.reset_state:
            adv_state = restart_where(last, adv_state, adv.init(params))
        else:
            adv_state = _where(last, state.adv_state, adv_state)
        steps = ((state.steps_since_sync + 1) % self.sync_period).astype(jnp.int32)
        return _where(last, opt_u, adv_u), SAMState(
            steps,
            _where(last, opt_state, state.opt_state),
            adv_state,
            _where(first, params, state.cache),
        )

    def _opaque(
        self,
        updates: Updates,
        state: SAMState,
        params: Params,
        grad_fn: Callable[[Params, int], Updates] | None,
        extra: dict[str, Any],
    ) -> tuple[Updates, SAMState]:
        if grad_fn is None:
            raise ValueError(
                "`sam.update` needs grad_fn, a function (params, i) -> gradients, when "
                "opaque_mode=True. Received: grad_fn=None. Call "
                "`update(grads, state, params, grad_fn=grad_fn)`."
            )
        checks.same_tree(f"{self.name}.update", params, updates, "params", "updates")
        adv, opt = self.adv_optimizer, self.optimizer
        adv_params, grads, adv_state = params, updates, state.adv_state
        # The adversarial steps run here, unseen by the caller; only the outer step leaves.
        for i in range(self.sync_period - 1):
            adv_u, adv_state = call_update(
                adv, accepts_extra(adv), grads, adv_state, adv_params, extra
            )
            adv_params = apply_updates(adv_params, jax.tree.map(jnp.negative, adv_u))
            grads = grad_fn(adv_params, i)
            if self.batch_axis_name is not None:
                grads = jax.lax.pmean(grads, axis_name=self.batch_axis_name)
        if self.reset_state:
            adv_state = restart_where(True, adv_state, adv.init(params))
        out, opt_state = call_update(opt, accepts_extra(opt), grads, state.opt_state, params, extra)
        return out, SAMState(zero_count(), opt_state, adv_state, None)


def sam(
    optimizer: GradientTransformationLike,
    adv_optimizer: GradientTransformationLike,
    sync_period: int = 2,
    reset_state: bool = True,
    opaque_mode: bool = False,
    batch_axis_name: str | None = None,
) -> Sam:
    r"""Sharpness-aware minimisation (SAM): climb, then descend from where you started.

    With :math:`k` = ``sync_period``, each cycle of :math:`k` calls to ``update`` takes
    :math:`k - 1` adversarial steps, then one outer step:

    .. math::
       \tilde\theta_{j} = \tilde\theta_{j-1} - a_j \quad (j = 1, \ldots, k-1), \qquad
       \theta' = \theta + o(g_k)

    where :math:`\tilde\theta_0 = \theta` are the parameters at the start of the cycle,
    :math:`a_j` is ``adv_optimizer``'s update of the gradient at :math:`\tilde\theta_{j-1}`
    (negated: a step up the loss), and :math:`o(g_k)` is ``optimizer``'s update of the
    gradient :math:`g_k` taken at :math:`\tilde\theta_{k-1}`, applied to :math:`\theta`.
    The paper's SAM is ``sam(sgd(lr), chain(normalize(), sgd(rho)), sync_period=2)``:
    :math:`\tilde\theta = \theta + \rho\, g / \lVert g \rVert`, then
    :math:`\theta' = \theta - \eta\, g(\tilde\theta)`.

    By default (``opaque_mode=False``) each ``update`` is one step: the adversarial ones
    move the parameters (the caller sees them), and the outer step's update takes them back
    to the cycle's start (cached in the state) plus the outer update. With
    ``opaque_mode=True`` one ``update`` runs the whole cycle: call
    ``update(grads, state, params, grad_fn=grad_fn)`` with ``grad_fn(params, i)`` the
    gradient at ``params`` for adversarial step ``i``; it is called ``sync_period - 1``
    times, and the returned update is the outer step's only (so statistics updated by the
    forward pass, such as batch norm's, see the real parameters only). Other keyword
    arguments of ``update`` are passed to both optimizers.

    Args:
      optimizer: the outer optimizer (an optx or optax transform).
      adv_optimizer: the adversarial optimizer; its update is negated.
      sync_period: :math:`k`, an int >= 1.
      reset_state: re-initialise ``adv_optimizer``'s state (not its hyperparameters)
        after each outer step.
      opaque_mode: run the adversarial steps inside ``update`` (needs ``grad_fn``).
      batch_axis_name: with ``opaque_mode``, the mapped axis to average the adversarial
        gradients over (``jax.lax.pmean``), for data-parallel training.

    Returns:
      The transform; its state is `SAMState`.

    Raises:
      TypeError: an optimizer is not a transform, a flag is not a bool, or
        ``batch_axis_name`` is not a str.
      ValueError: ``sync_period`` is not an int >= 1; ``update`` gets no ``params``, or no
        ``grad_fn`` in ``opaque_mode``.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> loss = lambda p: jnp.sum(p**2)
      >>> adv = optx.chain(optx.contrib.normalize(), optx.sgd(0.1))
      >>> tx = optx.contrib.sam(optx.sgd(0.1), adv)
      >>> params = jnp.array([1.0, 0.0])
      >>> state = tx.init(params)
      >>> for _ in range(2):  # up by 0.1 along g / |g|, then down from the start
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      ...     print(params)
      [1.1 0. ]
      [0.78 0.  ]

    References:
      Foret, Kleiner, Mobahi and Neyshabur, "Sharpness-Aware Minimization for Efficiently
      Improving Generalization", ICLR 2021.
    """
    return Sam(optimizer, adv_optimizer, sync_period, reset_state, opaque_mode, batch_axis_name)
