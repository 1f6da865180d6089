"""FFT prologues and epilogues written as text: ``v * exp(-(k * k) / (2 * sigma * sigma))``, ``v * h[k]``.

One parsed, typed, validated expression over the element value, its position and named
parameters serves every target: CUDA source for a cuFFT LTO callback (fused into cuFFT's own
kernels) or for one elementwise kernel (where cuFFT has no LTO callbacks), and an array program
(NumPy on the CPU, CuPy on the GPU).  The names an expression may use:

* ``v``: the element (the transform's input for a prologue, its output for an epilogue);
* ``k`` / ``f`` / ``n`` for a 1-D transform: the element's index along the transformed axis, its
  signed index (``fftfreq(n) * n``; on a half spectrum, ``k``) and the transform's length; for
  fftn / ifftn ``k0, k1, ...``, ``f0, f1, ...``, ``n0, n1, ...`` in the order of ``axes`` (the
  unnumbered names too when there is one axis); ``N``: the number of points of one transform;
* parameters: real or complex scalars by name (``sigma``), arrays by element (``h[k]``,
  ``g[k0, k1]``): each subscript is an index name, and the array's extent along it must equal
  the transformed axis' extent in the array the callback sees.

Values are typed real or complex before any code is emitted: comparisons, ``min``, ``max`` and
``where``'s condition need real operands, and an expression that produces complex values cannot
feed a real array (an rfft's input, an irfft's output).  This module imports no GPU package.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ust.codegen.epilog import BINARY_OPS, COMPARISONS
from ust.grammar import ast
from ust.runtime.errors import InvalidTypeError, ShapeError, UnsupportedError, UstSyntaxError

__all__ = [
    "CallbackSite",
    "FFTCallback",
    "ParamSpec",
    "callback_symbol",
    "callback_type",
    "compile_fft_callback",
    "cuda_callback_source",
    "cuda_kernel_source",
    "evaluate",
    "param_block",
    "param_specs",
]

REAL, COMPLEX = "real", "complex"
#: name -> (arity, CUDA function for double (an "f" suffix gives the float one), array function).
_FUNCTIONS: dict[str, tuple[int, str, str]] = {
    "min": (2, "fmin", "minimum"),
    "max": (2, "fmax", "maximum"),
    "abs": (1, "fabs", "abs"),
    "exp": (1, "exp", "exp"),
    "log": (1, "log", "log"),
    "sqrt": (1, "sqrt", "sqrt"),
    "tanh": (1, "tanh", "tanh"),
    "cos": (1, "cos", "cos"),
    "sin": (1, "sin", "sin"),
    "real": (1, "", "real"),
    "imag": (1, "", "imag"),
    "conj": (1, "", "conj"),
    "where": (3, "", "where"),
}
_REAL_ARGS = frozenset({"min", "max", "cos", "sin"})  # complex arguments refused
#: The helper of each complex function in the CUDA preamble (real ones use the math library).
_COMPLEX_HELPER = {"exp": "uc_exp", "log": "uc_log", "sqrt": "uc_sqrt", "tanh": "uc_tanh", "conj": "uc_conj"}
_ARRAY_DTYPES = ("float32", "float64", "complex64", "complex128")


@dataclass(frozen=True)
class ParamSpec:
    """A parameter as the callback sees it: a scalar (``shape`` None) or an array, real or complex."""

    name: str
    kind: str  # REAL | COMPLEX
    shape: tuple[int, ...] | None = None
    dtype: str = "float64"

    @property
    def is_array(self) -> bool:
        return self.shape is not None


@dataclass(frozen=True)
class CallbackSite:
    """Where a callback runs: the array it reads or writes, and the transform around it.

    ``shape``: that array's shape (C order); ``axes``: the transformed axes in the user's order;
    ``sizes``: the transform's lengths along them; ``half``: the axes (positions in ``axes``)
    that hold a half spectrum (an rfft's output, an irfft's input); ``value``: the element's kind.
    """

    phase: str  # "prolog" | "epilog"
    shape: tuple[int, ...]
    axes: tuple[int, ...]
    sizes: tuple[int, ...]
    half: tuple[int, ...]
    value: str  # REAL | COMPLEX
    numbered: bool  # fftn / ifftn: k0, k1, ...

    def index_names(self) -> dict[str, tuple[str, int]]:
        """``name -> ("k" | "f", position in axes)``."""
        out: dict[str, tuple[str, int]] = {}
        for i in range(len(self.axes)):
            if self.numbered:
                out[f"k{i}"], out[f"f{i}"] = ("k", i), ("f", i)
        if len(self.axes) == 1:
            out["k"], out["f"] = ("k", 0), ("f", 0)
        return out

    def size_names(self) -> dict[str, int]:
        out = {"N": math.prod(self.sizes)}
        for i, s in enumerate(self.sizes):
            if self.numbered:
                out[f"n{i}"] = s
        if len(self.sizes) == 1:
            out["n"] = self.sizes[0]
        return out

    def extent(self, position: int) -> int:
        return self.shape[self.axes[position]]


@dataclass(frozen=True)
class FFTCallback:
    """A validated, typed callback: its text and tree, where it runs, its parameters and result kind."""

    text: str
    tree: ast.ExprAST
    site: CallbackSite
    params: tuple[ParamSpec, ...]
    result: str  # REAL | COMPLEX
    # the transform's norm factor, folded in: epilog(v * scale), or scale * prolog(x) (both give the
    # norm's result, the transform being linear)
    scale: float = 1.0

    def with_scale(self, scale: float) -> FFTCallback:
        return FFTCallback(self.text, self.tree, self.site, self.params, self.result, scale)

    def used_names(self) -> set[str]:
        return _names(self.tree)


def _names(e: ast.ExprAST) -> set[str]:
    if isinstance(e, ast.Var):
        return {e.name}
    if isinstance(e, ast.Neg):
        return _names(e.operand)
    if isinstance(e, ast.BinOp):
        return _names(e.left) | _names(e.right)
    if isinstance(e, (ast.Call, ast.Index)):
        out = {e.name} if isinstance(e, ast.Index) else set()
        return out.union(*(_names(a) for a in e.args))
    return set()


def param_specs(params: Mapping[str, Any] | None) -> tuple[ParamSpec, ...]:
    """The kinds and shapes of ``params`` (scalars: int, float, complex; arrays: anything with a shape)."""
    if params is None:
        return ()
    if not isinstance(params, Mapping):
        raise InvalidTypeError(
            f"params must be a dict of name -> scalar or array, not {type(params).__name__}"
        )
    out = []
    for name, v in params.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidTypeError(f"parameter names must be identifiers, got {name!r}")
        if hasattr(v, "shape") and len(v.shape) > 0:
            dtype = str(v.dtype).rpartition(".")[2]
            kind = COMPLEX if dtype.startswith("complex") else REAL
            if dtype not in _ARRAY_DTYPES and not (
                dtype.startswith(("int", "uint", "float")) or dtype == "bool"
            ):
                raise UnsupportedError(
                    f"array parameter {name!r} has dtype {dtype}; supported: real or complex numbers"
                )
            out.append(ParamSpec(name, kind, tuple(int(s) for s in v.shape), dtype))
        elif isinstance(v, bool) or (not isinstance(v, (int, float, complex)) and not hasattr(v, "dtype")):
            raise InvalidTypeError(f"parameter {name!r} must be a number or an array, not {type(v).__name__}")
        else:
            is_complex = isinstance(v, complex) or getattr(getattr(v, "dtype", None), "kind", "") == "c"
            out.append(ParamSpec(name, COMPLEX if is_complex else REAL))
    return tuple(out)


def compile_fft_callback(text: str, site: CallbackSite, params: tuple[ParamSpec, ...]) -> FFTCallback:
    """Parse, check and type ``text`` for ``site``; a ust error names the problem (nothing runs)."""
    if not isinstance(text, str):
        raise InvalidTypeError(f"a {site.phase} must be text or a function, not {type(text).__name__}")
    return _compile(text, site, params)


@functools.lru_cache(maxsize=256)
def _compile(text: str, site: CallbackSite, params: tuple[ParamSpec, ...]) -> FFTCallback:
    from ust.grammar.parser import parse_epilog

    tree = parse_epilog(text)
    what = f"{site.phase} {text!r}"
    by_name = {p.name: p for p in params}
    indices, sizes = site.index_names(), site.size_names()
    builtin = {"v", *indices, *sizes}
    clash = sorted(builtin & set(by_name))
    if clash:
        raise UnsupportedError(
            f"{what}: parameter name(s) {', '.join(clash)} are built-in names; rename them"
        )

    def known() -> str:
        names = ["v", *indices, *sizes]
        return f"built-in names {', '.join(names)}" + (
            f"; parameters {', '.join(by_name)}" if by_name else ""
        )

    def kind(e: ast.ExprAST) -> str:
        if isinstance(e, ast.Num):
            return REAL
        if isinstance(e, ast.Var):
            if e.name == "v":
                return site.value
            if e.name in indices or e.name in sizes:
                return REAL
            if e.name in _FUNCTIONS:
                raise UstSyntaxError(f"{what}: '{e.name}' is a function; call it as {e.name}(...)")
            p = by_name.get(e.name)
            if p is None:
                raise UnsupportedError(
                    f"{what} uses '{e.name}', which is neither a built-in name nor a parameter "
                    f"(pass params={{'{e.name}': ...}}); known: {known()}"
                )
            if p.is_array:
                subs = ", ".join(f"k{i}" if site.numbered else "k" for i in range(len(p.shape or ())))
                raise UnsupportedError(
                    f"{what}: '{e.name}' is an array parameter; index it, e.g. {e.name}[{subs}]"
                )
            return p.kind
        if isinstance(e, ast.Neg):
            return kind(e.operand)
        if isinstance(e, ast.Index):
            return index_kind(e)
        if isinstance(e, ast.BinOp):
            a, b = kind(e.left), kind(e.right)
            if e.op in COMPARISONS:
                if COMPLEX in (a, b):
                    raise UnsupportedError(
                        f"{what}: '{e.op}' compares real values only; take abs(...) or real(...)"
                    )
                return REAL
            return COMPLEX if COMPLEX in (a, b) else REAL
        return call_kind(e)

    def index_kind(e: ast.Index) -> str:
        p = by_name.get(e.name)
        if p is None or not p.is_array:
            why = "a scalar parameter" if p is not None else "not a parameter"
            raise UnsupportedError(f"{what}: '{e.name}' is {why}; only array parameters take subscripts")
        assert p.shape is not None
        if len(e.args) != len(p.shape):
            raise ShapeError(
                f"{what}: {e.name} has {len(p.shape)} dimension(s) but {len(e.args)} subscript(s)"
            )
        for dim, arg in enumerate(e.args):
            if not (isinstance(arg, ast.Var) and indices.get(arg.name, ("", 0))[0] == "k"):
                ks = ", ".join(n for n, (t, _) in indices.items() if t == "k")
                raise UnsupportedError(f"{what}: subscripts of {e.name} must be index names ({ks})")
            extent = site.extent(indices[arg.name][1])
            if p.shape[dim] != extent:
                raise ShapeError(
                    f"{what}: {e.name} has extent {p.shape[dim]} along dimension {dim}, indexed by "
                    f"{arg.name}, which runs over {extent} value(s) in the {site.phase}'s array"
                )
        return p.kind

    def call_kind(e: ast.ExprAST) -> str:
        assert isinstance(e, ast.Call)
        spec = _FUNCTIONS.get(e.fn)
        if spec is None:
            raise UnsupportedError(
                f"{what}: unknown function '{e.fn}'; supported: {', '.join(sorted(_FUNCTIONS))}"
            )
        if len(e.args) != spec[0]:
            raise UnsupportedError(f"{what}: {e.fn} takes {spec[0]} argument(s), got {len(e.args)}")
        kinds = [kind(a) for a in e.args]
        if e.fn == "where":
            if kinds[0] == COMPLEX:
                raise UnsupportedError(f"{what}: where's condition must be real")
            return COMPLEX if COMPLEX in kinds[1:] else REAL
        if e.fn in _REAL_ARGS and COMPLEX in kinds:
            raise UnsupportedError(
                f"{what}: {e.fn} takes real arguments; take abs(...), real(...) or imag(...)"
            )
        if e.fn in ("abs", "real", "imag"):
            return REAL
        return kinds[0]

    result = kind(tree)
    if result == COMPLEX and site.value == REAL:
        array = "input" if site.phase == "prolog" else "output"
        raise UnsupportedError(
            f"{what} produces complex values, but the transform's {array} is real; "
            "take real(...), imag(...) or abs(...)"
        )
    return FFTCallback(text, tree, site, params, result)


# ------------------------------------------------------------------------------- array programs


def _complex_of(xp: Any, real: Any) -> Any:
    return xp.complex64 if real == xp.float32 else xp.complex128


def _axis_view(values: Any, axis: int, ndim: int) -> Any:
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def evaluate(cb: FFTCallback, y: Any, params: Mapping[str, Any], xp: Any) -> Any:
    """``cb`` applied to the array ``y`` (shape ``cb.site.shape``): one array program, no loops over elements.

    Index names become broadcast ranges in ``y``'s real precision (so float32 data stays float32);
    array parameters are broadcast along the axes their subscripts name.  Returns a new array of
    ``y``'s dtype.
    """
    site = cb.site
    ndim = len(site.shape)
    real = xp.float32 if y.dtype in (xp.float32, xp.complex64) else xp.float64
    indices, sizes = site.index_names(), site.size_names()
    used = cb.used_names()
    env: dict[str, Any] = {}
    for name, (what, pos) in indices.items():
        if name not in used:
            continue
        axis, extent = site.axes[pos], site.extent(pos)
        k = xp.arange(extent, dtype=real)
        if what == "f" and pos not in site.half:
            m = site.sizes[pos]
            k = xp.where(k < (m + 1) // 2, k, k - m)
        env[name] = _axis_view(k, axis, ndim)
    for name, size in sizes.items():
        env[name] = float(size)
    for p in cb.params:
        given = params[p.name]
        env[p.name] = given if p.is_array else (complex(given) if p.kind == COMPLEX else float(given))

    def subscripted(e: ast.Index) -> Any:
        arr = xp.asarray(env[e.name])
        axes = [site.axes[indices[a.name][1]] for a in e.args if isinstance(a, ast.Var)]
        order = sorted(range(len(axes)), key=lambda i: axes[i])
        arr = arr.transpose(order) if order != list(range(len(axes))) else arr
        shape = [1] * ndim
        for j, i in enumerate(order):
            shape[axes[i]] = arr.shape[j]
        arr = arr.astype(real if arr.dtype.kind in "iubf" else _complex_of(xp, real), copy=False)
        return arr.reshape(shape)

    epilog_scale = cb.scale != 1.0 and site.phase == "epilog"
    value = y * y.dtype.type(cb.scale) if epilog_scale else y

    def ev(e: ast.ExprAST) -> Any:
        if isinstance(e, ast.Num):
            return e.value
        if isinstance(e, ast.Var):
            return value if e.name == "v" else env[e.name]
        if isinstance(e, ast.Neg):
            return -ev(e.operand)
        if isinstance(e, ast.Index):
            return subscripted(e)
        if isinstance(e, ast.BinOp):
            return BINARY_OPS[e.op](ev(e.left), ev(e.right))
        assert isinstance(e, ast.Call)
        args = [ev(a) for a in e.args]
        if e.fn == "where":
            return xp.where(args[0], args[1], args[2])
        return getattr(xp, _FUNCTIONS[e.fn][2])(*args)

    with _quiet(xp):
        result = ev(cb.tree)
        if cb.scale != 1.0 and site.phase == "prolog":
            result = result * real(cb.scale)
    fresh = getattr(result, "shape", None) == tuple(site.shape) and result is not y
    if fresh and result.dtype == y.dtype:
        return result  # already a new array of the right kind: no copy
    out = xp.empty(site.shape, dtype=y.dtype)
    out[...] = result
    return out


class _quiet:
    """NumPy's warnings about inf / nan in a user's expression are the expression's business."""

    def __init__(self, xp: Any) -> None:
        self.ctx = xp.errstate(all="ignore") if hasattr(xp, "errstate") else None

    def __enter__(self) -> None:
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


