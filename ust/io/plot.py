"""Pictures of a tensor: its sparsity pattern and its level structure (matplotlib, optional).

``plot(t, "t.png")`` draws two panels: on the left the stored entries (one cell per entry for
small tensors, one marker per entry up to ``max_entries``, a downsampled density image
beyond), on the right what each level stores (type, ``pos`` / ``crd`` arrays drawn as rows of
boxes holding their first values) and the values.  Tensors of more than two dimensions are
drawn as a matrix of ``prod(shape[:-1])`` rows.  matplotlib is imported when a picture is
drawn (``pip install "ust[plot]"``); figures are made on the Agg canvas, so no window opens
and the global pyplot state is left alone.

:func:`stored_grid` and :func:`binned_counts` are shared with ``ust show``'s text picture.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.runtime.errors import BackendUnavailableError
from ust.runtime.log import get_logger

if TYPE_CHECKING:
    from ust.tensor import Tensor

__all__ = ["binned_counts", "grid_shape", "plot", "plot_advice", "stored_grid"]

log = get_logger("plot")
log.addHandler(logging.NullHandler())

#: Colours of the buffer boxes, by buffer kind.
_BOX_COLOURS = {"pos": "#cfe2f3", "crd": "#fce5cd", "values": "#d9ead3", "none": "#eeeeee"}


def grid_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The matrix a tensor is drawn as: vectors as one row, N-D as ``prod(shape[:-1])`` rows."""
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return 1, shape[0]
    return math.prod(shape[:-1]), shape[-1]


