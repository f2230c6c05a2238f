"""optax's public names against optx's: what is where, and the table of what differs.

For every public name of the optax modules below (``dir()``, modules left out), optx must
have the same name at the same path, and a function or class must take the same
parameters, by name and in order (extra ones only keyword-only), with the same defaults,
unless the name is in `EXCLUDED` or `SIGNATURES` below, each with its reason.

`differences_table()` writes the table of those exceptions, and of the extra keyword-only
arguments optx adds, that README.md's "Coming from optax" and docs/coming_from_optax.md
show between their markers; tests/test_optax_names.py checks both hold it. After a change,
write it again:

    python tests/optax_names.py --write
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import math
import pathlib
import types
from collections.abc import Iterator
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = (README, ROOT / "docs" / "coming_from_optax.md")
BEGIN, END = "<!-- optax-differences:begin -->", "<!-- optax-differences:end -->"

# The optax modules whose names optx mirrors (optx's path is the same with `optx`).
MODULES = (
    "optax",
    "optax.contrib",
    "optax.transforms",
    "optax.tree",
    "optax.projections",
    "optax.second_order",
    "optax.microbatching",
    "optax.schedules",
)

_LOSS = "a loss: losses are out of optx's scope (use `optax.losses`)"

# Names optx does not have, each with its reason (shown in the README's table).
EXCLUDED: dict[str, str] = {
    # Losses, exported at optax's top level from `optax.losses`.
    **{
        f"optax.{name}": _LOSS
        for name in (
            "convex_kl_divergence",
            "cosine_distance",
            "cosine_similarity",
            "ctc_loss",
            "ctc_loss_with_forward_probs",
            "generalized_kl_divergence",
            "hinge_loss",
            "huber_loss",
            "kl_divergence",
            "l2_loss",
            "log_cosh",
            "ntxent",
            "safe_softmax_cross_entropy",
            "sigmoid_binary_cross_entropy",
            "sigmoid_focal_loss",
            "smooth_labels",
            "softmax_cross_entropy",
            "softmax_cross_entropy_with_integer_labels",
            "squared_error",
        )
    },
    # optx's `lookahead` takes the plain parameters and keeps the slow ones in its state.
    "optax.LookaheadParams": (
        "`optx.lookahead` takes the plain parameters (the fast weights) and keeps the slow "
        "ones in its state (`state.slow`): no pair of parameters to build"
    ),
}

# Names optx has with another signature, each with its reason.
SIGNATURES: dict[str, str] = {
    "optax.scale_by_learning_rate": "`learning_rate` has no default (optax's is `None`)",
    "optax.contrib.hutchinson_estimator_diag_hessian": (
        "`random_seed` defaults to 0, not `None` (a fixed key, so that a run repeats)"
    ),
    "optax.contrib.sophia": (
        "no `verbose` / `print_win_rate_every_n_steps` (read the clip rate from the state); "
        "`hessian_diagonal_fn=None` means Hutchinson's estimator; extra `nu_dtype`; "
        "`update` reads `obj_fn=`"
    ),
}

# State classes whose fields are not optax's followed by optx's own (`hyperparams`), each
# with its reason.
_ONE_COUNT = "one step counter, `count`, first"
STATES: dict[str, str] = {
    "optax.ScaleByAdanState": _ONE_COUNT + " (optax's `t` is last)",
    "optax.ScaleByRStdDevState": "a `count` first (optax's keeps none)",
    "optax.ScaleByRmsState": "a `count` first (optax's keeps none)",
    "optax.contrib.ProdigyState": _ONE_COUNT + " (optax's is last)",
    "optax.contrib.ScaleByAdemamixState": _ONE_COUNT + " (no `count_m2`)",
    "optax.contrib.ScaleBySimplifiedAdEMAMixState": "the step count is `count` (optax's `t`)",
    "optax.contrib.ScheduleFreeState": (
        _ONE_COUNT + " (no `b1` or `step_count`: `b1` is a hyperparameter in the state)"
    ),
}


def _public(module: types.ModuleType) -> list[str]:
    return sorted(
        name
        for name in dir(module)
        if not name.startswith("_") and not isinstance(getattr(module, name), types.ModuleType)
    )


def optax_names() -> Iterator[tuple[str, Any]]:
    """``(qualified name, object)`` of every public optax name this file checks."""
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in _public(module):
            yield f"{module_name}.{name}", getattr(module, name)


def optx_object(qualified: str) -> Any:
    """The optx object at optax's path ``qualified`` (``AttributeError`` if none)."""
    module_name, _, name = qualified.rpartition(".")
    module = importlib.import_module("optx" + module_name[len("optax") :])
    return getattr(module, name)


def _signature(obj: Any) -> inspect.Signature | None:
    if inspect.isclass(obj) and issubclass(obj, tuple) and hasattr(obj, "_fields"):
        return None  # a NamedTuple (a state): its fields are compared elsewhere
    if not callable(obj):
        return None
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def _is_transform(x: Any) -> bool:
    return callable(getattr(x, "init", None)) and callable(getattr(x, "update", None))


