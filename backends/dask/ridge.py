"""Kernel ridge regression on a Dask cluster, for Gram matrices no worker can hold.

``KernelRidge`` solves the reference's problem, a = (K + λI)⁻¹ t (label
``ridge-dual-solution``), in one of two ways, and returns the reference's fitted
state (``dual_coef_``, ``X_fit_``, ``kernel_``, ``n_features_in_``), so
``predict``, ``score`` and the parameter handling are the reference's own:

- ``solver="cholesky"``: the Gram matrix is written to a Zarr Gram store in
  square chunks, factorised tile by tile into a second Zarr array (a
  ``cholesky`` array inside the store) and solved by blocked substitution
  (``backends.dask.linalg``). The store and its factor are reused by a later
  fit on the same data, kernel and λ.
- ``solver="cg"``: preconditioned conjugate gradients whose products with K are
  computed from kernel blocks streamed on the workers; nothing of size N² is
  stored (``backends.dask.cg``). X and t go into a fit store; the loop reports
  progress, checkpoints its vectors and resumes (``backends.dask.ridge_iterative``).
- ``solver="nystrom"``: Nyström kernel ridge on ``n_centres`` centres, FALKON's
  system preconditioned by K_NMᵀK_NM estimated on 4·M rows that are not
  centres (``backends.dask.nystrom``); ``X_fit_`` holds the centres and
  ``dual_coef_`` their coefficients β.

``fit(X, y, sample_weight)`` takes the reference's sample weights s ≥ 0 (label
``ridge-weighted``), checked by the reference's own validation, with every
solver: the tiled Cholesky factorises S^½ K S^½ + λI, scaling the stored K's
tiles as it reads them (the factor is reused only for the same weights); CG
iterates with v ↦ s^½ ∘ K(s^½ ∘ v) + λv; Nyström solves the weighted problem on
the centres' span (``nystrom-weighted``).

X is what the reference takes (scipy.sparse included: kept sparse by every
solver, whose kernel blocks come from sparse products, the Nyström centres
being sparse rows of X; ``X_fit_`` stays sparse); X must fit in the client's
memory; the N × N Gram matrix need not fit in any worker's.
``kernel="precomputed"`` is refused: a precomputed Gram matrix is one the caller
already holds in memory, which the reference solves directly.
"""

import numbers
import pathlib
import shutil
import tempfile
import warnings
import weakref

import numpy as np

from backends.dask import cg as _cg
from backends.dask import ridge_iterative as _iterative
from backends.dask.blocks import lower_blocks, n_blocks
from backends.dask.cluster import get_client
from backends.dask.estimator_args import (
    check_backend_args,
    refuse_precomputed,
)
from backends.dask.gram_store import COMPRESSORS, GramStore, fingerprint
from backends.dask.integrity import damaged_chunks
from backends.dask.linalg import create_factor, tiled_cho_solve, tiled_cholesky
from kernelref._validation import check_integer, check_positive
from kernelref.ridge import KernelRidge as ReferenceKernelRidge

__all__ = ["KernelRidge"]

SOLVERS = ("cholesky", "cg", "nystrom")
CENTRE_SAMPLINGS = ("uniform", "leverage")
PRECONDITIONERS = ("pivoted_cholesky", "nystrom", None)


def _check_choice(value, name, choices):
    if not any(value is c or (isinstance(value, str) and value == c) for c in choices):
        raise ValueError(f"{name} must be one of {choices}; got {value!r}.")
    return value


