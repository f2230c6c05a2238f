"""`optx.monitored` and `optx.monitor_metrics`: per-step figures recorded in the state."""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32

import optx

RTOL = 1e-6  # float32 norms of a few dozen elements
FLOATS = ("grad_norm", "learning_rate", "update_norm", "update_ratio")


def make_params() -> dict:
    rng = np.random.RandomState(0)
    return {
        "a": rng.standard_normal((4, 3)).astype(np.float32),
        "b": [rng.standard_normal(5).astype(np.float32)],
    }


def make_grads(steps: int) -> list[dict]:
    rng = np.random.RandomState(1)
    return [
        jax.tree.map(lambda p: rng.standard_normal(p.shape).astype(np.float32), make_params())
        for _ in range(steps)
    ]


def global_norm(tree) -> float:
    return float(np.sqrt(sum(np.sum(np.square(np.float64(x))) for x in jax.tree.leaves(tree))))


def run(tx, grads, params):
    """Jitted steps of ``tx`` applying the updates; the metrics after each step."""
    state = tx.init(params)
    update = jax.jit(tx.update)
    out = []
    for g in grads:
        updates, state = update(g, state, params)
        params = optx.apply_updates(params, updates)
        out.append({k: np.asarray(v) for k, v in optx.monitor_metrics(state).items()})
    return out, state


def check(metrics, expected) -> None:
    for name, value in expected.items():
        np.testing.assert_allclose(metrics[name], value, rtol=RTOL, atol=0, err_msg=name)


def test_metrics_against_numpy_sgd_momentum() -> None:
    # Under jit; the conformance suite checks that eager steps give the same.
    lr, momentum, steps = 0.1, 0.9, 3
    params, grads = make_params(), make_grads(steps)
    got, _ = run(optx.monitored(optx.sgd(lr, momentum=momentum)), grads, params)
    p = jax.tree.map(np.float64, params)
    trace = jax.tree.map(np.zeros_like, p)
    for t, g in enumerate(grads):
        g = jax.tree.map(np.float64, g)
        trace = jax.tree.map(lambda m, x: momentum * m + x, trace, g)
        update = jax.tree.map(lambda m: -lr * m, trace)
        expected = {
            "grad_norm": global_norm(g),
            "update_norm": global_norm(update),
            "update_ratio": global_norm(update) / global_norm(p),
            "learning_rate": lr,
        }
        check(got[t], expected)
        assert int(got[t]["count"]) == t + 1 and int(got[t]["skipped_steps"]) == 0
        p = jax.tree.map(lambda x, u: x + u, p, update)
    assert {k: got[0][k].dtype for k in got[0]} == {
        "count": np.int32,
        "grad_norm": np.float32,
        "learning_rate": np.float32,
        "skipped_steps": np.int32,
        "update_norm": np.float32,
        "update_ratio": np.float32,
    }


def test_initial_metrics_and_ratio_without_params() -> None:
    tx = optx.monitored(optx.adam(1e-3))
    params = make_params()
    first = optx.monitor_metrics(tx.init(params))
    assert [float(first[k]) for k in ("count", "grad_norm", "update_norm", "skipped_steps")] == [
        0
    ] * 4
    assert np.isnan(first["learning_rate"])
    grads = make_grads(1)[0]
    update = jax.jit(tx.update)
    _, state = update(grads, tx.init(params), None)
    metrics = optx.monitor_metrics(state)
    assert float(metrics["update_ratio"]) == 0.0 and float(metrics["update_norm"]) > 0
    zeros = jax.tree.map(np.zeros_like, params)
    _, state = update(grads, tx.init(zeros), zeros)
    assert float(optx.monitor_metrics(state)["update_ratio"]) == 0.0


def test_learning_rate_follows_schedule_and_set_hyperparams() -> None:
    schedule = optx.schedules.linear_schedule(0.1, 0.01, transition_steps=4)
    params, grads = make_params(), make_grads(5)
    got, _ = run(optx.monitored(optx.adam(schedule)), grads, params)
    for t in range(5):
        expected = 0.1 + (0.01 - 0.1) * min(t, 4) / 4
        np.testing.assert_allclose(got[t]["learning_rate"], expected, rtol=RTOL)
    # A dynamic learning rate is read from the state: a change shows in the next step.
    tx = optx.monitored(optx.chain(optx.clip(1.0), optx.sgd(0.1)))
    state = optx.set_hyperparams(tx.init(params), learning_rate=0.03)
    _, state = jax.jit(tx.update)(grads[0], state, params)
    np.testing.assert_allclose(optx.monitor_metrics(state)["learning_rate"], 0.03, rtol=RTOL)
    # No learning rate anywhere: NaN.
    tx = optx.monitored(optx.scale_by_adam())
    _, state = tx.update(grads[0], tx.init(params), params)
    assert np.isnan(optx.monitor_metrics(state)["learning_rate"])


def test_learning_rate_of_optax_inner_transforms() -> None:
    params, grads = make_params(), make_grads(3)
    schedule = optax.exponential_decay(0.2, transition_steps=1, decay_rate=0.5)
    tx = optx.monitored(optax.inject_hyperparams(optax.sgd)(learning_rate=schedule))
    got, _ = run(tx, grads, params)
    for t in range(3):
        np.testing.assert_allclose(got[t]["learning_rate"], 0.2 * 0.5**t, rtol=RTOL)


