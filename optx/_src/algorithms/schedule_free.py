"""Schedule-Free learning: `schedule_free`, `schedule_free_adamw`, `schedule_free_sgd`.

`schedule_free_eval_params` gives the averaged parameters to evaluate.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.algorithms.rmsprop import scale_by_rms
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    find_states,
    identity,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import accepts_extra, call_update, chain
from optx._src.moments import decay_pair, unzip
from optx._src.options import dtype_options, flag_options
from optx._src.schedules.join import warmup_constant_schedule
from optx._src.weight_decay import add_decayed_weights

CONVENTIONS = ("optax", "keras")
# b1 divides when x is recovered from y and z: 0 is out, 1 (plain averaging) is fine.
UNIT_LEFT_OPEN = hp.Range("in (0, 1]", lambda v: 0 < v <= 1)


class ScheduleFreeState(NamedTuple):
    """State of `schedule_free`.

    Attributes:
      count: steps taken (int32, saturating).
      weight_sum: the sum of the averaging weights so far (float32).
      max_lr: the largest learning rate seen so far (float32).
      base_optimizer_state: the base optimizer's state.
      z: the base optimizer's iterates :math:`z_t` (``state_dtype``, else the params').
      hyperparams: ``learning_rate`` (unless a schedule), ``b1`` (stored as ``1 - b1``)
        and ``weight_lr_power``.
    """

    count: jax.Array
    weight_sum: jax.Array
    max_lr: jax.Array
    base_optimizer_state: OptState
    z: Params
    hyperparams: dict[str, jax.Array]


def _convention_option(api: str, value: Any) -> str:
    if not isinstance(value, str) or value not in CONVENTIONS:
        raise ValueError(
            f"`{hp.current(api)}` needs schedule_convention to be 'optax' or 'keras'. "
            f"Received: schedule_convention={value!r}."
        )
    return value


@transform
class ScheduleFree(Transform):
    """See `schedule_free`."""

    name = "schedule_free"
    elementwise = True
    base_optimizer: GradientTransformationLike = None  # type: ignore[assignment]
    learning_rate: ScalarOrSchedule = hp.field(1e-3, hp.NONNEG)
    b1: ScalarOrSchedule = hp.field(0.9, UNIT_LEFT_OPEN, decay=True)
    weight_lr_power: ScalarOrSchedule = hp.field(2.0, hp.NONNEG)
    state_dtype: Any = None
    apply_learning_rate: bool = False
    schedule_convention: str = "optax"

    def __post_init__(self) -> None:
        checks.transform(self.name, "base_optimizer", self.base_optimizer)
        super().__post_init__()
        dtype_options(self, "state_dtype")
        flag_options(self, "apply_learning_rate")
        _convention_option(self.name, self.schedule_convention)
        if self.schedule_convention == "keras" and not self.apply_learning_rate:
            raise ValueError(
                f"`{hp.current(self.name)}` needs apply_learning_rate=True to use "
                f"schedule_convention='keras' (the base optimizer applies its own learning "
                f"rate otherwise). Received: schedule_convention='keras', "
                f"apply_learning_rate=False."
            )

    def init(self, params: Params) -> ScheduleFreeState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        checks.complex_slot(f"{self.name}.init", "state_dtype", self.state_dtype, params)
        # A copy, so that params and z can both be donated to a jitted step.
        z = jax.tree.map(lambda p: jnp.array(p, self.state_dtype or jnp.result_type(p)), params)
        zero = jnp.zeros([], jnp.float32)
        return ScheduleFreeState(
            zero_count(), zero, zero, self.base_optimizer.init(params), z, self.init_hyperparams()
        )

    def update(
        self,
        updates: Updates,
        state: ScheduleFreeState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScheduleFreeState]:
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.z, "updates", "the state")
        checks.same_tree(api, params, state.z, "params", "the state")
        h = state.hyperparams
        b1, c1 = decay_pair(h, "b1")
        count = safe_increment(state.count)
        # The averaging weight of step t is max_{s <= t} lr_s ** weight_lr_power.
        lr = h.at(self, "learning_rate", count)
        max_lr = jnp.maximum(state.max_lr, lr)
        weight = max_lr ** h["weight_lr_power"]
        weight_sum = state.weight_sum + weight
        # A zero weight (lr = 0 during a warmup) gives 0, not 0 / 0.
        ck = jnp.where(weight == 0, jnp.zeros_like(weight), weight / weight_sum)

        steps, base_state = call_update(
            self.base_optimizer,
            accepts_extra(self.base_optimizer),
            updates,
            state.base_optimizer_state,
            params,
            extra,
        )
        step_lr = None
        if self.apply_learning_rate:
            # optax's inner `scale_by_learning_rate` counts from 0: it reads the schedule
            # one step behind the averaging weight; Keras reads both at t.
            lagged = self.schedule_convention == "optax" and callable(self.learning_rate)
            step_lr = h["learning_rate"] if lagged else lr

        # y_t - y_{t-1} = b1 ck (z_t - x_{t-1}) + (1 - b1)(z_t - z_{t-1}), with
        # z_t - z_{t-1} the step and x_{t-1} - z_{t-1} = (y_{t-1} - z_{t-1}) / b1. Unlike
        # forming y_t and subtracting y_{t-1} (optax), this rounds at the update's own
        # scale (y - z, of nearby numbers, is exact) and not at the parameters'.
        k_step = c1 + b1 * ck

        def leaf(g: Any, y: Any, z: Any, s: Any) -> tuple[jax.Array, jax.Array]:
            dtype = jnp.promote_types(jnp.result_type(y, z, s), jnp.float32)
            s = jnp.asarray(s, dtype) if step_lr is None else -step_lr * s
            u = k_step * s - ck * (jnp.asarray(y, dtype) - z)
            return u.astype(g.dtype), (z + s).astype(z.dtype)

        u, z = unzip(jax.tree.map(leaf, updates, params, state.z, steps), updates, 2)
        return u, ScheduleFreeState(count, weight_sum, max_lr, base_state, z, h)


def schedule_free(
    base_optimizer: GradientTransformationLike,
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    weight_lr_power: float = 2.0,
    state_dtype: DTypeLike | None = None,
    *,
    apply_learning_rate: bool = False,
    schedule_convention: Literal["optax", "keras"] = "optax",
) -> ScheduleFree:
    r"""Makes ``base_optimizer`` schedule-free: interpolation and averaging replace momentum.

    The base optimizer steps a sequence :math:`z`; the parameters the user holds (and takes
    gradients at) are :math:`y`; the average :math:`x` is what to evaluate:

    .. math::
       z_t = z_{t-1} + \Delta_t, \qquad
       x_t = (1 - c_t)\,x_{t-1} + c_t\,z_t, \qquad
       y_t = (1 - \beta_1)\,z_t + \beta_1\,x_t, \\
       c_t = \frac{w_t}{\sum_{s \le t} w_s}, \qquad
       w_t = \bigl(\max_{s \le t} \gamma_s\bigr)^{p}

    with :math:`\Delta_t` the base optimizer's update at :math:`y_{t-1}`, :math:`\gamma_s`
    = ``learning_rate`` at step :math:`s = 1, 2, \ldots`, :math:`\beta_1` = ``b1`` and
    :math:`p` = ``weight_lr_power`` (with :math:`p = 0`, :math:`c_t = 1/t`: a uniform
    average, as Keras's ``ScheduleFreeAdamW``). Only :math:`z` is stored: :math:`x_{t-1}
    = (y_{t-1} - (1-\beta_1) z_{t-1}) / \beta_1` is recovered from the parameters, as in
    optax, so the memory cost is one parameter copy. The base optimizer should have no
    momentum (e.g. Adam with ``b1=0``). Evaluate the model at `schedule_free_eval_params`.

    With ``apply_learning_rate=True`` the wrapper applies the learning rate itself,
    :math:`\Delta_t = -\gamma_t\,d_t` with :math:`d_t` the base optimizer's output (a
    gradient-like direction, without a learning rate), so that one dynamic
    ``learning_rate`` drives both the step and the weights. For a schedule,
    ``schedule_convention="optax"`` reads it at :math:`t - 1` for the step (as optax's
    inner learning rate, counting from 0) and at :math:`t` for the weight;
    ``"keras"`` reads both at :math:`t` (Keras's warmup).

    Args:
      base_optimizer: the optimizer stepping :math:`z` (an optx or optax transform).
      learning_rate: :math:`\gamma`, a non-negative number or a schedule of the step count.
      b1: :math:`\beta_1`, the interpolation weight, in (0, 1].
      weight_lr_power: :math:`p \ge 0`.
      state_dtype: dtype of :math:`z`; ``None`` uses each parameter's dtype.
      apply_learning_rate: scale the base optimizer's output by :math:`-\gamma_t`.
      schedule_convention: ``"optax"`` or ``"keras"``; ``"keras"`` needs
        ``apply_learning_rate``.

    Returns:
      The transform; its state is `ScheduleFreeState`. ``learning_rate`` (if a number),
      ``b1`` and ``weight_lr_power`` are dynamic hyperparameters.

    Raises:
      TypeError: ``base_optimizer`` is not a transform, ``state_dtype`` is not a floating
        dtype, or ``apply_learning_rate`` is not a bool.
      ValueError: a number is out of range, or ``schedule_convention`` is unknown or
        ``"keras"`` without ``apply_learning_rate``.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.schedule_free(optx.sgd(0.5), learning_rate=0.5)
      >>> params = jnp.array([1.0, -2.0])
      >>> state = tx.init(params)
      >>> for _ in range(50):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> x = optx.schedule_free_eval_params(state, params)
      >>> bool(jnp.all(jnp.abs(x) < 1e-3))
      True

    References:
      Defazio, Yang, Mehta, Mishchenko, Khaled and Cutkosky, "The Road Less Scheduled",
      NeurIPS 2024.
    """
    return ScheduleFree(
        base_optimizer,
        learning_rate,
        b1,
        weight_lr_power,
        state_dtype,
        apply_learning_rate,
        schedule_convention,
    )


def _warmup(api: str, learning_rate: ScalarOrSchedule, warmup_steps: Any) -> ScalarOrSchedule:
    """``learning_rate`` with a linear warmup from 0 over ``warmup_steps`` (None or 0: none)."""
    if warmup_steps is None:
        return learning_rate
    steps = checks.nonneg_int(api, "warmup_steps", warmup_steps)
    if steps == 0:
        return learning_rate
    if callable(learning_rate):
        raise TypeError(
            f"`{hp.current(api)}` needs learning_rate to be a number to add a warmup. "
            f"Received: learning_rate={learning_rate!r}, warmup_steps={warmup_steps!r}."
        )
    # Validates learning_rate (names the caller) before the schedule does.
    peak = hp.validate(api, "learning_rate", learning_rate, hp.NONNEG)
    return warmup_constant_schedule(0.0, peak, steps)


def schedule_free_adamw(
    learning_rate: ScalarOrSchedule = 0.0025,
    warmup_steps: int | None = None,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_lr_power: float = 2.0,
    state_dtype: DTypeLike | None = None,
    *,
    nu_dtype: DTypeLike | None = None,
    schedule_convention: Literal["optax", "keras"] = "optax",
) -> ScheduleFree:
    r"""Schedule-Free AdamW: `schedule_free` over Adam without momentum, with weight decay.

    .. math::
       \nu_t = \beta_2 \nu_{t-1} + (1-\beta_2) g_t^2, \qquad
       \Delta_t = -\gamma_t \Bigl(\frac{g_t}{\sqrt{\nu_t / (1-\beta_2^t)} + \epsilon}
       + \lambda\,y_{t-1}\Bigr)

    then the interpolation and averaging of `schedule_free` with :math:`\beta_1` = ``b1``;
    :math:`\lambda` = ``weight_decay`` acts inside the :math:`z` step, at :math:`y` (as
    optax). A ``warmup_steps`` :math:`W` warmup makes :math:`\gamma` rise linearly from 0,
    :math:`\gamma_t = \gamma \min(t - 1, W)/W` at step :math:`t` with
    ``schedule_convention="optax"`` (the averaging weights read it at :math:`t`), and
    :math:`\gamma \min(t, W)/W` for both with ``"keras"``. Keras's ``ScheduleFreeAdamW`` is
    ``schedule_free_adamw(..., weight_lr_power=0.0, schedule_convention="keras")`` (its
    ``weight_decay``, applied by the Keras base class to :math:`y` before the step, is not
    this one).

    Args:
      learning_rate: :math:`\gamma`, a non-negative number or a schedule (a schedule with
        ``warmup_steps`` is an error: put the warmup in the schedule).
      warmup_steps: length of a linear warmup from 0 (``None`` or 0: none).
      b1: :math:`\beta_1` of `schedule_free`, in (0, 1].
      b2: :math:`\beta_2`, decay of the second moment, in [0, 1).
      eps: :math:`\epsilon \ge 0`, added to the bias-corrected root.
      weight_decay: :math:`\lambda \ge 0`.
      weight_lr_power: the power :math:`p` of the averaging weights (0: uniform).
      state_dtype: dtype of :math:`z`; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of :math:`\nu`; ``None`` uses each parameter's dtype.
      schedule_convention: ``"optax"`` or ``"keras"``: the step at which the step's
        learning rate is read (see `schedule_free`).

    Returns:
      ``schedule_free(chain(scale_by_rms(b2, eps, eps_in_sqrt=False,
      bias_correction=True), add_decayed_weights(weight_decay)), learning_rate, b1,
      weight_lr_power, state_dtype, apply_learning_rate=True)``: one ``learning_rate``
      hyperparameter.

    Raises:
      TypeError: ``warmup_steps`` is given with a schedule, or a dtype is not floating.
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.schedule_free_adamw(0.1, warmup_steps=10)
      >>> params = jnp.array([1.0, -2.0])
      >>> state = tx.init(params)
      >>> for _ in range(200):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> x = optx.schedule_free_eval_params(state, params)
      >>> bool(jnp.all(jnp.abs(x) < 0.05))
      True

    References:
      Defazio et al., "The Road Less Scheduled", NeurIPS 2024; Loshchilov and Hutter,
      "Decoupled Weight Decay Regularization", ICLR 2019.
    """
    with hp.caller("schedule_free_adamw"):
        learning_rate = _warmup("schedule_free_adamw", learning_rate, warmup_steps)
        with hp.caller("schedule_free_adamw", {"decay": "b2"}):
            rms = scale_by_rms(b2, eps, eps_in_sqrt=False, bias_correction=True, nu_dtype=nu_dtype)
        base = chain(rms, add_decayed_weights(weight_decay))
        return schedule_free(
            base,
            learning_rate,
            b1,
            weight_lr_power,
            state_dtype,
            apply_learning_rate=True,
            schedule_convention=schedule_convention,
        )


def schedule_free_sgd(
    learning_rate: ScalarOrSchedule = 1.0,
    warmup_steps: int | None = None,
    b1: float = 0.9,
    weight_decay: float | None = None,
    weight_lr_power: float = 2.0,
    state_dtype: DTypeLike | None = None,
    *,
    schedule_convention: Literal["optax", "keras"] = "optax",
) -> ScheduleFree:
    r"""Schedule-Free SGD: `schedule_free` over plain gradient steps.

    .. math:: \Delta_t = -\gamma_t\,(g_t + \lambda\,y_{t-1})

    then the interpolation and averaging of `schedule_free`. ``weight_decay``
    :math:`\lambda` is multiplied by the learning rate (as in optax and PyTorch).

    Args:
      learning_rate: :math:`\gamma`, a non-negative number or a schedule.
      warmup_steps: length of a linear warmup from 0 (``None`` or 0: none; see
        `schedule_free_adamw`).
      b1: :math:`\beta_1` of `schedule_free`, in (0, 1].
      weight_decay: :math:`\lambda \ge 0`, or ``None`` for none.
      weight_lr_power: the power :math:`p` of the averaging weights (0: uniform).
      state_dtype: dtype of :math:`z`; ``None`` uses each parameter's dtype.
      schedule_convention: ``"optax"`` or ``"keras"`` (see `schedule_free`).

    Returns:
      ``schedule_free(add_decayed_weights(weight_decay) or identity(), learning_rate, ...,
      apply_learning_rate=True)``.

    Raises:
      TypeError: ``warmup_steps`` is given with a schedule, or ``state_dtype`` is not
        floating.
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.schedule_free_sgd(0.5)
      >>> params = jnp.array([1.0, -2.0])
      >>> state = tx.init(params)
      >>> for _ in range(50):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> x = optx.schedule_free_eval_params(state, params)
      >>> bool(jnp.all(jnp.abs(x) < 1e-3))
      True

    References:
      Defazio et al., "The Road Less Scheduled", NeurIPS 2024.
    """
    with hp.caller("schedule_free_sgd"):
        learning_rate = _warmup("schedule_free_sgd", learning_rate, warmup_steps)
        base = identity() if weight_decay is None else add_decayed_weights(weight_decay)
        return schedule_free(
            base,
            learning_rate,
            b1,
            weight_lr_power,
            state_dtype,
            apply_learning_rate=True,
            schedule_convention=schedule_convention,
        )


def schedule_free_eval_params(state: OptState, params: Params) -> Params:
    r"""The averaged parameters :math:`x` of a `schedule_free` state, for evaluation.

    .. math:: x_t = \bigl(y_t - (1 - \beta_1)\,z_t\bigr) / \beta_1

    with :math:`y_t` = ``params`` (the parameters being trained) and :math:`z_t` from the
    state, computed as :math:`z_t + (y_t - z_t)/\beta_1` (in at least float32) to keep
    the digits that the subtraction of nearby numbers would lose.

    Args:
      state: the state of `schedule_free` or of a transform (a chain...) that contains
        exactly one.
      params: the current parameters :math:`y_t`.

    Returns:
      :math:`x_t`, with the structure and dtypes of ``params``.

    Raises:
      ValueError: the state holds no `schedule_free` state, or several, or ``params`` do
        not match its structure.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.schedule_free_sgd(1.0)
      >>> params = jnp.array([2.0])
      >>> updates, state = tx.update(jnp.array([1.0]), tx.init(params), params)
      >>> params = optx.apply_updates(params, updates)
      >>> updates, state = tx.update(jnp.array([1.0]), state, params)
      >>> params = optx.apply_updates(params, updates)
      >>> params, optx.schedule_free_eval_params(state, params)
      (Array([0.45], dtype=float32), Array([0.5], dtype=float32))
    """
    api = "schedule_free_eval_params"
    found = find_states(state, ScheduleFreeState)
    if len(found) != 1:
        raise ValueError(
            f"`{api}` needs a state holding exactly one `schedule_free` state. "
            f"Received: a state holding {len(found)}."
        )
    sf = found[0]
    checks.same_tree(api, params, sf.z, "params", "the state")
    b1 = hp.value(sf.hyperparams, "b1")

    def leaf(y: Any, z: Any) -> jax.Array:
        dtype = jnp.promote_types(jnp.result_type(y, z), jnp.float32)
        return (z + (jnp.asarray(y, dtype) - z) / b1).astype(jnp.result_type(y))

    return jax.tree.map(leaf, params, sf.z)