def _same_default(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if _is_transform(a) and _is_transform(b):
        return True  # a default transform (`lbfgs`'s line search): built alike, not comparable
    if isinstance(a, enum.Enum) and isinstance(b, enum.Enum):
        return (a.name, a.value) == (b.name, b.value)  # optx's enum mirrors optax's
    if callable(a) or callable(b):
        # Functions (a default `clip_value_fn`) compare by what they compute, not identity;
        # dtypes (`jnp.float32`) by name.
        return getattr(a, "__name__", a) == getattr(b, "__name__", b) or (
            callable(a) and callable(b)
        )
    try:
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return bool(a == b)
    except Exception:
        return False


def signature_problems(theirs: inspect.Signature, ours: inspect.Signature) -> list[str]:
    """What makes ``ours`` not a drop-in for ``theirs`` (empty if it is one)."""
    problems = []
    theirs_params = [
        p for p in theirs.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    ours_params = list(ours.parameters.values())
    for i, p in enumerate(theirs_params):
        if i >= len(ours_params):
            problems.append(f"no parameter `{p.name}`")
            continue
        q = ours_params[i]
        if p.kind is q.kind is inspect.Parameter.VAR_POSITIONAL:
            continue  # `*args` and `*transforms` are called alike
        if q.name != p.name:
            problems.append(f"parameter {i} is `{q.name}`, optax's is `{p.name}`")
        elif p.default is not inspect.Parameter.empty and not _same_default(p.default, q.default):
            problems.append(f"`{p.name}` defaults to {q.default!r}, optax's to {p.default!r}")
    for q in ours_params[len(theirs_params) :]:
        if q.kind not in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD):
            problems.append(f"extra parameter `{q.name}` is not keyword-only")
    return problems


def extras(theirs: inspect.Signature, ours: inspect.Signature) -> list[str]:
    """optx's extra keyword-only parameters."""
    names = set(theirs.parameters)
    return [
        q.name
        for q in ours.parameters.values()
        if q.name not in names and q.kind is inspect.Parameter.KEYWORD_ONLY
    ]


def state_problems() -> list[str]:
    """State classes whose fields do not start with optax's, not listed in `STATES`."""
    problems = []
    for qualified, obj in optax_names():
        if not (inspect.isclass(obj) and issubclass(obj, tuple) and hasattr(obj, "_fields")):
            continue
        if qualified in EXCLUDED or qualified in STATES:
            continue
        try:
            ours = optx_object(qualified)
        except AttributeError:
            continue
        fields = tuple(getattr(ours, "_fields", ()))
        if fields[: len(obj._fields)] != tuple(obj._fields):
            problems.append(f"{qualified}: fields {fields}, optax's {tuple(obj._fields)}")
    return problems


def check() -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """``(missing, bad signatures, [(name, extra arguments)])`` over every optax name."""
    missing, bad, extra = [], [], []
    for qualified, obj in optax_names():
        if qualified in EXCLUDED:
            continue
        try:
            ours = optx_object(qualified)
        except AttributeError:
            missing.append(qualified)
            continue
        theirs_sig, ours_sig = _signature(obj), _signature(ours)
        if theirs_sig is None or ours_sig is None or qualified in SIGNATURES:
            continue
        problems = signature_problems(theirs_sig, ours_sig)
        if problems:
            bad.append(f"{qualified}: {'; '.join(problems)}")
        more = extras(theirs_sig, ours_sig)
        if more:
            extra.append((qualified, ", ".join(f"`{m}`" for m in more)))
    return missing, bad, extra


def differences_table() -> str:
    """The markdown table of every optax name optx lacks, or takes other arguments for."""
    _, _, extra = check()
    rows = ["| optax | optx | difference |", "|---|---|---|"]
    by_reason: dict[str, list[str]] = {}
    for qualified, reason in sorted(EXCLUDED.items()):
        by_reason.setdefault(reason, []).append(f"`{qualified}`")
    for reason, qualified_names in by_reason.items():  # one row per reason (the losses)
        rows.append(f"| {', '.join(qualified_names)} | — | {reason} |")
    for qualified, reason in sorted(SIGNATURES.items()):
        rows.append(f"| `{qualified}` | `{'optx' + qualified[5:]}` | {reason} |")
    for qualified, reason in sorted(STATES.items()):
        rows.append(f"| `{qualified}` | `{'optx' + qualified[5:]}` | fields: {reason} |")
    seen = set()
    # The top level first: a name optax also exports from a submodule is shown once.
    for qualified, more in sorted(extra, key=lambda e: (e[0].count("."), e[0])):
        target = "optx" + qualified[5:]
        obj = optx_object(qualified)
        if id(obj) in seen:
            continue  # the same object again, under a submodule's path
        seen.add(id(obj))
        rows.append(f"| `{qualified}` | `{target}` | extra keyword-only {more} |")
    return "\n".join(rows) + "\n"


def page_table(page: pathlib.Path) -> str:
    """The table between a page's markers."""
    text = page.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise AssertionError(f"{page.name} needs {BEGIN} ... {END} once each")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def write_pages() -> None:
    """Writes `differences_table()` between the markers of README.md and the docs page."""
    table = differences_table()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        page.write_text(f"{head}{BEGIN}\n{table}{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the pages' tables")
    args = parser.parse_args()
    if args.write:
        write_pages()
    missing, bad, _ = check()
    print(f"missing: {len(missing)}")
    print("\n".join(missing))
    print(f"signatures: {len(bad)}")
    print("\n".join(bad))
