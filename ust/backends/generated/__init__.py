"""Executors of generated kernels: compile, cache, bind and run what :mod:`ust.codegen` emits.

* :mod:`~ust.backends.generated.launch` -- host-side checks and kernel arguments of a matmul;
* :mod:`~ust.backends.generated.compile_c` -- the system C compiler and the ctypes loader;
* :mod:`~ust.backends.generated.disk_cache` -- the authenticated on-disk artefact cache;
* :mod:`~ust.backends.generated.executors` -- the ``generated-c`` / ``generated-cuda`` routes.

The C kernels are bound in :mod:`ust.backends.cpu.ckernels`, the CUDA ones (NVRTC, CuPy) in
:mod:`ust.backends.cuda.kernels`.  Nothing here is imported by :mod:`ust.codegen`.
"""
