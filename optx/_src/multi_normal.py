r"""A Gaussian with diagonal covariance parametrised by its mean and log standard deviation.

:math:`\mathcal{N}(\mu, \operatorname{diag}(e^{2 s}))`: the distribution of the search in
evolution strategies and of perturbation-based gradient estimates.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import jax.scipy.stats.norm
from jax.typing import ArrayLike


class MultiNormalDiagFromLogScale:
    r"""A Gaussian :math:`\mathcal{N}(\mu, \operatorname{diag}(e^{2 s}))` (see `multi_normal`).

    Attributes:
      log_scale: :math:`s`, the log standard deviations.
      params: ``[loc, log_scale]``.
    """

    def __init__(self, loc: ArrayLike, log_scale: ArrayLike) -> None:
        self._loc = jnp.asarray(loc)
        self._log_scale = jnp.asarray(log_scale)
        self._scale = jnp.exp(self._log_scale)
        self._shape = jnp.broadcast_shapes(self._loc.shape, self._scale.shape)

    def sample(self, shape: Sequence[int], key: jax.Array) -> jax.Array:
        """Draws samples of shape ``(*shape, *event_shape)`` with ``key``."""
        noise = jax.random.normal(key, (*tuple(shape), *self._shape))
        return noise * self._scale + self._loc

    def log_prob(self, x: ArrayLike) -> jax.Array:
        """The log density of ``x``, summed over the event axes."""
        per_element = jax.scipy.stats.norm.logpdf(x, loc=self._loc, scale=self._scale)
        return jnp.sum(per_element, axis=tuple(range(-len(self._shape), 0)))

    @property
    def log_scale(self) -> jax.Array:
        """:math:`s`, the log standard deviations."""
        return self._log_scale

    @property
    def params(self) -> list[jax.Array]:
        """``[loc, log_scale]``: the arrays to differentiate with respect to."""
        return [self._loc, self._log_scale]


def multi_normal(loc: ArrayLike, log_scale: ArrayLike) -> MultiNormalDiagFromLogScale:
    r"""A diagonal Gaussian with mean ``loc`` and standard deviations ``exp(log_scale)``.

    .. math::
      \log p(x) = \sum_i \Big(-\frac{(x_i - \mu_i)^2}{2 e^{2 s_i}} - s_i
        - \tfrac{1}{2}\log 2\pi\Big)

    Args:
      loc: :math:`\mu`, the mean.
      log_scale: :math:`s`, the log standard deviations (broadcast with ``loc``).

    Returns:
      A distribution with ``sample(shape, key)``, ``log_prob(x)`` (summed over the event
      axes), ``log_scale`` and ``params`` (``[loc, log_scale]``).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> dist = optx.multi_normal(jnp.zeros(2), jnp.zeros(2))
      >>> dist.sample((5,), jax.random.key(0)).shape
      (5, 2)
      >>> round(float(dist.log_prob(jnp.zeros(2))), 4)  # -log(2 pi)
      -1.8379
    """
    return MultiNormalDiagFromLogScale(loc, log_scale)
