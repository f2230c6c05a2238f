"""Every numeric hyperparameter of every registered transform: a number or a schedule.

For each entry of the registry (its default configuration) and each hyperparameter its
state holds, this checks what DESIGN D2 promises:

* a schedule is accepted in place of the number, and a constant schedule computes the
  same updates as the number (the value in force is the same float32 scalar);
* `get_hyperparams` shows the value in force by its public name, and `set_hyperparams`
  round-trips it, for the constant and the scheduled form, without recompiling;
* `jax.vmap` over set values (all of them at once) runs as one program, each slice equal
  to its own run;
* a non-finite value is refused with a message naming the hyperparameter.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FAST_COMPILE

import optx
from optx._src import hyperparams  # which hyperparameter is scheduled

try:
    from tests import registry
    from tests.test_conformance import (
        cache_size,
        make_grads,
        make_params,
        new_value,
        sub_transforms,
    )
except ImportError:  # tests/ is not a package: pytest put it on sys.path.
    import registry
    from test_conformance import (
        cache_size,
        make_grads,
        make_params,
        new_value,
        sub_transforms,
    )

ENTRIES = [e for key, e in registry.REGISTRY.items() if "/" not in key]
# Steps run for each comparison: enough for the moments and schedules to matter.
STEPS = 3
# Both runs do the same float32 arithmetic on the same scalars; XLA may fuse or reassociate
# differently (a few ulps), and some updates are differences of parameters of scale 1
# (`decay_before`, schedule-free), which carry a few ulps of 1 in absolute terms.
RTOL, ATOL = 4 * 2.0**-23, 8 * 2.0**-23


@dataclasses.dataclass(frozen=True)
class Constant:
    """A schedule that holds ``value`` (hashable, so rebuilt transforms compare equal)."""

    value: float

    def __call__(self, count: jax.Array) -> jax.Array:
        return jnp.full([], self.value, jnp.float32) + 0 * count


def _all_scheduled(tx: Any) -> Any:
    """``tx`` with each hyperparameter it keeps a constant schedule of its float32 value.

    Copies: rebuilding a wrapper would convert its options a second time.
    """
    if isinstance(tx, tuple):
        return tuple(_all_scheduled(item) for item in tx)
    if not (isinstance(tx, optx.Transform) and dataclasses.is_dataclass(tx)):
        return tx
    out = copy.copy(tx)
    for f in dataclasses.fields(tx):
        if f.init:
            object.__setattr__(out, f.name, _all_scheduled(getattr(tx, f.name)))
    kept = set(tx.hyperparam_names())
    names = tx.public_names()
    for field in tx.hyperparam_fields():
        value = getattr(tx, field)
        if names.get(field, field) in kept and not callable(value):
            object.__setattr__(out, field, Constant(_float32(value)))
    return out


def _hyperparameters(tx: Any) -> list[tuple[optx.Transform, str, str]]:
    """``(sub-transform, field, public name)`` of each hyperparameter the state holds."""
    out, seen = [], set()
    for sub in sub_transforms(tx):
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        kept = set(sub.hyperparam_names())
        names = sub.public_names()
        for field in sub.hyperparam_fields():
            name = names.get(field, field)
            if name in kept and not callable(getattr(sub, field)):
                out.append((sub, field, name))
    return out


def _steps(entry: registry.Entry, tx: Any, state: Any, step: Any) -> tuple[list[Any], Any]:
    params, out = make_params(), []
    for grads in make_grads(steps=STEPS):
        updates, state = step(grads, state, params)
        params = optx.apply_updates(params, updates)
        out.append(updates)
    return out, state


def _step_fn(entry: registry.Entry, tx: Any) -> Any:
    extra = entry.extra

    @functools.partial(jax.jit, compiler_options=FAST_COMPILE)
    def step(grads: Any, state: Any, params: Any) -> Any:
        return tx.update(grads, state, params, **extra)

    return step


def _float32(value: float) -> float:
    return float(np.float32(value))


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES, ids=[e.key for e in ENTRIES])
def test_every_hyperparameter_is_a_number_or_a_schedule(entry: registry.Entry) -> None:
    tx = entry()
    state = tx.init(make_params())  # every entry takes the registry's common parameters
    names = [name for _, _, name in _hyperparameters(tx)]
    if not names:  # nothing to schedule: the state holds no hyperparameter
        assert not optx.get_hyperparams(state), entry.key
        return
    # Every hyperparameter a constant schedule at once, against the numbers, rounded to
    # values float32 holds exactly: both states hold the same scalars (a decay's rounding
    # residual is then 0 in both).
    sched_tx = _all_scheduled(tx)
    sched_state = sched_tx.init(make_params())
    scheduled = [f for f in hyperparams.find(sched_state) if f.entry.scheduled]
    assert sorted(f.entry.name for f in scheduled) == sorted(names), entry.key
    exact = {f.flat: float(optx.get_hyperparams(sched_state)[f.flat]) for f in scheduled}
    const_state = optx.set_hyperparams(state, exact)
    assert not [f for f in hyperparams.find(const_state) if f.entry.scheduled]

    const_step, sched_step = _step_fn(entry, tx), _step_fn(entry, sched_tx)
    expected, _ = _steps(entry, tx, const_state, const_step)
    got, sched_state = _steps(entry, sched_tx, sched_state, sched_step)
    # Identical float32 inputs and arithmetic; a fusion may reassociate a product.
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=entry.key),
        got,
        expected,
    )
    assert {k: float(v) for k, v in optx.get_hyperparams(sched_state).items() if k in exact} == (
        exact
    )

    # set/get by the public name, for the number and the schedule; nothing recompiles.
    compiled = (cache_size(const_step), cache_size(sched_step))
    grads, params = make_grads(steps=1)[0], make_params()
    targets = {}
    for key, value in exact.items():
        target = targets[key] = _float32(new_value(key.rsplit("/", 1)[-1], value))
        for step, s in ((const_step, const_state), (sched_step, sched_state)):
            if s is sched_state and value == 0:  # no factor of a zero schedule gives target
                changed = optx.scale_hyperparams(s, {key: 2.0})
            else:
                changed = optx.set_hyperparams(s, {key: target})
                got_value = float(optx.get_hyperparams(changed)[key])
                np.testing.assert_allclose(got_value, target, rtol=1e-6, err_msg=key)
            step(grads, changed, params)
        # A non-finite value names the hyperparameter.
        with pytest.raises(ValueError, match=re.escape(f"needs {key}")):
            optx.set_hyperparams(const_state, {key: float("nan")})
    assert (cache_size(const_step), cache_size(sched_step)) == compiled, "a set recompiled"

    # A sweep over every hyperparameter at once, as one program: each slice is its own run.
    batch = {k: jnp.asarray([exact[k], targets[k]], jnp.float32) for k in exact}

    def one(values: dict[str, jax.Array]) -> Any:
        return tx.update(grads, optx.set_hyperparams(const_state, values), params, **entry.extra)

    swept, _ = jax.jit(jax.vmap(one), compiler_options=FAST_COMPILE)(batch)
    alone, _ = const_step(grads, optx.set_hyperparams(const_state, targets), params)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a[1], b, rtol=RTOL, atol=ATOL, err_msg=entry.key),
        swept,
        alone,
    )


def test_schedules_are_evaluated_per_step_and_logged() -> None:
    sched = optx.schedules.linear_schedule(0.9, 0.5, 4)
    tx = optx.adam(0.1, b1=sched)
    state, params = tx.init({"w": jnp.ones(2)}), {"w": jnp.ones(2)}
    seen = [float(optx.get_hyperparams(state)["b1"])]
    for _ in range(5):
        _, state = jax.jit(tx.update)({"w": jnp.ones(2)}, state, params)
        seen.append(float(optx.get_hyperparams(state)["b1"]))
    # Before the first step: the value at step 0; after step t (from 1): the value at t - 1.
    np.testing.assert_allclose(seen, [0.9, 0.9, 0.8, 0.7, 0.6, 0.5], rtol=1e-6)
