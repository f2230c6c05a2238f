"""Registry of every public optx transform and optimizer, for `test_conformance.py`.

Each entry is a zero-argument factory with typical arguments. Its key is the public factory
it exercises (``optx.<name>``), optionally followed by ``/variant``::

    register("sgd/momentum", lambda: optx.sgd(0.1, momentum=0.9))

Adding an optimizer is one `register` line. Pass ``needs_params=True`` when its ``update``
reads the parameters (the suite checks the flag both ways), and ``repr_prefix`` when its
``repr`` does not start with ``<name>(`` (optimizers that are chains start with ``chain(``).

Callables given to transforms (schedules, masks, ``stateless`` functions) are module-level
functions: a transform is equal to another built with the same function object, and a
lambda written inside a factory would be a new object at every call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import optx


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registry entry.

    Attributes:
      key: ``<public name>`` or ``<public name>/<variant>``.
      factory: builds the transform; called afresh by every test.
      needs_params: ``update`` raises without ``params`` (``False``: works without them).
      repr_prefix: how ``repr`` starts; ``None`` means ``"<public name>("``.
      unobservable: hyperparameters whose change cannot show in a few steps' updates and
        state of this configuration (the suite then only checks they do not recompile).
      update_kwargs: keyword arguments every ``update`` of this entry needs (sorted
        ``(name, value)`` pairs), e.g. ``value=`` for `reduce_on_plateau`.
    """

    key: str
    factory: Callable[[], optx.Transform]
    needs_params: bool = False
    repr_prefix: str | None = None
    unobservable: tuple[str, ...] = ()
    update_kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def extra(self) -> dict[str, Any]:
        """The keyword arguments to pass to every ``update``."""
        return dict(self.update_kwargs)

    @property
    def public(self) -> str:
        """The public factory this entry exercises."""
        return self.key.split("/", 1)[0]

    def __call__(self) -> optx.Transform:
        return self.factory()


REGISTRY: dict[str, Entry] = {}


def resolve(public: str) -> tuple[Any, str]:
    """The namespace holding the factory ``public`` and its name there.

    ``"adam"`` is ``(optx, "adam")``; a name optax has only in a submodule is registered
    with its path, ``"contrib.madgrad"``: ``(optx.contrib, "madgrad")``.
    """
    *path, name = public.split(".")
    namespace: Any = optx
    for part in path:
        namespace = getattr(namespace, part)
    return namespace, name


def register(
    key: str,
    factory: Callable[[], optx.Transform],
    *,
    needs_params: bool = False,
    repr_prefix: str | None = None,
    unobservable: tuple[str, ...] = (),
    update_kwargs: dict[str, Any] | None = None,
) -> None:
    """Adds an entry; a key may be registered once."""
    if key in REGISTRY:
        raise ValueError(f"registry key {key!r} is registered twice")
    kwargs = tuple(sorted((update_kwargs or {}).items()))
    REGISTRY[key] = Entry(key, factory, needs_params, repr_prefix, unobservable, kwargs)


# Public callables of `optx` that are transform factories but need arguments; the
# completeness test calls every other public function with no arguments to find the
# factories, and fails on a function with required arguments listed in neither set.
FACTORIES_WITH_ARGS = frozenset(
    {
        "accumulate_gradients",
        "adam",
        "adamw",
        "apply_if_finite",
        "clip",
        "clip_by_block_rms",
        "clip_by_global_norm",
        "clip_by_norm",
        "constrain",
        "decay_before",
        "dynamic_loss_scale",
        "ema",
        "flatten",
        "masked",
        "monitored",
        "multi_transform",
        "partition",
        "scale",
        "scale_by_learning_rate",
        "scale_by_schedule",
        "sgd",
        "skip_missing",
        "stateless",
        "stateless_with_tree_map",
        "trace",
        "unscale_gradients",
    }
)

