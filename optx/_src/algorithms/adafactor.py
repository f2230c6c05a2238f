"""Factored second moments: `scale_by_factored_rms` and `adafactor`.

`scale_by_param_block_rms`, which `adafactor` chains, is in `norm_scaling.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

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
from optx._src.clipping import clip_by_block_rms
from optx._src.combine import Chain, MaskSpec, chain
from optx._src.moments import abs_sq, real_dtype, unzip
from optx._src.momentum import ema
from optx._src.norm_scaling import scale_by_param_block_rms
from optx._src.options import dtype_options
from optx._src.scaling import (
    ScaleByLearningRate,
    ScaleByLearningRateState,
    scale,
    scale_by_learning_rate,
    scale_tree,
)
from optx._src.tree import path_name
from optx._src.weight_decay import add_decayed_weights

_FACTOR_AXES = ("largest", "last")


def decay_rate_pow(step: ArrayLike, exponent: ArrayLike = 0.8) -> jax.Array:
    """Adafactor's second-moment decay: ``1 - (step + 1) ** -exponent`` (0 at step 0)."""
    t = jnp.asarray(step, jnp.float32) + 1.0
    return 1.0 - t ** (-jnp.asarray(exponent, jnp.float32))


def _factored_dims(
    shape: tuple[int, ...], factored: bool, min_dim_size_to_factor: int, factor_axes: str
) -> tuple[int, int] | None:
    """The axes ``(d1, d0)`` to keep statistics along, or ``None`` for a full second moment.

    ``d0`` is the axis averaged away in the row statistic, ``d1`` in the column one.
    """
    if not factored or len(shape) < 2:
        return None
    if factor_axes == "last":
        d1, d0 = len(shape) - 2, len(shape) - 1
    else:
        order = np.argsort(shape)
        d1, d0 = int(order[-2]), int(order[-1])
    if min(shape[d0], shape[d1]) < min_dim_size_to_factor:
        return None
    return d1, d0


def _slot_shapes(
    dims: tuple[int, int] | None, shape: tuple[int, ...]
) -> tuple[tuple[int, ...], ...]:
    """The shapes of a leaf's ``v_row``, ``v_col`` and ``v`` (unused ones are ``(1,)``)."""
    if dims is None:
        return (1,), (1,), tuple(shape)
    d1, d0 = dims
    return shape[:d0] + shape[d0 + 1 :], shape[:d1] + shape[d1 + 1 :], (1,)