# ------------------------------------------------------------------------------------ CUDA source
# One ``__device__`` body per callback, wrapped either as a cuFFT LTO callback or as a grid-stride
# elementwise kernel.  No headers: a complex value is ``uc``, CUDA's own float2 / double2 (the types
# behind cufftComplex / cufftDoubleComplex), with its arithmetic here.
# Every helper is ``static``: a prologue's and an epilogue's LTO-IR are linked into one program.

_PREAMBLE = """typedef {R} ust_r;
typedef {R}2 uc;  /* cufftComplex / cufftDoubleComplex: the type cuFFT's callback prototypes use */
static __device__ __forceinline__ uc uc_mk(ust_r a, ust_r b) {{ uc z; z.x = a; z.y = b; return z; }}
static __device__ __forceinline__ uc operator+(uc a, uc b) {{ return uc_mk(a.x + b.x, a.y + b.y); }}
static __device__ __forceinline__ uc operator-(uc a, uc b) {{ return uc_mk(a.x - b.x, a.y - b.y); }}
static __device__ __forceinline__ uc operator*(uc a, uc b) {{ return uc_mk(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }}
static __device__ __forceinline__ uc operator/(uc a, uc b) {{
  ust_r s = fabs{f}(b.x) + fabs{f}(b.y);
  ust_r ax = a.x / s, ay = a.y / s, bx = b.x / s, by = b.y / s, d = bx * bx + by * by;
  return uc_mk((ax * bx + ay * by) / d, (ay * bx - ax * by) / d);
}}
static __device__ __forceinline__ uc operator-(uc a) {{ return uc_mk(-a.x, -a.y); }}
static __device__ __forceinline__ uc operator+(uc a, ust_r b) {{ return uc_mk(a.x + b, a.y); }}
static __device__ __forceinline__ uc operator+(ust_r a, uc b) {{ return uc_mk(a + b.x, b.y); }}
static __device__ __forceinline__ uc operator-(uc a, ust_r b) {{ return uc_mk(a.x - b, a.y); }}
static __device__ __forceinline__ uc operator-(ust_r a, uc b) {{ return uc_mk(a - b.x, -b.y); }}
static __device__ __forceinline__ uc operator*(uc a, ust_r b) {{ return uc_mk(a.x * b, a.y * b); }}
static __device__ __forceinline__ uc operator*(ust_r a, uc b) {{ return uc_mk(a * b.x, a * b.y); }}
static __device__ __forceinline__ uc operator/(uc a, ust_r b) {{ return uc_mk(a.x / b, a.y / b); }}
static __device__ __forceinline__ uc operator/(ust_r a, uc b) {{ return uc_mk(a, (ust_r)0) / b; }}
static __device__ __forceinline__ ust_r uc_abs(uc z) {{ return hypot{f}(z.x, z.y); }}
static __device__ __forceinline__ uc uc_conj(uc z) {{ return uc_mk(z.x, -z.y); }}
static __device__ __forceinline__ uc uc_exp(uc z) {{
  ust_r e = exp{f}(z.x), s, c; sincos{f}(z.y, &s, &c); return uc_mk(e * c, e * s);
}}
static __device__ __forceinline__ uc uc_log(uc z) {{ return uc_mk(log{f}(hypot{f}(z.x, z.y)), atan2{f}(z.y, z.x)); }}
static __device__ __forceinline__ uc uc_sqrt(uc z) {{
  ust_r r = hypot{f}(z.x, z.y);
  if (r == (ust_r)0) return uc_mk((ust_r)0, z.y);
  ust_r t = sqrt{f}((r + fabs{f}(z.x)) * (ust_r)0.5);
  return z.x >= (ust_r)0 ? uc_mk(t, z.y / (2 * t)) : uc_mk(fabs{f}(z.y) / (2 * t), copysign{f}(t, z.y));
}}
static __device__ __forceinline__ uc uc_tanh(uc z) {{
  if (fabs{f}(z.x) > (ust_r)20) return uc_mk(copysign{f}((ust_r)1, z.x), (ust_r)0);
  ust_r d = cosh{f}(2 * z.x) + cos{f}(2 * z.y);
  return uc_mk(sinh{f}(2 * z.x) / d, sin{f}(2 * z.y) / d);
}}
static __device__ __forceinline__ uc uc_pow(uc a, uc b) {{
  if (a.x == (ust_r)0 && a.y == (ust_r)0) return (b.x == (ust_r)0 && b.y == (ust_r)0) ? uc_mk(1, 0) : uc_mk(0, 0);
  return uc_exp(b * uc_log(a));
}}
"""


