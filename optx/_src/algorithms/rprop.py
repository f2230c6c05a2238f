"""Resilient backpropagation: `scale_by_rprop` and `rprop`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from optx._src import checks, placement
from optx._src import hyperparams as hp
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.combine import Chain, chain
from optx._src.moments import unzip
from optx._src.scaling import scale

_AT_LEAST_ONE = hp.Range("finite and >= 1", lambda v: v >= 1)


class ScaleByRpropState(NamedTuple):
    """State of `scale_by_rprop`: per-parameter step sizes, the last updates, hyperparameters."""

    step_sizes: Params
    prev_updates: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByRprop(Transform):
    """See `scale_by_rprop`."""

    name = "scale_by_rprop"
    elementwise = True
    learning_rate: ScalarOrSchedule = hp.field(1e-3, hp.NONNEG)
    eta_minus: ScalarOrSchedule = hp.field(0.5, hp.UNIT_CLOSED)
    eta_plus: ScalarOrSchedule = hp.field(1.2, _AT_LEAST_ONE)
    min_step_size: ScalarOrSchedule = hp.field(1e-6, hp.NONNEG)
    max_step_size: ScalarOrSchedule = hp.field(50.0, hp.POSITIVE)

    def __post_init__(self) -> None:
        super().__post_init__()
        low, high = self.min_step_size, self.max_step_size
        if not (callable(low) or callable(high)) and low > high:
            raise ValueError(
                f"`{hp.current(self.name)}` needs min_step_size <= max_step_size. "
                f"Received: min_step_size={self.min_step_size!r}, "
                f"max_step_size={self.max_step_size!r}."
            )

    def init(self, params: Params) -> ScaleByRpropState:
        checks.float_params(f"{self.name}.init", params)
        return ScaleByRpropState(
            jax.tree.map(lambda p: placement.full_like(p, self.initial("learning_rate")), params),
            jax.tree.map(placement.zeros_like, params),
            self.init_hyperparams(),
        )

    def update(
        self,
        updates: Updates,
        state: ScaleByRpropState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByRpropState]:
        del params, extra
        api = f"{self.name}.update"
        checks.same_tree(api, updates, state.step_sizes, "updates", "the state")
        h = state.hyperparams
        eta_minus, eta_plus = h["eta_minus"], h["eta_plus"]
        lo, hi = h["min_step_size"], h["max_step_size"]

        def leaf(g: jax.Array, step: jax.Array, prev: jax.Array) -> tuple[jax.Array, ...]:
            # The product of the signs, not of the values: g * prev can underflow to 0.
            agree = jnp.sign(g) * jnp.sign(prev)
            grown = jnp.clip(step * jnp.where(agree > 0, eta_plus, eta_minus), lo, hi)
            new_step = jnp.where(agree == 0, step, grown)
            # After a sign change, no step (and the next step starts afresh).
            u = jnp.where(agree < 0, 0, new_step * jnp.sign(g))
            return u.astype(g.dtype), new_step.astype(step.dtype), u.astype(prev.dtype)

        triples = jax.tree.map(leaf, updates, state.step_sizes, state.prev_updates)
        u, steps, prev = unzip(triples, updates, 3)
        return u, ScaleByRpropState(steps, prev, h)


def scale_by_rprop(
    learning_rate: float,
    eta_minus: float = 0.5,
    eta_plus: float = 1.2,
    min_step_size: float = 1e-6,
    max_step_size: float = 50.0,
) -> ScaleByRprop:
    r"""Rprop's steps: a per-parameter step size, grown or shrunk by the gradient's sign.

    For each parameter, with :math:`s = \operatorname{sign}(g_t)\operatorname{sign}(u_{t-1})`:

    .. math::
       \Delta_t = \begin{cases}
         \min(\eta^+ \Delta_{t-1}, \Delta_{\max}) & s > 0 \\
         \max(\eta^- \Delta_{t-1}, \Delta_{\min}) & s < 0 \\
         \Delta_{t-1} & s = 0
       \end{cases}, \qquad
       u_t = \begin{cases} 0 & s < 0 \\ \Delta_t \operatorname{sign}(g_t) & s \ge 0
       \end{cases}

    with :math:`\Delta_0` = ``learning_rate``, :math:`\eta^-` = ``eta_minus``,
    :math:`\eta^+` = ``eta_plus``, :math:`\Delta_{\min}` = ``min_step_size`` and
    :math:`\Delta_{\max}` = ``max_step_size``. After a sign change the step is skipped and
    :math:`u_t = 0` is remembered, so the next step does not shrink again (iRprop-, as
    PyTorch's ``Rprop``). The updates point up the gradient: `rprop` negates them.

    optax's ``scale_by_rprop`` (0.2.8) keeps the same step sizes but emits each update one
    step late (:math:`u_{t-1}`, zeroed where :math:`s < 0`; zero on the first step);
    optx emits :math:`u_t`.

    Args:
      learning_rate: :math:`\Delta_0 \ge 0`, the initial step size of every parameter.
        ``init`` reads it; afterwards the step sizes in the state adapt on their own, so
        changing it with `set_hyperparams` after ``init`` has no effect.
      eta_minus: :math:`\eta^- \in [0, 1]`, the factor after a sign change.
      eta_plus: :math:`\eta^+ \ge 1`, the factor while the sign holds.
      min_step_size: :math:`\Delta_{\min} \ge 0`.
      max_step_size: :math:`\Delta_{\max} > 0`, at least ``min_step_size``.

    Returns:
      The transform. All five arguments are dynamic hyperparameters.

    Raises:
      ValueError: an argument is out of range, or ``min_step_size > max_step_size``.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_rprop(0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> for g in ([1.0, 1.0], [2.0, -1.0]):
      ...     updates, state = tx.update({"w": jnp.array(g)}, state)
      >>> updates, state.step_sizes
      ({'w': Array([0.12, 0.  ], dtype=float32)}, {'w': Array([0.12, 0.05], dtype=float32)})

    References:
      Riedmiller and Braun, "A Direct Adaptive Method for Faster Backpropagation
      Learning: The RPROP Algorithm", IEEE ICNN 1993; Igel and Hüsken, "Empirical
      Evaluation of the Improved Rprop Learning Algorithms", Neurocomputing 50, 2003.
    """
    return ScaleByRprop(learning_rate, eta_minus, eta_plus, min_step_size, max_step_size)


def rprop(
    learning_rate: float,
    eta_minus: float = 0.5,
    eta_plus: float = 1.2,
    min_step_size: float = 1e-6,
    max_step_size: float = 50.0,
) -> Chain:
    r"""The Rprop optimizer: per-parameter step sizes that follow the gradient's sign.

    .. math:: \theta_t = \theta_{t-1} - u_t

    with :math:`u_t` of `scale_by_rprop` (a step :math:`\Delta_t` along the gradient's
    sign, grown by ``eta_plus`` while the sign holds, shrunk by ``eta_minus`` and skipped
    once when it flips). Meant for full-batch gradients: noise flips signs.

    Args:
      learning_rate: the initial step size :math:`\Delta_0 \ge 0` (read by ``init`` only).
      eta_minus: :math:`\eta^- \in [0, 1]`, the factor after a sign change.
      eta_plus: :math:`\eta^+ \ge 1`, the factor while the sign holds.
      min_step_size: the smallest step size, >= 0.
      max_step_size: the largest step size, > 0 and at least ``min_step_size``.

    Returns:
      ``chain(scale_by_rprop(...), scale(-1.0))``.

    Raises:
      ValueError: an argument is out of range, or ``min_step_size > max_step_size``.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.rprop(0.1)
      >>> state = tx.init(params)
      >>> for _ in range(50):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 1e-3))
      True

    References:
      Riedmiller and Braun, "A Direct Adaptive Method for Faster Backpropagation
      Learning: The RPROP Algorithm", IEEE ICNN 1993.
    """
    with hp.caller("rprop"):
        return chain(
            scale_by_rprop(learning_rate, eta_minus, eta_plus, min_step_size, max_step_size),
            scale(-1.0),
        )
