"""Fuzzed Matrix Market and Binsparse files: only ust errors escape, and the process survives.

Valid seed files are mutated (byte flips, truncation, inserted NULs, huge numbers in the
header, random tokens, edited descriptors and arrays) and read by ust in a subprocess, so a
crash of a native reader fails the test instead of killing pytest.  The subprocess reports,
per file, "ok" or the class of the exception and whether it is a ``ust.UstError``.

Bounded for CI (a few seconds); ``UST_FUZZ_FILES=<n>`` asks for ``n`` mutants per kind.
"""

from __future__ import annotations

import gzip
import io as _io
import json
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ust import io
from ust.convert import asarray
from ust.tensor import Tensor

N_MUTANTS = int(os.environ.get("UST_FUZZ_FILES", "300"))

WORKER = r"""
import json, sys
import ust
from ust import io
for path in sys.argv[1:]:
    print(json.dumps({"file": path, "start": True}), flush=True)
    try:
        t = io.read(path)
        t.todense() if t.ndim == 2 and max(t.shape) < 10**6 else None  # touch the values
        rec = {"file": path, "result": "ok"}
    except BaseException as exc:  # report everything: the test decides what is allowed
        rec = {"file": path, "result": type(exc).__name__, "ust": isinstance(exc, ust.UstError),
               "message": str(exc)[:300]}
    print(json.dumps(rec), flush=True)
"""

HUGE = ["99999999999999", str(2**62), str(2**63), str(2**64), "99999999999999999999999999", "-1", "0"]
TOKENS = [
    "abc", "nan", "-inf", "1e999", "-", "+", "%", "0x10", "1_0", "1.5", "", "\xff", "\u0661",
    "99999999999999999999999", "-0", "1e", ".", "\t", "%%MatrixMarket", "coordinate", "array",
]  # fmt: skip


