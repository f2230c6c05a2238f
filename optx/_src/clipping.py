"""Gradient clipping: by value, per-leaf norm, global norm and block RMS; centralisation."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, tree_reduce
from optx._src import hyperparams as hp
from optx._src.base import EmptyState, Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.tree import is_none
from optx._src.tree_reduce import abs_sq


class ClipState(NamedTuple):
    """State of the clipping transforms: their threshold, as a dynamic hyperparameter."""

    hyperparams: dict[str, jax.Array]


ClipByGlobalNormState = ClipState
"""optax's name for the state of `clip_by_global_norm` (`ClipState`)."""


def _f32(u: jax.Array) -> jax.Array:
    return u.astype(jnp.promote_types(u.dtype, jnp.float32))


def _map(fn: Any, updates: Updates) -> Updates:
    return jax.tree.map(lambda u: None if u is None else fn(u), updates, is_leaf=is_none)


class _Clip(Transform):
    """Shared init of the clipping transforms: a state holding the threshold."""

    __slots__ = ()

    def init(self, params: Params) -> ClipState:
        del params
        return ClipState(self.init_hyperparams())


@transform
class Clip(_Clip):
    """See `clip`."""

    name = "clip"
    elementwise = True
    max_delta: ScalarOrSchedule = hp.field(1.0, hp.NONNEG)

    def update(
        self, updates: Updates, state: ClipState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ClipState]:
        checks.float_updates(f"{self.name}.update", updates)
        del params, extra
        m = state.hyperparams["max_delta"]
        return _map(lambda u: jnp.clip(u, -m.astype(u.dtype), m.astype(u.dtype)), updates), state


def clip(max_delta: float) -> Clip:
    r"""Clips every element of the updates to :math:`[-\delta, \delta]` (Keras ``clipvalue``).

    Args:
      max_delta: :math:`\delta \ge 0` (a dynamic hyperparameter, ``"max_delta"``).

    Returns:
      The transform.

    Raises:
      ValueError: ``max_delta`` is negative or non-finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.clip(1.0)
      >>> tx.update({"w": jnp.array([-3.0, 0.5, 2.0])}, tx.init(None))[0]
      {'w': Array([-1. ,  0.5,  1. ], dtype=float32)}
    """
    return Clip(max_delta)


@transform
class ClipByNorm(_Clip):
    """See `clip_by_norm`."""

    name = "clip_by_norm"
    max_norm: ScalarOrSchedule = hp.field(1.0, hp.POSITIVE)

    def update(
        self, updates: Updates, state: ClipState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ClipState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        c = state.hyperparams["max_norm"]

        def clip_leaf(u: jax.Array) -> jax.Array:
            sq = jnp.sum(abs_sq(u.astype(jnp.promote_types(u.dtype, jnp.float32))))
            # The double `where` keeps the gradient finite at u == 0.
            positive = sq > 0
            n = jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), sq)
            return (u * c / jnp.maximum(n, c)).astype(u.dtype)

        return _map(clip_leaf, updates), state


def clip_by_norm(max_norm: float) -> ClipByNorm:
    r"""Clips each leaf to an L2 norm of at most ``max_norm`` (Keras ``clipnorm``).

    .. math:: u \leftarrow u \cdot c / \max(\lVert u \rVert_2, c)

    computed per leaf (per variable), unlike `clip_by_global_norm`.

    Args:
      max_norm: :math:`c > 0` (a dynamic hyperparameter, ``"max_norm"``).

    Returns:
      The transform.

    Raises:
      ValueError: ``max_norm`` is not positive and finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.clip_by_norm(1.0)
      >>> tx.update({"a": jnp.array([3.0, 4.0]), "b": jnp.array([0.1])}, tx.init(None))[0]
      {'a': Array([0.6, 0.8], dtype=float32), 'b': Array([0.1], dtype=float32)}
    """
    return ClipByNorm(max_norm)


