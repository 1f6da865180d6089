"""The CLI's error contract (issue 20): every argument checked before work, one line on stderr,
exit 1, no traceback; one wording for a missing file; "did you mean"; explain without a GPU;
``ust cache``; ``ust bench --out``; ``ust info``'s compiler vs device; the logging lines."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import ust
from ust.backends.generated import disk_cache
from ust.backends.generated.disk_cache import MAGIC, ArtifactCache
from ust.cli import info as info_mod
from ust.cli import main
from ust.cli.cache import parse_size
from ust.cli.demo import poisson3d
from ust.runtime.xp import gpu_available

ROOT = Path(__file__).resolve().parents[1]
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("cli")
    out = {
        "square": d / "p.mtx",
        "rect": d / "rect.mtx",
        "b7": d / "b7.mtx",
        "b27": d / "b27.npy",
        "obj": d / "obj.npy",
    }
    scipy.io.mmwrite(out["square"], sp.coo_matrix(poisson3d(3)))  # 27 x 27
    scipy.io.mmwrite(out["rect"], sp.coo_matrix(sp.random(5, 7, density=0.5, random_state=0)))
    scipy.io.mmwrite(out["b7"], np.ones((7, 1)))
    np.save(out["b27"], np.ones(27))
    np.save(out["obj"], np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return {k: str(v) for k, v in out.items()}


def _one_error(capsys: pytest.CaptureFixture[str], command: str) -> str:
    """The one stderr line of a failed command (asserted: one line, the prefix, no traceback)."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"ust {command}: error: "), err
    assert "Traceback" not in err
    return err.strip()


# ----------------------------------------------------------------------------- arguments


BAD_ARGUMENTS = [
    (["spmv", "{square}", "--k", "0"], "--k must be at least 1, not 0"),
    (["spmv", "{square}", "--k", "-3"], "--k must be at least 1"),
    (["spmv", "{square}", "--repeat", "0"], "--repeat must be at least 1"),
    (["spmv", "{square}", "--dtype", "floot"], "--dtype 'floot' is not a numeric dtype"),
    (["spmv", "{square}", "--k", "100000000000"], "use a smaller --k"),
    (["spmv", "{square}", "--execution", "gpu"], "execution must be 'cpu', 'cuda'"),
    (["spmv", "{square}", "--format", "CRS"], "did you mean 'CSR'"),
    (["explain", "matmul", "{square}", "--k", "0"], "--k must be at least 1"),
    (["explain", "sum", "{square}", "--k", "3"], "--k applies to explain matmul"),
    (["explain", "matmul", "{square}", "--to", "CSR"], "--to applies to explain convert"),
    (["explain", "convert", "{square}"], "explain convert needs --to FORMAT"),
    (["explain", "transpose", "{square}", "--execution", "cuda"], "transpose runs where the tensor is"),
    (["solve", "{rect}"], "is 5 x 7; ust solve needs a square matrix"),
    (["solve", "{rect}", "--format", "CSR"], "needs a square matrix"),
    (["solve", "{square}", "--rhs", "{b7}"], "--rhs {b7} has shape (7,); for a 27 x 27 matrix"),
    (["solve", "{square}", "--rhs", "{obj}"], "not a NumPy array file"),
    (["solve", "{square}", "--repeat", "0"], "--repeat must be at least 1"),
    (["solve", "{square}", "--execution", "gpu"], "execution must be"),
    (["demo", "--n", "0"], "--n must be between 1 and 100, not 0"),
    (["demo", "--n", "-2"], "--n must be between 1 and 100"),
    (["demo", "--n", "100000"], "--n must be between 1 and 100"),
    (["show", "CSR", "--max-rows", "0"], "--max-rows must be at least 1"),
    (["show", "CSR", "--max-cols", "-1"], "--max-cols must be at least 1"),
    (["show", "CSR", "--shape", "10000,10000"], "a sample is built dense"),
    (["show", "CSR", "--png", "/nonexistent-dir/x.png"], "the directory '/nonexistent-dir' does not exist"),
    (["show", "BSR[2,2"], "missing ']' after the parameters of BSR"),
    (["convert", "{square}", "--format", "CSR", "-o", "/nonexistent-dir/x.npz"], "does not exist"),
    (["convert", "{square}", "--format", "CSR", "-o", "{square}.txt"], "the output must end in"),
    (["convert", "{square}", "--format", "CSR", "-o", "x.npz", "--dtype", "nope"], "not a numeric dtype"),
    (["convert", "{square}", "--format", "CSR", "-o", "{square}.mtx", "--compress"], "--compress applies to"),
    (["cache", "prune"], "needs --max-bytes N and / or --older-than DAYS"),
    (["cache", "prune", "--max-bytes", "5Q"], "is not a size"),
    (["cache", "prune", "--older-than", "-1"], "--older-than must be a number of days >= 0"),
]


