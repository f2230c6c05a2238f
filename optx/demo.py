"""A small end-to-end training run with optx: an MLP on scikit-learn's digits.

Trains one small MLP (plain JAX) on the 8x8 digit images bundled with scikit-learn (a fixed
train/test split, standardised pixels) with several optx optimizers, one `optx.make_step`
call per step. Each optimizer's line of progress shows its compilation, then its steps; then
a table gives each one's final loss and accuracy on the train and test sets, steps per second
(compilation excluded) and compile time, and a PNG shows every step's training loss. Run::

    python -m optx.demo
    python -m optx.demo --steps 2000 --optimizers adam,muon --seed 1 --out curves.png

Each step's batch holds ``--batch-size`` distinct training images drawn at random (all 1,438
of them: full-batch training); every optimizer sees the same batches. The optimizers (names
for ``--optimizers``):

- ``sgd_momentum``: ``optx.sgd(0.05, momentum=0.9)``;
- ``adam``: ``optx.adam(2e-3)``;
- ``adamw``: ``optx.adamw(schedule, weight_decay=1e-2, mask="kernel")``, the schedule a
  ``optx.schedules.warmup_cosine_decay_schedule`` to 3e-3 (warmup: a tenth of the steps);
- ``lion``: ``optx.lion(2e-4, weight_decay=0.1)``;
- ``muon``: ``optx.muon(1e-3, consistent_rms=0.2, weight_decay=0.1)`` (AdamW for biases);
- ``adam_ema``: ``optx.chain(optx.adam(2e-3), optx.ema_params(0.98))``; its loss curve and
  row are those of the averaged weights (``optx.ema_params_value``).

Needs scikit-learn and matplotlib: ``pip install "optx-jax[demo]"``.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib.util
import itertools
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, TextIO

import jax
import jax.numpy as jnp
import numpy as np

import optx

DEFAULT_STEPS = 500
DEFAULT_BATCH_SIZE = 128
HIDDEN = (128, 128)
TEST_FRACTION = 0.2
NUM_IMAGES = 1797  # in scikit-learn's digits
TRAIN_SIZE = NUM_IMAGES - round(TEST_FRACTION * NUM_IMAGES)
PLOT_FORMATS = (".png", ".svg", ".pdf")


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


class Batches:
    """The training examples of each step: ``batch_size`` distinct indices, drawn uniformly.

    Iterating yields one int32 array of shape ``(batch_size,)`` per step, drawn from ``seed``
    in blocks (memory does not grow with ``steps``); every iteration yields the same ones.

    Example:
      >>> batches = Batches(seed=0, steps=3, batch_size=4, num_examples=10)
      >>> len(batches), [sorted(set(b)) == sorted(b) for b in batches]
      (3, [True, True, True])
    """

    def __init__(self, seed: int, steps: int, batch_size: int, num_examples: int) -> None:
        if steps < 0:
            raise ValueError(f"`Batches` needs steps to be >= 0. Received: steps={steps!r}.")
        if not 1 <= batch_size <= num_examples:
            raise ValueError(
                f"`Batches` needs batch_size to be from 1 to num_examples ({num_examples}). "
                f"Received: batch_size={batch_size!r}."
            )
        self.seed, self.steps = seed, steps
        self.batch_size, self.num_examples = batch_size, num_examples

    def __len__(self) -> int:
        return self.steps

    def __repr__(self) -> str:
        return (
            f"Batches(seed={self.seed}, steps={self.steps}, batch_size={self.batch_size}, "
            f"num_examples={self.num_examples})"
        )

    def __iter__(self) -> Iterator[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        for start in range(0, self.steps, 256):
            keys = rng.random((min(256, self.steps - start), self.num_examples), np.float32)
            # The batch_size smallest of uniform keys: a uniform subset, in linear time.
            picked = np.argpartition(keys, self.batch_size - 1, axis=1)[:, : self.batch_size]
            yield from picked.astype(np.int32)


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


def batch_loss(params: Any, indices: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    """`loss_fn` on the examples ``indices`` of ``(x, y)``: the training step's loss.

    The step gathers its batch itself, so the data sets stay on the device.
    """
    return loss_fn(params, x[indices], y[indices])


@jax.jit
def _averaged_batch_loss(state: Any, indices: jax.Array, x: jax.Array, y: jax.Array) -> Any:
    return batch_loss(optx.ema_params_value(state), indices, x, y)


@jax.jit
def evaluate(params: Any, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The MLP's mean cross-entropy and accuracy on ``(x, y)``."""
    return loss_fn(params, x, y), jnp.mean(jnp.argmax(mlp(params, x), axis=1) == y)


