"""Shardings of optimizer state: `state_shardings` and `shard_state` (ZeRO-1).

Both look at ``jax.eval_shape(tx.init, params)`` and sort its leaves into three kinds:

- a per-parameter slot: a leaf at a parameter's position in a subtree with the parameters'
  structure (`optx.tree`'s ``params_shaped_subtrees``) and with that parameter's shape
  (Adam's ``mu`` and ``nu``, momentum, Adafactor's unfactored ``v``);
- a factored moment: at a parameter's position, with the parameter's shape less one axis
  (Adafactor's ``v_row`` and ``v_col``);
- anything else (step counts, hyperparameters, Muon's Newton-Schulz coefficients).

Sharding is a layout, never the numbers: whatever these functions return, a step computes
the same values.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from optx._src.base import GradientTransformationLike, Params
from optx._src.flat_tree import FlatTree
from optx._src.tree import _is_placeholder, params_shaped_subtrees, path_name

PyTree = Any


def state_shardings(
    tx: GradientTransformationLike, params: Params, param_shardings: PyTree = None
) -> PyTree:
    """The shardings of ``tx.init(params)``: each slot on its parameter's sharding.

    A plain ``jax.jit(tx.init)(params)`` already creates each slot on its parameter's
    sharding; these are for ``out_shardings`` where a state must be placed by hand (optax's
    transforms, `flatten` under ``Auto`` mesh axes), for ``in_shardings`` /
    ``out_shardings`` of a training step, and for the abstract state of `restore_state`.
    Works for any transform with optax's protocol (optx's or optax's, chains,
    `partition`, `masked`).

    What each leaf of the state gets:

    - a per-parameter slot (a leaf shaped like its parameter, at the parameter's position
      in a subtree with the parameters' structure, e.g. Adam's ``mu``): the parameter's
      sharding;
    - a factored moment (the parameter's shape less one axis, e.g. Adafactor's ``v_row``
      and ``v_col``): the parameter's `PartitionSpec` less that axis, so a row statistic
      stays sharded along the axes it keeps; replicated where the dropped axis is
      ambiguous (a square matrix: its row and column statistics have the same shape);
    - every other leaf (step counts, hyperparameters, Muon's coefficients, Adafactor's
      ``(1,)`` placeholders): replicated on the parameters' mesh,
      ``NamedSharding(mesh, PartitionSpec())``.

    Args:
      tx: a transform (``init``/``update``).
      params: the parameters: `jax.Array` s (their ``.sharding`` is used) or
        `jax.ShapeDtypeStruct` s with a ``.sharding``; all on one mesh (or one device).
      param_shardings: optional shardings of the parameters (a pytree of
        `jax.sharding.Sharding` with the structure of ``params``), used instead of
        ``params``' own, e.g. for host arrays or shapes without a sharding.

    Returns:
      A pytree of `jax.sharding.Sharding` with the structure of ``tx.init(params)``.

    Raises:
      ValueError: a parameter has no sharding, the parameters are on different meshes, or a
        given sharding does not divide its parameter's shape.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> mesh = jax.make_mesh((1,), ("data",))
      >>> params = {"w": jax.device_put(jnp.ones((4, 2)), NamedSharding(mesh, P("data")))}
      >>> tx = optx.adam(1e-3)
      >>> state = jax.jit(tx.init, out_shardings=optx.state_shardings(tx, params))(params)
      >>> state[0].mu["w"].sharding.spec, state[0].count.sharding.spec
      (P('data',), P())
    """
    return _shardings("state_shardings", tx, params, param_shardings, None)


def shard_state(
    tx: GradientTransformationLike,
    mesh: jax.sharding.Mesh,
    axis: str = "data",
    *,
    params: Params,
    require: bool = False,
) -> PyTree:
    """`state_shardings` with the per-parameter slots also split over ``axis`` (ZeRO-1).

    Data-parallel training keeps a full copy of the parameters on every device of the data
    axis; the optimizer's moments need not be copied: each slot is sharded over ``axis``
    along its first dimension that is not sharded already and that the axis size divides.
    Optimizer memory per device then falls by about the size of the axis. A slot with no
    such dimension (a bias of 3 floats on 8 devices) keeps its parameter's sharding, or
    with ``require=True`` is an error. A slot already sharded over ``axis`` (parameters
    sharded over it, FSDP-style) is left as it is. Factored moments and the other leaves
    get what `state_shardings` gives them. An ordinary donated ``jax.jit`` step needs
    nothing more: `apply_updates` gives each new parameter back its parameter's sharding
    (one all-gather per parameter), so replicated parameters stay replicated.

    Args:
      tx: a transform (``init``/``update``).
      mesh: the `jax.sharding.Mesh` of the run.
      axis: the mesh axis to shard the slots over.
      params: the parameters (arrays or `jax.ShapeDtypeStruct` s). Those with a
        `NamedSharding` must be on ``mesh``; the others count as replicated on it.
      require: raise instead of leaving a slot unsplit over ``axis``.

    Returns:
      A pytree of `jax.sharding.Sharding` with the structure of ``tx.init(params)``.

    Raises:
      ValueError: ``axis`` is not an axis of ``mesh``, a parameter is on another mesh, or
        (``require=True``) a slot has no dimension that the axis size divides.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> mesh = jax.make_mesh((1,), ("data",))
      >>> params = {"w": jnp.ones((4, 2))}
      >>> tx = optx.adam(1e-3)
      >>> shardings = optx.shard_state(tx, mesh, "data", params=params)
      >>> state = jax.jit(tx.init, out_shardings=shardings)(params)
      >>> state[0].nu["w"].sharding.spec
      P('data',)
    """
    names = tuple(mesh.axis_names)
    if axis not in names:
        raise ValueError(
            f"`shard_state` needs an axis of the mesh. Received: axis={axis!r}; "
            f"the mesh has axes {names}."
        )
    leaves, treedef = jax.tree.flatten(params)
    shardings = []
    for leaf in leaves:
        s = _own_sharding(leaf)
        shardings.append(
            s if isinstance(s, NamedSharding) else NamedSharding(mesh, PartitionSpec())
        )
    zero = (axis, int(mesh.shape[axis]), bool(require))
    return _shardings("shard_state", tx, params, jax.tree.unflatten(treedef, shardings), zero)


def _own_sharding(leaf: Any) -> Sharding | None:
    if isinstance(leaf, jax.core.Tracer):
        return None
    if isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)):
        return getattr(leaf, "sharding", None)
    return None


def _spec(sharding: NamedSharding, ndim: int) -> list[Any]:
    """The `PartitionSpec` of ``sharding`` as a list of ``ndim`` entries."""
    spec = list(sharding.spec)
    return spec + [None] * (ndim - len(spec))


def _named(mesh: jax.sharding.Mesh, spec: list[Any]) -> NamedSharding:
    while spec and spec[-1] is None:  # P('data') rather than P('data', None)
        spec = spec[:-1]
    return NamedSharding(mesh, PartitionSpec(*spec))


def _axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _describe(s: Sharding) -> str:
    if isinstance(s, NamedSharding):
        return f"a mesh {dict(s.mesh.shape)} on devices {s.mesh.device_ids.ravel().tolist()}"
    return f"a {type(s).__name__} on devices {sorted(d.id for d in s.device_set)}"


def _home(api: str, names: list[str], shardings: list[Sharding]) -> Sharding:
    """The replicated sharding of the parameters' common mesh (or device)."""
    first: tuple[str, Sharding] | None = None
    for name, s in zip(names, shardings, strict=True):
        if not isinstance(s, (NamedSharding, SingleDeviceSharding)):
            raise TypeError(
                f"`{api}` needs NamedSharding or SingleDeviceSharding parameters. "
                f"Received: {name!r} with {s!r}."
            )
        if first is None:
            first = (name, s)
            continue
        a, b = first[1], s
        same = (
            a.mesh == b.mesh
            if isinstance(a, NamedSharding) and isinstance(b, NamedSharding)
            else type(a) is type(b) and a.device_set == b.device_set
        )
        if not same:
            raise ValueError(
                f"`{api}` needs every parameter on one mesh. Received: {first[0]!r} on "
                f"{_describe(a)} and {name!r} on {_describe(b)}."
            )
    if first is None or isinstance(first[1], SingleDeviceSharding):
        return first[1] if first is not None else SingleDeviceSharding(jax.devices()[0])
    return NamedSharding(first[1].mesh, PartitionSpec())


