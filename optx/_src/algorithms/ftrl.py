"""FTRL-Proximal, as TensorFlow and Keras compute it: `scale_by_ftrl`, `ftrl`."""

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
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import Chain, chain
from optx._src.moments import unzip
from optx._src.options import dtype_options

_NONPOSITIVE = hp.Range("finite and <= 0", lambda v: v <= 0)


class ScaleByFtrlState(NamedTuple):
    """State of `scale_by_ftrl`: step count, accumulator ``n``, linear term ``z``, hyperparameters.

    The slots are named as Keras's (``accumulator``, ``linear``).
    """

    count: jax.Array
    accumulator: Params
    linear: Params
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByFtrl(Transform):
    """See `scale_by_ftrl`."""

    name = "scale_by_ftrl"
    elementwise = True
    learning_rate: ScalarOrSchedule = hp.field(1e-3, hp.POSITIVE)
    learning_rate_power: ScalarOrSchedule = hp.field(-0.5, _NONPOSITIVE)
    initial_accumulator_value: ScalarOrSchedule = hp.field(0.1, hp.NONNEG)
    l1_regularization_strength: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    l2_regularization_strength: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    l2_shrinkage_regularization_strength: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    beta: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    accumulator_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "accumulator_dtype")

    def init(self, params: Params) -> ScaleByFtrlState:
        checks.float_params(f"{self.name}.init", params)

        def slot(p: Any, fill: float) -> jax.Array:
            return placement.full_like(p, fill, self.accumulator_dtype)

        return ScaleByFtrlState(
            zero_count(),
            jax.tree.map(lambda p: slot(p, self.initial("initial_accumulator_value")), params),
            jax.tree.map(lambda p: slot(p, 0.0), params),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: ScaleByFtrlState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, ScaleByFtrlState]:
        del extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.accumulator, "updates", "the state")
        checks.same_tree(api, params, state.accumulator, "params", "the state")
        h = state.hyperparams
        lr = h["learning_rate"]
        power = -h["learning_rate_power"]
        l1 = h["l1_regularization_strength"]
        l2 = h["l2_regularization_strength"] + h["beta"] / (2.0 * lr)
        shrinkage = 2 * h["l2_shrinkage_regularization_strength"]
        # The accumulator starts from the hyperparameter, so setting it between `init` and
        # the first update takes effect (e.g. a `vmap` sweep over it).
        first = state.count == 0
        initial = h["initial_accumulator_value"]

        def leaf(g: jax.Array, w: jax.Array, n: jax.Array, z: jax.Array) -> tuple[jax.Array, ...]:
            dtype = jnp.promote_types(jnp.promote_types(g.dtype, w.dtype), jnp.float32)
            g32, w32 = g.astype(dtype), w.astype(dtype)
            n32 = jnp.where(first, initial.astype(n.dtype), n).astype(dtype)
            # TF's order of operations (ApplyFtrlV2; Keras 3's Ftrl.update_step).
            shrunk = g32 + shrinkage * w32
            new_n = n32 + jnp.square(g32)
            new_n_pow = jnp.power(new_n, power)
            new_z = z.astype(dtype) + (shrunk - (new_n_pow - jnp.power(n32, power)) / lr * w32)
            quadratic = new_n_pow / lr + 2 * l2
            new_w = (jnp.clip(new_z, -l1, l1) - new_z) / quadratic
            # Exactly -w where the L1 term zeroes the weight: the parameter becomes 0.
            return (new_w - w32).astype(g.dtype), new_n.astype(n.dtype), new_z.astype(z.dtype)

        triples = jax.tree.map(leaf, updates, params, state.accumulator, state.linear)
        u, n, z = unzip(triples, updates, 3)
        return u, ScaleByFtrlState(safe_increment(state.count), n, z, h)


