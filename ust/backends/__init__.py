"""Backends: the libraries and generated kernels that do the work (``cpu/`` and ``cuda/``).

Nothing here is imported by ``import ust``; only ``backends/cuda`` touches CuPy or CUDA
libraries, and only when a GPU route first runs.
"""
