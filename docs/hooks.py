"""mkdocs hooks of optx's documentation: the notebooks and the API reference, generated.

* Every ``notebooks/*.ipynb`` becomes a page (``notebooks/<name>/``, rendered by mkdocs-jupyter
  without running it) and an entry under "Notebooks" in the nav, in file-name order.
* In the hand-written pages, an inline code span that is a dotted optx name
  (`` `optx.adam` ``, `` `optx.optimizers.Adam.apply` ``) becomes a link to its reference
  entry, so a strict build also fails on a name that does not exist.
* The API reference is written from the public names of each namespace (what `dir` lists
  without a leading underscore; of the modules, only its own submodules): one ``:::``
  directive per name, grouped under the first line of the docstring of the module it is
  imported from. A name added to a namespace appears with no edit here; on `optx`'s pages,
  one from a module not in ``_OPTX_TOPICS`` goes to "Transforms".
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import pathlib
import re
import types
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

# The namespaces documented, each on a page of its own (`optx` on several: `_OPTX_TOPICS`).
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

# `optx`'s pages: (file, title, introduction, source modules under `optx._src`). A module
# matches an entry equal to it or a package prefix ending in "."; `None` takes the rest.
_OPTX_TOPICS: tuple[tuple[str, str, str, tuple[str, ...] | None], ...] = (
    (
        "core",
        "Core",
        "The `(init, update)` protocol and the base class of the built-in transforms, "
        "`chain` and the routing of parameters to transforms, and the hyperparameters "
        "held in the state.",
        ("base", "combine", "hyperparams"),
    ),
    (
        "step",
        "Training step",
        "A jitted training step that donates the parameters and the state, returns them in "
        "the donated order and uses the backend's XLA options (`make_step`); the options "
        "alone for a step of your own.",
        ("train_step", "compiler"),
    ),
    (
        "optimizers",
        "Optimizers",
        "The functional optimizers (optax's names, arguments and defaults), each a short "
        "`chain` of the `scale_by_*` building blocks beside it, one section per family.",
        ("algorithms.", "lbfgs"),
    ),
    (
        "transforms",
        "Transforms",
        "The composable transforms: clipping, scaling, momentum, weight decay, averages of "
        "the weights, gradient accumulation, loss scaling, non-finite steps, constraints.",
        None,
    ),
    (
        "utilities",
        "Utilities",
        "optax's top-level helpers: moment updates and bias correction over pytrees, norms "
        "with finite gradients, saturating counters, and linear algebra (power iteration, "
        "inverse matrix roots, non-negative least squares).",
        ("linear_algebra", "numerics", "multi_normal", "tree_moments", "tree_state"),
    ),
    (
        "inspecting",
        "Inspecting",
        "Reading a state: its hyperparameters, slots and counters as a table, and per-step "
        "figures recorded for logging.",
        ("summary", "monitored", "measure"),
    ),
    (
        "scale",
        "Distributed and large models",
        "Gradients across devices, sharded optimizer state, checkpoints, flat buffers and "
        "row-sparse gradients.",
        ("distributed", "sharding", "checkpoint", "flat", "flat_tree", "sparse"),
    ),
)


# Submodules that are programs, not API; present in `dir(optx)` once imported.
SCRIPTS = frozenset({"optx.demo"})


def public_names(namespace: str) -> list[str]:
    """The public names of ``namespace``: `dir` without underscores, modules only if its own.

    A module-valued name counts when it is a submodule of ``namespace`` (``optx.tree``),
    not an import such as ``jax``.
    """
    module = importlib.import_module(namespace)
    names = []
    for name in dir(module):
        value = getattr(module, name)
        if name.startswith("_"):
            continue
        if isinstance(value, types.ModuleType) and (
            value.__name__ != f"{namespace}.{name}" or value.__name__ in SCRIPTS
        ):
            continue
        names.append(name)
    return sorted(names)


def _source_modules(namespace: str) -> dict[str, str]:
    """``{public name: module it is imported from}``, read from the namespace's imports."""
    spec = importlib.util.find_spec(namespace)
    assert spec is not None and spec.origin is not None, namespace
    tree = ast.parse(pathlib.Path(spec.origin).read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                found[alias.asname or alias.name] = node.module
    return found


def _module_title(module: str) -> str:
    """The first line of ``module``'s docstring, without its final period."""
    spec = importlib.util.find_spec(module)
    doc = None
    if spec is not None and spec.origin is not None and spec.origin.endswith(".py"):
        doc = ast.get_docstring(ast.parse(pathlib.Path(spec.origin).read_text("utf-8")))
    first = (doc or module).strip().splitlines()[0].removesuffix(".")
    # Pointers into the design notes mean nothing to a reader of the site.
    return re.sub(r",? \(?DESIGN D\d+\)?", "", first)


def _inherited(cls: type, documented: set[int]) -> list[str]:
    """Public members ``cls`` inherits from optx's private base classes.

    Members of a documented (public) base are on that base's entry; those of a private
    base (the stateful layer's mixins) would otherwise appear nowhere.
    """
    own = set(vars(cls))
    public_bases = [base for base in cls.__mro__[1:] if id(base) in documented]
    names: set[str] = set()
    for base in cls.__mro__[1:]:
        # A public base's entry shows what it has and inherits: skip it and its ancestors.
        if not base.__module__.startswith("optx.") or any(
            issubclass(public, base) for public in public_bases
        ):
            continue
        names |= {
            name
            for name, value in vars(base).items()
            if not name.startswith("_") and inspect.getdoc(value)
        }
    return sorted(names - own)


def _directive(path: str, **options: Any) -> str:
    """A mkdocstrings ``:::`` block for ``path``, with per-object options."""
    lines = [f"::: {path}"]
    if options:
        lines.append("    options:")
        lines += [f"      {key}: {json.dumps(value)}" for key, value in options.items()]
    return "\n".join(lines) + "\n"


def _namespace_link(path: str, prefix: str) -> str:
    """A list item linking to the page of the namespace ``path`` (where its anchor is)."""
    return f"- [`{path}`]({prefix}{path}.md): {_module_title(path)}."


def _entry(path: str, obj: Any, documented: set[int]) -> str:
    """The block of one public name: a link for a namespace, a class with its own members."""
    if isinstance(obj, types.ModuleType):
        return _namespace_link(path, "")
    inherited = _inherited(obj, documented) if inspect.isclass(obj) else []
    return _directive(path, inherited_members=inherited) if inherited else _directive(path)


def _order(name: str) -> tuple[bool, str]:
    # Functions and factories first, then classes (states last in their section).
    return (name[:1].isupper(), name)


def _section(title: str, paths: list[tuple[str, Any]], documented: set[int]) -> str:
    body = "\n".join(_entry(path, obj, documented) for path, obj in paths)
    return f"## {title}\n\n{body}\n"


def _topic(module: str) -> str:
    relative = module.removeprefix("optx._src.")
    for page, _, _, modules in _OPTX_TOPICS:
        if modules is not None and any(
            relative == m or (m.endswith(".") and relative.startswith(m)) for m in modules
        ):
            return page
    return next(page for page, _, _, modules in _OPTX_TOPICS if modules is None)


_SUBMODULES = "~"  # sorts after every module name: the namespaces inside come last
# Modules whose section leads its page: the base classes the other sections build on.
_LEADING = {
    "optx._src.base",
    "optx._src.constraints",
    "optx._src.schedules.base",
    "optx._src.stateful.optimizer",
}


def _namespace_page(
    namespace: str, names: list[str], documented: set[int], title: str, intro: str
) -> str:
    module = importlib.import_module(namespace)
    sources = _source_modules(namespace)
    groups: dict[str, list[str]] = {}
    for name in names:
        obj = getattr(module, name)
        source = sources.get(name) or getattr(obj, "__module__", None) or namespace
        if isinstance(obj, types.ModuleType):
            source = _SUBMODULES
        groups.setdefault(source, []).append(name)
    parts = [f"# {title}\n\n{intro}\n"]
    for source in sorted(groups, key=lambda m: (m not in _LEADING, m)):
        names_here = sorted(groups[source], key=_order)
        paths = [(f"{namespace}.{n}", getattr(module, n)) for n in names_here]
        if len(groups) == 1:  # one module (`optx.tree`): its title would repeat the page's
            parts.append("\n".join(_entry(path, obj, documented) for path, obj in paths))
            continue
        title = "Namespaces" if source == _SUBMODULES else _module_title(source)
        parts.append(_section(title, paths, documented))
    return "\n".join(parts)


def reference_pages() -> dict[str, tuple[str, str]]:
    """``{page path: (nav title, Markdown)}`` of the API reference, in nav order."""
    documented = {
        id(getattr(importlib.import_module(ns), name))
        for ns in NAMESPACES
        for name in public_names(ns)
        if inspect.isclass(getattr(importlib.import_module(ns), name))
    }
    pages: dict[str, tuple[str, str]] = {}
    optx = importlib.import_module("optx")
    sources = _source_modules("optx")
    by_topic: dict[str, list[str]] = {page: [] for page, *_ in _OPTX_TOPICS}
    submodules = []
    for name in public_names("optx"):
        if isinstance(getattr(optx, name), types.ModuleType):
            submodules.append(name)
            continue
        source = sources.get(name) or getattr(getattr(optx, name), "__module__", "") or ""
        by_topic[_topic(source)].append(name)

    index = [
        "# API reference\n",
        "Every public name of optx, one namespace per page: the functional "
        "transforms and optimizers at the top level with optax's names, optax-style "
        "schedules in `optx.schedules`, pytree helpers in `optx.tree`, constraints in "
        "`optx.constraints`, and the Keras-style classes in `optx.optimizers`.\n",
        _directive("optx", members=False, show_root_heading=False),
        "## The `optx` namespace\n",
    ]
    for page, title, intro, _ in _OPTX_TOPICS:
        index.append(f"- [{title}](optx/{page}.md): {intro}")
    index.append("\n## Namespaces\n")
    index += [_namespace_link(f"optx.{name}", "") for name in submodules]
    pages["reference/index.md"] = ("Overview", "\n".join(index) + "\n")

    for page, title, intro, _ in _OPTX_TOPICS:
        pages[f"reference/optx/{page}.md"] = (
            f"optx: {title.lower()}",
            _namespace_page("optx", by_topic[page], documented, f"optx: {title.lower()}", intro),
        )
    for namespace in NAMESPACES[1:]:
        # The namespace's docstring under the page's title (which stands for its heading).
        intro = _directive(namespace, members=False, show_root_heading=False)
        pages[f"reference/{namespace}.md"] = (
            namespace,
            _namespace_page(namespace, public_names(namespace), documented, namespace, intro),
        )
    return pages


def notebook_title(path: pathlib.Path) -> str:
    """The notebook's first Markdown heading, without backticks; its file name otherwise."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return path.stem
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", [])).splitlines():
                if line.startswith("# "):
                    return line[2:].replace("`", "").strip()
    return path.stem


def notebooks() -> list[pathlib.Path]:
    """Every notebook of ``notebooks/``, in file-name order."""
    return sorted(NOTEBOOKS.glob("*.ipynb"))


_PAGES: dict[str, tuple[str, str]] = {}


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Fills the nav's "Notebooks" and "API reference" entries."""
    _PAGES.clear()
    _PAGES.update(reference_pages())
    filled = set()
    for entry in config.nav or []:
        if not isinstance(entry, dict):
            continue
        if "Notebooks" in entry:
            entry["Notebooks"] = [
                {notebook_title(nb): f"notebooks/{nb.name}"} for nb in notebooks()
            ]
            filled.add("Notebooks")
        if "API reference" in entry:
            entry["API reference"] = [{title: page} for page, (title, _) in _PAGES.items()]
            filled.add("API reference")
    missing = {"Notebooks", "API reference"} - filled
    if missing:
        raise ValueError(f"docs/hooks.py needs nav entries named {sorted(missing)} in mkdocs.yml.")
    return config


# Before mkdocs-jupyter's `on_files`, which turns the notebooks added here into pages.
@event_priority(50)
def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Adds the notebooks and the generated reference pages to the site's files."""
    for nb in notebooks():
        # A plain file whose source folder is the repository (mkdocs-jupyter reads the
        # notebook from `abs_src_path`, which a `File.generated` does not pass through).
        files.append(
            File(
                f"notebooks/{nb.name}",
                src_dir=str(ROOT),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
    for page, (_, markdown) in _PAGES.items():
        files.append(File.generated(config, page, content=markdown))
    return files


_NAME_SPAN = re.compile(r"(?<![`\[])`(optx(?:\.[A-Za-z_]\w*)+)`(?![`\]])")


def link_names(markdown: str) -> str:
    """Makes each `` `optx.x.y` `` code span outside fenced blocks a link to its entry."""
    parts = re.split(r"(^```.*?^```[ \t]*$)", markdown, flags=re.MULTILINE | re.DOTALL)
    return "".join(
        part if part.startswith("```") else _NAME_SPAN.sub(r"[`\1`][\1]", part) for part in parts
    )


def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    """Links the optx names of the hand-written pages to the API reference."""
    if page.file.src_uri.startswith(("reference/", "notebooks/")):
        return markdown
    return link_names(markdown)
