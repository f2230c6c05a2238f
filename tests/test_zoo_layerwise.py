"""Layer-wise optimizers: `scale_by_trust_ratio`, `lamb`, `lars`, `scale_by_novograd`,
`novograd` and `fromage`.

Parity with optax (100 jitted steps), float64 NumPy reference loops, parity with Keras's
`Lamb`, convergence, bfloat16, masks in every form `masked` accepts, and every error
message of the family.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_close as _close

import optx

STEPS = 100
# Float32 round-off after 100 steps, relative to each leaf's largest entry (see `_close`).
RTOL, ATOL = 1e-6, 1e-7
# Float32 against a float64 loop. The trust ratio feeds the parameters' norms back into
# every step, so round-off compounds over the 100 steps a little more than in plain SGD.
REF_RTOL, REF_ATOL = 2e-6, 1e-7


def _params() -> dict[str, Any]:
    """Matrices, a zero vector (a fresh bias: trust ratio 1), a 3-D kernel, a scalar."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> jax.Array:
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    return {
        "dense": {"kernel": normal(3, 4), "bias": jnp.zeros(4, jnp.float32)},
        "blocks": [{"conv": normal(2, 3, 2)}, normal(5)],
        "scale": normal(),
    }


def _grads(params: Any, steps: int = STEPS) -> Any:
    """Per-step gradients (leading axis: step) whose magnitude swings between 0.2 and 2.2."""
    rng = np.random.default_rng(1)
    magnitude = 0.2 + 2.0 * np.sin(0.3 * np.arange(steps)) ** 2

    def draw(p: jax.Array) -> jax.Array:
        g = rng.standard_normal((steps, *p.shape)) * magnitude.reshape((steps,) + (1,) * p.ndim)
        return jnp.asarray(g, jnp.float32)

    return jax.tree.map(draw, params)


def _run(tx: Any, apply_updates: Any, params: Any, grads: Any) -> tuple[Any, Any]:
    """Updates under one `jax.jit` of a `lax.scan`; the final params and state."""

    def run(params: Any, grads: Any) -> tuple[Any, Any]:
        def step(carry: tuple, g: Any) -> tuple:
            p, s = carry
            u, s = tx.update(g, s, p)
            return (apply_updates(p, u), s), None

        return jax.lax.scan(step, (params, tx.init(params)), grads)[0]

    return jax.jit(run)(params, grads)


def _matrices(params: Any) -> Any:
    return jax.tree.map(lambda p: p.ndim >= 2, params)


# The same selection as a regular expression (optx) and as a tree (optax).
KERNELS = "kernel|conv"
KERNELS_TREE = {
    "dense": {"kernel": True, "bias": False},
    "blocks": [{"conv": True}, False],
    "scale": False,
}


# --------------------------------------------------------------------------------------
# Parity with optax.

PARITY = {
    "lamb": (
        lambda: optx.lamb(1e-2, weight_decay=1e-2, mask=KERNELS),
        lambda: optax.lamb(1e-2, weight_decay=1e-2, mask=KERNELS_TREE),
    ),
    "lars": (lambda: optx.lars(0.1), lambda: optax.lars(0.1)),
    "lars_masks_nesterov": (
        lambda: optx.lars(
            0.1,
            1e-3,
            _matrices,
            trust_coefficient=0.01,
            eps=1e-3,
            trust_ratio_mask=KERNELS,
            nesterov=True,
        ),
        lambda: optax.lars(
            0.1,
            1e-3,
            _matrices,
            trust_coefficient=0.01,
            eps=1e-3,
            trust_ratio_mask=KERNELS_TREE,
            nesterov=True,
        ),
    ),
    "novograd": (
        lambda: optx.novograd(1e-2, weight_decay=1e-3, eps_root=1e-8),
        lambda: optax.novograd(1e-2, weight_decay=1e-3, eps_root=1e-8),
    ),
    "fromage": (lambda: optx.fromage(1e-2), lambda: optax.fromage(1e-2)),
    "scale_by_trust_ratio": (
        lambda: optx.chain(optx.scale_by_trust_ratio(0.5, 0.3, 1e-3), optx.scale(-1e-2)),
        lambda: optax.chain(optax.scale_by_trust_ratio(0.5, 0.3, 1e-3), optax.scale(-1e-2)),
    ),
}


