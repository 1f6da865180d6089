"""Benchmarks of ust: each module runs as ``python -m benchmarks.NAME`` and appends to RESULTS.md."""
