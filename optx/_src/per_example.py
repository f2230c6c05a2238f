"""Per-example gradient clipping (differential privacy): clip each example, then sum.

`per_example_global_norm_clip` clips each example's gradient by its norm over every leaf,
`per_example_layer_norm_clip` each leaf (layer) separately. Both are functions of a batch of
gradients (leading axis: examples), not transforms.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from optx._src import checks
from optx._src.tree import leaves_with_paths


def _leaves(api: str, grads: Any) -> tuple[list[jax.Array], Any]:
    """The leaves of ``grads`` and its structure, checked to share a leading batch axis."""
    found = leaves_with_paths(grads)
    if not found:
        raise ValueError(
            f"`{api}` needs grads holding at least one array. Received: grads={grads!r}."
        )
    shapes = [(path, np.shape(g)) for path, g in found]
    batch = shapes[0][1][:1]
    if any(len(s) == 0 or s[:1] != batch for _, s in shapes):
        listed = ", ".join(f"{path!r}: {s}" for path, s in shapes)
        raise ValueError(
            f"`{api}` needs every leaf of grads to have the examples' axis first, of one "
            f"size (per-example gradients, as `jax.vmap(jax.grad(loss))` gives). Received: "
            f"shapes {{{listed}}}."
        )
    return [jnp.asarray(g) for _, g in found], jax.tree.structure(grads)


def _check_bound(api: str, name: str, value: Any) -> None:
    """A Python bound must be >= 0 (``inf`` means no clipping); arrays are taken as given."""
    number = isinstance(value, numbers.Real | np.number) and not isinstance(value, bool)
    if number and (math.isnan(float(value)) or float(value) < 0):
        raise ValueError(f"`{api}` needs {name} >= 0. Received: {name}={value!r}.")


def _clipped_sum(leaves: list[jax.Array], bound: ArrayLike) -> tuple[list[jax.Array], jax.Array]:
    """Each example scaled to a norm (over ``leaves``) of at most ``bound``, then summed.

    Returns the sums (one per leaf, in the leaf's floating dtype) and how many examples
    were scaled down (int).
    """
    wide = [g.astype(jnp.promote_types(g.dtype, jnp.float32)) for g in leaves]
    sq = sum(jnp.sum(g * g, axis=tuple(range(1, g.ndim))) for g in wide)
    # bound / 0 is inf (no clipping), 0 / 0 and inf / inf are NaN: a factor of 1 for both.
    factors = jnp.nan_to_num(jnp.minimum(bound / jnp.sqrt(sq), 1.0), nan=1.0)
    clipped = jnp.sum(factors < 1.0)
    sums = []
    for g, w in zip(leaves, wide, strict=True):
        out = jnp.tensordot(factors.astype(w.dtype), w, axes=1)
        sums.append(out.astype(g.dtype) if jnp.issubdtype(g.dtype, jnp.floating) else out)
    return sums, clipped


def per_example_global_norm_clip(grads: Any, l2_norm_clip: ArrayLike) -> tuple[Any, jax.Array]:
    r"""Clips each example's gradient to a global norm of at most ``l2_norm_clip``; sums them.

    With :math:`g_i` example :math:`i`'s gradient (every leaf's slice ``[i]``) and
    :math:`C` = ``l2_norm_clip``:

    .. math:: \sum_i g_i \min\Bigl(1, \frac{C}{\lVert g_i \rVert_2}\Bigr)

    where :math:`\lVert g_i \rVert_2` is the norm over all leaves; an example of norm 0
    counts as unclipped. Norms are summed in float32 at least.

    Args:
      grads: per-example gradients: a pytree whose leaves share a leading axis (the
        examples).
      l2_norm_clip: :math:`C \ge 0` (``inf``: no clipping); a number or a scalar array.

    Returns:
      ``(sum, clipped)``: the sum of the clipped gradients (the structure of ``grads``
      without the leading axis) and the number of examples scaled down (an int scalar).

    Raises:
      ValueError: ``grads`` holds no array, a leaf has no leading axis or another length
        on it, or ``l2_norm_clip`` is a negative or NaN number.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> grads = [jnp.array([[0.0, 0.0], [3.0, 4.0], [0.0, 0.5]])]
      >>> optx.per_example_global_norm_clip(grads, 1.0)
      ([Array([0.6, 1.3], dtype=float32)], Array(1, dtype=int32))

    References:
      Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar and Zhang, "Deep Learning with
      Differential Privacy", CCS 2016.
    """
    api = "per_example_global_norm_clip"
    _check_bound(api, "l2_norm_clip", l2_norm_clip)
    leaves, treedef = _leaves(api, grads)
    sums, clipped = _clipped_sum(leaves, l2_norm_clip)
    return treedef.unflatten(sums), clipped


def per_example_layer_norm_clip(
    grads: Any, global_l2_norm_clip: ArrayLike, uniform: bool = True
) -> tuple[Any, Any]:
    r"""Clips each example's gradient leaf by leaf (layer by layer); sums them.

    Leaf :math:`k` of each example is clipped to a norm of at most :math:`C_k`, then summed
    over the examples as in `per_example_global_norm_clip`. With :math:`C` =
    ``global_l2_norm_clip``, :math:`K` leaves and :math:`D_k` elements per example in
    leaf :math:`k` (:math:`D` in all):

    .. math:: C_k = C / \sqrt{K} \ \text{(uniform)}, \qquad
       C_k = C \sqrt{D_k / D} \ \text{(otherwise)}

    Either way :math:`\sum_k C_k^2 = C^2`: the clipped example's global norm is at most
    :math:`C`. With one leaf this is `per_example_global_norm_clip`.

    Args:
      grads: per-example gradients: a pytree whose leaves share a leading axis (the
        examples).
      global_l2_norm_clip: :math:`C \ge 0`; a number or a scalar array.
      uniform: share :math:`C` equally among the leaves (else in proportion to their
        sizes).

    Returns:
      ``(sums, clipped)``: two trees of the structure of ``grads``, the sums of the
      clipped gradients and per leaf the number of examples scaled down.

    Raises:
      ValueError: ``grads`` holds no array, a leaf has no leading axis or another length
        on it, or ``global_l2_norm_clip`` is a negative or NaN number.
      TypeError: ``uniform`` is not a bool.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> grads = {"a": jnp.array([[3.0], [0.5]]), "b": jnp.array([[4.0], [0.5]])}
      >>> sums, clipped = optx.per_example_layer_norm_clip(grads, 2**0.5)
      >>> sums
      {'a': Array([1.5], dtype=float32), 'b': Array([1.5], dtype=float32)}
      >>> clipped
      {'a': Array(1, dtype=int32), 'b': Array(1, dtype=int32)}

    References:
      McMahan, Ramage, Talwar and Zhang, "Learning Differentially Private Recurrent
      Language Models", ICLR 2018.
    """
    api = "per_example_layer_norm_clip"
    _check_bound(api, "global_l2_norm_clip", global_l2_norm_clip)
    uniform = checks.flag(api, "uniform", uniform)
    leaves, treedef = _leaves(api, grads)
    sizes = [math.prod(g.shape[1:]) for g in leaves]
    total = sum(sizes)
    sums, counts = [], []
    for g, size in zip(leaves, sizes, strict=True):
        share = 1.0 / len(leaves) if uniform else size / total
        (s,), c = _clipped_sum([g], global_l2_norm_clip * share**0.5)
        sums.append(s)
        counts.append(c)
    return treedef.unflatten(sums), treedef.unflatten(counts)
