"""optx: functional, stateless optimizers for JAX.

Every optimizer is a pure ``(init, update)`` pair over pytrees (optax's protocol), with its
numeric hyperparameters held in the state so that changing them never recompiles.
"""

from optx import constraints as constraints
from optx import contrib as contrib
from optx import microbatching as microbatching
from optx import optimizers as optimizers
from optx import projections as projections
from optx import schedules as schedules
from optx import second_order as second_order
from optx import transforms as transforms
from optx import tree as tree
from optx._src.accumulate import AccumulateGradientsState as AccumulateGradientsState
from optx._src.accumulate import ApplyEvery as ApplyEvery
from optx._src.accumulate import MultiSteps as MultiSteps
from optx._src.accumulate import MultiStepsState as MultiStepsState
from optx._src.accumulate import ShouldSkipUpdateFunction as ShouldSkipUpdateFunction
from optx._src.accumulate import accumulate_gradients as accumulate_gradients
from optx._src.accumulate import apply_every as apply_every
from optx._src.accumulate import skip_large_updates as skip_large_updates
from optx._src.accumulate import skip_not_finite as skip_not_finite
from optx._src.agc import AdaptiveGradClipState as AdaptiveGradClipState
from optx._src.agc import adaptive_grad_clip as adaptive_grad_clip
from optx._src.algorithms.adadelta import ScaleByAdaDeltaState as ScaleByAdaDeltaState
from optx._src.algorithms.adadelta import adadelta as adadelta
from optx._src.algorithms.adadelta import scale_by_adadelta as scale_by_adadelta
from optx._src.algorithms.adafactor import FactoredState as FactoredState
from optx._src.algorithms.adafactor import adafactor as adafactor
from optx._src.algorithms.adafactor import scale_by_factored_rms as scale_by_factored_rms
from optx._src.algorithms.adagrad import ScaleByRssState as ScaleByRssState
from optx._src.algorithms.adagrad import adagrad as adagrad
from optx._src.algorithms.adagrad import scale_by_rss as scale_by_rss
from optx._src.algorithms.adam import ScaleByAdamState as ScaleByAdamState
from optx._src.algorithms.adam import ScaleByNadamState as ScaleByNadamState
from optx._src.algorithms.adam import adam as adam
from optx._src.algorithms.adam import adamw as adamw
from optx._src.algorithms.adam import scale_by_adam as scale_by_adam
from optx._src.algorithms.adamax import adamax as adamax
from optx._src.algorithms.adamax import adamaxw as adamaxw
from optx._src.algorithms.adamax import scale_by_adamax as scale_by_adamax
from optx._src.algorithms.adan import ScaleByAdanState as ScaleByAdanState
from optx._src.algorithms.adan import adan as adan
from optx._src.algorithms.adan import scale_by_adan as scale_by_adan
from optx._src.algorithms.ademamix import ScaleByAdemamixState as ScaleByAdemamixState
from optx._src.algorithms.ademamix import ademamix as ademamix
from optx._src.algorithms.ademamix import scale_by_ademamix as scale_by_ademamix
from optx._src.algorithms.adopt import ScaleByAdoptState as ScaleByAdoptState
from optx._src.algorithms.adopt import adopt as adopt
from optx._src.algorithms.adopt import scale_by_adopt as scale_by_adopt
from optx._src.algorithms.amsgrad import ScaleByAmsgradState as ScaleByAmsgradState
from optx._src.algorithms.amsgrad import amsgrad as amsgrad
from optx._src.algorithms.amsgrad import scale_by_amsgrad as scale_by_amsgrad
from optx._src.algorithms.belief import ScaleByBeliefState as ScaleByBeliefState
from optx._src.algorithms.belief import ScaleByYogiState as ScaleByYogiState
from optx._src.algorithms.belief import adabelief as adabelief
from optx._src.algorithms.belief import scale_by_belief as scale_by_belief
from optx._src.algorithms.belief import scale_by_yogi as scale_by_yogi
from optx._src.algorithms.belief import yogi as yogi
from optx._src.algorithms.cocob import COCOBState as COCOBState
from optx._src.algorithms.cocob import cocob as cocob
from optx._src.algorithms.cocob import scale_by_cocob as scale_by_cocob
from optx._src.algorithms.dadapt import DAdaptAdamWState as DAdaptAdamWState
from optx._src.algorithms.dadapt import dadapt_adamw as dadapt_adamw
from optx._src.algorithms.distance_over_gradients import (
    ScaleByDistanceOverGradientsState as ScaleByDistanceOverGradientsState,
)
from optx._src.algorithms.distance_over_gradients import (
    scale_by_distance_over_gradients as scale_by_distance_over_gradients,
)
from optx._src.algorithms.dog import DoGState as DoGState
from optx._src.algorithms.dog import DoWGState as DoWGState
from optx._src.algorithms.dog import dog as dog
from optx._src.algorithms.dog import dowg as dowg
from optx._src.algorithms.ftrl import ScaleByFtrlState as ScaleByFtrlState
from optx._src.algorithms.ftrl import ftrl as ftrl
from optx._src.algorithms.ftrl import scale_by_ftrl as scale_by_ftrl
from optx._src.algorithms.layerwise import ScaleByTrustRatioState as ScaleByTrustRatioState
from optx._src.algorithms.layerwise import fromage as fromage
from optx._src.algorithms.layerwise import lamb as lamb
from optx._src.algorithms.layerwise import lars as lars
from optx._src.algorithms.layerwise import scale_by_trust_ratio as scale_by_trust_ratio
from optx._src.algorithms.lazy_adam import lazy_adam as lazy_adam
from optx._src.algorithms.lazy_adam import scale_by_lazy_adam as scale_by_lazy_adam
from optx._src.algorithms.lion import ScaleByLionState as ScaleByLionState
from optx._src.algorithms.lion import lion as lion
from optx._src.algorithms.lion import scale_by_lion as scale_by_lion
from optx._src.algorithms.lion import scale_by_sign as scale_by_sign
from optx._src.algorithms.lion import sign_sgd as sign_sgd
from optx._src.algorithms.lion import signum as signum
from optx._src.algorithms.lookahead import LookaheadState as LookaheadState
from optx._src.algorithms.lookahead import lookahead as lookahead
from optx._src.algorithms.mechanic import MechanicState as MechanicState
from optx._src.algorithms.mechanic import mechanize as mechanize
from optx._src.algorithms.momo import MomoAdamState as MomoAdamState
from optx._src.algorithms.momo import MomoState as MomoState
from optx._src.algorithms.momo import momo as momo
from optx._src.algorithms.momo import momo_adam as momo_adam
from optx._src.algorithms.muon import MuonState as MuonState
from optx._src.algorithms.muon import muon as muon
from optx._src.algorithms.muon import scale_by_muon as scale_by_muon
from optx._src.algorithms.muon_shape import ScaleByShapeState as ScaleByShapeState
from optx._src.algorithms.muon_shape import scale_by_shape as scale_by_shape
from optx._src.algorithms.nadam import nadam as nadam
from optx._src.algorithms.nadam import nadamw as nadamw
from optx._src.algorithms.noisy import AddNoiseState as AddNoiseState
from optx._src.algorithms.noisy import add_noise as add_noise
from optx._src.algorithms.noisy import noisy_sgd as noisy_sgd
from optx._src.algorithms.novograd import ScaleByNovogradState as ScaleByNovogradState
from optx._src.algorithms.novograd import novograd as novograd
from optx._src.algorithms.novograd import scale_by_novograd as scale_by_novograd
from optx._src.algorithms.optimistic import (
    ScaleByOptimisticGradientState as ScaleByOptimisticGradientState,
)
from optx._src.algorithms.optimistic import optimistic_adam as optimistic_adam
from optx._src.algorithms.optimistic import optimistic_adam_v2 as optimistic_adam_v2
from optx._src.algorithms.optimistic import (
    optimistic_gradient_descent as optimistic_gradient_descent,
)
from optx._src.algorithms.optimistic import (
    scale_by_optimistic_gradient as scale_by_optimistic_gradient,
)
from optx._src.algorithms.polyak import ScaleByPolyakState as ScaleByPolyakState
from optx._src.algorithms.polyak import polyak_sgd as polyak_sgd
from optx._src.algorithms.polyak import scale_by_polyak as scale_by_polyak
from optx._src.algorithms.prodigy import ProdigyState as ProdigyState
from optx._src.algorithms.prodigy import prodigy as prodigy
from optx._src.algorithms.prodigy import scale_by_prodigy as scale_by_prodigy
from optx._src.algorithms.radam import radam as radam
from optx._src.algorithms.radam import scale_by_radam as scale_by_radam
from optx._src.algorithms.rmsprop import ScaleByRmsState as ScaleByRmsState
from optx._src.algorithms.rmsprop import ScaleByRStdDevState as ScaleByRStdDevState
from optx._src.algorithms.rmsprop import rmsprop as rmsprop
from optx._src.algorithms.rmsprop import scale_by_rms as scale_by_rms
from optx._src.algorithms.rmsprop import scale_by_stddev as scale_by_stddev
from optx._src.algorithms.rprop import ScaleByRpropState as ScaleByRpropState
from optx._src.algorithms.rprop import rprop as rprop
from optx._src.algorithms.rprop import scale_by_rprop as scale_by_rprop
from optx._src.algorithms.schedule_free import ScheduleFreeState as ScheduleFreeState
from optx._src.algorithms.schedule_free import schedule_free as schedule_free
from optx._src.algorithms.schedule_free import schedule_free_adamw as schedule_free_adamw
from optx._src.algorithms.schedule_free import (
    schedule_free_eval_params as schedule_free_eval_params,
)
from optx._src.algorithms.schedule_free import schedule_free_sgd as schedule_free_sgd
from optx._src.algorithms.sgd import sgd as sgd
from optx._src.algorithms.sm3 import ScaleBySM3State as ScaleBySM3State
from optx._src.algorithms.sm3 import scale_by_sm3 as scale_by_sm3
from optx._src.algorithms.sm3 import sm3 as sm3
from optx._src.algorithms.sophia import HutchinsonState as HutchinsonState
from optx._src.algorithms.sophia import SophiaState as SophiaState
from optx._src.algorithms.sophia import (
    hutchinson_estimator_diag_hessian as hutchinson_estimator_diag_hessian,
)
from optx._src.algorithms.sophia import scale_by_sophia as scale_by_sophia
from optx._src.algorithms.sophia import sophia as sophia
from optx._src.base import EmptyState as EmptyState
from optx._src.base import GradientTransformationLike as GradientTransformationLike
from optx._src.base import OptState as OptState
from optx._src.base import Params as Params
from optx._src.base import ScalarOrSchedule as ScalarOrSchedule
from optx._src.base import Schedule as Schedule
from optx._src.base import Transform as Transform
from optx._src.base import Updates as Updates
from optx._src.base import apply_updates as apply_updates
from optx._src.base import identity as identity
from optx._src.base import set_to_zero as set_to_zero
from optx._src.base import stateless as stateless
from optx._src.checkpoint import latest_checkpoint as latest_checkpoint
from optx._src.checkpoint import restore_state as restore_state
from optx._src.checkpoint import save_state as save_state
from optx._src.clipping import ClipByGlobalNormState as ClipByGlobalNormState
from optx._src.clipping import ClipState as ClipState
from optx._src.clipping import centralize as centralize
from optx._src.clipping import clip as clip
from optx._src.clipping import clip_by_block_rms as clip_by_block_rms
from optx._src.clipping import clip_by_global_norm as clip_by_global_norm
from optx._src.clipping import clip_by_norm as clip_by_norm
from optx._src.combine import MaskedNode as MaskedNode
from optx._src.combine import MaskedState as MaskedState
from optx._src.combine import MultiTransformState as MultiTransformState
from optx._src.combine import PartitionState as PartitionState
from optx._src.combine import chain as chain
from optx._src.combine import masked as masked
from optx._src.combine import multi_transform as multi_transform
from optx._src.combine import named_chain as named_chain
from optx._src.combine import partition as partition
from optx._src.compiler import compiler_options as compiler_options
from optx._src.conditional import ConditionallyMaskState as ConditionallyMaskState
from optx._src.conditional import ConditionallyTransformState as ConditionallyTransformState
from optx._src.conditional import conditionally_mask as conditionally_mask
from optx._src.conditional import conditionally_transform as conditionally_transform
from optx._src.constraints import constrain as constrain
from optx._src.distributed import aggregate_gradients as aggregate_gradients
from optx._src.ema_params import EmaParamsState as EmaParamsState
from optx._src.ema_params import ema_params as ema_params
from optx._src.ema_params import ema_params_value as ema_params_value
from optx._src.finite import ApplyIfFiniteState as ApplyIfFiniteState
from optx._src.finite import ZeroNansState as ZeroNansState
from optx._src.finite import apply_if_finite as apply_if_finite
from optx._src.finite import zero_nans as zero_nans
from optx._src.flat import FlattenState as FlattenState
from optx._src.flat import flatten as flatten
from optx._src.flat_tree import FlatTree as FlatTree
from optx._src.flat_tree import flatten_tree as flatten_tree
from optx._src.freezing import freeze as freeze
from optx._src.freezing import selective_transform as selective_transform
from optx._src.gradient_scale import scale_gradient as scale_gradient
from optx._src.hyperparams import HyperParams as HyperParams
from optx._src.hyperparams import get_hyperparams as get_hyperparams
from optx._src.hyperparams import hyperparam as hyperparam
from optx._src.hyperparams import scale_hyperparams as scale_hyperparams
from optx._src.hyperparams import set_hyperparams as set_hyperparams
from optx._src.inject import InjectHyperparamsState as InjectHyperparamsState
from optx._src.inject import InjectStatefulHyperparamsState as InjectStatefulHyperparamsState
from optx._src.inject import WrappedSchedule as WrappedSchedule
from optx._src.inject import inject_hyperparams as inject_hyperparams
from optx._src.inject import inject_stateful_hyperparams as inject_stateful_hyperparams
from optx._src.lbfgs import ScaleByLBFGSState as ScaleByLBFGSState
from optx._src.lbfgs import lbfgs as lbfgs
from optx._src.lbfgs import scale_by_lbfgs as scale_by_lbfgs
from optx._src.linear_algebra import global_norm as global_norm
from optx._src.linear_algebra import matrix_inverse_pth_root as matrix_inverse_pth_root
from optx._src.linear_algebra import nnls as nnls
from optx._src.linear_algebra import power_iteration as power_iteration
from optx._src.linesearch import ScaleByZoomLinesearchState as ScaleByZoomLinesearchState
from optx._src.linesearch import ZoomLinesearchInfo as ZoomLinesearchInfo
from optx._src.linesearch import scale_by_zoom_linesearch as scale_by_zoom_linesearch
from optx._src.linesearch import value_and_grad_from_state as value_and_grad_from_state
from optx._src.linesearch_backtracking import (
    ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState,
)
from optx._src.linesearch_backtracking import (
    scale_by_backtracking_linesearch as scale_by_backtracking_linesearch,
)
from optx._src.loss_scale import DynamicLossScaleState as DynamicLossScaleState
from optx._src.loss_scale import UnscaleGradientsState as UnscaleGradientsState
from optx._src.loss_scale import dynamic_loss_scale as dynamic_loss_scale
from optx._src.loss_scale import loss_scale as loss_scale
from optx._src.loss_scale import scale_loss as scale_loss
from optx._src.loss_scale import unscale_gradients as unscale_gradients
from optx._src.measure import MonitorState as MonitorState
from optx._src.measure import SnapshotState as SnapshotState
from optx._src.measure import measure_with_ema as measure_with_ema
from optx._src.measure import monitor as monitor
from optx._src.measure import snapshot as snapshot
from optx._src.microbatching import microbatch as microbatch
from optx._src.missing import skip_missing as skip_missing
from optx._src.momentum import EmaState as EmaState
from optx._src.momentum import TraceState as TraceState
from optx._src.momentum import ema as ema
from optx._src.momentum import trace as trace
from optx._src.monitored import MonitoredState as MonitoredState
from optx._src.monitored import monitor_metrics as monitor_metrics
from optx._src.monitored import monitored as monitored
from optx._src.multi_normal import multi_normal as multi_normal
from optx._src.nonnegative import NonNegativeParamsState as NonNegativeParamsState
from optx._src.nonnegative import keep_params_nonnegative as keep_params_nonnegative
from optx._src.norm_scaling import NormalizeByUpdateNormState as NormalizeByUpdateNormState
from optx._src.norm_scaling import ScaleByParamBlockNormState as ScaleByParamBlockNormState
from optx._src.norm_scaling import ScaleByParamBlockRMSState as ScaleByParamBlockRMSState
from optx._src.norm_scaling import normalize_by_update_norm as normalize_by_update_norm
from optx._src.norm_scaling import scale_by_param_block_norm as scale_by_param_block_norm
from optx._src.norm_scaling import scale_by_param_block_rms as scale_by_param_block_rms
from optx._src.numerics import safe_increment as safe_increment
from optx._src.numerics import safe_int32_increment as safe_int32_increment
from optx._src.numerics import safe_norm as safe_norm
from optx._src.numerics import safe_root_mean_squares as safe_root_mean_squares
from optx._src.per_example import per_example_global_norm_clip as per_example_global_norm_clip
from optx._src.per_example import per_example_layer_norm_clip as per_example_layer_norm_clip
from optx._src.plateau import ReduceOnPlateauState as ReduceOnPlateauState
from optx._src.plateau import reduce_on_plateau as reduce_on_plateau
from optx._src.protocol import GradientTransformation as GradientTransformation
from optx._src.protocol import GradientTransformationExtraArgs as GradientTransformationExtraArgs
from optx._src.protocol import MaskOrFn as MaskOrFn
from optx._src.protocol import TransformInitFn as TransformInitFn
from optx._src.protocol import TransformUpdateExtraArgsFn as TransformUpdateExtraArgsFn
from optx._src.protocol import TransformUpdateFn as TransformUpdateFn
from optx._src.protocol import init_empty_state as init_empty_state
from optx._src.protocol import stateless_with_tree_map as stateless_with_tree_map
from optx._src.protocol import with_extra_args_support as with_extra_args_support
from optx._src.rounding import KahanSummationState as KahanSummationState
from optx._src.rounding import StochasticRoundingState as StochasticRoundingState
from optx._src.rounding import kahan_summation as kahan_summation
from optx._src.rounding import stochastic_rounding as stochastic_rounding
from optx._src.scaling import ScaleByLearningRateState as ScaleByLearningRateState
from optx._src.scaling import ScaleByScheduleState as ScaleByScheduleState
from optx._src.scaling import ScaleState as ScaleState
from optx._src.scaling import scale as scale
from optx._src.scaling import scale_by_learning_rate as scale_by_learning_rate
from optx._src.scaling import scale_by_schedule as scale_by_schedule
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
from optx._src.schedules.onecycle import cosine_onecycle_schedule as cosine_onecycle_schedule
from optx._src.schedules.onecycle import linear_onecycle_schedule as linear_onecycle_schedule
from optx._src.schedules.piecewise import (
    piecewise_constant_schedule as piecewise_constant_schedule,
)
from optx._src.schedules.piecewise import (
    piecewise_interpolate_schedule as piecewise_interpolate_schedule,
)
from optx._src.schedules.polynomial import constant_schedule as constant_schedule
from optx._src.schedules.polynomial import linear_schedule as linear_schedule
from optx._src.schedules.polynomial import polynomial_schedule as polynomial_schedule
from optx._src.sharding import shard_state as shard_state
from optx._src.sharding import state_shardings as state_shardings
from optx._src.sparse import RowSparse as RowSparse
from optx._src.sparse import embedding_grad as embedding_grad
from optx._src.summary import Summary as Summary
from optx._src.summary import summary as summary
from optx._src.target_params import incremental_update as incremental_update
from optx._src.target_params import periodic_update as periodic_update
from optx._src.train_step import TrainStep as TrainStep
from optx._src.train_step import make_step as make_step
from optx._src.tree_moments import bias_correction as bias_correction
from optx._src.tree_moments import update_infinity_moment as update_infinity_moment
from optx._src.tree_moments import update_moment as update_moment
from optx._src.tree_moments import update_moment_per_elem_norm as update_moment_per_elem_norm
from optx._src.tree_state import tree_map_params as tree_map_params
from optx._src.weight_decay import AddDecayedWeightsState as AddDecayedWeightsState
from optx._src.weight_decay import DecayBeforeState as DecayBeforeState
from optx._src.weight_decay import add_decayed_weights as add_decayed_weights
from optx._src.weight_decay import decay_before as decay_before

__version__ = "0.1.0.dev0"

# An unknown keyword argument names the close ones and the full list, in every namespace.
from optx._src.suggest import check_keywords as _check_keywords

_check_keywords(__name__)
del _check_keywords


# optax keeps these at its top level as deprecated aliases of `optax.contrib`'s: so does optx.
_DEPRECATED = {
    "differentially_private_aggregate": "optx.contrib.differentially_private_aggregate",
    "DifferentiallyPrivateAggregateState": "optx.contrib.DifferentiallyPrivateAggregateState",
    "dpsgd": "optx.contrib.dpsgd",
}


def __getattr__(name: str) -> object:
    if name in _DEPRECATED:
        import warnings

        warnings.warn(
            f"optx.{name} is deprecated (as in optax): use {_DEPRECATED[name]}.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(contrib, name)
    raise AttributeError(f"module 'optx' has no attribute {name!r}")
