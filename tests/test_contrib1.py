"""optax.contrib's learning-rate-free methods: D-Adaptation, DoG, DoWG, layer-wise DoG,
COCOB, Mechanic and MoMo.

Parity with optax (100 jitted steps on a nested pytree, both in float64), NumPy float64
loops where optax has a known weakness (D-Adaptation's 0 / 0, Mechanic's update as a
difference of parameters), optax's signatures, and every error message of these modules.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32, assert_close, roundoff_rtol

import optx

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)


def f32(value: Any) -> Any:
    """Numbers rounded to float32 (as optx holds hyperparameters); other values as they are."""
    if isinstance(value, tuple | list):
        return type(value)(f32(v) for v in value)
    if isinstance(value, float):
        return float(np.float32(value))
    return value


# ---------------------------------------------------------------------------------------
# The problem: a quadratic loss whose minimum moves at each step, on a nested tree.


def nested_params(scalar: bool = True) -> Any:
    """A dict and a list; a matrix, a vector and (optionally) a scalar (few leaves: quick
    to compile)."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape)

    tree: dict[str, Any] = {"dense": {"kernel": normal(3, 4)}, "blocks": [normal(5)]}
    if scalar:
        tree["scale"] = normal()
    return tree


def problem(scalar: bool = True) -> tuple[Any, Any, Any]:
    """Parameters, curvatures in [0.5, 2] and per-step targets near 1 (leading axis: step)."""
    params = nested_params(scalar)
    rng = np.random.default_rng(1)
    curv = jax.tree.map(lambda p: rng.uniform(0.5, 2.0, np.shape(p)), params)
    targets = jax.tree.map(lambda p: 1 + 0.5 * rng.standard_normal((STEPS, *np.shape(p))), params)
    return params, curv, targets


def loss(p: Any, curv: Any, target: Any) -> jax.Array:
    terms = jax.tree.map(lambda x, a, c: 0.5 * jnp.sum(a * (x - c) ** 2), p, curv, target)
    return sum(jax.tree.leaves(terms))


def kernels(params: Any) -> Any:
    """A weight-decay mask: the leaves of ``dense``."""
    return {k: jax.tree.map(lambda _, k=k: k == "dense", v) for k, v in params.items()}


@functools.lru_cache(maxsize=64)
def _runner(tx: Any, apply_updates: Callable[..., Any], with_value: bool) -> Callable:
    @jax.jit
    def go(params: Any, curv: Any, targets: Any) -> tuple:
        def step(carry: tuple, target: Any) -> tuple:
            p, s = carry
            value, g = jax.value_and_grad(loss)(p, curv, target)
            extra = {"value": value} if with_value else {}
            u, s = tx.update(g, s, p, **extra)
            return (apply_updates(p, u), s), jax.tree.map(lambda x: jnp.max(jnp.abs(x)), u)

        (p, s), sizes = jax.lax.scan(step, (params, tx.init(params)), targets)
        return p, s, jax.tree.map(jnp.sum, sizes)

    return go


def run64(tx: Any, apply_updates: Callable[..., Any], with_value: bool, scalar: bool = True):
    """``tx`` over STEPS steps of the problem, in float64; NumPy results (final params,
    state, per leaf ``sum_t max|u_t|``)."""
    with jax.enable_x64(True):
        data = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), problem(scalar))
        return jax.tree.map(np.asarray, _runner(tx, apply_updates, with_value)(*data))


# ---------------------------------------------------------------------------------------
# Parity with optax. Both sides run in float64 and get the same hyperparameters, rounded to
# float32 as optx holds them (`f32`, optax's defaults included): optx's ``1 - b`` of a
# float32 ``b`` is then exact, and its bias corrections and products of hyperparameters are
# computed in the estimates' dtype (float64 here), so the two compute the same numbers and
# differ only by float64 round-off. Per step a value goes through at most OPS = 32
# roundings and reductions over the N elements (each off by ``N * EPS64`` of its terms'
# size, Higham 2002, section 3.1). Over STEPS steps these add; the steps are continuous maps
# (max, min, clip and where pick between continuous branches) whose perturbations may also
# grow. The references' own sensitivity to a relative perturbation of the initial
# parameters is at most about 2 in these runs (they contract: curvature at most 2, bounded
# step sizes), but a perturbation of a scalar estimate passes through a ratio of sums that
# may cancel (D-Adaptation's and MoMo's estimates, Mechanic's ``h``); GROWTH = 1e3 allows
# for that cancellation (terms up to 1e3 times their sum). A learning rate off by 1e-3 lands
# far outside (`test_parity_bounds_catch_a_learning_rate_off_by_1e3`).
N = sum(np.size(p) for p in jax.tree.leaves(nested_params()))
OPS = 32
GROWTH = 1e3
RTOL = STEPS * (OPS + N) * EPS64 * GROWTH


