"""CPU backends: SciPy routes, compiled C kernels and sparse direct solvers (SuperLU, PARDISO)."""
