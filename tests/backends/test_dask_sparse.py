"""Sparse X on the cluster: stored as CSR, kernel blocks from sparse products.

The SVMs keep ``scipy.sparse`` X sparse end to end (``backends.dask.sparse_rows``):
the fitted model is the reference's sparse fit, and a matrix whose dense form
would take gigabytes fits in a few megabytes. (The Nyström ridge, the last
estimator that densified sparse X, keeps it sparse too: test_dask_nystrom.)
"""

import pathlib
import tracemalloc

import numpy as np
import pytest
import scipy.sparse

pytest.importorskip("distributed")

from test_dask_svm import worker_peak_bytes  # noqa: E402

from backends.dask import GaussianProcessClassifier as DaskGPC  # noqa: E402
from backends.dask import GaussianProcessRegressor as DaskGPR  # noqa: E402
from backends.dask import KernelPCA as DaskKernelPCA  # noqa: E402
from backends.dask import KernelRidge as DaskKernelRidge  # noqa: E402
from backends.dask import blocks, sparse_rows  # noqa: E402
from backends.dask import svm as dask_svm  # noqa: E402
from backends.dask.gram_store import GramStore  # noqa: E402
from backends.dask.integrity import DamagedChunkError  # noqa: E402
from backends.dask.runtime import FitStore, map_chunks, read_chunk  # noqa: E402
from backends.dask.svm import columns, decomposition  # noqa: E402
from backends.dask.svm.decomposition import BlockDecomposition  # noqa: E402
from backends.dask.svm.tasks import (  # noqa: E402
    gather_rows,
    linear_chunk,
    product_chunk_at,
)
from kernelref import svm as reference  # noqa: E402
from kernelref.gp import GaussianProcessRegressor  # noqa: E402
from kernelref.gp_classify import GaussianProcessClassifier  # noqa: E402
from kernelref.kernels import RBF, Linear, Polynomial, Sigmoid, White  # noqa: E402
from kernelref.kpca import KernelPCA  # noqa: E402
from kernelref.ridge import KernelRidge  # noqa: E402
from kernelref.svm import problems  # noqa: E402

pytestmark = pytest.mark.slow


def text_like(n, d, density, seed):
    """Sparse rows with a few informative columns (about a third filled) among
    `d` mostly empty ones; labels ±1 from the informative part."""
    rng = np.random.default_rng(seed)
    nnz = int(round(density * n * d))  # positions drawn directly: O(nnz) work
    noise = scipy.sparse.csr_matrix(
        (rng.random(nnz), (rng.integers(n, size=nnz), rng.integers(d, size=nnz))),
        shape=(n, d),
    )
    informative = rng.normal(size=(n, 8)) * (rng.random((n, 8)) < 0.4)
    X = scipy.sparse.hstack(
        [scipy.sparse.csr_matrix(informative), noise[:, 8:]], format="csr"
    )
    y = np.where(informative @ rng.normal(size=8) > 0, 1, -1)
    return X, y


def test_csr_rows_round_trip_with_checksums(tmp_path):
    """The fit store writes sparse X as CSR (no dense array on disk), every row
    chunk reads back equal, and a damaged chunk is refused by name."""
    X, _ = text_like(103, 50_000, 1e-3, seed=0)
    store = FitStore.prepare(
        tmp_path / "fit", X, identity={"test": 1}, chunk_size=16, client=None
    )
    ref = store.x_ref
    assert ref.sparse and ref.n_chunks == 7
    for i in range(ref.n_chunks):
        chunk = read_chunk(ref, i)
        assert scipy.sparse.issparse(chunk)
        assert (chunk != X[ref.rows(i)]).nnz == 0
    rows = np.array([0, 5, 17, 40, 102])
    assert (gather_rows(ref, rows) != X[rows]).nnz == 0
    on_disk = sum(f.stat().st_size for f in (tmp_path / "fit" / "X").rglob("*"))
    # O(N + nnz): 16 bytes per entry and 8 per row, plus metadata and records.
    assert on_disk < 16 * X.nnz + 8 * X.shape[0] + 40_000
    assert sparse_rows.fingerprint(X) == sparse_rows.fingerprint(X.tocsc())
    data = tmp_path / "fit" / "X" / "data" / "c" / "2"
    data.write_bytes(data.read_bytes()[:-8])
    with pytest.raises(DamagedChunkError, match="does not match its checksum"):
        sparse_rows.read_rows(ref.path, ref.rows(2))


