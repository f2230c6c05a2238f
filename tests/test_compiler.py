"""`optx.compiler_options`: XLA options for a donated step, and their effect."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx
from optx._src import compiler

REGION = "xla_cpu_copy_insertion_use_region_analysis"


def _lion_step(options):
    tx = optx.lion(1e-3, weight_decay=0.1)

    def step(p, s, g):
        updates, s = tx.update(g, s, p)
        return optx.apply_updates(p, updates), s

    params = {"w": jnp.linspace(-1.0, 1.0, 256 * 64).reshape(256, 64), "b": jnp.ones(64)}
    grads = jax.tree.map(lambda x: jnp.cos(3.0 * x), params)
    jitted = jax.jit(step, donate_argnums=(0, 1), compiler_options=options or None)
    compiled = jitted.lower(params, tx.init(params), grads).compile()
    state = tx.init(params)
    for _ in range(5):
        params, state = compiled(params, state, grads)
    return compiled.memory_analysis().temp_size_in_bytes, params


def test_options_per_backend() -> None:
    assert optx.compiler_options("cpu") == {REGION: True}
    assert optx.compiler_options("gpu") == {}
    assert optx.compiler_options("tpu") == {}
    assert optx.compiler_options() == optx.compiler_options(jax.default_backend())
    mine = optx.compiler_options("cpu")
    mine.clear()  # a new dict each call
    assert optx.compiler_options("cpu") == {REGION: True}


def test_lion_updates_its_moment_in_place_with_the_same_numbers() -> None:
    temp_default, default = _lion_step(None)
    temp_region, region = _lion_step(optx.compiler_options("cpu"))
    assert temp_default >= 256 * 64 * 4  # XLA's copy of the moment
    assert temp_region < 1024
    for a, b in zip(jax.tree.leaves(default), jax.tree.leaves(region), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_stateful_optimizers_use_them() -> None:
    opt = optx.optimizers.Lion(1e-3)
    params = {"w": jnp.ones((256, 64)), "b": jnp.ones(64)}
    opt.build(params)
    fn = opt._function("step")
    compiled = fn.func.lower(*fn.args, opt._state, opt._count, params, params).compile()
    assert compiled.memory_analysis().temp_size_in_bytes < 1024


def test_an_option_the_installed_xla_lacks_is_dropped(monkeypatch) -> None:
    monkeypatch.setitem(compiler._OPTIONS, "cpu", {"xla_no_such_option_here": True})
    compiler._accepted.cache_clear()
    try:
        assert optx.compiler_options("cpu") == {}
    finally:
        compiler._accepted.cache_clear()


def test_bad_backend() -> None:
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`compiler_options` needs backend to be a platform name (e.g. 'cpu') or None. "
            "Received: backend=3."
        ),
    ):
        optx.compiler_options(3)


def test_stateless_apply_inside_a_users_jit_compiles_without_them() -> None:
    # XLA options may only be given to the outermost jit: the nested step leaves them out.
    params = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)}
    grads = {"w": jnp.full((3, 4), 0.25)}
    outside = optx.optimizers.Lion(1e-2)
    outside.build(params)
    want, _ = outside.stateless_apply(outside.variables, grads, jax.tree.map(jnp.copy, params))
    inside = optx.optimizers.Lion(1e-2)
    inside.build(params)
    step = jax.jit(inside.stateless_apply)
    got, variables = step(inside.variables, grads, jax.tree.map(jnp.copy, params))
    np.testing.assert_array_equal(got["w"], want["w"])
    assert int(variables["iterations"]) == 1
    assert sorted(inside._compiled) == ["stateless/nested"]
