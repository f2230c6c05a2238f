r"""`KerasChainMixin`: Keras's common arguments as transforms around an optimizer's step.

Every Keras optimizer takes the same eleven options. Here they become transforms around the
optimizer's own step, in Keras's order (reference: Keras 3's ``BaseOptimizer.apply``):

`aggregate_gradients` (``axis_name``) → ``unscale_gradients`` (``loss_scale_factor``) →
`accumulate_gradients` over { clipping → `decay_before` (``weight_decay`` times the
learning rate) → the step } → `ema_params`.

With accumulation, a learning-rate schedule is evaluated at the micro-step count
(:math:`k\,j + k - 1` at the :math:`j`-th update), and the EMA is updated on every call, as
Keras does.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from optx._src import hyperparams as hp
from optx._src.accumulate import accumulate_gradients
from optx._src.base import GradientTransformationLike, Params, identity
from optx._src.clipping import clip, clip_by_global_norm, clip_by_norm
from optx._src.combine import chain, named_chain
from optx._src.constraints import constrain
from optx._src.distributed import aggregate_gradients
from optx._src.ema_params import ema_params
from optx._src.loss_scale import unscale_gradients
from optx._src.stateful.base import StatefulBase
from optx._src.stateful.keras_args import DecayMask, KerasLearningRate, takes_no_args
from optx._src.weight_decay import decay_before


class KerasChainMixin:
    """`Optimizer`'s chain: its own step (`_core`) inside the common arguments' transforms."""

    if TYPE_CHECKING:
        name: str
        built: bool
        transform: Any
        _config: dict[str, Any]
        _wrapped: Any
        _excluded_patterns: tuple[str, ...]
        _excluded_objects: list[Any]
        _owner: tuple[StatefulBase, str] | None
        _params_paths: list[str]
        _hyper_map: ClassVar[dict[str, tuple[str, type | None]]]
        _message_names: ClassVar[dict[str, str]]

        def _core(self, learning_rate: Any) -> GradientTransformationLike: ...

        def _set_transform(self, transform: GradientTransformationLike) -> None: ...

        def _replace_transform(self, transform: GradientTransformationLike) -> None: ...

    def _learning_rate_spec(self) -> Any:
        c = self._config
        if self._wrapped is not None:
            return None
        lr = c["learning_rate"]
        k = c["gradient_accumulation_steps"] or 1
        if not callable(lr) and not c["decay"]:
            return lr
        no_args = callable(lr) and takes_no_args(lr)
        return KerasLearningRate(lr, k, c["decay"], no_args)

    def _decay(self, core: GradientTransformationLike, lr: Any) -> GradientTransformationLike:
        wd = self._config["weight_decay"]
        if not wd:
            return core
        mask = DecayMask(self._excluded_patterns) if self._excluded_patterns else None
        return decay_before(core, wd, lr, mask)

    def _build_transform(self, aggregate: bool = True) -> GradientTransformationLike:
        c = self._config
        lr = self._learning_rate_spec()
        with hp.caller(type(self).__name__, self._argument_names()):
            inner = self._decay(self._core(lr), lr)
            clipping = self._clip_transform()
            if clipping is not None:
                inner = chain(clipping, inner)
            k = c["gradient_accumulation_steps"]
            if k:
                inner = accumulate_gradients(inner, k)
            parts = [("step", inner)]
            if c["loss_scale_factor"] is not None:
                parts.insert(0, ("loss_scale", unscale_gradients(c["loss_scale_factor"])))
            if c["axis_name"] is not None:
                # First, as Keras/TF aggregate before unscaling. Skipped, it is an identity:
                # the state, and so `variables`, stay the same.
                first = aggregate_gradients(c["axis_name"]) if aggregate else identity()
                parts.insert(0, ("aggregate", first))
            if c["use_ema"]:
                parts.append(
                    (
                        "ema",
                        ema_params(
                            c["ema_momentum"],
                            c["ema_overwrite_frequency"],
                            start=c["ema_start"],
                            every_k=k or 1,
                        ),
                    )
                )
            if c["constraints"]:
                # After the EMA, as Keras applies `variable.constraint` last.
                parts.append(("constraints", constrain(c["constraints"])))
            return parts[0][1] if len(parts) == 1 else named_chain(*parts)

    @classmethod
    def _argument_names(cls) -> dict[str, str]:
        """Building blocks' argument names -> this class's (``"b1"`` -> ``"beta_1"``)."""
        names = {public: own for own, (public, _) in cls._hyper_map.items()}
        return {**names, **cls._message_names}

    def _step_transform(self, skip_aggregation: bool) -> GradientTransformationLike:
        if skip_aggregation and self._config["axis_name"] is not None:
            return self._build_transform(aggregate=False)
        return self.transform

    def _clip_transform(self) -> Any:
        c = self._config
        if c["clipnorm"]:
            return clip_by_norm(c["clipnorm"])
        if c["global_clipnorm"]:
            return clip_by_global_norm(c["global_clipnorm"])
        if c["clipvalue"]:
            return clip(c["clipvalue"])
        return None

    def _every_k(self) -> int:
        return self._config["gradient_accumulation_steps"] or 1

    def _rebuild(self) -> None:
        """Rebuilds the chain from the arguments; a built owner or self keeps its state."""
        transform = self._build_transform()
        if transform != self.transform:
            self._replace_transform(transform)
            if self._owner is not None:
                self._owner[0]._inner_changed()

    # -- weight decay exclusions ----------------------------------------------------------

    def exclude_from_weight_decay(
        self, var_list: Iterable[Any] | None = None, var_names: Iterable[str] | None = None
    ) -> None:
        """Excludes parameters from weight decay; call it before the first step.

        Args:
          var_list: `Variable` objects (or Flax variables, or parameter arrays) to exclude,
            matched by identity when the optimizer is built, or parameter path names.
          var_names: regular expressions searched (`re.search`) in each parameter's full
            path (``"dense/bias"``); a match excludes it.

        Raises:
          ValueError: the optimizer is already built.
        """
        api = "exclude_from_weight_decay"
        if self._wrapped is not None:
            StatefulBase.exclude_from_weight_decay(self, var_list, var_names)
        if self.built or (self._owner is not None and self._owner[0].built):
            raise ValueError(
                f"`{api}` needs an optimizer that is not built yet (it changes the chain). "
                f"Received: {self.name!r}, built for {len(self._params_paths)} parameters."
            )
        names = list(var_names or [])
        for n in names:
            if not isinstance(n, str):
                raise TypeError(f"`{api}` needs var_names to be strings. Received: {n!r}.")
            re.compile(n)
        objects = list(var_list or [])
        self._excluded_objects = [o for o in objects if not isinstance(o, str)]
        paths = [f"^{re.escape(o)}$" for o in objects if isinstance(o, str)]
        self._excluded_patterns = tuple(names + paths)
        self._rebuild()

    def _prepare(self, params: Params, names_by_id: Mapping[int, str]) -> None:
        if self.transform is None:  # a subclass with `update_step`: its chain, now
            self._set_transform(self._build_transform())
        if self._excluded_objects:
            found = [
                f"^{re.escape(names_by_id[id(o)])}$"
                for o in self._excluded_objects
                if id(o) in names_by_id
            ]
            if len(found) < len(self._excluded_objects):
                warnings.warn(
                    f"`exclude_from_weight_decay`: {len(self._excluded_objects) - len(found)} "
                    f"of the {len(self._excluded_objects)} objects in var_list are not among "
                    f"the parameters {self.name!r} is built with, and exclude nothing.",
                    stacklevel=4,
                )
            self._excluded_patterns = tuple(dict.fromkeys(self._excluded_patterns + tuple(found)))
            self._excluded_objects = []
            self._rebuild()