def zipf_rows(n, d, per_row, seed):
    """CSR rows of about `per_row` stored entries in columns drawn with
    probability ∝ 1/(j + 1) (text-like: frequent columns shared by many rows)."""
    rng = np.random.default_rng(seed)
    nnz = n * per_row
    columns = np.exp(rng.random(nnz) * np.log(d + 1)).astype(np.int64) - 1
    return scipy.sparse.csr_matrix(
        (rng.random(nnz), (rng.integers(n, size=nnz), np.minimum(columns, d - 1))),
        shape=(n, d),
    )


@pytest.mark.parametrize(
    "kernel", [RBF(0.05), Linear(), Polynomial(2, 0.1, 1.0), Sigmoid(0.01, 0.5)]
)
def test_split_sparse_products_equal_the_kernel(kernel, monkeypatch):
    """The workers' sparse products k(X, Y) @ coef split X Yᵀ into the dense
    frequent columns and a sparse rest (``blocks.column_codes``): on Zipf-like
    rows they equal the kernel's own sparse product to 1e-12, whether the rest
    is summed by ``bincount`` (under one pair per entry) or by scipy's product
    (dense-ish rows, many columns beyond ``MAX_DENSE_COLUMNS`` shared), and
    for products too small to split."""
    X = zipf_rows(700, 3000, 40, seed=3)
    Y = zipf_rows(1300, 3000, 40, seed=4)
    codes = blocks.column_codes(X, Y)
    assert 0 < codes[2] < 200 and codes[3] > 1000  # both parts in use
    # Wide X (beyond LOOKUP_COLUMNS) finds its columns by binary search instead:
    # the same codes, so the same digits.
    monkeypatch.setattr(blocks, "LOOKUP_COLUMNS", 100)
    for a, b in zip(blocks.column_codes(X, Y), codes):
        np.testing.assert_array_equal(a, b)
    monkeypatch.undo()
    # Uniform rows, 1/8 filled: every column frequent, the rest past the cap.
    dense_ish = scipy.sparse.random(1200, 1200, density=0.125, random_state=5)
    dense_ish = dense_ish.tocsr()
    assert blocks.column_codes(dense_ish, dense_ish)[2] == blocks.MAX_DENSE_COLUMNS
    cases = [(X, Y, True), (dense_ish, dense_ish, True), (X[:3], Y[:5], False)]
    for X, Y, split in cases:
        entries = X.shape[0] * Y.shape[0]
        assert (entries >= blocks.SPLIT_ENTRIES_PER_STORED * (X.nnz + Y.nnz)) == split
        coef = np.random.default_rng(6).normal(size=(Y.shape[0], 2))
        expected = kernel(X, Y) @ coef
        product = blocks.sparse_product_rows(X, kernel, Y, coef)
        scale = np.abs(kernel(X, Y)).sum(axis=1).max()
        np.testing.assert_allclose(product, expected, rtol=0, atol=1e-12 * scale)
        # Every entry, not only its sums with coef:
        block = blocks.sparse_product_rows(X, kernel, Y, np.eye(Y.shape[0]))
        np.testing.assert_allclose(
            block, kernel(X, Y), rtol=0, atol=1e-12 * np.abs(block).max()
        )


