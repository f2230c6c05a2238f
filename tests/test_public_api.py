"""The public API: its names, their docstrings, and the set-up commands of the README."""

import ast
import importlib
import inspect
import itertools
import os
import pathlib
import subprocess
import types

import pytest

import optx

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The committed lists of public names. A test below fails on any addition or removal, so that
# a change of the public API is a deliberate, reviewed edit of this file. Keep them sorted.
OPTX_NAMES = [
    "AccumulateGradientsState",
    "AdaptiveGradClipState",
    "AddDecayedWeightsState",
    "AddNoiseState",
    "ApplyEvery",
    "ApplyIfFiniteState",
    "COCOBState",
    "ClipByGlobalNormState",
    "ClipState",
    "ConditionallyMaskState",
    "ConditionallyTransformState",
    "DAdaptAdamWState",
    "DecayBeforeState",
    "DoGState",
    "DoWGState",
    "DynamicLossScaleState",
    "EmaParamsState",
    "EmaState",
    "EmptyState",
    "FactoredState",
    "FlatTree",
    "FlattenState",
    "GradientTransformation",
    "GradientTransformationExtraArgs",
    "GradientTransformationLike",
    "HutchinsonState",
    "HyperParams",
    "InjectHyperparamsState",
    "InjectStatefulHyperparamsState",
    "KahanSummationState",
    "LookaheadState",
    "MaskOrFn",
    "MaskedNode",
    "MaskedState",
    "MechanicState",
    "MomoAdamState",
    "MomoState",
    "MonitorState",
    "MonitoredState",
    "MultiSteps",
    "MultiStepsState",
    "MultiTransformState",
    "MuonState",
    "NonNegativeParamsState",
    "NormalizeByUpdateNormState",
    "OptState",
    "Params",
    "PartitionState",
    "ProdigyState",
    "ReduceOnPlateauState",
    "RowSparse",
    "ScalarOrSchedule",
    "ScaleByAdaDeltaState",
    "ScaleByAdamState",
    "ScaleByAdanState",
    "ScaleByAdemamixState",
    "ScaleByAdoptState",
    "ScaleByAmsgradState",
    "ScaleByBacktrackingLinesearchState",
    "ScaleByBeliefState",
    "ScaleByDistanceOverGradientsState",
    "ScaleByFtrlState",
    "ScaleByLBFGSState",
    "ScaleByLearningRateState",
    "ScaleByLionState",
    "ScaleByNadamState",
    "ScaleByNovogradState",
    "ScaleByOptimisticGradientState",
    "ScaleByParamBlockNormState",
    "ScaleByParamBlockRMSState",
    "ScaleByPolyakState",
    "ScaleByRStdDevState",
    "ScaleByRmsState",
    "ScaleByRpropState",
    "ScaleByRssState",
    "ScaleBySM3State",
    "ScaleByScheduleState",
    "ScaleByShapeState",
    "ScaleByTrustRatioState",
    "ScaleByYogiState",
    "ScaleByZoomLinesearchState",
    "ScaleState",
    "Schedule",
    "ScheduleFreeState",
    "ShouldSkipUpdateFunction",
    "SnapshotState",
    "SophiaState",
    "StochasticRoundingState",
    "Summary",
    "TraceState",
    "TrainStep",
    "Transform",
    "TransformInitFn",
    "TransformUpdateExtraArgsFn",
    "TransformUpdateFn",
    "UnscaleGradientsState",
    "Updates",
    "WrappedSchedule",
    "ZeroNansState",
    "ZoomLinesearchInfo",
    "accumulate_gradients",
    "adabelief",
    "adadelta",
    "adafactor",
    "adagrad",
    "adam",
    "adamax",
    "adamaxw",
    "adamw",
    "adan",
    "adaptive_grad_clip",
    "add_decayed_weights",
    "add_noise",
    "ademamix",
    "adopt",
    "aggregate_gradients",
    "amsgrad",
    "apply_every",
    "apply_if_finite",
    "apply_updates",
    "bias_correction",
    "centralize",
    "chain",
    "clip",
    "clip_by_block_rms",
    "clip_by_global_norm",
    "clip_by_norm",
    "cocob",
    "compiler_options",
    "conditionally_mask",
    "conditionally_transform",
    "constant_schedule",
    "constrain",
    "constraints",
    "contrib",
    "cosine_decay_schedule",
    "cosine_onecycle_schedule",
    "dadapt_adamw",
    "decay_before",
    "dog",
    "dowg",
    "dynamic_loss_scale",
    "ema",
    "ema_params",
    "ema_params_value",
    "embedding_grad",
    "exponential_decay",
    "flatten",
    "flatten_tree",
    "freeze",
    "fromage",
    "ftrl",
    "get_hyperparams",
    "global_norm",
    "hutchinson_estimator_diag_hessian",
    "hyperparam",
    "identity",
    "incremental_update",
    "init_empty_state",
    "inject_hyperparams",
    "inject_stateful_hyperparams",
    "join_schedules",
    "kahan_summation",
    "keep_params_nonnegative",
    "lamb",
    "lars",
    "latest_checkpoint",
    "lazy_adam",
    "lbfgs",
    "linear_onecycle_schedule",
    "linear_schedule",
    "lion",
    "lookahead",
    "loss_scale",
    "make_step",
    "masked",
    "matrix_inverse_pth_root",
    "measure_with_ema",
    "mechanize",
    "microbatch",
    "microbatching",
    "momo",
    "momo_adam",
    "monitor",
    "monitor_metrics",
    "monitored",
    "multi_normal",
    "multi_transform",
    "muon",
    "nadam",
    "nadamw",
    "named_chain",
    "nnls",
    "noisy_sgd",
    "normalize_by_update_norm",
    "novograd",
    "optimistic_adam",
    "optimistic_adam_v2",
    "optimistic_gradient_descent",
    "optimizers",
    "partition",
    "per_example_global_norm_clip",
    "per_example_layer_norm_clip",
    "periodic_update",
    "piecewise_constant_schedule",
    "piecewise_interpolate_schedule",
    "polyak_sgd",
    "polynomial_schedule",
    "power_iteration",
    "prodigy",
    "projections",
    "radam",
    "reduce_on_plateau",
    "restore_state",
    "rmsprop",
    "rprop",
    "safe_increment",
    "safe_int32_increment",
    "safe_norm",
    "safe_root_mean_squares",
    "save_state",
    "scale",
    "scale_by_adadelta",
    "scale_by_adam",
    "scale_by_adamax",
    "scale_by_adan",
    "scale_by_ademamix",
    "scale_by_adopt",
    "scale_by_amsgrad",
    "scale_by_backtracking_linesearch",
    "scale_by_belief",
    "scale_by_cocob",
    "scale_by_distance_over_gradients",
    "scale_by_factored_rms",
    "scale_by_ftrl",
    "scale_by_lazy_adam",
    "scale_by_lbfgs",
    "scale_by_learning_rate",
    "scale_by_lion",
    "scale_by_muon",
    "scale_by_novograd",
    "scale_by_optimistic_gradient",
    "scale_by_param_block_norm",
    "scale_by_param_block_rms",
    "scale_by_polyak",
    "scale_by_prodigy",
    "scale_by_radam",
    "scale_by_rms",
    "scale_by_rprop",
    "scale_by_rss",
    "scale_by_schedule",
    "scale_by_shape",
    "scale_by_sign",
    "scale_by_sm3",
    "scale_by_sophia",
    "scale_by_stddev",
    "scale_by_trust_ratio",
    "scale_by_yogi",
    "scale_by_zoom_linesearch",
    "scale_gradient",
    "scale_hyperparams",
    "scale_loss",
    "schedule_free",
    "schedule_free_adamw",
    "schedule_free_eval_params",
    "schedule_free_sgd",
    "schedules",
    "second_order",
    "selective_transform",
    "set_hyperparams",
    "set_to_zero",
    "sgd",
    "sgdr_schedule",
    "shard_state",
    "sign_sgd",
    "signum",
    "skip_large_updates",
    "skip_missing",
    "skip_not_finite",
    "sm3",
    "snapshot",
    "sophia",
    "state_shardings",
    "stateless",
    "stateless_with_tree_map",
    "stochastic_rounding",
    "summary",
    "trace",
    "transforms",
    "tree",
    "tree_map_params",
    "unscale_gradients",
    "update_infinity_moment",
    "update_moment",
    "update_moment_per_elem_norm",
    "value_and_grad_from_state",
    "warmup_constant_schedule",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay_schedule",
    "with_extra_args_support",
    "yogi",
    "zero_nans",
]

