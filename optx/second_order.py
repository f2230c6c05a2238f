"""Second-order quantities of a loss, at optax's path (``optax.second_order``).

Hessian-vector products and the diagonals of the Hessian and of the Fisher information.
"""
