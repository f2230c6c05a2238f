"""Low-precision parameters that keep their small updates: `kahan_summation`, `stochastic_rounding`.

`apply_updates` adds an update to a bfloat16 parameter in bfloat16: an update smaller than
half the spacing of bfloat16 numbers at the parameter (``|p| * 2**-8``) is rounded away, so
a long run with a small learning rate stalls however precise the optimizer's moments are.
The two transforms here go last in a chain and return updates ``u'`` in the parameter's
dtype such that ``apply_updates(p, u')`` lands on a better-rounded target: the nearest
value to ``p + u`` plus the rounding error carried from earlier steps (`kahan_summation`),
or ``p + u`` rounded up or down at random with the probabilities that make it exact on
average (`stochastic_rounding`). Parameters of 32 bits or more (complex ones too: there is
no 16-bit complex dtype) pass through unchanged and cost no state.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from optx._src import checks, placement
from optx._src.base import Params, Transform, Updates, transform
from optx._src.keys import KeySpec, initial_key_data, key_spec, wrap_key
from optx._src.sparse import is_update_leaf

# The parameter dtypes whose updates these transforms round: floating point of 16 bits.
LOW_PRECISION = (np.dtype(jnp.bfloat16), np.dtype(jnp.float16))


def is_low_precision(x: Any) -> bool:
    """Whether ``x`` is an array of a dtype in `LOW_PRECISION` (its updates get rounded)."""
    return hasattr(x, "dtype") and np.dtype(x.dtype) in LOW_PRECISION


def _leaves(api: str, params: Params, *trees: Any) -> tuple[Any, list[Any], list[list[Any]]]:
    """The parameters' leaves, and each tree's leaves at the same places (``None`` kept)."""
    leaves, treedef = jax.tree.flatten(params, is_leaf=is_update_leaf)
    out = []
    for name, tree in trees:
        checks.same_tree(api, tree, params, name, "params", allow_none=True)
        out.append(jax.tree.leaves(tree, is_leaf=is_update_leaf))
    return treedef, leaves, out


def _landing(p: jax.Array, target: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The update ``u`` in ``p``'s dtype that moves ``p`` to ``target``, and where it lands.

    ``target`` holds values of ``p``'s dtype (in float32). ``target - p`` computed in
    float32 is exact when the two are within a factor 2**15 of each other, and fits ``p``'s
    dtype when they are within a factor 2 (Sterbenz's lemma): then ``p + u`` is ``target``
    exactly, however the sum is rounded. A larger jump (a sign change, a step larger than
    the parameter) can need more bits than the dtype has; the landing point is then
    computed as `apply_updates` computes it, ``p + u`` in ``p``'s dtype.
    """
    u = (target - p.astype(jnp.float32)).astype(p.dtype)
    return u, (p + u).astype(p.dtype)


class KahanSummationState(NamedTuple):
    """State of `kahan_summation`.

    Attributes:
      residual: the rounding error not yet applied to each low-precision parameter (an
        array of its shape), ``None`` for parameters of 32 bits or more.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones(3, jnp.bfloat16), "b": jnp.ones(3, jnp.float32)}
      >>> optx.kahan_summation().init(params)
      KahanSummationState(residual={'b': None, 'w': Array([0, 0, 0], dtype=bfloat16)})
    """

    residual: Params


