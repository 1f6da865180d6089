"""Declarations and the standard library: ``ust.parse_formats``, ``ust.load_formats``,
``ust.formats.get`` / ``names`` / ``template``, and parameterised formats instantiated from
text and from Python."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

import ust
import ust.formats as F
from ust.formats import library

FILE = """\
# My formats
format RowMajorBlocks[b] = (i, j) -> (i : compressed,
                                      j floordiv b : compressed,   # block columns
                                      j mod b : dense)
format Mine = (r, c) -> (r : dense, c : compressed)   # this is CSR
format Attr = #sparse_tensor.encoding<{ map = (d0) -> (d0 : compressed), posWidth = 32 }>
"""

ISSUE_NAMES = [
    "CSR",
    "CSC",
    "COO",
    "DCSR",
    "DCSC",
    "CROW",
    "DIA",
    "DIAI",
    "CSF",
    "BatchedCSR",
    "BSR",
    "BSC",
    "NM",
]


# -------------------------------------------------------------------------------- parse_formats


def test_parse_formats_returns_formats_and_templates_in_order() -> None:
    decls = ust.parse_formats(FILE)
    assert list(decls) == ["RowMajorBlocks", "Mine", "Attr"]
    tpl, mine, attr = decls.values()
    assert isinstance(tpl, ust.FormatTemplate) and tpl.params == ("b",)
    assert isinstance(mine, ust.Format) and mine == F.CSR and mine.name == "Mine"
    assert mine.standard_name == "CSR"
    assert (
        isinstance(attr, ust.Format) and attr == F.SparseVector and attr.attributes == (("posWidth", "32"),)
    )


def test_user_template_instantiates_both_ways() -> None:
    tpl = ust.parse_formats(FILE)["RowMajorBlocks"]
    assert isinstance(tpl, ust.FormatTemplate)
    f = tpl(4)
    assert f == tpl[4] and f.name == "RowMajorBlocks[4]"
    assert f.to_text() == "(i, j) -> (i : compressed, j floordiv 4 : compressed, j mod 4 : dense)"
    assert f.standard_name is None
    assert repr(tpl) == "FormatTemplate<RowMajorBlocks[b]>"


def test_load_formats(tmp_path: Path) -> None:
    path = tmp_path / "mine.ust"
    path.write_text(FILE, encoding="utf-8")
    assert ust.load_formats(path) == ust.parse_formats(FILE)
    assert ust.load_formats(str(path)).keys() == ust.parse_formats(FILE).keys()


def test_load_formats_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ust.load_formats(tmp_path / "nope.ust")


def test_load_the_standard_library_file() -> None:
    path = resources.files("ust.formats").joinpath("standard.ust")
    decls = ust.load_formats(str(path))
    assert list(decls) == F.names()


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("format A = (i) -> (i : dense)\nformat A = (i) -> (i : compressed)", "duplicate-declaration"),
        ("format T[r, r] = (i) -> (i floordiv r : dense, i mod r : dense)", "duplicate-parameter"),
        ("format T[r] = (i) -> (i floordiv c : dense, i mod c : dense)", "unbound-parameter"),
        (
            "format T[n] = (i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[m, 4])",
            "unbound-parameter",
        ),
        ("format A = (i) -> (i floordiv r : dense, i mod r : dense)", "unbound-parameter"),
        ("format A = (i) -> (i : dense)\nformat B = (i, j) -> (i : dense)", "unused-dimension"),
    ],
)
def test_declaration_errors(text: str, rule: str) -> None:
    with pytest.raises(ust.FormatError) as exc:
        ust.parse_formats(text)
    assert exc.value.rule == rule


def test_declaration_error_names_its_line() -> None:
    with pytest.raises(ust.FormatError) as exc:
        ust.parse_formats("format A = (i) -> (i : dense)\n\nformat B = (i, j) -> (i : dense,\n  j : bogus)")
    assert exc.value.rule == "unknown-level-type"
    assert "(line 4, column 3)" in str(exc.value)


# ---------------------------------------------------------------------------- standard library


def test_names_lists_the_standard_library() -> None:
    names = F.names()
    assert set(ISSUE_NAMES) <= set(names)
    assert len(names) == len(set(names))
    assert set(names) <= set(dir(F))


@pytest.mark.parametrize("name", ISSUE_NAMES)
def test_standard_formats_are_module_attributes(name: str) -> None:
    entry = getattr(F, name)
    assert isinstance(entry, (ust.Format, ust.FormatTemplate))
    assert entry is F.standard_formats()[name]


def test_unknown_module_attribute() -> None:
    with pytest.raises(AttributeError):
        F.NoSuchFormat  # noqa: B018


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("CSR", "(i, j) -> (i : dense, j : compressed)"),
        ("CSC", "(i, j) -> (j : dense, i : compressed)"),
        ("COO", "(i, j) -> (i : compressed(nonunique), j : singleton)"),
        ("DCSR", "(i, j) -> (i : compressed, j : compressed)"),
        ("DCSC", "(i, j) -> (j : compressed, i : compressed)"),
        ("CROW", "(i, j) -> (i : compressed, j : dense)"),
        ("DIA", "(i, j) -> (j - i : compressed, j : range)"),
        ("DIAI", "(i, j) -> (j - i : compressed, i : range)"),
        ("CSF", "(i, j, k) -> (i : compressed, j : compressed, k : compressed)"),
        ("BatchedCSR", "(b, i, j) -> (b : batch, i : dense, j : compressed)"),
    ],
)
def test_standard_definitions(name: str, text: str) -> None:
    f = F.get(name)
    assert f == ust.format(text)
    assert f.to_text() == text
    assert f.name == name


@pytest.mark.parametrize(
    "spelling",
    ["BSR[2,3]", "BSR[2, 3]", "BSR(2, 3)", "BSR(2,3)", " BSR [ 2 , 3 ] ", "BSR(2 , 3)"],
)
def test_template_spellings_in_text(spelling: str) -> None:
    expected = ust.format(
        "(i, j) -> (i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)"
    )
    assert F.get(spelling) == expected
    assert ust.format(spelling) == expected
    assert F.resolve(spelling) == expected
    assert F.get(spelling).name == "BSR[2, 3]"


def test_template_from_python() -> None:
    assert F.BSR(2, 3) == F.BSR[2, 3] == F.get("BSR[2,3]")
    assert F.BSR(2, 3) is F.BSR[2, 3]  # instances are cached
    assert F.BSR(2, 3) != F.BSR(3, 2) and F.BSR(2, 3) != F.BSC(2, 3)
    assert F.NM(2, 4) == F.get("NM[2, 4]")
    assert F.template("BSR") is F.BSR
    assert F.BSR.params == ("r", "c") and F.NM.params == ("n", "m")


@pytest.mark.parametrize(
    ("call", "rule"),
    [
        (lambda: F.BSR(2), "template-arity"),
        (lambda: F.BSR[2, 3, 4], "template-arity"),
        (lambda: F.BSR[2], "template-arity"),
        (lambda: F.get("BSR"), "template-arity"),
        (lambda: F.get("BSR[]"), "template-arity"),
        (lambda: F.get("BSR[2]"), "template-arity"),
        (lambda: F.get("CSR[2]"), "template-arity"),
        (lambda: F.get("CSR()"), "template-arity"),
        (lambda: F.BSR(2.0, 3), "bad-parameter"),
        (lambda: F.BSR(True, 3), "bad-parameter"),
        (lambda: F.get("BSR[2 3]"), "bad-parameter"),
        (lambda: F.get("BSR[2,,3]"), "bad-parameter"),
        (lambda: F.get("BSR[x, 3]"), "bad-parameter"),
        (lambda: F.get("BSR[-1, 3]"), "bad-parameter"),
        (lambda: F.BSR(0, 3), "positive-divisor"),
        (lambda: F.NM(4, 2), "structured-arguments"),
        (lambda: F.NM(2, 2), "structured-arguments"),
        (lambda: F.get("Nope"), "unknown-format"),
        (lambda: F.get("(i) -> (i : dense)"), "unknown-format"),
        (lambda: F.template("CSR"), "unknown-format"),
        (lambda: F.template("Nope"), "unknown-format"),
        (lambda: ust.format("csr"), "unknown-format"),
    ],
)
def test_library_errors(call, rule: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ust.FormatError) as exc:
        call()
    assert exc.value.rule == rule


def test_template_errors_name_the_instance() -> None:
    with pytest.raises(ust.FormatError) as exc:
        F.BSR(0, 3)
    assert str(exc.value).startswith("BSR[0, 3]: [positive-divisor]")


def test_bad_parameter_spelling_is_not_a_syntax_error() -> None:
    """Mismatched brackets are not a name: the text goes to the parser, which says why."""
    with pytest.raises(ust.UstSyntaxError):
        ust.format("BSR[2, 3)")


# ------------------------------------------------------------------------------- format/resolve


def test_format_accepts_a_format_a_name_or_text() -> None:
    assert ust.format(F.CSR) is F.CSR
    assert ust.format("CSR") is F.CSR
    assert ust.format("  CSR\n") is F.CSR
    assert ust.format("(i, j) -> (i : dense, j : compressed)") == F.CSR


def test_format_is_cached_by_text() -> None:
    text = "(a, b) -> (a : dense, b : compressed)"
    assert ust.format(text) is ust.format(text)
    library._format_from_text.cache_clear()
    fresh = ust.format(text)
    assert fresh == F.CSR and fresh is ust.format(text)


def test_format_and_resolve_reject_other_types() -> None:
    with pytest.raises(TypeError):
        ust.format(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        F.resolve(None)
    assert F.resolve(F.CSC) is F.CSC and F.resolve("CSC") is F.CSC


def test_standard_name_of_matches_the_property() -> None:
    for name in ("CSR", "DIA", "COO"):
        assert F.standard_name_of(F.get(name)) == name
    assert F.standard_name_of(F.BSR(4, 2)) == "BSR[4, 2]"
