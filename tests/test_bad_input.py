"""Bad input: every public factory and class refuses it clearly, at the call that caused it.

For every transform of the conformance registry (`tests/registry.py`), every numeric argument
of every public factory, every Keras-style class (constructor and ``from_config``),
``optx.optimizers.get`` / ``deserialize`` and the schedules, the suite tries wrong types,
NaN and infinities, out-of-range values, mismatched pytrees, integer, complex and non-array
leaves, empty trees, ``None`` leaves, masks and labels that do not fit, and hostile configs.
Each must raise a `TypeError` or `ValueError` in optx's own words (the message starts with the
API's name in backticks) naming the argument or the leaf path and the value received; never an
error from inside JAX, a `RecursionError`, a message of megabytes, or a silently wrong result.

Where the right behaviour is a choice, the suite holds optx to this:

- An empty pytree ``{}`` just works (there is nothing to update). A mask or labels that name
  leaves refuse it, as they refuse any tree they do not fit.
- ``None`` as a subtree of the parameters (an Equinox-style filtered tree) is no parameter: it
  works everywhere and its update is ``None`` (a mask or labels given as a tree must name it,
  as any key).
- A ``None`` gradient of a parameter: a transform that keeps per-parameter state refuses it,
  naming the leaf (and pointing to `optx.skip_missing`); a per-leaf stateless one passes it
  through, and the other leaves get exactly what they get when that parameter is absent.
- optx optimises floating-point arrays, real or (where optax does, tests/test_complex.py)
  complex. An integer, complex (where unsupported) or non-array (Python number, string) leaf
  is refused with a `TypeError` naming its path by every transform that computes with it;
  transforms that only route or pass values through (``identity``, ``set_to_zero``,
  ``stateless``, ``zero_nans``, ...) return exactly what they return for the same values as
  floats; a transform that supports complex values gives finite updates of the parameters'
  dtypes; and `apply_updates` refuses an update it would truncate (float onto an integer
  parameter) or whose imaginary part it would drop.
- Integer gradients of float parameters are never truncated: a transform that computes with
  them refuses them (naming the leaf) or gives floating-point updates; one that passes them
  through returns them exactly.
- The Keras-style classes keep Keras's leniency (DESIGN D12): boolean flags take any truthy
  value, the EMA options are checked only with ``use_ema=True``, and ``None`` means "off";
  those are not bad input.

The suite counts the distinct bad inputs it tries; ``pytest tests/test_bad_input.py -s``
prints the number (`test_count_of_bad_inputs`, last in the module, checks it).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optx
from optx import optimizers as O  # noqa: N812
from optx._src import hyperparams  # declared range rules
from optx.optimizers import schedules as S  # noqa: N812

try:
    from tests import registry
except ImportError:  # tests/ is not a package: pytest put it on sys.path.
    import registry

# Every distinct bad input tried, as a short description; `test_count_of_bad_inputs` reports it.
TRIED: set[str] = set()
HYPOTHESIS = settings(max_examples=60, deadline=None, derandomize=True, database=None)
# A message shows at most a few hundred characters of any value (see optx/_src/reprs.py).
MAX_MESSAGE = 2000


class Junk:
    """An object of no use as any argument, with a stable repr."""

    def __repr__(self) -> str:
        return "<junk>"


NAN, INF = float("nan"), float("inf")
# Wrong types and non-finite values that no numeric argument takes.
BAD_NUMBERS = ["x", [1.0], {"a": 1.0}, Junk(), complex(1, 2), True, NAN, INF, -INF]


def _nested(depth: int, leaf: Any = 1.0) -> Any:
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


def check_error(
    key: str,
    call: Callable[[], Any],
    errors: type[Exception] | tuple[type[Exception], ...] = (TypeError, ValueError),
    fragments: tuple[str, ...] = (),
) -> str | None:
    """Runs ``call``, which must raise one of ``errors`` in optx's words naming ``fragments``.

    Returns ``None``, or a description of what went wrong (collected, not raised, so that one
    test reports every failing input at once).
    """
    TRIED.add(key)
    try:
        call()
    except Exception as error:  # judged: it must be one of `errors`, in optx's words
        return judge(key, error, errors if isinstance(errors, tuple) else (errors,), fragments)
    return f"{key}: accepted"


def judge(
    key: str, error: Exception, errors: tuple[type[Exception], ...], fragments: tuple[str, ...]
) -> str | None:
    """``None`` if ``error`` is one of ``errors`` in optx's words naming ``fragments``."""
    message = str(error)
    if not isinstance(error, errors):
        return f"{key}: {type(error).__name__} instead: {message[:300]!r}"
    if not message.startswith("`"):
        return f"{key}: {type(error).__name__} not in optx's words: {message[:300]!r}"
    lacking = [f for f in fragments if f not in message]
    if lacking:
        return f"{key}: the message lacks {lacking}: {message[:300]!r}"
    if len(message) > MAX_MESSAGE:
        return f"{key}: a message of {len(message)} characters: {message[:200]!r}..."
    return None


def assert_no_failures(failures: list[str | None]) -> None:
    failed = [f for f in failures if f is not None]
    assert not failed, f"{len(failed)} bad inputs not refused clearly:\n" + "\n".join(failed)


# ---------------------------------------------------------------------------------------
# Factories' numeric arguments.

ENTRIES = list(registry.REGISTRY.values())


@dataclasses.dataclass(frozen=True)
class Argument:
    """A numeric argument of a public factory, with the call of a registry entry."""

    factory: str
    name: str
    index: int | None  # the element, for a tuple of numbers (``betas``)
    call: inspect.BoundArguments
    annotation: str

    @property
    def api(self) -> str:
        """The factory's name as messages show it (``acprop`` for ``contrib.acprop``)."""
        return registry.resolve(self.factory)[1]

    def with_value(self, value: Any) -> Callable[[], Any]:
        arguments = dict(self.call.arguments)
        if self.index is None:
            arguments[self.name] = value
        else:
            items = list(arguments[self.name])
            items[self.index] = value
            arguments[self.name] = tuple(items)
        bound = inspect.BoundArguments(self.call.signature, arguments)  # type: ignore[arg-type]
        fn = getattr(*registry.resolve(self.factory))
        return lambda: fn(*bound.args, **bound.kwargs)

    @property
    def shown(self) -> str:
        return self.name if self.index is None else f"{self.name}[{self.index}]"


