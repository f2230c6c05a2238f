"""optx's benchmark suite: optx beside optax, Keras and PyTorch, in one run.

Run ``python -m bench --help`` from the repository root; `bench/README.md` has the figures.
"""

import os

# Keras fixes its backend when first imported: the suite compares its JAX backend.
os.environ.setdefault("KERAS_BACKEND", "jax")
