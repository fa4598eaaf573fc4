"""``RVR`` on a Dask cluster: the reference estimator with its fast solve replaced.

The reference's ``RVR`` builds the N × (N + 1) design matrix and runs the fast
algorithm on it (``_fit_fast``). Here the same ``FastLoop`` runs on the client
against a ``StreamedDesign``, whose left products are rounds of tasks over the
fit store, and each run of the β schedule goes through the shared runtime
(``loop.checkpointed_driver``). Validation, the fitted attributes, prediction
and persistence are the reference's own.

What is kept where:

- client: the model (active set, α, β), H⁻¹ (m × m), and the O(N·m) per
  candidate state of the algorithm — the coordinates Ψ = UᵀΦ̃ (m × N), U
  (N × m), S, Q, the alignments — which every iteration reads and updates in
  O(N·m); X (N × D) for the columns of the basis functions that join;
- workers: the O(N²) kernel work, one pass over k(X, X) per addition
  (uᵀΦ̃, the new row of Ψ) and one for the norms and Φ̃ᵀt at the start;
- fit store: X and t, and the checkpoint of each run.
"""

import numpy as np

from backends.dask.cluster import get_client
from backends.dask.gram_store import kernel_spec
from backends.dask.runtime import FitStore
from backends.dask.rvm.design import StreamedDesign
from backends.dask.rvm.loop import checkpointed_driver
from backends.dask.svm.estimators import centring_shift
from kernelref._validation import check_integer
from kernelref.rvm import RVR as ReferenceRVR
from kernelref.rvm.fast import ALIGNMENT_MAX, fast_schedule, on_user_scale
from kernelref.rvm.regression import ALPHA_MAX

__all__ = ["RVR", "check_backend_args", "identity"]

#: Arguments that change how a fit runs, not what it computes.
OPERATIONAL = ("store", "address", "progress", "resume", "chunk_size")


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


def identity(estimator):
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
        "kernel": kernel_spec(estimator.kernel_),
    }


def _materialise(X):
    """A numpy copy of numpy, Zarr or dask input (X of N × D fits the client)."""
    module = type(X).__module__
    if module.startswith("dask.array"):
        return np.asarray(X.compute())
    if module.startswith("zarr"):
        return np.asarray(X[...])
    return X


class RVR(ReferenceRVR):
    """Relevance vector regression by the fast algorithm on a Dask cluster.

    Parameters
    ----------
    kernel, gamma, degree, coef0, bias, max_iter, tol, alignment_max, beta_schedule
        As in ``kernelref.rvm.RVR``; ``method`` must be 'fast' (and ``update``,
        ``alpha_max`` are unused).
    store : path or None
        The fit store (X, t, the checkpoints); None: a temporary directory.
    chunk_size : int
        Rows of X per task, and candidates per task of a streamed pass.
    address : str or None
        Scheduler address; None: the active client or an embedded cluster.
    progress : None, False or callable
        A bar on a terminal (None), nothing (False), or a callback receiving a
        ``Record(iteration, measure=log evidence, model_size, elapsed)`` per
        iteration of each run of the β schedule.
    resume : bool
        Continue from the store's checkpoints (True) or start afresh.

    Attributes
    ----------
    As ``kernelref.rvm.RVR``, and ``fit_info_``: the streamed passes over the
    kernel (``passes``) and ``store_``, the fit store's path (None if
    temporary).
    """

    def __init__(
        self,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        bias=True,
        method="fast",
        update="standard",
        max_iter=10000,
        tol=1e-3,
        alpha_max=ALPHA_MAX,
        alignment_max=ALIGNMENT_MAX,
        beta_schedule="auto",
        store=None,
        chunk_size=4096,
        address=None,
        progress=None,
        resume=True,
    ):
        super().__init__(
            kernel=kernel,
            gamma=gamma,
            degree=degree,
            coef0=coef0,
            bias=bias,
            method=method,
            update=update,
            max_iter=max_iter,
            tol=tol,
            alpha_max=alpha_max,
            alignment_max=alignment_max,
            beta_schedule=beta_schedule,
        )
        self.store, self.chunk_size, self.address = store, chunk_size, address
        self.progress, self.resume = progress, resume

    def fit(self, X, y):
        """Fit as the reference does, the fast algorithm's passes on the cluster."""
        check_backend_args(self)
        self._X_input = X
        try:
            return super().fit(_materialise(X), y)
        finally:
            del self._X_input

    def _fit_fast(self, X, t):
        client = get_client(self.address)
        store = FitStore.prepare(
            self.store,
            self._X_input,
            arrays={"t": t},
            identity=identity(self),
            chunk_size=self.chunk_size,
            client=client,
        )
        self.store_ = None if store.is_temporary else str(store.path)
        try:
            Phi = StreamedDesign(
                X,
                centring_shift(self.kernel_, X),
                self.kernel_,
                self.bias,
                store,
                client,
            )
            drive = checkpointed_driver(
                store, progress=self.progress, resume=self.resume, prefix="rvr-"
            )
            result = fast_schedule(
                Phi,
                Phi.scales > 0,
                t,
                self.beta_schedule,
                drive=drive,
                max_iter=self.max_iter,
                tol=self.tol,
                alignment_max=self.alignment_max,
            )
        finally:
            store.remove_if_temporary()
        self.fit_info_ = {"passes": Phi.passes}
        return on_user_scale(result, Phi.scales)