def test_sparse_svc_with_split_products_equals_the_reference(client):
    """On Zipf-like rows large enough for the workers to split their products
    (frequent columns dense, the rest sparse), the block decomposition gives
    the reference's sparse fit: supports, dual coefficients to tol's order,
    predictions; refitting in a new store repeats the fit bit for bit."""
    X = zipf_rows(700, 2000, 10, seed=7)
    y = np.where(X[:, :50] @ np.random.default_rng(8).normal(size=50) > 0, 1, -1)
    Xt = X[600:]
    X, y = X[:600], y[:600]
    params = dict(kernel="rbf", gamma=0.5, C=10.0, tol=1e-6)
    ref = reference.SVC(**params).fit(X, y)
    SVs = X[ref.support_]
    chunk = X[:200]  # the full gradient's products: k(chunk, SVs) @ coef
    entries = chunk.shape[0] * SVs.shape[0]
    assert entries >= blocks.SPLIT_ENTRIES_PER_STORED * (chunk.nnz + SVs.nnz)
    assert blocks.column_codes(chunk, SVs)[2] > 0
    backend = dict(
        partition_size=200, working_set_size=128, chunk_size=200, progress=False
    )
    fits = [
        dask_svm.SVC(**params, **backend, address=client.scheduler.address).fit(X, y)
        for _ in range(2)
    ]
    for ours in fits:
        assert ours.fit_info_[0]["solver"] == "block decomposition"
        np.testing.assert_array_equal(ours.support_, ref.support_)
        np.testing.assert_allclose(ours.dual_coef_, ref.dual_coef_, atol=1e-5)
        np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-5)
        np.testing.assert_array_equal(ours.predict(Xt), ref.predict(Xt))
    np.testing.assert_array_equal(fits[0].dual_coef_, fits[1].dual_coef_)


def test_sparse_linear_combination_and_dot(monkeypatch):
    """The linear kernel's gradient pieces: w = Yᵀ coef as a sparse vector
    (``blocks.sparse_combination``) and X w (``blocks.sparse_dot``) equal the
    dense products, with the per-thread column table and, for X wider than
    ``LOOKUP_COLUMNS``, with the binary search."""
    X = zipf_rows(300, 5000, 30, seed=11)
    Y = zipf_rows(40, 5000, 30, seed=12)
    coef = np.random.default_rng(13).normal(size=40)
    columns, values = blocks.sparse_combination(Y, coef)
    w = Y.T @ coef
    assert np.all(np.diff(columns) > 0) and len(columns) == len(np.unique(Y.indices))
    np.testing.assert_allclose(values, w[columns], rtol=1e-13, atol=1e-13)
    assert not np.any(np.delete(w, columns))
    expected = X @ w
    np.testing.assert_allclose(
        blocks.sparse_dot(X, columns, values), expected, rtol=1e-12, atol=1e-12
    )
    monkeypatch.setattr(blocks, "LOOKUP_COLUMNS", 100)
    np.testing.assert_allclose(
        blocks.sparse_dot(X, columns, values), expected, rtol=1e-12, atol=1e-12
    )


def test_linear_gradient_products_use_w(client, tmp_path, monkeypatch):
    """For the linear kernel on sparse X the block decomposition's gradient
    products are X (Yᵀ coef) (``tasks.linear_chunk``), equal to k(X, Y) @ coef
    of the kernel columns to 1e-12, for the update (Y rows) and the full
    gradient (Y indices of the stored rows)."""
    X = zipf_rows(500, 4000, 25, seed=14)
    store = FitStore.prepare(
        tmp_path / "fit", X, identity={"test": "linear"}, chunk_size=128, client=client
    )
    y = np.where(np.arange(500) % 2, 1.0, -1.0)
    loop = BlockDecomposition(
        problems.c_svc(y, np.ones(500)),
        X,
        None,
        Linear(),
        store,
        client,
        q=64,
        tol=1e-3,
        start=None,
        timings={},
    )
    assert loop.linear
    tasks_run = []

    def recording(client, task, *args):
        tasks_run.append(task)
        return map_chunks(client, task, *args)

    monkeypatch.setattr(decomposition, "map_chunks", recording)
    coef = np.random.default_rng(15).normal(size=60)
    rows = np.sort(np.random.default_rng(16).choice(500, 60, replace=False))
    expected = Linear()(X, X[rows]) @ coef
    for got in (
        loop.product(X[rows], coef, "update"),
        loop.product(rows, coef, "full", task=product_chunk_at),
    ):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert tasks_run == [linear_chunk, linear_chunk]