TREE_NAMES = [
    "add",
    "add_scale",
    "all_finite",
    "allclose",
    "batch_shape",
    "bias_correction",
    "cast",
    "cast_like",
    "clip",
    "conj",
    "div",
    "dtype",
    "full_like",
    "get",
    "get_all_with_path",
    "leaves_with_paths",
    "map_params",
    "max",
    "min",
    "mul",
    "nbytes",
    "norm",
    "ones_like",
    "path_name",
    "paths",
    "random_like",
    "real",
    "scale",
    "set",
    "size",
    "split_key_like",
    "sub",
    "sum",
    "unwrap_random_key_data",
    "update_infinity_moment",
    "update_moment",
    "update_moment_per_elem_norm",
    "vdot",
    "where",
    "zeros_like",
]

CONSTRAINTS_NAMES = [
    "Box",
    "Constraint",
    "L1Ball",
    "L2Ball",
    "MaxNorm",
    "MinMaxNorm",
    "NonNeg",
    "Simplex",
    "UnitNorm",
]

CONTRIB_NAMES: list[str] = [
    "COCOBState",
    "DAdaptAdamWState",
    "DifferentiallyPrivateAggregateState",
    "DoGState",
    "DoWGState",
    "GaLoreDimensionNumbers",
    "GaLoreState",
    "HutchinsonState",
    "MadgradState",
    "MechanicState",
    "MomoAdamState",
    "MomoState",
    "MuonDimensionNumbers",
    "MuonState",
    "NormalizeState",
    "ProdigyState",
    "ReduceLROnPlateauState",
    "SAMState",
    "ScaleByAdemamixState",
    "ScaleBySimplifiedAdEMAMixState",
    "ScheduleFreeState",
    "SophiaState",
    "SplitRealAndImaginaryState",
    "acprop",
    "ademamix",
    "adopt",
    "cocob",
    "dadapt_adamw",
    "differentially_private_aggregate",
    "dog",
    "dowg",
    "dpsgd",
    "galore",
    "hutchinson_estimator_diag_hessian",
    "madgrad",
    "mechanize",
    "momo",
    "momo_adam",
    "muon",
    "normalize",
    "prodigy",
    "reduce_on_plateau",
    "sam",
    "scale_by_acprop",
    "scale_by_ademamix",
    "scale_by_adopt",
    "scale_by_cocob",
    "scale_by_galore",
    "scale_by_madgrad",
    "scale_by_muon",
    "scale_by_simplified_ademamix",
    "schedule_free",
    "schedule_free_adamw",
    "schedule_free_eval_params",
    "schedule_free_sgd",
    "simplified_ademamix",
    "sophia",
    "split_real_and_imaginary",
]

