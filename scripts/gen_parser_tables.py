"""Regenerate ust/grammar/_tables.py, the prebuilt LALR tables of ust/grammar/ust.lark.

    python scripts/gen_parser_tables.py

Run it after editing the grammar or moving to another Lark version: until then the parser
is built from the grammar at first use (correct, tens of milliseconds slower), and
tests/test_grammar.py::test_shipped_parser_tables_are_current fails.  The output is
reproducible (the table is numbered canonically).
"""

from __future__ import annotations

from pathlib import Path

from ust.grammar.parser import tables_source

OUT = Path(__file__).resolve().parents[1] / "ust" / "grammar" / "_tables.py"


def main() -> int:
    """Write the tables of the installed Lark for the current grammar."""
    OUT.write_text(tables_source(), encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