def _with_paths(updates: Updates, *slots: Params) -> list[tuple[Any, ...]]:
    """``(path name, update, *slot leaves)`` for each leaf of ``updates``."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(updates)
    columns = [treedef.flatten_up_to(s) for s in slots]
    return [(path_name(p), g, *c) for (p, g), *c in zip(flat, *columns, strict=True)]


class FactoredState(NamedTuple):
    """State of `scale_by_factored_rms`.

    ``v_row`` and ``v_col`` hold the row and column statistics of factored leaves, ``v`` the
    full second moment of the others; an entry a leaf does not use is a zero of shape (1,).
    """

    count: jax.Array
    v_row: Params
    v_col: Params
    v: Params
    hyperparams: dict[str, jax.Array]


def _scalar(leaf: Any) -> Any:
    # Stands for a leaf when only the tree structure is compared (non-arrays stay, so that
    # `checks.same_tree` names them).
    return np.zeros((), leaf.dtype) if hasattr(leaf, "shape") else leaf


@transform
class ScaleByFactoredRMS(Transform):
    """See `scale_by_factored_rms`."""

    name = "scale_by_factored_rms"
    factored: bool = True
    decay_rate: ScalarOrSchedule = hp.field(0.8, hp.NONNEG)
    step_offset: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    min_dim_size_to_factor: int = 128
    epsilon: ScalarOrSchedule = hp.field(1e-30, hp.NONNEG)
    decay_rate_fn: Callable[[jax.Array, jax.Array], jax.Array] = decay_rate_pow
    factor_axes: str = "largest"
    nu_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        api = hp.current(self.name)
        size = checks.nonneg_int(self.name, "min_dim_size_to_factor", self.min_dim_size_to_factor)
        object.__setattr__(self, "min_dim_size_to_factor", size)
        if self.factor_axes not in _FACTOR_AXES:
            raise ValueError(
                f"`{api}` needs factor_axes to be 'largest' or 'last'. "
                f"Received: factor_axes={self.factor_axes!r}."
            )
        if not callable(self.decay_rate_fn):
            raise TypeError(
                f"`{api}` needs decay_rate_fn to be a callable (step, decay_rate) -> decay. "
                f"Received: decay_rate_fn={self.decay_rate_fn!r}."
            )
        dtype_options(self, "nu_dtype")

    def _dims(self, shape: tuple[int, ...]) -> tuple[int, int] | None:
        return _factored_dims(
            shape, bool(self.factored), self.min_dim_size_to_factor, self.factor_axes
        )

    def init(self, params: Params) -> FactoredState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)

        def leaf(p: jax.Array) -> tuple[jax.Array, ...]:
            # Statistics of |g|**2: real, also for a complex parameter (as optax keeps them).
            shape, dtype = jnp.shape(p), real_dtype(self.nu_dtype or jnp.result_type(p))
            dims = self._dims(shape)
            if dims is None:
                return (
                    jnp.zeros((1,), dtype),
                    jnp.zeros((1,), dtype),
                    placement.zeros_like(p, dtype),
                )
            # v_row drops axis d0 and v_col axis d1; each keeps the others' sharding.
            d1, d0 = dims
            return (
                placement.zeros_without_axes(p, (d0,), dtype),
                placement.zeros_without_axes(p, (d1,), dtype),
                jnp.zeros((1,), dtype),
            )

        row, col, v = unzip(jax.tree.map(leaf, params), params, 3)
        return FactoredState(zero_count(), row, col, v, self.init_hyperparams())

    def update(
        self, updates: Updates, state: FactoredState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, FactoredState]:
        del params, extra
        api = f"{self.name}.update"
        # The statistics are not shaped like the updates: compare structures, then shapes.
        scalars = (jax.tree.map(_scalar, updates), jax.tree.map(_scalar, state.v))
        checks.same_tree(api, *scalars, "updates", "the state", real_slots=True)
        for path, g, row, col, v in _with_paths(updates, state.v_row, state.v_col, state.v):
            if _slot_shapes(self._dims(g.shape), g.shape) != (row.shape, col.shape, v.shape):
                raise ValueError(
                    f"`{api}` needs updates with the shapes of the parameters the state was "
                    f"made for. Received: updates[{path!r}] of shape {g.shape}."
                )
        h = state.hyperparams
        # One decay per step; the schedule sees the step (from 0) less the offset, in float32.
        step = state.count.astype(jnp.float32) - h["step_offset"]
        b = jnp.asarray(self.decay_rate_fn(step, h["decay_rate"]), jnp.float32)
        c = 1.0 - b
        eps = h["epsilon"]

        def leaf(g: jax.Array, row: jax.Array, col: jax.Array, v: jax.Array) -> tuple:
            ct = jnp.promote_types(g.dtype, jnp.float32)
            rt = real_dtype(ct)
            g32 = g.astype(ct)
            g2 = abs_sq(g32) + eps
            dims = self._dims(g.shape)
            if dims is None:
                new_v = (b * v + c * g2).astype(v.dtype)
                u = g32 * new_v.astype(rt) ** -0.5
                return u.astype(g.dtype), row, col, new_v
            d1, d0 = dims
            new_row = (b * row + c * jnp.mean(g2, axis=d0)).astype(row.dtype)
            new_col = (b * col + c * jnp.mean(g2, axis=d1)).astype(col.dtype)
            r, k = new_row.astype(rt), new_col.astype(rt)
            # The row statistic's mean over the other factored axis normalises v = r k / mean(r).
            r_mean = jnp.mean(r, axis=d1 - 1 if d1 > d0 else d1, keepdims=True)
            u = g32 * jnp.expand_dims((r / r_mean) ** -0.5, d0) * jnp.expand_dims(k**-0.5, d1)
            return u.astype(g.dtype), new_row, new_col, v

        out = jax.tree.map(leaf, updates, state.v_row, state.v_col, state.v)
        u, row, col, v = unzip(out, updates, 4)
        return u, FactoredState(safe_increment(state.count), row, col, v, h)


def scale_by_factored_rms(
    factored: bool = True,
    decay_rate: float = 0.8,
    step_offset: float = 0,
    min_dim_size_to_factor: int = 128,
    epsilon: float = 1e-30,
    decay_rate_fn: Callable[[jax.Array, jax.Array], jax.Array] = decay_rate_pow,
    *,
    factor_axes: str = "largest",
    nu_dtype: DTypeLike | None = None,
) -> ScaleByFactoredRMS:
    r"""Rescales updates by a factored estimate of the root mean square of the gradients.

    With :math:`\beta_t` = ``decay_rate_fn(t - step_offset, decay_rate)`` (by default
    :math:`1 - (t + 1 - \text{step\_offset})^{-\text{decay\_rate}}`, zero at the first
    step :math:`t = 0`) and :math:`G = |g|^2 + \epsilon_1`, a leaf of rank >= 2 whose two
    factored axes both have at least ``min_dim_size_to_factor`` entries keeps a row and a
    column statistic (means of :math:`G` over one factored axis each):

    .. math::
       R \leftarrow \beta_t R + (1-\beta_t)\,\mathrm{mean}_{d_0} G, \quad
       C \leftarrow \beta_t C + (1-\beta_t)\,\mathrm{mean}_{d_1} G, \quad
       \hat v = \frac{R \otimes C}{\mathrm{mean}_{d_1} R}, \quad u = g / \sqrt{\hat v}

    Every other leaf keeps the full :math:`v \leftarrow \beta_t v + (1-\beta_t) G` and
    :math:`u = g / \sqrt v`. :math:`\epsilon_1` is ``epsilon``. The factored axes
    :math:`(d_1, d_0)` are the two largest (``factor_axes="largest"``, optax's choice) or
    the last two (``"last"``, Keras's; Keras factors every leaf of rank >= 2, which is
    ``min_dim_size_to_factor=1``). Keras's ``beta_2_decay`` is ``-decay_rate``. The two
    forms of :math:`\hat v` are equal: the means of :math:`R` and :math:`C` agree.

    Args:
      factored: factor the statistics of leaves of rank >= 2 (else keep full ones).
      decay_rate: the exponent of the default decay schedule, >= 0.
      step_offset: subtracted from the step count before the schedule (for fine-tuning
        from a given step), >= 0.
      min_dim_size_to_factor: factor a leaf only if both factored axes have at least this
        many entries (a static int).
      epsilon: :math:`\epsilon_1 \ge 0`, added to the squared gradients.
      decay_rate_fn: ``(step, decay_rate) -> decay``; ``step`` is a float32 scalar.
      factor_axes: ``"largest"`` or ``"last"`` (see above).
      nu_dtype: dtype of the statistics; ``None`` uses each parameter's dtype.

    Returns:
      The transform. ``decay_rate``, ``step_offset`` and ``epsilon`` are dynamic
      hyperparameters.

    Raises:
      ValueError: a number is negative or non-finite, ``min_dim_size_to_factor`` is not an
        int >= 0, or ``factor_axes`` is unknown.
      TypeError: ``decay_rate_fn`` is not callable, or ``nu_dtype`` is not a float dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_factored_rms(min_dim_size_to_factor=2)
      >>> params = {"w": jnp.zeros((2, 3))}
      >>> state = tx.init(params)
      >>> state.v_row["w"].shape, state.v_col["w"].shape
      ((2,), (3,))
      >>> updates, _ = tx.update({"w": jnp.full((2, 3), 2.0)}, state)
      >>> updates["w"]
      Array([[1., 1., 1.],
             [1., 1., 1.]], dtype=float32)

    References:
      Shazeer and Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost",
      ICML 2018.
    """
    return ScaleByFactoredRMS(
        factored,
        decay_rate,
        step_offset,
        min_dim_size_to_factor,
        epsilon,
        decay_rate_fn,
        factor_axes,
        nu_dtype,
    )


@transform
class ScaleByRelativeStep(ScaleByLearningRate):
    """The learning rate capped by the relative step: ``min(learning_rate, 1/sqrt(t))``."""

    name = "scale_by_relative_step"

    def update(
        self,
        updates: Updates,
        state: ScaleByLearningRateState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByLearningRateState]:
        del params, extra
        t = state.count.astype(jnp.float32) + 1.0
        lr = jnp.minimum(self.current(state), 1.0 / jnp.sqrt(t))
        updates = scale_tree(updates, -lr if self.flip_sign else lr)
        return updates, state._replace(count=safe_increment(state.count))


def adafactor(
    learning_rate: ScalarOrSchedule | None = None,
    min_dim_size_to_factor: int = 128,
    decay_rate: float = 0.8,
    decay_offset: float = 0,
    multiply_by_parameter_scale: bool = True,
    clipping_threshold: float | None = 1.0,
    momentum: float | None = None,
    dtype_momentum: DTypeLike = jnp.float32,
    weight_decay_rate: float | None = None,
    eps: float = 1e-30,
    factored: bool = True,
    weight_decay_mask: MaskSpec | None = None,
    *,
    factor_axes: str = "largest",
    relative_step: bool = False,
    min_scale: float = 1e-3,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The Adafactor optimizer: factored second moments, clipped, scaled by the weights.

    .. math::
       \hat u = u / \max(1, \mathrm{rms}(u) / d), \quad
       \theta \leftarrow \theta - \bigl(\rho_t\,\max(\mathrm{rms}(\theta), s)\,\hat u
       + \lambda\,\theta\bigr)

    where :math:`u` is `scale_by_factored_rms`'s update (``factored``, ``decay_rate``,
    ``decay_offset``, ``min_dim_size_to_factor``, ``eps``, ``factor_axes``),
    :math:`d` = ``clipping_threshold``, :math:`s` = ``min_scale`` (the factor
    :math:`\max(\mathrm{rms}(\theta), s)` only with ``multiply_by_parameter_scale``),
    :math:`\lambda` = ``weight_decay_rate`` and :math:`\rho_t` the learning rate
    :math:`\eta_t` (1 when ``None``), or :math:`\min(\eta_t, 1/\sqrt{t})` with
    ``relative_step=True``. With ``momentum`` :math:`\mu`, an EMA
    :math:`m \leftarrow \mu m + (1-\mu)\,x` of the scaled step :math:`x` replaces it.

    Keras's ``Adafactor(learning_rate, beta_2_decay, epsilon_1, epsilon_2,
    clip_threshold)`` is ``adafactor(learning_rate, min_dim_size_to_factor=1,
    decay_rate=-beta_2_decay, eps=epsilon_1, clipping_threshold=clip_threshold,
    factor_axes="last", relative_step=True, min_scale=epsilon_2)``: Keras 3 caps the
    learning rate by :math:`1/\sqrt t` whatever its ``relative_step`` says.

    The state names its hyperparameters after the building blocks: ``decay_rate``,
    ``step_offset`` (``decay_offset``), ``epsilon`` (``eps``), ``threshold``
    (``clipping_threshold``), ``learning_rate``, ``min_scale``, ``decay`` (``momentum``),
    ``weight_decay`` (``weight_decay_rate``) and ``step_size`` (the final -1).

    Args:
      learning_rate: :math:`\eta`, a number >= 0, a schedule, or ``None`` for no scaling.
      min_dim_size_to_factor: factor a leaf only if both factored axes have at least this
        many entries.
      decay_rate: the exponent of the second-moment decay schedule.
      decay_offset: subtracted from the step count in that schedule.
      multiply_by_parameter_scale: scale steps by the parameters' root mean square.
      clipping_threshold: :math:`d > 0`, or ``None`` for no clipping.
      momentum: :math:`\mu \in [0, 1]`, or ``None`` for no momentum.
      dtype_momentum: dtype of the momentum buffer.
      weight_decay_rate: :math:`\lambda \ge 0` (not multiplied by the learning rate), or
        ``None``.
      eps: added to the squared gradients.
      factored: factor the second moments of matrices.
      weight_decay_mask: which parameters to decay (see `add_decayed_weights`).
      factor_axes: ``"largest"`` (optax) or ``"last"`` (Keras) two axes to factor.
      relative_step: cap the learning rate by :math:`1/\sqrt t` (Keras).
      min_scale: the floor :math:`s` of the parameter scale (Keras's ``epsilon_2``).
      nu_dtype: dtype of the second-moment statistics; ``None`` uses the parameters'.

    Returns:
      ``chain(scale_by_factored_rms(...), clip_by_block_rms(clipping_threshold),
      scale_by_learning_rate(learning_rate, flip_sign=False),
      scale_by_param_block_rms(min_scale), ema(momentum, debias=False),
      add_decayed_weights(weight_decay_rate, weight_decay_mask), scale(-1))``, without the
      parts that are switched off.

    Raises:
      ValueError: an argument is out of range, or ``relative_step`` without a learning
        rate.
      TypeError: a dtype option is not a floating dtype.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
      >>> tx = optx.adafactor(0.1, min_dim_size_to_factor=2)
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum(p["w"] ** 2) + jnp.sum(p["b"] ** 2)
      >>> for _ in range(50):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.1)
      True

    References:
      Shazeer and Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost",
      ICML 2018.
    """
    with hp.caller("adafactor"):
        # Arguments that a building block knows under another name are checked here, so
        # that a message names the argument the user gave.
        # A schedule is checked by the building block that evaluates it.
        for name, value, rule in (
            ("decay_offset", decay_offset, hp.NONNEG),
            ("eps", eps, hp.NONNEG),
            ("clipping_threshold", clipping_threshold, hp.POSITIVE),
            ("momentum", momentum, hp.UNIT_CLOSED),
            ("weight_decay_rate", weight_decay_rate, hp.NONNEG),
        ):
            optional = name in ("clipping_threshold", "momentum", "weight_decay_rate")
            if not (value is None and optional) and not hp.is_schedule(value):
                hp.validate("adafactor", name, value, rule)
        checks.dtype_option("adafactor", "dtype_momentum", dtype_momentum)
        relative_step = checks.flag("adafactor", "relative_step", relative_step)
        multiply_by_parameter_scale = checks.flag(
            "adafactor", "multiply_by_parameter_scale", multiply_by_parameter_scale
        )
        if relative_step and learning_rate is None:
            raise ValueError(
                "`adafactor` needs a learning_rate with relative_step=True. "
                "Received: learning_rate=None."
            )
        txs: list[Any] = [
            scale_by_factored_rms(
                factored,
                decay_rate,
                decay_offset,
                min_dim_size_to_factor,
                eps,
                factor_axes=factor_axes,
                nu_dtype=nu_dtype,
            )
        ]
        if clipping_threshold is not None:
            txs.append(clip_by_block_rms(clipping_threshold))
        if relative_step:
            txs.append(ScaleByRelativeStep(learning_rate, flip_sign=False))  # type: ignore[arg-type]
        elif learning_rate is not None:
            txs.append(scale_by_learning_rate(learning_rate, flip_sign=False))
        if multiply_by_parameter_scale:
            txs.append(scale_by_param_block_rms(min_scale))
        if momentum is not None:
            txs.append(ema(momentum, debias=False, accumulator_dtype=dtype_momentum))
        if weight_decay_rate is not None:
            txs.append(add_decayed_weights(weight_decay_rate, weight_decay_mask))
        txs.append(scale(-1.0))
        return chain(*txs)
