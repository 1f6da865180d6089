"""The format grammar: every construct parses to the expected syntax tree, and bad text
raises :class:`ust.UstSyntaxError` at the right line and column with a caret excerpt."""

from __future__ import annotations

import functools
from importlib import resources

import pytest
from lark import Lark

import ust
from ust.grammar import ast
from ust.grammar import parser as grammar_parser
from ust.grammar.parser import parse_file, parse_spec

CSR_TEXT = "(i, j) -> (i : dense, j : compressed)"
ATTR = "#sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32 }>"


def _exprs(text: str) -> list[ast.LevelExprAST]:
    spec = parse_spec(text)
    assert isinstance(spec, ast.MapAST)
    return [lv.expr for lv in spec.levels]


# ------------------------------------------------------------------------------------ constructs


def test_map_dims_levels_and_positions() -> None:
    spec = parse_spec(CSR_TEXT)
    assert isinstance(spec, ast.MapAST)
    assert spec.dims == ("i", "j")
    assert [(lv.type_name, lv.properties) for lv in spec.levels] == [("dense", ()), ("compressed", ())]
    assert [lv.expr for lv in spec.levels] == [ast.DimExpr("i"), ast.DimExpr("j")]
    assert [(lv.line, lv.column) for lv in spec.levels] == [(1, 12), (1, 23)]
    assert (spec.line, spec.column) == (1, 2)  # the first dimension


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(i) -> (i floordiv 4 : dense, i mod 4 : dense)", [ast.FloorDivExpr("i", 4), ast.ModExpr("i", 4)]),
        ("(i) -> (i // 4 : dense, i % 4 : dense)", [ast.FloorDivExpr("i", 4), ast.ModExpr("i", 4)]),
        ("(i) -> (i//4 : dense, i%4 : dense)", [ast.FloorDivExpr("i", 4), ast.ModExpr("i", 4)]),
        ("(i, j) -> (j - i : compressed, j : range)", [ast.SubExpr("j", "i"), ast.DimExpr("j")]),
        ("(i, j) -> (i + j : compressed, j : range)", [ast.AddExpr("i", "j"), ast.DimExpr("j")]),
        ("(i, j) -> (i-j : compressed, i : range)", [ast.SubExpr("i", "j"), ast.DimExpr("i")]),
        (
            "(i) -> (i floordiv r : dense, i mod r : dense)",
            [ast.FloorDivExpr("i", "r"), ast.ModExpr("i", "r")],
        ),
    ],
)
def test_level_expressions(text: str, expected: list[ast.LevelExprAST]) -> None:
    assert _exprs(text) == expected


@pytest.mark.parametrize(
    "type_text",
    ["dense", "batch", "compressed", "loose_compressed", "singleton", "range"],
)
def test_every_level_type_name_parses(type_text: str) -> None:
    spec = parse_spec(f"(i) -> (i : {type_text})")
    assert isinstance(spec, ast.MapAST)
    assert spec.levels[0].type_name == type_text


@pytest.mark.parametrize(
    ("props_text", "props"),
    [
        ("(nonunique)", ("nonunique",)),
        ("(nonordered)", ("nonordered",)),
        ("(nonunique, nonordered)", ("nonunique", "nonordered")),
        ("(soa)", ("soa",)),
        ("(nonordered,nonunique,soa)", ("nonordered", "nonunique", "soa")),
    ],
)
def test_properties(props_text: str, props: tuple[str, ...]) -> None:
    spec = parse_spec(f"(i) -> (i : singleton{props_text})")
    assert isinstance(spec, ast.MapAST)
    assert spec.levels[0].properties == props


def test_structured_with_numbers_and_parameters() -> None:
    spec = parse_spec("(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4])")
    assert isinstance(spec, ast.MapAST)
    assert spec.levels[2].type_name == "structured"
    assert spec.levels[2].structured == (2, 4)
    spec = parse_spec("(i, j) -> (i : dense, j floordiv m : dense, j mod m : structured[n,m])")
    assert isinstance(spec, ast.MapAST)
    assert spec.levels[2].structured == ("n", "m")


