"""Lazy Adam: Adam that moves the moments only of the rows a row-sparse gradient touches."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from optx._src import checks, sparse
from optx._src import hyperparams as hp
from optx._src.algorithms.adam import ScaleByAdamState, adam_state_init
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    transform,
)
from optx._src.combine import Chain, chain
from optx._src.moments import abs_sq, adam_scalars, second_moment_scalars, unzip
from optx._src.options import dtype_options, eps_placement_option
from optx._src.scaling import scale_by_learning_rate


@transform
class ScaleByLazyAdam(Transform):
    """See `scale_by_lazy_adam`."""

    name = "scale_by_lazy_adam"
    row_sparse = True
    elementwise = True  # on dense leaves (and flat buffers), Adam's elementwise maths
    b1: ScalarOrSchedule = hp.field(0.9, hp.UNIT_OPEN, decay=True)
    b2: ScalarOrSchedule = hp.field(0.999, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    eps_root: ScalarOrSchedule = hp.field(0.0, hp.NONNEG)
    mu_dtype: Any = None
    nu_dtype: Any = None
    eps_placement: str = "optax"

    def __post_init__(self) -> None:
        super().__post_init__()
        dtype_options(self, "mu_dtype", "nu_dtype")
        eps_placement_option(self.name, self.eps_placement)

    def init(self, params: Params) -> ScaleByAdamState:
        return adam_state_init(self, params)

    def update(
        self,
        updates: Updates,
        state: ScaleByAdamState,
        params: Params | None = None,
        **extra: Any,
    ) -> tuple[Updates, ScaleByAdamState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        # The global step count, touched rows or not (as TF's LazyAdam).
        s = adam_scalars(state.hyperparams, state.count)
        k_m, _, k_v = second_moment_scalars(s, self.eps_placement, 1 / s.bias_correction("b1"))

        # `scale_by_adam`'s arithmetic, in the same order.
        def moments(g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
            return s.c1 * g + s.b1 * m, s.c2 * abs_sq(g) + s.b2 * v

        def step(new_m: jax.Array, new_v: jax.Array) -> jax.Array:
            v_hat = new_v if k_v is None else new_v * k_v
            return new_m * k_m / (jnp.sqrt(v_hat + s.eps_root) + s.eps)

        def leaf(g: Any, m: jax.Array, v: jax.Array) -> tuple[Any, jax.Array, jax.Array]:
            if not isinstance(g, sparse.RowSparse):
                new_m, new_v = moments(g, m, v)
                u = step(new_m, new_v)
                return u.astype(g.dtype), new_m.astype(m.dtype), new_v.astype(v.dtype)
            g = sparse.coalesce(g)
            new_m, new_v = moments(g.values, sparse.gather(m, g), sparse.gather(v, g))
            m, new_m = sparse.put(m, g, new_m)
            v, new_v = sparse.put(v, g, new_v)
            # Padding entries (row n - 1's moments, or zeros) are dropped anyway; masked, they
            # cannot show a NaN in the update's values.
            u = jnp.where(sparse.valid(g), step(new_m, new_v), 0).astype(g.values.dtype)
            return sparse.with_values(g, g.indices, u), m, v

        triples = jax.tree.map(leaf, updates, state.mu, state.nu, is_leaf=sparse.is_row_sparse)
        u, mu, nu = unzip(triples, updates, 3, is_leaf=sparse.is_row_sparse)
        return u, ScaleByAdamState(s.count, mu, nu, s.hyperparams)


def scale_by_lazy_adam(
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nu_dtype: DTypeLike | None = None,
    eps_placement: str = "optax",
) -> ScaleByLazyAdam:
    r"""Adam's rescaling, moving the moments only of the rows a row-sparse gradient touches.

    On a dense gradient leaf this is `scale_by_adam` (the same numbers). On a `RowSparse`
    leaf with rows :math:`R` (repeated indices summed first), for :math:`i \in R`:

    .. math::
       m_{t,i} = \beta_1 m_{t-1,i} + (1-\beta_1) g_{t,i}, \quad
       v_{t,i} = \beta_2 v_{t-1,i} + (1-\beta_2) g_{t,i}^2, \quad
       u_{t,i} = \frac{m_{t,i} / (1-\beta_1^t)}
                      {\sqrt{v_{t,i} / (1-\beta_2^t) + \bar\epsilon} + \epsilon}

    while the other rows keep their moments and get no update (dense Adam would decay their
    moments and keep moving them). :math:`t` is the global step count, whether a row was
    touched or not. The update is row-sparse; `apply_updates` adds it to those rows only.
    This is TF's ``LazyAdam`` (``tfa.optimizers.LazyAdam``), which uses
    ``eps_placement="keras"`` and ``eps=1e-7``.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.
      eps_placement: ``"optax"`` (epsilon after the bias correction) or ``"keras"`` (see
        `scale_by_adam`).

    Returns:
      The transform; its state is a `ScaleByAdamState`. ``b1``, ``b2``, ``eps`` and
      ``eps_root`` are dynamic hyperparameters.

    Raises:
      ValueError: a beta is outside [0, 1), ``eps`` or ``eps_root`` is negative, or
        ``eps_placement`` is unknown.
      TypeError: a moment dtype is not a floating dtype.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_lazy_adam()
      >>> grad = optx.RowSparse(jnp.array([1]), jnp.array([[2.0, -3.0]]), (3, 2))
      >>> updates, state = tx.update({"emb": grad}, tx.init({"emb": jnp.zeros((3, 2))}))
      >>> updates["emb"].todense().round(4)
      Array([[ 0.,  0.],
             [ 1., -1.],
             [ 0.,  0.]], dtype=float32)

    References:
      Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015.
    """
    return ScaleByLazyAdam(b1, b2, eps, eps_root, mu_dtype, nu_dtype, eps_placement)


def lazy_adam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nu_dtype: DTypeLike | None = None,
    eps_placement: str = "optax",
) -> Chain:
    r"""Adam for embeddings: row-sparse gradients move only the rows they touch.

    `scale_by_lazy_adam` then `scale_by_learning_rate`: on dense gradient leaves the same
    numbers as `adam`; on a `RowSparse` leaf (an embedding table's gradient, see
    `embedding_grad`) only the touched rows' moments and parameters change, with the bias
    correction of the global step count (TF's ``LazyAdam``):

    .. math:: \theta_{t,i} = \theta_{t-1,i} - \eta\,\hat m_{t,i} / (\sqrt{\hat v_{t,i} +
       \bar\epsilon} + \epsilon) \quad \text{for the touched rows } i.

    A step then costs in proportion to the rows touched, not to the table.

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root.
      eps_root: added inside the square root.
      mu_dtype: dtype of the first moment; ``None`` uses each parameter's dtype.
      nu_dtype: dtype of the second moment; ``None`` uses each parameter's dtype.
      eps_placement: ``"optax"`` or ``"keras"`` (see `scale_by_adam`).

    Returns:
      ``chain(scale_by_lazy_adam(...), scale_by_learning_rate(learning_rate))``.

    Raises:
      ValueError: an argument is out of range (see `scale_by_lazy_adam`).

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = {"emb": jnp.ones((100, 4)), "w": jnp.ones(4)}
      >>> ids = jnp.array([5, 7, 5])
      >>> def loss(rows, w):
      ...     return jnp.sum((rows @ w) ** 2)
      >>> tx = optx.lazy_adam(0.1)
      >>> state = tx.init(params)
      >>> g_rows, g_w = jax.grad(loss, argnums=(0, 1))(params["emb"][ids], params["w"])
      >>> grads = {"emb": optx.RowSparse(ids, g_rows, (100, 4)), "w": g_w}
      >>> updates, state = tx.update(grads, state, params)
      >>> params = optx.apply_updates(params, updates)
      >>> params["emb"][5]  # touched
      Array([0.9, 0.9, 0.9, 0.9], dtype=float32)
      >>> params["emb"][0]  # untouched: neither read nor written
      Array([1., 1., 1., 1.], dtype=float32)
      >>> params["w"]  # a dense leaf: Adam
      Array([0.9, 0.9, 0.9, 0.9], dtype=float32)

    References:
      Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015.
    """
    with hp.caller("lazy_adam"):
        return chain(
            scale_by_lazy_adam(
                b1, b2, eps, eps_root, mu_dtype, nu_dtype=nu_dtype, eps_placement=eps_placement
            ),
            scale_by_learning_rate(learning_rate),
        )
