"""Bad input to ``ust.compute`` / ``ust.einsum`` / ``ust.Compute`` / ``ust.Semiring`` (issue 17).

Each case raises the exact ust error (a subclass of ``ust.UstError``) before any work: the test
replaces the order chooser, the lowering and the C build by functions that fail the test if
called, and checks every operand's buffers are unchanged.  Syntax errors carry the 1-based line
and column of the offending token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from tests.algebra_cases import matrix, snapshot, unchanged
from ust.runtime.errors import (
    DeviceError,
    FormatError,
    InvalidTypeError,
    InvalidValueError,
    ShapeError,
    UnsupportedError,
)

A_SP = matrix(1, np.float64, (6, 7))
A = ust.asarray(A_SP)
ADIA = ust.asarray(A_SP).convert("DIA")
Z = ust.asarray(matrix(2, np.complex128, (6, 7)))
X7 = np.arange(7.0)
X6 = np.arange(6.0)
SQ = ust.asarray(matrix(3, np.float64, (6, 6)))


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the call reaches loop-order choice, lowering or the C build."""
    import ust.api.compute as mod
    import ust.codegen.loop_order as loop_order

    def boom(*a: Any, **k: Any) -> Any:
        raise AssertionError("work started before the input was refused")

    monkeypatch.setattr(mod.Compute, "_build", boom)
    monkeypatch.setattr(loop_order, "choose_order", boom)
    for name in ("choose_order", "_lowered", "_c_library"):
        monkeypatch.setattr(mod, name, boom, raising=False)