def _ctype(kind: str) -> str:
    return "uc" if kind == COMPLEX else "ust_r"


class _Emitter:
    """Typed C++ expression text for a callback's tree (``f``: the float suffix of math functions)."""

    def __init__(self, cb: FFTCallback, f: str) -> None:
        self.cb, self.f = cb, f
        self.indices = cb.site.index_names()
        self.sizes = cb.site.size_names()
        self.by_name = {p.name: p for p in cb.params}

    def as_complex(self, code: str, kind: str) -> str:
        return code if kind == COMPLEX else f"uc_mk({code}, (ust_r)0)"

    def expr(self, e: ast.ExprAST) -> tuple[str, str]:
        f = self.f
        if isinstance(e, ast.Num):
            return f"((ust_r){e.value!r})", REAL
        if isinstance(e, ast.Var):
            if e.name == "v":
                return "v", self.cb.site.value
            if e.name in self.indices:
                return f"ust_{e.name}", REAL
            if e.name in self.sizes:
                return f"((ust_r){self.sizes[e.name]})", REAL
            return f"p_{e.name}", self.by_name[e.name].kind
        if isinstance(e, ast.Neg):
            code, kind = self.expr(e.operand)
            return f"(-{code})", kind
        if isinstance(e, ast.Index):
            p = self.by_name[e.name]
            assert p.shape is not None
            flat = "0"
            for dim, arg in enumerate(e.args):
                assert isinstance(arg, ast.Var)
                flat = f"({flat} * {p.shape[dim]}LL + ust_i{self.indices[arg.name][1]})"
            return f"p_{e.name}[{flat}]", p.kind
        if isinstance(e, ast.BinOp):
            (a, ka), (b, kb) = self.expr(e.left), self.expr(e.right)
            if e.op in COMPARISONS:
                return f"((ust_r)({a} {e.op} {b}))", REAL
            if e.op == "**":
                if COMPLEX in (ka, kb):
                    return f"uc_pow({self.as_complex(a, ka)}, {self.as_complex(b, kb)})", COMPLEX
                return f"pow{f}({a}, {b})", REAL
            return f"({a} {e.op} {b})", COMPLEX if COMPLEX in (ka, kb) else REAL
        assert isinstance(e, ast.Call)
        args = [self.expr(a) for a in e.args]
        kinds = [k for _, k in args]
        codes = [c for c, _ in args]
        if e.fn == "where":
            kind = COMPLEX if COMPLEX in kinds[1:] else REAL
            t, u = (self.as_complex(c, k) if kind == COMPLEX else c for c, k in args[1:])
            return f"(({codes[0]}) != (ust_r)0 ? {t} : {u})", kind
        if e.fn in ("real", "imag"):
            if kinds[0] == REAL:
                return (codes[0] if e.fn == "real" else "((ust_r)0)"), REAL
            return f"({codes[0]}).{'x' if e.fn == 'real' else 'y'}", REAL
        if kinds[0] == COMPLEX:
            if e.fn == "abs":
                return f"uc_abs({codes[0]})", REAL
            return f"{_COMPLEX_HELPER[e.fn]}({codes[0]})", COMPLEX
        if e.fn == "conj":
            return codes[0], REAL
        return f"{_FUNCTIONS[e.fn][1]}{f}({', '.join(codes)})", REAL

    def body(self, name: str) -> str:
        """``__device__`` function ``name(v, offset, info)`` -> the new element."""
        site, cb = self.cb.site, self.cb
        used = cb.used_names()
        vt = _ctype(site.value)
        lines = [
            f"static __device__ __forceinline__ {vt} {name}({vt} v, unsigned long long ust_off, const void* ust_info) {{"
        ]
        slots = _slots(cb.params)
        if cb.params:
            lines.append("  const double* ust_pd = (const double*)ust_info;")
            lines.append("  const unsigned long long* ust_pu = (const unsigned long long*)ust_info;")
        positions = sorted(
            {pos for n, (_, pos) in self.indices.items() if n in used}
            | {self.indices[a.name][1] for a in _subscripts(cb.tree)}
        )
        for pos in positions:
            axis = site.axes[pos]
            stride = math.prod(site.shape[axis + 1 :])
            lines.append(
                f"  const long long ust_i{pos} = (long long)((ust_off / {stride}ULL) % {site.shape[axis]}ULL);"
            )
        for n, (what, pos) in self.indices.items():
            if n not in used:
                continue
            if what == "k" or pos in site.half:
                lines.append(f"  const ust_r ust_{n} = (ust_r)ust_i{pos};")
            else:
                m = site.sizes[pos]
                lines.append(
                    f"  const ust_r ust_{n} = (ust_r)(ust_i{pos} < {(m + 1) // 2}LL ? ust_i{pos} : ust_i{pos} - {m}LL);"
                )
        for p in cb.params:
            slot = slots[p.name]
            if p.is_array:
                lines.append(
                    f"  const {_ctype(p.kind)}* p_{p.name} = (const {_ctype(p.kind)}*)ust_pu[{slot}];"
                )
            elif p.kind == COMPLEX:
                lines.append(
                    f"  const uc p_{p.name} = uc_mk((ust_r)ust_pd[{slot}], (ust_r)ust_pd[{slot + 1}]);"
                )
            else:
                lines.append(f"  const ust_r p_{p.name} = (ust_r)ust_pd[{slot}];")
        if cb.scale != 1.0 and site.phase == "epilog":
            lines.append(f"  v = v * (ust_r){cb.scale!r};")
        code, kind = self.expr(cb.tree)
        result = self.as_complex(code, kind) if site.value == COMPLEX else code
        if cb.scale != 1.0 and site.phase == "prolog":
            result = f"(({result}) * (ust_r){cb.scale!r})"
        lines += [f"  return {result};", "}"]
        return "\n".join(lines)


