"""Epilogue expressions: parsing, validation, C text and in-place array evaluation."""

from __future__ import annotations

import numpy as np
import pytest

import ust
from ust.codegen.epilog import compile_epilog


@pytest.mark.parametrize(
    ("text", "params", "expected"),
    [
        ("max(y, 0)", {}, lambda y: np.maximum(y, 0)),
        ("y * scale", {"scale": 3.0}, lambda y: y * 3.0),
        ("where(y > t, y, 0)", {"t": 0.5}, lambda y: np.where(y > 0.5, y, 0)),
        ("min(abs(y), 1) - 2 / (1 + exp(-y))", {}, lambda y: np.minimum(abs(y), 1) - 2 / (1 + np.exp(-y))),
        ("-y ** 2 + sqrt(abs(y))", {}, lambda y: -(y**2) + np.sqrt(abs(y))),
        ("tanh(y) * (y >= 0)", {}, lambda y: np.tanh(y) * (y >= 0)),
        ("log(1 + y * y)", {}, lambda y: np.log(1 + y * y)),
    ],
)
def test_apply_matches_numpy_in_place(text, params, expected) -> None:
    rng = np.random.default_rng(0)
    y = rng.standard_normal(50)
    want = expected(y.copy())
    out = compile_epilog(text).apply(y, params)
    assert out is y
    np.testing.assert_allclose(y, want, rtol=1e-14, atol=0)


def test_apply_into_out_leaves_input() -> None:
    y = np.array([-1.0, 2.0])
    keep = y.copy()
    out = np.empty_like(y)
    compile_epilog("max(y, 0)").apply(y, out=out)
    np.testing.assert_array_equal(y, keep)
    np.testing.assert_array_equal(out, [0.0, 2.0])


def test_params_and_c_text() -> None:
    e = compile_epilog("max(y, 0) * scale + bias")
    assert e.params == ("scale", "bias")
    assert e.to_c() == "((fmax(y, ((double)0.0)) * scale) + bias)"
    assert e.to_c(real_type="float", value_expr="acc", param_prefix="p_") == (
        "((fmaxf(acc, ((float)0.0)) * p_scale) + p_bias)"
    )
    assert "pow(" in compile_epilog("y ** 2").to_c()
    assert compile_epilog("where(y < 0, 0, y)").to_c().endswith(": (y))")


def test_other_value_name() -> None:
    e = compile_epilog("s * 2", value="s")
    assert e.params == ()
    np.testing.assert_array_equal(e.apply(np.array([1.0, 2.0])), [2.0, 4.0])


def test_complex_arithmetic_allowed_comparisons_rejected() -> None:
    y = np.array([1 + 1j, -2j])
    np.testing.assert_allclose(compile_epilog("y * 2 + 1").apply(y.copy()), y * 2 + 1)
    with pytest.raises(ust.UnsupportedError, match="real dtypes only"):
        compile_epilog("max(y, 0)").apply(y.copy())


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        ("y +", ust.UstSyntaxError, "expected"),
        ("max(y)", ust.UnsupportedError, "takes 2 argument"),
        ("foo(y)", ust.UnsupportedError, "unknown function 'foo'"),
        ("2 * scale", ust.UnsupportedError, "does not use the value 'y'"),
        ("y * max", ust.UstSyntaxError, "is a function"),
        ("y ; 1", ust.UstSyntaxError, "unexpected"),
    ],
)
def test_bad_epilogues(text, error, match) -> None:
    with pytest.raises(error, match=match):
        compile_epilog(text)


def test_missing_parameter_value() -> None:
    with pytest.raises(ust.UnsupportedError, match="scale"):
        compile_epilog("y * scale").apply(np.ones(2))
