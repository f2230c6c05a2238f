"""Keras's SGD, RMSprop, Adadelta, Adagrad, Ftrl, Lion and Adafactor classes.

Names, arguments, defaults and numerics are Keras 3's (reference: keras-semantics §2); the
common arguments are `Optimizer`'s. Each ``_core`` says which optx building blocks,
with which options, compute Keras's step; nothing here computes anything itself. The Adam
family is in ``keras_adam.py``, Muon in ``keras_muon.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from optx._src.algorithms.adadelta import adadelta
from optx._src.algorithms.adafactor import adafactor
from optx._src.algorithms.adagrad import adagrad
from optx._src.algorithms.ftrl import ftrl
from optx._src.algorithms.lion import lion
from optx._src.algorithms.rmsprop import rmsprop
from optx._src.algorithms.sgd import sgd
from optx._src.base import GradientTransformationLike
from optx._src.clipping import ClipState
from optx._src.momentum import TraceState
from optx._src.stateful.keras_args import finite
from optx._src.stateful.optimizer import Optimizer


class SGD(Optimizer):
    """Gradient descent with optional (Nesterov) momentum; Keras's ``SGD``.

    ``v ← μ v - η g; w ← w + v`` (the learning rate enters the velocity: `sgd` with
    ``momentum_convention="keras"``). Common arguments: see `Adam`.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.SGD(learning_rate=0.1, momentum=0.9)
      >>> opt.apply({"w": jnp.ones(2)}, {"w": jnp.zeros(2)})
      {'w': Array([-0.1, -0.1], dtype=float32)}
    """

    _defaults: ClassVar[dict[str, Any]] = {"momentum": 0.0, "nesterov": False}
    _default_learning_rate = 0.01
    _slot_aliases: ClassVar[dict[str, str]] = {"trace": "momentum"}

    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = {
        "momentum": ("momentum", TraceState)
    }

    def __init__(
        self,
        learning_rate: Any = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate, momentum=momentum, nesterov=nesterov, **kwargs)

    def _check(self, api: str) -> None:
        m = self._config["momentum"]
        if isinstance(m, bool) or not isinstance(m, int | float) or not 0 <= m <= 1:
            raise ValueError(
                f"`{api}` needs momentum to be a float in [0, 1]. Received: momentum={m!r}."
            )

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        momentum = float(c["momentum"]) or None
        return sgd(lr, momentum, bool(c["nesterov"]), momentum_convention="keras")


class RMSprop(Optimizer):
    """RMSprop; Keras's ``RMSprop`` (epsilon inside the square root, momentum after the rate).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.RMSprop(learning_rate=0.01)
      >>> opt.apply({"w": jnp.ones(2)}, {"w": jnp.zeros(2)})["w"]
      Array([-0.03162276, -0.03162276], dtype=float32)
    """

    _defaults: ClassVar[dict[str, Any]] = {
        "rho": 0.9,
        "momentum": 0.0,
        "epsilon": 1e-7,
        "centered": False,
    }
    _slot_aliases: ClassVar[dict[str, str]] = {
        "nu": "velocity",
        "trace": "momentum",
        "mu": "average_gradient",
    }

    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = {
        "rho": ("decay", None),
        "momentum": ("momentum", TraceState),
        "epsilon": ("eps", None),
    }

    def __init__(
        self,
        learning_rate: Any = 0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-7,
        centered: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            learning_rate, rho=rho, momentum=momentum, epsilon=epsilon, centered=centered, **kwargs
        )

    def _check(self, api: str) -> None:
        # Its range is checked by `rmsprop` (which it reaches as a float).
        finite(api, "momentum", self._config["momentum"])

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        momentum = float(c["momentum"]) or None
        return rmsprop(lr, c["rho"], c["epsilon"], centered=bool(c["centered"]), momentum=momentum)


class Adadelta(Optimizer):
    """Adadelta; Keras's ``Adadelta``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Adadelta(learning_rate=1.0)
      >>> opt.apply({"w": jnp.ones(1)}, {"w": jnp.zeros(1)})["w"]
      Array([-0.00141421], dtype=float32)
    """

    _defaults: ClassVar[dict[str, Any]] = {"rho": 0.95, "epsilon": 1e-7}
    _slot_aliases: ClassVar[dict[str, str]] = {
        "e_g": "accumulated_grad",
        "e_x": "accumulated_delta_var",
    }

    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = {
        "rho": ("rho", None),
        "epsilon": ("eps", None),
    }

    def __init__(
        self, learning_rate: Any = 0.001, rho: float = 0.95, epsilon: float = 1e-7, **kwargs: Any
    ) -> None:
        super().__init__(learning_rate, rho=rho, epsilon=epsilon, **kwargs)

    def _core(self, lr: Any) -> GradientTransformationLike:
        return adadelta(lr, self._config["rho"], self._config["epsilon"])


class Adagrad(Optimizer):
    """Adagrad, epsilon inside the square root; Keras's ``Adagrad``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Adagrad(learning_rate=0.1, initial_accumulator_value=0.0)
      >>> opt.apply({"w": jnp.ones(1)}, {"w": jnp.zeros(1)})["w"]
      Array([-0.1], dtype=float32)
    """

    _defaults: ClassVar[dict[str, Any]] = {"initial_accumulator_value": 0.1, "epsilon": 1e-7}
    _slot_aliases: ClassVar[dict[str, str]] = {"sum_of_squares": "accumulator"}

    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = {"epsilon": ("eps", None)}
    _init_only: ClassVar[frozenset[str]] = frozenset({"initial_accumulator_value"})

    def __init__(
        self,
        learning_rate: Any = 0.001,
        initial_accumulator_value: float = 0.1,
        epsilon: float = 1e-7,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            learning_rate,
            initial_accumulator_value=initial_accumulator_value,
            epsilon=epsilon,
            **kwargs,
        )

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        return adagrad(lr, c["initial_accumulator_value"], c["epsilon"])


class Ftrl(Optimizer):
    """FTRL-Proximal as TensorFlow computes it; Keras's ``Ftrl``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Ftrl(learning_rate=0.1)
      >>> opt.apply({"w": jnp.ones(1)}, {"w": jnp.zeros(1)})["w"]
      Array([-0.09534626], dtype=float32)
    """

    _defaults: ClassVar[dict[str, Any]] = {
        "learning_rate_power": -0.5,
        "initial_accumulator_value": 0.1,
        "l1_regularization_strength": 0.0,
        "l2_regularization_strength": 0.0,
        "l2_shrinkage_regularization_strength": 0.0,
        "beta": 0.0,
    }

    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = {
        k: (k, None)
        for k in (
            "learning_rate_power",
            "l1_regularization_strength",
            "l2_regularization_strength",
            "l2_shrinkage_regularization_strength",
            "beta",
        )
    }
    _init_only: ClassVar[frozenset[str]] = frozenset({"initial_accumulator_value"})

    def __init__(
        self,
        learning_rate: Any = 0.001,
        learning_rate_power: float = -0.5,
        initial_accumulator_value: float = 0.1,
        l1_regularization_strength: float = 0.0,
        l2_regularization_strength: float = 0.0,
        l2_shrinkage_regularization_strength: float = 0.0,
        beta: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            learning_rate,
            learning_rate_power=learning_rate_power,
            initial_accumulator_value=initial_accumulator_value,
            l1_regularization_strength=l1_regularization_strength,
            l2_regularization_strength=l2_regularization_strength,
            l2_shrinkage_regularization_strength=l2_shrinkage_regularization_strength,
            beta=beta,
            **kwargs,
        )

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        return ftrl(lr, *(c[k] for k in self._defaults))


class Lion(Optimizer):
    """Lion (sign of an interpolated momentum); Keras's ``Lion``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Lion(learning_rate=0.1)
      >>> opt.apply({"w": jnp.ones(1)}, {"w": jnp.zeros(1)})["w"]
      Array([-0.1], dtype=float32)
    """

    _defaults: ClassVar[dict[str, Any]] = {"beta_1": 0.9, "beta_2": 0.99}
    _slot_aliases: ClassVar[dict[str, str]] = {"mu": "momentum"}

    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = {
        "beta_1": ("b1", None),
        "beta_2": ("b2", None),
    }

    def __init__(
        self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.99, **kwargs: Any
    ) -> None:
        super().__init__(learning_rate, beta_1=beta_1, beta_2=beta_2, **kwargs)

    def _check(self, api: str) -> None:
        b1 = self._config["beta_1"]
        if not isinstance(b1, int | float) or isinstance(b1, bool) or not 0 < b1 <= 1:
            raise ValueError(f"`{api}` needs beta_1 in (0, 1]. Received: beta_1={b1!r}.")

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        return lion(lr, c["beta_1"], c["beta_2"], weight_decay=0.0)


class Adafactor(Optimizer):
    r"""Adafactor, factoring the last two axes; Keras's ``Adafactor``.

    Keras 3 always caps the learning rate by :math:`1/\sqrt t`, so does this class
    (``relative_step`` is accepted and kept in the config).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Adafactor(learning_rate=0.1)
      >>> opt.apply({"w": jnp.ones(1)}, {"w": jnp.ones(1)})["w"]
      Array([0.9], dtype=float32)
    """

    _defaults: ClassVar[dict[str, Any]] = {
        "beta_2_decay": -0.8,
        "epsilon_1": 1e-30,
        "epsilon_2": 1e-3,
        "clip_threshold": 1.0,
        "relative_step": True,
    }
    _slot_aliases: ClassVar[dict[str, str]] = {"v": "velocity", "v_row": "r", "v_col": "c"}

    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = {
        "beta_2_decay": ("decay_rate", None),
        "epsilon_1": ("epsilon", None),
        "epsilon_2": ("min_scale", None),
        "clip_threshold": ("threshold", ClipState),
    }
    _hyper_convert: ClassVar[dict[str, Any]] = {"beta_2_decay": lambda v: -v}
    _message_names: ClassVar[dict[str, str]] = {
        "eps": "epsilon_1",
        "min_scale": "epsilon_2",
        "clipping_threshold": "clip_threshold",
    }

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta_2_decay: float = -0.8,
        epsilon_1: float = 1e-30,
        epsilon_2: float = 1e-3,
        clip_threshold: float = 1.0,
        relative_step: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            learning_rate,
            beta_2_decay=beta_2_decay,
            epsilon_1=epsilon_1,
            epsilon_2=epsilon_2,
            clip_threshold=clip_threshold,
            relative_step=relative_step,
            **kwargs,
        )

    def _check(self, api: str) -> None:
        # Checked here, as `adafactor` sees its negation (decay_rate).
        if finite(api, "beta_2_decay", self._config["beta_2_decay"]) > 0:
            raise ValueError(
                f"`{api}` needs beta_2_decay <= 0. "
                f"Received: beta_2_decay={self._config['beta_2_decay']!r}."
            )

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        return adafactor(
            lr,
            min_dim_size_to_factor=1,
            decay_rate=-c["beta_2_decay"],
            clipping_threshold=c["clip_threshold"],
            eps=c["epsilon_1"],
            factor_axes="last",
            relative_step=True,
            min_scale=c["epsilon_2"],
        )
