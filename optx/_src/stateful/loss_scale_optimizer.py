"""`LossScaleOptimizer`: dynamic loss scaling around an optimizer (`dynamic_loss_scale`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from optx._src import hyperparams as hp
from optx._src.base import Params, find_states, identity
from optx._src.checks import flag
from optx._src.combine import named_chain
from optx._src.distributed import aggregate_gradients
from optx._src.loss_scale import DynamicLossScaleState, dynamic_loss_scale
from optx._src.stateful.base import StatefulBase
from optx._src.stateful.config import config_arguments, deserialize, serialize
from optx._src.stateful.keras_args import COMMON, finite
from optx._src.stateful.multi import _inner_check
from optx._src.stateful.optimizer import Optimizer
from optx._src.suggest import unexpected


class LossScaleOptimizer(StatefulBase):
    """Dynamic loss scaling around an optimizer, for float16 training.

    Keras's ``LossScaleOptimizer``.

    Scale the loss with `scale_loss`; a step whose gradients hold an infinity or a NaN is
    skipped (the parameters and the inner optimizer's variables stay bit for bit as they
    were; `skipped_steps` counts it) and halves the scale; after
    ``dynamic_growth_steps`` finite steps in a row the scale doubles. Built on
    `optx.dynamic_loss_scale`.

    Args:
      inner_optimizer: the optimizer to protect (its own ``loss_scale_factor`` is dropped).
      initial_scale: the starting scale.
      dynamic_growth_steps: finite steps in a row before the scale doubles.
      name: the prefix of the variables' keys.
      **kwargs: Keras's common arguments are accepted at their defaults only (for configs
        written by Keras); ``jit_compile``.

    Raises:
      TypeError: ``inner_optimizer`` is not an optx stateful optimizer.
      ValueError: ``dynamic=False``, or a common argument other than its default.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.LossScaleOptimizer(optx.optimizers.SGD(1.0), initial_scale=8.0)
      >>> w = {"w": jnp.zeros(1)}
      >>> w = opt.apply({"w": jnp.array([8.0])}, w)        # the gradient of 8 * loss
      >>> w = opt.apply({"w": jnp.array([jnp.inf])}, w)    # skipped; the scale halves
      >>> w["w"], float(opt.loss_scale()), int(opt.iterations), int(opt.skipped_steps)
      (Array([-1.], dtype=float32), 4.0, 1, 1)
    """

    _default_name = "loss_scale_optimizer"
    _wraps_optimizers = True

    def __init__(
        self,
        inner_optimizer: StatefulBase,
        initial_scale: float = 2.0**15,
        dynamic_growth_steps: int = 2000,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        api = "LossScaleOptimizer"
        if not flag(api, "dynamic", kwargs.pop("dynamic", True)):
            raise ValueError(
                f"`{api}` needs dynamic=True (a fixed scale is `loss_scale_factor` of any "
                f"optimizer). Received: dynamic=False."
            )
        jit_compile = flag(api, "jit_compile", kwargs.pop("jit_compile", True))
        unknown = {k: v for k, v in kwargs.items() if k not in COMMON and k != "learning_rate"}
        if unknown:
            names = ["inner_optimizer", "initial_scale", "dynamic_growth_steps", "name"]
            raise TypeError(unexpected(api, unknown, [*names, "dynamic", "jit_compile"]))
        for key, value in kwargs.items():
            if key != "learning_rate" and value != COMMON[key]:
                raise ValueError(
                    f"`{api}` does not support `{key}`. Received: {key}={value!r}. "
                    f"Instead, set `{key}` on the `inner_optimizer`."
                )
        _inner_check(api, "inner_optimizer", inner_optimizer)
        if (
            "_config" in inner_optimizer.__dict__
            and inner_optimizer._config["loss_scale_factor"] is not None
        ):
            inner_optimizer._config["loss_scale_factor"] = None
            inner_optimizer._rebuild()
        self.inner_optimizer = inner_optimizer
        self.initial_scale = finite(api, "initial_scale", initial_scale)
        self.dynamic_growth_steps = dynamic_growth_steps
        self._initial_loss_scale = self.initial_scale
        self._tied = inner_optimizer._tied
        self._slot_aliases = inner_optimizer._slot_aliases
        with hp.caller(api, {"growth_interval": "dynamic_growth_steps"}):
            transform = self._loss_scaled()
        super().__init__(transform, name, jit_compile=jit_compile)
        inner_optimizer._owner = (self, "")

    def _prepare(self, params: Params, names_by_id: Mapping[int, str]) -> None:
        self.inner_optimizer._prepare(params, names_by_id)
        self._prepare_transform()

    def _public_names(self, state: Any) -> Any:
        # The inner optimizer's hyperparameters by its arguments' names (`beta_1`).
        return self.inner_optimizer._public_names(state)

    @property
    def iterations(self) -> jax.Array:
        """The steps the inner optimizer applied (skipped steps do not count)."""
        return jnp.array(self._steps_taken(), copy=True) // self.inner_optimizer._every_k()

    @property
    def learning_rate(self) -> Any:
        """The inner optimizer's learning rate (settable as the inner optimizer's)."""
        if "_config" in self.inner_optimizer.__dict__ or not self.built:
            return self.inner_optimizer.learning_rate
        return self._get_hyper("learning_rate")

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        if "_config" in self.inner_optimizer.__dict__ or not self.built:
            self.inner_optimizer.learning_rate = value
        else:
            self._set_hyper("learning_rate", value)

    lr = learning_rate

    def _prepare_transform(self) -> None:
        self._replace_transform(self._loss_scaled())

    def _loss_scaled(self, skip_aggregation: bool = False) -> Any:
        inner = self.inner_optimizer
        axis = inner._config["axis_name"] if "_config" in inner.__dict__ else None
        if axis is None:
            return dynamic_loss_scale(
                inner.transform, self.initial_scale, self.dynamic_growth_steps
            )
        # Aggregate before the finiteness check, so that every replica skips the same steps
        # (a collective inside a branch some replicas do not take would not be one).
        tx = dynamic_loss_scale(
            inner._step_transform(True), self.initial_scale, self.dynamic_growth_steps
        )
        first = identity() if skip_aggregation else aggregate_gradients(axis)
        return named_chain(("aggregate", first), ("loss_scale", tx))

    def _step_transform(self, skip_aggregation: bool) -> Any:
        return self._loss_scaled(True) if skip_aggregation else self.transform

    def _inner_changed(self) -> None:
        self._prepare_transform()

    def _steps_taken(self) -> jax.Array:
        with self._lock:
            if not self.built:
                return jnp.zeros((), jnp.int32)
            (state,) = find_states(self._state, DynamicLossScaleState)
            return jnp.array(state.applied_count, copy=True)

    @property
    def skipped_steps(self) -> jax.Array:
        """The steps skipped for an infinity or a NaN in the gradients (int32).

        Every call to `apply` (or `apply_gradients`, `stateless_apply`) is a step applied
        (counted by `iterations`, in the inner optimizer's steps) or a step skipped: the
        skipped ones are ``variables["iterations"]`` (every call, saturating at int32's
        maximum) minus the applied ones.
        """
        with self._lock:
            if not self.built:
                return jnp.zeros((), jnp.int32)
            return jnp.array(self._count, copy=True) - self._steps_taken()

    def get_config(self) -> dict[str, Any]:
        """``{name, inner_optimizer (serialised), initial_scale, dynamic_growth_steps}``."""
        return {
            "name": self.name,
            "inner_optimizer": serialize(self.inner_optimizer),
            "initial_scale": self.initial_scale,
            "dynamic_growth_steps": self.dynamic_growth_steps,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any], custom_objects: Any = None) -> StatefulBase:
        """Rebuilds a `LossScaleOptimizer` from `get_config`."""
        api = "LossScaleOptimizer.from_config"
        config = config_arguments(api, config, cls, required=("inner_optimizer",))
        inner = deserialize(config.pop("inner_optimizer"), custom_objects)
        return cls(inner, **config)

    def _repr_args(self) -> str:
        return (
            f"{type(self.inner_optimizer).__name__}(...), name={self.name!r}, "
            f"initial_scale={self.initial_scale!r}, "
            f"dynamic_growth_steps={self.dynamic_growth_steps!r}"
        )


# An `optx.optimizers.Optimizer` to `isinstance`, as in Keras (see multi.py).
Optimizer.register(LossScaleOptimizer)
