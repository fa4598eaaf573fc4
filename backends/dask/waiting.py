"""Waiting for a round of tasks without hanging on a paused worker.

Dask's memory monitor pauses a worker whose process memory passes
``distributed.worker.memory.pause`` of its ``memory_limit``: it starts no task
until the memory falls again. Memory the process holds itself (a worker-global,
a cache) never falls, so the tasks assigned to it never run and a fit waiting
for them would wait forever, silently. Every wait of the backends goes through
this module instead of ``client.gather``/``as_completed``/``.compute()``:

- ``gather``: a round's results, in order;
- ``finished``: a round's futures as they finish (a build's progress);
- ``compute``: a dask collection, on the distributed client dask would use.

While waiting they look at the workers every ``PAUSE_POLL_SECONDS``; a worker
paused, idle and holding the round's tasks for ``PAUSE_GRACE_SECONDS`` fails
the round with ``WorkerPausedError``, which names the worker, its memory, its
limit and the fix. A round whose task killed every worker that ran it fails
with distributed's ``KilledWorker``, its message extended by the usual cause
and the fix (``workers_killed``). ``backends.dask.runtime`` re-exports the
three and ``WorkerPausedError``.
"""

import functools
import time

__all__ = [
    "PAUSE_GRACE_SECONDS",
    "PAUSE_POLL_SECONDS",
    "WorkerPausedError",
    "compute",
    "finished",
    "gather",
]

#: Seconds a worker may stay paused by Dask's memory monitor while tasks of a
#: round wait on it, running no task and spilling nothing, before the round is
#: given up (``WorkerPausedError``). Only an idle pause counts: a worker paused
#: while it runs a task is waited for, however long the task, and a look that
#: finds it spilled more to disk restarts the count. What frees an idle
#: worker's memory (its monitor's garbage collection and spilling, every 0.1 s)
#: acts within seconds; 20 idle seconds without it is memory nothing will free
#: (dask/distributed#5999: a worker paused by unmanaged memory stays paused).
PAUSE_GRACE_SECONDS = 20.0

#: Seconds between two looks at the workers' status while a round is waited for
#: (none for a round that ends sooner).
PAUSE_POLL_SECONDS = 1.0


class WorkerPausedError(MemoryError):
    """A round's tasks wait on a worker that Dask's memory monitor has paused
    (its process memory above ``distributed.worker.memory.pause`` of its
    ``memory_limit``) and that can free nothing: the round would never end."""


def gather(client, futures, *, grace=None, inputs=()):
    """The results of `futures` (in order), as ``client.gather``, but a round
    held by a paused worker raises ``WorkerPausedError`` instead of hanging.
    `inputs` are futures the round's tasks depend on (``map_chunks``'s
    arguments): watched as the round's own tasks are, never gathered.

    While waiting, the workers' status is read from the scheduler every
    ``PAUSE_POLL_SECONDS``. A worker that is paused, runs no task, spills
    nothing and has tasks of `futures` assigned to it (or, when every worker
    is so, any worker while tasks wait) for more than `grace` seconds
    (``PAUSE_GRACE_SECONDS`` if None) stops the wait: the futures are
    cancelled and the error names the worker, its memory and the fix. Any
    error also cancels the futures, so no work is left running.
    """
    watch = _PauseWatch(client, PAUSE_GRACE_SECONDS if grace is None else grace)
    try:
        watch.wait(futures, "ALL_COMPLETED", inputs)
        return client.gather(futures)
    except BaseException as error:
        client.cancel(futures)
        killed = workers_killed(error)
        if killed is not None:
            raise killed from error
        raise


def workers_killed(error):
    """For distributed's ``KilledWorker`` (every worker that ran a task died),
    the same error with the usual cause and the fix in its message (a subclass,
    so code that catches ``KilledWorker`` still does); None for any other."""
    from distributed import KilledWorker

    if not isinstance(error, KilledWorker) or hasattr(error, "original"):
        return None
    return _explained_killed_worker()(*error.args)


@functools.cache
def _explained_killed_worker():
    # made on first use: importing this module must not import distributed
    # (a saved model predicting in the process never does)
    from distributed import KilledWorker

    class WorkersKilledError(KilledWorker):
        @property
        def original(self):
            return super().__str__()

        def __str__(self):
            return (
                f"{self.original} Most often a worker ran out of memory: its log "
                "then says 'exceeded 95% memory budget'. Give each worker more "
                "memory (memory_limit=, or dask worker --memory-limit), or make "
                "the tasks smaller: a smaller chunk_size (its tasks hold blocks of "
                "the kernel matrix with chunk_size rows)."
            )

    return WorkersKilledError


def compute(collection):
    """``collection.compute()`` (a dask array, say), waited for through ``gather``
    when dask would run it on a distributed client, so a paused worker fails it
    with ``WorkerPausedError``; dask's own scheduler otherwise."""
    from dask.base import get_scheduler
    from distributed import Client

    client = getattr(get_scheduler(collections=[collection]), "__self__", None)
    if not isinstance(client, Client):
        return collection.compute()
    return gather(client, [client.compute(collection)])[0]


