"""Kernel columns of sparse X, each computed the same way in any company, and
kept on the workers between outer iterations.

The block decomposition moves about a thousand variables per outer iteration
and the gradient update (label ``svm-gradient-update``) needs a kernel column
k(X, x_u) of N entries for each. On text-like data (``bench_dask_sparse``,
N = 20 000, RBF) the 50 outer iterations moved 62 369 variables but only
10 753 distinct ones: the free variables of one working set are moved again
in the next. The reference's SMO keeps such rows in its row cache; here each
worker keeps the columns of its chunks (``COLUMN_CACHE_BYTES``, least recently
used first out), the decomposition's counterpart of libsvm's kernel cache.

A cached column must be the column a fresh computation would give, bit for
bit, or a fit's digits would depend on which worker ran which chunk before
(and a resumed fit, with empty caches, would differ from an uninterrupted
one). So a column's entries depend on x_u and the chunk alone, not on the
other columns computed with it (``kernel_columns``):

- the frequent columns F, on which the inner products go to one dense BLAS
  product, are chosen once per fit from X's column counts
  (``frequent_columns``), not per product as ``blocks.column_codes`` does;
- the rest of each inner product is summed by ``np.bincount`` (or scipy's
  product, the same sums in the same order), over the row's stored entries in
  column order;
- the dense products run on fixed row blocks (``ROW_BLOCK``) and on a number
  of columns that is a multiple of ``COLUMN_MULTIPLE``, the block's last
  column repeated to make it up (one column would go to a matrix-vector
  product, whose sums are ordered differently, and OpenBLAS 0.3.31's Haswell
  DGEMM sums the last ``width % 8`` columns of a wide product in another order
  than the rest: 2.2e-16 apart); a test checks that a column computed alone
  and among others is the same to the last bit.
"""

import collections
import hashlib
import threading

import numpy as np
import scipy.sparse

from backends.dask.blocks import (
    _ELEMENTWISE,
    DENSE_PAIR_SHARE,
    MAX_DENSE_COLUMNS,
    _positions,
    _sparse_norms,
    add_sparse_product,
    kept_entries,
    stored_rows,
)
from backends.dask.runtime import read_chunk

#: Bytes of kernel columns a worker keeps (all chunks together), at most: a
#: worker keeps no more than ``MEMORY_SHARE`` of its ``memory_limit``
#: (`column_budget`). The reference keeps up to 4 GiB of Gram rows
#: (``ROW_CACHE_BYTES``).
COLUMN_CACHE_BYTES = 2**30
#: The share of a worker's ``memory_limit`` its kept columns may take: the rest
#: is for the tasks' own blocks, so that a worker of a few hundred MiB is not
#: paused (or killed) by columns it merely keeps.
MEMORY_SHARE = 0.25

#: Rows of a dense product: fixed, so that an entry's sums do not depend on
#: how many columns are computed with it.
ROW_BLOCK = 256
#: Columns of a kernel block formed at once.
COLUMN_BLOCK = 1024
#: Every dense product's number of columns is a multiple of this, so that each
#: column goes through the same inner kernel of the BLAS: the micro-kernels of
#: OpenBLAS's DGEMM take 4 or 8 columns at a time and a tail of fewer is summed
#: differently (measured: a product of 300 columns gave its last 4 other bits
#: than products of 2 or 304).
COLUMN_MULTIPLE = 8


def elementwise(kernel):
    """The kernel's elementwise map of ``blocks.kernel_block``, or None for
    kernels that are not a map of inner products (they keep the plain path)."""
    if type(kernel).__module__ != "kernelref.kernels.vector":
        return None
    return _ELEMENTWISE.get(type(kernel).__name__)


def frequent_columns(X):
    """The columns of CSR X stored by more than ``DENSE_PAIR_SHARE`` of the
    pairs of rows (at most ``MAX_DENSE_COLUMNS``, the most shared), sorted:
    one set for the whole fit. O(stored entries); no D-long array."""
    columns, counts = np.unique(X.indices, return_counts=True)
    share = (counts / max(1, X.shape[0])) ** 2
    frequent = np.flatnonzero(share > DENSE_PAIR_SHARE)
    if len(frequent) > MAX_DENSE_COLUMNS:
        top = np.argsort(-share[frequent], kind="stable")[:MAX_DENSE_COLUMNS]
        frequent = np.sort(frequent[top])
    return columns[frequent].astype(np.int64)


class SplitRows:
    """CSR rows split on the `frequent` columns: X_F dense (rows × F), the rest
    CSR in X's own columns (``rest``), and the rows' squared norms."""

    def __init__(self, X, frequent):
        X = X.tocsr()
        code = _positions(frequent, X.indices, X.shape[1])
        row = stored_rows(X)
        dense = code >= 0
        # toarray sums duplicate entries, as the sparse product does.
        self.F = kept_entries(X, row, dense, code, len(frequent)).toarray()
        self.rest = kept_entries(X, row, ~dense, X.indices, X.shape[1])
        self.norms = _sparse_norms(X)
        self.nbytes = self.F.nbytes + X.data.nbytes * 3

    def __len__(self):
        return self.F.shape[0]


def _renumbered(rest, columns):
    """CSR `rest` on `columns` only (sorted), its columns renumbered."""
    code = _positions(columns, rest.indices, rest.shape[1])
    keep = code >= 0
    n = rest.shape[0]
    row = np.repeat(np.arange(n), np.diff(rest.indptr))
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(row[keep], minlength=n), out=indptr[1:])
    return scipy.sparse.csr_matrix(
        (rest.data[keep], code[keep], indptr), shape=(n, len(columns))
    )