# An inner optimizer with float32 hyperparameters (optx's Adam computes its bias corrections
# in float32, so only SGD keeps the comparison at float64 round-off).
def mechanic_nesterov(module: Any) -> Any:
    return module.sgd(f32(0.5), momentum=f32(0.5), nesterov=True)


# name: (optx factory, optax factory, keyword arguments, update needs value=, params with a
# scalar leaf). Keyword arguments that are callables of the module build inner optimizers.
CASES: dict[str, tuple[Any, ...]] = {
    "dadapt_adamw": (optx.dadapt_adamw, optax.contrib.dadapt_adamw, {}, False, True),
    "dadapt_adamw/options": (
        optx.dadapt_adamw,
        optax.contrib.dadapt_adamw,
        dict(learning_rate=0.5, betas=(0.8, 0.99), eps=1e-6, estim_lr0=1e-3, weight_decay=0.1),
        False,
        True,
    ),
    "dog": (optx.dog, optax.contrib.dog, {}, False, True),
    "dog/learning_rate_mask": (
        optx.dog,
        optax.contrib.dog,
        dict(
            learning_rate=0.5,
            init_step=("learning_rate", 0.1),
            eps=1e-6,
            weight_decay=0.1,
            mask=kernels,
        ),
        False,
        True,
    ),
    "dowg/options": (
        optx.dowg,
        optax.contrib.dowg,
        dict(learning_rate=0.5, init_estim_sq_dist=0.01, eps=1e-3, weight_decay=0.1),
        False,
        True,
    ),
    # optax's sums of squares have shape (1,): a scalar parameter would become shape (1,).
    "scale_by_distance_over_gradients/options": (
        optx.scale_by_distance_over_gradients,
        optax.scale_by_distance_over_gradients,
        dict(reps_rel=1e-3, eps=1e-4, param_dtype=jnp.float64, global_scale=-0.5),
        False,
        False,
    ),
    "cocob/options": (
        optx.cocob,
        optax.contrib.cocob,
        dict(learning_rate=0.5, alpha=10.0, eps=1e-6, weight_decay=0.1, mask=kernels),
        False,
        True,
    ),
    "mechanize/options": (
        optx.mechanize,
        optax.contrib.mechanize,
        dict(
            base_optimizer=mechanic_nesterov, weight_decay=0.1, eps=1e-6, s_init=1e-4, num_betas=4
        ),
        False,
        True,
    ),
    "momo/adaptive": (
        optx.momo,
        optax.contrib.momo,
        dict(
            learning_rate=0.5, beta=0.8, lower_bound=-1.0, weight_decay=0.1, adapt_lower_bound=True
        ),
        True,
        True,
    ),
    "momo_adam/options": (
        optx.momo_adam,
        optax.contrib.momo_adam,
        dict(learning_rate=0.1, b1=0.8, b2=0.99, eps=1e-6, lower_bound=-1.0, weight_decay=0.1),
        True,
        True,
    ),
}


def _build(factory: Any, module: Any, kwargs: dict[str, Any], lr_factor: float = 1.0) -> Any:
    # optax's numeric defaults too, rounded to float32, so that both get the same numbers.
    defaults = inspect.signature(getattr(optax.contrib, factory.__name__, None) or factory)
    kwargs = {
        **{
            k: p.default
            for k, p in defaults.parameters.items()
            if isinstance(p.default, float | tuple)
        },
        **kwargs,
    }
    built = {}
    for name, value in kwargs.items():
        built[name] = value(module) if callable(value) and name == "base_optimizer" else f32(value)
    if lr_factor != 1.0:
        built["learning_rate"] = built.get("learning_rate", 1.0) * lr_factor
    return factory(**built)