MICROBATCHING_NAMES: list[str] = [
    "AccumulationType",
    "Accumulator",
    "micro_grad",
    "micro_vmap",
    "microbatch",
    "reshape_batch_axis",
]

PROJECTIONS_NAMES: list[str] = [
    "projection_box",
    "projection_halfspace",
    "projection_hypercube",
    "projection_hyperplane",
    "projection_l1_ball",
    "projection_l1_sphere",
    "projection_l2_ball",
    "projection_l2_sphere",
    "projection_linf_ball",
    "projection_non_negative",
    "projection_simplex",
    "projection_vector",
]

SECOND_ORDER_NAMES: list[str] = [
    "fisher_diag",
    "hessian_diag",
    "hvp",
]

TRANSFORMS_NAMES: list[str] = [
    "AddNoiseState",
    "ApplyIfFiniteState",
    "ConditionFn",
    "ConditionallyMaskState",
    "ConditionallyTransformState",
    "EmaState",
    "MaskedNode",
    "MaskedState",
    "MonitorState",
    "MultiSteps",
    "MultiStepsState",
    "NonNegativeParamsState",
    "PartitionState",
    "ShouldSkipUpdateFunction",
    "SnapshotState",
    "TraceState",
    "ZeroNansState",
    "adaptive_grad_clip",
    "add_decayed_weights",
    "add_noise",
    "apply_if_finite",
    "chain",
    "clip",
    "clip_by_block_rms",
    "clip_by_global_norm",
    "conditionally_mask",
    "conditionally_transform",
    "ema",
    "flatten",
    "freeze",
    "keep_params_nonnegative",
    "masked",
    "measure_with_ema",
    "monitor",
    "named_chain",
    "partition",
    "per_example_global_norm_clip",
    "per_example_layer_norm_clip",
    "selective_transform",
    "skip_large_updates",
    "skip_not_finite",
    "snapshot",
    "trace",
    "unitwise_clip",
    "unitwise_norm",
    "zero_nans",
]

