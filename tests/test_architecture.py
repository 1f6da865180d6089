"""The layering of ust (docs/design.rst), checked on the source: AST and a subprocess.

Layers, lowest first; a module may import its own layer and the layers below it, and
``runtime`` (errors, logging, spaces, xp) from everywhere::

    runtime < grammar < formats < tensor < convert < io < codegen < plan < backends
            < algebra < api < ust (the package root: public names) < cli < ust.__main__

``ust._version`` counts as runtime.  What counts as an import: every ``import`` /
``from ... import`` anywhere in a module (inside functions too, and inside
``if TYPE_CHECKING:`` blocks: no exemption is needed, so none is made) and every
``importlib.import_module("ust....")`` with a literal name.

Edges of the import graph go to the most specific module an import names: ``from ust.a import
b`` is an edge to ``ust.a.b`` where that is a module, else to the package ``ust.a`` (its
``__init__``, which counts as a module).  The implicit execution of parent packages'
``__init__`` is not an edge: an ``__init__`` that only re-exports its own submodules then
creates no false cycle with the submodules that import each other directly.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "ust"

ORDER = (
    "runtime", "grammar", "formats", "tensor", "convert", "io", "codegen", "plan", "backends",
    "algebra", "api", "ust", "cli", "__main__",
)  # fmt: skip
#: Modules that may import CuPy: the CUDA backend, the array helpers and the interop modules.
CUPY_ALLOWED = (
    "ust.backends.cuda",
    "ust.runtime.xp",
    "ust.runtime.spaces",
    "ust.runtime.streams",
    "ust.convert.cupyx",
    "ust.convert.torch",
)


@cache
def modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def layer(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) == 1:
        return "ust"
    if parts[1] == "_version":
        return "runtime"
    return parts[1]


def rank(mod: str) -> int:
    return ORDER.index(layer(mod))


def _imports(mod: str) -> list[tuple[str, int]]:
    """``(imported name, line)`` for every ust import of ``mod`` (see the module docstring)."""
    mods = modules()
    path = mods[mod]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.module == "__future__":
                continue
            base = node.module or ""
            if node.level:
                here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, *([base] if base else [])])
            for a in node.names:
                cand = f"{base}.{a.name}"
                found.append((cand if cand in mods else base, node.lineno))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value, node.lineno))
    return found


def _resolve(name: str) -> str | None:
    mods = modules()
    while name not in mods and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in mods else None


@cache
def graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = defaultdict(set)
    for m in modules():
        for name, _ in _imports(m):
            if name == "ust" or name.startswith("ust."):
                t = _resolve(name)
                if t is not None and t != m:
                    g[m].add(t)
    return g


def _top_level_names(mod: str) -> set[str]:
    """Every top-level package a module imports (``cupy``, ``ctypes``, ...)."""
    return {name.split(".")[0] for name, _ in _imports(mod)}


def test_layers_import_only_downwards() -> None:
    bad = []
    for m in sorted(modules()):
        for name, line in _imports(m):
            if not (name == "ust" or name.startswith("ust.")):
                continue
            t = _resolve(name)
            if t is None or layer(t) == "runtime" or layer(t) == layer(m):
                continue
            if rank(t) > rank(m):
                bad.append(f"{m}:{line} ({layer(m)}) imports {t} ({layer(t)})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(modules()):
        if root in index:
            continue
        work = [(root, iter(sorted(g.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycles() -> None:
    cycles = _cycles(graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_cycle() -> None:
    """The check above is live: a two-module cycle is reported."""
    g = {"ust.formats.model": {"ust.formats.library"}, "ust.formats.library": {"ust.formats.model"}}
    assert _cycles(g) == [["ust.formats.library", "ust.formats.model"]]


def test_codegen_is_pure() -> None:
    bad = []
    for m in sorted(modules()):
        if layer(m) != "codegen":
            continue
        for t in graph().get(m, ()):
            if layer(t) == "backends":
                bad.append(f"{m} imports {t}")
        for name in _top_level_names(m) & {"cupy", "cupyx", "ctypes", "subprocess"}:
            bad.append(f"{m} imports {name}")
    assert not bad, "\n".join(bad)


def _cupy_importers() -> set[str]:
    return {m for m in modules() if _top_level_names(m) & {"cupy", "cupyx"}}


def _allowed(m: str, prefixes: tuple[str, ...]) -> bool:
    return any(m == p or m.startswith(p + ".") for p in prefixes)


def test_cupy_imports_stay_in_their_modules() -> None:
    """Everything else asks ust.runtime.xp.import_cupy (BackendUnavailableError naming the extra)."""
    bad = sorted(m for m in _cupy_importers() if not _allowed(m, CUPY_ALLOWED))
    assert not bad, (
        "modules importing CuPy outside backends/cuda, the array helpers and interop (use "
        "ust.runtime.xp.import_cupy):\n" + "\n".join(bad)
    )


def _getlogger_calls(m: str) -> list[int]:
    tree = ast.parse(modules()[m].read_text(encoding="utf-8"))
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "getLogger"
    ]


def _logger_offenders(inside: bool) -> list[str]:
    theirs = ("ust.codegen", "ust.backends.generated")
    return [
        f"{m}:{line}"
        for m in sorted(modules())
        if m != "ust.runtime.log" and _allowed(m, theirs) == inside
        for line in _getlogger_calls(m)
    ]


def test_every_logger_comes_from_the_one_helper() -> None:
    bad = _logger_offenders(inside=False)
    assert not bad, "use ust.runtime.log.get_logger, not logging.getLogger:\n" + "\n".join(bad)


def test_every_codegen_logger_comes_from_the_one_helper() -> None:
    bad = _logger_offenders(inside=True)
    assert not bad, "\n".join(bad)


def test_import_ust_loads_no_gpu_package_and_no_native_library() -> None:
    code = (
        "import sys, ust\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('cupy', 'cupyx', 'torch', 'cuda', 'numba')]\n"
        "bad += [m for m in sys.modules if m.startswith(('ust.backends', 'ust.codegen'))]\n"
        "import ctypes\n"
        "bad += ['ctypes library ' + repr(n) for n in ('cudss', 'cusparse', 'cublasLt', 'nvrtc')\n"
        "        if any(n in line for line in open('/proc/self/maps'))] if sys.platform == 'linux' else []\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_import_ust_leaves_scipy_sparse_unloaded() -> None:
    """scipy.sparse costs ~150 ms to import: it is loaded by the first route that needs it (a
    module-level lookup of one of its kernels once pulled it into ``import ust``)."""
    code = "import sys, ust\nprint([m for m in sys.modules if m.startswith('scipy.sparse')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_tensor_tables_are_filled_by_import_ust() -> None:
    import ust  # noqa: F401
    from ust.tensor import dispatch

    assert {"add", "subtract", "multiply", "divide", "negative", "matmul_operator", "rmatmul"} <= set(
        dispatch.OPERATORS
    )
    assert {"transpose", "sum", "max", "min"} <= set(dispatch.OPERATORS)
    assert {"convert", "to_scipy", "to_cupyx", "to_torch", "todense", "to_device", "unpack", "plot"} <= set(
        dispatch.CONVERSIONS
    )


def test_a_missing_table_entry_is_a_clear_ust_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    import ust
    from ust.tensor import dispatch

    t = ust.asarray(np.eye(3), "CSR")
    monkeypatch.delitem(dispatch.OPERATORS, "add")
    with pytest.raises(ust.UstError, match=r"Tensor\.add is not available"):
        _ = t + t


def test_public_module_names_keep_working() -> None:
    code = (
        "import ust.dense, ust.linalg, ust.ops, ust.io, ust.formats\n"
        "from ust.dense import Matmul\n"
        "from ust.linalg import solve\n"
        "from ust.io import mmread\n"
        "from ust.cli import main\n"
        "import ust, ust.api.dense\n"
        "assert ust.dense is ust.api.dense and ust.linalg is ust.api.linalg and ust.ops is ust.api.ops\n"
        "print(ust.__version__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    from ust._version import __version__

    assert out.stdout.strip() == __version__
    ver = subprocess.run(
        [sys.executable, "-m", "ust", "--version"], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert __version__ in ver.stdout


# ----------------------------------------------------------------------------- one planner


def test_every_public_op_has_rules_for_each_device_and_every_route_is_registered() -> None:
    import ust  # noqa: F401 - every layer registers its routes on import
    from ust.plan.routes import ROUTES
    from ust.plan.rules import PUBLIC_OPS, RULES

    for public, (ops, devices) in PUBLIC_OPS.items():
        for dev in devices:
            for op in ops:
                assert any(r.op == op and r.device == dev for r in RULES), f"{public}: no {op} rule on {dev}"
    planned = {op for ops, _ in PUBLIC_OPS.values() for op in ops}
    missing = sorted({f"{r.op}/{r.route}" for r in RULES if (r.op, r.route) not in ROUTES})
    assert not missing, f"rules name routes nobody registered: {missing}"
    assert {r.op for r in RULES} <= planned, "a rule for an op no public op plans"
    stray = sorted(
        f"{op}/{name}" for op, name in ROUTES if not any(r.op == op and r.route == name for r in RULES)
    )
    assert not stray, f"registered routes no rule names: {stray}"


def test_rule_tables_and_the_route_registry_are_frozen_after_import() -> None:
    import ust  # noqa: F401
    from ust.plan.routes import ROUTES, Route, is_frozen, register
    from ust.plan.rules import CONDITIONS, RULES
    from ust.runtime.errors import UstError

    assert isinstance(RULES, tuple)
    assert all(dataclasses_frozen(r) for r in RULES)
    with pytest.raises(TypeError):
        CONDITIONS["new"] = lambda p: True  # type: ignore[index]
    with pytest.raises(TypeError):
        ROUTES[("spmv", "new")] = None  # type: ignore[index]
    assert is_frozen()
    with pytest.raises(UstError, match="frozen"):
        register(Route("spmv", "late", lambda *a: None))


def dataclasses_frozen(obj: object) -> bool:
    import dataclasses

    return bool(dataclasses.is_dataclass(obj) and type(obj).__dataclass_params__.frozen)  # type: ignore[attr-defined]


def test_no_module_keeps_its_own_route_table() -> None:
    """Routes are Route objects in ust.plan.routes, not strings looked up in per-module dicts."""
    offenders = []
    for mod, path in modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for t in targets:
                if isinstance(t, ast.Name) and t.id in ("_ROUTES", "_FACTORIES"):
                    offenders.append(f"{mod}.{t.id}")
    assert not offenders, offenders
