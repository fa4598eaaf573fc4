"""Predictive variance and covariance of the matrix-free GP, by block CG.

For test points X* with cross-kernel columns K* = k(X, X*) (N × b) and
A = K + σ²I, the predictive covariance (label ``gp-predictive-var``) is
K** − K*ᵀA⁻¹K*. On the matrix-free path (``solver="cg"``) no factor of A
exists, so A⁻¹K* is solved by preconditioned conjugate gradients with the b
columns of K* as right-hand sides: one streamed product with K per iteration
serves every column (``cg.StreamedGram``), preconditioned by the fit's
pivoted-Cholesky factor (``cg.WoodburyPreconditioner``).

With V the iterate where CG stops and R = K* − AV its true residual,
expanding K* = AV + R gives

    K*ᵀA⁻¹K* = K*ᵀV + VᵀR + RᵀA⁻¹R                 (label ``cg-variance``)

in which K*ᵀV + VᵀR = VᵀAV + RᵀV + VᵀR is symmetric. The returned
covariance K** − K*ᵀV − VᵀR therefore exceeds the exact one by the positive
semi-definite RᵀA⁻¹R, and since A ⪰ σ²I each variance is an upper bound,
too large by at most ‖r_j‖²/σ² — at most (tol·‖k*_j‖)²/σ² when column j
stops at relative residual ``tol``: the error is the square of CG's. The
preconditioner M = LLᵀ + σ²I brackets it from below for free: K − LLᵀ is the
pivoted Cholesky's Schur complement, positive semi-definite, so M ⪯ A and
k** − k*ᵀM⁻¹k* is at most the exact variance (``lower`` of the result).

The test points are taken ``batch`` at a time (the CG state is about six
N × b arrays); ``batch=None`` keeps that state near ``BATCH_BYTES``. Each
batch's solve runs on the shared runtime (``runtime.run_loop``): a Record per
CG iteration to ``progress``, a checkpoint ``"predict"`` in the fit store
(keyed by θ, σ², the batch's points and tol), resumed if ``resume``. The
products run on a cluster if one is running; without one, a model of at most
``LOCAL_ROWS`` training rows (a saved model predicting later) runs the same
tasks in this process (``variance_client``): the same numbers bit for bit
where this process's BLAS runs one thread, as Dask's workers do (with two,
4.5e-12 relative at N = 2000, far inside the CG bound above). Each
batch costs about as many streamed products as the fit's own solve, so the
exact-to-tolerance variance at large N is expensive; LOVE (Pleiss et al.,
2018) would trade it for a low-rank Lanczos cache of A⁻¹ and is not
implemented here.
"""

import hashlib
from dataclasses import dataclass

import numpy as np
import scipy.sparse

from backends.dask import cg as _cg
from backends.dask.blocks import kernel_block
from backends.dask.runtime import FitStore, run_keyed_loop
from backends.dask.sparse_rows import fingerprint as sparse_fingerprint
from kernelref._validation import (
    check_integer,
    check_n_features,
    check_positive,
    check_samples,
)

__all__ = [
    "BATCH_BYTES",
    "PredictiveCovariance",
    "check_covariance_size",
    "check_predict_args",
    "predict",
    "predictive_covariance",
]

#: CG state per batch of test points, in bytes: about six N × b float64
#: arrays (iterate, residual, direction, preconditioned residual, product,
#: right-hand sides), so b = BATCH_BYTES / (48 N), at most ``MAX_BATCH``.
BATCH_BYTES = 256 * 2**20
MAX_BATCH = 256

#: Seconds between checkpoints of a batch's solve: its state is N × b
#: arrays, so it is saved less often than the fit's few columns.
CHECKPOINT_SECONDS = 60.0

#: With no cluster running (no ``address=``, no active client), the variance
#: of a model of at most this many training rows is solved in this process
#: (``variance_client``), not on an embedded cluster started for it (5-15 s,
#: then a round of tasks per CG iteration). Each iteration streams N² kernel
#: entries, about 60 iterations per batch at tol 1e-6: one core's CPU for a
#: saved model's predict(return_std), measured here, was 3.0 s for 10 test
#: points and 18.6 s for 300 at N = 4000, against 19.5 s and 123 s at
#: N = 8192, where a many-core machine's workers share the products.
LOCAL_ROWS = 4096


@dataclass
class CovarianceResult:
    """Variances (b,) or covariance (b, b), their error bounds ‖r_j‖²/σ² (b,),
    the lower bounds k** − k*ᵀM⁻¹k* of the variances (b,), and the CG
    iterations of each batch."""

    value: np.ndarray
    error_bound: np.ndarray
    lower: np.ndarray
    n_iter: list


