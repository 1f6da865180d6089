"""The benchmark suite end to end on the CPU: two fast benchmarks at the smoke sizes, their JSON,
markdown and PNG outputs, the RESULTS section, a timed-out benchmark reported (not fatal)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("matplotlib")


def suite(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "benchmarks", "--device", "cpu", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def check_table(text: str) -> None:
    """A markdown table: a header, a separator and rows, all with the same number of cells."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert len(lines) >= 3, text
    widths = {ln.count("|") for ln in lines}
    assert len(widths) == 1, text
    assert set(lines[1].replace("|", "").replace("-", "").replace(":", "").strip()) == set()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("bench")
    results = out / "RESULTS.md"
    results.write_text("# Benchmark results\n", encoding="utf-8")
    res = suite(
        "--size", "smoke", "--only", "parse,matmul", "--out", str(out), "--write", "--results", str(results)
    )
    return out, results, res


def test_suite_writes_json_markdown_pngs(run: tuple[Path, Path, subprocess.CompletedProcess[str]]) -> None:
    out, _, res = run
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads((out / "suite.json").read_text(encoding="utf-8"))
    assert data["meta"]["device"] == "cpu" and data["meta"]["size"] == "smoke"
    assert list(data["benchmarks"]) == ["parse", "matmul"]
    for name, rec in data["benchmarks"].items():
        assert rec["status"] == "ok", rec.get("error")
        assert rec["rows"] and all("suite_param" in r for r in rec["rows"])
        assert json.loads((out / f"{name}.json").read_text(encoding="utf-8"))["status"] == "ok"
        check_table((out / f"{name}.md").read_text(encoding="utf-8"))
        width, height = png_size(out / f"{name}.png")
        assert width > 400 and height > 100
    matmul = data["benchmarks"]["matmul"]
    assert {r["suite_param"]["n"] for r in matmul["rows"]} == {20, 40}  # two sizes: time vs size
    assert matmul["meta"]["copy_GBps"] > 0  # the roofline, measured in the same process


def test_suite_appends_one_section(run: tuple[Path, Path, subprocess.CompletedProcess[str]]) -> None:
    _, results, _ = run
    text = results.read_text(encoding="utf-8")
    assert text.startswith("# Benchmark results\n")  # appended, not rewritten
    assert text.count("## Suite run (cpu, smoke)") == 1
    assert "### parse: ok" in text and "### matmul: ok" in text
    matmul = text.split("### matmul: ok", 1)[1]
    assert "Largest size, n 40 (smaller sizes, n 20: in suite.json" in matmul
    check_table(matmul)
    assert "CSR 40^3" in matmul and "CSR 20^3" not in matmul


def test_collect_rebuilds_the_report(
    run: tuple[Path, Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    out, _, _ = run
    res = suite("--collect", str(out), "--out", str(tmp_path), "--no-plots")
    assert res.returncode == 0, res.stderr
    again = json.loads((tmp_path / "suite.json").read_text(encoding="utf-8"))
    assert set(again["benchmarks"]) == {"parse", "matmul"}
    assert "## Suite run (cpu, smoke)" in (tmp_path / "suite.md").read_text(encoding="utf-8")


def test_timeout_is_reported_not_fatal(tmp_path: Path) -> None:
    res = suite(
        "--size", "smoke", "--only", "parse", "--out", str(tmp_path), "--timeout", "0.5", "--no-plots"
    )
    assert res.returncode == 1
    rec = json.loads((tmp_path / "parse.json").read_text(encoding="utf-8"))
    assert rec["status"] == "timed out"
    assert "Not measured: timed out after 0.5 s" in (tmp_path / "parse.md").read_text(encoding="utf-8")
    assert "### parse: timed out" in (tmp_path / "suite.md").read_text(encoding="utf-8")


def test_unknown_benchmark_is_one_line_error(tmp_path: Path) -> None:
    res = suite("--only", "nope", "--out", str(tmp_path))
    assert res.returncode == 1
    assert res.stderr.strip().count("\n") == 0 and "unknown benchmark(s) nope" in res.stderr
    assert not (tmp_path / "suite.json").exists()


def test_plot_helpers_read_table_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.plots import kind, num

    assert num("0.123 (median 0.2)") == 0.123 and num(2) == 2.0 and num("n/a") is None and num(None) is None
    assert kind("Poisson 60^3 (216,000 rows, 1,490,400 nnz)") == "Poisson"
    assert kind("random 8/row 20^3 (8,000 rows)") == "random 8/row"
