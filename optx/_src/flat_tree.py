"""Pytrees held as a few flat buffers: `FlatTree` and `flatten_tree`.

Every array passed into or out of a jitted call costs microseconds, and a step over many
small leaves is dominated by that cost. A `FlatTree` holds a pytree as one 1-D buffer per
dtype (leaves concatenated in tree order); its static layout remembers the tree's structure
and, per leaf, its buffer, offset, shape and path. Leaves with a sharding that
is not fully replicated keep their own buffer, in their own shape, so that flattening never
gathers a sharded array. The only leaf of a dtype keeps its shape too:
raveling it would save no arrays.
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from optx._src import checks
from optx._src.tree import path_name

PyTree = Any


class _Group(NamedTuple):
    """One buffer: its key, dtype, shape, and whether it concatenates leaves."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    concatenated: bool


class _Slot(NamedTuple):
    """Where one leaf lives: its buffer, its offset there, and its shape."""

    group: int
    offset: int
    shape: tuple[int, ...]


class FlatLayout:
    """The static part of a `FlatTree`: the tree's structure and where each leaf lives.

    Hashable and comparable (it is the pytree auxiliary data of `FlatTree`); a jitted
    function sees a new layout as a new input structure.
    """

    __slots__ = ("__weakref__", "_hash", "_sizes", "groups", "paths", "slots", "treedef")

    def __init__(
        self,
        treedef: Any,
        groups: tuple[_Group, ...],
        slots: tuple[_Slot, ...],
        paths: tuple[str, ...],
    ) -> None:
        self.treedef = treedef
        self.groups = groups
        self.slots = slots
        self.paths = paths
        # Hashed on every jitted call that takes a FlatTree: computed once.
        self._hash = hash((treedef, groups, slots))
        sizes: list[list[int]] = [[] for _ in groups]
        for slot in slots:
            sizes[slot.group].append(_size(slot.shape))
        self._sizes = tuple(tuple(s) for s in sizes)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            isinstance(other, FlatLayout)
            and self._hash == other._hash
            and self.treedef == other.treedef
            and self.groups == other.groups
            and self.slots == other.slots
        )

    def __repr__(self) -> str:
        buffers = ", ".join(f"{g.name}: {g.dtype}{list(g.shape)}" for g in self.groups)
        return f"FlatLayout({len(self.slots)} leaves; {buffers})"

    def shapes(self) -> PyTree:
        """The original tree, with a `jax.ShapeDtypeStruct` in place of each leaf."""
        return jax.tree.unflatten(
            self.treedef,
            [jax.ShapeDtypeStruct(s.shape, self.groups[s.group].dtype) for s in self.slots],
        )

    def flatten(self, tree: PyTree, api: str, what: str, expected: str) -> tuple[jax.Array, ...]:
        """The buffers of ``tree``, which must have this layout's structure and shapes.

        Each leaf is cast to its buffer's dtype. Errors name ``tree`` as ``what`` and the
        tree this layout was made from as ``expected``.
        """
        checks.same_tree(api, tree, self.shapes(), what, expected)
        leaves = self.treedef.flatten_up_to(tree)
        parts: list[list[jax.Array]] = [[] for _ in self.groups]
        for leaf, slot in zip(leaves, self.slots, strict=True):
            group = self.groups[slot.group]
            array = jnp.asarray(leaf, group.dtype)
            parts[slot.group].append(jnp.ravel(array) if group.concatenated else array)
        return tuple(_join(p) for p in parts)

    def unflatten(self, buffers: tuple[Any, ...]) -> PyTree:
        """The tree whose leaves are the slices of ``buffers`` this layout describes."""
        pieces: list[list[jax.Array]] = []
        for group, sizes, buffer in zip(self.groups, self._sizes, buffers, strict=True):
            if not group.concatenated or len(sizes) == 1:
                pieces.append([buffer])
            elif isinstance(buffer, Tracer):
                # `split`, not one slice per leaf: its transpose (under `jax.grad`) is one
                # concatenation, where slices would transpose to a full-size pad per leaf.
                pieces.append(list(jax.lax.split(buffer, sizes)))
            else:
                # Outside jit, slices at runtime offsets: one compiled program per leaf
                # size, where `split` would compile a kernel per leaf.
                offsets = np.cumsum((0, *sizes[:-1])).tolist()
                pieces.append(
                    [
                        jax.lax.dynamic_slice_in_dim(buffer, np.int32(o), n)
                        for o, n in zip(offsets, sizes, strict=True)
                    ]
                )
        taken = [0] * len(self.groups)
        leaves = []
        for slot in self.slots:
            piece = pieces[slot.group][taken[slot.group]]
            taken[slot.group] += 1
            leaves.append(jnp.reshape(piece, slot.shape))
        return jax.tree.unflatten(self.treedef, leaves)