class Progress:
    """One line per optimizer on ``stream``: its compilation, then its steps.

    On a terminal the line is rewritten in place, at most ten times a second and cut to the
    terminal's width: a clock while compiling, then a bar. Elsewhere (a file, a pipe, a CI
    log) nothing is rewritten: the line is written once, a piece as each phase ends.

    Args:
      stream: where to write (``None``: nowhere).
      interactive: rewrite the line in place; ``None``: when ``stream`` is a terminal.
      name_width: the width of the optimizers' names column.
    """

    def __init__(
        self, stream: TextIO | None, *, interactive: bool | None = None, name_width: int = 12
    ) -> None:
        self.stream = stream
        if interactive is None:
            interactive = stream is not None and getattr(stream, "isatty", lambda: False)()
        self.interactive = interactive
        self.name_width = name_width
        encoding = (getattr(stream, "encoding", None) or "ascii").lower().replace("-", "")
        self._bar = "█░" if encoding.startswith("utf") else "#-"
        self._lock = threading.Lock()
        self._shown = 0  # the length of the line on screen, 0 when none is open
        self._last_draw = 0.0

    def _columns(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            return shutil.get_terminal_size().columns

    def _draw(self, line: str, end: str = "") -> None:
        """Shows ``line`` in place of the open one (cut to the width unless it ends it)."""
        if self.stream is None:
            return
        with self._lock:
            if not end:
                line = line[: max(self._columns() - 1, 1)]
            self.stream.write("\r" + line.ljust(self._shown) + end)
            self.stream.flush()
            self._shown = 0 if end else len(line)

    def _write(self, text: str, end: bool = False) -> None:
        """Writes the next piece of the line (when not rewriting it in place)."""
        if self.stream is not None:
            self.stream.write(text)
            self.stream.flush()
            self._shown = 0 if end else self._shown + len(text)

    @contextlib.contextmanager
    def compiling(self, name: str) -> Iterator[None]:
        """Shows ``name`` compiling (with a running clock on a terminal) while in the block."""
        self._head = f"{name:<{self.name_width}}  compiling ..."
        if not self.interactive:
            self._write(self._head)
            yield
            return
        start, stop = time.perf_counter(), threading.Event()

        def tick() -> None:
            while True:
                self._draw(f"{self._head} {time.perf_counter() - start:.1f} s")
                if stop.wait(0.1):
                    return

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()

    def compiled(self, seconds: float, steps: int) -> None:
        """Ends the compile phase, which took ``seconds``; ``steps`` follow."""
        self._steps = steps
        self._start = self._last_draw = time.perf_counter()
        if self.interactive:
            self._head += f" {seconds:.1f} s |"
            self.update(0, None, force=True)
        else:
            self._write(f" {seconds:.1f} s | {_plural(steps, 'step')} ...")

    def update(self, done: int, loss: jax.Array | None, *, force: bool = False) -> None:
        """Shows ``done`` steps and the last loss (on a terminal, at most every 0.1 s)."""
        now = time.perf_counter()
        if not self.interactive or not (force or now - self._last_draw >= 0.1):
            return
        self._last_draw = now
        rate = f", {done / (now - self._start):,.0f} steps/s" if done else ""
        last = f", loss {_number(float(loss))}" if loss is not None else ""
        tail = f" {done:,}/{self._steps:,}{rate}{last}"
        # The bar takes what the text leaves of the width, up to 20 characters.
        width = min(20, self._columns() - 2 - len(self._head) - len(tail))
        fill = round(max(width, 0) * done / self._steps)
        bar = f" {self._bar[0] * fill}{self._bar[1] * (width - fill)}" if width >= 5 else ""
        self._draw(f"{self._head}{bar}{tail}")

    def finish(self, seconds: float, loss: float) -> None:
        """Ends the line: the steps' time, their rate and the last loss."""
        rate = f"{self._steps / seconds:,.0f}" if seconds > 0 else "-"
        took = f"{seconds * 1e3:.1f} ms" if seconds < 0.1 else f"{seconds:.2f} s"
        tail = f"{took} ({rate} steps/s), last loss {_number(loss)}"
        if self.interactive:
            self._draw(f"{self._head} {_plural(self._steps, 'step')} in {tail}", end="\n")
        else:
            self._write(f" {tail}\n", end=True)

    def abandon(self) -> None:
        """Ends an unfinished line (after an error), so that what follows starts anew."""
        if self._shown:
            self._write("\n", end=True)


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'s' * (count != 1)}"


