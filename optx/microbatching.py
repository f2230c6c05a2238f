"""Microbatching, at optax's path (``optax.microbatching``).

A function of a large batch computed as an accumulation over microbatches, to fit memory.
"""
