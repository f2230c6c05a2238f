"""Helpers shared by the tests."""

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def count_compiles(fun_name: str) -> Iterator[list[str]]:
    """Collects the XLA compilations of the jitted function ``fun_name`` in this block."""
    compiled: list[str] = []

    def listener(event: str, duration: float, **kwargs: object) -> None:
        del duration
        if event == _COMPILE_EVENT and kwargs.get("fun_name") == f"jit({fun_name})":
            compiled.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield compiled
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def assert_close(
    name: str, actual: Any, expected: Any, rtol: float, atol: float = 0.0, finite: bool = False
) -> float:
    """Leaf by leaf ``|actual - expected| <= atol + rtol * max|expected|`` (float64 maths).

    Tolerances relative to each leaf's scale: float32 round-off is relative to the size of
    the numbers a leaf is computed from, not to each element. ``finite`` also requires the
    expected values to be finite. Returns the largest error relative to its leaf's scale,
    printed (see it with ``pytest -s``).
    """
    a_leaves, e_leaves = jax.tree.leaves(actual), jax.tree.leaves(expected)
    assert len(a_leaves) == len(e_leaves), name
    worst = 0.0
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves, strict=True)):
        a, e = np.asarray(a, np.float64), np.asarray(e, np.float64)
        assert a.shape == e.shape, f"{name}[{i}]: {a.shape} vs {e.shape}"
        if finite:
            assert np.all(np.isfinite(e)), f"{name}[{i}]: the expected values are not finite"
        scale = float(np.max(np.abs(e))) if e.size else 0.0
        err = float(np.max(np.abs(a - e))) if e.size else 0.0
        worst = max(worst, err / scale if scale else err)
        np.testing.assert_allclose(a, e, rtol=0, atol=atol + rtol * scale, err_msg=f"{name}[{i}]")
    print(f"{name}: max err / leaf scale {worst:.3g}")
    return worst


EPS32 = float(np.finfo(np.float32).eps)  # 2**-23: one rounding is off by at most EPS32 / 2


# Compiler options for the many small programs a registry-wide test compiles and runs a few
# times: XLA:CPU's LLVM optimisations are most of their compile time and nothing a test of
# structure, dtypes or shardings looks at. (Not for comparisons with eager op-by-op results:
# the unoptimised program may sum in another order than the eager reductions.)
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def roundoff_rtol(steps: int, roundings: int, reduced: int = 0, eps: float = EPS32) -> float:
    """How far two correct runs of the same maths can be apart, relative to a leaf's scale.

    Two programs (jit and eager, other CPUs, other shardings) may round each value
    differently: per step, up to ``roundings`` times (a ``a * b + c`` that XLA contracts into
    a fused multiply-add, ``x / sqrt(v)`` rewritten as ``x * rsqrt(v)``), and a reduction
    over ``reduced`` terms summed in another order is off by up to ``reduced * eps`` of the
    sum of its terms' sizes (Higham, *Accuracy and Stability of Numerical Algorithms*, 2002,
    section 3.1). Over ``steps`` steps the errors add. Valid where the maths is well
    conditioned and the terms are of the leaf's size; see tests/TOLERANCES.md.

    >>> round(roundoff_rtol(steps=3, roundings=8, reduced=28) / EPS32)
    108
    """
    return steps * (roundings + reduced) * eps


@functools.lru_cache(maxsize=32)
def _runner64(tx: Any, apply_updates: Callable[..., Any], trajectory: bool) -> Callable:
    """`run64`'s jitted scan, one per transform: runs of equal shapes compile once (a
    transform hashes by its configuration).
    """

    @jax.jit
    def go(params: Any, grads: Any) -> tuple:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            p = apply_updates(p, u)
            size = jax.tree.map(lambda x: jnp.max(jnp.abs(x)), u)
            return (p, s), ((p, size) if trajectory else size)

        (p, s), out = jax.lax.scan(step, (params, tx.init(params)), grads)
        path, sizes = out if trajectory else (p, out)
        return path, s, jax.tree.map(jnp.sum, sizes)

    return go


def run64(
    tx: Any,
    apply_updates: Callable[..., Any],
    params: Any,
    grads: Any,
    trajectory: bool = False,
) -> tuple:
    """``tx`` over the steps of ``grads`` (a leading axis) in float64 (`jax.enable_x64`).

    Returns NumPy trees (compare them outside x64: tests/TOLERANCES.md): the final
    parameters (with ``trajectory``, those of every step, leading axis: step), the final
    state, and per parameter leaf ``sum_t max|u_t|`` of the updates.
    """
    with jax.enable_x64(True):
        params, grads = jax.tree.map(
            lambda x: jnp.asarray(np.asarray(x, np.float64)), (params, grads)
        )
        go = _runner64(tx, apply_updates, trajectory)
        return jax.tree.map(np.asarray, go(params, grads))
