"""ust's kernel libraries load the OpenMP runtime with idle threads asleep (OMP_WAIT_POLICY=PASSIVE)
unless the user chose a policy: spinning threads would hold a core that the BLAS threads of the
NumPy calls between two kernels (a Krylov solver's dot products) then wait for."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ust.backends.generated.compile_c import find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler")

PROBE = (
    "import numpy as np, scipy.sparse as sp, ust, os\n"
    "A = ust.asarray(sp.random_array((300, 300), density=0.05, format='csr', rng=0),"
    " format='(i, j) -> (i : compressed, j : compressed)')\n"
    "ust.matmul(A, np.ones(300), options={'route': 'generated-c'})\n"
    "print(os.environ.get('OMP_WAIT_POLICY'))\n"
)


def _run(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_kernels_load_openmp_with_a_passive_wait_policy() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert _run(env) == "PASSIVE"


def test_a_users_policy_is_kept() -> None:
    assert _run({**os.environ, "OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"
