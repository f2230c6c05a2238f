"""Newton-Schulz orthogonalisation of matrices, for `muon` (no public names).

The quintic iteration and its coefficient presets, the scalings that precede it, and the
checks of its arguments and of the leaves it is given.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import hyperparams as hp
from optx._src import placement
from optx._src.tree import path_name

NS_COEFFS_PRESETS: dict[str, Any] = {
    # Jordan's quintic, tuned for the steepest slope at zero.
    "standard": (3.4445, -4.7750, 2.0315),
    # One triple per step (Ahn et al., Dion, 2025).
    "dion": (
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ),
}
PRECONDITIONINGS = ("frobenius", "spectral", "aol", "schatten")
# The floor of AOL's and Schatten's first-step rescaling (a constant in optax too).
_PRECONDITION_FLOOR = 1e-8


def option(api: str, name: str, value: Any, allowed: tuple[str, ...]) -> str:
    """Checks a string option against its ``allowed`` values."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(
            f"`{hp.current(api)}` needs {name} to be one of {', '.join(map(repr, allowed))}. "
            f"Received: {name}={value!r}."
        )
    return value


def _triple(value: Any) -> tuple[float, float, float] | None:
    if not isinstance(value, tuple | list) or len(value) != 3:
        return None
    if not all(isinstance(c, numbers.Real) and not isinstance(c, bool) for c in value):
        return None
    return tuple(float(c) for c in value)  # type: ignore[return-value]


def ns_coeffs_option(api: str, value: Any, ns_steps: int) -> tuple[Any, ...]:
    """Checks ``ns_coeffs``: a preset name, one triple, or one triple per step."""
    if isinstance(value, str) and value in NS_COEFFS_PRESETS:
        value = NS_COEFFS_PRESETS[value]
    single = _triple(value)
    if single is not None:
        rows = [single]
    elif isinstance(value, tuple | list) and value:
        rows = [_triple(r) for r in value]
    else:
        rows = [None]
    if any(r is None for r in rows):
        raise ValueError(
            f"`{hp.current(api)}` needs ns_coeffs to be a triple (a, b, c), a sequence of "
            f"triples (one per step) or a preset name ({', '.join(map(repr, NS_COEFFS_PRESETS))}"
            f"). Received: ns_coeffs={value!r}."
        )
    if not all(math.isfinite(c) for row in rows for c in row):  # type: ignore[union-attr]
        raise ValueError(
            f"`{hp.current(api)}` needs finite ns_coeffs. Received: ns_coeffs={value!r}."
        )
    if single is not None:
        return single
    if len(rows) < ns_steps:
        raise ValueError(
            f"`{hp.current(api)}` needs at least ns_steps triples in ns_coeffs. "
            f"Received: {len(rows)} triples, ns_steps={ns_steps}."
        )
    # The last ns_steps triples. (optax refuses more triples than steps, and runs as many
    # steps as triples when there are fewer.)
    return tuple(rows[len(rows) - ns_steps :])  # type: ignore[arg-type]


def matrices_only(api: str, tree: Any) -> None:
    """Raises `ValueError` naming the first leaf of ``tree`` that is not 2-D."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if np.ndim(leaf) != 2:
            raise ValueError(
                f"`{api}` needs 2-D parameters (matrices). Received: "
                f"params[{path_name(path)!r}] of shape {np.shape(leaf)}. Route it to the "
                f"AdamW fallback (in `muon`, leave it out of muon_mask: by default every "
                f"leaf that is not 2-D goes there), give it MuonDimensionNumbers "
                f"(weight_dimension_numbers) or reshape it to a matrix."
            )


def _newton_schulz_step(x: jax.Array, c: jax.Array) -> jax.Array:
    # f(X) = a X + (b A + c A^2) X with A = X X^H (X X^T for a real X).
    a = x @ x.conj().T
    return c[0] * x + (c[1] * a + c[2] * a @ a) @ x


def _first_step(x: jax.Array, c: jax.Array, preconditioning: str) -> jax.Array:
    """The first step, with AOL's per-row or Schatten-4's global rescaling folded in."""
    a = x @ x.conj().T
    if preconditioning == "aol":
        s = jax.lax.rsqrt(jnp.maximum(jnp.abs(a).sum(axis=-1), _PRECONDITION_FLOOR))[:, None]
        x, a = x * s, a * s * s.T
    else:
        s = jax.lax.rsqrt(jnp.maximum(jnp.linalg.norm(a), _PRECONDITION_FLOOR))
        x, a = x * s, a * s**2
    return c[0] * x + (c[1] * a + c[2] * a @ a) @ x


def orthogonalize(
    x: jax.Array, coeffs: jax.Array, ns_steps: int, preconditioning: str, eps: jax.Array
) -> jax.Array:
    """Newton-Schulz approximation of the orthogonal factor of the matrix ``x``.

    ``coeffs`` is one triple (used ``ns_steps`` times) or one triple per step.
    """
    # Whole on every device where the mesh types it sharded (`Explicit` axes): matrix
    # products over a sharded dimension need an output sharding, an SVD an unsharded input.
    x = placement.gathered(x)
    wide = x.shape[0] <= x.shape[1]
    x = x if wide else x.T  # iterate on X X^T of the smaller side
    if preconditioning == "frobenius":
        x = x / (jnp.linalg.norm(x) + eps)
    elif preconditioning == "spectral":
        x = x / (jnp.linalg.norm(x, ord=2) + eps)
    coeffs = coeffs.astype(x.dtype)
    rows = [coeffs] * ns_steps if coeffs.ndim == 1 else list(coeffs)
    for i, c in enumerate(rows):
        if i == 0 and preconditioning in ("aol", "schatten"):
            x = _first_step(x, c, preconditioning)
        else:
            x = _newton_schulz_step(x, c)
    return x if wide else x.T
