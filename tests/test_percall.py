"""Per-call cost (issue 18, item 4): the trusted SciPy intake and the toolchain probe cache.

The trusted intake must stay exact (the caller's own buffers, labelled as before) and must
still turn hostile objects into ust's errors; the probe cache must be used by a second
process, ignored when tampered with and refused in a directory others can write.  No timings
are asserted here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import ust
from ust.backends.generated.compile_c import toolchain
from ust.runtime.errors import FormatError, ShapeError, UnsupportedError


def _csr(n: int = 40, itype: type = np.int32, seed: int = 0) -> sp.csr_array:
    A = sp.random_array((n, n + 3), density=0.1, format="csr", rng=seed)
    A.sum_duplicates()
    return sp.csr_array((A.data, A.indices.astype(itype), A.indptr.astype(itype)), shape=A.shape)


# ------------------------------------------------------------------------ trusted intake


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("kind", ["csr", "csc"])
def test_compressed_intake_shares_the_buffers(kind: str, itype: type) -> None:
    A = _csr(itype=itype)
    A = A if kind == "csr" else sp.csc_array((A.data, A.indices, A.indptr), shape=A.shape[::-1])
    t = ust.asarray(A)
    assert t.format == ust.format(kind.upper())
    assert t.pos(1) is A.indptr and t.crd(1) is A.indices and t.values is A.data
    assert t.index_dtype == np.dtype(itype)
    np.testing.assert_array_equal(t.todense(), A.toarray())
    checked = ust.asarray(A, check=True)
    assert checked.format == t.format and checked.values is A.data


def test_compressed_intake_with_slack_is_sliced_not_copied() -> None:
    A = _csr()
    nnz = A.nnz
    A.indices = np.concatenate([A.indices, np.array([7, 7], dtype=A.indices.dtype)])
    A.data = np.concatenate([A.data, [1.0, 2.0]])
    t = ust.asarray(A)
    assert t.crd(1).shape[0] == nnz and np.shares_memory(t.crd(1), A.indices)
    assert t.values.shape[0] == nnz and np.shares_memory(t.values, A.data)


def test_unsorted_and_duplicate_rows_keep_their_labels() -> None:
    A = sp.csr_array(
        (np.ones(3), np.array([2, 0, 0], dtype=np.int32), np.array([0, 2, 3], dtype=np.int32)),
        shape=(2, 3),
    )
    t = ust.asarray(A)
    assert t.format != ust.format("CSR")  # nonordered level
    np.testing.assert_array_equal(t.todense(), A.toarray())
    D = sp.csr_array(
        (np.ones(3), np.array([0, 0, 1], dtype=np.int32), np.array([0, 2, 3], dtype=np.int32)),
        shape=(2, 3),
    )
    D.has_sorted_indices = True
    td = ust.asarray(D)
    assert td.format != ust.format("CSR")  # nonunique
    np.testing.assert_array_equal(td.todense(), D.toarray())


@pytest.mark.parametrize("canonical", [True, False])
def test_coo_intake_shares_the_buffers(canonical: bool) -> None:
    C = _csr().tocoo()
    if not canonical:
        C = sp.coo_array((C.data, C.coords), shape=C.shape)
        C.has_canonical_format = False
    t = ust.asarray(C)
    assert t.crd(0) is C.coords[0] and t.crd(1) is C.coords[1] and t.values is C.data
    np.testing.assert_array_equal(t.todense(), C.toarray())


def _hostile_csr() -> sp.csr_array:
    return sp.csr_array(
        (np.ones(3), np.array([0, 1, 2], dtype=np.int32), np.array([0, 1, 3], dtype=np.int32)),
        shape=(2, 3),
    )


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda A: A.indices.__setitem__(0, 3), ShapeError),  # out of bounds
        (lambda A: A.indices.__setitem__(0, -1), ShapeError),  # negative
        (lambda A: setattr(A, "indptr", np.array([0, 4, 3], dtype=np.int32)), (ShapeError, FormatError)),
        (lambda A: setattr(A, "indptr", np.array([1, 2, 3], dtype=np.int32)), FormatError),
        (lambda A: setattr(A, "indptr", np.array([0, 1, 9], dtype=np.int32)), ShapeError),
        (lambda A: setattr(A, "indices", A.indices.astype(np.float64)), UnsupportedError),
        (lambda A: setattr(A, "indices", A.indices.astype(np.int16)), None),  # widened, fine
        (lambda A: setattr(A, "data", A.data.astype(np.float16)), UnsupportedError),
    ],
)
def test_hostile_csr_still_raises_ust_errors(mutate: Any, error: Any) -> None:
    A = _hostile_csr()
    mutate(A)
    if error is None:
        np.testing.assert_array_equal(ust.asarray(A).todense(), A.toarray())
        return
    with pytest.raises(error):
        ust.asarray(A)


def test_hostile_coo_still_raises_ust_errors() -> None:
    C = _csr().tocoo()
    C.coords[1][0] = C.shape[1]
    with pytest.raises(ShapeError):
        ust.asarray(C)
    C.coords[1][0] = -5
    with pytest.raises(ShapeError):
        ust.asarray(C)


def test_full_check_on_request_verifies_scipys_flags() -> None:
    A = sp.csr_array(
        (np.ones(2), np.array([1, 0], dtype=np.int32), np.array([0, 2, 2], dtype=np.int32)), shape=(2, 2)
    )
    A.has_sorted_indices = True
    A.has_canonical_format = True  # a lie: the trusted path believes it, the full check does not
    assert ust.asarray(A).format == ust.format("CSR")
    with pytest.raises(FormatError):
        ust.asarray(A, check="full")
    with pytest.raises(UnsupportedError):
        ust.asarray(A, check="everything")


def test_raw_buffers_are_always_checked() -> None:
    with pytest.raises(ShapeError):
        ust.Tensor(
            (2, 2),
            "CSR",
            np.ones(1),
            pos={1: np.array([0, 1, 1], dtype=np.int32)},
            crd={1: np.array([5], dtype=np.int32)},
        )


# ------------------------------------------------------------------------ probe cache

needs_cc = pytest.mark.skipif(toolchain() is None, reason="needs a C compiler")

_CHILD = (
    "import logging, sys\n"
    "logging.basicConfig(stream=sys.stderr, level=logging.INFO)\n"
    "from ust.backends.generated import compile_c\n"
    "tc = compile_c.toolchain()\n"
    "print(compile_c.probe_compiles, compile_c.version_runs, ' '.join(tc.flags) if tc else None)\n"
)


def _child(root: Path, **env_extra: str) -> tuple[int, str, str]:
    n, _, flags, log = _child_runs(root, **env_extra)
    return n, flags, log


def _child_runs(root: Path, **env_extra: str) -> tuple[int, int, str, str]:
    """(test compiles, ``cc --version`` runs, flags, log) of a new process's toolchain lookup."""
    env = dict(os.environ, UST_CACHE_DIR=str(root), **env_extra)
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    n, versions, flags = r.stdout.split(maxsplit=2)
    return int(n), int(versions), flags.strip(), r.stderr


