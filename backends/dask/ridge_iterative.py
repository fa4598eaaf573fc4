"""The iterative paths of ``backends.dask.KernelRidge`` on the shared runtime.

- ``fit_cg``: preconditioned conjugate gradients for (K + λI) a = t
  (``ridge-dual-solution``), products with K streamed from the fit store; with
  sample weights s, for the symmetric (S^½ K S^½ + λI) b = S^½ t and a = S^½ b
  (``ridge-weighted``);
- ``fit_nystrom``: Nyström kernel ridge, FALKON's system preconditioned by
  K_NMᵀK_NM estimated on rows that are not centres (``backends.dask.nystrom``
  ``SketchedPreconditioner``), products with K_NMᵀK_NM streamed; with weights,
  K_NMᵀ S K_NM (``nystrom-weighted``).

Both put X and t (and the weights s) in a ``runtime.FitStore`` (so tasks lost
with a worker are recomputed, and a checkpoint of a fit with other targets or
weights is never resumed), run under ``runtime.run_loop`` (progress,
checkpoints of the CG vectors, resume from the store's checkpoint) and take the
estimator's ``store``, ``chunk_size``, ``progress``, ``resume`` and CG settings.
"""

import pathlib
import shutil
import tempfile
import weakref

import numpy as np

from backends.dask import cg as _cg
from backends.dask import nystrom as _nystrom
from backends.dask.runtime import FitStore, run_loop

__all__ = ["fit_cg", "fit_nystrom"]


def _fit_store(est, X, t, kernel, lam, client, solver, extra, s=None):
    """The estimator's fit store for (X, t, s) and this fit's identity.

    The estimator's own temporary store (``store=None``) is replaced when a new
    fit brings other data, targets or weights (``overwrite=True``); a user's
    store is refused then.
    """
    arrays = {"t": t} if s is None else {"t": t, "s": s}
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
        arrays=arrays,
        identity=identity,
        chunk_size=est.chunk_size,
        client=client,
        overwrite=est.store is None,
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


def _preconditioner(est, kernel, X, lam, s=None):
    """M⁻¹ ≈ (K + λI)⁻¹, or with weights s ≈ (S^½ K S^½ + λI)⁻¹: the pivoted
    Cholesky of S^½ K S^½, or the Nyström factor of K with its rows scaled by s^½
    (S^½ LLᵀ S^½ is then the Nyström approximation of S^½ K S^½)."""
    if est.preconditioner == "pivoted_cholesky":
        L = _cg.preconditioner_factor(kernel, X, est.rank, lam, weights=s)
        est.preconditioner_rank_ = L.shape[1]
        return _cg.WoodburyPreconditioner(L, lam)
    if est.preconditioner == "nystrom":
        L = _cg.nystrom_factor(kernel, X, est.rank, est.random_state)
        if s is not None:
            L = np.sqrt(s)[:, None] * L
        return _cg.WoodburyPreconditioner(L, lam)
    return None


def fit_cg(est, X, t, lam, kernel, client, s=None):
    """Dual coefficients a and the iterations, by streamed, resumable CG.

    With weights s the system is (S^½ K S^½ + λI) b = S^½ t, symmetric positive
    definite, solved to the same rule ‖S^½ t − (S^½ K S^½ + λI) b‖ ≤ tol·‖S^½ t‖,
    and a = S^½ b (``ridge-weighted``)."""
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
        s,
    )
    K_times = _cg.StreamedGram(store, kernel, client, shift=_cg.kernel_shift(kernel, X))
    root = np.ones((len(t), 1)) if s is None else np.sqrt(s)[:, None]
    solver = _cg.ConjugateGradients(
        _system(K_times, lam, s),
        root * t.reshape(len(t), -1),
        _preconditioner(est, kernel, X, lam, s),
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
    return root.reshape((len(t),) + (1,) * (t.ndim - 1)) * result.a, result.n_iter


def _system(K_times, lam, s):
    """V ↦ (K + λI) V, or with weights s, V ↦ s^½ ∘ K (s^½ ∘ V) + λV: the
    symmetric matrix S^½ K S^½ + λI of ``ridge-weighted``."""
    if s is None:
        return lambda V: K_times(V) + lam * V
    root = np.sqrt(s)[:, None]
    return lambda V: root * K_times(root * V) + lam * V


def fit_nystrom(est, X, t, lam, kernel, client, s=None):
    """(centres, β, iterations) of Nyström ridge by FALKON (``falkon-system``);
    with weights s, of the weighted problem (``nystrom-weighted``). The centres
    are drawn as without weights (uniformly, or by unweighted leverage scores),
    and are rows of distinct values (``nystrom.select_centres``)."""
    labels, n_distinct = _nystrom.row_labels(X)
    m = _nystrom.check_n_centres(int(est.n_centres), X.shape[0], n_distinct)
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
        s,
    )
    shift = _cg.kernel_shift(kernel, X)
    index = _nystrom.select_centres(
        client,
        store,
        kernel,
        shift,
        lam,
        m,
        est.centres,
        est.random_state,
        None if n_distinct == X.shape[0] else labels,
    )
    C, K_MM = X[index], kernel(X[index])
    S = _nystrom.sketch_rows(X.shape[0], index, est.random_state)
    P = _nystrom.SketchedPreconditioner(
        kernel, X[S], C, K_MM, X.shape[0], lam, None if s is None else s[S]
    )
    fit = _nystrom.FalkonFit(
        client,
        store,
        kernel,
        shift,
        C,
        K_MM,
        lam,
        t.shape,
        est.tol,
        est.max_iter,
        P,
        s_ref=None if s is None else store.array_ref("s"),
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
