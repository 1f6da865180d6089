"""Format conversion: ust's routes and its general path, side by side with SciPy / CuPy.

Matrices: the 7-point 3-D Poisson matrix (all ordered pairs of CSR, COO, CSC, BSR[2,2],
DIA, DCSC) and a random matrix with 8 nonzeros per row (CSR, COO, CSC, DCSC: no DIA/BSR).
Each row gives ns per source nonzero for ``Tensor.convert`` (the route ust picks), for the
general path forced (``route="general"``), and for the library's own conversion where it has
one (scipy on the CPU, cupyx/cuSPARSE on the GPU), run in the same process, with the ratio.

    python -m benchmarks.bench_convert [--device cpu|cuda] [--n N] [--write]

``--n`` is the Poisson grid side (n^3 rows, ~7 n^3 nonzeros; default 90 on the CPU,
>= 5 M nonzeros, and 196 on the GPU, >= 50 M); the random matrix gets as many nonzeros.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import ust.formats as F
from benchmarks.common import append_results, markdown, poisson3d, random_rows, time_gpu, time_round_robin
from ust.convert import asarray
from ust.convert.routes import convert, explain_route

POISSON_FORMATS = ["CSR", "COO", "CSC", "BSR[2,2]", "DIA", "DCSC"]
RANDOM_FORMATS = ["CSR", "COO", "CSC", "DCSC"]
#: Column-major COO: what scipy's / CuPy's ``csc.tocoo()`` return (canonical COO is row-major).
COLUMN_COO = "(i, j) -> (j : compressed(nonunique), i : singleton)"
COLUMN_COO_LABEL = "COO (column-major)"


def _scipy_conversion(src: str, dst: str) -> Callable[[Any], Any] | None:
    """scipy's own conversion between two scipy layouts (None where it has none)."""
    ops = {"CSR": "tocsr", "CSC": "tocsc", "COO": "tocoo", "DIA": "todia"}
    if src == "DCSC" or dst == "DCSC":
        return None
    if dst == "BSR[2,2]":
        return lambda a: a.tobsr((2, 2))
    return lambda a, op=ops[dst]: getattr(a, op)()


def _scipy_canonical(src: str, dst: str) -> Callable[[Any], Any] | None:
    """scipy's way to the same *canonical* buffers where its plain call leaves them
    unsorted (tobsr leaves blocks unsorted; csc/bsr/dia.tocoo are not in row order)."""
    if src == "DCSC" or dst == "DCSC":
        return None
    if dst == "BSR[2,2]":

        def bsr(a: Any) -> Any:
            b = a.tobsr((2, 2))
            b.sort_indices()
            return b

        return bsr
    if dst == "COO" and src in ("CSC", "BSR[2,2]", "DIA"):
        return lambda a: a.tocsr().tocoo()
    return None


def _cupyx_canonical(src: str, dst: str) -> Callable[[Any], Any] | None:
    """CuPy's way to canonical (row-ordered) COO from CSC: its csc.tocoo is column-ordered."""
    if src == "CSC" and dst == "COO":
        return lambda a: a.tocsr().tocoo()
    return None


def _route_label(text: str) -> str:
    return text.split(" ")[0]  # library / general / direct / staged


def _cupyx_conversion(src: str, dst: str) -> Callable[[Any], Any] | None:
    ops = {"CSR": "tocsr", "CSC": "tocsc", "COO": "tocoo"}
    if src not in ("CSR", "CSC", "COO", "DIA") or dst not in ops or src == dst:
        return None
    if src == "DIA" and dst == "COO":
        return None
    return lambda a, op=ops[dst]: getattr(a, op)()


def _library_object(t: Any, name: str, device: str) -> Any:
    if name == "DCSC":
        return None
    if device == "cpu":
        return t.to_scipy()
    if name in ("CSR", "CSC", "COO", "DIA"):
        return t.to_cupyx()
    return None


def time_gpu_all(fns: dict[str, Callable[[], Any]], repeat: int = 5, warmup: int = 1) -> dict[str, float]:
    """Median GPU seconds of each function (CUDA events, see benchmarks.common.time_gpu)."""
    return {name: time_gpu(fn, repeat=repeat, warmup=warmup) for name, fn in fns.items()}


