"""Sphinx configuration for the ust documentation (``sphinx-build -W docs docs/_build``)."""

from __future__ import annotations

import os
import sys

# Document the checkout itself, installed or not.
sys.path.insert(0, os.path.abspath(".."))

project = "ust"
author = "the ust developers"
copyright = "2026, the ust developers"  # noqa: A001 - Sphinx's name

extensions = [
    "sphinx.ext.autodoc",
    "numpydoc",
]

source_suffix = {".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

# numpydoc: no autosummary tables of members (they need stub pages), no docstring linting here.
numpydoc_show_class_members = False
numpydoc_validation_checks: set[str] = set()

autodoc_member_order = "bysource"
autodoc_typehints = "none"

html_theme = "alabaster"
html_static_path: list[str] = []
