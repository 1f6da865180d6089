"""Sparse algebra beyond SpMV/SpMM: the machinery behind :mod:`ust.api.algebra`.

One small module per job: :mod:`~ust.algebra.operands` (what an operand is, where it runs),
:mod:`~ust.algebra.problem` (the planner's view and explain text), :mod:`~ust.algebra.coiterate`
(union / intersection of two sparse operands, written once against ``xp``),
:mod:`~ust.algebra.slots` (the coordinates of every stored value slot),
:mod:`~ust.algebra.transpose`, :mod:`~ust.algebra.elementwise`, :mod:`~ust.algebra.reduce`,
:mod:`~ust.algebra.spgemm`, :mod:`~ust.algebra.sddmm`, :mod:`~ust.algebra.epilogue` and
:mod:`~ust.api.linop`.  Nothing here imports CuPy until a GPU operand arrives.
"""