@pytest.mark.parametrize(("argv", "fragment"), BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS])
def test_bad_arguments_exit_1_with_one_line(
    argv: list[str],
    fragment: str,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("UST_CACHE_DIR", str(tmp_path / "cache"))
    assert main([a.format(**files) for a in argv]) == 1
    assert fragment.format(**files) in _one_error(capsys, argv[0])


@pytest.mark.parametrize(
    "argv",
    [["spmv", "{square}", "--k", "0"], ["solve", "{rect}"], ["demo", "--n", "0"]],
    ids=["spmv --k 0", "solve non-square", "demo --n 0"],
)
def test_the_reported_cases_in_a_real_process(argv: list[str], files: dict[str, str]) -> None:
    """The three reported leaks, run as ``python -m ust``: ust's message, never NumPy's."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    res = subprocess.run(
        [sys.executable, "-m", "ust", *(a.format(**files) for a in argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    for numpy_words in ("zero-size array", "negative dimensions", "cannot reshape"):
        assert numpy_words not in res.stderr


# ----------------------------------------------------------------------------- missing files


MISSING = [
    ["check", "{missing}"],
    ["show", "{missing}"],
    ["convert", "{missing}", "--format", "CSR", "-o", "{out}"],
    ["spmv", "{missing}"],
    ["explain", "matmul", "{missing}"],
    ["solve", "{missing}"],
    ["solve", "{square}", "--rhs", "{missing_npy}"],
    ["solve", "{square}", "--rhs", "{missing}"],
    ["demo", "--matrix", "{missing}"],
]


@pytest.mark.parametrize("argv", MISSING, ids=[" ".join(a) for a in MISSING])
def test_a_missing_file_reads_the_same_in_every_command(
    argv: list[str], files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = {
        **files,
        "missing": str(tmp_path / "missing.mtx"),
        "missing_npy": str(tmp_path / "missing.npy"),
        "out": str(tmp_path / "o.npz"),
    }
    assert main([a.format(**names) for a in argv]) == 1
    line = _one_error(capsys, argv[0])
    missing = names["missing_npy"] if "{missing_npy}" in argv else names["missing"]
    assert line == f"ust {argv[0]}: error: no such file: {missing!r}"


def test_a_directory_is_not_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spmv", str(tmp_path)]) == 1
    assert _one_error(capsys, "spmv").endswith(f"{str(tmp_path)!r} is a directory, not a file")


def test_the_one_wording_covers_errors_raised_anywhere() -> None:
    from ust.cli.checks import os_error_message

    for exc in (
        FileNotFoundError(2, "No such file or directory", "a.mtx"),  # open() / Path.read_text
        FileNotFoundError(2, "no such file", "a.mtx"),  # ust.io
    ):
        assert os_error_message(exc) == "no such file: 'a.mtx'"
    assert os_error_message(PermissionError(13, "Permission denied", "a.mtx")) == "permission denied: 'a.mtx'"
    assert os_error_message(OSError("disk on fire")) == "disk on fire"


# ----------------------------------------------------------------------------- did you mean


def test_format_names_suggest_the_closest() -> None:
    with pytest.raises(ust.FormatError, match=r"unknown standard format 'CRS'; did you mean 'CSR'"):
        ust.format("CRS")
    with pytest.raises(ust.FormatError, match=r"did you mean 'CSR'\?"):  # case only: that one alone
        ust.format("csr")
    with pytest.raises(ust.FormatError, match=r"did you mean 'DenseRowMajor'"):
        ust.format("DenseRowMajr")
    with pytest.raises(ust.FormatError, match=r"did you mean 'BSR'"):
        ust.format("BRS[2, 2]")
    with pytest.raises(ust.FormatError) as exc:
        ust.format("Nope")
    assert "did you mean" not in str(exc.value) and "known: CSR" in str(exc.value)


def test_level_types_and_properties_in_dsl_text_suggest_the_closest() -> None:
    with pytest.raises(ust.FormatError, match=r"unknown level type 'compresed'; did you mean 'compressed'"):
        ust.format("(i, j) -> (i : dense, j : compresed)")
    with pytest.raises(ust.FormatError, match=r"unknown property 'nonuniqe'; did you mean 'nonunique'"):
        ust.format("(i, j) -> (i : compressed(nonuniqe), j : singleton)")
    with pytest.raises(ust.FormatError) as exc:
        ust.format("(i, j) -> (i : dense, j : xyz)")
    assert exc.value.rule == "unknown-level-type" and "did you mean" not in str(exc.value)


def test_cli_subcommands_and_choices_suggest_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse's usage errors (exit 2, the usage line then one error line), with a suggestion on
    every Python version."""
    for argv, hint in (
        (["solv", "x.mtx"], "invalid choice: 'solv'; did you mean 'solve'?"),
        (["shw", "CSR"], "did you mean 'show'?"),
        (["cache", "clera"], "did you mean 'clear'?"),
        (["explain", "matmull", "x.mtx"], "did you mean 'matmul'?"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        last = err.strip().splitlines()[-1]
        assert err.startswith("usage: ") and "error: argument" in last and hint in last, err
        assert "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["zzzzzz"])
    assert "did you mean" not in capsys.readouterr().err


def test_a_standard_name_with_an_open_bracket_says_so() -> None:
    with pytest.raises(ust.UstSyntaxError) as exc:
        ust.format("BSR[2,2")
    first = str(exc.value).splitlines()[0]
    assert first == "line 1, column 8: missing ']' after the parameters of BSR (write BSR[2,2])"
    assert "unexpected 'BSR'" not in str(exc.value)
    with pytest.raises(ust.UstSyntaxError, match=r"'\(' after BSR is closed by '\]'"):
        ust.format("BSR(2, 2]")
    with pytest.raises(ust.UstSyntaxError, match=r"unexpected '\]' after BSR\[2,2\]"):
        ust.format("BSR[2,2]]")
    assert ust.format("BSR[2, 2]") == ust.format("BSR(2,2)")  # the good spellings still work


# ----------------------------------------------------------------------------- explain without a GPU


needs_no_gpu = pytest.mark.skipif(gpu_available(), reason="checks what a machine without a GPU says")


@needs_no_gpu
@pytest.mark.parametrize("op", ["matmul", "solve", "add", "multiply", "sum"])
def test_explain_on_cuda_without_a_gpu_says_what_would_run_and_what_is_missing(
    op: str, files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", op, files["square"], "--execution", "cuda"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "route: " in out and "cuda" in out.split("route: ")[0]  # the execution space is the GPU
    last = out.strip().splitlines()[-1]
    assert last.startswith("not runnable on this machine: no ")  # no CuPy, or no device
    assert "what would run on cuda device 0" in last


@needs_no_gpu
def test_the_api_explains_cuda_without_a_gpu() -> None:
    a = ust.asarray(sp.random_array((12, 12), density=0.3, format="csr", random_state=0))
    dense = ust.explain("matmul", a, np.ones(12), execution="cuda")
    assert "execution space: cuda device 0" in dense and "route: cusparse" in dense
    sparse = ust.explain("matmul", a, a, execution="cuda:1")
    assert "execution space: cuda:1" in sparse and "operation: spgemm" in sparse
    assert "the plan above is what would run on cuda device 1" in sparse.splitlines()[-1]
    assert "not runnable" not in ust.explain("matmul", a, np.ones(12))  # the CPU needs nothing
    with pytest.raises(ust.BackendUnavailableError):  # running it still says what is missing
        ust.matmul(a, np.ones(12), execution="cuda")


# ----------------------------------------------------------------------------- ust cache


def _key(k: int) -> str:
    return f"{k:064x}"


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("UST_CACHE_DIR", str(root))
    monkeypatch.setattr(disk_cache, "_private", None)
    monkeypatch.setattr(disk_cache, "_warned", set())
    return root


def _store(k: int, size: int, used: float, kind: str = "c") -> Path:
    path = ArtifactCache(kind).store(_key(k), ".so" if kind == "c" else ".cubin", b"x" * size)
    assert path is not None
    os.utime(path, (used, used))
    return path


def test_cache_info_clear_keep_everything_ust_did_not_write(
    cache_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cache", "info"]) == 0
    assert "not created yet" in capsys.readouterr().out
    ours = [_store(1, 1000, 1.0e9), _store(2, 2000, 1.1e9), _store(3, 500, 1.2e9, kind="cuda")]
    c = cache_root / "c"
    foreign = {
        "notes": c / "notes.txt",  # a name ust never uses
        "lookalike": c / f"{_key(9)}.so",  # ust's name, not ust's content
    }
    foreign["notes"].write_text("mine")
    foreign["lookalike"].write_bytes(b"\x7fELF not from ust")
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "precious.so"
    target.write_bytes(MAGIC + b"looks like an entry, lives elsewhere")
    link = c / f"{_key(8)}.so"
    link.symlink_to(target)  # a link with an entry's name: never followed, never counted
    assert main(["cache", "info", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    head = len(MAGIC) + 32  # each file: MAGIC, its HMAC, the artefact
    assert doc["root"] == str(cache_root) and doc["entries"] == 3 and doc["bytes"] == 3500 + 3 * head
    assert doc["kinds"] == {
        "c": {"entries": 2, "bytes": 3000 + 2 * head},
        "cuda": {"entries": 1, "bytes": 500 + head},
        "tune": {"entries": 0, "bytes": 0},
    }
    assert sorted(doc["other_files"]) == sorted(str(p) for p in [*foreign.values(), link])
    assert main(["cache", "info"]) == 0
    text = capsys.readouterr().out
    assert (
        f"kernel cache: {cache_root} (from $UST_CACHE_DIR)" in text and "3 other file(s) left alone" in text
    )
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out.startswith(f"removed 3 entries (3.6 KiB) from {cache_root}; 0 left")
    assert not any(p.exists() for p in ours)
    assert all(p.exists() for p in foreign.values()) and link.is_symlink() and target.exists()
    assert (cache_root / "secret.key").exists()  # entries only


def test_cache_prune_removes_least_recently_used_first(
    cache_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, mid, new = _store(1, 1000, 1.0e9), _store(2, 1000, 1.1e9), _store(3, 1000, 1.2e9)
    assert main(["cache", "prune", "--max-bytes", "2500"]) == 0  # 3 x (1000 + 50) bytes on disk
    assert "removed 1 entry" in capsys.readouterr().out
    assert not old.exists() and mid.exists() and new.exists()
    # a hit marks an entry used now, so a looked-up old entry outlives a newer unused one
    assert ArtifactCache("c").lookup(_key(2), ".so") == b"x" * 1000
    assert main(["cache", "prune", "--max-bytes", "1100"]) == 0
    assert mid.exists() and not new.exists()
    assert main(["cache", "prune", "--older-than", "1"]) == 0  # mid was used a moment ago
    assert mid.exists()
    os.utime(mid, (1e9, 1e9))
    assert main(["cache", "prune", "--older-than", "1"]) == 0
    assert not mid.exists()


def test_cache_prune_removes_stale_temporaries_only(cache_root: Path) -> None:
    entry = _store(1, 10, 1e9)
    stale = entry.with_name(f".{entry.name}.abc123.tmp")
    fresh = entry.with_name(f".{entry.name}.def456.tmp")
    for p in (stale, fresh):
        p.write_bytes(MAGIC[:5])
        p.chmod(0o600)
    os.utime(stale, (1e9, 1e9))  # a writer that died long ago
    assert main(["cache", "prune", "--max-bytes", "1G"]) == 0
    assert entry.exists() and not stale.exists() and fresh.exists()  # a writer at work keeps its file


def test_cache_size_suffixes() -> None:
    assert parse_size("1048576") == 1 << 20
    assert parse_size("500M") == 500 << 20 and parse_size("1.5GiB") == 3 << 29 and parse_size("2k") == 2048


def test_cache_a_kind_directory_that_is_a_link_is_not_followed(
    cache_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _store(1, 10, 1e9)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    victim = elsewhere / f"{_key(5)}.cubin"
    victim.write_bytes(MAGIC + b"payload")
    victim.chmod(0o600)
    (cache_root / "cuda").symlink_to(elsewhere, target_is_directory=True)
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert victim.exists()
    assert main(["cache", "info"]) == 0
    assert "is a link (not followed)" in capsys.readouterr().out


def test_cache_a_root_others_can_write_is_not_touched(
    cache_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = _store(1, 10, 1e9)
    cache_root.chmod(0o777)
    try:
        assert main(["cache", "info"]) == 0
        assert "not used by ust" in capsys.readouterr().out
        for argv in (["cache", "clear"], ["cache", "prune", "--max-bytes", "0"]):
            assert main(argv) == 1
            assert "not touching the kernel cache" in _one_error(capsys, "cache")
        assert entry.exists()
    finally:
        cache_root.chmod(0o700)


@pytest.mark.skipif(not AS_ROOT, reason="chown to another user needs root")
def test_cache_an_entry_of_another_user_is_left_alone(cache_root: Path) -> None:
    entry = _store(1, 10, 1e9)
    theirs = _store(2, 10, 1e9)
    os.chown(theirs, 65534, 65534)
    assert main(["cache", "clear"]) == 0
    assert not entry.exists() and theirs.exists()


# ----------------------------------------------------------------------------- ust bench --out


def test_bench_writes_to_out_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    record = {
        "name": "parse",
        "device": "cpu",
        "size": "smoke",
        "status": "failed",
        "error": "x",
        "seconds": 1.0,
    }
    (runs / "parse.json").write_text(json.dumps(record), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    results = ROOT / "benchmarks" / "RESULTS.md"
    before = results.read_bytes() if results.exists() else None
    source_out = ROOT / "benchmarks" / "out" / "suite.json"
    stamp = source_out.stat().st_mtime_ns if source_out.exists() else None
    main(["bench", "--collect", str(runs), "--only", "parse", "--no-plots", "--write"])
    out = capsys.readouterr().out
    assert (work / "ust-bench" / "suite.json").is_file() and (work / "ust-bench" / "parse.md").is_file()
    assert "## Suite run (cpu, smoke)" in (work / "ust-bench" / "RESULTS.md").read_text(encoding="utf-8")
    assert str(work / "ust-bench") in out
    assert (results.read_bytes() if results.exists() else None) == before  # the source tree is untouched
    assert (source_out.stat().st_mtime_ns if source_out.exists() else None) == stamp
    main(["bench", "--collect", str(runs), "--only", "parse", "--no-plots", "--out", "elsewhere"])
    assert (work / "elsewhere" / "suite.json").is_file()  # a relative --out is relative to here


# ----------------------------------------------------------------------------- ust info


def test_info_separates_compiler_present_from_device_present(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_device() -> str:
        raise RuntimeError("no CUDA device")

    probes = tuple(
        dataclasses.replace(p, check=lambda: "/opt/libnvrtc.so.13") if p.name == "NVRTC" else p
        for p in info_mod._PROBES
    )
    monkeypatch.setattr(info_mod, "_PROBES", probes)
    monkeypatch.setattr(info_mod, "_cupy_device", no_device)
    report = info_mod.collect_info()
    rows = {r["name"]: r for r in report["routes"]}
    assert {"CuPy", "CUDA device", "NVRTC", "C compiler"} <= set(rows)
    nvrtc = rows["NVRTC"]
    assert nvrtc["present"] and not nvrtc["device"] and not nvrtc["available"]
    assert "no CUDA device to run on" in nvrtc["detail"] and "GPU" in nvrtc["fix"]
    assert "device" not in rows["C compiler"]  # a CPU piece: present is available
    text = info_mod.format_info(report)
    assert "library present; CUDA device missing" in text
    assert "[yes] NVRTC" not in text


def test_info_on_this_machine_never_claims_a_gpu_route_without_a_device() -> None:
    rows = {r["name"]: r for r in info_mod.collect_info()["routes"]}
    has_device = rows["CUDA device"]["available"]
    for r in rows.values():
        if "device" in r:
            assert r["device"] == has_device
            assert r["available"] == (r["present"] and has_device)


# ----------------------------------------------------------------------------- logging


def test_sparse_at_sparse_logs_placement_and_route(caplog: pytest.LogCaptureFixture) -> None:
    a = ust.asarray(sp.random_array((20, 20), density=0.2, format="csr", random_state=1))
    with caplog.at_level(logging.INFO, logger="ust"):
        c = a @ a
    assert c.shape == (20, 20)
    lines = [r.getMessage() for r in caplog.records if r.name == "ust.ops.algebra"]
    assert "operands are in cpu memory; the execution space is cpu" in lines
    assert any(m.startswith("route for spgemm: ") for m in lines), lines
    assert lines.index("operands are in cpu memory; the execution space is cpu") == 0  # where, then how


def test_the_conversion_inside_a_solve_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    a = sp.coo_matrix(poisson3d(3))
    b = np.ones(27)
    with caplog.at_level(logging.INFO, logger="ust"):
        ust.solve(a, b)
    lines = [r.getMessage() for r in caplog.records if r.name == "ust.linalg"]
    assert any(m.startswith("converted A (COO) to CSR in ") for m in lines), lines
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ust"):
        ust.solve(ust.asarray(a).convert("DIA"), b)
    assert any(r.getMessage().startswith("converted A (DIA) to CSR") for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ust"):
        ust.solve(sp.csr_matrix(a), b)
    assert not any("converted A" in r.getMessage() for r in caplog.records)  # already CSR: nothing to say
