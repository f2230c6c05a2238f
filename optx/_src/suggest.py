"""Unknown keyword arguments: the names a call takes, and the closest to the one given.

Every public API that takes keyword arguments answers a name it does not take with the
closest names it does take and the full list of them::

    optx.adam(1e-3, beta1=0.9)
    TypeError: `optx.adam` got an unexpected keyword argument 'beta1'. Received: beta1=0.9.
    Did you mean 'b1'? It takes: learning_rate, b1, b2, eps, eps_root, mu_dtype, ...

Three kinds of API share this module: the functions and classes of the public namespaces
(`check_keywords`); the Keras-style classes of `optx.optimizers`, which take ``**kwargs``
and check them against their arguments (`unexpected`); and `optx.set_hyperparams` /
`optx.scale_hyperparams`, which check names against a state's hyperparameters
(`did_you_mean`).

Closeness (`close_names`): first the names that are the same up to the spellings of optax,
Keras and PyTorch (``b1``, ``beta1`` and ``beta_1``; ``eps`` and ``epsilon``;
``learning_rate`` and ``lr``; ``rho`` and ``decay``; ``betas`` for both betas), which
`difflib`'s ratio misses, then those `difflib.get_close_matches` finds alike.

The namespaces' functions are checked by a wrapper that ``optx/__init__.py`` puts in
place once, for every namespace (`check_keywords`), rather than by a decorator on each
definition or a check in each body:

* One place. A function added to a namespace is covered with no edit, and cannot be
  forgotten; a function that takes ``**kwargs`` takes any keyword and is left as it is.
* The same object by every name. There is one wrapper per function, shared by every
  namespace and alias that exports it (``optx.multi_transform is optx.partition``), and
  it also takes the function's place in the module that defines it
  (``optx.adam is optx._src.algorithms.adam.adam``), where `pickle` and the doctests look
  for it. It keeps the function's name, module, docstring and signature
  (`functools.wraps`: `inspect.signature` and `help` show the function's, and
  ``__wrapped__`` reaches it). The API reference is read from the source (griffe), so it
  is unaffected. Modules of optx that imported a function before hold the plain one: they
  call it with names they know.
* Nothing added to a right call but the wrapper's own (a fraction of a microsecond, as
  for any decorator; builds and steps are unchanged): it calls the function inside
  ``try``, which costs nothing in Python 3.11 until something is raised, and checks
  nothing beforehand. On a `TypeError` it binds the arguments to the function's
  signature (`inspect.Signature.bind`); only if that fails, with a keyword the function
  does not take, is the error replaced (``from None``: Python's line would say the same
  with less). Any other `TypeError`, raised in the body or for a missing argument,
  propagates as it was.
* Classes keep their identity (`isinstance`, subclasses, pickled instances): the same
  check wraps their own ``__init__`` in place. NamedTuple states, protocols and classes
  without an ``__init__`` of their own are left as they are.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import sys
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from optx._src import reprs

# Spellings of the same argument in optax, Keras and PyTorch, reduced to one (after
# lower-casing and dropping underscores): `beta_1` and `beta1` are `b1`, `epsilon` is `eps`.
_SPELLINGS = (("learningrate", "lr"), ("stepsize", "lr"), ("epsilon", "eps"), ("beta", "b"))
# Names of the same meaning spelled apart: Keras's `rho` is optax's `decay` (RMSprop),
# PyTorch's `betas` is both betas, `wd` (and a bare `decay`) is `weight_decay`.
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "rho": ("decay",),
    "decay": ("rho", "weightdecay"),
    "bs": ("b1", "b2"),
    "wd": ("weightdecay",),
    "weightdecay": ("wd",),
}
_MOST = 3
# How much less alike than the closest name another may be, and still be suggested.
_MARGIN = 0.1


def _canonical(name: str) -> str:
    key = name.lower().replace("_", "").replace("-", "")
    for long, short in _SPELLINGS:
        key = key.replace(long, short)
    return key


def close_names(name: str, allowed: Iterable[str], most: int = _MOST) -> list[str]:
    """The names of ``allowed`` closest to ``name``, closest first (at most ``most``).

    Names that are the same up to optax's, Keras's and PyTorch's spellings come first;
    then those `difflib.get_close_matches` finds alike, if nearly as alike as the closest.
    A qualified name (``"1/learning_rate"``, as `optx.get_hyperparams` shows a shared one)
    is matched by its last part too.

    Example:
      >>> from optx._src import suggest
      >>> suggest.close_names("beta_1", ["learning_rate", "b1", "b2", "eps"])
      ['b1']
      >>> suggest.close_names("lr", ["learning_rate", "momentum"])
      ['learning_rate']
      >>> suggest.close_names("momentm", ["learning_rate", "momentum"])
      ['momentum']
    """
    allowed = list(dict.fromkeys(allowed))
    key = _canonical(name)
    wanted = {key, *_SYNONYMS.get(key, ())}
    found = [
        a
        for a in allowed
        if _canonical(a) in wanted or ("/" not in key and _canonical(a.rsplit("/")[-1]) in wanted)
    ]
    alike = difflib.get_close_matches(name, allowed, n=most)
    if alike:
        # Only the best few: 'momentun' is 'momentum', not also 'ema_momentum'.
        ratio = {a: difflib.SequenceMatcher(None, name, a).ratio() for a in alike}
        best = max(ratio.values())
        found += [a for a in alike if a not in found and ratio[a] >= best - _MARGIN]
    return found[:most]


def _either(names: Sequence[str]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def did_you_mean(name: str, allowed: Iterable[str]) -> str:
    """``" Did you mean 'b1'?"`` for the names of ``allowed`` closest to ``name``, or ``""``.

    Example:
      >>> from optx._src import suggest
      >>> suggest.did_you_mean("beta1", ["b1", "b2"])
      " Did you mean 'b1'?"
      >>> suggest.did_you_mean("betas", ["b1", "b2"])
      " Did you mean 'b1' or 'b2'?"
    """
    close = close_names(name, allowed)
    return f" Did you mean {_either(close)}?" if close else ""


def unexpected(
    api: str, received: Mapping[str, Any], allowed: Sequence[str], takes: str = "It takes"
) -> str:
    """The message for the keyword arguments ``received`` that ``api`` does not take.

    Args:
      api: the public name of the call (``"optx.adam"``, ``"Adam"``).
      received: each unknown keyword argument and its value.
      allowed: every keyword argument the call takes, in its signature's order.
      takes: the words before the list of ``allowed``.

    Returns:
      "`api` got an unexpected keyword argument 'x'. Received: x=... Did you mean 'y'?
      It takes: ...", with one suggestion per unknown name that has a close one.

    Example:
      >>> from optx._src import suggest
      >>> print(suggest.unexpected("optx.sgd", {"lr": 0.1}, ["learning_rate", "momentum"]))
      `optx.sgd` got an unexpected keyword argument 'lr'. Received: lr=0.1. Did you mean
      'learning_rate'? It takes: learning_rate, momentum.
    """
    names = list(received)
    shown = ", ".join(f"{reprs.name(str(k))}={reprs.short(v)}" for k, v in received.items())
    if len(names) == 1:
        head = f"`{api}` got an unexpected keyword argument {reprs.short(names[0])}."
        hint = did_you_mean(str(names[0]), allowed)
    else:
        listed = ", ".join(reprs.short(n) for n in names)
        head = f"`{api}` got unexpected keyword arguments {listed}."
        hints = [
            f"{_either(close)} for {reprs.name(str(n))}"
            for n in names
            if (close := close_names(str(n), allowed))
        ]
        hint = f" Did you mean {'; '.join(hints)}?" if hints else ""
    listing = f" {takes}: {', '.join(allowed)}." if allowed else " It takes no keyword arguments."
    return f"{head} Received: {shown}.{hint}{listing}"


# --- The wrapper of the namespaces' functions and classes ------------------------------


def _keyword_names(signature: inspect.Signature) -> list[str] | None:
    """The names a call may pass by keyword; ``None`` if it takes any (``**kwargs``)."""
    params = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _message(
    api: str,
    signature: inspect.Signature,
    allowed: list[str],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str | None:
    """The message if binding the call fails on a keyword it does not take, else None."""
    unknown = {k: v for k, v in kwargs.items() if k not in allowed}
    if not unknown:
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return unexpected(api, unknown, allowed)
    return None


def keywords_checked(fn: Callable[..., Any], api: str) -> Callable[..., Any]:
    """``fn``, whose unknown keyword arguments raise a `TypeError` naming the close ones.

    Returns ``fn`` itself where it takes any keyword (``**kwargs``) or has no signature.

    Example:
      >>> from optx._src import suggest
      >>> def scale(step_size: float, *, flip: bool = False) -> float:
      ...     return -step_size if flip else step_size
      >>> checked = suggest.keywords_checked(scale, "scale")
      >>> checked(1.0, flip=True)
      -1.0
      >>> checked(1.0, flipp=True)
      Traceback (most recent call last):
      TypeError: `scale` got an unexpected keyword argument 'flipp'. Received: flipp=True. ...
      >>> try:
      ...     checked(1.0, flipp=True)
      ... except TypeError as error:
      ...     print(error)
      `scale` got an unexpected keyword argument 'flipp'. Received: flipp=True. Did you mean
      'flip'? It takes: step_size, flip.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn
    allowed = _keyword_names(signature)
    if allowed is None:
        return fn

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TypeError:
            message = _message(api, signature, allowed, args, kwargs) if kwargs else None
            if message is None:
                raise
        raise TypeError(message) from None

    return checked


