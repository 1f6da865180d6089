"""Sphinx configuration for the ust documentation (``sphinx-build -n -W docs docs/_build``)."""

from __future__ import annotations

import os
import sys

# Document the checkout itself, installed or not; _ext holds this project's Sphinx extensions.
sys.path.insert(0, os.path.abspath(".."))
sys.path.insert(0, os.path.abspath("_ext"))

from ust._version import __version__ as release  # the one version string (ust/_version.py)

project = "ust"
version = release
author = "the ust developers"
copyright = "2026, the ust developers"  # noqa: A001 - Sphinx's name

extensions = [
    "sphinx.ext.autodoc",
    "numpydoc",
    "myst_parser",  # docs/storage.md
    "ust_options",  # the options tables, from the options dataclasses
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Nitpicky builds (``sphinx-build -n -W``, as .ci/run runs) must resolve every reference.
nitpicky = True

# numpydoc: no autosummary tables of members (they need stub pages), no docstring linting here.
numpydoc_show_class_members = False
numpydoc_validation_checks: set[str] = set()

autodoc_member_order = "bysource"
autodoc_typehints = "none"

html_theme = "alabaster"
html_static_path: list[str] = []
