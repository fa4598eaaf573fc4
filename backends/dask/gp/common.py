"""What the exact GP estimators share: arguments, the fit store, the factor.

``ExactFit`` holds the fit store (training data in row chunks, see
``backends.dask.runtime``), the Zarr array of the one Cholesky factor the fit
keeps (rewritten only when the matrix it factors changes: the factor is reused
while θ stays the same), and the record of every evidence evaluation made by
ML-II. That record is the fit's checkpoint: L-BFGS-B is deterministic, so a
resumed fit replays the optimiser, answering each evaluation already made from
the record, and reaches the same hyperparameters as an uninterrupted one.

``ClusterFitMixin`` gives both estimators their backend arguments
(``store, chunk_size, address, progress, resume``), their check, and the rule
that a pickled model carries no handle on a running fit.
"""

import numpy as np
import zarr

from backends.dask import estimator_args
from backends.dask.cluster import get_client, running_client
from backends.dask.estimator_args import kernel_identity
from backends.dask.gp.tiles import (
    CrossRhs,
    cross_mean,
    forward_norms,
    gradient_column,
    kernel_times,
)
from backends.dask.linalg import (
    _wait_all,
    create_factor,
    give_buffer,
    read_tile,
    tiled_cho_solve,
    tiled_cholesky,
)
from backends.dask.runtime import FitStore, Progress, map_chunks

__all__ = [
    "ClusterFitMixin",
    "ExactFit",
    "check_backend_args",
    "cross_blocks",
    "cross_means",
    "ensure_factor",
    "forward_norms_on",
    "holds",
    "kernel_identity",
    "prediction_client",
]

#: A prediction's forward substitution reads the factor once per block of test
#: points. With no cluster running (no ``address=``, no active client) a factor
#: of at most this many bytes (N ≤ 8192) is read in this process, not by an
#: embedded cluster started for it (5-15 s); a larger one starts it, so that
#: its workers take the blocks in parallel.
LOCAL_FACTOR_BYTES = 2**29


def check_backend_args(estimator):
    """Check ``store, chunk_size, address, progress, resume`` before any work
    (``estimator_args``; here ``chunk_size`` is the tile edge)."""
    estimator_args.check_backend_args(estimator, chunk_meaning="It is the tile edge.")


class ClusterFitMixin:
    """The backend arguments of an exact GP estimator, and its pickled state.

    ``_transient`` names the attributes that live only while a fit runs (the
    ``ExactFit`` and caches); they are left out of the pickled state.
    """

    _transient = ("_fit",)

    def _set_backend_params(self, store, chunk_size, address, progress, resume):
        self.store = store
        self.chunk_size = chunk_size
        self.address = address
        self.progress = progress
        self.resume = resume

    def _open_fit(self, X, t, identity, description):
        """The fit store of (X, t) under ``identity`` and its ``ExactFit``."""
        client = get_client(self.address)
        store = FitStore.prepare(
            self.store,
            X,
            arrays={"t": t},
            identity=identity,
            chunk_size=self.chunk_size,
            client=client,
        )
        return ExactFit(store, client, self.progress, self.resume, description)

    def _ensure_fit(self):
        """The fit's ``ExactFit``; a model loaded from a file or unpickled carries
        none, and gets its fit store reopened (its factor kept, as after a fit)."""
        if "_fit" not in self.__dict__:
            store = FitStore.open(self.store_)
            fit = ExactFit(store, get_client(self.address), False, True, "")
            fit.keep_factor()
            self._fit = fit
        return self._fit

    def __getstate__(self):
        state = dict(self.__dict__)
        for name in self._transient:
            state.pop(name, None)
        return state


def ensure_factor(factor, tiles, lam, key, client):
    """Write chol(tiles + λI) into ``factor`` unless it already holds it.

    ``key`` (JSON-able) names the matrix; it is set in the array's attributes
    only after the last tile is written, so a cut-short factorisation is never
    reused. Returns the array that holds it: ``factor``, or a writable handle
    on it when ``factor`` was opened read-only (a loaded model's,
    ``kernelref.io``) and had to be computed again.
    """
    if holds(factor, key):
        return factor
    if factor.read_only:
        factor = zarr.open_array(store=str(factor.store.root), path=factor.path)
    attrs = factor.attrs
    attrs.update({"complete": False, "key": None})
    tiled_cholesky(tiles, lam, factor, client)
    attrs.update({"complete": True, "key": key})
    return factor


def holds(factor, key):
    """Whether ``factor`` holds the whole factor of the matrix ``key`` names."""
    attrs = factor.attrs
    return attrs.get("complete") is True and attrs.get("key") == key


def prediction_client(address, factor, key):
    """Where a prediction's forward substitution on ``factor`` runs: the cluster
    at ``address`` or the active client, if there is one; else this process
    (None) when ``factor`` holds the matrix ``key`` names and is at most
    ``LOCAL_FACTOR_BYTES``; else the embedded cluster (a factor to recompute
    is a tiled Cholesky, a larger one is read in parallel)."""
    client = running_client(address)
    local = holds(factor, key) and factor.nbytes <= LOCAL_FACTOR_BYTES
    return client if client is not None or local else get_client(address)