def parity_error(name: str, lr_factor: float = 1.0) -> float:
    """The largest error of optx's parameters against optax's, over RTOL."""
    ours, theirs, kwargs, with_value, scalar = CASES[name]
    tx = _build(ours, optx, kwargs, lr_factor)
    ref = _build(theirs, optax, kwargs)
    got, _, _ = run64(tx, optx.apply_updates, with_value, scalar)
    expected, _, _ = run64(ref, optax.apply_updates, with_value, scalar)
    start = nested_params(scalar)
    moved = jax.tree.map(lambda a, b: np.max(np.abs(a - b)), expected, start)
    assert min(jax.tree.leaves(moved)) > 1e-6, f"{name}: a leaf did not move: {moved}"
    worst = 0.0
    for a, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        scale = max(float(np.max(np.abs(e))), 1.0)
        worst = max(worst, float(np.max(np.abs(a - e))) / scale / RTOL)
    return worst


@pytest.mark.parametrize("name", sorted(CASES))
def test_parity_with_optax(name: str) -> None:
    error = parity_error(name)
    print(f"{name}: max error / bound {error:.3g}")
    assert error <= 1.0


@pytest.mark.parametrize("name", ["dog"])
def test_parity_bounds_catch_a_learning_rate_off_by_1e3(name: str) -> None:
    error = parity_error(name, 1.001)
    print(f"{name} x 1.001: max error / bound {error:.3g}")
    assert error > 100.0


# ---------------------------------------------------------------------------------------
# Where optax is weaker, against NumPy float64 loops.


def numpy_dadapt(params, grads, lr=1.0, b1=0.9, b2=0.999, eps=1e-8, d0=1e-6, wd=0.0):
    """D-Adaptation AdamW in float64, keeping the estimate while ``||s||_1 = 0``."""
    p = [np.array(x, np.float64) for x in params]
    m, v, s = ([np.zeros_like(x) for x in p] for _ in range(3))
    d, r, sb2 = d0, 0.0, np.sqrt(b2)
    for t, g in enumerate(grads, start=1):
        dlr = d * lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        num = sum(np.vdot(gi, si / (np.sqrt(vi) + eps)) for gi, si, vi in zip(g, s, v, strict=True))
        m = [b1 * mi + (1 - b1) * dlr * gi for mi, gi in zip(m, g, strict=True)]
        v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g, strict=True)]
        s = [sb2 * si + (1 - sb2) * dlr * gi for si, gi in zip(s, g, strict=True)]
        r = sb2 * r + (1 - sb2) * dlr * num
        den = (1 - sb2) * sum(np.sum(np.abs(si)) for si in s)
        if den > 0:
            d = max(d, r / den)
        p = [x - wd * dlr * x - mi / (np.sqrt(vi) + eps) for x, mi, vi in zip(p, m, v, strict=True)]
    return p, d


def _scan_grads(tx: Any, params: Any, grads: Any) -> tuple:
    def step(carry: tuple, g: Any) -> tuple:
        p, s = carry
        u, s = tx.update(g, s, p)
        return (jax.tree.map(lambda a, b: a + b, p, u), s), None

    return jax.lax.scan(step, (params, tx.init(params)), grads)[0]


def test_dadapt_adamw_keeps_its_estimate_through_zero_gradients() -> None:
    # Two steps of zero gradients, then random ones: optax's estimate is 0 / 0 = NaN from
    # the first step on; optx keeps d0 until the gradients move, as the NumPy loop does.
    params = {"a": np.ones(3), "b": -np.ones((2, 2))}
    rng = np.random.default_rng(2)
    grads = jax.tree.map(lambda p: rng.standard_normal((20, *np.shape(p))), params)
    grads = jax.tree.map(lambda g: g * (np.arange(20) >= 2).reshape(-1, *[1] * (g.ndim - 1)), grads)
    hyper = dict(learning_rate=0.5, betas=(0.875, 0.9921875), eps=2.0**-20, estim_lr0=2.0**-10)
    with jax.enable_x64(True):
        args = jax.tree.map(jnp.asarray, (params, grads))
        got, state = jax.jit(functools.partial(_scan_grads, optx.dadapt_adamw(**hyper)))(*args)
        theirs = optax.contrib.dadapt_adamw(**hyper)
        _, their_state = jax.jit(functools.partial(_scan_grads, theirs))(*args)
        got, d = jax.tree.map(np.asarray, (got, state.estim_lr))
        their_d = np.asarray(their_state.estim_lr)
    assert np.isnan(their_d)
    leaves = jax.tree.leaves(params)
    steps = [[g[t] for g in jax.tree.leaves(grads)] for t in range(20)]
    expected, expected_d = numpy_dadapt(leaves, steps, 0.5, 0.875, 0.9921875, 2.0**-20, 2.0**-10)
    assert expected_d > 2.0**-10  # the estimate grew once the gradients moved
    # Hyperparameters float32 holds exactly: only float64 round-off is left (RTOL's terms).
    assert_close("dadapt params", jax.tree.leaves(got), expected, rtol=RTOL, finite=True)
    assert_close("dadapt estimate", d, expected_d, rtol=RTOL)


