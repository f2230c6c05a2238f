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
from helpers import EPS32
from hypothesis import given, settings
from hypothesis import strategies as st
from keras_reference import keras_runner, run_optx

import optx

OX = optx.optimizers
K = keras.optimizers

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


def as64(tree):
    """A dict of arrays, or a list of them, as float64 NumPy arrays (the same values)."""
    if isinstance(tree, list):
        return [as64(t) for t in tree]
    return {k: np.asarray(v, np.float64) for k, v in tree.items()}


# -- the parity bound --------------------------------------------------------------------
#
# The parity tests run both sides in float64 (`jax.enable_x64`, float64 parameters and
# gradients holding the float32 draws). Float64 round-off is then negligible, and what is
# left is fixed, the same on every machine: optx keeps its hyperparameters in float32
# (DESIGN D2) where Keras uses Python floats (float64 here), each off by at most EPS32 / 2
# relative; both keep the learning rate in float32 (Keras's learning-rate variable is
# `floatx`) and evaluate schedules in float32. Counted as tests/TOLERANCES.md does,
# `roundings` gives per case
#   k_u: the roundings of each step's update, and
#   k_w: roundings relative to the parameters themselves (EMA averages, FTRL's closed-form
#        weights, weight decay),
# and a leaf is off after step t by at most
#   EPS32 / 2 * (k_u * sum_{s <= t} max|u_s| + k_w * max_{0 <= s <= t} max|w_s|)
# plus float64 round-off, ROUNDOFF64 of the leaf's largest entry (two runs, up to 32
# roundings a step of values no larger than the parameters; Muon's Newton-Schulz iteration
# magnifies its own round-off up to 3.4445**5 = 485 times, but in a step of size lr).
# ``u_s`` and ``w_s`` are Keras's updates and parameters. Formula
# differences (epsilon placement, the step a schedule sees, the order of decay and
# momentum) are 1e-4 to 1e-1 of the parameters, and a learning rate 1.001x too large lands
# far outside (`test_parity_bounds_catch_a_learning_rate_off_by_1e3`).
EPS64 = float(np.finfo(np.float64).eps)
ROUNDOFF64 = STEPS * 64 * EPS64


def inexact(x):
    """1 where float32 rounds ``x`` (a rounding to count), else 0."""
    return float(float(np.float32(x)) != float(x))


def lag(b, steps=STEPS):
    """The roundings a decay ``b`` held in float32 brings (tests/TOLERANCES.md): the weight
    ``b**n`` of an ``n``-step-old term is off by ``n * EPS32 / 2``, ``n`` averaging
    ``b / (1 - b)`` over the weights, at most the number of steps."""
    return min(steps, b / (1 - b)) * inexact(b)


def adam_k(b1, b2, steps=STEPS):
    """b1's lag, b2's through the square root, ``1 - b1`` and ``1 - b2`` (1 + 1/2), the
    float32 bias corrections (3 + 3/2), epsilon."""
    return lag(b1, steps) + lag(b2, steps) / 2 + 1.5 + 4.5 + 1


def adafactor_k(decay_rate):
    """Adafactor's decay ``b_t = 1 - t**-decay_rate``, float32 in optx (float64 in Keras).

    ``p = t**-decay_rate`` is off by ``2 decay_rate ln t + 4`` half-ulps (the exponent
    rounded twice, an ulp each for the logarithm and the exponential); ``b_t`` rounds
    once more, and ``1 - b_t`` (the newest term's weight) then also by EPS32 / 4 absolute,
    ``1 / (2 p)`` half-ulps of it. An old term's weight ``(1 - b_s) prod_{r > s} b_r`` is
    off by its own ``1 - b_s``'s error plus each later ``b_r``'s. v is ``r c / mean(r)``,
    three such averages, and enters through the square root; then the clipping threshold,
    ``epsilon_2``, ``1 / sqrt(t)`` (two).
    """
    t = np.arange(2.0, STEPS + 1)  # b_1 = 0 exactly
    p = t**-decay_rate
    dp = 2 * decay_rate * np.log(t) + 4
    newest = dp + np.where(p <= 0.5, 1 / (2 * p), 0.0)  # 1 - p is exact for p >= 1/2
    later = dp * p / (1 - p) + 1
    return 3 * (newest.max() + later.sum()) / 2 + 4


