"""The Format model: levels, equality, standard names, canonical text, coordinate maps,
level bounds, and every validation rule (each invalid input asserts the rule it breaks)."""

from __future__ import annotations

import numpy as np
import pytest

import ust
import ust.formats as F
from ust.formats import LevelFormat, LevelType

# Every standard format, templates instantiated; 2-D shapes below are divisible by 2, 3 and 4.
STANDARD = [
    *(n for n in F.names() if isinstance(F.standard_formats()[n], ust.Format)),
    "BSR[2, 3]",
    "BSC[2, 3]",
    "BSR[1, 1]",
    "NM[2, 4]",
    "NM[1, 2]",
]
SHAPES = {1: (12,), 2: (6, 12), 3: (4, 6, 12)}


# ------------------------------------------------------------------------------------- levels


@pytest.mark.parametrize(
    ("type_text", "fmt", "stores_pos", "stores_crd"),
    [
        ("dense", LevelFormat.DENSE, False, False),
        ("batch", LevelFormat.BATCH, False, False),
        ("compressed", LevelFormat.COMPRESSED, True, True),
        ("loose_compressed", LevelFormat.LOOSE_COMPRESSED, True, True),
    ],
)
def test_level_types(type_text: str, fmt: LevelFormat, stores_pos: bool, stores_crd: bool) -> None:
    f = ust.format(f"(i, j) -> (i : {type_text}, j : dense)")
    lt = f.levels[0].type
    assert (f.levels[0].format, lt.stores_pos, lt.stores_crd) == (fmt, stores_pos, stores_crd)
    assert (lt.unique, lt.ordered) == (True, True)
    assert lt.to_text() == type_text


def test_singleton_range_and_structured_levels() -> None:
    coo = F.COO
    assert [lv.format for lv in coo.levels] == [LevelFormat.COMPRESSED, LevelFormat.SINGLETON]
    assert (coo.levels[1].type.stores_pos, coo.levels[1].type.stores_crd) == (False, True)
    dia = F.DIA
    assert dia.levels[1].format is LevelFormat.RANGE
    assert (dia.levels[1].type.stores_pos, dia.levels[1].type.stores_crd) == (False, False)
    nm = F.NM(2, 4)
    last = nm.levels[-1].type
    assert (last.format, last.n, last.m, last.stores_crd) == (LevelFormat.STRUCTURED, 2, 4, True)
    assert last.to_text() == "structured[2, 4]"


@pytest.mark.parametrize(
    ("props", "unique", "ordered"),
    [
        ("", True, True),
        ("(nonunique)", False, True),
        ("(nonordered)", True, False),
        ("(nonunique, nonordered)", False, False),
        ("(nonordered, nonunique)", False, False),
    ],
)
@pytest.mark.parametrize("kind", ["compressed", "loose_compressed"])
def test_properties(kind: str, props: str, unique: bool, ordered: bool) -> None:
    f = ust.format(f"(i, j) -> (i : dense, j : {kind}{props})")
    lt = f.levels[1].type
    assert (lt.unique, lt.ordered) == (unique, ordered)
    assert (f.is_unique, f.is_ordered) == (unique, ordered)
    canonical = [p for p, on in (("nonunique", not unique), ("nonordered", not ordered)) if on]
    assert lt.to_text() == kind + (f"({', '.join(canonical)})" if canonical else "")


def test_soa_is_kept_printed_and_ignored_by_equality() -> None:
    soa = ust.format("(i, j) -> (i : compressed(nonunique), j : singleton(soa))")
    assert soa.levels[1].type.soa is True
    assert "singleton(soa)" in soa.to_text()
    assert soa == F.COO and hash(soa) == hash(F.COO)
    assert soa.standard_name == "COO"


def test_format_facts() -> None:
    assert (F.CSR.ndim, F.CSR.nlevels) == (2, 2)
    assert (F.BSR(2, 3).ndim, F.BSR(2, 3).nlevels) == (2, 4)
    assert (F.CSF.ndim, F.CSF.nlevels) == (3, 3)
    assert F.CSR.is_identity and not F.CSC.is_identity and not F.BSR(2, 2).is_identity
    assert F.DenseRowMajor.is_dense and F.DenseColMajor.is_dense and not F.CSR.is_dense
    assert ust.format("(b, i) -> (b : batch, i : dense)").is_dense
    assert F.COO.is_unique and F.COO.is_ordered  # the innermost level decides uniqueness
    assert not ust.format("(i, j) -> (i : dense, j : compressed(nonunique))").is_unique
    assert not ust.format("(i, j) -> (i : compressed(nonordered), j : dense)").is_ordered