def finished(client, futures, *, grace=None):
    """Yield `futures` as they finish (in any order), as
    ``distributed.as_completed``, watched as ``gather`` watches its wait: a
    worker paused with tasks of `futures` raises ``WorkerPausedError``.

    For a loop that acts on each future as it finishes (a build's progress).
    An error raised while waiting, or the loop leaving early, cancels the
    futures; an error raised in the caller's loop body is the caller's to
    cancel them for.
    """
    watch = _PauseWatch(client, PAUSE_GRACE_SECONDS if grace is None else grace)
    pending = list(futures)
    try:
        while pending:
            watch.wait(pending, "FIRST_COMPLETED")
            done = [f.done() for f in pending]
            yield from (f for f, d in zip(pending, done) if d)
            pending = [f for f, d in zip(pending, done) if not d]
    except BaseException:
        client.cancel(futures)
        raise


class _PauseWatch:
    """Since when each worker has been paused and idle while holding the round."""

    def __init__(self, client, grace, clock=time.monotonic):
        self.client, self.grace, self.clock = client, grace, clock
        self.since = {}  # address -> (monotonic time, bytes spilled to disk then)
        self.looked = clock()  # the first look is one poll after the start

    def wait(self, futures, return_when, inputs=()):
        """Block until `return_when` (``"ALL_COMPLETED"`` or
        ``"FIRST_COMPLETED"``) holds for `futures` or one of them fails, with a
        ``check`` of the keys still pending, theirs and their `inputs`', every
        ``PAUSE_POLL_SECONDS`` (counted from the watch's start, whatever
        finishes meanwhile)."""
        # distributed.wait would wait through the default client, which a backend
        # given ``address=`` does not set (nor another client's futures): the
        # same wait, on this watch's client.
        from distributed.client import _wait

        while True:
            due = self.looked + PAUSE_POLL_SECONDS - self.clock()
            if due <= 0:
                self.check({f.key for f in [*futures, *inputs] if not f.done()})
                due = PAUSE_POLL_SECONDS
            try:
                self.client.sync(_wait, futures, timeout=due, return_when=return_when)
                return
            except TimeoutError:
                pass
            if any(f.status == "error" for f in futures):
                return

    def check(self, pending):
        """Raise ``WorkerPausedError`` if a worker has held `pending` keys, paused
        and idle, for longer than the grace period."""
        self.looked = self.clock()
        if not pending:
            return
        workers = self.client.scheduler_info()["workers"]
        stuck = {a: w for a, w in workers.items() if _paused_and_idle(w)}
        holding = set()
        if stuck and len(stuck) == len(workers):
            holding = set(stuck)  # no worker can run the tasks waiting
        elif stuck:
            try:
                processing = self.client.processing(list(stuck))
            except KeyError:  # a worker left since: look again next time
                processing = {}
            holding = {a for a, keys in processing.items() if pending & set(keys)}
        now = self.clock()
        since = {}
        for address in holding:
            spilled = _spilled(workers[address])
            start, before = self.since.get(address, (now, spilled))
            since[address] = (now, spilled) if spilled > before else (start, before)
        self.since = since
        for address, (start, _) in since.items():
            if now - start > self.grace:
                raise WorkerPausedError(
                    _paused_message(self.client, address, workers[address], now - start)
                )


def _paused_and_idle(worker):
    counts = worker.get("metrics", {}).get("task_counts", {})
    busy = counts.get("executing", 0) + counts.get("long-running", 0)
    return worker.get("status") == "paused" and not busy


def _spilled(worker):
    return worker.get("metrics", {}).get("spilled_bytes", {}).get("disk", 0)


def _paused_message(client, address, worker, seconds):
    import dask

    limit = worker.get("memory_limit") or 0
    memory = worker.get("metrics", {}).get("memory", 0)
    try:  # the worker's own threshold (its configuration may differ from ours)
        pause = client.run(_pause_fraction, workers=[address])[address]
    except Exception:
        pause = dask.config.get("distributed.worker.memory.pause")
    threshold = f"{pause:.0%} of " if pause else ""
    return (
        f"the Dask worker {address} has been paused by Dask's memory monitor "
        f"for at least {seconds:.0f} s while tasks of this fit wait on it: its "
        f"process uses {memory / 2**20:.0f} MiB of its memory_limit of "
        f"{limit / 2**20:.0f} MiB, above the pause threshold ({threshold}the "
        "limit, distributed.worker.memory.pause), and it runs nothing that could "
        "free it, so the fit could wait forever (the round is cancelled). Give "
        "the workers a larger memory_limit "
        "(LocalCluster(memory_limit=...) or dask worker --memory-limit), or make "
        "the estimator hold less per worker: a smaller cache_size (RVM) or a "
        "smaller chunk_size."
    )


def _pause_fraction(dask_worker):
    return dask_worker.memory_manager.memory_pause_fraction
