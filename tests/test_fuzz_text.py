"""Seeded random mutations of every text ust reads -- format declarations, epilogues, saved
plans -- may be refused, but only with ust errors, and the process survives.

The loop runs in a child process (a crash, a stack overflow or a hang there cannot take pytest
down) and reports, as JSON, how many inputs it tried and every exception class it saw; the test
checks the exit code and that each class is a :class:`ust.UstError`.  A fixed seed keeps CI
deterministic (a few seconds); ``UST_FUZZ_SEED`` / ``UST_FUZZ_ROUNDS`` explore further.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import ust

_CHILD = textwrap.dedent(
    r"""
    import json, logging, os, random, sys, tempfile, traceback, warnings
    from importlib import resources

    import numpy as np
    import scipy.sparse as sp

    import ust
    from ust import dense
    from ust.codegen.epilog import compile_epilog

    warnings.simplefilter("ignore")  # overflow in an epilogue on purpose, etc.
    logging.disable(logging.CRITICAL)
    seed, rounds = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    seen = {}      # exception class (module.qualname) -> count
    escaped = []   # non-ust exceptions: (where, class, message, text excerpt, traceback tail)
    tried = {}

    def record(where, text, fn):
        tried[where] = tried.get(where, 0) + 1
        try:
            fn()
        except ust.UstError as exc:
            key = f"{type(exc).__module__}.{type(exc).__qualname__}"
            seen[key] = seen.get(key, 0) + 1
            str(exc)  # the message itself must not fail
        except BaseException as exc:  # noqa: BLE001 - the point of the exercise
            if isinstance(exc, KeyboardInterrupt):
                raise
            key = f"{type(exc).__module__}.{type(exc).__qualname__}"
            seen[key] = seen.get(key, 0) + 1
            if len(escaped) < 20:
                escaped.append([where, key, str(exc)[:300], repr(text)[:300],
                                traceback.format_exc().splitlines()[-6:]])

    # ------------------------------------------------------------------ mutation operators
    TOKENS = ["(", ")", "[", "]", "{", "}", "<", ">", ",", ":", "=", "->", "+", "-", "*", "/", "**",
              "//", "%", "floordiv", "mod", "dense", "compressed", "singleton", "range", "batch",
              "loose_compressed", "structured", "nonunique", "nonordered", "soa", "format", "map",
              "#sparse_tensor.encoding", "posWidth", "i", "j", "k", "y", "max", "min", "where", "exp",
              "log", "sqrt", "abs", "tanh", "0", "1", "4", "-1", "1e308", "1e999", ".5", "9" * 30,
              "9" * 5000, "0" * 50 + "7", " ", "\n", "\t", "#", "\x00", "é", "\ud7ff", "\\"]

    def mutate(text):
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(9)
            at = rng.randint(0, len(text))
            if op == 0:
                text = text[:at] + rng.choice(TOKENS) + text[at:]
            elif op == 1 and text:
                end = min(len(text), at + rng.randint(1, 8))
                text = text[:at] + text[end:]
            elif op == 2 and text:
                end = min(len(text), at + rng.randint(1, 8))
                text = text[:at] + rng.choice(TOKENS) + text[end:]
            elif op == 3 and text:
                lo = rng.randint(0, len(text) - 1)
                piece = text[lo:lo + rng.randint(1, 30)]
                text = text[:at] + piece * rng.choice([2, 10, 300]) + text[at:]
            elif op == 4:
                n = rng.choice([3, 99, 101, 400, 6000])
                text = text[:at] + "(" * n + text[at:] + ")" * n
            elif op == 5:
                text = text[:at]
            elif op == 6 and text:
                c = chr(rng.choice([rng.randint(0, 127), rng.randint(128, 0x10FFFF)]))
                if 0xD800 <= ord(c) <= 0xDFFF:
                    c = "?"
                text = text[:at] + c + text[at + 1:]
            elif op == 7:
                text = text[:at] + rng.choice(["+ y", "* 2", "-", "max(y, ", "y ** "]) * rng.choice([1, 50, 150, 4000]) + text[at:]
            else:
                text = rng.choice(TOKENS) + text
        return text

    # ------------------------------------------------------------------ formats
    std = resources.files("ust.formats").joinpath("standard.ust").read_text(encoding="utf-8")
    decls = [line for line in std.splitlines() if line.startswith("format")]
    maps = [d.split("=", 1)[1].strip() for d in decls if "[" not in d.split("=", 1)[0]]
    maps += ["#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed), posWidth = 32 }>",
             "(i, j) -> (i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)",
             "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4])"]
    names = ["CSR", "BSR[2, 3]", "BSR(2,3)", "NM[2, 4]", "DIA", "COO"]
    for _ in range(rounds):
        t = mutate(rng.choice(maps + names))
        record("format", t, lambda: ust.format(t))
        f = mutate(std if rng.random() < 0.2 else "\n".join(rng.sample(decls, 3)))
        record("parse_formats", f, lambda: ust.parse_formats(f))
    for bad in (None, b"CSR", 3, 2.5, ["CSR"], {"a": 1}, object()):
        record("format-type", bad, lambda: ust.format(bad))
        record("parse_formats-type", bad, lambda: ust.parse_formats(bad))

    # ------------------------------------------------------------------ epilogues
    a = ust.asarray(sp.random_array((6, 5), density=0.5, format="csr", random_state=0))
    x = np.linspace(-1.0, 1.0, 5)
    params = {"s": 2.0, "t": 0.5, "scale": -1.5, "bias": 0.25, "i": 0.0, "j": 3.0, "k": 1.0}
    seeds = ["max(y, 0)", "y * s", "where(y > t, y, 0)", "exp(-y) + abs(y) ** 2", "min(y, t) - sqrt(abs(y))",
             "tanh(y * scale) + bias", "log(1 + y * y)", "(y + 1) / (y - 2)", "-y", "y >= t"]
    for _ in range(rounds):
        e = mutate(rng.choice(seeds))
        record("epilog-matmul", e, lambda: ust.matmul(a, x, epilog=e, epilog_params=params))
        def emit():
            ep = compile_epilog(e)
            ep.to_c(real_type="float")
            ep.to_c(real_type="double", value_expr="acc", param_prefix="p_")
            ep.apply(np.linspace(-2, 2, 7), params)
        record("epilog-compile", e, emit)
    for bad in (None, 3, b"y", ["y"], {"y": 1}):
        record("epilog-type", bad, lambda: ust.matmul(a, x, epilog=bad))

    # ------------------------------------------------------------------ saved plans
    def garbage(depth=0):
        kind = rng.randrange(9)
        if kind == 0: return None
        if kind == 1: return rng.choice([True, False])
        if kind == 2: return rng.choice([0, -1, 7, 2**63, 2**200, 1.5, float("1e308")])
        if kind == 3: return rng.choice(["", "cpu", "outer:gABC", "generated-c", "scipy", "storage:g4",
                                         "\x00", "é" * 10, "9" * 100, "<i8", "O", "relu_bias"])
        if kind == 4 and depth < 4: return [garbage(depth + 1) for _ in range(rng.randint(0, 4))]
        if kind == 5 and depth < 4: return {rng.choice(["dtype", "shape", "base64", "x", "route"]): garbage(depth + 1)
                                             for _ in range(rng.randint(0, 4))}
        if kind == 6: return {"dtype": rng.choice(["<i8", "<u8", "O", ">f8", "V8", "<M8", 5]),
                              "shape": rng.choice([[8], [2, 4], [-1], "8", [2**62] * 2, []]),
                              "base64": rng.choice(["AAAA", "!!", "A" * 88, "", 3])}
        if kind == 7: return [[[[[]]]]]
        return rng.choice(["relu", "none", "bias", "C", "F", "numpy.matmul", "blas.gemm", "cublasLt"])

    def paths_in(doc, prefix=()):
        yield prefix
        if isinstance(doc, dict):
            for k, v in doc.items():
                yield from paths_in(v, prefix + (k,))
        elif isinstance(doc, list):
            for i, v in enumerate(doc):
                yield from paths_in(v, prefix + (i,))

    def tamper(doc):
        doc = json.loads(json.dumps(doc))
        for _ in range(rng.randint(1, 3)):
            where = rng.choice(list(paths_in(doc)))
            if not where:
                return garbage()
            parent = doc
            for step in where[:-1]:
                parent = parent[step]
            action = rng.randrange(3)
            if action == 0 or isinstance(parent, list):
                parent[where[-1]] = garbage()
            elif action == 1:
                del parent[where[-1]]
            else:
                parent[rng.choice(["evil", "variant", "route", "algorithm", "shape"])] = garbage()
        return doc

    def byte_mutate(raw):
        raw = bytearray(raw)
        for _ in range(rng.randint(1, 6)):
            op = rng.randrange(4)
            at = rng.randrange(len(raw)) if raw else 0
            if op == 0 and raw: raw[at] = rng.randrange(256)
            elif op == 1: raw = raw[:at]
            elif op == 2: raw[at:at] = rng.choice([b"\xff\xfe", b"[" * 5000, b'"', b"9" * 5000, b"\\u0000", b"{"])
            else: raw[at:at] = bytes(rng.randrange(256) for _ in range(8))
        return bytes(raw)

    tmp = tempfile.mkdtemp()
    makers = {}
    with ust.Matmul(a, x) as mm:
        mm.plan()
        mm.save_plan(os.path.join(tmp, "matmul.json"))
    makers["matmul"] = lambda p: ust.Matmul.load_plan(p, a, x).execute()
    da, db = np.linspace(-1, 1, 6).reshape(3, 2), np.ones((2, 4))
    with dense.Matmul(da, db) as dm:
        dm.plan(epilog="relu")
        dm.save_plan(os.path.join(tmp, "dense.matmul.json"))
    def load_dense(p):
        with dense.Matmul(da, db) as m:
            m.load_plan(p)
            m.execute()
    makers["dense.matmul"] = load_dense
    with dense.FFT(np.arange(8.0)) as ff:
        ff.plan()
        ff.save_plan(os.path.join(tmp, "dense.fft.json"))
    def load_fft(p):
        with dense.FFT(np.arange(8.0)) as f:
            f.load_plan(p)
            f.execute()
    makers["dense.fft"] = load_fft

    target = os.path.join(tmp, "tampered.json")
    for name, load in makers.items():
        with open(os.path.join(tmp, f"{name}.json"), "rb") as fh:
            good = fh.read()
        doc = json.loads(good)
        for r in range(rounds // 3):
            if r % 2:
                data = byte_mutate(good)
            else:
                try:
                    data = json.dumps(tamper(doc)).encode()
                except (ValueError, OverflowError):
                    continue
            with open(target, "wb") as fh:
                fh.write(data)
            record(f"plan-{name}", data[:200], lambda: load(target))

    print(json.dumps({"tried": tried, "seen": seen, "escaped": escaped}))
    """
)


def _ust_error_class(qualified: str) -> bool:
    module, _, name = qualified.rpartition(".")
    obj = sys.modules.get(module)
    cls = getattr(obj, name, None) if obj is not None else None
    return isinstance(cls, type) and issubclass(cls, ust.UstError)


@pytest.mark.parametrize("seed", [int(os.environ.get("UST_FUZZ_SEED", "20240917"))])
def test_mutated_texts_raise_only_ust_errors(seed: int) -> None:
    rounds = int(os.environ.get("UST_FUZZ_ROUNDS", "300"))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(seed), str(rounds)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, f"the fuzz process died (exit {out.returncode}):\n{out.stderr[-4000:]}"
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert not report["escaped"], json.dumps(report["escaped"], indent=1)
    import ust.runtime.stateful  # noqa: F401 - PlanFileError's module, for the class check

    others = [cls for cls in report["seen"] if not _ust_error_class(cls)]
    assert not others, f"non-ust exceptions escaped: {others}"
    tried = report["tried"]
    for where in ("format", "parse_formats", "epilog-matmul", "epilog-compile", "plan-matmul",
                  "plan-dense.matmul", "plan-dense.fft"):  # fmt: skip
        assert tried.get(where, 0) >= rounds // 4, tried
    # the mutations are hostile enough to be refused often, for several reasons
    assert sum(report["seen"].values()) > rounds and len(report["seen"]) >= 4, report["seen"]
