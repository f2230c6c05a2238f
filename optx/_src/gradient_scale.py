"""`scale_gradient`: the identity on the forward pass, a scaled gradient on the backward."""

from __future__ import annotations

import numbers
from typing import Any

import jax
import numpy as np
from jax.typing import ArrayLike


@jax.custom_vjp
def _scaled(inputs: Any, scale: ArrayLike) -> Any:
    del scale  # read by the backward pass only
    return inputs


def _scaled_fwd(inputs: Any, scale: ArrayLike) -> tuple[Any, ArrayLike]:
    return inputs, scale


def _scaled_bwd(scale: ArrayLike, cotangents: Any) -> tuple[Any, None]:
    return jax.tree.map(lambda c: (c * scale).astype(c.dtype), cotangents), None


_scaled.defvjp(_scaled_fwd, _scaled_bwd)


def scale_gradient(inputs: Any, scale: ArrayLike) -> Any:
    r"""Returns ``inputs`` unchanged, but multiplies the gradient flowing back by ``scale``.

    .. math:: y = x, \qquad \frac{\partial L}{\partial x} = s\,\frac{\partial L}{\partial y}

    A scale of 0 stops the gradient (`jax.lax.stop_gradient`); a negative one reverses it
    (a gradient reversal layer). A Python number 1 or 0 is handled without a custom
    gradient; any other scale, an array or a traced value included, goes through one.

    Args:
      inputs: a pytree of arrays.
      scale: :math:`s`, a number or a scalar array.

    Returns:
      ``inputs``, with the scaled backward pass.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> f = lambda x: jnp.sum(optx.scale_gradient(x, 0.5) ** 2)
      >>> jax.grad(f)(jnp.array([1.0, 2.0]))
      Array([1., 2.], dtype=float32)
    """
    if isinstance(scale, numbers.Real | np.number) and not isinstance(scale, bool):
        if scale == 1:
            return inputs
        if scale == 0:
            return jax.lax.stop_gradient(inputs)
    return _scaled(inputs, scale)