def check_predict_args(tol, batch):
    """``predict_tol`` and ``predict_batch``, before any work; returns tol."""
    tol = check_positive(
        tol, "predict_tol", meaning="It is the relative residual of the variance solve."
    )
    if tol >= 1:
        raise ValueError(f"predict_tol must be < 1 (a relative residual); got {tol!r}.")
    if batch is not None:
        check_integer(
            batch,
            "predict_batch",
            meaning="It is the number of test points per CG solve (None: from memory).",
        )
    return tol


def check_covariance_size(n_star, b):
    """return_cov solves every test point at once: at most b of them."""
    if n_star > b:
        raise ValueError(
            f"return_cov solves all {n_star} test points together, more than "
            f"predict_batch={b} (the CG state is about six N x predict_batch arrays); "
            "ask for return_std, predict fewer points at once, or raise predict_batch."
        )


def auto_batch(n):
    """Test points per solve keeping the CG state near ``BATCH_BYTES``."""
    return int(min(MAX_BATCH, max(1, BATCH_BYTES // (48 * n))))


def cross_rows(ref, i, X_star, kernel, shift):
    """Worker task: rows i of K* = k(X, X*), X read from the store."""
    X_i, x_norms = _cg.centred_chunk(ref, i, shift)
    if shift is None:  # sparse X: CSR blocks, the kernel's own products
        return kernel_block(kernel, X_i, X_star)
    Y = X_star - shift
    return kernel_block(kernel, X_i, Y, None, x_norms, np.einsum("ij,ij->i", Y, Y))


class PredictiveCovariance:
    """K** − K*ᵀA⁻¹K* for batches of test points (``cg-variance``), A = K + σ²I.

    ``store`` holds the training inputs X (a ``runtime.FitStore``); the
    preconditioner M = LLᵀ + σ²I has rank ``rank`` (an int or "auto"), as in
    the fit. CG stops each column at relative residual ``tol`` or after
    ``max_iter`` iterations (then a ``ConvergenceWarning``: the bound still
    holds, for the residual reached).
    """

    def __init__(
        self,
        client,
        store,
        kernel,
        X,
        noise,
        rank,
        tol,
        max_iter,
        progress=False,
        resume=True,
    ):
        self.client, self.store, self.kernel, self.noise = client, store, kernel, noise
        self.tol, self.max_iter = tol, max_iter
        self.progress, self.resume = progress, resume
        # RBF and c·RBF, the matrix-free path's kernels, are shift invariant;
        # sparse X is never shifted (CSR)
        self.shift = (
            None
            if scipy.sparse.issparse(X)
            else np.asarray(X, dtype=np.float64).mean(axis=0)
        )
        self.K_times = _cg.StreamedGram(store, kernel, client, shift=self.shift)
        L = _cg.preconditioner_factor(kernel, X, rank, noise)
        self.M_inv = _cg.WoodburyPreconditioner(L, noise)

    def cross_columns(self, X_star):
        """K* = k(X, X*), one round of tasks."""
        parts = _cg.map_chunks_on(
            self.client, cross_rows, self.store.x_ref, X_star, self.kernel, self.shift
        )
        return np.concatenate(parts, axis=0)

    def solve(self, K_star, X_star):
        """(V, R, iterations): block PCG for A V = K* on the runtime."""
        noise = self.noise
        solver = _cg.ConjugateGradients(
            lambda V: self.K_times(V) + noise * V,
            K_star,
            self.M_inv,
            self.tol,
            self.max_iter,
        )
        # the checkpoint belongs to one θ, σ², batch of test points and tol
        digest = (
            sparse_fingerprint(X_star)["sha256"]
            if scipy.sparse.issparse(X_star)
            else hashlib.sha256(np.ascontiguousarray(X_star).tobytes()).hexdigest()
        )
        key = f"{self.kernel.theta.tolist()} {noise!r} {self.tol!r} {digest}"
        state, _ = run_keyed_loop(
            solver,
            self.store,
            key,
            progress=self.progress,
            resume=self.resume,
            checkpoint_seconds=CHECKPOINT_SECONDS,
            description="GP predict cg",
            name="predict",
        )
        result = solver.result(state, K_star.shape, stacklevel=7)  # the user's call
        self.store.discard_state("predict")
        # at "done" R is the true residual K* − AV: the run ends by verifying it
        return result.a, state["R"], result.n_iter

    def __call__(self, X_star, full=False):
        """``CovarianceResult`` of the rows of X_star, solved together."""
        K_star = self.cross_columns(X_star)
        V, R, n_iter = self.solve(K_star, X_star)
        bound = np.einsum("ij,ij->j", R, R) / self.noise
        prior = self.kernel.diag(X_star)
        lower = prior - np.einsum("ij,ij->j", K_star, self.M_inv(K_star))
        if full:
            quadratic = K_star.T @ V + V.T @ R
            cov = self.kernel(X_star) - 0.5 * (quadratic + quadratic.T)
            return CovarianceResult(cov, bound, lower, [n_iter])
        quadratic = np.einsum("ij,ij->j", K_star, V) + np.einsum("ij,ij->j", V, R)
        return CovarianceResult(prior - quadratic, bound, lower, [n_iter])


def variance_client(est):
    """Where the variance's block CG runs: the cluster at the estimator's
    ``address`` or the active client, if there is one; else this process
    (None: ``cg.map_chunks_on`` runs the same tasks here) when the training
    set has at most ``LOCAL_ROWS`` rows; else the embedded cluster, whose
    workers share the N² kernel entries of each product."""
    from backends.dask.cluster import get_client, running_client

    client = running_client(est.address)
    if client is not None or est.X_train_.shape[0] <= LOCAL_ROWS:
        return client
    return get_client(est.address)


def _training_store(est, client):
    """The fit's store (reopened for a model loaded from a file or unpickled),
    or (where it no longer exists) a temporary store of ``X_train_``."""
    import pathlib

    store = getattr(est, "_fit_store", None)
    if store is None and pathlib.Path(est.store_).exists():
        store = est._fit_store = FitStore.open(est.store_)
    if store is not None and pathlib.Path(store.x_ref.path).exists():
        return store
    store = FitStore.prepare(
        None,
        est.X_train_,
        identity={
            "estimator": "backends.dask.GaussianProcessRegressor",
            "use": "predict",
        },
        chunk_size=est.chunk_size,
        client=client,
    )
    est._fit_store = store
    return store


def resolve_predict_args(est, n_star, full):
    """(tol, test points per solve) of a prediction, checked before any work."""
    tol = est.predict_tol if est.predict_tol is not None else est.tol
    tol = check_predict_args(tol, est.predict_batch)
    b = (
        auto_batch(est.X_train_.shape[0])
        if est.predict_batch is None
        else est.predict_batch
    )
    if full:  # one solve: the covariance couples every pair of test points
        check_covariance_size(n_star, b)
    return tol, b


def predictive_covariance(est, X, full=False):
    """Variances (or, ``full``, the covariance) of f at the rows of X for a
    ``GaussianProcessRegressor`` fitted with ``solver="cg"`` (``cg-variance``),
    on the targets' scale (times y_std² under ``normalize_y``).

    The CG relative residual is the estimator's ``predict_tol`` (None: its
    ``tol``); ``predict_batch`` test points are solved together (None: from
    ``BATCH_BYTES``). Returns a ``CovarianceResult`` whose ``error_bound``
    bounds each variance's excess over the exact one. X must be checked.
    """
    tol, b = resolve_predict_args(est, X.shape[0], full)
    client = variance_client(est)
    solver = PredictiveCovariance(
        client,
        _training_store(est, client),
        est.kernel_,
        est.X_train_,
        est._noise,
        est.rank,
        tol,
        est.max_iter,
        progress=est.progress,
        resume=est.resume,
    )
    parts = []
    for s in range(0, X.shape[0], b):
        parts.append(solver(X[s : s + b], full))
    scale = est._y_std**2
    value = parts[0].value if full else np.concatenate([p.value for p in parts])
    bound = np.concatenate([p.error_bound for p in parts])
    lower = np.concatenate([p.lower for p in parts])
    n_iter = [k for p in parts for k in p.n_iter]
    return CovarianceResult(value * scale, bound * scale, lower * scale, n_iter)


def predict(est, X, return_std=False, return_cov=False):
    """``GaussianProcessRegressor.predict`` of a ``solver="cg"`` fit: the mean
    k*ᵀα (``gp-predictive-mean``) and, on request, the standard deviation or
    covariance (``gp-predictive-var``) by block CG (``cg-variance``)."""
    from backends.dask.gp_matrix_free import predict_mean

    if return_std and return_cov:
        raise ValueError(
            "ask for return_std or return_cov, not both; "
            "the standard deviation is the root of the covariance's diagonal."
        )
    X = check_samples(X, est.kernel_, "X", accept_sparse="kernel")
    check_n_features(X, est.n_features_in_)
    if return_std or return_cov:
        resolve_predict_args(est, X.shape[0], return_cov)
    mean = predict_mean(est, X)
    if not (return_std or return_cov):
        return mean
    result = predictive_covariance(est, X, full=return_cov)
    if return_cov:
        return mean, result.value
    # an upper bound of the exact variance, so negative only by rounding
    return mean, np.sqrt(np.clip(result.value, 0.0, None))
