"""Kernels on very wide sparse X (text, hashed features: 10⁶-10⁸ columns) cost
memory and time by stored entries, not by columns: XYᵀ is formed over the
columns both operands store (``kernelref.kernels.vector.shared_columns``), bit
for bit the product scipy forms over all columns."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from kernelref.kernels import RBF, Linear, Polynomial
from kernelref.kernels.vector import WIDE, _inner, shared_columns
from kernelref.svm import SVC


def wide(n, width, per_row, seed):
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), per_row)
    columns = rng.integers(0, width, n * per_row)
    columns[: n * per_row // 2] %= 50  # half the entries in shared columns
    X = sp.csr_matrix((rng.normal(size=n * per_row), (rows, columns)), (n, width))
    X.sum_duplicates()
    return X


@pytest.mark.parametrize("seed", range(4))
def test_shared_columns_give_scipys_product_bit_for_bit(seed):
    X, Y = wide(30, 10**7, 6, seed), wide(45, 10**7, 6, seed + 10)
    assert X.shape[1] > WIDE * (X.nnz + Y.nnz)  # the cut path
    Xc, Yc = shared_columns(X, Y)
    assert Xc.shape[1] == Yc.shape[1] < 100
    full = (X @ Y.T).toarray()
    assert np.array_equal((Xc @ Yc.T).toarray(), full)
    assert np.array_equal(_inner(X, Y), full)
    assert np.array_equal(_inner(X), (X @ X.T).toarray())
    # no column in common: all inner products zero
    far = sp.csr_matrix(([1.0], ([0], [10**7 - 1])), shape=(1, 10**7))
    near = sp.csr_matrix(([2.0, 3.0, 4.0], ([0, 1, 2], [5, 5, 6])), shape=(3, 10**7))
    assert np.array_equal(_inner(far, near), np.zeros((1, 3)))


def test_wide_kernels_equal_the_dense_ones():
    X, Y = wide(12, 10**6 // 4, 5, 1), wide(9, 10**6 // 4, 5, 2)
    Xd, Yd = X.toarray(), Y.toarray()
    for kernel in (RBF(0.3), Linear(), Polynomial(degree=2, gamma=0.5, coef0=1.0)):
        np.testing.assert_allclose(kernel(X, Y), kernel(Xd, Yd), rtol=1e-12)


def test_a_kernel_row_of_a_hundred_million_columns_takes_no_memory_per_column():
    """40 rows over 10⁸ columns (3 entries each): a kernel call and an SVC fit
    stay under 10 MB of Python allocations (before: 381 MB, the row pointers of
    Yᵀ in CSR, on every kernel call)."""
    X = wide(40, 10**8, 3, 5)
    y = np.where(np.arange(40) % 2 == 0, 1, -1)
    tracemalloc.start()
    try:
        K = RBF(0.5)(X[:5], X)
        SVC(gamma=0.5, C=10.0).fit(X, y).predict(X)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert K.shape == (5, 40) and np.allclose(np.diag(K[:, :5]), 1.0)
    assert peak < 10 * 2**20, f"{peak / 2**20:.0f} MB"
