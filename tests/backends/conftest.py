"""One real two-process Dask cluster shared by every backend test."""

import pytest


@pytest.fixture(scope="session")
def client():
    """A ``distributed.Client`` of a ``LocalCluster`` with two single-threaded
    worker processes, started once per test session and closed at its end."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
