"""Keras's Muon: orthogonalised momentum for matrices, Adam for the rest.

The routing and weight decays are Keras's; the step is optx's `scale_by_muon` with the Keras
momentum convention, and Keras's Adam (`scale_by_adam` with ``eps_placement="keras"``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar

import jax
import numpy as np

from optx._src.algorithms.adam import ScaleByAdamState, scale_by_adam
from optx._src.algorithms.muon import MuonState, scale_by_muon
from optx._src.algorithms.muon_shape import scale_by_shape
from optx._src.base import GradientTransformationLike, Params, identity
from optx._src.combine import chain, partition
from optx._src.scaling import scale, scale_by_learning_rate
from optx._src.stateful.keras_args import DecayMask, finite, number, patterns
from optx._src.stateful.optimizer import Optimizer
from optx._src.tree import is_param, path_name
from optx._src.weight_decay import DecayBeforeState, decay_before


@dataclasses.dataclass(frozen=True)
class MuonRouting:
    """Keras's Muon routing: ``"muon"`` for 2-D parameters not excluded, ``"adam"`` otherwise.

    A parameter goes to AdamW if it is not 2-D, if ``exclude_embeddings`` and its path
    contains ``"embedding"`` (any case), or if an ``exclude_layers`` pattern is found in
    its path.
    """

    exclude_layers: tuple[str, ...] = ()
    exclude_embeddings: bool = True
    select: str | None = None

    def __call__(self, params: Params) -> Any:
        def label(path: Any, p: Any) -> Any:
            name = path_name(path)
            adam_leaf = (
                np.ndim(p) != 2
                or (self.exclude_embeddings and "embedding" in name.lower())
                or any(re.search(k, name) for k in self.exclude_layers)
            )
            tag = "adam" if adam_leaf else "muon"
            return tag if self.select is None else tag == self.select

        return jax.tree_util.tree_map_with_path(label, params, is_leaf=is_param)


class Muon(Optimizer):
    r"""Muon for matrices, AdamW for the rest; Keras's ``Muon``.

    2-D parameters (less ``exclude_layers`` and, with ``exclude_embeddings``, embeddings)
    take ``m ← μ m + g`` (Nesterov: ``g + μ m``), Newton-Schulz orthogonalisation and the
    scale :math:`\sqrt{\max(n, m)}\cdot` ``rms_rate``; the others take Keras's Adam at
    ``learning_rate * adam_lr_ratio``. Weight decay is ``weight_decay`` for the first and
    ``adam_weight_decay`` for the second, both times the base learning rate.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> opt = optx.optimizers.Muon(learning_rate=0.1, weight_decay=0.0, adam_weight_decay=0.0)
      >>> new = opt.apply({"w": jnp.eye(2), "b": jnp.ones(2)}, {"w": jnp.eye(2), "b": jnp.ones(2)})
      >>> new["b"]
      Array([0.9, 0.9], dtype=float32)
    """

    _defaults: ClassVar[dict[str, Any]] = {
        "adam_beta_1": 0.9,
        "adam_beta_2": 0.999,
        "adam_weight_decay": 0.004,
        "epsilon": 1e-7,
        "exclude_layers": None,
        "exclude_embeddings": True,
        "muon_a": 3.4445,
        "muon_b": -4.7750,
        "muon_c": 2.0315,
        "adam_lr_ratio": 1,
        "momentum": 0.95,
        "ns_steps": 5,
        "nesterov": True,
        "rms_rate": 0.2,
    }
    _slot_aliases: ClassVar[dict[str, str]] = {"mu": "momentum", "nu": "velocity"}

    _hyper_map: ClassVar[dict[str, tuple[str, type | None]]] = {
        "momentum": ("beta", MuonState),
        "adam_beta_1": ("b1", ScaleByAdamState),
        "adam_beta_2": ("b2", ScaleByAdamState),
        "epsilon": ("eps", ScaleByAdamState),
        "adam_weight_decay": ("weight_decay", DecayBeforeState),
    }
    _message_names: ClassVar[dict[str, str]] = {"consistent_rms": "rms_rate"}

    def __init__(
        self,
        learning_rate: Any = 0.001,
        adam_beta_1: float = 0.9,
        adam_beta_2: float = 0.999,
        adam_weight_decay: float = 0.004,
        epsilon: float = 1e-7,
        weight_decay: float | None = 0.004,
        exclude_layers: Any = None,
        exclude_embeddings: bool = True,
        muon_a: float = 3.4445,
        muon_b: float = -4.7750,
        muon_c: float = 2.0315,
        adam_lr_ratio: float = 1,
        momentum: float = 0.95,
        ns_steps: int = 5,
        nesterov: bool = True,
        rms_rate: float | None = 0.2,
        **kwargs: Any,
    ) -> None:
        own = dict(locals())
        for key in ("self", "learning_rate", "kwargs", "__class__"):
            own.pop(key, None)
        super().__init__(learning_rate, **own, **kwargs)

    def _check(self, api: str) -> None:
        c = self._config
        for name in ("muon_a", "muon_b", "muon_c"):
            finite(api, name, c[name])
        number(api, "adam_lr_ratio", c["adam_lr_ratio"], allow_none=False)
        patterns(api, "exclude_layers", c["exclude_layers"])

    def _routing(self, select: str | None = None) -> MuonRouting:
        c = self._config
        layers = c["exclude_layers"] or ()
        layers = (layers,) if isinstance(layers, str) else tuple(layers)
        return MuonRouting(layers, bool(c["exclude_embeddings"]), select)

    def _core(self, lr: Any) -> GradientTransformationLike:
        c = self._config
        muon_branch = chain(
            scale_by_muon(
                (c["muon_a"], c["muon_b"], c["muon_c"]),
                c["ns_steps"],
                c["momentum"],
                1e-7,  # Keras's Newton-Schulz normalisation; `epsilon` is the Adam branch's
                nesterov=bool(c["nesterov"]),
                momentum_convention="keras",
            ),
            # Keras scales by sqrt(max(n, m)) * rms_rate, or not at all without a rate.
            identity() if c["rms_rate"] is None else scale_by_shape(c["rms_rate"]),
            scale_by_learning_rate(lr),
        )
        adam_parts = [
            scale_by_adam(c["adam_beta_1"], c["adam_beta_2"], c["epsilon"], eps_placement="keras")
        ]
        if c["adam_lr_ratio"] != 1:
            adam_parts.append(scale(float(c["adam_lr_ratio"])))
        adam_branch = chain(*adam_parts, scale_by_learning_rate(lr))
        return partition({"muon": muon_branch, "adam": adam_branch}, self._routing())

    def _decay(self, core: GradientTransformationLike, lr: Any) -> GradientTransformationLike:
        c = self._config
        for wd, select in ((c["weight_decay"], "muon"), (c["adam_weight_decay"], "adam")):
            if wd:
                core = decay_before(
                    core, wd, lr, _MuonDecayMask(self._routing(select), self._excluded_patterns)
                )
        return core

    def _select(self, name: str, keys: list[str], found: list[Any]) -> list[str]:
        if name not in ("weight_decay", "adam_weight_decay"):
            return keys
        # The Muon decay wraps the step first, the AdamW decay wraps that: deepest first.
        decays = sorted(
            (
                (depth, k)
                for k, owner, p, depth in found
                if owner is DecayBeforeState and p == "weight_decay"
            ),
            reverse=True,
        )
        present = [n for n in ("weight_decay", "adam_weight_decay") if self._config[n]]
        held = dict(zip(present, (k for _, k in decays), strict=False))
        return [held[name]] if name in held else []


@dataclasses.dataclass(frozen=True)
class _MuonDecayMask:
    routing: MuonRouting
    excluded: tuple[str, ...] = ()

    def __call__(self, params: Params) -> Any:
        selected = self.routing(params)
        kept = DecayMask(self.excluded)(params)
        return jax.tree.map(lambda a, b: bool(a and b), selected, kept)
