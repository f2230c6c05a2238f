"""Complex parameters, as optax treats them.

Every registry entry either trains a tree of complex64 leaves (with a float32 leaf beside
them) or refuses it with a message naming the leaf's path (and the dtype option at fault,
for a real ``mu_dtype``-like slot of a complex parameter). Where optax has the same
optimizer, the two run side by side in complex128, so that only optx's float32
hyperparameters differ (tests/TOLERANCES.md). Second moments are of ``|g|**2`` (real, kept
in the real dtype), the sign of a complex value is ``g / |g|``, norms are of ``|g|``; as in
optax, the gradient is used as given (JAX's ``grad`` of a real loss is the conjugate of the
steepest ascent direction, so a caller conjugates it, as optax's docs say).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import registry
from helpers import EPS32, FAST_COMPILE

import optx

STEPS = 20
EPS64 = float(np.finfo(np.float64).eps)
C64, F32 = np.dtype("complex64"), np.dtype("float32")

# The entries that refuse complex parameters, with what their message says. The rest must
# train (`test_complex_parameters`). ``COMPLEX`` is a transform whose rule has no complex
# counterpart (a clip to [-c, c], a per-element step size, ...) or that
# optax refuses too; ``SLOT`` a real ``mu_dtype``-like option given for complex parameters.
COMPLEX = "does not support complex values"


def _slot(option: str) -> str:
    return f"needs a complex {option} for complex params"


REFUSED: dict[str, str] = {
    "MultiSteps": _slot("accumulator_dtype"),
    "MultiSteps/schedule_sum_skip": _slot("accumulator_dtype"),
    "accumulate_gradients/f32_accumulator": _slot("accumulator_dtype"),
    # optax's default dtype_momentum=float32 is a real slot: pass jnp.complex64.
    "adafactor/factored_momentum_decay": _slot("accumulator_dtype"),
    "adopt": COMPLEX,
    "clip": COMPLEX,
    "constrain": COMPLEX,
    "constrain/mask": COMPLEX,
    "constrain/regex": COMPLEX,
    "ftrl": COMPLEX,
    "ftrl/regularised": COMPLEX,
    "ftrl/schedule": COMPLEX,
    "hutchinson_estimator_diag_hessian": COMPLEX,
    "hutchinson_estimator_diag_hessian/typed_key": COMPLEX,
    "keep_params_nonnegative": COMPLEX,
    "lamb/f32_moments": _slot("mu_dtype"),
    "lars/schedule_f32_trace": _slot("accumulator_dtype"),
    "lion/mask": _slot("mu_dtype"),
    "muon/mask": _slot("mu_dtype"),
    "nadam/torch_schedule_f32": _slot("mu_dtype"),
    "named_chain": COMPLEX,
    "rmsprop/f32_accumulators": _slot("mu_dtype"),
    "rprop": COMPLEX,
    "scale_by_adam/f32_moments": _slot("mu_dtype"),
    "scale_by_adamax/f32_moments": _slot("mu_dtype"),
    "scale_by_ademamix/f32_moments": _slot("mu_dtype"),
    "scale_by_adopt": COMPLEX,
    "scale_by_adopt/f32_moments": COMPLEX,
    "scale_by_amsgrad/f32_moments": _slot("mu_dtype"),
    # optax's default param_dtype=float32 is a real copy of the parameters: pass
    # jnp.complex64 (or None).
    "scale_by_distance_over_gradients": _slot("param_dtype"),
    "scale_by_distance_over_gradients/descent": _slot("param_dtype"),
    "scale_by_ftrl": COMPLEX,
    "scale_by_ftrl/f32_accumulator": COMPLEX,
    "scale_by_lazy_adam/keras_f32_moments": _slot("mu_dtype"),
    "scale_by_lion/f32_mu": _slot("mu_dtype"),
    "scale_by_lion/refined": COMPLEX,
    "scale_by_muon/adaptive_aol_dion": _slot("mu_dtype"),
    "scale_by_lion/smooth": COMPLEX,
    "scale_by_novograd/f32_moments": _slot("mu_dtype"),
    "scale_by_radam/nesterov_f32": _slot("mu_dtype"),
    "scale_by_rprop": COMPLEX,
    "scale_by_rprop/tight_bounds": COMPLEX,
    "scale_by_sophia": COMPLEX,
    "scale_by_sophia/no_clip_f32_moments": COMPLEX,
    "scale_by_stddev/f32_moments": _slot("mu_dtype"),
    "schedule_free/f32_state": _slot("state_dtype"),
    "sgd/keras_f32_accumulator": _slot("accumulator_dtype"),
    "signum/f32_accumulator": _slot("accumulator_dtype"),
    "sophia": COMPLEX,
    "sophia/interval": COMPLEX,
    "trace/f32_accumulator": _slot("accumulator_dtype"),
}


def _tree(seed: int, complex_dtype: Any, real_dtype: Any, steps: tuple[int, ...] = ()) -> Any:
    """The conformance suite's structure: complex kernel, layer and scale, a real bias.

    With ``steps`` (a leading axis), per-step gradients whose size swings between 0.2 and
    2.2, so that a clip at 1 acts on some steps and not on others.
    """
    rng = np.random.default_rng(seed)
    size = 1.0
    if steps:
        size = (0.2 + 2.0 * np.sin(0.3 * np.arange(steps[0])) ** 2)[:, None]

    def draw(shape: tuple[int, ...], kind: Any) -> jax.Array:
        n = int(np.prod(shape))
        x = rng.standard_normal((*steps, n))
        if kind is complex_dtype:
            x = x + 1j * rng.standard_normal((*steps, n))
        return jnp.asarray((x * size).reshape((*steps, *shape)), kind)

    return {
        "dense": {"kernel": draw((2, 3), complex_dtype), "bias": draw((3,), real_dtype)},
        "layers": [draw((2,), complex_dtype)],
        "scale": draw((), complex_dtype),
    }


def _run(tx: Any, extra: dict[str, Any], apply: Callable[..., Any], params: Any, grads: Any):
    """``tx`` over the steps of ``grads``: final parameters and ``sum_t max|u_t|``."""

    def step(carry: tuple, g: Any) -> tuple:
        p, s = carry
        u, s = tx.update(g, s, p, **extra)
        size = jax.tree.map(lambda x: jnp.max(jnp.abs(x)), u)
        return (apply(p, u), s), size

    (p, _), sizes = jax.lax.scan(step, (params, tx.init(params)), grads)
    return p, jax.tree.map(jnp.sum, sizes)


def _first_update(tx: Any, extra: dict[str, Any], params: Any, grads: Any) -> Any:
    return tx.update(grads, tx.init(params), params, **extra)


ENTRIES = sorted(registry.REGISTRY)


@pytest.mark.parametrize("key", [k for k in ENTRIES if k in REFUSED])
def test_refused_with_the_leaf_path(key: str) -> None:
    entry = registry.REGISTRY[key]
    params = _tree(0, jnp.complex64, jnp.float32)
    grads = _tree(1, jnp.complex64, jnp.float32)
    tx = entry()
    with pytest.raises(TypeError) as info:
        jax.eval_shape(functools.partial(_first_update, tx, entry.extra), params, grads)
    message = str(info.value)
    assert message.startswith("`"), message
    assert REFUSED[key] in message, message
    # The first complex leaf it computes with (a muon's Adam sees no matrix).
    assert re.search(r"\['(dense/kernel|layers/0|scale)'\] of dtype complex64", message), message


# optax's optimizer of the same name and arguments, for the entries optax has.
OPTAX: dict[str, Callable[[], Any]] = {
    "scale": lambda: optax.scale(-0.1),
    "scale_by_learning_rate": lambda: optax.scale_by_learning_rate(0.1),
    "scale_by_learning_rate/schedule": lambda: optax.scale_by_learning_rate(
        registry.warmup_schedule
    ),
    "scale_by_learning_rate/no_flip": lambda: optax.scale_by_learning_rate(0.1, flip_sign=False),
    "scale_by_schedule": lambda: optax.scale_by_schedule(registry.inverse_schedule),
    "clip_by_global_norm": lambda: optax.clip_by_global_norm(1.0),
    "clip_by_block_rms": lambda: optax.clip_by_block_rms(1.0),
    "centralize": optax.centralize,
    "add_decayed_weights": lambda: optax.add_decayed_weights(1e-2),
    "trace": lambda: optax.trace(0.9),
    "trace/nesterov": lambda: optax.trace(0.9, nesterov=True),
    "ema": lambda: optax.ema(0.9),
    "ema/no_debias": lambda: optax.ema(0.9, debias=False),
    "identity": optax.identity,
    "set_to_zero": optax.set_to_zero,
    "chain": lambda: optax.chain(
        optax.clip_by_global_norm(1.0), optax.scale_by_adam(), optax.scale(-0.1)
    ),
    "sgd": lambda: optax.sgd(0.1),
    "sgd/momentum": lambda: optax.sgd(0.1, momentum=0.9),
    "sgd/nesterov": lambda: optax.sgd(0.1, momentum=0.9, nesterov=True),
    "sgd/schedule": lambda: optax.sgd(registry.warmup_schedule, momentum=0.5),
    "scale_by_adam": optax.scale_by_adam,
    "scale_by_adam/nesterov": lambda: optax.scale_by_adam(nesterov=True),
    "adam": lambda: optax.adam(1e-2),
    "adam/nesterov": lambda: optax.adam(1e-2, nesterov=True),
    "adam/schedule": lambda: optax.adam(registry.warmup_schedule, eps_root=1e-8),
    "adamw": lambda: optax.adamw(1e-2),
    "nadam": lambda: optax.nadam(3e-3),
    "nadamw": lambda: optax.nadamw(3e-3),
    "scale_by_amsgrad": optax.scale_by_amsgrad,
    "amsgrad": lambda: optax.amsgrad(1e-2),
    "scale_by_adamax": optax.scale_by_adamax,
    "adamax": lambda: optax.adamax(1e-2),
    "adamaxw": lambda: optax.adamaxw(1e-2),
    "scale_by_radam": optax.scale_by_radam,
    "radam": lambda: optax.radam(1e-2),
    "scale_by_rms": optax.scale_by_rms,
    "scale_by_stddev": optax.scale_by_stddev,
    "rmsprop": lambda: optax.rmsprop(1e-2),
    "rmsprop/momentum_nesterov": lambda: optax.rmsprop(1e-2, momentum=0.9, nesterov=True),
    "scale_by_rss": optax.scale_by_rss,
    "adagrad": lambda: optax.adagrad(0.1),
    "scale_by_sign": optax.scale_by_sign,
    "sign_sgd": lambda: optax.sign_sgd(0.1),
    "scale_by_lion": optax.scale_by_lion,
    "scale_by_lion/fast_momentum": lambda: optax.scale_by_lion(b2=0.5),
    "lion": lambda: optax.lion(1e-2),
    "scale_by_belief": optax.scale_by_belief,
    "scale_by_belief/nesterov": lambda: optax.scale_by_belief(nesterov=True),
    "adabelief": lambda: optax.adabelief(1e-2),
    "scale_by_yogi": optax.scale_by_yogi,
    "yogi": lambda: optax.yogi(1e-2),
    "scale_by_adan": optax.scale_by_adan,
    "scale_by_optimistic_gradient": optax.scale_by_optimistic_gradient,
    "schedule_free_sgd": lambda: optax.contrib.schedule_free_sgd(0.05, weight_decay=1e-2),
    "schedule_free_adamw": lambda: optax.contrib.schedule_free_adamw(0.01, weight_decay=1e-3),
    "optimistic_gradient_descent": lambda: optax.optimistic_gradient_descent(
        0.1, alpha=0.5, beta=2.0
    ),
    "adan": lambda: optax.adan(1e-2),
    "scale_by_ademamix": optax.contrib.scale_by_ademamix,
    "ademamix": lambda: optax.contrib.ademamix(1e-2),
    "lamb": lambda: optax.lamb(1e-2),
    "lars": lambda: optax.lars(0.1),
    "scale_by_trust_ratio": optax.scale_by_trust_ratio,
    "scale_by_factored_rms": optax.scale_by_factored_rms,
    "scale_by_factored_rms/factored": lambda: optax.scale_by_factored_rms(
        min_dim_size_to_factor=2, decay_rate=0.5
    ),
    "scale_by_factored_rms/unfactored": lambda: optax.scale_by_factored_rms(factored=False),
    "adafactor": optax.adafactor,
    "adaptive_grad_clip": lambda: optax.adaptive_grad_clip(0.1),
    "normalize_by_update_norm": optax.normalize_by_update_norm,
    "fromage": lambda: optax.fromage(1e-2),
    "contrib.normalize": optax.contrib.normalize,
    "muon": lambda: optax.contrib.muon(1e-2),
    "scale_by_novograd": optax.scale_by_novograd,
    "novograd": lambda: optax.novograd(1e-2),
    "novograd/weight_decay": lambda: optax.novograd(1e-2, weight_decay=1e-2, eps_root=1e-8),
    "add_noise": lambda: optax.add_noise(0.01, 0.55, key=0),
    "noisy_sgd": lambda: optax.noisy_sgd(0.1, key=1),
    "dog": optax.contrib.dog,
    "dowg": optax.contrib.dowg,
    "contrib.sam": lambda: optax.contrib.sam(
        optax.sgd(1e-2), optax.chain(optax.contrib.normalize(), optax.sgd(0.05))
    ),
}

# The comparison with optax runs both in complex128 (tests/TOLERANCES.md): optx keeps its
# hyperparameters as float32 scalars, each off by at most EPS32 / 2 relative, which moves a
# step's update by at most K * EPS32 / 2 of its size, K counting the roundings it goes
# through. The largest count among the compared entries is Adan's: the learning rate 1, the
# lags of b1 = 0.98 and b3 = 0.99 in full (b / (1 - b) steps, at most STEPS = 20 each), of
# b2 = 0.92 11.5, 1 - b1, 1 - b2, 1 - b3 as float32 (1.5 each: 4.5), three bias corrections
# (3 each: 9) and eps 1: 67 < K. (AdEMAMix: 1 + 1 + 9 + 20 + 20 + 4.5 + 6 + 1 = 62.5; Adam:
# 1 + 9 + 20 + 3 + 6 + 1, plus 1 for a weight decay, a clip threshold or Nesterov's extra
# term: 41. Schedule-Free's averaging weights lr^2 / sum lr^2 of a constant lr do not see
# its float32 rounding, which cancels: it adds lr and b1's lag to its base optimizer's.)
# Over the run the parameters are then off by at most K * EPS32 / 2 *
# sum_t max|u_t| per leaf (optax's updates u_t), plus float64 round-off: ROUNDINGS64 per step
# of the leaf's scale, for the elementwise operations of a step and norms over at most 10
# entries (as tests/test_numerics_optax.py).
K = 72
ROUNDINGS64 = 32


def _leaves(tree: Any) -> list[tuple[str, Any]]:
    return [(optx.tree.path_name(p), x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]]


ACCEPTED = [k for k in ENTRIES if k not in REFUSED]
# The runs are a hundred tiny programs, compiled a batch at a time with FAST_COMPILE (the
# bounds allow for any contraction and summation order), one test per batch; a failure
# names its entry.
BATCH = 25


def _batches(keys: list[str]) -> list[tuple[str, ...]]:
    return [tuple(keys[i : i + BATCH]) for i in range(0, len(keys), BATCH)]


COMPLEX_BATCHES = _batches([k for k in ACCEPTED if k not in OPTAX]) + _batches(
    [k for k in ACCEPTED if k in OPTAX]
)


def _complex64_runs(keys: tuple[str, ...]) -> dict[str, Any]:
    """Entries optax lacks, 20 steps in complex64, in one compiled program."""
    params = _tree(0, jnp.complex64, jnp.float32)
    grads = _tree(1, jnp.complex64, jnp.float32, (STEPS,))
    txs = {k: (registry.REGISTRY[k](), registry.REGISTRY[k].extra) for k in keys}

    @functools.partial(jax.jit, compiler_options=FAST_COMPILE)
    def go(params: Any, grads: Any) -> dict[str, Any]:
        return {
            k: _run(tx, extra, optx.apply_updates, params, grads)[0]
            for k, (tx, extra) in txs.items()
        }

    return jax.tree.map(np.asarray, go(params, grads))


def _complex128_runs(keys: tuple[str, ...]) -> dict[str, Any]:
    """Entries optax has, beside optax's, 20 steps in complex128, in one compiled program.

    Returns NumPy trees per key: optx's parameters, optax's, and optax's ``sum_t max|u_t|``.
    """
    txs = {k: (registry.REGISTRY[k](), registry.REGISTRY[k].extra) for k in keys}
    with jax.enable_x64(True):
        params = _tree(0, jnp.complex128, jnp.float64)
        grads = _tree(1, jnp.complex128, jnp.float64, (STEPS,))

        @functools.partial(jax.jit, compiler_options=FAST_COMPILE)
        def go(params: Any, grads: Any) -> dict[str, Any]:
            out = {}
            for k, (tx, extra) in txs.items():
                ours, _ = _run(tx, extra, optx.apply_updates, params, grads)
                theirs, sizes = _run(OPTAX[k](), {}, optax.apply_updates, params, grads)
                out[k] = (ours, theirs, sizes)
            return out

        return jax.tree.map(np.asarray, go(params, grads))


def _errors_and_bounds(ours: Any, theirs: Any, sizes: Any) -> list[tuple[str, float, float]]:
    out = []
    for (path, a), (_, b), (_, size) in zip(
        _leaves(ours), _leaves(theirs), _leaves(sizes), strict=True
    ):
        bound = K * EPS32 / 2 * size + STEPS * ROUNDINGS64 * EPS64 * np.max(np.abs(b))
        out.append((path, float(np.max(np.abs(a - b))), float(bound)))
    return out


def test_the_bound_catches_a_learning_rate_off_by_1e3() -> None:
    with jax.enable_x64(True):
        params = _tree(0, jnp.complex128, jnp.float64)
        grads = _tree(1, jnp.complex128, jnp.float64, (STEPS,))

        @jax.jit
        def go(params: Any, grads: Any) -> tuple:
            ours, _ = _run(optx.adam(1.001e-2), {}, optx.apply_updates, params, grads)
            return ours, *_run(optax.adam(1e-2), {}, optax.apply_updates, params, grads)

        ours, theirs, sizes = jax.tree.map(np.asarray, go(params, grads))
    for path, error, bound in _errors_and_bounds(ours, theirs, sizes):
        assert error > 10 * bound, (path, error, bound)


def test_every_optax_case_is_an_accepting_entry() -> None:
    assert sorted(set(OPTAX) - set(ACCEPTED)) == []
    assert sorted(set(REFUSED) - set(ENTRIES)) == []


def test_every_accepting_entry_is_in_one_batch() -> None:
    assert sorted(k for batch in COMPLEX_BATCHES for k in batch) == sorted(ACCEPTED)


@pytest.mark.parametrize("batch", COMPLEX_BATCHES, ids=[f"{b[0]}..." for b in COMPLEX_BATCHES])
def test_complex_parameters(batch: tuple[str, ...]) -> None:
    """Each entry trains complex parameters (finite, dtypes kept); optax's, as optax does.

    Failures are reported by entry.
    """
    compared = batch[0] in OPTAX
    runs = _complex128_runs(batch) if compared else _complex64_runs(batch)
    failures = []
    for key in batch:
        try:
            _check_complex_run(key, runs[key], compared)
        except AssertionError as error:
            failures.append(f"{key}: {error}")
    assert not failures, "\n".join(failures)


def _check_complex_run(key: str, run: Any, compared: bool) -> None:
    if not compared:
        new = run
        dtypes = [F32, C64, C64, C64]
    else:
        new, theirs, sizes = run
        dtypes = [np.dtype("float64")] + [np.dtype("complex128")] * 3
    got = _leaves(new)
    # Leaves in path order: dense/bias (real), dense/kernel, layers/0, scale.
    assert [x.dtype for _, x in got] == dtypes, got
    assert all(np.all(np.isfinite(x)) for _, x in got), "not finite"
    if not compared:
        return
    for path, error, bound in _errors_and_bounds(new, theirs, sizes):
        assert error <= bound, (path, error, bound)


def test_second_moments_are_real_and_first_moments_complex() -> None:
    params = _tree(0, jnp.complex64, jnp.float32)
    state = optx.scale_by_adam().init(params)
    assert {x.dtype for x in jax.tree.leaves(state.mu)} == {C64, F32}
    assert {x.dtype for x in jax.tree.leaves(state.nu)} == {F32}
    # A complex dtype option is accepted, as optax's; a complex nu_dtype keeps its real part.
    tx = optx.scale_by_adam(mu_dtype=jnp.complex128, nu_dtype=jnp.complex64)
    with jax.enable_x64(True):
        state = tx.init(params)
    assert {x.dtype for x in jax.tree.leaves(state.mu)} == {np.dtype("complex128")}
    assert {x.dtype for x in jax.tree.leaves(state.nu)} == {F32}


def test_a_real_first_moment_dtype_is_refused_for_complex_params() -> None:
    tx = optx.adam(1e-2, mu_dtype=jnp.float32)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`scale_by_adam.init` needs a complex mu_dtype for complex params (a real slot would "
            "drop the imaginary part). Received: mu_dtype='float32' for params['dense/kernel'] of "
            "dtype complex64. Pass mu_dtype=jnp.complex64 (or None, the parameters' dtypes)."
        ),
    ):
        tx.init(_tree(0, jnp.complex64, jnp.float32))


def test_a_refusal_names_every_complex_leaf() -> None:
    tx = optx.clip(1.0)
    grads = _tree(1, jnp.complex64, jnp.float32)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`clip.update` needs real updates: it does not support complex values. Received: "
            "updates['dense/kernel'] of dtype complex64, updates['layers/0'] of dtype complex64, "
            "updates['scale'] of dtype complex64. Optimise the real and imaginary parts as "
            "separate real leaves, or use an optimizer that supports complex parameters (see the "
            "README's 'Complex parameters')."
        ),
    ):
        tx.update(grads, tx.init(grads))


# Least squares over complex z: minimise |A z - b|^2. JAX's gradient of a real loss of a
# complex argument is the conjugate of the steepest-ascent direction, so it is conjugated
# before the optimizer, as optax's documentation asks.
def _least_squares() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((8, 3)) + 1j * rng.standard_normal((8, 3))
    b = rng.standard_normal(8) + 1j * rng.standard_normal(8)
    return a, b, np.linalg.lstsq(a, b, rcond=None)[0]


def _descend(tx: Any, a: Any, b: Any, steps: int, dtype: Any) -> np.ndarray:
    a, b = jnp.asarray(a, dtype), jnp.asarray(b, dtype)

    def loss(z: jax.Array) -> jax.Array:
        return jnp.sum(jnp.abs(a @ z - b) ** 2)

    @jax.jit
    def run(z: jax.Array) -> jax.Array:
        def step(carry: tuple, _: None) -> tuple:
            z, s = carry
            u, s = tx.update(jnp.conj(jax.grad(loss)(z)), s, z)
            return (optx.apply_updates(z, u), s), None

        return jax.lax.scan(step, (z, tx.init(z)), None, length=steps)[0][0]

    return np.asarray(run(jnp.zeros(3, dtype)))


def test_sgd_converges_to_the_least_squares_solution() -> None:
    a, b, z = _least_squares()
    # The gradient of |A z - b|^2 (conjugated) is 2 A^H (A z - b): gradient descent
    # contracts the error by rho = max|1 - 2 lr s_i^2| per step (s_i the singular values of
    # A), (k - 1) / (k + 1) for lr = 1 / (s_max^2 + s_min^2), k = s_max^2 / s_min^2.
    s = np.linalg.svd(a, compute_uv=False) ** 2
    lr = 1 / (s.max() + s.min())
    rho = max(abs(1 - 2 * lr * s.max()), abs(1 - 2 * lr * s.min()))
    steps = 300
    got = _descend(optx.sgd(lr), a, b, steps, jnp.complex64)
    # Start at 0: the error is rho^T |z|, plus float32's: each step rounds z, A z - b and the
    # product by a few EPS32 of |z| and |A||z| (32 roundings of |z| with the condition of A's
    # normal equations, k), forgotten at rate rho: 32 k EPS32 |z| / (1 - rho).
    threshold = rho**steps * np.linalg.norm(z) + 32 * (s.max() / s.min()) * EPS32 * np.linalg.norm(
        z
    ) / (1 - rho)
    assert np.linalg.norm(got - z) <= threshold


def test_adam_converges_to_the_least_squares_solution() -> None:
    a, b, z = _least_squares()
    tx = optx.adam(optx.schedules.exponential_decay(0.05, 100, 0.5))
    steps = 1000
    threshold = 1e-3 * np.linalg.norm(z)
    got = _descend(tx, a, b, steps, jnp.complex64)
    # No rate bounds Adam's end point: the same steps in complex128 land within a quarter of
    # the threshold, so a float32 run fails only if its roundings multiply the distance by 4
    # (tests/TOLERANCES.md).
    with jax.enable_x64(True):
        exact = _descend(tx, a, b, steps, jnp.complex128)
    assert np.linalg.norm(exact - z) <= threshold / 4
    assert np.linalg.norm(got - z) <= threshold


@pytest.mark.parametrize(
    "make",
    [optx.kahan_summation, lambda: optx.stochastic_rounding(key=0)],
    ids=["kahan", "stochastic"],
)
def test_complex_parameters_pass_the_low_precision_rounding_unchanged(make: Any) -> None:
    # No 16-bit complex dtype exists: complex leaves pass as 32-bit ones do, the bfloat16
    # leaf beside them is rounded.
    params = {"z": jnp.ones(3, jnp.complex64), "w": jnp.ones(3, jnp.bfloat16)}
    updates = {"z": jnp.full(3, 1e-3 + 2e-3j, jnp.complex64), "w": jnp.full(3, 1e-3, jnp.bfloat16)}
    tx = make()
    out, _ = tx.update(updates, tx.init(params), params)
    np.testing.assert_array_equal(np.asarray(out["z"]), np.asarray(updates["z"]))
    assert out["z"].dtype == jnp.complex64 and out["w"].dtype == jnp.bfloat16
