"""Euclidean projections onto convex sets, at optax's path (``optax.projections``).

Pure functions of a pytree, for projected gradient methods. The constraints that keep
parameters in such a set during training, as a transform, are in `optx.constraints`.
"""

from optx._src.projection_fns import projection_box as projection_box
from optx._src.projection_fns import projection_halfspace as projection_halfspace
from optx._src.projection_fns import projection_hypercube as projection_hypercube
from optx._src.projection_fns import projection_hyperplane as projection_hyperplane
from optx._src.projection_fns import projection_l1_ball as projection_l1_ball
from optx._src.projection_fns import projection_l1_sphere as projection_l1_sphere
from optx._src.projection_fns import projection_l2_ball as projection_l2_ball
from optx._src.projection_fns import projection_l2_sphere as projection_l2_sphere
from optx._src.projection_fns import projection_linf_ball as projection_linf_ball
from optx._src.projection_fns import projection_non_negative as projection_non_negative
from optx._src.projection_fns import projection_simplex as projection_simplex
from optx._src.projection_fns import projection_vector as projection_vector
