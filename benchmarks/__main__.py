"""``python -m benchmarks``: the whole suite (see benchmarks/suite.py)."""

from benchmarks.suite import main

raise SystemExit(main())
