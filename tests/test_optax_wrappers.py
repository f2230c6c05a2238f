"""optax's wrapper transforms in optx, against optax: `MultiSteps`, `apply_every`,
`snapshot`, `monitor`, `measure_with_ema`, the conditional and freezing transforms, the
target-network updates and `masked` / `partition` with ``mask_compatible_extra_args``.

Numbers: both sides run in float64 with hyperparameters that float32 holds exactly (powers
of two), so only the float64 arithmetic of two orderings differs (tests/TOLERANCES.md).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import optx
from tests.helpers import EPS32, assert_close, roundoff_rtol, run64

EPS64 = float(np.finfo(np.float64).eps)
STEPS = 100
# SGD with momentum, hyperparameters float32 holds exactly and no bias correction (whose
# powers of a decay optx computes in float32): only float64 arithmetic differs.
LR, MOMENTUM = 2.0**-4, 0.5


def params_tree() -> dict:
    """A small nested tree: a matrix, a vector and a scalar."""
    return {"dense": {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}, "scale": jnp.ones(())}


def gradients(steps: int = STEPS, seed: int = 0, nan_at: tuple[int, ...] = ()) -> dict:
    """``steps`` gradients of `params_tree`'s structure (leading axis), NaN at ``nan_at``."""
    rng = np.random.default_rng(seed)
    grads = jax.tree.map(
        lambda p: rng.standard_normal((steps, *np.shape(p))).astype(np.float32), params_tree()
    )
    for t in nan_at:
        grads["dense"]["b"][t, 0] = np.nan
    return grads


def sgd_x(name: str = "optx") -> object:
    lib = optx if name == "optx" else optax
    return lib.sgd(LR, momentum=MOMENTUM)


def growing_k(gradient_step: jax.Array) -> jax.Array:
    """1, 2, 3, 4, then 4 micro-steps per update."""
    return jnp.minimum(gradient_step + 1, 4)


# Per real update the accumulated gradient differs by at most (k + 2) float64 roundings of
# max|g| (a sum of k terms, then the mean's division; optax's running mean has as many);
# momentum adds 2 roundings and keeps an error for 1 / (1 - momentum) = 2 steps. Over the
# steps the errors add, relative to the sum of the update sizes. k <= 4.
SGD_RTOL = STEPS * 2 * (4 + 2 + 2) * EPS64


def assert_runs_close(p1: dict, p2: dict, sizes: dict) -> None:
    """Final parameters within `SGD_RTOL` of each leaf's summed update sizes."""
    leaves = zip(jax.tree.leaves(p1), jax.tree.leaves(p2), jax.tree.leaves(sizes), strict=True)
    for got, want, size in leaves:
        np.testing.assert_allclose(got, want, rtol=0, atol=SGD_RTOL * float(size))


@pytest.mark.parametrize(
    ("k", "mean", "nan_at"),
    [(3, False, ()), (growing_k, True, (4, 5, 30, 77))],
    ids=["int_sum", "schedule_mean_skip_not_finite"],
)
def test_multisteps_matches_optax(k, mean, nan_at) -> None:
    skip = optx.skip_not_finite if nan_at else None
    ours = optx.MultiSteps(sgd_x(), k, mean, skip, jnp.float64)
    with jax.enable_x64(True):  # optax casts float64 to float32 outside x64
        theirs = optax.MultiSteps(
            sgd_x("optax"), k, mean, optax.skip_not_finite if nan_at else None, jnp.float64
        )
    grads = gradients(nan_at=nan_at)
    p1, s1, sizes = run64(ours, optx.apply_updates, params_tree(), grads)
    p2, s2, _ = run64(theirs, optax.apply_updates, params_tree(), grads)
    assert_runs_close(p1, p2, sizes)
    assert int(s1.mini_step) == int(s2.mini_step)
    assert int(s1.gradient_step) == int(s2.gradient_step) > 0
    if nan_at:
        assert int(s1.skip_state["num_not_finite"]) == int(s2.skip_state["num_not_finite"]) == 0
        assert bool(s1.skip_state["should_skip"]) == bool(s2.skip_state["should_skip"])


