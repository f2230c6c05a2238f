"""Random keys held by a transform: as a hashable value, and as raw key data in its state.

A transform holds no arrays (it is a hashable, frozen configuration), so a key is kept as a
`KeySpec`: an int seed, or a typed key's implementation name and raw data. Its state holds
``jax.random.key_data`` (uint32), plain arrays that NumPy, checkpoints and tree utilities
accept.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from optx._src import checks
from optx._src import hyperparams as hp

KeySpec = int | tuple[str, tuple[int, ...]]


def typed_key_spec(key: Any) -> KeySpec | None:
    """The `KeySpec` of an int seed or of one concrete typed key; ``None`` otherwise."""
    if isinstance(key, int | np.integer) and not isinstance(key, bool):
        return int(key)
    if (
        isinstance(key, jax.Array)
        and not isinstance(key, jax.core.Tracer)
        and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        and key.shape == ()
    ):
        impl = str(jax.random.key_impl(key))
        return impl, tuple(int(x) for x in np.asarray(jax.random.key_data(key)).ravel())
    return None


def impl_of(spec: KeySpec) -> str | None:
    """The key implementation of ``spec`` (``None``: JAX's default)."""
    return spec[0] if isinstance(spec, tuple) else None


def initial_key_data(spec: KeySpec) -> jax.Array:
    """The raw data of the key ``spec`` describes, for a state."""
    if isinstance(spec, tuple):
        impl, data = spec
        key = jax.random.wrap_key_data(jnp.asarray(data, jnp.uint32), impl=impl)
    else:
        key = jax.random.key(spec)
    return jax.random.key_data(key)


def wrap_key(data: jax.Array, spec: KeySpec) -> jax.Array:
    """The typed key of a state's raw ``data``, of the implementation ``spec`` names."""
    return jax.random.wrap_key_data(data, impl=impl_of(spec))


def warn_seed(api: str, seed: Any) -> None:
    """Warns that ``seed=`` is deprecated (for ``key=``), as optax does in `add_noise`."""
    if seed is not None:
        checks.deprecated(f"`{api}`'s seed is deprecated (as in optax): pass key={seed!r} instead.")


def key_spec(api: str, key: Any, seed: Any) -> KeySpec:
    """Normalises ``key`` / ``seed`` to an int seed or (implementation, key data)."""
    api = hp.current(api)
    if seed is not None:
        if key is not None:
            raise ValueError(
                f"`{api}` needs one of key and seed, not both. "
                f"Received: key={key!r}, seed={seed!r}."
            )
        key = seed
    if key is None:
        return 0
    if isinstance(key, Tracer):
        raise TypeError(
            f"`{api}` needs key to be concrete when the transform is built (transforms hold "
            f"no arrays). Received: key={key!r}. To draw other noise inside a traced "
            f"function, replace the state's `rng_key` with `jax.random.key_data(new_key)`."
        )
    spec = typed_key_spec(key)
    if spec is not None:
        return spec
    raise TypeError(
        f"`{api}` needs key to be an int seed or one typed PRNG key (`jax.random.key(seed)`). "
        f"Received: key={key!r}. Wrap a raw uint32 key with `jax.random.wrap_key_data(key)`."
    )
