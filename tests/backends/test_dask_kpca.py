"""The Dask KernelPCA (block Krylov, Gram matrix streamed) equals the reference."""

import numpy as np
import pytest

pytest.importorskip("distributed")

from backends.dask.kpca import KernelPCA  # noqa: E402
from kernelref.kpca import KernelPCA as ReferenceKernelPCA  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def address(client):
    return client.scheduler.address


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)) * np.array([1.0, 0.7, 0.4])


@pytest.mark.parametrize(
    "kernel, params",
    [
        ("rbf", {"gamma": 0.5}),
        ("poly", {"degree": 2, "coef0": 1.0, "gamma": 0.3}),
    ],
)
def test_eigenpairs_and_transform_equal_the_reference(address, kernel, params):
    X = data(2000)
    ref = ReferenceKernelPCA(8, kernel=kernel, eigen_solver="dense", **params).fit(X)
    kpca = KernelPCA(
        8, kernel=kernel, chunk_size=500, random_state=0, address=address, **params
    ).fit(X)
    np.testing.assert_allclose(kpca.eigenvalues_, ref.eigenvalues_, rtol=1e-6)
    # both fix an eigenvector's sign by its largest entry
    np.testing.assert_allclose(kpca.eigenvectors_, ref.eigenvectors_, rtol=0, atol=1e-6)
    np.testing.assert_allclose(kpca._K_column_means, ref._K_column_means, rtol=1e-12)
    X_new = data(100, seed=1)
    scale = np.abs(ref.transform(X_new)).max()
    np.testing.assert_allclose(
        kpca.transform(X_new), ref.transform(X_new), rtol=0, atol=1e-6 * scale
    )
    assert kpca.n_passes_ <= 10


def test_interrupted_fit_resumes_to_the_same_model(address, tmp_path):
    X = data(1500, seed=2)
    whole = KernelPCA(5, gamma=0.5, chunk_size=500, random_state=1, address=address)
    whole.fit(X)

    def interrupt(record):
        if record.iteration == 2:
            raise KeyboardInterrupt

    cut = KernelPCA(
        5,
        gamma=0.5,
        chunk_size=500,
        random_state=1,
        address=address,
        store=tmp_path / "fit",
        progress=interrupt,
    )
    with pytest.raises(KeyboardInterrupt):
        cut.fit(X)
    records = []
    resumed = cut.set_params(progress=records.append).fit(X)
    assert records[0].iteration == 3  # continued after the two checkpointed passes
    assert resumed.n_passes_ == whole.n_passes_ == records[-1].iteration
    np.testing.assert_array_equal(resumed.eigenvalues_, whole.eigenvalues_)
    np.testing.assert_array_equal(resumed.eigenvectors_, whole.eigenvectors_)


def test_tiles_formed_in_blocks_make_the_products_of_the_whole_tiles(
    client, monkeypatch
):
    """``gram_times`` forms K a block at a time (``blocks.product_rows``, the
    diagonal blocks by k(X_a)): K B as the whole tiles gave it, with a White
    kernel's noise on K's diagonal only, as in the reference's k(X); dense and
    sparse X."""
    import scipy.sparse

    from backends.dask import blocks, kpca
    from backends.dask.runtime import FitStore
    from kernelref.kernels import RBF, White

    monkeypatch.setattr(blocks, "BLOCK_ENTRIES", 6 * 8)  # blocks of 6 × 8
    monkeypatch.setattr(blocks, "COLUMN_BLOCK", 8)
    monkeypatch.setattr(kpca, "COLUMN_BLOCK", 8)
    X = data(230, seed=3)
    B = np.random.default_rng(4).normal(size=(230, 5))
    kernel = RBF(0.5) + White(0.3)
    for given in (X, scipy.sparse.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0))):
        store = FitStore.prepare(
            None, given, identity={"test": "blocks"}, chunk_size=100, client=client
        )
        KB = np.concatenate(
            [kpca.gram_times(store.x_ref, i, kernel, B) for i in range(3)], axis=0
        )
        np.testing.assert_allclose(KB, kernel(given) @ B, rtol=1e-12, atol=1e-12)


def test_the_default_chunk_size_fits_a_300_mib_worker(tmp_path):
    """With chunk_size=4096 (the default), a task held a 4096² tile (128 MiB) and
    its kernel's temporaries: a 300 MiB worker was killed (KilledWorker, at N =
    6500, as in the audit). The tasks now form their tiles in strips."""
    import distributed

    X = data(6500, seed=5)
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        memory_limit="300MiB",
        dashboard_address=":0",
    ) as cluster:
        address = cluster.scheduler_address
        kpca = KernelPCA(3, gamma=0.5, random_state=0, address=address).fit(X)
        assert kpca.chunk_size == 4096
        small = KernelPCA(3, gamma=0.5, chunk_size=2000, random_state=0)
        small.set_params(address=address).fit(X)
    np.testing.assert_allclose(kpca.eigenvalues_, small.eigenvalues_, rtol=1e-9)
    np.testing.assert_allclose(
        np.abs(kpca.eigenvectors_), np.abs(small.eigenvectors_), rtol=0, atol=1e-7
    )


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n_components": None}, ValueError, "n_components"),
        ({"kernel": "precomputed"}, ValueError, "precomputed"),
        ({"tol": 2.0}, ValueError, "tol"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        KernelPCA(**kwargs).fit(data(30))
