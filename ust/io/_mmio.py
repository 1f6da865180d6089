"""Matrix Market text read and written with NumPy array programs.

No native reader ever sees a file: the header is parsed here (a few lines), the body is
tokenised in chunks of a few MiB with vectorised byte arithmetic, integers are decoded
digit column by digit column and reals by NumPy's string cast.  Every defect is a
:class:`~ust.runtime.errors.FileFormatError` naming the file and the line; nothing is
allocated from the header's sizes until the file has been seen to hold that many entries.

Numbers are written in the shortest text that reads back to the same bits (``-0.0``,
``inf`` and ``nan`` included), unless a ``precision`` is asked for.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ust.runtime.errors import FileFormatError, InvalidValueError, ShapeError, UnsupportedError

__all__ = ["FIELDS", "SYMMETRIES", "MMData", "mirror", "read_mm", "write_mm"]

#: Field words ust reads (``double`` is a common synonym of ``real``) -> canonical field.
FIELDS = {
    "real": "real",
    "double": "real",
    "integer": "integer",
    "unsigned-integer": "unsigned-integer",
    "complex": "complex",
    "pattern": "pattern",
}
SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")

_INDEX_MAX = 2**63 - 1
_MAX_TOKEN = 48  # longest number token accepted (a float64 needs at most 24 characters)
_CHUNK = 1 << 22  # body bytes tokenised at once
_WRITE_ROWS = 1 << 18  # entries formatted at once

_DIGIT = np.zeros(256, dtype=bool)
_DIGIT[ord("0") : ord("9") + 1] = True
# characters a real token may hold: digits, sign, point, exponent, inf / infinity / nan
_REALCH = _DIGIT.copy()
_REALCH[[ord(c) for c in "+-.eEinfatyINFATY"]] = True

_SKIP = re.compile(rb"(?:[ \t\r\v\f]*(?:%[^\n]*)?\n)*")


@dataclass
class MMData:
    """A parsed file: coordinate entries (0-based, in file order, symmetry expanded) or a
    dense row-major array."""

    layout: str  # "coordinate" or "array"
    field: str
    symmetry: str
    shape: tuple[int, int]
    rows: np.ndarray | None
    cols: np.ndarray | None
    values: np.ndarray  # 1-D for coordinate, 2-D (row-major) for array


class _Bad(Exception):
    """A defect at a line of the file (turned into FileFormatError with the path)."""

    def __init__(self, line: int, message: str, cls: type[Exception] = FileFormatError) -> None:
        super().__init__(message)
        self.line = line
        self.message = message
        self.cls = cls


def _error(path: Path, line: int, message: str, cls: type[Exception] = FileFormatError) -> Exception:
    where = f"line {line}: " if line else ""
    text = f"{path}: not a valid Matrix Market file: {where}{message}"
    if cls is FileFormatError:
        return FileFormatError(text, path=str(path), line=line, rule="matrix-market")
    return cls(text)


# ----------------------------------------------------------------------------- bytes of a file


def read_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed by suffix (.gz, .bz2, .xz); corrupt archives are errors."""
    with open(path, "rb") as fh:
        raw = fh.read()
    suffix = path.suffix.lower()
    try:
        if suffix == ".gz":
            return gzip.decompress(raw)
        if suffix == ".bz2":
            return bz2.decompress(raw)
        if suffix == ".xz":
            return lzma.decompress(raw)
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
        raise FileFormatError(
            f"{path}: not a readable {suffix} file (corrupt or truncated): {exc}",
            path=str(path),
            rule="matrix-market",
        ) from exc
    return raw


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


# ----------------------------------------------------------------------------- header


