"""Slow copies of the parameters (target networks): `incremental_update`, `periodic_update`."""

from __future__ import annotations

import jax
from jax.typing import ArrayLike

from optx._src.base import Params
from optx._src.tree import is_none


def incremental_update(new_tensors: Params, old_tensors: Params, step_size: ArrayLike) -> Params:
    r"""Moves a slow copy of the parameters towards the latest ones (Polyak averaging).

    .. math::
       \text{old} \leftarrow \tau\,\text{new} + (1 - \tau)\,\text{old}

    with :math:`\tau` = ``step_size``. `ema_params` keeps such an average as a transform.

    Args:
      new_tensors: the latest parameters.
      old_tensors: the slow copy (same structure).
      step_size: :math:`\tau` (a number or a scalar array; traced values work).

    Returns:
      The new slow copy (a ``None`` leaf of ``new_tensors`` stays ``None``).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.incremental_update({"w": jnp.ones(2)}, {"w": jnp.zeros(2)}, 0.25)
      {'w': Array([0.25, 0.25], dtype=float32)}

    References:
      Polyak and Juditsky, "Acceleration of stochastic approximation by averaging", SIAM
      Journal on Control and Optimization, 1992.
    """
    return jax.tree.map(
        lambda new, old: None if new is None else step_size * new + (1.0 - step_size) * old,
        new_tensors,
        old_tensors,
        is_leaf=is_none,
    )


def periodic_update(
    new_tensors: Params, old_tensors: Params, steps: ArrayLike, update_period: ArrayLike
) -> Params:
    r"""Replaces a slow copy of the parameters with the latest ones every ``update_period`` steps.

    .. math::
       \text{old} \leftarrow \begin{cases} \text{new} & \text{if steps} \bmod
       \text{update\_period} = 0 \\ \text{old} & \text{otherwise} \end{cases}

    Args:
      new_tensors: the latest parameters.
      old_tensors: the slow copy (same structure and dtypes).
      steps: the step count (traced values work).
      update_period: the period, in steps.

    Returns:
      ``new_tensors`` or ``old_tensors`` (a `jax.lax.cond`: under ``jit`` no copy is made).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.periodic_update({"w": jnp.ones(1)}, {"w": jnp.zeros(1)}, 10, 5)
      {'w': Array([1.], dtype=float32)}

    References:
      Mnih et al., "Human-level control through deep reinforcement learning", Nature, 2015.
    """
    return jax.lax.cond(steps % update_period == 0, lambda: new_tensors, lambda: old_tensors)
