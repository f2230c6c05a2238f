"""Keras-style optimizers: ``keras.optimizers``' names and arguments, on optx's transforms.

This namespace mirrors ``keras.optimizers`` (DESIGN D10): a Keras user replaces
``keras.optimizers`` with ``optx.optimizers``. It is the future home of the stateful
Keras-named classes (``Adam``, ``SGD``, ``MultiOptimizer``, ...); for now it holds Keras's
learning-rate schedules, in `optx.optimizers.schedules`.
"""

from optx.optimizers import schedules as schedules
