"""Runs Keras 3 (JAX backend) optimizers on given gradients: the reference of the parity tests."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

from collections.abc import Callable, Sequence
from typing import Any

import jax
import keras
import numpy as np


def keras_runner(
    optimizer: keras.optimizers.Optimizer, params: dict[str, np.ndarray]
) -> Callable[
    [Sequence[dict[str, np.ndarray]]], tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]
]:
    """Builds ``optimizer`` for ``params`` once; the returned function runs it from the start.

    Each call of the returned function starts again from ``params`` and the freshly built
    optimizer variables, with one jitted ``stateless_apply`` shared by all calls (one
    compilation for several gradient sequences). It returns the parameters after each step
    and the final optimizer variables by their Keras path (``"adam/kernel_average"``).

    Keras variables are named by the dict keys, so path-based options (Muon's routing,
    weight-decay exclusions by name) see the same names as optx.
    """
    names = sorted(params)
    variables = [keras.Variable(params[n], name=n) for n in names]
    optimizer.build(variables)
    opt_paths = [v.path for v in optimizer.variables]
    opt_init = [v.value for v in optimizer.variables]
    init = [v.value for v in variables]
    step = jax.jit(optimizer.stateless_apply)

    def run(
        grads: Sequence[dict[str, np.ndarray]],
    ) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        values, opt_vars = init, opt_init
        out = []
        for g in grads:
            values, opt_vars = step(opt_vars, [jax.numpy.asarray(g[n]) for n in names], values)
            out.append({n: np.asarray(v) for n, v in zip(names, values, strict=True)})
        return out, {p: np.asarray(v) for p, v in zip(opt_paths, opt_vars, strict=True)}

    return run


def run_keras(
    optimizer: keras.optimizers.Optimizer,
    params: dict[str, np.ndarray],
    grads: Sequence[dict[str, np.ndarray]],
) -> list[dict[str, np.ndarray]]:
    """The parameters after each step of ``grads``, with Keras's ``stateless_apply``."""
    return keras_runner(optimizer, params)(grads)[0]


def run_optx(
    opt: Any, params: dict[str, np.ndarray], grads: Sequence[dict[str, np.ndarray]]
) -> list[dict[str, np.ndarray]]:
    """The parameters after each step of ``grads``, with an optx stateful optimizer."""
    p = {k: jax.numpy.asarray(v) for k, v in params.items()}
    out = []
    for g in grads:
        p = opt.apply({k: jax.numpy.asarray(v) for k, v in g.items()}, p)
        out.append({k: np.asarray(v) for k, v in p.items()})
    return out