SCHEDULES_NAMES = [
    "InjectHyperparamsState",
    "InjectStatefulHyperparamsState",
    "Schedule",
    "StatefulSchedule",
    "WrappedSchedule",
    "constant_schedule",
    "cosine_decay_schedule",
    "cosine_onecycle_schedule",
    "exponential_decay",
    "from_config",
    "inject_hyperparams",
    "inject_stateful_hyperparams",
    "join_schedules",
    "linear_onecycle_schedule",
    "linear_schedule",
    "piecewise_constant_schedule",
    "piecewise_interpolate_schedule",
    "plot",
    "polynomial_schedule",
    "sgdr_schedule",
    "warmup_constant_schedule",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay_schedule",
    "warmup_inverse_sqrt_schedule",
    "warmup_stable_decay_schedule",
]

OPTIMIZERS_NAMES = [
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Ftrl",
    "Lamb",
    "Lion",
    "LossScaleOptimizer",
    "MultiOptimizer",
    "Muon",
    "Nadam",
    "Optimizer",
    "OptimizerMap",
    "RMSprop",
    "SGD",
    "Variable",
    "deserialize",
    "get",
    "schedules",
    "serialize",
]

KERAS_SCHEDULES_NAMES = [
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseTimeDecay",
    "LearningRateSchedule",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
    "deserialize",
    "serialize",
]

