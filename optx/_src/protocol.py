"""optax's protocol types and helpers under optax's names.

A transform made of two plain functions (`GradientTransformation`), the type aliases of
those functions, and helpers that adapt a transform: `with_extra_args_support`,
`stateless_with_tree_map`, `init_empty_state`. optx's own transforms are frozen dataclasses
(`Transform`); these are for code written against optax's types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from optx._src import checks
from optx._src.base import EmptyState, OptState, Params, Transform, Updates, stateless
from optx._src.combine import accepts_extra
from optx._src.tree import is_none

TransformInitFn = Callable[[Params], OptState]
"""``init(params) -> state``: the first function of a transform."""

TransformUpdateFn = Callable[..., tuple[Updates, OptState]]
"""``update(updates, state, params=None) -> (updates, state)``: the second function."""

TransformUpdateExtraArgsFn = Callable[..., tuple[Updates, OptState]]
"""``update(updates, state, params=None, **extra) -> (updates, state)``: an update that takes
extra keyword arguments (``value=loss``, ...)."""

MaskOrFn = Any
"""A mask: a pytree of booleans with the parameters' structure (or a prefix of it), or a
function of the parameters that returns one."""


class GradientTransformation(NamedTuple):
    """A transform made of two functions, as optax's ``GradientTransformation``.

    It unpacks as ``init, update = tx`` and goes wherever an optx transform goes
    (`chain`, `apply_updates` loops, Flax's ``TrainState``). Its ``update`` is called
    without extra keyword arguments (`with_extra_args_support` gives it them to ignore).

    Attributes:
      init: ``init(params) -> state``.
      update: ``update(updates, state, params=None) -> (updates, state)``.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> def init(params):
      ...     return optx.EmptyState()
      >>> def update(updates, state, params=None):
      ...     return jax.tree.map(lambda u: -0.1 * u, updates), state
      >>> tx = optx.GradientTransformation(init, update)
      >>> tx.update({"w": jnp.ones(2)}, tx.init(None))[0]
      {'w': Array([-0.1, -0.1], dtype=float32)}
    """

    init: TransformInitFn
    update: TransformUpdateFn


class GradientTransformationExtraArgs(NamedTuple):
    """A `GradientTransformation` whose ``update`` takes extra keyword arguments.

    As optax's ``GradientTransformationExtraArgs``: ``update(updates, state, params=None,
    **extra)``, where ``extra`` holds what a transform may read (``value=loss`` for a
    line search or a plateau schedule) and ignores otherwise.

    Attributes:
      init: ``init(params) -> state``.
      update: ``update(updates, state, params=None, **extra) -> (updates, state)``.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> def update(updates, state, params=None, **extra):
      ...     return jax.tree.map(lambda u: u * extra.get("value", 1.0), updates), state
      >>> tx = optx.GradientTransformationExtraArgs(optx.init_empty_state, update)
      >>> tx.update({"w": jnp.ones(2)}, tx.init(None), value=3.0)[0]
      {'w': Array([3., 3.], dtype=float32)}
    """

    init: TransformInitFn
    update: TransformUpdateExtraArgsFn


def init_empty_state(params: Params) -> EmptyState:
    """The ``init`` of a transform that keeps no state: returns `EmptyState`.

    Args:
      params: the parameters (unused).

    Returns:
      ``EmptyState()``.

    Example:
      >>> import optx
      >>> optx.init_empty_state({"w": 1.0})
      EmptyState()
    """
    del params
    return EmptyState()


def with_extra_args_support(tx: Any) -> Any:
    """A transform whose ``update`` accepts extra keyword arguments, ignoring unknown ones.

    optx's own transforms (and any whose ``update`` takes ``**extra``) are returned as they
    are; another's ``update`` is wrapped so that the extra arguments are dropped before it
    is called.

    Args:
      tx: a transform (optx's, optax's, or anything with ``init`` and ``update``).

    Returns:
      ``tx`` itself, or a `GradientTransformationExtraArgs` around it.

    Raises:
      TypeError: ``tx`` has no ``init`` and ``update``.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> plain = optx.GradientTransformation(
      ...     optx.init_empty_state, lambda u, s, p=None: (u, s))
      >>> tx = optx.with_extra_args_support(plain)
      >>> tx.update({"w": jnp.ones(1)}, tx.init(None), value=1.0)[0]
      {'w': Array([1.], dtype=float32)}
    """
    if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
        raise TypeError(
            f"`with_extra_args_support` needs tx to be a transform (with `init` and "
            f"`update`). Received: tx={tx!r}."
        )
    if isinstance(tx, Transform | GradientTransformationExtraArgs) or accepts_extra(tx):
        return tx

    def update(
        updates: Updates, state: OptState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, OptState]:
        del extra
        return tx.update(updates, state, params)

    return GradientTransformationExtraArgs(tx.init, update)


def stateless_with_tree_map(f: Callable[[jax.Array, jax.Array | None], jax.Array]) -> Any:
    """A transform keeping no state that applies ``f(update, param)`` to every leaf.

    ``param`` is ``None`` when ``update`` is called without parameters. ``None`` updates
    (parameters without a gradient) stay ``None``.

    Args:
      f: a function of one update leaf and its parameter leaf.

    Returns:
      The transform (its state is `EmptyState`).

    Raises:
      TypeError: ``f`` is not callable.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.stateless_with_tree_map(lambda u, p: 2 * u)
      >>> tx.update({"w": jnp.ones(2)}, tx.init(None))[0]
      {'w': Array([2., 2.], dtype=float32)}
    """
    if not callable(f):
        raise TypeError(
            f"`stateless_with_tree_map` needs f to be a callable (update, param) -> update. "
            f"Received: f={f!r}."
        )
    return stateless(_TreeMapped(f))


class _TreeMapped:
    """``f`` applied leaf by leaf; equal to another around the same ``f`` (no recompiles)."""

    __slots__ = ("f",)

    def __init__(self, f: Callable[..., Any]) -> None:
        self.f = f

    def __call__(self, updates: Updates, params: Params | None) -> Updates:
        if params is None:
            return jax.tree.map(
                lambda u: None if u is None else self.f(u, None), updates, is_leaf=is_none
            )
        checks.same_tree(
            "stateless_with_tree_map.update",
            updates,
            params,
            "updates",
            "params",
            allow_none=True,
        )
        return jax.tree.map(
            lambda u, p: None if u is None else self.f(u, p), updates, params, is_leaf=is_none
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _TreeMapped) and other.f is self.f

    def __hash__(self) -> int:
        return hash(self.f)

    def __repr__(self) -> str:
        name = getattr(self.f, "__qualname__", repr(self.f))
        return f"tree_map({name})"