def _subscripts(e: ast.ExprAST) -> list[ast.Var]:
    if isinstance(e, ast.Index):
        return [a for a in e.args if isinstance(a, ast.Var)] + [v for a in e.args for v in _subscripts(a)]
    if isinstance(e, ast.Neg):
        return _subscripts(e.operand)
    if isinstance(e, ast.BinOp):
        return _subscripts(e.left) + _subscripts(e.right)
    if isinstance(e, ast.Call):
        return [v for a in e.args for v in _subscripts(a)]
    return []


def _slots(params: tuple[ParamSpec, ...]) -> dict[str, int]:
    """Each parameter's first 8-byte slot in the parameter block (complex scalars take two)."""
    out, at = {}, 0
    for p in params:
        out[p.name] = at
        at += 2 if (p.kind == COMPLEX and not p.is_array) else 1
    return out


def param_block(params: tuple[ParamSpec, ...], values: Mapping[str, Any], pointer: Any) -> list[float | int]:
    """The parameter block's slots in order: scalars as doubles, arrays as ``pointer(array)`` (ints)."""
    out: list[float | int] = []
    for p in params:
        v = values[p.name]
        if p.is_array:
            out.append(int(pointer(v)))
        elif p.kind == COMPLEX:
            out += [complex(v).real, complex(v).imag]
        else:
            out.append(float(v))
    return out