def test_mechanize_first_update_keeps_its_digits_in_float32() -> None:
    # The first step is s_init * u (x0 = x, so Delta = 0, h = 0 and each s_i = s_init / n):
    # here -1e-6 * 0.1 * g. optx computes it from x0 - x and u, to a few float32 roundings
    # of its size (the base update, two scalars, a sum of n = 6 scales and a product: 12
    # roundings at most); optax returns (x + S u) - x, quantised to the ulp of x = 1
    # (1.2e-7, against an update of 1e-7).
    params = {"w": jnp.ones(4, jnp.float32)}
    grads = {"w": jnp.asarray([1.0, -0.3, 0.7, 2.0], jnp.float32)}
    expected = -1e-6 * 0.1 * np.asarray(grads["w"], np.float64)
    tx = optx.mechanize(optx.sgd(0.1))
    got = tx.update(grads, tx.init(params), params)[0]["w"]
    ref = optax.contrib.mechanize(optax.sgd(0.1))
    theirs = ref.update(grads, ref.init(params), params)[0]["w"]
    scale = np.max(np.abs(expected))
    ours_err = np.max(np.abs(np.asarray(got, np.float64) - expected)) / scale
    theirs_err = np.max(np.abs(np.asarray(theirs, np.float64) - expected)) / scale
    print(f"mechanize first update: optx {ours_err:.3g}, optax {theirs_err:.3g} relative")
    assert ours_err <= 12 * EPS32
    assert theirs_err > 1e-3


def test_momo_adam_first_update_has_accurate_bias_corrections_in_float32() -> None:
    # The first step in closed form (float64): m = (1 - b1) g, v = (1 - b2) g^2, so
    # D = eps + |g|; the step size is min(lr / (1 - b1), (1 - b1) f / <m, m / D>). optx's
    # float32 update is within its roundings (about 12 per element and a 3-term reduction,
    # 16 in all) of it; optax's 1 - b2 ** 1 in float32 is 1.3e-5 off, 6e-6 through the root.
    x = np.asarray([1.0, 2.0, 3.0])
    g = 2 * x
    f = float(np.sum(x**2))
    b1, eps, lr = 0.9, 1e-8, 0.1
    m = (1 - b1) * g
    precond = eps + np.abs(g)
    tau = min(lr / (1 - b1), (1 - b1) * f / np.vdot(m, m / precond))
    expected = -tau * m / precond
    params = jnp.asarray(x, jnp.float32)
    grads = jnp.asarray(g, jnp.float32)
    errors = []
    for tx in (optx.momo_adam(lr), optax.contrib.momo_adam(lr)):
        u = tx.update(grads, tx.init(params), params, value=jnp.float32(f))[0]
        errors.append(
            np.max(np.abs(np.asarray(u, np.float64) - expected)) / np.max(np.abs(expected))
        )
    print(f"momo_adam first update: optx {errors[0]:.3g}, optax {errors[1]:.3g} relative")
    assert errors[0] <= 16 * EPS32
    assert errors[1] > 1e-6


def test_scale_by_distance_over_gradients_keeps_a_scalar_parameters_shape() -> None:
    # optax keeps each sum of squares with shape (1,): a scalar parameter's update has
    # shape (1,) there.
    params = {"s": jnp.asarray(2.0), "v": jnp.ones(3)}
    grads = {"s": jnp.asarray(0.5), "v": jnp.ones(3)}
    tx = optx.scale_by_distance_over_gradients(reps_rel=0.1, eps=0.0)
    updates, state = tx.update(grads, tx.init(params), params)
    assert updates["s"].shape == () and state.grad_sum_of_squares["s"].shape == ()
    # max_dist = 0.1 * (1 + |2|) = 0.3, G = 0.25: 0.3 / 0.5 * 0.5.
    np.testing.assert_allclose(updates["s"], 0.3, rtol=4 * EPS32)
    ref = optax.scale_by_distance_over_gradients(reps_rel=0.1, eps=0.0)
    assert ref.update(grads, ref.init(params), params)[0]["s"].shape == (1,)