CASES: list[tuple[str, type[Exception], Callable[[], Any]]] = [
    # extents
    ("extent-einsum", ShapeError, lambda: ust.einsum("ij,jk->ik", A, A)),
    (
        "extent-elementwise",
        ShapeError,
        lambda: ust.compute("C(i,j) = A(i,j) + B(i,j)", A=A, B=np.ones((5, 6))),
    ),
    ("extent-vector", ShapeError, lambda: ust.einsum("ij,j->i", A, X6)),
    (
        "extent-two-terms",
        ShapeError,
        lambda: ust.compute("y(i) = A(i,j) * x(j) + B(i,j) * z(j)", A=A, B=SQ, x=X7, z=X6),
    ),
    ("extent-diagonal", ShapeError, lambda: ust.einsum("ii->i", A)),
    ("extent-diagonal-dense", ShapeError, lambda: ust.einsum("ii->", np.ones((3, 4)))),
    # operand counts and names
    ("einsum-too-few", InvalidValueError, lambda: ust.einsum("ij,jk->ik", A)),
    ("einsum-too-many", InvalidValueError, lambda: ust.einsum("ij->i", A, A)),
    ("einsum-none", InvalidValueError, lambda: ust.einsum("ij->i")),
    ("compute-missing", InvalidValueError, lambda: ust.compute("C(i,j) = A(i,j) + B(i,j)", A=A)),
    (
        "compute-missing-scalar",
        InvalidValueError,
        lambda: ust.compute("y(i) = alpha * A(i,j) * x(j)", A=A, x=X7),
    ),
    ("compute-extra", InvalidValueError, lambda: ust.compute("C(i,j) = A(i,j)", A=A, B=A)),
    ("output-on-right", InvalidValueError, lambda: ust.compute("C(i,j) = C(i,j) + A(i,j)", A=A, C=A)),
    ("output-index-lost", InvalidValueError, lambda: ust.compute("C(i,j,k) = A(i,j)", A=A)),
    ("scalar-and-indexed", InvalidValueError, lambda: ust.compute("C(i,j) = A(i,j) * A", A=A)),
    # ranks
    ("rank-operand", ShapeError, lambda: ust.compute("y(i) = A(i,j,k) * x(k)", A=A, x=X7)),
    ("rank-dense-operand", ShapeError, lambda: ust.compute("y(i) = A(i,j) * x(j)", A=A, x=np.ones((7, 1)))),
    ("rank-einsum", ShapeError, lambda: ust.einsum("ijk->i", A)),
    ("scalar-for-operand", ShapeError, lambda: ust.compute("y(i) = A(i,j) * x(j)", A=A, x=2.0)),
    ("array-for-scalar", ShapeError, lambda: ust.compute("y(i) = a * x(i)", a=np.ones(3), x=np.ones(3))),
    ("out-format-rank-3", ShapeError, lambda: ust.compute("C(i,j) = A(i,j)", A=A, out_format="CSF")),
    ("out-format-rank-2-for-1", ShapeError, lambda: ust.einsum("ij,j->i", A, X7, out_format="CSR")),
    (
        "out-format-rank-1-for-2",
        ShapeError,
        lambda: ust.einsum("ij,jk->ik", A, A.T, out_format="SparseVector"),
    ),
    ("out-format-unknown", FormatError, lambda: ust.compute("C(i,j) = A(i,j)", A=A, out_format="NOPE")),
    # semirings and dtypes
    ("min-plus-complex", UnsupportedError, lambda: ust.einsum("ij,ij->ij", Z, Z, semiring="min_plus")),
    (
        "max-plus-complex",
        UnsupportedError,
        lambda: ust.einsum("ij,j->i", A, X7.astype(complex), semiring="max_plus"),
    ),
    ("max-times-complex", UnsupportedError, lambda: ust.einsum("ij->i", Z, semiring="max_times")),
    (
        "custom-complex",
        UnsupportedError,
        lambda: ust.einsum("ij->i", Z, semiring=ust.Semiring(add="max(a, b)", multiply="a * b", identity=0)),
    ),
    ("or-and-float", UnsupportedError, lambda: ust.einsum("ij,j->i", A, X7, semiring="or_and")),
    (
        "minus-min-plus",
        UnsupportedError,
        lambda: ust.compute("C(i,j) = A(i,j) - B(i,j)", A=A, B=ADIA, semiring="min_plus"),
    ),
    ("negate-max-plus", UnsupportedError, lambda: ust.compute("C(i,j) = -A(i,j)", A=A, semiring="max_plus")),
    (
        "minus-or-and",
        UnsupportedError,
        lambda: ust.compute("y(i) = x(i) - z(i)", x=np.ones(2, int), z=np.ones(2, int), semiring="or_and"),
    ),
    ("unknown-semiring", UnsupportedError, lambda: ust.einsum("ij->i", A, semiring="tropical")),
    ("semiring-type", InvalidTypeError, lambda: ust.einsum("ij->i", A, semiring=3)),
    (
        "bool-plus-times",
        UnsupportedError,
        lambda: ust.einsum("ij,j->i", np.ones((2, 2), bool), np.ones(2, bool)),
    ),
    (
        "float16",
        UnsupportedError,
        lambda: ust.einsum("i,i->i", np.ones(2, np.float16), np.ones(2, np.float16)),
    ),
    ("str-values", UnsupportedError, lambda: ust.einsum("i,i->i", np.array(["a", "b"]), np.ones(2))),
    # einsum subscripts
    ("ellipsis", UnsupportedError, lambda: ust.einsum("...j,j->...", A, X7)),
    ("ellipsis-in-output", UnsupportedError, lambda: ust.einsum("ij->...", A)),
    ("subscripts-type", InvalidTypeError, lambda: ust.einsum(3, A)),
    ("subscripts-digit", InvalidValueError, lambda: ust.einsum("i1,j->i", A, X7)),
    ("subscripts-two-arrows", InvalidValueError, lambda: ust.einsum("ij->i->j", A)),
    ("expression-type", InvalidTypeError, lambda: ust.compute(3, A=A)),
    # options, execution
    ("option-unknown", InvalidValueError, lambda: ust.compute("C(i,j) = A(i,j)", A=A, options={"bogus": 1})),
    ("execution-unknown", DeviceError, lambda: ust.einsum("ij->i", A, execution="tpu")),
    # Semiring definitions
    ("semiring-unknown-name", InvalidValueError, lambda: ust.Semiring(add="min(a, c)", multiply="a * b")),
    ("semiring-unknown-fn", InvalidValueError, lambda: ust.Semiring(add="sqrt(a)", multiply="a * b")),
    (
        "semiring-identity-type",
        InvalidTypeError,
        lambda: ust.Semiring(add="a + b", multiply="a * b", identity="0"),
    ),
    (
        "semiring-identity-bool",
        InvalidTypeError,
        lambda: ust.Semiring(add="a + b", multiply="a * b", identity=True),
    ),
    ("semiring-add-type", InvalidTypeError, lambda: ust.Semiring(add=min, multiply="a * b")),
]


