"""SGD with Polyak's step size, computed from the loss: `scale_by_polyak`, `polyak_sgd`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.combine import Chain, chain
from optx._src.scaling import scale_by_learning_rate
from optx._src.tree_reduce import abs_sq

_VARIANTS = ("sps", "sps+")
# A squared gradient norm at or below float64's machine epsilon counts as zero (as in optax).
_TINY = float(np.finfo(np.float64).eps)


class ScaleByPolyakState(NamedTuple):
    """State of `scale_by_polyak`: its hyperparameters."""

    hyperparams: dict[str, jax.Array]


@transform
class ScaleByPolyak(Transform):
    """See `scale_by_polyak`."""

    name = "scale_by_polyak"
    elementwise = True
    f_min: ScalarOrSchedule = hp.field(0.0)
    max_learning_rate: ScalarOrSchedule = hp.field(1.0, hp.NONNEG)
    eps: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    variant: str = "sps"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.variant not in _VARIANTS:
            raise ValueError(
                f"`{hp.current(self.name)}` needs variant to be 'sps' or 'sps+'. "
                f"Received: variant={self.variant!r}."
            )

    def init(self, params: Params) -> ScaleByPolyakState:
        del params
        return ScaleByPolyakState(self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: ScaleByPolyakState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByPolyakState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params
        value = extra.get("value")
        api = f"{self.name}.update"
        if value is None:
            raise TypeError(
                f"`{api}` needs the loss at the current parameters as a keyword argument. "
                f"Received: value=None. Call `update(updates, state, params, value=loss)`."
            )
        if np.shape(value) != ():
            raise ValueError(
                f"`{api}` needs value to be a scalar (the loss). "
                f"Received: value of shape {np.shape(value)}."
            )
        h = state.hyperparams
        leaves = jax.tree.leaves(updates)
        sq_norm = sum(
            (jnp.sum(abs_sq(g.astype(jnp.promote_types(g.dtype, jnp.float32)))) for g in leaves),
            jnp.zeros([], jnp.float32),
        )
        gap = jnp.asarray(value, jnp.float32) - h["f_min"]
        if self.variant == "sps+":
            gap = jnp.maximum(gap, 0.0)
        denominator = sq_norm + h["eps"]
        step = jnp.where(
            denominator <= _TINY,
            jnp.zeros_like(denominator),
            jnp.minimum(gap / denominator, h["max_learning_rate"]),
        )
        return jax.tree.map(lambda g: (g * step).astype(g.dtype), updates), state


def scale_by_polyak(
    f_min: float = 0.0, max_learning_rate: float = 1.0, eps: float = 0.0, variant: str = "sps"
) -> ScaleByPolyak:
    r"""Scales the updates by Polyak's step size, from the loss passed to ``update``.

    .. math::
       u = \gamma\,g, \qquad \gamma = \min\Bigl(\frac{f(\theta) - f^\star}
       {\lVert g\rVert^2 + \epsilon},\ \gamma_{\max}\Bigr)
       \quad (\gamma = 0 \text{ if } \lVert g\rVert^2 + \epsilon \le 2^{-52})

    with :math:`f(\theta)` the ``value=`` keyword argument of ``update``,
    :math:`f^\star` = ``f_min``, :math:`\gamma_{\max}` = ``max_learning_rate``,
    :math:`\epsilon` = ``eps`` and :math:`\lVert g\rVert` the global norm of the updates.
    The ``"sps+"`` variant uses :math:`\max(f(\theta) - f^\star, 0)`. The step keeps the
    sign of the updates: follow it with a negative scale (see `polyak_sgd`).

    Args:
      f_min: :math:`f^\star`, a lower bound of the loss (0 for models that interpolate).
      max_learning_rate: :math:`\gamma_{\max} \ge 0`, the largest step size.
      eps: :math:`\epsilon \ge 0`, added to the squared norm.
      variant: ``"sps"`` or ``"sps+"``.

    Returns:
      The transform. ``f_min``, ``max_learning_rate`` and ``eps`` are dynamic
      hyperparameters; ``update`` needs ``value=loss``.

    Raises:
      ValueError: ``max_learning_rate`` or ``eps`` is negative, or ``variant`` is unknown. At
        ``update``: ``value`` is not a scalar.
      TypeError: at ``update``, ``value`` is missing.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_polyak()
      >>> g = {"w": jnp.array([1.0, 1.0])}
      >>> tx.update(g, tx.init(g), value=0.5)[0]
      {'w': Array([0.25, 0.25], dtype=float32)}

    References:
      Loizou, Vaswani, Laradji and Lacoste-Julien, "Stochastic Polyak Step-size for SGD:
      An Adaptive Learning Rate for Fast Convergence", AISTATS 2021;
      Garrigos, Gower and Schaipp, "Function Value Learning: Adaptive Learning Rates Based
      on the Polyak Stepsize and Function Splitting in ERM", 2023.
    """
    return ScaleByPolyak(f_min, max_learning_rate, eps, variant)


def polyak_sgd(
    max_learning_rate: float = 1.0,
    scaling: ScalarOrSchedule = 1.0,
    f_min: float = 0.0,
    eps: float = 0.0,
    variant: str = "sps",
) -> Chain:
    r"""SGD with Polyak's step size (SPS), from the loss passed to ``update``.

    .. math::
       \theta_t = \theta_{t-1} - \gamma_t\,s\,g_t, \qquad \gamma_t = \min\Bigl(
       \frac{f(\theta_{t-1}) - f^\star}{\lVert s\,g_t\rVert^2 + \epsilon},\ \gamma_{\max}\Bigr)

    with :math:`s` = ``scaling`` (applied first, as optax does, so the step size sees the
    scaled gradient), :math:`f(\theta_{t-1})` the ``value=`` keyword argument of
    ``update``, :math:`f^\star` = ``f_min`` and :math:`\gamma_{\max}` =
    ``max_learning_rate`` (see `scale_by_polyak`).

    Args:
      max_learning_rate: :math:`\gamma_{\max} \ge 0`.
      scaling: :math:`s`, a non-negative number or a schedule; the state holds it as
        ``learning_rate`` (of `scale_by_learning_rate`).
      f_min: :math:`f^\star`, a lower bound of the loss.
      eps: added to the squared norm.
      variant: ``"sps"`` or ``"sps+"`` (the positive part of the gap).

    Returns:
      ``chain(scale_by_learning_rate(scaling), scale_by_polyak(f_min, max_learning_rate,
      eps, variant))``; its ``update`` needs ``value=loss``.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> f = lambda p: jnp.sum(p**2)
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> tx = optx.polyak_sgd()
      >>> state = tx.init(params)
      >>> for _ in range(3):
      ...     loss, grads = jax.value_and_grad(f)(params)
      ...     updates, state = tx.update(grads, state, params, value=loss)
      ...     params = optx.apply_updates(params, updates)
      >>> float(f(params))
      0.21875

    References:
      Loizou, Vaswani, Laradji and Lacoste-Julien, "Stochastic Polyak Step-size for SGD:
      An Adaptive Learning Rate for Fast Convergence", AISTATS 2021.
    """
    with hp.caller("polyak_sgd"):
        if not callable(scaling):
            scaling = hp.validate("polyak_sgd", "scaling", scaling, hp.NONNEG)
        return chain(
            scale_by_learning_rate(scaling),
            scale_by_polyak(f_min, max_learning_rate, eps, variant),
        )
