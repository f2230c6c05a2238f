"""Gradient noise: `add_noise`, `noisy_sgd`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import Chain, chain
from optx._src.keys import KeySpec, initial_key_data, key_spec, warn_seed, wrap_key
from optx._src.scaling import scale_by_learning_rate


class AddNoiseState(NamedTuple):
    """State of `add_noise`: the step count, the random key, the hyperparameters.

    ``rng_key`` is the raw data of the key (``jax.random.key_data``, uint32), so the state
    holds plain arrays that NumPy, checkpoints and tree utilities accept.
    """

    count: jax.Array
    rng_key: jax.Array
    hyperparams: dict[str, jax.Array]


@transform
class AddNoise(Transform):
    """See `add_noise`."""

    name = "add_noise"
    eta: ScalarOrSchedule = hp.field(0.01, hp.NONNEG)
    gamma: ScalarOrSchedule = hp.field(0.55, hp.NONNEG)
    key: KeySpec = 0

    def init(self, params: Params) -> AddNoiseState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        return AddNoiseState(zero_count(), initial_key_data(self.key), self.init_hyperparams())

    def update(
        self, updates: Updates, state: AddNoiseState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, AddNoiseState]:
        del params, extra
        checks.float_updates(f"{self.name}.update", updates, complex_ok=True)
        h = state.hyperparams
        count = safe_increment(state.count)
        std = jnp.sqrt(h["eta"] / count.astype(jnp.float32) ** h["gamma"])
        key = wrap_key(state.rng_key, self.key)
        key, sample_key = jax.random.split(key)
        leaves, treedef = jax.tree.flatten(updates)
        keys = jax.random.split(sample_key, len(leaves))

        def noisy(g: jax.Array, k: jax.Array) -> jax.Array:
            # Drawn in at least float32, so bfloat16 leaves get the float32 run's noise; a
            # complex leaf gets complex noise (variance 1/2 in each part), as in optax.
            dtype = jnp.promote_types(g.dtype, jnp.float32)
            noise = jax.random.normal(k, jnp.shape(g), dtype)
            return (g + std * noise).astype(g.dtype)

        out = [noisy(g, keys[i]) for i, g in enumerate(leaves)]
        new_state = AddNoiseState(count, jax.random.key_data(key), h)
        return jax.tree.unflatten(treedef, out), new_state


def add_noise(
    eta: float, gamma: float, key: jax.Array | int | None = None, *, seed: int | None = None
) -> AddNoise:
    r"""Adds annealed Gaussian noise to the updates.

    .. math::
       u_t = g_t + \sigma_t\,\xi_t, \quad \xi_t \sim \mathcal N(0, I), \quad
       \sigma_t^2 = \eta / t^{\gamma}

    with :math:`t = 1, 2, \ldots` the step, :math:`\eta` = ``eta`` and :math:`\gamma` =
    ``gamma``. The noise is a deterministic function of the key and the step: each update
    splits the key in the state into the next key and a sampling key, which is split once
    per leaf (as optax does, so the same key gives optax's noise). Under ``jit`` and eagerly
    the numbers are the same. Noise is drawn in at least float32 and added before the cast
    back to each update's dtype; a complex leaf gets complex noise
    (:math:`\mathcal{CN}(0, I)`, variance 1/2 in each of the real and imaginary parts), as
    in optax.

    Args:
      eta: the variance :math:`\eta` at the first step, >= 0.
      gamma: the annealing exponent :math:`\gamma`, >= 0.
      key: an int seed or a typed PRNG key (``jax.random.key(0)``); ``None`` means seed 0.
        The transform keeps the seed (or the key's implementation and data), not an array.
      seed: the same as ``key``, accepted for optax compatibility; give one of them.

    Returns:
      The transform. ``eta`` and ``gamma`` are dynamic hyperparameters; the state's
      ``rng_key`` holds the raw key data (``jax.random.key_data``).

    Raises:
      ValueError: ``eta`` or ``gamma`` is negative, or both ``key`` and ``seed`` are given.
      TypeError: ``key`` is neither an int nor a single concrete typed PRNG key.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.add_noise(eta=0.01, gamma=0.55, key=jax.random.key(0))
      >>> updates, state = tx.update({"w": jnp.zeros(3)}, tx.init({"w": jnp.zeros(3)}))
      >>> bool(jnp.all(jnp.abs(updates["w"]) < 1.0)), int(state.count)
      (True, 1)

    References:
      Neelakantan, Vilnis, Le, Sutskever, Kaiser, Kurach and Martens, "Adding Gradient
      Noise Improves Learning for Very Deep Networks", ICLR Workshop 2016.
    """
    warn_seed("add_noise", seed)
    return AddNoise(eta, gamma, key_spec("add_noise", key, seed))


def noisy_sgd(
    learning_rate: ScalarOrSchedule,
    eta: float = 0.01,
    gamma: float = 0.55,
    key: jax.Array | int | None = None,
    *,
    seed: int | None = None,
) -> Chain:
    r"""SGD on gradients with annealed Gaussian noise added.

    .. math::
       \theta_t = \theta_{t-1} - \alpha_t\,(g_t + \sigma_t \xi_t), \quad
       \xi_t \sim \mathcal N(0, I), \quad \sigma_t^2 = \eta / t^{\gamma}

    for the steps :math:`t = 1, 2, \ldots` (see `add_noise`).

    Args:
      learning_rate: :math:`\alpha`, a non-negative number or a schedule.
      eta: the noise variance at the first step, >= 0.
      gamma: the annealing exponent, >= 0.
      key: an int seed or a typed PRNG key; ``None`` means seed 0.
      seed: the same as ``key``, accepted for optax compatibility; give one of them.

    Returns:
      ``chain(add_noise(eta, gamma, key), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `add_noise`).
      TypeError: ``key`` is neither an int nor a typed PRNG key.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> tx = optx.noisy_sgd(0.1, key=0)
      >>> state = tx.init(params)
      >>> for _ in range(50):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.2))
      True

    References:
      Neelakantan, Vilnis, Le, Sutskever, Kaiser, Kurach and Martens, "Adding Gradient
      Noise Improves Learning for Very Deep Networks", ICLR Workshop 2016.
    """
    with hp.caller("noisy_sgd"):
        warn_seed("noisy_sgd", seed)
        if seed is not None and key is not None:
            key_spec("noisy_sgd", key, seed)  # raises: one of them
        key = seed if key is None else key
        return chain(add_noise(eta, gamma, key), scale_by_learning_rate(learning_rate))