def test_accumulate_gradients_is_multisteps() -> None:
    tx = optx.accumulate_gradients(optx.sgd(0.5), growing_k, use_grad_mean=False)
    assert isinstance(tx, optx.MultiSteps)
    assert isinstance(tx.init({"w": jnp.zeros(1)}), optx.AccumulateGradientsState)
    assert repr(tx).startswith(
        "accumulate_gradients(inner="
    ) and "every_k=<function growing_k" in repr(tx)
    assert tx.inner_opt is tx.opt and tx.gradient_transformation() is tx
    # k = 1, 2: the second real update sums the next two gradients.
    params = {"w": jnp.zeros(1)}
    state, out = tx.init(params), []
    for g in (1.0, 2.0, 4.0):
        u, state = tx.update({"w": jnp.array([g])}, state, params)
        out.append(float(u["w"][0]))
    assert out == [-0.5, 0.0, -3.0]


def test_has_updated_matches_optax() -> None:
    ours = optx.MultiSteps(optx.sgd(0.5), every_k_schedule=growing_k)
    theirs = optax.MultiSteps(optax.sgd(0.5), every_k_schedule=growing_k)
    params = {"w": jnp.zeros(2)}
    s1, s2 = ours.init(params), theirs.init(params)
    step1, step2 = jax.jit(ours.update), jax.jit(theirs.update)
    flags = []
    for t in range(7):
        g = {"w": jnp.full(2, float(t))}
        _, s1 = step1(g, s1, params)
        _, s2 = step2(g, s2, params)
        flags.append(bool(ours.has_updated(s1)))
        assert flags[-1] == bool(theirs.has_updated(s2))
    assert flags == [True, False, True, False, False, True, False]


def test_multisteps_errors() -> None:
    with pytest.raises(
        ValueError,
        match=re.escape("`MultiSteps` needs every_k_schedule to be an int >= 1. Received: "),
    ):
        optx.MultiSteps(optx.sgd(0.1), 0)
    with pytest.raises(TypeError, match=re.escape("`MultiSteps` needs opt to be a transform")):
        optx.MultiSteps(3, 2)
    with pytest.raises(
        TypeError, match=re.escape("`MultiSteps` needs should_skip_update_fn to be None or a")
    ):
        optx.MultiSteps(optx.sgd(0.1), 2, should_skip_update_fn=3)
    with pytest.raises(
        ValueError, match=re.escape("`accumulate_gradients` needs every_k to be an int >= 1.")
    ):
        optx.accumulate_gradients(optx.sgd(0.1), -1)

    def not_bool(updates, step, params):
        return jnp.zeros(2), ()

    tx = optx.MultiSteps(optx.sgd(0.1), 2, should_skip_update_fn=not_bool)
    params = {"w": jnp.zeros(2)}
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`MultiSteps.update` needs should_skip_update_fn to return a scalar bool first. "
            "Received: an array of dtype float32 and shape (2,)."
        ),
    ):
        tx.update(params, tx.init(params), params)


def test_skip_functions_match_optax() -> None:
    @jax.jit
    def both(g):
        return [
            (optx.skip_not_finite(g, 0, None), optax.skip_not_finite(g, 0, None)),
            (
                optx.skip_large_updates(g, 0, None, max_squared_norm=3.0),
                optax.skip_large_updates(g, 0, None, max_squared_norm=3.0),
            ),
        ]

    for g, skips in [
        ({"a": jnp.array([1.0, jnp.inf]), "b": jnp.array([[jnp.nan, 2.0]])}, (True, True)),
        ({"a": jnp.array([1.0, 0.5]), "b": jnp.array([[-1.0, 0.0]])}, (False, False)),
    ]:
        for (ours, theirs), skip in zip(both(g), skips, strict=True):
            assert jax.tree.structure(ours) == jax.tree.structure(theirs)
            assert bool(ours[0]) == bool(theirs[0]) == skip
            for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_apply_every_matches_optax() -> None:
    grads = gradients()
    p1, s1, _ = run64(optx.apply_every(3), optx.apply_updates, params_tree(), grads)
    p2, s2, _ = run64(optax.apply_every(3), optax.apply_updates, params_tree(), grads)
    # The same additions in the same order: exact but for one rounding of each update
    # added to the parameters per step.
    assert_close("apply_every", p1, p2, rtol=roundoff_rtol(STEPS, 1, eps=EPS64))
    assert int(s1.count) == int(s2.count)
    with pytest.raises(ValueError, match=re.escape("`apply_every` needs k to be an int >= 1.")):
        optx.apply_every(0)


