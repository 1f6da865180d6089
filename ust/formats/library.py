"""Declarations, templates, and the standard format library.

The standard library lives in ``standard.ust`` (the DSL describing itself) and is parsed
on first use, so ``import ust`` builds no parser.  Parsed single formats are cached by
their text: a repeated :func:`format` of the same string is a dictionary look-up.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ust.formats.model import STANDARD_NAMER, FloorDiv, Format, LevelFormat, Mod, build_format
from ust.grammar import ast
from ust.grammar.ast import MAX_INT
from ust.runtime.errors import FormatError, InvalidTypeError, UstError, UstSyntaxError
from ust.runtime.suggest import did_you_mean

__all__ = [
    "FormatTemplate",
    "format",
    "get",
    "instance_name",
    "load_formats",
    "names",
    "parse_formats",
    "resolve",
    "standard_name_of",
]


@dataclass(frozen=True)
class FormatTemplate:
    """A parameterised declaration such as ``BSR[r, c]``; call or index it to instantiate."""

    name: str
    params: tuple[str, ...]
    spec: ast.SpecAST = field(repr=False)

    def __call__(self, *args: int) -> Format:
        return self.instantiate(args)

    def __getitem__(self, args: int | tuple[int, ...]) -> Format:
        return self.instantiate(args if isinstance(args, tuple) else (args,))

    def instantiate(self, args: tuple[int, ...]) -> Format:
        """The Format for these parameter values (cached: equal arguments give the same object)."""
        if len(args) != len(self.params):
            raise FormatError(
                f"[template-arity] {self.name} takes {len(self.params)} parameters "
                f"({', '.join(self.params)}), got {len(args)}",
                rule="template-arity",
            )
        for a in args:
            if isinstance(a, bool) or not isinstance(a, int):
                raise FormatError(
                    f"[bad-parameter] {self.name} parameters must be integers, got {_short(a)}",
                    rule="bad-parameter",
                )
            if not -MAX_INT - 1 <= a <= MAX_INT:
                raise FormatError(
                    f"[integer-range] {self.name} parameter {_short(a)} is out of range; integers in the "
                    f"format language are at most 2**63 - 1 = {MAX_INT} (a block size beyond int64 is "
                    "meaningless)",
                    rule="integer-range",
                )
        return _instantiate(self, tuple(args))

    def __repr__(self) -> str:
        return f"FormatTemplate<{self.name}[{', '.join(self.params)}]>"


def instance_name(name: str, args: tuple[int, ...] = ()) -> str:
    """``"CSR"``, ``"BSR[2, 2]"``: a format's (or format class's) name with its parameters -- the
    one spelling, used by the library, ``classify`` and the planner's reasons."""
    return f"{name}[{', '.join(map(str, args))}]" if args else name


@functools.lru_cache(maxsize=512)
def _instantiate(template: FormatTemplate, args: tuple[int, ...]) -> Format:
    label = instance_name(template.name, args)
    try:
        return build_format(template.spec, dict(zip(template.params, args, strict=True)), name=label)
    except FormatError as err:  # name the instance: the line/column are in the declaration
        raise FormatError(f"{label}: {err}", rule=err.rule, level=err.level) from None


def _check_parameters_bound(decl: ast.DeclAST) -> None:
    """A template's names must be its parameters: say so when it is declared, not used."""
    spec = decl.spec.map if isinstance(decl.spec, ast.EncodingAST) else decl.spec
    for k, lv in enumerate(spec.levels):
        operands = [getattr(lv.expr, "divisor", 0), *(lv.structured or ())]
        for name in operands:
            if isinstance(name, str) and name not in decl.params:
                raise FormatError(
                    f"[unbound-parameter] level {k}: '{name}' is not a parameter of "
                    f"{decl.name}[{', '.join(decl.params)}] (line {lv.line}, column {lv.column})",
                    rule="unbound-parameter",
                    level=k,
                )


def _from_file_ast(tree: ast.FileAST) -> dict[str, Format | FormatTemplate]:
    out: dict[str, Format | FormatTemplate] = {}
    for decl in tree.decls:
        if decl.name in out:
            raise FormatError(
                f"[duplicate-declaration] format '{decl.name}' is declared twice (again at line {decl.line})",
                rule="duplicate-declaration",
            )
        if len(set(decl.params)) != len(decl.params):
            raise FormatError(
                f"[duplicate-parameter] format '{decl.name}' repeats a parameter name (line {decl.line})",
                rule="duplicate-parameter",
            )
        if decl.params:
            _check_parameters_bound(decl)
            out[decl.name] = FormatTemplate(decl.name, decl.params, decl.spec)
        else:
            out[decl.name] = build_format(decl.spec, name=decl.name)
    return out


