"""The command line's connection to a Dask cluster, and its progress bars.

Both import their dependencies (distributed, tqdm) only when used, so the
reference commands run with numpy and scipy alone.
"""

import contextlib
import json
import logging
import pathlib
import sys
import time

from kernelref.cli.models import UsageError

#: seconds to wait for a scheduler before giving up (``--timeout``)
DEFAULT_TIMEOUT = 10.0


class ClusterError(RuntimeError):
    """The scheduler could not be reached; exit status 1."""


def connect(args):
    """A ``distributed.Client`` for ``--scheduler``/``--scheduler-file`` (with TLS
    when ``--tls-*`` are given), or None: the backend then uses the active
    client or starts its embedded cluster. The client becomes the default, so
    backend estimators find it without an ``address``."""
    address, scheduler_file = args.scheduler, args.scheduler_file
    tls = (args.tls_ca_file, args.tls_cert, args.tls_key)
    if address is None and scheduler_file is None:
        if any(tls):
            raise UsageError(
                "--tls-ca-file/--tls-cert/--tls-key need --scheduler or "
                "--scheduler-file."
            )
        return None
    if address is not None and scheduler_file is not None:
        raise UsageError("give --scheduler or --scheduler-file, not both.")
    try:
        import distributed
    except ImportError:
        raise UsageError(
            "connecting to a cluster needs the dask extra: "
            "pip install 'kernelref[dask]'."
        ) from None
    if scheduler_file is not None:
        address = _address_in(scheduler_file, args.timeout)
    if address.startswith("tls://") and not any(tls):
        raise UsageError(
            f"the scheduler at {address} speaks TLS: give --tls-ca-file, "
            "--tls-cert and --tls-key (the certificates its operator issued)."
        )
    security = None
    if any(tls):
        if not all(tls):
            raise UsageError(
                "TLS needs all three of --tls-ca-file, --tls-cert and --tls-key."
            )
        security = distributed.Security(
            tls_ca_file=tls[0],
            tls_client_cert=tls[1],
            tls_client_key=tls[2],
            require_encryption=True,
        )
        if address.startswith("tcp://"):
            address = "tls://" + address[len("tcp://") :]
    option = "--scheduler" if scheduler_file is None else "--scheduler-file"
    _check_address(address, option)
    where = address if scheduler_file is None else f"{address} (from {scheduler_file})"
    # distributed.Client's own timeout does not bound every wait: a port that
    # accepts the connection but is no scheduler (a web server, a proxy) made it
    # wait forever or read a garbage frame length (MemoryError); so the scheduler
    # is asked who it is first, within --timeout
    _probe(address, security, args.timeout, where)
    try:
        return distributed.Client(
            address,
            security=security,
            timeout=args.timeout,
            set_as_default=True,
        )
    except (OSError, TimeoutError) as error:
        raise ClusterError(_unreachable(where, args.timeout, error)) from None


def _unreachable(where, timeout, error):
    return (
        f"cannot reach {where} within {timeout:g} s ({_what(error)}). Check that "
        "the scheduler runs (`dask scheduler`), that the address and port are right "
        "and reachable from here, that TLS files match the cluster's, or raise "
        "--timeout."
    )