# Public names whose docstring need not hold an `Example:` with a doctest.
# NamedTuples: optimizer states (and `MaskedNode`, an empty placeholder leaf), shown by the
# examples of the transforms that make them.
NAMEDTUPLES = {
    "AccumulateGradientsState",
    "AdaptiveGradClipState",
    "AddDecayedWeightsState",
    "AddNoiseState",
    "ApplyEvery",
    "ApplyIfFiniteState",
    "COCOBState",
    "ClipByGlobalNormState",
    "ClipState",
    "ConditionallyMaskState",
    "ConditionallyTransformState",
    "DAdaptAdamWState",
    "DecayBeforeState",
    "DifferentiallyPrivateAggregateState",
    "DoGState",
    "DoWGState",
    "DynamicLossScaleState",
    "EmaParamsState",
    "EmaState",
    "EmptyState",
    "FactoredState",
    "FlattenState",
    "GaLoreState",
    "GradientTransformation",
    "GradientTransformationExtraArgs",
    "HutchinsonState",
    "InjectHyperparamsState",
    "InjectStatefulHyperparamsState",
    "LookaheadState",
    "MadgradState",
    "MaskedNode",
    "MaskedState",
    "MechanicState",
    "MomoAdamState",
    "MomoState",
    "MonitorState",
    "MonitoredState",
    "MultiStepsState",
    "MultiTransformState",
    "MuonDimensionNumbers",
    "MuonState",
    "NonNegativeParamsState",
    "NormalizeByUpdateNormState",
    "NormalizeState",
    "PartitionState",
    "ProdigyState",
    "ReduceLROnPlateauState",
    "ReduceOnPlateauState",
    "SAMState",
    "ScaleByAdaDeltaState",
    "ScaleByAdamState",
    "ScaleByAdanState",
    "ScaleByAdemamixState",
    "ScaleByAdoptState",
    "ScaleByAmsgradState",
    "ScaleByBacktrackingLinesearchState",
    "ScaleByBeliefState",
    "ScaleByDistanceOverGradientsState",
    "ScaleByFtrlState",
    "ScaleByLBFGSState",
    "ScaleByLearningRateState",
    "ScaleByLionState",
    "ScaleByNadamState",
    "ScaleByNovogradState",
    "ScaleByOptimisticGradientState",
    "ScaleByParamBlockNormState",
    "ScaleByParamBlockRMSState",
    "ScaleByPolyakState",
    "ScaleByRStdDevState",
    "ScaleByRmsState",
    "ScaleByRpropState",
    "ScaleByRssState",
    "ScaleBySM3State",
    "ScaleByScheduleState",
    "ScaleByShapeState",
    "ScaleBySimplifiedAdEMAMixState",
    "ScaleByTrustRatioState",
    "ScaleByYogiState",
    "ScaleByZoomLinesearchState",
    "ScaleState",
    "ScheduleFreeState",
    "SnapshotState",
    "SophiaState",
    "SplitRealAndImaginaryState",
    "TraceState",
    "UnscaleGradientsState",
    "ZeroNansState",
    "ZoomLinesearchInfo",
}
# Type aliases: documented by an attribute docstring (a string right after the assignment).
TYPE_ALIASES = {
    "MaskOrFn",
    "OptState",
    "Params",
    "ScalarOrSchedule",
    "Schedule",
    "ShouldSkipUpdateFunction",
    "TransformInitFn",
    "TransformUpdateExtraArgsFn",
    "TransformUpdateFn",
    "Updates",
}
# Classes that still lack an example. Remove a name once its docstring has one.
EXAMPLE_PENDING: set[str] = set()
# The module `optx.tree`: its functions are checked one by one.
MODULES = {
    "constraints",
    "contrib",
    "microbatching",
    "optimizers",
    "projections",
    "schedules",
    "second_order",
    "transforms",
    "tree",
}

README_QUICK_START = [
    'pip install -e ".[demo]" && python -m optx.demo',
    'pip install -e ".[test]" && pytest -n auto',
]


def _public(module: types.ModuleType, keep_modules: set[str]) -> list[str]:
    return sorted(
        name
        for name in dir(module)
        if not name.startswith("_")
        and (not isinstance(getattr(module, name), types.ModuleType) or name in keep_modules)
    )


def _diff_message(namespace: str, actual: list[str], expected: list[str]) -> str:
    added = sorted(set(actual) - set(expected))
    removed = sorted(set(expected) - set(actual))
    return (
        f"The public names of `{namespace}` changed. Added: {added or 'none'}; removed: "
        f"{removed or 'none'}. If this is intended, update the list in "
        f"tests/test_public_api.py (kept sorted) and note the change in CHANGELOG.md."
    )


