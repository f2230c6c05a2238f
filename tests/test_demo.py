"""The end-to-end demo, `python -m optx.demo`."""

import contextlib
import io
import os
import re
import subprocess
import sys

import jax
import matplotlib.image
import numpy as np
import pytest

import optx
from optx import demo

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _rows(out: str) -> dict[str, list[str]]:
    """The table's data rows, keyed by optimizer name."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("optimizer"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line or line.startswith(("(", "wrote")):
            break
        name, *cells = line.split()
        rows[name] = cells
    return rows


def _initial_loss(out: str) -> float:
    return float(re.search(r"initial weights: train loss ([\d.]+)", out).group(1))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """Every optimizer, 20 steps, seed 3: the printed text and the PNG's path."""
    path = tmp_path_factory.mktemp("demo") / "curves.png"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = demo.main(["--steps", "20", "--seed", "3", "--out", str(path)])
    assert status == 0
    return out.getvalue(), path


@pytest.mark.slow  # the module's fixture trains every optimizer
def test_main_trains_every_optimizer(full_run):
    out, path = full_run
    rows = _rows(out)
    assert list(rows) == list(demo.OPTIMIZERS)
    initial = _initial_loss(out)
    for name, cells in rows.items():
        train_loss, train_acc, _, test_acc, steps_per_s, compile_s = cells
        assert float(train_loss) < initial, (name, out)
        for acc in (train_acc, test_acc):
            assert acc.endswith("%") and 0 <= float(acc[:-1]) <= 100
        assert float(steps_per_s.replace(",", "")) > 0
        assert float(compile_s) > 0
    assert "(adam_ema: the averaged weights, from optx.ema_params_value)" in out
    assert out.splitlines()[-1] == f"wrote the loss curves to {path}"


@pytest.mark.slow  # the module's fixture trains every optimizer
def test_main_writes_a_png(full_run):
    _, path = full_run
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    image = matplotlib.image.imread(path)
    # figsize (9, 5.5) inches at 110 dpi, RGBA; not blank.
    assert image.shape == (605, 990, 4)
    assert image[..., :3].std() > 0.05


def _reference_losses(tx, params, data, batches, averaged):
    """A plain loop of single jitted steps: the loss `train` should record at each step."""

    @jax.jit
    def step(params, state, x, y):
        reported = optx.ema_params_value(state) if averaged else params
        updates, state = tx.update(jax.grad(demo.loss_fn)(params, x, y), state, params)
        return optx.apply_updates(params, updates), state, demo.loss_fn(reported, x, y)

    state, losses = tx.init(params), []
    for idx in batches:
        params, state, loss = step(params, state, data.x_train[idx], data.y_train[idx])
        losses.append(float(loss))
    return np.array(losses), params, state


def _numpy_loss(params, x, y):
    h = np.asarray(x, np.float64)
    for i in range(len(params)):
        layer = jax.tree.map(np.asarray, params[f"dense_{i}"])
        h = h @ layer["kernel"] + layer["bias"]
        if i < len(params) - 1:
            h = np.maximum(h, 0)
    h = h - h.max(axis=1, keepdims=True)
    log_probs = h - np.log(np.exp(h).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(y)), np.asarray(y)].mean()


