"""optx: functional, stateless optimizers for JAX.

Every optimizer is a pure ``(init, update)`` pair over pytrees (optax's protocol), with its
numeric hyperparameters held in the state so that changing them never recompiles.
"""

from optx import schedules as schedules
from optx import tree as tree
from optx._src.accumulate import AccumulateGradientsState as AccumulateGradientsState
from optx._src.accumulate import accumulate_gradients as accumulate_gradients
from optx._src.algorithms.adam import ScaleByAdamState as ScaleByAdamState
from optx._src.algorithms.adam import adam as adam
from optx._src.algorithms.adam import adamw as adamw
from optx._src.algorithms.adam import scale_by_adam as scale_by_adam
from optx._src.algorithms.sgd import sgd as sgd
from optx._src.base import EmptyState as EmptyState
from optx._src.base import GradientTransformationLike as GradientTransformationLike
from optx._src.base import OptState as OptState
from optx._src.base import Params as Params
from optx._src.base import Schedule as Schedule
from optx._src.base import Transform as Transform
from optx._src.base import Updates as Updates
from optx._src.base import apply_updates as apply_updates
from optx._src.base import identity as identity
from optx._src.base import set_to_zero as set_to_zero
from optx._src.base import stateless as stateless
from optx._src.clipping import ClipState as ClipState
from optx._src.clipping import centralize as centralize
from optx._src.clipping import clip as clip
from optx._src.clipping import clip_by_block_rms as clip_by_block_rms
from optx._src.clipping import clip_by_global_norm as clip_by_global_norm
from optx._src.clipping import clip_by_norm as clip_by_norm
from optx._src.combine import MaskedNode as MaskedNode
from optx._src.combine import MaskedState as MaskedState
from optx._src.combine import PartitionState as PartitionState
from optx._src.combine import chain as chain
from optx._src.combine import masked as masked
from optx._src.combine import multi_transform as multi_transform
from optx._src.combine import named_chain as named_chain
from optx._src.combine import partition as partition
from optx._src.ema_params import EmaParamsState as EmaParamsState
from optx._src.ema_params import ema_params as ema_params
from optx._src.ema_params import ema_params_value as ema_params_value
from optx._src.finite import ApplyIfFiniteState as ApplyIfFiniteState
from optx._src.finite import ZeroNansState as ZeroNansState
from optx._src.finite import apply_if_finite as apply_if_finite
from optx._src.finite import zero_nans as zero_nans
from optx._src.hyperparams import get_hyperparams as get_hyperparams
from optx._src.hyperparams import set_hyperparams as set_hyperparams
from optx._src.loss_scale import UnscaleGradientsState as UnscaleGradientsState
from optx._src.loss_scale import scale_loss as scale_loss
from optx._src.loss_scale import unscale_gradients as unscale_gradients
from optx._src.momentum import EmaState as EmaState
from optx._src.momentum import TraceState as TraceState
from optx._src.momentum import ema as ema
from optx._src.momentum import trace as trace
from optx._src.scaling import ScaleByLearningRateState as ScaleByLearningRateState
from optx._src.scaling import ScaleState as ScaleState
from optx._src.scaling import scale as scale
from optx._src.scaling import scale_by_learning_rate as scale_by_learning_rate
from optx._src.scaling import scale_by_schedule as scale_by_schedule
from optx._src.weight_decay import AddDecayedWeightsState as AddDecayedWeightsState
from optx._src.weight_decay import add_decayed_weights as add_decayed_weights

__version__ = "0.1.0.dev0"
