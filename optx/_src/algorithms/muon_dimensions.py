"""Which axes of a leaf Muon treats as a matrix: `MuonDimensionNumbers` and their checks.

A leaf of any rank is a batch of matrices: the reduction axes (merged) are its rows, the
output axes (merged) its columns, every other axis a batch axis whose matrices are
orthogonalised one by one.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from optx._src.algorithms.newton_schulz import matrices_only
from optx._src.combine import MaskedNode
from optx._src.tree import path_name


class MuonDimensionNumbers(NamedTuple):
    """The axes of a parameter that `scale_by_muon` treats as the rows and columns of a matrix.

    A parameter used as :math:`y = x W` reduces over ``reduction_axis`` (the input, the
    rows) and produces ``output_axis`` (the columns). Several axes on one side are merged
    (a convolution kernel ``(h, w, in, out)`` is ``MuonDimensionNumbers((0, 1, 2), 3)``);
    the axes on neither side are batch axes, each of their matrices orthogonalised on its
    own (a scan-stacked ``(layers, in, out)`` weight is ``MuonDimensionNumbers(1, 2)``).
    Negative axes count from the end.

    Attributes:
      reduction_axis: an axis or a sequence of axes (default ``0``).
      output_axis: an axis or a sequence of axes (default ``1``).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> stacked = optx.contrib.MuonDimensionNumbers(reduction_axis=1, output_axis=2)
      >>> tx = optx.contrib.scale_by_muon(weight_dimension_numbers={"w": stacked})
      >>> params = {"w": jnp.zeros((4, 3, 5))}  # 4 layers of (3, 5) matrices
      >>> tx.update({"w": jnp.ones((4, 3, 5))}, tx.init(params))[0]["w"].shape
      (4, 3, 5)
    """

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


# The axes of a leaf, normalised: (reduction axes, output axes), non-negative ints.
Dims = tuple[tuple[int, ...], tuple[int, ...]]
MATRIX: Dims = ((0,), (1,))


def is_dimension_numbers(x: Any) -> bool:
    """Whether ``x`` is a `MuonDimensionNumbers` (also optax's, a NamedTuple of both fields)."""
    return isinstance(x, tuple) and getattr(x, "_fields", None) == (
        "reduction_axis",
        "output_axis",
    )


def _is_spec_leaf(x: Any) -> bool:
    return x is None or isinstance(x, MaskedNode) or is_dimension_numbers(x)


def _axes(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value),)
    if (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in value)
    ):
        return tuple(int(a) for a in value)
    return None


def _canonical(api: str, name: str, dn: Any) -> MuonDimensionNumbers:
    reduction, output = _axes(dn.reduction_axis), _axes(dn.output_axis)
    if reduction is None or output is None:
        raise TypeError(
            f"`{api}` needs the axes of {name} to be ints or sequences of ints. Received: {dn!r}."
        )
    return MuonDimensionNumbers(reduction, output)


@dataclasses.dataclass(frozen=True)
class FrozenDimensions:
    """A hashable snapshot of a pytree of `MuonDimensionNumbers` (and ``None``)."""

    treedef: Any
    leaves: tuple[MuonDimensionNumbers | None, ...]

    @property
    def tree(self) -> Any:
        """The pytree."""
        return jax.tree.unflatten(self.treedef, self.leaves)


def freeze_dimensions(api: str, name: str, spec: Any) -> Any:
    """``spec`` (``None``, a callable, or a pytree of dimension numbers) in a hashable form."""
    if spec is None or isinstance(spec, FrozenDimensions):
        return spec
    if callable(spec) and not isinstance(spec, Mapping | tuple):
        return spec
    leaves, treedef = jax.tree.flatten(spec, is_leaf=_is_spec_leaf)
    frozen = []
    for leaf in leaves:
        if isinstance(leaf, MaskedNode):  # a leaf that a `masked` or `partition` hides
            leaf = None
        if leaf is not None and not is_dimension_numbers(leaf):
            raise TypeError(
                f"`{api}` needs {name} to be a pytree of MuonDimensionNumbers (None for "
                f"leaves left out), or a callable returning one. Received: a leaf {leaf!r}."
            )
        frozen.append(None if leaf is None else _canonical(api, name, leaf))
    return FrozenDimensions(treedef, tuple(frozen))


