"""What the workers compute for the SVM backend: kernel blocks times coefficients.

Every task reads its rows of X from the fit store (``read_chunk``) and returns
only its slice of the result, never a kernel block. Kernel blocks are formed
``COLUMN_BLOCK`` columns at a time in one reused buffer per worker thread
(``backends.dask.blocks.kernel_block``). Sparse X is stored and read as CSR
rows and never centred (a shift would make it dense): its shift is None, and
its blocks come from sparse products split over the frequent columns, a
dense BLAS product on those and a sparse one on the rest
(``backends.dask.blocks.sparse_product_rows``).
"""

import numpy as np
import scipy.sparse

from backends.dask.blocks import product_rows, sparse_dot
from backends.dask.runtime import read_chunk
from kernelref.svm import problems
from kernelref.svm.solver import solve


def shifted(X, shift):
    """X − shift, or X itself for shift None (sparse X, never centred)."""
    return X if shift is None else X - shift


def product_chunk(ref, i, kernel, shift, Y, coef):
    """Worker task: rows of chunk i of k(X, Y) @ coef (label ``svm-gradient``)."""
    return product_rows(shifted(read_chunk(ref, i), shift), kernel, Y, coef)


def product_chunk_at(ref, i, kernel, shift, rows, coef):
    """Worker task: rows of chunk i of k(X, X[rows]) @ coef, `rows` sorted indices
    of the stored X. The worker gathers X[rows] from its cached chunks, so a long
    list of support vectors crosses the network as indices, not as vectors."""
    return product_rows(
        shifted(read_chunk(ref, i), shift),
        kernel,
        shifted(gather_rows(ref, rows), shift),
        coef,
    )


def linear_chunk(ref, i, columns, values):
    """Worker task: rows of chunk i of X w for the linear kernel, w the sparse
    vector (`columns`, `values`) of ``blocks.sparse_combination``. For the
    linear kernel k(X, Y) @ coef = X (Yᵀ coef), so the update of
    ``svm-gradient-update`` is one pass over the chunk's stored entries with
    Δw = Σ_s Δα_s y_s x_s (as w of ``svm-hard-stationarity``) instead of
    len(Y) kernel columns."""
    return sparse_dot(read_chunk(ref, i), columns, values)


def gather_rows(ref, indices):
    """Rows `indices` (sorted) of the stored X, read chunk by chunk (CSR for
    sparse X)."""
    chunk = indices // ref.chunk_size
    parts = []
    for c in np.unique(chunk):
        rows = read_chunk(ref, int(c))
        parts.append(rows[indices[chunk == c] - c * ref.chunk_size])
    if ref.sparse:
        if not parts:
            return scipy.sparse.csr_matrix((0, read_chunk(ref, 0).shape[1]))
        return scipy.sparse.vstack(parts, format="csr")
    return np.concatenate(parts) if parts else np.empty((0, 0))


def solve_part(ref, kernel, samples, qp, tol):
    """Worker task: solve `qp`, whose ``src`` indexes the stored rows `samples`,
    by the reference SMO; returns its ``Solution``."""
    rows = problems.KernelRows(kernel, gather_rows(ref, samples))
    return solve(qp, rows, tol=tol, shrinking=True)