@pytest.mark.parametrize("name,exc,call", CASES, ids=[c[0] for c in CASES])
def test_bad_input(no_work: None, name: str, exc: type[Exception], call: Callable[[], Any]) -> None:
    snaps = [snapshot(t) for t in (A, ADIA, Z, SQ)]
    x0 = X7.copy(), X6.copy()
    with pytest.raises(exc) as info:
        call()
    assert isinstance(info.value, ust.UstError)
    assert str(info.value)  # a message
    if exc is ShapeError:
        assert isinstance(info.value, ValueError)
    assert all(unchanged(t, s) for t, s in zip((A, ADIA, Z, SQ), snaps))
    assert np.array_equal(X7, x0[0]) and np.array_equal(X6, x0[1])


def test_bad_input_through_compute_and_explain(no_work: None) -> None:
    """The stateful class and explain refuse the same input the same way."""
    with pytest.raises(ShapeError):
        ust.Compute("C(i,k) = A(i,j) * B(j,k)", A=A, B=A)
    with pytest.raises(ShapeError):
        ust.explain("einsum", "ij,jk->ik", A, A)
    with pytest.raises(InvalidValueError):
        ust.explain("compute", "C(i,j) = A(i,j) + B(i,j)", A=A)
    with pytest.raises(UnsupportedError):
        ust.explain("einsum", "ij,ij->ij", Z, Z, semiring="min_plus")


SYNTAX = [
    ("C(i,j) = A(i,k) * * B(k,j)", 1, 19),
    ("C(i,j) A(i,j)", 1, 8),
    ("C(i,j) = (A(i,j) + B(i,j)", 1, 26),
    ("C(i,j) = A(i,j))", 1, 16),
    ("C(i,j) =\n  A(i,j) +\n  B(i,j) $", 3, 10),
    ("", 1, 1),
    ("C(i,j) = A()", 1, 12),
    ("C(i,) = A(i,j)", 1, 5),
    ("C(i,j) = A(i j)", 1, 14),
    ("C(1,j) = A(i,j)", 1, 3),
    ("C(i,j) = A(i,j) / B(i,j)", 1, 17),
    ("C(i,j) = 2A(i,j)", 1, 11),
    ("C(i,j) == A(i,j)", 1, 9),
    ("\n\nC(i,j) = A(i,j) ^ 2", 3, 17),
]


@pytest.mark.parametrize("text,line,column", SYNTAX, ids=[f"s{n}" for n in range(len(SYNTAX))])
def test_syntax_errors(no_work: None, text: str, line: int, column: int) -> None:
    with pytest.raises(ust.UstSyntaxError) as info:
        ust.compute(text, A=A, B=A)
    e = info.value
    assert isinstance(e, ust.UstError)
    assert (e.line, e.column) == (line, column), str(e)
    assert f"line {line}, column {column}" in str(e)
    if text.strip():
        assert "^" in str(e)  # a caret excerpt


def test_repeated_output_index() -> None:
    """The repeated output index is located (line 1, column 5: the second i) with a caret excerpt."""
    with pytest.raises(ust.UstSyntaxError) as info:
        ust.compute("C(i,i) = A(i,i)", A=SQ)
    assert (info.value.line, info.value.column) == (1, 5)
    assert "repeats" in str(info.value) and "^" in str(info.value)
    with pytest.raises(ust.UstSyntaxError) as info:
        ust.compute("C(i, j,\n  j) = A(i,j)", A=SQ)
    assert (info.value.line, info.value.column) == (2, 3)


