"""Options dataclasses documented from one source: the text and allowed values of each field.

An options class (``DirectSolverOptions``, ``ust.dense.MatmulOptions``, ...) declares every
field with :func:`option`, which keeps the field's description and, where the values are a
fixed set, the allowed values in the field's metadata.  :func:`describe` reads them back: the
API reference renders them (the ``ust-options`` directive of ``docs/_ext/ust_options.py``) and
the CLI builds its help from :func:`cli_help`, so the text is written once.

This module is a leaf: it imports nothing from ust.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

__all__ = ["OptionDoc", "cli_help", "describe", "option"]


@dataclasses.dataclass(frozen=True)
class OptionDoc:
    """One documented field of an options class."""

    name: str
    type: str
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None

    @property
    def default_text(self) -> str:
        return repr(self.default)


def option(default: Any, doc: str, *, choices: Sequence[Any] | None = None) -> Any:
    """A dataclass field with ``default``, described by ``doc`` (reStructuredText; one paragraph)
    and, when given, the ``choices`` it accepts."""
    metadata = {"doc": " ".join(doc.split()), "choices": None if choices is None else tuple(choices)}
    return dataclasses.field(default=default, metadata=metadata)


def describe(cls: type) -> list[OptionDoc]:
    """The documented fields of the options dataclass ``cls``, in declaration order.

    Raises TypeError for a field declared without :func:`option` (every option is documented).
    """
    out = []
    for f in dataclasses.fields(cls):
        if "doc" not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} has no description: declare it with option()")
        out.append(
            OptionDoc(
                name=f.name,
                type=f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type)),
                default=f.default,
                doc=f.metadata["doc"],
                choices=f.metadata.get("choices"),
            )
        )
    return out


def _plain(text: str) -> str:
    """reStructuredText inline markup as plain text: ``x`` -> x, :func:`f` -> f."""
    import re

    text = re.sub(r":[a-z]+:`~?([^`<]+?)(?:\s*<[^>]*>)?`", r"\1", text)
    return text.replace("``", "")


def cli_help(cls: type, name: str) -> str:
    """argparse help for option ``name`` of ``cls``: its description in plain text ('%' escaped)."""
    for entry in describe(cls):
        if entry.name == name:
            return _plain(entry.doc).replace("%", "%%")
    raise KeyError(f"{cls.__name__} has no option {name!r}")
