"""The benchmark suite as one command: every benchmark in its own process, with a timeout.

    python -m benchmarks [--device cpu|cuda] [--size small|large] [--only NAME[,NAME...]]
                         [--out DIR] [--timeout S] [--write] [--no-plots]
    python -m benchmarks --collect DIR [DIR...] [--out OUT] [--write]   # report saved runs

Each benchmark (``BENCHES``: parse, convert, spmv, matmul, dense, algebra, solve) runs in a
child process (``--worker NAME``), so a crash, a hang or a full GPU in one of them is reported
in its table and the others still run.  ``--size small`` (default) keeps the whole CPU suite to
a few minutes on a 2-core machine; ``--size large`` uses the sizes the issues name, for the GPU
machine.  Into ``--out`` (default ``benchmarks/out/``, git-ignored) go ``NAME.json`` (one
benchmark: status, rows, table, machine, the copy bandwidth measured in the same process),
``NAME.md``, ``NAME.log`` (the child's output), ``NAME.png`` (``benchmarks.plots``),
``suite.json`` (all of it) and ``suite.md``.  ``--write`` appends ``suite.md`` as one dated
section "## Suite run (<device>, <size>)" to ``benchmarks/RESULTS.md``.

A run split over several commands (the GPU machine allows ten minutes a command) writes its
parts into one directory with ``--only``; ``--collect DIR --write`` then makes one section of
them, on any machine (the machine line comes from the runs, not from the collecting host).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(__file__).with_name("out")
RESULTS = Path(__file__).with_name("RESULTS.md")
SIZES = ("smoke", "small", "large")  # smoke: the two smallest small sizes (the test suite's)
DEVICES = ("cpu", "cuda")
DEFAULT_TIMEOUT = {"smoke": 120.0, "small": 300.0, "large": 600.0}  # seconds per benchmark process

Rows = list[dict[str, Any]]
Param = dict[str, Any]


# ----------------------------------------------------------------------------- the benchmarks


def _run_parse(device: str, p: Param) -> Rows:
    from benchmarks import bench_parse

    return bench_parse.run(p["quick"])


def _table_parse(rows: Rows, device: str) -> str:
    from benchmarks import bench_parse
    from benchmarks.common import markdown

    return markdown(rows, bench_parse.COLUMNS)


def _run_convert(device: str, p: Param) -> Rows:
    from benchmarks import bench_convert

    return bench_convert.run(device, p["n"], p["repeat"])


def _table_convert(rows: Rows, device: str) -> str:
    from benchmarks import bench_convert
    from benchmarks.common import markdown

    return markdown(rows, bench_convert.COLUMNS)


def _run_spmv(device: str, p: Param) -> Rows:
    from benchmarks import bench_spmv

    return bench_spmv.gpu_rows(p["n"]) if device == "cuda" else bench_spmv.cpu_rows(p["n"], p["rounds"])


def _table_spmv(rows: Rows, device: str) -> str:
    from benchmarks import bench_spmv
    from benchmarks.common import markdown

    return markdown(rows, bench_spmv.COLUMNS)


def _run_matmul(device: str, p: Param) -> Rows:
    from benchmarks import bench_matmul

    return bench_matmul.run(device, p["n"])


def _table_matmul(rows: Rows, device: str) -> str:
    from benchmarks.common import markdown

    return markdown(rows, ["case", "impl", "ms", "vs CuPy" if device == "cuda" else "vs baseline", "GB/s"])


def _run_dense(device: str, p: Param) -> Rows:
    from benchmarks import bench_dense

    cases = bench_dense.gpu_cases if device == "cuda" else bench_dense.cpu_cases
    return cases(p["scale"], p["fft_log2"])


def _table_dense(rows: Rows, device: str) -> str:
    from benchmarks import bench_dense

    return bench_dense.markdown(rows)


def _run_algebra(device: str, p: Param) -> Rows:
    from benchmarks import bench_algebra

    cases = bench_algebra.gpu_cases if device == "cuda" else bench_algebra.cpu_cases
    return cases(p["n"], p["rows"], p["sddmm_rows"])


def _table_algebra(rows: Rows, device: str) -> str:
    from benchmarks import bench_algebra
    from benchmarks.common import markdown

    return markdown(rows, bench_algebra.COLUMNS)


_GPU_SOLVE_BASELINES = {"cupyx.spsolve", "nvmath", "nvmath+threads"}


def _run_solve(device: str, p: Param) -> Rows:
    import tempfile

    from benchmarks import bench_solve

    specs = [f"poisson3d:{m}" for m in p["sizes"]] + (
        [f"advection2d:{p['advection']}"] if p["advection"] else []
    )
    skip = set() if device == "cuda" else _GPU_SOLVE_BASELINES
    with tempfile.TemporaryDirectory() as plans:  # the saved plans of the second-process rows
        return bench_solve.run(specs, plans, p["timeout"], p["repeat"], skip, execution=device)


def _table_solve(rows: Rows, device: str) -> str:
    from benchmarks import bench_solve

    return bench_solve.report(rows, device)[1]


@dataclass(frozen=True)
class Bench:
    """One benchmark of the suite: how to run one size, how to tabulate all its rows, and the
    sizes per (device, size); ``roofline``: measure the copy bandwidth in the same process."""

    run: Callable[[str, Param], Rows]
    table: Callable[[Rows, str], str]
    sizes: dict[tuple[str, str], list[Param]] = field(default_factory=dict)
    roofline: bool = False

    def params(self, device: str, size: str) -> list[Param]:
        if size == "smoke":
            return self.sizes[(device, "small")][:2]
        return self.sizes[(device, size)]


def _n(*ns: int, **extra: Any) -> list[Param]:
    return [{"n": n, **extra} for n in ns]


BENCHES: dict[str, Bench] = {
    "parse": Bench(
        _run_parse,
        _table_parse,
        {
            ("cpu", "small"): [{"quick": True}],
            ("cuda", "small"): [{"quick": True}],
            ("cpu", "large"): [{"quick": False}],
            ("cuda", "large"): [{"quick": False}],
        },
    ),
    "convert": Bench(  # Poisson grid side (even: BSR[2,2]); large GPU: 196^3, >= 50 M nonzeros
        _run_convert,
        _table_convert,
        {
            ("cpu", "small"): _n(16, 32, 48, repeat=2),
            ("cuda", "small"): _n(32, 64, repeat=3),
            ("cpu", "large"): _n(60, 90, repeat=5),
            ("cuda", "large"): _n(100, 196, repeat=5),
        },
    ),
    "spmv": Bench(  # large GPU: Poisson 160^3
        _run_spmv,
        _table_spmv,
        {
            ("cpu", "small"): _n(20, 40, 80, rounds=10),
            ("cuda", "small"): _n(32, 64, rounds=10),
            ("cpu", "large"): _n(40, 60, 80, rounds=30),
            ("cuda", "large"): _n(64, 100, 160, rounds=30),
        },
        roofline=True,
    ),
    "matmul": Bench(
        _run_matmul,
        _table_matmul,
        {
            ("cpu", "small"): _n(20, 40, 80),
            ("cuda", "small"): _n(32, 64),
            ("cpu", "large"): _n(40, 60),
            ("cuda", "large"): _n(100, 160),
        },
        roofline=True,
    ),
    "dense": Bench(  # scale 1: A 10 M x 10 (GPU) / 1 M x 10 (CPU); FFT 2^fft_log2
        _run_dense,
        _table_dense,
        {
            ("cpu", "small"): [{"scale": 0.1, "fft_log2": 18}],
            ("cuda", "small"): [{"scale": 0.05, "fft_log2": 20}],
            ("cpu", "large"): [{"scale": 1.0, "fft_log2": 20}],
            ("cuda", "large"): [{"scale": 1.0, "fft_log2": 24}],
        },
    ),
    "algebra": Bench(
        _run_algebra,
        _table_algebra,
        {
            ("cpu", "small"): _n(40, rows=100_000, sddmm_rows=50_000),
            ("cuda", "small"): _n(40, rows=100_000, sddmm_rows=100_000),
            ("cpu", "large"): _n(60, rows=200_000, sddmm_rows=100_000),
            ("cuda", "large"): _n(100, rows=1_000_000, sddmm_rows=1_000_000),
        },
    ),
    "solve": Bench(  # 3-D Poisson m^3 for each m, then 2-D advection-diffusion; large GPU: 100^3
        _run_solve,
        _table_solve,
        {
            ("cpu", "small"): [{"sizes": (10, 20, 30), "advection": 200, "timeout": 60, "repeat": 3}],
            ("cuda", "small"): [{"sizes": (20, 40), "advection": 200, "timeout": 60, "repeat": 5}],
            ("cpu", "large"): [{"sizes": (20, 30, 40), "advection": 400, "timeout": 120, "repeat": 5}],
            ("cuda", "large"): [{"sizes": (30, 60, 100), "advection": 700, "timeout": 45, "repeat": 10}],
        },
    ),
}

# HBM peak of the GPUs we know, GB/s, matched in the device name (the roofline's ceiling).
PEAK_GBPS = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0}


# ----------------------------------------------------------------------------- worker process


def copy_bandwidth(device: str) -> dict[str, Any]:
    """Measured copy bandwidth, GB/s (bytes read + written), in this process: a STREAM-like
    copy of a large array on the CPU, a device-to-device copy on the GPU; and the HBM peak
    where the GPU is one we know."""
    if device == "cuda":
        import cupy as cp

        from benchmarks.common import time_gpu

        src = cp.ones(1 << 27)  # 1 GiB of float64
        dst = cp.empty_like(src)
        secs = time_gpu(lambda: cp.copyto(dst, src), repeat=10)
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        peak = next((v for k, v in PEAK_GBPS.items() if k in name), None)
        result = {"copy_GBps": 2 * src.nbytes / secs / 1e9, "peak_GBps": peak, "device_name": name}
        del src, dst
        cp.get_default_memory_pool().free_all_blocks()
        return result
    import numpy as np

    from benchmarks.common import time_cpu

    src = np.ones(1 << 24)  # 128 MiB of float64, well beyond the caches
    dst = np.empty_like(src)
    secs = time_cpu(lambda: np.copyto(dst, src), repeat=7)
    return {"copy_GBps": 2 * src.nbytes / secs / 1e9, "peak_GBps": None, "device_name": "CPU"}


def worker(name: str, device: str, size: str, path: str) -> int:
    """Child process: run every size of one benchmark, write its rows and table to ``path``."""
    from benchmarks.common import machine

    bench = BENCHES[name]
    params = bench.params(device, size)
    rows: Rows = []
    for p in params:
        print(f"== {name} {p}", flush=True)
        for r in bench.run(device, p):
            rows.append({**r, "suite_param": p})
    meta: dict[str, Any] = {"machine": machine(), "python": platform.python_version()}
    if bench.roofline:
        meta.update(copy_bandwidth(device))
    out = {"rows": rows, "markdown": bench.table(rows, device), "params": params, "meta": meta}
    if len(params) > 1:  # RESULTS.md gets the largest size's table; the others stay in the JSON
        out["markdown_largest"] = bench.table([r for r in rows if r["suite_param"] == params[-1]], device)
    Path(path).write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
    return 0


def _tail(path: Path, lines: int = 1) -> str:
    try:
        text = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    return " / ".join([ln for ln in text if ln][-lines:])


def run_one(name: str, device: str, size: str, out: Path, timeout: float) -> dict[str, Any]:
    """Run one benchmark in a child process (its own session, so a timeout ends all of it)."""
    part, log = out / f"{name}.part.json", out / f"{name}.log"
    part.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "benchmarks.suite", "--worker", name, "--device", device, "--size", size]
    cmd += ["--part", str(part)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    record: dict[str, Any] = {"name": name, "device": device, "size": size}
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group: it and its helpers
            proc.wait()
            rc = None
    record["seconds"] = time.perf_counter() - t0
    if rc is None:
        record.update(status="timed out", error=f"timed out after {timeout:g} s (last output: {_tail(log)})")
    elif rc != 0 or not part.exists():
        record.update(status="failed", error=f"exit code {rc}: {_tail(log)}")
    else:
        record.update(status="ok", **json.loads(part.read_text(encoding="utf-8")))
        part.unlink()
    return record


# ----------------------------------------------------------------------------- reports


def _commit() -> str:
    try:
        res = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        return res.stdout.strip() or "?"
    except OSError:
        return "?"


def _param_text(p: Param) -> str:
    return ", ".join(f"{k} {v}" for k, v in p.items())


def section(suite: dict[str, Any]) -> str:
    """The RESULTS.md section of a suite run: one table (or the failure) per benchmark."""
    m, recs = suite["meta"], suite["benchmarks"].values()

    def each(key: str, default: str) -> str:  # what the records say (several runs, collected)
        return "; ".join(sorted({str(r[key]) for r in recs if r.get(key)})) or default

    machines = sorted({r["meta"]["machine"] for r in recs if r.get("meta")})
    commands = "; ".join(
        f"`{c}`" for c in sorted({r["command"] for r in recs if r.get("command")}) or [m["command"]]
    )
    parts = [
        f"## Suite run ({m['device']}, {m['size']})\n",
        f"{each('date', m['date'])}, commit {each('commit', m['commit'])}, {'; '.join(machines) or m['host']}\n",
        f"Command: {commands}\n",
    ]
    for name, r in suite["benchmarks"].items():
        head = f"### {name}: {r['status']}, {r['seconds']:.1f} s"
        bw = (r.get("meta") or {}).get("copy_GBps")
        if bw:
            head += f" (copy bandwidth measured in the same process: {bw:.1f} GB/s)"
        if r["status"] != "ok":
            body = f"Not measured: {r['error']}"
        elif r.get("markdown_largest"):
            others = "; ".join(_param_text(p) for p in r["params"][:-1])
            body = (
                f"Largest size, {_param_text(r['params'][-1])} (smaller sizes, {others}: in suite.json "
                f"and the plots):\n\n{r['markdown_largest'].strip()}"
            )
        else:
            body = r["markdown"].strip()
        parts.append(f"{head}\n\n{body}\n")
    return "\n".join(parts)


def write_outputs(suite: dict[str, Any], out: Path, plots: bool = True) -> list[Path]:
    """suite.json, suite.md, NAME.md per benchmark and (matplotlib permitting) NAME.png."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.json").write_text(json.dumps(suite, indent=1, default=str), encoding="utf-8")
    (out / "suite.md").write_text(section(suite), encoding="utf-8")
    for name, r in suite["benchmarks"].items():
        text = r["markdown"] if r["status"] == "ok" else f"Not measured: {r['error']}\n"
        (out / f"{name}.md").write_text(text, encoding="utf-8")
    if not plots:
        return []
    try:
        from benchmarks import plots as plots_mod

        return plots_mod.draw_all(suite, out)
    except ImportError as exc:
        print(f"plots skipped: {exc} (pip install 'ust[plot]')", file=sys.stderr)
        return []


