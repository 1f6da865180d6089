"""``ust.explain``: how ust would run any op -- route, reason, conversions, transfers -- without running it.

One entry for every op: ``matmul`` (:class:`~ust.api.matmul.Matmul`'s plan, or SpGEMM for a
sparse B), ``convert`` (:func:`ust.convert.routes.explain_route`), ``solve``
(:func:`ust.api.linalg.explain_solve`) and the algebra ops (:func:`ust.api.algebra.explain`).
"""

from __future__ import annotations

from typing import Any

from ust.api.algebra import explain as explain_algebra
from ust.api.linalg import explain_solve
from ust.api.matmul import Matmul, _is_dense_tensor, _is_sparse_operand

__all__ = ["explain", "explain_matmul"]


def explain(op: str, *operands: Any, **kwargs: Any) -> str:
    """How ust would run ``op`` on ``operands`` -- route, reason, conversions, transfers -- without running it.

    ``op`` is ``"matmul"``, ``"convert"`` (operands: tensor, target format), ``"solve"``, or one
    of the algebra ops (``"sddmm"``, ``"add"``, ``"subtract"``, ``"multiply"``, ``"transpose"``,
    ``"sum"``, ``"max"``, ``"min"``, ``"spgemm"``, ...).
    """
    if op == "matmul":
        a, b, *rest = operands
        if _is_sparse_operand(b):
            return explain_algebra(
                "spgemm", a, b, **{k: v for k, v in kwargs.items() if k in ("format", "execution")}
            )
        if _is_dense_tensor(a):
            return "operation: dense matmul\nroute: ust.dense (cuBLASLt on the GPU, BLAS/NumPy on the CPU)\nreason: A is stored all-dense"
        return Matmul(a, b, *rest, **kwargs).explain()
    if op == "convert":
        from ust.convert import asarray
        from ust.convert.routes import explain_route

        t, fmt = operands
        return explain_route(asarray(t), fmt)
    if op == "solve":
        return explain_solve(*operands, **kwargs)
    return explain_algebra(op, *operands, **kwargs)


def explain_matmul(a: Any, b: Any, c: Any = None, **kwargs: Any) -> str:
    return Matmul(a, b, c, **kwargs).explain()
