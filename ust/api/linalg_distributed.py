"""Bookkeeping for cuDSS's distributed modes: device lists, row blocks, gathering solutions.

cuDSS spreads a system over GPUs two ways.  MG mode (one process, several GPUs of one host) takes
the whole matrix on the first device and spreads the factorisation itself: ust only validates
``options={"devices": [...]}`` and reports, from the analysis's memory estimate, how the work
lands on the devices.  MGMN mode (one process per GPU, over MPI or NCCL) takes a 1-D row
distribution: rank ``r`` passes rows ``offsets[r] : offsets[r + 1]`` of A, b and x, with
*global* column indices and *local* row offsets.  Everything here is NumPy only, so the
bookkeeping is tested without a GPU; the GPU calls live in ``ust.backends.cuda.cudss_mg``.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ust.runtime.errors import DeviceError, InvalidValueError, ShapeError, UnsupportedError
from ust.runtime.log import get_logger

__all__ = [
    "RowBlock",
    "SpreadReport",
    "devices_execution",
    "gather_rows",
    "merge_blocks",
    "parse_devices",
    "row_offsets",
    "split_csr",
    "split_rows",
    "spread_report",
    "validate_row_ranges",
]

_log = get_logger("linalg_distributed")

#: How rows are shared among ranks: equal row counts, or equal nonzero counts (the factorisation's
#: cost follows the nonzeros more than the rows for irregular matrices).
BALANCE = ("rows", "nnz")


# ------------------------------------------------------------------------------------- devices


def parse_devices(devices: Any, available: int | None = None) -> tuple[int, ...]:
    """``devices`` as a tuple of distinct non-negative ints (checked against ``available`` when given)."""
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence | np.ndarray):
        raise InvalidValueError(
            f"devices must be a list of GPU indices such as [0, 1], not {type(devices).__name__} {devices!r}"
        )
    out: list[int] = []
    for d in devices:
        if isinstance(d, (bool, np.bool_)):
            raise InvalidValueError(f"devices must hold GPU indices (ints), not {d!r}")
        try:
            index = operator.index(d)
        except TypeError:
            raise InvalidValueError(f"devices must hold GPU indices (ints), not {d!r}") from None
        if index < 0:
            raise InvalidValueError(f"devices must hold non-negative GPU indices, not {index}")
        out.append(int(index))
    if not out:
        raise InvalidValueError("devices must name at least one GPU, e.g. [0] or [0, 1]")
    dup = sorted({d for d in out if out.count(d) > 1})
    if dup:
        raise InvalidValueError(f"devices lists GPU {', '.join(map(str, dup))} more than once: {out}")
    if available is not None:
        missing = [d for d in out if d >= available]
        if missing:
            raise DeviceError(
                f"devices {out} names GPU {', '.join(map(str, missing))}, but this process sees "
                f"{available} CUDA device(s) (indices 0..{available - 1}; CUDA_VISIBLE_DEVICES renumbers them)"
            )
    return tuple(out)


def devices_execution(devices: tuple[int, ...] | None, execution: Any) -> Any:
    """The ``execution`` that a device list implies: ``"cuda:<first>"`` (the MG mode's data device).

    An explicit ``execution`` must agree: "cuda" or "cuda:<first>"; "cpu" or another device is an error.
    """
    if devices is None:
        return execution
    first = f"cuda:{devices[0]}"
    if execution is None or execution in ("cuda", first):
        return first
    spec = getattr(execution, "device_id", None)
    if getattr(execution, "is_cuda", False) and spec in (None, devices[0]):
        return execution
    raise InvalidValueError(
        f"options devices={list(devices)} runs on GPU {devices[0]} (the first listed), "
        f"but execution={execution!r} asks for another place; drop execution= or pass {first!r}"
    )


# ------------------------------------------------------------------------------------- row blocks


def row_offsets(indptr: Any, nranks: int, balance: str = "nnz") -> np.ndarray:
    """``nranks + 1`` row offsets that split a CSR matrix into contiguous row blocks.

    ``balance="rows"``: near-equal row counts; ``"nnz"``: near-equal nonzero counts (a block may be
    empty when one row holds most nonzeros; cuDSS accepts empty blocks).
    """
    if isinstance(nranks, bool) or not isinstance(nranks, (int, np.integer)) or nranks < 1:
        raise InvalidValueError(f"the number of ranks must be a positive int, not {nranks!r}")
    if balance not in BALANCE:
        raise UnsupportedError(f"balance={balance!r} is not supported; supported: {', '.join(BALANCE)}")
    ip = np.asarray(indptr)
    if ip.ndim != 1 or ip.size < 1:
        raise ShapeError(f"indptr must be a 1-D array of n + 1 offsets; got shape {ip.shape}")
    n = ip.size - 1
    k = np.arange(nranks + 1, dtype=np.int64)
    if balance == "rows":
        return (k * n) // nranks
    nnz = int(ip[-1]) - int(ip[0])
    targets = int(ip[0]) + (k * nnz) // nranks
    out = np.searchsorted(ip, targets, side="left").astype(np.int64)
    out[0], out[-1] = 0, n
    return np.maximum.accumulate(np.minimum(out, n))


def validate_row_ranges(ranges: Sequence[tuple[int, int]], n: int) -> np.ndarray:
    """Offsets from each rank's ``(first_row, last_row)`` (inclusive, as cuDSS takes them).

    The ranges, in rank order, must tile ``0 .. n-1`` without gaps or overlaps; an empty block is
    ``(first, first - 1)``.
    """
    r = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    if r.shape[0] < 1:
        raise ShapeError("no row ranges given")
    first, last = r[:, 0], r[:, 1]
    bad = np.flatnonzero((last < first - 1) | (first < 0) | (last >= n))
    if bad.size:
        i = int(bad[0])
        raise ShapeError(f"rank {i}: row range ({int(first[i])}, {int(last[i])}) is not within 0..{n - 1}")
    offsets = np.concatenate([first, [last[-1] + 1]])
    gaps = np.flatnonzero(first[1:] != last[:-1] + 1)
    if first[0] != 0 or offsets[-1] != n or gaps.size:
        where = f"between rank {int(gaps[0])} and rank {int(gaps[0]) + 1}" if gaps.size else "at the ends"
        raise ShapeError(
            f"the ranks' row ranges must cover rows 0..{n - 1} in rank order without gaps or overlaps; "
            f"they do not {where}: {[tuple(map(int, x)) for x in r]}"
        )
    return offsets


def _check_offsets(offsets: Any, n: int) -> np.ndarray:
    off = np.asarray(offsets, dtype=np.int64)
    if off.ndim != 1 or off.size < 2 or off[0] != 0 or off[-1] != n or bool(np.any(np.diff(off) < 0)):
        raise ShapeError(f"row offsets must rise from 0 to n = {n}; got {off.tolist()}")
    return off


@dataclass(frozen=True)
class RowBlock:
    """One rank's rows of a CSR matrix: local row offsets (from 0), global column indices.

    ``first_row`` / ``last_row`` are inclusive (cuDSS's ``cudssMatrixSetDistributionRow1d``);
    an empty block has ``last_row == first_row - 1``.
    """

    rank: int
    first_row: int
    last_row: int
    n: int
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    @property
    def nrows(self) -> int:
        return self.last_row - self.first_row + 1

    @property
    def nnz(self) -> int:
        return int(self.indices.size)


def split_csr(indptr: Any, indices: Any, data: Any, offsets: Any) -> list[RowBlock]:
    """Row blocks of a CSR matrix at ``offsets`` (indices/data are copies; the caller's arrays are kept)."""
    ip = np.asarray(indptr)
    n = ip.size - 1
    off = _check_offsets(offsets, n)
    idx, val = np.asarray(indices), np.asarray(data)
    if idx.shape != val.shape or idx.ndim != 1 or idx.size != int(ip[-1]) - int(ip[0]):
        raise ShapeError(
            f"indices ({idx.shape}) and data ({val.shape}) must be 1-D with indptr[-1] - indptr[0] entries"
        )
    base = int(ip[0])
    blocks = []
    for rank in range(off.size - 1):  # one slice per rank: a loop over ranks, not rows
        lo, hi = int(off[rank]), int(off[rank + 1])
        s, e = int(ip[lo]) - base, int(ip[hi]) - base
        local = (ip[lo : hi + 1] - ip[lo]).astype(ip.dtype, copy=True)
        blocks.append(RowBlock(rank, lo, hi - 1, n, local, idx[s:e].copy(), val[s:e].copy()))
    return blocks


def merge_blocks(blocks: Sequence[RowBlock]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The global CSR ``(indptr, indices, data)`` from row blocks in rank order (inverse of split_csr)."""
    if not blocks:
        raise ShapeError("no row blocks to merge")
    n = blocks[0].n
    validate_row_ranges([(b.first_row, b.last_row) for b in blocks], n)
    counts = np.concatenate([np.diff(b.indptr) for b in blocks])
    indptr = np.zeros(n + 1, dtype=np.result_type(*(b.indptr.dtype for b in blocks)))
    np.cumsum(counts, out=indptr[1:])
    return indptr, np.concatenate([b.indices for b in blocks]), np.concatenate([b.data for b in blocks])


def split_rows(x: Any, offsets: Any) -> list[np.ndarray]:
    """Rows ``offsets[r]:offsets[r+1]`` of a vector or (n, k) matrix, one copy per rank."""
    arr = np.asarray(x)
    off = _check_offsets(offsets, arr.shape[0] if arr.ndim else -1)
    return [arr[int(off[r]) : int(off[r + 1])].copy() for r in range(off.size - 1)]


def gather_rows(parts: Sequence[Any], offsets: Any) -> np.ndarray:
    """The global vector / matrix from per-rank row blocks (checked against ``offsets``)."""
    off = np.asarray(offsets, dtype=np.int64)
    if len(parts) != off.size - 1:
        raise ShapeError(f"{len(parts)} parts for {off.size - 1} ranks")
    sizes = [int(np.asarray(p).shape[0]) for p in parts]
    want = np.diff(off).tolist()
    if sizes != want:
        raise ShapeError(f"the parts have {sizes} rows; the row offsets {off.tolist()} want {want}")
    return np.concatenate([np.asarray(p) for p in parts], axis=0)


# ------------------------------------------------------------------------------------- MG spread


@dataclass(frozen=True)
class SpreadReport:
    """How an MG-mode plan lands on the devices, from cuDSS's memory estimate after analysis."""

    devices: tuple[int, ...]
    peak_device_bytes: int
    per_device_bytes: int
    free_bytes: dict[int, int]
    fits: bool
    message: str


def spread_report(
    devices: Sequence[int], estimates: Mapping[str, int] | None, free_bytes: Mapping[int, int], hybrid: bool
) -> SpreadReport:
    """Share of the estimated peak device memory per GPU, against each GPU's free memory.

    cuDSS's MG mode splits the factors over the devices; ``peak_device_memory / len(devices)``
    is the even share.  When a share does not fit and hybrid memory is off, the message says so
    (hybrid mode must be chosen before analysis: ``hybrid_memory=True``).
    """
    devs = tuple(devices)
    peak = int((estimates or {}).get("peak_device_memory", 0))
    share = -(-peak // len(devs)) if peak else 0
    tight = [d for d in devs if share > int(free_bytes.get(d, 0))]
    fits = not tight
    gib = 2.0**30
    free_txt = ", ".join(f"GPU {d}: {free_bytes.get(d, 0) / gib:.2f} GiB free" for d in devs)
    msg = (
        f"MG mode over GPUs {list(devs)} (data on GPU {devs[0]}): estimated peak device memory "
        f"{peak / gib:.2f} GiB in all, about {share / gib:.2f} GiB per GPU ({free_txt})"
    )
    if not peak:
        msg += "; cuDSS gave no memory estimate"
    elif not fits and hybrid:
        msg += f"; GPU(s) {tight} are short, hybrid host/device memory will hold the rest"
    elif not fits:
        msg += (
            f"; GPU(s) {tight} are short of memory: factorisation may fail with ALLOC_FAILED -- "
            "pass hybrid_memory=True (set before analysis) to keep part of the factors in host memory"
        )
    return SpreadReport(devs, peak, share, {d: int(free_bytes.get(d, 0)) for d in devs}, fits, msg)


# ------------------------------------------------------------------------------------- MGMN route


def solve_row_block(
    indptr: Any,
    indices: Any,
    data: Any,
    b: Any,
    *,
    n: int,
    first_row: int,
    comm: Any,
    layer: str = "openmpi",
    nccl_comm_address: int | None = None,
    matrix_type: str = "general",
    matrix_view: str = "full",
    device_id: int | None = None,
    check: bool = True,
) -> Any:
    """Solve a system distributed by rows over the ranks of ``comm`` (mpi4py) with cuDSS's MGMN mode.

    Each rank passes its rows ``first_row ..`` of A (local ``indptr`` from 0, global column
    ``indices``) and of ``b``; it gets back its rows of x (NumPy in, NumPy out; CuPy in, CuPy
    out).  ``layer="nccl"`` needs ``nccl_comm_address``, the address of an ``ncclComm_t``.
    Collective: every rank calls it.  The backward error is checked across ranks.
    """
    from ust.backends.cuda.cudss_mg import CudssDistributedFactorization
    from ust.runtime.errors import SingularMatrixError, SolverAccuracyError
    from ust.runtime.xp import import_cupy

    cupy = import_cupy()

    ip = np.asarray(indptr.get() if hasattr(indptr, "get") else indptr)
    nloc = ip.size - 1
    ranges = comm.allgather((int(first_row), int(first_row) + nloc - 1))
    validate_row_ranges(ranges, n)
    if layer == "nccl" and nccl_comm_address is None:
        raise InvalidValueError("layer='nccl' needs nccl_comm_address (the address of an ncclComm_t)")
    on_gpu = hasattr(b, "get")
    dev = device_id if device_id is not None else comm.Get_rank() % cupy.cuda.runtime.getDeviceCount()
    nnz = comm.allreduce(int(ip[-1] - ip[0]))
    mpi_addr = _mpi_comm_address(comm)
    with cupy.cuda.Device(dev):
        dtype = np.result_type(
            np.asarray(data[:0]).dtype if not hasattr(data, "get") else data.dtype, b.dtype
        )
        d_ip = cupy.asarray(ip - ip[0], dtype=np.int32)
        d_ix = cupy.asarray(indices, dtype=np.int32)
        d_va = cupy.asarray(data, dtype=dtype)
        d_b = cupy.array(cupy.asarray(b).reshape(nloc, -1), dtype=dtype, order="F", copy=True)
        d_x = cupy.zeros_like(d_b, order="F")
        stream = cupy.cuda.get_current_stream().ptr
        engine = CudssDistributedFactorization(
            d_ip, d_ix, d_va, n, nnz=nnz, first_row=int(first_row), last_row=int(first_row) + nloc - 1,
            layer=layer, comm_device=nccl_comm_address if nccl_comm_address is not None and layer == "nccl" else mpi_addr,
            comm_host=mpi_addr, matrix_type=matrix_type, matrix_view=matrix_view, config={},
            device_id=dev, stream=stream,
        )  # fmt: skip
        try:
            engine.set_rhs(d_b, d_x)
            for phase in ("analysis", "factorization", "solve"):
                engine.execute(phase)
                cupy.cuda.runtime.streamSynchronize(stream)
                info = engine.info()
                if info != 0:
                    raise SingularMatrixError(
                        f"cuDSS MGMN {phase} reports info = {info} on rank {comm.Get_rank()}"
                    )
        finally:
            engine.free()
        x_loc = d_x.get()
    if check:
        be = _distributed_backward_error(ip, indices, data, b, x_loc, n, comm)
        tol = float(np.finfo(dtype).eps ** (2.0 / 3.0))
        if not be <= tol:
            raise SolverAccuracyError(
                f"MGMN solution: backward error {be:.3e} above {tol:.1e}", backward_error=be
            )
    x_loc = x_loc.reshape(np.shape(b))
    return cupy.asarray(x_loc) if on_gpu else x_loc


def _mpi_comm_address(comm: Any) -> int:
    """Address of the ``MPI_Comm`` inside an mpi4py communicator (what CUDSS_DATA_COMM_* takes)."""
    from mpi4py import MPI

    return int(MPI._addressof(comm))


def _distributed_backward_error(
    ip: Any, indices: Any, data: Any, b: Any, x_loc: Any, n: int, comm: Any
) -> float:
    """``max ||b - A x||_inf / (||A||_inf ||x||_inf + ||b||_inf)`` over all ranks (x gathered on the host)."""
    import scipy.sparse as sp

    host = [np.asarray(v.get() if hasattr(v, "get") else v) for v in (data, indices, b)]
    a_loc = sp.csr_matrix((host[0], host[1], ip - ip[0]), shape=(ip.size - 1, n))
    x_full = np.concatenate(comm.allgather(x_loc), axis=0)
    r = host[2].reshape(x_loc.shape) - a_loc @ x_full
    local = (
        float(abs(r).max(initial=0.0)),
        float(abs(a_loc).sum(axis=1).max(initial=0.0)),
        float(abs(host[2]).max(initial=0.0)),
    )
    num, norm_a, norm_b = (comm.allreduce(v, op=_mpi_max()) for v in local)
    den = norm_a * float(abs(x_full).max(initial=0.0)) + norm_b
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def _mpi_max() -> Any:
    from mpi4py import MPI

    return MPI.MAX