def _slots(case: str, ours: Any, theirs: Any) -> dict[str, tuple[Any, Any]]:
    """State entries both libraries keep."""
    if case == "lamb":
        return {s: (getattr(ours[0], s), getattr(theirs[0], s)) for s in ("mu", "nu", "count")}
    if case.startswith("lars"):
        return {"trace": (ours[3].trace, theirs[3].trace)}
    if case == "novograd":
        return {s: (getattr(ours[0], s), getattr(theirs[0], s)) for s in ("mu", "nu", "count")}
    return {}


@pytest.mark.parametrize("case", sorted(PARITY))
def test_matches_optax(case: str) -> None:
    params = _params()
    grads = _grads(params)
    ours, our_state = _run(PARITY[case][0](), optx.apply_updates, params, grads)
    theirs, their_state = _run(PARITY[case][1](), optax.apply_updates, params, grads)
    # Measured (max error / leaf scale): lars, lars_masks_nesterov and scale_by_trust_ratio
    # 0 (bit for bit), fromage 1.9e-7, novograd 2.4e-7 (a sum of squares where optax squares
    # a norm), lamb 6.5e-6 but 3.6e-7 absolute: the zero-initialised bias takes a plain Adam
    # step first (trust ratio 1), where optx's exact bias corrections differ from optax's
    # by ~1e-5; later the trust ratio normalises that difference away.
    _close(f"{case} params", ours, theirs, RTOL, ATOL)
    for slot, (a, b) in _slots(case, our_state, their_state).items():
        _close(f"{case} {slot}", a, b, RTOL, ATOL)


# --------------------------------------------------------------------------------------
# NumPy references (float64), one loop per optimizer.


def _np(tree: Any) -> list[np.ndarray]:
    return [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]


def _trust(u: np.ndarray, p: np.ndarray, floor: float = 0.0, c: float = 1.0, eps: float = 0.0):
    pn, un = max(np.linalg.norm(p), floor), max(np.linalg.norm(u), floor)
    return 1.0 if pn == 0 or un == 0 else c * pn / (un + eps)


def _np_lamb(params: Any, grads: Any, lr: float, wd: float, decayed: list[bool], outside: bool):
    ps, gs = _np(params), _np(grads)
    b1, b2, eps = 0.9, 0.999, 1e-6
    m = [np.zeros_like(p) for p in ps]
    v = [np.zeros_like(p) for p in ps]
    for t in range(1, gs[0].shape[0] + 1):
        for i, p in enumerate(ps):
            g = gs[i][t - 1]
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            r = (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps)
            decay = wd * p if decayed[i] else 0.0
            inner = r if outside else r + decay
            u = _trust(inner, p) * inner + (decay if outside else 0.0)
            ps[i] = p - lr * u
    return ps


def _np_lars(params: Any, grads: Any, lr: float, wd: float, c: float, eps: float, mu: float):
    ps, gs = _np(params), _np(grads)
    decayed = [p.ndim >= 2 for p in ps]  # `_matrices`
    trusted = jax.tree.leaves(KERNELS_TREE)
    tr = [np.zeros_like(p) for p in ps]
    for t in range(gs[0].shape[0]):
        for i, p in enumerate(ps):
            d = gs[i][t] + (wd * p if decayed[i] else 0.0)
            d = d * (_trust(d, p, 0.0, c, eps) if trusted[i] else 1.0)
            d = -lr * d
            tr[i] = d + mu * tr[i]
            ps[i] = p + d + mu * tr[i]  # Nesterov
    return ps


