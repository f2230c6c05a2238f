"""Rescaling by a norm: of each parameter block, or of the whole update.

`scale_by_param_block_rms` and `scale_by_param_block_norm` multiply each leaf's update by a
statistic of its parameter (one block maths, `_block_scale`); `normalize_by_update_norm`
divides the updates by their global norm.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, tree_reduce
from optx._src import hyperparams as hp
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.tree import is_none


def _wide(x: jax.Array) -> jax.Array:
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def _block_scale(p: jax.Array, floor: jax.Array, mean: bool) -> jax.Array:
    r""":math:`\max(\lVert p \rVert_2, s)`, or with ``mean`` :math:`\max(\mathrm{rms}(p), s)`.

    Summed in float32 at least. The double `where` keeps the gradient finite at ``p == 0``
    (for gradients taken through an update).
    """
    p = _wide(p)
    sq = jnp.sum(tree_reduce.abs_sq(p))
    if mean:
        sq = sq / p.size
    positive = sq > 0
    return jnp.maximum(jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0), floor)


class _ParamBlockScale(Transform):
    """Shared update of the two block scalings: ``u * max(stat(p), min_scale)`` per leaf."""

    __slots__ = ()
    # Whether the statistic is the root mean square (else the L2 norm) of the block.
    mean: ClassVar[bool]

    def update(
        self, updates: Updates, state: Any, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, Any]:
        del extra
        api = f"{self.name}.update"
        checks.float_updates(api, updates, complex_ok=True)
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params")
        floor = state.hyperparams["min_scale"]

        def leaf(u: jax.Array, p: jax.Array) -> jax.Array:
            return (u * _block_scale(p, floor, self.mean)).astype(u.dtype)

        return jax.tree.map(leaf, updates, params), state


class ScaleByParamBlockRMSState(NamedTuple):
    """State of `scale_by_param_block_rms`: the floor of the scale."""

    hyperparams: dict[str, jax.Array]


@transform
class ScaleByParamBlockRMS(_ParamBlockScale):
    """See `scale_by_param_block_rms`."""

    name = "scale_by_param_block_rms"
    mean = True
    min_scale: ScalarOrSchedule = hp.field(1e-3, hp.NONNEG)

    def init(self, params: Params) -> ScaleByParamBlockRMSState:
        del params
        return ScaleByParamBlockRMSState(self.init_hyperparams())


def scale_by_param_block_rms(min_scale: float = 1e-3) -> ScaleByParamBlockRMS:
    r"""Multiplies each leaf's update by the root mean square of its parameter.

    .. math:: u \leftarrow u \cdot \max(\mathrm{rms}(\theta), s), \qquad
       \mathrm{rms}(\theta) = \sqrt{\mathrm{mean}(|\theta|^2)}

    Args:
      min_scale: the floor :math:`s \ge 0` of the scale (Keras Adafactor's
        ``epsilon_2``).

    Returns:
      The transform; ``min_scale`` is a dynamic hyperparameter.

    Raises:
      ValueError: ``min_scale`` is negative or non-finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_param_block_rms()
      >>> params = {"w": jnp.array([3.0, -3.0]), "b": jnp.zeros(2)}
      >>> updates, _ = tx.update({"w": jnp.ones(2), "b": jnp.ones(2)}, tx.init(params), params)
      >>> updates["w"], updates["b"]
      (Array([3., 3.], dtype=float32), Array([0.001, 0.001], dtype=float32))
    """
    return ScaleByParamBlockRMS(min_scale)


class ScaleByParamBlockNormState(NamedTuple):
    """State of `scale_by_param_block_norm`: the floor of the scale."""

    hyperparams: dict[str, jax.Array]


@transform
class ScaleByParamBlockNorm(_ParamBlockScale):
    """See `scale_by_param_block_norm`."""

    name = "scale_by_param_block_norm"
    mean = False
    min_scale: ScalarOrSchedule = hp.field(1e-3, hp.NONNEG)

    def init(self, params: Params) -> ScaleByParamBlockNormState:
        del params
        return ScaleByParamBlockNormState(self.init_hyperparams())


def scale_by_param_block_norm(min_scale: float = 1e-3) -> ScaleByParamBlockNorm:
    r"""Multiplies each leaf's update by the L2 norm of its parameter.

    .. math:: u \leftarrow u \cdot \max(\lVert \theta \rVert_2, s)

    with :math:`\lVert \theta \rVert_2` the norm of the whole leaf (a weight matrix, a bias
    vector) seen as one vector. Its gradient is finite where :math:`\theta = 0`.

    Args:
      min_scale: the floor :math:`s \ge 0` of the scale.

    Returns:
      The transform; ``min_scale`` is a dynamic hyperparameter.

    Raises:
      ValueError: ``min_scale`` is negative or non-finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_param_block_norm()
      >>> params = {"w": jnp.array([3.0, -4.0]), "b": jnp.zeros(2)}
      >>> updates, _ = tx.update({"w": jnp.ones(2), "b": jnp.ones(2)}, tx.init(params), params)
      >>> updates["w"], updates["b"]
      (Array([5., 5.], dtype=float32), Array([0.001, 0.001], dtype=float32))
    """
    return ScaleByParamBlockNorm(min_scale)


class NormalizeByUpdateNormState(NamedTuple):
    """State of `normalize_by_update_norm`: its two hyperparameters."""

    hyperparams: dict[str, jax.Array]


@transform
class NormalizeByUpdateNorm(Transform):
    """See `normalize_by_update_norm`."""

    name = "normalize_by_update_norm"
    elementwise = True
    scale_factor: ScalarOrSchedule = hp.field(1.0)
    eps: ScalarOrSchedule = hp.field(1e-6, hp.NONNEG)

    def init(self, params: Params) -> NormalizeByUpdateNormState:
        del params
        return NormalizeByUpdateNormState(self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: NormalizeByUpdateNormState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, NormalizeByUpdateNormState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        h = state.hyperparams
        # One global norm (squares summed in float32 at least) and one scalar factor.
        g_norm = tree_reduce.norm([_wide(u) for u in jax.tree.leaves(updates) if u is not None])
        factor = h["scale_factor"] / (g_norm + h["eps"])
        return jax.tree.map(
            lambda u: None if u is None else (_wide(u) * factor).astype(u.dtype),
            updates,
            is_leaf=is_none,
        ), state


def normalize_by_update_norm(scale_factor: float = 1.0, eps: float = 1e-6) -> NormalizeByUpdateNorm:
    r"""Divides the updates by their global L2 norm: steps of length ``scale_factor``.

    .. math:: u \leftarrow \frac{c}{\lVert u \rVert + \epsilon}\, u, \qquad
       \lVert u \rVert = \sqrt{\textstyle\sum_\text{leaves} \sum u^2}

    A negative :math:`c` points the step down the gradient (normalised gradient descent).

    Args:
      scale_factor: :math:`c`, the length of the normalised update (any finite number).
      eps: :math:`\epsilon \ge 0`, added to the norm so that a zero update stays finite.

    Returns:
      The transform; ``scale_factor`` and ``eps`` are dynamic hyperparameters.

    Raises:
      ValueError: ``scale_factor`` is non-finite, or ``eps`` negative or non-finite.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.normalize_by_update_norm(scale_factor=-1.0)
      >>> tx.update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, tx.init(None))[0]
      {'a': Array([-0.6], dtype=float32), 'b': Array([-0.8], dtype=float32)}
    """
    return NormalizeByUpdateNorm(scale_factor, eps)