def exponential_k(rate, steps_per_decay):
    """One side's float32 ``rate ** (step / steps_per_decay)``: the exponent rounded twice,
    an ulp each for the logarithm and the exponential, the product with the initial rate."""
    return 2 * (STEPS / steps_per_decay) * abs(np.log(rate)) + 5


def cosine_k(alpha):
    """One side's float32 ``(1 - alpha) (1 + cos(pi f)) / 2 + alpha`` relative to itself:
    ``pi f`` rounded twice moves the cosine by ``2 pi |sin(pi f)|`` half-ulps, the cosine
    and the sum round once each; ``alpha`` keeps the value from cancelling to zero. Then
    the products with ``1 - alpha`` and the initial rate, a warmup's ratio."""
    f = np.linspace(0, 1, 1001)
    value = (1 - alpha) * (1 + np.cos(np.pi * f)) / 2 + alpha
    absolute = (1 - alpha) / 2 * (2 * np.pi * np.abs(np.sin(np.pi * f)) + 3)
    return float(np.max(absolute / value)) + 4


def newton_schulz_gain(a, b, c, steps):
    """``max |s dNS(s)/ds| / max |NS(s)|`` over singular values ``s`` in [0, 1] of the
    normalised input: how far a change of the input's scale moves the output of the
    iteration ``x <- a x + b x**3 + c x**5``, relative to its largest singular value."""
    s = np.linspace(0, 1, 10001)
    x, slope = s, np.ones_like(s)
    for _ in range(steps):
        x, slope = a * x + b * x**3 + c * x**5, (a + 3 * b * x**2 + 5 * c * x**4) * slope
    return float(np.max(np.abs(s * slope)) / np.max(np.abs(x)))


# The largest matrix Muon orthogonalises here (the kernel; the conv's 3 x 4 slices).
MUON_ENTRIES = 12


def muon_k(c):
    """The Muon branch. Keras gets optx's float32 coefficients, momentum and rms_rate
    (`build`), but computes the Frobenius norm that scales the iteration's input in float32
    (Keras's ``ops.norm`` casts to floatx): the entries rounded, squared and summed (halved
    by the square root), the root, ``n / 2 + 2`` half-ulps for ``n`` entries, which the
    iteration magnifies by `newton_schulz_gain`. An entry of ``U diag(e) V^T`` is at most
    ``max |e|``, the largest entry of the output at least its largest singular value over
    ``sqrt(n)``. Then the float32 scale ``sqrt(max(rows, columns)) * rms_rate``."""
    gain = newton_schulz_gain(c["muon_a"], c["muon_b"], c["muon_c"], c["ns_steps"])
    return np.sqrt(MUON_ENTRIES) * (MUON_ENTRIES / 2 + 2) * gain + 2


def schedule_k(s):
    """Roundings of a schedule's value: each side evaluates it in float32."""
    args = dict(s.kwargs)
    if s.name == "ExponentialDecay":
        one_side = exponential_k(args["decay_rate"], args["decay_steps"])
    else:
        assert s.name == "CosineDecay", s
        one_side = cosine_k(args.get("alpha", 0.0))
    return 2 * one_side


def peak_learning_rate(lr):
    if isinstance(lr, Sched):
        args = dict(lr.kwargs)
        return max(args["initial_learning_rate"], args.get("warmup_target") or 0.0)
    return lr


FTRL_ROUNDED = (
    "l1_regularization_strength",
    "l2_regularization_strength",
    "l2_shrinkage_regularization_strength",
    "beta",
    "initial_accumulator_value",
)


