"""Finding, reading, replacing and mapping values in optimizer states by name.

A value is found by its key: a dict key, a NamedTuple field, or (for a whole NamedTuple)
its class name. The hyperparameters an optx state holds in a `HyperParams` node are found
by their public names (``"learning_rate"``, ``"b1"``), as the values in force, as optax
finds those of an ``inject_hyperparams`` state. Paths name NamedTuple fields with a
`NamedTupleKey` (``ScaleByAdamState.count``), so that a ``filtering`` function can tell
apart fields of the same name in different states.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from optx._src import reprs
from optx._src.hyperparams.node import HyperParams, _checked, _unwrap

PyTree = Any
KeyPath = tuple[Any, ...]
Filtering = Callable[[KeyPath, Any], bool]


@dataclasses.dataclass(frozen=True)
class NamedTupleKey:
    """The key of a NamedTuple field in a path: the tuple's class name and the field.

    Shown as ``"ScaleByAdamState.count"`` by `jax.tree_util.keystr`.

    Attributes:
      tuple_name: the NamedTuple's class name.
      name: the field's name.
    """

    tuple_name: str
    name: str

    def __str__(self) -> str:
        return f"{self.tuple_name}.{self.name}"


def _is_named_tuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _hyperparam_names(node: HyperParams) -> list[str]:
    return [e.name for e in node.entries]


def _has_key(node: Any, keys: tuple[Any, ...]) -> bool:
    """Whether ``node`` holds one of ``keys`` (or is a NamedTuple of that class name)."""
    if _is_named_tuple(node):
        return any(k in node._fields or k == type(node).__name__ for k in keys)
    if isinstance(node, dict):
        return any(k in node for k in keys)
    if isinstance(node, HyperParams):
        return any(k in _hyperparam_names(node) for k in keys)
    return False


def _children(path: KeyPath, node: Any) -> list[tuple[KeyPath, Any, Any]]:
    """``(path, key, child)`` of a NamedTuple's fields, a dict's items, or hyperparameters."""
    if _is_named_tuple(node):
        name = type(node).__name__
        return [((*path, NamedTupleKey(name, f)), f, getattr(node, f)) for f in node._fields]
    if isinstance(node, dict):
        return [((*path, jax.tree_util.DictKey(k)), k, v) for k, v in node.items()]
    if isinstance(node, HyperParams):
        return [
            ((*path, jax.tree_util.DictKey(e.name)), e.name, v)
            for e, v in zip(node.entries, node.in_force, strict=True)
        ]
    return []


def _leaves(tree: PyTree, stop: Callable[[Any], bool]) -> list[tuple[KeyPath, Any]]:
    """Leaves with paths, stopping at nodes where ``stop`` holds and at `HyperParams`.

    NamedTuple fields are named with `NamedTupleKey`.
    """
    out = []
    flat = jax.tree_util.tree_flatten_with_path(
        tree, is_leaf=lambda x: stop(x) or _is_named_tuple(x) or isinstance(x, HyperParams)
    )[0]
    for path, node in flat:
        if _is_named_tuple(node) and not stop(node):
            for child_path, _, child in _children(tuple(path), node):
                out += [((*child_path, *p), v) for p, v in _leaves(child, stop)]
        else:
            out.append((tuple(path), node))
    return out


def _find(tree: PyTree, key: Any) -> list[tuple[KeyPath, Any]]:
    """Every ``(path, value)`` of ``key`` in ``tree``: outermost matches first, then inner."""
    holders = [
        (p, n) for p, n in _leaves(tree, lambda x: _has_key(x, (key,))) if _has_key(n, (key,))
    ]
    found = []
    for path, node in holders:
        if _is_named_tuple(node) and type(node).__name__ == key:
            found.append((path, node))
        else:
            found += [(p, v) for p, k, v in _children(path, node) if k == key]
    for path, node in holders:
        for child_path, _, child in _children(path, node):
            found += [((*child_path, *p), v) for p, v in _find(child, key)]
    return found


def get_all_with_path(
    tree: PyTree, key: Any, filtering: Filtering | None = None
) -> list[tuple[KeyPath, Any]]:
    """Every value of ``tree`` under ``key``, with its path.

    ``key`` is a dict key, a NamedTuple field, the class name of a NamedTuple (which is
    then the value), or the public name of a hyperparameter an optx state holds (the value
    is the one in force: a scheduled hyperparameter's value at the last step).

    Args:
      tree: a pytree (an optimizer state).
      key: the key to look for.
      filtering: an optional ``filtering(path, value) -> bool`` keeping some matches.

    Returns:
      ``(path, value)`` pairs, outer matches first. A path is a tuple of JAX key entries
      and `NamedTupleKey`; `jax.tree_util.keystr` prints it.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> state = optx.adam(1e-3).init({"w": jnp.zeros(2)})
      >>> [(jax.tree_util.keystr(p), float(v))
      ...  for p, v in optx.tree.get_all_with_path(state, "learning_rate")]
      [("[1]ScaleByLearningRateState.hyperparams['learning_rate']", 0.0010000000474974513)]
    """
    found = _find(tree, key)
    if filtering is not None:
        found = [(p, v) for p, v in found if filtering(p, v)]
    return found


def get(
    tree: PyTree, key: Any, default: Any | None = None, filtering: Filtering | None = None
) -> Any:
    """The one value of ``tree`` under ``key`` (see `get_all_with_path`), or ``default``.

    Args:
      tree: a pytree (an optimizer state).
      key: a dict key, NamedTuple field or class name, or hyperparameter name.
      default: returned when nothing matches.
      filtering: an optional ``filtering(path, value) -> bool`` keeping some matches.

    Returns:
      The value found, or ``default``.

    Raises:
      KeyError: several values match; the message names their paths. Narrow the search
        with ``filtering`` (e.g. on the `NamedTupleKey` of the path's last entry).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> state = optx.adam(optx.linear_schedule(1.0, 0.0, 10)).init({"w": jnp.zeros(2)})
      >>> float(optx.tree.get(state, "learning_rate")), float(optx.tree.get(state, "b1"))
      (1.0, 0.8999999761581421)
      >>> optx.tree.get(state, "momentum", default="absent")
      'absent'
    """
    found = get_all_with_path(tree, key, filtering)
    if len(found) > 1:
        where = ", ".join(jax.tree_util.keystr(p) for p, _ in found)
        raise KeyError(
            f"`optx.tree.get` needs one value for the key. Received: key={key!r}, which "
            f"{len(found)} values match, at {where}. Pass a `filtering` function to choose."
        )
    return found[0][1] if found else default


def _set_hyperparams(node: HyperParams, path: KeyPath, new: dict[str, Any], keep: Any) -> Any:
    """``node`` with the values in force of the hyperparameters in ``new`` replaced."""
    values, residuals = list(node.in_force), list(node.residuals)
    for i, (child_path, name, old) in enumerate(_children(path, node)):
        if name in new and keep(child_path, old):
            value = _checked("optx.tree.set", name, node.entries[i], new[name], _unwrap(old))
            node._with_value(i, value, values, residuals)
    return node._replace(values=tuple(values), residuals=tuple(residuals))


def set(tree: PyTree, filtering: Filtering | None = None, /, **kwargs: Any) -> PyTree:
    """A copy of ``tree`` with the values under some keys replaced.

    Each keyword names a key as `get_all_with_path` finds it: every match (that
    ``filtering`` keeps) takes the value; a NamedTuple matched by its class name is
    replaced whole. A hyperparameter of an optx state is set in force: a constant one
    keeps the new value, a scheduled one is recomputed by its schedule at the next step
    (as with optax's ``inject_hyperparams``; `optx.set_hyperparams` rescales the
    schedule instead). It is stored as a float32 scalar of its shape, so a jitted step
    does not recompile, and a Python number is checked against its range.

    Args:
      tree: a pytree (an optimizer state).
      filtering: an optional ``filtering(path, value) -> bool`` choosing among matches.
      **kwargs: keys and their new values.

    Returns:
      A new tree of the same structure (where the new values have that of the old).

    Raises:
      KeyError: a key matches nothing (that ``filtering`` keeps).
      ValueError: a hyperparameter's new value is out of its range or of the wrong shape.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> state = optx.adam(1e-3).init({"w": jnp.zeros(2)})
      >>> state = optx.tree.set(state, learning_rate=0.5)
      >>> float(optx.get_hyperparams(state)["learning_rate"])
      0.5
    """
    for key, value in kwargs.items():
        if not get_all_with_path(tree, key, filtering):
            which = " that the filtering keeps" if filtering is not None else ""
            raise KeyError(
                f"`optx.tree.set` needs keys the tree holds. Received: {key}="
                f"{reprs.short(value)}, which matches no value{which}."
            )
    keep = filtering or (lambda path, value: True)
    keys = tuple(kwargs)

    def replace(path: KeyPath, node: Any) -> Any:
        if isinstance(node, HyperParams):
            return _set_hyperparams(node, path, kwargs, keep) if _has_key(node, keys) else node
        name = type(node).__name__
        if _is_named_tuple(node) and name in kwargs and keep(path, node):
            return kwargs[name]
        if _is_named_tuple(node) or isinstance(node, dict):
            new = {}
            for child_path, key, child in _children(path, node):
                hit = key in kwargs and keep(child_path, child)
                new[key] = kwargs[key] if hit else replace(child_path, child)
            return node._replace(**new) if _is_named_tuple(node) else type(node)(new)
        flat, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
        if not flat or (len(flat) == 1 and flat[0][1] is node):
            return node  # a leaf
        return treedef.unflatten([replace((*path, *p), child) for p, child in flat])

    return replace((), tree)


@jax.tree_util.register_pytree_node_class
class _ParamsPlaceholder:
    """Stands for the parameters in a state built by ``init`` (a pytree without leaves)."""

    def tree_flatten(self) -> tuple[tuple[()], None]:
        return (), None

    @classmethod
    def tree_unflatten(cls, aux: Any, children: Any) -> _ParamsPlaceholder:
        del aux, children
        return cls()


def _is_placeholder(x: Any) -> bool:
    return isinstance(x, _ParamsPlaceholder)


def map_params(
    initable: Any,
    f: Callable[..., Any],
    state: PyTree,
    /,
    *rest: Any,
    transform_non_params: Callable[..., Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
) -> PyTree:
    """Maps ``f`` over every copy of the parameter tree inside an optimizer state.

    The slots shaped like the parameters (Adam's ``mu`` and ``nu``, a momentum trace) are
    found by initialising ``initable`` on a stand-in for the parameters; ``f`` is applied
    leaf by leaf to each of them (with the matching leaves of ``rest``), and
    ``transform_non_params`` (if given) to every other leaf. The typical use: partition
    specs or shardings for a state, from those of the parameters.

    Args:
      initable: a transform (anything with ``init``) or an ``init`` function.
      f: ``f(leaf, *rest_leaves)``, applied to the parameter-shaped slots.
      state: the state to map over, made by ``initable``.
      *rest: trees with the parameters' structure, passed leaf by leaf to ``f``.
      transform_non_params: applied to the leaves that are not parameter slots.
      is_leaf: passed to `jax.tree.map` over the slots (to stop at masked nodes).

    Returns:
      A tree with the structure of ``state``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.sgd(0.1, momentum=0.9)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> specs = optx.tree.map_params(
      ...     tx, lambda _, spec: spec, state, {"w": "model"}, transform_non_params=lambda _: None)
      >>> specs[0].trace
      {'w': 'model'}
    """
    init = initable.init if hasattr(initable, "init") else initable
    with_placeholders = init(_ParamsPlaceholder())

    def one(placeholder_or_value: Any, value: Any) -> Any:
        if _is_placeholder(placeholder_or_value):
            return jax.tree.map(f, value, *rest, is_leaf=is_leaf)
        return value if transform_non_params is None else transform_non_params(value)

    return jax.tree.map(one, with_placeholders, state, is_leaf=_is_placeholder)


# optax's top-level name for it.
tree_map_params = map_params