def test_trailing_comma_and_free_spacing() -> None:
    tight = parse_spec("(i,j)->(i:dense,j:compressed,)")
    spaced = parse_spec(CSR_TEXT)
    assert isinstance(tight, ast.MapAST) and isinstance(spaced, ast.MapAST)
    assert tight.dims == spaced.dims
    assert [(lv.expr, lv.type_name) for lv in tight.levels] == [
        (lv.expr, lv.type_name) for lv in spaced.levels
    ]


def test_multiline_map_with_comments() -> None:
    text = """
    # the rows
    (i, j)        # dimensions
      ->          # the arrow
    (i : dense,   # rows stored densely
     j : compressed)  # columns compressed
    # done
    """
    spec = parse_spec(text)
    assert isinstance(spec, ast.MapAST)
    assert spec.dims == ("i", "j")
    assert [(lv.line, lv.column) for lv in spec.levels] == [(5, 6), (6, 6)]


def test_keywords_stay_usable_as_dimension_names() -> None:
    """The contextual lexer: 'map', 'format', 'mod' and 'structured' are names where a name fits."""
    spec = parse_spec(
        "(map, format, mod, structured) -> (map : dense, format : dense, mod : dense, structured : dense)"
    )
    assert isinstance(spec, ast.MapAST)
    assert spec.dims == ("map", "format", "mod", "structured")


# ----------------------------------------------------------------------- MLIR attributes, comments


def test_mlir_attribute_keeps_other_keys() -> None:
    spec = parse_spec(
        "#sparse_tensor.encoding<{ map = (d0) -> (d0 : compressed), posWidth = 32, crdWidth = 16, "
        "explicitVal = 1.0 : f32, }>"
    )
    assert isinstance(spec, ast.EncodingAST)
    assert spec.map.dims == ("d0",)
    assert spec.attributes == (("posWidth", "32"), ("crdWidth", "16"), ("explicitVal", "1.0 : f32"))


def test_attribute_keys_may_come_before_the_map() -> None:
    spec = parse_spec("#sparse_tensor.encoding<{ posWidth = 8, map = (d0) -> (d0 : dense) }>")
    assert isinstance(spec, ast.EncodingAST)
    assert spec.attributes == (("posWidth", "8"),)


@pytest.mark.parametrize(
    "text",
    [
        ATTR,
        f"# a comment right before the attribute\n{ATTR}",
        f"{ATTR}  # a comment right after the attribute",
        f"# before\n{ATTR}\n# after\n",
        f"#{ATTR[1:]}",
    ],
)
def test_an_attribute_is_never_eaten_as_a_comment(text: str) -> None:
    spec = parse_spec(text)
    assert isinstance(spec, ast.EncodingAST)
    assert spec.attributes == (("posWidth", "32"),)


def test_attributes_and_comments_in_a_file() -> None:
    text = f"""# formats
format A = {ATTR} # after A
#no space after the hash
format B = (i) -> (i : dense)  #sparse is a word, not an attribute
# {ATTR}  (commented out: not a declaration)
"""
    tree = parse_file(text)
    assert [d.name for d in tree.decls] == ["A", "B"]
    assert isinstance(tree.decls[0].spec, ast.EncodingAST)
    assert [(d.line, d.column) for d in tree.decls] == [(2, 8), (4, 8)]


def test_a_lone_attribute_in_a_file_is_an_error_not_an_empty_file() -> None:
    with pytest.raises(ust.UstSyntaxError) as exc:
        parse_file(ATTR)
    assert (exc.value.line, exc.value.column) == (1, 1)
    assert "'format'" in str(exc.value)


