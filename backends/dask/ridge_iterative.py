"""The iterative paths of ``backends.dask.KernelRidge`` on the shared runtime.

- ``fit_cg``: preconditioned conjugate gradients for (K + λI) a = t
  (``ridge-dual-solution``), products with K streamed from the fit store;
- ``fit_nystrom``: Nyström kernel ridge, FALKON's system preconditioned by
  K_NMᵀK_NM estimated on rows that are not centres (``backends.dask.nystrom``
  ``SketchedPreconditioner``), products with K_NMᵀK_NM streamed.

Both put X and t in a ``runtime.FitStore`` (so tasks lost with a worker are
recomputed), run under ``runtime.run_loop`` (progress, checkpoints of the CG
vectors, resume from the store's checkpoint) and take the estimator's
``store``, ``chunk_size``, ``progress``, ``resume`` and CG settings.
"""

import pathlib
import shutil
import tempfile
import weakref

from backends.dask import cg as _cg
from backends.dask import nystrom as _nystrom
from backends.dask.runtime import FitStore, run_loop

__all__ = ["fit_cg", "fit_nystrom"]


def _fit_store(est, X, t, kernel, lam, client, solver, extra):
    """The estimator's fit store for (X, t) and this fit's identity."""
    identity = {
        "estimator": "backends.dask.KernelRidge",
        "solver": solver,
        "lam": float(lam),
        "kernel": kernel.spec(),
        "tol": float(est.tol),
        **extra,
    }
    return FitStore.prepare(
        _store_path(est, solver),
        X,
        arrays={"t": t},
        identity=identity,
        chunk_size=est.chunk_size,
        client=client,
    )


def _store_path(est, solver):
    """The user's store, or a temporary directory owned by the estimator."""
    if est.store is not None:
        return pathlib.Path(est.store)
    directories = est.__dict__.setdefault("_fit_directories", {})
    if solver not in directories:
        directory = tempfile.mkdtemp(prefix=f"kernelref-{solver}-")
        directories[solver] = directory
        weakref.finalize(est, shutil.rmtree, directory, True)
    return pathlib.Path(directories[solver]) / "fit.zarr"


def _preconditioner(est, kernel, X, lam):
    if est.preconditioner == "pivoted_cholesky":
        L = _cg.preconditioner_factor(kernel, X, est.rank, lam)
        est.preconditioner_rank_ = L.shape[1]
        return _cg.WoodburyPreconditioner(L, lam)
    if est.preconditioner == "nystrom":
        L = _cg.nystrom_factor(kernel, X, est.rank, est.random_state)
        return _cg.WoodburyPreconditioner(L, lam)
    return None


def fit_cg(est, X, t, lam, kernel, client):
    """Dual coefficients a and the iterations, by streamed, resumable CG."""
    store = _fit_store(
        est,
        X,
        t,
        kernel,
        lam,
        client,
        "cg",
        {
            "preconditioner": est.preconditioner,
            "rank": est.rank,
            "random_state": int(est.random_state),
        },
    )
    K_times = _cg.StreamedGram(store, kernel, client, shift=_cg.kernel_shift(kernel, X))
    T = t.reshape(len(t), -1)
    solver = _cg.ConjugateGradients(
        lambda V: K_times(V) + lam * V,
        T,
        _preconditioner(est, kernel, X, lam),
        est.tol,
        est.max_iter,
    )
    state, _ = run_loop(
        solver,
        store,
        progress=est.progress,
        resume=est.resume,
        description="KernelRidge cg",
    )
    result = solver.result(state, t.shape, stacklevel=4)
    est.fit_store_ = str(store.path)
    return result.a, result.n_iter


def fit_nystrom(est, X, t, lam, kernel, client):
    """(centres, β, iterations) of Nyström ridge by FALKON (``falkon-system``)."""
    m = min(int(est.n_centres), len(X))
    store = _fit_store(
        est,
        X,
        t,
        kernel,
        lam,
        client,
        "nystrom",
        {
            "n_centres": m,
            "centres": est.centres,
            "random_state": int(est.random_state),
            "preconditioner": f"sketched-{_nystrom.SKETCH_ROWS_PER_CENTRE}",
        },
    )
    shift = _cg.kernel_shift(kernel, X)
    index = _nystrom.select_centres(
        client, store, kernel, shift, lam, m, est.centres, est.random_state
    )
    C, K_MM = X[index], kernel(X[index])
    S = _nystrom.sketch_rows(len(X), index, est.random_state)
    P = _nystrom.SketchedPreconditioner(kernel, X[S], C, K_MM, len(X), lam)
    fit = _nystrom.FalkonFit(
        client, store, kernel, shift, C, K_MM, lam, t.shape, est.tol, est.max_iter, P
    )
    state, _ = run_loop(
        fit,
        store,
        progress=est.progress,
        resume=est.resume,
        description="KernelRidge nystrom",
    )
    beta, n_iter = fit.beta(state)
    est.fit_store_ = str(store.path)
    est.centre_indices_ = index
    # a lower bound of cond(BᵀHB) from CG's Lanczos coefficients: large when
    # the M centres cannot resolve the kernel at the scale λ/N (``falkon-system``)
    est.condition_estimate_ = fit.condition_estimate(state)
    return C, beta, n_iter
