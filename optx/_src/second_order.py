"""Second-order quantities of a loss ``loss(params, inputs, targets)`` (`optx.second_order`).

`hvp` (a Hessian-vector product, by forward-over-reverse differentiation), `hessian_diag`
and `fisher_diag` (the diagonals of the Hessian and of the empirical Fisher information).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import flatten_util

LossFn = Callable[[Any, jax.Array, jax.Array], jax.Array]


def _flat(params: Any) -> tuple[jax.Array, Callable[[jax.Array], Any]]:
    return flatten_util.ravel_pytree(params)


def hvp(loss: LossFn, v: jax.Array, params: Any, inputs: jax.Array, targets: jax.Array) -> Any:
    r"""The product of the Hessian of ``loss`` (in ``params``) with the vector ``v``.

    .. math:: H v = \frac{\partial}{\partial \varepsilon}
       \nabla_\theta L(\theta + \varepsilon v, x, y)\Big|_{\varepsilon = 0}

    computed by forward-mode differentiation of the gradient, at the cost of about two
    gradients and without forming :math:`H`.

    Args:
      loss: ``loss(params, inputs, targets) -> scalar``.
      v: a flat vector of the size of ``params`` flattened (`jax.flatten_util.ravel_pytree`
        order).
      params: the parameters :math:`\theta` (a pytree).
      inputs: the inputs :math:`x` passed to ``loss``.
      targets: the targets :math:`y` passed to ``loss``.

    Returns:
      :math:`H v`, with the structure of ``params``.

    Raises:
      ValueError: ``v`` is not a vector of the size of ``params`` flattened.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> loss = lambda p, x, y: jnp.sum((p["w"] * x - y) ** 2)
      >>> params = {"w": jnp.array([1.0, 2.0])}
      >>> x, y = jnp.array([1.0, 3.0]), jnp.zeros(2)
      >>> optx.second_order.hvp(loss, jnp.array([1.0, 1.0]), params, x, y)
      {'w': Array([ 2., 18.], dtype=float32)}
    """
    flat, unravel = _flat(params)
    if np.shape(v) != flat.shape:
        raise ValueError(
            f"`hvp` needs v of shape {flat.shape} (the parameters flattened). Received: v of "
            f"shape {np.shape(v)}."
        )
    grad = jax.grad(lambda p: loss(p, inputs, targets))
    return jax.jvp(grad, (params,), (unravel(jnp.asarray(v)),))[1]


def hessian_diag(loss: LossFn, params: Any, inputs: jax.Array, targets: jax.Array) -> jax.Array:
    r"""The diagonal of the Hessian of ``loss`` in ``params``, as a flat vector.

    .. math:: \mathrm{diag}(H)_i = e_i^\top H e_i

    one Hessian-vector product (`hvp`) per parameter, batched with `jax.vmap`: exact, at
    the cost of :math:`n` products for :math:`n` parameters (and an :math:`n \times n`
    intermediate), so for small models.

    Args:
      loss: ``loss(params, inputs, targets) -> scalar``.
      params: the parameters (a pytree).
      inputs: the inputs passed to ``loss``.
      targets: the targets passed to ``loss``.

    Returns:
      A vector of the size of ``params`` flattened (`jax.flatten_util.ravel_pytree` order).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> loss = lambda p, x, y: jnp.sum((p["w"] * x - y) ** 2) + p["w"][0] * p["w"][1]
      >>> params = {"w": jnp.array([1.0, 2.0])}
      >>> optx.second_order.hessian_diag(loss, params, jnp.array([1.0, 3.0]), jnp.zeros(2))
      Array([ 2., 18.], dtype=float32)
    """
    flat, _ = _flat(params)
    basis = jnp.eye(flat.size, dtype=flat.dtype)

    def entry(e: jax.Array) -> jax.Array:
        return jnp.vdot(e, _flat(hvp(loss, e, params, inputs, targets))[0])

    return jax.vmap(entry)(basis)


def fisher_diag(
    negative_log_likelihood: LossFn, params: Any, inputs: jax.Array, targets: jax.Array
) -> jax.Array:
    r"""The diagonal of the observed (empirical) Fisher information, as a flat vector.

    .. math:: \mathrm{diag}(F) = \bigl(\nabla_\theta \ell(\theta, x, y)\bigr)^2

    elementwise, with :math:`\ell` the negative log-likelihood of the batch ``(inputs,
    targets)``.

    Args:
      negative_log_likelihood: ``nll(params, inputs, targets) -> scalar``.
      params: the parameters (a pytree).
      inputs: the inputs passed to ``negative_log_likelihood``.
      targets: the targets passed to ``negative_log_likelihood``.

    Returns:
      A vector of the size of ``params`` flattened (`jax.flatten_util.ravel_pytree` order).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> nll = lambda p, x, y: 0.5 * jnp.sum((p["w"] * x - y) ** 2)
      >>> params = {"w": jnp.array([1.0, 2.0])}
      >>> optx.second_order.fisher_diag(nll, params, jnp.array([1.0, 3.0]), jnp.zeros(2))
      Array([  1., 324.], dtype=float32)
    """
    grads = jax.grad(negative_log_likelihood)(params, inputs, targets)
    return jnp.square(_flat(grads)[0])
