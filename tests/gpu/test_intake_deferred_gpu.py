"""The deferred checks of the trusted cupyx intake (issue 18: zero-copy intake in O(1) on the GPU).

A cupyx csr/csc whose cached flags say canonical is taken without touching the device; the
checks of ``indptr`` and ``indices`` (one kernel, one transfer) are owed and run by the first
read of the tensor's buffers.  Every route that reads them must raise ust's error before any
work -- never read out of bounds -- as the CPU's deferred SciPy intake does
(tests/test_intake_deferred.py), and entries that end before the arrays do are trimmed as the
checked path trims them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
csp = pytest.importorskip("cupyx.scipy.sparse")

import ust  # noqa: E402
from tests.test_intake_deferred import BAD as CPU_BAD  # noqa: E402
from tests.test_intake_deferred import N  # noqa: E402
from tests.test_intake_deferred import _canonical as _host  # noqa: E402  (a canonical SciPy csr/csc)
from tests.test_intake_deferred import _spoil as spoil_like_scipy  # noqa: E402
from ust.runtime.errors import FormatError, ShapeError  # noqa: E402


def _canonical(kind: str = "csr", seed: int = 0) -> Any:
    """A cupyx csr/csc whose flags cupyx has cached as canonical (the deferred path)."""
    H = _host(kind, seed)
    cls = csp.csr_matrix if kind == "csr" else csp.csc_matrix
    G = cls((cp.asarray(H.data), cp.asarray(H.indices), cp.asarray(H.indptr)), shape=H.shape)
    assert G.has_canonical_format  # cupyx probes once and caches the flag
    return G


def _spoil(G: Any, how: str) -> Any:
    """Change the buffers after cupyx cached its flags (they still say canonical): the CPU test's
    spoilings, and ``indptr`` ending past the arrays (SciPy's constructor refuses that one)."""
    if how == "indptr-past-the-end":
        G.indptr[-1] = G.indices.shape[0] + 5
        return G
    return spoil_like_scipy(G, how)


BAD = [*CPU_BAD, "indptr-past-the-end"]


def _x() -> Any:
    return cp.ones(N)


ROUTES: dict[str, Callable[[Any], Any]] = {
    "todense": lambda G: ust.asarray(G).todense(),
    "to_cupyx": lambda G: ust.asarray(G).to_cupyx(),
    # the transpose is queued on sanitized copies; the checks' answer is read by the first read
    "convert CSR <-> CSC": lambda G: ust.asarray(G).convert("CSC" if G.format == "csr" else "CSR").todense(),
    "convert CSR <-> CSC, pos": lambda G: (
        ust.asarray(G).convert("CSC" if G.format == "csr" else "CSR").pos(1)
    ),
    "convert CSR <-> CSC, nnz": lambda G: ust.asarray(G).convert("CSC" if G.format == "csr" else "CSR").nnz,
    "convert COO": lambda G: ust.asarray(G).convert("COO"),
    "convert DCSR": lambda G: ust.asarray(G).convert("DCSR"),
    "matmul(G, x)": lambda G: ust.matmul(G, _x()),
    "matmul(t, x)": lambda G: ust.matmul(ust.asarray(G), _x()),
    "Matmul.plan": lambda G: ust.Matmul(G, _x()).plan(),
    "t + t": lambda G: ust.asarray(G) + ust.asarray(G),
    "ops.multiply": lambda G: ust.ops.multiply(G, G),
    "ops.add(G, G)": lambda G: ust.ops.add(G, G),
    "ops.subtract(G, t)": lambda G: ust.ops.subtract(G, ust.asarray(G)),
    "t * t": lambda G: ust.asarray(G) * ust.asarray(G),
    "solve(G, b)": lambda G: ust.solve(G, _x()),
    "values": lambda G: ust.asarray(G).values,
    "nnz": lambda G: ust.asarray(G).nnz,
    "pos": lambda G: ust.asarray(G).pos(1),
    "bufs": lambda G: ust.asarray(G).bufs,
    "to host": lambda G: ust.asarray(G).to("cpu").todense(),
}


@pytest.mark.parametrize("kind", ["csr", "csc"])
@pytest.mark.parametrize("how", BAD)
@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_raises_ust_error_on_a_spoiled_intake(route: str, how: str, kind: str) -> None:
    G = _spoil(_canonical(kind), how)
    t = ust.asarray(G)  # O(1): nothing read from the device yet
    assert t.shape == (N, N)
    with pytest.raises((ShapeError, FormatError)):
        ROUTES[route](G)
    cp.cuda.Device().synchronize()  # no kernel read out of bounds (an illegal access would surface here)


@pytest.mark.parametrize("how", BAD)
def test_the_check_raises_every_time(how: str) -> None:
    t = ust.asarray(_spoil(_canonical(), how))
    for _ in range(2):  # a failed check is not remembered as passed
        with pytest.raises((ShapeError, FormatError)):
            t.todense()


@pytest.mark.parametrize("kind", ["csr", "csc"])
def test_sound_intake_is_exact_and_zero_copy(kind: str) -> None:
    G = _canonical(kind)
    t = ust.asarray(G)
    assert t.pos(1) is G.indptr and t.crd(1) is G.indices and t.values is G.data
    H = _host(kind)
    np.testing.assert_array_equal(cp.asnumpy(t.todense()), H.toarray())
    x = np.random.default_rng(1).random(N)
    np.testing.assert_allclose(cp.asnumpy(ust.matmul(G, cp.asarray(x))), H @ x, rtol=1e-12)


def test_entries_ending_before_the_arrays_are_trimmed_like_the_cpu() -> None:
    """``indptr[-1]`` below the arrays' length: the entries past it are not part of the matrix
    (SciPy's rule, which ust's CPU intake follows); the GPU intake trims them the same way."""
    H = _host()
    data = np.concatenate([H.data, [7.0, 9.0]])
    idx = np.concatenate([H.indices, [0, 1]]).astype(H.indices.dtype)
    cpu = ust.asarray(sp.csr_matrix((data, idx, H.indptr), shape=H.shape))
    G = csp.csr_matrix((cp.asarray(data), cp.asarray(idx), cp.asarray(H.indptr)), shape=H.shape)
    G._has_canonical_format = True  # what cupyx would cache: the deferred path
    t = ust.asarray(G)
    assert t.nnz == cpu.nnz == H.nnz
    assert t.values.shape == (H.nnz,) and t.crd(1).shape == (H.nnz,)
    np.testing.assert_array_equal(cp.asnumpy(t.todense()), cpu.todense())


def test_uncached_flags_are_checked_at_once() -> None:
    """Where cupyx has not cached its flags its own probe would read the index arrays: the intake
    checks them first and a spoiled matrix fails at ``asarray``."""
    H = _host()
    idx = H.indices.copy()
    idx[1] = 1 << 20
    G = csp.csr_matrix((cp.asarray(H.data), cp.asarray(idx), cp.asarray(H.indptr)), shape=H.shape)
    G.__dict__.pop("_has_canonical_format", None)
    with pytest.raises(ShapeError):
        ust.asarray(G)


@pytest.mark.parametrize("kind", ["csr", "csc"])
def test_transpose_of_a_deferred_intake_is_exact_and_owes_the_checks(kind: str) -> None:
    """CSR <-> CSC of an unchecked intake queues the checks and runs cuSPARSE on sanitized
    copies without a host synchronisation; the result owes the checks' answer (read at its first
    read) and holds exactly SciPy's buffers."""
    G = _canonical(kind)
    t = ust.asarray(G)
    out = t.convert("CSC" if kind == "csr" else "CSR")
    assert out._owed is not None and t._owed is not None  # nothing read back yet
    H = _host(kind)
    ref = H.tocsc() if kind == "csr" else H.tocsr()
    np.testing.assert_array_equal(cp.asnumpy(out.pos(1)), ref.indptr)
    np.testing.assert_array_equal(cp.asnumpy(out.crd(1)), ref.indices)
    np.testing.assert_array_equal(cp.asnumpy(out.values), ref.data)
    assert out._owed is None


@pytest.mark.parametrize("how", BAD)
def test_a_spoiled_transpose_raises_at_every_read(how: str) -> None:
    out = ust.asarray(_spoil(_canonical(), how)).convert("CSC")
    for _ in range(2):
        with pytest.raises((ShapeError, FormatError)):
            out.todense()
    cp.cuda.Device().synchronize()  # cuSPARSE read nothing out of bounds


def test_a_transpose_of_entries_ending_before_the_arrays_is_redone() -> None:
    H = _host()
    data = np.concatenate([H.data, [7.0, 9.0]])
    idx = np.concatenate([H.indices, [0, 1]]).astype(H.indices.dtype)
    G = csp.csr_matrix((cp.asarray(data), cp.asarray(idx), cp.asarray(H.indptr)), shape=H.shape)
    G._has_canonical_format = True
    out = ust.asarray(G).convert("CSC")
    ref = H.tocsc()
    assert out.nnz == H.nnz
    np.testing.assert_array_equal(cp.asnumpy(out.pos(1)), ref.indptr)
    np.testing.assert_array_equal(cp.asnumpy(out.crd(1)), ref.indices)
    np.testing.assert_array_equal(cp.asnumpy(out.values), ref.data)


@pytest.mark.parametrize("how", BAD)
def test_the_owed_answer_is_read_on_the_stream_that_computed_it(how: str) -> None:
    """The transpose runs on one non-blocking stream and its result is first read on another:
    the checks' answer is copied back on the stream that computed it (in order after the
    kernel), so a spoiled intake still raises."""
    G = _spoil(_canonical(), how)
    cp.cuda.Device().synchronize()
    first, second = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with first:
        out = ust.asarray(G).convert("CSC")
    with second, pytest.raises((ShapeError, FormatError)):
        out.pos(1)
    cp.cuda.Device().synchronize()
