"""The tiled Cholesky factor and solves of ``backends.dask.linalg`` equal SciPy's."""

import numpy as np
import pytest
import scipy.linalg

zarr = pytest.importorskip("zarr")

from backends.dask import linalg  # noqa: E402
from backends.dask.gram_store import GramStore  # noqa: E402
from kernelref.kernels import RBF, Sigmoid  # noqa: E402

pytestmark = pytest.mark.slow

LAM = 0.1


def lower_tile_store(path, K, b):
    """K in a Zarr array of b × b chunks with only the tiles on and below the
    diagonal written; the others read as NaN, so reading one would show."""
    n = len(K)
    A = zarr.create_array(
        str(path),
        shape=(n, n),
        chunks=(b, b),
        dtype="float64",
        fill_value=np.nan,
        compressors=None,
    )
    for i in range(0, n, b):
        for j in range(0, i + 1, b):
            A[i : i + b, j : j + b] = K[i : i + b, j : j + b]
    return A


def rbf_gram(n, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, 3))
    return RBF(gamma=0.3)(X)


@pytest.mark.parametrize(
    "n, b", [(37, 10), (37, 37), (37, 64), (200, 64), (192, 64), (250, 50)]
)
def test_tiled_cholesky_equals_scipy(client, tmp_path, n, b):
    K = rbf_gram(n)
    L = linalg.create_factor(str(tmp_path / "L"), n, b)
    linalg.tiled_cholesky(lower_tile_store(tmp_path / "K", K, b), LAM, L, client)
    expected = scipy.linalg.cholesky(K + LAM * np.eye(n), lower=True)
    np.testing.assert_allclose(L[...], expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("n, b", [(37, 10), (200, 64), (64, 64)])
@pytest.mark.parametrize("n_targets", [None, 3])
def test_tiled_solve_equals_scipy_solve(client, tmp_path, n, b, n_targets):
    K = rbf_gram(n, seed=1)
    shape = (n,) if n_targets is None else (n, n_targets)
    t = np.random.default_rng(2).normal(size=shape)
    L = linalg.create_factor(str(tmp_path / "L"), n, b)
    a = linalg.dual_coefficients(
        lower_tile_store(tmp_path / "K", K, b), t, LAM, L, client
    )
    expected = scipy.linalg.solve(K + LAM * np.eye(n), t, assume_a="pos")
    assert a.shape == t.shape
    np.testing.assert_allclose(a, expected, rtol=1e-10, atol=1e-10)


def test_factor_of_a_gram_store_equals_scipy(client, tmp_path):
    X = np.random.default_rng(3).normal(size=(150, 2))
    kernel = RBF(gamma=0.5)
    store = GramStore.build(tmp_path / "gram", X, kernel, chunk_size=40, client=client)
    L = linalg.create_factor(str(tmp_path / "L"), store.n, store.chunk_size)
    linalg.tiled_cholesky(store.array, LAM, L, client)
    expected = scipy.linalg.cholesky(kernel(X) + LAM * np.eye(150), lower=True)
    np.testing.assert_allclose(L[...], expected, rtol=0, atol=1e-10)


def test_rerunning_a_tile_task_rewrites_the_same_tile(client, tmp_path):
    """The reason for the left-looking order: a task the scheduler reruns after
    losing a worker must not change the factor."""
    n, b = 90, 30
    K = lower_tile_store(tmp_path / "K", rbf_gram(n, seed=4), b)
    L = linalg.create_factor(str(tmp_path / "L"), n, b)
    linalg.tiled_cholesky(K, LAM, L, client)
    before = L[...]
    for i, j in [(1, 1), (2, 1), (2, 2)]:
        linalg._factor_tile(K, L, LAM, i, j, b)
    np.testing.assert_array_equal(L[...], before)


def test_indefinite_matrix_names_the_failing_tile(client, tmp_path):
    X = np.random.default_rng(5).normal(size=(60, 2))
    K = Sigmoid(gamma=2.0, coef0=-1.0)(X)
    assert np.linalg.eigvalsh(K + 1e-3 * np.eye(60))[0] < 0
    L = linalg.create_factor(str(tmp_path / "L"), 60, 20)
    with pytest.raises(
        scipy.linalg.LinAlgError, match="not positive definite.*diagonal tile"
    ):
        linalg.tiled_cholesky(lower_tile_store(tmp_path / "K", K, 20), 1e-3, L, client)


def test_factor_with_other_chunking_is_refused(client, tmp_path):
    K = lower_tile_store(tmp_path / "K", rbf_gram(40), 10)
    L = linalg.create_factor(str(tmp_path / "L"), 40, 20)
    with pytest.raises(ValueError, match="chunks"):
        linalg.tiled_cholesky(K, LAM, L, client)


@pytest.mark.parametrize("compressors", [None, "auto"])
def test_tiles_read_and_written_directly_equal_zarr_s(tmp_path, compressors):
    """read_tile/write_tile bypass Zarr for raw chunks (falling back for compressed
    ones); edge tiles included, the array reads back the same through Zarr."""
    n, b = 50, 20
    M = np.random.default_rng(3).normal(size=(n, n))
    A = linalg.create_factor(str(tmp_path / "A"), n, b, compressors=compressors)
    assert linalg._raw_chunks(A) == (compressors is None)
    for i in range(3):
        for j in range(3):
            tile = M[i * b : (i + 1) * b, j * b : (j + 1) * b]
            # a non-contiguous view, as the panel task writes its solved tile
            linalg.write_tile(A, i, j, b, np.asfortranarray(tile))
    np.testing.assert_array_equal(A[...], M)
    for i in range(3):
        for j in range(3):
            tile, buffer = linalg.read_tile(A, i, j, b)
            np.testing.assert_array_equal(
                tile, M[i * b : (i + 1) * b, j * b : (j + 1) * b]
            )
            assert (buffer is None) == (compressors is not None)
            linalg.give_buffer(buffer)


@pytest.mark.parametrize("order", ["right", "left"])
def test_weighted_ridge_tiled_cholesky_equals_scipy(client, tmp_path, order):
    """With weights s the tiles are scaled as read: the factor of S^½ K S^½ + λI
    (``ridge-weighted``), zero weights included, ragged last tiles."""
    n, b = 130, 40
    K = rbf_gram(n, seed=6)
    s = np.random.default_rng(7).uniform(0.0, 3.0, size=n)
    s[::5] = 0.0
    L = linalg.create_factor(str(tmp_path / "L"), n, b)
    stored = lower_tile_store(tmp_path / "K", K, b)
    linalg.tiled_cholesky(stored, LAM, L, client, order=order, weights=s)
    root = np.sqrt(s)
    expected = scipy.linalg.cholesky(
        root[:, None] * K * root[None, :] + LAM * np.eye(n), lower=True
    )
    np.testing.assert_allclose(L[...], expected, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match=r"weights must have shape \(130,\)"):
        linalg.tiled_cholesky(stored, LAM, L, client, weights=s[:-1])
