"""Test-session settings shared by every test module."""

import os

# Keras (a test dependency, compared against) runs on the JAX backend; the backend is fixed
# when keras is first imported, so set it before any test module imports it.
os.environ["KERAS_BACKEND"] = "jax"

import jax
import pytest


@pytest.fixture(autouse=True, scope="module")
def _clear_jax_caches():
    """Drops JAX's compiled executables after each module.

    The suite compiles thousands of distinct steps; kept for the whole session they grow the
    process by gigabytes (and XLA:CPU has crashed compiling in such a process).
    """
    yield
    jax.clear_caches()