def test_mechanize_wraps_an_optax_optimizer() -> None:
    # The same SGD from optax and from optx: the same float32 maths (momentum 0.5 and the
    # learning rate 0.5 are exact in float32), so the runs agree to the roundings of three
    # steps that XLA may contract differently (`roundoff_rtol`: 8 a step, and Mechanic's
    # reductions over the 6 elements).
    params = {"w": jnp.asarray([1.0, -2.0, 0.5]), "b": jnp.asarray([0.3, 0.1, -0.4])}
    results = []
    for inner in (optax.sgd(0.5, momentum=0.5), optx.sgd(0.5, momentum=0.5)):
        tx = optx.mechanize(inner, s_init=0.01)
        p, state = params, tx.init(params)
        for _ in range(3):
            grads = jax.tree.map(lambda x: 2 * x, p)
            updates, state = tx.update(grads, state, p)
            p = optx.apply_updates(p, updates)
        results.append(p)
    assert_close("mechanize(optax.sgd)", results[0], results[1], rtol=roundoff_rtol(3, 8, 6))


def test_float64_params_keep_float64_estimates() -> None:
    with jax.enable_x64(True):
        params = {"w": jnp.zeros(3, jnp.float64)}
        assert optx.dadapt_adamw().init(params).estim_lr.dtype == jnp.float64
        assert optx.momo().init(params).barf.dtype == jnp.float64
        assert optx.mechanize(optx.sgd(0.1)).init(params).s.dtype == jnp.float64
    params = {"w": jnp.zeros(3, jnp.bfloat16)}
    assert optx.dog().init(params)[1].max_dist.dtype == jnp.float32
    assert optx.dowg().init(params)[1].estim_sq_dist.dtype == jnp.float32


# ---------------------------------------------------------------------------------------
# optax's names, paths and signatures.

CONTRIB = [
    "COCOBState",
    "DAdaptAdamWState",
    "DoGState",
    "DoWGState",
    "MechanicState",
    "MomoAdamState",
    "MomoState",
    "cocob",
    "dadapt_adamw",
    "dog",
    "dowg",
    "mechanize",
    "momo",
    "momo_adam",
    "scale_by_cocob",
]


@pytest.mark.parametrize("name", CONTRIB)
def test_contrib_names_at_optax_paths(name: str) -> None:
    assert hasattr(optax.contrib, name)
    assert getattr(optx.contrib, name) is getattr(optx, name)
    if not name[0].isupper():
        ours = list(inspect.signature(getattr(optx.contrib, name)).parameters)
        assert ours == list(inspect.signature(getattr(optax.contrib, name)).parameters)


def test_scale_by_distance_over_gradients_at_the_top_level() -> None:
    ours = inspect.signature(optx.scale_by_distance_over_gradients).parameters
    theirs = inspect.signature(optax.scale_by_distance_over_gradients).parameters
    assert list(ours) == list(theirs)
    assert [p.default for p in ours.values()] == [p.default for p in theirs.values()]
    # optax has no public DoG or DoWG building blocks.
    assert not hasattr(optax.contrib, "scale_by_dog") and not hasattr(optx.contrib, "scale_by_dog")


# ---------------------------------------------------------------------------------------
# Errors.

PARAMS = {"w": jnp.ones(2)}

