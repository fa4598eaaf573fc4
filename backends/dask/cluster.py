"""Which Dask cluster the backend runs on.

The order of preference is the design's: an address the caller names, else the
active ``distributed.Client``, else an embedded ``LocalCluster`` sized to this
machine. Nothing starts at import; the embedded cluster starts on the first
call that needs it and is reused for the rest of the process.
"""

import atexit
import os
import threading

#: Share of the machine's memory given to the embedded cluster's workers; the
#: rest is left to the client process, which holds the data and the results.
MEMORY_FRACTION = 0.8

_lock = threading.Lock()
_embedded = {}
_by_address = {}


def get_client(address=None):
    """A ``distributed.Client`` to run the backend's tasks on.

    - ``address`` given: a client of the scheduler at that address. The active
      client is returned if it is connected to that scheduler; otherwise a new
      client is made (and kept for later calls), without replacing the active
      one as the default — an explicit address is never silently ignored.
    - else the active client (``distributed.get_client``), if there is one;
    - else an embedded ``LocalCluster`` with one single-threaded worker process
      per core and ``memory_limit`` = 80% of the machine's memory / workers,
      created once per process and reused.

    Dask starts worker processes with ``OMP_NUM_THREADS=1`` and its siblings, so
    BLAS runs one thread per worker.
    """
    import distributed

    if address is not None:
        return _client_at(address)
    try:
        return distributed.get_client()
    except ValueError:
        return _embedded_client()


def _client_at(address):
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
            client = _connect(distributed, address)
            _by_address[address] = client
        return client


def _connect(distributed, address):
    """A client of the scheduler at `address`; a malformed or unreachable one is
    refused naming ``address=`` and the fix (distributed said only 'missing port
    number in address' or 'Timed out trying to connect')."""
    from distributed.comm import registry
    from distributed.comm.addressing import get_address_host_port, parse_address

    try:
        scheme, _ = parse_address(address)
        registry.get_backend(scheme)
        if scheme in ("tcp", "tls"):
            get_address_host_port(address)
        return distributed.Client(address, set_as_default=False)
    except ValueError as error:
        raise ValueError(
            f"address={address!r} is not a scheduler address ({error}); give it as "
            "'tcp://HOST:PORT', as `dask scheduler` prints it."
        ) from None
    except (OSError, TimeoutError) as error:
        raise OSError(
            f"address={address!r}: no Dask scheduler answered there ({error}). Check "
            "that the scheduler runs (`dask scheduler` prints its address) and that "
            "the host and port are right and reachable from here; or leave address= "
            "out to use the active distributed.Client or an embedded local cluster."
        ) from None


def machine_size():
    """(n_workers, memory_limit in bytes) for an embedded cluster on this machine."""
    from distributed.system import MEMORY_LIMIT

    try:
        n_cores = len(os.sched_getaffinity(0))
    except AttributeError:
        n_cores = os.cpu_count() or 1
    return n_cores, int(MEMORY_FRACTION * MEMORY_LIMIT / n_cores)


def _embedded_client():
    import distributed

    with _lock:
        client = _embedded.get("client")
        if client is not None and client.status == "running":
            return client
        n_workers, memory_limit = machine_size()
        cluster = distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=":0",
        )
        client = distributed.Client(cluster)
        _embedded.update(cluster=cluster, client=client)
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