def test_skipped_steps_of_apply_if_finite_and_dynamic_loss_scale() -> None:
    params = make_params()
    grads = make_grads(4)
    bad = jax.tree.map(lambda g: g.copy(), grads[1])
    bad["a"][0, 0] = np.nan
    grads[1] = grads[3] = bad
    for inner in (
        optx.chain(optx.clip(1.0), optx.apply_if_finite(optx.adam(1e-2), 3)),
        optx.dynamic_loss_scale(optx.adam(1e-2), initial_scale=2.0, growth_interval=1),
        optax.apply_if_finite(optax.adam(1e-2), 3),
    ):
        got, _ = run(optx.monitored(inner), grads, params)
        assert [int(m["skipped_steps"]) for m in got] == [0, 1, 1, 2], inner
        # A skipped step returns zero updates.
        assert float(got[1]["update_norm"]) == 0.0 and np.isnan(got[1]["grad_norm"])
    got, _ = run(optx.monitored(optx.adam(1e-2)), grads[:1], params)
    assert int(got[0]["skipped_steps"]) == 0


def test_inside_optx_and_optax_chains_and_bfloat16() -> None:
    params, grads = make_params(), make_grads(2)
    alone, _ = run(optx.monitored(optx.adam(1e-2)), grads, params)
    for tx in (
        optx.chain(optx.identity(), optx.monitored(optx.adam(1e-2))),
        optax.chain(optax.identity(), optx.monitored(optx.adam(1e-2))),
    ):
        got, _ = run(tx, grads, params)
        for a, b in zip(alone, got, strict=True):
            check(b, {k: a[k] for k in FLOATS})
    half = jax.tree.map(lambda x: jnp.asarray(x, jnp.bfloat16), params)
    half_grads = [jax.tree.map(lambda x: jnp.asarray(x, jnp.bfloat16), g) for g in grads]
    got, _ = run(optx.monitored(optx.sgd(0.5)), half_grads, half)
    assert got[0]["grad_norm"].dtype == np.float32
    # The norm of the bfloat16 values, summed in float32.
    expected = global_norm(jax.tree.map(lambda x: np.asarray(x, np.float32), half_grads[0]))
    np.testing.assert_allclose(got[0]["grad_norm"], expected, rtol=RTOL)


def test_inside_flatten_equals_per_leaf() -> None:
    params, grads = make_params(), make_grads(2)
    alone, _ = run(optx.monitored(optx.adam(1e-2)), grads, params)
    flat, _ = run(optx.flatten(optx.monitored(optx.adam(1e-2))), grads, params)
    for a, b in zip(alone, flat, strict=True):
        check(b, {k: a[k] for k in FLOATS})


def test_from_the_stateful_layer() -> None:
    opt = optx.optimizers.Optimizer(optx.monitored(optx.adam(1e-2)))
    params, grads = make_params(), make_grads(2)
    expected, _ = run(optx.monitored(optx.adam(1e-2)), grads, params)
    for g in grads:
        params = opt.apply(g, params)
    variables = opt.variables
    got = {k.rsplit("/", 1)[-1]: v for k, v in variables.items() if "/metrics/" in k}
    assert sorted(got) == sorted(expected[-1])
    check(got, {k: expected[-1][k] for k in FLOATS})
    assert int(got["count"]) == 2
    np.testing.assert_allclose(opt.learning_rate, 1e-2, rtol=RTOL)


def test_errors() -> None:
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`monitored` needs inner to be a transform with `init` and `update` methods (an optx "
            "or optax transform). Received: inner=3."
        ),
    ):
        optx.monitored(3)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`monitor_metrics` needs a state holding exactly one `monitored` state. "
            "Received: a state holding 0."
        ),
    ):
        optx.monitor_metrics(optx.adam(1e-3).init(make_params()))
    two = optx.chain(optx.monitored(optx.clip(1.0)), optx.monitored(optx.sgd(0.1)))
    with pytest.raises(ValueError, match=re.escape("Received: a state holding 2.")):
        optx.monitor_metrics(two.init(make_params()))


def test_complex_parameters_have_the_norms_of_their_moduli() -> None:
    tx = optx.monitored(optx.sgd(0.5))
    params = {"w": jnp.array([3.0 + 4.0j, 0.0], jnp.complex64), "b": jnp.array([1.0], jnp.float32)}
    grads = {"w": jnp.array([1.0j, 2.0 - 2.0j], jnp.complex64), "b": jnp.array([2.0], jnp.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning from a cast to real
        updates, state = tx.update(grads, tx.init(params), params)
    metrics = optx.monitor_metrics(state)
    # |g|^2 = 1 + 8 + 4, |p|^2 = 25 + 1, the updates are -0.5 g.
    np.testing.assert_allclose(float(metrics["grad_norm"]), np.sqrt(13.0), rtol=2 * EPS32)
    np.testing.assert_allclose(float(metrics["update_norm"]), 0.5 * np.sqrt(13.0), rtol=2 * EPS32)
    np.testing.assert_allclose(
        float(metrics["update_ratio"]), 0.5 * np.sqrt(13.0 / 26.0), rtol=4 * EPS32
    )
    assert updates["w"].dtype == jnp.complex64
