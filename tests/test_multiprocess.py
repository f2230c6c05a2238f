"""Two processes with `jax.distributed` train like one process on 8 devices.

Runs ``examples/multiprocess_data_parallel.py`` as 2 local processes of 4 CPU devices
each (coordinator on 127.0.0.1, gloo CPU collectives) and compares the final parameters
with the same code in one process on 8 CPU devices. The gradient's all-reduce sums in
another order across processes (gloo) than within one (XLA:CPU), and the example trains
with Adam, whose step ``lr * m / (sqrt(v) + eps)`` has slope up to ``lr / eps = 5e6`` where
a gradient is near zero (as it is for a weight that has converged): in float32 a last-bit
change of such a gradient can move a step by up to ``lr``, so no float32 tolerance is safe.
Both runs are therefore float64 (``JAX_ENABLE_X64``; the data stay float32 values). Each
gradient element then sums at most 82 terms (64 rows; 16 features and the bias in the
forward pass) of total size below 25 (``2 * mean_rows |x| * (|x| |w| + |b| + |y|)``: 21
at most over this run's data and parameters), so another order changes it by at most
``82 * 25 * eps64 = 4.6e-13``; at Adam's steepest slope two runs of 20 steps stay within
``2 * 20 * 5e6 * 4.6e-13 = 9e-5`` (Higham 2002, section 3.1; tests/TOLERANCES.md).
``TOL`` allows 1e-3, a fiftieth of one step (lr = 0.05).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from multidevice import ROOT, run_on_devices

SCRIPT = ROOT / "examples" / "multiprocess_data_parallel.py"
# The worst case of float64 round-off (see the module docstring), and the tolerance.
ROUND_OFF_64 = 2 * 20 * (0.05 / 1e-8) * 82 * 25 * float(np.finfo(np.float64).eps)
TOL = 1e-3
assert ROUND_OFF_64 < TOL


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.multidevice
@pytest.mark.slow
def test_two_processes_equal_one_process_on_8_devices(tmp_path) -> None:
    out = tmp_path / "params.npy"
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "")  # kept: e.g. --xla_cpu_max_isa
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=4".strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_ENABLE_X64"] = "1"  # float64: see the module docstring
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    port = _free_port()
    procs = [
        subprocess.Popen(
            [
                *(sys.executable, str(SCRIPT), "--coordinator", f"127.0.0.1:{port}"),
                *("--num-processes", "2", "--process-id", str(i), "--out", str(out)),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    logs = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=180)
            logs.append(f"exit {p.returncode}\n{stdout}\n{stderr[-4000:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n---\n".join(logs)
    assert "processes=2 devices=8" in logs[0], logs[0]
    multi = np.load(out)

    single = run_on_devices(
        f"""
        import jax, runpy, numpy as np
        jax.config.update("jax_enable_x64", True)  # as the two processes
        train = runpy.run_path({str(SCRIPT)!r})["train"]
        np.save({str(tmp_path / "single.npy")!r}, train())
        """
    )
    del single
    one = np.load(tmp_path / "single.npy")
    assert multi.shape == one.shape == (17,)
    assert multi.dtype == one.dtype == np.float64
    np.testing.assert_allclose(multi, one, rtol=0, atol=TOL)
    # And it trained: close to the true weights and bias of the example's data.
    np.testing.assert_allclose(one[:-1], np.linspace(-1.0, 1.0, 16), atol=0.3)