# Public callables of `optx` that are not transform factories.
NOT_FACTORIES = frozenset(
    {
        "apply_updates",
        "compiler_options",
        "ema_params_value",
        "embedding_grad",
        "flatten_tree",
        "latest_checkpoint",
        "restore_state",
        "save_state",
        "get_hyperparams",
        "hyperparam",
        "loss_scale",
        "make_step",
        "monitor_metrics",
        "scale_hyperparams",
        "scale_loss",
        "schedule_free_eval_params",
        "set_hyperparams",
        "shard_state",
        "state_shardings",
        "summary",
        "value_and_grad_from_state",
    }
)


# optax's schedules at the top level (functions of the step, tested in test_schedules*.py),
# and factories of transforms or wrappers of them (`inject_hyperparams` returns a factory;
# tests/test_hyperparam_schedules.py runs it against optax's).
NOT_FACTORIES = NOT_FACTORIES | frozenset(
    {
        "constant_schedule",
        "cosine_decay_schedule",
        "cosine_onecycle_schedule",
        "exponential_decay",
        "init_empty_state",
        "inject_hyperparams",
        "inject_stateful_hyperparams",
        "join_schedules",
        "linear_onecycle_schedule",
        "linear_schedule",
        "piecewise_constant_schedule",
        "piecewise_interpolate_schedule",
        "polynomial_schedule",
        "sgdr_schedule",
        "warmup_constant_schedule",
        "warmup_cosine_decay_schedule",
        "warmup_exponential_decay_schedule",
        "with_extra_args_support",
    }
)


# Transform factories the suite cannot run: their `update` needs a named axis bound by
# `pmap` / `shard_map` / `vmap(axis_name=...)`, and the suite calls `update` outside any.
# tests/test_distributed.py checks them instead (jit, dtypes, chains, state, errors). The
# completeness test skips them as it skips NOT_FACTORIES.
NEEDS_MAPPED_AXIS = frozenset({"aggregate_gradients"})
NOT_FACTORIES = NOT_FACTORIES | NEEDS_MAPPED_AXIS


# Module-level callables (see the module docstring).
def warmup_schedule(count: jax.Array) -> jax.Array:
    """0.05, 0.1, 0.15, ... capped at 0.2."""
    return jnp.minimum(0.05 * (count + 1), 0.2)


def inverse_schedule(count: jax.Array) -> jax.Array:
    """1 / (count + 1)."""
    return 1.0 / (count + 1.0)


def double(updates: optx.Updates, params: optx.Params | None) -> optx.Updates:
    """A ``stateless`` function: twice the updates."""
    del params
    return jax.tree.map(lambda u: 2 * u, updates)


def double_leaf(update: jax.Array, param: jax.Array | None) -> jax.Array:
    """A `stateless_with_tree_map` function: twice the update."""
    del param
    return 2 * update


def matrices(params: optx.Params) -> optx.Params:
    """A mask callable: the leaves of rank >= 2."""
    return jax.tree.map(lambda p: jnp.ndim(p) >= 2, params)


# Scaling.
register("scale", lambda: optx.scale(-0.1))
register("scale_by_learning_rate", lambda: optx.scale_by_learning_rate(0.1))
register("scale_by_learning_rate/schedule", lambda: optx.scale_by_learning_rate(warmup_schedule))
register(
    "scale_by_learning_rate/no_flip", lambda: optx.scale_by_learning_rate(0.1, flip_sign=False)
)
register("scale_by_schedule", lambda: optx.scale_by_schedule(inverse_schedule))
register("unscale_gradients", lambda: optx.unscale_gradients(8.0))

# Clipping and centralisation.
register("clip", lambda: optx.clip(1.0))
register("clip_by_norm", lambda: optx.clip_by_norm(1.0))
register("clip_by_global_norm", lambda: optx.clip_by_global_norm(1.0))
register("clip_by_block_rms", lambda: optx.clip_by_block_rms(1.0))
register("centralize", optx.centralize)

# Weight decay.
register("add_decayed_weights", lambda: optx.add_decayed_weights(1e-2), needs_params=True)
register(
    "add_decayed_weights/mask",
    lambda: optx.add_decayed_weights(1e-2, mask="kernel"),
    needs_params=True,
    repr_prefix="masked(",
)

