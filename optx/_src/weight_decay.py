"""Decoupled weight decay: `add_decayed_weights`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import Params, Transform, Updates, transform
from optx._src.combine import MaskSpec, masked
from optx._src.tree import is_none


class AddDecayedWeightsState(NamedTuple):
    """State of `add_decayed_weights`: the decay rate."""

    hyperparams: dict[str, jax.Array]


@transform
class AddDecayedWeights(Transform):
    """See `add_decayed_weights`."""

    name = "add_decayed_weights"
    hyperparams = ("weight_decay",)
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if callable(self.weight_decay):
            raise TypeError(
                f"`{hp.current(self.name)}` needs weight_decay to be a number (a schedule of "
                f"the decay is not supported; it is multiplied by the scheduled learning rate "
                f"when placed before `scale_by_learning_rate`). "
                f"Received: weight_decay={self.weight_decay!r}."
            )
        super().__post_init__()

    def init(self, params: Params) -> AddDecayedWeightsState:
        del params
        return AddDecayedWeightsState(self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: AddDecayedWeightsState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, AddDecayedWeightsState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params")
        wd = state.hyperparams["weight_decay"]
        updates = jax.tree.map(
            lambda u, p: None if u is None else (u + wd * p).astype(u.dtype),
            updates,
            params,
            is_leaf=is_none,
        )
        return updates, state


def add_decayed_weights(weight_decay: float = 0.0, mask: MaskSpec | None = None) -> Any:
    r"""Adds ``weight_decay * params`` to the updates (decoupled weight decay).

    .. math:: u \leftarrow u + \lambda\,\theta

    Placed before the learning rate in a chain, this is AdamW's decay
    (:math:`\theta \leftarrow \theta - \eta(\hat u + \lambda\theta)`).

    Args:
      weight_decay: :math:`\lambda \ge 0` (a dynamic hyperparameter, ``"weight_decay"``).
      mask: which parameters to decay: a pytree of bools, a callable
        ``params -> pytree of bools``, or regular expression(s) on parameter path names
        (see `masked`). ``None`` decays every parameter.

    Returns:
      The transform (wrapped in `masked` when ``mask`` is given).

    Raises:
      ValueError: ``weight_decay`` is negative or non-finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.add_decayed_weights(0.1, mask="kernel")
      >>> params = {"kernel": jnp.ones(2), "bias": jnp.ones(2)}
      >>> updates, _ = tx.update(optx.tree.zeros_like(params), tx.init(params), params)
      >>> updates["kernel"], updates["bias"]
      (Array([0.1, 0.1], dtype=float32), Array([0., 0.], dtype=float32))

    References:
      Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.
    """
    decay = AddDecayedWeights(weight_decay)
    return decay if mask is None else masked(decay, mask)