@dataclasses.dataclass(frozen=True)
class Spec:
    """One leaf's dimension numbers (``None``: not given), boxed so that it is a leaf."""

    dn: Any


def spec_tree(api: str, name: str, spec: Any, tree: Any) -> Any:
    """``spec`` (frozen) broadcast over ``tree``: a `Spec` for each leaf of ``tree``."""
    if spec is None:
        return jax.tree.map(lambda _: Spec(MuonDimensionNumbers()), tree)
    raw = (
        spec.tree
        if isinstance(spec, FrozenDimensions)
        else freeze_dimensions(api, name, spec(tree)).tree
    )
    try:
        return jax.tree.map(
            lambda d, sub: jax.tree.map(lambda _: Spec(d), sub),
            raw,
            tree,
            is_leaf=_is_spec_leaf,
        )
    except (ValueError, TypeError):
        raise ValueError(
            f"`{api}` needs {name} with the structure of the parameters (or a prefix of it). "
            f"Received: {jax.tree.structure(raw, is_leaf=_is_spec_leaf)} for parameters "
            f"{jax.tree.structure(tree)}."
        ) from None


def leaf_dims(api: str, name: str, spec: Any, tree: Any) -> list[Dims | None]:
    """The checked, normalised axes of each leaf of ``tree`` (``None``: not a Muon leaf)."""
    specs = jax.tree.leaves(spec_tree(api, name, spec, tree), is_leaf=lambda x: isinstance(x, Spec))
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [
        _check(api, name, path, leaf, box.dn) for (path, leaf), box in zip(flat, specs, strict=True)
    ]


def _check(api: str, name: str, path: Any, leaf: Any, dn: Any) -> Dims | None:
    if dn is None:
        return None
    shape = np.shape(leaf)
    dn = _canonical(api, name, dn)
    where = f"params[{path_name(path)!r}] of shape {shape} with {dn!r}"
    ndim = len(shape)
    if ndim < 2:
        raise ValueError(
            f"`{api}` needs parameters of rank 2 or more (matrices, or batches of them). "
            f"Received: {where}. Route it to the AdamW fallback (in `muon`: None in "
            f"muon_weight_dimension_numbers, or leave it out of muon_mask)."
        )
    axes = dn.reduction_axis + dn.output_axis
    if not all(-ndim <= a < ndim for a in axes):
        raise ValueError(
            f"`{api}` needs the axes of {name} within the rank of each parameter. "
            f"Received: {where}."
        )
    reduction = tuple(a % ndim for a in dn.reduction_axis)
    output = tuple(a % ndim for a in dn.output_axis)
    if not reduction or not output or len(set(reduction + output)) != len(reduction + output):
        raise ValueError(
            f"`{api}` needs distinct, non-empty reduction and output axes in {name}. "
            f"Received: {where}."
        )
    return reduction, output


def fans(shape: tuple[int, ...], dims: Dims) -> tuple[int, int]:
    """``(fan_in, fan_out)``: the sizes of the merged reduction and output axes."""
    reduction, output = dims
    return math.prod(shape[a] for a in reduction), math.prod(shape[a] for a in output)


def batch_axes(ndim: int, dims: Dims) -> tuple[int, ...]:
    """The axes on neither side, in order."""
    return tuple(a for a in range(ndim) if a not in dims[0] + dims[1])


def muon_leaf_dims(api: str, spec: Any, tree: Any) -> list[Dims]:
    """The axes of each leaf of ``tree`` (all Muon leaves) by ``weight_dimension_numbers``."""
    if spec is None:
        matrices_only(api, tree)
        return [MATRIX] * len(jax.tree.leaves(tree))
    dims = leaf_dims(api, "weight_dimension_numbers", spec, tree)
    # As optax, a leaf given None must be a matrix.
    leaves, treedef = jax.tree.flatten(tree)
    unset = [x if d is None else np.zeros((1, 1)) for x, d in zip(leaves, dims, strict=True)]
    matrices_only(api, jax.tree.unflatten(treedef, unset))
    return [MATRIX if d is None else d for d in dims]
