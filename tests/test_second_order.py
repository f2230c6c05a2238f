"""`optx.second_order` on a small MLP: against optax and against `jax.hessian`.

Run in float64 (`jax.enable_x64`). optx and optax evaluate the same derivatives by the same
operations (forward-over-reverse products, the same `vmap`), so they agree to a few
roundings; `jax.hessian` (forward over reverse of the whole Hessian) orders the sums
differently, which the bound `_bound` covers.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import flatten_util

import optx

EPS64 = float(np.finfo(np.float64).eps)
BATCH, IN, HIDDEN, OUT = 5, 3, 4, 2


def _mlp(params: Any, inputs: jax.Array) -> jax.Array:
    h = jnp.tanh(inputs @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def loss(params: Any, inputs: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean squared error of a one-hidden-layer tanh network."""
    return jnp.mean((_mlp(params, inputs) - targets) ** 2)


def nll(params: Any, inputs: jax.Array, targets: jax.Array) -> jax.Array:
    """Softmax cross-entropy of the network's outputs (integer targets)."""
    logits = _mlp(params, inputs)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), targets[:, None], 1))


def _data() -> tuple[Any, jax.Array, jax.Array, jax.Array]:
    rng = np.random.default_rng(0)
    shapes = {"w1": (IN, HIDDEN), "b1": (HIDDEN,), "w2": (HIDDEN, OUT), "b2": (OUT,)}
    params = {k: jnp.asarray(rng.standard_normal(s)) for k, s in shapes.items()}
    inputs = jnp.asarray(rng.standard_normal((BATCH, IN)))
    targets = jnp.asarray(rng.standard_normal((BATCH, OUT)))
    labels = jnp.asarray(rng.integers(0, OUT, BATCH))
    return params, inputs, targets, labels


def _optax(name: str, *args: Any) -> Any:
    with warnings.catch_warnings():  # optax 0.2.8 deprecates these three
        warnings.simplefilter("ignore", DeprecationWarning)
        return getattr(optax.second_order, name)(*args)


@functools.cache
def _results() -> dict[str, np.ndarray]:
    """Everything the float64 tests compare, from one jitted program (NumPy out)."""
    with jax.enable_x64(True):
        params, inputs, targets, labels = _data()
        flat, unravel = flatten_util.ravel_pytree(params)
        v = jnp.asarray(np.random.default_rng(1).standard_normal(flat.size))

        @jax.jit
        def go(params: Any, inputs: jax.Array, targets: jax.Array, labels: jax.Array) -> dict:
            def ravel(tree: Any) -> jax.Array:
                return flatten_util.ravel_pytree(tree)[0]

            def per_example(x: jax.Array, y: jax.Array) -> jax.Array:
                return jax.hessian(lambda f: loss(unravel(f), x[None], y[None]))(flat)

            args = (params, inputs, targets)
            return {
                "v": v,
                "hessian": jax.hessian(lambda f: loss(unravel(f), inputs, targets))(flat),
                "per_example": jax.vmap(per_example)(inputs, targets),
                "hvp": ravel(optx.second_order.hvp(loss, v, *args)),
                "hvp_tree": optx.second_order.hvp(loss, v, *args),
                "optax_hvp": ravel(_optax("hvp", loss, v, *args)),
                "diag": optx.second_order.hessian_diag(loss, *args),
                "optax_diag": _optax("hessian_diag", loss, *args),
                "fisher": optx.second_order.fisher_diag(nll, params, inputs, labels),
                "optax_fisher": _optax("fisher_diag", nll, params, inputs, labels),
                "grad": ravel(jax.grad(nll)(params, inputs, labels)),
            }

        return jax.tree.map(np.asarray, go(params, inputs, targets, labels))


def _bound(r: dict[str, Any]) -> float:
    # float64 round-off of an entry of the Hessian (either way of computing it): a sum over
    # the BATCH * OUT squared errors of chain-rule products through the two layers (sums of
    # at most HIDDEN * IN terms, about 12 roundings per product: tanh, its two derivatives,
    # the products), off by (BATCH * OUT + HIDDEN * IN + 12) EPS64 of the sum of the terms'
    # sizes (Higham). Those are bounded by the per-example Hessians' sizes, summed; twice
    # for the two computations compared.
    terms = float(np.sum(np.max(np.abs(r["per_example"]), (1, 2))))
    return 2 * (BATCH * OUT + HIDDEN * IN + 12) * EPS64 * terms


def test_hvp_matches_optax_and_the_hessian() -> None:
    r = _results()
    bound = _bound(r)
    params = _data()[0]
    assert jax.tree.structure(r["hvp_tree"]) == jax.tree.structure(params)
    np.testing.assert_allclose(r["hvp"], r["optax_hvp"], atol=bound)
    # H v sums len(v) products of entries, each off by `bound`.
    np.testing.assert_allclose(
        r["hvp"], r["hessian"] @ r["v"], atol=bound * float(np.sum(np.abs(r["v"])))
    )


def test_hessian_diag_matches_optax_and_the_hessian() -> None:
    r = _results()
    bound = _bound(r)
    assert r["diag"].shape == (r["hessian"].shape[0],)
    np.testing.assert_allclose(r["diag"], r["optax_diag"], atol=bound)
    np.testing.assert_allclose(r["diag"], np.diag(r["hessian"]), atol=bound)
    # The output bias enters each of the BATCH * OUT squared errors linearly: 2 / OUT.
    # (ravel_pytree orders the keys b1, b2, w1, w2.)
    b2 = r["diag"][HIDDEN : HIDDEN + OUT]
    np.testing.assert_allclose(b2, np.full(OUT, 2.0 / OUT), rtol=16 * EPS64)


def test_fisher_diag_matches_optax_and_the_gradient() -> None:
    r = _results()
    # The same gradient, squared: one rounding.
    np.testing.assert_allclose(r["fisher"], r["optax_fisher"], rtol=2 * EPS64)
    np.testing.assert_allclose(r["fisher"], r["grad"] ** 2, rtol=2 * EPS64)


def test_float32_and_jit() -> None:
    params, inputs, targets, _ = _data()
    params = jax.tree.map(lambda p: p.astype(jnp.float32), params)
    inputs, targets = inputs.astype(jnp.float32), targets.astype(jnp.float32)
    diag = jax.jit(optx.second_order.hessian_diag, static_argnums=0)(loss, params, inputs, targets)
    assert diag.dtype == jnp.float32 and diag.shape == (26,)


def test_hvp_error() -> None:
    params = {"w": jnp.ones(3)}
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`hvp` needs v of shape (3,) (the parameters flattened). Received: v of shape (2,)."
        ),
    ):
        optx.second_order.hvp(loss, jnp.ones(2), params, jnp.ones(1), jnp.ones(1))
