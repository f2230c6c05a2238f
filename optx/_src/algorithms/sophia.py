"""Sophia: `scale_by_sophia`, `sophia`, and Hutchinson's estimator of the Hessian's diagonal.

Sophia needs the loss as a function of the parameters alone: pass it to every ``update`` as
``obj_fn=``. optax's ``verbose`` and ``print_win_rate_every_n_steps`` (debug printing of the
fraction of unclipped updates) are not implemented.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.core import Tracer
from jax.typing import DTypeLike

from optx._src import checks
from optx._src import hyperparams as hp
from optx._src.base import (
    GradientTransformationLike,
    OptState,
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
    zero_count,
)
from optx._src.combine import Chain, MaskSpec, accepts_extra, call_update, chain
from optx._src.keys import KeySpec, initial_key_data, typed_key_spec, wrap_key
from optx._src.moments import adam_scalars, unzip, zeros_like
from optx._src.options import dtype_options
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights

# How a key is held in the (array-free, hashable) transform: an int seed, or a key's
# implementation name and raw data.
SeedSpec = KeySpec


def _seed_spec(api: str, seed: Any) -> SeedSpec:
    """Normalises an int seed, a typed key or a raw uint32 key to a hashable value."""
    key = seed
    if (
        isinstance(seed, jax.Array)
        and not isinstance(seed, Tracer)
        and not jnp.issubdtype(seed.dtype, jax.dtypes.prng_key)
        and seed.dtype == jnp.uint32
    ):
        try:  # a raw uint32 key (`jax.random.PRNGKey(0)`)
            key = jax.random.wrap_key_data(seed)
        except (TypeError, ValueError):
            key = seed
    spec = typed_key_spec(key)
    if spec is not None:
        return spec
    raise TypeError(
        f"`{hp.current(api)}` needs random_seed to be an int or one concrete PRNG key "
        f"(`jax.random.key(0)` or `jax.random.PRNGKey(0)`). Received: random_seed={seed!r}."
    )


def _missing_obj_fn(api: str) -> ValueError:
    return ValueError(
        f"`{api}` needs obj_fn, the loss as a function of the parameters alone, to estimate "
        f"the Hessian's diagonal. Received: obj_fn=None. Call "
        f"`update(grads, state, params, obj_fn=lambda p: loss(p, batch))`."
    )


class HutchinsonState(NamedTuple):
    """State of `hutchinson_estimator_diag_hessian`: the raw data of the random key."""

    key: jax.Array


@transform
class HutchinsonEstimator(Transform):
    """See `hutchinson_estimator_diag_hessian`."""

    name = "hutchinson_estimator_diag_hessian"
    random_seed: SeedSpec = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "random_seed", _seed_spec(self.name, self.random_seed))

    def init(self, params: Params) -> HutchinsonState:
        checks.float_params(f"{self.name}.init", params)
        return HutchinsonState(initial_key_data(self.random_seed))

    def update(
        self,
        updates: Updates,
        state: HutchinsonState,
        params: Params | None = None,
        obj_fn: Any = None,
        **extra: Any,
    ) -> tuple[Updates, HutchinsonState]:
        del updates, extra
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        if obj_fn is None:
            raise _missing_obj_fn(api)
        key = wrap_key(state.key, self.random_seed)
        key, sample_key = jax.random.split(key)
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(sample_key, len(leaves))
        # One key per leaf, as optax draws them, so that a seed gives optax's vectors.
        signs = jax.tree.unflatten(
            treedef,
            [
                jax.random.rademacher(k, jnp.shape(p), jnp.float32).astype(jnp.result_type(p))
                for k, p in zip(keys, leaves, strict=True)
            ],
        )
        hvp = jax.jvp(jax.grad(obj_fn), (params,), (signs,))[1]
        diag = jax.tree.map(lambda h, r: (h * r).astype(r.dtype), hvp, signs)
        return diag, HutchinsonState(jax.random.key_data(key))


def hutchinson_estimator_diag_hessian(random_seed: int | jax.Array = 0) -> HutchinsonEstimator:
    r"""Estimates the Hessian's diagonal with Hutchinson's method, from ``obj_fn``.

    .. math:: \widehat{\operatorname{diag} H} = r \odot (H r), \qquad
       r_i = \pm 1 \text{ with equal probability}

    an unbiased estimate (:math:`\mathbb E[r r^\top] = I`), from one Hessian-vector product
    of ``obj_fn`` (forward over reverse differentiation) at the parameters. Its ``update``
    ignores the gradients and returns the estimate; each call draws a fresh :math:`r` (one
    key per leaf, split from the key kept in the state, as optax does: a seed gives optax's
    vectors).

    Args:
      random_seed: an int seed, or a concrete PRNG key (typed, or a raw ``uint32`` key
        such as ``jax.random.PRNGKey(0)``).

    Returns:
      The transform; its state is `HutchinsonState`. Its ``update`` needs ``params`` and
      ``obj_fn=``, the loss as a function of the parameters.

    Raises:
      TypeError: ``random_seed`` is neither an int nor a key.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.hutchinson_estimator_diag_hessian()
      >>> params = jnp.array([1.0, 2.0])
      >>> loss = lambda p: jnp.sum(p**3)  # separable: the estimate is exact
      >>> tx.update(params, tx.init(params), params, obj_fn=loss)[0]
      Array([ 6., 12.], dtype=float32)
    """
    return HutchinsonEstimator(random_seed)


class SophiaState(NamedTuple):
    """State of `scale_by_sophia`.

    Attributes:
      count: steps taken (int32, saturating).
      mu: the moving average of the gradients (``mu_dtype``).
      nu: the moving average of the Hessian diagonal's estimates (``nu_dtype``).
      hessian_fn_state: the state of the Hessian-diagonal estimator.
      hyperparams: ``b1``, ``b2`` (as ``1 - b``), ``eps``, ``gamma``, ``clip_threshold``.
    """

    count: jax.Array
    mu: Params
    nu: Params
    hessian_fn_state: OptState
    hyperparams: dict[str, jax.Array]


@transform
class ScaleBySophia(Transform):
    """See `scale_by_sophia`."""

    name = "scale_by_sophia"
    b1: ScalarOrSchedule = hp.field(0.965, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.99, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    gamma: ScalarOrSchedule = hp.field(0.01, hp.NONNEG)
    # Optional: ``None`` (no clipping) is neither validated nor stored.
    clip_threshold: ScalarOrSchedule | None = hp.field(1.0, hp.POSITIVE, optional=True)
    update_interval: int = 10
    hessian_diagonal_fn: GradientTransformationLike = HutchinsonEstimator()
    mu_dtype: Any = None
    nu_dtype: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        interval = checks.nonneg_int(self.name, "update_interval", self.update_interval, 1)
        object.__setattr__(self, "update_interval", interval)
        checks.transform(self.name, "hessian_diagonal_fn", self.hessian_diagonal_fn)
        dtype_options(self, "mu_dtype", "nu_dtype")

    def init(self, params: Params) -> SophiaState:
        checks.float_params(f"{self.name}.init", params)
        return SophiaState(
            zero_count(),
            zeros_like(params, self.mu_dtype),
            zeros_like(params, self.nu_dtype),
            self.hessian_diagonal_fn.init(params),
            self.init_hyperparams(),
        )

    def update(
        self, updates: Updates, state: SophiaState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, SophiaState]:
        api = f"{self.name}.update"
        checks.needs_params(api, params)
        checks.same_tree(api, updates, state.mu, "updates", "the state")
        checks.same_tree(api, params, state.mu, "params", "the state")
        estimator = self.hessian_diagonal_fn
        if isinstance(estimator, HutchinsonEstimator) and extra.get("obj_fn") is None:
            raise _missing_obj_fn(api)
        s = adam_scalars(state.hyperparams, state.count)
        gamma = s.hyperparams["gamma"]
        clip = None if self.clip_threshold is None else s.hyperparams["clip_threshold"]
        k = 1 / s.bias_correction("b1")

        def leaf(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
            new_m = s.c1 * g + s.b1 * m
            # The Hessian estimate of the previous refresh (0 before the first: then every
            # update is clipped, a sign step).
            u = new_m * k / jnp.maximum(gamma * v, s.eps)
            if clip is not None:
                u = jnp.clip(u, -clip, clip)
            return u.astype(g.dtype), new_m.astype(m.dtype)

        u, mu = unzip(jax.tree.map(leaf, updates, state.mu, state.nu), updates, 2)

        def refresh(hs: Any, nu: Any) -> tuple[Any, Any]:
            diag, hs = call_update(estimator, accepts_extra(estimator), updates, hs, params, extra)
            nu = jax.tree.map(lambda d, v: (s.c2 * d + s.b2 * v).astype(v.dtype), diag, nu)
            return hs, nu

        if self.update_interval == 1:
            hs, nu = refresh(state.hessian_fn_state, state.nu)
        else:
            # Only the branch taken runs: the Hessian is estimated every update_interval
            # steps (on steps 1, 1 + update_interval, ...).
            hs, nu = jax.lax.cond(
                state.count % self.update_interval == 0,
                refresh,
                lambda hs, nu: (hs, nu),
                state.hessian_fn_state,
                state.nu,
            )
        return u, SophiaState(s.count, mu, nu, hs, s.hyperparams)


def scale_by_sophia(
    b1: float = 0.965,
    b2: float = 0.99,
    eps: float = 1e-8,
    gamma: float = 0.01,
    clip_threshold: float | None = 1.0,
    update_interval: int = 10,
    hessian_diagonal_fn: GradientTransformationLike | None = None,
    mu_dtype: DTypeLike | None = None,
    *,
    nu_dtype: DTypeLike | None = None,
) -> ScaleBySophia:
    r"""Rescales updates by Sophia's clipped, Hessian-preconditioned momentum.

    .. math::
       m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
       u_t = \operatorname{clip}\Bigl(\frac{m_t / (1-\beta_1^t)}
       {\max(\gamma\,h_{t-1}, \epsilon)}, \rho\Bigr), \\
       h_t = \beta_2 h_{t-1} + (1-\beta_2)\,\hat h_t \quad
       \text{on steps } t \equiv 1 \pmod{k}, \text{ else } h_t = h_{t-1}

    with :math:`\hat h_t` the estimate of the Hessian's diagonal at the parameters (by
    default Hutchinson's, `hutchinson_estimator_diag_hessian`, from ``obj_fn``),
    :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``, :math:`\epsilon` = ``eps``,
    :math:`\gamma` = ``gamma``, :math:`\rho` = ``clip_threshold`` (``None``: no clipping)
    and :math:`k` = ``update_interval``. The effective :math:`\beta_2` per step is about
    :math:`1 - (1-\beta_2)/k`. These are optax's numerics (after Levanter's), which depart
    from the paper's Algorithm 3 in three details: the first moment is bias-corrected, a
    step uses the Hessian estimate from before its own refresh (so the first step sees
    :math:`h_0 = 0`: a clipped, sign-like step), and the probe vectors are Rademacher
    rather than Gaussian.

    Every ``update`` needs ``params`` and, with the default estimator, ``obj_fn=``: the
    loss as a function of the parameters only (e.g. ``lambda p: loss(p, batch)``). Other
    extra keyword arguments reach the estimator.

    Args:
      b1: decay of the gradient average, in [0, 1).
      b2: decay of the Hessian-diagonal average, in [0, 1).
      eps: :math:`\epsilon \ge 0`, the floor of the denominator.
      gamma: :math:`\gamma \ge 0`, the scale of the Hessian term.
      clip_threshold: :math:`\rho > 0`, or ``None`` for no clipping.
      update_interval: :math:`k`, steps between Hessian estimates (an int >= 1).
      hessian_diagonal_fn: a transform whose ``update(grads, state, params, **extra)``
        returns the estimate; ``None`` is ``hutchinson_estimator_diag_hessian()``.
      mu_dtype: dtype of :math:`m`; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of :math:`h`; ``None`` uses each parameter's dtype.

    Returns:
      The transform; its state is `SophiaState`. ``b1``, ``b2``, ``eps``, ``gamma`` and
      ``clip_threshold`` (when set) are dynamic hyperparameters.

    Raises:
      ValueError: an argument is out of range; at ``update``, ``obj_fn`` or ``params`` is
        missing.
      TypeError: ``hessian_diagonal_fn`` is not a transform, or a dtype is not floating.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> tx = optx.scale_by_sophia(update_interval=1)
      >>> params = jnp.array([1.0, -2.0])
      >>> loss = lambda p: jnp.sum(p**2)
      >>> state = tx.init(params)
      >>> updates, state = tx.update(jax.grad(loss)(params), state, params, obj_fn=loss)
      >>> updates  # the first step is clipped: h_0 = 0
      Array([ 1., -1.], dtype=float32)

    References:
      Liu, Li, Hall, Liang and Ma, "Sophia: A Scalable Stochastic Second-order Optimizer
      for Language Model Pre-training", ICLR 2024.
    """
    estimator = HutchinsonEstimator() if hessian_diagonal_fn is None else hessian_diagonal_fn
    return ScaleBySophia(
        b1,
        b2,
        eps,
        gamma,
        clip_threshold,
        update_interval,
        estimator,
        mu_dtype,
        nu_dtype,
    )


def sophia(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.965,
    b2: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 1e-4,
    weight_decay_mask: MaskSpec | None = None,
    gamma: float = 0.01,
    clip_threshold: float | None = 1.0,
    update_interval: int = 10,
    hessian_diagonal_fn: GradientTransformationLike | None = None,
    mu_dtype: DTypeLike | None = None,
    *,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
    r"""The Sophia optimizer: `scale_by_sophia`, decoupled weight decay, learning rate.

    .. math:: \theta_t = \theta_{t-1} - \eta\,(u_t + \lambda\,\theta_{t-1})

    with :math:`u_t` from `scale_by_sophia` and :math:`\lambda` = ``weight_decay``. Pass
    the loss as a function of the parameters to every ``update``:
    ``tx.update(grads, state, params, obj_fn=lambda p: loss(p, batch))``.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the gradient average, in [0, 1).
      b2: decay of the Hessian-diagonal average, in [0, 1).
      eps: the floor of the denominator, >= 0.
      weight_decay: :math:`\lambda \ge 0`.
      weight_decay_mask: which parameters to decay (see `add_decayed_weights`).
      gamma: the scale of the Hessian term, >= 0.
      clip_threshold: the clipping bound, > 0, or ``None``.
      update_interval: steps between Hessian estimates (an int >= 1).
      hessian_diagonal_fn: the estimator; ``None`` is Hutchinson's.
      mu_dtype: dtype of the gradient average; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the Hessian average; ``None`` uses each parameter's dtype.

    Returns:
      ``chain(scale_by_sophia(...), add_decayed_weights(weight_decay, weight_decay_mask),
      scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_sophia`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> loss = lambda p: jnp.sum((p - 1.0) ** 2) + 0.1 * jnp.sum(p**4)
      >>> tx = optx.sophia(0.05, weight_decay=0.0, gamma=0.5)
      >>> @jax.jit
      ... def step(params, state):
      ...     grads = jax.grad(loss)(params)
      ...     updates, state = tx.update(grads, state, params, obj_fn=loss)
      ...     return optx.apply_updates(params, updates), state
      >>> params = jnp.array([3.0, -2.0])
      >>> state = tx.init(params)
      >>> for _ in range(300):
      ...     params, state = step(params, state)
      >>> bool(jnp.all(jnp.abs(params - 0.87) < 0.05))  # the minimum is at 0.869
      True

    References:
      Liu, Li, Hall, Liang and Ma, "Sophia: A Scalable Stochastic Second-order Optimizer
      for Language Model Pre-training", ICLR 2024.
    """
    with hp.caller("sophia"):
        return chain(
            scale_by_sophia(
                b1,
                b2,
                eps,
                gamma,
                clip_threshold,
                update_interval,
                hessian_diagonal_fn,
                mu_dtype,
                nu_dtype=nu_dtype,
            ),
            add_decayed_weights(weight_decay, weight_decay_mask),
            scale_by_learning_rate(learning_rate),
        )