def _probe_entries(root: Path) -> list[Path]:
    return sorted((root / "c").glob("*.probe"))


@needs_cc
def test_probe_is_cached_for_the_next_process(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    n1, flags1, _ = _child(root)
    assert n1 >= 1
    if "-fopenmp" not in flags1.split():
        pytest.skip("no OpenMP: a degraded probe is not cached")
    assert len(_probe_entries(root)) == 1
    n2, flags2, log2 = _child(root)
    assert n2 == 0 and flags2 == flags1
    assert "cached result used" in log2


@needs_cc
def test_tampered_probe_entry_is_ignored_and_reprobed(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _, flags1, _ = _child(root)
    if "-fopenmp" not in flags1.split():
        pytest.skip("no OpenMP: a degraded probe is not cached")
    (entry,) = _probe_entries(root)
    entry.write_bytes(b"garbage, not an authenticated entry")
    n, flags, log = _child(root)
    assert n >= 1 and flags == flags1
    assert "refusing a cache entry" in log
    n3, _, _ = _child(root)  # re-stored after the new probe
    assert n3 == 0


@needs_cc
@pytest.mark.skipif(os.name == "nt", reason="POSIX modes")
def test_probe_cache_refused_in_a_directory_others_can_write(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _, flags1, _ = _child(root)
    if "-fopenmp" not in flags1.split():
        pytest.skip("no OpenMP: a degraded probe is not cached")
    root.chmod(0o777)
    try:
        n, _, log = _child(root)
        assert n >= 1
        assert "not using the kernel cache" in log
    finally:
        root.chmod(0o700)


@needs_cc
def test_compiler_version_is_asked_once_per_binary(tmp_path: Path) -> None:
    """A new process reads ``cc --version``'s answer from the cache while the compiler binary is
    unchanged (no subprocess), asks again when the binary changes or the entry is tampered."""
    root = tmp_path / "cache"
    real = toolchain()
    assert real is not None
    cc = tmp_path / "mycc"
    cc.write_text(f'#!/bin/sh\nexec "{real.cc}" "$@"\n')
    cc.chmod(0o755)
    _, v1, flags1, _ = _child_runs(root, UST_CC=str(cc))
    assert v1 == 1
    _, v2, flags2, _ = _child_runs(root, UST_CC=str(cc))
    assert v2 == 0 and flags2 == flags1
    (entry,) = sorted((root / "c").glob("*.ccversion"))
    entry.write_bytes(b"not an authenticated entry")
    _, v3, _, log3 = _child_runs(root, UST_CC=str(cc))
    assert v3 == 1 and "refusing a cache entry" in log3
    cc.write_text(f'#!/bin/sh\n# another build\nexec "{real.cc}" "$@"\n')  # a changed binary
    _, v4, _, _ = _child_runs(root, UST_CC=str(cc))
    assert v4 == 1


# ------------------------------------------------------------------------ one-shot paths (issue 18, item 4)


def _pair(kind: str = "csr", itype: type = np.int32, dtype: type = np.float64) -> tuple[Any, Any]:
    a, b = (_csr(30, itype, seed).astype(dtype) for seed in (1, 2))
    if np.dtype(dtype).kind == "c":
        a, b = a * (1 + 2j), b * (2 - 1j)
    if kind == "csc":
        a, b = sp.csc_array(a), sp.csc_array(b)
    return a, b


@pytest.mark.parametrize("op", ["add", "subtract", "multiply"])
@pytest.mark.parametrize(
    ("kind", "itype", "dtype"),
    [("csr", np.int32, np.float64), ("csc", np.int64, np.complex128), ("csr", np.int64, np.float32)],
)
def test_scipy_pair_route_equals_scipy(op: str, kind: str, itype: type, dtype: type) -> None:
    from ust.algebra.elementwise import scipy_pair

    a, b = _pair(kind, itype, dtype)
    before = (a.data.copy(), a.indices.copy(), b.data.copy())
    hit = scipy_pair(op, a, b)
    assert hit is not None and hit[1].route == "scipy"
    want = {"add": a + b, "subtract": a - b, "multiply": a.multiply(b)}[op]
    got = getattr(ust.ops, op)(a, b)
    assert got.format == ust.format(kind.upper())
    np.testing.assert_array_equal(got.to_scipy().toarray(), want.toarray())
    assert np.array_equal(a.data, before[0]) and np.array_equal(a.indices, before[1])
    assert np.array_equal(b.data, before[2])


def test_scipy_pair_leaves_other_operands_to_the_general_path() -> None:
    from ust.algebra.elementwise import scipy_pair

    a, b = _pair()
    assert scipy_pair("add", a, sp.csc_array(b)) is None  # mixed layouts
    assert scipy_pair("add", a, b[:-1]) is None  # shapes differ: the general path raises
    with pytest.raises(ShapeError):
        ust.ops.add(a, b[:-1])
    u = sp.csr_array((np.array([1.0, 2.0]), np.array([1, 0]), np.array([0, 2, 2])), shape=(2, 2))
    assert scipy_pair("add", u, u) is None  # unsorted: labelled and planned by the general path
    np.testing.assert_array_equal(ust.ops.add(u, u).todense(), (u + u).toarray())
    assert scipy_pair("add", a.astype(bool), b.astype(bool)) is None


def test_compressed_export_is_a_valid_scipy_array() -> None:
    for itype in (np.int32, np.int64):
        a = _csr(40, itype)
        for t in (ust.asarray(a), ust.asarray(a).convert("CSC")):
            s = t.to_scipy()
            assert s.indices is t.crd(1) and s.data is t.values and s.has_canonical_format
            s.check_format(full_check=True)
            assert s.indices.dtype == np.dtype(itype)
            np.testing.assert_array_equal(s.toarray(), a.toarray())
            np.testing.assert_allclose((s @ s.T).toarray(), (a @ a.T).toarray())


def test_one_shot_cache_hit_returns_a_fresh_result_each_call() -> None:
    a = _csr(50)
    x = np.arange(a.shape[1], dtype=np.float64)
    first = ust.matmul(a, x)
    second = ust.matmul(a, x)
    assert first is not second and not np.shares_memory(first, second)
    np.testing.assert_allclose(second, a @ x)
    x2 = x[::-1].copy()  # another array of the same shape: the cached plan runs on it
    np.testing.assert_allclose(ust.matmul(a, x2), a @ x2)
    c = np.ones(a.shape[0])
    for _ in range(2):
        np.testing.assert_allclose(ust.matmul(a, x, c, alpha=2.0, beta=0.5), 2 * (a @ x) + 0.5 * c)
    xi = np.arange(a.shape[1])  # an integer B is cast once per call, as planned
    for _ in range(2):
        np.testing.assert_allclose(ust.matmul(a, xi), a @ xi.astype(np.float64))


def test_format_hash_and_bounds_caches_survive_pickling() -> None:
    import pickle

    f = ust.format("BSR[2,3]")
    assert f.lvl_bounds((4, 6)) == ((0, 2), (0, 2), (0, 2), (0, 3))
    g = pickle.loads(pickle.dumps(f))
    assert "_bounds" not in vars(g) and "_hash" not in vars(g)
    assert g == f and hash(g) == hash(f)
    with pytest.raises(FormatError):
        f.lvl_bounds((3, 6))


def test_superlu_pattern_symmetry_and_norm_without_sparse_temporaries() -> None:
    from ust.backends.cpu.superlu import _inf_norm, pattern_is_symmetric

    for seed in range(4):
        m = sp.csr_matrix(sp.random_array((40, 40), density=0.1, format="csr", rng=seed)) * (1 + 1j)
        for a in (m, (m + m.T).tocsr()):
            p = a.copy()
            p.data = np.ones_like(p.data, dtype=np.int8)
            assert pattern_is_symmetric(a) == bool((p != p.T).nnz == 0)
            assert np.isclose(_inf_norm(a), float(abs(a).sum(axis=1).max()))
