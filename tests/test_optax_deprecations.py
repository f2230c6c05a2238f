"""optax names that optax deprecates warn in optx too, with the same category."""

from __future__ import annotations

import re
import warnings

import optax
import pytest

import optx


def _categories(call) -> list[type[Warning]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w.category for w in caught]


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda: optx.optimistic_adam(0.1), lambda: optax.optimistic_adam(0.1)),
        (lambda: optx.add_noise(0.1, 0.5, seed=1), lambda: optax.add_noise(0.1, 0.5, seed=1)),
        (lambda: optx.noisy_sgd(0.1, seed=1), lambda: optax.noisy_sgd(0.1, seed=1)),
        (
            lambda: optx.inject_stateful_hyperparams(optx.sgd),
            lambda: optax.inject_stateful_hyperparams(optax.sgd),
        ),
    ],
    ids=["optimistic_adam", "add_noise_seed", "noisy_sgd_seed", "inject_stateful"],
)
def test_deprecated_as_in_optax(ours, theirs) -> None:
    assert DeprecationWarning in _categories(theirs)
    assert DeprecationWarning in _categories(ours)


def test_messages_name_the_replacement() -> None:
    with pytest.warns(DeprecationWarning, match=re.escape("use `optimistic_adam_v2`")):
        optx.optimistic_adam(0.1)
    with pytest.warns(DeprecationWarning, match=re.escape("pass key=1 instead")):
        optx.add_noise(0.1, 0.5, seed=1)


@pytest.mark.parametrize("name", ["dpsgd", "differentially_private_aggregate"])
def test_top_level_privacy_names_are_deprecated_aliases_as_in_optax(name) -> None:
    with pytest.warns(DeprecationWarning, match=re.escape(f"use optx.contrib.{name}")):
        ours = getattr(optx, name)
    assert ours is getattr(optx.contrib, name)
    assert name not in dir(optx) and name not in dir(optax)