NAMESPACES = {
    "optx": ("optx", OPTX_NAMES, MODULES),
    "optx.constraints": ("optx.constraints", CONSTRAINTS_NAMES, set()),
    "optx.tree": ("optx.tree", TREE_NAMES, set()),
    "optx.contrib": ("optx.contrib", CONTRIB_NAMES, set()),
    "optx.microbatching": ("optx.microbatching", MICROBATCHING_NAMES, set()),
    "optx.projections": ("optx.projections", PROJECTIONS_NAMES, set()),
    "optx.second_order": ("optx.second_order", SECOND_ORDER_NAMES, set()),
    "optx.transforms": ("optx.transforms", TRANSFORMS_NAMES, set()),
    "optx.schedules": ("optx.schedules", SCHEDULES_NAMES, set()),
    "optx.optimizers": ("optx.optimizers", OPTIMIZERS_NAMES, {"schedules"}),
    "optx.optimizers.schedules": ("optx.optimizers.schedules", KERAS_SCHEDULES_NAMES, set()),
}


@pytest.mark.parametrize("namespace", sorted(NAMESPACES))
def test_committed_lists_are_sorted_and_unique(namespace):
    expected = NAMESPACES[namespace][1]
    assert expected == sorted(set(expected))


@pytest.mark.parametrize("namespace", sorted(NAMESPACES))
def test_public_names(namespace):
    module_name, expected, modules = NAMESPACES[namespace]
    actual = _public(importlib.import_module(module_name), keep_modules=modules)
    assert actual == expected, _diff_message(namespace, actual, expected)


def test_exception_lists_name_public_names():
    # The exceptions name public objects of any namespace (a state class of `optx.contrib`).
    known = {qualified.rsplit(".", 1)[-1] for qualified, _ in _documented()} | TYPE_ALIASES
    listed = NAMEDTUPLES | TYPE_ALIASES | EXAMPLE_PENDING
    assert listed <= known, sorted(listed - known)
    assert set(OPTX_NAMES) >= MODULES, sorted(MODULES - set(OPTX_NAMES))
    assert not NAMEDTUPLES & TYPE_ALIASES and not EXAMPLE_PENDING & (NAMEDTUPLES | TYPE_ALIASES)


@pytest.mark.parametrize("name", sorted(NAMEDTUPLES))
def test_namedtuple_exceptions_are_namedtuples(name):
    found = [obj for qualified, obj in _documented() if qualified.rsplit(".", 1)[-1] == name]
    assert found, name
    for obj in found:
        assert inspect.isclass(obj) and issubclass(obj, tuple) and hasattr(obj, "_fields"), name