def test_snapshot_and_monitor_match_optax() -> None:
    clip = 1.0

    def build(lib):
        return lib.chain(
            lib.sgd(0.1, momentum=0.9),
            lib.snapshot("before", lib.tree.norm if lib is optx else optax.tree.norm),
            lib.monitor(
                {
                    "norm": optx.tree.norm,
                    "clipped": lib.measure_with_ema(lambda u: optx.tree.norm(u) > clip, 0.5),
                }
            ),
            lib.clip_by_global_norm(clip),
        )

    ours, theirs = build(optx), build(optax)
    params = params_tree()
    s1, s2 = ours.init(params), theirs.init(params)
    assert set(s1[2].measurements) == {"norm", "clipped"}  # zeros before the first step
    step1, step2 = jax.jit(ours.update), jax.jit(theirs.update)
    grads = gradients(10)
    for t in range(10):
        g = jax.tree.map(lambda x, t=t: x[t], grads)
        u1, s1 = step1(g, s1)
        u2, s2 = step2(g, s2)
    # A norm is a sum of 9 squares (9 roundings) and a square root: a few eps; the
    # momentum before it adds a rounding per step. The EMA of 0/1 values, 2 per step.
    rtol = roundoff_rtol(10, 3, reduced=9)
    assert_close("updates", u1, u2, rtol=rtol)
    assert_close("snapshot", s1[1].measurement, s2[1].measurement, rtol=rtol)
    assert_close("monitor", s1[2].measurements, s2[2].measurements, rtol=rtol)


def test_measure_with_ema_schedule() -> None:
    # decay 0.5 then 0.25 (a schedule): the EMA of 1.0, 3.0, debiased.
    tx = optx.monitor(
        {"m": optx.measure_with_ema(lambda u: u["w"][0], lambda c: jnp.where(c < 1, 0.5, 0.25))}
    )
    state = tx.init({"w": jnp.zeros(1)})
    for g in (1.0, 3.0):
        _, state = tx.update({"w": jnp.array([g])}, state)
    assert float(optx.get_hyperparams(state)["decay"]) == 0.25
    # a1 = 0.5; a2 = 0.25 * 0.5 + 0.75 * 3 = 2.375; debiased by 1 - 0.25**2 (optx's
    # bias correction reads the decay in force).
    np.testing.assert_allclose(float(state.measurements["m"]), 2.375 / (1 - 0.25**2), rtol=EPS32)
    with pytest.raises(
        ValueError,
        match=re.escape("`measure_with_ema` needs decay in [0, 1]. Received: decay=1.5."),
    ):
        optx.measure_with_ema(optx.tree.norm, 1.5)


def test_monitor_errors() -> None:
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`monitor` needs measures to be a dict of measurement names to functions or "
            "transforms. Received: measures=scale(step_size=0.1). To wrap an optimizer and "
            "record its norms and learning rate (optx's former `monitor(inner)`), use "
            "`optx.monitored(inner)`."
        ),
    ):
        optx.monitor(optx.scale(0.1))
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`monitor` needs each measurement to be a function or a transform. "
            "Received: measures['a']=3."
        ),
    ):
        optx.monitor({"a": 3})
    with pytest.raises(TypeError, match=re.escape("`monitor` needs measures to be a dict")):
        optx.monitor([optx.tree.norm])
    with pytest.raises(TypeError, match=re.escape("`snapshot` needs measure_name to be a str.")):
        optx.snapshot(3, optx.tree.norm)
    with pytest.raises(
        TypeError, match=re.escape("`snapshot` needs measure to be a callable updates -> ")
    ):
        optx.snapshot("n", 3)


def every_third(step: jax.Array) -> jax.Array:
    return step % 3 == 0


def loss_is_small(step: jax.Array, *, loss: jax.Array) -> jax.Array:
    return loss < 0.5


@pytest.mark.parametrize("name", ["conditionally_transform", "conditionally_mask"])
def test_conditional_matches_optax(name: str) -> None:
    ours = getattr(optx, name)(sgd_x(), every_third)
    theirs = getattr(optax, name)(sgd_x("optax"), every_third)
    grads = gradients(30)
    p1, s1, sizes = run64(ours, optx.apply_updates, params_tree(), grads)
    p2, s2, _ = run64(theirs, optax.apply_updates, params_tree(), grads)
    # Adam's ops in another order: a few roundings per step, in float64.
    assert_runs_close(p1, p2, sizes)
    assert int(s1.step) == int(s2.step) == 30
    # forward_extra_args passes `loss` on.
    tx = getattr(optx, name)(optx.sgd(1.0), loss_is_small, forward_extra_args=True)
    params = {"w": jnp.zeros(1)}
    u, _ = tx.update({"w": jnp.ones(1)}, tx.init(params), loss=jnp.float32(0.1))
    assert float(u["w"][0]) == -1.0