def test_level_type_equality_ignores_soa_only() -> None:
    assert LevelType(LevelFormat.SINGLETON, soa=True) == LevelType(LevelFormat.SINGLETON)
    assert LevelType(LevelFormat.COMPRESSED, unique=False) != LevelType(LevelFormat.COMPRESSED)


# ---------------------------------------------------------------------------- equality, names


def test_equality_and_hash_ignore_dimension_names() -> None:
    mine = ust.format("(row, col) -> (row : dense, col : compressed)")
    assert mine == F.CSR and hash(mine) == hash(F.CSR)
    assert mine.dim_names == ("row", "col") and F.CSR.dim_names == ("i", "j")
    assert {F.CSR: "csr"}[mine] == "csr"
    assert mine != F.CSC and mine != F.DCSR and mine != F.CROW
    assert ust.format("(a, b) -> (a : dense, b : compressed)") != ust.format(
        "(a, b) -> (b : dense, a : compressed)"
    )


def test_equality_ignores_declaration_name_and_attributes() -> None:
    named = ust.parse_formats("format Mine = (r, c) -> (r : dense, c : compressed)")["Mine"]
    assert isinstance(named, ust.Format)
    assert named.name == "Mine" and named == F.CSR
    attr = ust.format(
        "#sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32 }>"
    )
    assert attr == F.CSR and hash(attr) == hash(F.CSR)
    assert attr.attributes == (("posWidth", "32"),)


def test_formats_are_frozen() -> None:
    with pytest.raises(AttributeError):
        F.CSR.ndim = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("(r, c) -> (r : dense, c : compressed)", "CSR"),
        ("(r, c) -> (c : dense, r : compressed)", "CSC"),
        ("(x, y) -> (x : compressed(nonunique), y : singleton)", "COO"),
        (
            "#sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : compressed(nonunique), d1 : singleton(soa)), "
            "posWidth = 32, crdWidth = 32 }>",
            "COO",
        ),
        ("(row, col) -> (col - row : compressed, col : range)", "DIA"),
        ("(row, col) -> (col - row : compressed, row : range)", "DIAI"),
        ("(x, y) -> (x // 2 : dense, y // 3 : compressed, x % 2 : dense, y % 3 : dense)", "BSR[2, 3]"),
        (
            "(x, y) -> (y floordiv 3 : dense, x floordiv 2 : compressed, x mod 2 : dense, y mod 3 : dense)",
            "BSC[2, 3]",
        ),
        ("(a, b) -> (a : dense, b floordiv 4 : dense, b mod 4 : structured[2, 4])", "NM[2, 4]"),
        ("(n, r, c) -> (n : batch, r : dense, c : compressed)", "BatchedCSR"),
        ("(v) -> (v : compressed)", "SparseVector"),
        ("(i, j) -> (i : dense, j : loose_compressed)", None),
        ("(i, j) -> (i + j : compressed, j : range)", None),
        ("(i, j) -> (i floordiv 2 : dense, j : compressed, i mod 2 : dense)", None),
    ],
)
def test_standard_name(text: str, name: str | None) -> None:
    f = ust.format(text)
    assert f.standard_name == name
    if name is not None:
        assert ust.format(name) == f  # the reported name resolves back to an equal format


@pytest.mark.parametrize("name", STANDARD)
def test_every_standard_format_knows_its_name(name: str) -> None:
    f = ust.format(name)
    assert ust.format(f.standard_name) == f  # type: ignore[arg-type]
    if "[" not in name:
        assert f.standard_name == name


# ---------------------------------------------------------------------------------------- text


