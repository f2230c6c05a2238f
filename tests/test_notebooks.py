"""The committed form of the notebooks (nbmake executes them; this only reads the files).

Each notebook is committed executed, top to bottom in one run, with its outputs, and with
nothing that changes from machine to machine: `.ci/execute_notebooks.py` runs a notebook
in place and strips it to this form.
"""

import json
import pathlib
import re

import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
EXPECTED = [
    "01_quickstart",
    "02_composing_transforms",
    "03_keras_style",
    "04_schedules",
    "05_hyperparameter_sweep",
    "06_sharding",
    "07_flax",
    "08_custom_optimizer",
    "09_lbfgs",
]
# Small plots keep a notebook small; a notebook over this size has images to shrink.
MAX_BYTES = 250_000


def load(name: str) -> dict:
    return json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_the_notebooks_are_exactly_the_listed_ones():
    found = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    assert found == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_metadata_is_stripped(name):
    nb = load(name)
    assert sorted(nb["metadata"]) == ["kernelspec", "language_info"], sorted(nb["metadata"])
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert (nb["nbformat"], nb["nbformat_minor"]) == (4, 4)
    for i, cell in enumerate(nb["cells"]):
        assert cell["metadata"] == {}, f"cell {i} has metadata {cell['metadata']}"
        assert "id" not in cell, f"cell {i} has an id"


@pytest.mark.parametrize("name", EXPECTED)
def test_executed_in_one_run_with_outputs(name):
    cells = code_cells(load(name))
    counts = [c["execution_count"] for c in cells]
    # Numbered 1, 2, 3, ...: every code cell ran, in order, in one fresh kernel.
    assert counts == list(range(1, len(cells) + 1)), counts
    outputs = [o for c in cells for o in c["outputs"]]
    assert outputs, "no code cell has an output"
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert not errors, errors[0].get("ename")


@pytest.mark.parametrize("name", EXPECTED)
def test_title_asserts_and_public_imports(name):
    nb = load(name)
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown" and source(first).startswith("# "), source(first)
    code = "\n".join(source(c) for c in code_cells(nb))
    assert re.search(r"^\s*assert ", code, re.MULTILINE), "no assert in any code cell"
    assert "_src" not in code, "notebooks import only the public API"


@pytest.mark.parametrize("name", EXPECTED)
def test_small(name):
    size = (NOTEBOOKS / f"{name}.ipynb").stat().st_size
    assert size < MAX_BYTES, f"{name}.ipynb is {size} bytes"
