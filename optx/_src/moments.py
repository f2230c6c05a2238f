"""Moment estimates: their slots and the Adam family's per-step scalars.

Optimizers keep moving averages of the gradients (moments) in slots shaped like the
parameters: `zeros_like` makes them, and `unzip` splits the per-leaf tuples an ``update``
returns into the new slots. `adam_scalars` reads the Adam family's hyperparameters and its
bias corrections once per step, so that each leaf only multiplies and adds scalars;
`first_moment_scalars`, `second_moment_scalars` and `nadam_schedule` fold the corrections
of Adam, NAdam and Keras's epsilon placement into those scalars.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import hyperparams as hp
from optx._src import placement
from optx._src.base import Params, safe_increment
from optx._src.tree_reduce import abs_sq as abs_sq


def zeros_like(params: Params, dtype: Any) -> Params:
    """Zero slots shaped like ``params`` (``dtype``, else each parameter's), placed like them.

    Each slot is on its parameter's sharding, also under ``jit`` (`placement.zeros_like`).
    """
    return jax.tree.map(lambda p: placement.zeros_like(p, dtype), params)


def real_dtype(dtype: Any) -> Any:
    """The real dtype of ``dtype``'s precision (``float32`` for ``complex64``), else itself."""
    dtype = jnp.dtype(dtype)
    return jnp.finfo(dtype).dtype if jnp.issubdtype(dtype, jnp.complexfloating) else dtype


def real_zeros_like(params: Params, dtype: Any) -> Params:
    """Zero slots for real values of each parameter, such as ``|g|**2`` (second moments).

    As `zeros_like`, in the real dtype of ``dtype`` (else of each parameter's): a complex
    parameter's ``|g|**2`` is real, and a real slot takes half the memory of optax's complex
    one (whose imaginary part stays 0).
    """
    return jax.tree.map(lambda p: placement.zeros_like(p, _real_slot_dtype(p, dtype)), params)


def real_full_like(params: Params, value: Any, dtype: Any) -> Params:
    """`real_zeros_like` filled with ``value``."""
    return jax.tree.map(lambda p: placement.full_like(p, value, _real_slot_dtype(p, dtype)), params)


def _real_slot_dtype(p: Any, dtype: Any) -> Any:
    return real_dtype(jnp.result_type(p) if dtype is None else dtype)


def scaled_abs_sq(c: Any, g: jax.Array) -> jax.Array:
    """``c * |g|**2``, a second moment's new term.

    For a real ``g`` it is rounded as ``c * g * g``, the order Prodigy's, D-Adaptation's
    and MoMo-Adam's real updates have always had (``c * (g * g)`` rounds differently).
    """
    return c * abs_sq(g) if jnp.iscomplexobj(g) else c * g * g


def unzip(tuples: Any, like: Any, n: int, is_leaf: Any = None) -> tuple[Any, ...]:
    """Splits a tree of ``n``-tuples (one per leaf of ``like``) into ``n`` trees.

    ``is_leaf`` is passed to `jax.tree.structure` of ``like`` (e.g. to keep a `RowSparse`
    update as one leaf).
    """
    treedef = jax.tree.structure(like, is_leaf=is_leaf)
    flat = treedef.flatten_up_to(tuples)
    return tuple(jax.tree.unflatten(treedef, [t[i] for t in flat]) for i in range(n))


def decay_pair(h: hp.HyperParams, name: str) -> tuple[jax.Array, jax.Array]:
    """``(b, 1 - b)`` for the decay ``b`` = hyperparameter ``name``; ``1 - b`` as stored."""
    return hp.value(h, name), hp.complement(h, name)


class AdamScalars(NamedTuple):
    """The scalars of one Adam-family step (see `adam_scalars`).

    Attributes:
      hyperparams: the state's hyperparameters.
      count: ``t``, the step count after this step (``None`` for a state without one).
      b1, c1: ``b1`` and ``1 - b1`` (as stored: exact for a decay).
      b2, c2: ``b2`` and ``1 - b2`` (``None`` without ``b2``).
      eps, eps_root: the epsilons (each ``None`` where the transform has none).
    """

    hyperparams: hp.HyperParams
    count: Any
    b1: jax.Array
    c1: jax.Array
    b2: Any
    c2: Any
    eps: Any
    eps_root: Any

    def bias_correction(self, name: str = "b1", next_step: bool = False) -> jax.Array:
        """``1 - b^t`` for the decay ``b`` = ``name`` (``1 - b^(t+1)`` with ``next_step``)."""
        count = safe_increment(self.count) if next_step else self.count
        return hp.bias_correction(self.hyperparams, name, count)


def adam_scalars(h: hp.HyperParams, count: jax.Array | None) -> AdamScalars:
    """Reads the Adam family's scalars for this step from the hyperparameters ``h``.

    ``count`` is the state's step count (``None`` for a state without one); the result
    holds the incremented count. ``b2``, ``eps`` and ``eps_root`` are read where ``h``
    has them.
    """
    b1, c1 = decay_pair(h, "b1")
    b2, c2 = decay_pair(h, "b2") if "b2" in h else (None, None)
    # `HyperParams` is a pytree node, not a mapping: it has no ``get``.
    eps, eps_root = (h[name] if name in h else None for name in ("eps", "eps_root"))  # noqa: SIM401
    count = None if count is None else safe_increment(count)
    return AdamScalars(h, count, b1, c1, b2, c2, eps, eps_root)


def first_moment_scalars(
    h: hp.HyperParams, count: jax.Array, nesterov: bool, name: str = "b1"
) -> tuple[jax.Array, jax.Array | None]:
    """Scalars ``(k_m, k_g)`` with the corrected first moment ``k_m * m_t + k_g * g_t``.

    Plain: ``m_t / (1 - b^t)`` with ``b`` = ``name``. Nesterov (NAdam, as optax):
    ``b m_t / (1 - b^(t+1)) + (1 - b) g_t / (1 - b^t)``. ``k_g`` is ``None`` without
    Nesterov, so the leaves skip that term.
    """
    bc = hp.bias_correction(h, name, count)
    if not nesterov:
        return 1 / bc, None
    bc_next = hp.bias_correction(h, name, safe_increment(count))
    return hp.value(h, name) / bc_next, hp.complement(h, name) / bc


def second_moment_scalars(
    s: AdamScalars, eps_placement: str, k_m: jax.Array | None, k_g: jax.Array | None = None
) -> tuple[jax.Array | None, jax.Array | None, jax.Array | None]:
    """``(k_m, k_g, k_v)``: the first moment's scalars and ``k_v`` with ``v_hat = k_v v_t``.

    ``"optax"``: ``k_v = 1 / (1 - b2^t)``. ``"keras"`` puts epsilon on the uncorrected
    ``sqrt(v_t)``: the correction becomes the scalar ``sqrt(1 - b2^t)`` on ``k_m`` and
    ``k_g`` (``k_m`` ``None`` means 1), and ``k_v`` is ``None``.
    """
    bc2 = s.bias_correction("b2")
    if eps_placement != "keras":
        return k_m, k_g, 1 / bc2
    root = jnp.sqrt(bc2)
    return root if k_m is None else k_m * root, None if k_g is None else k_g * root, None


def nadam_schedule(s: AdamScalars, product: jax.Array) -> tuple[jax.Array, ...]:
    """NAdam's momentum schedule: ``(k_m, k_g, new product)`` for step ``s.count``.

    ``mu_t = b1 (1 - 0.5 * 0.96^(psi t))`` with ``psi = momentum_decay``; the product of the
    ``mu`` so far is kept in the state (Keras's ``u_product``).
    """
    psi = s.hyperparams["momentum_decay"]
    t = s.count.astype(jnp.float32)
    mu = s.b1 * (1 - 0.5 * jnp.power(jnp.float32(0.96), psi * t))
    mu_next = s.b1 * (1 - 0.5 * jnp.power(jnp.float32(0.96), psi * (t + 1)))
    product = product * mu
    return mu_next / (1 - product * mu_next), (1 - mu) / (1 - product), product
