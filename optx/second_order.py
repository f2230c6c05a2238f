"""Second-order quantities of a loss, at optax's path (``optax.second_order``).

Hessian-vector products and the diagonals of the Hessian and of the Fisher information.
"""

from optx._src.second_order import fisher_diag as fisher_diag
from optx._src.second_order import hessian_diag as hessian_diag
from optx._src.second_order import hvp as hvp
