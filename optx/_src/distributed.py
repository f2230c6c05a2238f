"""Cross-replica gradient aggregation: `aggregate_gradients` (DESIGN D8).

Averaging (or summing) the gradients of data-parallel replicas is an explicit transform
over a named axis, the first of a chain (aggregate → unscale → clip → step), not a hidden
step of the optimizer. It works wherever that axis is bound: inside `jax.pmap`,
`jax.shard_map` or `jax.vmap` with ``axis_name=``. Under `jax.jit` with shardings there is
no named axis and nothing to aggregate: XLA reduces the gradient of a loss averaged over a
sharded batch by itself.
"""

from __future__ import annotations

from typing import Any

import jax

from optx._src.base import EmptyState, Params, Transform, Updates, transform
from optx._src.tree import is_none

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
        try:
            # One collective over every leaf: XLA can fuse the all-reduces.
            reduced = iter(collective(present, self.axis_name)) if present else iter(())
        except NameError as error:
            raise ValueError(self._unbound_message()) from error
        out = [None if u is None else next(reduced) for u in leaves]
        return jax.tree.unflatten(treedef, out), state

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

    Args:
      axis_name: the mapped axis to reduce over, or a tuple of axes (e.g.
        ``("hosts", "devices")``).
      reduce: ``"mean"`` (data parallelism on a per-replica mean loss) or ``"sum"``.

    Returns:
      The transform.

    Raises:
      ValueError: ``reduce`` is neither ``"mean"`` nor ``"sum"``; or, from ``update``,
        ``axis_name`` is not bound where it runs.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.chain(optx.aggregate_gradients("data"), optx.sgd(1.0))
      >>> def step(g):
      ...     return tx.update({"w": g}, tx.init({"w": g}))[0]["w"]
      >>> jax.vmap(step, axis_name="data")(jnp.array([1.0, 3.0]))
      Array([-2., -2.], dtype=float32)
    """
    return AggregateGradients(axis_name, reduce)
