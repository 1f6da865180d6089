"""One GPU vs several on 3-D Poisson (cuDSS MG mode through ``options={"devices": [...]}``).

For each grid size and each device list, a fresh process builds the matrix, runs ``plan()``,
``factorize()`` and ``solve()`` of :class:`ust.linalg.DirectSolver` (SPD) and reports the three
phase times, the relative residual, cuDSS's own memory estimate and the peak device memory seen
on every GPU (``cudaMemGetInfo`` polled every 20 ms while the phases run, minus what was in use
before).  Device lists that need more GPUs than the machine has are reported as not run.

    python -m benchmarks.bench_multigpu --sizes 160,200 --devices "0;0,1"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

from benchmarks.common import append_results, machine, markdown, poisson3d

COLUMNS = [
    "matrix",
    "GPUs",
    "analysis s",
    "factorisation s",
    "solve ms",
    "rel. residual",
    "cuDSS peak estimate GB",
    "peak used per GPU GB",
    "note",
]


class _MemoryPoller:
    """The largest drop of free memory on each device since start (a background thread)."""

    def __init__(self, devices: tuple[int, ...], every: float = 0.02) -> None:
        import cupy

        self.cupy, self.devices, self.every = cupy, devices, every
        self.base = {d: self._free(d) for d in devices}
        self.peak = dict.fromkeys(devices, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _free(self, d: int) -> int:
        with self.cupy.cuda.Device(d):
            return int(self.cupy.cuda.runtime.memGetInfo()[0])

    def _run(self) -> None:
        while not self._stop.is_set():
            for d in self.devices:
                self.peak[d] = max(self.peak[d], self.base[d] - self._free(d))
            time.sleep(self.every)

    def __enter__(self) -> _MemoryPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def child(m: int, devices: tuple[int, ...]) -> dict[str, Any]:
    """One size on one device list, in this process."""
    import cupy
    import ust.linalg as L

    a = poisson3d(m)
    n = a.shape[0]
    b = np.ones(n)
    options: dict[str, Any] = {"matrix_type": "spd"}
    if len(devices) > 1:
        options["devices"] = list(devices)
    row: dict[str, Any] = {"matrix": f"poisson3d:{m}", "GPUs": ",".join(map(str, devices))}
    with (
        cupy.cuda.Device(devices[0]),
        _MemoryPoller(devices) as mem,
        L.DirectSolver(a, b, options=options, execution=f"cuda:{devices[0]}") as s,
    ):
        info = s.plan()
        f = s.factorize()
        x = s.solve()
        est = info.memory_estimates or {}
        row.update(
            {
                "analysis s": info.seconds,
                "factorisation s": f.seconds,
                "solve ms": 1e3 * s.timings["solve"],
                "rel. residual": float(np.linalg.norm(b - a @ x) / np.linalg.norm(b)),
                "cuDSS peak estimate GB": est.get("peak_device_memory", 0) / 1e9 or None,
            }
        )
    row["peak used per GPU GB"] = " / ".join(f"{mem.peak[d] / 1e9:.1f}" for d in devices)
    row["note"] = ""
    return row


def gpu_count() -> int:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def run(sizes: list[int], device_lists: list[tuple[int, ...]], timeout: float) -> list[dict[str, Any]]:
    rows = []
    have = gpu_count()
    for m in sizes:
        for devs in device_lists:
            base = {"matrix": f"poisson3d:{m}", "GPUs": ",".join(map(str, devs))}
            if max(devs) >= have:
                rows.append({**base, "note": f"not run: needs {max(devs) + 1} GPUs, this machine has {have}"})
                continue
            code = f"import json; from benchmarks.bench_multigpu import child; print(json.dumps(child({m}, {devs!r})))"
            try:
                out = subprocess.run(
                    [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
                )
                lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
                if out.returncode or not lines:
                    why = (out.stderr.strip().splitlines() or ["failed"])[-1][:100]
                    rows.append({**base, "note": f"error: {why}"})
                else:
                    rows.append(json.loads(lines[-1]))
            except subprocess.TimeoutExpired:
                rows.append({**base, "note": f"> {timeout:g} s"})
            print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_multigpu", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--sizes", default="160,200", help="3-D Poisson grid sizes m (n = m^3)")
    p.add_argument("--devices", default="0;0,1", help="device lists separated by ';'")
    p.add_argument("--timeout", type=float, default=500.0, help="seconds per (size, devices) process")
    p.add_argument("--out", default=os.environ.get("OUT") or os.path.join("benchmarks", "results"))
    p.add_argument("--append-results", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    device_lists = [tuple(int(d) for d in grp.split(",")) for grp in args.devices.split(";") if grp]
    rows = run(sizes, device_lists, args.timeout)
    body = markdown(rows, COLUMNS) + f"\n{machine()}\n"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_multigpu.md"), "w", encoding="utf-8") as f:
        f.write(body)
    print(body)
    if args.append_results:
        append_results("Multi-GPU solve", f"python -m benchmarks.bench_multigpu --sizes {args.sizes}", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