def _init_checked(cls: type, api: str) -> bool:
    """Wraps ``cls.__init__`` in place with the check; whether it did."""
    init = cls.__dict__["__init__"]
    try:
        signature = inspect.signature(init)
    except (TypeError, ValueError):
        return False
    allowed = _keyword_names(signature)
    if allowed is None:
        return False
    allowed = allowed[1:]  # not `self`

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
            return
        except TypeError:
            name = api if type(self) is cls else type(self).__qualname__
            message = None
            if kwargs:
                message = _message(name, signature, allowed, (self, *args), kwargs)
            if message is None:
                raise
        raise TypeError(message) from None

    cls.__init__ = checked  # type: ignore[misc]
    return True


# One wrapper per function, whichever namespaces and names export it.
_WRAPPERS: dict[Callable[..., Any], Callable[..., Any]] = {}
_WRAPPED: set[Callable[..., Any]] = set()
_CLASSES: set[type] = set()


def _covered(cls: type) -> bool:
    """Whether a class is built by a call users make with keywords: its own ``__init__``."""
    return (
        "__init__" in cls.__dict__
        and not issubclass(cls, tuple)  # NamedTuple states
        and not getattr(cls, "_is_protocol", False)
        and cls.__module__.startswith("optx.")
    )


def check_keywords(namespace: str) -> None:
    """Checks the keywords of the public functions and classes of a namespace module.

    Each public function of the module ``namespace`` and of its public submodules
    (recursively) is replaced there by its `keywords_checked` wrapper, one per function
    whichever names export it; each public class's own ``__init__`` is wrapped in place.
    ``optx/__init__.py`` calls it once, after its imports.
    """
    _check_namespace(sys.modules[namespace], set())