@pytest.mark.parametrize("name", STANDARD)
def test_to_text_round_trip(name: str) -> None:
    f = ust.format(name)
    text = f.to_text()
    again = ust.format(text)
    assert again == f
    assert again.dim_names == f.dim_names
    assert again.to_text() == text  # canonical: printing is a fixed point
    assert str(f) == text
    assert name.split("[")[0] in repr(f)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("(i,j)->(i:dense,j:compressed,)", "(i, j) -> (i : dense, j : compressed)"),
        (
            "(i, j) -> (i // 2 : dense, j : compressed, i % 2 : dense)",
            "(i, j) -> (i floordiv 2 : dense, j : compressed, i mod 2 : dense)",
        ),
        (
            "(i, j) -> (i : compressed(nonordered, nonunique), j : singleton(soa))",
            "(i, j) -> (i : compressed(nonunique, nonordered), j : singleton(soa))",
        ),
        (
            "# comment\n(i, j)\n -> (j-i : dense,\n i : range)",
            "(i, j) -> (j - i : dense, i : range)",
        ),
        (
            "#sparse_tensor.encoding<{map=(d0)->(d0:compressed),posWidth=8,explicitVal=1.5 : f64,}>",
            "#sparse_tensor.encoding<{ map = (d0) -> (d0 : compressed), posWidth = 8, explicitVal = 1.5 : f64 }>",
        ),
    ],
)
def test_canonical_text(text: str, canonical: str) -> None:
    f = ust.format(text)
    assert f.to_text() == canonical
    assert ust.format(canonical) == f
    assert ust.format(canonical).attributes == f.attributes


def test_mlir_attributes_are_kept() -> None:
    f = ust.format(
        "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 16, "
        "explicitVal = 1.0 : f32, implicitVal = 0 : i32 }>"
    )
    assert f.attributes == (
        ("posWidth", "32"),
        ("crdWidth", "16"),
        ("explicitVal", "1.0 : f32"),
        ("implicitVal", "0 : i32"),
    )
    assert f.map_text() == "(i, j) -> (i : dense, j : compressed)"
    assert ust.format(f.to_text()).attributes == f.attributes
    assert f.standard_name == "CSR"


# ----------------------------------------------------------------------------- coordinate maps


@pytest.mark.parametrize(
    ("name", "coords", "lvl"),
    [
        ("CSR", (2, 5), (2, 5)),
        ("CSC", (2, 5), (5, 2)),
        ("COO", (2, 5), (2, 5)),
        ("DIA", (2, 5), (3, 5)),
        ("DIAI", (2, 5), (3, 2)),
        ("DIA", (5, 2), (-3, 2)),
        ("BSR[2, 3]", (3, 7), (1, 2, 1, 1)),
        ("BSC[2, 3]", (3, 7), (2, 1, 1, 1)),
        ("NM[2, 4]", (3, 7), (3, 1, 3)),
        ("CSF", (1, 2, 3), (1, 2, 3)),
        ("BatchedCSR", (1, 2, 3), (1, 2, 3)),
        ("SparseVector", (4,), (4,)),
    ],
)
def test_dim_to_lvl_on_ints(name: str, coords: tuple[int, ...], lvl: tuple[int, ...]) -> None:
    f = ust.format(name)
    assert f.dim_to_lvl(coords) == lvl
    assert f.lvl_to_dim(lvl) == coords


def test_add_expression_maps() -> None:
    f = ust.format("(i, j) -> (i + j : compressed, j : range)")
    assert f.dim_to_lvl((2, 5)) == (7, 5)
    assert f.lvl_to_dim((7, 5)) == (2, 5)
    g = ust.format("(i, j) -> (i + j : compressed, i : range)")
    assert g.lvl_to_dim(g.dim_to_lvl((2, 5))) == (2, 5)


