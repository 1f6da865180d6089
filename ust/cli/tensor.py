"""``ust show`` and ``ust convert``: tensors and files on the command line.

Each subcommand is a ``configure_X(parser)`` / ``run_X(args) -> int`` pair that
:mod:`ust.cli` registers.  Errors are raised (ust errors, ``OSError``); ``ust.cli.main``
turns them into one-line messages and exit code 1.
"""

from __future__ import annotations

import argparse
import math
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.runtime.errors import InvalidValueError, ShapeError

if TYPE_CHECKING:
    from ust.formats.model import Format
    from ust.tensor import Tensor

__all__ = [
    "CONVERT_EXAMPLE",
    "CONVERT_HELP",
    "SHOW_EXAMPLE",
    "SHOW_HELP",
    "configure_convert",
    "configure_show",
    "run_convert",
    "run_show",
    "sample_tensor",
    "text_picture",
]

SHOW_HELP = "print a tensor's level buffers and a picture of its sparsity (a format's sample, or a file)"
SHOW_EXAMPLE = 'ust show "BSR[2,2]" --png bsr.png'
CONVERT_HELP = "convert a Matrix Market or Binsparse file into another format and write it (.mtx, .npz, .h5)"
CONVERT_EXAMPLE = 'ust convert matrix.mtx --format "BSR[2,2]" -o matrix.npz'

#: The most entries of a sample (``ust show FORMAT --shape``), which is built as a dense array.
_MAX_SAMPLE = 1_000_000

#: File suffixes ``ust show`` reads as files (anything else is a format).
_FILE_SUFFIXES = (".mtx", ".mm", ".npz", ".h5", ".hdf5", ".gz", ".bz2", ".xz")


# ----------------------------------------------------------------------------- helpers


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in re.split(r"[,x]", text))
    except ValueError:
        shape = ()
    if not shape or any(s < 0 for s in shape):
        raise InvalidValueError(
            f"--shape must be non-negative integers separated by commas (e.g. 6,8), not {text!r}"
        )
    return shape


