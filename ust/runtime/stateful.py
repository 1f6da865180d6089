"""The base of every stateful operation: lifecycle checks, context manager and saved plans.

A stateful object separates a cheap specification (the constructor) from the costly planning
(``plan()``) and the repeated work (``execute()`` or, for solvers, ``factorize()`` / ``solve()``),
so loops amortise planning.  Subclasses implement the ``_plan`` / ``_execute`` / ... hooks and
call ``StatefulOperation._require`` in any extra phase method of their own.

Saved plans are JSON files ``{"ust_version", "kind", "device", "versions", "plan"}``.  What
happens with a file, for every stateful class alike (``ust.Matmul``, ``ust.dense.Matmul``,
``ust.dense.FFT``, ``ust.DirectSolver``):

* **Not a saved plan of this operation** -- it cannot be read, is not UTF-8 JSON, is not a JSON
  object with the five keys above of the right types, or holds a plan of another kind:
  ``StatefulOperation.read_plan``, and so every ``load_plan``, raises :class:`PlanFileError`
  (the caller gave the wrong file; nothing is planned from it).
* **Made by another ust, another library version or on another device**: not an error;
  ``read_plan`` gives None and a WARNING, and ``load_plan`` plans afresh.
* **A plan of this operation whose contents are damaged** (the ``plan`` part of the wrong shape,
  missing or extra keys, values of the wrong type, an unknown route or variant name, arrays
  whose dtype, shape or base64 do not decode -- see ``check_plan_fields`` and
  ``decode_array``) **or that does not fit these operands**: each class's ``load_plan``
  turns what is wrong into one PlanFileError, logs its message as a WARNING and plans afresh,
  exactly as for a plan made elsewhere; none of the file's values reaches a library call.
  (``ust.dense.Matmul.load_plan`` also takes its epilogue from the file: when that one field is
  unreadable there is nothing to plan afresh with, and it raises the PlanFileError.)
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from ust._version import __version__
from ust.runtime.errors import InvalidStateError, UstError
from ust.runtime.log import get_logger
from ust.runtime.spaces import CPU, ExecutionSpace
from ust.runtime.xp import import_cupy

__all__ = [
    "PlanFileError",
    "StatefulOperation",
    "check_plan_fields",
    "decode_array",
    "encode_array",
    "plan_device",
    "plan_versions",
    "ust_version",
]

_log = get_logger("runtime.stateful")


class PlanFileError(UstError, ValueError):
    """A file that is not a saved ust plan, or a plan of another kind of operation."""


def ust_version() -> str:
    return __version__


def plan_device(space: ExecutionSpace) -> str:
    """The ``device`` of a saved plan: ``"cpu"``, or ``"cuda:0 NVIDIA H200 sm_90"`` (device index,
    name and compute capability: what kernels, algorithms and reorderings are valid for)."""
    if not space.is_cuda:
        return "cpu"
    device_id = space.device_id or 0
    props = import_cupy().cuda.runtime.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"cuda:{device_id} {name} sm_{props['major']}{props['minor']}"


def plan_versions(
    space: ExecutionSpace, libraries: Mapping[str, Callable[[], object]] | None = None
) -> dict[str, str]:
    """The ``versions`` of a saved plan: NumPy and SciPy, CuPy and the CUDA runtime on the GPU,
    and the route's own ``libraries`` (name -> a function giving the version)."""
    import scipy

    versions = {"numpy": np.__version__, "scipy": scipy.__version__}
    if space.is_cuda:
        cupy = import_cupy()
        versions["cupy"] = str(cupy.__version__)
        versions["cuda_runtime"] = str(cupy.cuda.runtime.runtimeGetVersion())
    versions.update({name: str(version()) for name, version in (libraries or {}).items()})
    return versions


def encode_array(a: Any) -> dict[str, Any]:
    """A NumPy array as JSON-safe data (dtype, shape, base64 of the little-endian bytes)."""
    arr = np.ascontiguousarray(a)
    arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return {
        "dtype": arr.dtype.str,
        "shape": list(arr.shape),
        "base64": base64.b64encode(arr.tobytes()).decode(),
    }


#: Header keys of a saved plan and the types of their values.
_HEADER = {"ust_version": str, "kind": str, "device": str, "versions": dict, "plan": dict}
#: dtype kinds an encoded array may have: booleans and numbers (never objects, strings, voids).
_ARRAY_KINDS = "biufc"


