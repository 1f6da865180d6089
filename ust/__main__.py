"""``python -m ust``: the same as the ``ust`` command (the GPU machine runs from a checkout)."""

from ust.cli import main

raise SystemExit(main())