jax.tree_util.register_pytree_with_keys(
    FlatLayout,
    lambda layout: ((), layout),
    lambda layout, _: layout,
    lambda layout: ((), layout),
)


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _join(parts: list[jax.Array]) -> jax.Array:
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts)


@jax.tree_util.register_pytree_with_keys_class
class FlatTree:
    """A pytree held as a few flat buffers: one 1-D buffer per dtype.

    Made by `flatten_tree`. Its pytree children are the buffers (`buffers`); its static
    auxiliary data (`layout`) records the original tree's structure and, for each leaf,
    its buffer, offset, shape and path name (`paths`). `unflatten` gives the original tree
    back (slices and reshapes, which XLA fuses into their consumers under ``jit``).

    Held between steps in place of the parameters, it lets a jitted step pass a handful of
    arrays in and out instead of one per leaf: ``jax.grad`` with respect to a `FlatTree`
    gives a `FlatTree` of gradients with the same buffers, and the ``init`` / ``update``
    of an elementwise optimizer and `apply_updates` then work on the buffers directly.

    A leaf whose array carries a sharding that is not fully replicated keeps a buffer of its
    own, in its own shape and sharding: concatenating it with other leaves would gather it.
    So does a leaf that is the only one of its dtype: a 1-D copy would save no arrays, and
    a step that reads the donated parameters both raveled and in their own shape makes XLA
    copy them.
    Fully replicated (or single-device) leaves of one dtype on one set of devices share a
    buffer. Sharding is read from concrete arrays: flatten outside ``jit``.

    Warning:
      A transform sees a `FlatTree` as a pytree whose leaves are the buffers. For
      elementwise transforms (Adam, SGD, Lion, RMSProp, global-norm clipping, weight decay,
      EMA of the parameters, ...) that computes exactly what the per-leaf tree gives. A
      transform whose maths depends on each parameter's shape or on per-parameter
      reductions (Adafactor's factored moments, LAMB's and LARS's trust ratios, Muon's
      orthogonalisation, `clip_by_norm`, masks and labels by path) would treat a whole
      buffer as one parameter: a different algorithm. `optx.flatten` refuses such
      transforms; given a `FlatTree` directly, they do not check.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
      >>> flat = optx.flatten_tree(params)
      >>> flat
      FlatTree(2 leaves; float32: float32[9])
      >>> tx = optx.adam(0.1)
      >>> state = tx.init(flat)
      >>> @jax.jit
      ... def step(flat, state):
      ...     loss = lambda f: jnp.sum(f.unflatten()["w"] ** 2)
      ...     grads = jax.grad(loss)(flat)  # a FlatTree too
      ...     updates, state = tx.update(grads, state, flat)
      ...     return optx.apply_updates(flat, updates), state
      >>> flat, state = step(flat, state)
      >>> flat.unflatten()["w"]
      Array([[0.9, 0.9, 0.9],
             [0.9, 0.9, 0.9]], dtype=float32)
    """

    __slots__ = ("buffers", "layout")
    buffers: tuple[Any, ...]
    layout: FlatLayout

    def __init__(self, buffers: tuple[Any, ...], layout: FlatLayout) -> None:
        if len(buffers) != len(layout.groups):
            raise ValueError(
                f"`FlatTree` needs one buffer per group of its layout ({len(layout.groups)}). "
                f"Received: {len(buffers)} buffers."
            )
        self.buffers = tuple(buffers)
        self.layout = layout

    def tree_flatten(self) -> tuple[tuple[Any, ...], FlatLayout]:
        return self.buffers, self.layout

    def tree_flatten_with_keys(self) -> tuple[tuple[tuple[Any, Any], ...], FlatLayout]:
        keys = [jax.tree_util.DictKey(g.name) for g in self.layout.groups]
        return tuple(zip(keys, self.buffers, strict=True)), self.layout

    @classmethod
    def tree_unflatten(cls, layout: FlatLayout, buffers: Any) -> FlatTree:
        # Children may be anything a tree map put there (shardings, shapes, None).
        flat = object.__new__(cls)
        flat.buffers, flat.layout = tuple(buffers), layout
        return flat

    @property
    def paths(self) -> tuple[str, ...]:
        """The path names of the original tree's leaves, in tree order."""
        return self.layout.paths

    @property
    def treedef(self) -> Any:
        """The structure of the original tree."""
        return self.layout.treedef

    def unflatten(self) -> PyTree:
        """The original tree: each leaf a reshaped slice of its buffer.

        Returns:
          A pytree with the structure, shapes and dtypes of the tree given to
          `flatten_tree`.

        Example:
          >>> import jax.numpy as jnp, optx
          >>> flat = optx.flatten_tree({"a": jnp.arange(3.0), "b": jnp.ones((1, 2))})
          >>> flat.unflatten()["b"]
          Array([[1., 1.]], dtype=float32)
        """
        return self.layout.unflatten(self.buffers)

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{g.name}: {_describe(b)}"
            for g, b in zip(self.layout.groups, self.buffers, strict=True)
        )
        return f"FlatTree({len(self.layout.slots)} leaves{'; ' if shown else ''}{shown})"


