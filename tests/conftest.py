"""Test-session settings shared by every test module."""

import os

# Keras (a test dependency, compared against) runs on the JAX backend; the backend is fixed
# when keras is first imported, so set it before any test module imports it.
os.environ["KERAS_BACKEND"] = "jax"
