"""Reference interpreter of the loop IR (scalar Python over NumPy buffers).

It is the second opinion on every lowering in the tests: it runs exactly the IR the
emitters translate, with no compiler in between.  It is slow by design and never a user
route.  Values are NumPy scalars of the kernel's value dtype, so float32 arithmetic stays
float32; indices are Python ints.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ust.codegen.ir import (
    Accumulate,
    Assign,
    Bin,
    Block,
    Const,
    Decl,
    Expr,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    Select,
    Sort,
    Stmt,
    Store,
    Un,
    Var,
    While,
)
from ust.runtime.errors import ShapeError

__all__ = ["run"]

_BIN: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": operator.floordiv,
    "%": operator.mod,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "&&": lambda a, b: bool(a) and bool(b),
    "||": lambda a, b: bool(a) or bool(b),
    "min": min,
    "max": max,
}
#: How Accumulate combines (``+=`` or a semiring's additive operator).
_COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "min": min,
    "max": max,
    "or": lambda a, b: type(a)(bool(a) or bool(b)),
}


class _Machine:
    def __init__(self, kernel: Kernel, args: Mapping[str, Any]) -> None:
        self.vtype = np.dtype(kernel.value_dtype).type
        self.bufs: dict[str, np.ndarray] = {}
        self.env: dict[str, Any] = {}
        for p in kernel.params:
            if p.name not in args:
                raise ShapeError(f"kernel {kernel.name} needs argument {p.name!r}")
            a = args[p.name]
            if p.kind in ("ibuf", "vbuf"):
                arr = np.asarray(a)
                flat = arr.ravel(order="K")  # memory order, as a compiled kernel sees it
                if not p.const and (
                    not arr.flags.writeable or (arr.size and not np.shares_memory(flat, arr))
                ):
                    raise ShapeError(
                        f"output buffer {p.name!r} must be a writable array contiguous in some order"
                    )
                self.bufs[p.name] = flat
            elif p.kind == "vscalar":
                self.env[p.name] = self.vtype(a if np.dtype(self.vtype).kind == "c" else complex(a).real)
            else:
                self.env[p.name] = int(a)

    def ev(self, e: Expr, env: dict[str, Any]) -> Any:
        if isinstance(e, Const):
            return self.vtype(e.value) if e.kind == "value" else e.value
        if isinstance(e, Var):
            return env[e.name]
        if isinstance(e, Load):
            buf = self.bufs[e.buf]
            i = int(self.ev(e.index, env))
            if not 0 <= i < buf.shape[0]:
                raise IndexError(f"{e.buf}[{i}] is out of bounds (length {buf.shape[0]})")
            v = buf[i]
            return int(v) if buf.dtype.kind in "iu" else v
        if isinstance(e, Bin):
            return _BIN[e.op](self.ev(e.a, env), self.ev(e.b, env))
        if isinstance(e, Select):
            return self.ev(e.a, env) if self.ev(e.cond, env) else self.ev(e.b, env)
        if isinstance(e, Un):
            v = self.ev(e.a, env)
            return -v if e.op == "-" else (not v)
        raise TypeError(f"not an IR expression: {e!r}")

    def ex(self, s: Stmt, env: dict[str, Any]) -> None:
        if isinstance(s, Block):
            scope = dict(env)
            for t in s.body:
                self.ex(t, scope)
            for k in env:  # mutable scalars declared outside live on
                env[k] = scope[k]
        elif isinstance(s, (Let, Decl)):
            v = self.ev(s.value, env)
            env[s.name] = self.vtype(v) if s.kind == "value" else v
        elif isinstance(s, Assign):
            env[s.name] = self.vtype(self.ev(s.value, env))
        elif isinstance(s, Loop):
            lo, hi = int(self.ev(s.lo, env)), int(self.ev(s.hi, env))
            for i in range(lo, hi):
                env[s.var] = i
                self.ex(s.body, env)
            env.pop(s.var, None)
        elif isinstance(s, While):
            while self.ev(s.cond, env):
                self.ex(s.body, env)
        elif isinstance(s, Sort):
            lo, hi = int(self.ev(s.lo, env)), int(self.ev(s.hi, env))
            buf = self.bufs[s.buf]
            if not 0 <= lo <= hi <= buf.shape[0]:
                raise IndexError(f"sort {s.buf}[{lo}:{hi}] is out of bounds (length {buf.shape[0]})")
            buf[lo:hi] = np.sort(buf[lo:hi])
        elif isinstance(s, If):
            if self.ev(s.cond, env):
                self.ex(s.then, env)
            elif s.orelse is not None:
                self.ex(s.orelse, env)
        elif isinstance(s, (Store, Accumulate)):
            buf = self.bufs[s.buf]
            i = int(self.ev(s.index, env))
            if not 0 <= i < buf.shape[0]:
                raise IndexError(f"{s.buf}[{i}] is out of bounds (length {buf.shape[0]})")
            v = self.ev(s.value, env)
            buf[i] = v if isinstance(s, Store) else _COMBINE[s.op](buf[i], v)
        else:
            raise TypeError(f"not an IR statement: {s!r}")


def run(kernel: Kernel, args: Mapping[str, Any]) -> None:
    """Execute ``kernel`` (init pass, then main pass) on NumPy ``args`` keyed by parameter name.

    Buffers are read flat; the output buffer ``y`` is written in place.  Every load and
    store is bounds-checked, so a lowering that reads padding or past a buffer fails loudly.
    """
    m = _Machine(kernel, args)
    env = {"ust_tid": 0, **m.env}  # one thread: the compute kernels' thread number
    if kernel.init is not None:
        m.ex(kernel.init, dict(env))
    m.ex(kernel.body, env)