@transform
class ClipByGlobalNorm(_Clip):
    """See `clip_by_global_norm`."""

    name = "clip_by_global_norm"
    elementwise = True
    max_norm: ScalarOrSchedule = hp.field(1.0, hp.POSITIVE)

    def update(
        self, updates: Updates, state: ClipState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ClipState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        c = state.hyperparams["max_norm"]
        # Squares summed in float32 whatever the leaves' dtype: a bfloat16 sum per leaf would
        # round each leaf's share, so the norm would depend on how leaves are grouped.
        g_norm = tree_reduce.norm([_f32(u) for u in jax.tree.leaves(updates) if u is not None])
        # One scalar factor, multiplied in (in float32 at least): XLA fuses a product with a
        # scalar into every consumer of the clipped leaf (Adam's two moments), where a
        # division per element made XLA:CPU write the clipped gradients out first, a
        # temporary the size of the parameters. Below the threshold the factor is exactly 1.
        factor = jnp.where(g_norm < c, jnp.ones_like(g_norm), c / g_norm)

        def clip_leaf(u: jax.Array) -> jax.Array:
            return (_f32(u) * factor).astype(u.dtype)

        return _map(clip_leaf, updates), state


def clip_by_global_norm(max_norm: float) -> ClipByGlobalNorm:
    r"""Rescales all updates together so that their global L2 norm is at most ``max_norm``.

    .. math:: u \leftarrow u \cdot c / \lVert u \rVert \quad \text{if }
       \lVert u \rVert \ge c, \qquad \lVert u \rVert = \sqrt{\textstyle\sum_\text{leaves}
       \sum u^2}

    Args:
      max_norm: :math:`c > 0` (a dynamic hyperparameter, ``"max_norm"``).

    Returns:
      The transform.

    Raises:
      ValueError: ``max_norm`` is not positive and finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.clip_by_global_norm(1.0)
      >>> tx.update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, tx.init(None))[0]
      {'a': Array([0.6], dtype=float32), 'b': Array([0.8], dtype=float32)}

    References:
      Pascanu, Mikolov and Bengio, "On the difficulty of training recurrent neural
      networks", ICML 2013.
    """
    return ClipByGlobalNorm(max_norm)


@transform
class ClipByBlockRMS(_Clip):
    """See `clip_by_block_rms`."""

    name = "clip_by_block_rms"
    threshold: ScalarOrSchedule = hp.field(1.0, hp.POSITIVE)

    def update(
        self, updates: Updates, state: ClipState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ClipState]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra
        t = state.hyperparams["threshold"]

        def clip_leaf(u: jax.Array) -> jax.Array:
            denom = jnp.maximum(1.0, jnp.sqrt(jnp.mean(abs_sq(u))) / t)
            return (u / denom).astype(u.dtype)

        return _map(clip_leaf, updates), state


def clip_by_block_rms(threshold: float) -> ClipByBlockRMS:
    r"""Rescales each leaf so that its root mean square is at most ``threshold``.

    .. math:: u \leftarrow u / \max(1, \mathrm{rms}(u) / t)

    Args:
      threshold: :math:`t > 0` (a dynamic hyperparameter, ``"threshold"``).

    Returns:
      The transform.

    Raises:
      ValueError: ``threshold`` is not positive and finite.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.clip_by_block_rms(1.0)
      >>> tx.update({"w": jnp.array([2.0, -2.0])}, tx.init(None))[0]
      {'w': Array([ 1., -1.], dtype=float32)}
    """
    return ClipByBlockRMS(threshold)


@transform
class Centralize(Transform):
    """See `centralize`."""

    name = "centralize"

    def init(self, params: Params) -> EmptyState:
        del params
        return EmptyState()

    def update(
        self, updates: Updates, state: Any, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, Any]:
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        del params, extra

        def subtract_mean(u: jax.Array) -> jax.Array:
            if u.ndim <= 1:
                return u
            return u - u.mean(tuple(range(1, u.ndim)), keepdims=True)

        return _map(subtract_mean, updates), state


def centralize() -> Centralize:
    """Subtracts from each leaf of rank >= 2 its mean over every axis but the first.

    Leaves of rank 0 or 1 (biases, scales) pass unchanged.

    Returns:
      The transform.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.centralize()
      >>> tx.update({"w": jnp.array([[1.0, 3.0], [0.0, 2.0]])}, tx.init(None))[0]
      {'w': Array([[-1.,  1.],
             [-1.,  1.]], dtype=float32)}

    References:
      Yong, Huang, Hua and Zhang, "Gradient Centralization: A New Optimization Technique
      for Deep Neural Networks", ECCV 2020.
    """
    return Centralize()
