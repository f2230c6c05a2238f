"""Pytree arithmetic: the helpers optx's transforms are built from.

Parameters are named by their key path joined with ``/`` (``"dense/kernel"``).
"""

from optx._src.tree import add as add
from optx._src.tree import all_finite as all_finite
from optx._src.tree import cast as cast
from optx._src.tree import cast_like as cast_like
from optx._src.tree import full_like as full_like
from optx._src.tree import leaves_with_paths as leaves_with_paths
from optx._src.tree import mul as mul
from optx._src.tree import nbytes as nbytes
from optx._src.tree import norm as norm
from optx._src.tree import ones_like as ones_like
from optx._src.tree import path_name as path_name
from optx._src.tree import paths as paths
from optx._src.tree import scale as scale
from optx._src.tree import size as size
from optx._src.tree import sub as sub
from optx._src.tree import sum as sum
from optx._src.tree import vdot as vdot
from optx._src.tree import where as where
from optx._src.tree import zeros_like as zeros_like
