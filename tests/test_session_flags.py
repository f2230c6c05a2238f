"""The test session's XLA flags (root conftest.py): chosen once, known to this jaxlib."""

from __future__ import annotations

import importlib.util
import os
import pathlib
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def session() -> ModuleType:
    """The root conftest.py as a module of its own (the session already chose its flags)."""
    spec = importlib.util.spec_from_file_location("session_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_chosen_flags_are_in_force(session: ModuleType) -> None:
    wanted = session._wanted()
    chosen = os.environ[session._CHECKED].split()
    assert set(chosen) <= set(wanted), chosen
    assert set(chosen) <= set(os.environ["XLA_FLAGS"].split())
    # A wanted flag is left out only when this jaxlib does not know it.
    for flag in set(wanted) - set(chosen):
        assert not session._accepted((flag,)), f"{flag} is known but was left out"


def test_an_unknown_flag_is_left_out(session: ModuleType) -> None:
    # XLA would abort the whole session on it: the probe answers no instead.
    assert session._accepted(("--xla_backend_optimization_level=0",))
    assert not session._accepted(("--xla_optx_no_such_flag=true",))
