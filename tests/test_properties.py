"""Property-based tests (hypothesis): random valid formats round-trip through ``to_text()``,
``lvl_to_dim`` inverts ``dim_to_lvl`` for every standard format, and no text, however
mangled, raises anything but :class:`ust.UstSyntaxError` or :class:`ust.FormatError`."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from lark import Lark, UnexpectedInput

import ust
import ust.formats as F
from ust.formats import LevelFormat
from ust.grammar import parser as grammar_parser

# Plain names, plus words the grammar also uses as keywords (the contextual lexer keeps them names).
NAMES = st.one_of(
    st.from_regex(r"[a-z][a-z0-9_]{0,4}", fullmatch=True),
    st.sampled_from(
        ["d0", "d1", "row", "col", "map", "format", "mod", "floordiv", "structured", "dense", "_x"]
    ),
)


@dataclass(frozen=True)
class Drawn:
    """A generated format: its text, the level formats it must have, its block constants."""

    text: str
    dim_names: tuple[str, ...]
    level_formats: tuple[LevelFormat, ...]
    divisors: dict[int, int]  # dimension -> block size


def _props(draw: st.DrawFn, soa: bool = False) -> str:
    chosen = draw(st.lists(st.sampled_from(["nonunique", "nonordered"]), unique=True, max_size=2))
    if soa:
        chosen.append("soa")
    chosen = draw(st.permutations(chosen))
    return f"({', '.join(chosen)})" if chosen else ""


@st.composite
def valid_formats(draw: st.DrawFn) -> Drawn:
    """Random permutations, blockings, diagonals and level types that satisfy every rule."""
    ndim = draw(st.integers(1, 4))
    names = tuple(draw(st.lists(NAMES, min_size=ndim, max_size=ndim, unique=True)))
    perm = draw(st.permutations(range(ndim)))
    # A quarter of the formats end in an n:m level: dimension perm[0] is blocked, its
    # 'mod' goes last, every level before it is dense (and no diagonal: range is not dense).
    nm = draw(st.integers(0, 3)) == 3
    # Each unit of dimensions becomes level expressions: (text, tag, pair id).
    exprs: list[tuple[str, str, int]] = []
    divisors: dict[int, int] = {}
    k = 0
    while k < ndim:
        d = perm[k]
        kinds = ["plain", "block"] + (["diag"] if k + 1 < ndim and not nm else [])
        kind = "block" if nm and k == 0 else draw(st.sampled_from(kinds))
        if kind == "plain":
            exprs.append((names[d], "dim", -1))
            k += 1
        elif kind == "block":
            c = draw(st.integers(2 if nm and k == 0 else 1, 8))
            divisors[d] = c
            div, mod = draw(st.sampled_from([("floordiv", "mod"), ("//", "%")]))
            tag = "nm" if nm and k == 0 else "mod"
            exprs += [(f"{names[d]} {div} {c}", "floordiv", -1), (f"{names[d]} {mod} {c}", f"{tag}{c}", -1)]
            k += 1
        else:
            e = perm[k + 1]
            op = draw(st.sampled_from(["+", "-"]))
            closed_by = draw(st.sampled_from([d, e]))
            exprs += [(f"{names[d]} {op} {names[e]}", "diag", k), (names[closed_by], "range", k)]
            k += 2
    order = list(draw(st.permutations(exprs)))
    for pair in {p for _, _, p in exprs if p >= 0}:  # a diagonal comes before its range level
        i_diag = next(i for i, x in enumerate(order) if x[2] == pair and x[1] == "diag")
        i_range = next(i for i, x in enumerate(order) if x[2] == pair and x[1] == "range")
        if i_range < i_diag:
            order[i_diag], order[i_range] = order[i_range], order[i_diag]
    if nm:
        order.sort(key=lambda x: x[1].startswith("nm"))  # stable: only the n:m 'mod' moves
    soa = draw(st.booleans())
    types: list[str] = []
    fmts: list[LevelFormat] = []
    for pos, (_text, tag, _) in enumerate(order):
        if tag == "range":
            types.append("range")
            fmts.append(LevelFormat.RANGE)
            continue
        if nm:
            if tag.startswith("nm"):
                m = int(tag[2:])
                types.append(f"structured[{draw(st.integers(1, m - 1))}, {m}]")
                fmts.append(LevelFormat.STRUCTURED)
            else:
                types.append("dense")
                fmts.append(LevelFormat.DENSE)
            continue
        options = [LevelFormat.DENSE, LevelFormat.COMPRESSED, LevelFormat.LOOSE_COMPRESSED]
        prev_type = types[-1] if types else ""
        if prev_type.startswith("singleton") or (
            prev_type.startswith(("compressed", "loose_compressed")) and "nonunique" in prev_type
        ):
            options.append(LevelFormat.SINGLETON)
        if tag == "dim" and all(f is LevelFormat.BATCH for f in fmts):
            options.append(LevelFormat.BATCH)
        m = int(tag[3:]) if tag.startswith("mod") else 0
        if pos == len(order) - 1 and m >= 2 and all(f is LevelFormat.DENSE for f in fmts):
            options.append(LevelFormat.STRUCTURED)
        fmt = draw(st.sampled_from(options))
        if fmt is LevelFormat.STRUCTURED:
            types.append(f"structured[{draw(st.integers(1, m - 1))}, {m}]")
        elif fmt in (LevelFormat.COMPRESSED, LevelFormat.LOOSE_COMPRESSED, LevelFormat.SINGLETON):
            types.append(fmt.value + _props(draw, soa=soa and fmt is LevelFormat.SINGLETON))
        else:
            types.append(fmt.value)
        fmts.append(fmt)
    sep = draw(st.sampled_from([", ", ",", ",\n    ", " , "]))
    levels = sep.join(f"{text} : {t}" for (text, _, _), t in zip(order, types))
    trailing = draw(st.sampled_from(["", ",", ", "]))
    text = f"({', '.join(names)}) -> ({levels}{trailing})"
    return Drawn(text, names, tuple(fmts), divisors)


# ------------------------------------------------------------------------------- round trips


@given(valid_formats())
def test_random_valid_formats_round_trip(drawn: Drawn) -> None:
    f = ust.format(drawn.text)
    assert f.dim_names == drawn.dim_names
    assert tuple(lv.format for lv in f.levels) == drawn.level_formats
    text = f.to_text()
    again = ust.format(text)
    assert again == f and hash(again) == hash(f)
    assert again.to_text() == text
    assert [lv.type.soa for lv in again.levels] == [lv.type.soa for lv in f.levels]
    decl = ust.parse_formats(f"# generated\nformat Generated = {text}  # end\n")["Generated"]
    assert decl == f and decl.name == "Generated"  # type: ignore[union-attr]
    if f.standard_name is not None:
        assert ust.format(f.standard_name) == f


@given(
    valid_formats(), st.sampled_from(["0", "8", "16", "32", "64"]), st.sampled_from(["1.0 : f32", "-2 : i64"])
)
def test_random_valid_attributes_round_trip(drawn: Drawn, width: str, value: str) -> None:
    text = f"#sparse_tensor.encoding<{{ map = {drawn.text}, posWidth = {width}, explicitVal = {value} }}>"
    f = ust.format(text)
    again = ust.format(f.to_text())
    assert again == f and again.attributes == f.attributes == (("posWidth", width), ("explicitVal", value))


def _shape_for(drawn_divisors: dict[int, int], ndim: int, data: st.DataObject) -> tuple[int, ...]:
    return tuple(drawn_divisors.get(d, 1) * data.draw(st.integers(1, 5)) for d in range(ndim))


def _coords(shape: tuple[int, ...], data: st.DataObject) -> tuple[np.ndarray, ...]:
    n = data.draw(st.integers(0, 40))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(0, s, size=n, dtype=np.int64) for s in shape)


def _check_inverse(f: ust.Format, shape: tuple[int, ...], coords: tuple[np.ndarray, ...]) -> None:
    saved = tuple(c.copy() for c in coords)
    lvl = f.dim_to_lvl(coords)
    assert all(np.array_equal(c, s) for c, s in zip(coords, saved))
    for (lo, hi), values in zip(f.lvl_bounds(shape), lvl):
        assert np.all((lo <= values) & (values < hi))
    back = f.lvl_to_dim(lvl)
    assert all(np.array_equal(b, c) for b, c in zip(back, coords))
    if len(coords[0]):  # and on plain ints
        x = tuple(int(c[0]) for c in coords)
        assert f.lvl_to_dim(f.dim_to_lvl(x)) == x


@given(valid_formats(), st.data())
def test_random_valid_formats_invert(drawn: Drawn, data: st.DataObject) -> None:
    f = ust.format(drawn.text)
    shape = _shape_for(drawn.divisors, f.ndim, data)
    _check_inverse(f, shape, _coords(shape, data))


_PLAIN = [n for n in F.names() if isinstance(F.standard_formats()[n], ust.Format)]


def _standard_with_shape(name: str, data: st.DataObject) -> tuple[ust.Format, tuple[int, ...]]:
    """A standard format (a template with random parameters) and a shape its blocks divide."""
    k = [data.draw(st.integers(1, 5)) for _ in range(3)]
    if name in ("BSR", "BSC"):
        r, c = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
        return F.template(name)(r, c), (r * k[0], c * k[1])
    if name == "NM":
        m = data.draw(st.integers(2, 8))
        n = data.draw(st.integers(1, m - 1))
        return F.NM(n, m), (k[0], m * k[1])
    f = F.get(name)
    return f, tuple(k[: f.ndim])


@pytest.mark.parametrize("name", [*_PLAIN, "BSR", "BSC", "NM"])
@settings(max_examples=25)
@given(data=st.data())
def test_standard_formats_invert(name: str, data: st.DataObject) -> None:
    f, shape = _standard_with_shape(name, data)
    _check_inverse(f, shape, _coords(shape, data))


# ---------------------------------------------------------------------------------- robustness

_STANDARD_TEXT = resources.files("ust.formats").joinpath("standard.ust").read_text(encoding="utf-8")
_SEEDS = [
    *(ln for ln in _STANDARD_TEXT.splitlines() if ln.startswith("format")),
    "#sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : compressed(nonunique), d1 : singleton(soa)), posWidth = 32 }>",
    "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4])",
    "format BSR[r, c] = (i, j) -> (i floordiv r : dense, j floordiv c : compressed,\n  i mod r : dense, j mod c : dense)",
    "(i, j) -> (j - i : compressed, j : range)  # DIA",
    "BSR[2, 3]",
    "CSR",
]
_PIECES = [
    *"()[]{}<>,:=#-+/%*_ \n\t0123456789ijrc",
    "->",
    "//",
    "floordiv",
    "mod",
    "format",
    "map",
    "dense",
    "compressed",
    "singleton",
    "range",
    "batch",
    "structured",
    "nonunique",
    "soa",
    "#sparse_tensor.encoding",
    "posWidth",
    "\x00",
    "é",
]


@st.composite
def mutated_texts(draw: st.DrawFn) -> str:
    """A valid text with random deletions, insertions and swaps of characters."""
    text = draw(st.one_of(st.sampled_from(_SEEDS), valid_formats().map(lambda d: d.text)))
    for _ in range(draw(st.integers(1, 6))):
        if not text:
            text = draw(st.sampled_from(_PIECES))
            continue
        i = draw(st.integers(0, len(text) - 1))
        op = draw(st.sampled_from(["delete", "insert", "swap", "replace"]))
        if op == "delete":
            j = draw(st.integers(i, min(len(text), i + 8)))
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(_PIECES)) + text[i:]
        elif op == "swap" and len(text) > 1:
            j = draw(st.integers(0, len(text) - 1))
            chars = list(text)
            chars[i], chars[j] = chars[j], chars[i]
            text = "".join(chars)
        else:
            text = text[:i] + draw(st.sampled_from(_PIECES)) + text[i + 1 :]
    return text


def _only_ust_errors(text: str) -> None:
    for fn in (ust.format, ust.parse_formats):
        try:
            fn(text)
        except (ust.UstSyntaxError, ust.FormatError) as err:
            assert str(err)
            if isinstance(err, ust.UstSyntaxError) and err.line:
                assert err.line >= 1 and err.column >= 1


@given(st.binary(max_size=300).map(lambda b: b.decode("utf-8", errors="replace")))
def test_random_bytes_raise_only_ust_errors(text: str) -> None:
    _only_ust_errors(text)


@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_random_token_soup_raises_only_ust_errors(text: str) -> None:
    _only_ust_errors(text)
    _only_ust_errors("(i, j) -> (" + text)
    _only_ust_errors("format A = " + text)


@given(mutated_texts())
def test_mutated_texts_raise_only_ust_errors(text: str) -> None:
    _only_ust_errors(text)


@functools.cache
def _stock_parser() -> Lark:
    grammar = resources.files("ust.grammar").joinpath("ust.lark").read_text(encoding="utf-8")
    return Lark(
        grammar,
        parser="lalr",
        start=["file", "single", "epilog"],
        transformer=grammar_parser._ToAst(),
        maybe_placeholders=False,
    )


def _outcome(parse, text: str, start: str) -> object:  # type: ignore[no-untyped-def]
    try:
        return ("ok", parse(text, start))
    except UnexpectedInput as err:
        return (
            "error",
            grammar_parser._syntax_error(text, err).line,
            grammar_parser._syntax_error(text, err).column,
        )
    except ust.UstSyntaxError as err:
        return ("error", err.line, err.column)


@given(mutated_texts(), st.sampled_from(["file", "single"]))
def test_fast_lexer_agrees_with_larks_lexer(text: str, start: str) -> None:
    assume(text.strip())
    ours = _outcome(grammar_parser._parse, text, start)
    stock = _outcome(lambda t, s: _stock_parser().parse(t, start=s), text, start)
    assert ours == stock
