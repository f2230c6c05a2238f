"""Numerical parity with optax: 100 steps of every optx transform that optax also has.

Each case runs optx and optax side by side, each under one `jax.jit` of a `lax.scan`, on the
same nested pytree with the same per-step gradients, updating the parameters with each
library's ``apply_updates``. At the end it compares the parameters and the state entries
both libraries keep (moments, traces, counters).

The runs are in float64 (`jax.enable_x64`): in float32, round-off over 100 steps of Adam
(whose ``m / sqrt(v)`` amplifies it) is bounded only by ~2e-4, looser than what a learning
rate off by 1e-3 moves the parameters. In float64 the one difference left is that optx keeps
its hyperparameters as float32 scalars (DESIGN D2), each off by at most ``EPS32 / 2``
relative, a fixed perturbation bounded per case (`Case.k`, `_param_bounds`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import EPS32

import optx

STEPS = 100
EPS64 = float(np.finfo(np.float64).eps)

# The bounds (float64 runs, `_run64`). Each of optx's float32 hyperparameters is off by at
# most EPS32 / 2 relative, so each step's update is off by at most ``k * EPS32 / 2`` of its
# size, for ``k`` (`Case.k`) the number of such roundings the update goes through: the
# learning rate, a clip threshold, a weight decay count 1 each; a decay ``b`` is used as
# float32 ``b`` in ``b * m`` (``1 - b`` is exact, D2), and ``b**n`` is then off by
# ``n * EPS32 / 2`` relative, ``n`` averaging ``b / (1 - b)`` (at most STEPS) over the moving
# average's weights: 9 for 0.9, 4 for 0.8, 1 for 0.5, and for Adam's ``b2`` half of
# min(STEPS, 999) through the square root (50); optx's bias corrections
# (``-expm1(t * log1p(-(1 - b)))``, float32) count 3 roundings each, half for ``b2``. Over the
# run the parameters are then off by at most ``k * EPS32 / 2 * sum_t max|u_t|`` per leaf
# (``u_t`` the float64 reference's updates), plus float64 round-off:
# ``STEPS * ROUNDINGS64 * EPS64`` of each leaf's scale, ROUNDINGS64 = 32 covering the
# elementwise operations of a step and the few-term reductions (norms over <= 12 entries).
# A learning rate off by 1e-3 moves the parameters by 1e-3 * |sum_t u_t|, which these bounds
# stay far below (`test_bounds_catch_a_learning_rate_off_by_1e3`).
ROUNDINGS64 = 32
ROUNDOFF64 = STEPS * ROUNDINGS64 * EPS64
# The slots (moments, traces, EMAs) carry the same roundings, relative to their terms' size
# (see `test_parity_with_optax`). Counters and sums of gradients: exact, or float64 round-off.
ATOL = 1e-300  # a floor for leaves exactly 0 throughout (set_to_zero)

# Roundings (`Case.k`) of the cases, as derived above.
K_SGD_MOMENTUM = 1 + 9 + 1  # lr, b = 0.9 lag, nesterov's extra b * trace
# lr, b1 lag, b2 lag, 1 - b1 and 1 - b2 as float32 (1 + 1/2), bias corrections, eps, and
# one for Nesterov's extra b1 * m where it applies.
K_ADAM = 1 + 9 + 50 + 2 + 3 + 2 + 1
K_ADAMW = K_ADAM + 1  # the weight decay

# The global norm of the gradients (`_grads`) ranges over about [1, 15]; at MID_NORM about
# half the steps are clipped (`test_gradients_exercise_the_clip`).
MID_NORM = 6.0


def _params() -> Any:
    """A nested float32 pytree: dicts and lists, matrices, vectors, a 3-D kernel, a scalar."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "dense": {"kernel": normal(3, 4), "bias": normal(4)},
        "blocks": [{"conv": normal(2, 3, 2)}, normal(5)],
        "scale": normal(),
    }


def _grads(params: Any, poison: np.ndarray | None = None) -> Any:
    """Per-step gradients (leading axis: step): fixed Gaussian draws times a magnitude.

    The magnitude swings between 0.2 and 2.2 so that a global-norm clip at ``MID_NORM``
    triggers on some steps and not on others. ``poison[t]`` (NaN, +-inf or 0) is added to
    one element of one leaf at step ``t``.
    """
    rng = np.random.default_rng(1)
    magnitude = 0.2 + 2.0 * np.sin(0.3 * np.arange(STEPS)) ** 2

    def draw(p: jax.Array) -> np.ndarray:
        g = rng.standard_normal((STEPS, *p.shape))
        return (g * magnitude.reshape((STEPS,) + (1,) * p.ndim)).astype(np.float32)

    grads = jax.tree.map(draw, params)
    if poison is not None:
        grads["dense"]["kernel"][:, 0, 0] += poison
    return jax.tree.map(jnp.asarray, grads)


