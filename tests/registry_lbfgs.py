"""Conformance entries of L-BFGS and the line searches (see `registry.py`).

A line search's ``update`` needs the function it minimises: ``value_fn=`` (a module-level
function, so that every entry passes the same object), and ``value=`` and ``grad=``, its
value and gradient at the parameters. The suite's entries pass one fixed set of keyword
arguments to every ``update``, of every tree the suites use (the conformance tree, the
reliability suite's smaller one, the sharded one), so they cannot hold a gradient, which
is a tree shaped like the parameters of that step. They pass ``value=None`` and no
``grad``: optx's line searches then compute both from ``value_fn`` at ``params`` (where
optax requires them), and ``value=None`` also overrides the suite's ``value=1.0``, which
would otherwise stand for the function's value. tests/test_lbfgs.py passes ``value`` and
``grad`` as optax's users do.

The suite's gradients are random, not the loss's: the direction is a descent direction for
some steps and not for others, so both a search that succeeds and one that fails (and
falls back to its safe step) run here. Hyperparameters whose change cannot show in three
such steps are listed as ``unobservable`` (the suite still checks they do not recompile).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import optx

FACTORIES_WITH_ARGS = frozenset({"scale_by_backtracking_linesearch", "scale_by_zoom_linesearch"})

CHAIN = "chain("


def _float32(x: jax.Array) -> jax.Array:
    return x.astype(jnp.complex64 if jnp.iscomplexobj(x) else jnp.float32)


def _abs_sq(x: jax.Array) -> jax.Array:
    return jnp.real(x * jnp.conj(x))  # x * x for a real x


def loss(params: optx.Params) -> jax.Array:
    """A smooth coupled loss of any tree, in float32: ``sum(|x|**2 / 2 + cos(Re x) / 10)``
    plus a coupling ``0.05 * |sum x|**2`` (for real leaves ``|x|**2`` is ``x**2``)."""
    leaves = [_float32(x) for x in jax.tree.leaves(params)]
    total = sum(jnp.sum(x) for x in leaves)
    terms = (0.5 * _abs_sq(x) + 0.1 * jnp.cos(jnp.real(x)) for x in leaves)
    return sum(jnp.sum(t) for t in terms) + 0.05 * _abs_sq(total)


def concave(params: optx.Params) -> jax.Array:
    """``-|params|**2 / 2``: every direction decreases it, far enough along it."""
    return -0.5 * sum(jnp.sum(_abs_sq(_float32(x))) for x in jax.tree.leaves(params))


FN = {"value": None, "value_fn": loss}
# For the zoom search alone, on the suite's random updates: with `loss` a search along an
# ascent direction fails, and its errors are then differences of nearly equal values (a
# float32 round-off of the values, relative to a difference 1e4 times smaller), which jit
# and eager round differently. Along `concave` the decrease always holds (its errors are
# exactly 0) and the search grows the step until its last evaluation.
CONCAVE = {"value": None, "value_fn": concave}
# What three steps cannot show: along `concave` the decrease always holds, and no interval
# is ever zoomed into; with L-BFGS's direction on `loss` the searches end in the growth
# phase too; the backtracking searches never miss the decrease by less than 0.1.
ZOOM_UNOBSERVABLE = ("approx_dec_rtol", "slope_rtol", "stepsize_precision", "tol")
LBFGS_UNOBSERVABLE = (
    "approx_dec_rtol",
    "increase_factor",
    "slope_rtol",
    "stepsize_precision",
    "tol",
)


def entries(register) -> None:
    # The L-BFGS direction alone: no line search, no keyword arguments.
    register("scale_by_lbfgs", optx.scale_by_lbfgs, needs_params=True)
    register(
        "scale_by_lbfgs/unscaled_memory_2",
        lambda: optx.scale_by_lbfgs(memory_size=2, scale_init_precond=False),
        needs_params=True,
    )

    # L-BFGS: the default zoom search, the backtracking one, and a plain learning rate.
    register(
        "lbfgs",
        optx.lbfgs,
        needs_params=True,
        repr_prefix=CHAIN,
        update_kwargs=FN,
        unobservable=LBFGS_UNOBSERVABLE,
    )
    register(
        "lbfgs/backtracking",
        lambda: optx.lbfgs(
            memory_size=3,
            linesearch=optx.scale_by_backtracking_linesearch(8, store_grad=True),
        ),
        needs_params=True,
        repr_prefix=CHAIN,
        update_kwargs=FN,
        unobservable=("slope_rtol",),
    )
    register(
        "lbfgs/learning_rate_no_linesearch",
        lambda: optx.lbfgs(0.1, memory_size=4, linesearch=None),
        needs_params=True,
        repr_prefix=CHAIN,
    )

    # The line searches on the suite's updates.
    register(
        "scale_by_zoom_linesearch",
        lambda: optx.scale_by_zoom_linesearch(10),
        needs_params=True,
        update_kwargs=CONCAVE,
        unobservable=ZOOM_UNOBSERVABLE,
    )
    register(
        "scale_by_zoom_linesearch/bounded_armijo_only",
        lambda: optx.scale_by_zoom_linesearch(
            6, max_learning_rate=8.0, approx_dec_rtol=None, initial_guess_strategy="one"
        ),
        needs_params=True,
        update_kwargs=CONCAVE,
        unobservable=("slope_rtol", "stepsize_precision", "tol"),
    )
    register(
        "scale_by_backtracking_linesearch",
        lambda: optx.scale_by_backtracking_linesearch(10),
        needs_params=True,
        update_kwargs=FN,
        unobservable=("atol",),
    )
    register(
        "scale_by_backtracking_linesearch/store_grad",
        lambda: optx.scale_by_backtracking_linesearch(6, increase_factor=2.0, store_grad=True),
        needs_params=True,
        update_kwargs=FN,
        unobservable=("atol",),
    )
