"""The documentation's examples run as doctests, every validation rule is documented,
and (where Sphinx is installed) the docs build without a warning."""

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
    from sphinx.cmd.build import build_main

    out = tmp_path / "html"
    args = [
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
