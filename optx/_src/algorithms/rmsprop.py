"""The RMSProp family: `scale_by_rms`, `scale_by_stddev` and `rmsprop`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks, placement
from optx._src import hyperparams as hp
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    identity,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import Chain, chain
from optx._src.moments import abs_sq, decay_pair, real_full_like, unzip
from optx._src.momentum import Trace
from optx._src.options import dtype_options
from optx._src.scaling import scale_by_learning_rate


def full_like(params: Params, value: float, dtype: Any) -> Params:
    """Slots shaped like ``params`` filled with ``value`` (in ``dtype``, else the params')."""
    return jax.tree.map(lambda p: placement.full_like(p, value, dtype), params)


def normalise(g: jax.Array, square: jax.Array, eps: jax.Array, eps_in_sqrt: bool) -> jax.Array:
    """``g / sqrt(square + eps)``, or ``g / (sqrt(square) + eps)`` with ``eps`` outside."""
    if eps_in_sqrt:
        return g * jax.lax.rsqrt(square + eps)
    return g / (jnp.sqrt(square) + eps)


def _scalars(tx: Any, state: Any) -> tuple[Any, ...]:
    """``(decay, 1 - decay, eps, count, 1 - decay^count or None)``, once per step."""
    h = state.hyperparams
    count = safe_increment(state.count)
    bc = hp.bias_correction(h, "decay", count) if tx.bias_correction else None
    return (*decay_pair(h, "decay"), h["eps"], count, bc)


class ScaleByRmsState(NamedTuple):
    """State of `scale_by_rms`: step count, second moment, hyperparameters."""

    count: jax.Array
    nu: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByRms(Transform):
    """See `scale_by_rms`."""

    name = "scale_by_rms"
    elementwise = True
    decay: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    initial_scale: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    eps_in_sqrt: bool = True
    bias_correction: bool = False
    nu_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "nu_dtype")

    def init(self, params: Params) -> ScaleByRmsState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        return ScaleByRmsState(
            zero_count(),
            real_full_like(params, self.initial("initial_scale"), self.nu_dtype),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: ScaleByRmsState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByRmsState]:
        del params, extra
        checks.same_tree(
            f"{self.name}.update", updates, state.nu, "updates", "the state", real_slots=True
        )
        d, c, eps, count, bc = _scalars(self, state)

        def leaf(g: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
            new_v = c * abs_sq(g) + d * v
            v_hat = new_v if bc is None else new_v / bc
            u = normalise(g, v_hat, eps, self.eps_in_sqrt)
            return u.astype(g.dtype), new_v.astype(v.dtype)

        u, nu = unzip(jax.tree.map(leaf, updates, state.nu), updates, 2)
        return u, ScaleByRmsState(count, nu, state.hyperparams)


def scale_by_rms(
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
    *,
    nu_dtype: DTypeLike | None = None,
) -> ScaleByRms:
    r"""Rescales updates by the root of a moving average of their squares (RMSProp).

    .. math::
       \nu_t = \rho\,\nu_{t-1} + (1-\rho)\,g_t^2, \qquad
       u_t = g_t / \sqrt{\hat\nu_t + \epsilon}
       \quad\bigl(\text{or } g_t / (\sqrt{\hat\nu_t} + \epsilon)\bigr)

    with :math:`\rho` = ``decay``, :math:`\epsilon` = ``eps``, :math:`\nu_0` =
    ``initial_scale``, and :math:`\hat\nu_t = \nu_t / (1-\rho^t)` with ``bias_correction``
    (else :math:`\hat\nu_t = \nu_t`). The arithmetic runs in at least float32.

    Args:
      decay: :math:`\rho`, the decay of the moving average, in [0, 1).
      eps: :math:`\epsilon \ge 0`, added inside the square root (``eps_in_sqrt``) or to it.
      initial_scale: :math:`\nu_0 \ge 0` (PyTorch and Keras start from 0, TF1 from 1). It
        is read by ``init`` only: setting it in a state later changes nothing.
      eps_in_sqrt: add ``eps`` inside the square root (optax's and Keras's default) rather
        than to it (PyTorch, and TF OptimizerV2's RMSprop without momentum).
      bias_correction: divide :math:`\nu_t` by :math:`1-\rho^t`.
      nu_dtype: dtype of :math:`\nu`; ``None`` uses each parameter's dtype.

    Returns:
      The transform. ``decay``, ``eps`` and ``initial_scale`` are dynamic hyperparameters.

    Raises:
      ValueError: ``decay`` is outside [0, 1), or ``eps`` / ``initial_scale`` is negative.
      TypeError: ``nu_dtype`` is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_rms(decay=0.75, eps=0.0)
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -4.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates
      {'w': Array([ 2., -2.], dtype=float32)}

    References:
      Hinton, Srivastava and Swersky, "Neural Networks for Machine Learning", lecture 6e
      (Coursera), 2012.
    """
    return ScaleByRms(decay, eps, initial_scale, eps_in_sqrt, bias_correction, nu_dtype)


class ScaleByRStdDevState(NamedTuple):
    """State of `scale_by_stddev`: step count, first and second moments, hyperparameters."""

    count: jax.Array
    mu: Params
    nu: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByStddev(Transform):
    """See `scale_by_stddev`."""

    name = "scale_by_stddev"
    elementwise = True
    decay: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    initial_scale: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    eps_in_sqrt: bool = True
    bias_correction: bool = False
    mu_dtype: Any = None
    nu_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "mu_dtype", "nu_dtype")

    def init(self, params: Params) -> ScaleByRStdDevState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        checks.complex_slot(f"{self.name}.init", "mu_dtype", self.mu_dtype, params)
        return ScaleByRStdDevState(
            zero_count(),
            full_like(params, 0.0, self.mu_dtype),
            real_full_like(params, self.initial("initial_scale"), self.nu_dtype),
            self.init_hyperparams(),
        )

    def update(
        self,
        updates: Updates,
        state: ScaleByRStdDevState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByRStdDevState]:
        del params, extra
        # Against the first moment: complex where the parameter is.
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        d, c, eps, count, bc = _scalars(self, state)

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, ...]:
            new_m = c * g + d * m
            new_v = c * abs_sq(g) + d * v
            m_hat, v_hat = (new_m, new_v) if bc is None else (new_m / bc, new_v / bc)
            u = normalise(g, v_hat - abs_sq(m_hat), eps, self.eps_in_sqrt)
            return u.astype(g.dtype), new_m.astype(m.dtype), new_v.astype(v.dtype)

        u, mu, nu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu), updates, 3)
        return u, ScaleByRStdDevState(count, mu, nu, state.hyperparams)


