"""Learning-rate schedules: pure functions of the step, with optax's names and values.

Each is a frozen dataclass (equal and hashable by its arguments) with ``get_config()``;
`from_config` rebuilds it. Keras's schedule classes are in `optx.optimizers.schedules`.
"""

from optx._src.inject import InjectHyperparamsState as InjectHyperparamsState
from optx._src.inject import InjectStatefulHyperparamsState as InjectStatefulHyperparamsState
from optx._src.inject import StatefulSchedule as StatefulSchedule
from optx._src.inject import WrappedSchedule as WrappedSchedule
from optx._src.inject import inject_hyperparams as inject_hyperparams
from optx._src.inject import inject_stateful_hyperparams as inject_stateful_hyperparams
from optx._src.schedules.base import Schedule as Schedule
from optx._src.schedules.base import from_config as from_config
from optx._src.schedules.cosine import cosine_decay_schedule as cosine_decay_schedule
from optx._src.schedules.cosine import sgdr_schedule as sgdr_schedule
from optx._src.schedules.cosine import (
    warmup_cosine_decay_schedule as warmup_cosine_decay_schedule,
)
from optx._src.schedules.exponential import exponential_decay as exponential_decay
from optx._src.schedules.exponential import (
    warmup_exponential_decay_schedule as warmup_exponential_decay_schedule,
)
from optx._src.schedules.join import join_schedules as join_schedules
from optx._src.schedules.join import warmup_constant_schedule as warmup_constant_schedule
from optx._src.schedules.modern import warmup_inverse_sqrt_schedule as warmup_inverse_sqrt_schedule
from optx._src.schedules.modern import warmup_stable_decay_schedule as warmup_stable_decay_schedule
from optx._src.schedules.onecycle import cosine_onecycle_schedule as cosine_onecycle_schedule
from optx._src.schedules.onecycle import linear_onecycle_schedule as linear_onecycle_schedule
from optx._src.schedules.piecewise import (
    piecewise_constant_schedule as piecewise_constant_schedule,
)
from optx._src.schedules.piecewise import (
    piecewise_interpolate_schedule as piecewise_interpolate_schedule,
)
from optx._src.schedules.plot import plot as plot
from optx._src.schedules.polynomial import constant_schedule as constant_schedule
from optx._src.schedules.polynomial import linear_schedule as linear_schedule
from optx._src.schedules.polynomial import polynomial_schedule as polynomial_schedule