def _np_novograd(params: Any, grads: Any, lr: float, wd: float):
    ps, gs = _np(params), _np(grads)
    b1, b2, eps = 0.9, 0.25, 1e-6
    m = [np.zeros_like(p) for p in ps]
    v = [0.0 for _ in ps]
    for t in range(gs[0].shape[0]):
        for i, p in enumerate(ps):
            g = gs[i][t]
            sq = float(np.sum(g * g))
            v[i] = sq if t == 0 else b2 * v[i] + (1 - b2) * sq
            m[i] = b1 * m[i] + g / (np.sqrt(v[i]) + eps) + wd * p
            ps[i] = p - lr * m[i]
    return ps


def _np_fromage(params: Any, grads: Any, lr: float, floor: float):
    ps, gs = _np(params), _np(grads)
    for t in range(gs[0].shape[0]):
        for i, p in enumerate(ps):
            g = gs[i][t]
            ps[i] = (p - lr * _trust(g, p, floor) * g) / np.sqrt(1 + lr * lr)
    return ps


REFERENCES = {
    "lamb": (
        lambda: optx.lamb(1e-2, weight_decay=0.1, mask=KERNELS),
        lambda p, g: _np_lamb(p, g, 1e-2, 0.1, jax.tree.leaves(KERNELS_TREE), outside=False),
    ),
    "lamb_outside": (
        lambda: optx.lamb(1e-2, weight_decay=0.1, mask=KERNELS, weight_decay_placement="outside"),
        lambda p, g: _np_lamb(p, g, 1e-2, 0.1, jax.tree.leaves(KERNELS_TREE), outside=True),
    ),
    "lars": (
        PARITY["lars_masks_nesterov"][0],
        lambda p, g: _np_lars(p, g, 0.1, 1e-3, 0.01, 1e-3, 0.9),
    ),
    "novograd": (
        lambda: optx.novograd(1e-2, weight_decay=1e-3),
        lambda p, g: _np_novograd(p, g, 1e-2, 1e-3),
    ),
    "fromage": (lambda: optx.fromage(0.05, 0.5), lambda p, g: _np_fromage(p, g, 0.05, 0.5)),
}


@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_matches_a_float64_reference(case: str) -> None:
    params = _params()
    grads = _grads(params)
    ours, _ = _run(REFERENCES[case][0](), optx.apply_updates, params, grads)
    # Measured: lamb 3.1e-7, lamb_outside 4.6e-7, lars 5.2e-7, novograd 5.2e-7,
    # fromage 3.7e-7.
    _close(
        f"{case} vs float64",
        jax.tree.leaves(ours),
        REFERENCES[case][1](params, grads),
        REF_RTOL,
        REF_ATOL,
    )


def _keras_lamb(params: Any, grads: Any, steps: int, weight_decay: float | None) -> list:
    import keras

    assert keras.backend.backend() == "jax"
    variables = [keras.Variable(np.asarray(p)) for p in jax.tree.leaves(params)]
    opt = keras.optimizers.Lamb(learning_rate=1e-2, weight_decay=weight_decay)
    for t in range(steps):
        opt.apply_gradients(
            [(np.asarray(g[t]), v) for g, v in zip(jax.tree.leaves(grads), variables, strict=True)]
        )
    return [np.asarray(v) for v in variables]


def test_lamb_matches_keras() -> None:
    params = _params()
    grads = _grads(params, 20)
    keras_params = _keras_lamb(params, grads, 20, None)
    tx = optx.lamb(1e-2, eps=1e-7, weight_decay_placement="outside")
    ours, _ = _run(tx, optx.apply_updates, params, grads)
    # Measured: 7.8e-8 absolute (6.7e-6 of the zero-initialised bias's scale: its first,
    # untrusted step shows Keras's float32 `1 - beta**t`).
    _close("keras lamb", jax.tree.leaves(ours), keras_params, 1e-6, 1e-7)


