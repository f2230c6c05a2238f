"""`Variable`: a mutable holder of one array, and the helpers that read Flax's too."""

from __future__ import annotations

import functools
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class Variable:
    """A mutable holder of one array, for `Optimizer.apply_gradients`.

    Flax ``nnx.Variable`` (``nnx.Param``) works the same way; this one is for code without
    Flax.

    Args:
      value: the initial value (an array or anything `jax.numpy.asarray` takes).
      name: the name by which the optimizer knows it (its "parameter path"); ``None``
        lets the optimizer number it.

    Example:
      >>> import optx
      >>> w = optx.optimizers.Variable([1.0, 2.0], name="w")
      >>> w.assign(w.value * 2)
      >>> w
      Variable(name='w', value=Array([2., 4.], dtype=float32))
    """

    def __init__(self, value: Any, name: str | None = None) -> None:
        # A Python number makes a (strong) float32/int32 array, not a weakly typed one.
        self.value = value if isinstance(value, jax.Array) else jnp.asarray(np.asarray(value))
        self.name = name

    def assign(self, value: Any) -> None:
        """Replaces the value (same shape required)."""
        value = jnp.asarray(value, self.value.dtype)
        if value.shape != self.value.shape:
            raise ValueError(
                f"`Variable.assign` needs a value of shape {self.value.shape}. "
                f"Received: a value of shape {value.shape}."
            )
        self.value = value

    def numpy(self) -> np.ndarray:
        """The value as a NumPy array."""
        return np.asarray(self.value)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.value, dtype)

    def __repr__(self) -> str:
        return f"Variable(name={self.name!r}, value={self.value!r})"


def _is_variable(x: Any) -> bool:
    if isinstance(x, Variable):
        return True
    nnx = sys.modules.get("flax.nnx")
    return nnx is not None and isinstance(x, nnx.Variable)


def _value(var: Any) -> jax.Array:
    return var.value if isinstance(var, Variable) else var.get_value()


def _assign(var: Any, value: jax.Array) -> None:
    if isinstance(var, Variable):
        var.value = value
    else:
        var.set_value(value)


def variable_names(variables: list[Any]) -> list[str]:
    """The parameter path of each variable: its name, or its position; made unique."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for i, var in enumerate(variables):
        name = getattr(var, "name", None)
        name = name if isinstance(name, str) and name else str(i)
        if name in seen:
            seen[name] += 1
            name = f"{name}_{seen[name]}"
        seen.setdefault(name, 0)
        names.append(name)
    return names


def merge_repeated(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``(gradient, variable)`` pairs, one per variable object: a repeated one's gradients summed.

    A ``None`` gradient adds nothing (all ``None``: ``None``, the variable is skipped).
    """
    by_id: dict[int, list[Any]] = {}
    order: list[Any] = []
    for g, var in pairs:
        if id(var) not in by_id:
            by_id[id(var)] = []
            order.append(var)
        by_id[id(var)].append(g)
    if len(order) == len(pairs):  # the common case: no variable repeated
        return pairs
    merged = []
    for var in order:
        given = [g for g in by_id[id(var)] if g is not None]
        merged.append((functools.reduce(jnp.add, given) if given else None, var))
    return merged
