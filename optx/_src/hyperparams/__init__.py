"""Hyperparameters held in the optimizer state: declared once, stored in one place.

A transform declares each numeric hyperparameter as a dataclass field made by `field`:
its default, its range rule and whether it is a decay rate. ``init`` puts a `HyperParams`
node in the state (a registered pytree); its static part carries each hyperparameter's
public name, rule, encoding and whether it is scheduled, its leaves the float32 values in
force. This module alone builds and changes them; every other module reads a state's
hyperparameters through `HyperParams`, `find`, `get_hyperparams` and `set_hyperparams`.

A decay ``b`` is used as ``1 - b`` (Adam's ``(1 - b2) g**2``), which float32 cancels: in
float32, ``0.999`` is off by 1.3e-8, which is 1.3e-5 relative of ``1 - 0.999``. So the
state also keeps what float32 rounded off ``b`` (computed in float64), and ``1 - b`` is
recovered to float32 round-off. The value in force itself is ``b``, as the user wrote it.

Any hyperparameter may be a schedule (a function of the step count). The node then also
holds the schedule's step count and a multiplier (``scale``, initially 1); each ``update``
evaluates ``scale * schedule(count)`` before the transform's maths and keeps that value in
force in the state, where `get_hyperparams` reads it.
"""

from optx._src.hyperparams.access import Found as Found
from optx._src.hyperparams.access import find as find
from optx._src.hyperparams.access import get_hyperparams as get_hyperparams
from optx._src.hyperparams.access import is_node as is_node
from optx._src.hyperparams.access import node_at as node_at
from optx._src.hyperparams.access import nodes as nodes
from optx._src.hyperparams.access import packed as packed
from optx._src.hyperparams.access import renamed as renamed
from optx._src.hyperparams.access import scale_hyperparams as scale_hyperparams
from optx._src.hyperparams.access import set_found as set_found
from optx._src.hyperparams.access import set_hyperparams as set_hyperparams
from optx._src.hyperparams.access import upgrade_legacy as upgrade_legacy
from optx._src.hyperparams.access import value_of as value_of
from optx._src.hyperparams.declare import FINITE as FINITE
from optx._src.hyperparams.declare import NONNEG as NONNEG
from optx._src.hyperparams.declare import POSITIVE as POSITIVE
from optx._src.hyperparams.declare import UNIT_CLOSED as UNIT_CLOSED
from optx._src.hyperparams.declare import UNIT_OPEN as UNIT_OPEN
from optx._src.hyperparams.declare import Range as Range
from optx._src.hyperparams.declare import Spec as Spec
from optx._src.hyperparams.declare import caller as caller
from optx._src.hyperparams.declare import check as check
from optx._src.hyperparams.declare import check_bounds as check_bounds
from optx._src.hyperparams.declare import current as current
from optx._src.hyperparams.declare import field as field
from optx._src.hyperparams.declare import first_value as first_value
from optx._src.hyperparams.declare import hyperparam as hyperparam
from optx._src.hyperparams.declare import is_array as is_array
from optx._src.hyperparams.declare import is_schedule as is_schedule
from optx._src.hyperparams.declare import schedule_bounds as schedule_bounds
from optx._src.hyperparams.declare import shown as shown
from optx._src.hyperparams.declare import specs as specs
from optx._src.hyperparams.declare import validate as validate
from optx._src.hyperparams.node import Entry as Entry
from optx._src.hyperparams.node import HyperParams as HyperParams
from optx._src.hyperparams.node import bias_correction as bias_correction
from optx._src.hyperparams.node import complement as complement
from optx._src.hyperparams.node import create as create
from optx._src.hyperparams.node import is_legacy as is_legacy
from optx._src.hyperparams.node import legacy_key as legacy_key
from optx._src.hyperparams.node import upgrade_value as upgrade_value
from optx._src.hyperparams.node import value as value