def _all_coords(shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    grids = np.meshgrid(*(np.arange(s, dtype=np.int64) for s in shape), indexing="ij")
    return tuple(g.ravel() for g in grids)


@pytest.mark.parametrize("name", STANDARD)
def test_maps_on_arrays_are_inverse_and_in_bounds(name: str) -> None:
    f = ust.format(name)
    shape = SHAPES[f.ndim]
    coords = _all_coords(shape)
    saved = tuple(c.copy() for c in coords)
    lvl = f.dim_to_lvl(coords)
    assert all(np.array_equal(c, s) for c, s in zip(coords, saved))  # inputs untouched
    assert len(lvl) == f.nlevels
    for lv, (lo, hi), values in zip(f.levels, f.lvl_bounds(shape), lvl):
        assert values.dtype == np.int64
        assert lo <= values.min() and values.max() < hi, (lv, lo, hi)
    back = f.lvl_to_dim(lvl)
    assert all(np.array_equal(b, c) for b, c in zip(back, coords))
    # the arrays agree with the scalar maps
    k = len(coords[0]) // 2
    assert tuple(int(v[k]) for v in lvl) == f.dim_to_lvl(tuple(int(c[k]) for c in coords))


@pytest.mark.parametrize("name", ["CSR", "BSR[2, 3]", "DIA"])
def test_level_coordinates_are_distinct_for_distinct_entries(name: str) -> None:
    f = ust.format(name)
    lvl = f.dim_to_lvl(_all_coords(SHAPES[2]))
    assert len(set(zip(*(v.tolist() for v in lvl)))) == SHAPES[2][0] * SHAPES[2][1]


def test_maps_check_the_number_of_coordinates() -> None:
    with pytest.raises(ust.ShapeError):
        F.CSR.dim_to_lvl((1,))
    with pytest.raises(ust.ShapeError):
        F.BSR(2, 2).lvl_to_dim((1, 2))


# ------------------------------------------------------------------------------- level bounds


@pytest.mark.parametrize(
    ("name", "shape", "bounds"),
    [
        ("CSR", (3, 5), ((0, 3), (0, 5))),
        ("CSC", (3, 5), ((0, 5), (0, 3))),
        ("COO", (3, 5), ((0, 3), (0, 5))),
        ("DIA", (3, 5), ((-2, 5), (0, 5))),  # offsets j - i run from -(rows - 1) to cols - 1
        ("DIAI", (3, 5), ((-2, 5), (0, 3))),
        ("DIA", (5, 3), ((-4, 3), (0, 3))),
        ("DIA", (0, 5), ((0, 0), (0, 5))),
        ("BSR[2, 3]", (4, 9), ((0, 2), (0, 3), (0, 2), (0, 3))),
        ("BSC[2, 3]", (4, 9), ((0, 3), (0, 2), (0, 2), (0, 3))),
        ("NM[2, 4]", (3, 8), ((0, 3), (0, 2), (0, 4))),
        ("BatchedCSR", (2, 3, 4), ((0, 2), (0, 3), (0, 4))),
        ("CSF", (2, 3, 4), ((0, 2), (0, 3), (0, 4))),
        ("(i, j) -> (i + j : compressed, j : range)", (3, 5), ((0, 7), (0, 5))),
        ("BSR[2, 3]", (0, 0), ((0, 0), (0, 0), (0, 2), (0, 3))),
    ],
)
def test_lvl_bounds_and_shape(name: str, shape: tuple[int, ...], bounds: tuple[tuple[int, int], ...]) -> None:
    f = ust.format(name)
    assert f.lvl_bounds(shape) == bounds
    assert f.lvl_shape(shape) == tuple(hi - lo for lo, hi in bounds)
    assert f.lvl_bounds(np.array(shape)) == bounds  # any sequence of ints


@pytest.mark.parametrize(
    ("name", "shape", "level"),
    [
        ("BSR[2, 3]", (5, 9), 0),
        ("BSR[2, 3]", (4, 10), 1),
        ("BSC[2, 3]", (4, 10), 0),
        ("NM[2, 4]", (3, 6), 1),
    ],
)
def test_block_must_divide_the_shape(name: str, shape: tuple[int, int], level: int) -> None:
    f = ust.format(name)
    with pytest.raises(ust.FormatError) as exc:
        f.lvl_shape(shape)
    assert exc.value.rule == "block-divides-shape"
    assert exc.value.level == level
    assert "[block-divides-shape]" in str(exc.value) and "does not divide" in str(exc.value)


@pytest.mark.parametrize("shape", [(3,), (3, 4, 5), (-1, 4)])
def test_lvl_bounds_checks_the_shape(shape: tuple[int, ...]) -> None:
    with pytest.raises(ust.ShapeError):
        F.CSR.lvl_bounds(shape)


# ---------------------------------------------------------------------------- invalid formats

# (text, rule, level or None).  Mirrors MLIR's invalid_encoding.mlir where the rule applies.
INVALID = [
    pytest.param("(i, j) -> (i : dense, j : foo)", "unknown-level-type", 1, id="unknown-level-type"),
    pytest.param("(i, j) -> (i : dense, j : compressed(bar))", "unknown-property", 1, id="unknown-property"),
    pytest.param(
        "(i, j) -> (i : dense(nonunique), j : compressed)", "properties-not-allowed", 0, id="prop-on-dense"
    ),
    pytest.param(
        "(i, j) -> (j - i : compressed, j : range(nonordered))",
        "properties-not-allowed",
        1,
        id="prop-on-range",
    ),
    pytest.param(
        "(i, j) -> (i : compressed(nonunique, nonunique), j : singleton)",
        "duplicate-property",
        0,
        id="dup-property",
    ),
    pytest.param(
        "(d0, d1) -> (d0 : compressed(soa), d1 : singleton)",
        "soa-singleton-only",
        0,
        id="mlir-soa-on-compressed",
    ),
    pytest.param(
        "(i, j, k) -> (i : compressed(nonunique), j : singleton(nonunique, soa), k : singleton)",
        "singleton-layout",
        2,
        id="soa-disagrees",
    ),
    pytest.param(
        "(i, i) -> (i : dense, i : compressed)", "duplicate-dimension", None, id="duplicate-dimension"
    ),
    pytest.param("(i, j) -> (i : dense, k : compressed)", "unknown-dimension", 1, id="unknown-dimension"),
    pytest.param(
        "(d0) -> (d0 : compressed, d1 : compressed)", "unknown-dimension", 1, id="mlir-undeclared-identifier"
    ),
    pytest.param("(i, j) -> (i : dense)", "unused-dimension", None, id="unused-dimension"),
    pytest.param(
        "(d0, d1) -> (d0 : dense, d0 : compressed)", "dimension-stored-twice", 1, id="mlir-dimension-twice"
    ),
    pytest.param(
        "(i, j) -> (i : dense, i floordiv 2 : dense, j : dense, i mod 2 : dense)",
        "dimension-stored-twice",
        1,
        id="dimension-stored-plain-and-blocked",
    ),
    pytest.param(
        "(i, j) -> (i : dense, j - i : compressed, j : range)",
        "dimension-stored-twice",
        1,
        id="diagonal-with-both-dimensions-stored",
    ),
    pytest.param(
        "(d0, d1) -> (d0 : dense, d1 : singleton)", "singleton-parent", 1, id="mlir-singleton-under-dense"
    ),
    pytest.param(
        "(d0, d1) -> (d0 : compressed, d1 : singleton)", "singleton-parent", 1, id="singleton-under-unique"
    ),
    pytest.param("(i, j) -> (i : singleton, j : compressed)", "singleton-parent", 0, id="singleton-first"),
    pytest.param(
        "(b, i, j) -> (i : dense, b : batch, j : compressed)", "batch-leading", 1, id="batch-not-leading"
    ),
    pytest.param(
        "(d0, d1, d2) -> (d0 : batch, d1 : compressed, d2 : batch)",
        "batch-leading",
        2,
        id="mlir-batch-not-leading",
    ),
    pytest.param(
        "(b, i) -> (b floordiv 2 : batch, i : dense, b mod 2 : dense)",
        "batch-dimension",
        0,
        id="batch-on-block",
    ),
    pytest.param(
        "(i, j) -> (j floordiv 4 : dense, j mod 4 : structured[2, 4], i : dense)",
        "structured-last",
        1,
        id="structured-not-last",
    ),
    pytest.param(
        "(i, j) -> (i : compressed, j floordiv 4 : dense, j mod 4 : structured[2, 4])",
        "structured-parents-dense",
        2,
        id="structured-sparse-parent",
    ),
    pytest.param(
        "(i, j, k) -> (i : dense, k floordiv 4 : compressed, j : dense, k mod 4 : structured[2, 4])",
        "structured-parents-dense",
        3,
        id="mlir-structured-sparse-parent",
    ),
    pytest.param(
        "(i, j) -> (i : dense, j floordiv 2 : dense, j mod 2 : structured[4, 2])",
        "structured-arguments",
        2,
        id="structured[4, 2]",
    ),
    pytest.param(
        "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[0, 4])",
        "structured-arguments",
        2,
        id="structured[0, 4]",
    ),
    pytest.param(
        "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[4, 4])",
        "structured-arguments",
        2,
        id="structured[4, 4]",
    ),
    pytest.param(
        "(i, j) -> (i : dense, j : structured[2, 4])", "structured-mod", 1, id="structured-on-plain-dim"
    ),
    pytest.param(
        "(i, j) -> (i : dense, j floordiv 2 : dense, j mod 2 : structured[2, 4])",
        "structured-mod",
        2,
        id="mlir-structured-on-wrong-block",
    ),
    pytest.param(
        "(i, j) -> (i : dense, j floordiv 2 : compressed)", "block-pairing", 1, id="floordiv-without-mod"
    ),
    pytest.param(
        "(i, j) -> (i : dense, j floordiv 2 : compressed, j mod 3 : dense)",
        "block-pairing",
        1,
        id="mod-with-other-constant",
    ),
    pytest.param(
        "(i, j) -> (i : dense, j : compressed, j mod 2 : dense)",
        "block-pairing",
        2,
        id="mod-without-floordiv",
    ),
    pytest.param(
        "(i, j) -> (i : dense, j floordiv 2 : dense, j floordiv 2 : dense, j mod 2 : dense)",
        "dimension-stored-twice",
        2,
        id="floordiv-twice",
    ),
    pytest.param("(i, j) -> (i - i : compressed, j : range)", "diagonal-distinct", 0, id="i-minus-i"),
    pytest.param("(i, j) -> (i + i : compressed, j : range)", "diagonal-distinct", 0, id="i-plus-i"),
    pytest.param(
        "(i, j) -> (j - i : compressed, j : dense)", "diagonal-needs-range", 0, id="diagonal-without-range"
    ),
    pytest.param("(i, j) -> (i : dense, j : range)", "range-closes-pair", 1, id="range-without-diagonal"),
    pytest.param(
        "(i, j) -> (j : range, j - i : compressed)", "range-closes-pair", 0, id="range-before-diagonal"
    ),
    pytest.param(
        "(i, j, k) -> (j - i : compressed, k : range, j : dense)",
        "range-closes-pair",
        1,
        id="range-on-other-dimension",
    ),
    pytest.param(
        "(i, j) -> (i : dense, j floordiv 0 : compressed, j mod 0 : dense)",
        "positive-divisor",
        1,
        id="zero-divisor",
    ),
    pytest.param(
        "(i, j) -> (i floordiv r : dense, j : compressed, i mod r : dense)",
        "unbound-parameter",
        0,
        id="unbound-parameter",
    ),
    pytest.param(
        "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[n, 4])",
        "unbound-parameter",
        2,
        id="unbound-structured-parameter",
    ),
    pytest.param(
        "#sparse_tensor.encoding<{ map = (d0) -> (d0 : compressed), posWidth = 42 }>",
        "bitwidth",
        None,
        id="mlir-posWidth-42",
    ),
    pytest.param(
        "#sparse_tensor.encoding<{ map = (d0) -> (d0 : compressed), crdWidth = 128 }>",
        "bitwidth",
        None,
        id="mlir-crdWidth-128",
    ),
    pytest.param(
        "#sparse_tensor.encoding<{ map = (d0) -> (d0 : compressed), posWidth = x }>",
        "bitwidth",
        None,
        id="mlir-posWidth-not-integral",
    ),
    pytest.param(
        "#sparse_tensor.encoding<{ map = (d0) -> (d0 : compressed), key = 1 }>",
        "unknown-attribute",
        None,
        id="mlir-unknown-key",
    ),
    pytest.param(
        "#sparse_tensor.encoding<{ map = (d0) -> (d0 : compressed), posWidth = 8, posWidth = 16 }>",
        "duplicate-attribute",
        None,
        id="duplicate-key",
    ),
]


@pytest.mark.parametrize(("text", "rule", "level"), INVALID)
def test_invalid_formats(text: str, rule: str, level: int | None) -> None:
    with pytest.raises(ust.FormatError) as exc:
        ust.format(text)
    err = exc.value
    assert type(err) is ust.FormatError
    assert err.rule == rule
    assert err.level == level
    msg = str(err)
    assert msg.startswith(f"[{rule}]")
    if level is not None:
        assert f"level {level}:" in msg
    assert "\n" not in msg  # one line: the CLI prints it as is


def test_error_points_at_the_offending_level() -> None:
    text = "(i, j) -> (i : dense,\n           j : foo)"
    with pytest.raises(ust.FormatError) as exc:
        ust.format(text)
    assert "(line 2, column 12)" in str(exc.value)


def test_format_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        ust.format("(i, j) -> (i : dense)")