def _number(value: float) -> str:
    """A loss for reading: 4 decimals, or 3 significant digits below 0.001.

    A cross-entropy is never negative: a value just below 0 is float32 rounding, shown as 0.
    """
    if -1e-6 < value <= 0:
        return "0.0000"
    return f"{value:.2e}" if abs(value) < 1e-3 else f"{value:.4f}"


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
    averaged: bool = False


def train(
    name: str,
    tx: optx.Transform,
    params: Any,
    data: Data,
    batches: Batches | np.ndarray,
    *,
    averaged: bool = False,
    progress: Progress | None = None,
) -> Result:
    """Mini-batch training of the MLP with ``tx``: one `optx.make_step` call per step.

    The compile phase is one call of the step on copies of the weights and state: it
    compiles the step and runs it once, so that the timed steps are steps only.

    Args:
      name: the optimizer's name, for the result and the progress line.
      tx: the optimizer.
      params: the initial weights (not modified: the steps donate copies).
      data: the data sets.
      batches: the training examples' indices of each step (a `Batches`, or an int array
        of shape ``(steps, batch_size)``); at least one step.
      averaged: report the average of an `optx.ema_params` in ``tx`` instead of the weights.
      progress: where to show the progress (``None``: nowhere).

    Returns:
      The result; ``losses[t]`` is the loss on step ``t``'s batch of the weights it
      reports (the averaged ones if ``averaged``) before that step's update.
    """
    if len(batches) < 1:
        raise ValueError(
            f"`train` needs batches to hold at least one step. Received: {len(batches)} steps."
        )
    progress = progress or Progress(None)
    step = optx.make_step(batch_loss, tx)
    params = jax.tree.map(jnp.copy, params)
    state = tx.init(params)
    xy = (data.x_train, data.y_train)
    indices = iter(batches)
    first = next(indices)
    try:
        with progress.compiling(name):
            start = time.perf_counter()
            copies = jax.tree.map(jnp.copy, (params, state))
            warm = step(*copies, first, *xy)
            if averaged:
                warm = (warm, _averaged_batch_loss(state, first, *xy))
            jax.block_until_ready(warm)
            compile_seconds = time.perf_counter() - start
        progress.compiled(compile_seconds, len(batches))
        losses = []
        start = time.perf_counter()
        for done, idx in enumerate(itertools.chain([first], indices), 1):
            if averaged:
                losses.append(_averaged_batch_loss(state, idx, *xy))
            params, state, loss = step(params, state, idx, *xy)
            if not averaged:
                losses.append(loss)
            progress.update(done, losses[-1])
        jax.block_until_ready((params, state, losses))
        elapsed = time.perf_counter() - start
        losses = np.asarray(jax.device_get(losses), np.float32)
        progress.finish(elapsed, float(losses[-1]))
    finally:
        progress.abandon()
    final = optx.ema_params_value(state) if averaged else params
    train_loss, train_acc = map(float, evaluate(final, *xy))
    test_loss, test_acc = map(float, evaluate(final, data.x_test, data.y_test))
    rate = len(losses) / elapsed
    metrics = (train_loss, train_acc, test_loss, test_acc, rate, compile_seconds)
    return Result(name, losses, *metrics, averaged)


