"""Mixed precision: float16 gradients of float32 parameters give float32 updates.

Every transform's ``update`` given ``params`` casts a gradient narrower than its parameter
up to the parameter's dtype before its maths (DESIGN D6), so a step too small for float16
is not rounded away: ``sgd(1e-8)`` moves float32 parameters, and Adam's update is not
rounded to float16's subnormals. Where the dtypes already match, nothing is added to the
step.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optx

STEPS = 100
F32_EPS = float(jnp.finfo(jnp.float32).eps)  # 2**-23


def params() -> dict[str, jax.Array]:
    # Near 0, where float32 resolves steps of 3e-8: the movement shows the update's value.
    return {"w": jnp.zeros((2, 3), jnp.float32), "b": jnp.zeros(3, jnp.float32)}


def grads(dtype: Any) -> dict[str, jax.Array]:
    # 0.5 is exact in float16: the float16 and float32 runs see the same numbers.
    return jax.tree.map(lambda p: jnp.full(p.shape, 0.5, dtype), params())


def movement(tx: Any, grad_dtype: Any, steps: int = STEPS) -> tuple[float, Any]:
    """How far ``steps`` updates move the parameters (``p0 - p``), and the last updates."""
    p, g = params(), grads(grad_dtype)
    state = tx.init(p)
    for _ in range(steps):
        updates, state = tx.update(g, state, p)
        p = optx.apply_updates(p, updates)
    moved = -np.asarray(p["w"], np.float64)
    assert np.all(moved == moved.flat[0])  # the same gradient everywhere
    return float(moved.flat[0]), updates


def test_adam_with_float16_gradients_moves_float32_params_as_in_float32() -> None:
    lr = 3e-8  # float16's nearest value is its subnormal 5.96e-8: twice as far
    moved16, updates = movement(optx.adam(lr), jnp.float16)
    assert {u.dtype for u in jax.tree.leaves(updates)} == {jnp.dtype(jnp.float32)}
    moved32, _ = movement(optx.adam(lr), jnp.float32)
    assert moved16 == moved32  # the same float32 maths on the same numbers
    # optax given the same gradients in float32. Its bias corrections use float32 b2,
    # |0.999 - float32(0.999)| / (1 - 0.999) = 1.3e-5 relative at the first step (half
    # that after the square root), and 100 float32 additions add 100 ulps at most.
    reference, _ = movement(optax.adam(lr), jnp.float32)
    np.testing.assert_allclose(moved16, reference, rtol=1.3e-5 / 2 + STEPS * F32_EPS)
    np.testing.assert_allclose(moved16, STEPS * lr, rtol=1e-3)  # Adam's step is ~lr here


@pytest.mark.parametrize(
    "make",
    [
        lambda: optx.sgd(1e-8),
        lambda: optx.sgd(1e-8, momentum=0.9),
        lambda: optx.sgd(1e-8, momentum=0.9, momentum_convention="keras"),
    ],
    ids=["sgd", "momentum", "keras-momentum"],
)
def test_sgd_with_float16_gradients_makes_steps_below_float16s_range(make: Any) -> None:
    # 0.5 * 1e-8 rounds to 0 in float16 (its smallest subnormal is 6e-8).
    assert float(jnp.float16(0.5) * jnp.float16(1e-8)) == 0.0
    moved16, updates = movement(make(), jnp.float16)
    assert {u.dtype for u in jax.tree.leaves(updates)} == {jnp.dtype(jnp.float32)}
    moved32, _ = movement(make(), jnp.float32)
    assert moved16 == moved32 > 0


def test_stateful_adam_apply_with_float16_gradients_and_float32_variables() -> None:
    lr = 3e-8
    p = params()
    opt16, opt32 = optx.optimizers.Adam(learning_rate=lr), optx.optimizers.Adam(learning_rate=lr)
    p16, p32 = p, p
    for _ in range(STEPS):
        p16 = opt16.apply(grads(jnp.float16), p16)
        p32 = opt32.apply(grads(jnp.float32), p32)
    assert {x.dtype for x in jax.tree.leaves(p16)} == {jnp.dtype(jnp.float32)}
    # The same float32 step: only XLA's fusion may differ, by a few float32 ulps per step.
    np.testing.assert_allclose(
        np.asarray(p16["w"]), np.asarray(p32["w"]), rtol=4 * STEPS * F32_EPS, atol=0
    )
    moved = -float(p16["w"][0, 0])
    np.testing.assert_allclose(moved, STEPS * lr, rtol=5e-2)  # Keras's eps: ~lr per step


def test_wider_gradients_are_not_narrowed() -> None:
    # float32 gradients of bfloat16 parameters stay float32: `apply_updates` rounds the sum
    # once, where rounding the update first would round twice.
    p = {"w": jnp.zeros(3, jnp.bfloat16)}
    tx = optx.sgd(0.1)
    updates, _ = tx.update({"w": jnp.ones(3, jnp.float32)}, tx.init(p), p)
    assert updates["w"].dtype == jnp.float32
    # Without params nothing is known of their dtypes: the gradients' dtype is kept.
    updates, _ = tx.update({"w": jnp.ones(3, jnp.float16)}, tx.init(p))
    assert updates["w"].dtype == jnp.float16


def test_the_cast_adds_nothing_when_dtypes_match() -> None:
    tx, p = optx.adam(1e-3), params()
    state = tx.init(p)

    def equations(g: Any, with_params: bool) -> int:
        jaxpr = jax.make_jaxpr(lambda g, s, p: tx.update(g, s, p if with_params else None))
        return len(jaxpr(g, state, p).jaxpr.eqns)

    # Adam does not read the parameters: given them or not, the step is the same program.
    assert equations(grads(jnp.float32), True) == equations(grads(jnp.float32), False)
    # With float16 gradients it adds one convert per leaf, and nothing else.
    extra = equations(grads(jnp.float16), True) - equations(grads(jnp.float32), True)
    assert extra == len(jax.tree.leaves(p))


def test_missing_gradients_and_partial_trees_keep_their_leaves() -> None:
    # A `None` gradient (no gradient for that parameter) stays `None`; the others widen.
    p = params()
    tx = optx.skip_missing(optx.sgd(1e-8))
    g = {"w": jnp.full((2, 3), 0.5, jnp.float16), "b": None}
    updates, _ = tx.update(g, tx.init(p), p)
    assert updates["b"] is None and updates["w"].dtype == jnp.float32