def kernel_columns(kernel, X, Y, map_=None):
    """k(X, Y)ᵀ (len(Y) × len(X)) for ``SplitRows`` X and Y split on the same
    frequent columns: row u is the kernel column k(X, y_u), whose digits do not
    depend on the other rows of Y (module docstring)."""
    map_ = map_ or elementwise(kernel)
    n, m = len(X), len(Y)
    out = np.empty((m, n))
    if m == 0:
        return out
    shared = np.unique(Y.rest.indices)
    X_R = _renumbered(X.rest, shared)
    Y_R = _renumbered(Y.rest, shared)
    for c0 in range(0, m, COLUMN_BLOCK):
        cols = np.arange(c0, min(c0 + COLUMN_BLOCK, m))
        width = len(cols)
        cols = np.append(cols, np.repeat(cols[-1], -width % COLUMN_MULTIPLE))
        Y_F = np.ascontiguousarray(Y.F[cols])
        Y_Rt = Y_R[cols].T.tocsr()
        for r0 in range(0, n, ROW_BLOCK):
            rows = slice(r0, min(r0 + ROW_BLOCK, n))
            G = X.F[rows] @ Y_F.T
            add_sparse_product(G, X_R[rows], Y_Rt)
            block = map_(kernel, G, X.norms[rows], Y.norms[cols])
            out[c0 : c0 + width, rows] = block[:, :width].T
    return out


class _ColumnCache:
    """A worker's kernel columns by (fit, chunk, sample), least recently used
    out beyond ``COLUMN_CACHE_BYTES``; and the chunks' ``SplitRows``."""

    def __init__(self, limit):
        self.limit, self.size = limit, 0
        self.columns = collections.OrderedDict()
        self.splits = collections.OrderedDict()
        self.lock = threading.Lock()

    def split(self, ref, i, frequent):
        key = (ref, i, hashlib.sha1(frequent.tobytes()).hexdigest())
        with self.lock:
            if key in self.splits:
                self.splits.move_to_end(key)
                return self.splits[key]
        value = SplitRows(read_chunk(ref, i), frequent)
        with self.lock:
            self.splits[key] = value
            while len(self.splits) > 16:
                self.splits.popitem(last=False)
        return value

    def get(self, key):
        with self.lock:
            column = self.columns.get(key)
            if column is not None:
                self.columns.move_to_end(key)
            return column

    def put(self, key, column):
        with self.lock:
            if key in self.columns:
                return
            self.columns[key] = column
            self.size += column.nbytes
            while self.size > self.limit and self.columns:
                _, old = self.columns.popitem(last=False)
                self.size -= old.nbytes


_cache = _ColumnCache(COLUMN_CACHE_BYTES)


def column_budget():
    """The bytes of columns this process may keep: ``COLUMN_CACHE_BYTES``, or
    ``MEMORY_SHARE`` of the Dask worker's ``memory_limit`` if that is less (a
    worker without a limit, or no worker: ``COLUMN_CACHE_BYTES``)."""
    try:
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except (ImportError, ValueError, AttributeError):
        return COLUMN_CACHE_BYTES
    if not limit:
        return COLUMN_CACHE_BYTES
    return min(COLUMN_CACHE_BYTES, int(MEMORY_SHARE * limit))


def release(token):
    """Forget this worker's kept columns and split chunks of the data whose
    ``ChunkRef.token`` is `token` (one fit's X): run on every worker when the fit
    ends (``release_columns``)."""
    with _cache.lock:
        for key in [key for key in _cache.columns if key[0][0] == token]:
            _cache.size -= _cache.columns.pop(key).nbytes
        for key in [key for key in _cache.splits if key[0].token == token]:
            del _cache.splits[key]


def release_columns(client, ref):
    """At the end of a fit, whole or interrupted: every worker forgets the
    columns it kept of the fit's data `ref` (up to ``MEMORY_SHARE`` of its
    memory, which they held after the fit until evicted). A worker that fails
    to answer (gone with its columns) is passed over."""
    client.run(release, ref.token, on_error="ignore")


#: Columns multiplied by their coefficients at once (a fixed partition of the
#: moved samples, so the sums are the same with or without cached columns).
PRODUCT_COLUMNS = 256


def cached_product_chunk(ref, i, kernel, frequent, Y, samples, coef):
    """Worker task: rows of chunk i of k(X, Y) @ coef for sparse X, Y the rows
    of the stored samples `samples` (label ``svm-gradient-update``). Columns
    of samples kept from earlier rounds are reused, the others computed
    together (``kernel_columns``) and kept."""
    X = _cache.split(ref, i, frequent)
    _cache.limit = min(_cache.limit, column_budget())
    fit = (ref.token, repr(kernel), hashlib.sha1(frequent.tobytes()).hexdigest())
    keys = [(fit, i, int(s)) for s in samples]
    found = [_cache.get(key) for key in keys]
    missing = [j for j, column in enumerate(found) if column is None]
    for c0 in range(0, len(missing), COLUMN_BLOCK):
        batch = missing[c0 : c0 + COLUMN_BLOCK]
        computed = kernel_columns(kernel, X, SplitRows(Y[batch], frequent))
        for j, column in zip(batch, computed):
            found[j] = column.copy()
            _cache.put(keys[j], found[j])
    out = np.zeros(len(X))
    for c0 in range(0, len(samples), PRODUCT_COLUMNS):
        block = np.stack(found[c0 : c0 + PRODUCT_COLUMNS])
        out += coef[c0 : c0 + PRODUCT_COLUMNS] @ block
    return out
