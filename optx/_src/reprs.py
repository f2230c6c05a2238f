"""Bounded ``repr`` of user input for error messages.

A config read from a file may hold a megabyte-long string or a dict nested thousands deep;
an error message that echoes it must stay readable, and must not itself fail (``repr`` of a
deeply nested dict raises `RecursionError`).
"""

from __future__ import annotations

import reprlib
from typing import Any

LIMIT = 200
"""The most characters of a received value that a message shows."""

_SHALLOW = reprlib.Repr()
_SHALLOW.maxlevel = 3
_SHALLOW.maxstring = LIMIT // 2
_SHALLOW.maxother = LIMIT // 2


def name(key: str, limit: int = LIMIT) -> str:
    """An argument name as given (unquoted), or its cut `short` repr if it is too long.

    Example:
      >>> from optx._src import reprs
      >>> reprs.name("beta_1"), reprs.name("x" * 1000, limit=20)
      ('beta_1', "'xxxxxxxxxxxxx... (1002 characters)")
    """
    return key if len(key) <= limit else short(key, limit)


def short(value: Any, limit: int = LIMIT) -> str:
    """``repr(value)``, cut to about ``limit`` characters; never raises.

    Example:
      >>> from optx._src import reprs
      >>> reprs.short("x" * 1000, limit=20)
      "'xxxxxxxxxxxxx... (1002 characters)"
    """
    try:
        text = repr(value)
    except RecursionError:
        text = _SHALLOW.repr(value)
    except Exception as error:  # a broken __repr__ must not hide the original error
        text = f"<{type(value).__name__} object (repr failed: {type(error).__name__})>"
    if len(text) > limit:
        text = f"{text[: max(limit - 6, 1)]}... ({len(text)} characters)"
    return text
