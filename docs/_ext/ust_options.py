"""Two directives of the API reference.

``.. ust-options:: ust.DirectSolverOptions`` (inside that class's ``autoclass``) renders each
field that :func:`ust.runtime.options.option` declared as a ``py:attribute`` with its type,
default, description and allowed values, so the text lives in one place: the field.

``.. ust-alias:: ust.ops.matmul ust.matmul`` documents a second public name of an object that
is documented under its first: a target of the right kind (``:func:`ust.ops.matmul``` resolves)
that points to the first.  The build fails where the two names are not one object.
"""

from __future__ import annotations

import importlib
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


def _resolve(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def option_lines(cls: type) -> list[str]:
    """The reStructuredText of every option of ``cls``."""
    from ust.runtime.options import describe

    lines: list[str] = []
    for entry in describe(cls):
        lines += [
            f".. py:attribute:: {entry.name}",
            f"   :type: {entry.type}",
            f"   :value: {entry.default_text}",
            "",
            f"   {entry.doc}",
            "",
        ]
        if entry.choices:
            allowed = ", ".join(f"``{c!r}``" for c in entry.choices)
            lines += [f"   Allowed values: {allowed}.", ""]
    return lines


class UstOptions(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        cls = _resolve(self.arguments[0])
        content = StringList(option_lines(cls), source=f"<ust-options {self.arguments[0]}>")
        node = nodes.container()
        nested_parse_with_titles(self.state, content, node)
        return node.children


_KINDS = {"class": ("class", "class"), "exception": ("exception", "exc"), "function": ("function", "func")}


def alias_lines(alias: str, target: str) -> list[str]:
    """The reStructuredText of ``alias``, a second name of the object documented as ``target``."""
    obj = _resolve(alias)
    if obj is not _resolve(target):
        raise ValueError(f"ust-alias: {alias} and {target} are different objects")
    if isinstance(obj, type):
        kind = "exception" if issubclass(obj, BaseException) else "class"
    elif callable(obj):
        kind = "function"
    else:
        raise ValueError(f"ust-alias: {alias} is neither a class nor a function")
    directive, role = _KINDS[kind]
    module, _, name = alias.rpartition(".")
    return [
        f".. py:{directive}:: {name}",
        f"   :module: {module}",
        "",
        f"   The same {kind} as :{role}:`{target}`.",
        "",
    ]


class UstAlias(SphinxDirective):
    required_arguments = 2
    has_content = False

    def run(self) -> list[nodes.Node]:
        lines = alias_lines(self.arguments[0], self.arguments[1])
        content = StringList(lines, source=f"<ust-alias {self.arguments[0]}>")
        node = nodes.container()
        nested_parse_with_titles(self.state, content, node)
        return node.children


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("ust-options", UstOptions)
    app.add_directive("ust-alias", UstAlias)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
