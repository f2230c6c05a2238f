"""Running a test body on several CPU devices, in a fresh Python process.

JAX fixes its device count when it starts, so a test that needs 8 devices runs its code in
a subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``. Mark such tests
``@pytest.mark.multidevice`` (they still run in CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_on_devices(code: str, devices: int = 8, timeout: float = 300.0) -> str:
    """Runs ``code`` (dedented) with ``devices`` CPU devices; returns its stdout.

    A failure (an exception, a failed ``assert``) raises `AssertionError` with the
    subprocess's output, so the test shows what went wrong there.
    """
    env = dict(os.environ)
    # Kept: the caller's XLA flags (e.g. --xla_cpu_max_isa, to run the suite as on another CPU).
    flags = env.get("XLA_FLAGS", "")
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["KERAS_BACKEND"] = "jax"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"the {devices}-device subprocess failed (exit {result.returncode}):\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr[-6000:]}"
        )
    return result.stdout
