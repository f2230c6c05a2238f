"""Microbatching (optax's ``optax.microbatching``): a function of a batch, by microbatches.

The batch is split into microbatches run one after the other, their results combined by an
accumulator, so that a batch too large for memory at once can be processed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src.microbatch_accumulators import AccumulationType, Accumulator, resolve

Function = Callable[..., Any]


def reshape_batch_axis(tree: Any, microbatch_size: int, axis: int = 0) -> Any:
    """Splits each leaf's batch axis ``axis`` into ``(num_microbatches, microbatch_size)``.

    The split is column-major: microbatch ``i`` holds batch rows ``i, i + n, i + 2n, ...``
    (``n`` microbatches), so a batch axis sharded over devices stays sharded along the new
    ``microbatch_size`` axis and every microbatch draws from every device's rows.

    Args:
      tree: a pytree of arrays, each with a batch axis at ``axis``.
      microbatch_size: rows per microbatch (dividing the batch size).
      axis: the batch axis.

    Returns:
      The tree with each leaf of shape ``(..., n, microbatch_size, ...)``.

    Raises:
      ValueError: on an ``Explicit`` mesh, the shards of the batch axis do not divide
        ``microbatch_size``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.microbatching.reshape_batch_axis(jnp.arange(6), 2)
      Array([[0, 3],
             [1, 4],
             [2, 5]], dtype=int32)
    """

    def split(x: jax.Array) -> jax.Array:
        shape = (*x.shape[:axis], -1, microbatch_size, *x.shape[axis + 1 :])
        sharding = getattr(jax.typeof(x), "sharding", None)
        mesh = getattr(sharding, "mesh", None)
        if mesh is None or mesh.empty or not mesh.are_all_axes_explicit:
            return x.reshape(shape, order="F")
        spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
        shards = x.shape[axis] // sharding.shard_shape(x.shape)[axis]
        if microbatch_size % shards:
            raise ValueError(
                f"`reshape_batch_axis` needs the {shards} shards of the batch axis to divide "
                f"microbatch_size. Received: microbatch_size={microbatch_size}."
            )
        new = jax.sharding.PartitionSpec(*spec[:axis], None, spec[axis], *spec[axis + 1 :])
        return x.reshape(shape, order="F", out_sharding=jax.sharding.NamedSharding(mesh, new))

    return jax.tree.map(split, tree)


def _as_tuple(value: Any) -> tuple:
    return (value,) if isinstance(value, int | str) else tuple(value)


def microbatch(
    fun: Function,
    argnums: int | Sequence[int],
    microbatch_size: int | None,
    accumulator: Accumulator | AccumulationType | Any = AccumulationType.SUM,
    *,
    argnames: str | Sequence[str] = (),
    in_axes: int | Sequence[int] = 0,
    num_real_microbatches: int | jax.Array | None = None,
) -> Function:
    r"""``fun`` over a batch computed one microbatch at a time, the results combined.

    With the batch split into microbatches :math:`B_0, \dots, B_{n-1}` (`reshape_batch_axis`)
    and the default ``SUM``,

    .. math::
       \mathrm{microbatched}(B) = \sum_{i<n} \mathrm{fun}(B_i)

    in a `jax.lax.fori_loop`, so only one microbatch's intermediates are alive at a time.

    Args:
      fun: the function.
      argnums: the positional arguments with a batch axis.
      microbatch_size: rows per microbatch (dividing the batch size); ``None`` returns
        ``fun`` itself.
      accumulator: how results combine: an `AccumulationType`, an `Accumulator`, or a pytree
        of them (a prefix of ``fun``'s result).
      argnames: the keyword arguments with a batch axis.
      in_axes: the batch axis of each of ``argnums`` then ``argnames`` (one int: all).
      num_real_microbatches: run only this many microbatches (a traced value works: varying
        batch sizes without recompiling).

    Returns:
      The function, with ``fun``'s arguments.

    Raises:
      ValueError: (at the call) the batch arguments' batch sizes differ or are not a
        multiple of ``microbatch_size``; a MEAN accumulator of non-floating results.
      TypeError: ``accumulator`` holds something else than accumulators.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> kind = optx.microbatching.AccumulationType
      >>> f = lambda x: (x + 1, jnp.sum(3 * x))
      >>> optx.microbatch(f, 0, 2, accumulator=(kind.CONCAT, kind.SUM))(jnp.arange(4))
      (Array([1, 2, 3, 4], dtype=int32), Array(18, dtype=int32))
    """
    if microbatch_size is None:
        return fun
    argnums, argnames = _as_tuple(argnums), _as_tuple(argnames)
    count = len(argnums) + len(argnames)
    axes = (in_axes,) * count if isinstance(in_axes, int) else tuple(in_axes)

    def microbatched(*args: Any, **kwargs: Any) -> Any:
        batched = [args[i] for i in argnums] + [kwargs[k] for k in argnames]
        sizes = sorted(
            {
                x.shape[ax]
                for ax, tree in zip(axes, batched, strict=True)
                for x in jax.tree.leaves(tree)
            }
        )
        if len(sizes) > 1:
            raise ValueError(
                f"`microbatch` needs batch arguments with one batch size. Received: batch "
                f"sizes {sizes}."
            )
        if sizes[0] % microbatch_size:
            raise ValueError(
                f"`microbatch` needs a batch size that microbatch_size divides. Received: "
                f"batch size {sizes[0]}, microbatch_size={microbatch_size}."
            )
        n = sizes[0] // microbatch_size
        args, kwargs = list(args), dict(kwargs)
        names = [(args, i) for i in argnums] + [(kwargs, k) for k in argnames]
        for (where, key), ax in zip(names, axes, strict=True):
            where[key] = reshape_batch_axis(where[key], microbatch_size, ax)
        acc = resolve("microbatch", accumulator, n)

        def run(index: Any) -> Any:
            call_args, call_kwargs = list(args), dict(kwargs)
            for (where, key), ax in zip(names, axes, strict=True):
                target = call_args if where is args else call_kwargs
                target[key] = jax.tree.map(lambda x, ax=ax: jnp.take(x, index, axis=ax), where[key])
            return fun(*call_args, **call_kwargs)

        carry = acc.init(jax.eval_shape(run, 0))
        stop = n if num_real_microbatches is None else num_real_microbatches
        carry = jax.lax.fori_loop(0, stop, lambda i, c: acc.update(c, run(i), i), carry)
        return acc.finalize(carry)

    return microbatched


def micro_vmap(
    fun: Function,
    in_axes: int | Sequence[int | None] = 0,
    out_axes: Any = 0,
    *,
    microbatch_size: int | None = None,
    vmap_fn: Callable[..., Function] = jax.vmap,
    accumulator: Accumulator | AccumulationType | Any = AccumulationType.CONCAT,
    num_real_microbatches: int | jax.Array | None = None,
) -> Function:
    """`jax.vmap` of ``fun``, run over microbatches of the mapped axis one after the other.

    With the default ``CONCAT`` this is ``vmap_fn(fun, in_axes)`` with less memory; a
    reduction (``SUM``, ``MEAN``) combines the mapped results without ever holding all of
    them. Keyword arguments are mapped over their axis 0.

    Args:
      fun: the function to map.
      in_axes: the mapped axis of each positional argument (``None``: not mapped), or one
        int for all.
      out_axes: must be 0.
      microbatch_size: rows per microbatch; ``None``: one microbatch.
      vmap_fn: the map to use (`jax.vmap` with options bound, for example).
      accumulator: how the mapped results combine (see `microbatch`).
      num_real_microbatches: run only this many microbatches.

    Returns:
      The mapped function.

    Raises:
      NotImplementedError: ``out_axes`` is not 0.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.microbatching.micro_vmap(lambda x: x**2, microbatch_size=2)(jnp.arange(4))
      Array([0, 1, 4, 9], dtype=int32)
    """
    if out_axes != 0:
        raise NotImplementedError(
            f"`micro_vmap` needs out_axes=0 (the only one it supports). Received: "
            f"out_axes={out_axes!r}."
        )
    axes = _as_tuple(in_axes)

    def mapped(*args: Any, kwargs: dict) -> Any:
        out = vmap_fn(fun, axes, out_axes)(*args, **kwargs)
        rows = jax.tree.leaves(out)[0].shape[0]
        return resolve("micro_vmap", accumulator, rows).aggregate(out)

    run = microbatch(
        mapped,
        argnums=tuple(i for i, ax in enumerate(axes) if ax is not None),
        argnames="kwargs",
        microbatch_size=microbatch_size,
        accumulator=accumulator,
        in_axes=(*(ax for ax in axes if ax is not None), 0),
        num_real_microbatches=num_real_microbatches,
    )

    def call(*args: Any, **kwargs: Any) -> Any:
        return run(*args, kwargs=kwargs)

    return call


class Aux(NamedTuple):
    """Per-example outputs of `micro_grad`: ``fun``'s values, the metrics, ``fun``'s aux."""

    values: Any
    metrics: Any
    aux: Any


def _identity(x: Any) -> Any:
    return x


def _no_metrics(x: Any) -> None:
    del x


def micro_grad(
    fun: Function,
    has_aux: bool = False,
    argnums: int | Sequence[int] = 0,
    *,
    batch_argnums: int | Sequence[int] = 1,
    keep_batch_dim: bool = True,
    microbatch_size: int | None = None,
    accumulator: Accumulator | AccumulationType | Any = AccumulationType.SUM,
    transform_fn: Callable[[Any], Any] = _identity,
    metrics_fn: Callable[[Any], Any] = _no_metrics,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., tuple[Any, Aux]]:
    r"""Per-example gradients of ``fun``, transformed, then combined over the batch.

    For each example :math:`x_j` of the batch arguments,
    :math:`g_j = \nabla \mathrm{fun}(\theta; x_j)`; the result is
    ``accumulator`` over :math:`j` of ``transform_fn``:math:`(g_j)` (a sum by default),
    computed in microbatches (`micro_vmap`), with per-example values and
    ``metrics_fn``:math:`(g_j)` (e.g. per-example norms to clip with).

    Args:
      fun: the loss, e.g. ``fun(params, batch, ...)``.
      has_aux: whether ``fun`` returns ``(value, aux)``.
      argnums: the arguments to differentiate.
      batch_argnums: the arguments with a batch axis (axis 0).
      keep_batch_dim: give ``fun`` each example with a batch axis of size 1.
      microbatch_size: examples per microbatch (``None``: one).
      accumulator: how the transformed gradients combine (see `microbatch`).
      transform_fn: applied to each example's gradient before combining.
      metrics_fn: of each example's gradient, returned per example.
      num_real_microbatches: run only this many microbatches.

    Returns:
      A function with ``fun``'s arguments returning ``(combined, Aux(values, metrics,
      aux))``, the `Aux` fields per example.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> loss = lambda w, x, y: 0.5 * jnp.mean((x @ w - y) ** 2)
      >>> grad_fn = optx.microbatching.micro_grad(
      ...     loss, batch_argnums=(1, 2),
      ...     accumulator=optx.microbatching.AccumulationType.MEAN,
      ...     metrics_fn=jnp.linalg.norm)
      >>> grads, aux = grad_fn(jnp.zeros(1), jnp.ones((4, 1)), jnp.array([0.0, 2, 4, 6]))
      >>> grads, aux.metrics
      (Array([-3.], dtype=float32), Array([0., 2., 4., 6.], dtype=float32))
    """
    batch_argnums = _as_tuple(batch_argnums)
    with_aux = fun if has_aux else (lambda *a, **k: (fun(*a, **k), None))
    value_and_grad = jax.value_and_grad(with_aux, argnums, has_aux=True)

    def per_example(*args: Any, **kwargs: Any) -> tuple[Any, Aux]:
        (value, aux), grad = value_and_grad(*args, **kwargs)
        return transform_fn(grad), Aux(value, metrics_fn(grad), aux)

    axes = [None] * (max(batch_argnums) + 1)
    for i in batch_argnums:
        axes[i] = 0
    run = micro_vmap(
        per_example,
        in_axes=axes,
        accumulator=(accumulator, AccumulationType.CONCAT),
        microbatch_size=microbatch_size,
        num_real_microbatches=num_real_microbatches,
    )
    if not keep_batch_dim:
        return run

    def with_batch_dim(*args: Any, **kwargs: Any) -> tuple[Any, Aux]:
        args = list(args)
        for i in batch_argnums:
            args[i] = jax.tree.map(lambda x: jnp.expand_dims(x, 1), args[i])
        return run(*args, **kwargs)

    return with_batch_dim
