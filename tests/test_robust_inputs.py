"""Hostile inputs get ust errors, raised before any work: deep or long texts, huge integers,
arguments of the wrong type, and tampered saved plans (the contract of ust.runtime.stateful)."""

from __future__ import annotations

import base64
import json
import logging
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust import dense
from ust.codegen.epilog import compile_epilog
from ust.formats import library
from ust.grammar import parser
from ust.runtime.stateful import PlanFileError, decode_array, encode_array


@pytest.fixture(scope="module")
def a_csr() -> sp.csr_array:
    return sp.random_array((6, 5), density=0.5, format="csr", random_state=0)


X = np.arange(1.0, 6.0)

# ----------------------------------------------------------------------------- deep and long texts


@pytest.mark.parametrize(
    ("epilog", "needle"),
    [
        ("y" + " + y" * 3000, "too long"),  # the example: 12001 characters
        ("(" * 5000 + "y" + ")" * 5000, "too long"),
        ("y" + "+y" * 3000, "nested too deeply"),  # short enough, but 3000 operators deep
        ("-" * 5000 + "y", "nested too deeply"),
        ("y" + "**y" * 2000, "nested too deeply"),
        ("max(" * 300 + "y" + ", 0)" * 300, "nested too deeply"),
        ("(" * 300 + "y" + ")" * 300, "levels of parentheses"),
    ],
    ids=["issue-chain", "issue-parens", "compact-chain", "negations", "powers", "calls", "parens"],
)
def test_deep_epilogue_is_a_syntax_error(a_csr: sp.csr_array, epilog: str, needle: str) -> None:
    limit = sys.getrecursionlimit()
    with pytest.raises(ust.UstSyntaxError, match=needle) as exc:
        ust.matmul(ust.asarray(a_csr), X, epilog=epilog)
    assert str(parser.MAX_DEPTH) in str(exc.value) or str(parser.MAX_EPILOG_LENGTH) in str(exc.value)
    assert sys.getrecursionlimit() == limit
    with pytest.raises(ust.UstSyntaxError, match=needle):
        compile_epilog(epilog)


def test_epilogue_at_the_depth_limit_still_works(a_csr: sp.csr_array) -> None:
    chain = "y" + " + y" * (parser.MAX_DEPTH - 1)  # exactly MAX_DEPTH operators deep
    np.testing.assert_allclose(ust.matmul(a_csr, X, epilog=chain), parser.MAX_DEPTH * (a_csr @ X))
    nested = "(" * parser.MAX_DEPTH + "y" + ")" * parser.MAX_DEPTH
    np.testing.assert_allclose(ust.matmul(a_csr, X, epilog=nested), a_csr @ X)
    with pytest.raises(ust.UstSyntaxError, match="nested too deeply"):
        compile_epilog(chain + " + y")


def test_deep_format_text_is_a_syntax_error() -> None:
    deep = "(" * 5000 + "i, j) -> (i : dense, j : compressed)"
    with pytest.raises(ust.UstSyntaxError, match="nested too deeply") as exc:
        ust.format(deep)
    assert exc.value.line == 1 and exc.value.column == parser.MAX_DEPTH + 1
    with pytest.raises(ust.UstSyntaxError):
        ust.parse_formats("format A = " + deep)
    with pytest.raises(ust.UstSyntaxError, match="too long"):
        ust.format("(i) -> (i : dense" + " " * parser.MAX_SPEC_LENGTH + ")")


def test_too_many_dimensions_or_levels_is_a_format_error() -> None:
    names = [f"d{k}" for k in range(200)]
    text = f"({', '.join(names)}) -> ({', '.join(f'{n} : dense' for n in names)})"
    with pytest.raises(ust.FormatError, match="at most 64 dimensions") as exc:
        ust.format(text)
    assert exc.value.rule == "too-many-levels"
    names = names[:64]
    ok = f"({', '.join(names)}) -> ({', '.join(f'{n} : dense' for n in names)})"
    assert ust.format(ok).ndim == 64


# ----------------------------------------------------------------------------- integers


BIG = "9" * 5000


