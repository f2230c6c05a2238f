"""Checks of a transform's structural options: switches, slot dtypes, epsilon placement.

These options choose the program (not numbers held in the state), so they are checked
eagerly in the transform's ``__post_init__`` and never traced.
"""

from __future__ import annotations

from typing import Any

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import Transform

EPS_PLACEMENTS = ("optax", "keras")


def flag_option(api: str, name: str, value: Any) -> bool:
    """Checks a boolean option (a structural switch: a truthy string would be a mistake).

    The boolean fields of a `Transform` are checked by the base class; this is for the
    options a factory reads itself.
    """
    return checks.flag(api, name, value)


def flag_options(tx: Transform, *names: str) -> None:
    """Normalises the boolean options ``names`` of the transform ``tx`` (see `flag_option`)."""
    for name in names:
        object.__setattr__(tx, name, flag_option(tx.name, name, getattr(tx, name)))


def dtype_options(tx: Transform, *names: str) -> None:
    """Normalises the slot dtype options ``names`` of ``tx`` (see `checks.dtype_option`)."""
    for name in names:
        object.__setattr__(tx, name, checks.dtype_option(tx.name, name, getattr(tx, name)))


def eps_placement_option(api: str, value: Any) -> str:
    """Checks an ``eps_placement`` option: ``"optax"`` or ``"keras"``."""
    if not isinstance(value, str) or value not in EPS_PLACEMENTS:
        raise ValueError(
            f"`{hp.current(api)}` needs eps_placement to be 'optax' or 'keras'. "
            f"Received: eps_placement={value!r}."
        )
    return value
