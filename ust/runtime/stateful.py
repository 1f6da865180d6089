"""The base of every stateful operation: lifecycle checks, context manager and saved plans.

A stateful object separates a cheap specification (the constructor) from the costly planning
(``plan()``) and the repeated work (``execute()`` or, for solvers, ``factorize()`` / ``solve()``),
so loops amortise planning.  Subclasses implement the ``_plan`` / ``_execute`` / ... hooks and
call :meth:`StatefulOperation._require` in any extra phase method of their own.

Saved plans are JSON files ``{"ust_version", "kind", "device", "versions", "plan"}``.  A file
made by another ust, another library version or on another device is not an error: reading it
gives None and a WARNING, and the caller plans afresh.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from typing import Any, ClassVar

import numpy as np

from ust.runtime.errors import InvalidStateError, UstError
from ust.runtime.log import get_logger

__all__ = ["PlanFileError", "StatefulOperation", "decode_array", "encode_array", "ust_version"]

_log = get_logger("runtime.stateful")


class PlanFileError(UstError, ValueError):
    """A file that is not a saved ust plan, or a plan of another kind of operation."""


def ust_version() -> str:
    import ust  # the package's own version; imported lazily because runtime sits below ust/__init__

    return str(ust.__version__)


def encode_array(a: Any) -> dict[str, Any]:
    """A NumPy array as JSON-safe data (dtype, shape, base64 of the little-endian bytes)."""
    arr = np.ascontiguousarray(a)
    arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return {
        "dtype": arr.dtype.str,
        "shape": list(arr.shape),
        "base64": base64.b64encode(arr.tobytes()).decode(),
    }


def decode_array(d: dict[str, Any]) -> np.ndarray:
    """The inverse of :func:`encode_array` (a fresh, writable array)."""
    raw = base64.b64decode(d["base64"])
    return np.frombuffer(raw, dtype=np.dtype(d["dtype"])).reshape(d["shape"]).copy()


class StatefulOperation:
    """Lifecycle: construct -> ``plan()`` -> ``execute()`` (repeat) -> ``free()``.

    ``reset_operands(...)`` swaps operands between executions; ``with Op(...) as op:`` frees on
    exit.  Using the object out of order raises :class:`~ust.runtime.errors.InvalidStateError`.
    """

    kind: ClassVar[str] = "operation"

    def __init__(self) -> None:
        self._done: set[str] = set()
        self._freed = False

    # -------------------------------------------------------------------------- state checks

    def _require(self, action: str, *phases: str) -> None:
        """Raise unless the object is alive and every phase in ``phases`` has run."""
        if self._freed:
            raise InvalidStateError(f"cannot {action}: this {self.kind} has been freed; create a new one")
        for phase in phases:
            if phase not in self._done:
                raise InvalidStateError(f"cannot {action} before {phase}(): call {phase}() first")

    def _mark(self, phase: str, *, invalidates: tuple[str, ...] = ()) -> None:
        """Record that ``phase`` ran, forgetting the phases it makes stale."""
        self._done.difference_update(invalidates)
        self._done.add(phase)

    @property
    def is_planned(self) -> bool:
        return "plan" in self._done and not self._freed

    @property
    def is_freed(self) -> bool:
        return self._freed

    # -------------------------------------------------------------------------- lifecycle

    def plan(self) -> Any:
        """Do the costly preparation once (analysis, route choice, compilation)."""
        self._require("plan")
        result = self._plan()
        self._mark("plan")
        return result

    def execute(self, **kwargs: Any) -> Any:
        """Run the planned operation on the current operands."""
        self._require("execute", "plan")
        return self._execute(**kwargs)

    def reset_operands(self, **operands: Any) -> None:
        """Swap operands for new ones of the same shape, dtype and space (checked)."""
        self._require("reset operands")
        self._reset_operands(**operands)

    def free(self) -> None:
        """Release library handles and device memory; the object cannot be used afterwards."""
        if not self._freed:
            try:
                self._free()
            finally:
                self._freed = True
                self._done.clear()

    def __enter__(self) -> Any:
        self._require("enter a with block")
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    # -------------------------------------------------------------------------- hooks

    def _plan(self) -> Any:
        raise NotImplementedError

    def _execute(self, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _reset_operands(self, **operands: Any) -> None:
        raise NotImplementedError

    def _free(self) -> None:
        """Nothing to release by default."""

    def _plan_payload(self) -> dict[str, Any]:
        """What a saved plan keeps (JSON-safe; arrays through :func:`encode_array`)."""
        raise NotImplementedError

    def _plan_device(self) -> str:
        """The device the plan is valid for, e.g. ``"cpu"`` or ``"cuda:0 NVIDIA H200"``."""
        return "cpu"

    def _plan_versions(self) -> dict[str, str]:
        """Library versions the plan depends on (a mismatch re-plans)."""
        return {}

    # -------------------------------------------------------------------------- saved plans

    def save_plan(self, path: str | os.PathLike[str]) -> None:
        """Write the plan to ``path`` (JSON) for another process to load."""
        self._require("save a plan", "plan")
        doc = {
            "ust_version": ust_version(),
            "kind": self.kind,
            "device": self._plan_device(),
            "versions": self._plan_versions(),
            "plan": self._plan_payload(),
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        _log.info("saved the %s plan to %s", self.kind, os.fspath(path))

    @classmethod
    def read_plan(
        cls, path: str | os.PathLike[str], *, device: str, versions: dict[str, str]
    ) -> dict[str, Any] | None:
        """The ``plan`` part of a saved file, or None (and a WARNING) when it was made elsewhere.

        ``device`` and ``versions`` describe this process; any difference from the file's
        (ust's version included) means the plan may not fit, so the caller should plan afresh.
        """
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except json.JSONDecodeError as exc:
            raise PlanFileError(f"{os.fspath(path)} is not a saved ust plan (invalid JSON: {exc})") from None
        if not isinstance(doc, dict) or not {"kind", "plan", "versions", "device"} <= doc.keys():
            raise PlanFileError(f"{os.fspath(path)} is not a saved ust plan (missing keys)")
        if doc["kind"] != cls.kind:
            raise PlanFileError(f"{os.fspath(path)} holds a {doc['kind']} plan, not a {cls.kind} plan")
        mismatches = []
        if doc.get("ust_version") != ust_version():
            mismatches.append(f"ust {doc.get('ust_version')} (now {ust_version()})")
        if doc["device"] != device:
            mismatches.append(f"device {doc['device']!r} (now {device!r})")
        saved = doc["versions"] or {}
        for lib in sorted(set(saved) | set(versions)):
            if saved.get(lib) != versions.get(lib):
                mismatches.append(f"{lib} {saved.get(lib)} (now {versions.get(lib)})")
        if mismatches:
            if _log.isEnabledFor(logging.WARNING):
                _log.warning(
                    "the saved %s plan %s was made with %s; planning afresh",
                    cls.kind,
                    os.fspath(path),
                    ", ".join(mismatches),
                )
            return None
        return dict(doc["plan"])
