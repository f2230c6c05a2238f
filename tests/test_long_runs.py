"""Long runs: float32 against float64 over 100,000 steps, saturating counters, huge steps.

* `optx.adam` and `optx.sgd` with momentum run 100,000 steps of minibatch least squares in
  float32 and in float64 (same float32 hyperparameters, same minibatches) inside one
  `jax.lax.scan`: every 10,000 steps the float32 parameters are within `F32_VS_F64` of the
  float64 ones, relative to the largest parameter.
* A stateful optimizer at ``iterations`` = 2**31 - 1 stays there and steps finitely (every
  registry entry's counters: tests/test_registry_reliability.py).
* Every schedule of `optx.schedules` and `optx.optimizers.schedules` is finite at huge steps.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx

try:
    from tests.test_schedules import EXAMPLES
except ImportError:  # tests/ is not a package: pytest put it on sys.path.
    from test_schedules import EXAMPLES

STEPS, EVERY = 100_000, 10_000
INT32_MAX = 2**31 - 1
# Both runs converge to the same cycle through the 8 minibatches, which forgets old errors
# (tests/TOLERANCES.md): the float32 run sits where its per-step round-off balances the
# contraction. Worst cases, relative to max|x*| = 1.6 (this data: eigenvalues of A^T A / 64
# in [0.63, 1.30]): a gradient element sums 4 + 1 terms (the residual) then 8 (the batch),
# off by up to 1.3e-5 * |x*|-sized terms, which moves the fixed point by up to
# |dg| / 0.63 = 1.3e-5 relative, for either optimizer; the parameter's own rounding
# (eps / 2 per step) is magnified by 1 / (contraction per step): 1 / (0.1 * 0.63) for SGD
# (lr / (1 - momentum) = 0.1), 9e-7; ~190 for Adam (lr / rms(g) at x* ~ 1e-3 / 0.1), 1.1e-5.
# A drift would grow as steps * eps (1e-2 over 100,000 steps), far above these.
F32_VS_F64 = {"adam": 3e-5, "sgd_momentum": 1.5e-5}
OPTIMIZERS = {
    "adam": lambda: optx.adam(1e-3),
    "sgd_momentum": lambda: optx.sgd(1e-2, momentum=0.9),
}


def _problem(dtype: str) -> tuple[jax.Array, jax.Array]:
    """8 minibatches of 8 rows of a noisy least-squares problem in 4 unknowns."""
    rng = np.random.RandomState(0)
    a = rng.standard_normal((64, 4))
    b = a @ rng.standard_normal(4) + 0.5 * rng.standard_normal(64)
    return jnp.asarray(a.reshape(8, 8, 4), dtype), jnp.asarray(b.reshape(8, 8), dtype)


def _long_run(name: str, dtype: str) -> tuple[np.ndarray, int]:
    """The parameters every `EVERY` steps, and the step count in the final state."""
    tx = OPTIMIZERS[name]()
    a, b = _problem(dtype)

    def step(t, carry):
        x, state = carry
        g = a[t % 8].T @ (a[t % 8] @ x - b[t % 8]) / 8
        updates, state = tx.update(g, state, x)
        return optx.apply_updates(x, updates), state

    def chunk(carry, i):
        carry = jax.lax.fori_loop(i * EVERY, (i + 1) * EVERY, step, carry)
        return carry, carry[0]

    @jax.jit
    def run(x):
        (_, state), xs = jax.lax.scan(chunk, (x, tx.init(x)), jnp.arange(STEPS // EVERY))
        return xs, state

    xs, state = run(jnp.zeros(4, dtype))
    assert xs.dtype == jnp.dtype(dtype)
    return np.asarray(xs, np.float64), _count(state)


def _count(state) -> int:
    counts = [
        int(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
        if getattr(path[-1], "name", None) == "count"
    ]
    assert counts and len(set(counts)) == 1, counts
    return counts[0]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_float32_stays_close_to_float64_for_100k_steps(name: str) -> None:
    x32, count = _long_run(name, "float32")
    with jax.enable_x64(True):
        x64, count64 = _long_run(name, "float64")
    assert count == count64 == STEPS
    worst = 0.0
    for i, (a, b) in enumerate(zip(x32, x64, strict=True)):
        error = float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
        worst = max(worst, error)
        assert error <= F32_VS_F64[name], f"after {(i + 1) * EVERY} steps: {error:.3g}"
    print(f"{name}: float32 vs float64 over {STEPS} steps, largest relative error {worst:.3g}")


@pytest.mark.parametrize(
    "make",
    [
        lambda: optx.optimizers.Adam(1e-3, amsgrad=True),
        lambda: optx.optimizers.SGD(
            optx.optimizers.schedules.ExponentialDecay(0.1, 1000, 0.9), momentum=0.9
        ),
        lambda: optx.optimizers.LossScaleOptimizer(optx.optimizers.Nadam()),
    ],
    ids=["adam", "sgd_schedule", "loss_scale_nadam"],
)
def test_stateful_iterations_saturate(make) -> None:
    opt = make()
    params = {"w": jnp.ones(3)}
    opt.build(params)
    # Every counter of the state at int32's maximum, as after 2**31 - 1 steps.
    opt.load_own_variables(
        {
            k: np.full_like(v, INT32_MAX) if v.dtype == np.int32 else v
            for k, v in opt.variables.items()
        }
    )
    for _ in range(2):
        params = opt.apply({"w": jnp.array([0.5, -1.0, 2.0])}, params)
    assert int(opt.iterations) == INT32_MAX
    assert np.isfinite(np.asarray(params["w"])).all()
    for key, value in opt.variables.items():
        if value.dtype == np.int32 and not key.endswith("growth_count"):  # that one resets
            assert int(value) == INT32_MAX, key
    assert np.isfinite(float(opt.learning_rate))


HUGE = [INT32_MAX, INT32_MAX - 1, 10**9]
KERAS_SCHEDULES = [
    optx.optimizers.schedules.ExponentialDecay(0.1, 1000, 0.96, staircase=True),
    optx.optimizers.schedules.PiecewiseConstantDecay([1000, 10**9], [0.1, 0.01, 0.001]),
    optx.optimizers.schedules.PolynomialDecay(0.1, 10_000, 1e-4, power=2.0, cycle=True),
    optx.optimizers.schedules.InverseTimeDecay(0.1, 1000, 0.5),
    optx.optimizers.schedules.CosineDecay(
        0.0, 10_000, alpha=0.1, warmup_target=0.1, warmup_steps=100
    ),
    optx.optimizers.schedules.CosineDecayRestarts(0.1, 1000),
]


def test_keras_schedules_are_all_here() -> None:
    module = optx.optimizers.schedules
    classes = {
        n
        for n in dir(module)
        if inspect.isclass(getattr(module, n)) and n != "LearningRateSchedule"
    }
    assert classes == {type(s).__name__ for s in KERAS_SCHEDULES}


@pytest.mark.parametrize(
    "schedule",
    EXAMPLES + KERAS_SCHEDULES,
    ids=[f"{i}-{type(s).__name__}" for i, s in enumerate(EXAMPLES + KERAS_SCHEDULES)],
)
def test_schedules_are_finite_at_huge_steps(schedule) -> None:
    steps = jnp.asarray(HUGE, jnp.int32)
    for values in (schedule(steps), jax.jit(schedule)(steps)):
        assert values.dtype == jnp.float32
        assert np.isfinite(np.asarray(values)).all(), dict(
            zip(HUGE, np.asarray(values), strict=True)
        )
    for t in HUGE:  # one step at a time, as an optimizer calls it
        assert np.isfinite(float(schedule(t))), t
