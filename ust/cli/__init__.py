"""The ``ust`` command (``ust = "ust.cli:main"``; ``python -m ust``) and its helpers.

:mod:`~ust.cli.main` (the parser and the command table), :mod:`~ust.cli.tensor` (show /
convert), :mod:`~ust.cli.compute` (spmv / explain), :mod:`~ust.cli.solve`, :mod:`~ust.cli.demo`,
:mod:`~ust.cli.info`, :mod:`~ust.cli.cache` (the kernel cache), :mod:`~ust.cli.checks` (the
argument checks every command shares) and :mod:`~ust.cli.progress`.
"""

from __future__ import annotations

from ust.cli.main import main

__all__ = ["main"]
