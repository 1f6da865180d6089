"""``ust cache info | clear | prune``: see and bound the on-disk kernel cache.

The cache (:mod:`ust.backends.generated.disk_cache`) holds compiled C libraries and CUDA cubins
under ``$UST_CACHE_DIR`` (default ``$XDG_CACHE_HOME/ust`` or ``~/.cache/ust``).  ``info`` prints
where it is, its entries and bytes; ``clear`` removes ust's entries; ``prune`` removes the least
recently used ones until the cache is under ``--max-bytes`` and / or those unused for
``--older-than`` days.  Only files ust wrote are removed (regular files owned by the user, named
and headed as ust's entries), links are never followed, and a cache directory others could
write is left alone.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
from typing import Any

from ust.runtime.errors import InvalidValueError

__all__ = ["CACHE_EXAMPLE", "CACHE_HELP", "configure_cache", "parse_size", "run_cache"]

CACHE_HELP = "see and bound the on-disk kernel cache: info (where, entries, bytes), clear, prune"
CACHE_EXAMPLE = "ust cache prune --max-bytes 500M"

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"1048576"``, ``"500M"``, ``"1.5GiB"`` -> bytes (K, M, G, T are powers of 1024)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise InvalidValueError(
            f"--max-bytes {text!r} is not a size; give bytes, or a number with K, M, G or T (e.g. 500M)"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def configure_cache(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    info = sub.add_parser(
        "info", help="where the cache is, its entries and their bytes", description=CACHE_HELP
    )
    info.add_argument("--json", action="store_true", help="print the report as JSON")
    sub.add_parser("clear", help="remove every entry ust wrote (and nothing else)")
    prune = sub.add_parser(
        "prune", help="remove least recently used entries until under --max-bytes, and / or old ones"
    )
    prune.add_argument(
        "--max-bytes", metavar="N", help="keep at most N bytes (K, M, G suffixes: powers of 1024)"
    )
    prune.add_argument("--older-than", metavar="DAYS", type=float, help="remove entries unused for DAYS days")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _where() -> str:
    if os.environ.get("UST_CACHE_DIR"):
        return "from $UST_CACHE_DIR"
    if os.environ.get("XDG_CACHE_HOME"):
        return "from $XDG_CACHE_HOME; $UST_CACHE_DIR overrides it"
    return "the default; $UST_CACHE_DIR overrides it"


def _when(t: float) -> str:
    return _dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def _info(report: Any, as_json: bool) -> None:
    kinds = report.by_kind()
    if as_json:
        doc = {
            "root": str(report.root),
            "exists": report.exists,
            "problem": report.problem,
            "notes": list(report.notes),
            "entries": len(report.entries),
            "bytes": report.nbytes,
            "kinds": {k: {"entries": n, "bytes": b} for k, (n, b) in kinds.items()},
            "other_files": [str(p) for p in report.other],
        }
        print(json.dumps(doc, indent=2))
        return
    print(f"kernel cache: {report.root} ({_where()})")
    if not report.exists:
        print("  not created yet: no kernel has been compiled and cached")
        return
    if report.problem:
        print(f"  not used by ust: {report.problem}; ust uses a private temporary cache instead")
        return
    for kind, (n, b) in kinds.items():
        print(f"  {kind:<6} {n:>6} entries  {_human(b):>10}")
    print(f"  {'total':<6} {len(report.entries):>6} entries  {_human(report.nbytes):>10}")
    if report.entries:
        used = [e.last_used for e in report.entries]
        print(f"  last used: {_when(max(used))} (newest), {_when(min(used))} (oldest)")
    for note in report.notes:
        print(f"  skipped: {note}")
    if report.other:
        print(f"  {len(report.other)} other file(s) left alone (not written by ust)")


def run_cache(args: argparse.Namespace) -> int:
    from ust.backends.generated import disk_cache

    action = args.cache_command
    if action == "info":
        _info(disk_cache.scan_cache(), args.json)
        return 0
    if action == "clear":
        report, removed, freed = disk_cache.clear_cache()
    else:
        if args.max_bytes is None and args.older_than is None:
            raise InvalidValueError("ust cache prune needs --max-bytes N and / or --older-than DAYS")
        max_bytes = parse_size(args.max_bytes) if args.max_bytes is not None else None
        if args.older_than is not None and not args.older_than >= 0:  # NaN fails too
            raise InvalidValueError(f"--older-than must be a number of days >= 0, not {args.older_than}")
        older = args.older_than * 86400.0 if args.older_than is not None else None
        report, removed, freed = disk_cache.prune_cache(max_bytes, older)
    left = len(report.entries) - removed
    print(
        f"removed {removed} entr{'y' if removed == 1 else 'ies'} ({_human(freed)}) from {report.root}; "
        f"{left} left ({_human(report.nbytes - freed)})"
    )
    if report.other:
        print(f"left alone: {len(report.other)} other file(s) not written by ust")
    return 0
