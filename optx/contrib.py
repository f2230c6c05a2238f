"""Newer and experimental optimizers, at the path optax users write them (``optax.contrib``).

The same objects as at the top level where optx has them there too (``optx.contrib.muon is
optx.muon``).
"""

from optx._src.algorithms.acprop import acprop as acprop
from optx._src.algorithms.acprop import scale_by_acprop as scale_by_acprop
from optx._src.algorithms.ademamix import ScaleByAdemamixState as ScaleByAdemamixState
from optx._src.algorithms.ademamix import (
    ScaleBySimplifiedAdEMAMixState as ScaleBySimplifiedAdEMAMixState,
)
from optx._src.algorithms.ademamix import ademamix as ademamix
from optx._src.algorithms.ademamix import scale_by_ademamix as scale_by_ademamix
from optx._src.algorithms.ademamix import (
    scale_by_simplified_ademamix as scale_by_simplified_ademamix,
)
from optx._src.algorithms.ademamix import simplified_ademamix as simplified_ademamix
from optx._src.algorithms.adopt import adopt as adopt
from optx._src.algorithms.adopt import scale_by_adopt as scale_by_adopt
from optx._src.algorithms.cocob import COCOBState as COCOBState
from optx._src.algorithms.cocob import cocob as cocob
from optx._src.algorithms.cocob import scale_by_cocob as scale_by_cocob
from optx._src.algorithms.complex_valued import (
    SplitRealAndImaginaryState as SplitRealAndImaginaryState,
)
from optx._src.algorithms.complex_valued import (
    split_real_and_imaginary as split_real_and_imaginary,
)
from optx._src.algorithms.dadapt import DAdaptAdamWState as DAdaptAdamWState
from optx._src.algorithms.dadapt import dadapt_adamw as dadapt_adamw
from optx._src.algorithms.dog import DoGState as DoGState
from optx._src.algorithms.dog import DoWGState as DoWGState
from optx._src.algorithms.dog import dog as dog
from optx._src.algorithms.dog import dowg as dowg
from optx._src.algorithms.galore import GaLoreDimensionNumbers as GaLoreDimensionNumbers
from optx._src.algorithms.galore import GaLoreState as GaLoreState
from optx._src.algorithms.galore import galore as galore
from optx._src.algorithms.galore import scale_by_galore as scale_by_galore
from optx._src.algorithms.madgrad import MadgradState as MadgradState
from optx._src.algorithms.madgrad import madgrad as madgrad
from optx._src.algorithms.madgrad import scale_by_madgrad as scale_by_madgrad
from optx._src.algorithms.mechanic import MechanicState as MechanicState
from optx._src.algorithms.mechanic import mechanize as mechanize
from optx._src.algorithms.momo import MomoAdamState as MomoAdamState
from optx._src.algorithms.momo import MomoState as MomoState
from optx._src.algorithms.momo import momo as momo
from optx._src.algorithms.momo import momo_adam as momo_adam
from optx._src.algorithms.muon import MuonState as MuonState
from optx._src.algorithms.muon import muon as muon
from optx._src.algorithms.muon import scale_by_muon as scale_by_muon
from optx._src.algorithms.muon_dimensions import MuonDimensionNumbers as MuonDimensionNumbers
from optx._src.algorithms.privacy import (
    DifferentiallyPrivateAggregateState as DifferentiallyPrivateAggregateState,
)
from optx._src.algorithms.privacy import (
    differentially_private_aggregate as differentially_private_aggregate,
)
from optx._src.algorithms.privacy import dpsgd as dpsgd
from optx._src.algorithms.prodigy import ProdigyState as ProdigyState
from optx._src.algorithms.prodigy import prodigy as prodigy
from optx._src.algorithms.sam import NormalizeState as NormalizeState
from optx._src.algorithms.sam import SAMState as SAMState
from optx._src.algorithms.sam import normalize as normalize
from optx._src.algorithms.sam import sam as sam
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
