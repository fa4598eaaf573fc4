"""Sparse X in a fit store: CSR arrays on disk, read back as CSR row chunks.

A ``scipy.sparse`` X of N × D with nnz stored entries is written as a Zarr
group of three 1-D arrays, the layout anndata reads (attributes
``encoding-type = "csr_matrix"`` and ``shape``):

- ``indptr`` (N + 1, int64) in chunks of ``chunk_size`` entries, so the rows
  of row chunk i are ``indptr[i·c : min((i+1)·c, N) + 1]``;
- ``indices`` (nnz, int64) and ``data`` (nnz, float64), in chunks of about
  nnz / (number of row chunks) entries, so a row chunk's entries, one
  contiguous slice, span about two of them.

The store takes O(N + nnz) bytes, never N × D: a text matrix of N = 20 000,
D = 10⁶ at density 10⁻⁴ is a few MB here and 160 GB dense. Every chunk's
CRC-32 is recorded when it is written (``backends.dask.integrity``) and
checked when a worker reads it, so a truncated or altered chunk is refused by
name instead of read as other indices. Workers compute kernel blocks from the
CSR rows with the kernels' own sparse products (``kernelref.kernels.vector``):
the SVMs' gradient products, KernelPCA's passes, the GPs' tiles and streamed
blocks, CG ridge's products; ``GramStore`` takes sparse X too (scattered as
CSR) for ``KernelRidge(solver="cholesky")``. The SVMs' products split the
inner products over the columns most rows store (a dense BLAS product there, a
sparse one on the rest: ``backends.dask.blocks.sparse_product_rows``).
"""

import hashlib

import numpy as np
import scipy.sparse

from backends.dask.integrity import record_chunk, verify_chunk

__all__ = ["fingerprint", "is_sparse", "nbytes", "read_rows", "write"]

LAYOUT = "csr_matrix"
_ARRAYS = (("indptr", np.int64), ("indices", np.int64), ("data", np.float64))


def is_sparse(X):
    """True for a ``scipy.sparse`` matrix or array."""
    return scipy.sparse.issparse(X)


def _canonical(X):
    """X as float64 CSR with sorted, summed indices (a copy only if needed)."""
    X = X.tocsr().astype(np.float64, copy=False)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return X


def fingerprint(X):
    """The identity of sparse X: shape, nnz and the sha256 of its canonical CSR
    arrays (equal matrices, however built, have equal fingerprints)."""
    X = _canonical(X)
    digest = hashlib.sha256(repr(("csr", tuple(X.shape))).encode())
    for name, dtype in _ARRAYS:
        digest.update(np.ascontiguousarray(getattr(X, name), dtype=dtype).tobytes())
    return {
        "shape": list(X.shape),
        "layout": "csr",
        "nnz": int(X.nnz),
        "sha256": digest.hexdigest(),
    }


def write(group, name, X, chunk_size):
    """Write sparse X as the CSR group `name` of the Zarr `group`, each chunk's
    checksum recorded after it."""
    X = _canonical(X)
    n = X.shape[0]
    n_row_chunks = max(1, -(-n // chunk_size))
    entry_chunk = max(1, -(-X.nnz // n_row_chunks))
    sub = group.create_group(
        name, attributes={"encoding-type": LAYOUT, "shape": list(X.shape)}
    )
    for key, dtype in _ARRAYS:
        values = np.ascontiguousarray(getattr(X, key), dtype=dtype)
        length = chunk_size if key == "indptr" else entry_chunk
        # Every chunk is written, zeros too, so that each has a file to check.
        array = sub.create_array(
            key,
            shape=values.shape,
            chunks=(length,),
            dtype=dtype,
            config={"write_empty_chunks": True},
        )
        array[...] = values
        for k in range(-(-len(values) // length)):
            record_chunk(array, (k,))


_FIX = "fit again with a new store= (or remove this one) to rewrite the data."


def _read_slice(array, start, stop):
    """``array[start:stop]`` after checking the checksums of the chunks it spans."""
    length = array.chunks[0]
    for k in range(start // length, -(-stop // length)):
        verify_chunk(array, (k,), _FIX)
    return array[start:stop]


def read_rows(path, rows):
    """The CSR rows ``rows`` (a slice) of the sparse X stored at `path`."""
    import zarr

    group = zarr.open_group(store=path, mode="r")
    n, d = group.attrs["shape"]
    start, stop = rows.start, min(rows.stop, n)
    indptr = _read_slice(group["indptr"], start, stop + 1)
    first, last = int(indptr[0]), int(indptr[-1])
    data = _read_slice(group["data"], first, last)
    indices = _read_slice(group["indices"], first, last)
    return scipy.sparse.csr_matrix(
        (data, indices, indptr - first), shape=(stop - start, d)
    )


def nbytes(X):
    """Bytes held by a CSR matrix's three arrays."""
    return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
