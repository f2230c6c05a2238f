"""Keras's learning-rate schedule classes, with Keras 3's names, arguments and values.

Mirrors ``keras.optimizers.schedules``: each class's ``get_config()`` is Keras's config and
`serialize` / `deserialize` read and write Keras's formats. Each is also an optx schedule
(frozen, hashable, a pure function of the step), usable wherever optx takes one. optax-style
schedules are in `optx.schedules`.
"""

from optx._src.schedules.keras import CosineDecay as CosineDecay
from optx._src.schedules.keras import CosineDecayRestarts as CosineDecayRestarts
from optx._src.schedules.keras import ExponentialDecay as ExponentialDecay
from optx._src.schedules.keras import InverseTimeDecay as InverseTimeDecay
from optx._src.schedules.keras import LearningRateSchedule as LearningRateSchedule
from optx._src.schedules.keras import PiecewiseConstantDecay as PiecewiseConstantDecay
from optx._src.schedules.keras import PolynomialDecay as PolynomialDecay
from optx._src.schedules.keras_serialization import deserialize as deserialize
from optx._src.schedules.keras_serialization import serialize as serialize