def _recorded_call(entry: registry.Entry) -> inspect.BoundArguments:
    """The arguments of the call of ``optx.<public>`` that the entry's factory makes."""
    namespace, name = registry.resolve(entry.public)
    fn = getattr(namespace, name)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def recorder(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            calls.append((args, kwargs))
        return fn(*args, **kwargs)

    setattr(namespace, name, recorder)
    try:
        entry()
    finally:
        setattr(namespace, name, fn)
    args, kwargs = calls[0] if calls else ((), {})  # registered as the factory itself
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _arguments() -> list[Argument]:
    found: dict[tuple[str, str, int | None], Argument] = {}
    for entry in ENTRIES:
        call = _recorded_call(entry)
        for name, value in call.arguments.items():
            annotation = str(call.signature.parameters[name].annotation)
            if _is_number(value):
                indices: list[int | None] = [None]
            elif isinstance(value, tuple) and value and all(_is_number(v) for v in value):
                indices = list(range(len(value)))
            else:
                continue
            for index in indices:
                key = (entry.public, name, index)
                found.setdefault(key, Argument(entry.public, name, index, call, annotation))
    return sorted(found.values(), key=lambda a: (a.factory, a.name, a.index or 0))


ARGUMENTS = _arguments()


def _transforms(value: Any) -> Iterator[optx.Transform]:
    """Every built-in transform inside ``value`` (chains, wrappers, partitions)."""
    if isinstance(value, optx.Transform):
        yield value
        for field in dataclasses.fields(value):  # type: ignore[arg-type]
            yield from _transforms(getattr(value, field.name))
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _transforms(item)


# Range rules by description: values outside them, as a hypothesis strategy.
_OUTSIDE = {
    "finite and >= 0": st.floats(max_value=-1e-6, allow_nan=False, allow_infinity=False),
    "finite and > 0": st.floats(max_value=0.0, allow_nan=False, allow_infinity=False),
    "in [0, 1)": st.one_of(
        st.floats(max_value=-1e-6, allow_nan=False, allow_infinity=False),
        st.floats(min_value=1.0, allow_nan=False, allow_infinity=False),
    ),
    "in [0, 1]": st.one_of(
        st.floats(max_value=-1e-6, allow_nan=False, allow_infinity=False),
        st.floats(min_value=1.0 + 1e-6, allow_nan=False, allow_infinity=False),
    ),
}


def _declared_ranges() -> list[tuple[Argument, str]]:
    """Scalar arguments whose building blocks declare one range rule for them."""
    out = []
    for argument in ARGUMENTS:
        if argument.index is not None:
            continue
        built = argument.with_value(argument.call.arguments[argument.name])()
        rules = set()
        for t in _transforms(built):
            if argument.name not in t.hyperparam_names():
                continue
            field = {v: k for k, v in t.public_names().items()}.get(argument.name, argument.name)
            rules.add(dict(hyperparams.specs(type(t)))[field].rule.description)
        if len(rules) == 1 and (rule := rules.pop()) in _OUTSIDE:
            out.append((argument, rule))
    return out


RANGED = _declared_ranges()
RANGE_RULES = {(a.factory, a.name): rule for a, rule in RANGED}
JUST_OUTSIDE = {
    "finite and >= 0": -1e-3,
    "finite and > 0": 0.0,
    "in [0, 1)": 1.0,
    "in [0, 1]": 1.001,
}


def _takes_infinity(argument: Argument) -> bool:
    """Whether a building block declares ``+inf`` in range for the argument.

    A line search's ``curv_rtol=inf`` drops its curvature condition, as in optax.
    """
    if argument.index is not None:
        return False
    built = argument.with_value(argument.call.arguments[argument.name])()
    for t in _transforms(built):
        if argument.name in t.hyperparam_names():
            field = {v: k for k, v in t.public_names().items()}.get(argument.name, argument.name)
            if dict(hyperparams.specs(type(t)))[field].rule.infinite:
                return True
    return False


@pytest.mark.parametrize("argument", ARGUMENTS, ids=[f"{a.factory}-{a.shown}" for a in ARGUMENTS])
def test_factory_argument_of_wrong_type_not_finite_or_out_of_range(argument: Argument) -> None:
    bad_values = [v for v in BAD_NUMBERS if not (v == INF and _takes_infinity(argument))]
    if argument.index is None and "None" not in argument.annotation:
        bad_values.append(None)
    failures = []
    rule = RANGE_RULES.get((argument.factory, argument.name))
    if rule is not None and argument.index is None:  # just outside the declared range
        failures.append(
            check_error(
                f"optx.{argument.factory}({argument.name}={JUST_OUTSIDE[rule]!r})",
                argument.with_value(JUST_OUTSIDE[rule]),
                ValueError,
                (f"`{argument.api}`", argument.name, rule, repr(JUST_OUTSIDE[rule])),
            )
        )
    for bad in bad_values:
        failures.append(
            check_error(
                f"optx.{argument.factory}({argument.shown}={bad!r})",
                argument.with_value(bad),
                # A tuple's element: the message may show the whole tuple.
                fragments=(f"`{argument.api}`", argument.name, repr(bad)),
            )
        )
    assert_no_failures(failures)


@HYPOTHESIS
@given(st.data())
def test_factory_argument_out_of_its_declared_range(data: st.DataObject) -> None:
    argument, rule = data.draw(st.sampled_from(RANGED), label="argument")
    value = data.draw(_OUTSIDE[rule], label="value")
    failure = check_error(
        f"optx.{argument.factory}({argument.name}={value!r})",
        argument.with_value(value),
        ValueError,
        (f"`{argument.api}`", argument.name, rule, repr(value)),
    )
    assert failure is None, failure


JUNK = st.one_of(
    st.text(max_size=30),
    st.binary(max_size=10),
    st.lists(st.floats(), min_size=1, max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), min_size=1, max_size=3),
    st.complex_numbers(min_magnitude=1e-3),
    st.builds(Junk),
    st.just(np.ones(2)),
)


@HYPOTHESIS
@given(st.sampled_from([a for a in ARGUMENTS if a.index is None]), JUNK)
def test_factory_argument_that_is_junk(argument: Argument, junk: Any) -> None:
    failure = check_error(
        f"optx.{argument.factory}({argument.name}=<{type(junk).__name__} {junk!r:.40}>)",
        argument.with_value(junk),
        fragments=(f"`{argument.api}`", argument.name),
    )
    assert failure is None, failure


# ---------------------------------------------------------------------------------------
# Pytrees given to init / update / apply_updates, for every registry entry.

IDS = [e.key for e in ENTRIES]
TARGET = "dense/kernel"  # the leaf each case spoils: masks and labels of the registry select it
_DELETE, _KEEP = object(), object()
# Its `update` estimates the Hessian of `obj_fn` at whatever parameters it is given, and
# keeps no per-parameter state: it reads no updates, and has nothing to check parameters by.
IGNORES_TREES = frozenset({"hutchinson_estimator_diag_hessian"})


def _leaf(shape: tuple[int, ...], start: float, dtype: Any = jnp.float32) -> jax.Array:
    n = int(np.prod(shape))
    return jnp.asarray((start + 0.37 * np.arange(n)).reshape(shape), dtype)


def make_tree(start: float, kernel: Any = _KEEP) -> dict[str, Any]:
    """The conformance suite's structure (the registry's masks and labels fit it), tiny."""
    tree = {
        "dense": {"kernel": _leaf((2, 3), start), "bias": _leaf((3,), start + 1)},
        "layers": [_leaf((2,), start + 2)],
        "scale": _leaf((), start + 3),
    }
    return tree if kernel is _KEEP else with_kernel(tree, kernel)


def with_kernel(tree: dict[str, Any], kernel: Any) -> dict[str, Any]:
    dense = dict(tree["dense"])
    if kernel is _DELETE:
        del dense["kernel"]
    else:
        dense["kernel"] = kernel
    return {**tree, "dense": dense}


def run(entry: registry.Entry, init_params: Any, grads: Any, params: Any) -> tuple[Any, Any]:
    """``init``, one ``update`` and `optx.apply_updates`: (updates, new parameters)."""
    return step(entry(), entry.extra, init_params, grads, params)


def step(tx: Any, extra: dict[str, Any], init_params: Any, grads: Any, params: Any) -> Any:
    return update_step(tx, extra, tx.init(init_params), grads, params)


def update_step(tx: Any, extra: dict[str, Any], state: Any, grads: Any, params: Any) -> Any:
    updates, _ = tx.update(grads, state, params, **extra)
    return updates, optx.apply_updates(params, updates)


def _flat(tree: Any) -> list[tuple[str, Any]]:
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: x is None)[0]
    return [(jax.tree_util.keystr(p, simple=True, separator="/"), x) for p, x in flat]


def differences(got: Any, expected: Any, combine: Callable[[Any], Any] = lambda x: x) -> list[str]:
    """Leaves of ``got`` that differ from ``expected`` (exactly; ``None`` must match)."""
    got_flat, expected_flat = _flat(got), _flat(expected)
    if [p for p, _ in got_flat] != [p for p, _ in expected_flat]:
        return [f"paths {[p for p, _ in got_flat]} != {[p for p, _ in expected_flat]}"]
    out = []
    for (path, g), (_, e) in zip(got_flat, expected_flat, strict=True):
        if g is None or e is None:
            if g is not e:
                out.append(f"{path}: {g!r} != {e!r}")
        elif not np.array_equal(np.asarray(g), combine(e)):
            out.append(f"{path}: {np.asarray(g)!r} != {combine(e)!r}")
    return out


@dataclasses.dataclass(frozen=True)
class TreeCase:
    """Inputs that do not fit; refused with ``errors`` naming ``fragments``, or else ``oracle``.

    ``oracle(entry, inputs, result)`` is the check of a transform that accepts the input
    (``None``: it must not): it returns a description of a wrong result, or ``None``.
    """

    name: str
    inputs: Callable[[], tuple[Any, Any, Any]]
    errors: tuple[type[Exception], ...]
    fragments: tuple[str, ...]
    oracle: Callable[[registry.Entry, tuple[Any, Any, Any], Any], str | None] | None = None
    # A tree that does not fit the parameters at init (always `make_tree(0.5)`), rather
    # than a leaf of the wrong kind.
    structure: bool = True
    # Traced (`jax.eval_shape`: no computation, no compilation); the errors come while
    # tracing. Inputs with non-array leaves run eagerly, as tracing would make them arrays.
    abstract: bool = True

    def check(self, entry: registry.Entry, tx: Any, state: Any) -> str | None:
        """``tx`` is ``entry()`` and ``state`` the shapes of its state for `make_tree(0.5)`.

        The transform is built outside any trace (it holds no tracers).
        """
        key = f"{entry.key}: {self.name}"
        TRIED.add(key)
        inputs = _cached(self.inputs)
        try:
            if self.structure:
                jax.eval_shape(functools.partial(update_step, tx, entry.extra), state, *inputs[1:])
            elif self.abstract:
                jax.eval_shape(functools.partial(step, tx, entry.extra), *inputs)
            else:
                result = run(entry, *inputs)
        except Exception as error:  # judged: it must be one of `errors`, in optx's words
            return judge(key, error, self.errors, self.fragments)
        if self.structure and entry.public in IGNORES_TREES:
            return None
        if self.oracle is None:
            return f"{key}: accepted"
        if self.abstract:
            result = run(entry, *inputs)
        problem = self.oracle(entry, inputs, result)
        return None if problem is None else f"{key}: accepted, but {problem}"


