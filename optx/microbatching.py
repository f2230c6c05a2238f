"""Microbatching, at optax's path (``optax.microbatching``).

A function of a large batch computed as an accumulation over microbatches, to fit memory.
"""

from optx._src.microbatch_accumulators import AccumulationType as AccumulationType
from optx._src.microbatch_accumulators import Accumulator as Accumulator
from optx._src.microbatching import micro_grad as micro_grad
from optx._src.microbatching import micro_vmap as micro_vmap
from optx._src.microbatching import microbatch as microbatch
from optx._src.microbatching import reshape_batch_axis as reshape_batch_axis