def _describe(buffer: Any) -> str:
    if hasattr(buffer, "shape") and hasattr(buffer, "dtype"):
        return f"{jnp.dtype(buffer.dtype).name}{list(buffer.shape)}"
    return repr(buffer)


def _placement(leaf: Any) -> Any:
    """The devices a leaf may be concatenated on (``None``: the default), or ``"own"``.

    A leaf whose sharding is not fully replicated is ``"own"``: it keeps its own buffer.
    Host arrays, and tracers without an explicit sharding, go with the default device.
    """
    if isinstance(leaf, Tracer):
        # Under `jit`, a mesh with explicit axes types its arrays with their sharding.
        spec = getattr(getattr(jax.typeof(leaf), "sharding", None), "spec", None)
        return "own" if spec is not None and any(a is not None for a in spec) else None
    sharding = getattr(leaf, "sharding", None)
    if not isinstance(sharding, jax.sharding.Sharding):
        return None
    if not sharding.is_fully_replicated:
        return "own"
    devices = tuple(sorted(d.id for d in sharding.device_set))
    return None if devices == (jax.devices()[0].id,) else devices


def _dtype(api: str, path: str, leaf: Any) -> np.dtype:
    if not (hasattr(leaf, "dtype") or isinstance(leaf, int | float | complex | bool)):
        raise TypeError(
            f"`{api}` needs a pytree of arrays. Received: tree[{path!r}] of type "
            f"{type(leaf).__name__}."
        )
    return np.dtype(jnp.result_type(leaf))


def make_layout(
    tree: PyTree, api: str = "flatten_tree", max_concat_size: int | None = None
) -> FlatLayout:
    """The layout that `flatten_tree` gives ``tree`` (its leaves are only looked at).

    A leaf with more than ``max_concat_size`` elements (if given) keeps a buffer of its own.
    """
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
    keys: dict[Any, int] = {}
    groups: list[_Group] = []
    sizes: list[int] = []
    slots = []
    for path, leaf in with_paths:
        name = path_name(path)
        dtype = _dtype(api, name, leaf)
        shape = tuple(int(d) for d in np.shape(leaf))
        placement = _placement(leaf)
        if max_concat_size is not None and _size(shape) > max_concat_size:
            placement = "own"
        if placement == "own":
            slots.append(_Slot(len(groups), 0, shape))
            groups.append(_Group(f"{dtype.name}:{name}", dtype.name, shape, False))
            sizes.append(_size(shape))
            continue
        key = (dtype.name, placement)
        if key not in keys:
            same_dtype = sum(1 for k in keys if k[0] == dtype.name)
            keys[key] = len(groups)
            suffix = f"_{same_dtype}" if same_dtype else ""
            groups.append(_Group(dtype.name + suffix, dtype.name, (0,), True))
            sizes.append(0)
        index = keys[key]
        slots.append(_Slot(index, sizes[index], shape))
        sizes[index] += _size(shape)
    counts = [0] * len(groups)
    for slot in slots:
        counts[slot.group] += 1
    for i, group in enumerate(groups):
        if not group.concatenated:
            continue
        if counts[i] == 1:
            # A lone leaf keeps its own shape: a raveled copy would be a reshape that makes
            # XLA copy a donated parameter read both flat and in its own shape.
            shape = next(s.shape for s in slots if s.group == i)
            groups[i] = group._replace(shape=shape, concatenated=False)
        else:
            groups[i] = group._replace(shape=(sizes[i],))
    paths = tuple(path_name(p) for p, _ in with_paths)
    return _interned(FlatLayout(treedef, tuple(groups), tuple(slots), paths))


