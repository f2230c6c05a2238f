"""Newer and experimental optimizers, at the path optax users write them (``optax.contrib``).

The same objects as at the top level where optx has them there too (``optx.contrib.muon is
optx.muon``).
"""

from optx._src.algorithms.ademamix import ScaleByAdemamixState as ScaleByAdemamixState
from optx._src.algorithms.ademamix import ademamix as ademamix
from optx._src.algorithms.ademamix import scale_by_ademamix as scale_by_ademamix
from optx._src.algorithms.adopt import adopt as adopt
from optx._src.algorithms.adopt import scale_by_adopt as scale_by_adopt
from optx._src.algorithms.muon import MuonState as MuonState
from optx._src.algorithms.muon import muon as muon
from optx._src.algorithms.muon import scale_by_muon as scale_by_muon
from optx._src.algorithms.muon_dimensions import MuonDimensionNumbers as MuonDimensionNumbers
from optx._src.algorithms.prodigy import ProdigyState as ProdigyState
from optx._src.algorithms.prodigy import prodigy as prodigy
from optx._src.algorithms.schedule_free import ScheduleFreeState as ScheduleFreeState
from optx._src.algorithms.schedule_free import schedule_free as schedule_free
from optx._src.algorithms.schedule_free import schedule_free_adamw as schedule_free_adamw
from optx._src.algorithms.schedule_free import (
    schedule_free_eval_params as schedule_free_eval_params,
)
from optx._src.algorithms.schedule_free import schedule_free_sgd as schedule_free_sgd
from optx._src.algorithms.sophia import HutchinsonState as HutchinsonState
from optx._src.algorithms.sophia import SophiaState as SophiaState
from optx._src.algorithms.sophia import (
    hutchinson_estimator_diag_hessian as hutchinson_estimator_diag_hessian,
)
from optx._src.algorithms.sophia import sophia as sophia
from optx._src.plateau import ReduceOnPlateauState as _ReduceOnPlateauState
from optx._src.plateau import reduce_on_plateau as reduce_on_plateau

ReduceLROnPlateauState = _ReduceOnPlateauState
"""optax's name for `optx.ReduceOnPlateauState`, the state of `reduce_on_plateau`."""
