"""Every configuration cuBLASLt accepts for one problem: the exhaustive side of autotuning.

cuBLASLt's heuristic ranks a few algorithms with a performance model.  For a long-running
problem (a batch of large matmuls) the model's first pick is not always the fastest kernel, and
the candidates it returns are variations of one or two kernels.  This module enumerates what
the library can run instead: every algorithm id (``cublasLtMatmulAlgoGetIds``) crossed with the
tiles, stages, CTA swizzling and custom options its capabilities list, each configuration kept
only if ``cublasLtMatmulAlgoCheck`` accepts it for the problem and its workspace fits.  Timing
the survivors is the caller's job (:meth:`ust.backends.cuda.cublaslt.GpuMatmul.autotune`).

Split-K is left at 1: it pays off when ``m x n`` is too small to fill the GPU, which is what the
heuristic already covers; a sweep is for the large problems where it does not.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Iterator
from typing import Any

from ust.backends.cuda.cublaslt import DTYPES, EPILOGUES, Algo, CublasLtError, LtMatmul, check_status
from ust.runtime.errors import UnsupportedError
from ust.runtime.log import get_logger

__all__ = ["algorithm_ids", "configuration", "configurations"]

_log = get_logger("backends.cuda.cublaslt_sweep")

# cublasLtMatmulAlgoCapAttributes_t
_CAP_CTA_SWIZZLING_SUPPORT, _CAP_TILE_IDS, _CAP_CUSTOM_OPTION_MAX = 2, 6, 7
_CAP_EPILOGUE_MASK, _CAP_STAGES_IDS = 12, 13

# cublasLtMatmulAlgoConfigAttributes_t -> ctypes type of its value
_CONFIG = {
    "id": (0, ctypes.c_int32),
    "tile": (1, ctypes.c_uint32),
    "split_k": (2, ctypes.c_uint32),
    "reduction": (3, ctypes.c_uint32),
    "swizzle": (4, ctypes.c_uint32),
    "custom": (5, ctypes.c_uint32),
    "stages": (6, ctypes.c_uint32),
    "inner_shape": (7, ctypes.c_uint16),
    "cluster_shape": (8, ctypes.c_uint16),
}
_SWEPT = ("tile", "stages", "swizzle", "custom")


def _types(lt: LtMatmul) -> list[int]:
    """computeType, scaleType, Atype, Btype, Ctype, Dtype of the problem (as AlgoGetIds takes them)."""
    cuda_type, _, scale_type, _ = DTYPES[lt.problem.dtype]
    return [lt.problem.compute_type, scale_type, cuda_type, cuda_type, cuda_type, cuda_type]


def algorithm_ids(lt: LtMatmul, limit: int = 512) -> list[int]:
    """The algorithm ids cuBLASLt has for the problem's types (any shape, any epilogue)."""
    ids = (ctypes.c_int * limit)()
    returned = ctypes.c_int(0)
    check_status(
        lt.api.algo_ids(lt.handle, *_types(lt), limit, ids, ctypes.byref(returned)),
        "cublasLtMatmulAlgoGetIds",
    )
    return [int(ids[i]) for i in range(returned.value)]


def _read(getter: Any, algo: Algo, attr: int, ctype: Any) -> int | None:
    """One scalar attribute through a cap_get / config_get style call; None where it has none."""
    value = ctype(0)
    written = ctypes.c_size_t(0)
    status = getter(
        ctypes.byref(algo), attr, ctypes.byref(value), ctypes.sizeof(value), ctypes.byref(written)
    )
    return int(value.value) if status == 0 else None


def _cap_scalar(lt: LtMatmul, algo: Algo, attr: int, ctype: Any) -> int:
    return _read(lt.api.cap_get, algo, attr, ctype) or 0


def _cap_array(lt: LtMatmul, algo: Algo, attr: int) -> list[int]:
    """A uint32 array capability (tiles, stages); [0] (undefined: the kernel's own) when empty."""
    written = ctypes.c_size_t(0)
    lt.api.cap_get(ctypes.byref(algo), attr, None, 0, ctypes.byref(written))
    count = written.value // ctypes.sizeof(ctypes.c_uint32)
    if count == 0:
        return [0]
    values = (ctypes.c_uint32 * count)()
    status = lt.api.cap_get(ctypes.byref(algo), attr, values, ctypes.sizeof(values), ctypes.byref(written))
    return [int(v) for v in values] if status == 0 else [0]


def _set_config(lt: LtMatmul, algo: Algo, name: str, value: int) -> bool:
    attr, ctype = _CONFIG[name]
    holder = ctype(value)
    return lt.api.config_set(ctypes.byref(algo), attr, ctypes.byref(holder), ctypes.sizeof(holder)) == 0


def configuration(lt: LtMatmul, algo: Algo) -> dict[str, int]:
    """An algorithm's configuration by name (id, tile, stages, ...): what a log line shows."""
    values = {name: _read(lt.api.config_get, algo, attr, ctype) for name, (attr, ctype) in _CONFIG.items()}
    return {name: v for name, v in values.items() if v is not None}


def _options(lt: LtMatmul, algo: Algo) -> dict[str, list[int]]:
    """The values of each swept attribute that ``algo``'s capabilities allow."""
    return {
        "tile": _cap_array(lt, algo, _CAP_TILE_IDS),
        "stages": _cap_array(lt, algo, _CAP_STAGES_IDS),
        "swizzle": [0, 1] if _cap_scalar(lt, algo, _CAP_CTA_SWIZZLING_SUPPORT, ctypes.c_uint32) else [0],
        "custom": list(range(_cap_scalar(lt, algo, _CAP_CUSTOM_OPTION_MAX, ctypes.c_int32) + 1)),
    }


def configurations(lt: LtMatmul, *, workspace_limit: int, limit: int = 4096) -> Iterator[tuple[Algo, int]]:
    """Yield ``(algorithm, workspace bytes)`` for every configuration cuBLASLt accepts, up to ``limit``.

    Algorithms whose epilogue mask lacks the problem's epilogue are skipped without checking
    their configurations.
    """
    epilogue = EPILOGUES[lt.problem.epilogue]
    found = 0
    for algo_id in algorithm_ids(lt):
        base = Algo()
        if lt.api.algo_init(lt.handle, *_types(lt), algo_id, ctypes.byref(base)):
            continue
        if (
            epilogue != 1
            and _cap_scalar(lt, base, _CAP_EPILOGUE_MASK, ctypes.c_uint32) & epilogue != epilogue
        ):
            continue
        options = _options(lt, base)
        for values in itertools.product(*(options[name] for name in _SWEPT)):
            algo = Algo()
            algo.data[:] = base.data[:]
            if not all(_set_config(lt, algo, name, v) for name, v in zip(_SWEPT, values)):
                continue
            try:
                workspace = lt.check(algo)
            except (UnsupportedError, CublasLtError) as exc:  # this configuration, not the problem
                _log.debug("algorithm %d %s refused: %s", algo_id, dict(zip(_SWEPT, values)), exc)
                continue
            if workspace > workspace_limit:
                continue
            yield algo, workspace
            found += 1
            if found >= limit:
                return
