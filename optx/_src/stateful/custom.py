"""Optimizers written the Keras way: ``build`` declares slots, ``update_step`` is the step.

A subclass of `optx.optimizers.Optimizer` that defines ``update_step`` becomes a transform,
`CustomStep`: ``init`` runs the subclass's ``build`` to learn the slots (shapes and
initialisers only) and creates them; ``update`` calls ``update_step`` once per parameter,
in path order, with that parameter's slots, and collects the new values. The numbers of
the subclass's ``get_config`` are dynamic hyperparameters: during ``update`` the attributes
of the same names hold their values from the state, so ``update_step`` reads them as usual
(``self.beta_1``) and setting them never recompiles.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import hyperparams as hp
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import MaskedNode
from optx._src.stateful.keras_args import COMMON, EXTRA
from optx._src.tree import is_none, path_name


class CustomStepState(NamedTuple):
    """State of `CustomStep`.

    Attributes:
      count: steps taken.
      slots: ``{slot name: tree shaped like the parameters}`` (`MaskedNode` where a
        parameter has no such slot).
      globals: the variables declared with ``add_variable`` (not tied to a parameter).
      hyperparams: the learning rate and the subclass's numeric hyperparameters.
    """

    count: jax.Array
    slots: dict[str, Any]
    globals: dict[str, jax.Array]
    hyperparams: dict[str, jax.Array]


class _Ref:
    """Holds the optimizer object in a transform: equal and hashable by identity."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Ref) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"<{type(self.obj).__name__} {getattr(self.obj, 'name', '')!r}>"


def _initial(initializer: Any, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    if isinstance(initializer, str):
        if initializer == "zeros":
            return jnp.zeros(shape, dtype)
        if initializer == "ones":
            return jnp.ones(shape, dtype)
        raise ValueError(
            f"`add_variable` needs initializer 'zeros', 'ones', a number or a callable "
            f"(shape, dtype) -> array. Received: initializer={initializer!r}."
        )
    if callable(initializer):
        return jnp.asarray(initializer(shape, dtype), dtype)
    return jnp.full(shape, initializer, dtype)


@dataclasses.dataclass
class SlotSpecs:
    """What ``build`` declared: per parameter path, ``{slot: (shape, dtype, initializer)}``."""

    per_param: dict[str, dict[str, tuple[tuple[int, ...], Any, Any]]]
    globals: dict[str, tuple[tuple[int, ...], Any, Any]]


@transform
class CustomStep(Transform):
    """The step of an `Optimizer` subclass that defines ``update_step`` (see module docstring)."""

    name = "update_step"
    optimizer: Any = None
    learning_rate: ScalarOrSchedule = hp.field(1e-3, hp.NONNEG)
    values: tuple[tuple[str, float], ...] = ()

    def init_hyperparams(self) -> hp.HyperParams:
        # The subclass's own numbers (its `get_config`) join the learning rate.
        return hp.create(self, extra=self.values)

    def init(self, params: Params) -> CustomStepState:
        opt = self.optimizer.obj
        specs = opt._declare_slots(params)
        flat, treedef = jax.tree_util.tree_flatten_with_path(params)
        names = list(dict.fromkeys(s for slots in specs.per_param.values() for s in slots))
        slots = {}
        for slot in names:
            leaves = []
            for path, _ in flat:
                spec = specs.per_param.get(path_name(path), {}).get(slot)
                leaves.append(MaskedNode() if spec is None else _initial(spec[2], *spec[:2]))
            slots[slot] = jax.tree.unflatten(treedef, leaves)
        globals_ = {
            n: _initial(init, shape, dtype) for n, (shape, dtype, init) in specs.globals.items()
        }
        return CustomStepState(zero_count(), slots, globals_, self.init_hyperparams())

    def update(
        self,
        updates: Updates,
        state: CustomStepState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, CustomStepState]:
        del extra
        opt = self.optimizer.obj
        api = f"{type(opt).__name__}.update_step"
        if params is None:
            raise ValueError(f"`{api}` needs the current parameters. Received: params=None.")
        h = state.hyperparams
        lr = h["learning_rate"]
        flat, treedef = jax.tree_util.tree_flatten_with_path(params)
        grads = jax.tree.leaves(updates, is_leaf=is_none)
        slot_leaves = {
            s: jax.tree.leaves(t, is_leaf=lambda x: isinstance(x, MaskedNode))
            for s, t in state.slots.items()
        }
        globals_ = dict(state.globals)
        new_updates, new_slots = [], {s: list(v) for s, v in slot_leaves.items()}
        bound = {n: h[n] for n, _ in self.values}
        with _bound(opt, {**bound, "_tracing_iterations": state.count}):
            for i, ((path, p), g) in enumerate(zip(flat, grads, strict=True)):
                if g is None:
                    new_updates.append(None)
                    continue
                mine = {s: v[i] for s, v in slot_leaves.items() if not isinstance(v[i], MaskedNode)}
                given = {**mine, **globals_}
                out = opt.update_step(g, p, lr, given)
                new_p, returned = _check_step(api, path_name(path), out, given)
                new_updates.append((new_p - p).astype(jnp.result_type(g)))
                for s in mine:
                    new_slots[s][i] = returned[s].astype(mine[s].dtype)
                for s in globals_:
                    globals_[s] = returned[s].astype(globals_[s].dtype)
        slots = {
            s: jax.tree.unflatten(
                jax.tree.structure(state.slots[s], is_leaf=lambda x: isinstance(x, MaskedNode)), v
            )
            for s, v in new_slots.items()
        }
        del treedef
        out_updates = jax.tree.unflatten(jax.tree.structure(updates, is_leaf=is_none), new_updates)
        return out_updates, CustomStepState(safe_increment(state.count), slots, globals_, h)


def _check_step(
    api: str, path: str, out: Any, given: Mapping[str, jax.Array]
) -> tuple[jax.Array, Mapping[str, jax.Array]]:
    """Checks ``update_step``'s ``(new_variable, new_slots)`` against the slots it was given."""
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Mapping)):
        raise TypeError(
            f"`{api}` needs to return (new_variable, new_slots), new_slots a dict with the "
            f"slots it was given. Received for {path!r}: {type(out).__name__} {out!r:.200}."
        )
    new_p, returned = out
    missing = [s for s in given if s not in returned]
    extra = [s for s in returned if s not in given]
    if missing or extra:
        raise ValueError(
            f"`{api}` needs to return every slot it was given, and no other. Received for "
            f"{path!r}: slots {sorted(returned)}; expected {sorted(given)}."
        )
    for s, value in returned.items():
        if np.shape(value) != np.shape(given[s]):
            raise ValueError(
                f"`{api}` returned slot {s!r} of shape {np.shape(value)} for {path!r}; "
                f"expected shape {np.shape(given[s])}."
            )
    return jnp.asarray(new_p), returned