@pytest.mark.parametrize("averaged", [False, True])
def test_train_records_every_step_in_chunks(averaged):
    rng = np.random.default_rng(0)
    data = demo.split_digits(rng.normal(size=(40, 5)), rng.integers(0, 3, 40))
    assert data.x_train.shape == (32, 5) and data.x_test.shape == (8, 5)
    np.testing.assert_allclose(data.x_train.mean(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(data.x_train.std(axis=0), 1, rtol=1e-6)
    params = demo.init_mlp(jax.random.key(1), (5, 8, 3))
    before = jax.tree.map(np.array, params)
    batches = rng.integers(0, 32, (7, 6), dtype=np.int32)
    tx = optx.sgd(0.3, momentum=0.9)
    if averaged:
        tx = optx.chain(tx, optx.ema_params(0.5))
    # chunks of 3, 3 and 1 steps: two compiled programs.
    result = demo.train("t", tx, params, data, batches, averaged=averaged, chunk=3)
    expected, final, state = _reference_losses(tx, params, data, batches, averaged)
    assert result.losses.shape == (7,)
    np.testing.assert_allclose(result.losses, expected, rtol=1e-6)
    idx = batches[0]
    np.testing.assert_allclose(
        result.losses[0], _numpy_loss(params, data.x_train[idx], data.y_train[idx]), rtol=1e-6
    )
    reported = optx.ema_params_value(state) if averaged else final
    loss, acc = demo.evaluate(reported, data.x_test, data.y_test)
    np.testing.assert_allclose(result.test_loss, float(loss), rtol=1e-6)
    assert result.test_accuracy == pytest.approx(float(acc))
    assert result.steps_per_second > 0 and result.compile_seconds > 0
    # The caller's weights are left as they were (the steps donate copies).
    jax.tree.map(np.testing.assert_array_equal, params, before)


def test_format_table_aligns_columns():
    result = demo.Result("adam", np.zeros(3), 0.5, 0.875, 0.25, 1.0, 12345.6, 1.234)
    table = demo.format_table([result, result._replace(name="sgd_momentum", test_loss=10.0)])
    assert table.splitlines() == [
        "optimizer     train loss  train acc  test loss  test acc  steps/s  compile s",
        "------------  ----------  ---------  ---------  --------  -------  ---------",
        "adam              0.5000      87.5%     0.2500    100.0%   12,346       1.23",
        "sgd_momentum      0.5000      87.5%    10.0000    100.0%   12,346       1.23",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "0"], "--steps needs an integer >= 1. Received: --steps 0."),
        (["--steps", "-3"], "--steps needs an integer >= 1. Received: --steps -3."),
        (["--steps", "ten"], "argument --steps: invalid int value: 'ten'"),
        (["--batch-size", "0"], "--batch-size needs an integer >= 1. Received: --batch-size 0."),
        (["--seed", "-1"], "--seed needs an integer >= 0. Received: --seed -1."),
        (
            ["--optimizers", "adam,nope"],
            "--optimizers needs comma-separated names among sgd_momentum, adam, adamw, lion, "
            "muon, adam_ema. Received: --optimizers 'adam,nope' (unknown: nope).",
        ),
        (["--optimizers", ","], "Received: --optimizers ','."),
        (
            ["--out", "/no/such/folder/x.png"],
            "--out needs an existing folder. Received: --out '/no/such/folder/x.png'.",
        ),
    ],
)
def test_main_rejects_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m optx.demo")
    assert re.search(re.escape(message), err), err


@pytest.mark.parametrize("module", ["sklearn", "tqdm", "matplotlib"])
def test_missing_dependency_is_one_line(module, monkeypatch, tmp_path, capsys):
    for name in [module, f"{module}.datasets"] if module == "sklearn" else [module]:
        monkeypatch.setitem(sys.modules, name, None)  # makes `import name` fail
    assert demo.main(["--steps", "1", "--out", str(tmp_path / "x.png")]) == 1
    captured = capsys.readouterr()
    package = {"sklearn": "scikit-learn"}.get(module, module)
    assert captured.out == ""
    assert captured.err == (
        f"optx.demo needs scikit-learn, tqdm and matplotlib ({package} is missing): "
        'pip install "optx-jax[demo]"\n'
    )
    assert not (tmp_path / "x.png").exists()


def _python(args, cwd):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


@pytest.mark.slow
def test_module_runs_as_a_script(full_run, tmp_path):
    # A subset (in another order, with a repeat) in a new process: the same batches from the
    # same weights give the same numbers as the full run, timings aside.
    argv = ["-m", "optx.demo", "--steps", "20", "--seed", "3"]
    argv += ["--optimizers", "lion,sgd_momentum,lion"]
    result = _python(["-X", "importtime", *argv], tmp_path)
    assert result.returncode == 0, result.stderr
    rows, full = _rows(result.stdout), _rows(full_run[0])
    assert list(rows) == ["lion", "sgd_momentum"]
    assert {k: v[:4] for k, v in rows.items()} == {k: full[k][:4] for k in rows}
    png = tmp_path / "optx_demo.png"  # the default --out, in the current directory
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    assert result.stdout.splitlines()[-1] == f"wrote the loss curves to {png}"
    assert "20/20" in result.stderr  # the progress bars
    # -X importtime logs each import as it completes, nested ones first: `import optx` is
    # complete before the demo imports its own dependencies.
    modules = re.findall(r"^import time:.*\| +(\S+)$", result.stderr, flags=re.MULTILINE)
    for module in ("sklearn", "tqdm", "matplotlib"):
        assert modules.index("optx") < modules.index(module)
