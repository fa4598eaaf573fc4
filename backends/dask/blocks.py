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


def sparse_product_rows(X, kernel, Y, coef):
    """k(X, Y) @ coef for CSR X and Y, by the kernel's own sparse products
    (``kernelref.kernels.vector``: inner products XYᵀ and the stored entries'
    norms), in blocks of about ``BLOCK_ENTRIES`` dense kernel entries; only the
    blocks are dense, never X or Y."""
    n, m = X.shape[0], Y.shape[0]
    out = np.zeros((n,) + coef.shape[1:])
    width = min(COLUMN_BLOCK, max(1, m))
    height = max(1, BLOCK_ENTRIES // width)
    for first in range(0, n, height):
        rows = slice(first, first + height)
        for start in range(0, m, width):
            cols = slice(start, start + width)
            out[rows] += kernel(X[rows], Y[cols]) @ coef[cols]
    return out
