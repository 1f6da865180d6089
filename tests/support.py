"""The one table of standard 2-D formats the tests are parametrised from (DESIGN: a support
table drives the tests); each test file adds the variants it needs on top."""

from __future__ import annotations

#: The standard library's sparse 2-D formats without parameters, in library order.
SPARSE_2D = ["CSR", "CSC", "COO", "DCSR", "DCSC", "CROW", "CCOL", "DIA", "DIAI"]
#: Blocked standard formats at the block sizes the tests use by default.
BLOCKED_2D = ["BSR[2,2]", "BSR[2,3]", "BSC[2,2]"]
#: The all-dense 2-D layouts.
DENSE_2D = ["DenseRowMajor", "DenseColMajor"]
STANDARD_2D = [*SPARSE_2D, *BLOCKED_2D, *DENSE_2D]