def test_lamb_decay_outside_is_keras_to_first_order() -> None:
    # Keras decays w by lr*wd*w before the step and takes ||w|| after that decay, so its trust
    # ratio is (1 - lr*wd) times ours: per step a difference of lr**2 * wd * ||w||.
    params = _params()
    grads = _grads(params, 20)
    keras_params = _keras_lamb(params, grads, 20, 0.1)
    err = {}
    for placement in ("inside", "outside"):
        tx = optx.lamb(1e-2, eps=1e-7, weight_decay=0.1, weight_decay_placement=placement)
        ours, _ = _run(tx, optx.apply_updates, params, grads)
        err[placement] = _close(f"keras lamb, decay {placement}", ours, keras_params, 1, 0)
    # Measured: outside 1.7e-4 (20 * lr**2 * wd = 2e-4), inside 3.9e-2.
    assert err["outside"] < 2.5e-4 < 1e-2 < err["inside"]


# --------------------------------------------------------------------------------------
# Masks, convergence, bfloat16.

MASKS = [KERNELS, ["kernel", "conv"], KERNELS_TREE, _matrices]


@pytest.mark.parametrize("mask", MASKS, ids=["regex", "regexes", "tree", "callable"])
def test_masks_in_every_form_select_the_same_leaves(mask: Any) -> None:
    params = _params()
    grads = jax.tree.map(lambda g: g[0], _grads(params, 1))
    for build in (
        lambda m: optx.lamb(1e-2, weight_decay=0.5, mask=m),
        lambda m: optx.lars(0.1, 0.5, weight_decay_mask=m, trust_ratio_mask=m),
    ):
        tx, plain = build(mask), build(KERNELS_TREE)
        got = tx.update(grads, tx.init(params), params)[0]
        want = plain.update(grads, plain.init(params), params)[0]
        np.testing.assert_equal(jax.tree.map(np.asarray, got), jax.tree.map(np.asarray, want))
    # Unselected leaves are not decayed: they move as without weight decay.
    tx, free = optx.lamb(1e-2, weight_decay=0.5, mask=mask), optx.lamb(1e-2)
    got = tx.update(grads, tx.init(params), params)[0]
    want = free.update(grads, free.init(params), params)[0]
    np.testing.assert_array_equal(got["blocks"][1], want["blocks"][1])
    assert not np.allclose(got["dense"]["kernel"], want["dense"]["kernel"])


def _minimise(tx: Any, loss: Any, x0: jax.Array, steps: int) -> jax.Array:
    def step(carry: tuple, _: Any) -> tuple:
        p, s = carry
        u, s = tx.update(jax.grad(loss)(p), s, p)
        return (optx.apply_updates(p, u), s), None

    return jax.jit(lambda p: jax.lax.scan(step, (p, tx.init(p)), None, length=steps)[0][0])(x0)


def _decaying(lr: float, steps: int) -> Any:
    """``lr`` decaying geometrically to ``lr / 1000`` over ``steps``: trust-ratio steps have
    a size proportional to the weights' norm, so a constant rate keeps circling a minimum.
    """
    return lambda count: lr * 1e-3 ** (count.astype(jnp.float32) / steps)


TARGET = jnp.array([1.0, -2.0, 3.0])

# (optimizer on the parabola, tolerance); 500 steps from (0.5, 0.5, 0.5).
PARABOLA = {
    "lamb": (optx.lamb(_decaying(0.1, 500)), 1e-3),
    "lars": (optx.lars(_decaying(0.1, 500), trust_coefficient=1.0), 1e-3),
    "novograd": (optx.novograd(_decaying(1e-2, 500)), 1e-3),
    "fromage": (optx.fromage(_decaying(0.1, 500)), 1e-3),
}
# Rosenbrock from (-1.5, 2.0), 2000 steps; (optimizer, tolerance on the distance to (1, 1)).
# NovoGrad's normalised steps with a constant rate leave it 4e-4 away: a looser 1e-3.
ROSENBROCK = {
    "lamb": (optx.lamb(_decaying(0.1, 2000)), 1e-3),
    "lars": (optx.lars(_decaying(0.01, 2000), trust_coefficient=1.0), 1e-3),
    "novograd": (optx.novograd(1e-3), 1e-3),
    "fromage": (optx.fromage(_decaying(0.3, 2000)), 1e-3),
}


@pytest.mark.parametrize("name", sorted(PARABOLA))
def test_minimises_a_parabola(name: str) -> None:
    tx, tol = PARABOLA[name]
    x = _minimise(tx, lambda p: jnp.sum((p - TARGET) ** 2), jnp.full(3, 0.5), 500)
    np.testing.assert_allclose(x, TARGET, atol=tol)


