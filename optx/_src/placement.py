"""Where optimizer values live: slots on their parameter's sharding, updates brought back.

Under a plain `jax.jit` (no ``out_shardings``), XLA places a value that does not depend on
the inputs as it likes: zeros made from a shape land on one device (mesh axes of type
``Auto``) or fail to type (``Explicit`` axes). `zeros_like` makes a slot that follows its
parameter: typed with the parameter's sharding under ``Explicit`` axes, derived from the
parameter under ``Auto`` axes (so that sharding propagation gives it the parameter's
layout), placed with a concrete array's sharding outside ``jit``.

`like_param` brings a new parameter back to its parameter's sharding (`apply_updates`):
with ZeRO-1 state (`shard_state`) the updates come out of sharded moments, and a replicated
parameter plus a sharded update would come back sharded (``Auto``) or be refused
(``Explicit``). It costs nothing on one device, and under ``jit`` the one all-gather that
the parameter's layout needs.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.shard_alike import shard_alike
from jax.sharding import AxisType, NamedSharding, PartitionSpec


def _mesh_types(sharding: Any) -> tuple[Any, ...]:
    mesh = getattr(sharding, "mesh", None)
    return tuple(getattr(mesh, "axis_types", ()) or ())


def _typed_sharding(x: Any) -> NamedSharding | None:
    """A tracer's sharding where its type carries one (``Explicit`` mesh axes), else None."""
    try:
        sharding = jax.typeof(x).sharding
    except (AttributeError, TypeError):
        return None
    types = _mesh_types(sharding)
    if AxisType.Explicit in types and AxisType.Manual not in types:
        return sharding
    return None


def _in_manual(x: Any) -> bool:
    """Whether ``x`` is traced inside `jax.shard_map` (per-device values)."""
    try:
        return AxisType.Manual in _mesh_types(jax.typeof(x).sharding)
    except (AttributeError, TypeError):
        return False


def _concrete_sharding(x: Any) -> Any:
    """A concrete array's sharding where it was placed on purpose (committed), else None."""
    concrete = isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer)
    if concrete and (x.committed or len(x.sharding.device_set) > 1):
        return x.sharding
    return None


def zeros_like(x: Any, dtype: Any = None) -> jax.Array:
    """Zeros with ``x``'s shape (and dtype, unless given), on ``x``'s sharding.

    On one device this is ``jnp.zeros``. Under ``jit`` on several devices the zeros are an
    elementwise expression of ``x`` that is 0 whatever ``x`` holds (NaN and infinities
    included), so they take its sharding: from its type under ``Explicit`` mesh axes (with
    no `jax.set_mesh` needed), by sharding propagation under ``Auto`` axes. Outside ``jit``
    a committed array's sharding is used.
    """
    dtype = jnp.result_type(x) if dtype is None else jnp.dtype(dtype)
    shape = jnp.shape(x)
    if isinstance(x, jax.core.Tracer):
        if jax.device_count() == 1 or _in_manual(x):
            return jnp.zeros(shape, dtype)
        real = jnp.real(x) if jnp.iscomplexobj(x) else x
        if not jnp.issubdtype(real.dtype, jnp.inexact):
            return (real * 0).astype(dtype)
        return jnp.where(jnp.isfinite(real), jnp.abs(real * 0), 0).astype(dtype)
    sharding = _concrete_sharding(x)
    if sharding is not None:
        return jnp.zeros(shape, dtype, device=sharding)
    return jnp.zeros(shape, dtype)


def full_like(x: Any, fill_value: Any, dtype: Any = None) -> jax.Array:
    """``fill_value`` with ``x``'s shape (and dtype, unless given), on ``x``'s sharding."""
    zeros = zeros_like(x, dtype)
    if isinstance(fill_value, float) and fill_value == 0.0 and math.copysign(1.0, fill_value) < 0:
        return -zeros  # -0.0: a sum with +0.0 would lose the sign
    return zeros + jnp.asarray(fill_value, zeros.dtype)


