"""Pytree arithmetic: the helpers optx's transforms are built from (optax's ``optax.tree``).

Parameters are named by their key path joined with ``/`` (``"dense/kernel"``).
"""

from optx._src.tree import add as add
from optx._src.tree import add_scale as add_scale
from optx._src.tree import batch_shape as batch_shape
from optx._src.tree import clip as clip
from optx._src.tree import conj as conj
from optx._src.tree import div as div
from optx._src.tree import full_like as full_like
from optx._src.tree import leaves_with_paths as leaves_with_paths
from optx._src.tree import mul as mul
from optx._src.tree import ones_like as ones_like
from optx._src.tree import path_name as path_name
from optx._src.tree import paths as paths
from optx._src.tree import real as real
from optx._src.tree import scale as scale
from optx._src.tree import sub as sub
from optx._src.tree import where as where
from optx._src.tree import zeros_like as zeros_like
from optx._src.tree_dtype import cast as cast
from optx._src.tree_dtype import cast_like as cast_like
from optx._src.tree_dtype import dtype as dtype
from optx._src.tree_moments import bias_correction as bias_correction
from optx._src.tree_moments import update_infinity_moment as update_infinity_moment
from optx._src.tree_moments import update_moment as update_moment
from optx._src.tree_moments import update_moment_per_elem_norm as update_moment_per_elem_norm
from optx._src.tree_random import random_like as random_like
from optx._src.tree_random import split_key_like as split_key_like
from optx._src.tree_random import unwrap_random_key_data as unwrap_random_key_data
from optx._src.tree_reduce import all_finite as all_finite
from optx._src.tree_reduce import allclose as allclose
from optx._src.tree_reduce import max as max
from optx._src.tree_reduce import min as min
from optx._src.tree_reduce import nbytes as nbytes
from optx._src.tree_reduce import norm as norm
from optx._src.tree_reduce import size as size
from optx._src.tree_reduce import sum as sum
from optx._src.tree_reduce import vdot as vdot
from optx._src.tree_state import get as get
from optx._src.tree_state import get_all_with_path as get_all_with_path
from optx._src.tree_state import map_params as map_params
from optx._src.tree_state import set as set
