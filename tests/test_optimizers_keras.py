"""Numerics of the Keras-style classes in `optx.optimizers`.

Checked against Keras 3 itself (JAX backend, ``stateless_apply``) for every class and every
common argument, against the golden values of the tf.keras documentation, against NumPy
loops written here (Keras's Adam, SGD with momentum and weight decay, OptimizerV2's
``decay``), and, with hypothesis, against the functional optx optimizer of each class.
Errors, configs, save/load and repr are tested elsewhere.
"""

import dataclasses
import os
import zlib

os.environ["KERAS_BACKEND"] = "jax"  # before keras is imported

import jax
import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from keras_reference import keras_runner, run_optx

import optx

OX = optx.optimizers
K = keras.optimizers

# Parity bound: max |optx - reference| <= RTOL * max(1, |w|), elementwise, over every step
# and leaf. Both sides run the same float32 formulas, fused and ordered differently by XLA,
# so the parameters drift apart by a few ulps over the steps. The largest share is Keras's:
# it rounds 1 - beta_2**t in float32 (a cancellation, ~1e-4 relative at t=1), which biases
# every Adam-family step the same way. Measured over 36 steps against a float64 run of the
# same cases: optx within 6.5e-7, Keras within 1.7e-6 at learning rate 0.01 (and 5e-6 at
# 0.04, hence Adam learning rates <= 0.01 with beta_2 = 0.999 below); optx vs Keras at most
# 1.6e-6, and optx vs the NumPy loops below at most 7.2e-7. Formula differences (epsilon
# placement, the step a schedule sees, the order of decay and momentum) give 1e-4 to 1e-1.
RTOL = 2e-6
STEPS = 36
# Gradient scales: 1, and 1e-5, where sqrt(v) is close to epsilon, so epsilon's placement
# (inside or outside the sqrt, before or after the bias correction) shows.
SCALES = (1.0, 1e-5)

SHAPES = {
    "kernel": (4, 3),
    "bias": (3,),
    "conv": (2, 3, 4),  # rank 3: Adafactor factors its last two axes; Muon routes it to Adam
    "embedding": (5, 3),  # 2-D but routed to Adam by Muon's exclude_embeddings
    "head": (3, 2),  # 2-D, for Muon's exclude_layers
}
BASE = ("kernel", "bias")
LEAVES = {"Adafactor": (*BASE, "conv"), "Muon": (*BASE, "conv", "embedding", "head")}


def make_params(leaves, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=SHAPES[n]).astype(np.float32) for n in leaves}


