"""The documentation's examples run as doctests, every validation rule is documented, the API
page documents every public name and every option (from the options dataclasses), and (where
Sphinx is installed) the docs build without a warning, nitpicky."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import ust.formats.library
import ust.formats.model

DOCS = Path(__file__).resolve().parent.parent / "docs"
RST = sorted(DOCS.glob("*.rst"))
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def test_docs_exist() -> None:
    assert {p.name for p in RST} >= {"index.rst", "dsl.rst", "api.rst"}
    assert (DOCS / "conf.py").is_file()


@pytest.mark.parametrize("path", RST, ids=[p.name for p in RST])
def test_rst_doctests(path: Path) -> None:
    result = doctest.testfile(str(path), module_relative=False, optionflags=FLAGS, verbose=False, report=True)
    assert result.failed == 0
    if path.name in ("dsl.rst", "index.rst"):
        assert result.attempted > 0


def test_rst_doctests_run_some_examples() -> None:
    attempted = sum(doctest.testfile(str(p), module_relative=False, optionflags=FLAGS).attempted for p in RST)
    assert attempted >= 30


@pytest.mark.parametrize("module", [ust.formats.library, ust.formats.model], ids=lambda m: m.__name__)
def test_module_doctests(module: object) -> None:
    result = doctest.testmod(module, optionflags=FLAGS)  # type: ignore[arg-type]
    assert result.failed == 0
    if module is ust.formats.library:
        assert result.attempted > 0


def _rules_in_source() -> set[str]:
    src = Path(ust.formats.model.__file__).parent
    text = "\n".join(p.read_text(encoding="utf-8") for p in src.glob("*.py"))
    return set(re.findall(r'_fail\(\s*"([a-z-]+)"', text)) | set(re.findall(r'rule="([a-z-]+)"', text))


def test_every_validation_rule_is_documented() -> None:
    rules = _rules_in_source()
    assert len(rules) >= 30
    table = (DOCS / "dsl.rst").read_text(encoding="utf-8")
    documented = set(re.findall(r"^([a-z]+(?:-[a-z]+)*)\s{2,}", table, flags=re.MULTILINE))
    assert rules <= documented, sorted(rules - documented)


def test_sphinx_build_has_no_warnings(tmp_path: Path) -> None:
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    pytest.importorskip("myst_parser")
    from sphinx.cmd.build import build_main

    out = tmp_path / "html"
    args = [
        "-n",
        "-W",
        "--keep-going",
        "-q",
        "-E",
        "-b",
        "html",
        "-d",
        str(tmp_path / "doctrees"),
        str(DOCS),
        str(out),
    ]
    assert build_main(args) == 0
    assert (out / "dsl.html").is_file() and (out / "api.html").is_file()
    assert (out / "storage.html").is_file()


# ------------------------------------------------------------------------- the API page is complete

API = DOCS / "api.rst"
PUBLIC_MODULES = ("ops", "dense", "linalg", "io", "formats")
#: Documented beyond the public modules: what the public ``load_plan`` methods raise and refer to.
DOCUMENTED_ELSEWHERE = {"ust.runtime.stateful", "ust.runtime.stateful.PlanFileError"}

_DIRECTIVE = re.compile(
    r"^\s*\.\. (auto[a-z]+|py:[a-z]+|ust-alias)::\s+(\S+)[^\n]*((?:\n[ \t]+:[a-z-]+:[^\n]*)*)", re.MULTILINE
)


def documented_names(text: str) -> set[str]:
    """Full names the page documents: ``autoX`` / ``py:X`` / ``ust-alias`` directives (a ``py:X``
    with a short name and a ``:module:`` option counts under that module)."""
    out = set()
    for m in _DIRECTIVE.finditer(text):
        kind, name, options = m.groups()
        name = name.split("(", 1)[0]
        module = re.search(r":module:\s*(\S+)", options)
        if kind.startswith("py:") and kind != "py:module" and module:
            name = f"{module.group(1)}.{name}"
        out.add(name)
    return out


def public_names() -> set[str]:
    import importlib

    names = {"ust"} | {f"ust.{n}" for n in ust.__all__}
    for mod in PUBLIC_MODULES:
        module = importlib.import_module(f"ust.{mod}")
        names |= {f"ust.{mod}"} | {f"ust.{mod}.{n}" for n in module.__all__}
    return names


def _resolve(name: str) -> object:
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def test_api_page_documents_every_public_name() -> None:
    missing = sorted(public_names() - documented_names(API.read_text(encoding="utf-8")))
    assert missing == [], f"public names missing from docs/api.rst: {missing}"


def test_api_page_documents_every_error_class_under_ust() -> None:
    import ust.runtime.errors as errors

    not_exported = sorted(n for n in errors.__all__ if n not in ust.__all__)
    assert not_exported == [], f"errors of ust.runtime.errors that ust does not export: {not_exported}"
    documented = documented_names(API.read_text(encoding="utf-8"))
    assert sorted(n for n in errors.__all__ if f"ust.{n}" not in documented) == []


def test_api_page_documents_nothing_stale() -> None:
    """Every documented name exists, and is public, a member of a public name, or listed."""
    public = public_names() | DOCUMENTED_ELSEWHERE
    for name in sorted(documented_names(API.read_text(encoding="utf-8"))):
        _resolve(name)  # raises for a name that is gone
        parent = name.rsplit(".", 1)[0]
        assert name in public or parent in public, f"docs/api.rst documents {name}, which is not public"


def test_documented_names_parser() -> None:
    text = """
