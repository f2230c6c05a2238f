"""The stateful wrapper's compiled steps update the donated buffers in place.

JAX gives each output the buffer of the first unused donated input with the same shape and
dtype, in order. A step whose outputs come in another order than its donated inputs (new
parameters before the moments) hands the moments' buffers to the parameters, and XLA then
copies every array back: a step 1.4-4x slower on a GPT-shaped tree (`bench/`), with the same
numbers. These tests read the compiled programs, so they fail on that mistake whatever
the machine's speed.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx

# Parameters whose shapes the moments share: the case where the order decides the aliasing.
SHAPES = {"a": (64, 32), "b": (64, 32), "c": (32,)}


def _tree(value):
    return {k: jnp.full(s, value, jnp.float32) for k, s in SHAPES.items()}


def _compiled(opt, kind, *args):
    fn = opt._function(kind)
    if hasattr(fn, "func"):  # a partial of the shared jitted step, its statics bound
        return fn.func.lower(*fn.args, *args).compile()
    return fn.lower(*args).compile()


def _array_copies(compiled) -> list[str]:
    return re.findall(r"f32\[[0-9,]+\]\{[0-9,]*\} copy\(", compiled.as_text())


@pytest.mark.parametrize(
    "make",
    [
        lambda: optx.optimizers.Adam(1e-3),
        lambda: optx.optimizers.AdamW(1e-3, global_clipnorm=1.0, use_ema=True),
        lambda: optx.optimizers.SGD(0.1, momentum=0.9),
    ],
    ids=["adam", "adamw_clip_ema", "sgd_momentum"],
)
def test_steps_copy_no_array(make) -> None:
    opt = make()
    params, grads = _tree(0.5), _tree(0.01)
    opt.build(params)
    step = _compiled(opt, "step", opt._state, opt._count, grads, params)
    assert _array_copies(step) == []
    stateless = _compiled(opt, "stateless", opt.variables, grads, params)
    assert _array_copies(stateless) == []


def test_apply_donates_the_state_and_stateless_apply_the_variables_and_params() -> None:
    opt = optx.optimizers.Adam(0.1)
    params, grads = _tree(0.5), _tree(0.01)
    opt.build(params)
    state = jax.tree.leaves(opt._state)
    new = opt.apply(grads, params)
    assert all(x.is_deleted() for x in state)  # updated in place
    assert not any(x.is_deleted() for x in jax.tree.leaves(params))  # the caller's
    twin = optx.optimizers.Adam(0.1)
    twin.build(params)
    variables = {k: jnp.array(v, copy=True) for k, v in twin.variables.items()}
    mine = jax.tree.map(lambda x: jnp.array(x, copy=True), params)
    given = jax.tree.leaves((variables, mine))
    out, variables = twin.stateless_apply(variables, grads, mine)
    assert all(x.is_deleted() for x in given)
    # Both give the same step, and the outputs come back in their documented order.
    for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(new), strict=True):
        np.testing.assert_array_equal(got, want)
    assert list(variables) == list(twin.variables)
    np.testing.assert_array_equal(variables["iterations"], 1)