def _check_divides(api: str, name: str, shape: tuple[int, ...], s: Sharding) -> None:
    if not isinstance(s, NamedSharding):
        return
    spec = _spec(s, len(shape))
    if len(spec) > len(shape):
        raise ValueError(
            f"`{api}` needs a PartitionSpec with at most one entry per dimension. "
            f"Received: {name!r} of shape {shape} with {s.spec}."
        )
    for dim, entry in enumerate(spec):
        size = int(np.prod([s.mesh.shape[a] for a in _axes(entry)], dtype=int))
        if shape[dim] % size:
            raise ValueError(
                f"`{api}` needs shardings that divide their parameter's shape. Received: "
                f"{name!r} of shape {shape} with {s.spec}: the mesh axes {entry!r} of size "
                f"{size} do not divide dimension {dim} ({shape[dim]})."
            )


def _shardings(
    api: str,
    tx: GradientTransformationLike,
    params: Params,
    param_shardings: PyTree,
    zero: tuple[str, int, bool] | None,
) -> PyTree:
    flat, treedef = jax.tree_util.tree_flatten_with_path(params)
    names = [path_name(p) for p, _ in flat]
    if param_shardings is None:
        shardings = [_own_sharding(x) for _, x in flat]
        for name, (_, x), s in zip(names, flat, shardings, strict=True):
            if s is None:
                raise ValueError(
                    f"`{api}` needs parameters with a sharding (jax.Array, or "
                    f"jax.ShapeDtypeStruct with .sharding), or param_shardings. "
                    f"Received: {name!r} of type {type(x).__name__}."
                )
    else:
        is_sharding = lambda x: isinstance(x, Sharding)  # noqa: E731
        got = jax.tree.structure(param_shardings, is_leaf=is_sharding)
        if got != treedef:
            raise ValueError(
                f"`{api}` needs param_shardings with the structure of the parameters. "
                f"Received: {got}; expected: {treedef}."
            )
        shardings = jax.tree.leaves(param_shardings, is_leaf=is_sharding)
        for name, s in zip(names, shardings, strict=True):
            if not isinstance(s, Sharding):
                raise TypeError(
                    f"`{api}` needs param_shardings of jax.sharding.Sharding. "
                    f"Received: {name!r}: {s!r}."
                )
    shapes = [tuple(np.shape(x)) for _, x in flat]
    for name, shape, s in zip(names, shapes, shardings, strict=True):
        _check_divides(api, name, shape, s)
    home = _home(api, names, shardings)
    abstract = jax.tree.unflatten(
        treedef, [jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x)) for _, x in flat]
    )
    state = jax.eval_shape(tx.init, abstract)
    if _has_flat(state) and any(
        isinstance(s, NamedSharding) and not s.is_fully_replicated for s in shardings
    ):
        # `flatten` keeps a sharded parameter's slots in a buffer of their own, which it can
        # only see from a typed sharding: trace ``init`` again with the parameters typed.
        typed = [
            jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x), sharding=_typed(s))
            for (_, x), s in zip(flat, shardings, strict=True)
        ]
        state = jax.eval_shape(tx.init, jax.tree.unflatten(treedef, typed))

    # Subtrees with the parameters' structure (shapes aside); leaf by leaf below.
    found: dict[tuple[Any, ...], Sharding] = {}
    anywhere = jax.tree.unflatten(treedef, [None] * len(flat))
    for node_path, node in params_shaped_subtrees(state, anywhere):
        inner = jax.tree_util.tree_flatten_with_path(node, is_leaf=_is_placeholder)[0]
        for i, (leaf_path, leaf) in enumerate(inner):
            if _is_placeholder(leaf):
                continue
            path = node_path + tuple(leaf_path)
            got = _leaf_sharding(tuple(leaf.shape), shapes[i], shardings[i])
            if got is None:
                continue
            if zero is not None and tuple(leaf.shape) == shapes[i]:
                got = _zero(api, path_name(path), tuple(leaf.shape), got, zero)
            found[path] = got
    # Buffers of `FlatTree` slots (`flatten`): a buffer of its own holds one parameter's
    # slot; a concatenated one holds replicated parameters.
    is_flat = lambda x: isinstance(x, FlatTree)  # noqa: E731
    for node_path, node in jax.tree_util.tree_flatten_with_path(state, is_leaf=is_flat)[0]:
        if not isinstance(node, FlatTree):
            continue
        for g, group in enumerate(node.layout.groups):
            if group.concatenated:
                continue
            owners = [i for i, slot in enumerate(node.layout.slots) if slot.group == g]
            if len(owners) != 1 or tuple(group.shape) != shapes[owners[0]]:
                continue
            path = (*node_path, jax.tree_util.DictKey(group.name))
            got = shardings[owners[0]]
            if zero is not None:
                got = _zero(api, path_name(path), tuple(group.shape), got, zero)
            found[path] = got
    return jax.tree_util.tree_map_with_path(lambda p, _: found.get(tuple(p), home), state)


