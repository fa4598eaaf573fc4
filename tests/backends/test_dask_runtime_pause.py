"""A worker paused by Dask's memory monitor fails a round with a clear error.

Dask pauses a worker whose process memory passes ``distributed.worker.memory.pause``
of its ``memory_limit``: it starts no task until the memory falls again. Memory
held by the process itself (a worker-global, a cache) never falls, so the tasks
assigned to the worker never run and a round waiting for them would hang. These
tests make a worker really pause (an allocation kept alive on the worker, sized
from its own limit and thresholds) and check that the runtime's wait
(``runtime.gather``, used by ``map_chunks``) gives up with ``WorkerPausedError``
after its grace period, while a healthy round, and one whose worker pauses only
while it runs a task, are unaffected. Real fits whose worker pauses in the middle
of a round (the library's own task takes the memory at its first call: the RVR's
chunk reads, the Gram store's block writes) fail the same way within seconds of
the grace, where they hung before; each has a watchdog (pytest-timeout) so a
regression fails instead of hanging.
"""

import importlib
import itertools
import threading
import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("zarr")

from backends.dask import runtime, waiting  # noqa: E402
from backends.dask.runtime import FitStore, WorkerPausedError, read_chunk  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: Each worker's limit: about 100 MB of libraries below its pause threshold.
MEMORY_LIMIT = 800 * 2**20
#: A short grace for the tests (the library's is ``waiting.PAUSE_GRACE_SECONDS``).
GRACE = 3.0
HELD = "_kernelref_test_held"
PATCHED = "_kernelref_test_patched"


