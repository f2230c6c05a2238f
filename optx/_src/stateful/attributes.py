"""Hyperparameters as attributes of the stateful optimizers (OptimizerV2's ``opt.beta_1``).

An argument of a Keras class maps to the hyperparameter(s) of its chain that hold it: a
public name, and where names clash the type of the state that holds it. Setting a numeric
argument writes the state (no recompilation); setting anything else (a flag, an argument
that was ``None``) rebuilds the chain and carries the state over by name.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import jax

from optx._src import hyperparams as hp
from optx._src.clipping import ClipState
from optx._src.ema_params import EmaParamsState
from optx._src.loss_scale import UnscaleGradientsState
from optx._src.stateful.custom import CustomStepState
from optx._src.stateful.keras_args import check_common
from optx._src.weight_decay import DecayBeforeState

if TYPE_CHECKING:
    from optx._src.stateful.optimizer import Optimizer

# Keras's common arguments: (public name in the state, type of the state holding it).
COMMON_HYPERPARAMS: dict[str, tuple[str, type]] = {
    "weight_decay": ("weight_decay", DecayBeforeState),
    "clipnorm": ("max_norm", ClipState),
    "global_clipnorm": ("max_norm", ClipState),
    "clipvalue": ("max_delta", ClipState),
    "ema_momentum": ("momentum", EmaParamsState),
    "loss_scale_factor": ("loss_scale_factor", UnscaleGradientsState),
}
_COMMON_OWNERS = tuple({owner for _, owner in COMMON_HYPERPARAMS.values()})


def entries(opt: Optimizer) -> list[tuple[str, type | None, str, int]]:
    """``(variable key, owner state type, public name, depth)`` of each hyperparameter."""
    layout = opt._require_built("hyperparameters")
    flat = jax.tree_util.tree_flatten_with_path(opt._state)[0]
    out = []
    for (path, _), key in zip(flat, layout.keys, strict=True):
        for i in range(len(path) - 1):
            if getattr(path[i], "name", None) == "hyperparams" and isinstance(
                path[i + 1], jax.tree_util.DictKey
            ):
                owner = hp._owner_type(opt._state, tuple(path[:i]))
                public = str(path[i + 1].key).removeprefix(hp._ONE_MINUS)
                out.append((key, owner, public, i))
                break
    return out


def keys_for(opt: Optimizer, name: str) -> list[str]:
    """The variable keys holding the argument ``name`` (empty if the chain holds none)."""
    found = entries(opt)
    if name in COMMON_HYPERPARAMS:
        public, owner = COMMON_HYPERPARAMS[name]
        keys = [k for k, o, p, _ in found if o is owner and p == public]
        return opt._select(name, keys, found)
    spec = opt._hyper_map.get(name)
    if spec is not None:
        public, owner = spec
        keys = [
            k
            for k, o, p, _ in found
            if p == public and (o is owner if owner else o not in _COMMON_OWNERS)
        ]
        return opt._select(name, list(dict.fromkeys(keys)), found)
    if opt._is_custom():
        return [k for k, o, p, _ in found if o is CustomStepState and p == name]
    return []


def set_argument(opt: Optimizer, name: str, value: Any) -> None:
    """``opt.name = value`` for an argument of the constructor (see the module docstring)."""
    api = f"{type(opt).__name__}.{name}"
    owner_built = opt._owner is not None and opt._owner[0].built
    # The EMA starts at the weights `build` sees (which a rebuild does not have).
    if name in {*opt._init_only, "use_ema", "ema_start"} and (opt.built or owner_built):
        raise ValueError(
            f"`{api}` is read when the optimizer is built; it cannot change afterwards. "
            f"Received: {name}={value!r}. Build a new optimizer with {name}={value!r}."
        )
    old = dict(opt._config)
    opt._config[name] = value
    try:
        check_common(api, opt._config)
        opt._check(api)
        # Building the chain checks every value as the constructor does.
        with hp.caller(type(opt).__name__):
            opt._build_transform()
    except (TypeError, ValueError):
        opt._config = old
        raise
    value = opt._config[name]
    numeric = isinstance(value, numbers.Real) and not isinstance(value, bool)
    keys = keys_for(opt, name) if opt.built and numeric and old[name] is not None else []
    if keys and isinstance(old[name], numbers.Real) and not isinstance(old[name], bool):
        convert = opt._hyper_convert.get(name, lambda v: v)
        for key in keys:
            opt._write(key, convert(value))
        return
    opt._config = old
    opt._replace_config(**{name: value})


def set_custom(opt: Optimizer, name: str, value: Any) -> bool:
    """Writes a custom optimizer's hyperparameter into the state; ``False`` if not one."""
    if not opt.built:
        return False
    keys = keys_for(opt, name)
    if not keys:
        return False
    for key in keys:
        opt._write(key, value)
    return True