def parse_formats(text: str) -> dict[str, Format | FormatTemplate]:
    """Parse a file of declarations: a mapping name -> Format (or FormatTemplate).

    ``text`` must be a ``str`` (else :class:`~ust.runtime.errors.InvalidTypeError`); its limits
    (length, nesting, integers up to 2**63 - 1) are those of ``ust.grammar.parser``.
    """
    from ust.grammar.parser import parse_file

    return _from_file_ast(parse_file(text))


def load_formats(path: str | os.PathLike[str]) -> dict[str, Format | FormatTemplate]:
    """Read and parse a ``.ust`` file of declarations (UTF-8 text, a byte-order mark allowed).

    A file that is not UTF-8 raises :class:`~ust.runtime.errors.UstSyntaxError` naming the
    path, line and column of the first bad byte; a missing file raises ``FileNotFoundError``.
    Errors in the declarations carry a note naming the path.
    """
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise UstSyntaxError(
            f"{os.fspath(path)}: line {line}, column {column}: not UTF-8 text "
            f"(byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            line=line,
            column=column,
        ) from None
    try:
        return parse_formats(text)
    except UstError as exc:
        if hasattr(exc, "add_note"):  # Python 3.11+: tracebacks name the file
            exc.add_note(f"in {os.fspath(path)}")
        raise


@functools.lru_cache(maxsize=4096)
def _format_from_text(text: str) -> Format:
    """The one cache behind :func:`format`: DSL text and standard names alike."""
    if _NAME_RE.match(text) and "->" not in text:
        return get(text)
    if "->" not in text and _LEADING_NAME_RE.match(text):
        raise _bad_name(text)  # DSL text never starts with a name: this is a misspelt standard name
    from ust.grammar.parser import parse_spec

    return build_format(parse_spec(text))


# A standard name, optionally with template arguments in [...] or (...): "BSR[2, 3]", "BSR(2,3)".
_NAME_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*(?:\[([^\[\]()]*)\]|\(([^\[\]()]*)\))?\s*$")
_INT_RE = re.compile(r"\s*[0-9]+\s*")
_LEADING_NAME_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)")
_CLOSER = {"[": "]", "(": ")"}


def _unknown_format(name: str, text: str) -> FormatError:
    lib = _standard()
    hint = did_you_mean(name, lib)
    return FormatError(
        f"[unknown-format] unknown standard format {text!r}; {hint + ' ' if hint else ''}known: {', '.join(lib)} "
        "(DSL text starts with '(' or '#sparse_tensor.encoding')",
        rule="unknown-format",
    )


def _bad_name(text: str) -> UstError:
    """The error for text that starts with a name but is no standard name, at the real problem:
    an unknown name (did you mean ...?), a bracket left open or closed by the wrong one."""
    m = _LEADING_NAME_RE.match(text)
    assert m is not None
    name = m.group(1)
    if name not in _standard():
        shown = text.strip()
        return _unknown_format(name, shown if len(shown) <= 60 else f"{shown[:28]}...{shown[-28:]}")
    body = text.rstrip()
    at = len(body) - len(body[m.end() :].lstrip())  # the first character after the name
    opener = body[at : at + 1]
    closer = _CLOSER.get(opener, "")
    inner = body[at + 1 :] if closer else ""
    wrong = next((k for k, c in enumerate(inner) if c in "[]()"), -1)  # the first bracket inside
    end = at + 1 + wrong + 1  # after that bracket
    rest = len(body) - len(body[end:].lstrip())  # the first character after it
    if closer and wrong < 0:
        where = len(body)
        msg = (
            f"missing {closer!r} after the parameters of {name} (write {name}{opener}{inner.strip()}{closer})"
        )
    elif closer and inner[wrong] == ("]" if closer == ")" else ")"):
        where = at + 1 + wrong
        msg = f"{opener!r} after {name} is closed by {inner[wrong]!r}; write {closer!r}"
    elif closer and inner[wrong] == closer and rest < len(body):  # NAME[...] and then more
        where = rest
        msg = f"unexpected {body[where]!r} after {body[m.start(1) : end]}"
    else:
        where = at
        msg = (
            f"{name} is a standard name; write it alone, or with its parameters in brackets "
            "(CSR, BSR[2, 2]); DSL text starts with '(' or '#sparse_tensor.encoding'"
        )
    line = text.count("\n", 0, where) + 1
    start = text.rfind("\n", 0, where) + 1
    column = where - start + 1
    src = text[start:].split("\n", 1)[0]
    excerpt = f"    {src}\n    {' ' * (column - 1)}^" if len(src) <= 120 else ""
    return UstSyntaxError(
        f"line {line}, column {column}: {msg}" + (f"\n{excerpt}" if excerpt else ""),
        line=line,
        column=column,
        text=text,
    )


