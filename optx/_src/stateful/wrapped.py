"""``Optimizer(transform)``: a transform of any library wrapped, and its learning rate.

`Optimizer` wraps any transform with optax's ``init``/``update`` protocol. It takes no
``weight_decay``, ``lr`` or ``decay`` (the transform's learning rate is its own), and with
``learning_rate=`` it starts the one hyperparameter called ``learning_rate`` in the
transform's state at that value (`InitialLearningRate`).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any

import jax

from optx._src import hyperparams as hp
from optx._src import reprs
from optx._src.base import Params


def is_transform(value: Any) -> bool:
    """Whether ``value`` has ``init`` and ``update`` (optax's protocol)."""
    return callable(getattr(value, "init", None)) and callable(getattr(value, "update", None))


def check_wrapper_arguments(api: str, arguments: Mapping[str, Any]) -> None:
    """Raises for the arguments ``Optimizer(transform)`` has no use for."""
    if arguments.get("weight_decay") is not None:
        raise TypeError(
            f"`{api}` wrapping a transform has no learning rate to multiply a "
            f"weight decay by. Received: weight_decay={arguments['weight_decay']!r}. "
            f"Put optx.add_decayed_weights in the transform instead."
        )
    for key in ("lr", "decay"):
        if key in arguments:
            raise TypeError(
                f"`{api}` wrapping a transform takes no `{key}` (its learning rate "
                f"is the transform's). Received: {key}={arguments[key]!r}."
            )


def _learning_rates(state: Any) -> list[str]:
    """The names of the hyperparameters called ``learning_rate`` in ``state``."""
    return [f.flat for f in hp.find(state) if f.entry.name == "learning_rate"]


def _one_learning_rate(api: str, transform: Any, state: Any, value: float) -> None:
    found = _learning_rates(state)
    if len(found) != 1:
        held = f"{len(found)} ({', '.join(map(repr, found))})" if found else "none"
        raise ValueError(
            f"`{api}` needs a transform whose state holds one hyperparameter called "
            f"learning_rate, to start it at learning_rate={value!r}. Received: "
            f"transform={transform!r}, whose state holds {held}."
        )


def initial_learning_rate(api: str, transform: Any, value: Any) -> float:
    """Checks ``Optimizer(transform=..., learning_rate=value)``; returns the float."""
    if callable(value) or isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"`{api}` wrapping a transform needs learning_rate to be a number (the initial "
            f"value of the transform's own learning rate). Received: learning_rate="
            f"{reprs.short(value)}. Put a schedule in the transform instead."
        )
    value = hp.validate(api, "learning_rate", value, hp.NONNEG)
    try:  # the state's structure, without parameters; some inits need them: checked at build
        shapes = jax.eval_shape(transform.init, {})
    except Exception:
        return value
    _one_learning_rate(api, transform, shapes, value)
    return value


@dataclasses.dataclass(frozen=True)
class InitialLearningRate:
    """``inner`` with the learning rate in its state starting at ``learning_rate``.

    What ``Optimizer(transform=inner, learning_rate=...)`` steps with (and what its
    `get_config` describes once the learning rate was changed): the state of
    ``inner.init``, its ``learning_rate`` hyperparameter replaced; ``update`` is
    ``inner``'s.
    """

    inner: Any
    learning_rate: float

    def init(self, params: Params) -> Any:
        state = self.inner.init(params)
        _one_learning_rate("Optimizer", self.inner, state, self.learning_rate)
        return hp.set_hyperparams(state, learning_rate=self.learning_rate)

    def update(
        self, updates: Any, state: Any, params: Params | None = None, **extra: Any
    ) -> tuple[Any, Any]:
        return self.inner.update(updates, state, params, **extra)
