"""Adaptive gradient clipping: `unitwise_norm`, `unitwise_clip` and `adaptive_grad_clip`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.constraints import _axis
from optx._src.tree import path_name
from optx._src.tree_reduce import abs_sq

Axis = int | tuple[int, ...] | None

# The axes a unit spans, by rank, where ``axis`` is None: a linear layer's kernel (in, out)
# and a multi-head one (in, heads, out) reduce over the inputs, a convolution's
# (spatial..., in, out) over all but the outputs.
_UNIT_AXES = {2: (0,), 3: (0,), 4: (0, 1, 2), 5: (0, 1, 2, 3)}


def _unit_axes(api: str, what: str, shape: tuple[int, ...], axis: Axis) -> Axis:
    """The axes to reduce for ``shape`` (``None``: all of them)."""
    if axis is not None:
        return axis
    if sum(d != 1 for d in shape) <= 1:  # a scalar or a vector, maybe with unit axes
        return None
    if len(shape) in _UNIT_AXES:
        return _UNIT_AXES[len(shape)]
    raise ValueError(
        f"`{api}` needs arrays of rank at most 5, or axis to name the axes a unit spans. "
        f"Received: {what} of shape {shape}."
    )


def _unit_norms(x: jax.Array, axes: Axis) -> jax.Array:
    """The unit norms, with the reduced axes kept (size 1): they broadcast against ``x``."""
    return jnp.sqrt(jnp.sum(abs_sq(x), axis=axes, keepdims=True))


def _clip_factor(g_norm: jax.Array, max_norm: jax.Array, div_eps: ArrayLike) -> jax.Array:
    """1 where ``g_norm < max_norm``, else ``max_norm / max(g_norm, div_eps)``."""
    return jnp.where(g_norm < max_norm, 1.0, max_norm / jnp.maximum(g_norm, div_eps))


def unitwise_norm(x: ArrayLike, axis: Axis = None) -> jax.Array:
    r"""The L2 norm of each unit of ``x``, broadcast back to the shape of ``x``.

    A unit is a slice of ``x`` over the axes ``axis``, the rest fixed:
    :math:`n_{j} = \sqrt{\sum_{i \in \text{axis}} x_{ij}^2}`. Without ``axis``, the rank
    of ``x`` chooses: a scalar or a vector (unit axes aside) is one unit; rank 2 or 3 (a
    dense or multi-head kernel) reduces axis 0, one unit per output; rank 4 and 5
    (convolution kernels, spatial axes then in and out) reduce all axes but the last.

    Args:
      x: the array.
      axis: an axis or a tuple of axes to reduce, or ``None`` for the rule above.

    Returns:
      An array of the shape of ``x`` holding each element's unit norm.

    Raises:
      ValueError: ``x`` has rank 6 or more and ``axis`` is ``None``.
      TypeError: ``axis`` is neither an int, a sequence of ints nor ``None``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.transforms.unitwise_norm(jnp.array([[3.0, 1.0], [4.0, 0.0]]))
      Array([[5., 1.],
             [5., 1.]], dtype=float32)
    """
    x = jnp.asarray(x)
    axes = _unit_axes("unitwise_norm", "x", x.shape, _axis("unitwise_norm", axis))
    return jnp.broadcast_to(_unit_norms(x, axes), x.shape)


def unitwise_clip(
    g_norm: ArrayLike, max_norm: ArrayLike, grad: ArrayLike, div_eps: ArrayLike = 1e-6
) -> jax.Array:
    r"""Rescales each unit of ``grad`` whose norm reaches ``max_norm`` down to it.

    .. math:: g \leftarrow \begin{cases} g & \text{if } n < m \\
       g\, m / \max(n, \delta) & \text{otherwise} \end{cases}

    elementwise, with :math:`n` = ``g_norm`` (from `unitwise_norm`), :math:`m` =
    ``max_norm`` and :math:`\delta` = ``div_eps``, which only guards the division.

    Args:
      g_norm: the unit norms of ``grad``, of its shape.
      max_norm: the largest norm of each unit, of the same shape.
      grad: the array to clip.
      div_eps: the floor :math:`\delta` of the divisor.

    Returns:
      ``grad`` clipped unit by unit.

    Raises:
      ValueError: the three arrays differ in shape.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> g = jnp.array([[3.0, 0.1], [4.0, 0.0]])
      >>> n = optx.transforms.unitwise_norm(g)
      >>> optx.transforms.unitwise_clip(n, jnp.ones_like(g), g)
      Array([[0.6, 0.1],
             [0.8, 0. ]], dtype=float32)
    """
    shapes = tuple(np.shape(a) for a in (g_norm, max_norm, grad))
    if len(set(shapes)) > 1:
        raise ValueError(
            "`unitwise_clip` needs g_norm, max_norm and grad of one shape. Received: shapes "
            f"{shapes[0]}, {shapes[1]} and {shapes[2]}."
        )
    # grad * 1 is grad exactly: the unclipped units pass unchanged.
    return jnp.asarray(grad) * _clip_factor(jnp.asarray(g_norm), jnp.asarray(max_norm), div_eps)


class AdaptiveGradClipState(NamedTuple):
    """State of `adaptive_grad_clip`: its two hyperparameters."""

    hyperparams: dict[str, jax.Array]


@transform
class AdaptiveGradClip(Transform):
    """See `adaptive_grad_clip`."""

    name = "adaptive_grad_clip"
    clipping: ScalarOrSchedule = hp.field(rule=hp.NONNEG)
    eps: ScalarOrSchedule = hp.field(1e-3, hp.NONNEG)
    axis: Axis = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "axis", _axis(hp.current(self.name), self.axis))

    def init(self, params: Params) -> AdaptiveGradClipState:
        del params
        return AdaptiveGradClipState(self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: AdaptiveGradClipState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, AdaptiveGradClipState]:
        del extra
        api = f"{self.name}.update"
        checks.float_updates(api, updates, complex_ok=True)
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params")
        clipping, eps = state.hyperparams["clipping"], state.hyperparams["eps"]

        def leaf(path: Any, u: jax.Array, p: jax.Array) -> jax.Array:
            axes = _unit_axes(api, f"updates[{path_name(path)!r}]", u.shape, self.axis)
            ct = jnp.promote_types(u.dtype, jnp.float32)
            u32, p32 = u.astype(ct), p.astype(ct)
            # One factor per unit, broadcast: no array of the leaf's shape but the result.
            max_norm = clipping * jnp.maximum(_unit_norms(p32, axes), eps)
            return (u32 * _clip_factor(_unit_norms(u32, axes), max_norm, 1e-6)).astype(u.dtype)

        return jax.tree_util.tree_map_with_path(leaf, updates, params), state


def adaptive_grad_clip(
    clipping: ScalarOrSchedule, eps: ScalarOrSchedule = 1e-3, axis: Axis = None
) -> AdaptiveGradClip:
    r"""Clips each unit's update to at most ``clipping`` times its parameter's norm (AGC).

    Per unit (see `unitwise_norm`), with :math:`\lVert\cdot\rVert` its L2 norm:

    .. math:: u \leftarrow \begin{cases} u & \text{if } \lVert u \rVert <
       \lambda \max(\lVert \theta \rVert, \epsilon) \\
       u\, \lambda \max(\lVert \theta \rVert, \epsilon) / \lVert u \rVert
       & \text{otherwise} \end{cases}

    :math:`\epsilon` keeps zero-initialised parameters (biases) from freezing. Norms are
    computed in float32 at least.

    Args:
      clipping: :math:`\lambda \ge 0`, the largest ratio of update to parameter norm.
      eps: :math:`\epsilon \ge 0`, the floor of the parameter norm.
      axis: the axes a unit spans (an int or a tuple), or ``None`` to choose by rank as
        `unitwise_norm` does.

    Returns:
      The transform; ``clipping`` and ``eps`` are dynamic hyperparameters. Its ``update``
      needs ``params``.

    Raises:
      ValueError: ``clipping`` or ``eps`` is negative or non-finite; at ``update``, a leaf
        has rank 6 or more and ``axis`` is ``None``.
      TypeError: ``axis`` is neither an int, a sequence of ints nor ``None``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.adaptive_grad_clip(0.1)
      >>> params = {"w": jnp.array([3.0, 4.0])}
      >>> tx.update({"w": jnp.array([6.0, 8.0])}, tx.init(params), params)[0]
      {'w': Array([0.3, 0.4], dtype=float32)}

    References:
      Brock, De, Smith and Simonyan, "High-Performance Large-Scale Image Recognition
      Without Normalization", ICML 2021.
    """
    return AdaptiveGradClip(clipping, eps, axis)
