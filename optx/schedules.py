"""Learning-rate schedules: pure functions of the step, with optax's names and values.

Each is a frozen dataclass (equal and hashable by its arguments) with ``get_config()``;
`from_config` rebuilds it. Keras's schedule classes are in `optx.optimizers.schedules`.
"""

from optx._src.schedules.base import Schedule as Schedule
from optx._src.schedules.base import from_config as from_config
from optx._src.schedules.polynomial import constant_schedule as constant_schedule
from optx._src.schedules.polynomial import linear_schedule as linear_schedule
from optx._src.schedules.polynomial import polynomial_schedule as polynomial_schedule
