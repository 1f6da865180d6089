"""`ust info`: versions and every route's availability, with the fix for what is missing."""

from __future__ import annotations

import json

from ust.cli import main
from ust.cli.info import collect_info, format_info


def test_report_lists_every_probe_with_a_fix_when_missing() -> None:
    report = collect_info()
    assert report["versions"]["ust"]
    names = [r["name"] for r in report["routes"]]
    assert {"C compiler", "CuPy", "CUDA device", "cuDSS", "cuSPARSE", "NVRTC"} <= set(names)
    for r in report["routes"]:
        assert r["detail"]
        assert (r["fix"] is None) == r["available"]
        if not r["available"]:
            assert "pip install" in r["fix"] or "install" in r["fix"]
    text = format_info(report)
    assert "routes:" in text and "versions:" in text


def test_cli_info_json(capsys) -> None:
    assert main(["info", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"versions", "routes"}