def stored_grid(t: Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column (of :func:`grid_shape`) and value of every stored entry, as NumPy arrays.

    Every stored slot inside the tensor counts (as ``nnz`` counts them): explicit zeros, BSR
    block fill, DIA padding inside the matrix, every element of a dense format.
    """
    from ust.convert.unpack import unpack
    from ust.runtime import xp as _xp

    ent = unpack(t, keep_zeros=True)
    dims = [_xp.to_host(d).astype(np.int64, copy=False) for d in ent.dims()]
    vals = _xp.to_host(ent.values)
    if t.ndim == 1:
        return np.zeros_like(dims[0]), dims[0], vals
    if t.ndim == 2:
        return dims[0], dims[1], vals
    rows = np.ravel_multi_index(tuple(dims[:-1]), t.shape[:-1]) if dims[0].size else dims[0]
    return np.asarray(rows, dtype=np.int64), dims[-1], vals


def binned_counts(
    rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], bins: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Entries per cell of a ``bins`` grid laid over a ``shape`` matrix, and each cell's area."""
    R, C = shape
    h, w = bins
    rb = rows * h // max(R, 1)
    cb = cols * w // max(C, 1)
    counts = np.bincount(rb * w + cb, minlength=h * w).reshape(h, w)
    # rows of the matrix in each row bin (likewise columns): the cell's area in entries
    rarea = np.bincount(np.arange(R) * h // max(R, 1), minlength=h)
    carea = np.bincount(np.arange(C) * w // max(C, 1), minlength=w)
    return counts, np.outer(rarea, carea)


def _matplotlib() -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise BackendUnavailableError(
            "drawing tensors needs matplotlib", pip_command='pip install "ust[plot]"'
        ) from None
    return Figure, FigureCanvasAgg


def _short(v: Any) -> str:
    if isinstance(v, (complex, np.complexfloating)):
        return f"{v.real:.3g}{v.imag:+.2g}j"
    if isinstance(v, (float, np.floating)):
        return f"{v:.3g}"
    return str(v)


def _pattern_panel(ax: Any, t: Tensor, max_entries: int) -> None:
    R, C = grid_shape(t.shape)
    rows, cols, vals = stored_grid(t)
    n = rows.shape[0]
    nz = int(np.count_nonzero(vals))
    head = f"{n} stored entries ({nz} nonzero, {n - nz} zero) in {R} x {C}"
    ax.set_title(head, fontsize=10)
    if R == 0 or C == 0:
        ax.text(0.5, 0.5, "empty", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    if R <= 64 and C <= 64 and n <= max_entries:
        # one cell per entry, coloured by magnitude; explicit zeros grey
        img = np.full((R, C), np.nan)
        img[rows, cols] = np.abs(vals)
        zeros = np.zeros((R, C), dtype=bool)
        zeros[rows, cols] = vals == 0
        img[zeros] = np.nan
        ax.imshow(np.where(zeros, 1.0, np.nan), cmap="Greys", vmin=0, vmax=4, interpolation="nearest")
        ax.imshow(img, cmap="viridis", interpolation="nearest")
        ax.set_title(head.replace(" zero)", " zero: grey)"), fontsize=10)
        ax.set_xticks(np.arange(-0.5, C, 1), minor=True)
        ax.set_yticks(np.arange(-0.5, R, 1), minor=True)
        ax.grid(which="minor", color="#dddddd", linewidth=0.5)
        ax.tick_params(which="minor", length=0)
        if R <= 16 and C <= 16:
            top = float(np.nanmax(img)) if nz else 1.0
            for r, c, v in zip(rows.tolist(), cols.tolist(), vals.tolist()):  # at most 256 labels
                colour = "#444444" if v == 0 or abs(v) > 0.6 * top else "white"
                ax.text(c, r, _short(v), ha="center", va="center", fontsize=6, color=colour)
    elif n <= max_entries:
        size = max(0.5, min(20.0, 4000.0 / max(R, C)))
        ax.scatter(cols, rows, s=size, marker="s", c=np.where(vals == 0, "#999999", "#1f4e79"), linewidths=0)
        ax.set_xlim(-0.5, C - 0.5)
        ax.set_ylim(R - 0.5, -0.5)
        ax.set_aspect("equal" if 0.2 < R / C < 5 else "auto")
    else:
        bins = (min(R, 400), min(C, 400))
        counts, area = binned_counts(rows, cols, (R, C), bins)
        frac = np.where(counts > 0, counts / np.maximum(area, 1), np.nan)
        im = ax.imshow(
            frac,
            cmap="viridis",
            interpolation="nearest",
            extent=(-0.5, C - 0.5, R - 0.5, -0.5),
            aspect="equal" if 0.2 < R / C < 5 else "auto",
            norm=_lognorm(frac),
        )
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="fill of each cell")
        ax.set_title(f"{head}\n(density of stored entries, {bins[0]} x {bins[1]} cells)", fontsize=10)
    ax.set_xlabel("column" if t.ndim <= 2 else f"dim {t.ndim - 1}")
    ax.set_ylabel("row" if t.ndim == 2 else ("-" if t.ndim == 1 else f"rows of dims 0..{t.ndim - 2}"))


def _lognorm(frac: np.ndarray) -> Any:
    from matplotlib.colors import LogNorm

    finite = frac[np.isfinite(frac)]
    lo = float(finite.min()) if finite.size else 1e-3
    return LogNorm(vmin=min(lo, 0.999), vmax=1.0)


def _buffer_rows(t: Tensor) -> list[tuple[str, str, Any]]:
    """(label, kind, array or None) per line of the structure panel."""
    from ust.runtime import xp as _xp

    fmt = t.format
    names = fmt.dim_names or tuple(f"d{k}" for k in range(fmt.ndim))
    extents = fmt.lvl_shape(t.shape)
    lines: list[tuple[str, str, Any]] = []
    for k, lv in enumerate(fmt.levels):
        lines.append(
            (
                f"level {k}: {lv.expr.to_text(names)} : {lv.type.to_text()}  (extent {extents[k]})",
                "head",
                None,
            )
        )
        bufs = [("pos", t.pos(k)), ("crd", t.crd(k))]
        shown = [(kind, a) for kind, a in bufs if a is not None]
        if not shown:
            lines.append(("no buffers", "none", None))
        for kind, a in shown:
            lines.append((f"{kind}({k})", kind, _xp.to_host(a)))
    lines.append((f"values ({t.dtype})", "head", None))
    lines.append(("values", "values", _xp.to_host(t.values)))
    return lines


def _structure_panel(ax: Any, t: Tensor, max_boxes: int) -> None:
    from matplotlib.patches import Rectangle

    lines = _buffer_rows(t)
    label_w = 3.2
    ax.set_xlim(0, label_w + max_boxes + 3.5)
    ax.set_ylim(len(lines), -0.5)
    ax.set_axis_off()
    ax.set_title("level structure", fontsize=10)
    for y, (label, kind, arr) in enumerate(lines):
        if kind == "head":
            ax.text(0, y, label, fontsize=8, fontweight="bold", va="center", family="monospace")
            continue
        ax.text(label_w - 0.2, y, label, fontsize=7, va="center", ha="right", family="monospace")
        if arr is None:
            ax.add_patch(
                Rectangle((label_w, y - 0.35), 3, 0.7, facecolor=_BOX_COLOURS["none"], edgecolor="#999999")
            )
            ax.text(label_w + 1.5, y, "-", fontsize=7, va="center", ha="center")
            continue
        flat = arr.reshape(-1)
        head = flat[:max_boxes].tolist()
        for x, v in enumerate(head):  # at most max_boxes boxes per line
            ax.add_patch(
                Rectangle(
                    (label_w + x, y - 0.35), 1, 0.7, facecolor=_BOX_COLOURS[kind], edgecolor="#666666", lw=0.5
                )
            )
            ax.text(label_w + x + 0.5, y, _short(v), fontsize=5.5, va="center", ha="center")
        shape = "x".join(map(str, arr.shape))
        more = (
            f"... {flat.shape[0] - len(head)} more ({shape})" if flat.shape[0] > len(head) else f"({shape})"
        )
        ax.text(label_w + len(head) + 0.3, y, more, fontsize=6.5, va="center", color="#555555")


def plot(
    tensor: Tensor,
    path: str | Path | None = None,
    *,
    max_entries: int = 20_000,
    max_boxes: int = 24,
    title: str | None = None,
    dpi: int = 120,
) -> Any:
    """Draw ``tensor``'s sparsity pattern and level structure; save to ``path`` if given.

    ``max_entries``: above this many stored entries the pattern is a downsampled density
    image (computed with one ``bincount``, no loop over entries); ``max_boxes``: values drawn
    per buffer.  Returns the matplotlib Figure.
    """
    Figure, FigureCanvasAgg = _matplotlib()
    t = tensor
    nlines = len(_buffer_rows(t))
    fig = Figure(figsize=(15, max(5.0, 0.32 * nlines + 2.2)), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.7]})
    fmt = t.format
    name = fmt.standard_name or "custom format"
    fig.suptitle(
        title
        or f"{name}  {fmt.map_text()}\nshape {t.shape}, {t.dtype}, index {t.index_dtype}, nse {t.nse}, nnz {t.nnz}",
        fontsize=11,
    )
    _pattern_panel(left, t, max_entries)
    _structure_panel(right, t, max_boxes)
    if path is not None:
        fig.savefig(str(path), dpi=dpi)
        log.info("drew %s tensor %s to %s", name, t.shape, path)
    return fig


def plot_advice(
    rows: list[dict[str, Any]], title: str, path: str | Path | None = None, *, dpi: int = 120
) -> Any:
    """Draw ``ust.advise``'s table: per-call time of each format (left) and the calls after
    which converting pays (right; "never" drawn as an empty bar).  ``rows`` are the table's
    rows as dicts (``format``, ``call_s``, ``break_even``); returns the matplotlib Figure."""
    Figure, FigureCanvasAgg = _matplotlib()
    rows = sorted(rows, key=lambda r: r["call_s"])
    names = [str(r["format"])[:40] for r in rows]
    fig = Figure(figsize=(11, max(3.0, 0.45 * len(rows) + 1.5)), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, sharey=True)
    y = np.arange(len(rows))
    left.barh(y, [1e3 * r["call_s"] for r in rows], color="#6fa8dc")
    left.set_yticks(y, names)
    left.invert_yaxis()
    left.set_xlabel("ms per call")
    even = [r["break_even"] for r in rows]
    right.barh(y, [0.0 if e is None else float(e) for e in even], color="#93c47d")
    for yi, e, r in zip(y, even, rows):
        label = "as given" if r.get("convert_s", 1.0) == 0 else ("never" if e is None else f"{math.ceil(e)}")
        right.text(0, yi, f" {label}", va="center", fontsize=9)
    right.set_xlabel("calls until the conversion pays")
    fig.suptitle(title, fontsize=11)
    if path is not None:
        fig.savefig(str(path), dpi=dpi)
        log.info("drew the advice table to %s", path)
    return fig
