"""Freezing parameters: `freeze` and `selective_transform`."""

from __future__ import annotations

from typing import Any

import jax

from optx._src.base import GradientTransformationLike, set_to_zero
from optx._src.combine import Frozen, Masked, Partition, freeze_mask, masked, partition


def freeze(mask: Any) -> Masked:
    r"""Zeros the updates of the parameters ``mask`` selects (they stay as they are).

    .. math::
       u_i = \begin{cases} 0 & \text{if mask}_i \\ g_i & \text{otherwise} \end{cases}

    `set_to_zero` under `masked`: the other updates pass through unchanged.

    Args:
      mask: a bool (every parameter, or none), or a pytree of bools with the structure of
        the parameters (or a prefix of it); a callable or regular expressions as `masked`
        takes them.

    Returns:
      The transform; its state is `MaskedState`.

    Raises:
      TypeError: ``mask`` has non-bool leaves.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.freeze({"a": True, "b": False})
      >>> params = {"a": jnp.ones(1), "b": jnp.ones(2)}
      >>> updates, _ = tx.update(params, tx.init(params))
      >>> updates["a"], updates["b"]
      (Array([0.], dtype=float32), Array([1., 1.], dtype=float32))
    """
    return masked(set_to_zero(), mask)


def _labels(freeze_mask: Frozen) -> Any:
    return jax.tree.map(lambda m: "freeze" if m else "train", freeze_mask.tree)


def selective_transform(optimizer: GradientTransformationLike, *, freeze_mask: Any) -> Partition:
    r"""Applies ``optimizer`` to the parameters ``freeze_mask`` leaves free; freezes the rest.

    .. math::
       u_i = \begin{cases} 0 & \text{if freeze\_mask}_i \\ \mathrm{optimizer}(g)_i
       & \text{otherwise} \end{cases}

    Unlike ``chain(freeze(mask), optimizer)``, ``optimizer`` keeps no state for the frozen
    parameters (a `partition` into ``"train"`` and ``"freeze"``).

    Args:
      optimizer: the optimizer of the free parameters.
      freeze_mask: a bool, or a pytree of bools with the structure of the parameters (or
        a prefix of it): ``True`` freezes (keyword-only, as optax's).

    Returns:
      The transform; its state is `PartitionState`.

    Raises:
      TypeError: ``optimizer`` is not a transform, or ``freeze_mask`` has non-bool leaves.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.selective_transform(optx.sgd(0.1), freeze_mask={"a": True, "b": False})
      >>> params = {"a": jnp.ones(1), "b": jnp.ones(2)}
      >>> updates, _ = tx.update(params, tx.init(params))
      >>> updates["a"], updates["b"]
      (Array([0.], dtype=float32), Array([-0.1, -0.1], dtype=float32))
    """
    frozen = freeze_mask_checked(freeze_mask)
    return partition({"train": optimizer, "freeze": set_to_zero()}, _labels(frozen))


def freeze_mask_checked(mask: Any) -> Frozen:
    """``mask`` as a `Frozen` pytree of bools (a `TypeError` for anything else)."""
    frozen = freeze_mask("selective_transform", mask)
    if not isinstance(frozen, Frozen):
        raise TypeError(
            f"`selective_transform` needs freeze_mask to be a bool or a pytree of bools. "
            f"Received: freeze_mask={mask!r}."
        )
    return frozen
