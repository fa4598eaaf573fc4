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