ERRORS = [
    (
        lambda: optx.dadapt_adamw(betas=(0.9,)),
        ValueError,
        "`dadapt_adamw` needs betas to be a pair (b1, b2). Received: betas=(0.9,).",
    ),
    (
        lambda: optx.dadapt_adamw(betas=(1.0, 0.999)),
        ValueError,
        "`dadapt_adamw` needs betas[0] in [0, 1). Received: betas[0]=1.0.",
    ),
    (
        lambda: optx.dadapt_adamw(estim_lr0=0.0),
        ValueError,
        "`dadapt_adamw` needs estim_lr0 finite and > 0. Received: estim_lr0=0.0.",
    ),
    (
        lambda: optx.dadapt_adamw().update(PARAMS, optx.dadapt_adamw().init(PARAMS)),
        ValueError,
        "`dadapt_adamw.update` needs the current parameters. Received: params=None.",
    ),
    (
        lambda: optx.dog(init_step="heuristic"),
        ValueError,
        "`dog` needs init_step to be a pair (kind, value), kind one of 'distance', "
        "'learning_rate', 'heuristic'. Received: init_step='heuristic'.",
    ),
    (
        lambda: optx.dog(init_step=("lr", 0.1)),
        ValueError,
        "`dog` needs init_step[0] to be one of 'distance', 'learning_rate', 'heuristic'. "
        "Received: init_step[0]='lr'.",
    ),
    (
        lambda: optx.dog(init_step=("distance", -1.0)),
        ValueError,
        "`dog` needs init_step[1] finite and > 0. Received: init_step[1]=-1.0.",
    ),
    (
        lambda: optx.dog(weight_decay=-1.0),
        ValueError,
        "`dog` needs weight_decay finite and >= 0. Received: weight_decay=-1.0.",
    ),
    (
        lambda: optx.dowg(eps=0.0),
        ValueError,
        "`dowg` needs eps finite and > 0. Received: eps=0.0.",
    ),
    (
        lambda: optx.dowg(init_estim_sq_dist=-1.0),
        ValueError,
        "`dowg` needs init_estim_sq_dist finite and > 0. Received: init_estim_sq_dist=-1.0.",
    ),
    (
        lambda: optx.scale_by_distance_over_gradients(param_dtype=jnp.int32),
        TypeError,
        "`scale_by_distance_over_gradients` needs param_dtype to be None or a floating dtype.",
    ),
    (
        lambda: optx.scale_by_distance_over_gradients(reps_rel=0.0),
        ValueError,
        "`scale_by_distance_over_gradients` needs reps_rel finite and > 0. Received: reps_rel=0.0.",
    ),
    (
        lambda: optx.cocob(alpha=0.0),
        ValueError,
        "`cocob` needs alpha finite and > 0. Received: alpha=0.0.",
    ),
    (
        lambda: optx.scale_by_cocob(eps=-1.0),
        ValueError,
        "`scale_by_cocob` needs eps finite and > 0. Received: eps=-1.0.",
    ),
    (
        lambda: optx.mechanize(3),
        TypeError,
        "`mechanize` needs base_optimizer to be a transform with `init` and `update` methods "
        "(an optx or optax transform). Received: base_optimizer=3.",
    ),
    (
        lambda: optx.mechanize(optx.sgd(0.1), num_betas=0),
        ValueError,
        "`mechanize` needs num_betas to be an int >= 1. Received: num_betas=0.",
    ),
    (
        lambda: optx.mechanize(optx.sgd(0.1), num_betas=17),
        ValueError,
        "`mechanize` needs num_betas to be an int in [1, 16]. Received: num_betas=17.",
    ),
    (
        lambda: optx.mechanize(optx.sgd(0.1), s_init=0.0),
        ValueError,
        "`mechanize` needs s_init finite and > 0. Received: s_init=0.0.",
    ),
    (
        lambda: optx.momo().update(PARAMS, optx.momo().init(PARAMS), PARAMS),
        TypeError,
        "`momo.update` needs the loss at the current parameters as a keyword argument. "
        "Received: value=None. Call `update(updates, state, params, value=loss)`.",
    ),
    (
        lambda: optx.momo_adam().update(
            PARAMS, optx.momo_adam().init(PARAMS), PARAMS, value=jnp.ones(2)
        ),
        ValueError,
        "`momo_adam.update` needs value to be a scalar (the loss). Received: value of shape (2,).",
    ),
    (
        lambda: optx.momo(adapt_lower_bound=1),
        TypeError,
        "`momo` needs adapt_lower_bound to be a bool. Received: adapt_lower_bound=1.",
    ),
    (
        lambda: optx.momo(beta=1.0),
        ValueError,
        "`momo` needs beta in [0, 1). Received: beta=1.0.",
    ),
    (
        lambda: optx.momo_adam(b2=1.0),
        ValueError,
        "`momo_adam` needs b2 in [0, 1). Received: b2=1.0.",
    ),
]


@pytest.mark.parametrize(("make", "error", "message"), ERRORS, ids=[m for *_, m in ERRORS])
def test_errors(make: Callable[[], Any], error: type, message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        make()
