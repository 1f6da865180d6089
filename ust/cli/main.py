"""The ``ust`` command line.

Each subcommand is one small function registered in ``_COMMANDS`` (a table, not an
if-chain).  Bad input ends with exit code 1 and a one-line error, never a traceback:
every argument is checked before any work (:mod:`ust.cli.checks`), and every
:class:`~ust.runtime.errors.UstError` and ``OSError`` is caught in :func:`main` (a file error
worded one way whoever met it).  Usage errors -- an unknown command or option, a missing
argument -- are argparse's: the usage line, one error line (with "did you mean ...?" for a
misspelt command or choice, on every Python version) and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ust.runtime.errors import UstError
from ust.runtime.suggest import did_you_mean


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with "did you mean ...?" for a misspelt command or choice (Python
    3.14's ``suggest_on_error`` does that only there, and only when asked)."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            names = [str(c) for c in choices]
            hint = did_you_mean(str(value), names)
            raise argparse.ArgumentError(
                action,
                f"invalid choice: {value!r}"
                + (f"; {hint}" if hint else "")
                + f" (choose from {', '.join(map(repr, names))})",
            )
        super()._check_value(action, value)


@dataclass(frozen=True)
class _Command:
    help: str
    example: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _configure_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", help="files of format declarations (.ust), or '-' for stdin")


def _run_check(args: argparse.Namespace) -> int:
    from ust.cli.checks import input_file
    from ust.formats import FormatTemplate, parse_formats

    for path in args.files:
        if path != "-":
            input_file(path)
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        decls = parse_formats(text)
        print(f"{path}: {len(decls)} format(s) OK")
        for name, f in decls.items():
            if isinstance(f, FormatTemplate):
                print(f"  {name}[{', '.join(f.params)}]  (template)")
                continue
            std = f.standard_name
            same = f"  (= {std})" if std and std != name else ""
            print(f"  {name} = {f.to_text()}{same}")
            for k, lv in enumerate(f.levels):
                names = f.dim_names
                bufs = [b for b, on in (("pos", lv.type.stores_pos), ("crd", lv.type.stores_crd)) if on]
                print(
                    f"    level {k}: {lv.expr.to_text(names):<16} {lv.type.to_text():<28} buffers: {', '.join(bufs) or '-'}"
                )
    return 0


def _configure_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--matrix", help="a Matrix Market file to use instead of the generated Poisson matrix")
    p.add_argument(
        "--n", type=int, default=24, help="grid points per side of the generated 3-D Poisson matrix"
    )


#: The largest ``ust demo --n`` (n^3 rows): the demo is meant to take seconds, not to fill memory.
DEMO_MAX_N = 100


def _run_demo(args: argparse.Namespace) -> int:
    from ust.cli.checks import input_file, int_range
    from ust.cli.demo import run

    if args.matrix:
        input_file(args.matrix)
    int_range(args.n, "--n", 1, DEMO_MAX_N, why="grid points per side; the matrix has n^3 rows")
    run(args.matrix, args.n)
    return 0


#: Where ``ust bench`` writes without ``--out``: a directory in the current one, never the source tree.
BENCH_OUT = "ust-bench"


def _configure_bench(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        help=f"arguments of python -m benchmarks (--device, --size, --only, ...); results go to --out DIR "
        f"(default ./{BENCH_OUT}/), and --write appends to --results (default DIR/RESULTS.md)",
    )


def _run_bench(args: argparse.Namespace) -> int:
    """The benchmark suite lives beside the package in a source checkout, not in the wheel.

    Its outputs go to ``--out`` (default ``./ust-bench/`` in the current directory) and
    ``--write`` appends to ``--results`` (default ``<out>/RESULTS.md``): ``ust bench`` never
    writes into the source tree unless told to.
    """
    root = Path(__file__).resolve().parents[2]  # <checkout>/ust/cli/main.py -> <checkout>
    if not (root / "benchmarks" / "suite.py").is_file():
        from ust.runtime.errors import UnsupportedError

        raise UnsupportedError(
            "ust bench needs a source checkout (benchmarks/ is not installed); clone the repository and "
            "run `python -m benchmarks`"
        )
    sys.path.insert(0, str(root))
    import importlib

    suite = importlib.import_module("benchmarks.suite")  # not part of the package: looked up at run time
    out = Path.cwd() / BENCH_OUT
    return int(suite.main(args.rest, prog="ust bench", default_out=out, results_in_out=True))


def _configure_info(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _run_info(args: argparse.Namespace) -> int:
    import json

    from ust.cli.info import collect_info, format_info

    report = collect_info()
    print(json.dumps(report, indent=2) if args.json else format_info(report))
    return 0


def _configure_solve(p: argparse.ArgumentParser) -> None:
    from ust.cli.solve import configure

    configure(p)


def _run_solve(args: argparse.Namespace) -> int:
    from ust.cli.solve import solve_command

    return solve_command(args)


def _configure_cache(p: argparse.ArgumentParser) -> None:
    from ust.cli.cache import configure_cache

    configure_cache(p)


def _run_cache(args: argparse.Namespace) -> int:
    from ust.cli.cache import run_cache

    return run_cache(args)


def _tensor_command(name: str) -> _Command:
    """Commands kept in their own modules: show / convert (ust.cli.tensor), spmv / explain
    (ust.cli.compute), advise (ust.cli.advise); imported when the parser is built."""
    from ust.cli import advise as ca
    from ust.cli import compute as cc
    from ust.cli import tensor as ct

    table = {
        "show": (ct.SHOW_HELP, ct.SHOW_EXAMPLE, ct.configure_show, ct.run_show),
        "convert": (ct.CONVERT_HELP, ct.CONVERT_EXAMPLE, ct.configure_convert, ct.run_convert),
        "spmv": (cc.SPMV_HELP, cc.SPMV_EXAMPLE, cc.configure_spmv, cc.run_spmv),
        "explain": (cc.EXPLAIN_HELP, cc.EXPLAIN_EXAMPLE, cc.configure_explain, cc.run_explain),
        "advise": (ca.ADVISE_HELP, ca.ADVISE_EXAMPLE, ca.configure_advise, ca.run_advise),
    }
    return _Command(*table[name])


_COMMANDS: dict[str, _Command] = {
    "check": _Command(
        "parse and validate format declarations, print their canonical text and levels",
        "ust check formats.ust",
        _configure_check,
        _run_check,
    ),
    "show": _tensor_command("show"),
    "convert": _tensor_command("convert"),
    "spmv": _tensor_command("spmv"),
    "explain": _tensor_command("explain"),
    "advise": _tensor_command("advise"),
    "solve": _Command(
        "solve A x = b with cuDSS on the GPU or SuperLU on the CPU (or a Krylov method: --method cg "
        "--precond amg), printing each phase's time and the residual",
        "ust solve A.mtx --rhs b.mtx --execution cuda",
        _configure_solve,
        _run_solve,
    ),
    "bench": _Command(
        "run the benchmark suite (baselines side by side) and write tables and plots",
        "ust bench --device cuda --size large --write",
        _configure_bench,
        _run_bench,
    ),
    "info": _Command(
        "versions, devices, and which routes are available (and, for each missing one, why and which extra installs it)",
        "ust info",
        _configure_info,
        _run_info,
    ),
    "demo": _Command(
        "show what ust does, end to end, on a generated or given matrix",
        "ust demo",
        _configure_demo,
        _run_demo,
    ),
    "cache": _Command(
        "see and bound the on-disk kernel cache: info (where, entries, bytes), clear, prune",
        "ust cache prune --max-bytes 500M",
        _configure_cache,
        _run_cache,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    epilog = "examples:\n" + "\n".join(f"  {c.example}" for c in _COMMANDS.values())
    parser = _Parser(
        prog="ust",
        description="ust: a sparse tensor format compiler for Python",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in _COMMANDS.items():
        p = sub.add_parser(
            name,
            help=cmd.help,
            description=cmd.help,
            epilog=f"example:\n  {cmd.example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.configure(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"] and not {"-h", "--help"} & set(argv[1:]):
        # every argument after `bench` belongs to the suite (argparse would claim its options)
        args = argparse.Namespace(command="bench", rest=argv[1:], version=False)
        try:
            return _run_bench(args)
        except (UstError, OSError) as exc:
            print(f"ust bench: error: {_one_line(exc)}", file=sys.stderr)
            return 1
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from ust import __version__

        print(f"ust {__version__}")
        return 0
    if not args.command:
        parser.print_help()
        return 0
    try:
        return _COMMANDS[args.command].run(args)
    except BrokenPipeError:  # `ust show ... | head`: the reader went away, not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the interpreter's final flush
        return 0
    except (UstError, OSError, ValueError) as exc:
        print(f"ust {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug or a foreign library's error: still one line, no traceback
        if os.environ.get("UST_DEBUG"):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(
            f"ust {args.command}: error: {type(exc).__name__}: {first} (UST_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        return 130


def _one_line(exc: BaseException) -> str:
    """The first line of an error's message; a file error worded one way, whoever raised it."""
    if isinstance(exc, OSError):
        from ust.cli.checks import os_error_message

        return os_error_message(exc)
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
