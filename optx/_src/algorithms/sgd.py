"""Stochastic gradient descent, with optional (Nesterov) momentum."""

from __future__ import annotations

from jax.typing import DTypeLike

from optx._src import hyperparams as hp
from optx._src.base import ScalarOrSchedule, identity
from optx._src.combine import Chain, chain
from optx._src.momentum import Trace
from optx._src.scaling import scale_by_learning_rate


def sgd(
    learning_rate: ScalarOrSchedule,
    momentum: float | None = None,
    nesterov: bool = False,
    accumulator_dtype: DTypeLike | None = None,
) -> Chain:
    r"""Stochastic gradient descent, with optional momentum.

    .. math::
       t \leftarrow g + \mu\,t, \qquad \theta \leftarrow \theta - \eta\,t
       \quad (\theta \leftarrow \theta - \eta\,(g + \mu\,t) \text{ with Nesterov})

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      momentum: :math:`\mu \in [0, 1]`, or ``None`` for plain SGD (no momentum buffer).
      nesterov: use Nesterov momentum.
      accumulator_dtype: dtype of the momentum buffer; ``None`` uses the parameters'.

    Returns:
      ``chain(trace(momentum, nesterov), scale_by_learning_rate(learning_rate))``
      (`identity` in place of the trace when ``momentum`` is ``None``).

    Raises:
      ValueError: ``learning_rate`` or ``momentum`` is out of range.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.sgd(0.1, momentum=0.9)
      >>> params = {"w": jnp.ones(2)}
      >>> updates, state = tx.update({"w": jnp.ones(2)}, tx.init(params), params)
      >>> updates
      {'w': Array([-0.1, -0.1], dtype=float32)}

    References:
      Robbins and Monro, "A Stochastic Approximation Method", 1951; Sutskever, Martens,
      Dahl and Hinton, "On the importance of initialization and momentum in deep
      learning", ICML 2013.
    """
    with hp.caller("sgd"):
        return chain(
            identity()
            if momentum is None
            else Trace(momentum, nesterov, accumulator_dtype, hyperparam_name="momentum"),
            scale_by_learning_rate(learning_rate),
        )