def _short(value: Any, limit: int = 60) -> str:
    """A repr for messages, cut in the middle when long (never the whole of a damaged file)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for repr
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def decode_array(d: Any, *, where: str = "a saved plan") -> np.ndarray:
    """The inverse of :func:`encode_array` (a fresh, writable array).

    Everything is checked before NumPy sees it: ``d`` must be ``{"dtype", "shape", "base64"}``
    with a little-endian (or byte-order-free) boolean or numeric dtype, a list of non-negative
    integers as shape, and strict base64 of exactly ``prod(shape) * itemsize`` bytes; anything
    else is a :class:`PlanFileError`.
    """
    bad = f"{where} is damaged: an encoded array"
    if not isinstance(d, Mapping) or set(d) != {"dtype", "shape", "base64"}:
        keys = sorted(map(str, d)) if isinstance(d, Mapping) else type(d).__name__
        raise PlanFileError(f"{bad} must be {{dtype, shape, base64}}, got {_short(keys)}")
    dt, shape, data = d["dtype"], d["shape"], d["base64"]
    dtype = None
    if isinstance(dt, str) and len(dt) <= 8:
        try:
            dtype = np.dtype(dt)
        except (TypeError, ValueError):
            dtype = None
    if dtype is None or dtype.kind not in _ARRAY_KINDS or dtype.byteorder not in "<|=" or dtype.shape:
        raise PlanFileError(
            f"{bad} has dtype {_short(dt)}; expected a little-endian numeric dtype such as '<i8'"
        )
    if dtype.byteorder == "=" and not np.little_endian:
        raise PlanFileError(f"{bad} has a native-order dtype {dt!r}; saved arrays are little-endian")
    if (
        not isinstance(shape, list)
        or len(shape) > 64
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in shape)
    ):
        raise PlanFileError(f"{bad} has shape {_short(shape)}; expected a list of non-negative integers")
    if not isinstance(data, str):
        raise PlanFileError(f"{bad} holds {type(data).__name__} data, not base64 text")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError) as exc:
        raise PlanFileError(f"{bad} is not valid base64 ({exc})") from None
    want = math.prod(shape) * dtype.itemsize
    if len(raw) != want:
        raise PlanFileError(
            f"{bad} has {len(raw)} bytes of data, but dtype {dtype.str} and shape {_short(shape)} need {want}"
        )
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(shape).copy()


def check_plan_fields(
    plan: Any,
    fields: Mapping[str, Any],
    *,
    where: str,
    optional: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The ``plan`` part of a saved file, checked against ``fields`` (name -> type or tuple of types).

    The keys must be exactly ``fields`` (those in ``optional`` may be missing), every value of
    its type (``bool`` never counts as ``int``; ``None`` is written as ``type(None)``), and a
    ``list`` value is accepted only when all its items are ints.  Anything else is a
    :class:`PlanFileError` naming the key; the caller turns it into a WARNING and plans afresh.
    """
    if not isinstance(plan, Mapping):
        raise PlanFileError(f"{where} is damaged: its plan is a {type(plan).__name__}, not an object")
    missing = sorted(k for k in fields if k not in plan and k not in optional)
    extra = sorted(str(k) for k in plan if k not in fields)
    if missing or extra:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unexpected {_short(', '.join(extra))}"] if extra else []
        )
        raise PlanFileError(f"{where} is damaged: its plan has {'; '.join(parts)}")
    for key, types in fields.items():
        if key not in plan:
            continue
        value = plan[key]
        allowed = types if isinstance(types, tuple) else (types,)
        ok = any(
            isinstance(value, t) and not (isinstance(value, bool) and t is int and bool not in allowed)
            for t in allowed
        )
        if ok and isinstance(value, list):
            ok = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        if not ok:
            names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
            raise PlanFileError(f"{where} is damaged: {key!r} must be {names}, not {_short(value)}")
    return dict(plan)


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

    def _plan_space(self) -> ExecutionSpace:
        """The execution space the plan runs in (default: the ``space`` attribute, else the CPU)."""
        space = getattr(self, "space", None)
        return space if isinstance(space, ExecutionSpace) else CPU

    def _plan_libraries(self) -> Mapping[str, Callable[[], object]]:
        """Libraries of this operation's route beside NumPy / SciPy (and CuPy / the CUDA runtime on
        the GPU): name -> a function giving its version (e.g. ``{"cudss": ...}``)."""
        return {}

    def _plan_device(self) -> str:
        """The device the plan is valid for, e.g. ``"cpu"`` or ``"cuda:0 NVIDIA H200 sm_90"``."""
        return plan_device(self._plan_space())

    def _plan_versions(self) -> dict[str, str]:
        """Library versions the plan depends on (a mismatch re-plans)."""
        return plan_versions(self._plan_space(), self._plan_libraries())

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
    def read_plan_document(cls, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The whole saved file, checked to be a plan of this kind (else :class:`PlanFileError`).

        Only the header is checked strictly when the file comes from this ust version; one from
        another version needs only a ``kind`` (its layout may differ) -- :meth:`read_plan` then
        warns and gives None.
        """
        where = os.fspath(path)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise PlanFileError(f"cannot read the plan file {where} ({exc.strerror or exc})") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PlanFileError(
                f"{where} is not a saved ust plan (not UTF-8 text: byte {exc.start} is {raw[exc.start]:#04x})"
            ) from None
        try:
            doc = json.loads(text)
        except RecursionError:
            raise PlanFileError(f"{where} is not a saved ust plan (JSON nested too deeply)") from None
        except ValueError as exc:  # JSONDecodeError, and integers beyond Python's digit limit
            raise PlanFileError(f"{where} is not a saved ust plan (invalid JSON: {exc})") from None
        if not isinstance(doc, dict):
            raise PlanFileError(
                f"{where} is not a saved ust plan (a JSON {type(doc).__name__}, not an object)"
            )
        missing = sorted(k for k in _HEADER if k not in doc and k != "ust_version")
        if missing:
            raise PlanFileError(f"{where} is not a saved ust plan (missing keys: {', '.join(missing)})")
        if not isinstance(doc["kind"], str):
            raise PlanFileError(f"{where} is not a saved ust plan ('kind' is {_short(doc['kind'])})")
        if doc["kind"] != cls.kind:
            kind = (
                doc["kind"] if len(doc["kind"]) <= 40 and doc["kind"].isprintable() else _short(doc["kind"])
            )
            raise PlanFileError(f"{where} holds a {kind} plan, not a {cls.kind} plan")
        if doc.get("ust_version") != ust_version():
            return doc  # another ust: read_plan warns; its layout is not ours to judge
        extra = sorted(str(k) for k in doc if k not in _HEADER)
        if extra:
            raise PlanFileError(
                f"{where} is not a saved ust plan (unexpected keys: {_short(', '.join(extra))})"
            )
        for key, typ in _HEADER.items():
            if not isinstance(doc[key], typ):
                raise PlanFileError(
                    f"{where} is not a saved ust plan ({key!r} must be a {typ.__name__}, not {_short(doc[key])})"
                )
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in doc["versions"].items()):
            raise PlanFileError(
                f"{where} is not a saved ust plan ('versions' must map names to version strings)"
            )
        return doc

    @classmethod
    def read_plan(
        cls, path: str | os.PathLike[str], *, device: str, versions: dict[str, str]
    ) -> dict[str, Any] | None:
        """The ``plan`` part of a saved file, or None (and a WARNING) when it was made elsewhere.

        ``device`` and ``versions`` describe this process; any difference from the file's
        (ust's version included) means the plan may not fit, so the caller should plan afresh.
        A file that is no saved plan of this kind raises :class:`PlanFileError` (see the module
        docstring); the ``plan`` part itself is the caller's to check (:func:`check_plan_fields`).
        """
        doc = cls.read_plan_document(path)
        mismatches = []
        made_with = doc.get("ust_version")
        if made_with != ust_version():
            shown = made_with if isinstance(made_with, str) and len(made_with) <= 40 else _short(made_with)
            mismatches.append(f"ust {shown} (now {ust_version()})")
        else:
            if doc["device"] != device:
                mismatches.append(f"device {_short(doc['device'])} (now {device!r})")
            saved = doc["versions"]
            for lib in sorted(set(saved) | set(versions)):
                if saved.get(lib) != versions.get(lib):
                    mismatches.append(f"{lib} {_short(saved.get(lib))} (now {versions.get(lib)})")
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

    def _checked_plan(self, path: str | os.PathLike[str], check: Any) -> dict[str, Any] | None:
        """``read_plan`` for this process, then ``check(plan, where)``; None (and a WARNING) when unusable.

        ``check`` returns the plan's usable form or raises PlanFileError for damaged contents or
        a plan that does not fit these operands: its message becomes the WARNING, and the
        caller plans afresh.  A file that is no plan of this kind still raises (read_plan).
        """
        saved = self.read_plan(path, device=self._plan_device(), versions=self._plan_versions())
        if saved is None:
            return None
        try:
            result: dict[str, Any] = check(saved, os.fspath(path))
        except PlanFileError as exc:
            _log.warning("%s; planning afresh", exc)
            return None
        return result
