"""Host-side preparation of a generated matmul: checks, dtypes, layouts and kernel arguments.

Shared by the C route, the CUDA route and the interpreter (tests), so that all three see
identical arguments.  Written against a minimal tensor protocol: ``.format``, ``.shape``,
``.dtype``, ``.index_dtype``, ``.pos(k)``, ``.crd(k)``, ``.values`` (NumPy or CuPy arrays;
batched buffers have shape ``(members, capacity)``).

Shapes follow :func:`ust.ops_matmul.result_shape`: ``A (m, n) @ x (n,) | (n, k)``; a
batched ``A (B, m, n) @ x (B, n) | (B, n, k)``; a 3-D ``A (m, n, p) @ x (p,)`` (and
``(p, k)``).  Everything is checked before any work; the caller's arrays are never written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ust.codegen.ir import Kernel
from ust.codegen.levels import walkers
from ust.codegen.lower import VALUE_DTYPES
from ust.formats.model import Format, LevelFormat
from ust.runtime.errors import DeviceError, ShapeError, UnsupportedError
from ust.runtime.xp import namespace

__all__ = ["Launch", "array_layout", "choose_itype", "dense_operand", "prepare", "result_dtype", "to_layout"]

_I32_LIMIT = 2**31 - 1


def _batch_dims(fmt: Format) -> list[int]:
    out = []
    for lv in fmt.levels:
        if lv.format is not LevelFormat.BATCH:
            break
        out.append(lv.expr.dims[0])
    return sorted(out)


def operand_shape(fmt: Format, shape: tuple[int, ...], xshape: tuple[int, ...]) -> tuple[str, int]:
    """(op, columns) for ``A @ x``, or ShapeError naming both shapes."""
    bdims = _batch_dims(fmt)
    lead = tuple(shape[d] for d in bdims)
    if bdims and bdims != list(range(len(bdims))):
        raise UnsupportedError("batch levels must index the leading dimensions for matmul")
    k = shape[-1]
    nlead = len(lead)
    if xshape[:nlead] == lead:
        rest = xshape[nlead:]
        if len(rest) == 1 and rest[0] == k:
            return "mv", 1
        if len(rest) == 2 and rest[0] == k:
            return "mm", int(rest[1])
    want = f"({', '.join(map(str, (*lead, k)))}) or ({', '.join(map(str, (*lead, k)))}, ncols)"
    raise ShapeError(f"cannot multiply A of shape {shape} by x of shape {xshape}: x must have shape {want}")


def array_layout(a: Any) -> str | None:
    """``"row"`` (C order), ``"col"`` (last two axes swapped in memory) or None (strided).

    Generated kernels and cuSPARSE read dense operands through a bare pointer with implied
    strides, so a 1-D view with a stride (``X[:, 0]``, ``x[::2]``, ``x[::-1]``) is None too.
    """
    if a.flags.c_contiguous:
        return "row"
    if a.ndim >= 2 and a.swapaxes(-1, -2).flags.c_contiguous:
        return "col"
    return None


def to_layout(xp: Any, a: Any, layout: str, dtype: Any = None) -> Any:
    """``a`` itself when already laid out so (and of ``dtype``), else a copy that is (one pass).

    ``"col"`` applies to 2-D and wider arrays; a 1-D operand is always made C-contiguous.
    """
    want = np.dtype(dtype) if dtype is not None else a.dtype
    if a.ndim < 2:
        layout = "row"
    if array_layout(a) == layout:
        return a if a.dtype == want else a.astype(want, order="K")
    if layout == "row":
        return xp.ascontiguousarray(a, dtype=want)
    return xp.ascontiguousarray(a.swapaxes(-1, -2), dtype=want).swapaxes(-1, -2)


def dense_operand(xp: Any, a: Any, dtype: Any = None, layouts: tuple[str, ...] = ("row", "col")) -> Any:
    """The one normalisation of a dense operand for a kernel or a library call.

    Every route reads dense operands (x, B, C, SDDMM's X and Y) through a pointer with
    implied strides, so each gets ``a`` itself when its layout is one of ``layouts`` (and its
    dtype ``dtype``), else a copy laid out as ``layouts[0]``: strided, reversed and offset views
    are copied, contiguous C / Fortran arrays are not.  Array-likes (lists) become arrays of
    ``xp``.  The caller's array is never written.
    """
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        a = xp.asarray(a)
    lay = array_layout(a)
    return to_layout(xp, a, lay if lay in layouts else layouts[0], dtype)


def result_dtype(*dtypes: Any, scalars: tuple[complex, ...] = ()) -> str:
    """The value dtype of the kernel: NumPy promotion, integers -> float64, complex scalars -> complex."""
    try:
        dt = np.result_type(*[np.dtype(d) for d in dtypes])
    except (TypeError, ValueError) as exc:
        names = ", ".join(str(np.dtype(d)) for d in dtypes)
        raise UnsupportedError(
            f"value dtypes {names} are not supported; supported: {', '.join(VALUE_DTYPES)}"
        ) from exc
    if any(complex(s).imag != 0 for s in scalars):
        dt = np.result_type(dt, np.complex64)
    if dt.kind in "biu":
        dt = np.dtype(np.float64)
    elif dt == np.float16:
        dt = np.dtype(np.float32)
    if str(dt) not in VALUE_DTYPES:
        raise UnsupportedError(f"value dtype {dt} is not supported; supported: {', '.join(VALUE_DTYPES)}")
    return str(dt)


def choose_itype(sizes: list[int], factor: int = 1) -> str:
    """int32 when every size (times ``factor``, e.g. threads per row) fits, else int64."""
    return "int32" if max([0, *sizes]) * max(factor, 1) < _I32_LIMIT else "int64"


@dataclass
class Launch:
    """Everything a backend needs to run one generated matmul."""

    op: str
    layout: str
    dtype: str
    index_dtype: str
    ncols: int
    out_shape: tuple[int, ...]
    buffers: dict[str, Any]
    scalars: dict[str, int]
    alpha: complex
    beta: complex
    has_y0: bool
    sizes: list[int]

    def itype(self, factor: int = 1) -> str:
        return choose_itype(self.sizes, factor)

    def args(self, kernel: Kernel, y: Any) -> dict[str, Any]:
        """Arguments by parameter name for ``kernel`` writing into ``y``."""
        out: dict[str, Any] = {}
        for p in kernel.params:
            if p.name == "y":
                out["y"] = y
            elif p.name in self.buffers:
                out[p.name] = self.buffers[p.name]
            elif p.name == "alpha":
                out["alpha"] = self.alpha
            elif p.name == "beta":
                out["beta"] = self.beta
            elif p.name in self.scalars:
                out[p.name] = self.scalars[p.name]
            else:  # pragma: no cover - lowering and launch disagree
                raise KeyError(f"no argument for kernel parameter {p.name}")
        return out


def prepare(
    a: Any,
    x: Any,
    c: Any = None,
    *,
    alpha: complex = 1.0,
    beta: complex = 0.0,
    out: Any = None,
    dtype: str | None = None,
) -> Launch:
    """Check ``alpha * a @ x + beta * c`` and gather its kernel arguments (no computation).

    ``out`` (optional) fixes the layout of the result; ``x`` and ``c`` are copied only where
    their dtype or layout differ from what the kernel reads.
    """
    fmt: Format = a.format
    shape = tuple(int(s) for s in a.shape)
    xp = namespace(a.values)
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        x = xp.asarray(x)
    host = xp is np
    for name, arr in (("x", x), ("c", c), ("out", out)):
        # compare by module name: an operand in the other memory must not need CuPy to be refused
        if arr is not None and (type(arr).__module__.split(".")[0] == "cupy") == host:
            where = "GPU (CuPy)" if xp is not np else "host (NumPy)"
            raise DeviceError(f"{name} is not in the same memory as A (A's buffers are {where} arrays)")
    xshape = tuple(int(s) for s in x.shape)
    op, ncols = operand_shape(fmt, shape, xshape)
    out_shape = shape[:-1] + ((ncols,) if op == "mm" else ())
    if c is not None and beta != 0:
        if tuple(int(s) for s in c.shape) != out_shape:
            raise ShapeError(f"c has shape {tuple(c.shape)} but alpha * A @ x has shape {out_shape}")
    else:
        c = None
    if out is not None and tuple(int(s) for s in out.shape) != out_shape:
        raise ShapeError(f"out has shape {tuple(out.shape)} but alpha * A @ x has shape {out_shape}")
    dts = [a.dtype, x.dtype] + ([c.dtype] if c is not None else [])
    dt = dtype or result_dtype(*dts, scalars=(alpha, beta))
    index_dtype = str(np.dtype(a.index_dtype))
    if index_dtype not in ("int32", "int64"):
        raise UnsupportedError(f"index dtype {index_dtype} is not supported; supported: int32, int64")
    layout = "row"
    if op == "mm":  # the result's layout (a strided ``out`` gets a temporary, copied back)
        layout = (array_layout(out) if out is not None else None) or array_layout(x) or "row"
    # every dense operand, 1-D included, is read through a pointer: strided views are copied
    x = to_layout(xp, x, layout, dt)
    if c is not None:
        c = to_layout(xp, c, layout, dt)
    bufs: dict[str, Any] = {}
    sizes: list[int] = [int(np.prod(out_shape)), int(np.prod(xshape))]
    scal: dict[str, int] = {f"D{d}": s for d, s in enumerate(shape)}
    bounds = fmt.lvl_bounds(shape)
    for w in walkers(fmt):  # each level's walker names the buffers it owns
        k = w.k
        lo, hi = bounds[k]
        scal[f"S{k}"], scal[f"L{k}"] = hi - lo, lo
        for name, kind in w.buffers():
            buf = a.pos(k) if kind == "pos" else a.crd(k)
            bufs[name] = buf
            scal[f"BP{k}" if kind == "pos" else f"BC{k}"] = int(buf.shape[-1])
            sizes.append(int(buf.size))
    vals = a.values
    if vals.dtype != np.dtype(dt):
        vals = vals.astype(dt)
    bufs["val"] = vals
    scal["BV"] = int(vals.shape[-1]) if vals.ndim else 0
    sizes.append(int(vals.size))
    bdims = _batch_dims(fmt)
    scal["NB"] = int(np.prod([shape[d] for d in bdims])) if bdims else 1
    scal["NC"] = ncols
    scal["NY"] = int(np.prod(out_shape))
    scal["has_y0"] = int(c is not None)
    sizes += [abs(v) for v in scal.values()]
    sizes.append(max(sizes) * max(ncols, 1))  # flattened (entry, column) thread indices of SpMM
    bufs["x"] = x
    bufs["y0"] = c if c is not None else x  # never read when has_y0 == 0
    return Launch(
        op,
        layout,
        dt,
        index_dtype,
        ncols,
        out_shape,
        bufs,
        scal,
        complex(alpha),
        complex(beta),
        c is not None,
        sizes,
    )


def kernel_scalar(dtype: str, v: complex) -> Any:
    """``v`` as a NumPy scalar of ``dtype`` (real part only for real dtypes)."""
    t = np.dtype(dtype)
    return t.type(v if t.kind == "c" else complex(v).real)
