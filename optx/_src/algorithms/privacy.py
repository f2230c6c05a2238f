"""Differentially private SGD: `differentially_private_aggregate` and `dpsgd`."""

from __future__ import annotations

import functools
import operator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    identity,
    transform,
)
from optx._src.combine import Chain, chain
from optx._src.keys import KeySpec, initial_key_data, key_spec, wrap_key
from optx._src.moments import real_dtype
from optx._src.momentum import Trace
from optx._src.scaling import scale_by_learning_rate
from optx._src.tree import is_none, path_name
from optx._src.tree_reduce import abs_sq


class DifferentiallyPrivateAggregateState(NamedTuple):
    """State of `differentially_private_aggregate`: the random key and the hyperparameters.

    ``rng_key`` is the raw data of the key (``jax.random.key_data``, uint32), so the state
    holds plain arrays that NumPy, checkpoints and tree utilities accept.
    """

    rng_key: jax.Array
    hyperparams: dict[str, jax.Array]


def _batch_size(api: str, leaves_with_paths: list[tuple[Any, Any]]) -> int:
    """The common size of axis 0 of the per-example gradients; raises otherwise."""
    shapes = {path_name(p): tuple(np.shape(g)) for p, g in leaves_with_paths}
    sizes = {s[0] if s else None for s in shapes.values()}
    if not shapes or None in sizes or len(sizes) != 1:
        raise ValueError(
            f"`{api}` needs per-example gradients: every leaf with the same batch size on "
            f"axis 0 (take them with `jax.vmap(jax.grad(loss), in_axes=(None, 0))`). "
            f"Received shapes: {shapes}."
        )
    return int(next(iter(sizes)))


