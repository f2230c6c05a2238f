"""Muon: momentum orthogonalised by Newton-Schulz, with an AdamW fallback for non-matrices.

`scale_by_muon` (the orthogonalised momentum of matrices, or of batches of them through
`MuonDimensionNumbers`), `scale_by_shape` (the shape-dependent step factor) and `muon`,
which routes the chosen leaves to them and every other leaf to `adamw` through `partition`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from optx._src import checks, placement
from optx._src import hyperparams as hp
from optx._src.algorithms.adam import adamw
from optx._src.algorithms.muon_dimensions import (
    MATRIX,
    Dims,
    Spec,
    batch_axes,
    fans,
    freeze_dimensions,
    leaf_dims,
    muon_leaf_dims,
    spec_tree,
)
from optx._src.algorithms.muon_shape import scale_by_shape
from optx._src.algorithms.newton_schulz import (
    NS_COEFFS_PRESETS,
    PRECONDITIONINGS,
    ns_coeffs_option,
    option,
    orthogonalize,
)
from optx._src.base import (
    Params,
    ScalarOrSchedule,
    Transform,
    Updates,
    safe_increment,
    transform,
    zero_count,
)
from optx._src.combine import MaskSpec, Partition, chain, freeze_mask, partition, resolve_mask
from optx._src.moments import decay_pair, first_moment_scalars, unzip, zeros_like
from optx._src.options import EPS_PLACEMENTS, dtype_options, flag_option, flag_options
from optx._src.scaling import scale_by_learning_rate
from optx._src.weight_decay import add_decayed_weights

MOMENTUM_CONVENTIONS = ("optax", "keras")


# One compiled program per leaf, called alike eagerly and under `jit`: XLA contracts
# a * b + c into a fused multiply-add inside fusions but not between eager operations,
# and the Newton-Schulz iteration magnifies that last-bit difference up to ~15 times.
@functools.partial(
    jax.jit,
    static_argnames=("keras", "nesterov", "ns_steps", "preconditioning", "adaptive", "dims"),
)
def _muon_leaf(
    g: jax.Array,
    m: jax.Array,
    beta: jax.Array,
    scalars: Any,
    coeffs: jax.Array,
    eps: jax.Array,
    *,
    keras: bool,
    nesterov: bool,
    ns_steps: int,
    preconditioning: str,
    adaptive: bool,
    dims: Dims,
) -> tuple[jax.Array, jax.Array]:
    if keras:
        # m <- beta m + g, no damping nor bias correction (Keras's Muon).
        new_m = g + beta * m
        m_hat = g + beta * new_m if nesterov else new_m
    else:
        c, k_m, k_g = scalars
        new_m = c * g + beta * m
        m_hat = new_m * k_m + g * k_g if nesterov else new_m * k_m
    if dims == MATRIX and m_hat.ndim == 2:
        out = orthogonalize(m_hat, coeffs, ns_steps, preconditioning, eps)
    else:
        out = _orthogonalize_batch(m_hat, dims, coeffs, ns_steps, preconditioning, eps)
    if adaptive:
        # Scaled by the dual norm <m_hat, O> (Bernstein and Newhouse, 2024), over the
        # whole leaf (as optax).
        out = jnp.sum(jnp.conj(m_hat) * out) * out
    return out.astype(g.dtype), new_m.astype(m.dtype)


def _orthogonalize_batch(
    x: jax.Array, dims: Dims, coeffs: jax.Array, ns_steps: int, preconditioning: str, eps: Any
) -> jax.Array:
    """Each matrix of ``x`` (rows: the reduction axes, columns: the output axes) on its own."""
    x = placement.gathered(x)  # whole, so that the transpose and reshape need no sharding
    batch = batch_axes(x.ndim, dims)
    order = batch + dims[0] + dims[1]
    fan_in, fan_out = fans(x.shape, dims)
    moved = jnp.transpose(x, order)
    mats = moved.reshape(-1, fan_in, fan_out)
    out = jax.vmap(lambda m: orthogonalize(m, coeffs, ns_steps, preconditioning, eps))(mats)
    return jnp.transpose(out.reshape(moved.shape), np.argsort(order))


class MuonState(NamedTuple):
    """State of `scale_by_muon`: step count, momentum, Newton-Schulz coefficients."""

    count: jax.Array
    mu: Params
    ns_coeffs: jax.Array
    hyperparams: dict[str, jax.Array]


@transform
class ScaleByMuon(Transform):
    """See `scale_by_muon`."""

    name = "scale_by_muon"
    ns_coeffs: Any = NS_COEFFS_PRESETS["standard"]
    ns_steps: int = 5
    beta: ScalarOrSchedule = hp.field(0.95, hp.UNIT_OPEN, decay=True)
    eps: ScalarOrSchedule = hp.field(1e-8, hp.NONNEG)
    mu_dtype: Any = None
    nesterov: bool = True
    adaptive: bool = False
    preconditioning: str = "frobenius"
    weight_dimension_numbers: Any = None
    momentum_convention: str = "optax"

    def __post_init__(self) -> None:
        super().__post_init__()
        spec = freeze_dimensions(
            self.name, "weight_dimension_numbers", self.weight_dimension_numbers
        )
        object.__setattr__(self, "weight_dimension_numbers", spec)
        steps = checks.nonneg_int(self.name, "ns_steps", self.ns_steps)
        object.__setattr__(self, "ns_steps", steps)
        coeffs = ns_coeffs_option(self.name, self.ns_coeffs, steps)
        object.__setattr__(self, "ns_coeffs", coeffs)
        dtype_options(self, "mu_dtype")
        flag_options(self, "nesterov", "adaptive")
        option(self.name, "preconditioning", self.preconditioning, PRECONDITIONINGS)
        option(self.name, "momentum_convention", self.momentum_convention, MOMENTUM_CONVENTIONS)

    def init(self, params: Params) -> MuonState:
        checks.float_params(f"{self.name}.init", params, complex_ok=True)
        checks.complex_slot(f"{self.name}.init", "mu_dtype", self.mu_dtype, params)
        muon_leaf_dims(f"{self.name}.init", self.weight_dimension_numbers, params)
        coeffs = jnp.asarray(self.ns_coeffs, jnp.float32)
        return MuonState(
            zero_count(), zeros_like(params, self.mu_dtype), coeffs, self.init_hyperparams()
        )

    def update(
        self, updates: Updates, state: MuonState, params: Params | None = None, **extra: Any
    ) -> tuple[Updates, MuonState]:
        del params, extra
        checks.same_tree(f"{self.name}.update", updates, state.mu, "updates", "the state")
        h = state.hyperparams
        beta, c = decay_pair(h, "beta")
        count = safe_increment(state.count)
        # The bias corrections, scalars once per step (unused by the Keras convention).
        scalars = (c, *first_moment_scalars(h, count, self.nesterov, "beta"))
        keras = self.momentum_convention == "keras"
        dims = iter(muon_leaf_dims(f"{self.name}.update", self.weight_dimension_numbers, updates))

        def leaf(g: jax.Array, m: jax.Array) -> tuple[jax.Array, jax.Array]:
            return _muon_leaf(
                g,
                m,
                beta,
                None if keras else scalars,
                state.ns_coeffs,
                h["eps"],
                keras=keras,
                nesterov=self.nesterov,
                ns_steps=self.ns_steps,
                preconditioning=self.preconditioning,
                adaptive=self.adaptive,
                dims=next(dims),
            )

        out, mu = unzip(jax.tree.map(leaf, updates, state.mu), updates, 2)
        return out, MuonState(count, mu, state.ns_coeffs, h)


def scale_by_muon(
    ns_coeffs: Any = NS_COEFFS_PRESETS["standard"],
    ns_steps: int = 5,
    beta: float = 0.95,
    eps: float = 1e-8,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    weight_dimension_numbers: Any = None,
    momentum_convention: str = "optax",
) -> ScaleByMuon:
    r"""Orthogonalises the momentum of each matrix by a Newton-Schulz iteration (Muon).

    With ``momentum_convention="optax"`` (default; :math:`\beta` = ``beta``):

    .. math::
       m_t = \beta m_{t-1} + (1-\beta)\,g_t, \qquad
       \hat m_t = \frac{\beta\, m_t}{1-\beta^{t+1}} + \frac{(1-\beta)\, g_t}{1-\beta^t}
       \quad \Bigl(\text{or } \frac{m_t}{1-\beta^t} \text{ without Nesterov}\Bigr),

    with ``"keras"`` (Keras's ``Muon``): :math:`m_t = \beta m_{t-1} + g_t` and
    :math:`\hat m_t = g_t + \beta m_t` (or :math:`m_t`). Then :math:`u_t = \mathrm{NS}(\hat
    m_t)`: transposed so that it is wide, divided by its Frobenius norm plus
    :math:`\epsilon` = ``eps`` (``preconditioning``), then ``ns_steps`` times

    .. math:: X \leftarrow a X + (b A + c A^2) X, \qquad A = X X^H

    with :math:`(a, b, c)` = ``ns_coeffs`` (:math:`X^H` the conjugate transpose, which is
    :math:`X^\top` for a real leaf; a complex one is orthogonalised as optax does). The
    result approximates :math:`U V^H` of :math:`\hat m_t = U \Sigma V^H` (singular values
    land in about [0.7, 1.2]): steepest descent under the spectral norm. ``adaptive``
    multiplies it by :math:`\langle \hat m_t, u_t \rangle = \sum \overline{\hat m_t}\, u_t`.
    The step size by shape is `scale_by_shape`'s.

    Every leaf must be a matrix, unless ``weight_dimension_numbers`` says which of its
    axes are the rows and columns (`MuonDimensionNumbers`): several reduction (or output)
    axes are merged, and the matrices along the other (batch) axes are orthogonalised one
    by one, as if each were a leaf of its own (``adaptive``'s factor is taken over the
    whole leaf, as optax does). `muon` sends the leaves left out to AdamW.

    Args:
      ns_coeffs: the triple :math:`(a, b, c)`; or one triple per step, at least
        ``ns_steps`` of them, the last ``ns_steps`` used (optax refuses more triples than
        steps); or a preset: ``"standard"`` (Jordan's) or ``"dion"`` (five triples).
      ns_steps: number of Newton-Schulz steps, an int >= 0.
      beta: momentum decay, in [0, 1).
      eps: added to the norm that scales the matrix before the iteration, >= 0.
      mu_dtype: dtype of the momentum; ``None`` uses each parameter's dtype.
      nesterov: use Nesterov momentum.
      adaptive: scale by the dual norm of the momentum.
      preconditioning: how the matrix is scaled before iterating: ``"frobenius"``,
        ``"spectral"`` (exact largest singular value), ``"aol"`` (per-row rescaling in the
        first step) or ``"schatten"`` (Schatten-4 norm in the first step).
      weight_dimension_numbers: a `MuonDimensionNumbers` for every leaf, a pytree of them
        with the structure of the parameters (or a prefix of it; ``None`` for a 2-D leaf
        taken as it is), or a callable ``params -> such a pytree``. ``None``: every leaf
        is a matrix ``(fan_in, fan_out)``.
      momentum_convention: ``"optax"`` or ``"keras"`` (see above).

    Returns:
      The transform. ``beta`` and ``eps`` are dynamic hyperparameters; the coefficients
      are kept in the state (`MuonState`).

    Raises:
      ValueError: an argument is out of range or unknown, or (at ``init``) a leaf is not a
        matrix, or its dimension numbers overlap or are out of its rank: the message
        names it.
      TypeError: ``mu_dtype`` is not floating, a flag is not a bool, or
        ``weight_dimension_numbers`` holds something else than dimension numbers.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> tx = optx.scale_by_muon()
      >>> params = {"w": jnp.zeros((2, 2))}
      >>> updates, _ = tx.update({"w": jnp.array([[3.0, 0.0], [0.0, 1.0]])}, tx.init(params))
      >>> bool(jnp.all(jnp.abs(jnp.diag(updates["w"]) - 1) < 0.35))  # close to I
      True

    References:
      Jordan, Jin, Boza, You, Cesista, Newhouse and Bernstein, "Muon: An optimizer for
      hidden layers in neural networks", blog post, 2024;
      Bernstein and Newhouse, "Old Optimizer, New Norm: An Anthology", arXiv:2409.20325,
      2024.
    """
    return ScaleByMuon(
        ns_coeffs,
        ns_steps,
        beta,
        eps,
        mu_dtype,
        nesterov,
        adaptive,
        preconditioning,
        weight_dimension_numbers,
        momentum_convention,
    )


@dataclasses.dataclass(frozen=True)
class MuonLabels:
    """`partition` labels of `muon`: ``"muon"`` for the leaves it orthogonalises, else ``"adam"``.

    ``mask`` (a frozen ``muon_mask``) or ``dimensions`` (frozen
    ``muon_weight_dimension_numbers``: the leaves not ``None``) select them; neither selects
    the 2-D leaves. Hashable and equal by its fields.
    """

    mask: Any = None
    dimensions: Any = None

    def __call__(self, params: Params) -> Any:
        if self.dimensions is not None:
            name = "muon_weight_dimension_numbers"
            leaf_dims("muon", name, self.dimensions, params)  # checked here, named as given
            specs = spec_tree("muon", name, self.dimensions, params)
            return jax.tree.map(
                lambda box: "adam" if box.dn is None else "muon",
                specs,
                is_leaf=lambda x: isinstance(x, Spec),
            )
        if self.mask is None:
            selected = jax.tree.map(lambda p: np.ndim(p) == 2, params)
        else:
            selected = resolve_mask("muon", self.mask, params)
        return jax.tree.map(lambda s: "muon" if s else "adam", selected)


def _muon_mask(mask: MaskSpec) -> Any:
    try:
        return freeze_mask("muon", mask)
    except TypeError:
        raise TypeError(
            f"`muon` needs muon_mask to be a pytree of bools, a callable returning one, or "
            f"regular expressions on parameter paths. Received: muon_mask={mask!r}."
        ) from None


def muon(
    learning_rate: ScalarOrSchedule,
    ns_coeffs: Any = NS_COEFFS_PRESETS["standard"],
    ns_steps: int = 5,
    beta: float = 0.95,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_decay_mask: MaskSpec | None = None,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    adam_b1: float = 0.9,
    adam_b2: float = 0.999,
    adam_eps_root: float = 0.0,
    adam_weight_decay: float = 0.0,
    adam_learning_rate: ScalarOrSchedule | None = None,
    muon_weight_dimension_numbers: Any = None,
    consistent_rms: float | None = None,
    muon_mask: MaskSpec | None = None,
    momentum_convention: str = "optax",
    adam_nesterov: bool | None = None,
    adam_eps_placement: str = "optax",
    nu_dtype: DTypeLike | None = None,
) -> Partition:
    r"""The Muon optimizer: orthogonalised momentum for matrices, AdamW for the rest.

    The leaves ``muon_mask`` selects (by default every 2-D leaf) take

    .. math:: \theta \leftarrow \theta - \eta_t\,\bigl(s\,\mathrm{NS}(\hat m_t) +
       \lambda\,\theta\bigr)

    (`scale_by_muon`, the shape factor :math:`s` of `scale_by_shape`, weight decay
    :math:`\lambda` = ``weight_decay``); the others take `adamw` with ``adam_*`` arguments
    and ``eps``, at ``adam_learning_rate`` (default: ``learning_rate``). The routing is a
    `partition` with labels ``"muon"`` and ``"adam"``.

    Keras's ``Muon`` is, in these terms, ``muon(lr, eps=1e-7, weight_decay=0.004,
    adam_weight_decay=0.004, consistent_rms=0.2, momentum_convention="keras",
    adam_nesterov=False, adam_eps_placement="keras")`` (with its default routing:
    its ``exclude_embeddings`` and ``exclude_layers`` are a ``muon_mask`` callable or
    regular expressions away).

    Args:
      learning_rate: :math:`\eta`, a non-negative number or a schedule.
      ns_coeffs: Newton-Schulz coefficients or a preset (see `scale_by_muon`).
      ns_steps: number of Newton-Schulz steps.
      beta: momentum decay, in [0, 1).
      eps: for the Newton-Schulz scaling and AdamW's denominator, >= 0.
      weight_decay: decoupled weight decay of the Muon leaves, >= 0.
      weight_decay_mask: which Muon leaves to decay (see `add_decayed_weights`).
      mu_dtype: dtype of the momenta (both branches).
      nesterov: Nesterov momentum (both branches unless ``adam_nesterov`` is set).
      adaptive: scale by the dual norm (see `scale_by_muon`).
      preconditioning: scaling before the iteration (see `scale_by_muon`).
      adam_b1: AdamW's first-moment decay.
      adam_b2: AdamW's second-moment decay.
      adam_eps_root: AdamW's epsilon inside the square root.
      adam_weight_decay: AdamW's weight decay.
      adam_learning_rate: AdamW's learning rate or schedule; ``None`` uses ``learning_rate``.
      muon_weight_dimension_numbers: which leaves take Muon and how each is a matrix or a
        batch of matrices: a pytree of `MuonDimensionNumbers` with the structure of the
        parameters (or a prefix of it), ``None`` for the leaves that take AdamW, or a
        callable ``params -> such a pytree`` (see `scale_by_muon`). ``None`` (the
        argument): the 2-D leaves, as matrices ``(fan_in, fan_out)``, or ``muon_mask``.
      consistent_rms: ``None`` for the width rule, or the target RMS (see `scale_by_shape`).
      muon_mask: which leaves take Muon: a pytree of bools, a callable
        ``params -> pytree of bools``, or regular expressions on path names (as `masked`).
        ``None`` selects the 2-D leaves. A selected leaf that is not 2-D is an error. Give
        either this or ``muon_weight_dimension_numbers``.
      momentum_convention: ``"optax"`` or ``"keras"`` (see `scale_by_muon`).
      adam_nesterov: Nesterov in AdamW; ``None`` follows ``nesterov`` (as optax).
      adam_eps_placement: ``"optax"`` or ``"keras"`` (see `scale_by_adam`).
      nu_dtype: dtype of AdamW's second moment; ``None`` uses each parameter's dtype.

    Returns:
      ``partition({"muon": chain(scale_by_muon(...), scale_by_shape(...),
      add_decayed_weights(...), scale_by_learning_rate(...)), "adam": adamw(...)},
      MuonLabels(muon_mask, muon_weight_dimension_numbers))``.

    Raises:
      ValueError: an argument is out of range, or both ``muon_mask`` and
        ``muon_weight_dimension_numbers`` are given; (at ``init``) a leaf routed to Muon is
        not a matrix, or its dimension numbers do not fit it.
      TypeError: a mask or a flag has the wrong type.

    Example:
      >>> import jax, jax.numpy as jnp, optx
      >>> params = {"w": jnp.eye(3), "b": jnp.ones(3)}  # w takes Muon, b AdamW
      >>> tx = optx.muon(0.2)
      >>> state = tx.init(params)
      >>> loss = lambda p: jnp.sum((p["w"] - 2.0) ** 2) + jnp.sum(p["b"] ** 2)
      >>> for _ in range(100):
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = optx.apply_updates(params, updates)
      >>> bool(loss(params) < 0.05)  # from 30.0
      True

    References:
      Jordan et al., "Muon: An optimizer for hidden layers in neural networks", blog post,
      2024; Liu et al., "Muon is Scalable for LLM Training", arXiv:2502.16982, 2025.
    """
    with hp.caller("muon"):
        nesterov = flag_option("muon", "nesterov", nesterov)
        if adam_nesterov is None:
            adam_nesterov = nesterov
        adam_nesterov = flag_option("muon", "adam_nesterov", adam_nesterov)
        option("muon", "adam_eps_placement", adam_eps_placement, EPS_PLACEMENTS)
        mask = None if muon_mask is None else _muon_mask(muon_mask)
        name = "muon_weight_dimension_numbers"
        dimensions = freeze_dimensions("muon", name, muon_weight_dimension_numbers)
        if mask is not None and dimensions is not None:
            raise ValueError(
                f"`muon` needs muon_mask or {name}, not both: the leaves with dimension "
                f"numbers take Muon. Received: muon_mask={muon_mask!r}."
            )
        muon_branch = chain(
            scale_by_muon(
                ns_coeffs,
                ns_steps,
                beta,
                eps,
                mu_dtype,
                nesterov=nesterov,
                adaptive=adaptive,
                preconditioning=preconditioning,
                weight_dimension_numbers=dimensions,
                momentum_convention=momentum_convention,
            ),
            scale_by_shape(consistent_rms, weight_dimension_numbers=dimensions),
            add_decayed_weights(weight_decay, weight_decay_mask),
            scale_by_learning_rate(learning_rate),
        )
        # Errors of the AdamW branch name the `adam_*` arguments the user gave.
        adam_names = {
            "b1": "adam_b1",
            "b2": "adam_b2",
            "eps_root": "adam_eps_root",
            "weight_decay": "adam_weight_decay",
        }
        if adam_learning_rate is not None:
            adam_names["learning_rate"] = "adam_learning_rate"
        with hp.caller("muon", adam_names):
            adam_branch = adamw(
                learning_rate if adam_learning_rate is None else adam_learning_rate,
                adam_b1,
                adam_b2,
                eps,
                adam_eps_root,
                mu_dtype,
                adam_weight_decay,
                nesterov=adam_nesterov,
                nu_dtype=nu_dtype,
                eps_placement=adam_eps_placement,
            )
        return partition({"muon": muon_branch, "adam": adam_branch}, MuonLabels(mask, dimensions))