def _precision(dtype: str) -> tuple[str, str]:
    """(C real type, math suffix) of a transform's dtype."""
    return ("float", "f") if dtype in ("float32", "complex64") else ("double", "")


#: (phase, value kind) -> (cuFFT callback type name suffix, is a load).
_CALLBACK_KIND = {("prolog", COMPLEX): "LD_COMPLEX", ("prolog", REAL): "LD_REAL",
                  ("epilog", COMPLEX): "ST_COMPLEX", ("epilog", REAL): "ST_REAL"}  # fmt: skip


def callback_type(cb: FFTCallback, dtype: str) -> str:
    """cuFFT's ``cufftXtCallbackType`` name for ``cb`` on a transform of ``dtype`` (e.g. ``LD_COMPLEX_DOUBLE``)."""
    base = _CALLBACK_KIND[(cb.site.phase, cb.site.value)]
    return base + ("" if _precision(dtype)[0] == "float" else "_DOUBLE")


def cuda_callback_source(cb: FFTCallback, dtype: str, symbol: str) -> str:
    """CUDA C++ of ``cb`` as a cuFFT LTO callback named ``symbol``, for NVRTC ``-dlto``.

    Load: ``T symbol(void* dataIn, unsigned long long offset, void* callerInfo, void* shared)``;
    store: ``void symbol(void* dataOut, unsigned long long offset, T element, void* callerInfo,
    void* shared)``, T being float / double / float2 / double2 (cuFFT's own types).  The function
    has C++ linkage, not ``extern "C"``: cuFFT declares the callback it links against as a C++
    function of exactly this prototype, so the symbol it resolves is the mangled name
    (:func:`callback_symbol`); an ``extern "C"`` definition leaves it unresolved and cuFFT 12
    fails the plan with CUFFT_INTERNAL_ERROR (measured on the H200).
    """
    real, f = _precision(dtype)
    em = _Emitter(cb, f)
    vt = _ctype(cb.site.value)
    if cb.site.phase == "prolog":
        wrapper = (
            f"__device__ {vt} {symbol}(void* dataIn, unsigned long long offset, void* callerInfo, "
            "void* sharedPointer) {\n"
            f"  return ust_body(((const {vt}*)dataIn)[offset], offset, callerInfo);\n}}\n"
        )
    else:
        wrapper = (
            f"__device__ void {symbol}(void* dataOut, unsigned long long offset, {vt} element, "
            "void* callerInfo, void* sharedPointer) {\n"
            f"  (({vt}*)dataOut)[offset] = ust_body(element, offset, callerInfo);\n}}\n"
        )
    return _PREAMBLE.format(R=real, f=f) + em.body("ust_body") + "\n" + wrapper