def _short(value: Any, limit: int = 40) -> str:
    """``repr(value)``, cut in the middle when long (a 5000-digit integer is never printed whole)."""
    if isinstance(value, int) and value.bit_length() > 4 * limit:  # repr() of a huge int may fail
        return f"<an integer of {value.bit_length()} bits>"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def _template_args(name: str, raw: str) -> tuple[int, ...]:
    """``"2, 3"`` -> ``(2, 3)``; anything but comma-separated integers is a FormatError."""
    if not raw.strip():
        return ()
    pieces = raw.split(",")
    if not all(_INT_RE.fullmatch(p) for p in pieces):
        raise FormatError(
            f"[bad-parameter] {name}: template arguments must be comma-separated integers, got {_short(raw)}",
            rule="bad-parameter",
        )
    out = []
    for k, p in enumerate(pieces):
        digits = p.strip().lstrip("0") or "0"
        if len(digits) > len(str(MAX_INT)) or int(digits) > MAX_INT:  # checked before int(): no digit limit
            raise FormatError(
                f"[integer-range] {name}: template argument {k + 1} ({_short(digits)}, {len(digits)} digits) "
                f"is out of range; integers in the format language are at most 2**63 - 1 = {MAX_INT} "
                "(a block size beyond int64 is meaningless)",
                rule="integer-range",
            )
        out.append(int(digits))
    return tuple(out)


def format(text: str) -> Format:  # noqa: A001 - the public name is ust.format
    """Parse one format: a map ``(i, j) -> (...)``, an MLIR attribute, or a standard name.

    >>> import ust
    >>> ust.format("(r, c) -> (r : dense, c : compressed)").standard_name
    'CSR'
    """
    if isinstance(text, Format):
        return text
    if not isinstance(text, str):
        raise InvalidTypeError(
            f"ust.format expects a str (DSL text or a standard name), not {type(text).__name__}"
        )
    return _format_from_text(text)


# ------------------------------------------------------------------------------ standard library


@functools.cache
def _standard() -> dict[str, Format | FormatTemplate]:
    text = resources.files("ust.formats").joinpath("standard.ust").read_text(encoding="utf-8")
    return parse_formats(text)


def names() -> list[str]:
    """Names of the standard formats and templates."""
    return list(_standard())


def get(name: str) -> Format:
    """A standard format by name: ``"CSR"``, ``"BSR[2,3]"``, ``"BSR(2, 3)"``, ``"NM[2,4]"``."""
    m = _NAME_RE.match(name)
    lib = _standard()
    if not m or m.group(1) not in lib:
        raise _unknown_format(m.group(1) if m else name, name)
    entry = lib[m.group(1)]
    raw_args = m.group(2) if m.group(2) is not None else m.group(3)
    if isinstance(entry, FormatTemplate):
        if raw_args is None:
            raise FormatError(
                f"[template-arity] {entry.name} needs parameters, e.g. {entry.name}[{', '.join('2' * len(entry.params))}]",
                rule="template-arity",
            )
        return entry.instantiate(_template_args(entry.name, raw_args))
    if raw_args is not None:
        raise FormatError(f"[template-arity] {entry.name} takes no parameters", rule="template-arity")
    return entry


def template(name: str) -> FormatTemplate:
    """A standard template (``BSR``, ``BSC``, ``NM``) by name."""
    entry = _standard().get(name)
    if not isinstance(entry, FormatTemplate):
        raise FormatError(f"[unknown-format] {name!r} is not a standard template", rule="unknown-format")
    return entry