@pytest.mark.parametrize("order", ["iq", "i", "ijj", "ii", "jix"])
def test_bad_loop_order_refused_before_lowering(monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    import ust.api.compute as mod

    def boom(*a: Any, **k: Any) -> Any:
        raise AssertionError("lowered or compiled before the order was refused")

    for name in ("_lowered", "_c_library"):
        monkeypatch.setattr(mod, name, boom, raising=False)
    snap = snapshot(A)
    with pytest.raises(InvalidValueError):
        ust.compute("C(i,j) = A(i,j)", A=A, options={"order": order})
    with pytest.raises(InvalidValueError):
        ust.compute("y(i) = A(i,j) * x(j)", A=A, x=X7, options={"order": order})
    assert unchanged(A, snap)


def test_einsum_repeated_output_subscript() -> None:
    with pytest.raises(ust.UstError) as info:
        ust.einsum("ij->ii", SQ)
    assert "ij->ii" in str(info.value)


@pytest.mark.parametrize("subs,n", [("", 0), ("->", 0), ("ij->ik", 1), ("ij,jk->il", 2)])
def test_einsum_bad_subscripts(subs: str, n: int) -> None:
    with pytest.raises(InvalidValueError):
        ust.einsum(subs, *([SQ] * n))


def test_syntax_error_in_a_semiring() -> None:
    with pytest.raises(ust.UstSyntaxError) as info:
        ust.Semiring(add="a +", multiply="a * b")
    assert (info.value.line, info.value.column) == (1, 4)


def test_list_operand() -> None:
    """NumPy's einsum takes array-likes; ust takes them too or refuses them with a ust error."""
    try:
        r = ust.einsum("i,i->i", [1.0, 2.0], np.ones(2))
    except ust.UstError:
        return
    np.testing.assert_array_equal(np.asarray(r), [1.0, 2.0])


@pytest.mark.parametrize(
    "opts", [{"mode": "zzz"}, {"order": 3}, {"order": ["i", "x"]}], ids=["mode", "order-type", "order-list"]
)
def test_bad_options(opts: dict[str, Any]) -> None:
    with pytest.raises(ust.UstError):
        ust.compute("C(i,j) = A(i,j)", A=A, options=opts)


def test_reset_operands_refusals() -> None:
    c = ust.Compute("y(i) = alpha * A(i,j) * x(j)", A=A, x=X7, alpha=2.0)
    c.plan()
    with pytest.raises(ShapeError):
        c.reset_operands(A=ADIA)  # another format
    with pytest.raises(ShapeError):
        c.reset_operands(x=np.ones(6))
    with pytest.raises(ShapeError):
        c.reset_operands(x=np.ones(7, np.float32))
    with pytest.raises(ShapeError):
        c.reset_operands(x=2.0)
    with pytest.raises(ShapeError):
        c.reset_operands(alpha=np.ones(2))
    with pytest.raises(InvalidValueError):
        c.reset_operands(B=A)
    with pytest.raises(InvalidValueError):
        c.execute(A=A)
    np.testing.assert_allclose(c.execute(), 2 * A_SP.toarray() @ X7, rtol=1e-12)
    c.free()
    with pytest.raises(ust.UstError):
        c.execute()


def test_load_plan_for_another_expression(tmp_path: Any) -> None:
    c = ust.Compute("y(i) = A(i,j) * x(j)", A=A, x=X7)
    c.plan()
    path = tmp_path / "p.json"
    c.save_plan(path)
    with pytest.raises(ust.UstError):
        ust.Compute.load_plan(path, "y(j) = A(i,j) * x(i)", A=A, x=X6)


def test_scipy_matrix_with_duplicates_is_not_modified() -> None:
    r = np.array([0, 0, 1, 0])
    c = np.array([1, 1, 0, 1])
    v = np.array([1.0, 2.0, 3.0, 4.0])
    M = sp.coo_array((v, (r, c)), shape=(2, 2))
    out = ust.einsum("ij,j->i", M, np.ones(2))
    np.testing.assert_allclose(out, [7.0, 3.0], rtol=1e-12)
    assert np.array_equal(M.row, r) and np.array_equal(M.col, c) and np.array_equal(M.data, v)
    assert not M.has_canonical_format
