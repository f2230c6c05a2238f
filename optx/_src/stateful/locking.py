"""The lock that makes a stateful optimizer safe to share between threads, and its copies.

Each optimizer holds a reentrant lock (`threading.RLock`, created by `StatefulBase` and on
each copy); `locked` runs a method holding it (see `StatefulBase`, thread safety).
`CopyMixin` makes pickles and copies of an optimizer: a lock and compiled functions cannot
be pickled, and the state's buffers cannot be shared (each step donates them).
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Runs ``method`` holding the optimizer's lock (see `StatefulBase`, thread safety)."""

    @functools.wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


# Not pickled or copied: made again by `__setstate__` (or on first use).
_NOT_COPIED = frozenset({"_lock", "_compiled", "_grad_fns", "_checked", "_variables_spec"})


def _own_copy(leaf: Any) -> Any:
    """A copy of an array leaf in a buffer of its own (other leaves as they are)."""
    return jnp.array(leaf, copy=True) if isinstance(leaf, jax.Array) else leaf


class CopyMixin:
    """`pickle`, `copy.copy` and `copy.deepcopy` of a stateful optimizer, at any time.

    The copy is independent: its own state buffers, lock and configuration. Compiled steps
    are dropped; the copy compiles its own on first use (or finds them in JAX's cache, for
    an equal chain) and continues to the same numbers.
    """

    _lock: Any

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle or a copy keeps: the configuration and a copy of the state.

        The state's arrays are copied under the lock: the optimizer's own buffers are
        donated by its next step, perhaps in another thread.
        """
        with self._lock:
            state = {k: v for k, v in self.__dict__.items() if k not in _NOT_COPIED}
            for k in ("_state", "_count"):
                if k in state:
                    state[k] = jax.tree.map(_own_copy, state[k])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.update({"_lock": threading.RLock(), "_compiled": {}, "_grad_fns": {}})
        self.__dict__["_checked"] = None

    def __copy__(self) -> Any:
        # A shallow copy would share the state's buffers, which either copy's next step
        # donates ("Buffer has been deleted or donated" in the other): copies are deep.
        return copy.deepcopy(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """An independent optimizer: its own state buffers, lock and configuration."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        # Objects given by identity (`exclude_from_weight_decay(var_list=...)`) stay
        # themselves, so that the copy still finds them.
        for obj in self.__dict__.get("_excluded_objects", ()):
            memo.setdefault(id(obj), obj)
        state = self.__getstate__()
        for leaf in jax.tree.leaves((state.get("_state"), state.get("_count"))):
            memo.setdefault(id(leaf), leaf)  # copied already, by `__getstate__`
        new.__setstate__(copy.deepcopy(state, memo))
        return new
