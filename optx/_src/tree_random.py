"""Random pytrees: a key per leaf, random leaves shaped like a tree's, keys as data."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
from jax.typing import ArrayLike, DTypeLike

PyTree = Any


def split_key_like(rng_key: ArrayLike, target_tree: PyTree) -> PyTree:
    """One key per leaf of ``target_tree``, split from ``rng_key``, in a tree of its structure.

    Leaf ``i`` (in tree order) gets ``jax.random.split(rng_key, n)[i]``.

    Args:
      rng_key: a PRNG key (``jax.random.key`` or ``jax.random.PRNGKey``).
      target_tree: the tree whose structure the keys take.

    Returns:
      A tree of keys with the structure of ``target_tree``.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> keys = optx.tree.split_key_like(jax.random.key(0), {"a": jnp.ones(2), "b": 1.0})
      >>> sorted(keys)
      ['a', 'b']
    """
    treedef = jax.tree.structure(target_tree)
    return jax.tree.unflatten(treedef, list(jax.random.split(rng_key, treedef.num_leaves)))


def random_like(
    rng_key: ArrayLike,
    target_tree: PyTree,
    sampler: Callable[..., ArrayLike] = jax.random.normal,
    dtype: DTypeLike | None = None,
) -> PyTree:
    """Random leaves with the shapes of ``target_tree``'s, one key per leaf.

    Leaf ``i`` is ``sampler(key_i, leaf.shape, dtype or leaf.dtype)`` with the keys of
    `split_key_like`. A sampler that takes ``out_sharding`` (as ``jax.random.normal``
    does) is given the leaf's sharding, so the noise is laid out like the leaf.

    Args:
      rng_key: a PRNG key.
      target_tree: a pytree of arrays.
      sampler: ``sampler(key, shape, dtype)`` returning an array, e.g.
        ``jax.random.normal`` (the default) or ``jax.random.uniform``.
      dtype: the dtype asked of ``sampler``; by default each leaf's.

    Returns:
      A tree with the structure and shapes of ``target_tree``.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> noise = optx.tree.random_like(jax.random.key(0), {"w": jnp.zeros((2, 3))})
      >>> noise["w"].shape, noise["w"].dtype
      ((2, 3), dtype('float32'))
    """
    keys = split_key_like(rng_key, target_tree)
    try:
        takes_sharding = "out_sharding" in inspect.signature(sampler).parameters
    except (TypeError, ValueError):  # a callable without a signature (a C function)
        takes_sharding = False

    def draw(leaf: Any, key: Any) -> Any:
        leaf_dtype = dtype or leaf.dtype
        if takes_sharding:
            return sampler(key, leaf.shape, leaf_dtype, out_sharding=jax.typeof(leaf).sharding)
        return sampler(key, leaf.shape, leaf_dtype)

    return jax.tree.map(draw, target_tree, keys)


def unwrap_random_key_data(input_tree: PyTree) -> PyTree:
    """Typed PRNG keys (``jax.random.key``) replaced by their raw ``uint32`` data.

    Other leaves are unchanged. Useful to compare states that hold keys
    (`add_noise`'s) with array assertions.

    Example:
      >>> import jax, optx
      >>> optx.tree.unwrap_random_key_data({"key": jax.random.key(0), "x": 1.0})["key"].dtype
      dtype('uint32')
    """

    def unwrap(x: Any) -> Any:
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.key_data(x)
        return x

    return jax.tree.map(unwrap, input_tree)