def format_table(results: Sequence[Result]) -> str:
    """The results as an aligned text table, one row per optimizer."""
    columns: dict[str, Callable[[Result], str]] = {
        "optimizer": lambda r: r.name,
        "train loss": lambda r: _number(r.train_loss),
        "train acc": lambda r: f"{r.train_accuracy:.1%}",
        "test loss": lambda r: _number(r.test_loss),
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


def plot_losses(results: Sequence[Result], path: str | None, title: str) -> Any:
    """Draws each result's loss per step; writes the figure to ``path`` (unless ``None``).

    Steps are numbered from 1. The loss axis is logarithmic where the losses span a decade
    or more (ticks at 1, 2 and 5 times a power of ten, written as plain numbers), linear
    otherwise. Past 80 steps each curve is drawn faintly and, over it, the mean of the last
    ``steps // 40`` steps; up to 50 steps each step is a marker. The legend marks the curves
    of averaged weights.

    Returns:
      The matplotlib ``Figure``.
    """
    from matplotlib import ticker
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    steps = min(len(r.losses) for r in results)
    window = steps // 40 if steps >= 80 else 1
    marker = "o" if max(len(r.losses) for r in results) <= 50 else None
    for i, r in enumerate(results):
        label = f"{r.name} (averaged weights)" if r.averaged else r.name
        x = np.arange(1, len(r.losses) + 1)
        if window == 1:
            ax.plot(x, r.losses, color=f"C{i}", marker=marker, markersize=4, label=label)
            continue
        ax.plot(x, r.losses, color=f"C{i}", linewidth=0.6, alpha=0.25)
        smooth = np.convolve(r.losses, np.ones(window) / window, mode="valid")
        ax.plot(x[window - 1 :], smooth, color=f"C{i}", label=label)
    values = np.concatenate([r.losses for r in results])
    values = values[np.isfinite(values) & (values > 0)]
    if values.size and values.max() >= 10 * values.min():
        ax.set_yscale("log")
        decades = np.log10(values.max() / values.min())
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5) if decades < 3 else (1,)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    else:
        ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True, min_n_ticks=1))
    pad = 0.5 if marker else 0.0
    ax.set_xlim(1 - pad, max(len(r.losses) for r in results) + pad)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mini-batch cross-entropy)")
    how = f"faint: every step; solid: mean of the last {window} steps" if window > 1 else ""
    ax.set_title(f"{title}\n{how or 'the loss of every step'}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


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
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help=f"distinct training images per step, up to all {TRAIN_SIZE:,}",
    )
    parser.add_argument("--seed", type=int, default=0, help="weights and batches")
    parser.add_argument(
        "--out",
        default="optx_demo.png",
        help=f"the plot of the loss curves ({', '.join(PLOT_FORMATS)})",
    )
    args = parser.parse_args(argv)
    for flag, low, high, why in (
        ("steps", 1, None, ""),
        ("batch_size", 1, TRAIN_SIZE, " (the training set's size)"),
        ("seed", 0, 2**32 - 1, ""),
    ):
        value = getattr(args, flag)
        if value < low or (high is not None and value > high):
            name = "--" + flag.replace("_", "-")
            bounds = f">= {low}" if high is None else f"from {low} to {high}{why}"
            parser.error(f"{name} needs an integer {bounds}. Received: {name} {value}.")
    names = [n.strip().lower() for n in args.optimizers.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPTIMIZERS]
    if unknown or not names:
        hints = []
        for n in unknown:
            close = [o for o in OPTIMIZERS if n in o] if len(n) >= 3 else []
            close = close or difflib.get_close_matches(n, OPTIMIZERS, n=1, cutoff=0.6)
            hints.append(f"{n} (did you mean {' or '.join(close)}?)" if close else n)
        parser.error(
            f"--optimizers needs comma-separated names among {', '.join(OPTIMIZERS)}. "
            f"Received: --optimizers {args.optimizers!r}"
            + (f" (unknown: {', '.join(hints)})." if unknown else ".")
        )
    args.optimizers = list(dict.fromkeys(names))
    out = args.out
    folder = os.path.dirname(os.path.abspath(out))
    if os.path.splitext(out)[1].lower() not in PLOT_FORMATS:
        formats = f"{', '.join(PLOT_FORMATS[:-1])} or {PLOT_FORMATS[-1]}"
        parser.error(f"--out needs a file name ending in {formats}. Received: --out {out!r}.")
    if not os.path.isdir(folder):
        parser.error(f"--out needs an existing folder. Received: --out {out!r}.")
    if os.path.isdir(out) or not os.access(folder, os.W_OK):
        parser.error(f"--out needs a file that can be written. Received: --out {out!r}.")
    return args


