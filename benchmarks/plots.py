"""PNGs of a suite run: time vs size, and achieved GB/s against the memory roofline.

    python -m benchmarks.plots [DIR]     # redraw from DIR/suite.json (default benchmarks/out)

One PNG per benchmark.  The top panel plots time against problem size for every series with
two sizes or more (log-log), or a bar per series where the run had one size.  Benchmarks whose
rows report GB/s (SpMV / SpMM) get a second panel: the achieved GB/s of each row at the largest
size, against the copy bandwidth measured in the same process and, on a GPU we know, the HBM
peak.  Each benchmark's rows are mapped to points by a small function in ``SPECS`` (the tables
differ); matplotlib runs on the Agg canvas, without pyplot's global state.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Row = dict[str, Any]
Point = tuple[str, float, float, bool]  # series, x, y, is a baseline (not ust)
Bar = tuple[str, float, bool]  # label, GB/s, is a baseline

_NUMBER = re.compile(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?")


def num(v: Any) -> float | None:
    """A float from a table cell: a number, or the leading number of a text like '0.12 (median 0.2)'."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    m = _NUMBER.match(str(v).strip())
    return float(m.group()) if m else None


def kind(label: str) -> str:
    """The matrix family of a label, its size removed: 'Poisson 60^3 (216,000 rows)' -> 'Poisson'."""
    return re.split(r"\s*\d+\^3", label)[0].strip()


def _n3(row: Row) -> float:
    return float(row["suite_param"]["n"]) ** 3


def _pts(ours: list[tuple[str, Any]], x: float, base: list[tuple[str, Any]] | None = None) -> list[Point]:
    """Points of ust's series (``ours``) and the baselines' (``base``) that have a positive value."""
    tagged = [(s, v, False) for s, v in ours] + [(s, v, True) for s, v in base or []]
    return [(s, x, y, b) for s, v, b in tagged if (y := num(v)) is not None and y > 0]


_BASELINE_IMPL = re.compile(r"^(scipy|cupy|numpy|nvmath)", re.IGNORECASE)


def _split(label: str, value: Any, impl: str) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(ours, base) for a table whose rows are one contender each, named by ``impl``."""
    pair = [(label, value)]
    return ([], pair) if _BASELINE_IMPL.match(impl) else (pair, [])


def _parse(r: Row) -> list[Point]:
    return _pts([(r["case"], r.get("us/decl (CPU, best)"))], 1.0, [(r["case"] + " [Lark baseline]", r.get("baseline us (CPU, best)"))])  # fmt: skip


def _convert(r: Row) -> list[Point]:
    m = re.search(r"\(([\d.]+) M nnz\)", r.get("matrix", ""))
    if not m:
        return []
    family, x = r["matrix"].split(" (")[0], 1e6 * float(m.group(1))
    ours = [(f"{family}: ust (median over pairs)", r.get("ust ns/nnz"))]
    ours.append((f"{family}: ust general path (median over pairs)", r.get("general ns/nnz")))
    if num(r.get("library ns/nnz")) is not None:
        ours.append((f"{family}: ust (median over the pairs the library has)", r.get("ust ns/nnz")))
    return _pts(ours, x, [(f"{family}: library (median over pairs)", r.get("library ns/nnz"))])


def _spmv(r: Row) -> list[Point]:
    impl = r.get("impl", "")
    if not r.get("k") or ("threads/row" in impl and "(default)" not in impl):
        return []
    ours, base = _split(f"{kind(r['matrix'])} k={r['k']}: {impl}", r.get("ms"), impl)
    return _pts(ours, _n3(r), base)


def _spmv_gbps(r: Row) -> Bar | None:
    v, impl = num(r.get("GB/s")), r.get("impl", "")
    return (
        None
        if v is None or not r.get("k")
        else (f"{kind(r['matrix'])} k={r['k']}: {impl}", v, bool(_BASELINE_IMPL.match(impl)))
    )


def _matmul(r: Row) -> list[Point]:
    case, impl = r.get("case", ""), r.get("impl", "")
    if "^3" not in case:
        return []
    family = re.sub(r"\s*\d+\^3", "", case)
    ours, base = _split(f"{family}: {impl}", r.get("ms"), impl)
    return _pts(ours, _n3(r), base)


def _matmul_gbps(r: Row) -> Bar | None:
    v, impl = num(r.get("GB/s")), r.get("impl", "")
    return None if v is None else (f"{r.get('case', '')}: {impl}", v, bool(_BASELINE_IMPL.match(impl)))


def _dense(r: Row) -> list[Point]:
    x = float(r["suite_param"]["scale"])
    return _pts([(f"{r['case']}: ust {r['ust']}", r.get("ust_ms"))], x, [(f"{r['case']}: {r['baseline']}", r.get("baseline_ms"))])  # fmt: skip


def _algebra(r: Row) -> list[Point]:
    x = float(r["suite_param"]["n"])
    return _pts([(f"{r['case']}: {r['ust']}", r.get("ust ms"))], x, [(f"{r['case']}: {r['baseline']}", r.get("baseline ms"))])  # fmt: skip


_SOLVE_PHASES = {"e2e": "ust end to end", "analysis": "ust analysis", "factorization": "ust factorisation",
                 "resolve": "ust re-solve", "refactorize": "ust refactorisation"}  # fmt: skip


def _solve(r: Row) -> list[Point]:
    family = str(r.get("matrix", "")).split(":")[0]
    ours = [(f"{family}: {label}", r.get(key)) for key, label in _SOLVE_PHASES.items()]
    base = [(f"{family}: {name}", b.get("seconds")) for name, b in (r.get("baselines") or {}).items()]
    return _pts(ours, float(r["n"]), base)


@dataclass(frozen=True)
class Spec:
    """How one benchmark's rows become points: ``points(row)`` -> (series, x, y) in ``unit``."""

    points: Callable[[Row], list[Point]]
    unit: str
    x_label: str
    gbps: Callable[[Row], Bar | None] | None = None