# Equal layouts are one object: a jitted call compares its arguments' structure with the
# one it was compiled for, and `FlatLayout.__eq__` on a different but equal layout compares
# every leaf's place (43 us per FlatTree argument on 1,000 leaves; `is` is free).
_LAYOUTS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _interned(layout: FlatLayout) -> FlatLayout:
    key = (layout.treedef, layout.groups, layout.slots, layout.paths)
    found = _LAYOUTS.get(key)
    if found is None:
        _LAYOUTS[key] = found = layout
    return found


def flatten_tree(tree: PyTree, like: FlatTree | None = None) -> FlatTree:
    """Holds a pytree of arrays as a `FlatTree`: one 1-D buffer per dtype.

    Leaves of one dtype are raveled and concatenated in tree order. A leaf whose sharding
    is not fully replicated, or the only leaf of its dtype, keeps its own buffer, in its
    own shape and sharding (see `FlatTree`). ``None`` leaves (empty subtrees) stay in the
    structure and hold nothing.

    Args:
      tree: a pytree of arrays (or numbers).
      like: lay ``tree`` out as this `FlatTree` is laid out (its structure and shapes;
        each leaf is cast to its buffer's dtype). Works inside ``jit``, e.g. to flatten
        per-leaf gradients for flat parameters.

    Returns:
      The `FlatTree`; ``flatten_tree(tree).unflatten()`` equals ``tree``. Its buffers are
      new arrays (a donating step leaves ``tree`` intact).

    Raises:
      TypeError: a leaf is not an array or a number (the message names its path).
      ValueError: ``like`` is given and ``tree`` differs from it in structure or in a
        leaf's shape (the message names the leaf).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> flat = optx.flatten_tree(
      ...     {"w": jnp.ones((2, 2)), "b": jnp.zeros(2), "h": jnp.ones(3, jnp.bfloat16)})
      >>> [(b.dtype.name, b.shape) for b in flat.buffers]
      [('float32', (6,)), ('bfloat16', (3,))]
      >>> flat.paths
      ('b', 'h', 'w')
    """
    if like is not None:
        if not isinstance(like, FlatTree):
            raise TypeError(
                f"`flatten_tree` needs like to be a FlatTree or None. "
                f"Received: like of type {type(like).__name__}."
            )
        return FlatTree(like.layout.flatten(tree, "flatten_tree", "tree", "like"), like.layout)
    layout = make_layout(tree)
    leaves = layout.treedef.flatten_up_to(tree)
    parts: list[list[Any]] = [[] for _ in layout.groups]
    for leaf, slot in zip(leaves, layout.slots, strict=True):
        parts[slot.group].append(jnp.asarray(leaf, layout.groups[slot.group].dtype))
    if any(isinstance(x, Tracer) for x in leaves):
        buffers = [
            _join([jnp.ravel(x) for x in p]) if g.concatenated else p[0]
            for g, p in zip(layout.groups, parts, strict=True)
        ]
    else:
        # New arrays, never the leaves themselves: a step that donates the FlatTree must
        # leave ``tree`` intact. One jitted concatenation per group (its leaves share their
        # devices), in rounds of at most `_ROUND` operands: XLA compiles one concatenation
        # of thousands of operands in minutes.
        buffers = [
            _concatenate(tuple(p)) if g.concatenated else jnp.array(p[0], copy=True)
            for g, p in zip(layout.groups, parts, strict=True)
        ]
    return FlatTree(tuple(buffers), layout)


_ROUND = 64


@jax.jit
def _concatenate(parts: tuple[jax.Array, ...]) -> jax.Array:
    flat = [jnp.ravel(x) for x in parts]
    while len(flat) > _ROUND:
        rounds = [jnp.concatenate(flat[i : i + _ROUND]) for i in range(0, len(flat), _ROUND)]
        # XLA would merge nested concatenations back into one.
        flat = list(jax.lax.optimization_barrier(rounds))
    return jnp.concatenate(flat) if len(flat) > 1 else jnp.array(flat[0], copy=True)