def cross_blocks(kernel, x_ref, X, scale=None, block_size=None):
    """Right-hand sides D k(X_train, X_s) for blocks X_s of ``block_size`` test
    points (default: the chunk size), one forward substitution each."""
    b = x_ref.chunk_size if block_size is None else block_size
    n = X.shape[0]
    return [CrossRhs(kernel, x_ref, X[s : s + b], scale) for s in range(0, n, b)]


class ExactFit:
    """One fit's store, factor and evaluation record (a checkpoint per evaluation)."""

    def __init__(self, store, client, progress, resume, description):
        self.store, self.client = store, client
        self.factor = self._open_factor("factor")
        self.bar = Progress(progress, description, "log evidence", "evaluations")
        self.n_computed = 0
        loaded = store.load_state() if resume else None
        if not resume:
            store.discard_state()
        self.records = _empty_records() if loaded is None else loaded[0]
        self.n_resumed = len(self.records["value"])

    def close(self):
        self.bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the factor -----------------------------------------------------------------
    def _open_factor(self, name):
        path = self.store.path / name
        if (path / "zarr.json").is_file():
            return zarr.open_array(store=str(path), mode="r+")
        return create_factor(str(path), self.store.n, self.store.chunk_size)

    def keep_factor(self):
        """Leave the factor to the fitted model: evaluations after the fit
        (``log_marginal_likelihood`` at another θ) factorise into a second array
        of the store, ``factor-scratch``, so the model's factor, which its saved
        model files name, keeps the fitted θ."""
        self.factor = self._open_factor("factor-scratch")

    def factorise(self, tiles, lam, key):
        """chol(tiles + λI) into the fit's factor unless it holds it already."""
        ensure_factor(self.factor, tiles, lam, key, self.client)

    def log_diagonal_sum(self):
        """Σ_i log L_ii, from the factor's diagonal tiles."""
        L, b = self.factor, self.store.chunk_size
        total = 0.0
        for i in range(self.store.n_chunks):
            tile, buffer = read_tile(L, i, i, b)
            total += np.log(np.diag(tile)).sum()
            give_buffer(buffer)
        return float(total)

    def solve(self, t):
        """(L Lᵀ)⁻¹ t by blocked substitution on the cluster."""
        return tiled_cho_solve(self.factor, t, self.client)

    def gradient(self, kernel, F, G, s, D=None):
        """Σ_ab Σ_ab ∂K_ab/∂log θ with Σ = ½ sym(F Gᵀ) − s D P D (``gradient_column``).

        One task per column block c of P = (L Lᵀ)⁻¹; the longest (small c) first.
        """
        T = self.store.n_chunks
        futures = [
            self.client.submit(
                gradient_column,
                self.factor,
                kernel,
                self.store.x_ref,
                c,
                F,
                G,
                s,
                D,
                pure=False,
                priority=T - c,
            )
            for c in range(T)
        ]
        return np.sum(_wait_all(self.client, futures), axis=0)

    def forward_norms(self, rhs_blocks, alpha, full):
        return forward_norms_on(self.client, self.factor, rhs_blocks, alpha, full)

    def kernel_times(self, tiles, v):
        """K v, streamed on the workers (the kernel tiles are computed, not stored)."""
        parts = map_chunks(self.client, kernel_times, self.store.x_ref, tiles, v)
        return np.concatenate(parts, axis=0)

    # -- the record of evaluations ----------------------------------------------------
    def recorded(self, theta, gradient):
        """The recorded (value, gradient) at exactly this θ, or None."""
        theta = np.asarray(theta, dtype=np.float64)
        for k in range(len(self.records["value"])):
            if np.array_equal(self.records["theta"][k], theta):
                g = self.records["gradient"][k]
                if not (gradient and np.isnan(g).any()):
                    return float(self.records["value"][k]), g.copy()
        return None

    def record(self, theta, value, gradient):
        """Add an evaluation, checkpoint the record, report progress."""
        theta = np.asarray(theta, dtype=np.float64)
        g = np.full(theta.shape, np.nan) if gradient is None else np.asarray(gradient)
        r = self.records
        p = theta.size
        r["theta"] = np.concatenate([r["theta"].reshape(-1, p), theta[None]])
        r["value"] = np.append(r["value"], value)
        r["gradient"] = np.concatenate([r["gradient"].reshape(-1, p), g[None]])
        self.n_computed += 1
        n = len(r["value"])
        self.store.save_state(r, n)
        self.bar.update(n, value, n)


def forward_norms_on(client, factor, rhs_blocks, alpha, full):
    """``forward_norms`` for each right-hand side, one task each, in order; in
    this process when ``client`` is None (``prediction_client``)."""
    if client is None:
        return [forward_norms(factor, rhs, alpha, full) for rhs in rhs_blocks]
    futures = [
        client.submit(forward_norms, factor, rhs, alpha, full, pure=False)
        for rhs in rhs_blocks
    ]
    return _wait_all(client, futures)


def cross_means(rhs_blocks, alpha):
    """k*ᵀα of each block of test points (``gp-predictive-mean``), in this
    process: the mean needs no factor, so no cluster."""
    return [cross_mean(rhs, alpha) for rhs in rhs_blocks]


def _empty_records():
    return {
        "theta": np.zeros((0, 0)),
        "value": np.zeros(0),
        "gradient": np.zeros((0, 0)),
    }