def _run(tx: Any, apply_updates: Callable[..., Any], params: Any, grads: Any) -> tuple:
    def run(params: Any, grads: Any) -> tuple:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), grads)[0]

    return jax.jit(run)(params, grads)


def _run64(tx: Any, apply_updates: Callable[..., Any], params: Any, grads: Any) -> tuple:
    """`_run` in float64 (`jax.enable_x64`); returns NumPy trees (compared outside x64, see
    tests/TOLERANCES.md) and, per parameter leaf, ``sum_t max|u_t|`` of the updates.
    """
    with jax.enable_x64(True):
        params, grads = jax.tree.map(
            lambda x: jnp.asarray(np.asarray(x, np.float64)), (params, grads)
        )

        def run(params: Any, grads: Any) -> tuple:
            def step(carry: tuple, g: Any) -> tuple:
                p, s = carry
                u, s = tx.update(g, s, p)
                sizes = jax.tree.map(lambda x: jnp.max(jnp.abs(x), initial=0.0), u)
                return (apply_updates(p, u), s), sizes

            (p, s), sizes = jax.lax.scan(step, (params, tx.init(params)), grads)
            return p, s, jax.tree.map(lambda x: jnp.sum(x, where=jnp.isfinite(x)), sizes)

        out = jax.jit(run)(params, grads)
        return jax.tree.map(np.asarray, out)


