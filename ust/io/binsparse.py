"""Binsparse files: ``save`` / ``load``.

Binsparse (spec v0.1) is a JSON descriptor plus named arrays.  ust writes the descriptor as
``{"binsparse": {...}, "ust": {"format": <canonical text>, ...}}``: the ``binsparse`` part is
standard (a predefined format name where the tensor's format is one -- CSR, CSC, DCSR, DCSC,
COOR, COOC, DMATR, DMATC, DVEC, CVEC -- else ``"custom"`` with a level tree), and the ``ust``
part, outside the Binsparse namespace as the spec asks, names the exact Format so that ust
reads back the very same tensor.  Arrays are named as Binsparse names them, one name per ust
buffer: ``pos(k)`` is ``pointers_to_k``, ``crd(k)`` is ``indices_k`` (the root's
``pointers_to_0`` of a compressed level is omitted, it is always ``[0, len(indices_0)]``).

Containers, chosen by the file extension: ``.npz`` (the descriptor is the JSON string entry
``binsparse``) and ``.h5`` / ``.hdf5`` (the JSON string is the ``binsparse`` attribute of
the root group, one dataset per array; needs h5py).  Files written by other Binsparse
implementations are read too: either JSON layout, 0- or 1-based indices, unsigned index
types, ``iso[...]`` and ``complex[...]`` value types, ``structure`` (one stored triangle)
and custom formats made of dense and sparse levels.
"""

from __future__ import annotations

import io as _io
import json
import lzma
import math
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ust.formats.library import resolve
from ust.formats.model import Dim, Format, LevelFormat
from ust.runtime.errors import (
    FileFormatError,
    FormatError,
    ShapeError,
    UnsupportedError,
    UstError,
)
from ust.runtime.log import get_logger

if TYPE_CHECKING:
    from ust.tensor import Tensor
from ust.io.matrix_market import _INDEX_MAX, _require_file, from_scipy

__all__ = ["BINSPARSE_VERSION", "load", "save"]

log = get_logger("io")

#: The Binsparse spec version ust writes (it reads any 0.x).
BINSPARSE_VERSION = "0.1"
_ISO_DENSE_MAX = 2**28  # values an iso[...] entry of a dense-only format may expand to
_NPZ_SUFFIXES = (".npz",)
_HDF5_SUFFIXES = (".h5", ".hdf5")

# ----------------------------------------------------------------------------- Binsparse types

_PLAIN_TYPES = {
    n: np.dtype(n)
    for n in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64")
}
_COMPLEX_PARTS = {np.dtype(np.complex64): "float32", np.dtype(np.complex128): "float64"}
_TYPE_RE = re.compile(r"^(iso|complex)\[(.*)\]$")


def _type_string(a: np.ndarray) -> tuple[str, np.ndarray]:
    """The Binsparse type string of ``a`` and the array as stored (complex -> interleaved)."""
    dt = np.dtype(a.dtype)
    if dt in _COMPLEX_PARTS:
        part = _COMPLEX_PARTS[dt]
        c = np.ascontiguousarray(a)
        flat = c.view(part).reshape(*c.shape[:-1], 2 * c.shape[-1]) if c.ndim else c.view(part)
        return f"complex[{part}]", flat
    name = dt.name
    if name not in _PLAIN_TYPES:
        raise UnsupportedError(
            f"{dt} arrays have no Binsparse type; supported: {', '.join(_PLAIN_TYPES)}, complex64, "
            "complex128 (cast the values with tensor.astype(...) first)"
        )
    return name, np.ascontiguousarray(a)