def test_conditional_errors() -> None:
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`conditionally_mask` needs should_transform_fn to be a callable step -> bool. "
            "Received: should_transform_fn=3."
        ),
    ):
        optx.conditionally_mask(optx.sgd(0.1), 3)
    tx = optx.conditionally_transform(optx.sgd(0.1), lambda step: step)
    params = {"w": jnp.zeros(1)}
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`conditionally_transform.update` needs should_transform_fn to return a scalar "
            "bool. Received: an array of dtype int32 and shape ()."
        ),
    ):
        tx.update(params, tx.init(params))


def test_freezing_matches_optax() -> None:
    mask = {"dense": {"w": True, "b": False}, "scale": False}
    grads = gradients(10)
    for ours, theirs in [
        (optx.freeze(mask), optax.freeze(mask)),
        (
            optx.selective_transform(sgd_x(), freeze_mask=mask),
            optax.selective_transform(sgd_x("optax"), freeze_mask=mask),
        ),
    ]:
        p1, _, sizes = run64(ours, optx.apply_updates, params_tree(), grads)
        p2, _, _ = run64(theirs, optax.apply_updates, params_tree(), grads)
        assert_runs_close(p1, p2, sizes)
        assert_close("frozen", p1["dense"]["w"], params_tree()["dense"]["w"], rtol=0)
    # One bool freezes every parameter, or none.
    params = params_tree()
    for frozen in (True, False):
        tx = optx.selective_transform(optx.sgd(1.0), freeze_mask=frozen)
        u, _ = tx.update(params, tx.init(params))
        assert float(optx.tree.norm(u)) == (0.0 if frozen else float(optx.tree.norm(params)))
    with pytest.raises(
        TypeError,
        match=re.escape("`selective_transform` needs freeze_mask to be a bool or a pytree"),
    ):
        optx.selective_transform(optx.sgd(0.1), freeze_mask=lambda p: p)


def test_target_updates_match_optax() -> None:
    new, old = params_tree(), jax.tree.map(lambda p: p - 3.0, params_tree())

    @jax.jit
    def both(step):
        return [
            (optx.periodic_update(new, old, step, 2), optax.periodic_update(new, old, step, 2)),
            (optx.incremental_update(new, old, 0.3), optax.incremental_update(new, old, 0.3)),
        ]

    for step in (0, 3, 4):
        (p1, p2), (i1, i2) = both(jnp.int32(step))
        assert_close("periodic", p1, p2, rtol=0)
        assert float(p1["scale"]) == (1.0 if step % 2 == 0 else -2.0)
        # tau * new + (1 - tau) * old: the same three roundings on both sides.
        assert_close("incremental", i1, i2, rtol=0)


def scaled_by(updates, state, params=None, *, weights, **extra):
    """An inner optax transform reading per-parameter ``weights`` (params' structure)."""
    return jax.tree.map(lambda u, w: u * w, updates, weights), state


def inner_tx() -> optax.GradientTransformationExtraArgs:
    return optax.GradientTransformationExtraArgs(lambda p: optax.EmptyState(), scaled_by)


def test_mask_compatible_extra_args_match_optax() -> None:
    params = params_tree()
    grads = jax.tree.map(lambda p: jnp.full(jnp.shape(p), 2.0), params)
    weights = jax.tree.map(lambda p: jnp.full(jnp.shape(p), 3.0), params)
    mask = {"dense": {"w": True, "b": False}, "scale": True}
    labels = {"dense": {"w": "a", "b": "b"}, "scale": "a"}
    cases = [
        (
            optx.masked(inner_tx(), mask, mask_compatible_extra_args=True),
            optax.masked(inner_tx(), mask, mask_compatible_extra_args=True),
        ),
        (
            optx.partition(
                {"a": inner_tx(), "b": optx.scale(0.5)}, labels, mask_compatible_extra_args=True
            ),
            optax.partition(
                {"a": inner_tx(), "b": optax.scale(0.5)}, labels, mask_compatible_extra_args=True
            ),
        ),
    ]
    for ours, theirs in cases:
        u1, _ = ours.update(grads, ours.init(params), params, weights=weights, other=1.0)
        u2, _ = theirs.update(grads, theirs.init(params), params, weights=weights, other=1.0)
        assert_close("masked extra", u1, u2, rtol=0)
        assert float(u1["dense"]["w"][0, 0]) == 6.0
    # Without the option the inner transform gets the whole tree, and fails on both sides.
    with pytest.raises(ValueError):
        tx = optx.masked(inner_tx(), mask)
        tx.update(grads, tx.init(params), params, weights=weights)


# -- optx.microbatching against optax.microbatching ---------------------------------------

