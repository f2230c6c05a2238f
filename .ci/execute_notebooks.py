"""Executes notebooks in place and strips them to the form that is committed.

    python .ci/execute_notebooks.py notebooks/02_composing_transforms.ipynb [...]
    python .ci/execute_notebooks.py --strip-only notebooks/*.ipynb

Each notebook runs top to bottom in a fresh ``python3`` kernel, from the ``notebooks/``
folder (as nbmake runs it in CI); its outputs are kept, and everything else that changes
from run to run or from machine to machine is dropped: the notebook's metadata is reduced
to ``kernelspec`` and ``language_info`` (its name only), every cell's metadata to ``{}``,
cell ids and execution timestamps go. A notebook that fails is left untouched.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def strip(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with only the metadata that is committed (changed in place and returned)."""
    nb.metadata = nbformat.from_dict(
        {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    )
    nb.nbformat, nb.nbformat_minor = 4, 4
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict({})
        cell.pop("id", None)
        if cell.cell_type == "code":
            for output in cell.outputs:
                if "metadata" in output:
                    output.metadata = nbformat.from_dict({})
    return nb


def execute(path: pathlib.Path, timeout: int) -> float:
    """Runs ``path`` in place; returns the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(strip(nb), path)
    return seconds


def main(argv: list[str]) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=pathlib.Path)
    parser.add_argument("--strip-only", action="store_true", help="do not execute")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per cell")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        if args.strip_only:
            nbformat.write(strip(nbformat.read(path, as_version=4)), path)
            print(f"{path}: stripped")
        else:
            print(f"{path}: executed in {execute(path, args.timeout):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