def test_misspelt_attribute_is_a_syntax_error() -> None:
    with pytest.raises(ust.UstSyntaxError) as exc:
        parse_spec("#sparse_tensor.encodng<{ map = (i) -> (i : dense) }>")
    assert (exc.value.line, exc.value.column) == (1, 1)


# ---------------------------------------------------------------------------------- declarations


def test_file_of_declarations() -> None:
    tree = parse_file(
        "format CSR = (i, j) -> (i : dense, j : compressed)\n"
        "format BSR[r, c] = (i, j) -> (i floordiv r : dense, j floordiv c : compressed,\n"
        "                              i mod r : dense, j mod c : dense)\n"
    )
    assert [(d.name, d.params) for d in tree.decls] == [("CSR", ()), ("BSR", ("r", "c"))]
    assert tree.decls[1].line == 2
    assert isinstance(tree.decls[1].spec, ast.MapAST)
    assert tree.decls[1].spec.levels[2].line == 3


@pytest.mark.parametrize("text", ["", "\n\n", "# nothing but a comment\n", "   # indented comment"])
def test_empty_files(text: str) -> None:
    assert parse_file(text) == ast.FileAST(())


def test_syntax_trees_are_frozen_and_hashable() -> None:
    spec = parse_spec(CSR_TEXT)
    assert hash(spec) == hash(parse_spec(CSR_TEXT))
    with pytest.raises(AttributeError):
        spec.dims = ("x",)  # type: ignore[misc]


# -------------------------------------------------------------------------------- syntax errors

# (text, start rule, line, column, a fragment of the "expected ..." part)
SYNTAX_ERRORS = [
    pytest.param("(i, j) -> (i : dense j : compressed)", "single", 1, 22, "','", id="missing-comma"),
    pytest.param("(i, j) -> (i : dense, j : compressed", "single", 1, 37, "')'", id="unclosed-paren"),
    pytest.param("(i, j) => (i : dense, j : compressed)", "single", 1, 8, "'->'", id="bad-arrow"),
    pytest.param("(i, j) - > (i : dense, j : compressed)", "single", 1, 8, "'->'", id="split-arrow"),
    pytest.param("(i, j) -> (2*i : dense, j : compressed)", "single", 1, 12, "a name", id="2*i"),
    pytest.param("(i, j) -> (i * 2 : dense, j : compressed)", "single", 1, 14, None, id="i*2"),
    pytest.param("", "single", 1, 1, "'('", id="empty-text"),
    pytest.param("   \n  # only a comment\n", "single", 3, 1, "'('", id="blank-text"),
    pytest.param("(i,) -> (i : dense)", "single", 1, 4, "a name", id="trailing-comma-in-dims"),
    pytest.param("() -> (i : dense)", "single", 1, 2, "a name", id="no-dimensions"),
    pytest.param("(i) -> ()", "single", 1, 9, "a name", id="no-levels"),
    pytest.param("(i) -> (i)", "single", 1, 10, "':'", id="level-without-type"),
    pytest.param("(i) -> (i :)", "single", 1, 12, "a name", id="empty-level-type"),
    pytest.param("(i) -> (i : (compressed))", "single", 1, 13, "a name", id="parenthesised-type"),
    pytest.param("(i) -> (i floordiv : dense)", "single", 1, 20, "an integer", id="floordiv-no-constant"),
    pytest.param("(i) -> (-i : dense)", "single", 1, 9, "a name", id="negated-dim"),
    pytest.param("(i) -> (i : structured)", "single", 1, 23, "'['", id="structured-no-args"),
    pytest.param("(i) -> (i : compressed(nonunique)", "single", 1, 34, "')'", id="unclosed-props"),
    pytest.param("(i) -> (i : dense) trailing", "single", 1, 20, "end of input", id="trailing-text"),
    pytest.param("(é) -> (é : dense)", "single", 1, 2, None, id="non-ascii-name"),
    pytest.param("(i) -> (i : dense)\x00", "single", 1, 19, None, id="nul-byte"),
    pytest.param("d0 -> d0", "single", 1, 1, None, id="mlir-no-parens"),
    pytest.param("(d0 -> d0)", "single", 1, 5, None, id="mlir-arrow-in-dims"),
    pytest.param("(d0) -> d0", "single", 1, 9, "'('", id="mlir-levels-no-parens"),
    pytest.param("#sparse_tensor.encoding<{ map = [] }>", "single", 1, 33, "'('", id="mlir-map-brackets"),
    pytest.param("#sparse_tensor.encoding<{ map = () }>", "single", 1, 34, "a name", id="mlir-map-empty"),
    pytest.param(
        "#sparse_tensor.encoding<{ map = (i) -> (i : dense) ", "single", 1, 52, None, id="unclosed-attribute"
    ),
    pytest.param(
        "#sparse_tensor.encoding<{ map = (i) -> (i : dense), dimSlices = [ (0, 4, 1) ] }>",
        "single",
        1,
        65,
        None,
        id="unsupported-attribute-value",
    ),
    pytest.param("format = (i) -> (i : dense)", "file", 1, 8, "a name", id="declaration-without-name"),
    pytest.param("format A[] = (i) -> (i : dense)", "file", 1, 10, "a name", id="empty-parameter-list"),
    pytest.param("format A (i) -> (i : dense)", "file", 1, 10, "'='", id="declaration-without-equals"),
    pytest.param("(i) -> (i : dense)", "file", 1, 1, "'format'", id="map-without-declaration"),
    pytest.param(
        "format A = (i, j)\n  -> (i : dense,\n      j compressed)", "file", 3, 9, "':'", id="multi-line"
    ),
]


