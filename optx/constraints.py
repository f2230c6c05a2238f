"""Parameter constraints: functions ``array -> array`` for `optx.constrain`.

Keras's constraints keep Keras's names, arguments and numerics (``NonNeg``, ``MaxNorm``,
``UnitNorm``, ``MinMaxNorm``); the Euclidean projections (``Box``, ``Simplex``, ``L1Ball``,
``L2Ball``) map each parameter to the closest point of a convex set. Each is a frozen
dataclass, equal and hashable by its arguments, with ``get_config()``.
"""

from optx._src.constraints import Constraint as Constraint
from optx._src.constraints import MaxNorm as MaxNorm
from optx._src.constraints import MinMaxNorm as MinMaxNorm
from optx._src.constraints import NonNeg as NonNeg
from optx._src.constraints import UnitNorm as UnitNorm
from optx._src.projections import Box as Box
from optx._src.projections import L1Ball as L1Ball
from optx._src.projections import L2Ball as L2Ball
from optx._src.projections import Simplex as Simplex