def _parse_header(data: bytes) -> tuple[str, str, str, list[int], int, int]:
    """(layout, field, symmetry, sizes, body offset, line number of the body's first line)."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise _Bad(_line_of(data, nul), f"NUL byte at offset {nul} (a binary or corrupt file)")
    end = data.find(b"\n")
    first = data[: end if end >= 0 else len(data)]
    words = first.split()
    if not words or words[0].lower() != b"%%matrixmarket":
        raise _Bad(1, "the first line must start with %%MatrixMarket")
    try:
        text = [w.decode("ascii").lower() for w in words[1:]]
    except UnicodeDecodeError:
        raise _Bad(1, "the banner holds non-ASCII bytes") from None
    if len(text) != 4:
        raise _Bad(1, f"the banner needs 4 words (matrix, layout, field, symmetry), got {len(text)}")
    obj, layout, field, symmetry = text
    if obj != "matrix":
        raise _Bad(1, f"object {obj!r}: ust reads 'matrix' files", UnsupportedError)
    if layout not in ("coordinate", "array"):
        raise _Bad(1, f"layout {layout!r}: expected coordinate or array")
    if field not in FIELDS:
        raise _Bad(1, f"field {field!r}: expected one of {', '.join(FIELDS)}")
    if symmetry not in SYMMETRIES:
        raise _Bad(1, f"symmetry {symmetry!r}: expected one of {', '.join(SYMMETRIES)}")
    field = FIELDS[field]
    if layout == "array" and field == "pattern":
        raise _Bad(1, "an array file cannot have field pattern")
    if symmetry == "skew-symmetric" and field in ("pattern", "unsigned-integer"):
        raise _Bad(1, f"a skew-symmetric matrix cannot have field {field}")
    pos = len(first) + 1 if end >= 0 else len(first)
    pos = _SKIP.match(data, pos).end()  # type: ignore[union-attr]  # the pattern matches empty
    line = _line_of(data, pos)
    end = data.find(b"\n", pos)
    size_line = data[pos : end if end >= 0 else len(data)]
    tokens = size_line.split()
    want = 3 if layout == "coordinate" else 2
    if not tokens or tokens[0].startswith(b"%"):
        raise _Bad(line, "the file ends before the size line")
    if len(tokens) != want:
        what = "rows, columns, entries" if want == 3 else "rows, columns"
        raise _Bad(line, f"the size line needs {want} integers ({what}), got {len(tokens)} fields")
    sizes = []
    for tok in tokens:
        if len(tok) > 24 or not tok.isdigit():
            raise _Bad(
                line, f"size {tok[:40].decode('ascii', 'backslashreplace')!r} is not a non-negative integer"
            )
        n = int(tok)
        if n > _INDEX_MAX:
            raise _Bad(line, f"size {n} is larger than 2**63 - 1", ShapeError)
        sizes.append(n)
    body = end + 1 if end >= 0 else len(data)
    return layout, field, symmetry, sizes, body, line + 1


# ----------------------------------------------------------------------------- body


def _ints(mat: np.ndarray, lens: np.ndarray, signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Decimal integer tokens (rows of ``mat``) -> (int64 or uint64 values, bad mask)."""
    n, width = mat.shape
    first = mat[:, 0] if width else np.zeros(n, np.uint8)
    neg = first == ord("-")
    sign = (neg | (first == ord("+"))).astype(np.int64)
    col = np.arange(width)
    inside = (col >= sign[:, None]) & (col < lens[:, None])
    isdig = _DIGIT[mat]
    ndig = lens - sign
    bad = (inside & ~isdig).any(axis=1) | (ndig < 1) | (ndig > 20)
    val = np.zeros(n, dtype=np.uint64)
    ovf = np.zeros(n, dtype=bool)
    top = np.uint64(2**64 - 1)
    for k in range(width):  # one pass per character column, not per entry
        d = mat[:, k].astype(np.uint64) - np.uint64(ord("0"))
        act = inside[:, k] & isdig[:, k]
        ovf |= act & (val > (top - d) // np.uint64(10))
        val = np.where(act, val * np.uint64(10) + d, val)
    if not signed:
        bad |= ovf | (neg & (val != 0))
        return val, bad
    bad |= ovf | (val > np.where(neg, np.uint64(2**63), np.uint64(2**63 - 1)))
    out = val.astype(np.int64)
    return np.where(neg, -out, out), bad


def _reals(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Real tokens -> (float64 values, bad mask); the charset is checked first, the rest is
    NumPy's string-to-float cast (bisected on failure to find the bad token)."""
    n, width = mat.shape
    bad = (~_REALCH[mat] & (mat != 0)).any(axis=1) | (mat[:, 0] == 0 if width else np.ones(n, bool))
    if bad.any():
        return np.zeros(n), bad
    strings = np.ascontiguousarray(mat).view(f"S{max(width, 1)}").reshape(n)
    try:
        return strings.astype(np.float64), bad
    except ValueError:
        pass
    lo, hi = 0, n  # the first token that does not convert lies in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            strings[lo:mid].astype(np.float64)
            lo = mid
        except ValueError:
            hi = mid
    bad[lo] = True
    return np.zeros(n), bad


def _body_chunks(body: memoryview, start: int) -> Any:
    """(chunk as uint8 array, line number of its first line) for newline-aligned chunks."""
    n = len(body)
    off = 0
    line = start
    while off < n:
        end = min(n, off + _CHUNK)
        if end < n:
            nl = bytes(body[end : min(n, end + (1 << 20))]).find(b"\n")
            while nl < 0 and end < n:  # a very long line: look further
                end = min(n, end + (1 << 20))
                nl = bytes(body[end : min(n, end + (1 << 20))]).find(b"\n")
            end = n if nl < 0 else end + nl + 1
        chunk = np.frombuffer(body[off:end], dtype=np.uint8)
        yield chunk, line
        line += int(np.count_nonzero(chunk == 10))
        off = end


def _tokenise(
    b: np.ndarray, line0: int, nfields: int
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Tokens of the data lines of a chunk: per field (token bytes as a (n, W) matrix,
    lengths), and the 1-based line number of each entry.  Blank and comment lines are
    skipped; a line with another number of fields is an error."""
    notsp = b > 32  # space, tab, CR, LF, VT, FF (and other control bytes) separate tokens
    edges = np.diff(np.concatenate(([False], notsp, [False])).view(np.int8))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    if starts.size == 0:
        return (
            [np.zeros((0, 1), np.uint8)] * nfields,
            [np.zeros(0, np.int64)] * nfields,
            np.zeros(0, np.int64),
        )
    newlines = np.flatnonzero(b == 10)
    tline = np.searchsorted(newlines, starts)  # 0-based line of each token in the chunk
    first = np.ones(starts.size, dtype=bool)
    first[1:] = tline[1:] != tline[:-1]
    group = np.cumsum(first) - 1
    firsts = np.flatnonzero(first)
    comment = (b[starts[firsts]] == ord("%"))[group]
    keep = ~comment
    starts, ends, tline, first = starts[keep], ends[keep], tline[keep], first[keep]
    if starts.size == 0:
        return (
            [np.zeros((0, 1), np.uint8)] * nfields,
            [np.zeros(0, np.int64)] * nfields,
            np.zeros(0, np.int64),
        )
    firsts = np.flatnonzero(first)
    counts = np.diff(np.append(firsts, starts.size))
    wrong = np.flatnonzero(counts != nfields)
    if wrong.size:
        k = wrong[0]
        raise _Bad(line0 + int(tline[firsts[k]]), f"expected {nfields} fields, found {int(counts[k])}")
    lens = ends - starts
    entry_line = line0 + tline[firsts]
    long = np.flatnonzero(lens > _MAX_TOKEN)
    if long.size:
        k = long[0]
        raise _Bad(line0 + int(tline[k]), f"a number of {int(lens[k])} characters (at most {_MAX_TOKEN})")
    mats, lengths = [], []
    pad = np.concatenate([b, np.zeros(_MAX_TOKEN, np.uint8)])
    for f in range(nfields):
        s, ln = starts[f::nfields], lens[f::nfields]
        width = int(ln.max())
        windows = np.lib.stride_tricks.sliding_window_view(pad, width)[s]  # (n, width) copy
        col = np.arange(width)
        mats.append(np.where(col < ln[:, None], windows, np.uint8(0)))
        lengths.append(ln)
    return mats, lengths, entry_line


def _check(bad: np.ndarray, lines: np.ndarray, what: str, mat: np.ndarray, lens: np.ndarray) -> None:
    where = np.flatnonzero(bad)
    if where.size:
        k = where[0]
        token = bytes(mat[k, : lens[k]]).decode("ascii", "backslashreplace")
        raise _Bad(int(lines[k]), f"{what} {token!r} is not a valid number")


def _parse_body(
    body: memoryview, line0: int, layout: str, field: str, expected: int, shape: tuple[int, int]
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray]:
    nvals = {"pattern": 0, "complex": 2}.get(field, 1)
    nfields = nvals + (2 if layout == "coordinate" else 0)
    rows_l: list[np.ndarray] = []
    cols_l: list[np.ndarray] = []
    vals_l: list[np.ndarray] = []
    seen = 0
    last_line = line0
    for chunk, cline in _body_chunks(body, line0):
        mats, lens, lines = _tokenise(chunk, cline, nfields)
        n = lines.size
        last_line = cline + int(np.count_nonzero(chunk == 10))
        if seen + n > expected:
            k = expected - seen
            raise _Bad(int(lines[k]), f"more entries than the {expected} the header declares")
        if n == 0:
            continue
        seen += n
        f = 0
        if layout == "coordinate":
            for d, out in ((0, rows_l), (1, cols_l)):
                idx, bad = _ints(mats[d], lens[d], signed=True)
                _check(bad, lines, "index", mats[d], lens[d])
                out_of = (idx < 1) | (idx > shape[d])
                if out_of.any():
                    k = int(np.flatnonzero(out_of)[0])
                    raise _Bad(
                        int(lines[k]),
                        f"{'row' if d == 0 else 'column'} index {int(idx[k])} is outside 1..{shape[d]}",
                        ShapeError,
                    )
                out.append(idx - 1)
            f = 2
        if field in ("integer", "unsigned-integer"):
            v, bad = _ints(mats[f], lens[f], signed=field == "integer")
            _check(bad, lines, f"{field} value", mats[f], lens[f])
        elif field in ("real", "complex"):
            parts = []
            for p in range(nvals):
                x, bad = _reals(mats[f + p])
                _check(bad, lines, "value", mats[f + p], lens[f + p])
                parts.append(x)
            if field == "real":
                v = parts[0]
            else:  # assembled part by part: the sign of a zero part is kept bit-exactly
                v = np.empty(n, np.complex128)
                v.real, v.imag = parts
        else:
            v = np.ones(n)
        vals_l.append(v)
    if seen < expected:
        raise _Bad(last_line, f"the file ends after {seen} entries; the header declares {expected}")
    dtype = {"integer": np.int64, "unsigned-integer": np.uint64, "complex": np.complex128}.get(
        field, np.float64
    )
    values = np.concatenate(vals_l) if vals_l else np.zeros(0, dtype)
    if layout != "coordinate":
        return None, None, values
    rows = np.concatenate(rows_l) if rows_l else np.zeros(0, np.int64)
    cols = np.concatenate(cols_l) if cols_l else np.zeros(0, np.int64)
    return rows, cols, values


def mirror(values: np.ndarray, symmetry: str) -> np.ndarray:
    """The entries of the other triangle, from this one's, under a file's symmetry."""
    if symmetry == "skew-symmetric":
        return np.negative(values)
    if symmetry == "hermitian":
        return np.conj(values)
    return values


def read_mm(path: Path) -> MMData:
    """Parse a Matrix Market file (plain, .gz, .bz2, .xz)."""
    data = read_bytes(path)
    try:
        layout, field, symmetry, sizes, body_at, line0 = _parse_header(data)
        shape = (sizes[0], sizes[1])
        if symmetry != "general" and shape[0] != shape[1]:
            raise _Bad(
                line0 - 1, f"a {symmetry} matrix must be square, got {shape[0]} x {shape[1]}", ShapeError
            )
        n = shape[0]
        if layout == "coordinate":
            expected = sizes[2]
        elif symmetry == "general":
            expected = shape[0] * shape[1]
        else:
            expected = n * (n + 1) // 2 if symmetry != "skew-symmetric" else n * (n - 1) // 2
        if layout == "array" and max(shape[0], 1) * max(shape[1], 1) * 16 > _INDEX_MAX:
            raise _Bad(
                line0 - 1, f"a dense {shape[0]} x {shape[1]} array is too large to hold in memory", ShapeError
            )
        body = memoryview(data)[body_at:]
        lines_left = data.count(b"\n", body_at) + 1
        if expected > lines_left:  # refuse before allocating anything per the header
            raise _Bad(
                line0 - 1,
                f"the header declares {expected} entries ({shape[0]} x {shape[1]} {layout}) but the "
                f"file has only {lines_left} lines after it",
            )
        rows, cols, values = _parse_body(body, line0, layout, field, expected, shape)
    except _Bad as bad:
        raise _error(path, bad.line, bad.message, bad.cls) from None
    if layout == "coordinate":
        assert rows is not None and cols is not None
        if symmetry != "general":
            off = rows != cols
            rows, cols, values = (
                np.concatenate([rows, cols[off]]),
                np.concatenate([cols, rows[off]]),
                np.concatenate([values, mirror(values[off], symmetry)]),
            )
        return MMData(layout, field, symmetry, shape, rows, cols, values)
    if symmetry == "general":
        dense = np.ascontiguousarray(values.reshape(shape[1], shape[0]).T)
        return MMData(layout, field, symmetry, shape, None, None, dense)
    dense = np.zeros(shape, dtype=values.dtype)
    r, c = np.triu_indices(n, k=1 if symmetry == "skew-symmetric" else 0)
    dense[c, r] = values  # the lower triangle, column by column
    off = r != c
    dense[r[off], c[off]] = mirror(values[off], symmetry)
    return MMData(layout, field, symmetry, shape, None, None, dense)


# ----------------------------------------------------------------------------- writing


def _text(a: np.ndarray, precision: int | None) -> np.ndarray:
    """Each number of ``a`` as bytes: the shortest repr that reads back bit-exactly, or
    ``%.{precision}g``."""
    if precision is not None and a.dtype.kind == "f":
        return np.char.mod(f"%.{precision}g", a.astype(np.float64)).astype("S")
    if a.dtype.kind == "f" and a.size:
        # whole numbers (common in matrix files) through the much faster integer cast: "3.0"
        whole = (a == np.trunc(a)) & (np.abs(a) < 1e15) & ~((a == 0) & np.signbit(a))
        if whole.any():
            out = np.empty(a.shape, dtype="S32")
            out[whole] = np.char.add(a[whole].astype(np.int64).astype("S"), b".0")
            out[~whole] = a[~whole].astype("S")
            return out
    return a.astype("S")


def _lines(columns: list[np.ndarray]) -> bytes:
    """Rows of space-separated byte strings, one row per line: a byte-matrix program (the
    NUL padding of each fixed-width column is dropped)."""
    n = columns[0].shape[0]
    parts: list[np.ndarray] = []
    for k, c in enumerate(columns):
        width = max(c.dtype.itemsize, 1)
        parts.append(np.ascontiguousarray(c.astype(f"S{width}")).view(np.uint8).reshape(n, width))
        parts.append(np.full((n, 1), ord(" " if k + 1 < len(columns) else "\n"), np.uint8))
    m = np.concatenate(parts, axis=1)
    return m[m != 0].tobytes()


def _open_write(path: Path) -> BinaryIO:
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "wb")  # type: ignore[return-value]
    if suffix == ".bz2":
        return bz2.open(path, "wb")  # type: ignore[return-value]
    if suffix == ".xz":
        return lzma.open(path, "wb")  # type: ignore[return-value]
    return open(path, "wb")


def write_mm(
    path: Path,
    shape: tuple[int, int],
    layout: str,
    field: str,
    symmetry: str,
    columns: list[np.ndarray],
    comment: str,
    precision: int | None,
) -> None:
    """Write the header and the entries (``columns``: 1-based indices then value parts)."""
    head = [f"%%MatrixMarket matrix {layout} {field} {symmetry}"]
    head += [f"%{line}" for line in comment.splitlines()] if comment else []
    n = columns[0].shape[0] if columns else 0
    size = f"{shape[0]} {shape[1]}" + (f" {n}" if layout == "coordinate" else "")
    with _open_write(path) as fh:
        fh.write(("\n".join([*head, size]) + "\n").encode("utf-8"))
        for lo in range(0, n, _WRITE_ROWS):
            fh.write(_lines([_text(c[lo : lo + _WRITE_ROWS], precision) for c in columns]))


def check_write_options(field: str | None, symmetry: str | None, precision: int | None, comment: str) -> None:
    """Option values, checked before any work."""
    if field is not None and field not in FIELDS:
        raise InvalidValueError(
            f"field {field!r} is not a Matrix Market field; use one of {', '.join(FIELDS)}"
        )
    if symmetry is not None and symmetry not in SYMMETRIES:
        raise InvalidValueError(f"symmetry {symmetry!r}: use one of {', '.join(SYMMETRIES)}")
    if precision is not None and (
        isinstance(precision, bool) or not isinstance(precision, int) or not 1 <= precision <= 40
    ):
        raise InvalidValueError(
            f"precision must be an integer in 1..40 (significant digits), not {precision!r}"
        )
    if not isinstance(comment, str) or "\0" in comment:
        raise InvalidValueError("comment must be a str without NUL characters")