def _default_shape(fmt: Format) -> tuple[int, ...]:
    """6 x 8 (8 for vectors; leading extents 2 for N-D), rounded up to the format's block sizes."""
    from ust.formats.model import FloorDiv, Mod

    base = {1: (8,), 2: (6, 8)}.get(fmt.ndim) or (2,) * (fmt.ndim - 2) + (6, 8)
    step = [1] * fmt.ndim
    for lv in fmt.levels:
        e = lv.expr
        if isinstance(e, (FloorDiv, Mod)):
            step[e.dim] = math.lcm(step[e.dim], e.divisor)
    return tuple(-(-n // s) * s for n, s in zip(base, step))


def sample_tensor(fmt: Format, shape: tuple[int, ...] | None = None) -> Tensor:
    """A small deterministic tensor stored in ``fmt``: a few diagonals' worth of entries,
    values 1, 2, 3, ... in row-major order, one empty row and one empty column."""
    from ust.convert import asarray
    from ust.formats.model import LevelFormat

    shape = shape or _default_shape(fmt)
    grids = np.indices(shape)
    i, j = grids[-2:] if len(shape) >= 2 else (np.zeros(shape, dtype=np.int64), grids[-1])
    lead = grids[:-2].sum(axis=0) if len(shape) > 2 else 0
    mask = ((3 * i + 5 * j + lead) % 7 < 2) | (i == j)
    if len(shape) >= 2 and shape[-2] > 3:
        mask &= i != 3  # an empty row
    if shape[-1] > 5:
        mask &= j != 5  # an empty column
    dense = np.zeros(shape)
    dense[mask] = np.arange(1, int(mask.sum()) + 1)
    prune = any(lv.format is LevelFormat.STRUCTURED for lv in fmt.levels)
    return asarray(dense).convert(fmt, prune=prune)


def text_picture(t: Tensor, *, max_rows: int = 32, max_cols: int = 64) -> list[str]:
    """The sparsity of ``t`` as text: one character per entry for small tensors ('#' stored
    nonzero, 'o' stored zero, '.' not stored), else a density ramp over cells."""
    from ust.io.plot import binned_counts, grid_shape, stored_grid

    R, C = grid_shape(t.shape)
    rows, cols, vals = stored_grid(t)
    if R == 0 or C == 0:
        return ["(empty)"]
    if max_rows >= R and max_cols >= C:
        grid = np.full((R, C), ".", dtype="<U1")
        grid[rows, cols] = np.where(vals != 0, "#", "o")
        width = len(str(R - 1))
        head = " " * (width + 1) + "".join(str(c % 10) for c in range(C))
        return [head] + [f"{r:>{width}} " + "".join(grid[r]) for r in range(R)]
    bins = (min(R, max_rows), min(C, max_cols))
    counts, area = binned_counts(rows, cols, (R, C), bins)
    ramp = np.array(list(".:-=+*#%@"))
    frac = counts / np.maximum(area, 1)
    rel = frac / max(float(frac.max()), 1e-300)  # relative to the fullest cell
    level = np.clip(np.ceil(rel * len(ramp)).astype(np.int64) - 1, 0, len(ramp) - 1)
    pic = np.where(counts > 0, ramp[level], " ")
    legend = f"({R} x {C} in {bins[0]} x {bins[1]} cells; ' ' empty, '{''.join(ramp)}' emptiest to fullest"
    lines = [legend + f": {100 * float(frac.max()):.3g}% filled)"]
    return lines + ["|" + "".join(row) + "|" for row in pic]


def _array_text(a: Any, indent: int) -> str:
    from ust.runtime import xp as _xp

    h = _xp.to_host(a)
    text = np.array2string(h, threshold=48, edgeitems=10, max_line_width=100 - indent, separator=" ")
    return text.replace("\n", "\n" + " " * indent)


def _describe(t: Tensor) -> list[str]:
    fmt = t.format
    names = fmt.dim_names or tuple(f"d{k}" for k in range(fmt.ndim))
    extents = fmt.lvl_shape(t.shape)
    out = [
        f"  shape {t.shape}  dtype {t.dtype}  index {t.index_dtype}  nse {t.nse}  nnz {t.nnz}  "
        f"({_human(_nbytes(t))})"
    ]
    width = max(len(f"{lv.expr.to_text(names)} : {lv.type.to_text()}") for lv in fmt.levels)
    for k, lv in enumerate(fmt.levels):
        kind = f"{lv.expr.to_text(names)} : {lv.type.to_text()}"
        bufs = [(b, a) for b, a in (("pos", t.pos(k)), ("crd", t.crd(k))) if a is not None]
        out.append(f"  level {k}: {kind:<{width}}  extent {extents[k]}" + ("" if bufs else "  (no buffers)"))
        for b, a in bufs:
            label = f"    {b}({k}) = "
            out.append(label + _array_text(a, len(label)))
    label = "  values   = "
    out.append(label + _array_text(t.values, len(label)))
    return out


def _nbytes(t: Tensor) -> int:
    return sum(int(a.nbytes) for a in t.buffers().values())


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _title(fmt: Format) -> str:
    std = fmt.standard_name
    return f"{std} = {fmt.map_text()}" if std else f"custom format {fmt.to_text()}"


def _is_file(target: str) -> bool:
    p = Path(target)
    return p.suffix.lower() in _FILE_SUFFIXES or (p.is_file() and "(" not in target)


# ----------------------------------------------------------------------------- ust show


def configure_show(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        metavar="FORMAT_OR_FILE",
        help="a format (standard name such as CSR or 'BSR[2,2]', or DSL text) to show a sample matrix "
        "stored in it, or a .mtx / .npz / .h5 file to show",
    )
    p.add_argument(
        "--shape", help="shape of the sample for a FORMAT, e.g. 6,8 (default 6x8, rounded to blocks)"
    )
    p.add_argument("--format", help="convert the file's tensor to this format first")
    p.add_argument(
        "--png", metavar="FILE", help="also draw the sparsity and level structure to a PNG (matplotlib)"
    )
    p.add_argument("--max-rows", type=int, default=32, help="rows of the text picture (default 32)")
    p.add_argument("--max-cols", type=int, default=64, help="columns of the text picture (default 64)")


def run_show(args: argparse.Namespace) -> int:
    from ust import io
    from ust.cli import checks
    from ust.formats.library import resolve

    target: str = args.target
    convert_to = resolve(args.format) if args.format else None  # bad text fails before any work
    checks.int_range(args.max_rows, "--max-rows", 1)
    checks.int_range(args.max_cols, "--max-cols", 1)
    if args.png:
        checks.output_file(args.png, "--png")
    if _is_file(target):
        if args.shape:
            raise InvalidValueError("--shape sets the sample of a FORMAT; a file has its own shape")
        t = io.read(checks.input_file(target))
        origin = f"{target}: {_title(t.format)}"
    else:
        fmt = resolve(target)
        shape = _parse_shape(args.shape) if args.shape else None
        if shape is not None and len(shape) != fmt.ndim:
            raise ShapeError(
                f"--shape {args.shape} has {len(shape)} dimensions but the format has {fmt.ndim}"
            )
        if shape is not None and math.prod(shape) > _MAX_SAMPLE:
            raise ShapeError(
                f"--shape {args.shape} has {math.prod(shape)} entries; a sample is built dense, so at most "
                f"{_MAX_SAMPLE:,} (show a file for larger tensors)"
            )
        t = sample_tensor(fmt, shape)
        what = " x ".join(map(str, t.shape)) if t.ndim > 1 else f"length-{t.shape[0]}"
        origin = f"{_title(fmt)}\n  a {what} sample with values 1, 2, 3, ... in row-major order"
        structured = [lv.type for lv in fmt.levels if lv.type.n]
        if structured:
            n, m = structured[0].n, structured[0].m
            origin += f" (pruned to the {n} largest of every {m})"
    if convert_to is not None:
        t = t.convert(convert_to)
        origin += f"\n  converted to {_title(t.format)}"
    print(origin)
    for line in _describe(t):
        print(line)
    rows = f"; rows are dims 0..{t.ndim - 2} flattened" if t.ndim > 2 else ""
    print(f"sparsity ('#' stored nonzero, 'o' stored zero, '.' not stored{rows}):")
    for line in text_picture(t, max_rows=args.max_rows, max_cols=args.max_cols):
        print("  " + line)
    if args.png:
        from ust.io.plot import plot

        plot(t, args.png)
        print(f"picture: {args.png}")
    return 0


# ----------------------------------------------------------------------------- ust convert


def configure_convert(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", metavar="IN", help="a Matrix Market (.mtx) or Binsparse (.npz, .h5) file")
    p.add_argument("--format", required=True, help="target format: a standard name ('BSR[2,2]') or DSL text")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="output file: .mtx, .npz or .h5 / .hdf5"
    )
    p.add_argument("--index-dtype", choices=("int32", "int64"), help="index dtype of the result")
    p.add_argument("--dtype", help="cast the values first (e.g. float32)")
    p.add_argument("--compress", action="store_true", help="compress the Binsparse arrays (zip / gzip)")


def run_convert(args: argparse.Namespace) -> int:
    from ust import io
    from ust.cli import checks
    from ust.formats.library import resolve

    fmt = resolve(args.format)  # bad format text: fail before reading anything
    checks.input_file(args.input)
    checks.dtype(args.dtype)
    out = checks.output_file(args.output, "-o")
    if out.suffix.lower() not in (".mtx", ".npz", ".h5", ".hdf5"):
        raise InvalidValueError(f"-o {out}: the output must end in .mtx, .npz, .h5 or .hdf5")
    if out.suffix.lower() == ".mtx" and fmt.ndim != 2:
        raise InvalidValueError(
            f"-o {out}: Matrix Market holds matrices; {fmt.to_text()} has {fmt.ndim} dims"
        )
    if args.compress and out.suffix.lower() == ".mtx":
        raise InvalidValueError("--compress applies to Binsparse output (.npz, .h5); -o names a .mtx file")
    t0 = time.perf_counter()
    t = io.read(args.input)
    if args.dtype:
        t = t.astype(args.dtype)
    t1 = time.perf_counter()
    print(f"read    {args.input}: {_title(t.format)}")
    print(
        f"        shape {t.shape}, {t.dtype}, nse {t.nse}, nnz {t.nnz}, {_human(_nbytes(t))} in {t1 - t0:.3f} s"
    )
    from ust.cli.progress import progress

    with progress(f"converting to {fmt.standard_name or 'the target format'}"):
        u = t.convert(fmt, index_dtype=args.index_dtype)
    t2 = time.perf_counter()
    per = f", {1e9 * (t2 - t1) / max(t.nnz, 1):.1f} ns per nonzero" if t.nnz else ""
    print(f"convert -> {_title(u.format)}")
    print(f"        nse {u.nse}, index {u.index_dtype}, {_human(_nbytes(u))} in {t2 - t1:.3f} s{per}")
    if out.suffix.lower() == ".mtx":
        io.mmwrite(out, u)
    else:
        io.save(out, u, compress=args.compress)
    t3 = time.perf_counter()
    print(f"wrote   {out}: {_human(out.stat().st_size)} on disk in {t3 - t2:.3f} s")
    return 0
