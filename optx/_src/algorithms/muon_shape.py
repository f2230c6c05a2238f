"""`scale_by_shape`: Muon's step factor from each matrix's ``(fan_in, fan_out)``."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.algorithms.muon_dimensions import fans, freeze_dimensions, muon_leaf_dims
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform


class ScaleByShapeState(NamedTuple):
    """State of `scale_by_shape`: its hyperparameter (``consistent_rms``, when set)."""

    hyperparams: dict[str, jax.Array]


@transform
class ScaleByShape(Transform):
    """See `scale_by_shape`."""

    name = "scale_by_shape"
    # ``None``: the width rule, nothing to store.
    consistent_rms: ScalarOrSchedule | None = hp.field(None, hp.NONNEG, optional=True)
    weight_dimension_numbers: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        spec = freeze_dimensions(
            self.name, "weight_dimension_numbers", self.weight_dimension_numbers
        )
        object.__setattr__(self, "weight_dimension_numbers", spec)

    def init(self, params: Params) -> ScaleByShapeState:
        muon_leaf_dims(f"{self.name}.init", self.weight_dimension_numbers, params)
        return ScaleByShapeState(self.init_hyperparams())

    def update(
        self, updates: Updates, state: ScaleByShapeState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByShapeState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        dims = iter(muon_leaf_dims(f"{self.name}.update", self.weight_dimension_numbers, updates))

        def leaf(u: jax.Array) -> jax.Array:
            fan_in, fan_out = fans(u.shape, next(dims))
            if u.size == 0:  # no fan ratio to take; nothing to scale
                return u
            if self.consistent_rms is None:
                factor = jnp.sqrt(jnp.asarray(max(1.0, fan_out / fan_in), jnp.float32))
            else:
                factor = jnp.sqrt(jnp.float32(max(fan_in, fan_out)))
                factor = factor * state.hyperparams["consistent_rms"]
            return (u * factor).astype(u.dtype)

        return jax.tree.map(leaf, updates), state


def scale_by_shape(
    consistent_rms: float | None = None, *, weight_dimension_numbers: Any = None
) -> ScaleByShape:
    r"""Scales each matrix's update by a factor of its shape ``(fan_in, fan_out)``.

    ``consistent_rms=None`` gives Jordan's width rule
    :math:`\sqrt{\max(1, \text{fan\_out} / \text{fan\_in})}`; a number :math:`r` gives
    :math:`r \sqrt{\max(\text{fan\_in}, \text{fan\_out})}`, which makes the RMS of an
    orthogonalised update about :math:`r` whatever the shape (Liu et al.; ``0.2`` matches
    AdamW's typical RMS and Keras's ``Muon(rms_rate=0.2)``).

    Args:
      consistent_rms: :math:`r \ge 0` (a dynamic hyperparameter), or ``None``.
      weight_dimension_numbers: which axes make ``fan_in`` and ``fan_out`` (products of
        the reduction and output axes' sizes), as in `scale_by_muon`; ``None``: every leaf
        is ``(fan_in, fan_out)``.

    Returns:
      The transform.

    Raises:
      ValueError: ``consistent_rms`` is negative; (at ``init``/``update``) a leaf is not 2-D
        and has no dimension numbers, or they do not fit it.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_shape(consistent_rms=0.2)
      >>> tx.update({"w": jnp.ones((4, 9))}, tx.init({"w": jnp.ones((4, 9))}))[0]["w"][0, 0]
      Array(0.6, dtype=float32)

    References:
      Liu et al., "Muon is Scalable for LLM Training", arXiv:2502.16982, 2025.
    """
    return ScaleByShape(consistent_rms, weight_dimension_numbers)