@pytest.mark.parametrize(
    "text",
    [
        f"(i, j) -> (i floordiv {BIG} : dense, j : compressed, i mod {BIG} : dense)",
        "(i, j) -> (i // 9223372036854775808 : dense, j : compressed, i % 9223372036854775808 : dense)",
        f"(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[{BIG}, 4])",
        f"(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, {BIG}])",
    ],
    ids=["floordiv-5000-digits", "int64-plus-one", "structured-n", "structured-m"],
)
def test_huge_integer_in_a_map_is_a_format_error(text: str) -> None:
    with pytest.raises(ust.FormatError, match=r"2\*\*63 - 1") as exc:
        ust.format(text)
    assert exc.value.rule == "integer-range"
    assert "line 1, column" in str(exc.value) and "^" in str(exc.value)
    assert len(str(exc.value)) < 1000  # the 5000 digits are not printed
    with pytest.raises(ust.FormatError, match="integer-range"):
        ust.parse_formats(f"format X = {text}")


def test_integer_at_the_int64_limit_parses() -> None:
    top = 2**63 - 1
    f = ust.format(f"(i, j) -> (i floordiv {top} : dense, j : compressed, i mod {top} : dense)")
    assert f.levels[0].expr.divisor == top
    leading_zeros = ust.format("(i, j) -> (i floordiv 0002 : dense, j : compressed, i mod 2 : dense)")
    assert leading_zeros.levels[0].expr.divisor == 2


@pytest.mark.parametrize(
    "spelling",
    [f"BSR[{BIG}, 2]", f"BSR({BIG}, 2)", "BSR[2, 9223372036854775808]"],
    ids=["[]", "()", "int64+1"],
)
def test_huge_template_argument_is_a_format_error(spelling: str) -> None:
    with pytest.raises(ust.FormatError, match=r"2\*\*63 - 1") as exc:
        ust.format(spelling)
    assert exc.value.rule == "integer-range" and len(str(exc.value)) < 1000


def test_huge_template_parameter_value_is_a_format_error() -> None:
    bsr = library.template("BSR")
    for bad in (2**63, 10**5000, -(2**64)):
        with pytest.raises(ust.FormatError, match="integer-range"):
            bsr(bad, 2)
    with pytest.raises(ust.FormatError, match="bad-parameter"):
        bsr("2", 2)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "literal",
    [BIG, "1e999", "9" * 400 + ".5", "1" * 320],
    ids=["5000-digits", "1e999", "400-digits", "320-ones"],
)
def test_epilogue_number_out_of_double_range(a_csr: sp.csr_array, literal: str) -> None:
    with pytest.raises(ust.UstSyntaxError, match="out of range of a double") as exc:
        ust.matmul(a_csr, X, epilog=f"y + {literal}")
    assert (exc.value.line, exc.value.column) == (1, 5) and len(str(exc.value)) < 1000


def test_epilogue_constant_division_by_zero_is_a_ust_error(a_csr: sp.csr_array) -> None:
    with pytest.raises(ust.InvalidValueError, match="constants and parameters"):
        ust.matmul(a_csr, X, epilog="y * (1 / 0)")
    with pytest.raises(ust.InvalidValueError):
        ust.matmul(a_csr, X, epilog="y + 10 ** 400")


# ----------------------------------------------------------------------------- argument types


@pytest.mark.parametrize(
    "call",
    [
        lambda a: ust.format(b"(i) -> (i : dense)"),  # type: ignore[arg-type]
        lambda a: ust.format(None),  # type: ignore[arg-type]
        lambda a: ust.format(123),  # type: ignore[arg-type]
        lambda a: ust.asarray(a, format=123),
        lambda a: ust.asarray(a, format=b"CSR"),
        lambda a: ust.parse_formats(None),  # type: ignore[arg-type]
        lambda a: ust.parse_formats(b"format A = (i) -> (i : dense)"),  # type: ignore[arg-type]
        lambda a: library.resolve(["CSR"]),
        lambda a: ust.matmul(a, X, epilog=123),  # type: ignore[arg-type]
        lambda a: ust.matmul(a, X, epilog=["y"]),  # type: ignore[arg-type]
        lambda a: compile_epilog(b"y"),  # type: ignore[arg-type]
    ],
)
def test_wrong_argument_type_is_an_invalid_type_error(a_csr: sp.csr_array, call) -> None:
    with pytest.raises(ust.InvalidTypeError) as exc:
        call(a_csr)
    assert isinstance(exc.value, TypeError) and isinstance(exc.value, ust.UstError)