def _decode(type_str: Any, raw: np.ndarray, name: str, count: int | None) -> np.ndarray:
    """An array of the declared Binsparse type (iso broadcast to ``count``, complex re-joined)."""
    if not isinstance(type_str, str):
        raise FormatError(f"data type of {name!r} must be a string, got {type_str!r}", rule="binsparse")
    m = _TYPE_RE.match(type_str)
    if m and m.group(1) == "iso":
        one = _decode(m.group(2), raw, name, None)
        if one.size != 1:
            raise ShapeError(f"{name!r} is declared {type_str} but holds {one.size} values, not 1")
        if count is None:
            raise FormatError(f"{name!r}: iso[...] is only allowed for values", rule="binsparse")
        return np.broadcast_to(one.reshape(-1)[:1], (count,))  # load() materialises it once checked
    if m:  # complex[...]
        part = _decode(m.group(2), raw, name, None)
        if part.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise FormatError(f"{name!r}: complex[...] needs float32 or float64 parts", rule="binsparse")
        if part.ndim == 0 or part.shape[-1] % 2:
            raise ShapeError(f"{name!r}: a complex array needs an even number of parts, got {part.shape}")
        part = np.ascontiguousarray(part)
        return part.view(np.complex64 if part.dtype == np.float32 else np.complex128)
    if type_str == "bint8":
        return np.asarray(raw).astype(np.uint8)  # ust holds no bool values: 0/1 as uint8
    want = _PLAIN_TYPES.get(type_str)
    if want is None:
        raise FormatError(f"{name!r} has unknown Binsparse data type {type_str!r}", rule="binsparse")
    arr = np.asarray(raw)
    if arr.dtype.kind != want.kind or arr.dtype.itemsize != want.itemsize:
        raise FormatError(
            f"{name!r} is stored as {arr.dtype} but data_types says {type_str}", rule="binsparse"
        )
    return arr if arr.dtype == want else arr.astype(want)


# ----------------------------------------------------------------------------- formats <-> names

#: Binsparse's predefined formats as ust formats (a name is written when the Format equals one).
_PREDEFINED = {
    "DVEC": "(i) -> (i : dense)",
    "CVEC": "(i) -> (i : compressed)",
    "DMATR": "(i, j) -> (i : dense, j : dense)",
    "DMATC": "(i, j) -> (j : dense, i : dense)",
    "CSR": "(i, j) -> (i : dense, j : compressed)",
    "CSC": "(i, j) -> (j : dense, i : compressed)",
    "DCSR": "(i, j) -> (i : compressed, j : compressed)",
    "DCSC": "(i, j) -> (j : compressed, i : compressed)",
    "COOR": "(i, j) -> (i : compressed(nonunique), j : singleton)",
    "COOC": "(i, j) -> (j : compressed(nonunique), i : singleton)",
}
_ALIASES = {"DMAT": "DMATR", "COO": "COOR"}


def _predefined_name(fmt: Format) -> str | None:
    for name, text in _PREDEFINED.items():
        if resolve(text) == fmt:
            return name
    return None


def _binsparse_groups(fmt: Format) -> list[tuple[str, int, bool]] | None:
    """The format as Binsparse levels ``(level_desc, rank, sorted)``, or None if it is not one.

    Binsparse levels index dimensions directly (a permutation, ``transpose``): dense levels,
    and sparse levels of rank r = a unique compressed level or a nonunique compressed level
    followed by singletons (COO).
    """
    levels = fmt.levels
    if fmt.nlevels != fmt.ndim or not all(isinstance(lv.expr, Dim) for lv in levels):
        return None
    groups: list[tuple[str, int, bool]] = []
    k = 0
    while k < len(levels):
        lv = levels[k]
        if lv.format is LevelFormat.DENSE:
            groups.append(("dense", 1, True))
            k += 1
            continue
        if lv.format is not LevelFormat.COMPRESSED:
            return None
        j = k + 1
        while j < len(levels) and levels[j].format is LevelFormat.SINGLETON:
            j += 1
        chain = levels[k:j]
        if not chain[-1].type.unique or (j - k == 1 and not lv.type.unique):
            return None
        groups.append(("sparse", j - k, all(c.type.ordered for c in chain)))
        k = j
    return groups


def _custom_descriptor(fmt: Format) -> dict[str, Any]:
    """Binsparse's ``custom`` entry: a true level tree when Binsparse can express the format,
    else ust's level list in the same nesting with ``ust:``-prefixed level kinds (a strict
    Binsparse reader rejects those instead of misreading them)."""
    groups = _binsparse_groups(fmt)
    node: dict[str, Any] = {"level_desc": "element"}
    if groups is not None:
        for desc, rank, ordered in reversed(groups):
            node = {"level_desc": desc, "rank": rank, "level": node}
            if not ordered:
                node["sorted"] = False
        out: dict[str, Any] = {"level": node}
        perm = [lv.expr.dim for lv in fmt.levels]  # type: ignore[union-attr]
        if perm != sorted(perm):
            out["transpose"] = perm
        return out
    names = fmt.dim_names or tuple(f"d{k}" for k in range(fmt.ndim))
    for lv in reversed(fmt.levels):
        node = {
            "level_desc": f"ust:{lv.type.to_text()}",
            "rank": 1,
            "expression": lv.expr.to_text(names),
            "level": node,
        }
    return {"level": node}