def _like_floats(entry: registry.Entry, inputs: Any, result: Any) -> str | None:
    """Integer or Python-number leaves: exactly the results of the same values as float32."""
    as_float = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), inputs)
    expected = run(entry, *as_float)
    wrong = differences(result, expected, lambda x: np.asarray(x))
    return f"differs from the float32 run: {wrong}" if wrong else None


def _like_complex(entry: registry.Entry, inputs: Any, result: Any) -> str | None:
    """Complex leaves, for a transform that supports them: finite updates and parameters of
    the parameters' dtypes (tests/test_complex.py checks the numbers against optax's)."""
    del entry
    dtypes = [x.dtype for x in jax.tree.leaves(inputs[2])]
    wrong = []
    for name, tree in zip(("updates", "parameters"), result, strict=True):
        leaves = jax.tree.leaves(tree)
        if [x.dtype for x in leaves] != dtypes:
            wrong.append(f"{name} of dtypes {[str(x.dtype) for x in leaves]}")
        elif not all(bool(jnp.all(jnp.isfinite(x))) for x in leaves):
            wrong.append(f"non-finite {name}")
    return f"complex leaves gave {wrong}" if wrong else None


def _as_if_absent(entry: registry.Entry, inputs: Any, result: Any) -> str | None:
    """A ``None`` gradient: the other leaves as when the parameter is absent (``None``)."""
    init_params, grads, params = inputs
    expected_updates, _ = run(
        entry, with_kernel(init_params, None), grads, with_kernel(params, None)
    )
    updates, new_params = result
    wrong = differences(updates, expected_updates)
    if not np.array_equal(new_params["dense"]["kernel"], params["dense"]["kernel"]):
        wrong.append("the parameter moved")
    return f"differs from the run without the parameter: {wrong}" if wrong else None


@functools.cache
def _cached(inputs: Callable[[], tuple[Any, Any, Any]]) -> tuple[Any, Any, Any]:
    """The inputs of a case, made once (arrays are immutable; the trees are not changed)."""
    return inputs()


INT_KERNEL = jnp.asarray([[3, -2, 5], [1, 4, -6]], jnp.int32)


def _three(kernel: Any) -> Callable[[], tuple[Any, Any, Any]]:
    """The same leaf in the parameters at init, the gradients and the parameters."""
    return lambda: (make_tree(0.5, kernel), make_tree(-0.25, kernel), make_tree(0.5, kernel))


def _grads(kernel: Any) -> Callable[[], tuple[Any, Any, Any]]:
    return lambda: (make_tree(0.5), make_tree(-0.25, kernel), make_tree(0.5))


def _params(kernel: Any) -> Callable[[], tuple[Any, Any, Any]]:
    """The parameters given to `update` (and `apply_updates`) differ from those at init."""
    return lambda: (make_tree(0.5), make_tree(-0.25), make_tree(0.5, kernel))


def _grads_tuple_for_list() -> tuple[Any, Any, Any]:
    grads = make_tree(-0.25)
    return make_tree(0.5), {**grads, "layers": tuple(grads["layers"])}, make_tree(0.5)


def _grads_extra_leaf() -> tuple[Any, Any, Any]:
    return make_tree(0.5), {**make_tree(-0.25), "extra": jnp.ones(2)}, make_tree(0.5)


Q = f"'{TARGET}'"
TREE_CASES = [
    TreeCase("gradient missing", _grads(_DELETE), (ValueError,), (Q,)),
    TreeCase("extra gradient", _grads_extra_leaf, (ValueError,), ("'extra'",)),
    TreeCase("tuple for a list", _grads_tuple_for_list, (ValueError,), ("structure",)),
    TreeCase("gradient of another shape", _grads(jnp.ones((3, 2))), (ValueError,), (Q, "(3, 2)")),
    TreeCase(
        "gradient of a broadcastable shape", _grads(jnp.ones((1, 3))), (ValueError,), (Q, "(1, 3)")
    ),
    TreeCase(
        "complex gradient of a real parameter",
        _grads(jnp.ones((2, 3), jnp.complex64)),
        (TypeError,),
        (Q, "complex64"),
    ),
    # Refused (the message points to `optx.skip_missing` where the gradient reaches a
    # transform with per-parameter state; a mask or labels computed from the gradients leave
    # the leaf out, and it is then reported missing), or passed through.
    TreeCase("None gradient", _grads(None), (ValueError,), (Q,), _as_if_absent),
    TreeCase("parameter missing at update", _params(_DELETE), (ValueError,), (Q,)),
    TreeCase(
        "parameter of another shape at update", _params(jnp.ones((3, 2))), (ValueError,), (Q,)
    ),
    TreeCase(
        "integer parameter",
        _three(INT_KERNEL),
        (TypeError,),
        (Q, "int32"),
        _like_floats,
        structure=False,
    ),
    TreeCase(
        "complex parameter",
        _three(jnp.asarray(INT_KERNEL * (0.5 + 0.25j), jnp.complex64)),
        (TypeError,),
        (Q, "complex64"),
        _like_complex,
        structure=False,
    ),
    TreeCase(
        "Python float leaf",
        _three(1.5),
        (TypeError,),
        (Q, "float"),
        _like_floats,
        structure=False,
        abstract=False,
    ),
    TreeCase("string leaf", _three("x"), (TypeError,), (Q, "str"), structure=False, abstract=False),
]


def _works_with_empty_tree(entry: registry.Entry, tx: Any) -> str | None:
    """``{}`` works (nothing to update), or a mask / labels that name leaves refuse it."""
    key = f"{entry.key}: empty tree"
    TRIED.add(key)
    try:
        updates, new_params = jax.eval_shape(functools.partial(step, tx, entry.extra), {}, {}, {})
    except ValueError as error:
        return judge(key, error, (ValueError,), ("structure of the parameters",))
    except Exception as error:  # judged: only a mask's or labels' ValueError may refuse it
        return judge(key, error, (), ())
    if entry.public not in IGNORES_TREES and (updates, new_params) != ({}, {}):
        return f"{key}: gave {updates!r}, {new_params!r}"
    return None


def _works_with_none_subtree_and_float16(entry: registry.Entry, tx: Any) -> str | None:
    """``None`` subtrees of the parameters, float16 gradients of float32 ones: fine.

    A mask or labels given as a tree must name the ``None`` subtree too (as any key).
    """
    key = f"{entry.key}: None subtree, float16 gradient"
    TRIED.add(key)
    params = {**make_tree(0.5), "frozen": None}
    grads = {**make_tree(-0.25), "frozen": None}
    grads["layers"] = [grads["layers"][0].astype(jnp.float16)]
    try:
        updates, new_params = jax.eval_shape(
            functools.partial(step, tx, entry.extra), params, grads, params
        )
    except Exception as error:  # judged: only a mask or labels given as a tree may refuse it
        return judge(key, error, (ValueError,), ("structure of the parameters", "'frozen': None"))
    shapes = [(p, getattr(x, "shape", x)) for p, x in _flat(updates)]
    if entry.public not in IGNORES_TREES and shapes != [
        (p, getattr(x, "shape", x)) for p, x in _flat(params)
    ]:
        return f"{key}: updates {shapes}"
    dtypes = [(p, getattr(x, "dtype", x)) for p, x in _flat(new_params)]
    if dtypes != [(p, getattr(x, "dtype", x)) for p, x in _flat(params)]:
        return f"{key}: new parameters of dtypes {dtypes}"
    return None


def _integer_gradient(entry: registry.Entry, tx: Any, state: Any) -> str | None:
    """Refused, or floating-point updates (or the integers passed through exactly)."""
    key = f"{entry.key}: integer gradient of a float parameter"
    TRIED.add(key)
    inputs = (make_tree(0.5), make_tree(-0.25, INT_KERNEL), make_tree(0.5))
    try:
        updates, _ = jax.eval_shape(
            functools.partial(update_step, tx, entry.extra), state, *inputs[1:]
        )
    except Exception as error:  # judged: it must be a TypeError naming the leaf
        return judge(key, error, (TypeError,), (Q, "int32"))
    kernel = updates["dense"]["kernel"] if isinstance(updates, dict) else None
    if kernel is None or jnp.issubdtype(kernel.dtype, jnp.inexact):
        return None
    problem = _like_floats(entry, inputs, run(entry, *inputs))
    return None if problem is None else f"{key}: integer updates, {problem}"