class KernelRidge(ReferenceKernelRidge):
    """Kernel ridge regression solved on a Dask cluster.

    Parameters
    ----------
    lam, kernel, gamma, degree, coef0
        As in ``kernelref.ridge.KernelRidge``, except that ``kernel="precomputed"``
        is refused.
    store : path or None
        Directory of the Gram store (``solver="cholesky"``). ``None`` means a
        temporary directory, removed when the estimator is garbage-collected or
        at exit. A store built for other data, another kernel or another
        ``chunk_size`` is refused; one for the same is reused without recomputing.
    chunk_size : int
        Edge of the square Gram tiles, and the row-block size of the streamed
        products (``solver="cg"``). A worker holds a few tiles of 8·chunk_size² bytes.
    solver : "cholesky", "cg" or "nystrom"
    n_centres : int
        Nyström centres M (``solver="nystrom"``), rows of distinct values (a
        repeated centre would make K_MM singular); M ≥ N is exact kernel ridge
        (every distinct row a centre). An M < N above the number of distinct rows
        of X is refused.
    centres : "uniform" or "leverage"
        How the centres are sampled: uniformly, or by approximate ridge leverage
        scores (one more pass over the data).
    progress : None, False or callable
        Progress of the iterative solvers (``runtime.run_loop``): None is a bar on
        a terminal, False nothing, a callable receives a ``runtime.Record``.
    resume : bool
        Continue an iterative fit from the checkpoint in ``store`` (same data
        and settings), e.g. after an interrupt.
    preconditioner : "pivoted_cholesky", "nystrom" or None
        Low-rank preconditioner of the conjugate gradients (``solver="cg"``).
    rank : int or "auto"
        Rank r of the preconditioner (pivots, or Nyström landmarks); "auto"
        (pivoted Cholesky only) grows it from the measured spectrum
        (``cg.auto_pivoted_cholesky``).
    tol : float
        Stopping rule of the conjugate gradients, ‖t − (K + λI)a‖ ≤ tol·‖t‖ (with
        weights, the same rule for the system (S^½ K S^½ + λI) b = S^½ t); see
        ``backends.dask.cg.DEFAULT_TOL`` for the default's accuracy.
    max_iter : int
        Iteration cap of the conjugate gradients; reaching it warns.
    compressor : None or "lz4"
        Compression of the Gram store's chunks.
    address : str or None
        Scheduler address; ``None`` uses the active client or an embedded cluster.
    random_state : int
        Seed of the Nyström landmarks.

    ``fit(X, y, sample_weight=None)``: ``sample_weight`` is one weight ≥ 0 per
    sample (not all zero) or one number for all, as in the reference
    (``ridge-weighted``: a = S^½ (S^½ K S^½ + λI)⁻¹ S^½ t; a sample of weight zero
    gets a_n = 0 and leaves the fit as if dropped). Every solver takes it:
    "cholesky" factorises S^½ K S^½ + λI from the stored, unweighted K (its tiles
    scaled as they are read; a stored factor is reused only for the same λ, data,
    kernel and weights); "cg" solves (S^½ K S^½ + λI) b = S^½ t with a
    preconditioner for that matrix and the stopping rule on it, a = S^½ b;
    "nystrom" solves K_NMᵀ S K_NM β + λ K_MM β = K_NMᵀ S t, the weighted problem
    restricted to the span of the centres (drawn as without weights).

    Attributes
    ----------
    dual_coef_, X_fit_, kernel_, n_features_in_
        As in the reference.
    n_iter_ : int
        Iterations of the conjugate gradients (``solver="cg"`` or ``"nystrom"``).
    store_ : str
        The Gram store used (``solver="cholesky"`` only).
    fit_store_ : str
        The fit store of an iterative solver (X, t and the CG checkpoint).
    centre_indices_ : ndarray
        Rows of X chosen as Nyström centres (``solver="nystrom"``; ``X_fit_`` is
        X[centre_indices_]).
    condition_estimate_ : float
        A lower bound of the preconditioned system's condition number, from the
        CG run's own Lanczos coefficients (``solver="nystrom"``).
    """

    def __init__(
        self,
        lam=1.0,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        store=None,
        chunk_size=1024,
        solver="cholesky",
        preconditioner="pivoted_cholesky",
        rank=100,
        tol=_cg.DEFAULT_TOL,
        max_iter=_cg.DEFAULT_MAX_ITER,
        compressor=None,
        address=None,
        random_state=0,
        n_centres=1000,
        centres="uniform",
        progress=None,
        resume=True,
    ):
        super().__init__(
            lam=lam, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0
        )
        self.store = store
        self.chunk_size = chunk_size
        self.solver = solver
        self.preconditioner = preconditioner
        self.rank = rank
        self.tol = tol
        self.max_iter = max_iter
        self.compressor = compressor
        self.address = address
        self.random_state = random_state
        self.n_centres = n_centres
        self.centres = centres
        self.progress = progress
        self.resume = resume

    def _validate_backend(self):
        """Check the backend's own arguments, before any data is touched."""
        refuse_precomputed(self, "kernelref.ridge")
        _check_choice(self.solver, "solver", SOLVERS)
        _check_choice(self.preconditioner, "preconditioner", PRECONDITIONERS)
        _check_choice(self.centres, "centres", CENTRE_SAMPLINGS)
        check_integer(
            self.n_centres,
            "n_centres",
            meaning="It is the number of Nyström centres M.",
        )
        check_backend_args(self, chunk_meaning="It is the edge of the Gram tiles.")
        _cg.check_rank(self.rank)
        if self.rank == "auto" and self.preconditioner != "pivoted_cholesky":
            raise ValueError(
                "rank='auto' grows a pivoted Cholesky factor; it needs "
                f"preconditioner='pivoted_cholesky', got {self.preconditioner!r}."
            )
        check_integer(self.max_iter, "max_iter", meaning="It caps the CG iterations.")
        tol = check_positive(
            self.tol, "tol", meaning="It is the relative residual of CG."
        )
        if tol >= 1:
            raise ValueError(f"tol must be < 1 (a relative residual); got {tol!r}.")
        if self.compressor not in COMPRESSORS:
            raise ValueError(
                f"compressor must be one of {COMPRESSORS}; got {self.compressor!r}."
            )
        seed = self.random_state
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(
                f"random_state must be an integer seed; got {self.random_state!r}."
            )

    def fit(self, X, y, sample_weight=None):
        """Solve a = (K + λI)⁻¹ t on the cluster (label ``ridge-dual-solution``),
        or with ``sample_weight`` the weighted solution (label ``ridge-weighted``).

        ``sample_weight`` is one weight ≥ 0 per sample, not all zero, or a single
        number for all (weight c is penalty λ/c), checked as the reference checks
        it, before any work.
        """
        self._validate_backend()
        lam, X_given, t, s, kernel = self._validate(X, y, sample_weight)
        # The Gram store and the fit stores take sparse X as CSR. X_fit_ keeps
        # the reference's X.
        X = X_given
        client = get_client(self.address)
        X_fit = X_given
        if self.solver == "cholesky":
            a = self._fit_cholesky(X, t, lam, kernel, client, s)
        elif self.solver == "cg":
            a = self._fit_cg(X, t, lam, kernel, client, s)
        else:
            self.__dict__.pop("store_", None)
            X_fit, a, self.n_iter_ = _iterative.fit_nystrom(
                self, X, t, lam, kernel, client, s
            )
            if X_given is not X:
                X_fit = X_given[self.centre_indices_]
        self.dual_coef_ = a
        self.kernel_ = kernel
        self.X_fit_ = X_fit.copy() if X_fit is X_given else X_fit  # the model's own
        self.n_features_in_ = X.shape[1]
        return self

    def _fit_cholesky(self, X, t, lam, kernel, client, s=None):
        """a = (K + λI)⁻¹ t, or S^½ (S^½ K S^½ + λI)⁻¹ S^½ t with weights s
        (``ridge-weighted``): the tiles of the one stored K are scaled as the
        factorisation reads them (``linalg.tiled_cholesky``)."""
        self.__dict__.pop("n_iter_", None)
        path = self._store_path()
        store = GramStore.build(
            path,
            X,
            kernel,
            chunk_size=self.chunk_size,
            compressor=self.compressor,
            client=client,
            overwrite=self.store is None,
        )
        self.store_ = str(store.path)
        weights = None if s is None else fingerprint(s)
        L = _reusable_factor(store, lam, weights)
        if L is None:
            L = create_factor(str(store.path / "cholesky"), store.n, store.chunk_size)
            tiled_cholesky(store.array, lam, L, client, weights=s)
            # Set last, so an interrupted factorisation is never taken for a finished
            # one.
            L.attrs.update(
                {
                    "lam": lam,
                    "data": store.attrs["data"],
                    "kernel": store.attrs["kernel"],
                    "weights": weights,
                    "complete": True,
                }
            )
        if s is None:
            return tiled_cho_solve(L, t, client)
        root = np.sqrt(s).reshape((len(s),) + (1,) * (t.ndim - 1))
        return root * tiled_cho_solve(L, root * t, client)

    def _fit_cg(self, X, t, lam, kernel, client, s=None):
        self.__dict__.pop("store_", None)
        a, self.n_iter_ = _iterative.fit_cg(self, X, t, lam, kernel, client, s)
        return a

    def _store_path(self):
        """The user's store, or this estimator's temporary directory (made once)."""
        if self.store is not None:
            return pathlib.Path(self.store)
        if getattr(self, "_temporary", None) is None:
            directory = tempfile.mkdtemp(prefix="kernelref-gram-")
            self._temporary = directory
            self._cleanup = weakref.finalize(
                self, shutil.rmtree, directory, ignore_errors=True
            )
        return pathlib.Path(self._temporary) / "gram.zarr"

    def __getstate__(self):
        # The temporary store belongs to this object; a copy must neither own nor remove
        # it.
        state = dict(self.__dict__)
        state.pop("_cleanup", None)
        state.pop("_temporary", None)
        state.pop("_fit_directories", None)
        return state