def scale_by_stddev(
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
    *,
    mu_dtype: DTypeLike | None = None,
    nu_dtype: DTypeLike | None = None,
) -> ScaleByStddev:
    r"""Rescales updates by a moving estimate of their standard deviation (centered RMSProp).

    .. math::
       \mu_t = \rho\,\mu_{t-1} + (1-\rho)\,g_t, \qquad
       \nu_t = \rho\,\nu_{t-1} + (1-\rho)\,g_t^2, \\
       u_t = g_t / \sqrt{\hat\nu_t - \hat\mu_t^2 + \epsilon}
       \quad\bigl(\text{or } g_t / (\sqrt{\hat\nu_t - \hat\mu_t^2} + \epsilon)\bigr)

    with :math:`\rho` = ``decay``, :math:`\epsilon` = ``eps``, :math:`\mu_0 = 0`,
    :math:`\nu_0` = ``initial_scale``, and hats dividing by :math:`1-\rho^t` with
    ``bias_correction`` (else none). The arithmetic runs in at least float32.

    Args:
      decay: :math:`\rho`, the decay of both moving averages, in [0, 1).
      eps: :math:`\epsilon \ge 0`, added inside the square root (``eps_in_sqrt``) or to it.
      initial_scale: :math:`\nu_0 \ge 0`; read by ``init`` only.
      eps_in_sqrt: add ``eps`` inside the square root rather than to it.
      bias_correction: divide both moments by :math:`1-\rho^t`.
      mu_dtype: dtype of :math:`\mu`; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of :math:`\nu`; ``None`` uses each parameter's dtype.

    Returns:
      The transform. ``decay``, ``eps`` and ``initial_scale`` are dynamic hyperparameters.

    Raises:
      ValueError: ``decay`` is outside [0, 1), or ``eps`` / ``initial_scale`` is negative.
      TypeError: a moment dtype is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_stddev(decay=0.5, eps=0.0)
      >>> updates, _ = tx.update({"w": jnp.array([2.0, -4.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates
      {'w': Array([ 2., -2.], dtype=float32)}

    References:
      Graves, "Generating Sequences With Recurrent Neural Networks", arXiv:1308.0850, 2013.
    """
    return ScaleByStddev(
        decay, eps, initial_scale, eps_in_sqrt, bias_correction, mu_dtype, nu_dtype
    )


