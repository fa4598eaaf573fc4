"""The command line's connection to a Dask cluster, and its progress bars.

Both import their dependencies (distributed, tqdm) only when used, so the
reference commands run with numpy and scipy alone.
"""

import contextlib
import sys

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
    if address is not None and address.startswith("tls://") and not any(tls):
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
        if address is not None and address.startswith("tcp://"):
            address = "tls://" + address[len("tcp://") :]
    where = address or f"the scheduler of {scheduler_file}"
    try:
        return distributed.Client(
            address,
            scheduler_file=scheduler_file,
            security=security,
            timeout=args.timeout,
            set_as_default=True,
        )
    except (OSError, TimeoutError) as error:
        raise ClusterError(
            f"cannot reach {where} within {args.timeout:g} s ({type(error).__name__}: "
            f"{error}). Check that the scheduler runs (`dask scheduler`), that the "
            "address and port are right and reachable from here, that TLS files match "
            "the cluster's, or raise --timeout."
        ) from None


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