@pytest.mark.parametrize(
    "kernel", [RBF(0.05), Polynomial(2, 0.1, 1.0), Sigmoid(0.01, 0.5)]
)
def test_kernel_columns_do_not_depend_on_their_company(kernel):
    """``columns.kernel_columns`` on Zipf-like rows: k(X, Y)ᵀ to 1e-12, and each
    column bit for bit the same whether computed alone, in a small group or
    among all (the workers' cached columns are then the columns a fresh
    computation gives); with ``COLUMN_BLOCK`` small, across column blocks."""
    X = zipf_rows(700, 3000, 40, seed=21)
    Y = zipf_rows(300, 3000, 40, seed=22)
    frequent = columns.frequent_columns(X)
    assert 0 < len(frequent) < 200
    X_split = columns.SplitRows(X, frequent)
    every = columns.kernel_columns(kernel, X_split, columns.SplitRows(Y, frequent))
    np.testing.assert_allclose(every, kernel(X, Y).T, rtol=1e-12, atol=1e-12)
    for rows in ([5], [0, 299], [7, 8, 9, 100, 250], np.arange(1, 300, 3)):
        part = columns.kernel_columns(
            kernel, X_split, columns.SplitRows(Y[rows], frequent)
        )
        np.testing.assert_array_equal(part, every[rows])
    small = columns.COLUMN_BLOCK
    try:
        columns.COLUMN_BLOCK = 7
        blocked = columns.kernel_columns(
            kernel, X_split, columns.SplitRows(Y, frequent)
        )
    finally:
        columns.COLUMN_BLOCK = small
    np.testing.assert_array_equal(blocked, every)


def test_cached_products_equal_fresh_ones(tmp_path):
    """``columns.cached_product_chunk`` on a chunk of a fit store: k(X_i, Y) @ coef
    to 1e-12; a second call with some columns kept and some new gives the bits
    of a call on an empty cache; a full cache drops its oldest columns."""
    X = zipf_rows(400, 3000, 40, seed=23)
    store = FitStore.prepare(
        tmp_path / "fit", X, identity={"test": "columns"}, chunk_size=256, client=None
    )
    kernel, frequent = RBF(0.05), columns.frequent_columns(X)
    coef = np.random.default_rng(24).normal(size=120)
    first, second = np.arange(0, 240, 2), np.arange(100, 340, 2)
    cache = columns._cache
    try:
        columns._cache = columns._ColumnCache(2**30)
        got = columns.cached_product_chunk(
            store.x_ref, 1, kernel, frequent, X[first], first, coef
        )
        np.testing.assert_allclose(
            got, kernel(X[256:], X[first]) @ coef, rtol=1e-12, atol=1e-12
        )
        assert len(columns._cache.columns) == 120
        kept = columns.cached_product_chunk(
            store.x_ref, 1, kernel, frequent, X[second], second, coef
        )
        assert len(columns._cache.columns) == 120 + 50  # 70 of them were kept
        columns._cache = columns._ColumnCache(2**30)
        fresh = columns.cached_product_chunk(
            store.x_ref, 1, kernel, frequent, X[second], second, coef
        )
        np.testing.assert_array_equal(kept, fresh)
        columns._cache = columns._ColumnCache(30 * 144 * 8)  # 30 columns of 144 rows
        columns.cached_product_chunk(
            store.x_ref, 1, kernel, frequent, X[first], first, coef
        )
        kept_samples = [key[2] for key in columns._cache.columns]
        np.testing.assert_array_equal(kept_samples, first[-30:])
    finally:
        columns._cache = cache


#: Backend sizes that send a QP on 150-160 samples to the warm start (parts of
#: about 60) and the block decomposition, in chunks of 48 rows.
SPLIT = dict(partition_size=60, working_set_size=64, chunk_size=48)

KERNELS = {
    "rbf": dict(kernel="rbf", gamma=0.5),
    "linear": dict(kernel="linear"),
    "poly": dict(kernel="poly", gamma=0.5, coef0=1.0, degree=2),
    "sigmoid": dict(kernel="sigmoid", gamma=0.05, coef0=0.0),
}


