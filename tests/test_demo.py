"""The end-to-end demo, `python -m optx.demo`."""

import os
import subprocess
import sys

import numpy as np
import pytest

from optx import demo


def _rows(out: str) -> dict[str, list[str]]:
    """The table's data rows, keyed by optimizer name."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("optimizer"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line or line.startswith("("):
            break
        name, *cells = line.split()
        rows[name] = cells
    return rows


def test_main_trains_every_optimizer(capsys):
    assert demo.main(["--steps", "30"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert list(rows) == list(demo.OPTIMIZERS)
    for name, (initial, final, acc, compile_s, steps_per_s) in rows.items():
        assert float(final) < float(initial), (name, out)
        assert 0 <= float(acc.rstrip("%")) <= 100
        assert float(compile_s) >= 0
        assert float(steps_per_s.replace(",", "")) > 0
    assert "adam_ema" in out.splitlines()[-1]


def test_main_is_deterministic(capsys):
    demo.main(["--steps", "5", "--optimizers", "adam,sgd_momentum", "--seed", "3"])
    first = _rows(capsys.readouterr().out)
    demo.main(["--steps", "5", "--optimizers", "adam,sgd_momentum", "--seed", "3"])
    second = _rows(capsys.readouterr().out)
    # Losses and accuracy agree; timings may not.
    assert {k: v[:3] for k, v in first.items()} == {k: v[:3] for k, v in second.items()}


@pytest.mark.parametrize(
    "argv", [["--optimizers", "adam,nope"], ["--optimizers", ","], ["--steps", "0"]]
)
def test_main_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(argv)
    assert info.value.code == 2
    assert "Received:" in capsys.readouterr().err


def test_two_spirals_is_deterministic_and_balanced():
    x1, y1 = demo.two_spirals(200, seed=0)
    x2, y2 = demo.two_spirals(200, seed=0)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert x1.shape == (200, 2) and x1.dtype == np.float32 and y1.dtype == np.int32
    assert 60 < y1.sum() < 140
    assert not np.array_equal(demo.two_spirals(200, seed=1)[0], x1)


def test_module_runs_as_a_script():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-m", "optx.demo", "--steps", "5", "--optimizers", "adam"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = _rows(result.stdout)
    assert list(rows) == ["adam"]