def _format_from_custom(custom: Any, ndim: int) -> Format:
    """A ust Format from a Binsparse custom level tree of dense / sparse / element levels."""
    if not isinstance(custom, Mapping) or not isinstance(custom.get("level"), Mapping):
        raise FormatError("custom format: 'custom' must be an object with a 'level' tree", rule="binsparse")
    transpose = custom.get("transpose", list(range(ndim)))
    if (
        not isinstance(transpose, list)
        or not all(isinstance(d, int) and not isinstance(d, bool) for d in transpose)
        or sorted(transpose) != list(range(ndim))
    ):
        raise FormatError(
            f"custom format: transpose {transpose} is not a permutation of {ndim} dims", rule="binsparse"
        )
    names = [f"d{k}" for k in range(ndim)]
    parts: list[str] = []
    node: Any = custom["level"]
    depth = 0
    while True:
        if not isinstance(node, Mapping) or "level_desc" not in node:
            raise FormatError("custom format: every level needs a 'level_desc'", rule="binsparse")
        desc = node["level_desc"]
        if desc == "element":
            break
        if desc not in ("dense", "sparse"):
            hint = (
                " (written by ust: the 'ust' key that names the format is missing)"
                if str(desc).startswith("ust:")
                else ""
            )
            raise UnsupportedError(
                f"custom format: level kind {desc!r} is not supported{hint}; ust reads dense, sparse, element"
            )
        rank = node.get("rank")
        if not isinstance(rank, int) or rank < 1 or depth + rank > ndim:
            raise FormatError(
                f"custom format: bad rank {rank!r} for a {desc} level at depth {depth}", rule="binsparse"
            )
        dims = [names[transpose[depth + s]] for s in range(rank)]
        ordered = "" if node.get("sorted", True) else "nonordered"
        if desc == "dense":
            parts += [f"{d} : dense" for d in dims]
        elif rank == 1:
            parts.append(f"{dims[0]} : compressed{f'({ordered})' if ordered else ''}")
        else:
            props = ", ".join(p for p in ("nonunique", ordered) if p)
            parts.append(f"{dims[0]} : compressed({props})")
            parts += [f"{d} : singleton({props})" for d in dims[1:-1]]
            parts.append(f"{dims[-1]} : singleton{f'({ordered})' if ordered else ''}")
        depth += rank
        if "level" not in node:
            raise FormatError(
                f"custom format: the {desc} level at depth {depth - rank} has no 'level'", rule="binsparse"
            )
        node = node["level"]
    if depth != ndim:
        raise FormatError(
            f"custom format: levels cover {depth} dimensions but the shape has {ndim}", rule="binsparse"
        )
    return resolve(f"({', '.join(names)}) -> ({', '.join(parts)})")


def _array_names(fmt: Format) -> dict[tuple[str, int], str]:
    """Binsparse array name of every ust buffer: ("pos", k) -> pointers_to_k, ("crd", k) -> indices_k."""
    out: dict[tuple[str, int], str] = {}
    for k, lv in enumerate(fmt.levels):
        root_implied = k == 0 and lv.format is LevelFormat.COMPRESSED
        if lv.type.stores_pos and not root_implied:
            out[("pos", k)] = f"pointers_to_{k}"
        if lv.type.stores_crd:
            out[("crd", k)] = f"indices_{k}"
    return out


# ----------------------------------------------------------------------------- containers


def _container_kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in _NPZ_SUFFIXES:
        return "npz"
    if suffix in _HDF5_SUFFIXES:
        return "hdf5"
    raise UnsupportedError(
        f"{path}: unknown Binsparse container extension {path.suffix!r}; use .npz, or .h5/.hdf5 (needs h5py)"
    )


def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        from ust.runtime.errors import BackendUnavailableError

        raise BackendUnavailableError("HDF5 files need h5py", pip_command='pip install "ust[hdf5]"') from None
    return h5py