def roundings(cls, kw, grads):
    """``(k_u, k_w)`` of a case (see the parity bound above)."""
    c = build(OX, cls, {k: v for k, v in kw.items() if k != "learning_rate"}, ()).get_config()
    lr = peak_learning_rate(kw.get("learning_rate", c["learning_rate"]))
    k_w = 0.0
    if cls == "SGD":  # v = momentum v - lr g: a trace; Nesterov's extra momentum * v
        k_u = lag(c["momentum"]) * (1 + c["nesterov"])
    elif cls == "RMSprop":  # rho through the square root, for both moments if centred
        k_u = (1 + c["centered"]) * lag(c["rho"]) / 2 + 1 + lag(c["momentum"])
    elif cls in ("Adam", "AdamW", "Lamb"):  # AMSGrad's maximum of v: as v; Lamb's trust
        k_u = adam_k(c["beta_1"], c["beta_2"])  # ratio is invariant to v's scale
    elif cls == "Adadelta":  # rho, epsilon on both moments, through the square roots; the
        k_u = 2 * (lag(c["rho"]) + 1)  # second moment of the updates feeds back: twice
    elif cls == "Adagrad":  # the initial accumulator through the square root, epsilon
        k_u = 0.5 + 1
    elif cls == "Adamax":  # b2 decays a maximum: its full lag; 1 - b1, bias correction, eps
        k_u = lag(c["beta_1"]) + lag(c["beta_2"]) + 1 + 3 + 1
    elif cls == "Nadam":  # Nesterov's b1 m and its bias correction; the momentum schedule
        k_u = adam_k(c["beta_1"], c["beta_2"]) + 1 + 3 + 5  # 0.96**t and its float32 product
    elif cls == "Ftrl":
        # The weights are a closed form of the accumulators, off relative to themselves:
        # by l1, l2, the shrinkage, beta, the initial accumulator; and by n**-power with a
        # float32 power, |power ln n| half-ulps, in the linear term and the denominator.
        n0 = c["initial_accumulator_value"]
        n = n0 + sum(max(np.max(g**2) for g in gs.values()) for gs in grads)
        power = c["learning_rate_power"] * inexact(c["learning_rate_power"])
        k_u = 0.0
        k_w = sum(inexact(c[k]) for k in FTRL_ROUNDED)
        k_w += 2 * abs(power) * max(abs(np.log(n0)), abs(np.log(n)))
    elif cls == "Lion":  # lr * sign(...): float32 b1, b2 move no sign on these gradients
        k_u = 0.0
    elif cls == "Adafactor":
        k_u = adafactor_k(-c["beta_2_decay"])
    else:
        assert cls == "Muon", cls
        # The Adam branch: its ratio times the learning rate, rounded by each side.
        adam = adam_k(c["adam_beta_1"], c["adam_beta_2"]) + 2 * inexact(c["adam_lr_ratio"])
        k_u = max(muon_k(c), adam)
    decays = [c["weight_decay"]] + ([c["adam_weight_decay"]] if cls == "Muon" else [])
    # Decoupled weight decay: its float32 rate rounds each step's decay w * wd * lr.
    k_w += sum(STEPS * wd * lr * inexact(wd) for wd in decays if wd)
    if c["clipnorm"] or c["global_clipnorm"] or c["clipvalue"]:
        k_u += 2  # the float32 threshold: the gradient off by EPS32 / 2, through m and v
    if c["loss_scale_factor"]:
        k_u += inexact(c["loss_scale_factor"])
    if c["gradient_accumulation_steps"]:
        k_u += 1  # the mean of the micro-gradients
    if isinstance(kw.get("learning_rate"), Sched):
        k_u += schedule_k(kw["learning_rate"])
    if cls in ("SGD", "RMSprop") and c["momentum"]:
        # The update is a momentum trace of increments: it can cancel to 1 - momentum of its
        # terms' size, where their errors sit.
        k_u /= 1 - c["momentum"]
    if c["use_ema"]:
        # The average's weights are off by its decay's lag, relative to the parameters; each
        # overwrite makes that the parameters' error, and the next average adds its own.
        overwrites = STEPS // c["ema_overwrite_frequency"] if c["ema_overwrite_frequency"] else 0
        k_w += lag(c["ema_momentum"]) * (1 + overwrites)
    return k_u, k_w


def parity_bounds(params, want, k_u, k_w):
    """Per step, per leaf: the bound on ``|optx - reference|`` (see above)."""
    bounds, path = [], dict.fromkeys(params, 0.0)
    size = {n: float(np.max(np.abs(p))) for n, p in params.items()}
    previous = params
    for w in want:
        step = {}
        for n in params:
            path[n] += float(np.max(np.abs(w[n] - previous[n])))
            size[n] = max(size[n], float(np.max(np.abs(w[n]))))
            step[n] = EPS32 / 2 * (k_u * path[n] + k_w * size[n]) + ROUNDOFF64 * size[n]
            assert np.isfinite(step[n]) and step[n] > 0, (n, step[n])
        bounds.append(step)
        previous = w
    return bounds


