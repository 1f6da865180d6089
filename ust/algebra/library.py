"""Library results (SciPy / cupyx objects a route produced) back into Tensors of a wanted format.

A route that calls SciPy or CuPy gets a canonical library object; this wraps its buffers in the
standard format of its layout without copies or checks, then converts once if the caller asked
for another format.
"""

from __future__ import annotations

from typing import Any

from ust.formats.library import get
from ust.formats.model import Format

__all__ = ["from_library", "std_format"]


def std_format(obj: Any) -> Format:
    """The standard ust format of a SciPy / cupyx sparse object's layout."""
    name = obj.format
    if name == "bsr":
        r, c = (int(x) for x in obj.blocksize)
        return get(f"BSR[{r},{c}]")
    return get(name.upper())


def from_library(obj: Any, fmt: Format | None = None, *, canonical: bool = False) -> Any:
    """A Tensor around a library result, converted to ``fmt`` when that differs.

    ``canonical=True`` says the library made it canonical (sorted, no duplicates: SciPy's
    union / intersection of canonical operands), so no check pass runs; otherwise SciPy
    results are canonicalised in place (they are fresh objects, never a caller's)."""
    std = std_format(obj)
    if type(obj).__module__.startswith("cupyx"):
        from ust.convert.cupyx import from_cupyx_trusted

        t = from_cupyx_trusted(obj, std)
    else:
        from ust.convert.scipy import from_scipy_trusted

        if canonical:
            obj.has_canonical_format = True
        elif obj.format in ("csr", "csc", "bsr", "coo"):
            obj.sum_duplicates()  # sorts a fresh SpGEMM result
        t = from_scipy_trusted(obj, std)
    return t if fmt is None or fmt == std else t.convert(fmt)
