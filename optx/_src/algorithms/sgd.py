"""Stochastic gradient descent, with optional (Nesterov) momentum."""

from __future__ import annotations

from typing import Literal

from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import ScalarOrSchedule, identity
from optx._src.combine import Chain, chain
from optx._src.momentum import Trace
from optx._src.scaling import scale_by_learning_rate

_CONVENTIONS = ("optax", "keras")


def sgd(
    learning_rate: ScalarOrSchedule,
    momentum: float | None = None,
    nesterov: bool = False,
    accumulator_dtype: DTypeLike | None = None,
    *,
    momentum_convention: Literal["optax", "keras"] = "optax",
) -> Chain:
    r"""Stochastic gradient descent, with optional momentum.

    With ``momentum_convention="optax"`` the velocity accumulates raw gradients and the
    learning rate of the current step scales it:

    .. math::
       t \leftarrow g + \mu\,t, \qquad \theta \leftarrow \theta - \eta_k\,t
       \quad (\theta \leftarrow \theta - \eta_k\,(g + \mu\,t) \text{ with Nesterov})

    With ``"keras"`` (Keras, TF OptimizerV2's ``ApplyKerasMomentum``) each step's learning
    rate enters the velocity before it accumulates:

    .. math::
       v \leftarrow \mu\,v - \eta_k\,g, \qquad \theta \leftarrow \theta + v
       \quad (\theta \leftarrow \theta + \mu\,v - \eta_k\,g \text{ with Nesterov})

    :math:`\eta_k` is ``learning_rate`` at step :math:`k`, :math:`\mu` = ``momentum``. The
    two agree for a constant learning rate (:math:`v = -\eta\,t`); with a schedule, the
    Keras velocity keeps each past gradient at the learning rate of its own step.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      momentum: :math:`\mu \in [0, 1]` (``"momentum"`` in the state), or ``None`` for plain
        SGD (no momentum buffer).
      nesterov: use Nesterov momentum.
      accumulator_dtype: dtype of the momentum buffer; ``None`` uses the parameters'.
      momentum_convention: ``"optax"`` or ``"keras"``: where the learning rate enters.

    Returns:
      ``chain(trace(momentum, nesterov), scale_by_learning_rate(learning_rate))`` for
      ``"optax"``, ``chain(scale_by_learning_rate(learning_rate), trace(momentum,
      nesterov))`` for ``"keras"`` (`identity` in place of the trace when ``momentum`` is
      ``None``).

    Raises:
      ValueError: ``learning_rate`` or ``momentum`` is out of range, or
        ``momentum_convention`` is unknown.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.sgd(0.1, momentum=0.9)
      >>> params = {"w": jnp.ones(2)}
      >>> updates, state = tx.update({"w": jnp.ones(2)}, tx.init(params), params)
      >>> updates
      {'w': Array([-0.1, -0.1], dtype=float32)}
      >>> halving = lambda count: 0.1 * 0.5**count
      >>> for convention in ("optax", "keras"):
      ...     tx = optx.sgd(halving, momentum=0.9, momentum_convention=convention)
      ...     state = tx.init(params)
      ...     for _ in range(2):
      ...         updates, state = tx.update({"w": jnp.ones(2)}, state, params)
      ...     print(convention, updates["w"][0])
      optax -0.095
      keras -0.14

    References:
      Robbins and Monro, "A Stochastic Approximation Method", 1951; Sutskever, Martens,
      Dahl and Hinton, "On the importance of initialization and momentum in deep
      learning", ICML 2013.
    """
    with hp.caller("sgd"):
        if momentum_convention not in _CONVENTIONS:
            raise ValueError(
                "`sgd` needs momentum_convention to be 'optax' or 'keras'. "
                f"Received: momentum_convention={momentum_convention!r}."
            )
        # Checked here too: without momentum no trace is built to check it.
        nesterov = checks.flag("sgd", "nesterov", nesterov)
        velocity = (
            identity()
            if momentum is None
            else Trace(momentum, nesterov, accumulator_dtype, hyperparam_name="momentum")
        )
        lr = scale_by_learning_rate(learning_rate)
        if momentum_convention == "keras":
            return chain(lr, velocity)
        return chain(velocity, lr)