def scale_by_ftrl(
    learning_rate: ScalarOrSchedule,
    learning_rate_power: float = -0.5,
    initial_accumulator_value: float = 0.1,
    l1_regularization_strength: float = 0.0,
    l2_regularization_strength: float = 0.0,
    l2_shrinkage_regularization_strength: float = 0.0,
    beta: float = 0.0,
    *,
    accumulator_dtype: DTypeLike | None = None,
) -> ScaleByFtrl:
    r"""The whole FTRL-Proximal step, as TensorFlow's ``ApplyFtrlV2`` and Keras compute it.

    FTRL computes the new weight from its state rather than scaling the gradient, and the
    learning rate enters its formula non-linearly. So this building block takes the
    learning rate and returns the full update :math:`u = w_{t} - w_{t-1}` (already a
    descent step): do not follow it with `scale_by_learning_rate`. Transforms before it
    (clipping, ...) change the gradient :math:`g`; it reads the parameters. With
    :math:`p` = ``-learning_rate_power``:

    .. math::
       \tilde g &= g + 2 \lambda_s w, \qquad n' = n + g^2, \\
       z &\leftarrow z + \tilde g - \frac{n'^{\,p} - n^{p}}{\eta}\,w, \\
       w &\leftarrow \frac{\operatorname{clip}(z, -\lambda_1, \lambda_1) - z}
       {n'^{\,p} / \eta + 2 \lambda_2'}, \qquad
       \lambda_2' = \lambda_2 + \frac{\beta}{2 \eta}, \qquad n \leftarrow n'

    so :math:`w = 0` wherever :math:`|z| \le \lambda_1`; :math:`\eta` = ``learning_rate``,
    :math:`\lambda_1, \lambda_2, \lambda_s` the L1, L2 and L2-shrinkage strengths, and
    :math:`n_0` = ``initial_accumulator_value`` (taken from the state's hyperparameter at
    the first update). The shrinkage enters the linear term only, as in TensorFlow.
    Powers use ``jnp.power`` (as Keras 3 does; TF's kernel takes ``sqrt`` for
    :math:`p = 1/2`, which can differ in the last bit). Arithmetic runs in at least
    float32; the update is the new weight minus the old one, in the updates' dtype.

    Args:
      learning_rate: :math:`\eta > 0`, or a schedule evaluated at the step count (0 at the
        first update).
      learning_rate_power: :math:`-p \le 0`; ``-0.5`` is Adagrad-like, ``0`` a constant rate.
      initial_accumulator_value: :math:`n_0 \ge 0`.
      l1_regularization_strength: :math:`\lambda_1 \ge 0` (sparsity).
      l2_regularization_strength: :math:`\lambda_2 \ge 0` (stabilisation in the proximal
        term).
      l2_shrinkage_regularization_strength: :math:`\lambda_s \ge 0`, an L2 penalty on the
        weights added to the gradient.
      beta: :math:`\beta \ge 0`, the paper's :math:`\beta` (added as :math:`\beta/2\eta`
        to :math:`\lambda_2`).
      accumulator_dtype: dtype of ``n`` and ``z``; ``None`` uses each parameter's dtype.

    Returns:
      The transform; every numeric argument is a dynamic hyperparameter.

    Raises:
      ValueError: an argument is out of range.
      TypeError: ``accumulator_dtype`` is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_ftrl(0.1, l1_regularization_strength=0.5)
      >>> params = {"w": jnp.array([1.0, 1.0])}
      >>> updates, _ = tx.update({"w": jnp.array([0.1, 2.0])}, tx.init(params), params)
      >>> optx.apply_updates(params, updates)  # |z| <= l1 gives an exact zero
      {'w': Array([0.        , 0.72036004], dtype=float32)}

    References:
      McMahan, Holt, Sculley, Young, Ebner, Grady, Nie, Phillips, Davydov, Golovin,
      Chikkerur, Liu, Wattenberg, Hrafnkelsson, Boulos and Kubica, "Ad Click Prediction:
      a View from the Trenches", KDD 2013.
    """
    return ScaleByFtrl(
        learning_rate,
        learning_rate_power,
        initial_accumulator_value,
        l1_regularization_strength,
        l2_regularization_strength,
        l2_shrinkage_regularization_strength,
        beta,
        accumulator_dtype,
    )


def ftrl(
    learning_rate: ScalarOrSchedule,
    learning_rate_power: float = -0.5,
    initial_accumulator_value: float = 0.1,
    l1_regularization_strength: float = 0.0,
    l2_regularization_strength: float = 0.0,
    l2_shrinkage_regularization_strength: float = 0.0,
    beta: float = 0.0,
    *,
    accumulator_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The FTRL-Proximal optimizer (optax has none; TensorFlow's and Keras's numerics).

    Follow The Regularized Leader, for (sparse) linear models with L1 and L2
    regularisation. See `scale_by_ftrl` for the update; the arguments are Keras's
    ``keras.optimizers.Ftrl`` ones with the same defaults.

    Args:
      learning_rate: :math:`\eta > 0`, or a schedule.
      learning_rate_power: :math:`\le 0`.
      initial_accumulator_value: :math:`\ge 0`.
      l1_regularization_strength: :math:`\ge 0`.
      l2_regularization_strength: :math:`\ge 0`.
      l2_shrinkage_regularization_strength: :math:`\ge 0`.
      beta: :math:`\ge 0`.
      accumulator_dtype: dtype of the accumulator and linear slots; ``None`` uses each
        parameter's dtype.

    Returns:
      ``chain(scale_by_ftrl(...))``: the learning rate lives in `scale_by_ftrl`, so there
      is no `scale_by_learning_rate`; its ``update`` needs the parameters.

    Raises:
      ValueError: an argument is out of range.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = optx.ftrl(0.5, l1_regularization_strength=0.01)
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     grads = jax.grad(lambda p: jnp.sum((p - jnp.array([0.5, 0.0]))**2))(params)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(jnp.allclose(params, jnp.array([0.5, 0.0]), atol=1e-6))
      True

    References:
      McMahan et al., "Ad Click Prediction: a View from the Trenches", KDD 2013.
    """
    with hp.caller("ftrl"):
        return chain(
            scale_by_ftrl(
                learning_rate,
                learning_rate_power,
                initial_accumulator_value,
                l1_regularization_strength,
                l2_regularization_strength,
                l2_shrinkage_regularization_strength,
                beta,
                accumulator_dtype=accumulator_dtype,
            )
        )