@pytest.fixture(scope="module")
def client():
    """Two single-threaded worker processes of MEMORY_LIMIT each, without work
    stealing: Dask's stealing sometimes moves a paused worker's task to an idle
    worker (when its estimated occupancy is high enough) and sometimes not — in
    the CI hang it did not — so the tests turn it off to see the stuck case every
    time."""
    import dask

    with (
        dask.config.set({"distributed.scheduler.work-stealing": False}),
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=MEMORY_LIMIT,
            dashboard_address=":0",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture
def cluster(client):
    """The client; afterwards every worker frees what it holds and runs again."""
    yield client
    client.run(release)
    wait_for_status(client, lambda statuses: set(statuses) == {"running"})


@pytest.fixture
def store(tmp_path, cluster):
    X = np.random.default_rng(0).normal(size=(80, 3))
    return X, FitStore.prepare(
        tmp_path / "fit", X, identity={"fit": "pause"}, chunk_size=10, client=cluster
    )


# -- on the workers ----------------------------------------------------------------
def hold(dask_worker=None):
    """Allocate and keep (in a worker attribute) memory enough to lift the process
    halfway from the worker's pause threshold to its terminate threshold, both read
    from the worker's own configuration."""
    import dask
    import psutil

    worker = dask_worker or distributed.get_worker()
    manager = worker.memory_manager
    pause = manager.memory_pause_fraction
    terminate = dask.config.get("distributed.worker.memory.terminate") or 1.0
    target = (pause + min(terminate, 1.0)) / 2 * manager.memory_limit
    need = int(target - psutil.Process().memory_info().rss)
    setattr(worker, HELD, np.ones(max(need, 0) // 8))
    return worker.address


def pause_fraction(dask_worker):
    return dask_worker.memory_manager.memory_pause_fraction


def release(dask_worker):
    dask_worker.__dict__.pop(HELD, None)


def until_paused(worker, seconds=10.0):
    """Wait (in the task's thread) until the memory monitor pauses `worker`."""
    end = time.monotonic() + seconds
    while worker.status.name != "paused" and time.monotonic() < end:
        time.sleep(0.05)
    return worker.status.name == "paused"


def hold_in_chunk_0(ref, i):
    """A round's task: chunk 0's worker takes the memory and keeps it (the worker
    then pauses with its other tasks of the round still assigned)."""
    if i == 0:
        hold()
        until_paused(distributed.get_worker())
    return read_chunk(ref, i).sum()


def hold_while_running(ref, i, seconds):
    """A round's task: chunk 0 holds the memory only while it runs, `seconds`
    long, so its worker is paused but busy; returns (sum, paused)."""
    paused = False
    if i == 0:
        worker = distributed.get_worker()
        hold()
        paused = until_paused(worker)
        time.sleep(seconds)
        release(worker)
    else:
        time.sleep(0.2)
    return read_chunk(ref, i).sum(), paused


def hold_at_0_else_sleep(i, seconds):
    """Task 0 pauses its worker (with its next task assigned); the others sleep."""
    if i == 0:
        hold()
        until_paused(distributed.get_worker())
    else:
        time.sleep(seconds)
    return i


def slow_sum(ref, i):
    time.sleep(0.3)
    return read_chunk(ref, i).sum()


def pause_at_first_call(owner, name, dask_worker):
    """On this worker: replace attribute `name` of `owner` (a module, or
    ``module:attribute``) by a wrapper whose first call takes the memory
    (``hold``) and waits until the memory monitor pauses the worker, then runs
    the original. A fit's own task then pauses its worker in the middle of a
    round, with the round's next task already assigned to it (the scheduler
    sends a worker a task ahead), as a fit's growing memory did in the CI hang.
    Tasks name their functions by module and name, so they call the wrapper."""
    target = importlib.import_module(owner.partition(":")[0])
    if owner.partition(":")[2]:
        target = getattr(target, owner.partition(":")[2])
    original, calls = getattr(target, name), itertools.count()

    def first_call_pauses(*args, **kwargs):
        if next(calls) == 0:
            hold(dask_worker)
            until_paused(dask_worker)
        return original(*args, **kwargs)

    setattr(target, name, first_call_pauses)
    setattr(dask_worker, PATCHED, (target, name, original))


def restore(dask_worker):
    """Undo ``pause_at_first_call`` on this worker."""
    patched = dask_worker.__dict__.pop(PATCHED, None)
    if patched is not None:
        setattr(*patched)


# -- on the client ------------------------------------------------------------------
def wait_for_status(client, condition, seconds=30.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        statuses = [w["status"] for w in client.scheduler_info()["workers"].values()]
        if condition(statuses):
            return statuses
        time.sleep(0.1)
    raise AssertionError(f"workers still {statuses} after {seconds} s")


def chunk_sums(X, store):
    return [X[store.rows(i)].sum() for i in range(store.n_chunks)]


def assert_names_worker_limit_and_fix(message, client, address):
    """The error names the paused worker, its memory_limit, its pause threshold
    (read from the worker) and the fix."""
    limit = client.scheduler_info()["workers"][address]["memory_limit"]
    pause = client.run(pause_fraction, workers=[address])[address]
    assert address in message and f"memory_limit of {limit / 2**20:.0f} MiB" in message
    assert f"{pause:.0%} of the limit" in message and "paused by Dask" in message
    assert "larger memory_limit" in message and "smaller cache_size" in message


def test_a_healthy_round_longer_than_a_poll_is_unaffected(cluster, store):
    X, fit_store = store
    client = cluster
    tick = time.monotonic()
    sums = runtime.map_chunks(client, slow_sum, fit_store.x_ref)
    assert time.monotonic() - tick > waiting.PAUSE_POLL_SECONDS, "the watch polled"
    np.testing.assert_allclose(sums, chunk_sums(X, fit_store), rtol=1e-12)


def test_a_worker_paused_with_the_rounds_tasks_fails_the_round(
    cluster, store, monkeypatch
):
    X, fit_store = store
    client = cluster
    monkeypatch.setattr(waiting, "PAUSE_GRACE_SECONDS", GRACE)
    tick = time.monotonic()
    with pytest.raises(WorkerPausedError) as error:
        runtime.map_chunks(client, hold_in_chunk_0, fit_store.x_ref)
    elapsed = time.monotonic() - tick
    paused = [
        a
        for a, w in client.scheduler_info()["workers"].items()
        if w["status"] == "paused"
    ]
    assert len(paused) == 1, "one worker holds the memory and is paused"
    message = str(error.value)
    assert_names_worker_limit_and_fix(message, client, paused[0])
    assert elapsed > GRACE, "a pause is tolerated for the grace period"
    print(f"\nWorkerPausedError after {elapsed:.1f} s (grace {GRACE} s): {message}")
    assert client.processing(paused)[paused[0]] == (), "the round's tasks are cancelled"


def test_every_worker_paused_fails_a_round_waiting_on_the_scheduler(cluster):
    client = cluster
    client.run(hold)
    wait_for_status(client, lambda statuses: set(statuses) == {"paused"})
    futures = client.map(np.sqrt, range(4), pure=False)
    tick = time.monotonic()
    with pytest.raises(WorkerPausedError, match="paused by Dask's memory monitor"):
        runtime.gather(client, futures, grace=GRACE)
    elapsed = time.monotonic() - tick
    assert elapsed > GRACE
    print(f"\nWorkerPausedError after {elapsed:.1f} s (grace {GRACE} s)")
    assert all(f.cancelled() for f in futures)


def hold_then_return(value):
    """Take the memory, wait for the pause, and finish: the worker is then
    paused and idle with the tasks queued behind this one."""
    hold()
    until_paused(distributed.get_worker())
    return value


def test_a_paused_worker_holding_an_input_of_the_round_fails_it(cluster):
    """A round's argument (``map_chunks`` puts each in the graph as one task)
    assigned to a worker that pauses before running it: the round's own tasks
    wait on it, assigned to no worker, so only watching the inputs sees it."""
    client = cluster
    first, other = sorted(client.scheduler_info()["workers"])
    busy = client.submit(hold_then_return, 0, workers=[first], pure=False)
    value = client.submit(np.ones, 3, workers=[first], pure=False)  # queued
    futures = client.map(np.sum, [value] * 4, workers=[other], pure=False)
    tick = time.monotonic()
    with pytest.raises(WorkerPausedError) as error:
        runtime.gather(client, futures, grace=GRACE, inputs=[value])
    elapsed = time.monotonic() - tick
    assert busy.result() == 0 and elapsed > GRACE
    assert_names_worker_limit_and_fix(str(error.value), client, first)
    print(f"\nWorkerPausedError after {elapsed:.1f} s (grace {GRACE} s)")
    client.cancel([value])


def test_a_dask_collection_computed_on_paused_workers_fails(cluster, monkeypatch):
    """``runtime.compute``, which turns dask input into numpy (``materialise``)."""
    import dask
    import dask.array as da

    client = cluster
    monkeypatch.setattr(waiting, "PAUSE_GRACE_SECONDS", GRACE)
    X = da.arange(40.0, chunks=10)
    with dask.config.set(scheduler=client):
        np.testing.assert_array_equal(runtime.compute(X), np.arange(40.0))
        client.run(hold)
        wait_for_status(client, lambda statuses: set(statuses) == {"paused"})
        tick = time.monotonic()
        with pytest.raises(
            WorkerPausedError, match=f"memory_limit of {MEMORY_LIMIT / 2**20:.0f} MiB"
        ):
            runtime.compute(2 * X)
    elapsed = time.monotonic() - tick
    assert elapsed > GRACE
    print(
        f"\nruntime.compute: WorkerPausedError after {elapsed:.1f} s (grace {GRACE} s)"
    )


def test_a_worker_paused_only_while_it_runs_a_task_is_waited_for(cluster, store):
    X, fit_store = store
    client = cluster
    out = {}

    def run():
        try:
            out["results"] = runtime.gather(
                client,
                client.map(
                    hold_while_running,
                    [fit_store.x_ref] * fit_store.n_chunks,
                    range(fit_store.n_chunks),
                    [GRACE + 2.0] * fit_store.n_chunks,
                    pure=False,
                ),
                grace=GRACE,
            )
        except BaseException as error:  # reported by the assertion below
            out["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the round did not finish"
    assert "error" not in out, out.get("error")
    sums, paused = zip(*out["results"])
    assert paused[0], "chunk 0's worker was paused while it ran"
    np.testing.assert_allclose(sums, chunk_sums(X, fit_store), rtol=1e-12)


def test_finished_looks_while_the_other_worker_keeps_finishing(cluster):
    """``finished`` (the Gram store build's wait) looks at the workers every poll
    even while futures keep finishing: the error comes while the healthy worker
    still works through its share (39 tasks of 0.5 s), not once it has run out."""
    client = cluster
    futures = client.map(hold_at_0_else_sleep, range(40), [0.5] * 40, pure=False)
    seen = []
    with pytest.raises(WorkerPausedError, match="paused by Dask's memory monitor"):
        for future in runtime.finished(client, futures, grace=GRACE):
            seen.append(future.result())
    assert 0 in seen and len(seen) < 39, f"the error came after {seen}"
    print(f"\nfinished: WorkerPausedError after {len(seen) - 1} of 39 healthy tasks")
    rest = [f for i, f in enumerate(futures) if i not in seen]
    assert rest and all(f.cancelled() for f in rest), "the rest is cancelled"


# -- real fits whose worker pauses in the middle of a round ---------------------------
@pytest.fixture
def pause_first(cluster, monkeypatch):
    """``pause_first(owner, name)``: one worker pauses at its first call of
    ``owner.name`` (``pause_at_first_call``); returns its address. The grace is
    GRACE: the watch runs on the client, so patching the module constant in this
    process reaches it."""
    monkeypatch.setattr(waiting, "PAUSE_GRACE_SECONDS", GRACE)
    address = sorted(cluster.scheduler_info()["workers"])[0]

    def patch(owner, name):
        cluster.run(pause_at_first_call, owner, name, workers=[address])
        return address

    yield patch
    cluster.run(restore)


def paused_workers(client):
    workers = client.scheduler_info()["workers"]
    return [a for a, w in workers.items() if w["status"] == "paused"]


#: Real fits, with 8 tasks a round (240 rows in chunks of 30), and the call of
#: the library whose first run on a worker takes the memory: a chunk read (the
#: RVR's design passes, the CG's products) or a Gram store block write (the
#: direct KernelRidge builds its store).
CHUNK_READ = ("backends.dask.runtime:_cache", "get")
FITS = [
    pytest.param("RVR", {"gamma": 0.1}, CHUNK_READ, id="RVR"),
    pytest.param(
        "KernelRidge", {"gamma": 0.1, "solver": "cg"}, CHUNK_READ, id="ridge-cg"
    ),
    pytest.param(
        "KernelRidge",
        {"gamma": 0.1, "solver": "cholesky"},
        ("backends.dask.blocks", "write_blocks"),
        id="ridge-cholesky",
    ),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, params, call", FITS)
def test_a_fit_whose_worker_pauses_fails_instead_of_hanging(
    cluster, pause_first, name, params, call
):
    import backends.dask

    rng = np.random.default_rng(0)
    X = rng.uniform(-10, 10, size=(240, 1))
    t = np.sinc(X[:, 0] / np.pi) + rng.normal(0, 0.1, size=240)
    address = pause_first(*call)
    model = getattr(backends.dask, name)(
        chunk_size=30, address=cluster.scheduler.address, progress=False, **params
    )
    tick = time.monotonic()
    with pytest.raises(WorkerPausedError) as error:
        model.fit(X, t)
    elapsed = time.monotonic() - tick
    assert paused_workers(cluster) == [address]
    assert_names_worker_limit_and_fix(str(error.value), cluster, address)
    assert elapsed > GRACE, "a pause is tolerated for the grace period"
    print(
        f"\n{name}({params}).fit: WorkerPausedError after {elapsed:.1f} s "
        f"(grace {GRACE} s)"
    )


@pytest.mark.timeout(60)
def test_a_gram_store_build_whose_worker_pauses_fails_then_resumes(
    cluster, pause_first, tmp_path
):
    from backends.dask.gram_store import GramStore
    from kernelref.kernels import RBF

    X = np.random.default_rng(0).normal(size=(200, 3))
    kernel, path, done = RBF(gamma=0.5), tmp_path / "gram", []
    address = pause_first("backends.dask.blocks", "write_blocks")
    tick = time.monotonic()
    with pytest.raises(WorkerPausedError) as error:
        # 8 block rows: 36 blocks in 8 tasks, the paused worker holds one.
        GramStore.build(
            path,
            X,
            kernel,
            chunk_size=25,
            client=cluster,
            progress=lambda n, total: done.append(n),
        )
    elapsed = time.monotonic() - tick
    assert paused_workers(cluster) == [address]
    assert_names_worker_limit_and_fix(str(error.value), cluster, address)
    assert elapsed > GRACE, "a pause is tolerated for the grace period"
    print(
        f"\nGramStore.build: WorkerPausedError after {elapsed:.1f} s (grace {GRACE} s)"
    )
    missing = GramStore(path).missing_blocks()
    assert 0 < len(missing) < 36 and done and done[-1] < 36, "stopped part way"

    cluster.run(restore)
    cluster.run(release)
    wait_for_status(cluster, lambda statuses: set(statuses) == {"running"})
    store = GramStore.build(path, X, kernel, chunk_size=25, client=cluster)
    assert store.is_complete
    K = kernel(X)
    for i in range(store.n_blocks):
        for j in range(i + 1):
            rows, cols = store.block_slice(i), store.block_slice(j)
            np.testing.assert_allclose(store.block(i, j), K[rows, cols], atol=1e-12)


# -- the watch's rule, on a scripted scheduler (no cluster) ---------------------------
class ScriptedClient:
    """Answers the watch's two scheduler queries from `workers` and `processing`."""

    def __init__(self):
        self.workers, self.tasks = {}, {}

    def set(self, address, status, executing=0, spilled=0, tasks=()):
        self.workers[address] = {
            "status": status,
            "memory_limit": MEMORY_LIMIT,
            "metrics": {
                "memory": int(0.85 * MEMORY_LIMIT),
                "task_counts": {"executing": executing} if executing else {},
                "spilled_bytes": {"memory": 0, "disk": spilled},
            },
        }
        self.tasks[address] = tuple(tasks)

    def scheduler_info(self):
        return {"workers": dict(self.workers)}

    def processing(self, workers):
        return {a: self.tasks[a] for a in workers}

    def run(self, function, workers):
        return {a: 0.8 for a in workers}


def watch_at(client, grace=20.0):
    """A watch and a clock to move: ``look(t, pending)`` checks at time t."""
    clock = [0.0]
    watch = waiting._PauseWatch(client, grace, clock=lambda: clock[0])

    def look(t, pending=frozenset({"k"})):
        clock[0] = t
        watch.check(set(pending))

    return look


def test_the_watch_counts_only_idle_paused_time_on_a_worker_holding_the_round():
    client = ScriptedClient()
    client.set("A", "paused", tasks=["k"])
    client.set("B", "running")
    look = watch_at(client)
    for t in (0.0, 10.0, 20.0):
        look(t)
    with pytest.raises(WorkerPausedError, match="worker A .* at least 20 s"):
        look(20.5)

    look = watch_at(client)
    client.set("A", "paused", executing=1, tasks=["k"])  # busy: waited for
    for t in (0.0, 30.0, 100.0):
        look(t)
    client.set("A", "paused", tasks=["other"])  # holds none of the round's tasks
    look(200.0)
    client.set("A", "paused", tasks=["k"])
    look(300.0)
    look(320.0)
    with pytest.raises(WorkerPausedError):
        look(320.5)


def test_spilling_restarts_the_count_and_all_paused_workers_fail_a_queued_round():
    client = ScriptedClient()
    client.set("A", "paused", tasks=["k"])
    client.set("B", "running")
    look = watch_at(client)
    look(0.0)
    client.set("A", "paused", spilled=10**8, tasks=["k"])
    look(15.0)
    look(35.0)
    with pytest.raises(WorkerPausedError):
        look(35.5)

    client = ScriptedClient()
    client.set("A", "paused")
    client.set("B", "paused")
    look = watch_at(client)
    look(0.0)
    with pytest.raises(WorkerPausedError, match="80% of the limit"):
        look(20.5)
