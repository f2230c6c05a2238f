"""Adadelta: `scale_by_adadelta` and `adadelta`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.combine import Chain, MaskSpec, chain
from optx._src.moments import abs_sq, decay_pair, real_zeros_like, unzip
from optx._src.options import dtype_options
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights


class ScaleByAdaDeltaState(NamedTuple):
    """State of `scale_by_adadelta`: moving averages of squared gradients and updates."""

    e_g: Params
    e_x: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByAdaDelta(Transform):
    """See `scale_by_adadelta`."""

    name = "scale_by_adadelta"
    elementwise = True
    rho: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-6, hp.NONNEG)
    accumulator_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "accumulator_dtype")

    def init(self, params: Params) -> ScaleByAdaDeltaState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        return ScaleByAdaDeltaState(
            real_zeros_like(params, self.accumulator_dtype),
            real_zeros_like(params, self.accumulator_dtype),
            self.init_hyperparams(),
        )

    def update(
        self,
        updates: Updates,
        state: ScaleByAdaDeltaState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByAdaDeltaState]:
        del params, extra
        checks.same_tree(
            f"{self.name}.update", updates, state.e_g, "updates", "the state", real_slots=True
        )
        h = state.hyperparams
        (r, c), eps = decay_pair(h, "rho"), h["eps"]

        def leaf(g: jax.Array, eg: jax.Array, ex: jax.Array) -> tuple[jax.Array, ...]:
            new_eg = c * abs_sq(g) + r * eg
            u = (jnp.sqrt(ex + eps) / jnp.sqrt(new_eg + eps)) * g
            new_ex = c * abs_sq(u) + r * ex
            return u.astype(g.dtype), new_eg.astype(eg.dtype), new_ex.astype(ex.dtype)

        u, e_g, e_x = unzip(jax.tree.map(leaf, updates, state.e_g, state.e_x), updates, 3)
        return u, ScaleByAdaDeltaState(e_g, e_x, h)


def scale_by_adadelta(
    rho: float = 0.9, eps: float = 1e-6, *, accumulator_dtype: DTypeLike | None = None
) -> ScaleByAdaDelta:
    r"""Rescales updates by Adadelta's ratio of root-mean-square updates to gradients.

    .. math::
       E[g^2]_t = \rho\,E[g^2]_{t-1} + (1-\rho)\,g_t^2, \qquad
       u_t = \frac{\sqrt{E[u^2]_{t-1} + \epsilon}}{\sqrt{E[g^2]_t + \epsilon}}\, g_t, \\
       E[u^2]_t = \rho\,E[u^2]_{t-1} + (1-\rho)\,u_t^2

    with :math:`\rho` = ``rho`` and :math:`\epsilon` = ``eps``; both averages start at 0.
    The output points along the gradient: negate it (a learning rate) to descend.
    For complex parameters the squares are :math:`|g_t|^2` and :math:`|u_t|^2`: both
    averages are real (in the real dtype of ``accumulator_dtype``), the update complex.

    Args:
      rho: :math:`\rho`, the decay of both moving averages, in [0, 1).
      eps: :math:`\epsilon \ge 0`.
      accumulator_dtype: dtype of both averages; ``None`` uses each parameter's dtype (its
        real dtype, for a complex parameter; a complex option keeps its real dtype).

    Returns:
      The transform. ``rho`` and ``eps`` are dynamic hyperparameters.

    Raises:
      ValueError: ``rho`` is outside [0, 1) or ``eps`` is negative.
      TypeError: ``accumulator_dtype`` is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_adadelta(rho=0.0, eps=1.0)
      >>> updates, _ = tx.update({"w": jnp.array([0.0, 3.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates
      {'w': Array([0. , 0.9486833], dtype=float32)}

    References:
      Zeiler, "ADADELTA: An Adaptive Learning Rate Method", arXiv:1212.5701, 2012.
    """
    return ScaleByAdaDelta(rho, eps, accumulator_dtype)


def adadelta(
    learning_rate: ScalarOrSchedule | None = None,
    rho: float = 0.9,
    eps: float = 1e-6,
    weight_decay: float = 0.0,
    weight_decay_mask: MaskSpec | None = None,
    *,
    accumulator_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The Adadelta optimizer.

    .. math::
       \theta_t = \theta_{t-1} - \eta_t\, u_t, \qquad
       u_t = \frac{\sqrt{E[u^2]_{t-1} + \epsilon}}{\sqrt{E[g'^2]_t + \epsilon}}\, g'_t,
       \qquad g'_t = g_t + \lambda\,\theta_{t-1}

    with the moving averages of `scale_by_adadelta`, :math:`\eta` = ``learning_rate``
    (1 when ``None``), :math:`\rho` = ``rho``, :math:`\epsilon` = ``eps`` and
    :math:`\lambda` = ``weight_decay``, added to the gradient before the rescaling (as in
    optax).

    ``learning_rate=None`` means :math:`\eta = 1`, Zeiler's method, which descends. In optax
    0.2.8, ``optax.adadelta(None)`` leaves out the learning-rate stage, sign flip included,
    and so climbs the objective; pass ``learning_rate=1.0`` there for the same numbers.
    Keras's ``Adadelta(learning_rate, rho, epsilon)`` is ``adadelta(learning_rate, rho=rho,
    eps=epsilon)`` (its defaults: 0.001, 0.95, 1e-7).

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule; ``None`` is 1.0.
      rho: :math:`\rho`, the decay of the moving averages, in [0, 1).
      eps: :math:`\epsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`.
      weight_decay_mask: which parameters to decay (see `add_decayed_weights`); ``None``
        decays all.
      accumulator_dtype: dtype of both averages; ``None`` uses each parameter's dtype (its
        real dtype, for a complex parameter; a complex option keeps its real dtype).

    Returns:
      ``chain(add_decayed_weights(weight_decay, weight_decay_mask),
      scale_by_adadelta(rho, eps), scale_by_learning_rate(learning_rate))``. Its
      ``update`` reads the parameters (for the weight decay).

    Raises:
      ValueError: an argument is out of range.
      TypeError: ``accumulator_dtype`` is not a floating dtype.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> f = lambda p: jnp.sum(p**2)
      >>> params = start = jnp.array([1.0, -2.0])
      >>> tx = optx.adadelta()
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     updates, state = tx.update(jax.grad(f)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> float(f(start)), round(float(f(params)), 2)
      (5.0, 3.06)

    References:
      Zeiler, "ADADELTA: An Adaptive Learning Rate Method", arXiv:1212.5701, 2012.
    """
    with hp.caller("adadelta"):
        return chain(
            add_decayed_weights(weight_decay, weight_decay_mask),
            scale_by_adadelta(rho, eps, accumulator_dtype=accumulator_dtype),
            scale_by_learning_rate(1.0 if learning_rate is None else learning_rate),
        )