def run(device: str, n: int, repeat: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    timer = time_round_robin if device == "cpu" else time_gpu_all
    kw = {"repeat": repeat, "warmup": 1}
    for label, matrix, names in (
        ("poisson", poisson3d(n), POISSON_FORMATS),
        ("random8", None, RANDOM_FORMATS),
    ):
        if matrix is None:
            nnz_target = poisson3d_nnz(n)
            matrix = random_rows(max(1, -(-nnz_target // 8)))
        nnz = int(matrix.nnz)
        tensors = {f: asarray(matrix, f, device=None if device == "cpu" else "cuda") for f in names}
        lib = {f: _library_object(tensors[f], f, device) for f in names}
        pairs = [(s, d) for s in names for d in names if s != d]
        if "CSC" in names:
            pairs.append(("CSC", COLUMN_COO_LABEL))
        for src, dst in pairs:
            t = tensors[src]
            fmt = F.format(COLUMN_COO if dst == COLUMN_COO_LABEL else dst)
            if dst == COLUMN_COO_LABEL:  # the same buffers as the libraries' csc.tocoo()
                base = lambda a: a.tocoo()  # noqa: E731
            else:
                base = _scipy_conversion(src, dst) if device == "cpu" else _cupyx_conversion(src, dst)
            canon = (_scipy_canonical if device == "cpu" else _cupyx_canonical)(src, dst)
            fns: dict[str, Callable[[], Any]] = {
                "ust": lambda t=t, fmt=fmt: t.convert(fmt),
                "general": lambda t=t, fmt=fmt: convert(t, fmt, route="general"),
            }
            if base is not None and lib[src] is not None:
                fns["lib"] = lambda a=lib[src], base=base: base(a)
                if canon is not None:
                    fns["canon"] = lambda a=lib[src], canon=canon: canon(a)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                times = timer(fns, **kw)
            t_ust, t_gen = times["ust"], times["general"]
            t_lib, t_can = times.get("lib"), times.get("canon")
            route = _route_label(explain_route(t, fmt))
            rows.append(
                {
                    "matrix": f"{label} ({nnz / 1e6:.2f} M nnz)",
                    "conversion": f"{src} -> {dst}",
                    "ust route": route,
                    "ust ns/nnz": 1e9 * t_ust / nnz,
                    "general ns/nnz": 1e9 * t_gen / nnz,
                    "library ns/nnz": None if t_lib is None else 1e9 * t_lib / nnz,
                    "ust / library": None if t_lib is None else t_ust / t_lib,
                    "library canonical ns/nnz": None if t_can is None else 1e9 * t_can / nnz,
                    "ust / canonical": None if t_can is None else t_ust / t_can,
                }
            )
            print(
                f"{label:8s} {src:>8s} -> {dst:<8s} ust {1e9 * t_ust / nnz:7.2f}  general "
                f"{1e9 * t_gen / nnz:7.2f}  library "
                f"{'-' if t_lib is None else f'{1e9 * t_lib / nnz:7.2f}'} ns/nnz",
                file=sys.stderr,
            )
    return rows


def poisson3d_nnz(n: int) -> int:
    return 7 * n**3 - 6 * n**2


COLUMNS = [
    "matrix",
    "conversion",
    "ust route",
    "ust ns/nnz",
    "general ns/nnz",
    "library ns/nnz",
    "ust / library",
    "library canonical ns/nnz",
    "ust / canonical",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--n", type=int, default=None, help="Poisson grid side (even: BSR[2,2] needs it)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = ap.parse_args(argv)
    n = args.n or (90 if args.device == "cpu" else 196)
    if n % 2:
        n += 1
    rows = run(args.device, n, args.repeat)
    lib_name = "SciPy" if args.device == "cpu" else "CuPy (cuSPARSE)"
    body = markdown(rows, COLUMNS)
    ratios = [r["ust / library"] for r in rows if r["ust / library"] is not None]
    if ratios:
        body += (
            f"\nust / {lib_name}: worst {max(ratios):.2f}x, median {float(np.median(ratios)):.2f}x over "
            f"{len(ratios)} pairs {lib_name} has; 'library' is {lib_name}'s own conversion in the same run.\n"
        )
    if args.device == "cpu":
        body += (
            "'library canonical': scipy's way to the same canonical buffers ust returns, where its "
            "plain call does not give them (tobsr leaves blocks unsorted: + sort_indices; "
            "csc/bsr/dia.tocoo are not in row order: tocsr().tocoo()). "
        )
    else:
        body += (
            "'library canonical': CuPy's way to the same canonical buffers ust returns where its plain "
            "call does not give them (csc.tocoo is column-ordered: tocsr().tocoo()). "
        )
    body += (
        f"'{COLUMN_COO_LABEL}' is `{COLUMN_COO}`, the layout the libraries' csc.tocoo() returns. "
        "'general': ust's general path forced (route='general'); 'ust': the route ust picks "
        "(library, general, direct = DIA -> CSR/CSC by masked compaction, staged = several steps).\n"
    )
    print(body)
    if args.write:
        title = "Conversion (CPU)" if args.device == "cpu" else "Conversion (GPU)"
        cmd = f"python -m benchmarks.bench_convert --device {args.device} --n {n} --write"
        append_results(title, cmd, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
