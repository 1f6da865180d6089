"""Did-you-mean hints: the closest known names to a misspelt one (difflib), for error messages.

Every message that rejects a name from a known list (standard formats, level types, CLI
commands, option choices) asks :func:`did_you_mean`, so the hint reads the same everywhere.
This module imports nothing from ust.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_matches", "did_you_mean"]


def close_matches(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to ``word``, best first (case does not count: ``csr`` -> ``CSR``)."""
    names = list(dict.fromkeys(choices))
    lowered: dict[str, str] = {}
    for c in names:
        lowered.setdefault(c.lower(), c)
    if word.lower() in lowered and lowered[word.lower()] != word:  # only the case differs
        return [lowered[word.lower()]]
    hits = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.6)
    return [lowered[h] for h in hits if lowered[h] != word]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'CSR'?"`` (or ``"did you mean 'a' or 'b'?"``), or ``""`` when nothing is close."""
    hits = close_matches(word, choices)
    if not hits:
        return ""
    return "did you mean " + " or ".join(repr(h) for h in hits[:2]) + "?"
