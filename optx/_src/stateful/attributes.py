"""Hyperparameters as attributes of the stateful optimizers (OptimizerV2's ``opt.beta_1``).

An argument of a Keras class maps to the hyperparameter(s) of its chain that hold it: a
public name, and where names clash the type of the state that holds it. Setting a numeric
argument writes the state (no recompilation); setting anything else (a flag, an argument
that was ``None``) rebuilds the chain and carries the state over by name.

Each function takes the optimizer (an `optx.optimizers.Optimizer`) as its argument:
`Optimizer` calls them.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from optx._src import hyperparams as hp
from optx._src.clipping import ClipState
from optx._src.ema_params import EmaParamsState
from optx._src.loss_scale import UnscaleGradientsState
from optx._src.stateful.custom import CustomStepState
from optx._src.stateful.keras_args import check_common
from optx._src.weight_decay import DecayBeforeState

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


def entries(opt: Any) -> list[tuple[str, type | None, str, int]]:
    """``(variable key, owner state type, public name, depth)`` of each hyperparameter."""
    layout = opt._require_built("hyperparameters")
    out = []
    for key, founds in layout.found.items():
        for f in founds:
            owner = type(hp.node_at(opt._state, f.node_path[:-1]))
            out.append((key, owner, f.entry.name, len(f.node_path) - 1))
    return out


def public_names(opt: Any, state: Any) -> Any:
    """``state`` with each hyperparameter that stands for an argument named as it.

    An argument given through a conversion (Adafactor's ``beta_2_decay``, stored negated
    as ``decay_rate``) keeps the building block's name: the values differ.
    """
    common = {k: v for k, v in COMMON_HYPERPARAMS.items() if opt._config.get(k) is not None}
    args: dict[tuple[type | None, str], list[str]] = {}
    for arg, (public, owner) in {**common, **opt._hyper_map}.items():
        args.setdefault((owner, public), []).append(arg)
    # Renamed where one argument stands for it (Muon's two weight decays keep the name).
    table = {
        key: found[0]
        for key, found in args.items()
        if len(found) == 1 and found[0] != key[1] and found[0] not in opt._hyper_convert
    }

    def rename(owner: type | None, name: str) -> str | None:
        if (owner, name) in table:
            return table[(owner, name)]
        return None if owner in _COMMON_OWNERS else table.get((None, name))

    return hp.renamed(state, rename)


def keys_for(opt: Any, name: str) -> list[str]:
    """The variable keys holding the argument ``name`` (empty if the chain holds none)."""
    found = entries(opt)
    if name in COMMON_HYPERPARAMS:
        public, owner = COMMON_HYPERPARAMS[name]
        keys = [k for k, o, p, _ in found if o is owner and p in (public, name)]
        return opt._select(name, keys, found)
    spec = opt._hyper_map.get(name)
    if spec is not None:
        public, owner = spec
        keys = [
            k
            for k, o, p, _ in found
            if p in (public, name) and (o is owner if owner else o not in _COMMON_OWNERS)
        ]
        return opt._select(name, list(dict.fromkeys(keys)), found)
    if opt._is_custom():
        return [k for k, o, p, _ in found if o is CustomStepState and p == name]
    return []


def set_argument(opt: Any, name: str, value: Any) -> None:
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
        check_common(api, opt._config, opt._defaults)
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


def set_custom(opt: Any, name: str, value: Any) -> bool:
    """Writes a custom optimizer's hyperparameter into the state; ``False`` if not one."""
    if not opt.built:
        return False
    keys = keys_for(opt, name)
    if not keys:
        return False
    for key in keys:
        opt._write(key, value)
    return True


def show_loaded(opt: Any) -> None:
    """Sets the numeric arguments whose hyperparameters were loaded to the loaded values.

    After `load_own_variables`, ``opt.beta_1`` and `get_config` show what the state holds.
    An argument whose stored value is its own (to float32) keeps the number the user gave.
    """
    common = [k for k in COMMON_HYPERPARAMS if opt._config.get(k) is not None]
    for name in [*common, *opt._hyper_map]:
        old = opt._config.get(name)
        if not _is_number(old):
            continue
        keys = keys_for(opt, name)
        if not keys:
            continue
        convert = opt._hyper_convert.get(name, lambda v: v)
        new = _loaded_value(opt, keys[0], convert(old))
        if new is None:
            continue
        if np.float32(convert(convert(new))) == np.float32(new):  # an involution (negation)
            opt._config[name] = convert(new)
    if opt._is_custom():
        for name, old in opt._custom_values():
            keys = keys_for(opt, name)
            new = _loaded_value(opt, keys[0], old) if keys else None
            if new is not None:
                object.__setattr__(opt, name, new)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _loaded_value(opt: Any, key: str, old: float) -> float | None:
    """The number the state holds at ``key``; ``None`` where it is ``old`` (to float32).

    The shortest decimal that float32 rounds to the stored value (``0.95``, not
    0.949999988079071), unless its range refuses it (a ``beta_2`` of ``1 - 1e-9``, which
    float32 rounds to 1): then the stored value plus its residual.
    """
    stored = np.float32(opt._hyper_value(key))
    if stored == np.float32(old):
        return None
    short = float(str(stored))
    try:
        hp.validate(opt.name, key, short, opt._require_built(key).found[key][0].entry.rule)
    except ValueError:
        residual = opt.variables.get(f"{key}/residual")
        return float(stored) + (0.0 if residual is None else float(residual))
    return short