def _attribute_docstrings() -> dict[str, list[tuple[str, str]]]:
    """Attribute docstrings (``NAME = ...`` then a string) in optx: {name: [(module, doc)]}."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((ROOT / "optx").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        body = ast.parse(path.read_text(encoding="utf-8")).body
        for node, following in itertools.pairwise(body):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                for target in targets:
                    if isinstance(target, ast.Name):
                        found.setdefault(target.id, []).append((module, following.value.value))
    return found


@pytest.mark.parametrize("name", sorted(TYPE_ALIASES))
def test_type_aliases_have_attribute_docstrings(name):
    obj = getattr(optx, name)
    assert not inspect.isfunction(obj), f"{name} is a function, not a type alias"
    sources = [
        doc
        for module, doc in _attribute_docstrings().get(name, [])
        if getattr(importlib.import_module(module), name, None) is obj
    ]
    assert sources and sources[0].strip(), (
        f"Type alias optx.{name} needs a docstring: a string literal on the line after its "
        f"assignment."
    )


def _documented() -> list[tuple[str, object]]:
    names = [("optx." + n, getattr(optx, n)) for n in OPTX_NAMES if n not in TYPE_ALIASES]
    names += [("optx.tree." + n, getattr(optx.tree, n)) for n in TREE_NAMES]
    names += [("optx.constraints." + n, getattr(optx.constraints, n)) for n in CONSTRAINTS_NAMES]
    names += [("optx.schedules." + n, getattr(optx.schedules, n)) for n in SCHEDULES_NAMES]
    for module, listed in (
        ("contrib", CONTRIB_NAMES),
        ("microbatching", MICROBATCHING_NAMES),
        ("projections", PROJECTIONS_NAMES),
        ("second_order", SECOND_ORDER_NAMES),
        ("transforms", TRANSFORMS_NAMES),
    ):
        names += [
            (f"optx.{module}.{n}", getattr(getattr(optx, module), n))
            for n in listed
            if n not in TYPE_ALIASES
        ]
    names += [
        ("optx.optimizers.schedules." + n, getattr(optx.optimizers.schedules, n))
        for n in KERAS_SCHEDULES_NAMES
    ]
    return names


@pytest.mark.parametrize(("name", "obj"), _documented(), ids=[n for n, _ in _documented()])
def test_public_names_have_docstrings(name, obj):
    doc = inspect.getdoc(obj)
    assert doc and doc.strip(), f"{name} needs a docstring."
    first = doc.strip().splitlines()[0]
    assert first.strip(), f"{name} needs a one-line summary on the docstring's first line."


def _needs_example(qualified: str) -> bool:
    # States and type aliases, in any namespace, are documented by their fields.
    short = qualified.rsplit(".", 1)[-1]
    return short not in NAMEDTUPLES | TYPE_ALIASES | EXAMPLE_PENDING | MODULES


@pytest.mark.parametrize(("name", "obj"), _documented(), ids=[n for n, _ in _documented()])
def test_public_functions_and_classes_have_examples(name, obj):
    doc = inspect.getdoc(obj) or ""
    has_example = "Example" in doc and any(
        line.strip().startswith(">>>") for line in doc.splitlines()
    )
    if _needs_example(name):
        assert has_example, (
            f"{name}'s docstring needs an `Example:` section with a `>>> ` doctest "
            f"(run by `pytest --doctest-modules optx`)."
        )
    elif name.rsplit(".", 1)[-1] in EXAMPLE_PENDING:
        assert not has_example, (
            f"{name} now has an example: remove it from EXAMPLE_PENDING in "
            f"tests/test_public_api.py."
        )


def test_public_objects_are_defined_in_optx():
    for name in OPTX_NAMES:
        obj = getattr(optx, name)
        module = getattr(obj, "__module__", None)
        if name in TYPE_ALIASES or module is None:
            continue
        assert module.startswith("optx"), f"optx.{name} comes from {module}, not from optx."


# -- the README's set-up commands and .ci/run --------------------------------------------------


def _quick_start_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = "<!-- quick-start:begin -->", "<!-- quick-start:end -->"
    assert text.count(start) == 1 and text.count(end) == 1, f"README.md needs {start} … {end}"
    block = text.split(start, 1)[1].split(end, 1)[0]
    return [line for line in block.strip().splitlines() if not line.startswith("```")]


def test_readme_quick_start_commands():
    assert _quick_start_block() == README_QUICK_START


def test_ci_run_is_an_executable_strict_bash_script():
    script = ROOT / ".ci" / "run"
    text = script.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert os.access(script, os.X_OK), ".ci/run must be executable (chmod +x .ci/run)."


def test_ci_run_runs_the_readme_test_command():
    result = subprocess.run(
        ["bash", str(ROOT / ".ci" / "run"), "--print-command"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert result.stdout.strip() == README_QUICK_START[1]


def test_readme_python_snippets_run():
    """The README's ```python blocks, run in order in one namespace (they build on each other)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    assert len(blocks) >= 5
    namespace: dict[str, object] = {"__name__": "readme"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"README.md python block {i}", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"README.md's python block {i} fails:\n{block}") from error