@pytest.mark.parametrize(("text", "start", "line", "column", "expected"), SYNTAX_ERRORS)
def test_syntax_errors(text: str, start: str, line: int, column: int, expected: str | None) -> None:
    parse = parse_spec if start == "single" else parse_file
    with pytest.raises(ust.UstSyntaxError) as exc:
        parse(text)
    err = exc.value
    assert (err.line, err.column) == (line, column), str(err)
    assert (err.lineno, err.offset) == (line, column)  # SyntaxError's own fields agree
    assert isinstance(err, SyntaxError)
    assert str(err).startswith(f"line {line}, column {column}:")
    if expected is not None:
        assert expected in str(err).splitlines()[0]


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("(i, j) -> (i : dense j : compressed)", 1, 22),
        ("# comment\n(i, j)\n  -> (i : dense,\n      j compressed)", 4, 9),
        ("#sparse_tensor.encoding<{ posWidth = 32 }>", 1, 1),  # raised inside the tree builder
    ],
)
def test_message_shows_the_line_and_a_caret(text: str, line: int, column: int) -> None:
    with pytest.raises(ust.UstSyntaxError) as exc:
        ust.format(text)
    msg_lines = str(exc.value).splitlines()
    src = text.split("\n")[line - 1]
    assert msg_lines[-2] == f"    {src}"
    assert msg_lines[-1] == "    " + " " * (column - 1) + "^"
    assert exc.value.source_text == text


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("#sparse_tensor.encoding<{ posWidth = 32 }>", "found 0"),
        (
            "#sparse_tensor.encoding<{ map = (i) -> (i : dense), map = (j) -> (j : dense) }>",
            "found 2",
        ),
    ],
)
def test_attribute_needs_exactly_one_map(text: str, found: str) -> None:
    with pytest.raises(ust.UstSyntaxError) as exc:
        parse_spec(text)
    assert (exc.value.line, exc.value.column) == (1, 1)
    assert "exactly one 'map = ...'" in str(exc.value) and found in str(exc.value)


def test_non_string_input() -> None:
    with pytest.raises(ust.InvalidTypeError, match="must be a str, not bytes") as exc:
        parse_spec(b"(i) -> (i : dense)")  # type: ignore[arg-type]
    assert isinstance(exc.value, TypeError)