def test_invalid_type_error_is_exported() -> None:
    assert "InvalidTypeError" in ust.__all__ and issubclass(ust.InvalidTypeError, TypeError)
    from ust.runtime import errors

    assert "InvalidTypeError" in errors.__all__ and errors.InvalidTypeError is ust.InvalidTypeError


# ----------------------------------------------------------------------------- tampered plans


def _header(kind: str, plan: object) -> dict:
    import scipy

    return {
        "ust_version": ust.__version__,
        "kind": kind,
        "device": "cpu",
        "versions": {"numpy": np.__version__, "scipy": scipy.__version__},
        "plan": plan,
    }


NOT_A_PLAN = {
    "binary": b"\x89PNG\r\n\x1a\n\xff\xfe\x00garbage",
    "empty": b"",
    "json list": b"[1, 2, 3]",
    "json number": b"42",
    "nested garbage": b"[" * 100_000 + b"]" * 100_000,
    "nested object": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "huge json int": b'{"kind": ' + b"9" * 5000 + b"}",
    "kind a number": json.dumps({"kind": 5, "plan": {}, "versions": {}, "device": "cpu"}).encode(),
    "missing keys": json.dumps({"kind": "matmul"}).encode(),
}


def _bad_header(kind: str) -> dict[str, bytes]:
    good = _header(kind, {})
    out = {}
    for key, value in (("device", 5), ("versions", ["numpy"]), ("versions", {"numpy": 1}), ("plan", [1])):
        out[f"{key}={value!r}"] = json.dumps({**good, key: value}).encode()
    out["extra header key"] = json.dumps({**good, "evil": 1}).encode()
    return out


@pytest.mark.parametrize(
    "content",
    [*NOT_A_PLAN.values(), *_bad_header("matmul").values()],
    ids=[*NOT_A_PLAN, *_bad_header("matmul")],
)
def test_matmul_load_plan_of_a_file_that_is_no_plan_raises(tmp_path, a_csr, content: bytes) -> None:
    path = tmp_path / "plan.json"
    path.write_bytes(content)
    with pytest.raises(PlanFileError, match="plan"):
        ust.Matmul.load_plan(path, a_csr, X)
    with dense.Matmul(np.ones((3, 2)), np.ones((2, 4))) as mm, pytest.raises(PlanFileError):
        mm.load_plan(path)
    with dense.FFT(np.ones(8)) as f, pytest.raises(PlanFileError):
        f.load_plan(path)
    with dense.Matmul(np.ones((3, 2)), np.ones((2, 4))) as mm:  # the object stays usable
        mm.plan()
        np.testing.assert_allclose(mm.execute(), np.full((3, 4), 2.0))


def test_missing_plan_file_is_a_plan_file_error(tmp_path, a_csr) -> None:
    with pytest.raises(PlanFileError, match="cannot read"):
        ust.Matmul.load_plan(tmp_path / "nothing.json", a_csr, X)


def _matmul_plan(**changes: object) -> dict:
    plan = {
        "route": "scipy",
        "variant": None,
        "format": ust.format("CSR").to_text(),
        "shape": [6, 5],
        "dtype": "float64",
        "op": "spmv",
    }
    plan.update(changes)
    return {k: v for k, v in plan.items() if v is not _DROP}


_DROP = object()

MATMUL_DAMAGE = {
    "route a number": _matmul_plan(route=5),
    "unknown route": _matmul_plan(route="bogus"),
    "variant outer:gABC": _matmul_plan(route="generated-c", variant="outer:gABC"),
    "variant with code": _matmul_plan(route="generated-c", variant="storage; rm -rf /"),
    "variant on scipy": _matmul_plan(variant="outer"),
    "variant a list": _matmul_plan(variant=[1, 2]),
    "variant a bool": _matmul_plan(route="cusparse", variant=True),
    "format a number": _matmul_plan(format=7),
    "other format": _matmul_plan(format=ust.format("CSC").to_text()),
    "shape garbage": _matmul_plan(shape=[[[[1]]]]),
    "shape strings": _matmul_plan(shape=["6", "5"]),
    "missing key": _matmul_plan(op=_DROP),
    "extra key": _matmul_plan(evil={"x": [1, {"y": None}]}),
    "dtype a dict": _matmul_plan(dtype={"a": 1}),
}


