"""The documentation site: a strict build, a page per notebook, every public name, true tables.

`site` builds the site once (``mkdocs build --strict``, as CI does) into a temporary folder;
the tests below read what it wrote. The helpers of the build (docs/hooks.py and
docs/griffe_rst.py) are tested directly too.
"""

from __future__ import annotations

import functools
import html
import importlib
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import types

import pytest

import optx

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAMESPACES = (
    "optx",
    "optx.schedules",
    "optx.tree",
    "optx.constraints",
    "optx.transforms",
    "optx.contrib",
    "optx.projections",
    "optx.second_order",
    "optx.microbatching",
    "optx.optimizers",
    "optx.optimizers.schedules",
)
COMING_FROM = ("coming_from_optax.md", "coming_from_keras.md")


def _load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"optx_docs_{name}", ROOT / "docs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, str]:
    out = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    start = time.perf_counter()
    result = subprocess.run(
        [*command, "--config-file", str(ROOT / "mkdocs.yml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    print(f"mkdocs build --strict: {time.perf_counter() - start:.1f} s")
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"`mkdocs build --strict` failed:\n{log}"
    return out, log


def _text(page: pathlib.Path) -> str:
    """A built page's text, without tags."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))


def public_names(namespace: str) -> list[str]:
    """`dir` without underscores; a module counts when it is a submodule of ``namespace``."""
    module = importlib.import_module(namespace)
    return sorted(
        name
        for name in dir(module)
        if not name.startswith("_")
        and (
            not isinstance(getattr(module, name), types.ModuleType)
            or getattr(module, name).__name__ in {f"{namespace}.{name}"} - {"optx.demo"}
        )
    )


# -- the build ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_strict_build_has_no_warnings(site):
    _, log = site
    assert not [line for line in log.splitlines() if "WARNING" in line], log


@pytest.mark.slow
@pytest.mark.parametrize("notebook", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_every_notebook_has_a_page_in_the_nav(site, notebook):
    out, _ = site
    stem = notebook.removesuffix(".ipynb")
    page = out / "notebooks" / stem / "index.html"
    assert page.is_file(), f"notebooks/{notebook} has no page in the built site."
    cells = json.loads((ROOT / "notebooks" / notebook).read_text(encoding="utf-8"))["cells"]
    first = "".join(next(c for c in cells if c["cell_type"] == "markdown")["source"])
    heading = first.splitlines()[0].lstrip("# ").replace("`", "")
    assert " ".join(heading.split()) in " ".join(_text(page).split())
    assert f'href="notebooks/{stem}/"' in (out / "index.html").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("namespace", NAMESPACES)
def test_reference_has_every_public_name(site, namespace):
    out, _ = site
    anchors = set()
    for page in (out / "reference").rglob("*.html"):
        anchors |= set(re.findall(r'id="([^"]+)"', page.read_text(encoding="utf-8")))
    names = public_names(namespace)
    assert len(names) >= 3  # a sanity floor: optx.second_order has three
    missing = [name for name in names if f"{namespace}.{name}" not in anchors]
    assert not missing, f"The API reference has no entry for these names of {namespace}: {missing}"


# -- the "coming from" tables ---------------------------------------------------------------------


def resolve(dotted: str) -> object:
    """The object ``optx.a.b`` names; `AttributeError` if there is none."""
    parts = dotted.split(".")
    if parts[0] != "optx":
        raise AttributeError(f"{dotted!r} is not an optx name.")
    obj: object = optx
    for part in parts[1:]:
        obj = getattr(obj, part)
    return obj


def optx_column(markdown: str) -> list[str]:
    """The cells of the "optx" column of every table, one per row."""
    rows: list[str] = []
    column = None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index("optx") if "optx" in cells else -1
        elif column >= 0 and not set(line) <= set("|-: "):
            rows.append(cells[column])
    return rows


def bad_names(markdown: str) -> list[str]:
    """The entries of the optx columns that are not names of existing optx objects.

    A cell holds code spans naming optx objects, or "—" where optx has no counterpart.
    """
    bad = []
    for cell in optx_column(markdown):
        spans = re.findall(r"`([^`]+)`", cell)
        if not spans and cell != "—":
            bad.append(f"<no name: {cell!r}>")
        bad += [span for span in spans if not _resolves(span)]
    return bad


@pytest.mark.parametrize("page", COMING_FROM)
def test_coming_from_tables_name_existing_objects(page):
    markdown = (ROOT / "docs" / page).read_text(encoding="utf-8")
    assert len(optx_column(markdown)) >= 20
    assert bad_names(markdown) == []
    # Every optx name elsewhere on the page (prose, other columns) exists too.
    spans = re.findall(r"`(optx(?:\.\w+)+)`", markdown)
    assert [s for s in spans if not _resolves(s)] == []


def _resolves(dotted: str) -> bool:
    try:
        resolve(dotted)
    except AttributeError:
        return False
    return True


def test_table_check_reports_missing_names_and_cells_without_one():
    table = (
        "| optax | optx | notes |\n|---|---|---|\n"
        "| `optax.adam` | `optx.adam` | fine |\n"
        "| `optax.sgd` | `optx.not_a_transform`, `optx.sgd` | a typo |\n"
        "| `optax.ema` | — | no counterpart |\n"
        "| `optax.x` | `optx.tree.no_such_helper` | |\n"
        "| `optax.y` | adam | not code |\n"
        "| `optax.z` | | empty |\n"
    )
    assert bad_names(table) == [
        "optx.not_a_transform",
        "optx.tree.no_such_helper",
        "<no name: 'adam'>",
        "<no name: ''>",
    ]


# -- the pages' code, and the build's helpers ------------------------------------------------------


@pytest.mark.parametrize("page", ["coming_from_optax.md", "coming_from_keras.md", "reliability.md"])
def test_pages_python_blocks_run(page):
    markdown = (ROOT / "docs" / page).read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)
    assert blocks
    namespace: dict[str, object] = {"__name__": "docs"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/{page} python block {i}", "exec"), namespace)


@functools.cache
def _griffe_rst() -> types.ModuleType:
    return _load("griffe_rst")


def test_rst_maths_and_examples_become_markdown():
    docstring = (
        "Scales by :math:`\\eta` and :math:`\\rho`.\n"
        "\n"
        ".. math::\n"
        "   u \\leftarrow -\\eta\\,u\n"
        "   + 0\n"
        "\n"
        "See this::\n"
        "\n"
        "    code\n"
        "\n"
        "Example:\n"
        "  >>> 1 + 1\n"
        "  2"
    )
    assert _griffe_rst().to_markdown(docstring) == (
        "Scales by \\(\\eta\\) and \\(\\rho\\).\n"
        "\n"
        "\\[\n"
        "u \\leftarrow -\\eta\\,u + 0\n"
        "\\]\n"
        "\n"
        "See this:\n"
        "\n"
        "    code\n"
        "\n"
        "Examples:\n"
        "  >>> 1 + 1\n"
        "  2"
    )


def test_indented_maths_block_keeps_its_indentation():
    docstring = "Args:\n  x: the value,\n\n    .. math:: a = b\n\n  y: another."
    assert _griffe_rst().to_markdown(docstring) == (
        "Args:\n  x: the value,\n\n    \\[\n    a = b\n    \\]\n\n  y: another."
    )


def test_names_become_links_outside_fenced_code():
    hooks = _load("hooks")
    markdown = "Use `optx.adam` (or `x.adam`).\n\n```python\ny = `optx.sgd`\n```\n`optx.tree.add`"
    assert hooks.link_names(markdown) == (
        "Use [`optx.adam`][optx.adam] (or `x.adam`).\n\n```python\ny = `optx.sgd`\n```\n"
        "[`optx.tree.add`][optx.tree.add]"
    )
