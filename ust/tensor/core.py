"""``ust.Tensor``: a tensor stored in a ust Format (the buffers of docs/storage.md).

A Tensor is a thin, immutable-by-convention holder: shape, Format, one ``pos`` and one
``crd`` array per level (``None`` where the level stores none), and ``values``.  Arrays are
NumPy on the CPU and CuPy on a GPU; every buffer of one tensor lives on one device and
shares one index dtype (int32 or int64).  Conversions, exports and the device move live in
:mod:`ust.convert` (pictures in :mod:`ust.io.plot`), the operators in :mod:`ust.api.algebra`:
the methods here only route to them, through the tables of :mod:`ust.tensor.dispatch`.

Building one from buffers (what file readers and kernels do)::

    t = ust.Tensor((3, 4), "CSR", values, pos=[None, indptr], crd=[None, indices])
    t = ust.Tensor.from_buffers((3, 4), "CSR", values, pos={1: indptr}, crd={1: indices})

``pos`` / ``crd`` are a sequence with one entry per level or a mapping ``{level: array}``.
The buffers are used as given (no copy); ``check`` validates them first (``"full"``, the
default for ``True``: structure, coordinate bounds and the order/uniqueness the format
claims; ``"bounds"``; ``"structure"``; ``False``: trust the caller).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ust.formats.library import resolve
from ust.formats.model import Format, LevelFormat
from ust.runtime import xp as _xp
from ust.runtime.errors import ShapeError, UnsupportedError
from ust.tensor.buffers import Buffers
from ust.tensor.dispatch import conversion, operator
from ust.tensor.limits import check_index_dtype
from ust.tensor.validate import check_buffers, check_index_array, check_value_dtype

__all__ = ["Tensor"]

_CHECK_DEPTH = {True: "full", "full": "full", "bounds": "bounds", "structure": "structure"}


def _per_level(bufs: Any, nlevels: int, what: str) -> list[Any]:
    if bufs is None:
        return [None] * nlevels
    if isinstance(bufs, Mapping):
        out: list[Any] = [None] * nlevels
        for k, a in bufs.items():
            if not 0 <= int(k) < nlevels:
                raise ShapeError(f"{what} given for level {k}, but the format has {nlevels} levels")
            out[int(k)] = a
        return out
    out = list(bufs)
    if len(out) != nlevels:
        raise ShapeError(f"{what} needs one entry per level ({nlevels}), got {len(out)}")
    return out


def _as_array(a: Any) -> Any:
    if a is None or _xp.is_cupy(a) or isinstance(a, np.ndarray):
        return a
    return np.asarray(a)


class Tensor:
    """A sparse (or dense) tensor stored in a ust :class:`~ust.formats.Format`.

    Parameters
    ----------
    shape : tuple of int
        Extent of every dimension.
    format : Format or str
        A Format, a standard name (``"CSR"``, ``"BSR[2,2]"``) or DSL text.
    values : array
        Stored values (length ``nse``; ``(batch, capacity)`` for batched formats).
    pos, crd : sequence or mapping, optional
        Per-level position / coordinate arrays (see the module docstring).
    index_dtype : dtype, optional
        int32 or int64; given buffers are cast to it (int32 only where the level coordinates
        and ``nse`` fit it: a ShapeError otherwise, never a wrapped index).  Without it the
        buffers' own dtype is kept; without index buffers (dense formats) it defaults to the
        smallest that fits the shape (docs/storage.md, "Index dtype").
    check : bool or str
        Validate the buffers first (see the module docstring).
    """

    __slots__ = (
        "__weakref__",
        "_crd",
        "_fill_value",
        "_format",
        "_index_dtype",
        "_nnz",
        "_owed",
        "_pos",
        "_shape",
        "_source",
        "_values",
    )
    _fill_value: Any

    def __init__(
        self,
        shape: Sequence[int],
        format: Format | str,  # noqa: A002 - the natural name
        values: Any,
        *,
        pos: Sequence[Any] | Mapping[int, Any] | None = None,
        crd: Sequence[Any] | Mapping[int, Any] | None = None,
        index_dtype: Any = None,
        check: bool | str = True,
    ) -> None:
        fmt = resolve(format)
        try:
            shp = tuple(int(s) for s in shape)
        except TypeError:
            raise ShapeError(f"shape must be a sequence of integers, got {shape!r}") from None
        if len(shp) != fmt.ndim:
            raise ShapeError(f"shape {shp} has {len(shp)} dimensions but the format has {fmt.ndim}")
        if any(s < 0 for s in shp):
            raise ShapeError(f"negative extent in shape {shp}")
        pos_l = [_as_array(a) for a in _per_level(pos, fmt.nlevels, "pos")]
        crd_l = [_as_array(a) for a in _per_level(crd, fmt.nlevels, "crd")]
        vals = _as_array(values)
        if vals is None:
            raise ShapeError("values are required")
        bufs = [a for a in (*pos_l, *crd_l) if a is not None]
        if index_dtype is not None:
            itype = np.dtype(index_dtype)
            if itype not in (np.dtype(np.int32), np.dtype(np.int64)):
                raise UnsupportedError(f"index_dtype must be int32 or int64, not {itype}")
            if check and bufs:
                for a in bufs:
                    check_index_array(a, "an index buffer")
            if itype == np.dtype(np.int32) and any(np.dtype(a.dtype) != itype for a in bufs):
                # a narrowing cast must not wrap: the coordinates and positions must fit int32
                count = max([int(vals.size), *(int(a.size) for a in crd_l if a is not None)])
                check_index_dtype(itype, fmt, shp, count)
            pos_l = [None if a is None else _xp.as_index(a, itype) for a in pos_l]
            crd_l = [None if a is None else _xp.as_index(a, itype) for a in crd_l]
        elif bufs:
            itype = np.dtype(bufs[0].dtype)
        else:
            itype = np.dtype(np.int32 if max((*shp, vals.size), default=0) < 2**31 else np.int64)
        if check:
            depth = _CHECK_DEPTH.get(check, "full")
            check_buffers(Buffers(shp, fmt, tuple(pos_l), tuple(crd_l), vals), depth)
        self._shape = shp
        self._format = fmt
        self._pos = tuple(pos_l)
        self._crd = tuple(crd_l)
        self._values = vals
        self._index_dtype = itype
        self._nnz: int | None = None
        self._owed: Any = None
        #: the library object (a cupyx matrix) whose buffers these are, when an intake took it
        #: whole: a library route may hand it back instead of building a new one around them
        self._source: Any = None

    @classmethod
    def _trusted(
        cls,
        shape: tuple[int, ...],
        fmt: Format,
        values: Any,
        pos: tuple[Any, ...],
        crd: tuple[Any, ...],
        owed: Any = None,
    ) -> Tensor:
        """A tensor around buffers its caller has already checked (intake of a library's
        object, :mod:`ust.convert.scipy`): no resolving, no casting, no validation.  ``pos`` /
        ``crd`` hold one entry per level (None where the level stores none), in one index dtype.

        ``owed``: a check the caller deferred (``owed(shape, format, pos, crd, values)`` raises
        ust's error when the buffers fail it, and returns None, or the ``(pos, crd, values)`` to
        hold instead where the entries end before the arrays do), run once by the first read
        of the buffers (:meth:`_settle`)."""
        t = cls.__new__(cls)
        t._shape = shape
        t._format = fmt
        t._pos = pos
        t._crd = crd
        t._values = values
        first = next((a for a in (*pos, *crd) if a is not None), None)
        t._index_dtype = np.dtype(np.int64) if first is None else first.dtype
        t._nnz = None
        t._owed = owed
        t._source = None
        return t

    def _settle(self) -> None:
        """Run the check the intake deferred (:meth:`_trusted`'s ``owed``), once: every read of
        the index buffers (:meth:`pos`, :meth:`crd`, :attr:`bufs`, :meth:`buffers`) comes here
        first (and of :attr:`values` / :attr:`nse` where the check may trim them: an owed check
        with a true ``trims`` attribute), so no kernel or conversion of ust sees buffers that
        fail it.  A failure raises each time (the tensor stays unchecked)."""
        owed = self._owed
        if owed is not None:
            trimmed = owed(self._shape, self._format, self._pos, self._crd, self._values)
            if trimmed is not None:
                self._pos, self._crd, self._values = trimmed
                self._nnz = None
            self._owed = None

    def _compressed_level_unchecked(self) -> tuple[Any, Any, Any] | None:
        """``(pos, crd, values)`` of level 1 as held, where the only check owed is the
        compressed-bounds one of a cupyx intake (an owed check with a true ``compressed_bounds``
        attribute): for a GPU kernel that makes that check itself as it reads and never follows
        an index out of its arrays (the merge kernel, the checked transpose).  None otherwise:
        read the buffers the usual way, which runs any owed check first."""
        if not getattr(self._owed, "compressed_bounds", False):
            return None
        return self._pos[1], self._crd[1], self._values

    @classmethod
    def from_buffers(
        cls,
        shape: Sequence[int],
        format: Format | str,  # noqa: A002
        values: Any,
        *,
        pos: Sequence[Any] | Mapping[int, Any] | None = None,
        crd: Sequence[Any] | Mapping[int, Any] | None = None,
        index_dtype: Any = None,
        check: bool | str = True,
    ) -> Tensor:
        """Build a tensor around existing buffers (no copy); same arguments as the constructor."""
        return cls(shape, format, values, pos=pos, crd=crd, index_dtype=index_dtype, check=check)

    # -- facts ------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def format(self) -> Format:
        return self._format

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def dtype(self) -> np.dtype:
        """dtype of the values."""
        return np.dtype(self._values.dtype)

    @property
    def index_dtype(self) -> np.dtype:
        """dtype of every pos/crd buffer (int32 or int64)."""
        return self._index_dtype

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda:N"``."""
        return _xp.device_of(self._values)

    @property
    def xp(self) -> ModuleType:
        """The array namespace of the buffers (numpy or cupy)."""
        return _xp.namespace(self._values)

    @property
    def values(self) -> Any:
        if self._owed is not None and getattr(self._owed, "trims", False):
            self._settle()  # a deferred check that may trim the values (a cupyx intake's)
        return self._values

    def pos(self, level: int) -> Any:
        """Positions of ``level`` (None where the level stores none)."""
        if self._owed is not None:
            self._settle()
        return self._pos[level]

    def crd(self, level: int) -> Any:
        """Coordinates of ``level`` (None where the level stores none)."""
        if self._owed is not None:
            self._settle()
        return self._crd[level]

    @property
    def nse(self) -> int:
        """Stored value slots (``values.size``), padding included.

        For a batched tensor this counts the slots of *all* members together (``B * capacity``,
        each member's capacity padding included), where MLIR's ``number_of_entries`` counts
        one member; :attr:`nnz` counts the entries inside the bounds (docs/storage.md)."""
        return int(self.values.size)

    @property
    def nse_bound(self) -> int:
        """:attr:`nse` as the buffers are held, before a deferred check may trim them: an upper
        bound for decisions (storage and index-width checks, the planner's size facts) that must
        not run the check themselves (a GPU intake's check is a host synchronisation)."""
        return int(self._values.size)

    @property
    def nnz(self) -> int:
        """Entries as scipy counts them: stored slots inside the tensor (explicit zeros and block
        padding included, DIA padding outside the matrix and batch capacity excluded)."""
        if self._nnz is None:
            fmt = self._format
            simple = fmt.nbatch == 0 and not any(
                lv.format in (LevelFormat.RANGE, LevelFormat.LOOSE_COMPRESSED) for lv in fmt.levels
            )
            if simple:
                self._nnz = self.nse
            else:
                self._nnz = conversion("unpack")(self.bufs, keep_zeros=True).n
        return self._nnz

    @property
    def is_batched(self) -> bool:
        return self._format.nbatch > 0

    def buffers(self) -> dict[str, Any]:
        """Named buffers in level order: ``pos{k}``, ``crd{k}``, ``values`` (for writers)."""
        if self._owed is not None:
            self._settle()
        return self._named_buffers()

    def _named_buffers(self) -> dict[str, Any]:
        """:meth:`buffers` without the deferred check (what ``repr`` and ``nbytes`` read: sizes
        and a few leading elements, never an index followed)."""
        out: dict[str, Any] = {}
        for k in range(self._format.nlevels):
            if self._pos[k] is not None:
                out[f"pos{k}"] = self._pos[k]
            if self._crd[k] is not None:
                out[f"crd{k}"] = self._crd[k]
        out["values"] = self._values
        return out

    @property
    def bufs(self) -> Buffers:
        """The frozen record of the storage (shape, format, pos, crd, values; no copy)."""
        if self._owed is not None:
            self._settle()
        return Buffers(self._shape, self._format, self._pos, self._crd, self._values)

    def _caps(self) -> list[int]:
        """Per-member position capacity of every level of a batched tensor."""
        return self.bufs.caps()

    # -- text -------------------------------------------------------------------------------
    def __repr__(self) -> str:
        fmt = self._format
        name = fmt.standard_name or "custom"
        head = (
            f"<ust.Tensor {name} {fmt.map_text()}\n  shape={self._shape} dtype={self.dtype} "
            f"index={self._index_dtype} nse={self.nse} device={self.device}"
        )
        parts = [f"{k}{_shape_text(a)}={_brief(a)}" for k, a in self._named_buffers().items()]
        return head + "\n  " + "  ".join(parts) + ">"

    # -- conversions ------------------------------------------------------------------------
    def convert(
        self,
        format: Format | str,  # noqa: A002
        *,
        index_dtype: Any = None,
        prune: bool = False,
        max_padding: int | None = None,
        blocksize: Any = None,
    ) -> Tensor:
        """This tensor in another format (same shape, dtype and device).

        ``format`` is a Format, a standard name (SciPy's lowercase names too: ``"csr"``) or DSL
        text; ``blocksize=(r, c)`` with ``"bsr"`` means ``BSR[r, c]``.  ``prune`` keeps the n
        largest magnitudes of each block for ``structured[n, m]`` targets (otherwise a fuller
        block is an error); ``max_padding`` raises the number of padding value slots a target
        may need (DIA of many diagonals, big blocks).
        """
        return conversion("convert")(
            self,
            resolve(format, blocksize=blocksize),
            index_dtype=index_dtype,
            prune=prune,
            max_padding=max_padding,
        )

    def to_scipy(self) -> Any:
        """A canonical scipy.sparse array: csr/csc/coo/bsr/dia where the format is one, else COO."""
        return conversion("to_scipy")(self)

    def to_cupyx(self) -> Any:
        """A cupyx.scipy.sparse matrix (csr/csc/coo/dia; others as CSR), on the GPU."""
        return conversion("to_cupyx")(self)

    def to_torch(self) -> Any:
        """A torch sparse tensor (CSR/CSC/BSR/BSC/COO layouts; dense formats as strided)."""
        return conversion("to_torch")(self)

    @property
    def fill_value(self) -> Any:
        """The value of every position not stored: 0, or a semiring's additive identity (a
        min-plus result's +inf), as pydata/sparse records it; :meth:`todense` uses it."""
        return getattr(self, "_fill_value", 0)

    def _with_fill_value(self, fill: Any) -> Tensor:
        """This tensor's storage with another :attr:`fill_value` (the buffers shared)."""
        t = Tensor._trusted(self._shape, self._format, self._values, self._pos, self._crd, self._owed)
        t._index_dtype = self._index_dtype
        t._fill_value = fill
        return t

    def todense(self) -> Any:
        """A dense array of ``shape``: NumPy on the CPU, CuPy on a GPU (duplicates summed);
        positions not stored hold :attr:`fill_value`."""
        dense = conversion("todense")(self)
        fill = self.fill_value
        if fill == 0:
            return dense
        ones = Tensor._trusted(
            self._shape, self._format, self.xp.ones_like(self._values), self._pos, self._crd, self._owed
        )
        stored = conversion("todense")(ones) != 0
        return self.xp.where(stored, dense, self.xp.asarray(fill, dtype=dense.dtype))

    # -- array operators (ust.api.algebra plans each one like any other op) --------------------
    __array_ufunc__ = None  # so ``ndarray * T`` and ``x @ T`` reach the reflected methods

    def __add__(self, other: Any) -> Any:
        return operator("add")(self, other)

    def __radd__(self, other: Any) -> Any:
        return operator("add")(other, self)

    def __sub__(self, other: Any) -> Any:
        return operator("subtract")(self, other)

    def __rsub__(self, other: Any) -> Any:
        return operator("subtract")(other, self)

    def __mul__(self, other: Any) -> Any:
        return operator("multiply")(self, other)

    def __rmul__(self, other: Any) -> Any:
        return operator("multiply")(other, self)

    def __truediv__(self, other: Any) -> Any:
        return operator("divide")(self, other)

    def __neg__(self) -> Any:
        return operator("negative")(self)

    def __matmul__(self, other: Any) -> Any:
        return operator("matmul_operator")(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        return operator("rmatmul")(other, self)

    @property
    def T(self) -> Any:
        """The transpose: a free view where a level permutation expresses it (CSR.T is CSC)."""
        return operator("transpose")(self)

    def transpose(self, axes: Any = None) -> Any:
        return operator("transpose")(self, axes)

    def sum(self, axis: Any = None) -> Any:
        """Sum of entries (over ``axis``), as scipy.sparse sums."""
        return operator("sum")(self, axis)

    def max(self, axis: Any = None) -> Any:
        """Largest entry (over ``axis``), implicit zeros counted as scipy.sparse counts them."""
        return operator("max")(self, axis)

    def min(self, axis: Any = None) -> Any:
        """Smallest entry (over ``axis``), implicit zeros counted as scipy.sparse counts them."""
        return operator("min")(self, axis)

    def plot(self, path: Any = None, **kwargs: Any) -> Any:
        """Draw the sparsity pattern and the level structure (matplotlib, the ``plot`` extra)."""
        return conversion("plot")(self, path, **kwargs)

    # -- the scipy.sparse array surface ------------------------------------------------------
    # Each method routes to a registered implementation: conversions and storage facts in
    # ust.convert.surface, elementwise ops and reductions in ust.api.surface, indexing in
    # ust.api.indexing.  In-place methods (eliminate_zeros, sum_duplicates, sort_indices, setdiag)
    # give this object new buffers and return None, as scipy's do; arrays shared zero-copy with
    # the caller are never written.
    def toarray(self, order: Any = None, out: Any = None) -> Any:
        """A dense array of ``shape`` (NumPy on the CPU, CuPy on a GPU), as scipy's ``toarray``."""
        return conversion("toarray")(self, order, out)

    def asformat(self, format: Any, copy: bool = False, **kwargs: Any) -> Tensor:  # noqa: A002
        """This tensor in ``format``: a ust format or a scipy name (``"csr"``, ``"bsr"`` with
        ``blocksize=``); the same object when it is already in it and ``copy`` is False."""
        return conversion("asformat")(self, format, copy=copy, **kwargs)

    def tocsr(self, copy: bool = False) -> Tensor:
        return self.asformat("csr", copy=copy)

    def tocsc(self, copy: bool = False) -> Tensor:
        return self.asformat("csc", copy=copy)

    def tocoo(self, copy: bool = False) -> Tensor:
        return self.asformat("coo", copy=copy)

    def todia(self, copy: bool = False) -> Tensor:
        return self.asformat("dia", copy=copy)

    def tobsr(self, blocksize: Any = None, copy: bool = False) -> Tensor:
        return self.asformat("bsr", copy=copy, blocksize=blocksize)

    @property
    def data(self) -> Any:
        """The stored values in scipy's layout for CSR/CSC/COO/BSR/DIA (``values`` otherwise)."""
        return conversion("scipy_data")(self)

    @property
    def size(self) -> int:
        """Stored values, explicit zeros included: scipy's ``size`` (= :attr:`nnz`)."""
        return self.nnz

    @property
    def nbytes(self) -> int:
        """Bytes of every stored buffer (positions, coordinates, values)."""
        return sum(int(a.nbytes) for a in self._named_buffers().values())

    @property
    def has_canonical_format(self) -> bool:
        """Whether the stored coordinates are sorted and duplicate-free (scipy's meaning)."""
        return bool(conversion("has_canonical_format")(self))

    def eliminate_zeros(self) -> None:
        """Drop explicitly stored zeros, in place (the format is kept)."""
        self._adopt(operator("eliminate_zeros")(self))

    def sum_duplicates(self) -> None:
        """Sum duplicate entries and sort the coordinates, in place (the format is kept)."""
        self._adopt(operator("sum_duplicates")(self))

    def sort_indices(self) -> None:
        """Sort the coordinates of every compressed segment, in place (the format is kept)."""
        self._adopt(operator("sort_indices")(self))

    def setdiag(self, values: Any, k: int = 0) -> None:
        """Set diagonal ``k`` to ``values`` (a scalar or a sequence), in place, as scipy does."""
        self._adopt(operator("setdiag")(self, values, k))

    def __getitem__(self, key: Any) -> Any:
        return operator("getitem")(self, key)

    def __abs__(self) -> Any:
        return operator("absolute")(self)

    def __pow__(self, other: Any) -> Any:
        return operator("power")(self, other)

    def power(self, n: Any, dtype: Any = None) -> Any:
        """Elementwise ``n``-th power of the stored values (scipy's ``power``)."""
        return operator("power")(self, n, dtype)

    def conj(self, copy: bool = True) -> Any:
        return operator("conj")(self, copy)

    def conjugate(self, copy: bool = True) -> Any:
        return operator("conj")(self, copy)

    @property
    def real(self) -> Any:
        return operator("real")(self)

    @property
    def imag(self) -> Any:
        return operator("imag")(self)

    def __eq__(self, other: Any) -> Any:
        return operator("compare")(self, other, "eq")

    def __ne__(self, other: Any) -> Any:
        return operator("compare")(self, other, "ne")

    def __lt__(self, other: Any) -> Any:
        return operator("compare")(self, other, "lt")

    def __le__(self, other: Any) -> Any:
        return operator("compare")(self, other, "le")

    def __gt__(self, other: Any) -> Any:
        return operator("compare")(self, other, "gt")

    def __ge__(self, other: Any) -> Any:
        return operator("compare")(self, other, "ge")

    __hash__ = None  # type: ignore[assignment]  # elementwise ==, as scipy's and NumPy's arrays

    def __bool__(self) -> bool:
        return bool(operator("truth")(self))

    def mean(self, axis: Any = None, dtype: Any = None) -> Any:
        """Mean over ``axis`` (implicit zeros counted), as scipy.sparse."""
        return operator("mean")(self, axis, dtype)

    def count_nonzero(self, axis: Any = None) -> Any:
        """Stored values that are not zero (over ``axis``), as scipy.sparse."""
        return operator("count_nonzero")(self, axis)

    def diagonal(self, k: int = 0) -> Any:
        """Diagonal ``k`` as a dense 1-D array."""
        return operator("diagonal")(self, k)

    def reshape(self, *shape: Any, order: str = "C", copy: bool = False) -> Any:
        """The same entries in another shape (row-major ``order="C"`` or ``"F"``), as scipy."""
        return operator("reshape")(self, shape, order, copy)

    def multiply(self, other: Any) -> Any:
        """Elementwise product (broadcasting as scipy's ``multiply``)."""
        return operator("multiply_pointwise")(self, other)

    def dot(self, other: Any) -> Any:
        """The matrix product, as ``self @ other`` (scalars multiply)."""
        return operator("dot")(self, other)

    def _repr_html_(self) -> str:
        """Jupyter: format, shape, nnz, storage bytes and a small sparsity picture."""
        return str(conversion("repr_html")(self))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        """NumPy's hook (``np.asarray(t)``; SciPy functions given a Tensor take this path): the
        dense array, for CPU tensors of at most ``ust.convert.surface.ARRAY_ELEMENT_LIMIT``
        elements; above it a ShapeError names ``t.to_scipy()`` (docs/guide.rst)."""
        return conversion("array")(self, dtype, copy)

    def matvec(self, x: Any) -> Any:
        """``self @ x``: with :meth:`rmatvec`, what ``scipy.sparse.linalg.aslinearoperator``
        reads, so SciPy's iterative solvers take a Tensor without densifying it."""
        return operator("matmul_operator")(self, x)

    def rmatvec(self, x: Any) -> Any:
        """``self^H @ x`` (the transposed view; the vector conjugated, never the matrix)."""
        if self.dtype.kind != "c":
            return operator("matmul_operator")(self.T, x)
        return operator("matmul_operator")(self.T, x.conj()).conj()

    rmatmat = rmatvec

    def _adopt(self, other: Tensor) -> None:
        """Take ``other``'s storage (the in-place methods: this object gets new buffers)."""
        self._shape, self._format = other._shape, other._format
        self._pos, self._crd, self._values = other._pos, other._crd, other._values
        self._index_dtype, self._nnz, self._owed = other._index_dtype, other._nnz, other._owed
        self._source = other._source

    def to(self, device: str | int) -> Tensor:
        """The same tensor with every buffer on ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``)."""
        return conversion("to_device")(self, device)

    def copy(self) -> Tensor:
        """A tensor with copies of every buffer."""
        return self._replace(
            [None if a is None else a.copy() for a in self._pos],
            [None if a is None else a.copy() for a in self._crd],
            self._values.copy(),
        )

    def astype(self, dtype: Any, *, copy: bool = True) -> Tensor:
        """Values cast to ``dtype``; ``copy=False`` shares the index buffers (and the values
        when the dtype is unchanged)."""
        dt = check_value_dtype(dtype)
        if not copy and dt == self.dtype:
            return self
        vals = self._values.astype(dt, copy=True) if copy else self._values.astype(dt, copy=False)
        if copy:
            return self._replace(
                [None if a is None else a.copy() for a in self._pos],
                [None if a is None else a.copy() for a in self._crd],
                vals,
            )
        return self._replace(list(self._pos), list(self._crd), vals)

    def _replace(self, pos: list[Any], crd: list[Any], values: Any, index_dtype: Any = None) -> Tensor:
        t = Tensor(
            self._shape,
            self._format,
            values,
            pos=pos,
            crd=crd,
            index_dtype=index_dtype if index_dtype is not None else self._index_dtype,
            check=False,
        )
        t._nnz = self._nnz
        t._owed = self._owed  # copies of unchecked buffers are as unchecked
        return t


def _shape_text(a: Any) -> str:
    return "[" + ", ".join(str(s) for s in a.shape) + "]"


def _brief(a: Any, n: int = 6) -> str:
    """A short text of an array: its first elements (never copies a whole GPU array)."""
    flat = a.reshape(-1)
    head = _xp.to_host(flat[:n])
    body = np.array2string(head, separator=" ", threshold=n + 1, max_line_width=10_000)[1:-1]
    more = " ..." if flat.shape[0] > n else ""
    return f"[{body}{more}]"
