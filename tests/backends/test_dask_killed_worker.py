"""A task that kills every worker that runs it: the backends' waits raise
distributed's ``KilledWorker`` with the usual cause and the fix in its message
(before: distributed's words alone, which name neither)."""

import os

import pytest

distributed = pytest.importorskip("distributed")

from backends.dask import waiting  # noqa: E402

pytestmark = pytest.mark.slow


def die():
    os._exit(1)  # as the memory monitor's SIGKILL ends a worker: no exception


def test_a_task_that_kills_its_workers_is_explained():
    import dask

    # one death is enough for distributed to give up on the task
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with (
            distributed.LocalCluster(
                n_workers=1,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            future = client.submit(die, pure=False)
            with pytest.raises(distributed.KilledWorker) as caught:
                waiting.gather(client, [future])
    plain = str(distributed.KilledWorker(*caught.value.args))  # distributed's words
    message = str(caught.value)
    assert "1 different workers" in plain and message.startswith(plain)
    assert "ran out of memory" in message
    assert "memory_limit=" in message and "chunk_size" in message
    assert caught.value.original == plain
    assert waiting.workers_killed(caught.value) is None  # explained once
    assert waiting.workers_killed(ValueError("x")) is None