def _standard_normal(key: jax.Array, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """Standard normal noise; for a complex dtype, each of the real and imaginary parts.

    A complex leaf is a point of R^{2n} to the privacy analysis: the clip bounds its L2
    sensitivity there, so both parts need the full standard deviation (JAX's complex normal
    gives each part variance 1/2, which would halve the noise's variance).
    """
    if not jnp.issubdtype(dtype, jnp.complexfloating):
        return jax.random.normal(key, shape, dtype)
    parts = jax.random.normal(key, (2, *shape), real_dtype(dtype))
    return jax.lax.complex(parts[0], parts[1])


@transform
class DifferentiallyPrivateAggregate(Transform):
    """See `differentially_private_aggregate`."""

    name = "differentially_private_aggregate"
    l2_norm_clip: ScalarOrSchedule = hp.field(1.0, hp.NONNEG)
    noise_multiplier: ScalarOrSchedule = hp.field(1.0, hp.NONNEG)
    key: KeySpec = 0

    def init(self, params: Params) -> DifferentiallyPrivateAggregateState:
        del params
        return DifferentiallyPrivateAggregateState(
            initial_key_data(self.key), self.init_hyperparams()
        )

    def update(
        self,
        updates: Updates,
        state: DifferentiallyPrivateAggregateState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, DifferentiallyPrivateAggregateState]:
        del params, extra
        api = f"{self.name}.update"
        checks.float_updates(api, updates, complex_ok=True)
        flat, treedef = jax.tree_util.tree_flatten_with_path(updates, is_leaf=is_none)
        present = [(p, g) for p, g in flat if g is not None]
        if not present:  # nothing to aggregate: no key is drawn
            return updates, state
        bsize = _batch_size(api, present)
        grads = [g for _, g in present]
        h = state.hyperparams
        clip = h["l2_norm_clip"]
        # Each example's global norm over all leaves, then one factor per example.
        sq = [jnp.sum(abs_sq(g), axis=tuple(range(1, g.ndim))) for g in grads]
        norms = jnp.sqrt(functools.reduce(operator.add, sq))
        # 0 / 0 (a zero gradient and a zero bound) keeps the example: nan -> 1.
        factors = jnp.nan_to_num(jnp.minimum(clip / norms, 1.0), nan=1.0)
        std = clip * h["noise_multiplier"]
        key, *keys = jax.random.split(wrap_key(state.rng_key, self.key), len(grads) + 1)

        def noisy(g: jax.Array, k: jax.Array) -> jax.Array:
            total = jnp.tensordot(factors.astype(g.dtype), g, axes=1)
            noise = _standard_normal(k, total.shape, g.dtype)
            return ((total + std * noise) / bsize).astype(g.dtype)

        noised = iter([noisy(g, k) for g, k in zip(grads, keys, strict=True)])
        out = [None if g is None else next(noised) for _, g in flat]
        new_state = DifferentiallyPrivateAggregateState(jax.random.key_data(key), h)
        return jax.tree.unflatten(treedef, out), new_state


def differentially_private_aggregate(
    l2_norm_clip: float,
    noise_multiplier: float,
    key: jax.Array | int | None = None,
    *,
    seed: int | None = None,
) -> DifferentiallyPrivateAggregate:
    r"""Sums clipped per-example gradients, adds Gaussian noise, and averages (DP-SGD).

    For a batch of :math:`B` per-example gradients :math:`g_1, \ldots, g_B` (the leading
    axis of every leaf), with :math:`C` = ``l2_norm_clip`` and :math:`\sigma` =
    ``noise_multiplier``:

    .. math::
       u = \frac{1}{B}\Bigl(\sum_{i=1}^B g_i \min\Bigl(1, \frac{C}{\lVert g_i \rVert}
       \Bigr) + \sigma C\,\xi\Bigr), \qquad \xi \sim \mathcal N(0, I)

    where :math:`\lVert g_i \rVert` is example :math:`i`'s norm over all leaves (of the
    moduli :math:`|g|` for complex leaves). A complex leaf is a point of
    :math:`\mathbb R^{2n}` to the privacy guarantee, whose L2 sensitivity there is still
    :math:`C`: its real and imaginary parts each get noise of standard deviation
    :math:`\sigma C` (not :math:`\sigma C / \sqrt 2`, as a complex normal would). The
    updates come out without the batch axis; ``None`` leaves pass through. The noise is a
    deterministic function of the key: each update splits the key in the state into the
    next key and one key per leaf, as optax does, so the same seed gives optax's noise.
    Put this transform first in a chain: it needs the per-example gradients, which
    gradient accumulation would sum.

    Args:
      l2_norm_clip: :math:`C \ge 0`, the largest norm of one example's gradient.
      noise_multiplier: :math:`\sigma \ge 0`, the noise's standard deviation in units of
        :math:`C`.
      key: an int seed or a typed PRNG key (``jax.random.key(0)``); ``None`` means seed 0.
      seed: the same as ``key``, accepted for optax compatibility; give one of them.

    Returns:
      The transform; its state is `DifferentiallyPrivateAggregateState`; ``l2_norm_clip``
      and ``noise_multiplier`` are dynamic hyperparameters.

    Raises:
      ValueError: an argument is negative; both ``key`` and ``seed`` are given; ``update``
        gets leaves without a common batch axis.
      TypeError: ``key`` is neither an int nor a single concrete typed PRNG key.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.contrib.differentially_private_aggregate(1.0, 0.0)
      >>> per_example = {"w": jnp.array([[3.0, 4.0], [0.3, 0.4]])}  # norms 5 and 0.5
      >>> tx.update(per_example, tx.init(None))[0]  # (0.2 g_1 + g_2) / 2
      {'w': Array([0.45, 0.6 ], dtype=float32)}

    References:
      Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar and Zhang, "Deep Learning with
      Differential Privacy", ACM CCS 2016.
    """
    return DifferentiallyPrivateAggregate(
        l2_norm_clip,
        noise_multiplier,
        key_spec("differentially_private_aggregate", key, seed),
    )


def dpsgd(
    learning_rate: ScalarOrSchedule,
    l2_norm_clip: float,
    noise_multiplier: float,
    seed: int,
    momentum: float | None = None,
    nesterov: bool = False,
) -> Chain:
    r"""DP-SGD: SGD (with optional momentum) on privately aggregated gradients.

    .. math:: \theta \leftarrow \theta - \eta\,t, \qquad t \leftarrow u + \mu\,t

    with :math:`u` of `differentially_private_aggregate` (clipped per-example gradients,
    noised and averaged), :math:`\eta` = ``learning_rate`` and :math:`\mu` = ``momentum``
    (no trace when ``None``). ``update`` takes per-example gradients (a leading batch axis
    on every leaf). Complex parameters are clipped by the norm of the moduli and noised in
    each real and imaginary part (see `differentially_private_aggregate`).

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      l2_norm_clip: the largest norm of one example's gradient, >= 0.
      noise_multiplier: the noise's standard deviation in units of ``l2_norm_clip``, >= 0.
      seed: the seed of the noise (an int, or a typed PRNG key).
      momentum: :math:`\mu \in [0, 1]`, or ``None`` for none.
      nesterov: use Nesterov momentum.

    Returns:
      ``chain(differentially_private_aggregate(l2_norm_clip, noise_multiplier,
      seed=seed), trace(momentum, nesterov), scale_by_learning_rate(learning_rate))``
      (`identity` in place of the trace when ``momentum`` is ``None``).

    Raises:
      ValueError: an argument is out of range.
      TypeError: ``seed`` is neither an int nor a typed PRNG key (``None`` included), or
        ``nesterov`` is not a bool.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.contrib.dpsgd(0.1, l2_norm_clip=1.0, noise_multiplier=0.0, seed=0)
      >>> params = jnp.zeros(2)
      >>> per_example = jnp.array([[3.0, 4.0], [0.3, 0.4]])
      >>> tx.update(per_example, tx.init(params), params)[0]
      Array([-0.045, -0.06 ], dtype=float32)

    References:
      Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar and Zhang, "Deep Learning with
      Differential Privacy", ACM CCS 2016.
    """
    with hp.caller("dpsgd"):
        nesterov = checks.flag("dpsgd", "nesterov", nesterov)
        if seed is None:
            raise TypeError(
                "`dpsgd` needs seed to be an int seed or a typed PRNG key (the noise must be "
                "reproducible). Received: seed=None."
            )
        velocity = (
            identity()
            if momentum is None
            else Trace(momentum, nesterov, None, hyperparam_name="momentum")
        )
        return chain(
            differentially_private_aggregate(l2_norm_clip, noise_multiplier, seed=seed),
            velocity,
            scale_by_learning_rate(learning_rate),
        )
