"""The optimizers benchmarked, each as optx builds it and as each peer builds the same maths.

Hyperparameters are the same everywhere (where a library's default differs, it is given
explicitly). ``bytes_per_param`` is the traffic floor of one float32 step: every array an
ideal single-pass step must read or write, 4 bytes each.

- adam, adamw: read p, g, m, v; write p, m, v: 7 arrays, 28 B.
- sgd (momentum 0.9), lion: read p, g, m; write p, m: 5 arrays, 20 B.
- adafactor: a factored (2-D, both sides >= 128) leaf reads p, g and writes p (its row and
  column statistics are negligible): 12 B; any other leaf keeps a full second moment: 20 B.
- chain(clip_by_global_norm, adamw, ema_params): adamw's 28 B, the gradient read once more
  for its global norm (the norm must be known before any update), and the average read and
  written: 40 B.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import optx

LR = {"adam": 1e-3, "adamw": 1e-3, "sgd": 1e-2, "lion": 1e-4, "adafactor": 1e-3, "chain": 1e-3}
WEIGHT_DECAY = 1e-4  # adamw and the chain's adamw
LION_DECAY = 1e-3  # optax's and optx's default for lion
MOMENTUM = 0.9  # sgd
CLIP = 1.0  # the chain's global norm bound
EMA = 0.999  # the chain's average


@dataclasses.dataclass(frozen=True)
class Spec:
    """One optimizer: its label and how many bytes per float32 parameter a step must move."""

    name: str
    label: str
    floor: Callable[[tuple[int, ...]], int]  # bytes per parameter of a leaf of this shape
    ema: float | None = None  # the chain keeps an average of the parameters

    def bytes_per_step(self, shapes: list[tuple[int, ...]]) -> int:
        return sum(self.floor(s) * _size(s) for s in shapes)


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _adafactor_floor(shape: tuple[int, ...]) -> int:
    factored = len(shape) >= 2 and sorted(shape)[-2] >= 128
    return 12 if factored else 20


SPECS: dict[str, Spec] = {
    "adam": Spec("adam", "adam", lambda s: 28),
    "adamw": Spec("adamw", "adamw", lambda s: 28),
    "sgd": Spec("sgd", "sgd+momentum", lambda s: 20),
    "lion": Spec("lion", "lion", lambda s: 20),
    "adafactor": Spec("adafactor", "adafactor", _adafactor_floor),
    "chain": Spec("chain", "clip+adamw+ema", lambda s: 40, ema=EMA),
}
NAMES = tuple(SPECS)


def optx_tx(name: str) -> Any:
    """optx's transform (for the chain, the EMA is part of it)."""
    lr = LR[name]
    if name == "adam":
        return optx.adam(lr)
    if name == "adamw":
        return optx.adamw(lr, weight_decay=WEIGHT_DECAY)
    if name == "sgd":
        return optx.sgd(lr, momentum=MOMENTUM)
    if name == "lion":
        return optx.lion(lr, weight_decay=LION_DECAY)
    if name == "adafactor":
        return optx.adafactor(lr)
    return optx.chain(
        optx.clip_by_global_norm(CLIP),
        optx.adamw(lr, weight_decay=WEIGHT_DECAY),
        optx.ema_params(EMA),
    )


def optax_tx(name: str) -> Any:
    """optax's transform; the chain's average is kept beside it (`optax.incremental_update`)."""
    import optax

    lr = LR[name]
    if name == "adam":
        return optax.adam(lr)
    if name == "adamw":
        return optax.adamw(lr, weight_decay=WEIGHT_DECAY)
    if name == "sgd":
        return optax.sgd(lr, momentum=MOMENTUM)
    if name == "lion":
        return optax.lion(lr, weight_decay=LION_DECAY)
    if name == "adafactor":
        return optax.adafactor(lr)
    return optax.chain(optax.clip_by_global_norm(CLIP), optax.adamw(lr, weight_decay=WEIGHT_DECAY))


def keras_optimizer(name: str) -> Any:
    """Keras's optimizer (Keras 3 numerics: its Adam's epsilon, its Adafactor's defaults)."""
    import keras

    lr, opt = LR[name], keras.optimizers
    if name == "adam":
        return opt.Adam(learning_rate=lr)
    if name == "adamw":
        return opt.AdamW(learning_rate=lr, weight_decay=WEIGHT_DECAY)
    if name == "sgd":
        return opt.SGD(learning_rate=lr, momentum=MOMENTUM)
    if name == "lion":
        return opt.Lion(learning_rate=lr, weight_decay=LION_DECAY)
    if name == "adafactor":
        return opt.Adafactor(learning_rate=lr)
    return opt.AdamW(
        learning_rate=lr,
        weight_decay=WEIGHT_DECAY,
        global_clipnorm=CLIP,
        use_ema=True,
        ema_momentum=EMA,
    )


# PyTorch has adam, adamw and sgd with fused CPU kernels; its Adafactor is different maths
# (no update clipping, no parameter scale) and it has no Lion: those rows say so.
TORCH = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "chain": "AdamW"}


def torch_kwargs(name: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"lr": LR[name]}
    if name in ("adamw", "chain"):
        kwargs["weight_decay"] = WEIGHT_DECAY
    if name == "sgd":
        kwargs["momentum"] = MOMENTUM
    return kwargs