def _max_abs_err(a: Any, b: Any) -> float:
    """The largest ``|a - b|``; NaNs, and infinities of the same sign, in the same places
    count as equal.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.size == 0:
        return 0.0
    same = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))
    return float(np.max(np.where(same, 0.0, np.abs(a - b))))


def assert_close(
    name: str, actual: Any, expected: Any, rtol: float, atol: float | list[float]
) -> None:
    """Leaf by leaf, ``|actual - expected| <= atol + rtol * max|expected|``, NaN == NaN.

    ``atol`` is one number, or one per leaf.

    ``max|expected|`` is over the leaf's finite entries. Prints the largest errors, absolute
    and relative to that scale (see them with ``pytest -s``).
    """
    a_leaves, a_def = jax.tree_util.tree_flatten_with_path(actual)
    e_leaves = jax.tree.leaves(expected)
    assert len(a_leaves) == len(e_leaves), f"{name}: {a_def} vs {jax.tree.structure(expected)}"
    atols = atol if isinstance(atol, list) else [atol] * len(e_leaves)
    worst_abs = worst_rel = worst_of_bound = 0.0
    for (path, a), e, leaf_atol in zip(a_leaves, e_leaves, atols, strict=True):
        a, e = np.asarray(a), np.asarray(e)
        where = f"{name}{jax.tree_util.keystr(path)}"
        assert a.shape == e.shape, f"{where}: {a.shape} vs {e.shape}"
        if e.dtype == bool or a.dtype == bool or np.issubdtype(e.dtype, np.integer):
            np.testing.assert_array_equal(a, e, err_msg=where)
            continue
        e64 = e.astype(np.float64)
        finite = e64[np.isfinite(e64)]
        scale = float(np.max(np.abs(finite))) if finite.size else 0.0
        abs_err = _max_abs_err(a, e)
        worst_abs = max(worst_abs, abs_err)
        worst_rel = max(worst_rel, abs_err / scale if scale else 0.0)
        bound = leaf_atol + rtol * scale
        worst_of_bound = max(worst_of_bound, abs_err / bound)
        np.testing.assert_allclose(
            a.astype(np.float64),
            e64,
            rtol=0,
            atol=bound,
            equal_nan=True,
            err_msg=where,
        )
    print(
        f"{name}: max abs err {worst_abs:.3g}, max err / leaf scale {worst_rel:.3g}, "
        f"max err / bound {worst_of_bound:.3g}"
    )


# State entries both libraries keep, found by attribute name wherever they sit in the state
# (inside chains, masks, partitions, wrappers); optx's extra `hyperparams` are not compared.
SLOTS = ("mu", "nu", "trace", "ema")


def _slots(state: Any) -> dict[str, list[Any]]:
    """The leaves under each slot attribute of ``state``, in tree order, and the step counts."""
    out: dict[str, list[Any]] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        names = [k.name for k in path if isinstance(k, jax.tree_util.GetAttrKey)]
        slot = next((n for n in names if n in SLOTS), None)
        if slot is not None:
            out.setdefault(slot, []).append(leaf)
    counted = (
        optx.ScaleByAdamState,
        optx.EmaState,
        optax.ScaleByAdamState,
        optax.EmaState,
    )
    nodes: list[Any] = []

    def visit(node: Any) -> bool:
        if isinstance(node, counted):
            nodes.append(node)
            return True
        return False

    jax.tree_util.tree_flatten(state, is_leaf=visit)
    if nodes:
        out["count"] = [n.count for n in nodes]
    return out


@dataclasses.dataclass(frozen=True)
class Case:
    """One parity case.

    Attributes:
      id: the test id.
      optx_tx: builds the optx transform.
      optax_tx: builds the optax transform.
      slots: the `SLOTS` (and ``"count"``) the states must hold, compared entry by entry.
      extra: maps (optx state, optax state) to more ``{label: (optx entry, optax entry)}``.
      poison: ``(step, value)`` pairs: value added to one gradient element at that step.
      k: roundings of float32 hyperparameters an update goes through (see the bounds).
      trace_gain: ``1 / (1 - b)`` of a momentum trace ``g + b * trace``: its largest size
        in units of ``max|g|``.
    """

    id: str
    optx_tx: Callable[[], Any]
    optax_tx: Callable[[], Any]
    slots: tuple[str, ...] = ()
    extra: Callable[[Any, Any], dict[str, tuple[Any, Any]]] = lambda s, o: {}
    poison: tuple[tuple[int, float], ...] = ()
    k: float = 1.0
    trace_gain: float = 1.0


ADAM = ("mu", "nu", "count")


def _lr_schedule(count: jax.Array) -> jax.Array:
    return 0.1 * 0.97 ** count.astype(jnp.float32)


def _step_schedule(count: jax.Array) -> jax.Array:
    return -0.05 * (1.0 + jnp.cos(0.1 * count.astype(jnp.float32)))


def _doubler(updates: Any, params: Any) -> Any:
    return jax.tree.map(lambda u, p: 2.0 * u - 0.01 * p, updates, params)


# Decay the matrices and the 3-D kernel; leave vectors and the scalar alone.
MASK_TREE = {
    "dense": {"kernel": True, "bias": False},
    "blocks": [{"conv": True}, False],
    "scale": False,
}


def _mask_fn(params: Any) -> Any:
    return jax.tree.map(lambda p: p.ndim >= 2, params)


LABELS = {"dense": "adam", "blocks": ["sgd", "adam"], "scale": "frozen"}


def _label_fn(params: Any) -> Any:
    return jax.tree.map(lambda p: "adam" if p.ndim >= 2 else "sgd", params)


def _schedule_count(s: Any, o: Any) -> dict:
    return {"count": (s.count, o.count)}


def _sgd_schedule_count(s: Any, o: Any) -> dict:
    return {"lr count": (s[1].count, o[1].count)}


def _finite_counters(s: Any, o: Any) -> dict:
    return {
        "notfinite_count": (s.notfinite_count, o.notfinite_count),
        "last_finite": (s.last_finite, o.last_finite),
        "total_notfinite": (s.total_notfinite, o.total_notfinite),
    }


def _accumulated(s: Any, o: Any) -> dict:
    # optx keeps the sum of the gradients since the last update, optax their mean.
    return {
        "mini_step": (s.mini_step, o.mini_step),
        "acc_grads": (s.acc_grads, jax.tree.map(lambda a: a * o.mini_step, o.acc_grads)),
    }


def _found_nan(s: Any, o: Any) -> dict:
    return {"found_nan": (s[0].found_nan, o[0].found_nan)}


NAN, INF = float("nan"), float("inf")
# Isolated and consecutive non-finite steps, all within max_consecutive_errors=3 ...
SKIPPED = ((5, NAN), (20, INF), (21, -INF), (40, NAN), (41, NAN), (42, INF))
# ... and a run of 5 at the end: steps 95-97 are skipped, 98 and 99 applied anyway.
GIVE_UP = ((95, NAN), (96, NAN), (97, INF), (98, NAN), (99, -INF))

CASES = [
    Case("sgd", lambda: optx.sgd(0.05), lambda: optax.sgd(0.05)),
    Case(
        "sgd_momentum",
        lambda: optx.sgd(0.05, momentum=0.9),
        lambda: optax.sgd(0.05, momentum=0.9),
        ("trace",),
        k=K_SGD_MOMENTUM,
        trace_gain=10,  # 1 / (1 - 0.9)
    ),
    Case(
        "sgd_nesterov",
        lambda: optx.sgd(0.05, momentum=0.9, nesterov=True),
        lambda: optax.sgd(0.05, momentum=0.9, nesterov=True),
        ("trace",),
        k=K_SGD_MOMENTUM,
        trace_gain=10,  # 1 / (1 - 0.9)
    ),
    Case(
        "sgd_schedule",
        lambda: optx.sgd(_lr_schedule, momentum=0.5),
        lambda: optax.sgd(_lr_schedule, momentum=0.5),
        ("trace",),
        _sgd_schedule_count,
        k=1 + 1 + 1,  # the scheduled lr, b = 0.5 lag, one more for the float32 schedule
        trace_gain=2,
    ),
    Case(
        "adam",
        lambda: optx.adam(1e-2),
        lambda: optax.adam(1e-2),
        ADAM,
        k=K_ADAM,
    ),
    Case(
        "adam_nesterov",
        lambda: optx.adam(1e-2, nesterov=True),
        lambda: optax.adam(1e-2, nesterov=True),
        ADAM,
        k=K_ADAM,
    ),
    Case(
        "adam_eps_root",
        lambda: optx.adam(1e-2, b1=0.8, b2=0.99, eps=1e-6, eps_root=1e-8),
        lambda: optax.adam(1e-2, b1=0.8, b2=0.99, eps=1e-6, eps_root=1e-8),
        ADAM,
        k=K_ADAM,
    ),
    Case(
        "adamw_mask_tree",
        lambda: optx.adamw(1e-2, weight_decay=0.1, mask=MASK_TREE),
        lambda: optax.adamw(1e-2, weight_decay=0.1, mask=MASK_TREE),
        ADAM,
        k=K_ADAMW,
    ),
    Case(
        "adamw_mask_callable",
        lambda: optx.adamw(1e-2, weight_decay=0.1, mask=_mask_fn),
        lambda: optax.adamw(1e-2, weight_decay=0.1, mask=_mask_fn),
        ADAM,
        k=K_ADAMW,
    ),
    Case("scale", lambda: optx.scale(-0.03), lambda: optax.scale(-0.03)),
    Case(
        "scale_by_learning_rate",
        lambda: optx.scale_by_learning_rate(0.03),
        lambda: optax.scale_by_learning_rate(0.03),
    ),
    Case(
        "scale_by_learning_rate_schedule",
        lambda: optx.scale_by_learning_rate(_lr_schedule),
        lambda: optax.scale_by_learning_rate(_lr_schedule),
        extra=_schedule_count,
    ),
    Case(
        "scale_by_schedule",
        lambda: optx.scale_by_schedule(_step_schedule),
        lambda: optax.scale_by_schedule(_step_schedule),
        extra=_schedule_count,
    ),
    Case("clip", lambda: optx.clip(0.7), lambda: optax.clip(0.7)),
    Case(
        "clip_by_global_norm_always",
        lambda: optx.clip_by_global_norm(0.5),
        lambda: optax.clip_by_global_norm(0.5),
    ),
    Case(
        "clip_by_global_norm_never",
        lambda: optx.clip_by_global_norm(100.0),
        lambda: optax.clip_by_global_norm(100.0),
    ),
    Case(
        "clip_by_global_norm_sometimes",
        lambda: optx.clip_by_global_norm(MID_NORM),
        lambda: optax.clip_by_global_norm(MID_NORM),
    ),
    Case(
        "clip_by_block_rms",
        lambda: optx.clip_by_block_rms(0.8),
        lambda: optax.clip_by_block_rms(0.8),
    ),
    Case(
        "add_decayed_weights",
        lambda: optx.add_decayed_weights(0.02),
        lambda: optax.add_decayed_weights(0.02),
        # No learning rate: the parameters grow by 1 + 0.02 a step, carrying an early
        # rounding of the decay forward by up to 1.02**STEPS = 7.2.
        k=8,
    ),
    Case(
        "add_decayed_weights_mask",
        lambda: optx.add_decayed_weights(0.02, MASK_TREE),
        lambda: optax.add_decayed_weights(0.02, MASK_TREE),
        # No learning rate: the parameters grow by 1 + 0.02 a step, carrying an early
        # rounding of the decay forward by up to 1.02**STEPS = 7.2.
        k=8,
    ),
    Case(
        "trace",
        lambda: optx.trace(0.8),
        lambda: optax.trace(0.8),
        ("trace",),
        k=1 + 4,
        trace_gain=5,
    ),
    Case(
        "trace_nesterov",
        lambda: optx.trace(0.8, nesterov=True),
        lambda: optax.trace(0.8, nesterov=True),
        ("trace",),
        k=1 + 4 + 1,  # b = 0.8 lag, nesterov
        trace_gain=5,
    ),
    Case(
        "ema_debias", lambda: optx.ema(0.9), lambda: optax.ema(0.9), ("ema", "count"), k=9 + 1 + 3
    ),
    Case(
        "ema_no_debias",
        lambda: optx.ema(0.9, debias=False),
        lambda: optax.ema(0.9, debias=False),
        ("ema", "count"),
        k=9 + 1,  # b = 0.9 lag, 1 - b as float32
    ),
    Case("centralize", lambda: optx.centralize(), lambda: optax.centralize(), k=0),
    Case(
        "masked",
        lambda: optx.masked(optx.sgd(0.05, momentum=0.9), MASK_TREE),
        lambda: optax.masked(optax.sgd(0.05, momentum=0.9), MASK_TREE),
        ("trace",),
        k=K_SGD_MOMENTUM,
        trace_gain=10,  # 1 / (1 - 0.9)
    ),
    Case(
        "masked_callable",
        lambda: optx.masked(optx.adam(1e-2), _mask_fn),
        lambda: optax.masked(optax.adam(1e-2), _mask_fn),
        ADAM,
        k=K_ADAM,
    ),
    Case(
        "partition",
        lambda: optx.partition(
            {"adam": optx.adam(1e-2), "sgd": optx.sgd(0.05, 0.9), "frozen": optx.set_to_zero()},
            LABELS,
        ),
        lambda: optax.partition(
            {"adam": optax.adam(1e-2), "sgd": optax.sgd(0.05, 0.9), "frozen": optax.set_to_zero()},
            LABELS,
        ),
        ("mu", "nu", "count", "trace"),
        k=K_ADAM,  # covers the SGD leaves' K_SGD_MOMENTUM
        trace_gain=10,
    ),
    Case(
        "multi_transform_callable",
        lambda: optx.multi_transform(
            {"adam": optx.adam(1e-2), "sgd": optx.sgd(0.05, 0.5)}, _label_fn
        ),
        lambda: optax.partition({"adam": optax.adam(1e-2), "sgd": optax.sgd(0.05, 0.5)}, _label_fn),
        ("mu", "nu", "count", "trace"),
        k=K_ADAM,
        trace_gain=2,
    ),
    Case(
        "apply_if_finite",
        lambda: optx.apply_if_finite(optx.sgd(0.05, momentum=0.9), 3),
        lambda: optax.apply_if_finite(optax.sgd(0.05, momentum=0.9), 3),
        ("trace",),
        _finite_counters,
        poison=SKIPPED,
        k=K_SGD_MOMENTUM,
        trace_gain=10,  # 1 / (1 - 0.9)
    ),
    Case(
        "apply_if_finite_gives_up",
        lambda: optx.apply_if_finite(optx.adam(1e-2), 3),
        lambda: optax.apply_if_finite(optax.adam(1e-2), 3),
        ADAM,
        _finite_counters,
        poison=SKIPPED + GIVE_UP,
        k=K_ADAM,
    ),
    Case(
        "zero_nans",
        lambda: optx.chain(optx.zero_nans(), optx.sgd(0.05, momentum=0.9)),
        lambda: optax.chain(optax.zero_nans(), optax.sgd(0.05, momentum=0.9)),
        ("trace",),
        _found_nan,
        poison=((3, NAN), (50, NAN), (51, NAN), (99, NAN)),
        k=K_SGD_MOMENTUM,
        trace_gain=10,  # 1 / (1 - 0.9)
    ),
    Case(
        "accumulate_gradients",
        lambda: optx.accumulate_gradients(optx.adam(1e-2), every_k=3),
        lambda: optax.MultiSteps(optax.adam(1e-2), every_k_schedule=3),
        ADAM,
        _accumulated,
        k=K_ADAM,
    ),
    Case("identity", lambda: optx.identity(), lambda: optax.identity(), k=0),
    Case("set_to_zero", lambda: optx.set_to_zero(), lambda: optax.set_to_zero(), k=0),
    Case("stateless", lambda: optx.stateless(_doubler), lambda: optax.stateless(_doubler), k=0),
    Case(
        "chain",
        lambda: optx.chain(
            optx.clip_by_global_norm(MID_NORM),
            optx.scale_by_adam(b1=0.8),
            optx.add_decayed_weights(0.01),
            optx.scale_by_learning_rate(_lr_schedule),
        ),
        lambda: optax.chain(
            optax.clip_by_global_norm(MID_NORM),
            optax.scale_by_adam(b1=0.8),
            optax.add_decayed_weights(0.01),
            optax.scale_by_learning_rate(_lr_schedule),
        ),
        ADAM,
        k=1 + K_ADAM + 1,  # the clip threshold, Adam (b1 = 0.8: a shorter lag), the weight decay
    ),
    Case(
        "named_chain",
        lambda: optx.named_chain(
            ("clip", optx.clip(1.0)), ("adam", optx.scale_by_adam()), ("lr", optx.scale(-1e-2))
        ),
        lambda: optax.named_chain(
            ("clip", optax.clip(1.0)), ("adam", optax.scale_by_adam()), ("lr", optax.scale(-1e-2))
        ),
        ADAM,
        lambda s, o: {"keys": (sorted(s), sorted(o))},
        k=1 + K_ADAM + 1,  # the clip, Adam, the scale
    ),
]


def _poison(case_poison: tuple[tuple[int, float], ...]) -> np.ndarray | None:
    if not case_poison:
        return None
    poison = np.zeros(STEPS, np.float32)
    for step, value in case_poison:
        poison[step] = value
    return poison


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_parity_with_optax(case: Case) -> None:
    params = _params()
    grads = _grads(params, _poison(case.poison))
    p_optx, s_optx, _ = _run64(case.optx_tx(), optx.apply_updates, params, grads)
    p_optax, s_optax, path = _run64(case.optax_tx(), optax.apply_updates, params, grads)

    assert jax.tree.structure(p_optx) == jax.tree.structure(params)
    for a in jax.tree.leaves(p_optx):
        assert a.dtype == np.float64
    # Per leaf: k roundings of EPS32 / 2 on every step's update (see the bounds above).
    atols = [case.k * EPS32 / 2 * float(u) for u in jax.tree.leaves(path)]
    assert_close(f"{case.id} params", p_optx, p_optax, ROUNDOFF64, atols)

    slots_optx, slots_optax = _slots(s_optx), _slots(s_optax)
    assert sorted(slots_optx) == sorted(slots_optax) == sorted(case.slots)
    # A slot's error from the roundings is relative to the largest it can get (its terms'
    # size: cancellation leaves a slot near zero with its terms' error), not to its value:
    # ``max|g|`` for an average (mu, ema), ``max|g|**2`` for nu (b2's lag there is
    # ``(1 - b2) * sum_n n <= (1 - b2) * STEPS**2 / 2 = 5`` roundings, within k), and
    # ``max|g| / (1 - b)`` for a trace (`Case.trace_gain`).
    g_max = max(
        float(np.max(np.abs(g), where=np.isfinite(g), initial=0.0)) for g in jax.tree.leaves(grads)
    )
    terms = {"mu": g_max, "ema": g_max, "nu": g_max**2, "trace": case.trace_gain * g_max}
    for slot in case.slots:
        atol = case.k * EPS32 / 2 * terms.get(slot, 0.0)
        assert_close(
            f"{case.id} state.{slot}", slots_optx[slot], slots_optax[slot], ROUNDOFF64, atol
        )
    for label, (a, b) in case.extra(s_optx, s_optax).items():
        if label == "keys":
            assert a == b
        else:
            # Counters (exact), and sums of gradients (no hyperparameters: float64 round-off).
            assert_close(f"{case.id} state.{label}", a, b, ROUNDOFF64, ATOL)


@pytest.mark.parametrize("case_id", ["sgd", "sgd_momentum", "adam", "chain"])
def test_bounds_catch_a_learning_rate_off_by_1e3(case_id: str) -> None:
    """The parameter bounds are tight enough to see a learning rate 1.001 times too large:
    optax with ``optx``'s updates scaled by 1.001 falls outside them.
    """
    case = next(c for c in CASES if c.id == case_id)
    params = _params()
    grads = _grads(params)
    wrong = optx.chain(case.optx_tx(), optx.scale(1.001))
    p_wrong, _, _ = _run64(wrong, optx.apply_updates, params, grads)
    p_optax, _, path = _run64(case.optax_tx(), optax.apply_updates, params, grads)
    atols = [case.k * EPS32 / 2 * float(u) for u in jax.tree.leaves(path)]
    with pytest.raises(AssertionError):
        assert_close(f"{case_id} x 1.001 params", p_wrong, p_optax, ROUNDOFF64, atols)


# `mu_dtype=bfloat16`: optax multiplies the stored bfloat16 first moment by the Python float
# b1 in bfloat16 (a weakly typed float takes the array's dtype: b1 becomes 0.8984375, and
# ``b1 * mu`` is rounded to 8 bits) before adding ``(1 - b1) * g`` in float32; optx does the
# whole moment update in float32 and rounds only the result it stores. Over 100 steps the
# two trajectories drift apart by a sum of such roundings, which has no useful worst case;
# so the test runs them in lockstep: at every step of optax's run, optx's step from optax's
# state (`_adam_bf16_lockstep`). One step's differences are bounded per element:
# - the float32 moments, before rounding: ``|bf16(b1) - b1| |mu| + 2**-8 bf16(b1) |mu|``
#   (optax's product) plus BF16_MU_ROUNDINGS float32 roundings of the terms;
# - the stored moments: that, plus each side's rounding to bfloat16, 2**-8 of its value;
# - nu, float32 on both sides and the same formula: BF16_NU_ROUNDINGS of its terms;
# - the update ``m_hat / (sqrt(v_hat) + eps)``: the moments' difference over
#   ``bc1 (sqrt(v_hat) + eps)``, plus BF16_UPDATE_RTOL of its size for optax's float32
#   bias corrections (``1 - float32(b)**t``: ``|float32(b) - b| / (1 - b)`` relative, half
#   of it through the square root for b2) and float32 roundings.
# optax's b1 = 0.8984375 is the same at every step, so its term is reached: the largest
# error comes within 10% of its bound (the rest is the roundings' worst case).
# `test_numerics_reference.py` checks optx against a float64 loop that rounds mu to bfloat16.
BF16 = float(jnp.bfloat16(0.9))
BF16_MU_ROUNDINGS = 4  # two products, a sum; a contraction of them into a multiply-add
BF16_NU_ROUNDINGS = 4  # g**2, two products, a sum
BF16_UPDATE_RTOL = (
    0.5 * abs(float(np.float32(0.999)) - 0.999) / (1 - 0.999)
    + abs(float(np.float32(0.9)) - 0.9) / (1 - 0.9)
    + 10 * EPS32 / 2
)


def _adam_bf16_lockstep(params: Any, grads: Any) -> dict[str, Any]:
    """optax's ``scale_by_adam(mu_dtype=bfloat16)`` for STEPS steps (parameters moved by
    ``-1e-2`` times its updates) and, at each step, optx's step from optax's state. Returns
    per-step trees (leading axis: step): both sides' updates, moments, second moments, the
    gradients and the moment before the step.
    """
    ref = optax.scale_by_adam(mu_dtype=jnp.bfloat16)
    tx = optx.scale_by_adam(mu_dtype=jnp.bfloat16)

    @jax.jit
    def run(params: Any, grads: Any) -> dict[str, Any]:
        template = tx.init(params)

        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            mine = template._replace(count=s.count, mu=s.mu, nu=s.nu)
            u_ref, s_new = ref.update(g, s, p)
            u, mine = tx.update(g, mine, p)
            out = {
                "u": u,
                "u_ref": u_ref,
                "mu": mine.mu,
                "mu_ref": s_new.mu,
                "nu": mine.nu,
                "nu_ref": s_new.nu,
                "mu_before": s.mu,
                "nu_before": s.nu,
                "g": g,
            }
            p = optax.apply_updates(p, jax.tree.map(lambda x: -1e-2 * x, u_ref))
            return (p, s_new), out

        return jax.lax.scan(step, (params, ref.init(params)), grads)[1]

    return jax.tree.map(lambda x: np.asarray(x, np.float64), run(params, grads))


def test_parity_with_optax_adam_mu_bfloat16() -> None:
    params = _params()
    grads = _grads(params)
    steps = _adam_bf16_lockstep(params, grads)
    t = np.arange(1, STEPS + 1, dtype=np.float64)
    margins = []
    for leaf in zip(*(jax.tree.leaves(steps[k]) for k in sorted(steps)), strict=True):
        x = dict(zip(sorted(steps), leaf, strict=True))
        g, mu0, nu0 = x["g"], np.abs(x["mu_before"]), x["nu_before"]
        shape = (STEPS,) + (1,) * (g.ndim - 1)
        terms = 0.1 * np.abs(g) + 0.9 * mu0
        d_m = abs(BF16 - 0.9) * mu0 + 2.0**-8 * BF16 * mu0 + BF16_MU_ROUNDINGS * EPS32 / 2 * terms
        bounds = {
            "mu": d_m + 2.0**-8 * (np.abs(x["mu"]) + np.abs(x["mu_ref"])),
            "nu": BF16_NU_ROUNDINGS * EPS32 / 2 * (1e-3 * g**2 + 0.999 * nu0),
        }
        bc1, bc2 = (1 - 0.9**t).reshape(shape), (1 - 0.999**t).reshape(shape)
        denominator = bc1 * (np.sqrt(x["nu_ref"] / bc2) + 1e-8)
        bounds["u"] = d_m / denominator + BF16_UPDATE_RTOL * np.abs(x["u_ref"])
        for name, bound in bounds.items():
            err = np.abs(x[name] - x[f"{name}_ref"])
            assert np.all(err <= bound), (name, float(np.max(err / bound)))
            margins.append(float(np.max(err / np.where(bound > 0, bound, 1.0))))
    print(f"bfloat16 mu lockstep: largest error / bound {max(margins):.3g}")

    # Over whole runs, optx's rounding (once, in float32) keeps it the closer of the two to
    # float32 Adam.
    p_optx, s_optx = _run(optx.adam(1e-2, mu_dtype=jnp.bfloat16), optx.apply_updates, params, grads)
    p_optax, s_optax = _run(
        optax.adam(1e-2, mu_dtype=jnp.bfloat16), optax.apply_updates, params, grads
    )
    p_f32, s_f32 = _run(optax.adam(1e-2), optax.apply_updates, params, grads)
    for mu in (s_optx[0].mu, s_optax[0].mu):
        assert {leaf.dtype for leaf in jax.tree.leaves(mu)} == {jnp.dtype(jnp.bfloat16)}

    def err(a: Any, b: Any) -> float:
        pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
        return max(_max_abs_err(x, y) for x, y in pairs)

    optx_err, optax_err = err(p_optx, p_f32), err(p_optax, p_f32)
    print(f"bfloat16 mu, params error vs float32 Adam: optx {optx_err:.3g}, optax {optax_err:.3g}")
    assert optx_err < optax_err
    assert err(s_optx[0].mu, s_f32[0].mu) < err(s_optax[0].mu, s_f32[0].mu)


def test_gradients_exercise_the_clip() -> None:
    """The gradients make ``clip_by_global_norm(MID_NORM)`` trigger on some steps only."""
    leaves = [
        np.asarray(g, np.float64).reshape(STEPS, -1) for g in jax.tree.leaves(_grads(_params()))
    ]
    norms = np.sqrt(sum(np.sum(g**2, axis=1) for g in leaves))
    clipped = float(np.mean(norms >= MID_NORM))
    print(f"global norms in [{norms.min():.3g}, {norms.max():.3g}], clipped: {clipped:.0%}")
    assert 0.2 < clipped < 0.8


def test_poisoned_steps_are_counted() -> None:
    """The injected steps reach the counters: 6 skipped, then 5 in a row of which the last
    two are applied anyway (more than 3 in a row), making the poisoned element NaN.
    """
    params = _params()
    grads = _grads(params, _poison(SKIPPED + GIVE_UP))
    new, state = _run(optx.apply_if_finite(optx.sgd(0.05), 3), optx.apply_updates, params, grads)
    assert int(state.total_notfinite) == len(SKIPPED) + len(GIVE_UP)
    assert int(state.notfinite_count) == len(GIVE_UP)
    assert not bool(state.last_finite)
    kernel = np.asarray(new["dense"]["kernel"])
    assert np.isnan(kernel[0, 0])
    assert np.all(np.isfinite(kernel.ravel()[1:]))

    # Without the last two steps, every non-finite step is skipped and all stays finite.
    short = jax.tree.map(lambda g: g[:98], grads)
    new, state = _run(optx.apply_if_finite(optx.sgd(0.05), 3), optx.apply_updates, params, short)
    assert all(np.all(np.isfinite(np.asarray(p))) for p in jax.tree.leaves(new))
    assert int(state.notfinite_count) == 3


def test_multi_transform_is_partition() -> None:
    assert optx.multi_transform is optx.partition
