"""A small end-to-end training run with optx: a two-spirals classifier.

Trains the same small MLP (plain JAX, no neural-network library) on a synthetic,
deterministic two-spirals data set with several optx optimizers, each step compiled with
``jax.jit``, and prints one row per optimizer: the training loss before and after, the
accuracy on held-out points, the compile time and the steps per second.

Run it with::

    python -m optx.demo
    python -m optx.demo --steps 500 --optimizers adam,adamw_clip --seed 1

The optimizers (names for ``--optimizers``):

- ``sgd_momentum``: ``optx.sgd(0.1, momentum=0.9)``;
- ``adam``: ``optx.adam(1e-2)``;
- ``adamw_clip``: ``optx.chain(optx.clip_by_global_norm(1.0), optx.adamw(1e-2, ...))``,
  decaying the kernels only (a regular expression on parameter paths);
- ``adam_ema``: ``optx.chain(optx.adam(1e-2), optx.ema_params(0.95))``; its row reports
  the averaged weights (`optx.ema_params_value`), not the raw ones.

Needs only optx's runtime dependencies (jax, jaxlib, chex, numpy).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import optx

DEFAULT_STEPS = 1000
HIDDEN = (64, 64)
NUM_TRAIN = 1024
NUM_TEST = 1024


def _sgd_momentum() -> Any:
    return optx.sgd(0.1, momentum=0.9)


def _adam() -> Any:
    return optx.adam(1e-2)


def _adamw_clip() -> Any:
    return optx.chain(
        optx.clip_by_global_norm(1.0), optx.adamw(1e-2, weight_decay=1e-3, mask="kernel")
    )


def _adam_ema() -> Any:
    return optx.chain(optx.adam(1e-2), optx.ema_params(0.95))


OPTIMIZERS: dict[str, Callable[[], Any]] = {
    "sgd_momentum": _sgd_momentum,
    "adam": _adam,
    "adamw_clip": _adamw_clip,
    "adam_ema": _adam_ema,
}
"""The demo's optimizers by name, each a function returning a fresh transform."""

AVERAGED = frozenset({"adam_ema"})
"""Optimizers whose row reports the weights' moving average rather than the raw weights."""


def two_spirals(num: int, seed: int, noise: float = 0.08) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved spirals in the plane, one per class; deterministic in ``seed``.

    Args:
      num: number of points.
      seed: seed of the NumPy generator.
      noise: standard deviation of the Gaussian noise added to each coordinate.

    Returns:
      ``(x, y)``: float32 points of shape ``(num, 2)`` and int32 labels in {0, 1}.
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, num)
    # sqrt spreads the points evenly along the spiral's length (1.5 turns each).
    t = np.sqrt(rng.uniform(0.05, 1.0, num)) * 3 * np.pi
    angle = t + np.pi * labels
    radius = t / (3 * np.pi)
    x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    x = x + noise * rng.normal(size=x.shape)
    return x.astype(np.float32), labels.astype(np.int32)


def init_mlp(key: jax.Array, sizes: Sequence[int]) -> dict[str, dict[str, jax.Array]]:
    """He-initialised dense layers ``{"dense_i": {"kernel", "bias"}}`` for ``sizes``."""
    params = {}
    keys = jax.random.split(key, len(sizes) - 1)
    for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True)):
        kernel = jax.random.normal(k, (n_in, n_out), jnp.float32) * np.sqrt(2.0 / n_in)
        params[f"dense_{i}"] = {"kernel": kernel, "bias": jnp.zeros(n_out, jnp.float32)}
    return params