def _what(error):
    """`error` as its type, and its text when it has one."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _address_in(scheduler_file, timeout):
    """The scheduler's address from ``--scheduler-file`` (written by ``dask
    scheduler --scheduler-file``), waiting up to `timeout` seconds for the file
    to appear (a scheduler started a moment ago); distributed waits forever."""
    path = pathlib.Path(scheduler_file)
    deadline = time.monotonic() + timeout
    while not path.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    if not path.is_file():
        raise ClusterError(
            f"--scheduler-file {scheduler_file}: no such file after {timeout:g} s. "
            "Give the file `dask scheduler --scheduler-file FILE` writes (on a file "
            "system this machine shares), start the scheduler, or give --scheduler "
            "ADDRESS."
        )
    try:
        address = json.loads(path.read_text(encoding="utf-8"))["address"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        address = None
    if not isinstance(address, str) or not address:
        raise UsageError(
            f"--scheduler-file {scheduler_file}: not a Dask scheduler file (JSON "
            'naming the scheduler\'s "address"); give the file `dask scheduler '
            "--scheduler-file FILE` writes, or --scheduler ADDRESS."
        )
    return address


def _check_address(address, option):
    """A malformed address, refused naming `option` before any connection."""
    from distributed.comm import registry
    from distributed.comm.addressing import get_address_host_port, parse_address

    try:
        scheme, _ = parse_address(address)
        registry.get_backend(scheme)
        if scheme in ("tcp", "tls"):
            get_address_host_port(address)
    except (ValueError, TypeError) as error:
        raise UsageError(
            f"{option} {address}: not a scheduler address ({error}); give it as "
            "tcp://HOST:PORT (tls://HOST:PORT with TLS), as `dask scheduler` prints "
            "it, e.g. tcp://10.0.0.1:8786."
        ) from None


def _probe(address, security, timeout, where):
    """Ask the scheduler at `address` for its identity, all within `timeout`
    seconds, by the check of the backend that runs on a cluster (the Dask
    backend's ``check_scheduler``, which its ``get_client(address=)`` runs too;
    found through its plugin: kernelref imports no backend); a ClusterError when
    nothing answers, or something that is not a Dask scheduler (a worker,
    another service)."""
    backend = _cluster_backend()
    try:
        backend.check_scheduler(address, timeout, security)
    except OSError as error:
        if isinstance(error, backend.NotASchedulerError):
            raise ClusterError(
                f"{where}: {error} Check the port: give the scheduler's address "
                "(`dask scheduler` prints it, default port 8786), not its "
                "dashboard's or a worker's."
            ) from None
        raise ClusterError(_unreachable(where, timeout, error)) from None


def _cluster_backend():
    """The registered backend's plugin that offers ``check_scheduler``."""
    from kernelref.cli import plugins

    for name in plugins.names():
        if name != plugins.REFERENCE:
            plugin = plugins.load(name)
            if hasattr(plugin, "check_scheduler"):
                return plugin
    raise UsageError(
        "connecting to a cluster needs the dask backend: pip install 'kernelref[dask]'."
    )


@contextlib.contextmanager
def backend_log(args):
    """With --verbose, what the registered backends log at INFO and above (a fit
    resumed from its checkpoint, an embedded cluster started because no
    --scheduler was given) on stderr as the command's own lines; the loggers
    are named by the backends' packages, which are not imported here."""
    from kernelref.cli import plugins

    if not getattr(args, "verbose", False):
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("kernelref: %(message)s"))
    loggers = [logging.getLogger(name) for name in plugins.packages()]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.removeHandler(handler)
            logger.setLevel(level)


def show_progress(args):
    """True when progress bars are wanted: on a terminal, unless --quiet."""
    return not args.quiet and sys.stderr.isatty()


@contextlib.contextmanager
def progress_bar(args, total, description):
    """A tqdm bar on stderr when `show_progress`, else a stand-in that does nothing.
    Without tqdm installed there is no bar."""
    bar = None
    if show_progress(args) and total:
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            bar = tqdm(
                total=total,
                desc=description,
                file=sys.stderr,
                leave=False,
                dynamic_ncols=True,
            )
    try:
        yield bar if bar is not None else _NoBar()
    finally:
        if bar is not None:
            bar.close()


class _NoBar:
    def update(self, n=1):
        pass

    def set_postfix_str(self, text):
        pass


def progress_callback(bar, args):
    """The ``progress=`` callback of a backend fit: one record per iteration,
    shown on the bar, and logged with --verbose."""

    def callback(record):
        bar.update(1)
        fields = record if isinstance(record, dict) else getattr(record, "__dict__", {})
        text = ", ".join(
            f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in fields.items()
        )
        bar.set_postfix_str(text)
        if args.verbose:
            print(f"kernelref: {text or record}", file=sys.stderr)

    return callback
