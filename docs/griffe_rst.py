r"""A griffe extension: optx's docstrings and constructors as mkdocstrings expects them.

* optx's docstrings write maths as ``:math:`...``` and ``.. math::`` blocks, literal blocks
  after ``::``, and examples under ``Example:``. The site renders Markdown (maths through
  ``pymdownx.arithmatex``) and griffe's Google parser knows ``Examples:``, so each docstring
  is rewritten as griffe loads it: inline maths becomes ``\(...\)``, a ``.. math::`` block
  ``\[...\]``, a trailing ``::`` a ``:``, and ``Example:`` ``Examples:``.
* Classes made dataclasses by optx's own decorators (the schedules' ``register``) get the
  ``__init__`` Python generated for them, read from the class itself: griffe's static
  analysis only sees ``@dataclasses.dataclass``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from typing import Any

import griffe

_INLINE = re.compile(r":math:`([^`]+)`")
_EXAMPLE = re.compile(r"^([ \t]*)Example:[ \t]*$", re.MULTILINE)
_BLOCK = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*(?P<first>.*)$")


def _blocks(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _BLOCK.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent = len(match["indent"])
        body = [match["first"]] if match["first"].strip() else []
        i += 1
        # The block's body: the lines indented deeper than the directive, and blank lines.
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent
        ):
            body.append(lines[i].strip())
            i += 1
        while body and not body[-1]:
            body.pop()
        pad = match["indent"]
        maths = " ".join(line for line in body if line)
        out += [f"{pad}\\[", f"{pad}{maths}", f"{pad}\\]", ""]
    return out


def to_markdown(text: str) -> str:
    """Returns ``text`` with its reStructuredText maths and literal markers as Markdown."""
    lines = _blocks(text.splitlines())
    text = "\n".join(lines)
    text = _INLINE.sub(lambda m: f"\\({m[1]}\\)", text)
    text = _EXAMPLE.sub(r"\1Examples:", text)
    return re.sub(r"(?<=\S)::$", ":", text, flags=re.MULTILINE)


def _generated_init(cls: griffe.Class) -> griffe.Function | None:
    """The ``__init__`` of ``cls`` if Python generated it for a dataclass, else ``None``."""
    try:
        runtime = getattr(importlib.import_module(cls.module.path), cls.name)
    except (ImportError, AttributeError):
        return None
    if not (dataclasses.is_dataclass(runtime) and "__init__" in vars(runtime)):
        return None
    parameters = [griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)]
    for p in inspect.signature(runtime).parameters.values():
        parameters.append(
            griffe.Parameter(
                p.name,
                annotation=None if p.annotation is p.empty else str(p.annotation),
                kind=griffe.ParameterKind(p.kind.description),
                default=None if p.default is p.empty else repr(p.default),
            )
        )
    return griffe.Function(
        "__init__", parent=cls, parameters=griffe.Parameters(*parameters), returns="None"
    )


def _add_dataclass_inits(obj: griffe.Object) -> None:
    for member in list(obj.members.values()):
        if member.is_alias or not (member.is_class or member.is_module):
            continue
        if member.is_class and "__init__" not in member.members:
            init = _generated_init(member)
            if init is not None:
                member.set_member("__init__", init)
        _add_dataclass_inits(member)


class RstToMarkdown(griffe.Extension):
    """Rewrites every docstring with `to_markdown`; adds dataclasses' generated ``__init__``."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Gives optx's dataclasses without a visible ``__init__`` the generated one."""
        if pkg.name == "optx":
            _add_dataclass_inits(pkg)

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrites ``obj``'s docstring, if it has one."""
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