def _write_container(
    path: Path, descriptor: dict[str, Any], arrays: dict[str, np.ndarray], compress: bool
) -> None:
    text = json.dumps(descriptor, indent=2)
    if _container_kind(path) == "npz":
        # np.savez would append ".npz" to other names; write through an open file instead.
        with open(path, "wb") as fh:
            saver: Any = np.savez_compressed if compress else np.savez
            saver(fh, binsparse=np.asarray(text), **arrays)
        return
    h5py = _h5py()
    with h5py.File(path, "w") as f:
        for name, a in arrays.items():
            f.create_dataset(name, data=a, **({"compression": "gzip"} if compress and a.size else {}))
        f.attrs["binsparse"] = text


def _bad_file(path: Path, message: str) -> FileFormatError:
    return FileFormatError(f"{path}: {message}", path=str(path), rule="binsparse")


#: What a corrupt zip / npy / HDF5 file makes the standard library and h5py raise.
_CORRUPT = (
    OSError,
    EOFError,
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    RuntimeError,
    NotImplementedError,
    OverflowError,
    struct.error,
    zlib.error,
    zipfile.BadZipFile,
    lzma.LZMAError,
)


def _npy_member(path: Path, name: str, data: bytes) -> np.ndarray:
    """One ``.npy`` member, its header checked against the bytes there really are (a header
    that declares more is refused before anything is allocated); no pickles."""
    fmt = np.lib.format
    bio = _io.BytesIO(data)
    version = fmt.read_magic(bio)
    if version == (1, 0):
        shape, fortran, dtype = fmt.read_array_header_1_0(bio)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = fmt.read_array_header_2_0(bio)
    else:
        raise _bad_file(path, f"array {name!r} has unknown .npy version {version}")
    if dtype.hasobject:
        raise _bad_file(path, f"array {name!r} holds Python objects (pickles are never loaded)")
    count = math.prod(shape)
    have = len(data) - bio.tell()
    if count * dtype.itemsize != have:
        raise _bad_file(
            path,
            f"array {name!r} declares shape {tuple(shape)} of {dtype} ({count * dtype.itemsize} bytes) "
            f"but the file holds {have} bytes for it",
        )
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=bio.tell()).copy()
    return flat.reshape(shape, order="F" if fortran else "C")


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            with z.open(info) as member:  # reads at most what is there; checks the CRC
                arrays[name] = _npy_member(path, name, member.read())
    return arrays


