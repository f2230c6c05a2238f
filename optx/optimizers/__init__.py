"""Keras-style stateful optimizers: ``keras.optimizers``' names and arguments, on optx.

This namespace mirrors ``keras.optimizers``: a Keras user replaces
``keras.optimizers`` with ``optx.optimizers``. Each class translates its arguments into a
chain of optx transforms and keeps that chain's state (`Optimizer`); Keras's
learning-rate schedules are in `optx.optimizers.schedules`.
"""

from optx._src.stateful.keras_adam import Adam as Adam
from optx._src.stateful.keras_adam import Adamax as Adamax
from optx._src.stateful.keras_adam import AdamW as AdamW
from optx._src.stateful.keras_adam import Lamb as Lamb
from optx._src.stateful.keras_adam import Nadam as Nadam
from optx._src.stateful.keras_classes import SGD as SGD
from optx._src.stateful.keras_classes import Adadelta as Adadelta
from optx._src.stateful.keras_classes import Adafactor as Adafactor
from optx._src.stateful.keras_classes import Adagrad as Adagrad
from optx._src.stateful.keras_classes import Ftrl as Ftrl
from optx._src.stateful.keras_classes import Lion as Lion
from optx._src.stateful.keras_classes import RMSprop as RMSprop
from optx._src.stateful.keras_muon import Muon as Muon
from optx._src.stateful.loss_scale_optimizer import LossScaleOptimizer as LossScaleOptimizer
from optx._src.stateful.multi import MultiOptimizer as MultiOptimizer
from optx._src.stateful.multi import OptimizerMap as OptimizerMap
from optx._src.stateful.optimizer import Optimizer as Optimizer
from optx._src.stateful.serialization import deserialize as deserialize
from optx._src.stateful.serialization import get as get
from optx._src.stateful.serialization import serialize as serialize
from optx._src.stateful.variable import Variable as Variable
from optx.optimizers import schedules as schedules
