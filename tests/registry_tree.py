"""Registry lists of optax's top-level utilities (see `registry.py`).

They are functions of arrays and trees, not transform factories: no entries.
"""

from __future__ import annotations

FACTORIES_WITH_ARGS: frozenset[str] = frozenset()

NOT_FACTORIES = frozenset(
    {
        "bias_correction",
        "global_norm",
        "matrix_inverse_pth_root",
        "multi_normal",
        "nnls",
        "power_iteration",
        "safe_increment",
        "safe_int32_increment",
        "safe_norm",
        "safe_root_mean_squares",
        "tree_map_params",
        "update_infinity_moment",
        "update_moment",
        "update_moment_per_elem_norm",
    }
)


def entries(register: object) -> None:
    """No transforms here."""
    del register
