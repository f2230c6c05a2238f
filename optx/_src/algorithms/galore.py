"""GaLore: optimizer state in a low-rank projection of each matrix's gradient.

`scale_by_galore`, `galore` and `GaLoreDimensionNumbers`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import checks, placement
from optx._src import hyperparams as hp
from optx._src.algorithms.adam import scale_by_adam
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import Chain, MaskSpec, accepts_extra, call_update, chain
from optx._src.scaling import scale_by_learning_rate
from optx._src.tree import is_none, path_name
from optx._src.weight_decay import add_decayed_weights


class GaLoreDimensionNumbers(NamedTuple):
    """Which axes of a parameter GaLore treats as the rows and the columns of a matrix.

    The parameter is transposed to ``reduction_axis`` then ``output_axis`` and reshaped to
    a ``(prod(reduction sizes), prod(output sizes))`` matrix; every axis must be in one of
    the two.

    Attributes:
      reduction_axis: the input axis or axes (the rows).
      output_axis: the output axis or axes (the columns).

    Example:
      >>> import optx
      >>> optx.contrib.GaLoreDimensionNumbers(reduction_axis=0, output_axis=(1, 2))
      GaLoreDimensionNumbers(reduction_axis=0, output_axis=(1, 2))
    """

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


GaLoreDimNumsOrFn = GaLoreDimensionNumbers | Params | Callable[[Params], Params | None]


def _is_dim_nums_leaf(x: Any) -> bool:
    return x is None or isinstance(x, GaLoreDimensionNumbers)


def _axes(axis: Sequence[int] | int, ndim: int) -> tuple[int, ...]:
    return tuple(a % ndim for a in ((axis,) if isinstance(axis, int) else axis))


def _matrix_view(
    api: str, path: str, shape: tuple[int, ...], dim: GaLoreDimensionNumbers
) -> tuple[tuple[int, ...], tuple[int, int]]:
    """The transposition and the matrix shape of a leaf of ``shape`` under ``dim``."""
    ndim = len(shape)
    if ndim < 2:
        raise ValueError(
            f"`{api}` needs parameters of rank >= 2 where it projects. Received: {path!r} of "
            f"shape {shape}. Give it None in weight_dimension_numbers."
        )
    rows, cols = _axes(dim.reduction_axis, ndim), _axes(dim.output_axis, ndim)
    if set(rows) & set(cols) or sorted(rows + cols) != list(range(ndim)):
        raise ValueError(
            f"`{api}` needs reduction_axis and output_axis to split the axes of each "
            f"projected parameter in two (each axis in exactly one). Received: {dim} for "
            f"{path!r} of shape {shape}."
        )
    size = lambda axes: math.prod(shape[a] for a in axes)  # noqa: E731
    return rows + cols, (size(rows), size(cols))


def _to_matrix(x: jax.Array, perm: tuple[int, ...], mn: tuple[int, int]) -> jax.Array:
    return jnp.transpose(x, perm).reshape(mn)


def _from_matrix(x: jax.Array, perm: tuple[int, ...], shape: tuple[int, ...]) -> jax.Array:
    transposed = tuple(shape[a] for a in perm)
    inverse = tuple(sorted(range(len(perm)), key=lambda i: perm[i]))
    return x.reshape(transposed).transpose(inverse)


class GaLoreState(NamedTuple):
    """State of `scale_by_galore`.

    Attributes:
      count: steps taken (saturating int32).
      base_optimizer_state: the base optimizer's state, on the projected gradients (the
        other leaves at full size).
      projector: per parameter, its projection matrix; ``None`` where it is not projected
        (optax keeps a ``(0, 0)`` array there, which checkpoints refuse).
      hyperparams: ``scale``.
    """

    count: jax.Array
    base_optimizer_state: OptState
    projector: Updates
    hyperparams: dict[str, jax.Array]


class _DimNums(NamedTuple):
    """A hashable copy of a tree of `GaLoreDimensionNumbers` (a transform holds no dicts)."""

    treedef: Any
    leaves: tuple[Any, ...]


def _frozen(dims: Any) -> Any:
    if dims is None or callable(dims) or isinstance(dims, GaLoreDimensionNumbers):
        return dims
    leaves, treedef = jax.tree.flatten(dims, is_leaf=_is_dim_nums_leaf)
    return _DimNums(treedef, tuple(leaves))


@transform
class ScaleByGalore(Transform):
    """See `scale_by_galore`."""

    name = "scale_by_galore"
    rank: int = 128
    update_proj_gap: int = 200
    scale: ScalarOrSchedule = hp.field(1.0)
    base_optimizer: GradientTransformationLike | None = None
    weight_dimension_numbers: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(
                f"`{hp.current(self.name)}` needs rank to be an int >= 1. "
                f"Received: rank={self.rank!r}."
            )
        gap = checks.nonneg_int(self.name, "update_proj_gap", self.update_proj_gap, 1)
        object.__setattr__(self, "update_proj_gap", gap)
        if self.base_optimizer is None:
            object.__setattr__(self, "base_optimizer", scale_by_adam())
        checks.transform(hp.current(self.name), "base_optimizer", self.base_optimizer)
        object.__setattr__(self, "weight_dimension_numbers", _frozen(self.weight_dimension_numbers))
        super().__post_init__()

    def _dims(self, tree: Any) -> list[Any]:
        """Per leaf of ``tree``: its `GaLoreDimensionNumbers`, or None (not projected)."""
        dims = self.weight_dimension_numbers
        leaves, treedef = jax.tree.flatten(tree, is_leaf=is_none)
        if dims is None:
            return [
                GaLoreDimensionNumbers() if x is not None and np.ndim(x) == 2 else None
                for x in leaves
            ]
        if isinstance(dims, GaLoreDimensionNumbers):
            return [dims if x is not None and np.ndim(x) >= 2 else None for x in leaves]
        if isinstance(dims, _DimNums):
            dims = jax.tree.unflatten(dims.treedef, dims.leaves)
        else:
            dims = dims(tree)
        try:
            return treedef.flatten_up_to(dims)
        except (ValueError, TypeError) as error:
            raise ValueError(
                f"`{self.name}` needs weight_dimension_numbers with the structure of the "
                f"parameters (None where a parameter is not projected). Received: {dims!r} "
                f"for parameters {treedef}."
            ) from error

    def _views(self, tree: Any) -> list[Any]:
        """Per leaf: None, or (transposition, matrix shape, projector shape, left)."""
        flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_none)[0]
        out = []
        for (path, x), dim in zip(flat, self._dims(tree), strict=True):
            if dim is None or x is None:
                out.append(None)
                continue
            perm, (m, n) = _matrix_view(self.name, path_name(path), jnp.shape(x), dim)
            r = min(self.rank, m, n)
            left = m >= n
            out.append((perm, (m, n), (m, r) if left else (n, r), left))
        return out

    def init(self, params: Params) -> GaLoreState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        leaves, treedef = jax.tree.flatten(params, is_leaf=is_none)
        projectors, proxies = [], []
        for p, view in zip(leaves, self._views(params), strict=True):
            if view is None:
                projectors.append(None)
                proxies.append(None if p is None else placement.zeros_like(p))
                continue
            _, (m, n), (_, r), left = view
            projectors.append(jnp.zeros((m, r) if left else (n, r), p.dtype))
            proxies.append(jnp.zeros((r, n) if left else (m, r), p.dtype))
        base_state = self.base_optimizer.init(jax.tree.unflatten(treedef, proxies))
        return GaLoreState(
            zero_count(),
            base_state,
            jax.tree.unflatten(treedef, projectors),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: GaLoreState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, GaLoreState]:
        api = f"{self.name}.update"
        if params is not None:
            # The parameters' shapes, which the state does not keep.
            checks.same_tree(api, updates, params, "updates", "params")
        checks.float_updates(api, updates, complex_ok=True)
        leaves, treedef = jax.tree.flatten(updates, is_leaf=is_none)
        if treedef != jax.tree.structure(state.projector, is_leaf=is_none):
            checks.same_tree(api, updates, state.projector, "updates", "the state")
        refresh = state.count % self.update_proj_gap == 0
        views = self._views(updates)
        low, projectors = [], []
        flat = jax.tree_util.tree_flatten_with_path(updates, is_leaf=is_none)[0]
        olds = jax.tree.leaves(state.projector, is_leaf=is_none)
        for (path, g), old, view in zip(flat, olds, views, strict=True):
            if g is None and old is not None:
                raise ValueError(
                    f"`{api}` needs an array for every projected parameter. Received: "
                    f"updates[{path_name(path)!r}]=None (a parameter without a gradient). "
                    f"Wrap the transform in `optx.skip_missing(...)`."
                )
            if view is None or old is None:
                low.append(g)
                projectors.append(old)
                continue
            perm, mn, shape, left = view
            if old.shape != shape:
                raise ValueError(
                    f"`{api}` needs updates with the shapes of the parameters at init. "
                    f"Received: updates[{path_name(path)!r}] of shape {jnp.shape(g)}, whose "
                    f"projector would be {shape}; the state's is {old.shape}."
                )
            # Whole on every device where the mesh types it sharded (`Explicit` axes): an SVD
            # needs an unsharded input, and the reshape would mix sharded axes.
            g2 = _to_matrix(placement.gathered(g), perm, mn)
            r = old.shape[1]

            def fresh(g2: jax.Array = g2, r: int = r, left: bool = left) -> jax.Array:
                # The leading singular vectors, computed in float32 (as optax, also for
                # float64 gradients: any orthonormal basis of the leading subspace serves);
                # complex64 for complex gradients. The right ones are the columns of vh^H.
                single = jnp.complex64 if jnp.iscomplexobj(g2) else jnp.float32
                u, _, vh = jnp.linalg.svd(g2.astype(single), full_matrices=False)
                return (u[:, :r] if left else jnp.conj(vh[:r, :]).T).astype(g2.dtype)

            p = jax.lax.cond(refresh, fresh, lambda old=old: old)
            projectors.append(p)
            low.append(jnp.conj(p).T @ g2 if left else g2 @ p)
        base = self.base_optimizer
        low_u, base_state = call_update(
            base,
            accepts_extra(base),
            jax.tree.unflatten(treedef, low),
            state.base_optimizer_state,
            None,
            extra,
        )
        scale = state.hyperparams["scale"]
        out = []
        low_leaves = treedef.flatten_up_to(low_u)
        for u, p, g, view in zip(low_leaves, projectors, leaves, views, strict=True):
            if view is None or p is None:
                out.append(u)
                continue
            perm, _, _, left = view
            full = _from_matrix(p @ u if left else u @ jnp.conj(p).T, perm, g.shape)
            out.append((scale * full).astype(g.dtype))
        new_state = GaLoreState(
            safe_increment(state.count),
            base_state,
            jax.tree.unflatten(treedef, projectors),
            state.hyperparams,
        )
        return jax.tree.unflatten(treedef, out), new_state


def scale_by_galore(
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformationLike | None = None,
    weight_dimension_numbers: GaLoreDimNumsOrFn | None = None,
) -> ScaleByGalore:
    r"""GaLore: runs a base optimizer on low-rank projections of the matrices' gradients.

    For a parameter seen as an :math:`m \times n` matrix with gradient :math:`G_t`, and
    :math:`r = \min(\text{rank}, m, n)`: every ``update_proj_gap`` steps (from the first)
    the projector :math:`P` becomes the leading :math:`r` left singular vectors of
    :math:`G_t` (if :math:`m \ge n`; else the right ones, and the products below are
    transposed). Then

    .. math::
       R_t = P^\top G_t, \qquad u_t = s\, P\, \rho(R_t)

    with :math:`\rho` the base optimizer (its state is :math:`r \times n` instead of
    :math:`m \times n`) and :math:`s` = ``scale``. For complex parameters the singular
    vectors are complex and :math:`P^\top` is the conjugate transpose :math:`P^H`, so
    :math:`P P^H` projects onto the gradient's leading subspace; the base optimizer sees
    complex projections (each column of :math:`P` is fixed only up to a phase, which an
    elementwise base optimizer such as Adam, whose second moment is :math:`|R|^2`, does not
    see). Other parameters go through the base
    optimizer at full size, without :math:`s`. The base optimizer is called without the
    parameters: use gradient-only transforms (``scale_by_adam``, ``scale_by_lion``, ...) and
    `galore`'s ``weight_decay`` for decay.

    Args:
      rank: the largest rank of the projections (an int >= 1).
      update_proj_gap: steps between recomputations of the projectors (an int >= 1).
      scale: :math:`s`, applied to the projected parameters' updates.
      base_optimizer: the optimizer in the projected space; ``None`` is
        `scale_by_adam` ``()``.
      weight_dimension_numbers: which parameters to project and how to see them as
        matrices: ``None`` (the 2-D parameters, rows and columns as they are), one
        `GaLoreDimensionNumbers` (for every parameter of rank >= 2), a tree of them with
        the parameters' structure (``None`` where not projected), or a function of the
        parameters returning such a tree.

    Returns:
      The transform; its state is `GaLoreState`; ``scale`` is a dynamic hyperparameter.

    Raises:
      ValueError: ``rank`` or ``update_proj_gap`` is not an int >= 1; at ``init`` or
        ``update``, a projected parameter has rank < 2 or axes the dimension numbers do
        not split in two.
      TypeError: ``base_optimizer`` is not a transform.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.contrib.scale_by_galore(rank=1, base_optimizer=optx.identity())
      >>> params = {"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)}
      >>> grads = {"w": jnp.array([[1.0, 2.0], [2.0, 4.0], [0.0, 0.0]]), "b": jnp.ones(2)}
      >>> updates, state = tx.update(grads, tx.init(params), params)
      >>> state.projector["w"].shape  # a rank-1 gradient: its projection loses nothing
      (3, 1)
      >>> bool(jnp.allclose(updates["w"], grads["w"], atol=1e-6))
      True

    References:
      Zhao, Zhang, Chen, Wang, Anandkumar and Tian, "GaLore: Memory-Efficient LLM Training
      by Gradient Low-Rank Projection", ICML 2024 (arXiv:2403.03507).
    """
    return ScaleByGalore(rank, update_proj_gap, scale, base_optimizer, weight_dimension_numbers)


def galore(
    learning_rate: ScalarOrSchedule,
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformationLike | None = None,
    weight_decay: float = 0.0,
    mask: MaskSpec | None = None,
    weight_dimension_numbers: GaLoreDimNumsOrFn | None = None,
) -> Chain:
    r"""The GaLore optimizer: `scale_by_galore`, decoupled weight decay, the learning rate.

    .. math:: \theta_t = \theta_{t-1} - \eta_t\,\bigl(u_t + \lambda\,\theta_{t-1}\bigr)

    with :math:`u_t` of `scale_by_galore` (Adam on low-rank projections by default),
    :math:`\eta` = ``learning_rate`` and :math:`\lambda` = ``weight_decay``, applied at
    full size.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule (1.0 if the base
        optimizer has its own).
      rank: the largest rank of the projections.
      update_proj_gap: steps between recomputations of the projectors.
      scale: applied to the projected parameters' updates.
      base_optimizer: the optimizer in the projected space; ``None`` is `scale_by_adam`.
      weight_decay: :math:`\lambda \ge 0`.
      mask: which parameters to decay (see `add_decayed_weights`); ``None`` decays all.
      weight_dimension_numbers: see `scale_by_galore`.

    Returns:
      ``chain(scale_by_galore(...), add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_galore`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones((8, 4)), "b": jnp.ones(4)}
      >>> tx = optx.contrib.galore(0.05, rank=2)
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p["w"] ** 2) + jnp.sum(p["b"] ** 2)
      >>> for _ in range(100):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.5)  # from 36
      True

    References:
      Zhao, Zhang, Chen, Wang, Anandkumar and Tian, "GaLore: Memory-Efficient LLM Training
      by Gradient Low-Rank Projection", ICML 2024 (arXiv:2403.03507).
    """
    with hp.caller("galore"):
        return chain(
            scale_by_galore(rank, update_proj_gap, scale, base_optimizer, weight_dimension_numbers),
            add_decayed_weights(weight_decay, mask),
            scale_by_learning_rate(learning_rate),
        )