SPECS: dict[str, Spec] = {
    "parse": Spec(_parse, "us per declaration (CPU, best)", ""),
    "convert": Spec(_convert, "ns per source nonzero", "nonzeros"),
    "spmv": Spec(_spmv, "ms", "matrix rows", _spmv_gbps),
    "matmul": Spec(_matmul, "ms", "matrix rows", _matmul_gbps),
    "dense": Spec(_dense, "ms", "scale"),
    "algebra": Spec(_algebra, "ms", "Poisson grid side"),
    "solve": Spec(_solve, "s", "rows"),
}


# ----------------------------------------------------------------------------- drawing


Series = dict[str, dict[float, float]]  # series -> {x: y}


def _series(rows: list[Row], spec: Spec) -> tuple[Series, set[str]]:
    """(series -> {x: median y}, the baseline series); several rows of one series and size
    (e.g. every conversion pair) give their median."""
    acc: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    base = set()
    for r in rows:
        for s, x, y, is_base in spec.points(r):
            acc[s][x].append(y)
            if is_base:
                base.add(s)
    return {s: {x: statistics.median(ys) for x, ys in sorted(xs.items())} for s, xs in acc.items()}, base


_OURS, _BASE = "tab:blue", "tab:gray"


def _bars(ax: Any, labels: list[str], values: list[float], base: list[bool], unit: str) -> None:
    ypos = list(range(len(labels)))
    ax.barh(ypos, values, color=[_BASE if b else _OURS for b in base])
    ax.set_yticks(ypos, labels, fontsize=6)
    ax.invert_yaxis()
    if values and max(values) / max(min(values), 1e-300) > 100:
        ax.set_xscale("log")
    ax.set_xlabel(unit + "   (blue: ust, gray: baseline)")
    ax.grid(axis="x", alpha=0.3)


def _groups(series: Series) -> dict[str, list[str]]:
    """Series by the part of their name before ': ' (a matrix and k, a case): one facet each."""
    out: dict[str, list[str]] = {}
    for s in series:
        out.setdefault(s.split(": ", 1)[0], []).append(s)
    return out


def _lines(ax: Any, title: str, names: list[str], series: Series, base: set[str], spec: Spec) -> None:
    for s in names:
        xs = series[s]
        label = s.split(": ", 1)[-1]
        ax.plot(
            list(xs),
            list(xs.values()),
            ":" if s in base else "-",
            marker="o",
            markersize=3,
            linewidth=1.2,
            label=label,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(spec.x_label, fontsize=7)
    ax.set_ylabel(spec.unit, fontsize=7)
    ax.tick_params(which="both", labelsize=6)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6, loc="upper left")
    ax.set_title(title, fontsize=8)


