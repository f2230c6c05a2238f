"""optx is a drop-in for optax: every public name at optax's path, with optax's arguments.

The names come from the installed optax (tests/optax_names.py); the exceptions are listed
there with their reasons, and README.md's table of differences is generated from them.
"""

from __future__ import annotations

import inspect

import optax_names as names
import pytest


def test_every_optax_name_is_in_optx_at_the_same_path() -> None:
    missing, _, _ = names.check()
    assert not missing, (
        f"{len(missing)} optax names have no optx counterpart at the same path (add them, or "
        f"list them with a reason in tests/optax_names.py EXCLUDED): {missing}"
    )


def test_signatures_take_optax_s_arguments_in_optax_s_order() -> None:
    _, bad, _ = names.check()
    assert not bad, "\n".join(bad)


def test_states_keep_optax_s_fields_first() -> None:
    problems = names.state_problems()
    assert not problems, "\n".join(problems)


def test_exceptions_are_optax_names_that_optx_lacks_or_changes() -> None:
    # An exception that no longer applies is removed, so that the table stays true.
    known = dict(names.optax_names())
    for qualified in [*names.EXCLUDED, *names.SIGNATURES, *names.STATES]:
        assert qualified in known, f"{qualified} is not an optax name (any more)"
    for qualified in names.EXCLUDED:
        with pytest.raises(AttributeError):
            names.optx_object(qualified)
    for qualified in names.SIGNATURES:
        theirs = inspect.signature(known[qualified])
        ours = inspect.signature(names.optx_object(qualified))
        assert names.signature_problems(theirs, ours), f"{qualified} matches optax now"


@pytest.mark.parametrize("page", names.PAGES, ids=lambda p: p.name)
def test_the_pages_show_the_generated_table(page) -> None:
    assert names.page_table(page) == names.differences_table(), (
        f"{page.name}'s table of differences from optax is out of date: run "
        f"`python tests/optax_names.py --write`."
    )


def test_signature_problems_are_found() -> None:
    def theirs(learning_rate, b1=0.9, *, nesterov=False): ...
    def renamed(lr, b1=0.9, *, nesterov=False): ...
    def reordered(b1=0.9, learning_rate=None, *, nesterov=False): ...
    def default(learning_rate, b1=0.8, *, nesterov=False): ...
    def positional_extra(learning_rate, b1=0.9, extra=1, *, nesterov=False): ...
    def keyword_extra(learning_rate, b1=0.9, *, nesterov=False, mu_dtype=None): ...

    sig = inspect.signature
    assert names.signature_problems(sig(theirs), sig(renamed)) == [
        "parameter 0 is `lr`, optax's is `learning_rate`"
    ]
    assert len(names.signature_problems(sig(theirs), sig(reordered))) == 2
    assert names.signature_problems(sig(theirs), sig(default)) == [
        "`b1` defaults to 0.8, optax's to 0.9"
    ]
    assert names.signature_problems(sig(theirs), sig(positional_extra)) == [
        "parameter 2 is `extra`, optax's is `nesterov`"
    ]
    assert names.signature_problems(sig(theirs), sig(keyword_extra)) == []
    assert names.extras(sig(theirs), sig(keyword_extra)) == ["mu_dtype"]