def zeros_without_axes(x: Any, axes: tuple[int, ...], dtype: Any = None) -> jax.Array:
    """Zeros shaped like ``x`` less ``axes``, sharded along the axes of ``x`` they keep.

    For factored moments (Adafactor's row and column statistics) and per-axis accumulators
    (SM3's cover).
    """
    dtype = jnp.result_type(x) if dtype is None else jnp.dtype(dtype)
    ndim = jnp.ndim(x)
    axes = tuple(sorted({a % ndim for a in axes}))
    shape = tuple(d for i, d in enumerate(jnp.shape(x)) if i not in axes)
    if not axes:
        return zeros_like(x, dtype)

    def kept(sharding: NamedSharding) -> NamedSharding:
        spec = list(sharding.spec) + [None] * (ndim - len(sharding.spec))
        return NamedSharding(
            sharding.mesh, PartitionSpec(*(spec[i] for i in range(ndim) if i not in axes))
        )

    if isinstance(x, jax.core.Tracer):
        if jax.device_count() == 1 or _in_manual(x):
            return jnp.zeros(shape, dtype)
        return jnp.sum(zeros_like(x, dtype), axis=axes)
    sharding = _concrete_sharding(x)
    if isinstance(sharding, NamedSharding):
        return jnp.zeros(shape, dtype, device=kept(sharding))
    if sharding is not None:
        return jnp.zeros(shape, dtype, device=sharding)
    return jnp.zeros(shape, dtype)


def vdot(a: jax.Array, b: jax.Array) -> jax.Array:
    """``jnp.vdot(a, b)``, also over axes that ``Explicit`` mesh axes type as sharded.

    There a contraction needs its output's sharding: the scalar is replicated.
    """
    typed = _typed_sharding(a) if isinstance(a, jax.core.Tracer) else None
    if typed is None or all(entry is None for entry in typed.spec):
        return jnp.vdot(a, b)
    letters = "abcdefghijklmnopqrstuvwxyz"[: jnp.ndim(a)]
    replicated = NamedSharding(typed.mesh, PartitionSpec())
    return jnp.einsum(f"{letters},{letters}->", jnp.conj(a), b, out_sharding=replicated)


def gathered(x: jax.Array) -> jax.Array:
    """``x`` replicated where its type says it is sharded (``Explicit`` mesh axes).

    Else ``x`` itself: under ``Auto`` axes XLA gathers what an operation needs by itself.
    """
    typed = _typed_sharding(x) if isinstance(x, jax.core.Tracer) else None
    if typed is None or all(entry is None for entry in typed.spec):
        return x
    return jax.sharding.reshard(x, NamedSharding(typed.mesh, PartitionSpec()))


def like_param(u: Any, p: Any) -> Any:
    """``u`` (an update or a new parameter) on the sharding of ``p``; ``u`` on one device."""
    if jax.device_count() == 1 or not isinstance(u, jax.Array) or not isinstance(p, jax.Array):
        return u
    if jnp.shape(u) != jnp.shape(p):
        return u
    if isinstance(p, jax.core.Tracer) or isinstance(u, jax.core.Tracer):
        if not isinstance(p, jax.core.Tracer) or _in_manual(p):
            return u
        typed = _typed_sharding(p)
        if typed is not None:
            return u if _typed_sharding(u) == typed else jax.sharding.reshard(u, typed)
        if isinstance(u, jax.core.Tracer) and _typed_sharding(u) is None:
            # The barrier keeps ``p``'s sharding from flowing back into what made ``u``:
            # a sum over sharded updates stays on the shards, then is gathered once.
            return shard_alike(jax.lax.optimization_barrier(u), p)[0]
        return u
    if not u.sharding.is_equivalent_to(p.sharding, p.ndim):
        return jax.device_put(u, p.sharding)
    return u
