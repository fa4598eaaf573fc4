"""Which Dask cluster the backend runs on.

The order of preference is the design's: an address the caller names, else the
active ``distributed.Client``, else an embedded ``LocalCluster`` sized to this
machine. Nothing starts at import; the embedded cluster starts on the first
call that needs it and is reused for the rest of the process.
"""

import asyncio
import atexit
import logging
import os
import sys
import threading

#: Share of the machine's memory given to the embedded cluster's workers; the
#: rest is left to the client process, which holds the data and the results.
MEMORY_FRACTION = 0.8

#: Seconds ``get_client(address)`` waits for the scheduler at an address to say
#: who it is, and to connect (distributed's own default is 30 s, and a port that
#: is no scheduler it waited on forever); set it, or give ``timeout=``. Dask's
#: ``distributed.comm.timeouts.connect``, where set lower, is honoured.
CONNECT_TIMEOUT = 10.0

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_embedded = {}
_by_address = {}


def get_client(address=None, timeout=None):
    """A ``distributed.Client`` to run the backend's tasks on.

    - ``address`` given: a client of the scheduler at that address. The active
      client is returned if it is connected to that scheduler; otherwise the
      address is asked who it is (``check_scheduler``) and a new client is made
      (and kept for later calls), all within `timeout` seconds (None:
      ``CONNECT_TIMEOUT``, or Dask's connect timeout if lower), without
      replacing the active one as the default — an explicit address is never
      silently ignored. Nothing answering, or something that is no scheduler,
      is an ``OSError`` naming ``address=``.
    - else the active client (``distributed.get_client``), if there is one;
    - else an embedded ``LocalCluster`` with one single-threaded worker process
      per core and ``memory_limit`` = 80% of the machine's memory / workers,
      created once per process and reused.

    Dask starts worker processes with ``OMP_NUM_THREADS=1`` and its siblings, so
    BLAS runs one thread per worker.
    """
    import distributed

    if address is not None:
        return _client_at(address, _timeout(timeout))
    try:
        return distributed.get_client()
    except ValueError:
        return _embedded_client()


def running_client(address=None, timeout=None):
    """The client ``get_client`` would give without starting a cluster: that of
    ``address`` if given, else the active client; None when ``get_client``
    would start the embedded cluster. Work that is small enough for this
    process (a prediction from a saved model, say) runs here on None."""
    if address is not None:
        return get_client(address, timeout)
    if "distributed" not in sys.modules:  # then no client is active: not imported
        return None  # (importing it takes a second or two)
    import distributed

    try:
        return distributed.get_client()
    except ValueError:
        return None


def _timeout(timeout):
    """`timeout` in seconds; None: ``CONNECT_TIMEOUT``, or Dask's
    ``distributed.comm.timeouts.connect`` where that is lower."""
    if timeout is not None:
        return float(timeout)
    import dask
    from dask.utils import parse_timedelta

    configured = dask.config.get("distributed.comm.timeouts.connect", None)
    if configured is None:
        return CONNECT_TIMEOUT
    return min(CONNECT_TIMEOUT, parse_timedelta(configured, default="seconds"))


def _client_at(address, timeout):
    import distributed

    if not isinstance(address, str) or not address:
        raise TypeError(
            "address must be a scheduler address such as 'tcp://127.0.0.1:8786'; got "
            f"{address!r}."
        )
    try:
        active = distributed.get_client()
    except ValueError:
        active = None
    if active is not None and active.scheduler.address == address:
        return active
    with _lock:
        client = _by_address.get(address)
        if client is None or client.status != "running":
            client = _connect(distributed, address, timeout)
            _by_address[address] = client
        return client


def _connect(distributed, address, timeout):
    """A client of the scheduler at `address`; a malformed or unreachable one, or
    one that is no scheduler, is refused naming ``address=`` and the fix
    (distributed said only 'missing port number in address', 'Timed out trying
    to connect' after 30 s, or waited forever on a port that was no scheduler)."""
    from distributed.comm import registry
    from distributed.comm.addressing import get_address_host_port, parse_address

    try:
        scheme, _ = parse_address(address)
        registry.get_backend(scheme)
        if scheme in ("tcp", "tls"):
            get_address_host_port(address)
    except ValueError as error:
        raise ValueError(
            f"address={address!r} is not a scheduler address ({error}); give it as "
            "'tcp://HOST:PORT', as `dask scheduler` prints it."
        ) from None
    try:
        check_scheduler(address, timeout)
        return distributed.Client(address, set_as_default=False, timeout=timeout)
    except NotASchedulerError as error:
        raise NotASchedulerError(
            f"address={address!r}: {error} Give the scheduler's address "
            "(`dask scheduler` prints it, default port 8786), not its dashboard's "
            "or a worker's.",
            kind=error.kind,
        ) from None
    except (OSError, TimeoutError) as error:
        raise OSError(
            f"address={address!r}: no Dask scheduler answered there within "
            f"{timeout:g} s ({_what(error)}). Check that the scheduler runs (`dask "
            "scheduler` prints its address) and that the host and port are right "
            "and reachable from here, or give get_client a longer timeout= (or "
            "set backends.dask.cluster.CONNECT_TIMEOUT); or leave address= out to "
            "use the active distributed.Client or an embedded local cluster."
        ) from None


