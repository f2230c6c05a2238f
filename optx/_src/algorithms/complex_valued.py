"""Complex parameters as pairs of real ones: `split_real_and_imaginary`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    Transform,
    Updates,
    transform,
)
from optx._src.combine import accepts_extra, call_update
from optx._src.tree import is_none, path_name


class _RealPair(NamedTuple):
    """The real and imaginary parts of a complex leaf, as two real arrays."""

    real: jax.Array
    imaginary: jax.Array


def _split(x: Any) -> Any:
    if x is not None and jnp.iscomplexobj(x):
        return _RealPair(jnp.real(x), jnp.imag(x))
    return x


def _merge(x: Any) -> Any:
    if isinstance(x, _RealPair):
        return jax.lax.complex(x.real, x.imaginary)
    return x


def _is_pair(x: Any) -> bool:
    return isinstance(x, _RealPair)


def _check_complex(api: str, updates: Any, params: Any) -> None:
    """Refuses a complex update of a real parameter: it would become a pair, not a leaf."""
    checks.same_tree(f"{api}.update", params, updates, "params", "updates", allow_none=True)
    flat = jax.tree_util.tree_flatten_with_path(updates, is_leaf=is_none)[0]
    for (path, u), p in zip(flat, jax.tree.leaves(params, is_leaf=is_none), strict=True):
        if u is not None and jnp.iscomplexobj(u) and p is not None and not jnp.iscomplexobj(p):
            raise TypeError(
                f"`{api}.update` needs real updates for real parameters. Received: "
                f"updates[{path_name(path)!r}] of dtype {u.dtype}."
            )


class SplitRealAndImaginaryState(NamedTuple):
    """State of `split_real_and_imaginary`: the inner transform's state."""

    inner_state: OptState


@transform
class SplitRealAndImaginary(Transform):
    """See `split_real_and_imaginary`."""

    name = "split_real_and_imaginary"
    row_sparse = False
    inner: GradientTransformationLike = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        checks.transform(self.name, "inner", self.inner)
        super().__post_init__()

    def init(self, params: Params) -> SplitRealAndImaginaryState:
        return SplitRealAndImaginaryState(self.inner.init(jax.tree.map(_split, params)))

    def update(
        self,
        updates: Updates,
        state: SplitRealAndImaginaryState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, SplitRealAndImaginaryState]:
        if params is not None:
            _check_complex(self.name, updates, params)
        split_params = None if params is None else jax.tree.map(_split, params)
        out, inner_state = call_update(
            self.inner,
            accepts_extra(self.inner),
            jax.tree.map(_split, updates),
            state.inner_state,
            split_params,
            extra,
        )
        return jax.tree.map(_merge, out, is_leaf=_is_pair), SplitRealAndImaginaryState(inner_state)


def split_real_and_imaginary(inner: GradientTransformationLike) -> SplitRealAndImaginary:
    r"""Runs ``inner`` on the real and imaginary parts of complex leaves, as two real leaves.

    Each complex leaf :math:`z = x + iy` of the parameters and the updates becomes the
    pair :math:`(x, y)` before ``inner`` sees it, and ``inner``'s pair of updates
    :math:`(u_x, u_y)` comes back as :math:`u_x + i u_y`. Real leaves pass through as they
    are. An optimizer then treats a complex parameter as two real ones (Adam's second
    moment is per part, not :math:`|g|^2`).

    JAX's ``jax.grad`` of a real loss of complex parameters returns the conjugate of the
    steepest-ascent direction: pass ``jax.tree.map(jnp.conj, grads)`` to descend (as
    with optax).

    Args:
      inner: the transform to run on real leaves (an optx or optax transform).

    Returns:
      The transform; its state is `SplitRealAndImaginaryState`.

    Raises:
      TypeError: ``inner`` is not a transform.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.contrib.split_real_and_imaginary(optx.adam(0.1))
      >>> params = {"z": jnp.array([1.0 + 1.0j])}
      >>> updates, _ = tx.update({"z": jnp.array([2.0 - 0.5j])}, tx.init(params), params)
      >>> updates  # Adam's first step on each part: -lr * sign
      {'z': Array([-0.1+0.1j], dtype=complex64)}
    """
    return SplitRealAndImaginary(inner)