def _say(text: str) -> None:
    print(text, flush=True)  # at once, even into a pipe


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the demo with command-line arguments ``argv``: trains, prints, plots.

    The first line comes before anything slow (scikit-learn, the backend, compiling); the
    progress goes to stderr, the rest to stdout.

    Args:
      argv: the arguments (``sys.argv[1:]`` when ``None``; see ``--help``).

    Returns:
      The exit status: 0 on success, 1 when scikit-learn or matplotlib is missing (a bad
      argument exits through argparse with 2).
    """
    args = _parse_args(argv)
    # Looked up, not imported: importing scikit-learn takes a while.
    for module, package in (("sklearn", "scikit-learn"), ("matplotlib", "matplotlib")):
        if importlib.util.find_spec(module) is None:
            needs = f"optx.demo needs scikit-learn and matplotlib ({package} is missing)"
            print(f'{needs}: pip install "optx-jax[demo]"', file=sys.stderr)
            return 1
    _say(
        f"optx {optx.__version__}, jax {jax.__version__}: {', '.join(args.optimizers)}; "
        f"{_plural(args.steps, 'step')} of {args.batch_size:,} images, "
        f"seed {args.seed}"
    )
    from sklearn.datasets import load_digits

    data = split_digits(*load_digits(return_X_y=True))
    assert len(data.y_train) == TRAIN_SIZE, "scikit-learn's digits changed size"
    sizes = (data.x_train.shape[1], *HIDDEN, 10)
    params = init_mlp(jax.random.key(args.seed), sizes)
    title = f"scikit-learn digits, {len(data.y_train):,} train / {len(data.y_test)} test images, "
    title += f"MLP {'-'.join(map(str, sizes))}"
    loss0, acc0 = map(float, evaluate(params, data.x_train, data.y_train))
    test_acc0 = float(evaluate(params, data.x_test, data.y_test)[1])
    backend, kind = jax.default_backend(), jax.devices()[0].device_kind
    _say(f"{title}, on {backend if kind.lower() == backend else f'{kind} ({backend})'}")
    initial = f"train loss {_number(loss0)}, train acc {acc0:.1%}, test acc {test_acc0:.1%}"
    _say(f"initial weights: {initial}")
    batches = Batches(args.seed, args.steps, args.batch_size, len(data.y_train))
    progress = Progress(sys.stderr, name_width=max(map(len, args.optimizers)))
    results = []
    for name in args.optimizers:
        tx, averaged = OPTIMIZERS[name](args.steps), name in AVERAGED
        results.append(train(name, tx, params, data, batches, averaged=averaged, progress=progress))
    _say(format_table(results))
    if ema := [n for n in args.optimizers if n in AVERAGED]:
        _say(f"({', '.join(ema)}: the averaged weights, from optx.ema_params_value)")
    plot_losses(results, args.out, f"optx demo: {title}, batch {args.batch_size}")
    _say(f"wrote the loss curves to {os.path.abspath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