class NotASchedulerError(ConnectionError):
    """Something answered at a scheduler's address, but it is no Dask scheduler:
    ``kind`` is the Dask server it is ('Worker', 'Nanny'), or None for another
    service."""

    def __init__(self, message, kind=None):
        super().__init__(message)
        self.kind = kind


def check_scheduler(address, timeout, security=None):
    """Ask the server at `address` who it is, all within `timeout` seconds, and
    return its identity (a dict) if it is a Dask scheduler.

    Nothing answering in time raises ``TimeoutError`` or ``OSError`` (as
    ``distributed.comm.connect`` does); an answer that is not a scheduler's
    (a worker, a web server's bytes) ``NotASchedulerError``. The question runs
    on an event loop of its own in a thread, so it works where one is running
    (Jupyter). `security`: a ``distributed.Security`` for TLS. The command line
    asks the same before it connects (``--scheduler``, ``--timeout``).
    """
    from distributed.comm import connect

    options = {} if security is None else security.get_connection_args("client")

    async def identity():
        comm = await connect(address, timeout=timeout, **options)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    outcome = {}

    def ask():
        try:
            outcome["reply"] = asyncio.run(asyncio.wait_for(identity(), timeout))
        except BaseException as error:  # noqa: BLE001 (handed to the caller)
            outcome["error"] = error

    thread = threading.Thread(target=ask, name="check_scheduler", daemon=True)
    thread.start()
    thread.join(timeout + 5.0)  # wait_for ends it by then
    if thread.is_alive():
        raise TimeoutError(f"no answer from {address} within {timeout:g} s")
    error = outcome.get("error")
    if isinstance(error, (OSError, asyncio.TimeoutError)):  # nothing answered
        raise error
    if error is not None:  # a foreign service's bytes (a frame length of EiB...)
        raise NotASchedulerError(
            f"it answered, but not as a Dask scheduler ({_what(error)[:200]})."
        )
    reply = outcome["reply"]
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind != "Scheduler":
        raise NotASchedulerError(
            f"it is a Dask {kind or 'service'}, not a scheduler.", kind=kind
        )
    return reply


def _what(error):
    """`error` as its type, and its text when it has one."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def machine_size():
    """(n_workers, memory_limit in bytes) for an embedded cluster on this machine."""
    from distributed.system import MEMORY_LIMIT

    try:
        n_cores = len(os.sched_getaffinity(0))
    except AttributeError:
        n_cores = os.cpu_count() or 1
    return n_cores, int(MEMORY_FRACTION * MEMORY_LIMIT / n_cores)


#: what to do when the embedded cluster is started from an unguarded script
GUARD_FIX = (
    'In a script, put the code that fits under `if __name__ == "__main__":`: '
    "each worker process imports the script, as in any multiprocessing program "
    "(notebooks need nothing). Or give address= of a running scheduler, or "
    "create a distributed.Client first."
)


def _refuse_while_importing_main():
    """A worker process of the embedded cluster imports the user's script; a
    fit in the script's unguarded body would start a cluster of its own there,
    which multiprocessing refuses with a page of text per worker: one line
    instead, naming the fix."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            "a worker process of the embedded Dask cluster, importing the "
            f"script, reached a fit. {GUARD_FIX}"
        )


def _embedded_client():
    import distributed

    with _lock:
        client = _embedded.get("client")
        if client is not None and client.status == "running":
            return client
        _refuse_while_importing_main()
        n_workers, memory_limit = machine_size()
        try:
            cluster = distributed.LocalCluster(
                n_workers=n_workers,
                threads_per_worker=1,
                processes=True,
                memory_limit=memory_limit,
                dashboard_address=":0",
            )
        except RuntimeError as error:
            raise RuntimeError(
                f"the embedded Dask cluster's worker processes did not start "
                f"({error}). {GUARD_FIX}"
            ) from error
        client = distributed.Client(cluster)
        _embedded.update(cluster=cluster, client=client)
        logger.info(
            "started an embedded Dask cluster: %d worker processes of %.1f GiB "
            "(no address= and no active client)",
            n_workers,
            memory_limit / 2**30,
        )
        # registered after distributed's own exit handlers, so it runs before them
        # (last registered, first run): the client goes before its workers, and the
        # scheduler does not warn that removing them lost the results still held
        atexit.register(_close_embedded)
        return client


def _close_embedded():
    client, cluster = _embedded.pop("client", None), _embedded.pop("cluster", None)
    if client is not None:
        client.close()
    if cluster is not None:
        cluster.close()
