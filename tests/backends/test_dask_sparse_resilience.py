"""A sparse (scipy.sparse X) Dask SVC fit survives a killed worker and an
interruption: its tasks read X's CSR chunks from the fit store
(``backends.dask.sparse_rows``), so a worker killed mid-fit is replaced and its
tasks rerun on the chunks, and an interrupted fit resumes from the store's
checkpoint; both end with the model of the uninterrupted fit.
"""

import os

import numpy as np
import pytest

pytest.importorskip("distributed")

from resilience import Interrupted, kill_a_worker  # noqa: E402
from test_dask_sparse import text_like  # noqa: E402

from backends.dask import svm as dask_svm  # noqa: E402
from backends.dask.runtime import FitStore  # noqa: E402

pytestmark = pytest.mark.slow

# 800 rows of 20 000 columns, 0.2% filled: 8 outer iterations of the block
# decomposition (partition_size < N), about a second per fit.
PARAMS = dict(
    C=1.0, gamma=0.02, partition_size=300, working_set_size=128, chunk_size=300
)


@pytest.fixture(scope="module")
def problem(client):
    """X (CSR), y and the uninterrupted fit, which needs several outer iterations."""
    X, y = text_like(800, 20_000, 2e-3, seed=1)
    clean = dask_svm.SVC(
        progress=False, address=client.scheduler.address, **PARAMS
    ).fit(X, y)
    assert clean.fit_info_[0]["solver"] == "block decomposition"
    assert clean.fit_info_[0]["outer_iterations"] >= 4
    return X, y, clean


def assert_same_model(fitted, clean, X):
    np.testing.assert_array_equal(fitted.support_, clean.support_)
    np.testing.assert_allclose(fitted.dual_coef_, clean.dual_coef_, atol=1e-12)
    np.testing.assert_allclose(fitted.intercept_, clean.intercept_, atol=1e-12)
    np.testing.assert_array_equal(fitted.predict(X), clean.predict(X))


def test_killed_worker_gives_the_same_sparse_model(client, problem):
    X, y, clean = problem
    killed = []

    def kill_one(record):
        if record.iteration == 2 and not killed:
            killed.append(kill_a_worker(client))

    survivor = dask_svm.SVC(
        progress=kill_one, address=client.scheduler.address, **PARAMS
    ).fit(X, y)
    assert killed
    assert_same_model(survivor, clean, X)
    client.wait_for_workers(2, timeout=60)
    assert killed[0] not in client.run(os.getpid).values()


def test_interrupted_sparse_fit_resumes_to_the_same_model(client, problem, tmp_path):
    X, y, clean = problem

    def stop_at_three(record):
        if record.iteration == 3:
            raise Interrupted

    store = tmp_path / "fit.zarr"
    with pytest.raises(Interrupted):
        dask_svm.SVC(
            store=store, progress=stop_at_three, address=client.scheduler.address,
            **PARAMS,
        ).fit(X, y)  # fmt: skip
    assert FitStore.open(store).x_ref.sparse  # X kept as CSR chunks
    seen = []
    resumed = dask_svm.SVC(
        store=store, progress=seen.append, address=client.scheduler.address, **PARAMS
    ).fit(X, y)
    assert seen[0].iteration == 4, "the resumed fit starts after the checkpoint"
    assert (
        resumed.fit_info_[0]["outer_iterations"]
        == clean.fit_info_[0]["outer_iterations"]
    )
    assert_same_model(resumed, clean, X)
