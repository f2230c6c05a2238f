"""`decay_before` (Keras's weight decay) and `ema_params(every_k=...)` (Keras's EMA under
gradient accumulation), against NumPy loops and the equivalent chains."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optx

RTOL = 1e-6  # float32 round-off over the steps below


def _params() -> dict[str, jax.Array]:
    rng = np.random.default_rng(0)
    return {
        "kernel": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32),
        "bias": jnp.asarray(rng.normal(size=3), jnp.float32),
    }


def _grads(n: int) -> list[dict[str, jax.Array]]:
    rng = np.random.default_rng(1)
    return [
        {k: jnp.asarray(rng.normal(size=v.shape), jnp.float32) for k, v in _params().items()}
        for _ in range(n)
    ]


def _run(tx: optx.GradientTransformationLike, steps: int = 20) -> dict[str, jax.Array]:
    params = _params()
    state = tx.init(params)
    step = jax.jit(tx.update)
    for g in _grads(steps):
        updates, state = step(g, state, params)
        params = optx.apply_updates(params, updates)
    return params


def test_equals_decayed_weights_before_the_learning_rate_for_adam() -> None:
    # Adam's step does not read the parameters: both orders give AdamW.
    ours = _run(optx.decay_before(optx.adam(0.01), 0.1, 0.01))
    adamw = _run(optx.adamw(0.01, weight_decay=0.1))
    for k in ours:
        np.testing.assert_allclose(ours[k], adamw[k], rtol=RTOL, atol=RTOL)


def test_lamb_reads_the_decayed_parameters_numpy() -> None:
    lr, wd, b1, b2, eps = 0.05, 0.1, 0.9, 0.999, 1e-6
    got = _run(optx.decay_before(optx.lamb(lr, b1, b2, eps), wd, lr), steps=30)
    params = {k: np.asarray(v, np.float64) for k, v in _params().items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(p) for k, p in params.items()}
    for t, g in enumerate(_grads(30), start=1):
        for k in params:
            gk = np.asarray(g[k], np.float64)
            w = params[k] - lr * wd * params[k]  # decayed before the step
            m[k] = b1 * m[k] + (1 - b1) * gk
            v[k] = b2 * v[k] + (1 - b2) * gk**2
            r = (m[k] / (1 - b1**t)) / (np.sqrt(v[k] / (1 - b2**t)) + eps)
            trust = np.linalg.norm(w) / np.linalg.norm(r)
            params[k] = w - lr * trust * r
    for k in params:
        np.testing.assert_allclose(got[k], params[k], rtol=1e-5, atol=1e-6)


def test_schedule_and_mask() -> None:
    schedule = optx.schedules.exponential_decay(0.1, 1, 0.5)
    tx = optx.decay_before(optx.sgd(schedule), 0.2, schedule, mask="kernel")
    params = {"kernel": jnp.ones(2), "bias": jnp.ones(2)}
    state = tx.init(params)
    zeros = optx.tree.zeros_like(params)
    for lr in (0.1, 0.05, 0.025):
        updates, state = tx.update(zeros, state, params)
        expected = params["kernel"] * (1 - lr * 0.2)
        params = optx.apply_updates(params, updates)
        np.testing.assert_allclose(params["kernel"], expected, rtol=RTOL)
        np.testing.assert_array_equal(params["bias"], jnp.ones(2))


def test_learning_rate_and_decay_are_dynamic() -> None:
    tx = optx.decay_before(optx.sgd(0.1), 0.5, 0.1)
    params = {"w": jnp.ones(1)}
    state = optx.set_hyperparams(tx.init(params), weight_decay=0.25)
    updates, _ = tx.update({"w": jnp.zeros(1)}, state, params)
    np.testing.assert_allclose(updates["w"], [-0.1 * 0.25], rtol=RTOL)


def test_inside_optax_chain() -> None:
    tx = optax.chain(optx.decay_before(optx.sgd(1.0), 0.004, 1.0))
    params = jnp.array(2.0)
    updates, _ = tx.update(jnp.array(0.0), tx.init(params), params)
    np.testing.assert_allclose(optax.apply_updates(params, updates), 1.992, rtol=RTOL)


def test_scheduled_weight_decay() -> None:
    # theta' = theta (1 - lr * wd_t): with wd_t = 0.1 * (t + 1), 2 -> 1.998 -> 1.994004.
    tx = optx.decay_before(optx.identity(), lambda c: 0.1 * (c + 1.0), 0.01)
    params, state = jnp.array(2.0), None
    state = tx.init(params)
    for expected in (1.998, 1.994004):
        updates, state = tx.update(jnp.array(0.0), state, params)
        params = optax.apply_updates(params, updates)
        np.testing.assert_allclose(params, expected, rtol=RTOL)


def test_errors() -> None:
    with pytest.raises(ValueError, match=re.escape("weight_decay")):
        optx.decay_before(optx.sgd(0.1), -0.1, 0.1)
    with pytest.raises(TypeError, match=re.escape("inner")):
        optx.decay_before("sgd", 0.1, 0.1)
    tx = optx.decay_before(optx.sgd(0.1), 0.1, 0.1)
    with pytest.raises(
        ValueError, match=re.escape("`decay_before.update` needs the current parameters")
    ):
        tx.update({"w": jnp.ones(1)}, tx.init({"w": jnp.ones(1)}))


def test_ema_every_k_follows_real_steps() -> None:
    # Keras 3 (keras-semantics §1.6): SGD(0.1), accumulation k=2, EMA momentum 0.5 copied
    # after the first real step: the averages are 0, -0.1, -0.1, -0.15 for gradients of 1.
    tx = optx.chain(
        optx.accumulate_gradients(optx.sgd(0.1), 2),
        optx.ema_params(0.5, start="first_step", every_k=2),
    )
    params = jnp.zeros(())
    state = tx.init(params)
    averages = []
    for _ in range(4):
        updates, state = tx.update(jnp.ones(()), state, params)
        params = optx.apply_updates(params, updates)
        averages.append(float(optx.ema_params_value(state)))
    np.testing.assert_allclose(averages, [0.0, -0.1, -0.1, -0.15], rtol=RTOL, atol=1e-8)


def test_ema_every_k_overwrites_during_the_whole_window() -> None:
    # The overwrite period counts real steps: with k=2 and period 2 the parameters become
    # the average on calls 3 and 4 (the second real step's window).
    tx = optx.chain(
        optx.accumulate_gradients(optx.sgd(1.0), 2),
        optx.ema_params(0.5, overwrite_frequency=2, every_k=2),
    )
    params = jnp.array(2.0)
    state = tx.init(params)
    seen = []
    for _ in range(4):
        updates, state = tx.update(jnp.ones(()), state, params)
        params = optx.apply_updates(params, updates)
        seen.append((float(params), float(optx.ema_params_value(state))))
    # Call 1 holds; call 2 steps to 1 (average 1.5); call 3 holds and overwrites (average
    # 1.25); call 4 steps to 0.25 from 1.25 and overwrites with the average 0.75.
    np.testing.assert_allclose(seen, [(2.0, 2.0), (1.0, 1.5), (1.25, 1.25), (0.75, 0.75)])
    with pytest.raises(ValueError, match=re.escape("every_k")):
        optx.ema_params(0.5, every_k=0)