def _has_flat(state: PyTree) -> bool:
    leaves = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, FlatTree))
    return any(isinstance(x, FlatTree) for x in leaves)


def _typed(s: Sharding) -> Sharding | None:
    """``s`` on its mesh with every axis ``Explicit``, so that a trace sees it in the types."""
    if not isinstance(s, NamedSharding):
        return None
    mesh = s.mesh.abstract_mesh
    explicit = {name: AxisType.Explicit for name in mesh.axis_names}
    return NamedSharding(mesh.update_axis_types(explicit), s.spec)


def _leaf_sharding(
    shape: tuple[int, ...], param_shape: tuple[int, ...], s: Sharding
) -> Sharding | None:
    """A slot's or factored moment's sharding, or ``None`` (replicate it)."""
    if shape == param_shape:
        return s
    if len(shape) + 1 != len(param_shape) or not len(shape):
        return None
    if not isinstance(s, NamedSharding):
        return s
    spec = _spec(s, len(param_shape))
    kept = {
        tuple(spec[:i] + spec[i + 1 :])
        for i in range(len(param_shape))
        if param_shape[:i] + param_shape[i + 1 :] == shape
    }
    if len(kept) != 1:  # not a factored moment, or the dropped axis is ambiguous
        return None
    return _named(s.mesh, list(kept.pop()))