@contextlib.contextmanager
def _bound(opt: Any, values: Mapping[str, jax.Array]) -> Iterator[None]:
    """Sets ``opt``'s hyperparameter attributes to ``values`` (traced) for a step."""
    saved = {n: opt.__dict__.get(n) for n in values}
    try:
        for n, v in values.items():
            object.__setattr__(opt, n, v)
        yield
    finally:
        for n, v in saved.items():
            object.__setattr__(opt, n, v)


class SlotDeclarations:
    """`Optimizer`'s side of `CustomStep`: ``build`` declares, ``update_step`` computes."""

    if TYPE_CHECKING:
        _declaring: SlotSpecs | None
        _declaring_leaves: dict[str, Any]
        _declaring_names: dict[int, str]
        built: bool

        def get_config(self) -> dict[str, Any]: ...

    def _custom_values(self) -> tuple[tuple[str, float], ...]:
        """The dynamic hyperparameters of a subclass: the floats of its `get_config`."""
        base = {"name", "learning_rate", *COMMON, *EXTRA}
        return tuple(
            (k, float(v))
            for k, v in self.get_config().items()
            if k not in base and isinstance(v, float)
        )

    def _declare_slots(self, params: Params) -> SlotSpecs:
        """Runs the subclass's ``build`` to collect the slots it declares."""
        flat = jax.tree_util.tree_flatten_with_path(params)[0]
        self._declaring_leaves = {path_name(path): leaf for path, leaf in flat}
        self._declaring_names = {id(leaf): path_name(path) for path, leaf in flat}
        self._declaring = SlotSpecs({}, {})
        try:
            type(self).build(self, params)
            return self._declaring
        finally:
            self._declaring = None

    def build(self, params: Params) -> None:
        """Creates the state for ``params``.

        A subclass declares its slots here, after calling ``super().build(params)``, as in
        Keras.
        """
        if self._declaring is not None:
            return
        super().build(params)

    def add_variable_from_reference(
        self, reference_variable: Any, name: str, initializer: Any = "zeros"
    ) -> jax.ShapeDtypeStruct:
        """Declares a slot ``name`` for one parameter, of its shape and dtype (in ``build``).

        Args:
          reference_variable: the parameter (a leaf of the ``params`` given to ``build``)
            or its path name.
          name: the slot's name; ``update_step`` finds it in ``slots[name]``.
          initializer: ``"zeros"``, ``"ones"``, a number, or ``(shape, dtype) -> array``.

        Returns:
          The slot's shape and dtype (its values reach ``update_step``).
        """
        specs = self._declaring
        if specs is None:
            # `build`'s own body, after `super().build(params)`: the slots exist already.
            return jax.ShapeDtypeStruct(
                np.shape(reference_variable), jnp.result_type(reference_variable)
            )
        if isinstance(reference_variable, str):
            path = reference_variable
        else:
            path = self._declaring_names.get(id(reference_variable))
        if path not in self._declaring_leaves:
            raise ValueError(
                f"`add_variable_from_reference` needs a parameter given to `build` (or its "
                f"path). Received: {reference_variable!r:.80} for slot {name!r}."
            )
        leaf = self._declaring_leaves[path]
        shape, dtype = np.shape(leaf), jnp.result_type(leaf)
        specs.per_param.setdefault(path, {})[name] = (shape, dtype, initializer)
        return jax.ShapeDtypeStruct(shape, dtype)

    def add_variable(
        self,
        shape: tuple[int, ...] = (),
        initializer: Any = "zeros",
        dtype: Any = None,
        name: str | None = None,
    ) -> jax.ShapeDtypeStruct:
        """Declares a variable tied to no parameter (in ``build``), e.g. a product of betas.

        ``update_step`` receives it in ``slots[name]`` for every parameter, in path order,
        and returns its new value; the next parameter sees that value (Keras's order).
        """
        specs = self._declaring
        if specs is None:
            return jax.ShapeDtypeStruct(tuple(shape), jnp.float32 if dtype is None else dtype)
        if not isinstance(name, str):
            raise TypeError(f"`add_variable` needs a name. Received: name={name!r}.")
        dtype = jnp.float32 if dtype is None else dtype
        specs.globals[name] = (tuple(shape), dtype, initializer)
        return jax.ShapeDtypeStruct(tuple(shape), dtype)
