"""Layer-wise distance over gradients: `scale_by_distance_over_gradients`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks, reductions
from optx._src import hyperparams as hp
from optx._src.base import Params, ScalarOrSchedule, Transform, Updates, transform
from optx._src.moments import unzip
from optx._src.options import dtype_options


class ScaleByDistanceOverGradientsState(NamedTuple):
    r"""State of `scale_by_distance_over_gradients`.

    Attributes:
      max_dist: per parameter array, the largest distance from its initial value so far
        (float32, or float64 for a float64 parameter).
      grad_sum_of_squares: per parameter array, the sum of its squared gradient norms.
      init_params: the parameters at ``init``, in ``param_dtype``.
      hyperparams: the dynamic hyperparameters.
    """

    max_dist: Params
    grad_sum_of_squares: Params
    init_params: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByDistanceOverGradients(Transform):
    """See `scale_by_distance_over_gradients`."""

    name = "scale_by_distance_over_gradients"
    reps_rel: ScalarOrSchedule = hp.field(1e-6, hp.POSITIVE)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    param_dtype: Any = jnp.float32
    global_scale: ScalarOrSchedule = hp.field(1.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "param_dtype")

    def unused_hyperparams(self) -> frozenset[str]:
        return frozenset({"reps_rel"})  # read at `init` only

    def init(self, params: Params) -> ScaleByDistanceOverGradientsState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        # The copy of a complex parameter needs a complex dtype (a real one would drop its
        # imaginary part), as the other slot dtype options.
        checks.complex_slot(f"{self.name}.init", "param_dtype", self.param_dtype, params)
        reps = self.initial("reps_rel")

        def start(p: jax.Array) -> jax.Array:
            dtype = reductions.scalar_dtype(p)
            norm = jnp.sqrt(reductions.sq_norm(p, dtype))
            return jnp.asarray(reps, dtype) * (1 + norm)

        return ScaleByDistanceOverGradientsState(
            jax.tree.map(start, params),
            jax.tree.map(lambda p: jnp.zeros([], reductions.scalar_dtype(p)), params),
            jax.tree.map(lambda p: jnp.array(p, self.param_dtype or jnp.result_type(p)), params),
            self.init_hyperparams(),
        )

    def update(
        self,
        updates: Updates,
        state: ScaleByDistanceOverGradientsState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByDistanceOverGradientsState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, params, "updates", "params")
        checks.same_tree(api, params, state.init_params, "params", "the state")
        h = state.hyperparams

        def leaf(g: jax.Array, p: jax.Array, p0: jax.Array, d: Any, sos: Any) -> tuple[Any, ...]:
            d = jnp.maximum(d, jnp.sqrt(reductions.sq_distance(p, p0, d.dtype)))
            sos = sos + reductions.sq_norm(g, sos.dtype)
            eta = h["global_scale"] * (d / jnp.sqrt(sos + h["eps"]))
            return (g * eta).astype(g.dtype), d, sos

        flat = jax.tree.map(
            leaf, updates, params, state.init_params, state.max_dist, state.grad_sum_of_squares
        )
        out, max_dist, sos = unzip(flat, updates, 3)
        return out, ScaleByDistanceOverGradientsState(max_dist, sos, state.init_params, h)


def scale_by_distance_over_gradients(
    reps_rel: float = 1e-6,
    eps: float = 1e-8,
    param_dtype: DTypeLike = jnp.float32,
    global_scale: float = 1.0,
) -> ScaleByDistanceOverGradients:
    r"""Layer-wise DoG: each parameter array's step size from its own distance and gradients.

    For each parameter array :math:`x` with gradient :math:`g`:

    .. math::
       \bar r_t = \max\bigl(\bar r_{t-1},\ \lVert x_{t-1} - x_0\rVert\bigr), \quad
       G_t = G_{t-1} + \lVert g_t\rVert^2, \quad
       u_t = c\,\frac{\bar r_t}{\sqrt{G_t + \epsilon}}\,g_t

    with :math:`\bar r_0 = \rho\,(1 + \lVert x_0\rVert)`, :math:`\rho` = ``reps_rel``
    (1e-6, or 1e-4 for models with batch normalisation), :math:`\epsilon` = ``eps`` and
    :math:`c` = ``global_scale`` (use -1 for descent, or follow with a negative scale).
    The state keeps a copy of the initial parameters in ``param_dtype`` and two scalars
    per array. Complex parameters train with a complex ``param_dtype`` (``jnp.complex64``,
    or ``None``; the default float32 copy would drop their imaginary parts and is refused):
    the distances and norms are of moduli, so :math:`\bar r_t` and :math:`G_t` stay real.
    Unlike optax's, which keeps each sum of squares with shape ``(1,)``, the scalars here
    have shape ``()``, so a scalar parameter's update keeps its shape ``()``.

    Args:
      reps_rel: :math:`\rho > 0` (read at ``init``).
      eps: :math:`\epsilon \ge 0`, added to :math:`G_t`.
      param_dtype: dtype of the copy of the initial parameters (``None``: each
        parameter's own); complex for complex parameters.
      global_scale: :math:`c`, any finite number.

    Returns:
      The transform; ``eps`` and ``global_scale`` are dynamic hyperparameters. Its
      ``update`` needs the parameters.

    Raises:
      ValueError: an argument is out of range.
      TypeError: ``param_dtype`` is not a floating dtype; at ``init``, it is real and a
        parameter is complex.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> params = {"w": jnp.array([3.0, 4.0])}
      >>> tx = optx.scale_by_distance_over_gradients(reps_rel=0.1, eps=0.0)
      >>> updates, _ = tx.update({"w": jnp.array([0.0, 2.0])}, tx.init(params), params)
      >>> updates  # 0.1 * (1 + 5) / 2 * g
      {'w': Array([0. , 0.6], dtype=float32)}

    References:
      Ivgi, Hinder and Carmon, "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step
      Size Schedule", ICML 2023.
    """
    return ScaleByDistanceOverGradients(reps_rel, eps, param_dtype, global_scale)
