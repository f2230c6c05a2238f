"""Static loss scaling for low-precision training: `scale_loss` and `unscale_gradients`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from jax.typing import ArrayLike

from optx._src.base import Params, Transform, Updates, transform
from optx._src.tree import is_none


def scale_loss(loss: ArrayLike, loss_scale_factor: ArrayLike) -> jax.Array:
    """Multiplies a loss by the loss-scale factor (before differentiating it).

    Pair it with `unscale_gradients` at the head of the chain, with the same factor.

    Args:
      loss: the loss.
      loss_scale_factor: the factor; pass ``optx.get_hyperparams(state)["loss_scale_factor"]``
        to use the one held in the optimizer state.

    Returns:
      ``loss * loss_scale_factor``.

    Example:
      >>> import optx
      >>> float(optx.scale_loss(0.5, 1024.0))
      512.0
    """
    return jax.numpy.asarray(loss) * loss_scale_factor


class UnscaleGradientsState(NamedTuple):
    """State of `unscale_gradients`: the factor."""

    hyperparams: dict[str, jax.Array]


@transform
class UnscaleGradients(Transform):
    """See `unscale_gradients`."""

    name = "unscale_gradients"
    hyperparams = ("loss_scale_factor",)
    loss_scale_factor: float = 1.0

    def init(self, params: Params) -> UnscaleGradientsState:
        del params
        return UnscaleGradientsState(self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: UnscaleGradientsState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, UnscaleGradientsState]:
        del params, extra
        s = state.hyperparams["loss_scale_factor"]
        updates = jax.tree.map(
            lambda u: None if u is None else (u / s).astype(u.dtype), updates, is_leaf=is_none
        )
        return updates, state


def unscale_gradients(loss_scale_factor: float) -> UnscaleGradients:
    r"""Divides the gradients by the loss-scale factor: :math:`g \leftarrow g / s`.

    Gradients of ``scale_loss(loss, s)`` are ``s`` times too large; put this first in the
    chain (Keras's ``loss_scale_factor``) so clipping and the rest see true gradients.

    Args:
      loss_scale_factor: :math:`s > 0` (a dynamic hyperparameter, ``"loss_scale_factor"``).

    Returns:
      The transform.

    Raises:
      ValueError: ``loss_scale_factor`` is not positive and finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.unscale_gradients(1024.0)
      >>> tx.update({"w": jnp.array([512.0])}, tx.init(None))[0]
      {'w': Array([0.5], dtype=float32)}
    """
    return UnscaleGradients(loss_scale_factor)