@pytest.mark.parametrize("name", sorted(ROSENBROCK))
def test_minimises_rosenbrock(name: str) -> None:
    tx, tol = ROSENBROCK[name]

    def rosenbrock(p: jax.Array) -> jax.Array:
        return (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2

    x = _minimise(tx, rosenbrock, jnp.array([-1.5, 2.0]), 2000)
    np.testing.assert_allclose(x, [1.0, 1.0], atol=tol)


BF16 = {
    "lamb": optx.lamb(1e-2, weight_decay=1e-2, mu_dtype=jnp.float32, nu_dtype=jnp.float32),
    "lars": optx.lars(0.1, 1e-3, accumulator_dtype=jnp.float32),
    "novograd": optx.novograd(1e-2, mu_dtype=jnp.float32, nu_dtype=jnp.float32),
    "fromage": optx.fromage(1e-2),
}


@pytest.mark.parametrize("name", sorted(BF16))
def test_bfloat16_params_with_float32_moments_follow_float32(name: str) -> None:
    params = _params()
    grads = _grads(params, 20)
    tx = BF16[name]
    ref, _ = _run(tx, optx.apply_updates, params, grads)
    got, state = _run(tx, optx.apply_updates, *jax.tree.map(jnp.bfloat16, (params, grads)))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(got))
    moments = [x for x in jax.tree.leaves(state) if x.ndim or x.dtype != jnp.int32]
    assert all(x.dtype == jnp.float32 for x in moments), name
    # bfloat16 parameters round by up to 2^-9 (relative) at each of the 20 steps, and the
    # steps are ~1e-2 of their scale. Measured: lamb 1.5e-2, lars 5.2e-3, novograd 2.2e-2,
    # fromage 8.2e-3.
    _close(f"{name} bfloat16", got, ref, 3e-2, 0.0)


# --------------------------------------------------------------------------------------
# Errors.

P = {"w": jnp.ones(2)}

