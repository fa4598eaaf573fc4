"""The backend arguments every Dask estimator shares, checked in one place
(``backends.dask.estimator_args``): each estimator refuses the same bad values
with the same message before any work, and a fit store's identity ignores the
arguments that change how a fit runs, not what it computes."""

import numpy as np
import pytest

pytest.importorskip("distributed")

import backends.dask as dask_backend  # noqa: E402
from backends.dask import estimator_args  # noqa: E402
from kernelref.kernels import RBF  # noqa: E402

BAD = {
    "store": (3, "store must be a directory path"),
    "address": (8786, "address must be a scheduler address"),
    "progress": ("yes", "progress must be None"),
    "resume": ("yes", "resume must be True"),
    "chunk_size": (0, "chunk_size must be a positive integer"),
}

ESTIMATORS = [
    dask_backend.SVC,
    dask_backend.RVR,
    dask_backend.RVC,
    dask_backend.GaussianProcessRegressor,
    dask_backend.GaussianProcessClassifier,
    dask_backend.KernelRidge,
    dask_backend.KernelPCA,
]


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", BAD)
def test_every_estimator_refuses_the_same_bad_argument(cls, name, tmp_path):
    value, message = BAD[name]
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = (X[:, 0] > 0).astype(float)
    params = {"store": tmp_path / "fit.zarr", "address": "tcp://nowhere:1", name: value}
    with pytest.raises((TypeError, ValueError), match=message):
        cls(**params).fit(X, y)
    assert not (tmp_path / "fit.zarr").exists()


def test_good_values_pass():
    class Args:
        store, address, chunk_size = "fit.zarr", "tcp://host:8786", 64
        progress, resume = print, np.True_

    estimator_args.check_backend_args(Args(), chunk_meaning="")
    for progress in (None, True, False):
        estimator_args.check_progress(progress)


def test_identity_ignores_operational_arguments_only():
    kernel = RBF(0.5)
    base = dask_backend.RVR(kernel=kernel)
    same = dask_backend.RVR(
        kernel=kernel, store="s", address="tcp://h:1", progress=False, resume=False
    )
    identity = estimator_args.fit_identity(base, kernel)
    assert identity == estimator_args.fit_identity(same, kernel)
    assert identity["kernel"] == kernel.spec()
    other = dask_backend.RVR(kernel=kernel, tol=1e-6)
    assert identity != estimator_args.fit_identity(other, kernel)
    # an estimator's own operational arguments are left out only where it names them
    chunked = dask_backend.RVR(kernel=kernel, chunk_size=7)
    assert identity != estimator_args.fit_identity(chunked, kernel)
    assert estimator_args.fit_identity(
        base, kernel, ("chunk_size",)
    ) == estimator_args.fit_identity(chunked, kernel, ("chunk_size",))
