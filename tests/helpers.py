"""Helpers shared by the tests."""

import contextlib
from collections.abc import Iterator

import jax

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def count_compiles(fun_name: str) -> Iterator[list[str]]:
    """Collects the XLA compilations of the jitted function ``fun_name`` in this block."""
    compiled: list[str] = []

    def listener(event: str, duration: float, **kwargs: object) -> None:
        del duration
        if event == _COMPILE_EVENT and kwargs.get("fun_name") == f"jit({fun_name})":
            compiled.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield compiled
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
