"""What the backend tells a user: a refused store says what really differs, a
resumed fit says that it resumed, and ``address=`` that is no scheduler is
refused within a timeout."""

import asyncio
import io
import logging
import socket
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")
pytest.importorskip("zarr")

from resilience import Interrupted  # noqa: E402

from backends.dask import RVR, SVC  # noqa: E402
from backends.dask.cluster import check_scheduler, get_client  # noqa: E402
from backends.dask.runtime import StoreMismatchError  # noqa: E402

pytestmark = pytest.mark.slow


def data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1, -1)


def refusal(make, X, y):
    with pytest.raises(StoreMismatchError) as refused:
        make().fit(X, y)
    return refused.value.mismatch


def test_a_store_of_another_estimator_names_both_estimators(client, tmp_path):
    X, y = data()
    options = dict(store=tmp_path / "s.zarr", address=client.scheduler.address)
    SVC(gamma=0.5, chunk_size=50, progress=False, **options).fit(X, y)
    mismatch = refusal(
        lambda: RVR(gamma=0.5, chunk_size=50, progress=False, **options), X, y
    )
    assert "made by SVC, this fit is RVR" in mismatch
    assert "labels" not in mismatch and "other data" not in mismatch


def test_a_refit_with_another_C_names_C_with_both_values(client, tmp_path):
    X, y = data()
    options = dict(store=tmp_path / "s.zarr", address=client.scheduler.address)
    SVC(gamma=0.5, C=1.0, chunk_size=50, progress=False, **options).fit(X, y)
    mismatch = refusal(
        lambda: SVC(gamma=0.5, C=2.5, chunk_size=50, progress=False, **options), X, y
    )
    assert "C stored 1.0, given 2.5" in mismatch
    # the other parameters are not listed: only what differs
    assert "gamma" not in mismatch and "tol" not in mismatch


def test_other_targets_are_named_without_an_unchanged_X(client, tmp_path):
    X, y = data()
    options = dict(store=tmp_path / "s.zarr", address=client.scheduler.address)
    RVR(gamma=0.5, chunk_size=50, progress=False, **options).fit(X, y)
    mismatch = refusal(
        lambda: RVR(gamma=0.5, chunk_size=50, progress=False, **options), X, -y
    )
    assert "differs in ['labels']" in mismatch and "labels stored shape" in mismatch
    assert "X stored" not in mismatch
    svc = dict(options, store=tmp_path / "svc.zarr")
    SVC(gamma=0.5, chunk_size=50, progress=False, **svc).fit(X, y)
    mismatch = refusal(
        lambda: SVC(gamma=0.5, chunk_size=50, progress=False, **svc), X, -y
    )
    assert "problems differs (the targets" in mismatch


def sinc_fit(client, tmp_path, seed):
    """A regression problem of 300 points and the RVR options of a fit into
    ``tmp_path/r.zarr`` on the cluster, for the resume tests."""
    X, y = data(300, seed=seed)
    options = dict(
        gamma=0.5,
        chunk_size=100,
        store=tmp_path / "r.zarr",
        address=client.scheduler.address,
    )
    return X, np.sinc(X[:, 0]) + 0.05 * y, options


def test_a_resumed_fit_says_it_resumed(client, tmp_path, caplog):
    X, t, options = sinc_fit(client, tmp_path, seed=3)

    def stop_at_3(record):
        assert record.resumed_from is None  # a fit from its start
        if record.iteration == 3:
            raise Interrupted

    with pytest.raises(Interrupted):
        RVR(progress=stop_at_3, **options).fit(X, t)
    records = []
    with caplog.at_level(logging.INFO, logger="backends.dask.runtime"):
        RVR(progress=records.append, **options).fit(X, t)
    said = [r.getMessage() for r in caplog.records if r.name == "backends.dask.runtime"]
    assert any("resumed from its checkpoint" in m and "iteration 3" in m for m in said)
    first = records[0]
    assert first.resumed_from == 3 and first.iteration == 4
    fresh = []
    RVR(progress=fresh.append, **{**options, "store": None}).fit(X, t)
    assert all(r.resumed_from is None for r in fresh)


class Listener:
    """A port that accepts connections and never answers (a server that is no
    Dask scheduler)."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(8)
        self.address = "tcp://127.0.0.1:%d" % self.socket.getsockname()[1]

    def close(self):
        self.socket.close()


def test_address_of_a_port_that_is_no_scheduler_is_refused_within_timeout():
    listener = Listener()
    try:
        with pytest.raises(OSError, match=r"no Dask scheduler answered.*within 1 s"):
            get_client(listener.address, timeout=1)

        # the same from a running event loop (a Jupyter cell)
        async def in_a_cell():
            return get_client(listener.address, timeout=1)

        with pytest.raises(OSError, match="address='tcp://127.0.0.1:"):
            asyncio.run(in_a_cell())
    finally:
        listener.close()


def test_address_of_a_worker_is_named_as_such(client):
    worker = next(iter(client.scheduler_info()["workers"]))
    with pytest.raises(OSError, match=r"it is a Dask Worker, not a scheduler"):
        get_client(worker, timeout=5)


def test_check_scheduler_gives_the_identity_within_a_running_loop(client):
    async def in_a_cell():
        return check_scheduler(client.scheduler.address, 5)

    assert asyncio.run(in_a_cell())["type"] == "Scheduler"


def test_a_lower_dask_connect_timeout_is_honoured():
    import dask

    listener = Listener()
    try:
        with (
            dask.config.set({"distributed.comm.timeouts.connect": "1s"}),
            pytest.raises(OSError, match="within 1 s"),
        ):
            get_client(listener.address)
    finally:
        listener.close()


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_resumed_fit_says_so_on_its_progress_bar(client, tmp_path, monkeypatch):
    X, t, options = sinc_fit(client, tmp_path, seed=4)

    def stop_at_2(record):
        if record.iteration == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        RVR(progress=stop_at_2, **options).fit(X, t)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    RVR(progress=None, **options).fit(X, t)
    monkeypatch.undo()
    assert "(resumed at iteration 2)" in terminal.getvalue()
