"""Adagrad: `scale_by_rss` and `adagrad`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks, sparse
from optx._src import hyperparams as hp
from optx._src.algorithms.rmsprop import normalise
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.combine import Chain, chain
from optx._src.moments import abs_sq, real_full_like, unzip
from optx._src.options import dtype_options
from optx._src.scaling import scale_by_learning_rate


class ScaleByRssState(NamedTuple):
    """State of `scale_by_rss`: the sum of squared gradients and the hyperparameters."""

    sum_of_squares: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByRss(Transform):
    """See `scale_by_rss`."""

    name = "scale_by_rss"
    elementwise = True
    row_sparse = True
    initial_accumulator_value: ScalarOrSchedule = hp.field(0.1, hp.NONNEG)
    eps: ScalarOrSchedule = hp.field(1e-7, hp.NONNEG)
    eps_in_sqrt: bool = True
    accumulator_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "accumulator_dtype")

    def init(self, params: Params) -> ScaleByRssState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        return ScaleByRssState(
            real_full_like(
                params, self.initial("initial_accumulator_value"), self.accumulator_dtype
            ),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: ScaleByRssState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByRssState]:
        del params, extra
        checks.same_tree(
            f"{self.name}.update",
            updates,
            state.sum_of_squares,
            "updates",
            "the state",
            real_slots=True,
        )
        eps = state.hyperparams["eps"]

        def rule(g: jax.Array, new_a: jax.Array) -> jax.Array:
            # An accumulator still at zero (zero start, zero gradients) gives a zero update,
            # not 0/0.
            return jnp.where(new_a > 0, normalise(g, new_a, eps, self.eps_in_sqrt), 0.0)

        def leaf(g: Any, a: jax.Array) -> tuple[Any, jax.Array]:
            if isinstance(g, sparse.RowSparse):
                # Rows without gradient keep their sum and get a zero update, as in the
                # dense update: only the given rows are read and written.
                g = sparse.coalesce(g)
                a, new_rows = sparse.put(a, g, abs_sq(g.values) + sparse.gather(a, g))
                u = rule(g.values, new_rows).astype(g.values.dtype)
                return sparse.with_values(g, g.indices, u), a
            new_a = abs_sq(g) + a
            return rule(g, new_a).astype(g.dtype), new_a.astype(a.dtype)

        pairs = jax.tree.map(leaf, updates, state.sum_of_squares, is_leaf=sparse.is_row_sparse)
        u, sums = unzip(pairs, updates, 2, is_leaf=sparse.is_row_sparse)
        return u, ScaleByRssState(sums, state.hyperparams)


def scale_by_rss(
    initial_accumulator_value: float = 0.1,
    eps: float = 1e-7,
    *,
    eps_in_sqrt: bool = True,
    accumulator_dtype: DTypeLike | None = None,
) -> ScaleByRss:
    r"""Rescales updates by the root of the sum of all squared gradients so far (Adagrad).

    .. math::
       A_t = A_{t-1} + g_t^2, \qquad u_t = g_t / \sqrt{A_t + \epsilon}
       \quad\bigl(\text{or } g_t / (\sqrt{A_t} + \epsilon)\bigr)

    with :math:`A_0` = ``initial_accumulator_value`` and :math:`\epsilon` = ``eps``;
    :math:`u_t = 0` where :math:`A_t = 0`. The arithmetic runs in at least float32.

    Args:
      initial_accumulator_value: :math:`A_0 \ge 0`; read by ``init`` only: setting it in a
        state later changes nothing.
      eps: :math:`\epsilon \ge 0`.
      eps_in_sqrt: add ``eps`` inside the square root (optax and Keras 3) rather than to it
        (TF OptimizerV2's ``Adagrad``, the ``ApplyAdagradV2`` kernel).
      accumulator_dtype: dtype of :math:`A`; ``None`` uses each parameter's dtype.

    Returns:
      The transform. ``initial_accumulator_value`` and ``eps`` are dynamic hyperparameters.

    Raises:
      ValueError: ``initial_accumulator_value`` or ``eps`` is negative.
      TypeError: ``accumulator_dtype`` is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_rss(initial_accumulator_value=0.0, eps=0.0)
      >>> updates, _ = tx.update({"w": jnp.array([2.0, 0.0])}, tx.init({"w": jnp.zeros(2)}))
      >>> updates
      {'w': Array([1., 0.], dtype=float32)}

    References:
      Duchi, Hazan and Singer, "Adaptive Subgradient Methods for Online Learning and
      Stochastic Optimization", JMLR 2011.
    """
    return ScaleByRss(initial_accumulator_value, eps, eps_in_sqrt, accumulator_dtype)


def adagrad(
    learning_rate: ScalarOrSchedule,
    initial_accumulator_value: float = 0.1,
    eps: float = 1e-7,
    *,
    eps_in_sqrt: bool = True,
    accumulator_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The Adagrad optimizer: `scale_by_rss` then `scale_by_learning_rate`.

    .. math::
       A_t = A_{t-1} + g_t^2, \qquad
       \theta_t = \theta_{t-1} - \eta_t\, g_t / \sqrt{A_t + \epsilon}

    (:math:`\sqrt{A_t} + \epsilon` in the denominator with ``eps_in_sqrt=False``), with
    :math:`\eta` = ``learning_rate``, :math:`A_0` = ``initial_accumulator_value`` and
    :math:`\epsilon` = ``eps``. Keras 3's ``Adagrad`` has the same formula and defaults
    (learning rate aside); TF OptimizerV2's adds epsilon outside the root
    (``eps_in_sqrt=False``).

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      initial_accumulator_value: :math:`A_0 \ge 0`.
      eps: :math:`\epsilon \ge 0`.
      eps_in_sqrt: add ``eps`` inside the square root rather than to it.
      accumulator_dtype: dtype of :math:`A`; ``None`` uses each parameter's dtype.

    Returns:
      ``chain(scale_by_rss(...), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range.
      TypeError: ``accumulator_dtype`` is not a floating dtype.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.adagrad(0.5)
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 1e-3))
      True

    References:
      Duchi, Hazan and Singer, "Adaptive Subgradient Methods for Online Learning and
      Stochastic Optimization", JMLR 2011.
    """
    with hp.caller("adagrad"):
        return chain(
            scale_by_rss(
                initial_accumulator_value,
                eps,
                eps_in_sqrt=eps_in_sqrt,
                accumulator_dtype=accumulator_dtype,
            ),
            scale_by_learning_rate(learning_rate),
        )