.. autofunction:: ust.matmul

.. py:data:: __version__
   :module: ust
   :type: str

.. py:module:: ust.ops

.. ust-alias:: ust.ops.matmul ust.matmul
"""
    assert documented_names(text) == {"ust.matmul", "ust.__version__", "ust.ops", "ust.ops.matmul"}


# -------------------------------------------------------------- options: documented from one source


def _options_classes() -> list[type]:
    import dataclasses
    import importlib

    found = {}
    for mod in ("ust", *(f"ust.{m}" for m in PUBLIC_MODULES)):
        module = importlib.import_module(mod)
        for n in module.__all__:
            obj = getattr(module, n)
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and n.endswith("Options"):
                found[id(obj)] = obj
    return sorted(found.values(), key=lambda c: c.__qualname__)


def test_every_options_class_is_rendered_from_its_fields() -> None:
    from ust.runtime.options import describe

    classes = _options_classes()
    assert {c.__name__ for c in classes} >= {"DirectSolverOptions", "MatmulOptions", "FFTOptions"}
    text = API.read_text(encoding="utf-8")
    rendered = set(re.findall(r"^\s*\.\. ust-options::\s+(\S+)", text, flags=re.MULTILINE))
    for cls in classes:
        entries = describe(cls)  # raises for a field without its description
        assert all(e.doc.strip() for e in entries), cls
        assert any(_resolve(name) is cls for name in rendered), f"docs/api.rst renders no options of {cls}"


def test_solver_options_state_their_allowed_values() -> None:
    from ust.api import solve_options as linalg
    from ust.runtime.options import describe

    choices = {e.name: e.choices for e in describe(ust.DirectSolverOptions)}
    assert choices["matrix_type"] == linalg.MATRIX_TYPES
    assert choices["matrix_view"] == linalg.MATRIX_VIEWS
    assert choices["reordering"] == linalg.REORDERINGS
    assert choices["pivoting"] == linalg.PIVOTING
    for name in ("host_threads", "check", "hybrid_memory", "hybrid_device_memory_limit", "devices"):
        assert name in choices


def test_options_directive_renders_type_default_text_and_choices() -> None:
    import sys

    pytest.importorskip("docutils", reason="the docs extension needs Sphinx's docutils (the docs extra)")

    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from ust_options import alias_lines, option_lines
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    text = "\n".join(option_lines(ust.DirectSolverOptions))
    assert ".. py:attribute:: matrix_type\n   :type: str\n   :value: 'general'" in text
    assert "Allowed values: ``'general'``, ``'symmetric'``" in text
    assert ":value: True" in text and "backward error" in text
    assert alias_lines("ust.ops.matmul", "ust.matmul")[:2] == [
        ".. py:function:: matmul",
        "   :module: ust.ops",
    ]
    with pytest.raises(ValueError, match="different objects"):
        alias_lines("ust.dense.matmul", "ust.matmul")


def test_cli_solve_help_comes_from_the_options() -> None:
    import argparse

    from ust.cli.solve import configure
    from ust.runtime.options import cli_help, describe

    parser = argparse.ArgumentParser()
    configure(parser)
    actions = {a.dest: a for a in parser._actions}
    for entry in describe(ust.DirectSolverOptions):
        action = actions.get(entry.name)
        if action is None:
            continue
        assert action.help == cli_help(ust.DirectSolverOptions, entry.name)
        assert action.default == entry.default
        assert tuple(action.choices or ()) == (entry.choices or ())
    assert {"matrix_type", "matrix_view", "reordering"} <= set(actions)
    parser.format_help()  # '%' in a description would break argparse here


# ------------------------------------------------------------------------------- pages and README


def test_storage_page_is_in_the_toctree() -> None:
    assert (DOCS / "storage.md").is_file()
    toctree = (DOCS / "index.rst").read_text(encoding="utf-8")
    assert re.search(r"^\s+storage$", toctree, flags=re.MULTILINE)


def test_readme_points_inside_the_repository() -> None:
    root = DOCS.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert "://" not in readme and "www." not in readme
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):  # markdown links: files of this repository
        assert (root / target.split("#", 1)[0]).exists(), target
