"""The stateful wrapper checks its inputs fully once, then by their avals (the fast path).

Whatever the path, a wrong call raises or warns as it did on the first step.
"""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import optx
from optx._src.stateful import step as stateful


# Strongly typed, as the step's outputs are: a weak-typed input has another aval, so the
# step after it would run the full checks once more.
def _params():
    return {"a": jnp.ones(3, jnp.float32), "b": {"c": jnp.full((2, 2), 2.0, jnp.float32)}}


def _grads():
    return {"a": jnp.full(3, 0.5, jnp.float32), "b": {"c": jnp.full((2, 2), -0.5, jnp.float32)}}


@pytest.fixture
def counted(monkeypatch):
    """Counts the full checks that `apply` and `stateless_apply` run."""
    calls = []
    full = stateful.check_grads

    def check_grads(*args):
        calls.append(args[0])
        return full(*args)

    monkeypatch.setattr(stateful, "check_grads", check_grads)
    return calls


def test_full_checks_run_once_for_unchanged_inputs(counted):
    opt = optx.optimizers.Adam(0.1)
    params = _params()
    for _ in range(3):
        params = opt.apply(_grads(), params)
    assert counted == ["apply"]
    variables = opt.variables
    for _ in range(2):
        params, variables = opt.stateless_apply(variables, _grads(), params)
    assert counted == ["apply"]  # the same avals: the same verdict


def test_fast_path_gives_the_same_parameters_as_the_full_checks(counted):
    fast, slow = optx.optimizers.Adam(0.1), optx.optimizers.Adam(0.1)
    p_fast = p_slow = _params()
    for _ in range(3):
        p_fast = fast.apply(_grads(), p_fast)
        slow._checked = None  # forget: every step runs the full checks
        p_slow = slow.apply(_grads(), p_slow)
    assert counted.count("apply") == 4
    for x, y in zip(jax.tree.leaves(p_fast), jax.tree.leaves(p_slow), strict=True):
        np.testing.assert_array_equal(x, y)


def test_wrong_gradient_shape_still_raises_after_fast_steps():
    opt = optx.optimizers.Adam(0.1)
    params = opt.apply(_grads(), _params())
    params = opt.apply(_grads(), params)
    bad = {"a": jnp.ones(4), "b": {"c": jnp.ones((2, 2))}}
    msg = "`apply` needs gradients with the shapes of the parameters. Received: 'a' of shape (4,)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        opt.apply(bad, params)


def test_wrong_parameter_dtype_still_raises_after_fast_steps():
    opt = optx.optimizers.Adam(0.1)
    params = opt.apply(_grads(), _params())
    params = opt.apply(_grads(), params)
    params["a"] = params["a"].astype(jnp.bfloat16)
    msg = "`apply` needs the parameters this optimizer was built with. Received: 'a' of shape"
    with pytest.raises(ValueError, match=re.escape(msg)):
        opt.apply(_grads(), params)


def test_missing_gradient_warns_on_every_call():
    opt = optx.optimizers.Adam(0.1)
    params = opt.apply(_grads(), _params())
    grads = {"a": None, "b": {"c": jnp.ones((2, 2))}}
    for _ in range(2):
        with pytest.warns(UserWarning, match=re.escape("gradients do not exist for ['a']")):
            params = opt.apply(grads, params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.apply(_grads(), params)  # back to complete gradients: silent
