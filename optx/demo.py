"""A small end-to-end training run with optx: an MLP on scikit-learn's digits.

Trains one small MLP (plain JAX) on the 8x8 digit images bundled with scikit-learn (a fixed
train/test split, standardised pixels) with several optx optimizers, each running chunks of
steps compiled as one ``jax.lax.scan`` under a progress bar; prints each optimizer's final
loss and accuracy on the train and test sets, steps per second (compilation excluded) and
compile time; and draws every step's training loss to a PNG. Run it with::

    python -m optx.demo
    python -m optx.demo --steps 2000 --optimizers adam,muon --seed 1 --out curves.png

The optimizers (names for ``--optimizers``):

- ``sgd_momentum``: ``optx.sgd(0.05, momentum=0.9)``;
- ``adam``: ``optx.adam(2e-3)``;
- ``adamw``: ``optx.adamw(schedule, weight_decay=1e-2, mask="kernel")``, the schedule a
  ``optx.schedules.warmup_cosine_decay_schedule`` to 3e-3 (warmup: a tenth of the steps);
- ``lion``: ``optx.lion(2e-4, weight_decay=0.1)``;
- ``muon``: ``optx.muon(1e-3, consistent_rms=0.2, weight_decay=0.1)`` (AdamW for biases);
- ``adam_ema``: ``optx.chain(optx.adam(2e-3), optx.ema_params(0.98))``; its loss curve and
  row are those of the averaged weights (``optx.ema_params_value``).

Needs scikit-learn, tqdm and matplotlib: ``pip install "optx-jax[demo]"``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import optx

DEFAULT_STEPS = 500
DEFAULT_BATCH_SIZE = 128
CHUNK = 50
HIDDEN = (128, 128)
TEST_FRACTION = 0.2


def _adamw(steps: int) -> optx.Transform:
    warmup = steps // 10
    schedule = optx.schedules.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=3e-3, warmup_steps=warmup, decay_steps=max(steps, warmup + 1)
    )
    return optx.adamw(schedule, weight_decay=1e-2, mask="kernel")


OPTIMIZERS: dict[str, Callable[[int], optx.Transform]] = {
    "sgd_momentum": lambda steps: optx.sgd(0.05, momentum=0.9),
    "adam": lambda steps: optx.adam(2e-3),
    "adamw": _adamw,
    "lion": lambda steps: optx.lion(2e-4, weight_decay=0.1),
    "muon": lambda steps: optx.muon(1e-3, consistent_rms=0.2, weight_decay=0.1),
    "adam_ema": lambda steps: optx.chain(optx.adam(2e-3), optx.ema_params(0.98)),
}
"""The demo's optimizers by name, each a function of the number of steps."""

AVERAGED = frozenset({"adam_ema"})
"""Optimizers reported through the weights' moving average rather than the raw weights."""


class Data(NamedTuple):
    """Standardised features (float32) and labels (int32) of the train and test sets."""

    x_train: jax.Array
    y_train: jax.Array
    x_test: jax.Array
    y_test: jax.Array


def split_digits(images: np.ndarray, labels: np.ndarray) -> Data:
    """A fixed train/test split of ``(images, labels)`` (shapes ``(n, d)`` and ``(n,)``).

    The split does not depend on the demo's seed. Each feature is centred and scaled by the
    training set's mean and standard deviation (constant features stay 0).
    """
    order = np.random.default_rng(0).permutation(len(labels))
    num_test = round(TEST_FRACTION * len(labels))
    test, train = order[:num_test], order[num_test:]
    mean, std = images[train].mean(axis=0), images[train].std(axis=0)
    x = ((images - mean) / np.where(std > 0, std, 1.0)).astype(np.float32)
    y = labels.astype(np.int32)
    return Data(*map(jnp.asarray, (x[train], y[train], x[test], y[test])))


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
    """Mean softmax cross-entropy of the MLP on ``(x, y)``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> params = init_mlp(jax.random.key(0), (4, 8, 3))
      >>> float(loss_fn(params, jnp.zeros((2, 4)), jnp.array([0, 2])))  # uniform: ln 3
      1.0986...
    """
    log_probs = jax.nn.log_softmax(mlp(params, x))
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))