def _check_namespace(namespace: types.ModuleType, seen: set[str]) -> None:
    if namespace.__name__ in seen:
        return
    seen.add(namespace.__name__)
    public = {n: v for n, v in vars(namespace).items() if not n.startswith("_")}
    submodules = []
    for name, value in public.items():
        if isinstance(value, types.ModuleType):
            if value.__name__ == f"{namespace.__name__}.{name}":
                submodules.append(value)
        elif inspect.isclass(value):
            if value not in _CLASSES and _covered(value):
                _init_checked(value, name)
                _CLASSES.add(value)
        elif inspect.isfunction(value) and value.__module__.startswith("optx."):
            setattr(namespace, name, _wrapper(value, namespace, name))
    for module in submodules:
        _check_namespace(module, seen)


def _wrapper(fn: Callable[..., Any], namespace: types.ModuleType, name: str) -> Callable[..., Any]:
    if fn in _WRAPPED:  # already the wrapper (a namespace that re-exports another's)
        return fn
    if fn in _WRAPPERS:
        return _WRAPPERS[fn]
    wrapped = keywords_checked(fn, f"{namespace.__name__}.{name}")
    _WRAPPERS[fn] = wrapped
    _WRAPPED.add(wrapped)
    home = sys.modules.get(fn.__module__)
    if wrapped is not fn and home is not None and getattr(home, fn.__qualname__, None) is fn:
        # The module that defines it holds the wrapper too: one object by every name, which
        # `pickle` and the doctests find where the function is defined.
        setattr(home, fn.__qualname__, wrapped)
    return wrapped
