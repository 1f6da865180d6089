"""``ust.advise`` and ``ust advise``: the candidate formats that fit a matrix, measured."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import ust
from ust.api.advise import candidate_formats


def _tridiagonal(n: int = 4000) -> sp.csr_array:
    return sp.csr_array(sp.diags_array([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(n, n), format="csr"))


def _blocks(n: int = 2000, b: int = 4) -> sp.csr_array:
    rng = np.random.default_rng(0)
    pattern = sp.random_array((n // b, n // b), density=0.01, rng=rng, format="csr")
    return sp.csr_array(sp.kron(pattern, np.ones((b, b))))


def _hypersparse(n: int = 20000) -> sp.csr_array:
    rng = np.random.default_rng(0)
    rows = rng.choice(n, size=200, replace=False)
    a = sp.coo_array((np.ones(2000), (np.repeat(rows, 10), rng.integers(0, n, 2000))), shape=(n, n))
    return sp.csr_array(a.tocsr())


def test_candidates_follow_the_structure() -> None:
    names = [f for f, _ in candidate_formats(ust.asarray(_tridiagonal()))]
    assert names[0] == "CSR" and "DIA" in names and not any(n.startswith("BSR") for n in names)
    names = [f for f, _ in candidate_formats(ust.asarray(_blocks()))]
    assert "BSR[4, 4]" in names and "BSR[2, 2]" in names and "DIA" not in names
    names = [f for f, _ in candidate_formats(ust.asarray(_hypersparse()), ["CSC", "CSR"])]
    assert "DCSR" in names and names.count("CSR") == 1 and names[-1] == "CSC"


@pytest.mark.parametrize("k", [1, 4])
def test_advise_table_measures_each_candidate(k: int) -> None:
    a = _tridiagonal()
    adv = ust.advise(sp.coo_array(a), op="spmv" if k == 1 else "spmm", k=k, repeat=3, candidates=["CSC"])
    fmts = [r.format for r in adv.rows]
    assert fmts[0].startswith("COO") and fmts[0].endswith("(as given)") and {"CSR", "DIA", "CSC"} <= set(fmts)
    base = adv.rows[0].call_s
    for r in adv.rows[1:]:
        assert r.convert_s > 0 and r.call_s > 0 and r.speedup == pytest.approx(base / r.call_s)
        if r.call_s < base:
            assert r.break_even == pytest.approx(r.convert_s / (base - r.call_s))
        else:
            assert r.break_even is None
    text = str(adv)
    assert "break-even calls" in text and "DIA" in text and adv.best in adv.rows
    assert all(math.isfinite(d["call_s"]) for d in adv.as_dicts())


def test_advise_plot(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    adv = ust.advise(_tridiagonal(), repeat=2)
    adv.plot(tmp_path / "advice.png")
    assert (tmp_path / "advice.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"op": "spgemm"}, ust.UnsupportedError, "measures"),
        ({"op": "spmm", "k": 0}, ust.InvalidValueError, "positive"),
        ({"k": 3}, ust.InvalidValueError, "k must be 1"),
        ({"repeat": 0}, ust.InvalidValueError, "repeat"),
        ({"candidates": ["NoSuchFormat"]}, ust.FormatError, "unknown"),
        ({"device": "gpu"}, ust.DeviceError, "execution"),
    ],
)
def test_advise_rejects_bad_arguments_before_work(kwargs: dict, error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        ust.advise(_tridiagonal(), **kwargs)


def test_advise_takes_a_matrix_only() -> None:
    t = ust.asarray(
        sp.random_array((4, 5), density=0.5, random_state=0).toarray().reshape(2, 2, 5), format="COO3"
    )
    with pytest.raises(ust.ShapeError):
        ust.advise(t)


def test_cli_advise(tmp_path, capsys) -> None:
    from ust.cli.main import main

    path = tmp_path / "a.mtx"
    scipy.io.mmwrite(str(path), _tridiagonal(2000))
    assert main(["advise", str(path), "--repeat", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["format"] for r in rows} >= {"CSR", "DIA"}
    assert main(["advise", str(path), "--repeat", "2", "--op", "spmm", "--k", "2", "--candidate", "CSC"]) == 0
    out = capsys.readouterr().out
    assert "spmm (k=2)" in out and "CSC" in out
    assert main(["advise", str(path), "--k", "3"]) == 1
    assert "use --op spmm" in capsys.readouterr().err
    assert main(["advise", str(tmp_path / "missing.mtx")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["advise", str(path), "--plot", str(tmp_path / "no" / "x.png")]) == 1
    assert "does not exist" in capsys.readouterr().err