def append_results(text: str, path: Path) -> None:
    """Append one section to RESULTS.md (never rewrites what is there)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n" + text)


def collect(sources: Sequence[Path], names: Sequence[str]) -> dict[str, Any]:
    """The suite record from the NAME.json files of earlier runs in ``sources`` (a later
    directory's NAME.json replaces an earlier one's), in the suite's order."""
    benches = {}
    for name in names:
        for src in sources:
            p = src / f"{name}.json"
            if p.exists():
                benches[name] = json.loads(p.read_text(encoding="utf-8"))
    where = ", ".join(map(str, sources))
    if not benches:
        raise SystemExit(f"error: no benchmark results (NAME.json) in {where}")
    kinds = {(r["device"], r["size"]) for r in benches.values()}
    if len(kinds) > 1:
        raise SystemExit(f"error: {where} mixes runs of different devices/sizes: {sorted(kinds)}")
    device, size = kinds.pop()
    meta = {"device": device, "size": size, "commit": "?"}
    return {"meta": meta, "benchmarks": benches}


def _default_device() -> str:
    try:
        from ust.backends.cuda.arrays import gpu_available

        return "cuda" if gpu_available() else "cpu"
    except ImportError:
        return "cpu"


def _parser(prog: str, out: Path = DEFAULT_OUT, results: str = str(RESULTS)) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n\n")[0],
        epilog="benchmarks: " + ", ".join(BENCHES),
    )
    p.add_argument("--device", choices=DEVICES, default=None, help="default: cuda when a GPU answers")
    p.add_argument("--size", choices=SIZES, default="small")
    p.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    p.add_argument("--out", type=Path, default=out, help=f"output directory (default {out})")
    p.add_argument("--timeout", type=float, default=None, help="seconds per benchmark (300 small, 600 large)")
    p.add_argument("--write", action="store_true", help="append one section to --results")
    p.add_argument("--results", type=Path, default=None, help=f"the results file (default {results})")
    p.add_argument("--no-plots", action="store_true", help="skip the PNGs")
    p.add_argument(
        "--collect",
        type=Path,
        nargs="+",
        default=None,
        metavar="DIR",
        help="report the NAME.json files in DIR...",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--part", help=argparse.SUPPRESS)
    return p


def main(
    argv: Sequence[str] | None = None,
    prog: str = "python -m benchmarks",
    *,
    default_out: Path = DEFAULT_OUT,
    results_in_out: bool = False,
) -> int:
    """The suite's command line; the exit code is 1 when a benchmark failed or timed out (the
    others still ran and are reported).  ``ust bench`` calls it with ``prog="ust bench"``, its
    own ``default_out`` (in the current directory) and ``results_in_out`` (``--results``
    defaults to ``<out>/RESULTS.md``, not the source tree's)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    shown = "OUT/RESULTS.md" if results_in_out else str(RESULTS)
    args = _parser(prog, default_out, shown).parse_args(argv)
    args.out = args.out.resolve()  # the children run in the checkout: a relative --out means here
    if args.results is None:
        args.results = args.out / "RESULTS.md" if results_in_out else RESULTS
    if args.worker:
        return worker(args.worker, args.device, args.size, args.part)
    names = [s.strip() for s in args.only.split(",") if s.strip()] or list(BENCHES)
    unknown = [s for s in names if s not in BENCHES]
    if unknown:
        print(
            f"error: unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHES)}",
            file=sys.stderr,
        )
        return 1
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = f"{prog} " + " ".join(argv)
    if args.collect is not None:
        suite = collect(args.collect, names)
        suite["meta"].update(date=stamp, command=command, host="?")
    else:
        device = args.device or _default_device()
        timeout = args.timeout or DEFAULT_TIMEOUT[args.size]
        args.out.mkdir(parents=True, exist_ok=True)
        commit = _commit()
        meta = {"device": device, "size": args.size, "commit": commit, "date": stamp, "command": command}
        meta["host"] = platform.node()
        suite = {"meta": meta, "benchmarks": {}}
        t_all = time.perf_counter()
        for name in names:
            print(f"{name:8s} ...", end=" ", flush=True)
            record = run_one(name, device, args.size, args.out, timeout)
            record.update(commit=commit, date=stamp, command=command)
            (args.out / f"{name}.json").write_text(
                json.dumps(record, indent=1, default=str), encoding="utf-8"
            )
            suite["benchmarks"][name] = record
            print(
                f"{record['status']} in {record['seconds']:.1f} s"
                + (f": {record.get('error')}" if record.get("error") else "")
            )
        meta["seconds"] = time.perf_counter() - t_all
        print(f"suite: {len(names)} benchmark(s) in {meta['seconds']:.1f} s")
    pngs = write_outputs(suite, args.out, plots=not args.no_plots)
    print(f"wrote {args.out}/suite.json, suite.md, NAME.md" + (f", {len(pngs)} PNG(s)" if pngs else ""))
    if args.write:
        append_results(section(suite), args.results)
        print(f"appended the section to {args.results}")
    failed = [n for n, r in suite["benchmarks"].items() if r["status"] != "ok"]
    if failed:
        print(f"not measured: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