@pytest.mark.parametrize("kernel", KERNELS)
def test_sparse_svc_equals_the_reference_sparse_fit(kernel, client):
    """Each kernel that takes sparse X, on both of the backend's solvers (the
    reference SMO in one task; the warm start and block decomposition): the
    support, dual coefficients and predictions of the reference's sparse fit."""
    X, y = text_like(160, 20_000, 2e-3, seed=1)
    Xt, _ = text_like(60, 20_000, 2e-3, seed=2)
    params = dict(C=10.0, tol=1e-6, **KERNELS[kernel])
    ref = reference.SVC(**params).fit(X, y)
    backend = dict(progress=False, address=client.scheduler.address)
    for split in (False, True):
        ours = dask_svm.SVC(**params, **(SPLIT if split else {}), **backend)
        ours.fit(X, y)
        solver = "block decomposition" if split else "reference SMO on a worker"
        assert ours.fit_info_[0]["solver"] == solver
        assert scipy.sparse.issparse(ours.support_vectors_)
        np.testing.assert_array_equal(ours.support_, ref.support_)
        # Both solvers stop at KKT violations below tol = 1e-6; the multipliers
        # agree to that order (the one-task solve is the reference's own SMO).
        atol = 1e-5 if split else 1e-12
        np.testing.assert_allclose(ours.dual_coef_, ref.dual_coef_, atol=atol)
        np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=atol)
        np.testing.assert_array_equal(ours.predict(Xt), ref.predict(Xt))
        report = dask_svm.kkt_report(ours, X, y, address=client.scheduler.address)
        assert report.max_violation < params["tol"]


@pytest.mark.parametrize(
    "name, params",
    [
        ("NuSVC", dict(nu=0.3, gamma=0.5)),
        ("SVR", dict(C=1.0, epsilon=0.1, kernel="linear")),
        ("NuSVR", dict(C=1.0, nu=0.3, gamma=0.5)),
        ("OneClassSVM", dict(nu=0.2, gamma=0.5)),
    ],
)
def test_other_sparse_svms_equal_the_reference(name, params, client):
    """The ν and regression machines share the sparse path through the block
    decomposition: the reference's sparse fit, certified by the KKT report."""
    X, y = text_like(150, 20_000, 2e-3, seed=3)
    if name in ("SVR", "NuSVR"):
        noise = np.random.default_rng(3).normal(size=X.shape[0])
        y = X[:, :8].toarray() @ np.linspace(-1.0, 1.0, 8) + 0.3 * noise
    params = dict(params, tol=1e-6)
    ref = getattr(reference, name)(**params).fit(X, y)
    ours = getattr(dask_svm, name)(
        **params, **SPLIT, progress=False, address=client.scheduler.address
    ).fit(X, y)
    assert ours.fit_info_[0]["solver"] == "block decomposition"
    np.testing.assert_array_equal(ours.support_, ref.support_)
    np.testing.assert_allclose(ours.dual_coef_, ref.dual_coef_, atol=1e-5)
    Xt, _ = text_like(40, 20_000, 2e-3, seed=4)
    np.testing.assert_allclose(
        ours.decision_function(Xt), ref.decision_function(Xt), atol=1e-5
    )
    report = dask_svm.kkt_report(ours, X, y, address=client.scheduler.address)
    assert report.max_violation < params["tol"]