@transform
class KahanSummation(Transform):
    """See `kahan_summation`."""

    name = "kahan_summation"
    elementwise = True
    residual_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype = checks.dtype_option(self.name, "residual_dtype", self.residual_dtype)
        object.__setattr__(self, "residual_dtype", dtype)

    def _residual(self, p: Any) -> jax.Array | None:
        if not is_low_precision(p):
            return None
        return placement.zeros_like(p, self.residual_dtype)

    def init(self, params: Params) -> KahanSummationState:
        # Complex parameters pass: no 16-bit complex dtype exists, so they pass unchanged.
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        return KahanSummationState(jax.tree.map(self._residual, params))

    def update(
        self,
        updates: Updates,
        state: KahanSummationState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, KahanSummationState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        treedef, leaves, (us, rs) = _leaves(
            api, params, ("updates", updates), ("the state's residual", state.residual)
        )
        new_u, new_r = [], []
        for p, u, r in zip(leaves, us, rs, strict=True):
            if u is None or r is None:  # no gradient, or not a 16-bit parameter
                new_u.append(u)
                new_r.append(r)
                continue
            # The compensated sum, in float32: the update plus what earlier steps lost.
            target = p.astype(jnp.float32) + (u.astype(jnp.float32) + r.astype(jnp.float32))
            u_out, landed = _landing(p, target.astype(p.dtype).astype(jnp.float32))
            residual = target - landed.astype(jnp.float32)
            # A non-finite step leaves the parameter non-finite; the residual starts over.
            residual = jnp.where(jnp.isfinite(residual), residual, 0.0)
            new_u.append(u_out)
            new_r.append(residual.astype(r.dtype))
        return jax.tree.unflatten(treedef, new_u), KahanSummationState(
            jax.tree.unflatten(treedef, new_r)
        )


def kahan_summation(residual_dtype: DTypeLike | None = None) -> KahanSummation:
    r"""Keeps the rounding error of bfloat16 / float16 parameter updates (Kahan summation).

    Put it last in a chain. For each parameter :math:`p` of 16 bits with update :math:`u`
    it computes in float32

    .. math::
       t = p + (u + r), \quad p' = \mathrm{round}(t), \quad r \leftarrow t - p'

    where :math:`\mathrm{round}` rounds to the nearest value of the parameter's dtype and
    :math:`r` is the residual kept in the state (zero at first), and returns
    :math:`u' = p' - p` in the parameter's dtype, so that ``apply_updates(p, u')`` is
    :math:`p'` exactly. Updates too small to move a bfloat16 parameter on their own add up
    in :math:`r` until they do: :math:`p + r` follows the float32 sum of the updates, to
    the residual's precision. (When :math:`p'` and :math:`p` are more than a factor 2 apart
    :math:`p' - p` may not fit the dtype; :math:`r` then keeps whatever the step missed.)

    Parameters of other dtypes (float32, float64, and complex64 and complex128, whose parts
    are 32 or 64 bits) pass through unchanged, with no state.
    A parameter changed outside the optimizer keeps its residual, which is at most half
    the dtype's spacing at the old value.

    Memory: one residual per 16-bit parameter, in ``residual_dtype``: 2 bytes per parameter
    by default (bfloat16 parameter and residual: 4 bytes in all, against 6 for a bfloat16
    copy of float32 master weights), 4 with ``residual_dtype=jnp.float32``.

    Args:
      residual_dtype: the residual's dtype; ``None`` (default) uses each parameter's own.
        The residual is at most half the spacing at the parameter, so in bfloat16 it
        keeps 8 significant bits of it; ``jnp.float32`` keeps 24 (the run then follows
        float32 master weights more closely), at 2 more bytes per parameter. For float16
        parameters prefer ``jnp.float32``: float16 residuals of parameters below ~0.06 are
        subnormal.

    Returns:
      The transform; its state is a `KahanSummationState`. It has no hyperparameters.

    Raises:
      TypeError: ``residual_dtype`` is not a floating dtype.

    Example:
      SGD with a step far below bfloat16's spacing at 1.0 (2**-7): plain bfloat16 never
      moves, the compensated sum moves as float32 does.

      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones(3, jnp.bfloat16)}
      >>> grads = {"w": jnp.full(3, -1.0, jnp.bfloat16)}
      >>> tx = optx.chain(optx.sgd(1e-3), optx.kahan_summation())
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> params["w"]
      Array([1.10156, 1.10156, 1.10156], dtype=bfloat16)
      >>> plain = optx.sgd(1e-3).update(grads, optx.sgd(1e-3).init(params))[0]
      >>> optx.apply_updates({"w": jnp.ones(3, jnp.bfloat16)}, plain)["w"]
      Array([1, 1, 1], dtype=bfloat16)

    References:
      Kahan, "Further remarks on reducing truncation errors", Communications of the ACM,
      1965.
      Zamirai, Zhang, Aberger and De Sa, "Revisiting BFloat16 Training", arXiv:2010.06192,
      2020.
    """
    return KahanSummation(residual_dtype)


class StochasticRoundingState(NamedTuple):
    """State of `stochastic_rounding`.

    Attributes:
      rng_key: the raw data of the random key (``jax.random.key_data``, uint32); each
        update splits it into the next key and the step's sampling key.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> state = optx.stochastic_rounding(key=0).init({"w": jnp.ones(3, jnp.bfloat16)})
      >>> state.rng_key.dtype, state.rng_key.shape
      (dtype('uint32'), (2,))
    """

    rng_key: jax.Array


def _round_stochastically(target: jax.Array, dtype: Any, key: jax.Array) -> jax.Array:
    """``target`` (float32) rounded to ``dtype``, up or down, exact on average.

    Of the two neighbours ``a`` (nearest) and ``b`` (the next one on the other side of
    ``target``), ``b`` is taken with probability ``|target - a| / |b - a|``.
    """
    a = target.astype(dtype)
    toward = jnp.where(target > a.astype(jnp.float32), jnp.inf, -jnp.inf).astype(dtype)
    b = jnp.nextafter(a, toward)
    a32, b32 = a.astype(jnp.float32), b.astype(jnp.float32)
    # 0 when target is a value of dtype; NaN (never taken) when a is infinite or NaN.
    probability = jnp.abs(target - a32) / jnp.abs(b32 - a32)
    draw = jax.random.uniform(key, jnp.shape(target), jnp.float32)
    return jnp.where(draw < probability, b32, a32)


@transform
class StochasticRounding(Transform):
    """See `stochastic_rounding`."""

    name = "stochastic_rounding"
    key: KeySpec = 0

    def init(self, params: Params) -> StochasticRoundingState:
        # Complex parameters pass unchanged, as 32-bit ones: no 16-bit complex dtype exists.
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        return StochasticRoundingState(initial_key_data(self.key))

    def update(
        self,
        updates: Updates,
        state: StochasticRoundingState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, StochasticRoundingState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        treedef, leaves, (us,) = _leaves(api, params, ("updates", updates))
        key = wrap_key(state.rng_key, self.key)
        key, sample_key = jax.random.split(key)
        keys = jax.random.split(sample_key, max(len(leaves), 1))
        out = []
        for i, (p, u) in enumerate(zip(leaves, us, strict=True)):
            if u is None or not is_low_precision(p):
                out.append(u)
                continue
            target = p.astype(jnp.float32) + u.astype(jnp.float32)
            out.append(_landing(p, _round_stochastically(target, p.dtype, keys[i]))[0])
        new_state = StochasticRoundingState(jax.random.key_data(key))
        return jax.tree.unflatten(treedef, out), new_state


def stochastic_rounding(
    key: jax.Array | int | None = None, *, seed: int | None = None
) -> StochasticRounding:
    r"""Rounds bfloat16 / float16 parameter updates up or down at random, exact on average.

    Put it last in a chain. For each parameter :math:`p` of 16 bits with update :math:`u`,
    :math:`t = p + u` is computed in float32; of the two values of the parameter's dtype
    around it, :math:`a \le t \le b`, the parameter moves to

    .. math::
       p' = \begin{cases} b & \text{with probability } (t - a) / (b - a) \\
                          a & \text{otherwise,} \end{cases}
       \qquad \mathbb E[p'] = t,

    and the transform returns :math:`u' = p' - p` in the parameter's dtype, so that
    ``apply_updates(p, u')`` is :math:`p'` exactly. (When :math:`p'` and :math:`p` are
    more than a factor 2 apart :math:`p' - p` may not fit the dtype and is rounded to it.)
    An update too small to move the parameter by rounding to nearest still moves it on
    average, so the parameter follows the float32 run in expectation, with a random error
    of about the dtype's spacing; no residual is stored.

    Parameters of other dtypes (float32, float64) pass through unchanged. The draws are a
    deterministic function of the key and the step: each update splits the key in the state
    into the next key and a sampling key, split once per leaf, so a run repeats exactly;
    under ``jit`` and eagerly the numbers are the same.

    Memory: the key (2 uint32) and nothing per parameter. Each step draws one float32 per
    16-bit parameter (`jax.random.uniform`).

    Args:
      key: an int seed or a typed PRNG key (``jax.random.key(0)``); ``None`` means seed 0.
        The transform keeps the seed (or the key's implementation and data), not an array.
      seed: the same as ``key``; give one of them.

    Returns:
      The transform; its state is a `StochasticRoundingState`. It has no hyperparameters.

    Raises:
      ValueError: both ``key`` and ``seed`` are given.
      TypeError: ``key`` is neither an int nor a single concrete typed PRNG key.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones(1000, jnp.bfloat16)}
      >>> grads = {"w": jnp.full(1000, -1.0, jnp.bfloat16)}
      >>> tx = optx.chain(optx.sgd(1e-3), optx.stochastic_rounding(key=0))
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> round(float(params["w"].astype(jnp.float32).mean()), 2)  # float32 gives 1.1
      1.1

    References:
      Gupta, Agrawal, Gopalakrishnan and Narayanan, "Deep Learning with Limited Numerical
      Precision", ICML 2015.
      Zamirai, Zhang, Aberger and De Sa, "Revisiting BFloat16 Training", arXiv:2010.06192,
      2020.
    """
    return StochasticRounding(key_spec("stochastic_rounding", key, seed))
