"""`update` refuses a state made by another transform, and names both.

Each transform's state says, in its static part, which transform class made it (its
`HyperParams`), and is of the type its ``init`` returns; ``update`` checks both before
reading it, when tracing (nothing is added to a jitted step).
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest

import optx

try:
    from tests import registry
    from tests.test_conformance import make_grads, make_params
except ImportError:  # tests/ is not a package: pytest put it on sys.path.
    import registry
    from test_conformance import make_grads, make_params

# Optimizers of distinct building blocks (`nadam` is `adam`'s `scale_by_adam` with an option
# that its state does not show: see `test_same_building_block_states_are_interchangeable`).
OPTIMIZERS = [
    "adam",
    "adamw",
    "adabelief",
    "amsgrad",
    "yogi",
    "radam",
    "lion",
    "sgd",
    "sgd/momentum",
    "rmsprop",
    "adagrad",
    "adafactor",
    "lamb",
    "adamax",
    "adan",
    "novograd",
    "sm3",
    "lars",
    "adadelta",
    "adopt",
    "lazy_adam",
    "muon",
]
PAIRS = [(a, b) for a in OPTIMIZERS for b in OPTIMIZERS if a != b]


def public(key: str) -> str:
    return key.split("/", 1)[0]


@pytest.fixture(scope="module")
def states() -> dict[str, Any]:
    params = make_params()
    return {key: registry.REGISTRY[key]().init(params) for key in OPTIMIZERS}


@pytest.mark.parametrize(("receiver", "maker"), PAIRS, ids=[f"{a}<-{b}" for a, b in PAIRS])
def test_update_refuses_another_optimizers_state(
    receiver: str, maker: str, states: dict[str, Any]
) -> None:
    entry = registry.REGISTRY[receiver]
    with pytest.raises(ValueError, match="needs the state made by") as info:
        entry().update(make_grads()[0], states[maker], make_params(), **entry.extra)
    message = str(info.value)
    assert f"`{public(receiver)}" in message, message
    # The maker is named where its state says it (a transform without hyperparameters,
    # `sgd`'s `identity`, keeps an `EmptyState`, which the message describes instead).
    assert f"`{public(maker)}`" in message or "an EmptyState" in message, message


@pytest.mark.parametrize("key", OPTIMIZERS)
def test_update_takes_its_own_state(key: str, states: dict[str, Any]) -> None:
    entry = registry.REGISTRY[key]
    tx, params = entry(), make_params()
    updates, state = tx.update(make_grads()[0], states[key], params, **entry.extra)
    # A second step with the state the first returned, and under jit.
    jax.jit(lambda g, s, p: tx.update(g, s, p, **entry.extra))(make_grads()[1], state, params)
    assert jax.tree.structure(updates) == jax.tree.structure(params)


def test_the_message_names_both_optimizers() -> None:
    p = {"w": jnp.ones(2)}
    message = (
        "`adam.update` needs the state made by its own `init`: a tuple with the state of each "
        "of its transforms, in order. Received: a state made by `adabelief` (a tuple of 2 "
        "states); at state[0], for `scale_by_adam`: a state made by `adabelief` "
        "(ScaleByBeliefState of `scale_by_belief`). Pass the state returned by `init` of this "
        "same transform (`adam`)."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        optx.adam(1e-3).update(p, optx.adabelief(1e-3).init(p), p)
    # A building block given another's state, alone.
    message = (
        "`scale_by_adam.update` needs the state made by its own `init` (a ScaleByAdamState "
        "or ScaleByNadamState). Received: a state made by `trace` (TraceState). Pass the "
        "state returned by `init` of this same transform (`scale_by_adam`)."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        optx.scale_by_adam().update(p, optx.trace(0.9).init(p))


def test_a_chain_with_its_states_in_another_order() -> None:
    p = {"w": jnp.ones(2)}
    tx = optx.chain(optx.clip_by_global_norm(1.0), optx.scale_by_adam())
    state = tx.init(p)
    message = (
        "`chain.update` needs the state made by its own `init`: a tuple with the state of each "
        "of its transforms, in order. Received: a state made by `scale_by_adam` (a tuple of 2 "
        "states); at state[0], for `clip_by_global_norm`: a state made by `scale_by_adam` "
        "(ScaleByAdamState). The states are those of this chain's transforms in another "
        "order. Pass the state returned by `init` of this same transform (`chain`)."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        tx.update(p, (state[1], state[0]), p)
    # Nested: an optimizer inside a chain.
    tx = optx.chain(optx.clip_by_global_norm(1.0), optx.adam(1e-3))
    state = tx.init(p)
    with pytest.raises(ValueError, match=re.escape("in another order")):
        tx.update(p, (state[1], state[0]), p)


def test_a_state_of_another_length_names_its_maker() -> None:
    p = {"w": jnp.ones(2)}
    message = (
        "`chain.update` needs the state made by this chain's `init` (a tuple of 2 states). "
        "Received: state of type tuple with 3 entries. That is a state made by `adamw` (a "
        "tuple of 3 states); pass the state returned by `init` of this same transform "
        "(`adam`)."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        optx.adam(1e-3).update(p, optx.adamw(1e-3).init(p), p)


def test_partition_with_other_labels() -> None:
    p = {"a": jnp.ones(2), "b": jnp.ones(2)}
    tx = optx.partition({"x": optx.sgd(0.1), "y": optx.set_to_zero()}, {"a": "x", "b": "y"})
    other = optx.partition({"x": optx.sgd(0.1), "z": optx.set_to_zero()}, {"a": "x", "b": "z"})
    message = (
        "`partition.update` needs the state made by its own `init`, with a state for each of "
        "its labels ['x', 'y']. Received: a PartitionState holding a state made by `sgd`, for "
        "the labels ['x', 'z']. Pass the state returned by `init` of this same transform "
        "(`partition`)."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        tx.update(p, other.init(p), p)


def test_a_schedule_where_the_state_holds_a_constant() -> None:
    # Rebuilding an optimizer with a schedule and keeping the old state would silently keep
    # the constant: the state says the hyperparameter is not scheduled.
    p = {"w": jnp.ones(2)}
    scheduled = optx.adam(optx.schedules.linear_schedule(1e-3, 0.0, 10))
    with pytest.raises(ValueError, match=re.escape("learning_rate (a schedule)")):
        scheduled.update(p, optx.adam(1e-3).init(p), p)
    with pytest.raises(ValueError, match=re.escape("learning_rate (a schedule) where")):
        optx.adam(1e-3).update(p, scheduled.init(p), p)


def test_same_building_block_states_are_interchangeable() -> None:
    # `nadam` is `scale_by_adam(nesterov=True)`: the same state, fields and hyperparameters
    # as `adam`'s, so either takes the other's (a changed learning rate does too).
    p = {"w": jnp.ones(2)}
    optx.adam(1e-3).update(p, optx.nadam(1e-3).init(p), p)
    optx.adam(1e-2).update(p, optx.adam(1e-3).init(p), p)


def test_wrappers_flat_states_and_optax_inside_still_work() -> None:
    p = {"w": jnp.ones((2, 3)), "b": jnp.ones(3)}
    g = jax.tree.map(lambda x: 0.1 * x, p)
    for tx in [
        optx.skip_missing(optx.adam(1e-3)),
        optx.flatten(optx.adamw(1e-3)),
        optx.chain(optax.clip_by_global_norm(1.0), optx.adam(1e-3)),
        optax.chain(optx.clip_by_global_norm(1.0), optx.adam(1e-3)),
        optx.masked(optx.adam(1e-3), {"w": True, "b": False}),
        optx.apply_if_finite(optx.adam(1e-3), 3),
        optx.accumulate_gradients(optx.adam(1e-3), 2),
    ]:
        state = tx.init(p)
        for _ in range(2):
            _, state = jax.jit(tx.update)(g, state, p)
        _, state = tx.update(g, state, p)
    # A flat state of another optimizer is refused by the inner transform.
    with pytest.raises(ValueError, match="needs the state made by"):
        optx.flatten(optx.adam(1e-3)).update(g, optx.flatten(optx.lion(1e-3)).init(p), p)


def test_an_earlier_releases_state_is_taken() -> None:
    # A structure pickled by an earlier release has no owner: it is taken as it is.
    p = {"w": jnp.ones(2)}
    tx = optx.adam(1e-3)
    leaves, treedef = jax.tree.flatten(tx.init(p))
    h = tx.init(p)[0].hyperparams
    ownerless = optx.HyperParams(h.entries, h.in_force, h.residuals, h.scales, h.count)
    assert ownerless.owner is None
    state = (tx.init(p)[0]._replace(hyperparams=ownerless), tx.init(p)[1])
    tx.update(p, state, p)
    assert jax.tree.unflatten(treedef, leaves)[0].hyperparams.owner is not None
