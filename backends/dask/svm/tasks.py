"""What the workers compute for the SVM backend: kernel blocks times coefficients.

Every task reads its rows of X from the fit store (``read_chunk``) and returns
only its slice of the result, never a kernel block. Kernel blocks are formed
``COLUMN_BLOCK`` columns at a time in one reused buffer per worker thread
(``backends.dask.blocks.kernel_block``).
"""

import numpy as np

from backends.dask.blocks import product_rows
from backends.dask.runtime import read_chunk
from kernelref.svm import problems
from kernelref.svm.solver import solve


def product_chunk(ref, i, kernel, shift, Y, coef):
    """Worker task: rows of chunk i of k(X, Y) @ coef (label ``svm-gradient``)."""
    return product_rows(read_chunk(ref, i) - shift, kernel, Y, coef)


def product_chunk_at(ref, i, kernel, shift, rows, coef):
    """Worker task: rows of chunk i of k(X, X[rows]) @ coef, `rows` sorted indices
    of the stored X. The worker gathers X[rows] from its cached chunks, so a long
    list of support vectors crosses the network as indices, not as vectors."""
    return product_rows(
        read_chunk(ref, i) - shift, kernel, gather_rows(ref, rows) - shift, coef
    )


def gather_rows(ref, indices):
    """Rows `indices` (sorted) of the stored X, read chunk by chunk."""
    chunk = indices // ref.chunk_size
    parts = []
    for c in np.unique(chunk):
        rows = read_chunk(ref, int(c))
        parts.append(rows[indices[chunk == c] - c * ref.chunk_size])
    return np.concatenate(parts) if parts else np.empty((0, 0))


def solve_part(ref, kernel, samples, qp, tol):
    """Worker task: solve `qp`, whose ``src`` indexes the stored rows `samples`,
    by the reference SMO; returns its ``Solution``."""
    rows = problems.KernelRows(kernel, gather_rows(ref, samples))
    return solve(qp, rows, tol=tol, shrinking=True)