def _read_hdf5(path: Path, h5py: Any) -> tuple[str, dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {}
    size = path.stat().st_size
    with h5py.File(path, "r") as f:
        if "binsparse" not in f.attrs:
            raise _bad_file(path, "no 'binsparse' attribute: not a Binsparse file")
        attr = f.attrs["binsparse"]
        text = attr.decode() if isinstance(attr, bytes) else str(attr)  # str or bytes by h5py version
        for name, ds in f.items():
            if not isinstance(ds, h5py.Dataset):
                continue
            if ds.dtype.hasobject:
                raise _bad_file(path, f"dataset {name!r} holds variable-length or object data")
            nbytes = math.prod(ds.shape or ()) * ds.dtype.itemsize
            # deflate expands at most ~1032x: a dataset declaring more than that is refused
            if nbytes > 1100 * max(size, int(ds.id.get_storage_size())) + (1 << 20):
                raise _bad_file(
                    path,
                    f"dataset {name!r} declares shape {ds.shape} ({nbytes} bytes), more than the file can hold",
                )
            arrays[name] = np.asarray(ds[()])
    return text, arrays


def _read_container(path: Path) -> tuple[Any, Callable[[str], np.ndarray | None]]:
    """The decoded JSON and a reader of named arrays (None where absent); loads everything once.

    A corrupt or truncated container (zip, npy or HDF5) is one FileFormatError naming the
    file; a missing file stays FileNotFoundError."""
    kind = _container_kind(path)
    _require_file(path)
    if kind == "npz":
        try:
            arrays = _read_npz(path)
        except FileFormatError:
            raise
        except _CORRUPT as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise _bad_file(path, f"not a readable .npz file (corrupt or truncated): {exc}") from exc
        if "binsparse" not in arrays:
            raise _bad_file(path, "no 'binsparse' entry: not a Binsparse file")
        raw = arrays.pop("binsparse")
        if raw.dtype.kind not in "US" or raw.size != 1:
            raise _bad_file(
                path, f"the 'binsparse' entry must be one string, not {raw.dtype} of shape {raw.shape}"
            )
        text = raw.reshape(-1)[0]
    else:
        h5py = _h5py()
        try:
            text, arrays = _read_hdf5(path, h5py)
        except FileFormatError:
            raise
        except (*_CORRUPT, UnicodeError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise _bad_file(path, f"not a readable HDF5 file (corrupt or truncated): {exc}") from exc
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        doc = json.loads(str(text))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _bad_file(path, f"the Binsparse descriptor is not valid JSON: {exc}") from exc
    return doc, arrays.get


# ----------------------------------------------------------------------------- save / load


def save(path: str | Path, tensor: Tensor, *, compress: bool = False) -> None:
    """Write ``tensor`` to a Binsparse file (``.npz``, or ``.h5`` / ``.hdf5`` with h5py).

    Any format is written exactly (buffers, dtypes and index dtype); ``compress`` uses
    zip deflate (npz) or gzip (HDF5).
    """
    from ust._version import __version__
    from ust.runtime import xp as _xp

    p = Path(path)
    _container_kind(p)  # unknown extension: fail before any work
    fmt = tensor.format
    arrays: dict[str, np.ndarray] = {}
    data_types: dict[str, str] = {}
    for (kind, k), name in _array_names(fmt).items():
        buf = tensor.pos(k) if kind == "pos" else tensor.crd(k)
        data_types[name], arrays[name] = _type_string(_xp.to_host(buf))
    data_types["values"], arrays["values"] = _type_string(_xp.to_host(tensor.values))
    predefined = _predefined_name(fmt)
    bs: dict[str, Any] = {
        "version": BINSPARSE_VERSION,
        "format": predefined or "custom",
        "shape": list(tensor.shape),
        "number_of_stored_values": tensor.nse,
        "data_types": data_types,
    }
    if predefined is None:
        bs["custom"] = _custom_descriptor(fmt)
    descriptor = {
        "binsparse": bs,
        "ust": {
            "format": fmt.to_text(),
            "name": fmt.standard_name,
            "index_dtype": tensor.index_dtype.name,
            "version": __version__,
        },
    }
    _write_container(p, descriptor, arrays, compress)
    log.info("saved %s (%s, %s) to %s", tensor.shape, bs["format"], fmt.standard_name or "custom", p)


def _is_size(s: Any) -> bool:
    return isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= _INDEX_MAX


def _check_version(v: Any, path: Path) -> None:
    m = (
        re.fullmatch(r"(\d+)\.(\d+)(\.\d+)?", v) if isinstance(v, str) else None
    )  # "0.1" (spec), "0.1.0" (semver)
    if m is None or int(m.group(1)) != 0:
        raise FormatError(
            f"{path}: unsupported Binsparse version {v!r}; ust reads version 0.x (writes {BINSPARSE_VERSION})",
            rule="binsparse",
        )


def _index_dtype(arrays: list[np.ndarray], requested: Any, hint: Any) -> np.dtype | None:
    """The tensor's index dtype: asked for, else the arrays' own (int32 or int64), else ust's
    record of it (tensors without index arrays), else None (the Tensor's default)."""
    if requested is not None:
        return np.dtype(requested)
    if arrays:
        kinds = {a.dtype for a in arrays}
        return np.dtype(np.int32) if kinds == {np.dtype(np.int32)} else np.dtype(np.int64)
    return np.dtype(hint) if hint in ("int32", "int64") else None


def _as_index(a: np.ndarray, itype: np.dtype, name: str, base: int) -> np.ndarray:
    if a.dtype.kind not in "iu":
        raise FormatError(f"{name!r} must hold integers, not {a.dtype}", rule="binsparse")
    if base:
        a = a.astype(np.int64) - base if a.dtype != np.uint64 else (a - np.uint64(base)).astype(np.int64)
    if a.size and a.dtype != itype and int(a.max()) > np.iinfo(itype).max:
        raise ShapeError(f"{name!r} holds {int(a.max())}, which does not fit {itype}")
    return a if a.dtype == itype else a.astype(itype)


def load(
    path: str | Path,
    format: Format | str | None = None,  # noqa: A002 - the natural name
    *,
    index_dtype: Any = None,
    check: bool | str = True,
) -> Tensor:
    """Read a Binsparse file (``.npz``, ``.h5`` / ``.hdf5``) into a Tensor.

    A file ust wrote comes back in exactly its Format with equal buffers; other files are
    read in the Format their descriptor names.  ``format`` converts after reading;
    ``check`` validates the buffers (see :class:`~ust.Tensor`).
    """
    p = Path(path)
    doc, get = _read_container(p)
    try:
        return _load_descriptor(p, doc, get, format, index_dtype, check)
    except UstError:
        raise
    except (TypeError, KeyError, AttributeError, IndexError, OverflowError, RecursionError) as exc:
        # a descriptor shaped in a way no check above foresaw: still one error naming the file
        raise _bad_file(p, f"malformed Binsparse descriptor or arrays: {type(exc).__name__}: {exc}") from exc


def _load_descriptor(
    p: Path,
    doc: Any,
    get: Callable[[str], np.ndarray | None],
    format: Format | str | None,  # noqa: A002
    index_dtype: Any,
    check: bool | str,
) -> Tensor:
    from ust.tensor import Tensor

    if not isinstance(doc, Mapping):
        raise FormatError(f"{p}: the Binsparse descriptor must be a JSON object", rule="binsparse")
    bs = doc.get("binsparse", doc)  # the spec nests under "binsparse"; some writers do not
    if not isinstance(bs, Mapping):
        raise FormatError(f"{p}: the 'binsparse' entry must be a JSON object", rule="binsparse")
    missing = [
        k for k in ("version", "format", "shape", "number_of_stored_values", "data_types") if k not in bs
    ]
    if missing:
        raise FormatError(
            f"{p}: the Binsparse descriptor lacks {', '.join(map(repr, missing))}", rule="binsparse"
        )
    _check_version(bs["version"], p)
    shape = bs["shape"]
    if not isinstance(shape, list) or not all(_is_size(s) for s in shape):
        raise ShapeError(f"{p}: shape must be a list of non-negative integers below 2**63, got {shape!r}")
    nse = bs["number_of_stored_values"]
    if not _is_size(nse):
        raise ShapeError(
            f"{p}: number_of_stored_values must be a non-negative integer below 2**63, got {nse!r}"
        )
    data_types = bs["data_types"]
    if not isinstance(data_types, Mapping):
        raise FormatError(f"{p}: data_types must be an object", rule="binsparse")
    fill = bs.get("fill", False)
    if not isinstance(fill, bool):
        raise FormatError(f"{p}: fill must be true or false, got {fill!r}", rule="binsparse")
    if fill:
        fv = get("fill_value")
        if fv is None or "fill_value" not in data_types:
            raise FormatError(f"{p}: fill is true but there is no fill_value array", rule="binsparse")
        fv = _decode(data_types["fill_value"], fv, "fill_value", None)
        if fv.size != 1 or fv.reshape(-1)[0] != 0:
            raise UnsupportedError(
                f"{p}: fill value {fv.reshape(-1)[:1]} is not supported; ust tensors fill with 0"
            )

    fmt = _descriptor_format(doc, bs, len(shape), p)
    names = _array_names(fmt)
    for name in [*names.values(), "values"]:
        if name not in data_types:
            raise FormatError(
                f"{p}: data_types has no entry for {name!r} (format {bs['format']})", rule="binsparse"
            )
        if get(name) is None:
            raise FormatError(f"{p}: array {name!r} is missing (format {bs['format']})", rule="binsparse")
    values = _decode(data_types["values"], get("values"), "values", nse)  # type: ignore[arg-type]
    iso = values.ndim == 1 and values.size > 1 and values.strides == (0,)  # a view until checked
    if iso and not names and nse > _ISO_DENSE_MAX:
        raise ShapeError(
            f"{p}: one iso value stands for {nse} values of a dense format; ust stores each value and "
            f"expands at most {_ISO_DENSE_MAX} from a header"
        )
    if values.size != nse:
        raise ShapeError(f"{p}: 'values' has {values.size} elements but number_of_stored_values is {nse}")
    raw = {key: _decode(data_types[name], get(name), name, None) for key, name in names.items()}  # type: ignore[arg-type]
    extra: Mapping[str, Any] = doc["ust"] if isinstance(doc.get("ust"), Mapping) else {}
    itype = _index_dtype(list(raw.values()), index_dtype, extra.get("index_dtype"))
    base = bs.get("index_base", 0)
    if isinstance(base, bool) or base not in (0, 1):
        raise FormatError(f"{p}: index_base must be 0 or 1, got {base!r}", rule="binsparse")
    idx = {key: _as_index(a, itype, names[key], base) for key, a in raw.items()}  # type: ignore[arg-type]
    pos: list[Any] = [idx.get(("pos", k)) for k in range(fmt.nlevels)]
    crd: list[Any] = [idx.get(("crd", k)) for k in range(fmt.nlevels)]
    if fmt.nlevels and fmt.levels[0].format is LevelFormat.COMPRESSED:
        n0 = 0 if crd[0] is None else int(crd[0].shape[-1])
        pos[0] = np.array([0, n0], dtype=itype)
    try:
        # iso values are checked as a broadcast view: a header's count allocates nothing
        t = Tensor(shape, fmt, values, pos=pos, crd=crd, index_dtype=itype, check=True if iso else check)
    except (FormatError, ShapeError) as exc:
        raise type(exc)(f"{p}: inconsistent arrays for format {bs['format']}: {exc}") from exc
    if iso:
        t = Tensor(shape, fmt, np.array(values), pos=pos, crd=crd, index_dtype=itype, check=False)
    structure = bs.get("structure")
    if structure is not None:
        t = _expand_structure(t, structure, p)
    return t if format is None else t.convert(format, index_dtype=index_dtype)


def _descriptor_format(doc: Mapping[str, Any], bs: Mapping[str, Any], ndim: int, p: Path) -> Format:
    name = bs["format"]
    key = _ALIASES.get(name, name) if isinstance(name, str) else None
    if key not in _PREDEFINED and key != "custom":
        known = ", ".join([*_PREDEFINED, *_ALIASES, "custom"])
        raise UnsupportedError(f"{p}: unknown Binsparse format {name!r}; known: {known}")
    extra = doc.get("ust") if isinstance(doc.get("ust"), Mapping) else None
    if extra is not None and isinstance(extra.get("format"), str):
        fmt = resolve(extra["format"])  # ust's own record: the exact Format
        if key in _PREDEFINED and resolve(_PREDEFINED[key]) != fmt:
            raise FormatError(
                f"{p}: Binsparse format {name} disagrees with ust format {fmt.to_text()}", rule="binsparse"
            )
    elif key == "custom":
        if "custom" not in bs:
            raise FormatError(
                f"{p}: format is 'custom' but the descriptor has no 'custom' entry", rule="binsparse"
            )
        fmt = _format_from_custom(bs["custom"], ndim)
    else:
        fmt = resolve(_PREDEFINED[key])
    if fmt.ndim != ndim:
        raise ShapeError(f"{p}: format {name} has {fmt.ndim} dimensions but the shape has {ndim}")
    return fmt


# structure key -> (which triangle is stored, how the mirrored value is made)
_STRUCTURES: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "symmetric_lower": ("lower", lambda v: v),
    "symmetric_upper": ("upper", lambda v: v),
    "hermitian_lower": ("lower", np.conj),
    "hermitian_upper": ("upper", np.conj),
    "skew_symmetric_lower": ("lower", np.negative),
    "skew_symmetric_upper": ("upper", np.negative),
}


def _expand_structure(t: Tensor, structure: Any, p: Path) -> Tensor:
    """Both triangles of a matrix stored as one (Binsparse ``structure``), in the same format."""
    if not isinstance(structure, str) or structure not in _STRUCTURES:
        raise UnsupportedError(f"{p}: unknown structure {structure!r}; known: {', '.join(_STRUCTURES)}")
    if t.ndim != 2 or t.shape[0] != t.shape[1]:
        raise ShapeError(f"{p}: structure {structure} needs a square matrix, got shape {t.shape}")
    import scipy.sparse as sp

    side, mirror = _STRUCTURES[structure]
    a = sp.coo_array(t.to_scipy())
    r, c, v = a.coords[0], a.coords[1], a.data
    wrong = (r < c) if side == "lower" else (r > c)
    if wrong.any():
        raise FormatError(
            f"{p}: structure {structure} but entries lie in the other triangle", rule="binsparse"
        )
    off = r != c
    full = sp.coo_array(
        (np.concatenate([v, mirror(v[off])]), (np.concatenate([r, c[off]]), np.concatenate([c, r[off]]))),
        shape=t.shape,
    )
    return from_scipy(full, t.format, index_dtype=t.index_dtype)