@jax.jit
def evaluate(params: Any, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The MLP's mean cross-entropy and accuracy on ``(x, y)``."""
    return loss_fn(params, x, y), jnp.mean(jnp.argmax(mlp(params, x), axis=1) == y)


class Result(NamedTuple):
    """One optimizer's run: the loss of every step, final metrics and timings."""

    name: str
    losses: np.ndarray
    train_loss: float
    train_accuracy: float
    test_loss: float
    test_accuracy: float
    steps_per_second: float
    compile_seconds: float


def train(
    name: str,
    tx: optx.Transform,
    params: Any,
    data: Data,
    batches: np.ndarray,
    *,
    averaged: bool = False,
    chunk: int = CHUNK,
    progress: bool = False,
) -> Result:
    """Mini-batch training of the MLP with ``tx``, ``chunk`` steps per compiled scan.

    Args:
      name: the optimizer's name, for the result and the progress bar.
      tx: the optimizer.
      params: the initial weights (not modified: the steps donate copies).
      data: the data sets.
      batches: the training examples' indices of each step, shape ``(steps, batch_size)``.
      averaged: report the average of an `optx.ema_params` in ``tx`` instead of the weights.
      chunk: steps per compiled ``jax.lax.scan``.
      progress: show a progress bar (tqdm's, on stderr).

    Returns:
      The result; ``losses[t]`` is the loss on step ``t``'s batch of the weights it
      reports (the averaged ones if ``averaged``) before that step's update.
    """

    def run_chunk(params: Any, state: Any, indices: jax.Array, x: jax.Array, y: jax.Array) -> Any:
        def one_step(carry: tuple[Any, Any], idx: jax.Array) -> tuple[Any, jax.Array]:
            params, state = carry
            loss, grads = jax.value_and_grad(loss_fn)(params, x[idx], y[idx])
            if averaged:
                loss = loss_fn(optx.ema_params_value(state), x[idx], y[idx])
            updates, state = tx.update(grads, state, params)
            return (optx.apply_updates(params, updates), state), loss

        return jax.lax.scan(one_step, (params, state), indices)

    params = jax.tree.map(jnp.copy, params)
    state = tx.init(params)
    chunks = [jnp.asarray(batches[s : s + chunk]) for s in range(0, len(batches), chunk)]
    # Compiled ahead of time (a last, shorter chunk is another program) so that the timed
    # loop holds steps only. The data are arguments, not constants: faster to compile.
    start = time.perf_counter()
    jitted = jax.jit(run_chunk, donate_argnums=(0, 1))
    compiled = {
        c.shape: jitted.lower(params, state, c, data.x_train, data.y_train).compile()
        for c in {c.shape: c for c in chunks}.values()
    }
    compile_seconds = time.perf_counter() - start

    from tqdm import tqdm

    losses, elapsed = [], 0.0
    with tqdm(total=len(batches), desc=f"{name:>12}", unit="step", disable=not progress) as bar:
        for indices in chunks:
            start = time.perf_counter()
            step = compiled[indices.shape]
            (params, state), chunk_losses = step(params, state, indices, data.x_train, data.y_train)
            losses.append(np.asarray(chunk_losses))  # waits for the chunk
            elapsed += time.perf_counter() - start
            bar.set_postfix(loss=f"{losses[-1][-1]:.4f}", refresh=False)
            bar.update(len(indices))
    final = optx.ema_params_value(state) if averaged else params
    train_loss, train_acc = map(float, evaluate(final, data.x_train, data.y_train))
    test_loss, test_acc = map(float, evaluate(final, data.x_test, data.y_test))
    speed = len(batches) / elapsed if elapsed > 0 else float("inf")
    losses = np.concatenate(losses)
    return Result(name, losses, train_loss, train_acc, test_loss, test_acc, speed, compile_seconds)


def format_table(results: Sequence[Result]) -> str:
    """The results as an aligned text table, one row per optimizer."""
    columns: dict[str, Callable[[Result], str]] = {
        "optimizer": lambda r: r.name,
        "train loss": lambda r: f"{r.train_loss:.4f}",
        "train acc": lambda r: f"{r.train_accuracy:.1%}",
        "test loss": lambda r: f"{r.test_loss:.4f}",
        "test acc": lambda r: f"{r.test_accuracy:.1%}",
        "steps/s": lambda r: f"{r.steps_per_second:,.0f}",
        "compile s": lambda r: f"{r.compile_seconds:.2f}",
    }
    rows = [list(columns), *([cell(r) for cell in columns.values()] for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    rows.insert(1, ["-" * w for w in widths])
    just = [str.ljust] + [str.rjust] * (len(widths) - 1)
    return "\n".join(
        "  ".join(j(c, w) for j, c, w in zip(just, row, widths, strict=True)) for row in rows
    )


def plot_losses(results: Sequence[Result], path: str, title: str) -> None:
    """Writes a PNG of each result's loss per step (log scale) to ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    window = max(1, min(len(r.losses) for r in results) // 40)
    for i, r in enumerate(results):
        color = f"C{i}"
        ax.plot(r.losses, color=color, linewidth=0.6, alpha=0.25)
        smooth = np.convolve(r.losses, np.ones(window) / window, mode="valid")
        ax.plot(np.arange(window - 1, len(r.losses)), smooth, color=color, label=r.name)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mini-batch cross-entropy)")
    ax.set_title(f"{title}\nfaint: every step; solid: mean of the last {window} steps")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=110)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m optx.demo",
        description="Train a small MLP on scikit-learn's digits with several optx optimizers.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="per optimizer")
    parser.add_argument(
        "--optimizers",
        default=",".join(OPTIMIZERS),
        help=f"comma-separated names among {', '.join(OPTIMIZERS)}",
    )
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="examples")
    parser.add_argument("--seed", type=int, default=0, help="weights and batches")
    parser.add_argument("--out", default="optx_demo.png", help="the PNG of the loss curves")
    args = parser.parse_args(argv)
    for flag, low in (("steps", 1), ("batch_size", 1), ("seed", 0)):
        if (value := getattr(args, flag)) < low:
            name = "--" + flag.replace("_", "-")
            parser.error(f"{name} needs an integer >= {low}. Received: {name} {value}.")
    names = [n.strip() for n in args.optimizers.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPTIMIZERS]
    if unknown or not names:
        parser.error(
            f"--optimizers needs comma-separated names among {', '.join(OPTIMIZERS)}. "
            f"Received: --optimizers {args.optimizers!r}"
            + (f" (unknown: {', '.join(unknown)})." if unknown else ".")
        )
    args.optimizers = list(dict.fromkeys(names))
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        parser.error(f"--out needs an existing folder. Received: --out {args.out!r}.")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the demo with command-line arguments ``argv``: trains, prints, plots.

    Args:
      argv: the arguments (``sys.argv[1:]`` when ``None``; see ``--help``).

    Returns:
      The exit status: 0 on success, 1 when scikit-learn, tqdm or matplotlib is missing (a
      bad argument exits through argparse with 2).
    """
    args = _parse_args(argv)
    try:
        import matplotlib  # noqa: F401
        import tqdm  # noqa: F401
        from sklearn.datasets import load_digits
    except ImportError as error:
        missing = {"sklearn": "scikit-learn"}.get(str(error.name).split(".")[0], error.name)
        needs = f"optx.demo needs scikit-learn, tqdm and matplotlib ({missing} is missing)"
        print(f'{needs}: pip install "optx-jax[demo]"', file=sys.stderr)
        return 1

    data = split_digits(*load_digits(return_X_y=True))
    sizes = (data.x_train.shape[1], *HIDDEN, 10)
    params = init_mlp(jax.random.key(args.seed), sizes)
    # Uniform draws with replacement, the same for every optimizer.
    rng = np.random.default_rng(args.seed)
    batches = rng.integers(0, len(data.y_train), (args.steps, args.batch_size), dtype=np.int32)
    title = f"scikit-learn digits, {len(data.y_train)} train / {len(data.y_test)} test images, "
    title += f"MLP {'-'.join(map(str, sizes))}"
    print(f"optx {optx.__version__}, jax {jax.__version__} on {jax.default_backend()}: {title}")
    loss0, acc0 = map(float, evaluate(params, data.x_train, data.y_train))
    print(
        f"{args.steps} steps of batch {args.batch_size} ({CHUNK} per compiled scan), seed "
        f"{args.seed}; initial weights: train loss {loss0:.4f}, train acc {acc0:.1%}"
    )
    results = []
    for name in args.optimizers:
        tx, averaged = OPTIMIZERS[name](args.steps), name in AVERAGED
        results.append(train(name, tx, params, data, batches, averaged=averaged, progress=True))
    print(format_table(results))
    if ema := [n for n in args.optimizers if n in AVERAGED]:
        print(f"({', '.join(ema)}: the averaged weights, from optx.ema_params_value)")
    plot_losses(results, args.out, f"optx demo: {title}, batch {args.batch_size}")
    print(f"wrote the loss curves to {os.path.abspath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
