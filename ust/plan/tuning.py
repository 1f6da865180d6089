"""Tuning records: what autotuning measured, keyed so that it applies to similar matrices.

A record says: for this op, format signature, dtypes, ``k``, device, and these buckets of
rows, nnz and row-length statistics, route R with variant V was the fastest, and how long
each candidate took.  Buckets are powers of 4 (rows, nnz, longest over mean row) and of 2
(mean row length, ``k``), so a record made on one matrix serves matrices of similar size
and shape.  Records are JSON data stored by :mod:`ust.backends.generated.tuning_store`; this
module builds the key and the record and checks a record read back: schema and types, the
key, the ust / library versions and the device (a stale or foreign record is ignored with an
INFO line, a damaged one with a WARNING), and that its route is one of the problem's
candidates.  Whether the variant is one the route offers is checked by the caller, which
knows the route's variants; nothing in a record reaches a kernel or a library unchecked.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from ust.plan.classify import classify
from ust.plan.rules import Problem, Rule
from ust.plan.stats import MatrixStats
from ust.runtime.log import get_logger

__all__ = ["SCHEMA", "RecordKey", "TunedChoice", "check_record", "make_record", "record_key"]

_log = get_logger("plan.tuning")

#: The record layout's version: a record of another schema is stale.
SCHEMA = 1
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "schema": int,
    "ust_version": str,
    "device": str,
    "versions": dict,
    "key": dict,
    "route": str,
    "variant": (type(None), str, int),
    "timings": dict,
    "created": str,
}
_MAX_TEXT = 200  # no string in a record is longer (a damaged file's value is never echoed whole)


def _log_bucket(x: float, base: float) -> int:
    return round(math.log(x, base)) if x > 0 else -1


def _k_bucket(k: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(k, 1))))


@dataclass(frozen=True)
class RecordKey:
    """What a record applies to; ``digest`` names its file."""

    op: str
    format: str
    dtype: str
    index_dtype: str
    plain: bool
    k: int
    layout: str
    device: str
    rows: int
    nnz: int
    row_mean: int
    skew: int
    cv: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()


def format_signature(fmt: Any) -> str:
    """The format as routes see it: its class with parameters ("BSR[2, 2]"), or the canonical
    text of a format that is no standard one; "~" marks unordered or non-unique storage."""
    fc = classify(fmt)
    base = fmt.to_text() if fc.name == "OTHER" else str(fc)
    return base if fc.canonical else f"{base}~"


def record_key(
    problem: Problem, fmt: Any, stats: MatrixStats, k: int, layout: str | None, device: str
) -> RecordKey:
    """The key of ``problem`` on a matrix with ``stats``, ``k`` columns of B, on ``device``."""
    return RecordKey(
        op=problem.op,
        format=format_signature(fmt),
        dtype=problem.dtype,
        index_dtype=problem.index_dtype,
        plain=problem.plain,
        k=_k_bucket(k),
        layout=layout or "-",
        device=device,
        rows=_log_bucket(stats.rows, 4),
        nnz=_log_bucket(stats.nnz, 4),
        row_mean=_log_bucket(stats.row_mean, 2),
        skew=_log_bucket(stats.skew, 4),
        cv=min(int(stats.row_cv * 2), 8),
    )


def make_record(
    key: RecordKey,
    route: str,
    variant: Any,
    timings: dict[str, float],
    ust_version: str,
    versions: dict[str, str],
    now: _dt.datetime | None = None,
) -> dict[str, Any]:
    """The JSON document of a record (``created``: UTC, ISO 8601)."""
    when = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "schema": SCHEMA,
        "ust_version": ust_version,
        "device": key.device,
        "versions": dict(versions),
        "key": key.as_dict(),
        "route": route,
        "variant": variant,
        "timings": {str(n): float(t) for n, t in timings.items()},
        "created": when,
    }


@dataclass(frozen=True)
class TunedChoice:
    """A record's choice, checked: a candidate rule, its variant (still to be checked against the
    route's variants) and the record's date."""

    rule: Rule
    variant: Any
    created: str
    timings: dict[str, float]

    @property
    def date(self) -> str:
        return self.created[:10]


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else f"{text[:30]}...{text[-30:]}"


def _damaged(why: str) -> None:
    _log.warning("ignoring a damaged tuning record: %s", why)


def check_record(
    doc: Any,
    key: RecordKey,
    ust_version: str,
    versions: dict[str, str],
    candidates: tuple[Rule, ...],
) -> TunedChoice | None:
    """The record's choice when ``doc`` is a well-formed, current record of ``key`` on this device
    whose route is among ``candidates``; None (with a log line saying why) otherwise."""
    if not isinstance(doc, dict):
        _damaged(f"not a JSON object but {type(doc).__name__}")
        return None
    if set(doc) != set(_FIELDS):
        _damaged(f"fields {_short(sorted(map(str, doc)))}, expected {sorted(_FIELDS)}")
        return None
    for name, typ in _FIELDS.items():
        v = doc[name]
        if not isinstance(v, typ) or isinstance(v, bool) or (isinstance(v, str) and len(v) > _MAX_TEXT):
            _damaged(f"field {name!r} holds {_short(v)}")
            return None
    if doc["schema"] != SCHEMA or doc["ust_version"] != ust_version or doc["versions"] != versions:
        _log.info(
            "ignoring a stale tuning record (made by ust %s with %s; this is ust %s with %s)",
            _short(doc["ust_version"]),
            _short(doc["versions"]),
            ust_version,
            versions,
        )
        return None
    if doc["device"] != key.device:
        _log.info(
            "ignoring a tuning record made on another device (%s, not %s)", _short(doc["device"]), key.device
        )
        return None
    if doc["key"] != key.as_dict():
        _damaged("its key is not the key it is stored under")
        return None
    timings = doc["timings"]
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in timings.values()):
        _damaged("a timing is not a non-negative number")
        return None
    rule = next((r for r in candidates if r.route == doc["route"]), None)
    if rule is None:
        _damaged(
            f"route {_short(doc['route'])} is not a candidate here "
            f"(candidates: {', '.join(dict.fromkeys(r.route for r in candidates))})"
        )
        return None
    try:
        _dt.datetime.strptime(doc["created"], "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        _damaged(f"date {_short(doc['created'])} is not an ISO 8601 UTC time")
        return None
    return TunedChoice(rule, doc["variant"], doc["created"], {str(n): float(t) for n, t in timings.items()})