# ----------------------------------------------------------------- the fast lexer changes nothing


@functools.cache
def _stock_parser() -> Lark:
    """The same grammar with Lark's own contextual lexer (no fast token loop)."""
    grammar = resources.files("ust.grammar").joinpath("ust.lark").read_text(encoding="utf-8")
    return Lark(
        grammar,
        parser="lalr",
        start=["file", "single", "epilog"],
        transformer=grammar_parser._ToAst(),
        maybe_placeholders=False,
    )


def test_fast_lexer_is_installed() -> None:
    from ust.grammar.lexer import _FastContextualLexer

    assert isinstance(grammar_parser._parser().parser.lexer, _FastContextualLexer)


def _outcome(parse, text: str, start: str) -> object:  # type: ignore[no-untyped-def]
    try:
        return parse(text, start)
    except ust.UstSyntaxError as err:
        return ("error", err.line, err.column, str(err))


@pytest.mark.parametrize(
    ("text", "start"),
    [(p.values[0], p.values[1]) for p in SYNTAX_ERRORS]
    + [
        (CSR_TEXT, "single"),
        (ATTR, "single"),
        (f"# c\n{ATTR} # c", "single"),
        ("(map, format) -> (map : dense, format : dense)", "single"),
        ("(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4])", "single"),
        ("format X = (i) -> (i : dense)\r\n\tformat Y = (i) -> (i : compressed)\f", "file"),
        (resources.files("ust.formats").joinpath("standard.ust").read_text(encoding="utf-8"), "file"),
    ],
)
def test_fast_lexer_matches_larks_lexer(text: str, start: str) -> None:
    stock = _stock_parser()

    def via_stock(t: str, s: str) -> object:
        try:
            return stock.parse(t, start=s)
        except Exception as err:  # turn Lark's error into ours, as the parser module does
            from lark import UnexpectedInput

            if isinstance(err, UnexpectedInput):
                raise grammar_parser._syntax_error(t, err) from None
            raise

    assert _outcome(grammar_parser._parse, text, start) == _outcome(via_stock, text, start)


def test_import_ust_builds_no_parser() -> None:
    """Importing ust loads neither Lark nor the standard library; the first format does."""
    import subprocess
    import sys

    code = (
        "import sys, ust, ust.formats.library as lib; "
        "print('lark' in sys.modules, lib._standard.cache_info().currsize); "
        "ust.format('CSR'); print('lark' in sys.modules, lib._standard.cache_info().currsize)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "0", "True", "1"]


# ----------------------------------------------------------------- the shipped parse tables


def test_shipped_parser_tables_are_current() -> None:
    """ust/grammar/_tables.py fits the grammar (else: python scripts/gen_parser_tables.py)."""
    import lark

    from ust.grammar import _tables

    grammar = grammar_parser._grammar()
    assert grammar_parser._grammar_sha256(grammar) == _tables.GRAMMAR_SHA256, (
        "ust.lark changed: run python scripts/gen_parser_tables.py"
    )
    if lark.__version__ != _tables.LARK_VERSION:
        pytest.skip(f"tables made with Lark {_tables.LARK_VERSION}, Lark {lark.__version__} installed")
    text = resources.files("ust.grammar").joinpath("_tables.py").read_text(encoding="utf-8")
    assert grammar_parser.tables_source() == text


def test_parser_tables_are_used_only_for_their_grammar(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables load for the grammar they were made from; any other grammar text builds."""
    import lark

    from ust.grammar import _tables

    grammar = grammar_parser._grammar()
    loaded = grammar_parser._load_tables(grammar)
    assert (loaded is not None) == (lark.__version__ == _tables.LARK_VERSION)
    assert grammar_parser._load_tables(grammar + "\n// edited\n") is None
    monkeypatch.setattr(_tables, "LARK_VERSION", "0.0")
    assert grammar_parser._load_tables(grammar) is None
