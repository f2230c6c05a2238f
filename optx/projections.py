"""Euclidean projections onto convex sets, at optax's path (``optax.projections``).

Pure functions of a pytree, for projected gradient methods. The constraints that keep
parameters in such a set during training, as a transform, are in `optx.constraints`.
"""