KINDS = ("SUM", "MEAN", "RUNNING_MEAN", "CONCAT")


def test_microbatch_matches_optax() -> None:
    x = jnp.asarray(np.random.default_rng(1).standard_normal((12, 3)), jnp.float32)
    y = jnp.arange(12.0)

    def fun(x, scale, *, y):
        return {"rows": x * scale + y[:, None], "total": jnp.sum(x) * scale, "y": jnp.sum(y)}

    @jax.jit
    def both(x, y, real):
        out = []
        for kind in KINDS:
            accs = [
                {
                    "rows": lib.microbatching.AccumulationType.CONCAT,
                    "total": getattr(lib.microbatching.AccumulationType, kind),
                    "y": getattr(lib.microbatching.AccumulationType, kind),
                }
                for lib in (optx, optax)
            ]
            runs = [
                lib.microbatch(fun, 0, 4, acc, argnames="y", num_real_microbatches=real)(
                    x, 2.0, y=y
                )
                for lib, acc in zip((optx, optax), accs, strict=True)
            ]
            out.append(runs)
        return out

    for real in (None, 2):
        for (ours, theirs), kind in zip(both(x, y, real), KINDS, strict=True):
            # The same sums in the same order (3 microbatches, one rounding each).
            assert_close(f"microbatch {kind}", ours, theirs, rtol=roundoff_rtol(1, 3))
    np.testing.assert_array_equal(
        optx.microbatching.reshape_batch_axis(x, 4), optax.microbatching.reshape_batch_axis(x, 4)
    )


def test_micro_vmap_and_micro_grad_match_optax() -> None:
    def loss(w, x, y):
        return 0.5 * jnp.mean((x @ w - y) ** 2), jnp.sum(x)

    w = jnp.array([0.5, -1.0])
    x = jnp.asarray(np.random.default_rng(2).standard_normal((8, 1, 2)), jnp.float32)
    y = jnp.asarray(np.random.default_rng(3).standard_normal((8, 1)), jnp.float32)

    @jax.jit
    def both(w, x, y):
        out = []
        for lib in (optx, optax):
            mb = lib.microbatching
            grad_fn = mb.micro_grad(
                loss,
                has_aux=True,
                batch_argnums=(1, 2),
                keep_batch_dim=False,
                microbatch_size=2,
                accumulator=mb.AccumulationType.MEAN,
                transform_fn=lambda g: (g, g**2),
                metrics_fn=jnp.linalg.norm,
            )
            vm = mb.micro_vmap(
                lambda a, b: a * b,
                in_axes=(0, None),
                microbatch_size=4,
                accumulator=mb.AccumulationType.SUM,
            )
            out.append((grad_fn(w, x, y), vm(x[:, 0, 0], 3.0)))
        return out

    ours, theirs = both(w, x, y)
    # optax's `Aux` is another class of the same name and fields.
    assert str(jax.tree.structure(ours)) == str(jax.tree.structure(theirs))
    # Per-example gradients as in optax, averaged in the same order: a rounding per
    # microbatch (4) and per product of the loss (a few).
    assert_close("micro_grad", ours, theirs, rtol=roundoff_rtol(1, 8))
    (_, aux), _ = ours
    assert type(aux).__name__ == "Aux" and aux.values.shape == (8,)


def test_microbatching_errors() -> None:
    f = optx.microbatch(lambda a, b: a + b, (0, 1), 2)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`microbatch` needs batch arguments with one batch size. Received: batch sizes [4, 6]."
        ),
    ):
        f(jnp.ones(4), jnp.ones(6))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`microbatch` needs a batch size that microbatch_size divides. Received: batch "
            "size 5, microbatch_size=2."
        ),
    ):
        f(jnp.ones(5), jnp.ones(5))
    mean = optx.microbatching.AccumulationType.MEAN
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`microbatch` needs floating-point results for a MEAN or RUNNING_MEAN accumulator. "
            "Received: a result of dtype int32."
        ),
    ):
        optx.microbatch(jnp.sum, 0, 2, mean)(jnp.arange(4))
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`microbatch` needs accumulator to be an Accumulator, an AccumulationType or a "
            "pytree of them. Received: 'sum'."
        ),
    ):
        optx.microbatch(jnp.sum, 0, 2, "sum")(jnp.arange(4.0))
    with pytest.raises(
        NotImplementedError,
        match=re.escape("`micro_vmap` needs out_axes=0 (the only one it supports)."),
    ):
        optx.microbatching.micro_vmap(jnp.sin, out_axes=1)
    assert optx.microbatch(jnp.sin, 0, None) is jnp.sin