# Constraints: last in a chain, they read the parameters.
register("constrain", lambda: optx.constrain(optx.constraints.NonNeg()), needs_params=True)
register(
    "constrain/regex",
    lambda: optx.constrain(
        {"kernel": optx.constraints.MaxNorm(1.0), "layers": optx.constraints.L2Ball()}
    ),
    needs_params=True,
)
register(
    "constrain/mask",
    lambda: optx.constrain(optx.constraints.Box(-0.5, 0.5), mask=matrices),
    needs_params=True,
)

# Moving averages of the updates.
register("trace", lambda: optx.trace(0.9))
register("trace/nesterov", lambda: optx.trace(0.9, nesterov=True))
register("trace/f32_accumulator", lambda: optx.trace(0.9, accumulator_dtype=jnp.float32))
register("ema", lambda: optx.ema(0.9))
register("ema/no_debias", lambda: optx.ema(0.9, debias=False))

# Combinators.
register("identity", optx.identity)
register("set_to_zero", optx.set_to_zero)
register("stateless", lambda: optx.stateless(double))
register(
    "stateless_with_tree_map",
    lambda: optx.stateless_with_tree_map(double_leaf),
    repr_prefix="stateless(",
)
register(
    "chain",
    lambda: optx.chain(optx.clip_by_global_norm(1.0), optx.scale_by_adam(), optx.scale(-0.1)),
)
register("chain/empty", optx.chain)
register(
    "named_chain",
    lambda: optx.named_chain(("clip", optx.clip(1.0)), ("sgd", optx.sgd(0.1, momentum=0.9))),
)
register("masked", lambda: optx.masked(optx.trace(0.9), "kernel"))
register("masked/callable", lambda: optx.masked(optx.scale_by_adam(), matrices))
register(
    "masked/tree",
    lambda: optx.masked(
        optx.ema(0.5), {"dense": {"kernel": True, "bias": False}, "layers": True, "scale": False}
    ),
)
register(
    "partition",
    lambda: optx.partition(
        {"sgd": optx.sgd(0.1, momentum=0.9), "adam": optx.adam(1e-2)},
        {"kernel": "sgd", ".*": "adam"},
    ),
)
register(
    "multi_transform",
    lambda: optx.multi_transform(
        {"train": optx.adamw(1e-2), "freeze": optx.set_to_zero()},
        {"dense": "train", "layers": "train", "scale": "freeze"},
    ),
    needs_params=True,
    repr_prefix="partition(",
)
register("apply_if_finite", lambda: optx.apply_if_finite(optx.sgd(0.1, momentum=0.9), 3))
register("skip_missing", lambda: optx.skip_missing(optx.adam(0.1)))
# A small scale and interval, so that the scale grows within the suite's few steps;
# `initial_scale` is read by `init` only.
register(
    "dynamic_loss_scale",
    lambda: optx.dynamic_loss_scale(optx.sgd(0.1, momentum=0.9), 8.0, growth_interval=2),
    unobservable=("initial_scale",),
)
register("zero_nans", optx.zero_nans)
# Records norms, the learning rate and skipped steps in its state (also with a schedule and
# a skipping wrapper inside). Its update/parameter ratio reads the parameters when given (0
# without): the suite's flag is all or nothing, so the inner transforms here need them.
register("monitored", lambda: optx.monitored(optx.adamw(1e-2)), needs_params=True)
register(
    "monitored/schedule_skips",
    lambda: optx.monitored(
        optx.apply_if_finite(
            optx.chain(optx.add_decayed_weights(1e-2), optx.sgd(warmup_schedule, momentum=0.9)), 3
        )
    ),
    needs_params=True,
)
register("accumulate_gradients", lambda: optx.accumulate_gradients(optx.adam(1e-2), every_k=2))
register(
    "accumulate_gradients/f32_accumulator",
    lambda: optx.accumulate_gradients(optx.sgd(0.1), every_k=2, accumulator_dtype=jnp.float32),
)

# EMA of the parameters.
register("ema_params", lambda: optx.ema_params(0.9), needs_params=True)
register(
    "ema_params/first_step",
    lambda: optx.ema_params(0.9, start="first_step"),
    needs_params=True,
)
register(
    "ema_params/overwrite",
    lambda: optx.ema_params(0.9, overwrite_frequency=2),
    needs_params=True,
)
register(
    "ema_params/every_k",
    lambda: optx.ema_params(0.9, overwrite_frequency=3, start="first_step", every_k=2),
    needs_params=True,
)

