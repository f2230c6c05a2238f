"""A donated step allocates no temporary the size of the parameters.

XLA's buffer assignment (``memory_analysis()``) does not depend on the machine's load, so
these are exact checks of the compiled programs. Lion (its update is the sign of an
interpolation of the moment it then overwrites) and Adafactor (factored statistics) still
need one; see `bench/README.md`.
"""

import jax
import jax.numpy as jnp
import pytest

import optx

# Two leaves that share a shape, one that is alone: aliasing by shape has choices to make.
SHAPES = {"a": (256, 128), "b": (256, 128), "c": (128,)}
PARAM_BYTES = sum(4 * (s[0] * (s[1] if len(s) > 1 else 1)) for s in SHAPES.values())

CASES = {
    "adam": lambda: optx.adam(1e-3),
    "adamw": lambda: optx.adamw(1e-3, weight_decay=0.1),
    "sgd_momentum": lambda: optx.sgd(1e-2, momentum=0.9),
    "clip_adamw_ema": lambda: optx.chain(
        optx.clip_by_global_norm(1.0), optx.adamw(1e-3), optx.ema_params(0.999)
    ),
    "flat_state_clip_adamw": lambda: optx.flatten(
        optx.chain(optx.clip_by_global_norm(1.0), optx.adamw(1e-3))
    ),
}


def _temp_bytes(tx, params) -> int:
    def step(p, s, g):
        updates, s = tx.update(g, s, p)
        return optx.apply_updates(p, updates), s

    grads = jax.tree.map(lambda x: 0.01 * x, params)
    lowered = jax.jit(step, donate_argnums=(0, 1)).lower(params, tx.init(params), grads)
    return lowered.compile().memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("name", list(CASES))
def test_donated_step_needs_no_parameter_sized_temporary(name) -> None:
    params = {k: jnp.full(s, 0.5, jnp.float32) for k, s in SHAPES.items()}
    temp = _temp_bytes(CASES[name](), params)
    # The largest leaf is a quarter of the parameters' bytes: anything above a few scalars
    # is a leaf-sized (or larger) buffer written out.
    assert temp < 1024, f"{name}: {temp} temporary bytes (parameters: {PARAM_BYTES})"


def test_flat_parameters_need_no_temporary_either() -> None:
    params = optx.flatten_tree({k: jnp.full(s, 0.5, jnp.float32) for k, s in SHAPES.items()})
    for name in ("adam", "adamw", "clip_adamw_ema"):
        assert _temp_bytes(CASES[name](), params) < 1024, name
