"""What the RVM backend's estimators share: their arguments, checked before any
work starts, the identity a fit store records, and the store itself."""

import numpy as np

from backends.dask import estimator_args
from backends.dask.cluster import get_client
from backends.dask.runtime import FitStore

__all__ = ["OPERATIONAL", "check_backend_args", "identity", "open_store"]

#: Arguments besides ``estimator_args.OPERATIONAL`` that change how a fit runs,
#: not what it computes.
OPERATIONAL = ("chunk_size", "cache_size")


def check_backend_args(estimator):
    """Refuse bad backend arguments before any work starts, naming the fix."""
    estimator_args.refuse_precomputed(estimator, "kernelref.rvm")
    if estimator.method != "fast":
        raise ValueError(
            f"backends.dask.{type(estimator).__name__} runs method='fast' only; got "
            f"method={estimator.method!r}. Re-estimation updates all N α at once at "
            "O(N³) per iteration: use kernelref.rvm for it on small data."
        )
    estimator_args.check_backend_args(estimator, chunk_meaning="It is rows per task.")
    cache = estimator.cache_size
    if isinstance(cache, bool) or not isinstance(cache, (int, float)) or not cache >= 0:
        raise ValueError(
            f"cache_size must be a number of MB ≥ 0 (0: no cache); got {cache!r}."
        )


def identity(estimator, kernel):
    """What a fit store records of the fit: the estimator, the arguments that
    change the result, and the kernel (``estimator_args.fit_identity``)."""
    return estimator_args.fit_identity(estimator, kernel, OPERATIONAL)


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
