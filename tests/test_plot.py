"""ust.io.plot: PNGs of the sparsity pattern and the level structure; the helpers they share."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from ust.convert import asarray
from ust.io.plot import binned_counts, grid_shape, stored_grid
from ust.runtime.errors import BackendUnavailableError

M = np.array(
    [
        [1.0, 0, 2, 0, 0, 0, 0, 3],
        [0, 4, 0, 0, 5, 0, 0, 0],
        [6, 0, 7, 0, 0, 0, 8, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
        [0, 9, 0, 10, 0, 0, 0, 11],
        [12, 0, 0, 0, 13, 0, 14, 0],
    ]
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_stored_grid_matches_scipy() -> None:
    for name in ("CSR", "COO", "CSC", "DCSR", "BSR[2,2]"):
        t = asarray(M, name)
        r, c, v = stored_grid(t)
        dense = np.zeros(M.shape)
        dense[r, c] = v
        np.testing.assert_array_equal(dense, M)
        assert r.shape[0] == t.nnz
    r, c, v = stored_grid(asarray(M, "DIA"))  # padding inside the matrix is stored, outside is not
    assert r.shape[0] == asarray(M, "DIA").nnz == sp.dia_array(M).nnz


def test_grid_of_vectors_and_tensors() -> None:
    assert grid_shape((7,)) == (1, 7)
    assert grid_shape((3, 4, 5)) == (12, 5)
    D = np.zeros((3, 4, 5))
    D[2, 1, 3] = 1.0
    D[0, 3, 0] = 2.0
    r, c, v = stored_grid(asarray(D, "CSF"))
    assert sorted(zip(r.tolist(), c.tolist(), v.tolist())) == [(3, 0, 2.0), (9, 3, 1.0)]
    r, c, _ = stored_grid(asarray(np.array([0.0, 1, 0, 2]), "SparseVector"))
    assert r.tolist() == [0, 0] and c.tolist() == [1, 3]


def test_binned_counts_sum_and_area() -> None:
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 1000, 5000)
    cols = rng.integers(0, 300, 5000)
    counts, area = binned_counts(rows, cols, (1000, 300), (64, 50))
    assert counts.shape == area.shape == (64, 50)
    assert counts.sum() == 5000 and area.sum() == 1000 * 300
    rb, cb = rows * 64 // 1000, cols * 50 // 300
    assert counts[rb[0], cb[0]] == np.count_nonzero((rb == rb[0]) & (cb == cb[0]))


@pytest.mark.parametrize(
    "make",
    [
        lambda: asarray(M, "BSR[2,2]"),
        lambda: asarray(M, "DIA"),
        lambda: asarray(M, "(i, j) -> (i : compressed, j floordiv 4 : compressed, j mod 4 : dense)"),
        lambda: asarray(M.astype(np.complex128) * (1 + 1j), "COO"),
        lambda: asarray(np.zeros((0, 5)), "CSR"),
        lambda: asarray(np.arange(24.0).reshape(2, 3, 4) % 3, "BatchedCSR"),
        lambda: asarray(np.array([0.0, 1, 0, 2]), "SparseVector"),
        lambda: asarray(sp.random_array((200, 300), density=0.05, rng=np.random.default_rng(1)), "CSR"),
    ],
    ids=["bsr", "dia", "custom", "complex", "empty", "batched", "vector", "markers"],
)
def test_plot_writes_png(tmp_path: Path, make: Any) -> None:
    pytest.importorskip("matplotlib")
    from ust.io.plot import plot

    t = make()
    before = {k: np.array(v, copy=True) for k, v in t.buffers().items()}
    fig = plot(t, tmp_path / "t.png")
    w, h = _png_size(tmp_path / "t.png")
    assert w > 600 and h > 300
    assert len(fig.axes) >= 2
    for k, v in t.buffers().items():
        assert np.array_equal(v, before[k])


def test_plot_large_uses_density_image(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from ust.io.plot import plot

    n = 3000
    a = sp.diags_array([np.ones(n - 1), 2 * np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1], format="csr")
    fig = plot(asarray(a), tmp_path / "big.png", max_entries=1000, title="tridiagonal")
    assert "density" in fig.axes[0].get_title()
    assert fig.axes[0].images and fig.axes[0].images[0].get_array().shape == (400, 400)
    _png_size(tmp_path / "big.png")


def test_plot_returns_figure_without_saving(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from ust.io.plot import plot

    fig = plot(asarray(M, "CSR"))
    fig.savefig(tmp_path / "later.png")
    _png_size(tmp_path / "later.png")
    assert "CSR" in fig.get_suptitle()


def test_missing_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from ust.io import plot as plot_module

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] == "matplotlib":
            raise ImportError("no matplotlib here")
        return real_import(name, *args, **kwargs)

    for mod in [m for m in sys.modules if m.split(".")[0] == "matplotlib"]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(BackendUnavailableError, match=r'pip install "ust\[plot\]"') as info:
        plot_module.plot(asarray(M, "CSR"))
    assert info.value.pip_command == 'pip install "ust[plot]"'


def test_importing_ust_plot_does_not_import_matplotlib() -> None:
    import subprocess

    code = "import sys, ust.io.plot; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
