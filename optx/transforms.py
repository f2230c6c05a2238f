"""The composable transforms, at the path optax users write them (``optax.transforms``).

The same objects as at the top level (``optx.transforms.clip is optx.clip``).
"""

from optx._src.accumulate import MultiSteps as MultiSteps
from optx._src.accumulate import MultiStepsState as MultiStepsState
from optx._src.accumulate import ShouldSkipUpdateFunction as ShouldSkipUpdateFunction
from optx._src.accumulate import skip_large_updates as skip_large_updates
from optx._src.accumulate import skip_not_finite as skip_not_finite
from optx._src.agc import adaptive_grad_clip as adaptive_grad_clip
from optx._src.agc import unitwise_clip as unitwise_clip
from optx._src.agc import unitwise_norm as unitwise_norm
from optx._src.algorithms.noisy import AddNoiseState as AddNoiseState
from optx._src.algorithms.noisy import add_noise as add_noise
from optx._src.clipping import clip as clip
from optx._src.clipping import clip_by_block_rms as clip_by_block_rms
from optx._src.clipping import clip_by_global_norm as clip_by_global_norm
from optx._src.combine import MaskedNode as MaskedNode
from optx._src.combine import MaskedState as MaskedState
from optx._src.combine import PartitionState as PartitionState
from optx._src.combine import chain as chain
from optx._src.combine import masked as masked
from optx._src.combine import named_chain as named_chain
from optx._src.combine import partition as partition
from optx._src.conditional import ConditionallyMaskState as ConditionallyMaskState
from optx._src.conditional import ConditionallyTransformState as ConditionallyTransformState
from optx._src.conditional import ConditionFn as ConditionFn
from optx._src.conditional import conditionally_mask as conditionally_mask
from optx._src.conditional import conditionally_transform as conditionally_transform
from optx._src.finite import ApplyIfFiniteState as ApplyIfFiniteState
from optx._src.finite import ZeroNansState as ZeroNansState
from optx._src.finite import apply_if_finite as apply_if_finite
from optx._src.finite import zero_nans as zero_nans
from optx._src.flat import flatten as flatten
from optx._src.freezing import freeze as freeze
from optx._src.freezing import selective_transform as selective_transform
from optx._src.measure import MonitorState as MonitorState
from optx._src.measure import SnapshotState as SnapshotState
from optx._src.measure import measure_with_ema as measure_with_ema
from optx._src.measure import monitor as monitor
from optx._src.measure import snapshot as snapshot
from optx._src.momentum import EmaState as EmaState
from optx._src.momentum import TraceState as TraceState
from optx._src.momentum import ema as ema
from optx._src.momentum import trace as trace
from optx._src.nonnegative import NonNegativeParamsState as NonNegativeParamsState
from optx._src.nonnegative import keep_params_nonnegative as keep_params_nonnegative
from optx._src.per_example import per_example_global_norm_clip as per_example_global_norm_clip
from optx._src.per_example import per_example_layer_norm_clip as per_example_layer_norm_clip
from optx._src.weight_decay import add_decayed_weights as add_decayed_weights