ERRORS = [
    (
        lambda: optx.scale_by_trust_ratio(min_norm=-1.0),
        ValueError,
        "`scale_by_trust_ratio` needs min_norm finite and >= 0. Received: min_norm=-1.0.",
    ),
    (
        lambda: optx.scale_by_trust_ratio(trust_coefficient=-0.1),
        ValueError,
        "`scale_by_trust_ratio` needs trust_coefficient finite and >= 0. "
        "Received: trust_coefficient=-0.1.",
    ),
    (
        lambda: optx.scale_by_trust_ratio(eps=float("inf")),
        ValueError,
        "`scale_by_trust_ratio` needs eps finite and >= 0. Received: eps=inf.",
    ),
    (
        lambda: optx.scale_by_trust_ratio().update(P, optx.scale_by_trust_ratio().init(P)),
        ValueError,
        "`scale_by_trust_ratio.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
    ),
    (
        lambda: optx.scale_by_trust_ratio().update({"v": jnp.ones(2)}, None, P),
        ValueError,
        "`scale_by_trust_ratio.update` needs updates with the structure of params. "
        "Received: missing from updates: 'w'; not in params: 'v'.",
    ),
    (
        lambda: optx.lamb(-1e-3),
        ValueError,
        "`lamb` needs learning_rate finite and >= 0. Received: learning_rate=-0.001.",
    ),
    (lambda: optx.lamb(1e-3, b1=1.0), ValueError, "`lamb` needs b1 in [0, 1). Received: b1=1.0."),
    (
        lambda: optx.lamb(1e-3, eps=-1e-6),
        ValueError,
        "`lamb` needs eps finite and >= 0. Received: eps=-1e-06.",
    ),
    (
        lambda: optx.lamb(1e-3, weight_decay=-0.1),
        ValueError,
        "`lamb` needs weight_decay finite and >= 0. Received: weight_decay=-0.1.",
    ),
    (
        lambda: optx.lamb(1e-3, weight_decay_placement="keras"),
        ValueError,
        "`lamb` needs weight_decay_placement to be 'inside' or 'outside'. "
        "Received: weight_decay_placement='keras'.",
    ),
    (
        lambda: optx.lamb(1e-3, mask=[1, 2]),
        TypeError,
        "`masked` needs mask to be a pytree of bools, a callable returning one, or regular "
        "expressions on parameter paths. Received: a mask with leaf 1.",
    ),
    (
        lambda: optx.lamb(1e-3, mu_dtype=jnp.int8),
        TypeError,
        "`lamb` needs mu_dtype to be None or a floating dtype. "
        "Received: mu_dtype=<class 'jax.numpy.int8'>.",
    ),
    (
        lambda: optx.lars(0.1, momentum=1.5),
        ValueError,
        "`lars` needs momentum in [0, 1]. Received: momentum=1.5.",
    ),
    (
        lambda: optx.lars(0.1, trust_coefficient=-1.0),
        ValueError,
        "`lars` needs trust_coefficient finite and >= 0. Received: trust_coefficient=-1.0.",
    ),
    (
        lambda: optx.lars(0.1, eps=-1.0),
        ValueError,
        "`lars` needs eps finite and >= 0. Received: eps=-1.0.",
    ),
    (
        lambda: optx.lars(0.1, weight_decay=-1.0),
        ValueError,
        "`lars` needs weight_decay finite and >= 0. Received: weight_decay=-1.0.",
    ),
    (
        lambda: optx.lars(0.1, accumulator_dtype="int32"),
        TypeError,
        "`lars` needs accumulator_dtype to be None or a floating dtype. "
        "Received: accumulator_dtype='int32'.",
    ),
    (
        lambda: optx.novograd(1e-2, b2=1.0),
        ValueError,
        "`novograd` needs b2 in [0, 1). Received: b2=1.0.",
    ),
    (
        lambda: optx.novograd(1e-2, eps_root=-1.0),
        ValueError,
        "`novograd` needs eps_root finite and >= 0. Received: eps_root=-1.0.",
    ),
    (
        lambda: optx.novograd(1e-2, nu_dtype="int8"),
        TypeError,
        "`novograd` needs nu_dtype to be None or a floating dtype. Received: nu_dtype='int8'.",
    ),
    (
        lambda: optx.scale_by_novograd(weight_decay=-1.0),
        ValueError,
        "`scale_by_novograd` needs weight_decay finite and >= 0. Received: weight_decay=-1.0.",
    ),
    (
        lambda: optx.scale_by_novograd().init({"w": jnp.ones(2, jnp.int32)}),
        TypeError,
        "`scale_by_novograd.init` needs floating-point params (float16, bfloat16, float32 or "
        "float64). Received: params['w'] of dtype int32. Keep other leaves out of the "
        "optimised tree, or route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
    (
        lambda: optx.scale_by_novograd().update(P, optx.scale_by_novograd().init(P)),
        ValueError,
        "`scale_by_novograd.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
    ),
    (
        lambda: optx.scale_by_novograd().update(
            {"v": jnp.ones(2)}, optx.scale_by_novograd().init(P), P
        ),
        ValueError,
        "`scale_by_novograd.update` needs updates with the structure of the state. "
        "Received: missing from updates: 'w'; not in the state: 'v'.",
    ),
    (
        lambda: optx.fromage(-0.1),
        ValueError,
        "`fromage` needs learning_rate finite and >= 0. Received: learning_rate=-0.1.",
    ),
    (
        lambda: optx.fromage(0.1, min_norm=-1e-6),
        ValueError,
        "`fromage` needs min_norm finite and >= 0. Received: min_norm=-1e-06.",
    ),
    (
        lambda: optx.fromage(0.1).update(P, optx.fromage(0.1).init(P)),
        ValueError,
        "`scale_by_trust_ratio.update` needs the current parameters. Received: params=None. "
        "Call `update(updates, state, params)`.",
    ),
]


@pytest.mark.parametrize("call, error, message", ERRORS)
def test_error_message(call: Any, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message
