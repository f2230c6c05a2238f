"""Parameter constraints: the `constrain` transform and Keras's norm constraints.

The Euclidean projections (`Box`, `Simplex`, `L1Ball`, `L2Ball`) are in `projections.py`;
both are public as `optx.constraints`, `constrain` as `optx.constrain`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import EmptyState, Params, Transform, Updates, transform
from optx._src.combine import MaskSpec, freeze_mask, resolve_mask
from optx._src.tree import is_none, path_name

ConstraintFn = Callable[[jax.Array], jax.Array]
# Keras's `backend.epsilon()`, added to the norms of the norm constraints.
_EPSILON = 1e-7


class Constraint:
    """Base class of the ready constraints: a stateless function ``array -> array``.

    Subclasses are frozen dataclasses (equal and hashable by their arguments, so that a
    transform holding one stays hashable) that override ``__call__``. As in
    Keras, `get_config` returns the arguments and `from_config` rebuilds the constraint.
    Any hashable callable works with `optx.constrain`; subclassing is optional.

    Example:
      >>> import dataclasses, jax.numpy as jnp, optx
      >>> @dataclasses.dataclass(frozen=True)
      ... class Round(optx.constraints.Constraint):
      ...     def __call__(self, w):
      ...         return jnp.round(w)
      >>> Round()(jnp.array([0.2, 1.7]))
      Array([0., 2.], dtype=float32)
    """

    __slots__ = ()

    def __call__(self, w: jax.Array) -> jax.Array:
        """Returns ``w`` projected onto the constraint set (the base class: unchanged)."""
        return w

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments, as a dict."""
        if not dataclasses.is_dataclass(self):
            return {}
        return {f.name: _config_value(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Constraint:
        """Rebuilds a constraint from `get_config`'s dict."""
        return cls(**config)


def _config_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def number(api: str, name: str, value: Any, ok: Callable[[float], bool], needs: str) -> float:
    """Checks a Python number argument of a constraint; returns it as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | np.number):
        raise TypeError(
            f"`{api}` needs {name} to be a real number. Received: {name}={value!r} "
            f"of type {type(value).__name__}."
        )
    result = float(value)
    if math.isnan(result) or not ok(result):
        raise ValueError(f"`{api}` needs {name} {needs}. Received: {name}={value!r}.")
    return result


def _axis(api: str, axis: Any) -> int | tuple[int, ...] | None:
    if axis is None or (isinstance(axis, int | np.integer) and not isinstance(axis, bool)):
        return None if axis is None else int(axis)
    if isinstance(axis, list | tuple) and all(
        isinstance(a, int | np.integer) and not isinstance(a, bool) for a in axis
    ):
        return tuple(int(a) for a in axis)
    raise TypeError(
        f"`{api}` needs axis to be an int, a list of ints or None. Received: axis={axis!r}."
    )


def compute_dtype(w: jax.Array) -> Any:
    """At least float32: norms of bfloat16 weights are summed in float32."""
    return jnp.promote_types(w.dtype, jnp.float32)


def _norms(w: jax.Array, axis: Any) -> tuple[jax.Array, jax.Array]:
    x = w.astype(compute_dtype(w))
    return x, jnp.sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=True))


@dataclasses.dataclass(frozen=True)
class NonNeg(Constraint):
    """Constrains the weights to be non-negative (Keras's ``NonNeg``): ``max(w, 0)``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.constraints.NonNeg()(jnp.array([-1.0, 0.5]))
      Array([0. , 0.5], dtype=float32)
    """

    def __call__(self, w: jax.Array) -> jax.Array:
        w = jnp.asarray(w)
        return jnp.maximum(w, jnp.zeros((), w.dtype))


@dataclasses.dataclass(frozen=True)
class MaxNorm(Constraint):
    r"""Caps the norm of the weights along ``axis`` (Keras's ``MaxNorm``).

    .. math:: w \leftarrow w \cdot \frac{\mathrm{clip}(n, 0, c)}{10^{-7} + n}, \qquad
       n = \lVert w \rVert_2 \text{ along axis}

    As in Keras, the :math:`10^{-7}` shrinks weights already inside the set by a factor
    :math:`n / (10^{-7} + n)`; norms are computed in float32 (or wider) and the result is
    cast back to the weights' dtype.

    Args:
      max_value: :math:`c \ge 0`, the largest norm.
      axis: the axis (or axes) along which norms are taken: 0 constrains each column of a
        ``Dense`` kernel of shape ``(input_dim, output_dim)``; ``[0, 1, 2]`` each filter of a
        ``Conv2D`` kernel; ``None`` the whole array.

    Raises:
      ValueError: ``max_value`` is negative or NaN.
      TypeError: ``axis`` is not an int, a list of ints or None.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.constraints.MaxNorm(1.0)(jnp.array([[3.0, 0.3], [4.0, 0.4]])).round(4)
      Array([[0.6, 0.3],
             [0.8, 0.4]], dtype=float32)
    """

    max_value: float = 2.0
    axis: int | tuple[int, ...] | None = 0

    def __post_init__(self) -> None:
        value = number("MaxNorm", "max_value", self.max_value, lambda v: v >= 0, ">= 0")
        object.__setattr__(self, "max_value", value)
        object.__setattr__(self, "axis", _axis("MaxNorm", self.axis))

    def __call__(self, w: jax.Array) -> jax.Array:
        w = jnp.asarray(w)
        x, norms = _norms(w, self.axis)
        desired = jnp.clip(norms, 0, self.max_value)
        return (x * (desired / (_EPSILON + norms))).astype(w.dtype)


@dataclasses.dataclass(frozen=True)
class UnitNorm(Constraint):
    r"""Scales the weights to unit norm along ``axis`` (Keras's ``UnitNorm``).

    .. math:: w \leftarrow w / (10^{-7} + \lVert w \rVert_2) \text{ along axis}

    Args:
      axis: the axis (or axes) along which norms are taken (see `MaxNorm`).

    Raises:
      TypeError: ``axis`` is not an int, a list of ints or None.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.constraints.UnitNorm()(jnp.array([3.0, 4.0]))
      Array([0.6, 0.8], dtype=float32)
    """

    axis: int | tuple[int, ...] | None = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "axis", _axis("UnitNorm", self.axis))

    def __call__(self, w: jax.Array) -> jax.Array:
        w = jnp.asarray(w)
        x, norms = _norms(w, self.axis)
        return (x / (_EPSILON + norms)).astype(w.dtype)


@dataclasses.dataclass(frozen=True)
class MinMaxNorm(Constraint):
    r"""Keeps the norm of the weights along ``axis`` in ``[min_value, max_value]`` (Keras's).

    .. math:: w \leftarrow w \cdot \frac{r\,\mathrm{clip}(n, a, b) + (1 - r)\,n}
       {10^{-7} + n}, \qquad n = \lVert w \rVert_2 \text{ along axis}

    Args:
      min_value: :math:`a \ge 0`, the smallest norm.
      max_value: :math:`b \ge a`, the largest norm.
      rate: :math:`r \in [0, 1]`: 1 enforces the bounds at once, a smaller rate moves the
        norm part of the way towards them at each step.
      axis: the axis (or axes) along which norms are taken (see `MaxNorm`).

    Raises:
      ValueError: ``min_value`` is negative, ``max_value`` is below ``min_value``, or
        ``rate`` is outside [0, 1].
      TypeError: ``axis`` is not an int, a list of ints or None.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> optx.constraints.MinMaxNorm(1.0, 2.0)(jnp.array([0.3, 0.4])).round(4)
      Array([0.6, 0.8], dtype=float32)
    """

    min_value: float = 0.0
    max_value: float = 1.0
    rate: float = 1.0
    axis: int | tuple[int, ...] | None = 0

    def __post_init__(self) -> None:
        api = "MinMaxNorm"
        low = number(api, "min_value", self.min_value, lambda v: v >= 0, ">= 0")
        high = number(
            api, "max_value", self.max_value, lambda v: v >= low, f">= min_value ({low!r})"
        )
        rate = number(api, "rate", self.rate, lambda v: 0 <= v <= 1, "in [0, 1]")
        object.__setattr__(self, "min_value", low)
        object.__setattr__(self, "max_value", high)
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "axis", _axis(api, self.axis))

    def __call__(self, w: jax.Array) -> jax.Array:
        w = jnp.asarray(w)
        x, norms = _norms(w, self.axis)
        desired = (
            self.rate * jnp.clip(norms, self.min_value, self.max_value) + (1 - self.rate) * norms
        )
        return (x * (desired / (_EPSILON + norms))).astype(w.dtype)


def _sparse_type() -> type | None:
    # No sparse array can exist before its module is imported; this keeps `import optx`
    # from importing jax.experimental.sparse.
    module = sys.modules.get("jax.experimental.sparse")
    return getattr(module, "JAXSparse", None)


def _freeze_constraint(api: str, constraint: Any) -> Any:
    if isinstance(constraint, Mapping):
        pairs = tuple(constraint.items())
    elif isinstance(constraint, tuple) and all(
        isinstance(p, tuple) and len(p) == 2 for p in constraint
    ):
        pairs = constraint
    elif callable(constraint):
        _hashable(api, "constraint", constraint)
        return constraint
    else:
        raise TypeError(
            f"`{api}` needs constraint to be a callable array -> array or a dict "
            f"{{regex: callable}}. Received: constraint={constraint!r}."
        )
    if not pairs:
        raise ValueError(
            f"`{api}` needs at least one (regex, constraint) pair. Received: constraint={{}}."
        )
    for pattern, fn in pairs:
        if not isinstance(pattern, str):
            raise TypeError(
                f"`{api}` needs the keys of a constraint dict to be regular expressions "
                f"(str). Received: key {pattern!r}."
            )
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(
                f"`{api}` needs valid regular expressions as keys. Received: {pattern!r} ({error})."
            ) from None
        if not callable(fn):
            raise TypeError(
                f"`{api}` needs a callable array -> array for each regex. Received: "
                f"{fn!r} for {pattern!r}."
            )
        _hashable(api, f"constraint[{pattern!r}]", fn)
    return tuple(pairs)


def _hashable(api: str, name: str, fn: Any) -> None:
    try:
        hash(fn)
    except TypeError:
        raise TypeError(
            f"`{api}` needs hashable constraints (the transform is hashed to reuse compiled "
            f"steps). Received: {name}={fn!r}. Use a frozen dataclass, such as the "
            f"constraints of `optx.constraints`, or a plain function."
        ) from None


@transform
class Constrain(Transform):
    """See `constrain`."""

    name = "constrain"
    constraint: Any = None
    mask: MaskSpec = None

    def __post_init__(self) -> None:
        api = hp.current(self.name)
        object.__setattr__(self, "constraint", _freeze_constraint(api, self.constraint))
        if self.mask is not None:
            object.__setattr__(self, "mask", freeze_mask(api, self.mask))

    def init(self, params: Params) -> EmptyState:
        del params
        return EmptyState()

    def _constraint_of(self, name: str) -> ConstraintFn | None:
        if not isinstance(self.constraint, tuple):
            return self.constraint
        for pattern, fn in self.constraint:
            if re.search(pattern, name):
                return fn
        return None

    def update(
        self, updates: Updates, state: EmptyState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, EmptyState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        sparse = _sparse_type()
        if sparse is not None:
            flat = jax.tree_util.tree_flatten_with_path(
                updates, is_leaf=lambda x: x is None or isinstance(x, sparse)
            )[0]
            for path, u in flat:
                if isinstance(u, sparse):
                    raise TypeError(
                        f"`{self.name}` needs dense updates; a constraint on a sparse update "
                        f"is not defined. Received: a {type(u).__name__} update at "
                        f"{path_name(path)!r}."
                    )
        checks.float_updates(api, updates)
        checks.same_tree(api, updates, params, "updates", "params", allow_none=True)
        if self.mask is None:
            mask = jax.tree.map(lambda _: True, params)
        else:
            mask = resolve_mask(self.name, self.mask, params)

        def leaf(path: Any, u: Any, p: Any, selected: bool) -> Any:
            fn = self._constraint_of(path_name(path)) if selected else None
            if u is None or fn is None:
                return u
            p = jnp.asarray(p)
            new = jnp.asarray(p + u).astype(p.dtype)  # what `apply_updates` would give
            return (jnp.asarray(fn(new)).astype(p.dtype) - p).astype(u.dtype)

        out = jax.tree_util.tree_map_with_path(leaf, updates, params, mask, is_leaf=is_none)
        return out, state

    def __repr__(self) -> str:
        if isinstance(self.constraint, tuple):
            shown = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self.constraint) + "}"
        else:
            shown = repr(self.constraint)
        mask = "" if self.mask is None else f", mask={self.mask!r}"
        return f"{self.name}({shown}{mask})"


def constrain(
    constraint: ConstraintFn | Mapping[str, ConstraintFn], mask: MaskSpec | None = None
) -> Constrain:
    r"""Makes the updates land on a constraint set: projected (constrained) gradient steps.

    .. math:: u \leftarrow P(\theta + u) - \theta

    so that ``apply_updates(params, updates)`` gives :math:`P(\theta + u)`, the parameter
    after the step with the constraint :math:`P` applied, as Keras applies a layer's
    ``kernel_constraint`` after each optimizer step. Place it last in a chain, after the
    learning rate. :math:`\theta + u` is computed in the parameter's dtype, as
    `apply_updates` computes it; the returned update is cast to the update's dtype, so
    the constrained parameter is reproduced to float round-off (:math:`\theta +
    (P - \theta)` may differ from :math:`P` in the last bit).

    Args:
      constraint: a callable ``array -> array`` applied to every selected parameter (such
        as those of `optx.constraints`), or a dict ``{regex: callable}`` routing by
        parameter path name (``"dense/kernel"``, ``re.search``): the first pattern that
        matches gives the constraint; parameters matching none are left unconstrained.
        Constraints must be hashable (frozen dataclasses, plain functions).
      mask: which parameters to constrain at all (as `masked`'s); ``None`` selects every
        parameter.

    Returns:
      The transform (its state is `EmptyState`). ``None`` updates pass through.

    Raises:
      TypeError: ``constraint`` is not a callable or a dict of them, is unhashable, or the
        mask is malformed; (at ``update``) an update is a sparse array.
      ValueError: a regex is invalid; (at ``update``) no ``params``, or updates and params
        differ in structure.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.chain(optx.sgd(1.0), optx.constrain(optx.constraints.NonNeg()))
      >>> params = {"w": jnp.array([1.0, 1.0])}
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -1.0])}, tx.init(params), params)
      >>> optx.apply_updates(params, updates)
      {'w': Array([0., 2.], dtype=float32)}
    """
    return Constrain(constraint, mask)
