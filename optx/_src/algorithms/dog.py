"""Distance over gradients, DoG and DoWG: `dog`, `dowg`.

One global step size from the distance travelled from the initial parameters over the
gradients seen (`scale_by_distance_over_gradients` has one per parameter array).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, reductions
from optx._src import hyperparams as hp
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    identity,
    transform,
)
from optx._src.combine import Chain, MaskSpec, chain
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights

_INIT_STEPS = ("distance", "learning_rate", "heuristic")


def _copy(params: Params, dtype: Any = None) -> Params:
    """A copy of the parameters (so that both can be donated to a jitted step)."""
    return jax.tree.map(lambda p: jnp.array(p, dtype or jnp.result_type(p)), params)


def _scaled(updates: Updates, factor: jax.Array) -> Updates:
    return jax.tree.map(lambda g: (g * factor).astype(g.dtype), updates)


class DoGState(NamedTuple):
    r"""State of `dog`'s step size.

    Attributes:
      is_init_step: whether the next step is the first.
      init_params: the parameters at ``init``.
      max_dist: :math:`\bar r_t`, the largest distance from them so far (float32, or
        float64 where a parameter is float64).
      sum_sq_norm_grads: :math:`G_t`, the sum of the squared gradient norms (same dtype).
      hyperparams: the dynamic hyperparameters.
    """

    is_init_step: jax.Array
    init_params: Params
    max_dist: jax.Array
    sum_sq_norm_grads: jax.Array
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByDoG(Transform):
    """DoG's step size (see `dog`)."""

    name = "scale_by_dog"
    elementwise = True
    init_step_type: str = "heuristic"
    init_step_value: ScalarOrSchedule = hp.field(1e-6, hp.POSITIVE)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)

    def __post_init__(self) -> None:
        if self.init_step_type not in _INIT_STEPS:
            raise ValueError(
                f"`{hp.current(self.name)}` needs init_step[0] to be one of 'distance', "
                f"'learning_rate', 'heuristic'. Received: init_step[0]={self.init_step_type!r}."
            )
        super().__post_init__()

    def unused_hyperparams(self) -> frozenset[str]:
        # A first learning rate is read at the first update; a distance only at `init`.
        return (
            frozenset()
            if self.init_step_type == "learning_rate"
            else frozenset({"init_step_value"})
        )

    def init(self, params: Params) -> DoGState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        dtype = reductions.scalar_dtype(params)
        if self.init_step_type == "learning_rate":
            r0 = jnp.zeros([], dtype)
        else:
            r0 = jnp.asarray(self.initial("init_step_value"), dtype)
            if self.init_step_type == "heuristic":
                r0 = r0 * (1 + jnp.sqrt(reductions.sq_norm(params, dtype)))
        return DoGState(
            jnp.asarray(True), _copy(params), r0, jnp.zeros([], dtype), self.init_hyperparams()
        )

    def update(
        self, updates: Updates, state: DoGState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, DoGState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.init_params, "updates", "the state")
        checks.same_tree(api, params, state.init_params, "params", "the state")
        h = state.hyperparams
        dtype = state.max_dist.dtype
        max_dist = jnp.maximum(
            state.max_dist, jnp.sqrt(reductions.sq_distance(params, state.init_params, dtype))
        )
        sum_sq = state.sum_sq_norm_grads + reductions.sq_norm(updates, dtype)
        lr = max_dist / jnp.sqrt(sum_sq + h["eps"])
        if self.init_step_type == "learning_rate":
            lr = jnp.where(state.is_init_step, h["init_step_value"].astype(dtype), lr)
        return _scaled(updates, lr), DoGState(
            jnp.asarray(False), state.init_params, max_dist, sum_sq, h
        )


def _check_init_step(api: str, init_step: Any) -> None:
    if not isinstance(init_step, tuple | list) or len(init_step) != 2:
        raise ValueError(
            f"`{hp.current(api)}` needs init_step to be a pair (kind, value), kind one of "
            f"'distance', 'learning_rate', 'heuristic'. Received: init_step={init_step!r}."
        )


def dog(
    learning_rate: ScalarOrSchedule = 1.0,
    init_step: tuple[str, float] = ("heuristic", 1e-6),
    eps: float = 1e-8,
    weight_decay: float | None = None,
    mask: MaskSpec | None = None,
) -> Chain:
    r"""DoG (distance over gradients): SGD with a step size that needs no tuning.

    .. math::
       \bar r_t = \max\bigl(\bar r_{t-1},\ \lVert\theta_{t-1} - \theta_0\rVert\bigr), \quad
       G_t = G_{t-1} + \lVert g_t\rVert^2, \quad
       \theta_t = \theta_{t-1} - \eta_t\,\frac{\bar r_t}{\sqrt{G_t + \epsilon}}\,g_t

    with norms over the whole tree, :math:`\eta_t` = ``learning_rate`` (a multiplier, 1 by
    default) and :math:`\epsilon` = ``eps``. ``init_step`` sets the start:
    ``("distance", r)`` gives :math:`\bar r_0 = r`; ``("heuristic", a)`` gives
    :math:`\bar r_0 = a\,(1 + \lVert\theta_0\rVert)` (``a`` = 1e-6 suits most models,
    1e-4 those with batch normalisation); ``("learning_rate", s)`` makes the first step size
    :math:`s` and :math:`\bar r_0 = 0`. With ``weight_decay`` :math:`\lambda`,
    :math:`g_t + \lambda\theta_{t-1}` replaces :math:`g_t` (on the parameters ``mask``
    selects). ``init`` must see the real initial parameters. The authors recommend
    evaluating an average of the iterates.

    Args:
      learning_rate: :math:`\eta \ge 0`, or a schedule.
      init_step: ``(kind, value)``, kind one of ``"distance"``, ``"learning_rate"``,
        ``"heuristic"``; value > 0 (``"init_step_value"`` in the state with
        ``"learning_rate"``, read at ``init`` otherwise).
      eps: :math:`\epsilon \ge 0`, added to :math:`G_t`.
      weight_decay: :math:`\lambda \ge 0`, or ``None`` for none.
      mask: which parameters to decay (see `add_decayed_weights`).

    Returns:
      ``chain(add_decayed_weights(weight_decay, mask) or identity(), <DoG's step size>,
      scale_by_learning_rate(learning_rate))``; the step size's state is `DoGState`, and
      its ``update`` needs the parameters.

    Raises:
      ValueError: ``init_step`` is not such a pair, or an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> tx = optx.contrib.dog(init_step=("learning_rate", 0.1))
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(50):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 1e-3)  # from 14
      True

    References:
      Ivgi, Hinder and Carmon, "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step
      Size Schedule", ICML 2023.
    """
    _check_init_step("dog", init_step)
    with hp.caller("dog", {"init_step_value": "init_step[1]"}):
        return chain(
            identity() if weight_decay is None else add_decayed_weights(weight_decay, mask),
            ScaleByDoG(init_step[0], init_step[1], eps),
            scale_by_learning_rate(learning_rate),
        )