# Keras's weight decay: the parameters shrink before the inner step reads them.
register(
    "decay_before",
    lambda: optx.decay_before(optx.lamb(0.1), 0.1, 0.1),
    needs_params=True,
)
register(
    "decay_before/schedule_mask",
    lambda: optx.decay_before(optx.sgd(warmup_schedule, 0.9), 0.1, warmup_schedule, "kernel"),
    needs_params=True,
)

# Step-size control from the loss. A constant loss plateaus from the second step on, so
# `factor` and `min_scale` act within three steps; `rtol` and `atol` need a falling loss
# (see tests/test_plateau.py).
register(
    "reduce_on_plateau",
    lambda: optx.reduce_on_plateau(patience=1),
    unobservable=("atol", "rtol"),
    update_kwargs={"value": 1.0},
)

# Optimizers and their building blocks.
register("sgd", lambda: optx.sgd(0.1), repr_prefix="chain(")
register("sgd/momentum", lambda: optx.sgd(0.1, momentum=0.9), repr_prefix="chain(")
register("sgd/nesterov", lambda: optx.sgd(0.1, momentum=0.9, nesterov=True), repr_prefix="chain(")
register("sgd/schedule", lambda: optx.sgd(warmup_schedule, momentum=0.5), repr_prefix="chain(")
register("scale_by_adam", optx.scale_by_adam)
register("scale_by_adam/nesterov", lambda: optx.scale_by_adam(nesterov=True))
register(
    "scale_by_adam/f32_moments",
    lambda: optx.scale_by_adam(mu_dtype=jnp.float32, nu_dtype=jnp.float32),
)
register("adam", lambda: optx.adam(1e-2), repr_prefix="chain(")
register("adam/nesterov", lambda: optx.adam(1e-2, nesterov=True), repr_prefix="chain(")
register("adam/schedule", lambda: optx.adam(warmup_schedule, eps_root=1e-8), repr_prefix="chain(")
register("adamw", lambda: optx.adamw(1e-2), needs_params=True, repr_prefix="chain(")
register(
    "adamw/mask",
    lambda: optx.adamw(1e-2, weight_decay=0.1, mask="kernel"),
    needs_params=True,
    repr_prefix="chain(",
)

# Optimizer state in flat per-dtype buffers (elementwise transforms only).
register("flatten", lambda: optx.flatten(optx.adam(1e-2)))
register(
    "flatten/clip_adamw_ema",
    lambda: optx.flatten(
        optx.chain(optx.clip_by_global_norm(1.0), optx.adamw(1e-2), optx.ema_params(0.9))
    ),
    needs_params=True,
)


def _load_families() -> tuple[frozenset[str], frozenset[str]]:
    """Entries of optimizer families kept in ``tests/registry_<family>.py``.

    Each such module defines ``FACTORIES_WITH_ARGS`` (a set of public names), optionally
    ``NOT_FACTORIES`` (public callables that build no transform), and ``entries(register)``,
    which calls ``register`` for each of its entries. They are loaded by path, so this works
    whether the tests run as a package or from ``tests/``.
    """
    import importlib.util
    import pathlib

    global NOT_FACTORIES
    names: set[str] = set()
    others: set[str] = set()
    for path in sorted(pathlib.Path(__file__).parent.glob("registry_*.py")):
        spec = importlib.util.spec_from_file_location(f"_optx_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.entries(register)
        names |= set(module.FACTORIES_WITH_ARGS)
        others |= set(getattr(module, "NOT_FACTORIES", ()))
    return frozenset(names), frozenset(others)


_FAMILY_FACTORIES, _FAMILY_NOT_FACTORIES = _load_families()
FACTORIES_WITH_ARGS = FACTORIES_WITH_ARGS | _FAMILY_FACTORIES
NOT_FACTORIES = NOT_FACTORIES | _FAMILY_NOT_FACTORIES
