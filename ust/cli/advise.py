"""``ust advise A.mtx``: which format runs an op fastest on a matrix file, and when converting pays.

Prints :func:`ust.advise`'s table (``--json``: its rows), and draws it with ``--plot PATH``.
Every argument is checked before the matrix is read.
"""

from __future__ import annotations

import argparse
import json

__all__ = ["ADVISE_EXAMPLE", "ADVISE_HELP", "configure_advise", "run_advise"]

ADVISE_HELP = (
    "measure the candidate formats for a matrix file (conversion and per-call time) and print "
    "the break-even number of calls"
)
ADVISE_EXAMPLE = "ust advise A.mtx --op spmm --k 8 --plot advice.png"


def configure_advise(p: argparse.ArgumentParser) -> None:
    from ust.api.advise import ADVISE_OPS

    p.add_argument("matrix", help="a Matrix Market (.mtx) or Binsparse (.npz, .h5) file")
    p.add_argument("--op", default="spmv", choices=ADVISE_OPS, help="the operation to measure (default spmv)")
    p.add_argument("--k", type=int, default=1, help="columns of the dense operand (spmm; 1 for spmv)")
    p.add_argument("--execution", help="cpu, cuda or cuda:N (default: the CPU)")
    p.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="FORMAT",
        help="another format to try (a standard name or DSL text); repeatable",
    )
    p.add_argument("--repeat", type=int, default=10, help="timed calls per candidate (the best counts)")
    p.add_argument("--plot", metavar="PATH", help="draw the table to this image file (needs ust[plot])")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def run_advise(args: argparse.Namespace) -> int:
    from ust import io
    from ust.api.advise import advise
    from ust.cli import checks
    from ust.formats.library import resolve

    checks.input_file(args.matrix)
    checks.execution(args.execution)
    checks.int_range(args.k, "--k", 1, why="the columns of the dense operand; 1 is a vector")
    checks.int_range(args.repeat, "--repeat", 1)
    if args.op == "spmv" and args.k != 1:
        checks.int_range(args.k, "--k", 1, 1, why="spmv multiplies by one vector; use --op spmm")
    for c in args.candidate:
        resolve(c)
    if args.plot:
        checks.output_file(args.plot, "--plot")
    t = io.read(args.matrix)
    adv = advise(
        t, op=args.op, k=args.k, device=args.execution, candidates=args.candidate, repeat=args.repeat
    )
    print(json.dumps(adv.as_dicts(), indent=2) if args.json else adv.table())
    if args.plot:
        adv.plot(args.plot)
        if not args.json:
            print(f"plot: {args.plot}")
    return 0
