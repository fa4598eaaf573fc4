"""The arguments every backend estimator shares, checked in one place.

Every backend estimator takes ``store, chunk_size, address, progress, resume``
(``shared/DESIGN.md``, "The backend's shape"; ``backends.dask.runtime``).
``check_backend_args`` refuses bad values of them before any work starts, each
error naming the argument and the fix; what an argument means to one estimator
(what ``chunk_size`` counts, ``cache_size``, ``method``) is checked by that
estimator. ``fit_identity`` is what a fit store records of a fit, so that the
store refuses other data's or other hyperparameters' fits (``FitStore.prepare``),
naming what works (``runtime.replace_fix``): another ``store=``, or removing it.
The estimators take no ``overwrite=``, which, kept with their arguments, would
outlive the one fit it was meant for (in clones and saved models).
"""

import json
import os

import numpy as np

from kernelref._validation import check_integer

__all__ = [
    "OPERATIONAL",
    "check_address",
    "check_backend_args",
    "check_progress",
    "check_resume",
    "check_store",
    "fit_identity",
    "kernel_identity",
    "refuse_precomputed",
]


#: Arguments that change how a fit runs, never what it computes: a store is
#: resumed whatever their values (an estimator may name more of its own).
OPERATIONAL = ("store", "address", "progress", "resume")


def check_store(store):
    """A directory path (str or os.PathLike), or None for a temporary one."""
    if store is not None and not isinstance(store, (str, os.PathLike)):
        raise TypeError(
            "store must be a directory path (str or os.PathLike), or None for a "
            f"temporary directory; got {store!r}."
        )


def check_address(address):
    """A scheduler address, or None (the active client or an embedded cluster)."""
    if address is not None and not isinstance(address, str):
        raise TypeError(
            "address must be a scheduler address string such as "
            "'tcp://127.0.0.1:8786', or None (the active client or an embedded "
            f"cluster); got {address!r}."
        )


def check_progress(progress):
    """None or True (a bar on a terminal), False (nothing) or a callable."""
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(
            "progress must be None (a bar on a terminal), False (silent) or a "
            f"callable receiving a Record; got {progress!r}."
        )


def check_resume(resume):
    """True (continue from the store's checkpoint) or False (start afresh)."""
    if not isinstance(resume, (bool, np.bool_)):
        raise TypeError(
            "resume must be True (continue from the store's checkpoint) or False "
            f"(start afresh); got {resume!r}."
        )


def check_backend_args(estimator, chunk_meaning):
    """Refuse bad ``store, chunk_size, address, progress, resume`` of
    `estimator` before any work starts; `chunk_meaning` says what its
    ``chunk_size`` counts (rows per task, the tile edge)."""
    check_integer(estimator.chunk_size, "chunk_size", meaning=chunk_meaning)
    check_store(estimator.store)
    check_address(estimator.address)
    check_progress(estimator.progress)
    check_resume(estimator.resume)


def refuse_precomputed(estimator, reference_module):
    """Refuse ``kernel='precomputed'``: a Gram matrix in memory is the
    reference's to fit (``reference_module`` has the class of the same name)."""
    kernel = estimator.kernel
    if isinstance(kernel, str) and kernel == "precomputed":
        name = type(estimator).__name__
        raise ValueError(
            f"backends.dask.{name} does not take kernel='precomputed': a "
            "precomputed Gram matrix is already in memory, so fit it with "
            f"{reference_module}.{name}."
        )


def kernel_identity(kernel):
    """The kernel's spec as JSON reads it back (so it equals a stored one)."""
    return json.loads(
        json.dumps(kernel.spec(), default=lambda v: np.asarray(v).tolist())
    )


def fit_identity(estimator, kernel, operational=()):
    """What a fit store records of `estimator`'s fit with the fitted `kernel`:
    its class, every constructor argument but the ``OPERATIONAL`` ones and
    `operational` (a kernel object by its spec, below), and the kernel."""
    skip = OPERATIONAL + tuple(operational)
    params = {
        k: v for k, v in estimator.get_params(deep=False).items() if k not in skip
    }
    params["kernel"] = params["kernel"] if isinstance(params["kernel"], str) else ""
    return {
        "estimator": type(estimator).__name__,
        "params": {k: repr(v) for k, v in sorted(params.items())},
        "kernel": kernel_identity(kernel),
    }
