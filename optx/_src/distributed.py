"""Cross-replica gradient aggregation: `aggregate_gradients`.

Averaging (or summing) the gradients of data-parallel replicas is an explicit transform
over a named axis, the first of a chain (aggregate → unscale → clip → step), not a hidden
step of the optimizer. It works wherever that axis is bound: inside `jax.pmap`,
`jax.shard_map` or `jax.vmap` with ``axis_name=``. Under `jax.jit` with shardings there is
no named axis and nothing to aggregate: XLA reduces the gradient of a loss averaged over a
sharded batch by itself. Under `jax.shard_map` it refuses gradients that JAX's variance
tracking shows are already summed over the axis (those of replicated parameters).
"""

from __future__ import annotations

from typing import Any

import jax

from optx._src.base import EmptyState, Params, Transform, Updates, transform
from optx._src.tree import is_none, path_name

_REDUCE = ("mean", "sum")


@transform
class AggregateGradients(Transform):
    """See `aggregate_gradients`."""

    name = "aggregate_gradients"
    axis_name: str | tuple[str, ...] = None  # type: ignore[assignment]
    reduce: str = "mean"

    def __post_init__(self) -> None:
        names = self.axis_name
        ok = isinstance(names, str) or (
            isinstance(names, tuple) and names and all(isinstance(n, str) for n in names)
        )
        if not ok:
            raise TypeError(
                f"`{self.name}` needs axis_name to be a string or a non-empty tuple of "
                f"strings. Received: axis_name={names!r}."
            )
        if self.reduce not in _REDUCE:
            raise ValueError(
                f'`{self.name}` needs reduce to be "mean" or "sum". '
                f"Received: reduce={self.reduce!r}."
            )

    def init(self, params: Params) -> EmptyState:
        del params
        return EmptyState()

    def update(
        self, updates: Updates, state: EmptyState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, EmptyState]:
        del params, extra
        collective = jax.lax.pmean if self.reduce == "mean" else jax.lax.psum
        leaves, treedef = jax.tree.flatten(updates, is_leaf=is_none)
        present = [u for u in leaves if u is not None]
        self._check_not_summed(updates)
        try:
            # One collective over every leaf: XLA can fuse the all-reduces.
            reduced = iter(collective(present, self.axis_name)) if present else iter(())
        except NameError as error:
            raise ValueError(self._unbound_message()) from error
        out = [None if u is None else next(reduced) for u in leaves]
        return jax.tree.unflatten(treedef, out), state

    def _check_not_summed(self, updates: Updates) -> None:
        """Raises if JAX already summed a leaf over the axis (see `_summed_by_jax`)."""
        names = (self.axis_name,) if isinstance(self.axis_name, str) else self.axis_name
        summed = _summed_by_jax(updates, names)
        if not summed:
            return
        axes = sorted({a for _, missing in summed for a in missing}, key=names.index)
        shown = " and ".join(repr(a) for a in axes)
        spec = repr(axes[0]) if len(axes) == 1 else repr(tuple(axes))
        paths = [f"updates[{path_name(p)!r}]" for p, _ in summed]
        if len(paths) > 5:
            listed = f"{', '.join(paths[:5])} and {len(paths) - 5} more"
        else:
            listed = " and ".join([", ".join(paths[:-1]), paths[-1]] if len(paths) > 1 else paths)
        them = "it" if len(paths) == 1 else "them"
        verb = "averaging" if self.reduce == "mean" else "summing"
        raise ValueError(
            f"`{self.name}` needs gradients that vary over axis {shown} (one per device). "
            f"Received: {listed}, invariant over {shown}: JAX has already summed {them} over "
            f"{shown} (the gradient of a parameter replicated over it), so {verb} {them} "
            f"again would scale {them} by the axis size. Differentiate with respect to "
            f"`jax.lax.pcast(params, {spec}, to='varying')` so that each device gets its own "
            f"gradient, or drop `{self.name}` and divide the gradient by the axis size."
        )

    def _unbound_message(self) -> str:
        names = (self.axis_name,) if isinstance(self.axis_name, str) else self.axis_name
        wanted = ", ".join(repr(n) for n in names)
        bound = _bound_axis_names()
        shown = "unknown" if bound is None else (", ".join(map(repr, bound)) or "none")
        return (
            f"`{self.name}` needs to run inside pmap/shard_map over axis {wanted}. "
            f"Received: axis_name={self.axis_name!r}, which is not bound here "
            f"(bound axes: {shown})."
        )


