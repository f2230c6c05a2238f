"""Every install command optx shows names the distribution `optx-jax`, never bare `optx`.

On PyPI the name ``optx`` belongs to an unrelated package: ``pip install optx`` (or
``"optx[checkpoint]"``) installs that package, not this one. The README, the documentation,
the notebooks (their cells and outputs), the examples, the benchmarks' notes and every
docstring and message of the package are scanned for ``pip install`` (``pip3``, ``pipx``,
``uv pip``) and ``uv add`` / ``poetry add`` commands. Other packages (``orbax-checkpoint``,
``matplotlib``) and installs from a checkout (``pip install -e ".[test]"``) are fine.
"""

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

_COMMAND = re.compile(r"\b(?:(?:pip3?|pipx)\s+install|(?:uv|poetry)\s+add)\b(?P<args>[^\n`;|&)#]*)")
# A requirement naming the unrelated distribution: `optx`, `optx[extra]`, `optx==1.0`, ...
_WRONG = re.compile(r"optx(?:\[[^\]]*\])?(?:[<>=!~;@].*)?", re.IGNORECASE)


def wrong_installs(text: str) -> list[str]:
    """The install commands in ``text`` that name the distribution ``optx``."""
    found = []
    for match in _COMMAND.finditer(text):
        for token in match.group("args").split():
            requirement = token.strip("\"'\\,.:")
            if not token.startswith("-") and _WRONG.fullmatch(requirement):
                found.append(match.group(0).strip())
                break
    return found


def _strings(value):
    """Every string in a notebook's JSON (cells' sources and outputs), joined per list."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        yield "".join(value)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)


def _files() -> list[pathlib.Path]:
    patterns = [
        "README.md",
        "CHANGELOG.md",
        "docs/**/*.md",
        "notebooks/**/*.ipynb",
        "optx/**/*.py",
        "examples/**/*",
        "bench/**/*.md",
        "bench/**/*.py",
    ]
    files = {p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()}
    return sorted(p for p in files if p.suffix in (".md", ".py", ".ipynb"))


def _text(path: pathlib.Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        return "\n".join(_strings(json.loads(text)))
    return text


@pytest.mark.parametrize(
    "text",
    [
        "pip install optx",
        'pip install "optx[checkpoint]"',
        "`pip install 'optx[demo]'`",
        "python -m pip install -U optx==0.1.0",
        "!pip install --quiet optx",
        "%pip install optx>=0.1",
        "uv add optx",
        "uv pip install OPTX",
        "pip install jax optx",
    ],
)
def test_the_scan_finds_the_wrong_name(text):
    assert wrong_installs(text), text


@pytest.mark.parametrize(
    "text",
    [
        "pip install optx-jax",
        'pip install "optx-jax[checkpoint]"',
        "pip install optx_jax",
        'pip install -e ".[test]" && pytest -n auto',
        "pip install orbax-checkpoint",
        "`pip install matplotlib`; then import optx",
        "pip install optimistix  # often imported as optx",
    ],
)
def test_the_scan_accepts_the_right_names(text):
    assert not wrong_installs(text), text


def test_the_scan_reads_the_files_that_show_installs():
    files = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert {"README.md", "optx/demo.py"} <= files
    assert any(f.startswith("docs/") for f in files)
    assert any(f.endswith(".ipynb") for f in files)


def test_every_install_command_names_optx_jax():
    wrong = [
        f"{path.relative_to(ROOT)}: {command}"
        for path in _files()
        for command in wrong_installs(_text(path))
    ]
    assert not wrong, (
        "These install the unrelated PyPI package `optx`; the distribution is `optx-jax` "
        '(with extras: `pip install "optx-jax[checkpoint]"`):\n' + "\n".join(wrong)
    )
