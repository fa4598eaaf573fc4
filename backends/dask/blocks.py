"""Square blocks of a Gram matrix: their indices, and the task that computes
one block on a worker and writes it to a Zarr store.

Block (i, j) holds K[rows i, rows j] where block row i is the slice
``[i·c, min((i+1)·c, n))`` for chunk edge c; the last block row and column are
ragged when c does not divide n. A symmetric Gram matrix needs only the blocks
with i ≥ j (label ``gram-lower-blocks``): block (i, j) for i < j is the
transpose of block (j, i).
"""

import functools
import threading

import numpy as np
import scipy.sparse

from backends.dask.integrity import record_chunk


def n_blocks(n, chunk_size):
    """⌈n / c⌉ block rows (and columns) for n samples in chunks of edge c."""
    return -(-n // chunk_size)


def block_slice(i, n, chunk_size):
    """The rows of block i: ``[i·c, min((i+1)·c, n))``."""
    return slice(i * chunk_size, min((i + 1) * chunk_size, n))


def lower_blocks(n_block_rows):
    """The (i, j) with i ≥ j, row by row: the blocks a symmetric store keeps."""
    return [(i, j) for i in range(n_block_rows) for j in range(i + 1)]


#: Kernel entries one task computes, about 60 ms of work: enough that the
#: scheduler's few milliseconds per task stay small beside it.
TASK_ENTRIES = 4 * 2**20

#: At least this many tasks per worker thread, to balance the load at the end
#: of a build and to lose little work when one is interrupted.
TASKS_PER_THREAD = 4


def batches(blocks, chunk_size, n_threads):
    """Split `blocks` into consecutive lists, one per task.

    Each list holds about ``TASK_ENTRIES`` entries of K, but there are at
    least ``TASKS_PER_THREAD`` lists per thread while blocks last.
    """
    by_size = max(1, TASK_ENTRIES // chunk_size**2)
    by_count = max(1, -(-len(blocks) // (TASKS_PER_THREAD * n_threads)))
    size = min(by_size, by_count)
    return [blocks[start : start + size] for start in range(0, len(blocks), size)]


@functools.lru_cache(maxsize=8)
def _open_gram_array(path, build_token):
    """The store's array ``K`` opened for writing, once per worker and build.

    Opening reads the array's metadata (a few ms, as long as a small block's
    computation); the build token keys the cache so a store rebuilt at the
    same path is opened afresh. Every block is written in full, so zarr need
    not compare it to the fill value before writing.
    """
    import zarr

    return zarr.open_array(
        store=f"{path}/K", mode="r+", config={"write_empty_chunks": True}
    )


def write_blocks(path, build_token, X, kernel, blocks, chunk_size):
    """Worker task: compute each block (i, j) of k(X, X) in `blocks` and write
    it to the store.

    A block is zarr chunk (i, j) of the array ``K``, written whole and
    atomically (a temporary file renamed into place), so a chunk that exists
    is a finished block, even when the build was interrupted; its checksum is
    recorded after it (``backends.dask.integrity``), so a chunk without one is
    not trusted. Writing on the worker keeps the blocks off the network.
    Returns the number of blocks. X may be CSR (the kernel's sparse products).
    """
    n = X.shape[0]
    K_store = _open_gram_array(path, build_token)
    for i, j in blocks:
        rows, cols = block_slice(i, n, chunk_size), block_slice(j, n, chunk_size)
        # A diagonal block is k(X_i) with Y omitted, as the reference computes
        # the whole Gram matrix, so its diagonal is the kernel's own.
        K_store[rows, cols] = kernel(X[rows]) if i == j else kernel(X[rows], X[cols])
        record_chunk(K_store, (i, j))
    return len(blocks)


#: Kernels whose block k(X, Y) is one matrix product XYᵀ followed by an
#: elementwise map; ``kernel_block`` computes them in a caller's buffer.
def _map_linear(kernel, G, x_norms, y_norms):
    return G


def _map_polynomial(kernel, G, x_norms, y_norms):
    G *= kernel.gamma
    G += kernel.coef0
    return np.power(G, kernel.degree, out=G)


def _map_sigmoid(kernel, G, x_norms, y_norms):
    G *= kernel.gamma
    G += kernel.coef0
    return np.tanh(G, out=G)


def _map_rbf(kernel, G, x_norms, y_norms):
    # −γ‖x − y‖² = 2γ xᵀy − γ‖x‖² − γ‖y‖², clipped at 0 against rounding.
    G *= 2.0 * kernel.gamma
    G -= kernel.gamma * x_norms[:, None]
    G -= kernel.gamma * y_norms[None, :]
    np.minimum(G, 0.0, out=G)
    return np.exp(G, out=G)


_ELEMENTWISE = {
    "Linear": _map_linear,
    "Polynomial": _map_polynomial,
    "Sigmoid": _map_sigmoid,
    "RBF": _map_rbf,
}


def kernel_block(kernel, X, Y, out=None, x_norms=None, y_norms=None):
    """k(X, Y) by one matrix product and an elementwise map, written into `out`.

    `out` is a float64 buffer of at least len(X) × len(Y) entries (reused from
    call to call: first touching fresh memory costs more than the kernel
    itself); the result is a view of it. For the RBF kernel ‖x‖² and ‖y‖² may
    be passed (``x_norms``, ``y_norms``); the inputs should be centred (a
    common shift changes no distance) so that the expansion loses little to
    cancellation. Other kernels, and ``scipy.sparse`` X or Y (the kernels'
    own sparse products, never densified), are evaluated by ``kernel(X, Y)``.
    """
    elementwise = _ELEMENTWISE.get(type(kernel).__name__)
    if (
        elementwise is None
        or type(kernel).__module__ != "kernelref.kernels.vector"
        or scipy.sparse.issparse(X)
        or scipy.sparse.issparse(Y)
    ):
        block = kernel(X, Y)
        if out is None:
            return block
        view = out.reshape(-1)[: block.size].reshape(block.shape)
        view[...] = block
        return view
    shape = (len(X), len(Y))
    G = np.empty(shape) if out is None else out.reshape(-1)[: shape[0] * shape[1]]
    G = G.reshape(shape)
    np.matmul(X, Y.T, out=G)
    if elementwise is _map_rbf:
        x_norms = np.einsum("ij,ij->i", X, X) if x_norms is None else x_norms
        y_norms = np.einsum("ij,ij->i", Y, Y) if y_norms is None else y_norms
    return elementwise(kernel, G, x_norms, y_norms)


_buffers = threading.local()


def reusable_buffer(n_entries):
    """A float64 buffer of at least `n_entries`, kept per thread and reused."""
    buffer = getattr(_buffers, "value", None)
    if buffer is None or buffer.size < n_entries:
        buffer = np.empty(n_entries)
        _buffers.value = buffer
    return buffer


#: Entries of the kernel block formed at once: 2 MiB, so that the product, the
#: elementwise map and the multiplication by the coefficients all run in cache.
#: Measured here at 4096 × 2048: 2.5 ns per RBF entry in blocks of 256 × 1024,
#: 3.7 ns in blocks of 4096 × 1024 (each pass then goes to memory).
BLOCK_ENTRIES = 2**18
#: Columns of a block: at most this many, the rest of the budget in rows.
COLUMN_BLOCK = 1024


def product_rows(X, kernel, Y, coef):
    """k(X, Y) @ coef, forming the kernel in blocks of ``BLOCK_ENTRIES`` entries.

    `coef` is (m,) or (m, P); X and Y are centred by the same shift, or are
    both ``scipy.sparse`` CSR (uncentred: ``sparse_product_rows``).
    """
    if scipy.sparse.issparse(X):
        return sparse_product_rows(X, kernel, Y, coef)
    out = np.zeros((len(X),) + coef.shape[1:])
    width = min(COLUMN_BLOCK, max(1, len(Y)))
    height = max(1, BLOCK_ENTRIES // width)
    buffer = reusable_buffer(height * width)
    x_norms = np.einsum("ij,ij->i", X, X)
    y_norms = np.einsum("ij,ij->i", Y, Y)
    for first in range(0, len(X), height):
        rows = slice(first, first + height)
        for start in range(0, len(Y), width):
            cols = slice(start, start + width)
            block = kernel_block(
                kernel, X[rows], Y[cols], buffer, x_norms[rows], y_norms[cols]
            )
            out[rows] += block @ coef[cols]
    return out


#: A column of sparse X and Y goes to the dense part of their blocks
#: (``column_codes``) when more than this share of the pairs (x, y) both
#: store it: there it costs one BLAS multiply-add per kernel entry (~0.04 ns
#: here), in the sparse product ~10 ns per pair that shares it.
DENSE_PAIR_SHARE = 0.004
#: At most this many dense columns (a block's dense part is rows × this).
MAX_DENSE_COLUMNS = 512
#: The split costs ~10 ns per stored entry of X and Y (``column_codes``) and
#: saves ~15 ns per kernel entry on text: it is made for products of at least
#: this many kernel entries per stored entry.
SPLIT_ENTRIES_PER_STORED = 4

#: Up to this many columns (32 MB) a column's position is read from a
#: per-thread table of D entries (``_column_lookup``), beyond by a binary search.
LOOKUP_COLUMNS = 2**22

_lookups = threading.local()


def _column_lookup(d):
    """A per-thread int64 array of d entries, all −1 between uses."""
    lookup = getattr(_lookups, "value", None)
    if lookup is None or len(lookup) != d:
        lookup = np.full(d, -1, np.int64)
        _lookups.value = lookup
    return lookup


def _positions(columns, indices, d):
    """The position of each of `indices` in the sorted `columns`, −1 if absent."""
    if d <= LOOKUP_COLUMNS:
        lookup = _column_lookup(d)
        lookup[columns] = np.arange(len(columns))
        found = lookup[indices]
        lookup[columns] = -1
        return found
    found = np.searchsorted(columns, indices)
    hit = found < len(columns)
    hit[hit] = columns[found[hit]] == indices[hit]
    return np.where(hit, found, -1)


def column_codes(X, Y):
    """How CSR X and Y split (``split_columns``): the code of each stored entry
    of X and of Y, and F, R. A column's code is its position among the F
    frequent columns, those stored by more than ``DENSE_PAIR_SHARE`` of the
    pairs (x, y) (at most ``MAX_DENSE_COLUMNS`` of the most shared), or F + its
    position among the R other columns that both X and Y store, or −1 (a
    column one side does not store adds nothing to XYᵀ). On Zipf-like text a
    hundred or so columns hold most of the pairs' common entries. O(stored
    entries) per product (``_positions``: a table of D entries kept per thread
    up to ``LOOKUP_COLUMNS`` columns, a binary search beyond); a function of X
    and Y alone, so a block's digits do not depend on where it is computed."""
    columns, y_column, c_Y = np.unique(
        Y.indices, return_inverse=True, return_counts=True
    )
    x_column = _positions(columns, X.indices, X.shape[1])
    c_X = np.bincount(x_column[x_column >= 0], minlength=len(columns))
    share = (c_X / max(1, X.shape[0])) * (c_Y / max(1, Y.shape[0]))
    frequent = np.flatnonzero(share > DENSE_PAIR_SHARE)
    if len(frequent) > MAX_DENSE_COLUMNS:
        top = np.argsort(-share[frequent], kind="stable")[:MAX_DENSE_COLUMNS]
        frequent = np.sort(frequent[top])
    share[frequent] = 0.0
    rest = np.flatnonzero(share)
    code = np.full(len(columns) + 1, -1, np.int64)  # code[-1]: X's other columns
    code[frequent] = np.arange(len(frequent))
    code[rest] = len(frequent) + np.arange(len(rest))
    return code[x_column], code[y_column.ravel()], len(frequent), len(rest)


def split_columns(X, code, F, R):
    """CSR X as (X_F, X_R): X_F dense (n × F) on the frequent columns, X_R CSR
    (n × R) on the other shared ones, renumbered as `code` (one per stored
    entry, ``column_codes``) says; X Yᵀ = X_F Y_Fᵀ + X_R Y_Rᵀ."""
    row = stored_rows(X)
    dense = (code >= 0) & (code < F)
    # toarray sums duplicate entries, as the sparse product does.
    X_F = kept_entries(X, row, dense, code, F).toarray()
    return X_F, kept_entries(X, row, code >= F, code - F, R)


def stored_rows(X):
    """The row of each stored entry of CSR X."""
    return np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))


def kept_entries(X, row, keep, indices, width):
    """CSR X's stored entries where `keep`, in columns `indices` (one per
    stored entry) of a matrix `width` wide; `row`: ``stored_rows(X)``."""
    n = X.shape[0]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(row[keep], minlength=n), out=indptr[1:])
    return scipy.sparse.csr_matrix(
        (X.data[keep], indices[keep], indptr), shape=(n, width)
    )


def add_sparse_product(G, X, Y_t):
    """G += X Y_t for CSR X (n × R) and Y_t (R × m: Yᵀ as CSR), G dense.

    Each stored x_rc meets the stored entries of row c of Y_t: the products
    are summed into G by ``np.bincount`` over their flat positions, which on
    sparse remainders (under one pair per entry of G) is faster than scipy's
    sparse product and the scatter of its result; beyond that, scipy's
    product, whose result has at most G's entries.
    """
    if not (X.nnz and Y_t.nnz):
        return
    n, m = G.shape
    c = X.indices
    first, length = Y_t.indptr[c], np.diff(Y_t.indptr)[c]
    n_pairs = int(length.sum())
    if n_pairs > G.size:
        R = X @ Y_t  # a row's columns are distinct
        offsets = np.repeat(np.arange(n) * m, np.diff(R.indptr))
        G.reshape(-1)[R.indices + offsets] += R.data
        return
    ends = np.cumsum(length)
    entry = np.arange(n_pairs) - np.repeat(ends - length - first, length)
    row = np.repeat(np.arange(n) * m, np.diff(X.indptr))
    flat = np.repeat(row, length) + Y_t.indices[entry]
    products = np.repeat(X.data, length) * Y_t.data[entry]
    G += np.bincount(flat, products, minlength=G.size).reshape(n, m)


def sparse_combination(Y, coef):
    """w = Yᵀ coef for CSR Y (m × D) as a sparse vector: its sorted stored
    columns and their values. O(stored entries of Y); no D-long array."""
    row = np.repeat(np.arange(Y.shape[0]), np.diff(Y.indptr))
    columns, entry = np.unique(Y.indices, return_inverse=True)
    values = np.bincount(entry.ravel(), Y.data * coef[row], minlength=len(columns))
    return columns, values


def sparse_dot(X, columns, values):
    """X w for CSR X and the sparse vector w of ``sparse_combination``: each
    row's stored entries that w also stores, multiplied and summed (in the
    row's order, by ``np.bincount``). O(stored entries of X); no D-long array
    beyond the per-thread column table of ``_positions``."""
    found = _positions(columns, X.indices, X.shape[1])
    hit = found >= 0
    row = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    return np.bincount(row[hit], X.data[hit] * values[found[hit]], minlength=X.shape[0])


def _sparse_norms(X):
    return np.asarray(X.multiply(X).sum(axis=1), dtype=float).ravel()


def sparse_product_rows(X, kernel, Y, coef):
    """k(X, Y) @ coef for CSR X and Y, in blocks of about ``BLOCK_ENTRIES``
    dense kernel entries; only the blocks are dense, never X or Y.

    The inner products split over the frequent columns (``column_codes``):
    X Yᵀ = X_F Y_Fᵀ + X_R Y_Rᵀ, one dense BLAS product on at most
    ``MAX_DENSE_COLUMNS`` columns and a sparse product of the rest, whose
    result is sparse (``add_sparse_product``); on Zipf-like text X Yᵀ itself
    is nearly dense, and scipy's sparse product of X and Y costs ~30 ns per
    entry. The kernels of ``kernel_block`` then map them elementwise, the RBF
    kernel with the stored entries' norms (equation ``kernel-gaussian``
    expanded). Other kernels, and products too small to repay the split
    (``SPLIT_ENTRIES_PER_STORED``), are evaluated by the kernel's own sparse
    products, ``kernel(X, Y)``.
    """
    n, m = X.shape[0], Y.shape[0]
    out = np.zeros((n,) + coef.shape[1:])
    width = min(COLUMN_BLOCK, max(1, m))
    height = max(1, BLOCK_ENTRIES // width)
    elementwise = _ELEMENTWISE.get(type(kernel).__name__)
    if (
        elementwise is None
        or type(kernel).__module__ != "kernelref.kernels.vector"
        or n * m < SPLIT_ENTRIES_PER_STORED * (X.nnz + Y.nnz)
    ):
        for first in range(0, n, height):
            rows = slice(first, first + height)
            for start in range(0, m, width):
                cols = slice(start, start + width)
                out[rows] += kernel(X[rows], Y[cols]) @ coef[cols]
        return out
    X, Y = X.tocsr(), Y.tocsr()
    x_code, y_code, F, R = column_codes(X, Y)
    X_F, X_R = split_columns(X, x_code, F, R)
    Y_F, Y_R = split_columns(Y, y_code, F, R)
    x_norms, y_norms = _sparse_norms(X), _sparse_norms(Y)
    starts = range(0, m, width)
    # Y_R's column blocks transposed once (CSR, R × width) for every row block.
    Y_Rt = [Y_R[start : start + width].T.tocsr() for start in starts]
    Y_F = [np.ascontiguousarray(Y_F[start : start + width]) for start in starts]
    buffer = reusable_buffer(height * width)
    for first in range(0, n, height):
        rows = slice(first, first + height)
        X_Ri, X_Fi = X_R[rows], X_F[rows]
        for k, start in enumerate(starts):
            cols = slice(start, start + width)
            shape = (X_Fi.shape[0], Y_Rt[k].shape[1])
            G = buffer[: shape[0] * shape[1]].reshape(shape)
            np.matmul(X_Fi, Y_F[k].T, out=G)
            add_sparse_product(G, X_Ri, Y_Rt[k])
            block = elementwise(kernel, G, x_norms[rows], y_norms[cols])
            out[rows] += block @ coef[cols]
    return out
