"""GPU backends: CuPy arrays, ctypes bindings of vendor libraries (loaded by ``_lib``), kernels.

Importing this package imports neither CuPy nor any CUDA library; each module loads what it
needs on first use.
"""
