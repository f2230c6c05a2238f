"""The lock that makes a stateful optimizer safe to share between threads.

Each optimizer holds a reentrant lock (`threading.RLock`, created by `StatefulBase` and on
each copy); `locked` runs a method holding it (see `StatefulBase`, thread safety).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Runs ``method`` holding the optimizer's lock (see `StatefulBase`, thread safety)."""

    @functools.wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked
