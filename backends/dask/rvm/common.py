"""What the RVM backend's estimators share: their arguments, checked before any
work starts, the identity a fit store records, and the store itself."""

import numpy as np

from backends.dask.cluster import get_client
from backends.dask.gram_store import kernel_spec
from backends.dask.runtime import FitStore
from kernelref._validation import check_integer

__all__ = ["OPERATIONAL", "check_backend_args", "identity", "open_store"]

#: Arguments that change how a fit runs, not what it computes.
OPERATIONAL = ("store", "address", "progress", "resume", "chunk_size", "cache_size")


def check_backend_args(estimator):
    """Refuse bad backend arguments before any work starts, naming the fix."""
    if isinstance(estimator.kernel, str) and estimator.kernel == "precomputed":
        raise ValueError(
            f"backends.dask.{type(estimator).__name__} does not take "
            "kernel='precomputed': a precomputed kernel matrix is already in memory, "
            f"so fit it with kernelref.rvm.{type(estimator).__name__}."
        )
    if estimator.method != "fast":
        raise ValueError(
            f"backends.dask.{type(estimator).__name__} runs method='fast' only; got "
            f"method={estimator.method!r}. Re-estimation updates all N α at once at "
            "O(N³) per iteration: use kernelref.rvm for it on small data."
        )
    check_integer(estimator.chunk_size, "chunk_size", meaning="It is rows per task.")
    cache = estimator.cache_size
    if isinstance(cache, bool) or not isinstance(cache, (int, float)) or not cache >= 0:
        raise ValueError(
            f"cache_size must be a number of MB ≥ 0 (0: no cache); got {cache!r}."
        )
    store = estimator.store
    if (
        store is not None
        and not isinstance(store, str)
        and not hasattr(store, "__fspath__")
    ):
        raise TypeError(f"store must be a directory path or None; got {store!r}.")
    if not isinstance(estimator.resume, (bool, np.bool_)):
        raise TypeError(f"resume must be True or False; got {estimator.resume!r}.")
    progress = estimator.progress
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(
            "progress must be None (a bar on a terminal), False or a callable "
            f"receiving a Record; got {progress!r}."
        )
    if estimator.address is not None and not isinstance(estimator.address, str):
        raise TypeError(
            f"address must be a scheduler address or None; got {estimator.address!r}."
        )


def identity(estimator, kernel):
    """What a fit store records of the fit: the estimator, the arguments that
    change the result, and the kernel."""
    params = {
        k: v
        for k, v in estimator.get_params(deep=False).items()
        if k not in OPERATIONAL
    }
    params["kernel"] = params["kernel"] if isinstance(params["kernel"], str) else ""
    return {
        "estimator": type(estimator).__name__,
        "params": {k: repr(v) for k, v in sorted(params.items())},
        "kernel": kernel_spec(kernel),
    }


def open_store(estimator, X, labels, kernel):
    """The fit store of ``X`` (as the user gave it) and the targets or labels,
    under the `identity` of the estimator and its ``kernel``, and the client."""
    client = get_client(estimator.address)
    store = FitStore.prepare(
        estimator.store,
        X,
        arrays={"labels": np.asarray(labels, dtype=float)},
        identity=identity(estimator, kernel),
        chunk_size=estimator.chunk_size,
        client=client,
    )
    estimator.store_ = None if store.is_temporary else str(store.path)
    return store, client