def make_grads(params, n, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return [
        {k: (rng.normal(size=v.shape) * scale).astype(np.float32) for k, v in params.items()}
        for _ in range(n)
    ]


def max_rel_err(got, want):
    """``max |got - want| / max(1, |want|)`` over steps, leaves and elements, and where."""
    worst = (0.0, None, None)
    for step, (g, w) in enumerate(zip(got, want, strict=True), start=1):
        for name in w:
            err = np.abs(g[name].astype(np.float64) - w[name]) / np.maximum(1.0, np.abs(w[name]))
            if err.max() > worst[0]:
                worst = (float(err.max()), step, name)
    return worst


def assert_parity(got, want, what):
    err, step, leaf = max_rel_err(got, want)
    assert err <= RTOL, (
        f"{what}: optx differs from the reference by {err:.3g} (relative to max(1, |w|)) at "
        f"step {step}, leaf {leaf!r}; the bound is {RTOL:g}"
    )


@dataclasses.dataclass(frozen=True)
class Sched:
    """A schedule built with the same arguments from Keras's and from optx's namespace."""

    name: str
    kwargs: tuple

    def build(self, namespace):
        return getattr(namespace, self.name)(**dict(self.kwargs))


def sched(name, **kwargs):
    return Sched(name, tuple(kwargs.items()))


def build(namespace, cls, kw, exclude):
    kw = {k: v.build(namespace.schedules) if isinstance(v, Sched) else v for k, v in kw.items()}
    if namespace is OX and kw.get("use_ema"):
        kw["ema_start"] = "first_step"  # Keras 3's EMA: the average starts at the first step
    opt = getattr(namespace, cls)(**kw)
    if exclude:
        opt.exclude_from_weight_decay(var_names=list(exclude))
    return opt


# One jitted Keras step per case, shared by both gradient scales.
_KERAS_RUNNERS = {}


def check_case(case_id, cls, kw, scale, exclude=()):
    """Runs optx and Keras on the same random gradients and compares every step."""
    params = make_params(LEAVES.get(cls, BASE))
    if case_id not in _KERAS_RUNNERS:
        _KERAS_RUNNERS[case_id] = keras_runner(build(K, cls, kw, exclude), params)
    grads = make_grads(params, STEPS, zlib.crc32(case_id.encode()), scale)
    want, keras_vars = _KERAS_RUNNERS[case_id](grads)
    opt = build(OX, cls, kw, exclude)
    got = run_optx(opt, params, grads)
    assert_parity(got, want, f"{cls}({kw}) at gradient scale {scale:g}")
    if kw.get("use_ema"):
        # The moving averages themselves (they reach the parameters only on overwrites).
        averages = {
            n: next(v for p, v in keras_vars.items() if p.endswith(f"/{n}_average")) for n in params
        }
        finalized = opt.finalize_variable_values({n: got[-1][n] for n in params})
        finalized = {n: np.asarray(v) for n, v in finalized.items()}
        assert_parity([finalized], [averages], f"{cls}({kw}) EMA averages at scale {scale:g}")


# -- 1. every class against Keras, defaults and own hyperparameters --------------------------

CLASS_CASES = [
    ("SGD", {}),
    ("SGD", {"learning_rate": 0.05, "momentum": 0.9}),
    ("SGD", {"learning_rate": 0.05, "momentum": 0.8, "nesterov": True}),
    ("RMSprop", {}),
    ("RMSprop", {"learning_rate": 0.01, "rho": 0.8, "momentum": 0.5, "epsilon": 1e-5}),
    ("RMSprop", {"learning_rate": 0.01, "rho": 0.95, "epsilon": 1e-6, "centered": True}),
    ("Adam", {}),
    ("Adam", {"learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-5}),
    ("Adam", {"learning_rate": 0.01, "beta_2": 0.95, "amsgrad": True}),
    ("AdamW", {}),
    ("AdamW", {"learning_rate": 0.01, "weight_decay": 0.05, "beta_1": 0.85, "amsgrad": True}),
    ("Adadelta", {}),
    ("Adadelta", {"learning_rate": 1.0, "rho": 0.9, "epsilon": 1e-6}),
    ("Adagrad", {}),
    ("Adagrad", {"learning_rate": 0.1, "initial_accumulator_value": 0.01, "epsilon": 1e-5}),
    ("Adamax", {}),
    ("Adamax", {"learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.95, "epsilon": 1e-5}),
    ("Nadam", {}),
    ("Nadam", {"learning_rate": 0.01, "beta_1": 0.85, "beta_2": 0.99, "epsilon": 1e-5}),
    ("Ftrl", {}),
    (
        "Ftrl",
        {
            "learning_rate": 0.1,
            "learning_rate_power": -0.7,
            "initial_accumulator_value": 0.2,
            "l1_regularization_strength": 0.01,
            "l2_regularization_strength": 0.02,
            "l2_shrinkage_regularization_strength": 0.03,
            "beta": 0.1,
        },
    ),
    ("Lion", {}),
    ("Lion", {"learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.95}),
    ("Lamb", {}),
    ("Lamb", {"learning_rate": 0.01, "beta_1": 0.85, "beta_2": 0.99, "epsilon": 1e-5}),
    ("Adafactor", {}),
    (
        "Adafactor",
        {
            "learning_rate": 0.01,
            "beta_2_decay": -0.5,
            "epsilon_1": 1e-20,
            "epsilon_2": 1e-2,
            "clip_threshold": 0.5,
        },
    ),
    ("Adafactor", {"learning_rate": 0.5, "relative_step": False}),
    ("Muon", {}),
    (
        "Muon",
        {
            "learning_rate": 0.02,
            "adam_beta_1": 0.8,
            "adam_beta_2": 0.99,
            "adam_weight_decay": 0.01,
            "epsilon": 1e-6,
            "weight_decay": 0.02,
            "exclude_embeddings": False,
            "muon_a": 3.0,
            "muon_b": -3.2,
            "muon_c": 1.2,
            "momentum": 0.9,
            "ns_steps": 3,
            "nesterov": False,
            "rms_rate": 0.3,
        },
    ),
    ("Muon", {"learning_rate": 0.01, "rms_rate": None}),
]


def _ids(cases):
    seen = {}
    out = []
    for cls, kw, *_ in cases:
        keys = "defaults" if not kw else "-".join(sorted(kw)) if len(kw) <= 5 else "many"
        base = f"{cls}-{keys}"
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}{seen[base]}")
    return out


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize(("cls", "kw"), CLASS_CASES, ids=_ids(CLASS_CASES))
def test_class_matches_keras(cls, kw, scale):
    check_case(f"class/{cls}/{sorted(kw.items())}", cls, kw, scale)


def test_every_class_is_compared_with_defaults():
    # Wrappers (Optimizer, LossScaleOptimizer, MultiOptimizer), OptimizerMap and Variable
    # are not classes with their own step.
    classes = {
        n
        for n in OX.__dict__
        if n[0].isupper() and n not in ("Variable", "OptimizerMap") and not n.endswith("Optimizer")
    }
    assert classes == {cls for cls, kw in CLASS_CASES if not kw}
    assert classes == {cls for cls, kw in CLASS_CASES if kw}


def test_muon_epsilon_is_only_the_adam_branchs():
    """Keras's Newton-Schulz step divides by ``||X||_F + 1e-7``, a constant, whatever the
    ``epsilon`` (which is the AdamW branch's epsilon-hat). Only the Muon branch here."""
    params = make_params(("kernel", "head"))
    grads = make_grads(params, STEPS, seed=7, scale=1e-5)
    kw = {"epsilon": 1e-5, "weight_decay": None}
    want, _ = keras_runner(K.Muon(**kw), params)(grads)
    assert_parity(
        run_optx(OX.Muon(**kw), params, grads),
        want,
        "Muon(epsilon=1e-5) on 2-D parameters at gradient scale 1e-5 (Keras uses epsilon only "
        "in the AdamW branch; its Newton-Schulz normalisation adds a fixed 1e-7)",
    )


# -- 2. the common arguments against Keras ---------------------------------------------------

EXP = sched("ExponentialDecay", initial_learning_rate=0.1, decay_steps=5, decay_rate=0.5)
COMMON_CASES = [
    # weight decay (decoupled, times the LR, before the step; Lamb and Adafactor read w)
    ("SGD", {"learning_rate": 0.05, "momentum": 0.9, "weight_decay": 0.1}, ()),
    ("Adam", {"learning_rate": 0.01, "weight_decay": 0.2}, ()),
    ("Lamb", {"learning_rate": 0.01, "weight_decay": 0.1}, ()),
    ("Adafactor", {"learning_rate": 0.01, "weight_decay": 0.1}, ()),
    ("RMSprop", {"learning_rate": 0.01, "weight_decay": 0.05, "clipnorm": 0.5}, ()),
    # clipping
    ("Adam", {"learning_rate": 0.01, "clipnorm": 0.5}, ()),
    ("Adagrad", {"learning_rate": 0.1, "clipnorm": 0.3}, ()),
    ("SGD", {"learning_rate": 0.05, "momentum": 0.5, "clipvalue": 0.3}, ()),
    ("Adamax", {"learning_rate": 0.01, "clipvalue": 0.2}, ()),
    ("Nadam", {"learning_rate": 0.01, "global_clipnorm": 0.5}, ()),
    ("Lion", {"learning_rate": 0.01, "global_clipnorm": 1.0}, ()),
    # EMA (Keras 3 semantics: ema_start="first_step")
    (
        "Adam",
        {"learning_rate": 0.01, "use_ema": True, "ema_momentum": 0.9, "ema_overwrite_frequency": 3},
        (),
    ),
    (
        "SGD",
        {
            "learning_rate": 0.05,
            "momentum": 0.9,
            "use_ema": True,
            "ema_momentum": 0.5,
            "ema_overwrite_frequency": 4,
        },
        (),
    ),
    ("Adafactor", {"use_ema": True, "ema_momentum": 0.8, "ema_overwrite_frequency": 5}, ()),
    ("RMSprop", {"learning_rate": 0.01, "use_ema": True, "ema_momentum": 0.7}, ()),
    # static loss scale
    ("Adam", {"learning_rate": 0.01, "loss_scale_factor": 128.0, "clipvalue": 0.1}, ()),
    ("SGD", {"learning_rate": 0.1, "momentum": 0.9, "loss_scale_factor": 0.25}, ()),
    # gradient accumulation, with and without EMA
    ("Adam", {"learning_rate": 0.01, "gradient_accumulation_steps": 2}, ()),
    ("Nadam", {"learning_rate": 0.01, "gradient_accumulation_steps": 3}, ()),
    (
        "Adam",
        {
            "learning_rate": 0.01,
            "gradient_accumulation_steps": 3,
            "use_ema": True,
            "ema_momentum": 0.5,
            "ema_overwrite_frequency": 2,
        },
        (),
    ),
    (
        "Lamb",
        {
            "learning_rate": 0.01,
            "gradient_accumulation_steps": 2,
            "weight_decay": 0.1,
            "use_ema": True,
            "ema_momentum": 0.8,
        },
        (),
    ),
    # learning-rate schedules: with momentum (Keras puts the LR inside the velocity) and
    # with accumulation (Keras evaluates the schedule at the micro-step count)
    ("SGD", {"learning_rate": EXP, "momentum": 0.9}, ()),
    (
        "SGD",
        {
            "learning_rate": sched(
                "CosineDecay", initial_learning_rate=0.1, decay_steps=30, alpha=0.1
            ),
            "momentum": 0.9,
            "nesterov": True,
            "gradient_accumulation_steps": 2,
            "weight_decay": 0.01,
        },
        (),
    ),
    (
        "SGD",
        {
            "learning_rate": sched(
                "ExponentialDecay",
                initial_learning_rate=0.1,
                decay_steps=4,
                decay_rate=0.7,
                staircase=True,
            ),
            "momentum": 0.8,
            "gradient_accumulation_steps": 3,
        },
        (),
    ),
    (
        "Adam",
        {
            "learning_rate": sched(
                "CosineDecay",
                initial_learning_rate=0.0,
                decay_steps=20,
                warmup_target=0.01,
                warmup_steps=5,
            ),
            "weight_decay": 0.1,
        },
        (),
    ),
    # exclusions from weight decay by name (Keras: the short variable name)
    ("AdamW", {"learning_rate": 0.01, "weight_decay": 0.2}, ("bias",)),
    ("SGD", {"learning_rate": 0.05, "momentum": 0.9, "weight_decay": 0.3}, ("bias",)),
    # Muon: exclude_layers routes "head" to Adam, whose LR is scaled by adam_lr_ratio
    ("Muon", {"learning_rate": 0.02, "exclude_layers": ["head"], "adam_lr_ratio": 0.3}, ()),
    (
        "Muon",
        {
            "learning_rate": 0.005,
            "adam_lr_ratio": 2.0,
            "weight_decay": 0.05,
            "adam_weight_decay": 0.1,
        },
        ("bias",),
    ),
]


def _common_ids(cases):
    return [
        id_ + ("-exclude_" + "_".join(ex) if ex else "")
        for id_, (*_, ex) in zip(_ids(cases), cases, strict=True)
    ]


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize(("cls", "kw", "exclude"), COMMON_CASES, ids=_common_ids(COMMON_CASES))
def test_common_arguments_match_keras(cls, kw, exclude, scale):
    check_case(f"common/{cls}/{sorted(kw.items(), key=str)}/{exclude}", cls, kw, scale, exclude)


def test_every_common_argument_is_compared():
    used = {k for _, kw, _ in COMMON_CASES for k in kw}
    assert used >= {
        "weight_decay",
        "clipnorm",
        "clipvalue",
        "global_clipnorm",
        "use_ema",
        "ema_momentum",
        "ema_overwrite_frequency",
        "loss_scale_factor",
        "gradient_accumulation_steps",
    }
    assert {
        kw["gradient_accumulation_steps"]
        for _, kw, _ in COMMON_CASES
        if "gradient_accumulation_steps" in kw
    } == {2, 3}


# -- 3. the tf.keras documentation's examples (golden values) --------------------------------


def test_doc_example_clipvalue():
    opt = OX.SGD(learning_rate=1, clipvalue=1)
    var1, var2 = OX.Variable(2.0), OX.Variable(2.0)
    grads = [np.float32(2.0), np.float32(2.0)]  # the gradients of 2*var1 + 2*var2
    opt.apply_gradients(zip(grads, [var1, var2], strict=True))
    # Without clipping the variables would be [0, 0].
    np.testing.assert_array_equal([var1.numpy(), var2.numpy()], [1.0, 1.0])


def test_doc_example_weight_decay_with_var2_excluded():
    opt = OX.SGD(1, weight_decay=0.004)
    grads, var1, var2 = np.zeros((), np.float32), OX.Variable(2.0), OX.Variable(2.0)
    opt.exclude_from_weight_decay(var_list=[var2])
    opt.apply_gradients(zip([grads, grads], [var1, var2], strict=True))
    np.testing.assert_allclose([var1.numpy(), var2.numpy()], [1.992, 2.0], rtol=1e-7)


def _doc_ema_example(make_vars, opt, apply):
    var1, var2 = make_vars(2.0), make_vars(2.0)
    out = []
    for _ in range(3):
        apply(opt, [np.float32(1.0), np.float32(1.0)], [var1, var2])  # d(var1 + var2)
        out.append([float(var1.value), float(var2.value)])
    return np.array(out)


def _optx_apply(opt, grads, variables):
    opt.apply_gradients(zip(grads, variables, strict=True))


def test_doc_example_ema_overwrite_every_three_steps():
    opt = OX.SGD(learning_rate=1, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=3)
    got = _doc_ema_example(OX.Variable, opt, _optx_apply)
    # [1, 1], [0, 0], then the average 2*0.5**3 + 1*0.5*0.5**2 + 0*0.5*0.5 + (-1)*0.5.
    np.testing.assert_allclose(got, [[1.0, 1.0], [0.0, 0.0], [-0.125, -0.125]], rtol=1e-7)


def test_doc_example_ema_first_step_matches_keras3():
    def keras_apply(opt, grads, variables):
        opt.apply_gradients(
            zip([keras.ops.convert_to_tensor(g) for g in grads], variables, strict=True)
        )

    kwargs = {"learning_rate": 1.0, "use_ema": True, "ema_momentum": 0.5}
    want = _doc_ema_example(keras.Variable, K.SGD(ema_overwrite_frequency=3, **kwargs), keras_apply)
    opt = OX.SGD(ema_overwrite_frequency=3, ema_start="first_step", **kwargs)
    got = _doc_ema_example(OX.Variable, opt, _optx_apply)
    np.testing.assert_allclose(got, want, rtol=1e-7)
    # Keras 3 starts the average at the first step's weights: 1*0.5**2 + 0*0.5*0.5 - 1*0.5.
    np.testing.assert_allclose(got[-1], [-0.25, -0.25], rtol=1e-7)


# -- 4. OptimizerV2's legacy arguments -------------------------------------------------------


def test_lr_alias_warns_and_wins_over_learning_rate():
    with pytest.warns(DeprecationWarning, match="`lr` argument is deprecated"):
        opt = OX.SGD(learning_rate=0.5, lr=0.1)
    new = opt.apply({"w": np.ones(2, np.float32)}, {"w": np.ones(2, np.float32)})
    np.testing.assert_allclose(new["w"], [0.9, 0.9], rtol=1e-7)


def np_sgd(params, grads, lrs, momentum=0.0, weight_decay=0.0, nesterov=False):
    """Keras's SGD in float32: decay ``w -= w*wd*lr``, then ``v = mu*v - lr*g; w += v``."""
    f32 = np.float32
    w = {k: v.copy() for k, v in params.items()}
    vel = {k: np.zeros_like(v) for k, v in params.items()}
    out = []
    for g, lr in zip(grads, lrs, strict=True):
        lr = f32(lr)
        for k in w:
            if weight_decay:
                w[k] = w[k] - w[k] * f32(weight_decay) * lr
            if momentum:
                vel[k] = f32(momentum) * vel[k] - lr * g[k]
                w[k] = w[k] + (f32(momentum) * vel[k] - lr * g[k] if nesterov else vel[k])
            else:
                w[k] = w[k] - lr * g[k]
        out.append({k: v.copy() for k, v in w.items()})
    return out


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_decay_is_inverse_time_on_the_iterations(momentum):
    params = make_params(BASE)
    grads = make_grads(params, 30, seed=1)
    lrs = [0.1 / (1.0 + 0.1 * t) for t in range(30)]  # t = 0 at the first step
    want = np_sgd(params, grads, lrs, momentum)
    got = run_optx(OX.SGD(learning_rate=0.1, momentum=momentum, decay=0.1), params, grads)
    assert_parity(got, want, f"SGD(momentum={momentum}, decay=0.1)")


def test_decay_divides_the_schedule():
    params = make_params(BASE)
    grads = make_grads(params, 30, seed=2)
    lrs = [0.1 * 0.5 ** (t / 5) / (1.0 + 0.1 * t) for t in range(30)]
    want = np_sgd(params, grads, lrs)
    schedule = OX.schedules.ExponentialDecay(0.1, 5, 0.5)
    got = run_optx(OX.SGD(learning_rate=schedule, decay=0.1), params, grads)
    assert_parity(got, want, "SGD(ExponentialDecay(0.1, 5, 0.5), decay=0.1)")


# -- 5. NumPy references ---------------------------------------------------------------------


def np_adam(params, grads, lr, b1, b2, eps):
    """Keras's Adam in float32: epsilon-hat, added to the uncorrected sqrt(v)."""
    f32 = np.float32
    lr, b1, b2, eps = f32(lr), f32(b1), f32(b2), f32(eps)
    w = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(p) for k, p in params.items()}
    out = []
    for t, g in enumerate(grads, start=1):
        alpha = lr * np.sqrt(f32(1) - b2 ** f32(t)) / (f32(1) - b1 ** f32(t))
        for k in w:
            m[k] = m[k] + (g[k] - m[k]) * (f32(1) - b1)
            v[k] = v[k] + (g[k] * g[k] - v[k]) * (f32(1) - b2)
            w[k] = w[k] - alpha * m[k] / (np.sqrt(v[k]) + eps)
        out.append({k: x.copy() for k, x in w.items()})
    return out


@pytest.mark.parametrize("scale", SCALES)
def test_adam_matches_numpy(scale):
    params = make_params(BASE)
    grads = make_grads(params, 100, seed=3, scale=scale)
    want = np_adam(params, grads, 0.01, 0.8, 0.99, 1e-7)
    got = run_optx(OX.Adam(learning_rate=0.01, beta_1=0.8, beta_2=0.99), params, grads)
    assert_parity(got, want, f"Adam vs NumPy at gradient scale {scale:g}")


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_weight_decay_matches_numpy(nesterov):
    params = make_params(BASE)
    grads = make_grads(params, 100, seed=4)
    want = np_sgd(params, grads, [0.05] * 100, 0.9, 0.1, nesterov)
    opt = OX.SGD(learning_rate=0.05, momentum=0.9, nesterov=nesterov, weight_decay=0.1)
    assert_parity(run_optx(opt, params, grads), want, f"SGD(nesterov={nesterov}) vs NumPy")


# -- 6. without decay or clipping, each class is its functional optimizer --------------------

FUNCTIONAL = {
    "SGD": (
        lambda lr, b1, b2, eps: OX.SGD(lr, momentum=b1, nesterov=True),
        lambda lr, b1, b2, eps: optx.sgd(lr, b1, True, momentum_convention="keras"),
    ),
    "RMSprop": (
        lambda lr, b1, b2, eps: OX.RMSprop(lr, rho=b2, momentum=b1, epsilon=eps, centered=True),
        lambda lr, b1, b2, eps: optx.rmsprop(lr, b2, eps, centered=True, momentum=b1),
    ),
    "Adam": (
        lambda lr, b1, b2, eps: OX.Adam(lr, b1, b2, eps),
        lambda lr, b1, b2, eps: optx.adam(lr, b1, b2, eps, eps_placement="keras"),
    ),
    "Adam-amsgrad": (
        lambda lr, b1, b2, eps: OX.Adam(lr, b1, b2, eps, amsgrad=True),
        lambda lr, b1, b2, eps: optx.amsgrad(lr, b1, b2, eps, eps_placement="keras"),
    ),
    "Adadelta": (
        lambda lr, b1, b2, eps: OX.Adadelta(lr, rho=b2, epsilon=eps),
        lambda lr, b1, b2, eps: optx.adadelta(lr, b2, eps),
    ),
    "Adagrad": (
        lambda lr, b1, b2, eps: OX.Adagrad(lr, initial_accumulator_value=b1, epsilon=eps),
        lambda lr, b1, b2, eps: optx.adagrad(lr, b1, eps),
    ),
    "Adamax": (
        lambda lr, b1, b2, eps: OX.Adamax(lr, b1, b2, eps),
        lambda lr, b1, b2, eps: optx.adamax(lr, b1, b2, eps, eps_placement="keras"),
    ),
    "Nadam": (
        lambda lr, b1, b2, eps: OX.Nadam(lr, b1, b2, eps),
        lambda lr, b1, b2, eps: optx.nadam(lr, b1, b2, eps, momentum_decay=1.0),
    ),
    "Ftrl": (
        lambda lr, b1, b2, eps: OX.Ftrl(lr, initial_accumulator_value=b1, beta=eps),
        lambda lr, b1, b2, eps: optx.ftrl(lr, initial_accumulator_value=b1, beta=eps),
    ),
    "Lion": (
        lambda lr, b1, b2, eps: OX.Lion(lr, b1, b2),
        lambda lr, b1, b2, eps: optx.lion(lr, b1, b2, weight_decay=0.0),
    ),
    "Lamb": (
        lambda lr, b1, b2, eps: OX.Lamb(lr, b1, b2, eps),
        lambda lr, b1, b2, eps: optx.lamb(lr, b1, b2, eps),
    ),
}


def run_functional(tx, params, grads):
    @jax.jit
    def step(p, state, g):
        updates, state = tx.update(g, state, p)
        return optx.apply_updates(p, updates), state

    p, state, out = params, tx.init(params), []
    for g in grads:
        p, state = step(p, state, g)
        out.append({k: np.asarray(v) for k, v in p.items()})
    return out


@settings(max_examples=12, deadline=None)
@given(
    name=st.sampled_from(sorted(FUNCTIONAL)),
    lr=st.floats(1e-3, 0.3),
    b1=st.floats(0.5, 0.95),
    b2=st.floats(0.9, 0.999),
    eps=st.sampled_from([1e-7, 1e-5, 1e-3]),
    weight_decay=st.sampled_from([None, 0.0]),
)
def test_class_without_decay_or_clipping_is_its_functional_optimizer(
    name, lr, b1, b2, eps, weight_decay
):
    make_class, make_functional = FUNCTIONAL[name]
    opt = make_class(lr, b1, b2, eps)
    if weight_decay is not None:
        opt = type(opt).from_config({**opt.get_config(), "weight_decay": weight_decay})
    params = make_params(BASE)
    grads = make_grads(params, 5, seed=5)
    want = run_functional(make_functional(lr, b1, b2, eps), params, grads)
    assert_parity(
        run_optx(opt, params, grads), want, f"{name}(lr={lr}, b1={b1}, b2={b2}, eps={eps})"
    )