def rmsprop(
    learning_rate: ScalarOrSchedule,
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    eps_in_sqrt: bool = True,
    centered: bool = False,
    momentum: float | None = None,
    nesterov: bool = False,
    bias_correction: bool = False,
    *,
    accumulator_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The RMSProp optimizer, plain or centered, with optional momentum.

    .. math::
       s_t = -\eta_t\, g_t / \sqrt{\hat\nu_t + \epsilon}, \qquad
       m_t = s_t + \mu\,m_{t-1}, \qquad \theta_t = \theta_{t-1} + m_t

    (:math:`\theta_t = \theta_{t-1} + s_t + \mu\,m_t` with ``nesterov``; without momentum
    :math:`\theta_t = \theta_{t-1} + s_t`). :math:`\hat\nu_t` is the second moment of
    `scale_by_rms`, or :math:`\hat\nu_t - \hat\mu_t^2` of `scale_by_stddev` when
    ``centered``; :math:`\eta` = ``learning_rate``, :math:`\mu` = ``momentum``. The
    learning rate enters the velocity :math:`m` before it accumulates, as in Keras.

    Keras's ``RMSprop(learning_rate, rho, momentum, epsilon, centered)`` computes the same
    numbers as ``rmsprop(learning_rate, decay=rho, eps=epsilon, momentum=momentum,
    centered=centered)`` (Keras's default epsilon is 1e-7, optax's 1e-8). TF OptimizerV2's
    RMSprop without momentum adds epsilon outside the root: ``eps_in_sqrt=False``.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      decay: :math:`\rho`, the decay of the moving averages, in [0, 1).
      eps: :math:`\epsilon \ge 0`.
      initial_scale: initial value of the second moment, >= 0.
      eps_in_sqrt: add ``eps`` inside the square root rather than to it.
      centered: divide by the estimated standard deviation (`scale_by_stddev`) rather
        than the root mean square (`scale_by_rms`).
      momentum: :math:`\mu \in [0, 1]` (``"momentum"`` in the state), or ``None`` for no
        momentum buffer.
      nesterov: use Nesterov momentum.
      bias_correction: divide the moments by :math:`1-\rho^t`.
      accumulator_dtype: dtype of every slot (moments and momentum); ``None`` uses each
        parameter's dtype.

    Returns:
      ``chain(scale_by_rms(...), scale_by_learning_rate(learning_rate), trace(momentum))``,
      with `scale_by_stddev` when ``centered`` and `identity` in place of the trace when
      ``momentum`` is ``None``.

    Raises:
      ValueError: an argument is out of range.
      TypeError: ``accumulator_dtype`` is not a floating dtype.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.rmsprop(0.01, momentum=0.5)
      >>> state = tx.init(params)
      >>> for _ in range(300):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.05))
      True

    References:
      Hinton, Srivastava and Swersky, "Neural Networks for Machine Learning", lecture 6e
      (Coursera), 2012; Graves, "Generating Sequences With Recurrent Neural Networks",
      arXiv:1308.0850, 2013.
    """
    with hp.caller("rmsprop"):
        accumulator_dtype = checks.dtype_option("rmsprop", "accumulator_dtype", accumulator_dtype)
        # Checked here: `centered` picks the building block, and without momentum no trace
        # is built to check `nesterov`.
        nesterov = checks.flag("rmsprop", "nesterov", nesterov)
        if checks.flag("rmsprop", "centered", centered):
            scaler: Transform = scale_by_stddev(
                decay,
                eps,
                initial_scale,
                eps_in_sqrt,
                bias_correction,
                mu_dtype=accumulator_dtype,
                nu_dtype=accumulator_dtype,
            )
        else:
            scaler = scale_by_rms(
                decay, eps, initial_scale, eps_in_sqrt, bias_correction, nu_dtype=accumulator_dtype
            )
        return chain(
            scaler,
            scale_by_learning_rate(learning_rate),
            identity()
            if momentum is None
            else Trace(momentum, nesterov, accumulator_dtype, hyperparam_name="momentum"),
        )