@pytest.fixture
def unfiltered_tracebacks() -> Iterator[None]:
    """JAX trims the traceback of every error it passes on: costly, and of no use here."""
    old = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", "off")
    yield
    jax.config.update("jax_traceback_filtering", old)


@pytest.mark.slow  # the slowest part of the module: about half its time
@pytest.mark.usefixtures("unfiltered_tracebacks")
@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_pytrees_that_do_not_fit(entry: registry.Entry) -> None:
    tx = entry()
    state = jax.eval_shape(tx.init, make_tree(0.5))
    failures = [case.check(entry, tx, state) for case in TREE_CASES]
    failures.append(_integer_gradient(entry, tx, state))
    failures.append(_works_with_empty_tree(entry, tx))
    failures.append(_works_with_none_subtree_and_float16(entry, tx))
    assert_no_failures(failures)


# ---------------------------------------------------------------------------------------
# Masks and labels that do not fit the parameters.

P = make_tree(0.5)


def _init(build: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: build().init(P)


def _update(build: Callable[[], Any], params: Any = P) -> Callable[[], Any]:
    def call() -> Any:
        tx = build()
        return tx.update(P, tx.init(P), params)

    return call


MASK_CASES = [
    # (description, call, error, fragments)
    (
        "masked: mask tree with a key the parameters lack",
        _init(
            lambda: optx.masked(
                optx.sgd(0.1), {"dense": True, "layers": True, "scale": True, "x": 1}
            )
        ),
        TypeError,
        ("`masked`", "1"),
    ),
    (
        "masked: mask tree missing a key",
        _init(lambda: optx.masked(optx.trace(0.9), {"dense": True, "layers": False})),
        ValueError,
        ("`masked`", "structure of the parameters"),
    ),
    (
        "masked: mask tree nested deeper than the parameters",
        _init(
            lambda: optx.masked(
                optx.trace(0.9), {"dense": True, "layers": True, "scale": {"a": True}}
            )
        ),
        ValueError,
        ("`masked`", "structure of the parameters"),
    ),
    (
        "masked: mask callable returning another structure",
        _init(lambda: optx.masked(optx.trace(0.9), lambda p: {"dense": True})),
        ValueError,
        ("`masked`", "structure of the parameters"),
    ),
    (
        "masked: mask callable returning non-bools",
        _init(lambda: optx.masked(optx.trace(0.9), lambda p: jax.tree.map(lambda _: 0.5, p))),
        TypeError,
        ("`masked`", "0.5"),
    ),
    (
        "masked: mask of arrays",
        lambda: optx.masked(optx.trace(0.9), {"dense": jnp.ones(2)}),
        TypeError,
        ("`masked`", "mask"),
    ),
    (
        "masked: invalid regular expression",
        _init(lambda: optx.masked(optx.trace(0.9), "(")),
        ValueError,
        ("`masked`", "'('"),
    ),
    (
        "masked: gradients that do not fit the parameters",
        _update(lambda: optx.masked(optx.trace(0.9), "kernel"), params=with_kernel(P, _DELETE)),
        ValueError,
        ("`masked.update`", Q),
    ),
    (
        "add_decayed_weights: mask tree missing a key",
        _update(lambda: optx.add_decayed_weights(0.1, {"dense": True})),
        ValueError,
        ("`masked`", "structure of the parameters"),
    ),
    (
        "add_decayed_weights: mask of numbers",
        lambda: optx.add_decayed_weights(0.1, {"dense": 1.0}),
        TypeError,
        ("mask", "1.0"),
    ),
    (
        "partition: labels tree missing a key",
        _init(lambda: optx.partition({"a": optx.sgd(0.1)}, {"dense": "a", "layers": "a"})),
        ValueError,
        ("`partition`", "scale"),
    ),
    (
        "partition: a label without a transform",
        _init(
            lambda: optx.partition(
                {"a": optx.sgd(0.1)}, {"dense": "a", "layers": "a", "scale": "b"}
            )
        ),
        ValueError,
        ("`partition`", "'b'", "'scale'"),
    ),
    (
        "partition: regular expressions that miss a parameter",
        _init(lambda: optx.partition({"a": optx.sgd(0.1)}, {"kernel": "a", "bias": "a"})),
        ValueError,
        ("`partition`", "'layers/0'"),
    ),
    (
        "partition: invalid regular expression",
        _init(lambda: optx.partition({"a": optx.sgd(0.1)}, {"(": "a"})),
        ValueError,
        ("`partition`", "'('"),
    ),
    (
        "partition: labels callable returning another structure",
        _init(lambda: optx.partition({"a": optx.sgd(0.1)}, lambda p: ["a"])),
        ValueError,
        ("`partition`", "structure of the parameters"),
    ),
    (
        "partition: labels callable returning unknown labels",
        _init(lambda: optx.partition({"a": optx.sgd(0.1)}, lambda p: jax.tree.map(lambda _: 7, p))),
        ValueError,
        ("`partition`", "7"),
    ),
    (
        "partition: no transforms",
        lambda: optx.partition({}, {"dense": "a"}),
        TypeError,
        ("`partition`", "transforms={}"),
    ),
    (
        "partition: a transform that is not one",
        lambda: optx.partition({"a": "sgd"}, {"dense": "a"}),
        TypeError,
        ("`partition`", "'sgd'"),
    ),
    (
        "partition: gradients that do not fit the parameters",
        _update(
            lambda: optx.partition({"a": optx.sgd(0.1)}, {".*": "a"}),
            params=with_kernel(P, _DELETE),
        ),
        ValueError,
        ("`partition.update`", Q),
    ),
    (
        "multi_transform: a label without a transform",
        _init(
            lambda: optx.multi_transform(
                {"a": optx.sgd(0.1)}, lambda p: jax.tree.map(lambda _: "z", p)
            )
        ),
        ValueError,
        ("`partition`", "'z'"),
    ),
]


@pytest.mark.parametrize(("name", "call", "error", "fragments"), MASK_CASES, ids=lambda c: c)
def test_masks_and_labels_that_do_not_fit(
    name: str, call: Callable[[], Any], error: type[Exception], fragments: tuple[str, ...]
) -> None:
    failure = check_error(name, call, error, fragments)
    assert failure is None, failure


def _sgd() -> O.Optimizer:
    return O.SGD(0.1)


def _build(make: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: make().build(P)


MULTI_CASES = [
    (
        "MultiOptimizer: a parameter matched by no pattern and no default",
        _build(lambda: O.MultiOptimizer({"dense/.*": _sgd()})),
        ValueError,
        ("`MultiOptimizer`", "default_optimizer", "'layers/0'"),
    ),
    (
        "MultiOptimizer: a parameter matched by two patterns",
        _build(lambda: O.MultiOptimizer({"dense/.*": _sgd(), ".*kernel": _sgd()}, _sgd())),
        ValueError,
        ("`MultiOptimizer`", "'dense/kernel'"),
    ),
    (
        "MultiOptimizer: a pattern that is not a string",
        lambda: O.MultiOptimizer({1: _sgd()}),
        TypeError,
        ("`MultiOptimizer`", "1"),
    ),
    (
        "MultiOptimizer: an invalid regular expression",
        lambda: O.MultiOptimizer({"(": _sgd()}),
        ValueError,
        ("`MultiOptimizer`", "'('"),
    ),
    (
        "MultiOptimizer: a value that is not an optimizer",
        lambda: O.MultiOptimizer({"dense": "sgd"}),
        TypeError,
        ("`MultiOptimizer`", "'sgd'"),
    ),
    (
        "MultiOptimizer: a MultiOptimizer inside",
        lambda: O.MultiOptimizer({"dense": O.MultiOptimizer({".*": _sgd()})}),
        TypeError,
        ("`MultiOptimizer`", "MultiOptimizer"),
    ),
    (
        "MultiOptimizer: a default that is not an optimizer",
        lambda: O.MultiOptimizer({"dense": _sgd()}, default_optimizer=optx.sgd(0.1)),
        TypeError,
        ("`MultiOptimizer`", "default_optimizer"),
    ),
    (
        "MultiOptimizer: optimizer_map of the wrong type",
        lambda: O.MultiOptimizer(["dense"]),
        TypeError,
        ("`MultiOptimizer`", "optimizer_map"),
    ),
    (
        "MultiOptimizer: a callable map returning no optimizer",
        _build(lambda: O.MultiOptimizer(lambda path: "sgd")),
        TypeError,
        ("`MultiOptimizer`", "'sgd'"),
    ),
    (
        "OptimizerMap: a key that is not a string",
        lambda: O.OptimizerMap(_sgd(), {3: _sgd()}),
        ValueError,
        ("`OptimizerMap`", "3"),
    ),
    (
        "OptimizerMap: a key set twice",
        lambda: O.OptimizerMap(_sgd(), {"a": _sgd()}).__setitem__("a", _sgd()),
        ValueError,
        ("`OptimizerMap`", "'a'"),
    ),
    (
        "OptimizerMap: a default that is not an optimizer",
        lambda: O.OptimizerMap("adam"),
        ValueError,
        ("`OptimizerMap`", "'adam'"),
    ),
    (
        "MultiOptimizer: a loss scale factor that is no number",
        lambda: O.MultiOptimizer({"dense": _sgd()}, loss_scale_factor="x"),
        ValueError,
        ("`MultiOptimizer`", "loss_scale_factor", "'x'"),
    ),
    (
        "LossScaleOptimizer: an inner optimizer that is not one",
        lambda: O.LossScaleOptimizer("sgd"),
        TypeError,
        ("`LossScaleOptimizer`", "inner_optimizer", "'sgd'"),
    ),
    (
        "LossScaleOptimizer: a LossScaleOptimizer inside",
        lambda: O.LossScaleOptimizer(O.LossScaleOptimizer(_sgd())),
        TypeError,
        ("`LossScaleOptimizer`", "inner_optimizer"),
    ),
    *[
        (
            f"LossScaleOptimizer: {name}={value!r}",
            lambda name=name, value=value: O.LossScaleOptimizer(_sgd(), **{name: value}),
            (TypeError, ValueError),
            ("`LossScaleOptimizer`", name, repr(value)),
        )
        for name, values in {
            "initial_scale": [-1.0, 0.0, NAN, INF, "x", None],
            "dynamic_growth_steps": [0, -1, 2.5, "x", None],
        }.items()
        for value in values
    ],
    (
        "LossScaleOptimizer: a Keras argument it does not take",
        lambda: O.LossScaleOptimizer(_sgd(), clipnorm=1.0),
        ValueError,
        ("`LossScaleOptimizer`", "clipnorm"),
    ),
    (
        "Optimizer: a transform that is not one",
        lambda: O.Optimizer(5),
        TypeError,
        ("`Optimizer`", "transform=5"),
    ),
    (
        "Optimizer: a weight decay with a transform",
        lambda: O.Optimizer(optx.sgd(0.1), weight_decay=0.1),
        TypeError,
        ("`Optimizer`", "weight_decay=0.1"),
    ),
    (
        "Optimizer: a name that is not a string",
        lambda: O.Optimizer(optx.sgd(0.1), name=5),
        TypeError,
        ("`Optimizer`", "name=5"),
    ),
    (
        "Optimizer: an unknown keyword",
        lambda: O.Optimizer(optx.sgd(0.1), bogus=1),
        TypeError,
        ("`Optimizer`", "bogus"),
    ),
    (
        "MultiOptimizer: an OptimizerMap and a default",
        lambda: O.MultiOptimizer(O.OptimizerMap(_sgd()), default_optimizer=_sgd()),
        TypeError,
        ("`MultiOptimizer`", "default_optimizer"),
    ),
]


@pytest.mark.parametrize(("name", "call", "error", "fragments"), MULTI_CASES, ids=lambda c: c)
def test_optimizer_maps_that_do_not_fit(
    name: str, call: Callable[[], Any], error: type[Exception], fragments: tuple[str, ...]
) -> None:
    failure = check_error(name, call, error, fragments)
    assert failure is None, failure


# ---------------------------------------------------------------------------------------
# The Keras-style classes: constructor arguments, from_config, get / deserialize.

KERAS = [
    O.SGD,
    O.RMSprop,
    O.Adam,
    O.AdamW,
    O.Adadelta,
    O.Adagrad,
    O.Adamax,
    O.Adafactor,
    O.Nadam,
    O.Ftrl,
    O.Lion,
    O.Lamb,
    O.Muon,
]
# Numeric arguments whose default is None ("off"), common to every class.
OPTIONAL_NUMBERS = (
    "clipnorm",
    "clipvalue",
    "global_clipnorm",
    "loss_scale_factor",
    "gradient_accumulation_steps",
    "weight_decay",
)
# Checked only with use_ema=True, as in Keras.
EMA_NUMBERS = ("ema_momentum", "ema_overwrite_frequency")


def _numeric_arguments(cls: type) -> list[str]:
    config = cls().get_config()
    own = [k for k, v in config.items() if _is_number(v) and k not in EMA_NUMBERS]
    return sorted({*own, *OPTIONAL_NUMBERS})


KERAS_ARGUMENTS = [(cls, name) for cls in KERAS for name in _numeric_arguments(cls)]


@pytest.mark.parametrize(
    ("cls", "name"), KERAS_ARGUMENTS, ids=[f"{c.__name__}-{n}" for c, n in KERAS_ARGUMENTS]
)
def test_keras_argument_of_wrong_type_or_not_finite(cls: type, name: str) -> None:
    failures = []
    for bad in BAD_NUMBERS:
        failures.append(
            check_error(
                f"{cls.__name__}({name}={bad!r})",
                lambda bad=bad: cls(**{name: bad}),
                fragments=(f"`{cls.__name__}`", name, repr(bad)),
            )
        )
    assert_no_failures(failures)


@pytest.mark.parametrize("cls", KERAS, ids=lambda c: c.__name__)
def test_keras_ema_arguments_with_ema_on(cls: type) -> None:
    failures = []
    for name in EMA_NUMBERS:
        for bad in [*BAD_NUMBERS, -1]:
            failures.append(
                check_error(
                    f"{cls.__name__}(use_ema=True, {name}={bad!r})",
                    lambda name=name, bad=bad: cls(use_ema=True, **{name: bad}),
                    fragments=(f"`{cls.__name__}`", name, repr(bad)),
                )
            )
    failures.append(
        check_error(
            f"{cls.__name__}(use_ema=True, ema_start='later')",
            lambda: cls(use_ema=True, ema_start="later"),
            fragments=(f"`{cls.__name__}`", "ema_start", "'later'"),
        )
    )
    assert_no_failures(failures)


# Outside the range Keras documents (or that the maths needs); by class, or for every class.
OUT_OF_RANGE: dict[type | None, list[tuple[str, Any]]] = {
    None: [
        ("learning_rate", -0.1),
        ("clipnorm", -1.0),
        ("clipvalue", -1.0),
        ("global_clipnorm", -1.0),
        ("loss_scale_factor", 0.0),
        ("gradient_accumulation_steps", 1),
        ("gradient_accumulation_steps", 2.5),
        ("weight_decay", -0.1),
        ("decay", -0.5),
    ],
    O.SGD: [("momentum", 1.5), ("momentum", -0.1)],
    O.RMSprop: [("rho", 1.0), ("momentum", 1.5), ("epsilon", -1e-7)],
    O.Adam: [("beta_1", 1.0), ("beta_2", -0.1), ("epsilon", -1e-7)],
    O.AdamW: [("beta_1", 1.5), ("weight_decay", -1.0)],
    O.Adadelta: [("rho", 1.5), ("epsilon", -1.0)],
    O.Adagrad: [("initial_accumulator_value", -1.0), ("epsilon", -1.0)],
    O.Adamax: [("beta_1", 1.0), ("beta_2", 2.0)],
    O.Adafactor: [("beta_2_decay", 0.5), ("epsilon_1", -1.0), ("clip_threshold", 0.0)],
    O.Nadam: [("beta_1", -0.5), ("beta_2", 1.0)],
    O.Ftrl: [
        ("learning_rate_power", 0.5),
        ("initial_accumulator_value", -0.1),
        ("l1_regularization_strength", -1.0),
        ("l2_regularization_strength", -1.0),
        ("l2_shrinkage_regularization_strength", -1.0),
        ("beta", -1.0),
    ],
    O.Lion: [("beta_1", 0.0), ("beta_1", 1.5), ("beta_2", 1.0)],
    O.Lamb: [("beta_1", 1.0), ("epsilon", -1.0)],
    O.Muon: [
        ("momentum", 1.0),
        ("adam_beta_1", 1.0),
        ("adam_weight_decay", -1.0),
        ("ns_steps", -1),
        ("adam_lr_ratio", -1.0),
        ("rms_rate", -0.2),
        ("exclude_layers", 3),
        ("exclude_layers", ["("]),
    ],
}
OUT_OF_RANGE_CASES = [
    (cls, name, value)
    for cls in KERAS
    for name, value in OUT_OF_RANGE[None] + OUT_OF_RANGE.get(cls, [])
]


@pytest.mark.parametrize(
    ("cls", "name", "value"),
    OUT_OF_RANGE_CASES,
    ids=[f"{c.__name__}-{n}={v!r}" for c, n, v in OUT_OF_RANGE_CASES],
)
def test_keras_argument_out_of_range(cls: type, name: str, value: Any) -> None:
    failure = check_error(
        f"{cls.__name__}({name}={value!r})",
        lambda: cls(**{name: value}),
        fragments=(f"`{cls.__name__}`", name),
    )
    assert failure is None, failure


@pytest.mark.parametrize("cls", KERAS, ids=lambda c: c.__name__)
def test_keras_unknown_keyword(cls: type) -> None:
    failures = [
        check_error(
            f"{cls.__name__}({key[:20]}=...)",
            lambda key=key: cls(**{key: 1}),
            TypeError,
            (f"`{cls.__name__}`", key[:50]),
        )
        for key in ("bogus", "beta1", "Learning_rate", "lr_schedule", "x" * 10_000)
    ]
    assert_no_failures(failures)


@pytest.mark.parametrize("depth", [1_000, 50_000])
@pytest.mark.parametrize("cls", KERAS, ids=lambda c: c.__name__)
def test_keras_from_config_with_hostile_dicts(cls: type, depth: int) -> None:
    """Not a dict, bad keys, wrong types, junk nested ``depth`` deep, megabyte strings."""
    name = cls.__name__
    huge = "x" * 1_000_000
    deep = _nested(depth)
    cases: list[tuple[str, Any, tuple[str, ...]]] = [
        ("a string", "adam", ("config",)),
        ("a list", [1, 2], ("config",)),
        ("None", None, ("config",)),
        ("an int key", {1: 2}, ("keys",)),
        ("an unknown key", {"bogus": 1}, ("'bogus'",)),
        ("a learning rate string", {"learning_rate": "x"}, ("learning_rate", "'x'")),
        ("a learning rate list", {"learning_rate": [0.1]}, ("learning_rate",)),
        ("a name int", {"name": 5}, ("name", "5")),
        ("deep junk", {"junk": deep}, ("'junk'",)),
        ("a deep learning rate", {"learning_rate": deep}, ("'class_name'",)),
        ("a huge key", {huge: 1}, ("xxxx",)),
        ("a huge learning rate", {"learning_rate": huge}, ("learning_rate",)),
        (
            "an unknown schedule",
            {"learning_rate": {"class_name": "Nope", "config": {}}},
            ("'Nope'",),
        ),
        (
            "a schedule config of the wrong type",
            {"learning_rate": {"class_name": "ExponentialDecay", "config": "x"}},
            ("config",),
        ),
        (
            "a schedule missing arguments",
            {"learning_rate": {"class_name": "ExponentialDecay", "config": {}}},
            ("decay_steps",),
        ),
        (
            "a schedule with a wrong argument",
            {
                "learning_rate": {
                    "class_name": "ExponentialDecay",
                    "config": {"initial_learning_rate": "x", "decay_steps": 1, "decay_rate": 0.5},
                }
            },
            ("initial_learning_rate", "'x'"),
        ),
        (
            "an unknown constraint",
            {"constraints": {".*": {"class_name": "Nope", "config": {}}}},
            ("'Nope'",),
        ),
        ("a constraint that is no dict", {"constraints": "x"}, ("constraints",)),
    ]
    failures = [
        check_error(
            f"{name}.from_config({what}, depth {depth})" if "deep" in what else f"{name}: {what}",
            lambda config=config: cls.from_config(config),
            fragments=fragments,
        )
        for what, config, fragments in cases
        if depth == 1_000 or "deep" in what
    ]
    assert_no_failures(failures)


def _multi_config() -> dict[str, Any]:
    return O.MultiOptimizer({"dense/.*": _sgd()}, O.Adam()).get_config()


WRAPPER_CONFIGS = [
    (O.MultiOptimizer, "not a dict", "x", ("config",)),
    (O.MultiOptimizer, "empty", {}, ("'optimizer_map'",)),
    (O.MultiOptimizer, "an unknown key", {**_multi_config(), "bogus": 1}, ("'bogus'",)),
    (O.MultiOptimizer, "a map of junk", {"optimizer_map": {"a": 5}}, ("class_name",)),
    (
        O.MultiOptimizer,
        "an unknown class",
        {"optimizer_map": {"a": {"class_name": "Nope", "config": {}}}},
        ("'Nope'",),
    ),
    (O.MultiOptimizer, "deep junk", {"optimizer_map": _nested(5_000)}, ("class_name",)),
    (O.LossScaleOptimizer, "empty", {}, ("'inner_optimizer'",)),
    (O.LossScaleOptimizer, "an inner int", {"inner_optimizer": 5}, ("class_name",)),
    (
        O.LossScaleOptimizer,
        "an unknown key",
        {"inner_optimizer": {"class_name": "SGD", "config": {}}, "bogus": 1},
        ("'bogus'",),
    ),
    (
        O.LossScaleOptimizer,
        "a huge inner class name",
        {"inner_optimizer": {"class_name": "x" * 1_000_000, "config": {}}},
        ("xxxx",),
    ),
]


@pytest.mark.parametrize(
    ("cls", "what", "config", "fragments"),
    WRAPPER_CONFIGS,
    ids=[f"{c.__name__}-{w}" for c, w, _, _ in WRAPPER_CONFIGS],
)
def test_wrapper_from_config_with_hostile_dicts(
    cls: type, what: str, config: Any, fragments: tuple[str, ...]
) -> None:
    failure = check_error(
        f"{cls.__name__}.from_config({what})", lambda: cls.from_config(config), fragments=fragments
    )
    assert failure is None, failure


IDENTIFIERS = [
    ("an int", 5, ("identifier",)),
    ("a list", [1], ("identifier",)),
    ("a transform", optx.sgd(0.1), ("identifier",)),
    ("an unknown name", "nope", ("'nope'",)),
    ("an empty name", "", ("''",)),
    ("a class name that is a list", {"class_name": ["a"], "config": {}}, ("class_name",)),
    ("a class name that is None", {"class_name": None, "config": {}}, ("class_name",)),
    ("a dict without class_name", {"config": {}}, ("'class_name'",)),
    ("a config string", {"class_name": "Adam", "config": "x"}, ("config",)),
    ("a config list", {"class_name": "Adam", "config": [1]}, ("config",)),
    ("a config with an int key", {"class_name": "Adam", "config": {1: 1}}, ("keys",)),
    ("a config with junk", {"class_name": "Adam", "config": {"junk": 1}}, ("'junk'",)),
    ("junk 1,000 deep", _nested(1_000), ("'class_name'",)),
    ("junk 50,000 deep", _nested(50_000), ("'class_name'",)),
    ("a huge class name", {"class_name": "x" * 1_000_000, "config": {}}, ("xxxx",)),
    (
        "an unknown schedule",
        {"class_name": "SGD", "config": {"learning_rate": {"class_name": "Nope", "config": {}}}},
        ("'Nope'",),
    ),
]


@pytest.mark.parametrize(
    ("what", "identifier", "fragments"), IDENTIFIERS, ids=[i[0] for i in IDENTIFIERS]
)
def test_get_and_deserialize_with_hostile_identifiers(
    what: str, identifier: Any, fragments: tuple[str, ...]
) -> None:
    failures = [check_error(f"get({what})", lambda: O.get(identifier), fragments=fragments)]
    if isinstance(identifier, dict):
        failures.append(
            check_error(
                f"deserialize({what})", lambda: O.deserialize(identifier), fragments=fragments
            )
        )
    assert_no_failures(failures)


# ---------------------------------------------------------------------------------------
# Schedules: arguments, from_config, deserialize.

# A valid call of each schedule factory and class; their numeric arguments are spoilt in turn.
SCHEDULE_CALLS: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
    ("constant_schedule", optx.schedules.constant_schedule, {"value": 0.1}),
    (
        "cosine_decay_schedule",
        optx.schedules.cosine_decay_schedule,
        {"init_value": 0.1, "decay_steps": 10},
    ),
    (
        "cosine_onecycle_schedule",
        optx.schedules.cosine_onecycle_schedule,
        {"transition_steps": 10, "peak_value": 0.1},
    ),
    (
        "exponential_decay",
        optx.schedules.exponential_decay,
        {"init_value": 0.1, "transition_steps": 10, "decay_rate": 0.5},
    ),
    (
        "linear_onecycle_schedule",
        optx.schedules.linear_onecycle_schedule,
        {"transition_steps": 10, "peak_value": 0.1},
    ),
    (
        "linear_schedule",
        optx.schedules.linear_schedule,
        {"init_value": 0.1, "end_value": 0.0, "transition_steps": 10},
    ),
    (
        "piecewise_constant_schedule",
        optx.schedules.piecewise_constant_schedule,
        {"init_value": 0.1, "boundaries_and_scales": {5: 0.5}},
    ),
    (
        "piecewise_interpolate_schedule",
        optx.schedules.piecewise_interpolate_schedule,
        {"interpolate_type": "linear", "init_value": 0.1, "boundaries_and_scales": {5: 0.5}},
    ),
    (
        "polynomial_schedule",
        optx.schedules.polynomial_schedule,
        {"init_value": 0.1, "end_value": 0.0, "power": 2.0, "transition_steps": 10},
    ),
    (
        "warmup_constant_schedule",
        optx.schedules.warmup_constant_schedule,
        {"init_value": 0.0, "peak_value": 0.1, "warmup_steps": 5},
    ),
    (
        "warmup_cosine_decay_schedule",
        optx.schedules.warmup_cosine_decay_schedule,
        {"init_value": 0.0, "peak_value": 0.1, "warmup_steps": 5, "decay_steps": 10},
    ),
    (
        "warmup_exponential_decay_schedule",
        optx.schedules.warmup_exponential_decay_schedule,
        {
            "init_value": 0.0,
            "peak_value": 0.1,
            "warmup_steps": 5,
            "transition_steps": 10,
            "decay_rate": 0.5,
        },
    ),
    (
        "warmup_inverse_sqrt_schedule",
        optx.schedules.warmup_inverse_sqrt_schedule,
        {"peak_value": 0.1, "warmup_steps": 5},
    ),
    (
        "warmup_stable_decay_schedule",
        optx.schedules.warmup_stable_decay_schedule,
        {"peak_value": 0.1, "warmup_steps": 5, "stable_steps": 5, "decay_steps": 5},
    ),
    (
        "ExponentialDecay",
        S.ExponentialDecay,
        {"initial_learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5},
    ),
    (
        "InverseTimeDecay",
        S.InverseTimeDecay,
        {"initial_learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5},
    ),
    ("PolynomialDecay", S.PolynomialDecay, {"initial_learning_rate": 0.1, "decay_steps": 10}),
    ("CosineDecay", S.CosineDecay, {"initial_learning_rate": 0.1, "decay_steps": 10}),
    (
        "CosineDecayRestarts",
        S.CosineDecayRestarts,
        {"initial_learning_rate": 0.1, "first_decay_steps": 10},
    ),
    (
        "PiecewiseConstantDecay",
        S.PiecewiseConstantDecay,
        {"boundaries": [5, 10], "values": [0.1, 0.05, 0.01]},
    ),
]


def _defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    parameters = inspect.signature(fn).parameters.items()
    return {k: p.default for k, p in parameters if p.default is not p.empty}


SCHEDULE_ARGUMENTS = [
    (api, fn, kwargs, name)
    for api, fn, kwargs in SCHEDULE_CALLS
    for name, value in {**_defaults(fn), **kwargs}.items()
    if _is_number(value)
]


@pytest.mark.parametrize(
    ("api", "fn", "kwargs", "name"),
    SCHEDULE_ARGUMENTS,
    ids=[f"{a}-{n}" for a, _, _, n in SCHEDULE_ARGUMENTS],
)
def test_schedule_argument_of_wrong_type_or_not_finite(
    api: str, fn: Callable[..., Any], kwargs: dict[str, Any], name: str
) -> None:
    fn(**kwargs)  # the valid call
    failures = [
        check_error(
            f"{api}({name}={bad!r})",
            lambda bad=bad: fn(**{**kwargs, name: bad}),
            fragments=(f"`{api}`", name, repr(bad)),
        )
        for bad in BAD_NUMBERS
    ]
    assert_no_failures(failures)


def _keras_schedule_config() -> dict[str, Any]:
    return S.serialize(S.ExponentialDecay(0.1, 10, 0.5))


SCHEDULE_CONFIGS: list[tuple[str, Any, tuple[str, ...]]] = [
    ("a string", "x", ("config",)),
    ("None", None, ("config",)),
    ("a list", [1], ("config",)),
    ("no class_name", {"config": {}}, ("'class_name'",)),
    ("an unknown class", {"class_name": "Nope", "config": {}}, ("'Nope'",)),
    ("a class name that is a list", {"class_name": ["a"], "config": {}}, ("class_name",)),
    ("a config string", {"class_name": "ExponentialDecay", "config": "x"}, ("config",)),
    ("a config with an int key", {"class_name": "ExponentialDecay", "config": {1: 2}}, ("1",)),
    ("missing arguments", {"class_name": "ExponentialDecay", "config": {}}, ("decay_steps",)),
    (
        "an unknown argument",
        {**_keras_schedule_config(), "config": {**_keras_schedule_config()["config"], "bogus": 1}},
        ("'bogus'",),
    ),
    (
        "a wrong argument",
        {
            **_keras_schedule_config(),
            "config": {**_keras_schedule_config()["config"], "decay_rate": "x"},
        },
        ("decay_rate", "'x'"),
    ),
    ("junk 1,000 deep", _nested(1_000), ("'class_name'",)),
    ("junk 50,000 deep", _nested(50_000), ("'class_name'",)),
    ("a huge class name", {"class_name": "x" * 1_000_000, "config": {}}, ("xxxx",)),
    (
        "a huge argument",
        {"class_name": "ExponentialDecay", "config": {"x" * 1_000_000: 1}},
        ("xxxx",),
    ),
]


@pytest.mark.parametrize(
    ("what", "config", "fragments"), SCHEDULE_CONFIGS, ids=[c[0] for c in SCHEDULE_CONFIGS]
)
def test_schedule_deserialize_with_hostile_dicts(
    what: str, config: Any, fragments: tuple[str, ...]
) -> None:
    failures = [
        check_error(
            f"optimizers.schedules.deserialize({what})",
            lambda: S.deserialize(config),
            fragments=fragments,
        ),
        # optx.schedules' reader of its own format (which knows the Keras classes too).
        check_error(
            f"schedules.from_config({what})",
            lambda: optx.schedules.from_config(config),
            fragments=fragments,
        ),
    ]
    assert_no_failures(failures)


@pytest.mark.parametrize("cls", [c for _, c, _ in SCHEDULE_CALLS if isinstance(c, type)])
def test_keras_schedule_from_config_with_hostile_dicts(cls: type) -> None:
    name = cls.__name__
    config = next(kwargs for _, c, kwargs in SCHEDULE_CALLS if c is cls)
    cases = [
        ("a string", "x", ("config",)),
        ("an int key", {**config, 1: 2}, ("1",)),
        ("an unknown argument", {**config, "bogus": 1}, ("'bogus'",)),
        ("missing arguments", {}, (next(iter(config)),)),
        ("deep junk", {**config, "junk": _nested(50_000)}, ("'junk'",)),
        ("a huge argument", {**config, "x" * 1_000_000: 1}, ("xxxx",)),
    ]
    failures = [
        check_error(f"{name}.from_config({what})", lambda c=c: cls.from_config(c), fragments=f)
        for what, c, f in cases
    ]
    assert_no_failures(failures)


# ---------------------------------------------------------------------------------------
# Last in the module: how many distinct bad inputs the tests above tried.


def test_count_of_bad_inputs(request: pytest.FixtureRequest) -> None:
    """Prints the count (see it with ``-s``); checks it when the whole module ran.

    Every deterministic case records itself in `TRIED` (hypothesis adds its examples), so the
    count is at least the number of deterministic cases; fewer means a case stopped running.
    """
    deterministic = (
        len(ARGUMENTS) * len(BAD_NUMBERS)
        + len(RANGED)
        + len(ENTRIES) * (len(TREE_CASES) + 3)
        + len(MASK_CASES)
        + len(MULTI_CASES)
        + len(KERAS_ARGUMENTS) * len(BAD_NUMBERS)
        + len(KERAS) * (len(EMA_NUMBERS) * (len(BAD_NUMBERS) + 1) + 1)
        + len(OUT_OF_RANGE_CASES)
        + len(KERAS) * 5
        + len(WRAPPER_CONFIGS)
        + len(IDENTIFIERS)
        + len(SCHEDULE_ARGUMENTS) * len(BAD_NUMBERS)
        + len(SCHEDULE_CONFIGS) * 2
    )
    print(f"\nbad inputs tried: {len(TRIED)} distinct ({deterministic} deterministic cases)")
    assert deterministic >= 9_000, deterministic
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        # Under pytest-xdist this process ran only some of the module's cases: each of them
        # is asserted by its own test, and the full count is checked by a run without -n.
        return
    # Only a run of the whole module: none of its items deselected (-k, -m), all selected.
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    deselected = reporter.stats.get("deselected", []) if reporter is not None else []
    selected = {i.originalname for i in request.session.items if i.path == request.path}
    tests = {name for name in globals() if name.startswith("test_")}
    if any(i.path == request.path for i in deselected) or selected != tests:
        return
    assert len(TRIED) >= deterministic, (
        f"only {len(TRIED)} bad inputs recorded for {deterministic} deterministic cases: run "
        f"the whole module"
    )


# ---------------------------------------------------------------------------------------
# The messages of the checks this suite added, word for word.

W = {"w": jnp.ones(2)}


def _adam_update(grads: Any) -> Any:
    tx = optx.adam(0.1)
    return tx.update(grads, tx.init(W), W)


MESSAGES = [
    (
        lambda: _adam_update({"w": None}),
        ValueError,
        "`scale_by_adam.update` needs an array for every leaf of the state. Received: "
        "updates['w']=None (a parameter without a gradient). Wrap the transform in "
        "`optx.skip_missing(...)` to leave such parameters unchanged.",
    ),
    (
        lambda: _adam_update({"w": 1.0}),
        TypeError,
        "`scale_by_adam.update` needs arrays as the leaves of updates. Received: updates['w'] "
        "of type float. Convert it with `jnp.asarray`.",
    ),
    (
        lambda: _adam_update({"w": jnp.ones(2, jnp.complex64)}),
        TypeError,
        "`scale_by_adam.update` needs real updates where the state holds real values (a "
        "complex value would lose its imaginary part). Received: updates['w'] of dtype "
        "complex64.",
    ),
    (
        lambda: _adam_update({"w": jnp.ones(2, jnp.int32)}),
        TypeError,
        "`scale_by_adam.update` needs floating-point updates, as the state holds (an integer "
        "one would be truncated). Received: updates['w'] of dtype int32.",
    ),
    (
        lambda: optx.scale(0.5).update({"w": jnp.ones(2, jnp.int32)}, optx.scale(0.5).init(None)),
        TypeError,
        "`scale.update` needs floating-point updates (float16, bfloat16, float32 or float64). "
        "Received: updates['w'] of dtype int32. Keep other leaves out of the optimised tree, "
        "or route them to `optx.set_to_zero()` with `optx.partition`.",
    ),
    (
        lambda: optx.set_to_zero().update({"w": "x"}, optx.set_to_zero().init(None)),
        TypeError,
        "`set_to_zero.update` needs numeric arrays as the leaves of updates. Received: "
        "updates['w'] of type str.",
    ),
    (
        lambda: optx.apply_updates(W, {"v": jnp.ones(2)}),
        ValueError,
        "`optx.apply_updates` needs updates with the structure of params. Received: missing "
        "from updates: 'w'; not in params: 'v'.",
    ),
    (
        lambda: optx.apply_updates(W, {"w": jnp.ones((1, 2))}),
        ValueError,
        "`optx.apply_updates` needs updates with the shapes of params. Received: updates['w'] "
        "of shape (1, 2), expected (2,).",
    ),
    (
        lambda: optx.apply_updates({"w": jnp.ones(2, jnp.int32)}, {"w": jnp.ones(2) / 2}),
        TypeError,
        "`optx.apply_updates` needs updates that the parameter's dtype can hold. Received: "
        "updates['w'] of dtype float32 for a parameter of dtype int32; the cast back would "
        "truncate it to an integer.",
    ),
    (
        lambda: optx.apply_updates(W, {"w": jnp.ones(2, jnp.complex64)}),
        TypeError,
        "`optx.apply_updates` needs updates that the parameter's dtype can hold. Received: "
        "updates['w'] of dtype complex64 for a parameter of dtype float32; the cast back would "
        "drop its imaginary part.",
    ),
    (
        lambda: optx.apply_updates({"w": "x"}, W),
        TypeError,
        "`optx.apply_updates` needs numeric arrays as leaves. Received: params['w'] of type str.",
    ),
    (
        lambda: optx.muon(0.1, adam_b1=1.0),
        ValueError,
        "`muon` needs adam_b1 in [0, 1). Received: adam_b1=1.0.",
    ),
    (
        lambda: optx.prodigy(betas=(0.9, NAN)),
        ValueError,
        "`prodigy` needs betas[1] in [0, 1). Received: betas[1]=nan.",
    ),
    (
        lambda: optx.prodigy(eps=None),
        TypeError,
        "`prodigy` needs eps to be a real number or a schedule (a function of the step "
        "count). Received: eps=None of type NoneType.",
    ),
    (
        lambda: optx.schedule_free_adamw(b2=1.0),
        ValueError,
        "`schedule_free_adamw` needs b2 in [0, 1). Received: b2=1.0.",
    ),
    (
        lambda: optx.scale_by_muon(ns_coeffs=(NAN, 1.0, 1.0)),
        ValueError,
        "`scale_by_muon` needs finite ns_coeffs. Received: ns_coeffs=(nan, 1.0, 1.0).",
    ),
    (
        lambda: optx.masked(optx.sgd(0.1), "("),
        ValueError,
        "`masked` needs mask to be regular expressions on parameter paths. Received: '(', "
        "which does not compile (missing ), unterminated subpattern at position 0).",
    ),
    (
        lambda: O.Adam(beta_1=1.0),
        ValueError,
        "`Adam` needs beta_1 in [0, 1). Received: beta_1=1.0.",
    ),
    (
        lambda: O.Adafactor(epsilon_1=-1.0),
        ValueError,
        "`Adafactor` needs epsilon_1 finite and >= 0. Received: epsilon_1=-1.0.",
    ),
    (
        lambda: O.Adafactor(beta_2_decay=0.5),
        ValueError,
        "`Adafactor` needs beta_2_decay <= 0. Received: beta_2_decay=0.5.",
    ),
    (
        lambda: O.RMSprop(momentum="x"),
        TypeError,
        "`RMSprop` needs momentum to be a real number. Received: momentum='x'.",
    ),
    (
        lambda: O.Muon(muon_a=INF),
        ValueError,
        "`Muon` needs muon_a to be finite. Received: muon_a=inf.",
    ),
    (
        lambda: O.Muon(exclude_layers=3),
        TypeError,
        "`Muon` needs exclude_layers to be None, a regular expression or a list of them. "
        "Received: exclude_layers=3.",
    ),
    (
        lambda: O.LossScaleOptimizer(O.SGD(), dynamic_growth_steps=0),
        ValueError,
        "`LossScaleOptimizer` needs dynamic_growth_steps to be an int >= 1. "
        "Received: dynamic_growth_steps=0.",
    ),
    (
        lambda: O.Adam.from_config("adam"),
        TypeError,
        "`Adam.from_config` needs config to be a dict of arguments, as `get_config` returns. "
        "Received: config='adam'.",
    ),
    (
        lambda: O.Adam.from_config({1: 2}),
        TypeError,
        "`Adam.from_config` needs the keys of config to be argument names (strings). "
        "Received: key 1.",
    ),
    (
        lambda: O.MultiOptimizer.from_config({}),
        ValueError,
        "`MultiOptimizer.from_config` needs config to hold 'optimizer_map'. "
        "Received: config with keys [].",
    ),
    (
        lambda: O.deserialize({"class_name": ["a"], "config": {}}),
        TypeError,
        "`deserialize` needs class_name to be a string. Received: class_name=['a'].",
    ),
    (
        lambda: S.ExponentialDecay.from_config({"bogus": 1}),
        TypeError,
        "`ExponentialDecay.from_config` got arguments that ExponentialDecay does not take: "
        "['bogus']. It takes: ['initial_learning_rate', 'decay_steps', 'decay_rate', "
        "'staircase', 'name'].",
    ),
    (
        lambda: O.Adam(learning_rate="x" * 1000),
        ValueError,
        "`Adam` needs learning_rate to be a float, a LearningRateSchedule or a callable. "
        f"Received: learning_rate='{'x' * 193}... (1002 characters).",
    ),
    (
        lambda: O.get(_nested(5_000)),
        ValueError,
        "`deserialize` needs a dict with 'class_name' and 'config'. "
        "Received: {'a': {'a': {'a': {...}}}}.",
    ),
]


@pytest.mark.parametrize(("call", "error", "message"), MESSAGES, ids=[m[2][:50] for m in MESSAGES])
def test_message_word_for_word(
    call: Callable[[], Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        call()
