"""The workloads: parameter trees (as shapes), by size, and what each size runs.

``--size full`` is what `bench/README.md` reports; ``small`` is for development; ``tiny``
runs every benchmark once in seconds (the CI smoke test).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

SIZES = ("tiny", "small", "full")
# The variant name of the steps compiled with `optx.compiler_options()`.
XLA_OPTIONS = "XLA options"


def gpt_shapes(layers: int, width: int, vocab: int, context: int) -> dict[str, Any]:
    """A GPT-2-shaped tree: embeddings, ``layers`` blocks of 12 leaves, a final norm."""

    def dense(n_in: int, n_out: int) -> dict[str, tuple[int, ...]]:
        return {"kernel": (n_in, n_out), "bias": (n_out,)}

    def norm() -> dict[str, tuple[int, ...]]:
        return {"scale": (width,), "bias": (width,)}

    block = {
        "ln_1": norm(),
        "attn": {"qkv": dense(width, 3 * width), "proj": dense(width, width)},
        "ln_2": norm(),
        "mlp": {"fc": dense(width, 4 * width), "proj": dense(4 * width, width)},
    }
    return {
        "wte": (vocab, width),
        "wpe": (context, width),
        "blocks": [block] * layers,
        "ln_f": norm(),
    }


def leaves_shapes(count: int, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    return {f"p{i:04d}": shape for i in range(count)}


@dataclasses.dataclass(frozen=True)
class Workload:
    """A tree of shapes, the optimizers run on it, and whether peers beyond optax run."""

    name: str
    title: str
    shapes: Any  # a pytree whose leaves are shape tuples
    optimizers: tuple[str, ...]
    # The optimizers also timed without donation, run by Keras, and run by optx's flat
    # variants (each a compile of 5-20 s on 1,000 leaves for Keras and optx's flat state:
    # the full size limits them there, to keep the run near 10 minutes).
    nondonated: tuple[str, ...]
    keras: tuple[str, ...]
    flat_state: tuple[str, ...]
    flat_params: tuple[str, ...]
    # The steps compiled with `optx.compiler_options()` (optax's and optx's per-leaf).
    xla_options: tuple[str, ...] = ()

    def runs(self, library: str, variant: str, optimizer: str) -> bool:
        """Whether this size runs that row (optax and optx's per-leaf step always run)."""
        limit = {"keras": self.keras, "flat state": self.flat_state}
        limit["flat params"] = self.flat_params
        limit[XLA_OPTIONS] = limit[f"per-leaf, {XLA_OPTIONS}"] = self.xla_options
        return optimizer in limit.get(variant, limit.get(library, ALL))

    def leaf_shapes(self) -> list[tuple[int, ...]]:
        return jax.tree.leaves(self.shapes, is_leaf=_is_shape)

    def num_leaves(self) -> int:
        return len(self.leaf_shapes())

    def num_params(self) -> int:
        total = 0
        for s in self.leaf_shapes():
            n = 1
            for d in s:
                n *= d
            total += n
        return total


def _is_shape(x: Any) -> bool:
    return isinstance(x, tuple) and all(isinstance(d, int) for d in x)


ALL = ("adam", "adamw", "sgd", "lion", "adafactor", "chain")

# name -> size -> (shapes, title)
_TREES: dict[str, dict[str, tuple[Any, str]]] = {
    "large": {
        "tiny": (leaves_shapes(1, (64, 64)), "one leaf of 64x64"),
        "small": (leaves_shapes(1, (1000, 1000)), "one leaf of 1e6"),
        "full": (leaves_shapes(1, (5000, 10000)), "one leaf of 5e7 (5,000 x 10,000)"),
    },
    "wide": {
        "tiny": (leaves_shapes(4, (256,)), "4 leaves of 256"),
        "small": (leaves_shapes(200, (5000,)), "200 leaves of 5e3"),
        "full": (leaves_shapes(1000, (50000,)), "1,000 leaves of 5e4"),
    },
    "many": {
        "tiny": (leaves_shapes(8, (64,)), "8 leaves of 64"),
        "small": (leaves_shapes(200, (64,)), "200 leaves of 64"),
        "full": (leaves_shapes(1000, (64,)), "1,000 leaves of 64 (dispatch-bound)"),
    },
    "gpt": {
        "tiny": (gpt_shapes(1, 16, 64, 16), "GPT-shaped, 1 block, width 16"),
        "small": (gpt_shapes(16, 64, 1024, 128), "GPT-shaped, 16 blocks, width 64"),
        "full": (gpt_shapes(16, 256, 8192, 512), "GPT-shaped, 16 blocks, width 256"),
    },
}
STEP_WORKLOADS = tuple(_TREES)
OTHER_WORKLOADS = ("compile", "stateful")
WORKLOADS = STEP_WORKLOADS + OTHER_WORKLOADS


# The tiny size (a smoke test) runs Keras, the non-donated step and optx's flat variants of
# each optimizer on one workload only; the full size runs Keras, the non-donated step and
# optx's flat state for Adam only on the two 1,000-leaf trees.
_TINY_EXTRAS = {"large": ("adam", "adamw"), "wide": ("sgd", "lion"), "many": ("adafactor",)}
_TINY_EXTRAS["gpt"] = ("chain",)


def workload(name: str, size: str) -> Workload:
    shapes, title = _TREES[name][size]
    extras = flat_params = ALL
    if size == "tiny":
        extras = flat_params = _TINY_EXTRAS[name]
    elif size == "full" and name in ("wide", "many"):
        extras = ("adam",)
    return Workload(name, title, shapes, ALL, extras, extras, extras, flat_params, extras)


# Leaf counts of the compile-time sweep (leaves of 64 floats) and of the per-call fit.
COMPILE_LEAVES = {"tiny": (2, 8), "small": (100, 300), "full": (100, 1000, 5000)}
CALL_LEAVES = {"tiny": (1, 4), "small": (1, 10, 100, 300), "full": (1, 10, 100, 300, 1000)}


def materialise(shapes: Any, seed: int, scale: float) -> Any:
    """Float32 arrays of the given shapes, normal with standard deviation ``scale``."""
    leaves, treedef = jax.tree.flatten(shapes, is_leaf=_is_shape)
    rng = np.random.default_rng(seed)
    arrays = [
        jax.device_put((scale * rng.standard_normal(s, np.float32)).astype(np.float32))
        for s in leaves
    ]
    return jax.tree.unflatten(treedef, arrays)


def copy_tree(tree: Any) -> Any:
    """Fresh buffers (a donated step consumes its inputs); compiles nothing."""
    return jax.tree.map(lambda x: jax.device_put(x, may_alias=False), tree)