class DoWGState(NamedTuple):
    r"""State of `dowg`'s step size.

    Attributes:
      init_params: the parameters at ``init``.
      weighted_sq_norm_grads: :math:`v_t`, the distance-weighted sum of squared gradient
        norms (float32, or float64 where a parameter is float64).
      estim_sq_dist: :math:`\bar r_t^2`, the largest squared distance so far (same dtype).
      hyperparams: the dynamic hyperparameters.
    """

    init_params: Params
    weighted_sq_norm_grads: jax.Array
    estim_sq_dist: jax.Array
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByDoWG(Transform):
    """DoWG's step size (see `dowg`)."""

    name = "scale_by_dowg"
    elementwise = True
    init_estim_sq_dist: ScalarOrSchedule | None = hp.field(None, hp.POSITIVE, optional=True)
    eps: ScalarOrSchedule = hp.field(1e-4, hp.POSITIVE)

    def unused_hyperparams(self) -> frozenset[str]:
        return frozenset({"init_estim_sq_dist"})  # read at `init` only

    def init(self, params: Params) -> DoWGState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        dtype = reductions.scalar_dtype(params)
        first = "eps" if self.init_estim_sq_dist is None else "init_estim_sq_dist"
        return DoWGState(
            _copy(params),
            jnp.zeros([], dtype),
            jnp.asarray(self.initial(first), dtype),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: DoWGState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, DoWGState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.init_params, "updates", "the state")
        checks.same_tree(api, params, state.init_params, "params", "the state")
        dtype = state.estim_sq_dist.dtype
        sq_dist = jnp.maximum(
            state.estim_sq_dist, reductions.sq_distance(params, state.init_params, dtype)
        )
        weighted = sq_dist * reductions.sq_norm(updates, dtype) + state.weighted_sq_norm_grads
        lr = sq_dist / (jnp.sqrt(weighted) + state.hyperparams["eps"])
        return _scaled(updates, lr), DoWGState(
            state.init_params, weighted, sq_dist, state.hyperparams
        )


def dowg(
    learning_rate: ScalarOrSchedule = 1.0,
    init_estim_sq_dist: float | None = None,
    eps: float = 1e-4,
    weight_decay: float | None = None,
    mask: MaskSpec | None = None,
) -> Chain:
    r"""DoWG (distance over weighted gradients): a parameter-free step size for SGD.

    .. math::
       \bar r_t^2 = \max\bigl(\bar r_{t-1}^2,\ \lVert\theta_{t-1} - \theta_0\rVert^2\bigr),
       \quad v_t = v_{t-1} + \bar r_t^2\,\lVert g_t\rVert^2, \quad
       \theta_t = \theta_{t-1} - \eta_t\,\frac{\bar r_t^2}{\sqrt{v_t} + \epsilon}\,g_t

    with norms over the whole tree, :math:`\bar r_0^2` = ``init_estim_sq_dist`` (default
    :math:`\epsilon`), :math:`\eta_t` = ``learning_rate`` and :math:`\epsilon` = ``eps``.
    With ``weight_decay`` :math:`\lambda`, :math:`g_t + \lambda\theta_{t-1}` replaces
    :math:`g_t` (on the parameters ``mask`` selects).

    Args:
      learning_rate: :math:`\eta \ge 0`, or a schedule.
      init_estim_sq_dist: :math:`\bar r_0^2 > 0`, a guess of the squared distance to a
        solution (read at ``init``); ``None`` uses ``eps``.
      eps: :math:`\epsilon > 0`, added to the denominator.
      weight_decay: :math:`\lambda \ge 0`, or ``None`` for none.
      mask: which parameters to decay (see `add_decayed_weights`).

    Returns:
      ``chain(add_decayed_weights(weight_decay, mask) or identity(), <DoWG's step size>,
      scale_by_learning_rate(learning_rate))``; the step size's state is `DoWGState`, and
      its ``update`` needs the parameters.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> tx = optx.contrib.dowg()
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p**2)
      >>> for _ in range(50):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 1e-3)  # from 14
      True

    References:
      Khaled, Mishchenko and Jin, "DoWG Unleashed: An Efficient Universal Parameter-Free
      Gradient Descent Method", NeurIPS 2023.
    """
    with hp.caller("dowg"):
        return chain(
            identity() if weight_decay is None else add_decayed_weights(weight_decay, mask),
            ScaleByDoWG(init_estim_sq_dist, eps),
            scale_by_learning_rate(learning_rate),
        )