def parity_ratio(got, want, bounds):
    """``max |got - want| / bound`` over steps, leaves and elements, and where."""
    worst = (0.0, None, None)
    for step, (g, w, b) in enumerate(zip(got, want, bounds, strict=True), start=1):
        for name in w:
            assert g[name].dtype == np.float64, (name, g[name].dtype)
            ratio = float(np.max(np.abs(g[name] - w[name]))) / b[name]
            if ratio > worst[0]:
                worst = (ratio, step, name)
    return worst


def assert_parity(got, want, bounds, what):
    ratio, step, leaf = parity_ratio(got, want, bounds)
    print(f"{what}: max error / bound {ratio:.3g}")
    assert ratio <= 1, (
        f"{what}: optx differs from the reference by {ratio:.3g} times the bound at step "
        f"{step}, leaf {leaf!r} (bound {bounds[step - 1][leaf]:.3g})"
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


# Muon's Newton-Schulz iteration magnifies a change of its input or of its coefficients
# (3.4445**5 = 485 times for a small singular value): Keras gets the float32 values optx
# holds for these, so that the Muon branch's maths is compared, not their rounding (see
# `muon_k` for the rounding that remains).
MUON_FLOAT32 = ("muon_a", "muon_b", "muon_c", "momentum", "rms_rate")


def build(namespace, cls, kw, exclude):
    kw = {k: v.build(namespace.schedules) if isinstance(v, Sched) else v for k, v in kw.items()}
    if namespace is OX and kw.get("use_ema"):
        kw["ema_start"] = "first_step"  # Keras 3's EMA: the average starts at the first step
    if namespace is K and cls == "Muon":
        config = OX.Muon(**kw).get_config()
        kw.update({n: float(np.float32(config[n])) for n in MUON_FLOAT32 if config[n] is not None})
    opt = getattr(namespace, cls)(**kw)
    if exclude:
        opt.exclude_from_weight_decay(var_names=list(exclude))
    return opt


# One jitted Keras step per case, shared by both gradient scales.
_KERAS_RUNNERS = {}


def run_case(case_id, cls, kw, scale, exclude=(), lr_factor=1.0):
    """Keras and optx in float64 on the same random gradients: (optx's, Keras's) parameters
    after each step, the bounds, and the optx optimizer and Keras's variables."""
    params = make_params(LEAVES.get(cls, BASE))
    grads = make_grads(params, STEPS, zlib.crc32(case_id.encode()), scale)
    params, grads = as64(params), as64(grads)
    with jax.enable_x64(True):
        if case_id not in _KERAS_RUNNERS:
            _KERAS_RUNNERS[case_id] = keras_runner(build(K, cls, kw, exclude), params)
        want, keras_vars = _KERAS_RUNNERS[case_id](grads)
        optx_kw = dict(kw)
        if lr_factor != 1.0:
            lr = kw.get("learning_rate", build(OX, cls, {}, ()).get_config()["learning_rate"])
            optx_kw["learning_rate"] = lr * lr_factor
        opt = build(OX, cls, optx_kw, exclude)
        got = run_optx(opt, params, grads)
        if kw.get("use_ema"):
            finalized = opt.finalize_variable_values({n: got[-1][n] for n in params})
            finalized = {n: np.asarray(v) for n, v in finalized.items()}
        else:
            finalized = None
    bounds = parity_bounds(params, want, *roundings(cls, kw, grads))
    return got, want, bounds, finalized, keras_vars


def check_case(case_id, cls, kw, scale, exclude=()):
    """Runs optx and Keras on the same random gradients and compares every step."""
    got, want, bounds, finalized, keras_vars = run_case(case_id, cls, kw, scale, exclude)
    assert_parity(got, want, bounds, f"{cls}({kw}) at gradient scale {scale:g}")
    if kw.get("use_ema"):
        # The moving averages themselves (they reach the parameters only on overwrites):
        # within the parameters' bound, which counts the average's own lag.
        averages = {
            n: next(v for p, v in keras_vars.items() if p.endswith(f"/{n}_average"))
            for n in want[0]
        }
        assert_parity(
            [finalized], [averages], [bounds[-1]], f"{cls}({kw}) EMA averages at scale {scale:g}"
        )


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


@pytest.mark.parametrize(
    ("cls", "kw"),
    [
        ("Adam", {}),
        ("SGD", {"learning_rate": 0.05, "momentum": 0.9}),
        ("Adadelta", {}),
        ("Adafactor", {}),
        ("Muon", {}),
    ],
)
def test_parity_bounds_catch_a_learning_rate_off_by_1e3(cls, kw):
    """The parity bounds are tight enough to see a learning rate 1.001x too large."""
    got, want, bounds, _, _ = run_case(
        f"class/{cls}/{sorted(kw.items())}", cls, kw, 1.0, lr_factor=1.001
    )
    ratio, _, _ = parity_ratio(got, want, bounds)
    print(f"{cls}({kw}) x 1.001: max error / bound {ratio:.3g}")
    assert ratio > 10


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
    params = as64(make_params(("kernel", "head")))
    grads = as64(make_grads(params, STEPS, seed=7, scale=1e-5))
    kw = {"epsilon": 1e-5, "weight_decay": None}
    with jax.enable_x64(True):
        want, _ = keras_runner(build(K, "Muon", kw, ()), params)(grads)
        got = run_optx(OX.Muon(**kw), params, grads)
    assert_parity(
        got,
        want,
        parity_bounds(params, want, *roundings("Muon", kw, grads)),
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
                # alpha > 0: a float32 cosine decaying to 0 has no relative error bound.
                alpha=0.1,
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
    # float32: 2 - 2 * 0.004 is 1.992 to half an ulp (3e-8 relative) and 0.004's rounding.
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
    # Exact in float32: small integers times powers of 0.5.
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
    np.testing.assert_allclose(got, want, rtol=1e-7)  # exact on both sides, as above
    # Keras 3 starts the average at the first step's weights: 1*0.5**2 + 0*0.5*0.5 - 1*0.5.
    np.testing.assert_allclose(got[-1], [-0.25, -0.25], rtol=1e-7)


# -- 4. OptimizerV2's legacy arguments -------------------------------------------------------


def test_lr_alias_warns_and_wins_over_learning_rate():
    with pytest.warns(DeprecationWarning, match="`lr` argument is deprecated"):
        opt = OX.SGD(learning_rate=0.5, lr=0.1)
    new = opt.apply({"w": np.ones(2, np.float32)}, {"w": np.ones(2, np.float32)})
    # float32: 1 - 0.1 is 0.9 to half an ulp (3.3e-8 relative) and 0.1's rounding.
    np.testing.assert_allclose(new["w"], [0.9, 0.9], rtol=1e-7)


def np_sgd(params, grads, lrs, momentum=0.0, weight_decay=0.0, nesterov=False):
    """Keras's SGD in float64: decay ``w -= w*wd*lr``, then ``v = mu*v - lr*g; w += v``."""
    w = as64(params)
    vel = {k: np.zeros_like(v) for k, v in w.items()}
    out = []
    for g, lr in zip(grads, lrs, strict=True):
        for k in w:
            if weight_decay:
                w[k] = w[k] - w[k] * weight_decay * lr
            if momentum:
                vel[k] = momentum * vel[k] - lr * g[k]
                w[k] = w[k] + (momentum * vel[k] - lr * g[k] if nesterov else vel[k])
            else:
                w[k] = w[k] - lr * g[k]
        out.append({k: v.copy() for k, v in w.items()})
    return out


def run_optx64(opt, params, grads):
    """`run_optx` in float64 (the optimizer built inside `jax.enable_x64`)."""
    with jax.enable_x64(True):
        return run_optx(opt(), as64(params), as64(grads))


# optx's legacy ``decay`` divides its float32 learning rate by ``1 + decay * t`` in float32:
# the learning rate, decay, their product, the sum and the quotient, 5 roundings.
DECAY_K = 5


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_decay_is_inverse_time_on_the_iterations(momentum):
    params = make_params(BASE)
    grads = as64(make_grads(params, 30, seed=1))
    lrs = [0.1 / (1.0 + 0.1 * t) for t in range(30)]  # t = 0 at the first step
    want = np_sgd(params, grads, lrs, momentum)
    got = run_optx64(lambda: OX.SGD(learning_rate=0.1, momentum=momentum, decay=0.1), params, grads)
    # With momentum, a trace (see `roundings`).
    bounds = parity_bounds(as64(params), want, (DECAY_K + lag(momentum)) / (1 - momentum), 0.0)
    assert_parity(got, want, bounds, f"SGD(momentum={momentum}, decay=0.1)")


def test_decay_divides_the_schedule():
    params = make_params(BASE)
    grads = as64(make_grads(params, 30, seed=2))
    lrs = [0.1 * 0.5 ** (t / 5) / (1.0 + 0.1 * t) for t in range(30)]
    want = np_sgd(params, grads, lrs)
    schedule = OX.schedules.ExponentialDecay(0.1, 5, 0.5)
    got = run_optx64(lambda: OX.SGD(learning_rate=schedule, decay=0.1), params, grads)
    # The schedule in float32 (one side), the decay.
    bounds = parity_bounds(as64(params), want, exponential_k(0.5, 5) + DECAY_K, 0.0)
    assert_parity(got, want, bounds, "SGD(ExponentialDecay(0.1, 5, 0.5), decay=0.1)")


# -- 5. NumPy references ---------------------------------------------------------------------


def np_adam(params, grads, lr, b1, b2, eps):
    """Keras's Adam in float64: epsilon-hat, added to the uncorrected sqrt(v)."""
    w = as64(params)
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v = {k: np.zeros_like(p) for k, p in w.items()}
    out = []
    for t, g in enumerate(grads, start=1):
        alpha = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        for k in w:
            m[k] = m[k] + (g[k] - m[k]) * (1 - b1)
            v[k] = v[k] + (g[k] * g[k] - v[k]) * (1 - b2)
            w[k] = w[k] - alpha * m[k] / (np.sqrt(v[k]) + eps)
        out.append({k: x.copy() for k, x in w.items()})
    return out


@pytest.mark.parametrize("scale", SCALES)
def test_adam_matches_numpy(scale):
    params = make_params(BASE)
    grads = as64(make_grads(params, 100, seed=3, scale=scale))
    want = np_adam(params, grads, 0.01, 0.8, 0.99, 1e-7)
    got = run_optx64(lambda: OX.Adam(learning_rate=0.01, beta_1=0.8, beta_2=0.99), params, grads)
    # The float32 learning rate, and Adam's roundings over 100 steps.
    bounds = parity_bounds(as64(params), want, 1 + adam_k(0.8, 0.99, steps=100), 0.0)
    assert_parity(got, want, bounds, f"Adam vs NumPy at gradient scale {scale:g}")


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_weight_decay_matches_numpy(nesterov):
    params = make_params(BASE)
    grads = as64(make_grads(params, 100, seed=4))
    want = np_sgd(params, grads, [0.05] * 100, 0.9, 0.1, nesterov)
    opt = lambda: OX.SGD(learning_rate=0.05, momentum=0.9, nesterov=nesterov, weight_decay=0.1)  # noqa: E731
    # The float32 learning rate, the momentum's lag (twice with Nesterov), through the
    # trace (see `roundings`); the decay w * wd * lr with two float32 factors, 100 times.
    k_u = (1 + lag(0.9, steps=100) * (1 + nesterov)) / (1 - 0.9)
    bounds = parity_bounds(as64(params), want, k_u, 100 * 0.1 * 0.05 * 2)
    assert_parity(
        run_optx64(opt, params, grads), want, bounds, f"SGD(nesterov={nesterov}) vs NumPy"
    )


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
    params = as64(make_params(BASE))
    grads = as64(make_grads(params, 5, seed=5))
    with jax.enable_x64(True):
        opt = make_class(lr, b1, b2, eps)
        if weight_decay is not None:
            opt = type(opt).from_config({**opt.get_config(), "weight_decay": weight_decay})
        got = run_optx(opt, params, grads)
        want = run_functional(make_functional(lr, b1, b2, eps), params, grads)
    # The same float32 hyperparameters and the same maths, in float64: round-off only.
    bounds = parity_bounds(params, want, 0.0, 0.0)
    assert_parity(got, want, bounds, f"{name}(lr={lr}, b1={b1}, b2={b2}, eps={eps})")
