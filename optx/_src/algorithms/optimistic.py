"""Optimistic gradient methods for min-max problems.

`scale_by_optimistic_gradient`, `optimistic_gradient_descent`, `optimistic_adam_v2` and
`optimistic_adam`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.algorithms.adam import scale_by_adam
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.combine import Chain, chain
from optx._src.moments import zeros_like
from optx._src.scaling import scale_by_learning_rate


class ScaleByOptimisticGradientState(NamedTuple):
    """State of `scale_by_optimistic_gradient`: first-step flag, previous update, hyperparameters.

    ``previous_gradient`` is the update received at the previous step (optax's name).
    """

    is_initial_step: jax.Array
    previous_gradient: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByOptimisticGradient(Transform):
    """See `scale_by_optimistic_gradient`."""

    name = "scale_by_optimistic_gradient"
    elementwise = True
    alpha: ScalarOrSchedule = hp.field(1.0)
    beta: ScalarOrSchedule = hp.field(1.0)

    def init(self, params: Params) -> ScaleByOptimisticGradientState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        return ScaleByOptimisticGradientState(
            jnp.array(True), zeros_like(params, None), self.init_hyperparams()
        )

    def update(
        self,
        updates: Updates,
        state: ScaleByOptimisticGradientState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByOptimisticGradientState]:
        del params, extra
        api = f"{self.name}.update"
        checks.same_tree(api, updates, state.previous_gradient, "updates", "the state")
        alpha, beta = state.hyperparams["alpha"], state.hyperparams["beta"]
        first = state.is_initial_step

        def leaf(g: jax.Array, prev: jax.Array) -> jax.Array:
            # No previous update at the first step: it stands in for itself (u = alpha g).
            prev = jnp.where(first, g, prev)
            return ((alpha + beta) * g - beta * prev).astype(g.dtype)

        out = jax.tree.map(leaf, updates, state.previous_gradient)
        previous = jax.tree.map(lambda g, p: g.astype(p.dtype), updates, state.previous_gradient)
        return out, ScaleByOptimisticGradientState(jnp.array(False), previous, state.hyperparams)


def scale_by_optimistic_gradient(
    alpha: float = 1.0, beta: float = 1.0
) -> ScaleByOptimisticGradient:
    r"""Generalised optimistic gradient: extrapolates from the previous update.

    .. math:: u_t = (\alpha + \beta)\,g_t - \beta\,g_{t-1}, \qquad g_0 := g_1

    with :math:`\alpha` = ``alpha`` and :math:`\beta` = ``beta`` (negative momentum). At
    the first step there is no previous update and :math:`u_1 = \alpha g_1`.

    Args:
      alpha: the weight of the current update (a finite number).
      beta: the weight of the change since the previous update (a finite number).

    Returns:
      The transform. ``alpha`` and ``beta`` are dynamic hyperparameters.

    Raises:
      TypeError, ValueError: ``alpha`` or ``beta`` is not a finite real number.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_optimistic_gradient()
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> _, state = tx.update({"w": jnp.array([1.0, 2.0])}, state)
      >>> tx.update({"w": jnp.array([3.0, 2.0])}, state)[0]
      {'w': Array([5., 2.], dtype=float32)}

    References:
      Mokhtari, Ozdaglar and Pattathil, "A Unified Analysis of Extra-gradient and
      Optimistic Gradient Methods for Saddle Point Problems: Proximal Point Approach",
      AISTATS 2020.
    """
    return ScaleByOptimisticGradient(alpha, beta)


def optimistic_gradient_descent(
    learning_rate: ScalarOrSchedule, alpha: float = 1.0, beta: float = 1.0
) -> Chain:
    r"""Optimistic gradient descent, which converges in min-max games where GD cycles.

    .. math:: \theta_{t} = \theta_{t-1} - \eta_t\,\bigl((\alpha + \beta)\,g_t -
       \beta\,g_{t-1}\bigr)

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      alpha: the weight of the current gradient (see `scale_by_optimistic_gradient`).
      beta: the weight of the gradient's change (negative momentum).

    Returns:
      ``chain(scale_by_optimistic_gradient(alpha, beta),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      TypeError, ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = (jnp.array(1.0), jnp.array(2.0))  # min_x max_y of x * y
      >>> tx = optx.optimistic_gradient_descent(0.3)
      >>> state = tx.init(params)
      >>> for _ in range(200):
      ...     gx, gy = jax.grad(lambda p: p[0] * p[1])(params)
      ...     updates, state = tx.update((gx, -gy), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.hypot(*params) < 1e-3)
      True

    References:
      Mokhtari, Ozdaglar and Pattathil, "A Unified Analysis of Extra-gradient and
      Optimistic Gradient Methods for Saddle Point Problems: Proximal Point Approach",
      AISTATS 2020.
    """
    with hp.caller("optimistic_gradient_descent"):
        return chain(
            scale_by_optimistic_gradient(alpha, beta), scale_by_learning_rate(learning_rate)
        )


def optimistic_adam_v2(
    learning_rate: ScalarOrSchedule,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    nesterov: bool = True,
) -> Chain:
    r"""Optimistic Adam: optimistic gradient steps on Adam's rescaled updates.

    .. math::
       r_t = \hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon), \qquad
       \theta_t = \theta_{t-1} - \eta_t\,\bigl((\alpha + \beta)\,r_t - \beta\,r_{t-1}\bigr)

    with :math:`\hat m_t, \hat v_t` Adam's bias-corrected moments (see `scale_by_adam`;
    NAdam's momentum by default) and :math:`r_0 := r_1`.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      alpha: the weight of the current Adam update.
      beta: the weight of its change since the previous step.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nesterov: use Nesterov momentum (NAdam), as optax does by default here.

    Returns:
      ``chain(scale_by_adam(...), scale_by_optimistic_gradient(alpha, beta),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      TypeError, ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = (jnp.array(1.0), jnp.array(2.0))  # min_x max_y of x * y
      >>> tx = optx.optimistic_adam_v2(1.0, alpha=1e-2, beta=1.0)
      >>> state = tx.init(params)
      >>> for _ in range(1025):
      ...     gx, gy = jax.grad(lambda p: p[0] * p[1])(params)
      ...     updates, state = tx.update((gx, -gy), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.hypot(*params) < 1e-2)
      True

    References:
      Daskalakis, Ilyas, Syrgkanis and Zeng, "Training GANs with Optimism", ICLR 2018.
    """
    with hp.caller("optimistic_adam_v2"):
        return chain(
            scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
            scale_by_optimistic_gradient(alpha, beta),
            scale_by_learning_rate(learning_rate),
        )


def optimistic_adam(
    learning_rate: float,
    optimism: float | None = None,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = True,
) -> Chain:
    r"""Optimistic Adam with optax's first interface (prefer `optimistic_adam_v2`).

    .. math:: \theta_t = \theta_{t-1} - \bigl((\eta + o)\,r_t - o\,r_{t-1}\bigr)

    with :math:`r_t` Adam's update (see `optimistic_adam_v2`), :math:`\eta` =
    ``learning_rate`` and :math:`o` = ``optimism``. This is
    ``optimistic_adam_v2(1.0, alpha=learning_rate, beta=optimism)``: the learning rate is
    the ``alpha`` of the optimistic step, and the state holds it under that name.

    Args:
      learning_rate: :math:`\eta`, a non-negative number (not a schedule).
      optimism: :math:`o`; ``None`` uses ``learning_rate``, as in the paper.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nesterov: use Nesterov momentum (NAdam).

    Returns:
      ``chain(scale_by_adam(...), scale_by_optimistic_gradient(learning_rate, optimism),
      scale_by_learning_rate(1.0))``.

    Raises:
      TypeError: ``learning_rate`` is a schedule.
      ValueError: an argument is out of range.

    Example:
      >>> import optx
      >>> tx = optx.optimistic_adam(1e-2, 1.0)
      >>> tx == optx.optimistic_adam_v2(1.0, alpha=1e-2, beta=1.0)
      True
      >>> tx.transforms[1]
      scale_by_optimistic_gradient(alpha=0.01, beta=1.0)

    References:
      Daskalakis, Ilyas, Syrgkanis and Zeng, "Training GANs with Optimism", ICLR 2018.
    """
    # optax deprecates this interface; optx warns the same way.
    checks.deprecated("`optimistic_adam` is deprecated (as in optax): use `optimistic_adam_v2`.")
    with hp.caller("optimistic_adam"):
        if callable(learning_rate):
            raise TypeError(
                f"`optimistic_adam` needs learning_rate to be a number; use "
                f"`optimistic_adam_v2` for a schedule. Received: learning_rate={learning_rate!r}."
            )
        learning_rate = hp.validate("optimistic_adam", "learning_rate", learning_rate, hp.NONNEG)
        if optimism is None:
            optimism = learning_rate
        optimism = hp.validate("optimistic_adam", "optimism", optimism)
        return chain(
            scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
            scale_by_optimistic_gradient(alpha=learning_rate, beta=optimism),
            scale_by_learning_rate(1.0),
        )