def _reusable_factor(store, lam, weights=None):
    """The store's Cholesky factor if it was finished for this λ, data, kernel and
    weights (their ``fingerprint``; None: unweighted), else None."""
    import zarr

    path = store.path / "cholesky"
    if not (path / "zarr.json").is_file():
        return None
    try:
        L = zarr.open_array(store=str(path), mode="r+")
        attrs = L.attrs
    except Exception as exc:
        warnings.warn(
            f"the stored Cholesky factor {str(path)!r} cannot be read ({exc}); "
            "it is discarded and recomputed.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    same = (
        attrs.get("complete") is True
        and attrs.get("lam") == lam
        and attrs.get("data") == store.attrs["data"]
        and attrs.get("kernel") == store.attrs["kernel"]
        and attrs.get("weights") == weights
        and L.shape == store.array.shape
        and tuple(L.chunks) == tuple(store.array.chunks)
    )
    if not same:
        return None
    # A damaged factor would give wrong coefficients that look normal: check every
    # tile on and below the diagonal against its checksum before reusing it.
    damaged = damaged_chunks(L, lower_blocks(n_blocks(L.shape[0], L.chunks[0])))
    if damaged:
        warnings.warn(
            f"the stored Cholesky factor {str(path)!r} has {len(damaged)} damaged "
            f"tile(s) {[block for block, _ in damaged][:10]} (first: {damaged[0][1]}); "
            "it is discarded and recomputed.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return L