def _bar_panel(ax: Any, series: Series, base: set[str], spec: Spec) -> None:
    labels = list(series)
    values = [next(iter(series[s].values())) for s in labels]
    _bars(ax, labels, values, [s in base for s in labels], spec.unit)
    ax.set_title("time (one size)", fontsize=9)


def _gbps_bars(rows: list[Row], spec: Spec) -> list[Bar]:
    """The GB/s bars of the rows of the largest size (the last one run)."""
    assert spec.gbps is not None
    last = rows[-1].get("suite_param")
    return [g for r in rows if r.get("suite_param") == last and (g := spec.gbps(r)) is not None]


def _gbps_panel(ax: Any, bars: list[Bar], last: Any, meta: dict[str, Any]) -> None:
    _bars(ax, [g[0] for g in bars], [g[1] for g in bars], [g[2] for g in bars], "GB/s achieved")
    ax.set_xscale("linear")
    for key, label, style in (("copy_GBps", "measured copy", "--"), ("peak_GBps", "HBM peak", "-")):
        if meta.get(key):
            ax.axvline(
                meta[key],
                color="tab:red",
                linestyle=style,
                linewidth=1.2,
                label=f"{label}: {meta[key]:,.0f} GB/s",
            )
    if meta.get("copy_GBps") or meta.get("peak_GBps"):
        ax.legend(fontsize=7, loc="lower right")
    size = f", Poisson n = {last['n']}" if isinstance(last, dict) and "n" in last else ""
    ax.set_title(
        f"achieved bandwidth (bytes the format must move once / time) vs the roofline{size}", fontsize=9
    )


_FACET_COLUMNS = 3


def draw(name: str, record: dict[str, Any], path: Path) -> Path | None:
    """One benchmark's PNG; None when it has nothing to plot (failed, or no rows we can read).

    Time vs size, one facet per group of series (dotted: baselines), when some series has
    two sizes or more; else one bar per series.  Below, the GB/s bars where rows report them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    spec = SPECS.get(name)
    rows = record.get("rows") or []
    if spec is None or record.get("status") != "ok" or not rows:
        return None
    series, base = _series(rows, spec)
    bars = _gbps_bars(rows, spec) if spec.gbps is not None else []
    if not series and not bars:
        return None
    groups = _groups(series) if any(len(xs) > 1 for xs in series.values()) else {}
    facet_rows = -(-len(groups) // _FACET_COLUMNS)
    heights = []  # inches per figure row: facets of line plots, or one bar per series; GB/s bars
    if groups:
        heights += [3.0] * facet_rows
    elif series:
        heights.append(0.8 + 0.17 * len(series))
    if bars:
        heights.append(1.0 + 0.17 * len(bars))
    fig = Figure(figsize=(13, sum(heights) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(len(heights), _FACET_COLUMNS, height_ratios=heights)
    if groups:
        for k, (title, names) in enumerate(groups.items()):
            ax = fig.add_subplot(grid[k // _FACET_COLUMNS, k % _FACET_COLUMNS])
            _lines(ax, title, names, series, base, spec)
    elif series:
        _bar_panel(fig.add_subplot(grid[0, :]), series, base, spec)
    if bars:
        ax = fig.add_subplot(grid[len(heights) - 1, :])
        _gbps_panel(ax, bars, rows[-1].get("suite_param"), record.get("meta") or {})
    machine = (record.get("meta") or {}).get("machine", "")
    fig.suptitle(f"{name} ({record.get('device', '?')}, {record.get('size', '?')}): {machine}", fontsize=10)
    fig.savefig(path, dpi=110)
    return path


def draw_all(suite: dict[str, Any], out: Path) -> list[Path]:
    """NAME.png in ``out`` for every benchmark of the suite record that has something to plot."""
    drawn = [draw(name, rec, out / f"{name}.png") for name, rec in suite["benchmarks"].items()]
    return [p for p in drawn if p is not None]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(__file__).with_name("out")
    suite = json.loads((out / "suite.json").read_text(encoding="utf-8"))
    for p in draw_all(suite, out):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