def test_two_million_columns_are_never_densified(client, tmp_path):
    """N = 300, D = 2·10⁶ at density 10⁻⁵: dense, X would take 4.8 GB. The fit
    and its predictions equal the reference's; the client allocates a few MB
    (traced: 19 MB measured, the reference's CSC copy of X has a D-long index
    pointer), the store holds O(N + nnz) bytes (114 kB measured), and the
    workers' peak memory grows by less than one densified chunk of rows."""
    X, y = text_like(300, 2_000_000, 1e-5, seed=5)
    Xt, _ = text_like(50, 2_000_000, 1e-5, seed=6)
    dense_bytes = 8 * X.shape[0] * X.shape[1]
    params = dict(C=10.0, gamma=0.5, tol=1e-6)
    ref = reference.SVC(**params).fit(X, y)
    measure_workers = pathlib.Path("/proc/self/status").exists()
    before = client.run(worker_peak_bytes()) if measure_workers else {}
    tracemalloc.start()
    try:
        ours = dask_svm.SVC(
            **params,
            store=tmp_path / "fit",
            partition_size=120,
            working_set_size=128,
            chunk_size=64,
            progress=False,
            address=client.scheduler.address,
        ).fit(X, y)
        predicted = ours.predict(Xt)
        _, client_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ours.fit_info_[0]["solver"] == "block decomposition"
    np.testing.assert_array_equal(ours.support_, ref.support_)
    np.testing.assert_allclose(ours.dual_coef_, ref.dual_coef_, atol=1e-5)
    np.testing.assert_array_equal(predicted, ref.predict(Xt))
    assert client_peak < dense_bytes / 64  # 75 MB
    stored = sum(f.stat().st_size for f in (tmp_path / "fit" / "X").rglob("*"))
    assert stored < 16 * X.nnz + 8 * X.shape[0] + 100_000
    if measure_workers:
        # One chunk of 64 rows, densified, would take 1 GB.
        after = client.run(worker_peak_bytes())
        assert max(after[w] - before[w] for w in after) < 256 * 2**20


def test_gram_store_of_sparse_x_equals_the_kernel(client, tmp_path):
    """GramStore.build takes CSR X (scattered as CSR, blocks from the kernel's
    sparse products): every block equals the reference kernel on the same X;
    the store opens for that X, and refuses the same X made dense (another
    fingerprint: the stored data's layout is part of its identity)."""
    X, _ = text_like(90, 20_000, 2e-3, seed=12)
    kernel = RBF(0.5)
    store = GramStore.build(tmp_path / "gram", X, kernel, chunk_size=32)
    K = kernel(X)
    for i in range(store.n_blocks):
        for j in range(store.n_blocks):
            rows, cols = store.block_slice(i), store.block_slice(j)
            np.testing.assert_allclose(store.block(i, j), K[rows, cols], atol=1e-14)
    GramStore.open(tmp_path / "gram", X=X.tocsc(), kernel=kernel)
    with pytest.raises(ValueError, match="built for other data"):
        GramStore.open(tmp_path / "gram", X=X.toarray())


def assert_kpca_and_ridge_equal_the_reference(X, y, Xt, client, chunk_size, stores):
    """KernelPCA (block Krylov over the CSR fit store) and KernelRidge
    (solver="cholesky": Gram blocks from CSR rows; "cg": streamed products over
    the CSR fit store) against the reference's fits on the same sparse X, in
    `stores` (three paths, or None)."""
    backend = dict(
        progress=False, address=client.scheduler.address, chunk_size=chunk_size
    )
    pca_store, *ridge_stores = stores
    ref_pca = KernelPCA(4, gamma=0.5, eigen_solver="dense").fit(X)
    pca = DaskKernelPCA(4, gamma=0.5, random_state=0, store=pca_store, **backend)
    pca.fit(X)
    assert scipy.sparse.issparse(pca.X_fit_)
    np.testing.assert_allclose(pca.eigenvalues_, ref_pca.eigenvalues_, rtol=1e-6)
    scale = np.abs(ref_pca.transform(Xt)).max()
    np.testing.assert_allclose(
        pca.transform(Xt), ref_pca.transform(Xt), rtol=0, atol=1e-6 * scale
    )
    ref_ridge = KernelRidge(lam=0.5, gamma=0.5).fit(X, y)
    # CG stops at a relative residual of 1e-10 (its default tol).
    for solver, store, atol in zip(("cholesky", "cg"), ridge_stores, (1e-10, 1e-8)):
        ridge = DaskKernelRidge(
            lam=0.5, gamma=0.5, solver=solver, store=store, **backend
        ).fit(X, y)
        np.testing.assert_allclose(ridge.dual_coef_, ref_ridge.dual_coef_, atol=atol)
        np.testing.assert_allclose(ridge.predict(Xt), ref_ridge.predict(Xt), atol=atol)