@pytest.mark.parametrize("name", list(MATMUL_DAMAGE))
def test_matmul_damaged_plan_warns_and_plans_afresh(tmp_path, caplog, a_csr, name: str) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_header("matmul", MATMUL_DAMAGE[name])))
    with caplog.at_level(logging.WARNING, logger="ust"):
        mm = ust.Matmul.load_plan(path, a_csr, X)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "planning afresh" in warnings[0], warnings
    assert mm.is_planned and not mm.from_saved_plan and mm.decision.route == "scipy"
    np.testing.assert_allclose(mm.execute(), a_csr @ X)


def test_matmul_good_saved_plan_is_used(tmp_path, caplog, a_csr) -> None:
    path = tmp_path / "plan.json"
    with ust.Matmul(a_csr, X) as mm:
        mm.plan()
        mm.save_plan(path)
    with caplog.at_level(logging.WARNING, logger="ust"):
        again = ust.Matmul.load_plan(path, a_csr, X)
    assert again.from_saved_plan and not caplog.records
    np.testing.assert_allclose(again.execute(), a_csr @ X)


def _dense_plan(**changes: object) -> dict:
    plan = {
        "route": "blas.gemm",
        "epilog": "relu",
        "bias": None,
        "key": {"dtype": "float64", "a": [3, 2], "b": [2, 4], "c": None, "epilog": "relu", "space": "cpu"},
        "order": "C",
    }
    plan.update(changes)
    return {k: v for k, v in plan.items() if v is not _DROP}


DENSE_DAMAGE = {
    "unknown route": _dense_plan(route="bogus"),
    "route a list": _dense_plan(route=["blas.gemm"]),
    "order garbage": _dense_plan(order="Z"),
    "order a number": _dense_plan(order=1),
    "bias garbage": _dense_plan(bias="x"),
    "bias of another shape": _dense_plan(bias=[4]),
    "key garbage": _dense_plan(key={"a": [[[]]]}),
    "missing key": _dense_plan(key=_DROP),
    "extra key": _dense_plan(evil=1),
    "cublasLt algorithm on the cpu": _dense_plan(
        route="cublasLt", order=_DROP, problem={}, workspace_size=0, algorithm={"dtype": "O"}
    ),
}


@pytest.mark.parametrize("name", list(DENSE_DAMAGE))
def test_dense_matmul_damaged_plan_warns_and_plans_afresh(tmp_path, caplog, name: str) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_header("dense.matmul", DENSE_DAMAGE[name])))
    a, b = -np.ones((3, 2)), np.ones((2, 4))
    with dense.Matmul(a, b) as mm, caplog.at_level(logging.WARNING, logger="ust"):
        assert mm.load_plan(path) is False
        np.testing.assert_allclose(mm.execute(), np.zeros((3, 4)))  # relu(-2): the saved epilog
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "planning afresh" in warnings[0], warnings


@pytest.mark.parametrize("epilog", [5, None, "bogus", "x" * 10_000, ["relu"]])
def test_dense_matmul_unreadable_epilog_raises(tmp_path, epilog: object) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_header("dense.matmul", _dense_plan(epilog=epilog))))
    with dense.Matmul(np.ones((3, 2)), np.ones((2, 4))) as mm:
        with pytest.raises(PlanFileError, match="epilog"):
            mm.load_plan(path)
        mm.plan()  # still usable
        assert mm.is_planned


@pytest.mark.parametrize(
    "plan",
    [
        {"route": "scipy.fft", "key": "x", "workers": -1},
        {"route": 3, "key": {}, "workers": -1},
        {"route": "scipy.fft", "key": {}, "workers": "all"},
        {"route": "scipy.fft", "key": {}},
        {"route": "scipy.fft", "key": {}, "workers": -1, "evil": [1]},
    ],
)
def test_fft_damaged_plan_warns_and_plans_afresh(tmp_path, caplog, plan: dict) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_header("dense.fft", plan)))
    x = np.arange(8.0)
    with dense.FFT(x) as f, caplog.at_level(logging.WARNING, logger="ust"):
        assert f.load_plan(path) is False
        np.testing.assert_allclose(f.execute(), np.fft.fft(x))
    assert "planning afresh" in caplog.text


