"""Keras's Adam family: Adam, AdamW, Adamax, Nadam and Lamb.

Each class translates its arguments into optx building blocks with Keras's options
(epsilon on the uncorrected root, amsgrad over the raw second moment, Nadam's momentum
schedule, Adamax's epsilon in the denominator).
"""

from __future__ import annotations

from typing import Any, ClassVar

from optx._src.algorithms.adam import adam
from optx._src.algorithms.adamax import adamax
from optx._src.algorithms.amsgrad import amsgrad
from optx._src.algorithms.layerwise import lamb
from optx._src.algorithms.nadam import nadam
from optx._src.base import GradientTransformationLike
from optx._src.stateful.optimizer import Optimizer

_BETAS: dict[str, tuple[str, type | None]] = {
    "beta_1": ("b1", None),
    "beta_2": ("b2", None),
    "epsilon": ("eps", None),
}
_ADAM_SLOTS = {"mu": "momentum", "nu": "velocity", "nu_max": "velocity_hat"}


class Adam(Optimizer):
    r"""Adam, with Keras's epsilon on the uncorrected :math:`\sqrt v`; Keras's ``Adam``.

    Every Keras class takes, besides its own arguments, Keras's common ones:
    ``weight_decay`` (decoupled, times the learning rate, before the step), ``clipnorm``
    (per parameter), ``clipvalue``, ``global_clipnorm`` (at most one of the three),
    ``use_ema``, ``ema_momentum``, ``ema_overwrite_frequency``, ``loss_scale_factor``,
    ``gradient_accumulation_steps``, ``name`` and ``jit_compile``; OptimizerV2's ``lr``
    (deprecated alias) and ``decay`` (inverse-time decay of the learning rate); and
    ``ema_start`` (``"initial"``: the average starts at the built weights, as tf.keras
    documents; ``"first_step"``: Keras 3's copy after the first step).

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Adam(learning_rate=0.1)
      >>> opt.apply({"w": jnp.ones(2)}, {"w": jnp.zeros(2)})["w"]
      Array([-0.09999969, -0.09999969], dtype=float32)
    """

    _defaults: ClassVar[dict[str, Any]] = {
        "beta_1": 0.9,
        "beta_2": 0.999,
        "epsilon": 1e-7,
        "amsgrad": False,
    }
    _slot_aliases: ClassVar[dict[str, str]] = _ADAM_SLOTS

    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = _BETAS

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, amsgrad=amsgrad, **kwargs
        )

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        if c["amsgrad"]:
            return amsgrad(lr, c["beta_1"], c["beta_2"], c["epsilon"], eps_placement="keras")
        return adam(lr, c["beta_1"], c["beta_2"], c["epsilon"], eps_placement="keras")


class AdamW(Adam):
    """`Adam` with a default ``weight_decay`` of 0.004; Keras's ``AdamW``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.AdamW(learning_rate=0.1, weight_decay=0.5)
      >>> opt.apply({"w": jnp.zeros(1)}, {"w": jnp.ones(1)})["w"]
      Array([0.95], dtype=float32)
    """

    def __init__(
        self,
        learning_rate: Any = 0.001,
        weight_decay: float = 0.004,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
        **kwargs: Any,
    ) -> None:
        if weight_decay is None:
            raise ValueError(
                "`AdamW` needs a weight_decay (a number >= 0). Received: weight_decay=None."
            )
        super().__init__(
            learning_rate, beta_1, beta_2, epsilon, amsgrad, weight_decay=weight_decay, **kwargs
        )


class BetasAndEpsilon(Optimizer):
    """Base of the Keras classes whose own arguments are ``beta_1``, ``beta_2``, ``epsilon``."""

    _defaults: ClassVar[dict[str, Any]] = {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}

    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = _BETAS

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, **kwargs)


class Adamax(BetasAndEpsilon):
    """Adamax, epsilon in the denominator; Keras's ``Adamax``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Adamax(learning_rate=0.1)
      >>> opt.apply({"w": jnp.ones(1)}, {"w": jnp.zeros(1)})["w"]
      Array([-0.1], dtype=float32)
    """

    _slot_aliases: ClassVar[dict[str, str]] = {"mu": "m", "nu": "u"}

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        return adamax(lr, c["beta_1"], c["beta_2"], c["epsilon"], eps_placement="keras")


class Nadam(BetasAndEpsilon):
    r"""Nadam, with Dozat's momentum schedule; Keras's ``Nadam``.

    The momentum of step :math:`t` is :math:`\beta_1(1 - 0.5\cdot 0.96^t)`.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Nadam(learning_rate=0.1)
      >>> opt.apply({"w": jnp.ones(1)}, {"w": jnp.zeros(1)})["w"]
      Array([-0.106279], dtype=float32)
    """

    _slot_aliases: ClassVar[dict[str, str]] = {"mu": "momentum", "nu": "velocity"}

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        return nadam(lr, c["beta_1"], c["beta_2"], c["epsilon"], momentum_decay=1.0)


class Lamb(BetasAndEpsilon):
    """LAMB (Adam with a per-parameter trust ratio); Keras's ``Lamb``.

    The weight decay is Keras's, applied before the step and outside the trust ratio.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Lamb(learning_rate=0.1)
      >>> opt.apply({"w": jnp.ones(1)}, {"w": jnp.ones(1)})["w"]
      Array([0.9], dtype=float32)
    """

    _slot_aliases: ClassVar[dict[str, str]] = {"mu": "momentum", "nu": "velocity"}

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        return lamb(lr, c["beta_1"], c["beta_2"], c["epsilon"])