def test_sparse_kernel_pca_and_ridge_equal_the_reference(client):
    """Several chunks of CSR rows: the reference's eigenpairs and ridge."""
    X, y = text_like(150, 20_000, 2e-3, seed=8)
    Xt, _ = text_like(30, 20_000, 2e-3, seed=9)
    assert_kpca_and_ridge_equal_the_reference(X, y, Xt, client, 48, (None,) * 3)


def test_two_million_columns_kernel_pca_and_ridge(client, tmp_path):
    """The 4.8 GB-dense X of the SVM test: KernelPCA's fit store and
    KernelRidge's Gram store take it as CSR; the client allocates a few MB."""
    X, y = text_like(300, 2_000_000, 1e-5, seed=10)
    Xt, _ = text_like(40, 2_000_000, 1e-5, seed=11)
    tracemalloc.start()
    try:
        stores = tmp_path / "pca", tmp_path / "cholesky", tmp_path / "cg"
        assert_kpca_and_ridge_equal_the_reference(X, y, Xt, client, 100, stores)
        _, client_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert client_peak < 8 * X.shape[0] * X.shape[1] / 64  # 75 MB
    stored = sum(f.stat().st_size for f in (tmp_path / "pca" / "X").rglob("*"))
    assert stored < 16 * X.nnz + 8 * X.shape[0] + 100_000
    stored = sum(f.stat().st_size for f in (tmp_path / "cg" / "X").rglob("*"))
    assert stored < 16 * X.nnz + 8 * X.shape[0] + 100_000


@pytest.mark.parametrize(
    "kernel",
    [1.0 * RBF(0.5) + White(0.1), 1.0 * Polynomial(degree=2, gamma=0.5)],
    ids=["rbf-white", "polynomial"],
)
def test_sparse_gp_regressor_equals_the_reference(kernel, client):
    """GaussianProcessRegressor (solver="cholesky") on CSR X in 40-row tiles:
    ML-II's θ and evidence, the predictive mean, std and covariance of the
    reference's sparse fit. The off-diagonal tiles' evidence gradient has a
    direct form for RBF + White and stacks the CSR rows for the polynomial."""
    X, _ = text_like(80, 20_000, 2e-3, seed=13)
    Xt, _ = text_like(30, 20_000, 2e-3, seed=14)
    y = np.sin(X[:, :8].toarray().sum(axis=1))
    params = dict(kernel=kernel, noise=0.01, random_state=0)
    ref = GaussianProcessRegressor(**params).fit(X, y)
    ours = DaskGPR(
        **params, chunk_size=40, progress=False, address=client.scheduler.address
    ).fit(X, y)
    assert scipy.sparse.issparse(ours.X_train_)
    np.testing.assert_allclose(ours.kernel_.theta, ref.kernel_.theta, atol=1e-8)
    np.testing.assert_allclose(
        ours.log_marginal_likelihood_value_,
        ref.log_marginal_likelihood_value_,
        rtol=1e-10,
    )
    for ask in (dict(return_std=True), dict(return_cov=True)):
        for a, b in zip(ours.predict(Xt, **ask), ref.predict(Xt, **ask)):
            np.testing.assert_allclose(a, b, atol=1e-10)