def resolve(fmt: Any, *, blocksize: Any = None) -> Format:
    """A Format from a Format, a standard name or DSL text (what every API accepts).

    Standard names are matched case-insensitively here, so SciPy's names work wherever a
    format is asked for (``"csr"``, ``"coo"``, ``"bsr[2, 2]"``); ``ust.format``, the parser of
    the format language, stays case-sensitive.  ``blocksize=(r, c)`` goes with a bare
    two-parameter template name (``"bsr"``, ``"BSC"``): ``resolve("bsr", blocksize=(2, 3))``
    is ``BSR[2, 3]``, as SciPy's ``tobsr(blocksize=...)``.
    """
    if blocksize is not None:
        return _with_blocksize(fmt, blocksize)
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        return _resolved_text(fmt)
    raise InvalidTypeError(
        f"a format must be a ust Format, a standard name or DSL text, not {type(fmt).__name__}"
    )


@functools.lru_cache(maxsize=256)
def _resolved_text(text: str) -> Format:
    """:func:`resolve` of a string, kept: one-shot calls name their format anew every call.
    Errors are not kept (an lru cache stores only results), so bad text raises every time."""
    return format(_standard_spelling(text))


def _standard_spelling(text: str) -> str:
    """``text`` with a standard name spelt in another case replaced by the library's spelling
    (``"csr"`` -> ``"CSR"``, ``"bsr[2,2]"`` -> ``"BSR[2,2]"``); any other text unchanged."""
    m = _NAME_RE.match(text)
    if not m or "->" in text:
        return text
    lib = _standard()
    if m.group(1) in lib:
        return text
    spelt = _folded_names().get(m.group(1).casefold())
    return text if spelt is None else text[: m.start(1)] + spelt + text[m.end(1) :]


@functools.cache
def _folded_names() -> dict[str, str]:
    return {nm.casefold(): nm for nm in _standard()}


def _with_blocksize(fmt: Any, blocksize: Any) -> Format:
    """``BSR[r, c]`` (or ``BSC[r, c]``) from a bare template name and ``blocksize=(r, c)``."""
    name = _standard_spelling(fmt.strip()) if isinstance(fmt, str) else None
    entry = _standard().get(name) if name is not None else None
    if not isinstance(entry, FormatTemplate) or len(entry.params) != 2:
        raise FormatError(
            f"[bad-parameter] blocksize= goes with a block template name ('bsr', 'BSR', 'BSC'), "
            f"not with {_short(fmt)}",
            rule="bad-parameter",
        )
    try:
        r, c = blocksize
    except (TypeError, ValueError):
        raise FormatError(
            f"[bad-parameter] blocksize must be a pair (r, c) of positive integers, got {_short(blocksize)}",
            rule="bad-parameter",
        ) from None
    args = []
    for a in (r, c):
        if isinstance(a, bool) or not hasattr(a, "__index__"):
            raise FormatError(
                f"[bad-parameter] blocksize must be a pair (r, c) of positive integers, got {_short(blocksize)}",
                rule="bad-parameter",
            )
        args.append(int(a.__index__()))
    return entry.instantiate(tuple(args))


def _constants(fmt: Format) -> list[int]:
    vals = {lv.expr.divisor for lv in fmt.levels if isinstance(lv.expr, (FloorDiv, Mod))}
    for lv in fmt.levels:
        if lv.format is LevelFormat.STRUCTURED:
            vals |= {lv.type.n, lv.type.m}
    return sorted(vals)


@functools.lru_cache(maxsize=1024)
def standard_name_of(fmt: Format) -> str | None:
    """The standard name ``fmt`` equals structurally (templates with their arguments)."""
    consts = _constants(fmt)
    for nm, entry in _standard().items():
        if isinstance(entry, Format):
            if entry == fmt:
                return nm
            continue
        for args in itertools.product(consts, repeat=len(entry.params)):
            try:
                cand = entry.instantiate(tuple(args))
            except FormatError:
                continue
            if cand == fmt:
                return instance_name(nm, tuple(args))
    return None


def standard_formats() -> Mapping[str, Format | FormatTemplate]:
    """The whole standard library, name -> Format or FormatTemplate."""
    return dict(_standard())


STANDARD_NAMER["standard_name_of"] = standard_name_of