def test_plan_from_another_ust_with_another_layout_warns(tmp_path, caplog, a_csr) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"ust_version": 99, "kind": "matmul", "device": 1, "versions": [], "plan": 3}))
    with caplog.at_level(logging.WARNING, logger="ust"):
        mm = ust.Matmul.load_plan(path, a_csr, X)
    assert not mm.from_saved_plan and "ust 99" in caplog.text


_GOOD = encode_array(np.arange(4, dtype=np.int64))


@pytest.mark.parametrize(
    "encoded",
    [
        None,
        [1, 2],
        {"dtype": "<i8", "shape": [4]},
        {**_GOOD, "evil": 1},
        {**_GOOD, "dtype": "O"},
        {**_GOOD, "dtype": "|O"},
        {**_GOOD, "dtype": "V8"},
        {**_GOOD, "dtype": "S8"},
        {**_GOOD, "dtype": "<M8[s]"},
        {**_GOOD, "dtype": ">i8"},
        {**_GOOD, "dtype": "(2,)i4"},
        {**_GOOD, "dtype": 8},
        {**_GOOD, "dtype": "not a dtype"},
        {**_GOOD, "shape": [-4]},
        {**_GOOD, "shape": [5]},
        {**_GOOD, "shape": [2, 3]},
        {**_GOOD, "shape": "4"},
        {**_GOOD, "shape": [4.0]},
        {**_GOOD, "shape": [True] * 4},
        {**_GOOD, "shape": [2**62, 2**62]},
        {**_GOOD, "base64": "!!!not base64!!!"},
        {**_GOOD, "base64": _GOOD["base64"][:-4]},
        {**_GOOD, "base64": "é"},
        {**_GOOD, "base64": 12},
        {**_GOOD, "base64": base64.b64encode(b"x" * 31).decode()},
    ],
)
def test_decode_array_refuses_damaged_arrays(encoded: object) -> None:
    with pytest.raises(PlanFileError, match="is damaged"):
        decode_array(encoded)


def test_decode_array_round_trips() -> None:
    for arr in (np.arange(6, dtype=np.int32).reshape(2, 3), np.array([1.5, -2.0]), np.zeros(0, np.uint64)):
        back = decode_array(encode_array(arr))
        assert back.dtype == arr.dtype.newbyteorder("<") and back.flags.writeable
        np.testing.assert_array_equal(back, arr)


@pytest.mark.parametrize("value", ["abc", None, {"a": 1}, object(), np.array(["x"])])
def test_epilogue_parameters_of_the_wrong_type_fail_before_the_multiplication(value: object) -> None:
    a = sp.random_array((5, 5), density=0.5, random_state=0, format="csr")
    x = np.ones(5)
    with pytest.raises(ust.InvalidTypeError, match="epilogue parameter 's'"):
        ust.matmul(a, x, epilog="y * s", epilog_params={"s": value})
    with pytest.raises(ust.InvalidTypeError, match="epilog_params must be a dict"):
        ust.matmul(a, x, epilog="y * s", epilog_params=[1])  # type: ignore[arg-type]
    s = ust.asarray(a)
    with pytest.raises(ust.InvalidTypeError, match="epilogue parameter 's'"):
        ust.ops.sddmm(s, np.ones((5, 2)), np.ones((2, 5)), epilog="y * s", epilog_params={"s": value})


def test_epilogue_parameters_that_are_numbers_or_numeric_arrays_work() -> None:
    a = sp.random_array((5, 5), density=0.5, random_state=0, format="csr")
    x = np.ones(5)
    want = a @ x
    for v, scale in ((2, 2.0), ([1, 2, 3, 4, 5], np.arange(1.0, 6)), (np.arange(1.0, 6), np.arange(1.0, 6))):
        np.testing.assert_allclose(ust.matmul(a, x, epilog="y * s", epilog_params={"s": v}), want * scale)