def test_sparse_matrix_free_gp_equals_the_dense_one(client):
    """GaussianProcessRegressor(solver="cg") on CSR X (unshifted CSR blocks)
    against the same fit on X made dense (shifted dense blocks), same probes:
    the stochastic evidence and its streamed gradient, and the predictive mean,
    std and covariance by block CG (measured: within 1e-12)."""
    X, _ = text_like(120, 20_000, 2e-3, seed=17)
    Xt, _ = text_like(30, 20_000, 2e-3, seed=18)
    y = np.sin(X[:, :8].toarray().sum(axis=1))
    params = dict(
        kernel=1.0 * RBF(0.5),
        noise=0.01,
        solver="cg",
        tol=1e-10,  # the two round differently: solve both well below 1e-8
        optimizer=None,
        chunk_size=40,
        progress=False,
        address=client.scheduler.address,
    )
    dense = DaskGPR(**params).fit(X.toarray(), y)
    ours = DaskGPR(**params).fit(X, y)
    assert scipy.sparse.issparse(ours.X_train_)
    theta = dense.kernel_.theta
    for a, b in zip(
        ours.log_marginal_likelihood(theta, eval_gradient=True),
        dense.log_marginal_likelihood(theta, eval_gradient=True),
    ):
        np.testing.assert_allclose(a, b, rtol=1e-8)
    for ask in (dict(return_std=True), dict(return_cov=True)):
        for a, b in zip(ours.predict(Xt, **ask), dense.predict(Xt.toarray(), **ask)):
            np.testing.assert_allclose(a, b, atol=1e-8)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_sparse_gp_classifier_equals_the_reference(n_classes, client):
    """GaussianProcessClassifier (the Laplace mode at a fixed θ: the evidence
    gradient's tiles are those the regressor's test checks; one-vs-rest for 3
    classes) on CSR X in 40-row tiles: the reference's evidence and
    probabilities."""
    X, y = text_like(80, 20_000, 2e-3, seed=15)
    Xt, _ = text_like(30, 20_000, 2e-3, seed=16)
    if n_classes == 3:
        y = np.where(X[:, 0].toarray().ravel() > 0.3, 2, (y > 0).astype(int))
    params = dict(kernel=1.0 * RBF(0.5), optimizer=None)
    ref = GaussianProcessClassifier(**params).fit(X, y)
    ours = DaskGPC(
        **params, chunk_size=40, progress=False, address=client.scheduler.address
    ).fit(X, y)
    assert scipy.sparse.issparse(ours.X_fit_)
    # measured: evidence within 4e-12, probabilities within 4e-10
    np.testing.assert_allclose(
        ours.log_marginal_likelihood_value_,
        ref.log_marginal_likelihood_value_,
        rtol=1e-8,
    )
    np.testing.assert_allclose(ours.predict_proba(Xt), ref.predict_proba(Xt), atol=1e-7)
    np.testing.assert_array_equal(ours.predict(Xt), ref.predict(Xt))


def _kept_columns():
    return columns._cache.limit, columns._cache.size


def test_kept_columns_stay_within_a_share_of_the_worker_memory():
    """A worker keeps at most ``MEMORY_SHARE`` of its ``memory_limit`` in kernel
    columns (not the 1 GiB of ``COLUMN_CACHE_BYTES`` on a 400 MiB worker, which
    would pause it): during a sparse fit through the block decomposition, the
    worker's cache limit is that share and its columns fit in it. When the fit
    ends, whole or interrupted, the worker forgets them (they stayed, up to a
    quarter of its memory, until evicted by another fit)."""
    import distributed
    from resilience import Interrupted

    X, y = text_like(160, 20_000, 2e-3, seed=1)
    limit = 400 * 2**20
    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            memory_limit=limit,
            dashboard_address=":0",
        ) as cluster,
        distributed.Client(cluster) as small,
    ):
        kept = []

        def look(record):  # between outer iterations, on the client
            kept.extend(small.run(_kept_columns).values())

        model = dask_svm.SVC(
            C=10.0,
            gamma=0.5,
            progress=look,
            address=cluster.scheduler_address,
            **SPLIT,
        ).fit(X, y)
        assert model.fit_info_[0]["solver"] == "block decomposition"
        after = list(small.run(_kept_columns).values())
        budget = small.submit(columns.column_budget, pure=False).result()

        def stop(record):
            look(record)
            if record.iteration == 2:
                raise Interrupted

        kept_before_stop = len(kept)
        with pytest.raises(Interrupted):
            dask_svm.SVC(
                C=10.0,
                gamma=0.5,
                progress=stop,
                address=cluster.scheduler_address,
                **SPLIT,
            ).fit(X, y)
        after_stop = list(small.run(_kept_columns).values())
    assert budget == int(columns.MEMORY_SHARE * limit) < 2**30
    assert all(kept_limit == budget for kept_limit, _ in kept)
    assert 0 < max(size for _, size in kept) <= budget
    assert 0 < max(size for _, size in kept[kept_before_stop:])
    assert after == after_stop == [(budget, 0)]