#: The Itanium-ABI code of each value type in a callback prototype (cufftComplex is float2).
_MANGLED_VALUE = {"float32": "f", "float64": "d", "complex64": "6float2", "complex128": "7double2"}


def callback_symbol(symbol: str, phase: str, value_dtype: str) -> str:
    """The mangled name cuFFT resolves for a callback ``symbol`` (what a numba-compiled callback,
    which has C linkage under the name it is given, must be called).

    Load ``T f(void*, unsigned long long, void*, void*)``: ``_Z<n>fPvyS_S_`` (a return type is not
    part of the name); store ``void f(void*, unsigned long long, T, void*, void*)``:
    ``_Z<n>fPvy<T>S_S_``.
    """
    params = "PvyS_S_" if phase == "prolog" else f"Pvy{_MANGLED_VALUE[value_dtype]}S_S_"
    return f"_Z{len(symbol)}{symbol}{params}"


def cuda_kernel_source(cb: FFTCallback, dtype: str, name: str) -> str:
    """CUDA C++ of ``cb`` as one grid-stride kernel ``name(in, out, info, count)`` (the unfused route)."""
    real, f = _precision(dtype)
    vt = _ctype(cb.site.value)
    kernel = (
        f'extern "C" __global__ void {name}(const {vt}* in, {vt}* out, const void* info, unsigned long long count) {{\n'
        "  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;\n"
        "       i += (unsigned long long)gridDim.x * blockDim.x)\n"
        "    out[i] = ust_body(in[i], i, info);\n}\n"
    )
    return _PREAMBLE.format(R=real, f=f) + _Emitter(cb, f).body("ust_body") + "\n" + kernel
