"""Data-parallel training across processes with `jax.distributed` and optx.

Run two processes, each with 4 CPU devices (8 devices in all)::

    for i in 0 1; do
      XLA_FLAGS=--xla_force_host_platform_device_count=4 \
        python examples/multiprocess_data_parallel.py --process-id $i --num-processes 2 \
        --coordinator 127.0.0.1:12345 --out /tmp/params.npy &
    done; wait

or, for the same run in one process on 8 devices, without ``--coordinator``::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
      python examples/multiprocess_data_parallel.py --out /tmp/params.npy

A linear model is trained for 20 steps with `optx.adam` under `jax.jit` on a global mesh
of every device: the parameters are replicated, the batch is sharded over the ``"data"``
axis (each process holds the rows of its own devices), and so are Adam's moments
(`optx.shard_state`, ZeRO-1: each device keeps 1/8 of them). XLA averages the gradient
across devices and processes, and gathers the updates the replicated parameters need.
Process 0 saves the final parameters with `numpy.save` and prints a checksum.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import optx

STEPS = 20
BATCH = 64  # global batch: 8 rows per device on 8 devices
FEATURES = 16


def data(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The global batch of a step: the same on every process (each keeps its own rows)."""
    rng = np.random.default_rng(step)
    x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
    w_true = np.linspace(-1.0, 1.0, FEATURES, dtype=np.float32)
    y = x @ w_true + 0.5 + 0.01 * rng.standard_normal(BATCH).astype(np.float32)
    return x, y


def loss_fn(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean squared error of the linear model on a (global, sharded) batch."""
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def train() -> np.ndarray:
    """Trains on every device JAX sees (all processes); returns the flat final params."""
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
    tx = optx.adam(0.05)

    params = jax.jit(
        lambda: {"w": jnp.zeros(FEATURES), "b": jnp.zeros(())}, out_shardings=replicated
    )()
    # The state, initialised under jit straight into its shardings: the moments split
    # over "data", the step count and hyperparameters replicated.
    state_shardings = optx.shard_state(tx, mesh, "data", params=params)
    state = jax.jit(tx.init, out_shardings=state_shardings)(params)

    @jax.jit
    def step(params, state, x, y):
        grads = jax.grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        new_params = optx.apply_updates(params, updates)
        # Keep the layouts: params replicated, moments sharded.
        new_params = jax.lax.with_sharding_constraint(new_params, replicated)
        return new_params, jax.lax.with_sharding_constraint(state, state_shardings)

    def global_array(a: np.ndarray) -> jax.Array:
        # Each process hands over only the rows of its own devices.
        return jax.make_array_from_callback(a.shape, batch_sharding, lambda index: a[index])

    mu = state[0].mu["w"]
    assert mu.sharding.spec == PartitionSpec("data"), mu.sharding
    for i in range(STEPS):
        x, y = data(i)
        params, state = step(params, state, global_array(x), global_array(y))
    # Replicated: every process holds the whole value on each of its devices.
    w = np.asarray(params["w"].addressable_data(0))
    b = np.asarray(params["b"].addressable_data(0))
    return np.concatenate([w, b[None]])


def main() -> None:
    """Parses the command line, joins the distributed run if asked, trains, saves."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--coordinator", default=None, help="host:port; omit for one process")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--out", default=None, help="where process 0 saves the params (.npy)")
    args = parser.parse_args()
    if args.coordinator is not None:
        # Cross-process collectives on CPU go through gloo.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
        )
    flat = train()
    if jax.process_index() == 0:
        print(
            f"processes={jax.process_count()} devices={jax.device_count()} "
            f"checksum={float(np.sum(flat)):.9g}"
        )
        if args.out is not None:
            np.save(args.out, flat)
    if args.coordinator is not None:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
