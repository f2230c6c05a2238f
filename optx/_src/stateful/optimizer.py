"""`Optimizer`: Keras's optimizer API and common arguments, translated into a chain.

The chain (the common arguments as transforms around the step) is `KerasChainMixin`'s
(keras_chain.py); a wrapped transform's arguments are checked in wrapped.py; arguments
set as attributes are written into the state by attributes.py; an ``update_step`` becomes
a transform in custom.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from optx._src.base import GradientTransformationLike
from optx._src.schedules import keras_serialization
from optx._src.schedules.base import Schedule
from optx._src.stateful import attributes
from optx._src.stateful.base import StatefulBase
from optx._src.stateful.config import config_arguments
from optx._src.stateful.custom import CustomStep, SlotDeclarations, SlotSpecs, _Ref
from optx._src.stateful.keras_args import (
    COMMON,
    EXTRA,
    check_common,
    check_learning_rate,
    deserialize_constraint,
    keyword_names,
    serialize_constraint,
    snake,
)
from optx._src.stateful.keras_chain import KerasChainMixin
from optx._src.stateful.wrapped import (
    InitialLearningRate,
    check_wrapper_arguments,
    initial_learning_rate,
    is_transform,
)
from optx._src.suggest import unexpected

# Attributes that the stateful base sets on every optimizer.
_PUBLIC_ATTRIBUTES = frozenset({"name", "jit_compile", "transform"})


class Optimizer(KerasChainMixin, SlotDeclarations, StatefulBase):
    r"""A stateful optimizer with Keras's API, on a chain of optx transforms.

    Three ways to get one:

    * ``Optimizer(transform, name=None, **common)`` wraps any transform (optx's, optax's);
      its learning rate is the one hyperparameter called ``learning_rate`` in its state
      (``Optimizer(transform=..., learning_rate=0.5)`` starts it at 0.5 instead).
    * The Keras classes (`Adam`, `SGD`, ...) translate their arguments into a chain.
    * A subclass of your own, written as for Keras: ``build(self, params)`` declares slots
      with `add_variable_from_reference` / `add_variable`, and a functional
      ``update_step(self, gradient, variable, learning_rate, slots) -> (new_variable,
      new_slots)`` computes the step of one parameter; ``get_config`` lists the arguments.
      The numbers of ``get_config`` are dynamic hyperparameters (settable as attributes
      without recompiling).

    All three take Keras's common arguments: ``weight_decay`` (decoupled, times the
    learning rate, before the step; not for a wrapped transform), ``clipnorm``,
    ``clipvalue``, ``global_clipnorm``, ``use_ema``, ``ema_momentum``,
    ``ema_overwrite_frequency``, ``ema_start`` (``"initial"``: the average starts at the
    built weights, as tf.keras documents; ``"first_step"``: Keras 3's copy after the first
    step), ``loss_scale_factor``, ``gradient_accumulation_steps``, ``constraints``
    (``{regex on the parameter path: constraint}``, applied after the step), ``axis_name``
    (average the gradients over that `pmap` / `shard_map` axis first, with
    `optx.aggregate_gradients`), ``name`` and ``jit_compile``; the Keras classes and
    subclasses also OptimizerV2's ``lr`` (deprecated alias) and ``decay`` (inverse-time
    decay of the learning rate).

    Non-finite gradients are applied as Keras applies them: a NaN reaches the parameters
    or the slots. `LossScaleOptimizer` (or a transform wrapped in `optx.apply_if_finite`)
    skips such steps, leaving every bit of the parameters and slots as it was.

    Thread-safe: two threads may step one optimizer; a lock serialises the steps (each
    applied once) and the reads (``iterations``, hyperparameters, `get_weights`,
    `save_own_variables`, `get_slot`, ``repr``: copies of one state). The arrays of
    ``variables`` are the live state, which the next step donates: read them in the
    stepping thread. `pickle`, `copy.copy` and `copy.deepcopy` give an independent
    optimizer, at any time.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Optimizer(optx.adam(0.1), name="adam")
      >>> params = {"w": jnp.array([1.0, -1.0])}
      >>> params = opt.apply({"w": jnp.array([0.5, -0.5])}, params)
      >>> params["w"], int(opt.iterations)
      (Array([ 0.9, -0.9], dtype=float32), 1)
      >>> list(opt.variables)[:6]
      ['iterations', 'b1', 'b2', 'eps', 'eps_root', 'learning_rate']
      >>> list(opt.variables)[6:8]  # what keeps 1 - b exact
      ['b1/residual', 'b2/residual']
      >>> list(opt.variables)[8:]
      ['adam/0/count', 'adam/mu/w', 'adam/nu/w', 'adam/1/count']

      A custom optimizer, the Keras way:

      >>> class PlainSGD(optx.optimizers.Optimizer):
      ...     def __init__(self, learning_rate=0.1, scale=1.0, **kwargs):
      ...         super().__init__(learning_rate=learning_rate, **kwargs)
      ...         self.scale = scale
      ...     def update_step(self, gradient, variable, learning_rate, slots):
      ...         return variable - learning_rate * self.scale * gradient, slots
      ...     def get_config(self):
      ...         return {**super().get_config(), "scale": self.scale}
      >>> opt = PlainSGD(clipvalue=1.0)
      >>> opt.apply({"w": jnp.array([3.0])}, {"w": jnp.zeros(1)})
      {'w': Array([-0.1], dtype=float32)}
    """

    _tied = ("learning_rate",)
    _base_aliases: ClassVar[dict[str, str]] = {
        "ema": "average",
        "acc_grads": "gradient_accumulator",
    }
    _defaults: ClassVar[dict[str, Any]] = {}
    _default_learning_rate: ClassVar[float] = 0.001
    # Own arguments held as hyperparameters: {argument: (public name, owner state type)};
    # an owner of None means any state but the common transforms' (see attributes.py).
    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = {}
    _hyper_convert: ClassVar[dict[str, Any]] = {}
    # Arguments read once, by `init`: not settable after build.
    _init_only: ClassVar[frozenset[str]] = frozenset()
    # Building blocks' argument names shown in errors as this class's, beyond `_hyper_map`.
    _message_names: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass with its own `update_step` builds its chain at `build` (its attributes
        # are set after `super().__init__`).
        cls._deferred = cls._is_custom()

    @classmethod
    def _is_custom(cls) -> bool:
        return getattr(cls, "update_step", None) is not None

    def __init__(
        self,
        learning_rate: Any = None,
        name: str | None = None,
        *,
        transform: GradientTransformationLike | None = None,
        **kwargs: Any,
    ) -> None:
        api = type(self).__name__
        if transform is None and is_transform(learning_rate):
            transform, learning_rate = learning_rate, None
        self._wrapped = transform
        if transform is None and not self._is_custom() and type(self)._core is Optimizer._core:
            raise TypeError(
                f"`{api}` needs a transform with `init` and `update` (optx's or optax's), or a "
                f"subclass with an `update_step`. Received: transform={learning_rate!r}."
            )
        if name is not None:
            kwargs["name"] = name
        initial_lr = None
        if transform is not None:
            self._tied = ()
            check_wrapper_arguments(api, kwargs)
            if learning_rate is not None:
                initial_lr = initial_learning_rate(api, transform, learning_rate)
        if "lr" in kwargs:
            warnings.warn(
                "The `lr` argument is deprecated, use `learning_rate` instead.",
                DeprecationWarning,
                stacklevel=3,
            )
            learning_rate = kwargs.pop("lr")
        allowed = {*self._defaults, *COMMON, *EXTRA, "name"}
        unknown = {k: v for k, v in kwargs.items() if k not in allowed}
        if unknown:
            names = keyword_names(type(self), self._defaults)
            raise TypeError(unexpected(api, unknown, names))
        if learning_rate is None:
            learning_rate = self._default_learning_rate
        self._config = {**self._defaults, **COMMON, **EXTRA}
        self._config.update(kwargs)
        if transform is None:
            self._config["learning_rate"] = check_learning_rate(api, learning_rate)
        else:  # the transform's own, or the number it starts at (`InitialLearningRate`)
            self._config["learning_rate"] = initial_lr
        check_common(api, self._config, self._defaults)
        self._check(api)
        self._excluded_patterns: tuple[str, ...] = ()
        self._excluded_objects: list[Any] = []
        self._declaring: SlotSpecs | None = None
        default = "optimizer" if transform is not None else snake(type(self).__name__)
        name = kwargs.get("name") or default
        self._initial_loss_scale = self._config["loss_scale_factor"] or 1.0
        chain_ = None if self._deferred else self._build_transform()
        super().__init__(chain_, name, jit_compile=self._config["jit_compile"])

    # -- arguments ------------------------------------------------------------------------

    def _public_names(self, state: Any) -> Any:
        """The state with the hyperparameters named by this class's arguments.

        ``beta_1`` for `scale_by_adam`'s ``b1``, ``ema_momentum`` for the EMA's
        ``momentum``: see `attributes.public_names`.
        """
        return attributes.public_names(self, state)

    def _check(self, api: str) -> None:
        """Checks the subclass's own arguments (overridden where Keras checks them)."""

    def _loaded(self) -> None:
        """After a load, the arguments held in the state show the values loaded."""
        attributes.show_loaded(self)

    def __getattr__(self, name: str) -> Any:
        if name in ("learning_rate", "lr") and self.__dict__.get("_wrapped") is not None:
            # The wrapper's property raised: say why (Python retries here on AttributeError).
            return StatefulBase.learning_rate.fget(self)  # type: ignore[attr-defined]
        config = self.__dict__.get("_config", {})
        if name in config:
            return config[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        if "_config" in d and "_state" in d and not name.startswith("_"):
            settable = {*self._defaults, *COMMON, *EXTRA} - {"jit_compile"}
            if name in settable:
                if d["_wrapped"] is not None:
                    check_wrapper_arguments(type(self).__name__, {name: value})
                attributes.set_argument(self, name, value)
                return
            if self._is_custom() and attributes.set_custom(self, name, value):
                object.__setattr__(self, name, value)
                return
            if (
                not self._is_custom()
                and d["_wrapped"] is None
                and name not in _PUBLIC_ATTRIBUTES
                and not hasattr(type(self), name)
            ):
                raise AttributeError(
                    f"`{type(self).__name__}` has no hyperparameter {name!r}. Received: "
                    f"{name}={value!r}. Its arguments: {', '.join(sorted(settable))}."
                )
        super().__setattr__(name, value)

    def _select(self, name: str, keys: list[str], found: list[Any]) -> list[str]:
        """Picks, among ``keys``, those of argument ``name`` (a hook for `Muon`)."""
        del name, found
        return keys

    # -- the step (the chain around it: `KerasChainMixin`) --------------------------------

    def _core(self, learning_rate: Any) -> GradientTransformationLike:
        """The optimizer's own step, learning rate included (the Keras classes override it)."""
        if self._wrapped is not None:
            initial = self._config.get("learning_rate")
            return self._wrapped if initial is None else InitialLearningRate(self._wrapped, initial)
        if self._is_custom():
            return CustomStep(_Ref(self), learning_rate, self._custom_values())
        raise NotImplementedError(
            f"`{type(self).__name__}` needs an `update_step` (or a transform to wrap)."
        )

    # -- learning rate --------------------------------------------------------------------

    @property
    def learning_rate(self) -> Any:
        """The learning rate: its current value (float32); settable with a number."""
        if self._wrapped is not None:
            return StatefulBase.learning_rate.fget(self)  # type: ignore[attr-defined]
        lr = self._config["learning_rate"]
        owner = self._owner
        if callable(lr) or self._config["decay"]:
            spec = self._learning_rate_spec()
            source = owner[0] if owner is not None else self
            return spec(source._steps_taken() // self._every_k())
        if owner is not None and owner[0].built:
            return jnp.array(owner[0].variables[self._owner_key("learning_rate")], copy=True)
        if not self.built:
            return jnp.asarray(lr, jnp.float32)
        return self._get_hyper("learning_rate")

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        api = f"{type(self).__name__}.learning_rate"
        if self._wrapped is not None:
            StatefulBase.learning_rate.fset(self, value)  # type: ignore[attr-defined]
            return
        value = check_learning_rate(api, value)
        current = self._config["learning_rate"]
        if callable(value) or callable(current) or self._config["decay"]:
            if not callable(value) and callable(current):
                raise TypeError(
                    f"`{api}` was created with a schedule (or callable), so a number cannot "
                    f"replace it. Received: learning_rate={value!r}. Build a new optimizer, "
                    f"or pass a schedule."
                )
            self._replace_config(learning_rate=value)
            return
        self._config["learning_rate"] = value
        owner = self._owner
        if owner is not None and owner[0].built:
            owner[0]._write(self._owner_key("learning_rate"), value)
        elif self.built:
            self._write("learning_rate", value)
        else:
            self._rebuild()

    lr = learning_rate

    def _replace_config(self, **changes: Any) -> None:
        """Changes arguments and rebuilds the chain, carrying the state over by name."""
        self._config.update(changes)
        self._rebuild()

    def _owner_key(self, name: str) -> str:
        assert self._owner is not None
        label = self._owner[1]
        return f"{label}/{name}" if label else name

    # -- config ---------------------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """Keras's config: the name, the learning rate, the common and own arguments.

        A float learning rate is its current value; a schedule is serialised. optx's
        extra options (``decay``, ``ema_start``, ``jit_compile``) appear only when set.

        ``Optimizer(transform)``'s config holds the transform object itself (equal by its
        configuration, not JSON), its current ``learning_rate`` when its state holds one
        (once built, or when given), and the common arguments that differ from their
        defaults: ``Optimizer.from_config`` rebuilds it, the learning rate included.
        """
        c = self._config
        if self._wrapped is not None:
            config = {"name": self.name, "transform": self._wrapped}
            lr = c["learning_rate"]
            if self.built and len(self._hyper_keys("learning_rate")) == 1:
                lr = float(self.learning_rate)
            if lr is not None:
                config["learning_rate"] = lr
            config.update({k: c[k] for k, d in {**COMMON, **EXTRA}.items() if c[k] != d})
            return config
        lr = c["learning_rate"]
        if isinstance(lr, Schedule):
            lr = keras_serialization.serialize(lr)
        elif not callable(lr):
            lr = float(self.learning_rate)
        config = {"name": self.name, "learning_rate": lr}
        config.update({k: c[k] for k in self._defaults})
        config.update({k: c[k] for k in COMMON})
        config.update({k: c[k] for k, d in EXTRA.items() if c[k] != d})
        if c["constraints"]:
            config["constraints"] = {
                k: serialize_constraint(v) for k, v in c["constraints"].items()
            }
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Any], custom_objects: Any = None) -> Optimizer:
        """Rebuilds an optimizer from `get_config` (Keras's or tf.keras's, ``lr`` included)."""
        config = config_arguments(f"{cls.__name__}.from_config", config)
        if "lr" in config:
            config["learning_rate"] = config.pop("lr")
        lr = config.get("learning_rate")
        if isinstance(lr, Mapping):
            config["learning_rate"] = keras_serialization.deserialize(lr, custom_objects)
        if isinstance(config.get("constraints"), Mapping):
            config["constraints"] = {
                k: deserialize_constraint(v, custom_objects)
                for k, v in config["constraints"].items()
            }
        return cls(**config)

    def _repr_args(self) -> str:
        if self._wrapped is not None:
            lr = self._config["learning_rate"]
            shown = "" if lr is None else f", learning_rate={np.float32(lr)!s}"
            return f"{self._wrapped!r}, name={self.name!r}{shown}"
        config = self.get_config()
        lr = self._config["learning_rate"]
        # The float32 value, shown as its shortest repr (1e-3, not 0.0010000000474974513).
        config["learning_rate"] = lr if callable(lr) else np.float32(config["learning_rate"])
        shown = [f"name={config.pop('name')!r}"]
        defaults = {**self._defaults, **COMMON}
        for k, v in config.items():
            if k == "learning_rate" or defaults.get(k, object()) != v:
                shown.append(f"{k}={v!s}" if isinstance(v, np.floating) else f"{k}={v!r}")
        return ", ".join(shown)