def _zero(
    api: str, name: str, shape: tuple[int, ...], s: Sharding, zero: tuple[str, int, bool]
) -> Sharding:
    axis, size, require = zero
    spec = _spec(s, len(shape))  # `shard_state` gives NamedShardings only
    if any(axis in _axes(e) for e in spec):
        return s
    for dim, entry in enumerate(spec):
        if entry is None and shape[dim] % size == 0:
            spec[dim] = axis
            return _named(s.mesh, spec)
    if require:
        raise ValueError(
            f"`{api}` needs every per-parameter slot to have a dimension, not sharded "
            f"already, that the size of axis {axis!r} ({size}) divides (require=True). "
            f"Received: {name!r} of shape {shape} with {s.spec}."
        )
    return s


def sharded_init(
    tx: GradientTransformationLike, params: Params
) -> tuple[Any, jax.Array, tuple[PyTree, PyTree, Sharding] | None]:
    """``(state, count, placement)`` for the stateful wrapper's `build`.

    Parameters that are `jax.Array` s spanning more than one device get their state from
    ``jax.jit(tx.init, out_shardings=state_shardings(tx, params))`` and a replicated step
    count; ``placement`` is then ``(param shardings, state shardings, replicated)``, the
    out-shardings of the wrapper's step. Otherwise ``tx.init(params)`` and ``None``.
    """
    leaves = jax.tree.leaves(params)
    sharded = bool(leaves) and all(
        isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) for x in leaves
    )
    if not sharded or all(len(x.sharding.device_set) == 1 for x in leaves):
        return tx.init(params), jnp.zeros((), jnp.int32), None
    state_sh = state_shardings(tx, params)
    replicated = _home("build", [str(i) for i in range(len(leaves))], [x.sharding for x in leaves])
    if not isinstance(replicated, NamedSharding):
        return tx.init(params), jnp.zeros((), jnp.int32), None
    state = jax.jit(tx.init, out_shardings=state_sh)(params)
    count = jax.device_put(jnp.zeros((), jnp.int32), replicated)
    return state, count, (jax.tree.map(lambda x: x.sharding, params), state_sh, replicated)