def _summed_by_jax(updates: Updates, names: tuple[str, ...]) -> list[tuple[Any, list[str]]]:
    """``(path, axes)`` of the leaves JAX's type system says are invariant over mapped axes.

    Under `jax.shard_map` with ``check_vma=True`` (its default) JAX records the manual mesh
    axes each value varies over (``jax.typeof(x).mat.varying``). The gradient of a
    parameter replicated over an axis is invariant over it: its transpose has summed the
    devices' contributions already. Elsewhere (`jax.pmap`, `jax.vmap`, ``check_vma=False``)
    nothing is tracked, and nothing is reported.
    """
    manual = getattr(jax.sharding.get_abstract_mesh(), "manual_axes", ())
    axes = [a for a in names if a in manual]
    if not axes:
        return []
    found = []
    first = None
    for path, leaf in jax.tree_util.tree_flatten_with_path(updates, is_leaf=is_none)[0]:
        varying = None if leaf is None else _varying_axes(leaf)
        missing = [a for a in axes if varying is not None and a not in varying]
        if missing:
            found.append((path, missing))
            first = (leaf, missing) if first is None else first
    # Without check_vma every value reads as invariant: a cast to varying then stays so.
    if first is not None and not _tracks_variance(*first):
        return []
    return found


def _varying_axes(leaf: Any) -> frozenset[str] | None:
    """The manual axes ``leaf`` varies over, or ``None`` if JAX does not say."""
    aval = jax.typeof(leaf)
    mat = getattr(aval, "mat", None)  # JAX >= 0.10; `vma` before
    varying = getattr(mat, "varying", None) if mat is not None else getattr(aval, "vma", None)
    return frozenset(varying) if varying is not None else None


def _tracks_variance(leaf: Any, axes: list[str]) -> bool:
    """Whether this trace tracks variance (``check_vma=True``): casts ``leaf`` to varying."""
    try:
        cast = jax.lax.pcast(leaf, tuple(axes), to="varying")
    except Exception:  # only a check depends on it
        return False
    varying = _varying_axes(cast)
    return varying is not None and set(axes) <= varying


def _bound_axis_names() -> list[str] | None:
    """The named axes bound where this is traced, or ``None`` if JAX does not say."""
    try:
        from jax._src import core  # JAX's private axis environment; absent in some versions

        return [n for n in core.unsafe_get_axis_names() if isinstance(n, str)]
    except Exception:  # only a better error message depends on it
        return None


def aggregate_gradients(
    axis_name: str | tuple[str, ...], reduce: str = "mean"
) -> AggregateGradients:
    r"""Averages (or sums) the updates across the replicas of a named axis.

    .. math::
        u \leftarrow \frac{1}{N} \sum_{r=1}^{N} u_r \quad (\texttt{reduce="mean"}),
        \qquad u \leftarrow \sum_{r=1}^{N} u_r \quad (\texttt{reduce="sum"}),

    where :math:`u_r` are the updates of replica :math:`r` and :math:`N` the size of
    ``axis_name``: `jax.lax.pmean` / `jax.lax.psum` on every leaf (a ``None`` leaf stays
    ``None``). Put it first in a chain, so every replica clips and steps on the same
    gradient and the replicated parameters stay identical. It keeps no state.

    It must run where ``axis_name`` is bound: inside `jax.pmap`, `jax.shard_map` or
    `jax.vmap` with that ``axis_name``. Under `jax.jit` with sharded inputs there is no
    named axis and this transform is not needed.

    Under `jax.shard_map` (with its default ``check_vma=True``), the gradient of a
    parameter replicated over the axis (``in_specs=P()``) comes back *invariant* over it:
    JAX's transpose has already summed the devices' contributions, and averaging that sum
    would step by the axis size times the gradient. `update` refuses such leaves. Either
    differentiate with respect to ``jax.lax.pcast(params, "data", to="varying")``, so that
    each device gets its own gradient, which this transform then averages::

        # jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P("data"), P("data")),
        #               out_specs=(P(), P()))
        def step(params, state, x, y):
            own = jax.lax.pcast(params, "data", to="varying")
            grads = jax.grad(loss)(own, x, y)  # this device's gradient
            updates, state = tx.update(grads, state, params)
            return optx.apply_updates(params, updates), state

    or leave this transform out and divide JAX's sum by the axis size. Under `jax.pmap`,
    `jax.vmap` and ``check_vma=False`` no variance is tracked: nothing is checked.

    Args:
      axis_name: the mapped axis to reduce over, or a tuple of axes (e.g.
        ``("hosts", "devices")``).
      reduce: ``"mean"`` (data parallelism on a per-replica mean loss) or ``"sum"``.

    Returns:
      The transform.

    Raises:
      ValueError: ``reduce`` is neither ``"mean"`` nor ``"sum"``; or, from ``update``,
        ``axis_name`` is not bound where it runs, or under `jax.shard_map` a leaf is
        invariant over it (a gradient JAX has already summed; see above).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.chain(optx.aggregate_gradients("data"), optx.sgd(1.0))
      >>> def step(g):
      ...     return tx.update({"w": g}, tx.init({"w": g}))[0]["w"]
      >>> jax.vmap(step, axis_name="data")(jnp.array([1.0, 3.0]))
      Array([-2., -2.], dtype=float32)
    """
    return AggregateGradients(axis_name, reduce)