def _seeds_mm(d: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    out = []
    M = rng.integers(-3, 4, size=(5, 4)).astype(float)
    M[M == 1] = 0
    for k, (name, src) in enumerate(
        [
            ("COO", M),
            ("COO", M.astype(np.int64)),
            ("COO", M + 1j * M[::-1]),
            ("DenseRowMajor", M),
            ("DenseRowMajor", M + 2j),
            ("COO", np.zeros((0, 3))),
            ("DenseRowMajor", np.zeros((3, 0))),
        ]
    ):
        p = d / f"seed{k}.mtx"
        io.mmwrite(p, asarray(src, name))
        out.append(p)
    S = M[:4] + M[:4].T
    io.mmwrite(d / "sym.mtx", asarray(S, "CSR"), symmetry="symmetric")
    io.mmwrite(d / "symd.mtx", asarray(S, "DenseRowMajor"), symmetry="symmetric")
    io.mmwrite(d / "skew.mtx", asarray(M[:4] - M[:4].T, "CSR"), symmetry="skew-symmetric")
    io.mmwrite(d / "pat.mtx", asarray(M, "CSR"), field="pattern")
    return [*out, d / "sym.mtx", d / "symd.mtx", d / "skew.mtx", d / "pat.mtx"]


def _mutate_text(data: bytes, rnd: random.Random) -> bytes:
    kind = rnd.randrange(7)
    if kind == 0 and data:  # flip bytes
        b = bytearray(data)
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        return bytes(b)
    if kind == 1:  # truncate
        return data[: rnd.randrange(len(data) + 1)]
    if kind == 2:  # insert NULs
        k = rnd.randrange(len(data) + 1)
        return data[:k] + b"\0" * rnd.randint(1, 3) + data[k:]
    lines = data.split(b"\n")
    if kind == 3:  # huge numbers in the size line (or the banner's neighbour)
        k = next((i for i, ln in enumerate(lines) if ln and not ln.startswith(b"%")), len(lines) - 1)
        words = lines[k].split() or [b"1"]
        words[rnd.randrange(len(words))] = rnd.choice(HUGE).encode()
        lines[k] = b" ".join(words)
        return b"\n".join(lines)
    if kind == 4:  # a random token replaces or joins a word
        k = rnd.randrange(len(lines))
        words = lines[k].split(b" ")
        tok = rnd.choice(TOKENS).encode("utf-8")
        if rnd.random() < 0.5:
            words[rnd.randrange(len(words))] = tok
        else:
            words.insert(rnd.randrange(len(words) + 1), tok)
        lines[k] = b" ".join(words)
        return b"\n".join(lines)
    if kind == 5:  # drop or duplicate a line
        k = rnd.randrange(len(lines))
        if rnd.random() < 0.5:
            del lines[k]
        else:
            lines.insert(k, lines[k])
        return b"\n".join(lines)
    words = data.split(b" ")  # swap two words
    i, j = rnd.randrange(len(words)), rnd.randrange(len(words))
    words[i], words[j] = words[j], words[i]
    return b" ".join(words)


def _seeds_bs(d: Path) -> list[Path]:
    rng = np.random.default_rng(1)
    M = rng.integers(0, 3, size=(6, 6)).astype(float)
    out = []
    for k, name in enumerate(["CSR", "COO", "DCSC", "DenseRowMajor", "BSR[2,2]", "DIA"]):
        p = d / f"bs{k}.npz"
        io.save(p, asarray(M, name), compress=k % 2 == 1)
        out.append(p)
    return out


WEIRD = [
    None, True, -1, 0, 1, 2**31, 2**63, 2**64, 10**30, 1.5, "", "x", "int64", "iso[int8]", "complex[float64]",
    [], [1], [2**62, 2**62], [-1, 3], ["a"], {}, {"level": {}}, {"level_desc": "dense"}, [[[]]],
]  # fmt: skip


def _mutate_npz(path: Path, rnd: random.Random) -> bytes:
    data = path.read_bytes()
    kind = rnd.randrange(5)
    if kind == 0:  # raw byte flips anywhere in the zip
        b = bytearray(data)
        for _ in range(rnd.randint(1, 6)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        return bytes(b)
    if kind == 1:
        return data[: rnd.randrange(len(data) + 1)]
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    desc = json.loads(str(arrays.pop("binsparse")))
    if kind == 2 and rnd.random() < 0.4:  # an optional key, present with an odd value
        bs = desc["binsparse"]
        key = rnd.choice(["structure", "fill", "index_base", "custom", "number_of_stored_values", "shape"])
        bs[key] = rnd.choice([*WEIRD, "symmetric_lower", "hermitian_upper", {"transpose": rnd.choice(WEIRD)}])
        if rnd.random() < 0.3:
            bs["data_types"]["values"] = "iso[float64]"
            arrays["values"] = arrays["values"][:1]
    elif kind == 2:  # a random value somewhere in the descriptor
        node, key = desc, "binsparse"
        while isinstance(node.get(key), dict) and node[key] and rnd.random() < 0.9:
            node = node[key]
            key = rnd.choice(list(node))
        node[key] = rnd.choice(WEIRD)
    elif kind == 3:  # an array: another dtype, length, shape or out-of-range values
        name = rnd.choice(list(arrays))
        a = arrays[name]
        choice = rnd.randrange(5)
        if choice == 0:
            arrays[name] = a.astype(rnd.choice([np.float64, np.int8, np.uint64, np.complex128, np.bool_]))
        elif choice == 1:
            arrays[name] = a[: rnd.randrange(a.size + 1)] if a.ndim else a
        elif choice == 2:
            arrays[name] = np.concatenate([a.reshape(-1), a.reshape(-1)]).reshape(2, -1)
        elif choice == 3:
            arrays[name] = np.full(a.shape, rnd.choice([-5, 2**31 - 1, 10**6]), dtype=np.int64)
        else:
            del arrays[name]
    buf = _io.BytesIO()
    np.savez(buf, binsparse=np.asarray(json.dumps(desc)), **arrays)
    raw = buf.getvalue()
    if kind == 4:  # a member whose .npy header declares a huge shape
        out = _io.BytesIO()
        with zipfile.ZipFile(_io.BytesIO(raw)) as zin, zipfile.ZipFile(out, "w") as zout:
            victim = rnd.choice([n for n in zin.namelist() if n != "binsparse.npy"])
            for n in zin.namelist():
                member = zin.read(n)
                if n == victim:
                    member = member.replace(b"'shape': (", f"'shape': ({rnd.choice(HUGE[:5])}, ".encode(), 1)
                zout.writestr(n, member)
        raw = out.getvalue()
    return raw


def _run(paths: list[Path]) -> list[dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    started = [r["file"] for r in records if r.get("start")]
    assert proc.returncode == 0, (
        f"the reader process died (exit {proc.returncode}) on {started[-1] if started else '?'}:\n"
        f"{proc.stderr[-3000:]}"
    )
    results = [r for r in records if "result" in r]
    assert len(results) == len(paths)
    return results


def _assert_only_ust_errors(results: list[dict[str, object]], tmp: Path) -> None:
    escaped = [r for r in results if r["result"] != "ok" and not r["ust"]]
    assert not escaped, "\n".join(
        f"{r['file']}: {r['result']}: {r['message']}\n  {Path(str(r['file'])).read_bytes()[:300]!r}"
        for r in escaped[:10]
    )


def test_fuzz_matrix_market(tmp_path: Path) -> None:
    rnd = random.Random(20240611)
    seeds = _seeds_mm(tmp_path)
    paths = []
    for k in range(N_MUTANTS):
        seed = rnd.choice(seeds).read_bytes()
        data = _mutate_text(seed, rnd)
        if rnd.random() < 0.3:
            data = _mutate_text(data, rnd)
        p = tmp_path / f"f{k}.mtx"
        p.write_bytes(data)
        paths.append(p)
    for k in range(N_MUTANTS // 5):  # corrupt and truncated archives
        z = gzip.compress(rnd.choice(seeds).read_bytes())
        z = z[: rnd.randrange(len(z))] if rnd.random() < 0.5 else _mutate_text(z, rnd)
        p = tmp_path / f"g{k}.mtx.gz"
        p.write_bytes(z)
        paths.append(p)
    results = _run(paths)
    _assert_only_ust_errors(results, tmp_path)
    assert sum(r["result"] == "ok" for r in results) > 0  # the mutations are not all fatal
    assert sum(r["result"] != "ok" for r in results) > len(paths) // 4


def test_fuzz_binsparse(tmp_path: Path) -> None:
    rnd = random.Random(7)
    seeds = _seeds_bs(tmp_path)
    paths = []
    for k in range(N_MUTANTS):
        p = tmp_path / f"b{k}.npz"
        p.write_bytes(_mutate_npz(rnd.choice(seeds), rnd))
        paths.append(p)
    results = _run(paths)
    _assert_only_ust_errors(results, tmp_path)
    assert sum(r["result"] != "ok" for r in results) > len(paths) // 4


def test_fuzz_hdf5(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    rnd = random.Random(11)
    io.save(tmp_path / "seed.h5", asarray(np.eye(5) * 2, "CSR"))
    io.save(tmp_path / "seedz.h5", asarray(np.eye(5) * 2, "COO"), compress=True)
    seeds = [(tmp_path / "seed.h5").read_bytes(), (tmp_path / "seedz.h5").read_bytes()]
    paths = []
    for k in range(N_MUTANTS // 3):
        data = bytearray(rnd.choice(seeds))
        if rnd.random() < 0.3:
            data = data[: rnd.randrange(len(data))]
        else:  # flips after the superblock: a wrecked superblock is only "not HDF5"
            for _ in range(rnd.randint(1, 4)):
                data[rnd.randrange(64, len(data))] = rnd.randrange(256)
        p = tmp_path / f"h{k}.h5"
        p.write_bytes(bytes(data))
        paths.append(p)
    _assert_only_ust_errors(_run(paths), tmp_path)


def test_worker_reports_good_files(tmp_path: Path) -> None:
    """The harness itself: good files read as "ok", a broken one as a ust error."""
    t = Tensor(
        (2, 2), "COO", np.array([-0.0]), pos=[np.array([0, 1]), None], crd=[np.array([0]), np.array([1])]
    )
    io.mmwrite(tmp_path / "a.mtx", t)
    io.save(tmp_path / "a.npz", t)
    (tmp_path / "b.mtx").write_bytes(b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\0\0\n")
    res = _run([tmp_path / "a.mtx", tmp_path / "a.npz", tmp_path / "b.mtx"])
    assert [r["result"] for r in res] == ["ok", "ok", "FileFormatError"]
