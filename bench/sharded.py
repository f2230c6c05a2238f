"""Sharded training on 8 CPU devices: FSDP and ZeRO-1, optx beside optax.

Run: ``python -m bench.sharded [--tiny] [--loops N]`` (it starts JAX with 8 CPU devices
itself, ``--xla_force_host_platform_device_count=8``).

Two set-ups of a GPT-shaped tree (`bench.workloads.gpt_shapes`; default 4 blocks of width
256, vocabulary 4,096, context 256: 7.4M parameters), AdamW, one donated ``jax.jit`` step of
``update`` + ``apply_updates`` on given gradients:

- FSDP: every matrix sharded over ``data`` along its first dimension the mesh divides
  (vectors too), on a 1-D mesh of 8. optx: ``jax.jit(tx.init)(params)`` with nothing else;
  optax: the same, and then its state placed by hand on the parameters' shardings (what
  its users write; plain ``jit(init)`` would put every moment on one device).
- ZeRO-1: replicated parameters, the state split over ``data``. optx:
  ``jax.jit(tx.init, out_shardings=optx.shard_state(...))`` and a plain step; optax: the
  same state shardings, applied by hand, and the step given ``out_shardings`` (else its
  parameters come back sharded).

Printed per set-up and library: the median step time (ms) and its ratio to optax, the
state's bytes per device (largest over devices), whether the parameters kept their
shardings, and the collectives in the compiled step's HLO (``all-gather``,
``all-reduce``, ``reduce-scatter``, ``collective-permute``, ``all-to-all``).
"""

from __future__ import annotations

import os

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=8".strip()

import argparse
import re
from typing import Any

import jax
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import optx
from bench.timing import time_loop
from bench.workloads import gpt_shapes

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all")


def _is_shape(x: Any) -> bool:
    return isinstance(x, tuple) and all(isinstance(d, int) for d in x)


def fsdp_spec(shape: tuple[int, ...], size: int) -> P:
    """``data`` on the first dimension that ``size`` divides (replicated if none does)."""
    for dim, n in enumerate(shape):
        if n % size == 0:
            return P(*([None] * dim), "data")
    return P()


def make_tree(shapes: Any, mesh: Any, fsdp: bool, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    size = mesh.shape["data"]

    def leaf(shape: tuple[int, ...]) -> jax.Array:
        spec = fsdp_spec(shape, size) if fsdp else P()
        x = (0.02 * rng.standard_normal(shape)).astype(np.float32)
        return jax.device_put(x, NamedSharding(mesh, spec))

    return jax.tree.map(leaf, shapes, is_leaf=_is_shape)


def state_bytes(state: Any) -> int:
    """The largest number of state bytes any one device holds."""
    per_device: dict[int, int] = {}
    for leaf in jax.tree.leaves(state):
        for shard in leaf.addressable_shards:
            n = shard.data.size * shard.data.dtype.itemsize
            per_device[shard.device.id] = per_device.get(shard.device.id, 0) + n
    return max(per_device.values())


def collectives(compiled: Any) -> dict[str, int]:
    text = compiled.as_text()
    return {c: len(re.findall(rf"= [^=\n]*\b{c}(-start)?\(", text)) for c in COLLECTIVES}


def kept(before: Any, after: Any) -> bool:
    return all(
        b.is_equivalent_to(a.sharding, a.ndim)
        for b, a in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True)
    )


def run_case(setup: str, library: str, shapes: Any, mesh: Any, loops: int) -> dict[str, Any]:
    fsdp = setup == "FSDP"
    params = make_tree(shapes, mesh, fsdp, 0)
    grads = make_tree(shapes, mesh, fsdp, 1)
    shardings = jax.tree.map(lambda x: x.sharding, params)
    out_shardings = None
    if library == "optx":
        tx = optx.adamw(1e-3, weight_decay=0.1)
        apply = optx.apply_updates
        if fsdp:
            state = jax.jit(tx.init)(params)
        else:
            state_sh = optx.shard_state(tx, mesh, "data", params=params)
            state = jax.jit(tx.init, out_shardings=state_sh)(params)
    else:
        tx = optax.adamw(1e-3, weight_decay=0.1)
        apply = optax.apply_updates
        # By hand, as optax's users do: the same shardings optx computes for its state.
        state_sh = (
            optx.state_shardings(tx, params)
            if fsdp
            else optx.shard_state(tx, mesh, "data", params=params)
        )
        state = jax.jit(tx.init, out_shardings=state_sh)(params)
        if not fsdp:
            out_shardings = (shardings, state_sh)

    def step(p: Any, s: Any, g: Any) -> tuple:
        u, s = tx.update(g, s, p)
        return apply(p, u), s

    jitted = jax.jit(step, donate_argnums=(0, 1), out_shardings=out_shardings)
    compiled = jitted.lower(params, state, grads).compile()
    found = collectives(compiled)
    box = {"p": params, "s": state}

    def one() -> Any:
        box["p"], box["s"] = compiled(box["p"], box["s"], grads)
        return box["p"]

    timing = time_loop(one, loops)
    return {
        "ms": timing.median * 1e3,
        "state_mb": state_bytes(box["s"]) / 2**20,
        "kept": kept(shardings, box["p"]),
        "collectives": found,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a small tree, few loops (tests)")
    parser.add_argument("--loops", type=int, default=15)
    args = parser.parse_args(argv)
    if args.tiny:
        shapes, loops = gpt_shapes(1, 32, 64, 16), 2
    else:
        shapes, loops = gpt_shapes(4, 256, 4096, 256), args.loops
    count = sum(int(np.prod(s)) for s in jax.tree.leaves(shapes, is_leaf=_is_shape))
    print(f"{jax.device_count()} {jax.devices()[0].platform} devices, {count:,} parameters")
    print(
        "| mesh axes | set-up | library | step (ms) | / optax | state per device (MiB) | "
        "params kept | collectives in the step |"
    )
    print("|---|---|---|---:|---:|---:|---|---|")
    for types in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
        mesh = jax.make_mesh((8,), ("data",), axis_types=(types,))
        for setup in ("FSDP", "ZeRO-1"):
            rows = {lib: run_case(setup, lib, shapes, mesh, loops) for lib in ("optax", "optx")}
            for lib in ("optax", "optx"):
                r = rows[lib]
                shown = ", ".join(f"{k} {v}" for k, v in r["collectives"].items() if v)
                print(
                    f"| {types.name} | {setup} | {lib} | {r['ms']:.2f} | "
                    f"{r['ms'] / rows['optax']['ms']:.2f} | {r['state_mb']:.2f} | "
                    f"{'yes' if r['kept'] else 'no'} | {shown or 'none'} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