def mlp(params: dict[str, dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    """The MLP's logits: dense layers with ReLU between them."""
    layers = [params[f"dense_{i}"] for i in range(len(params))]
    for layer in layers[:-1]:
        x = jax.nn.relu(x @ layer["kernel"] + layer["bias"])
    return x @ layers[-1]["kernel"] + layers[-1]["bias"]


def loss_fn(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy of the MLP on ``(x, y)``."""
    log_probs = jax.nn.log_softmax(mlp(params, x))
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))


def accuracy(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    """Fraction of ``(x, y)`` the MLP classifies correctly."""
    return jnp.mean(jnp.argmax(mlp(params, x), axis=1) == y)


@dataclasses.dataclass(frozen=True)
class Result:
    """One optimizer's run: losses on the training set, test accuracy and timings."""

    name: str
    initial_loss: float
    final_loss: float
    test_accuracy: float
    compile_seconds: float
    steps_per_second: float


def train(
    name: str,
    tx: Any,
    params: Any,
    train_data: tuple[jax.Array, jax.Array],
    test_data: tuple[jax.Array, jax.Array],
    steps: int,
    *,
    use_ema: bool = False,
) -> Result:
    """Full-batch training of the MLP with ``tx`` for ``steps`` jitted steps.

    With ``use_ema``, the result reports the average kept by the `optx.ema_params` in
    ``tx`` instead of the trained weights.
    """
    x, y = train_data
    initial_loss = float(loss_fn(params, x, y))
    # The steps donate their inputs' buffers; the caller keeps its initial parameters.
    params = jax.tree.map(jnp.copy, params)
    state = tx.init(params)

    def step(params: Any, state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, Any]:
        grads = jax.grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return optx.apply_updates(params, updates), state

    # Compiled ahead of time so that the timed loop holds steps only; the parameter and
    # state buffers are donated, so each step writes in place.
    start = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, state, x, y).compile()
    compile_seconds = time.perf_counter() - start

    start = time.perf_counter()
    for _ in range(steps):
        params, state = compiled(params, state, x, y)
    jax.block_until_ready((params, state))
    elapsed = time.perf_counter() - start

    if use_ema:
        params = optx.ema_params_value(state)
    return Result(
        name=name,
        initial_loss=initial_loss,
        final_loss=float(loss_fn(params, x, y)),
        test_accuracy=float(accuracy(params, *test_data)),
        compile_seconds=compile_seconds,
        steps_per_second=steps / elapsed if elapsed > 0 else float("inf"),
    )


def format_table(results: Sequence[Result]) -> str:
    """The results as an aligned text table, one row per optimizer."""
    header = ("optimizer", "initial loss", "final loss", "test acc", "compile s", "steps/s")
    rows = [
        (
            r.name,
            f"{r.initial_loss:.4f}",
            f"{r.final_loss:.4f}",
            f"{100 * r.test_accuracy:.1f}%",
            f"{r.compile_seconds:.2f}",
            f"{r.steps_per_second:,.0f}",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [c.rjust(w) for c, w in zip(row, widths, strict=True)]
        cells[0] = row[0].ljust(widths[0])
        return "  ".join(cells)

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *map(line, rows)])


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m optx.demo",
        description="Train a small MLP on two spirals with several optx optimizers.",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        help=f"full-batch training steps per optimizer (default: {DEFAULT_STEPS})",
    )
    parser.add_argument(
        "--optimizers",
        default=",".join(OPTIMIZERS),
        help=f"comma-separated names among {', '.join(OPTIMIZERS)} (default: all)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the data and the initial weights"
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps needs a positive integer. Received: --steps {args.steps}.")
    names = [n.strip() for n in args.optimizers.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPTIMIZERS]
    if unknown or not names:
        parser.error(
            f"--optimizers needs comma-separated names among {', '.join(OPTIMIZERS)}. "
            f"Received: --optimizers {args.optimizers!r}."
        )
    args.optimizers = list(dict.fromkeys(names))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the demo with command-line arguments ``argv`` and prints the table.

    Args:
      argv: the arguments (``sys.argv[1:]`` when ``None``): ``--steps N``,
        ``--optimizers a,b``, ``--seed S``.

    Returns:
      The exit status, 0 on success (a bad argument exits through argparse with 2).
    """
    args = _parse_args(argv)
    x, y = two_spirals(NUM_TRAIN + NUM_TEST, seed=args.seed)
    train_data = (jnp.asarray(x[:NUM_TRAIN]), jnp.asarray(y[:NUM_TRAIN]))
    test_data = (jnp.asarray(x[NUM_TRAIN:]), jnp.asarray(y[NUM_TRAIN:]))
    sizes = (2, *HIDDEN, 2)
    params = init_mlp(jax.random.key(args.seed), sizes)

    print(
        f"optx {optx.__version__}, jax {jax.__version__} on {jax.default_backend()}: "
        f"two spirals, {NUM_TRAIN} train / {NUM_TEST} test points, "
        f"MLP {'-'.join(map(str, sizes))}, {args.steps} full-batch steps, seed {args.seed}"
    )
    results = []
    for name in args.optimizers:
        tx = OPTIMIZERS[name]()
        use_ema = name in AVERAGED
        results.append(train(name, tx, params, train_data, test_data, args.steps, use_ema=use_ema))
    print(format_table(results))
    averaged = [n for n in args.optimizers if n in AVERAGED]
    if averaged:
        print(f"({', '.join(averaged)}: the averaged weights, from optx.ema_params_value)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
