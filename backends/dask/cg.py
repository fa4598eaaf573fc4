"""Preconditioned conjugate gradients for (K + λI) a = t with streamed kernel blocks.

This solves for the dual coefficients a (label ``ridge-dual-solution``)
without storing the Gram matrix anywhere. The product (K + λI)V is computed on
the cluster one row chunk of the fit store at a time (``StreamedGram``), each
task forming small kernel tiles in a reused buffer and multiplying them with V;
X is read by the workers from the store, V enters each round once.
``ConjugateGradients`` is the iteration as a resumable loop for
``runtime.run_loop`` (one product per step, its state checkpointed).

K + λI is symmetric positive definite, so conjugate gradients converge; their
rate depends on the condition number (λ_max(K) + λ)/λ, which for smooth kernels
and small λ is large. The preconditioners approximate K ≈ LLᵀ with a low rank r:

- ``pivoted_cholesky``: the greedy partial Cholesky that picks, at each step, the
  row with the largest remaining diagonal (needs ``kernel.diag`` and r kernel
  columns k(X, x_p));
- ``nystrom_factor``: K_NS K_SS⁻¹ K_SN on m random landmarks S.

Both are applied as M⁻¹ = (LLᵀ + λI)⁻¹ by the Woodbury identity
(LLᵀ + λI)⁻¹ = (I − L (λI_r + LᵀL)⁻¹ Lᵀ)/λ with one r × r Cholesky factor. The
r largest eigenvalues of K, which slow the plain iteration, are then nearly
removed. Both factors are computed on the client: they cost O(N r (D + r)),
small beside one product with K.
"""

import pathlib
import shutil
import tempfile
import warnings
import weakref
from dataclasses import dataclass

import numpy as np
import scipy.sparse
from scipy.linalg import LinAlgError, cho_factor, cho_solve, eigh

from backends.dask.blocks import kernel_block, reusable_buffer
from backends.dask.runtime import FitStore, map_chunks, read_chunk
from kernelref.exceptions import ConvergenceWarning

__all__ = [
    "DEFAULT_MAX_ITER",
    "DEFAULT_TOL",
    "CGResult",
    "ConjugateGradients",
    "ConvergenceWarning",
    "StreamedGram",
    "gram_rows_times",
    "kernel_shift",
    "map_chunks_on",
    "WoodburyPreconditioner",
    "conjugate_gradients",
    "nystrom_factor",
    "auto_pivoted_cholesky",
    "check_rank",
    "pivoted_cholesky",
    "preconditioner_factor",
]

#: Relative residual ‖t − (K + λI)a‖/‖t‖ at which the iteration stops. The error
#: of a is at most cond(K + λI) times this relative to ‖a‖, so 1e-10 gives
#: agreement with a direct solve to about 1e-8 while cond(K + λI) ≤ 1e2, and the
#: float64 rounding of the streamed products (about 1e-14 relative) stays below it.
DEFAULT_TOL = 1e-10

#: Iteration cap. Preconditioned problems here converge in tens of iterations;
#: hitting the cap means the preconditioner's rank is too small for this λ.
DEFAULT_MAX_ITER = 1000

#: Pivoted Cholesky stops early when the largest remaining diagonal of K − LLᵀ
#: falls below this fraction of the largest diagonal of K: the rest is rounding.
PIVOT_RTOL = 1e-12

#: Nyström drops eigen-directions of K_SS below this fraction of its largest
#: eigenvalue: they are rounding noise and K_SS^(-1/2) would amplify them.
NYSTROM_RCOND = 1e-10


@dataclass
class CGResult:
    """The solution ``a``, the iterations taken and the final relative residual."""

    a: np.ndarray
    n_iter: int
    residual: float


#: A kernel tile of ``TILE_ROWS`` × ``TILE_COLS`` float64 entries (4 MiB) stays
#: in a core's cache while its map and its product with V run: measured here at
#: about 2.5 ns per RBF entry with the product, against 13 ns for 4096² tiles.
TILE_ROWS = 256
TILE_COLS = 2048


def _is_rbf(kernel):
    return type(kernel).__name__ == "RBF" and type(kernel).__module__ == (
        "kernelref.kernels.vector"
    )


def kernel_shift(kernel, X):
    """A common shift of the rows that changes no RBF entry (the mean), so the
    expansion ‖x‖² + ‖y‖² − 2xᵀy in ``kernel_block`` loses little to
    cancellation; None for other kernels, whose values a shift would change, and
    for ``scipy.sparse`` X (shifted, it would be dense)."""
    if scipy.sparse.issparse(X):
        return None
    return np.asarray(X, dtype=np.float64).mean(axis=0) if _is_rbf(kernel) else None


def centred_chunk(ref, j, shift):
    """On a worker: chunk j of the store's X, shifted, and its squared row norms
    (CSR rows of sparse X, unshifted, with the norms of their stored entries)."""
    X_j = read_chunk(ref, j)
    if shift is not None:
        X_j = X_j - shift
    if scipy.sparse.issparse(X_j):
        return X_j, np.asarray(X_j.multiply(X_j).sum(axis=1)).ravel()
    return X_j, np.einsum("ij,ij->i", X_j, X_j)


def tiled_product(kernel, X_rows, x_norms, Y, y_norms, V, out, buffer):
    """out += k(X_rows, Y) V, one reused ``TILE_ROWS`` × ``TILE_COLS`` tile at a
    time."""
    for c0 in range(0, Y.shape[0], TILE_COLS):
        cols = slice(c0, c0 + TILE_COLS)
        for r0 in range(0, X_rows.shape[0], TILE_ROWS):
            rows = slice(r0, r0 + TILE_ROWS)
            tile = kernel_block(
                kernel, X_rows[rows], Y[cols], buffer, x_norms[rows], y_norms[cols]
            )
            out[rows] += tile @ V[cols]
    return out


def map_chunks_on(client, func, ref, *args):
    """``runtime.map_chunks`` on ``client``'s cluster, or, with ``client`` None,
    the same tasks ``func(ref, i, *args)`` run one after another in this
    process: the same functions on the same chunks, concatenated in the same
    order, so the same numbers (a prediction that needs no cluster,
    ``gp_variance.variance_client``)."""
    if client is None:
        return [func(ref, i, *args) for i in range(ref.n_chunks)]
    return map_chunks(client, func, ref, *args)


def gram_rows_times(ref, i, V, kernel, shift):
    """Worker task: rows i of K V = Σ_j k(X_i, X_j) V_j, X read from the store."""
    X_i, x_norms = centred_chunk(ref, i, shift)
    out = np.zeros((X_i.shape[0], V.shape[1]))
    buffer = reusable_buffer(TILE_ROWS * TILE_COLS)
    for j in range(ref.n_chunks):
        X_j, y_norms = centred_chunk(ref, j, shift)
        tiled_product(kernel, X_i, x_norms, X_j, y_norms, V[ref.rows(j)], out, buffer)
    return out


class StreamedGram:
    """The map V ↦ KV computed on the cluster from kernel tiles; K is never stored.

    The tasks read X from the fit store (``runtime.read_chunk``, cached per
    worker), so a task lost with a worker is recomputed by the scheduler; V
    enters each round once. Each task forms its tiles by one matrix product
    and an elementwise map in a reused buffer (``blocks.kernel_block``), and
    all columns of V share one pass over the tiles.

    ``StreamedGram(store, kernel, client)`` with a ``runtime.FitStore``; for
    convenience ``StreamedGram(X, kernel, client, chunk_size)`` writes X into a
    temporary fit store first. Works as a context manager (nothing to release).
    """

    def __init__(self, store, kernel, client, chunk_size=None, shift=None):
        if isinstance(store, np.ndarray):
            X = store
            directory = tempfile.mkdtemp(prefix="kernelref-streamed-")
            self._cleanup = weakref.finalize(self, shutil.rmtree, directory, True)
            store = FitStore.prepare(
                pathlib.Path(directory) / "fit.zarr",
                X,
                identity={"streamed_gram": kernel.spec()},
                chunk_size=chunk_size or 4096,
                client=client,
            )
            shift = kernel_shift(kernel, X) if shift is None else shift
        self.store = store
        self.n = store.n
        self.client = client
        self.kernel = kernel
        self.shift = shift

    def __call__(self, V):
        V = np.ascontiguousarray(V, dtype=np.float64)
        V2 = V.reshape(len(V), -1)
        blocks = map_chunks_on(
            self.client, gram_rows_times, self.store.x_ref, V2, self.kernel, self.shift
        )
        return np.concatenate(blocks, axis=0).reshape(V.shape)

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def pivoted_cholesky(kernel, X, rank, trace_tol=0.0, diagonal_tol=0.0, weights=None):
    """L (N × r′, r′ ≤ rank) with K ≈ LLᵀ, by greedy diagonal pivoting.

    Step k takes the pivot p with the largest diagonal of K − LLᵀ and appends the
    column (k(X, x_p) − L L_pᵀ)/√d_p; the trace of the residual K − LLᵀ is the sum
    of the remaining diagonal, which never increases. The growth stops early
    once that trace is at most `trace_tol`, or the largest remaining diagonal at
    most `diagonal_tol` (``rank="auto"``: ``auto_pivoted_cholesky``). With
    `weights` s ≥ 0 the matrix is S^½ K S^½ (``ridge-weighted``): its diagonal
    s_n k(x_n, x_n) and columns s^½ s_p^½ k(X, x_p), so no zero-weight row is
    ever a pivot.
    """
    d = np.array(kernel.diag(X), dtype=np.float64)
    root = None if weights is None else np.sqrt(np.asarray(weights, dtype=float))
    if root is not None:
        d *= root**2
    n = len(d)
    rank = min(rank, n)
    L = np.zeros((n, rank), order="F")  # columns contiguous: L[:, :k] is read often
    stop = PIVOT_RTOL * d.max() if n else 0.0
    for k in range(rank):
        p = int(np.argmax(d))
        if d[p] <= max(stop, diagonal_tol) or d.sum() <= trace_tol:
            return np.ascontiguousarray(L[:, :k])
        column = kernel(X, X[p : p + 1])[:, 0]
        if root is not None:
            column *= root * root[p]
        column -= L[:, :k] @ L[p, :k]
        L[:, k] = column / np.sqrt(d[p])
        d -= L[:, k] ** 2
        d[p] = 0.0
    return np.ascontiguousarray(L)


#: ``rank="auto"``: the pivoted Cholesky grows until the trace of the remainder
#: K − LLᵀ is below ``AUTO_TRACE_FRACTION``·λN (then M⁻¹A − I has trace below
#: that fraction of N: most of the spectrum sits at 1), or every remaining
#: diagonal is below λ (no single direction is left that the noise does not
#: already damp), or the rank reaches ``auto_rank_cap(N)``.
AUTO_TRACE_FRACTION = 0.1

#: The cap of ``rank="auto"``: ``AUTO_RANK_PER_ROOT_N``·√N, at most
#: ``AUTO_RANK_MAX``. Building a rank-r factor reads N r²/2 numbers on the client
#: and applying it costs 4Nr per column and iteration, so r ~ √N keeps the
#: preconditioner at a few streamed products (N² kernel entries) in all.
AUTO_RANK_PER_ROOT_N = 3
AUTO_RANK_MAX = 1000


def auto_rank_cap(n):
    """The largest rank ``rank="auto"`` takes for N = n rows."""
    return int(min(AUTO_RANK_MAX, max(1, AUTO_RANK_PER_ROOT_N * np.sqrt(n))))


def auto_pivoted_cholesky(kernel, X, lam, weights=None):
    """``pivoted_cholesky`` with its rank chosen from the spectrum it measures."""
    n = X.shape[0]
    return pivoted_cholesky(
        kernel,
        X,
        auto_rank_cap(n),
        trace_tol=AUTO_TRACE_FRACTION * lam * n,
        diagonal_tol=lam,
        weights=weights,
    )


def preconditioner_factor(kernel, X, rank, lam, weights=None):
    """The pivoted-Cholesky factor L of rank `rank` (an int, or "auto"), of K or,
    with `weights`, of S^½ K S^½."""
    if isinstance(rank, str) and rank == "auto":
        return auto_pivoted_cholesky(kernel, X, lam, weights)
    return pivoted_cholesky(kernel, X, rank, weights=weights)


def check_rank(rank, name="rank"):
    """`rank` is a positive integer or "auto"; otherwise a ValueError naming it."""
    if isinstance(rank, str):
        if rank != "auto":
            raise ValueError(
                f"{name} must be a positive integer or 'auto' (chosen from the "
                f"kernel's spectrum); got {rank!r}."
            )
        return rank
    from kernelref._validation import check_integer

    return check_integer(
        rank, name, meaning="It is the preconditioner's rank; or give 'auto'."
    )


def nystrom_factor(kernel, X, m, random_state=0):
    """L (N × m′, m′ ≤ m) with K ≈ K_NS K_SS⁻¹ K_SN = LLᵀ on m random landmarks S.

    With K_SS = UΛUᵀ, L = K_NS U Λ^(-1/2), keeping eigenvalues above
    ``NYSTROM_RCOND`` times the largest so no inverse of a near-zero is formed.
    """
    rng = np.random.default_rng(random_state)
    n = X.shape[0]
    S = np.sort(rng.choice(n, size=min(m, n), replace=False))
    K_NS = kernel(X, X[S])
    Lambda, U = eigh(K_NS[S])
    keep = Lambda > NYSTROM_RCOND * Lambda[-1]
    return K_NS @ (U[:, keep] / np.sqrt(Lambda[keep]))


class WoodburyPreconditioner:
    """R ↦ (LLᵀ + λI)⁻¹ R = (R − L (λI + LᵀL)⁻¹ LᵀR)/λ, with one r × r Cholesky."""

    def __init__(self, L, lam):
        self.L = L
        self.lam = lam
        C = L.T @ L
        C.flat[:: len(C) + 1] += lam
        self.C = cho_factor(C, lower=True)

    def __call__(self, R):
        return (R - self.L @ cho_solve(self.C, self.L.T @ R)) / self.lam


def conjugate_gradients(
    K_times, t, lam, precondition=None, tol=DEFAULT_TOL, max_iter=DEFAULT_MAX_ITER
):
    """Solve (K + λI) a = t by preconditioned conjugate gradients
    (``ridge-dual-solution``).

    ``K_times(V)`` returns KV for an (N, k) array V; ``precondition(R)`` applies
    M⁻¹ ≈ (K + λI)⁻¹. The columns of a 2-D t are solved together (one product with
    K per iteration serves all of them) with their own step lengths; a column stops
    when its relative residual is at most ``tol``. The recurrence's residual drifts
    from the true one, so convergence is confirmed with the true residual
    t − (K + λI)a and the iteration restarted from a if they disagree.

    Returns a ``CGResult``; warns with ``ConvergenceWarning`` if ``max_iter``
    iterations did not reach ``tol``.
    """
    t = np.asarray(t, dtype=np.float64)
    solver = ConjugateGradients(
        lambda V: K_times(V) + lam * V,
        t.reshape(len(t), -1),
        precondition,
        tol,
        max_iter,
    )
    state = solver.start()
    while not solver.done(state):
        state = solver.step(state)
    return solver.result(state, t.shape, stacklevel=3)


class ConjugateGradients:
    """Preconditioned CG for A X = T (A symmetric positive definite) as a
    resumable loop: ``start``, ``step`` (one product with A), ``done``, ``measure``
    — the protocol of ``runtime.run_loop``, whose checkpoints hold the state.

    The state is a dict of arrays: the iterate ``X``, residual ``R``, direction
    ``P``, ``rz`` = rᵀM⁻¹r per column, the ``active`` columns, ``n_iter`` and the
    ``phase`` ("iterate", "verify": confirm with the true residual, "done").
    The step lengths α_k and ratios β_k of the first run are kept (``alphas``,
    ``betas``: one row per iteration, NaN once a column has stopped): they are the
    Lanczos coefficients of M^(-1/2) A M^(-1/2) that stochastic Lanczos
    quadrature uses (``gp_matrix_free``).

    ``breakdown="stop"`` ends the iteration, keeping the iterate, when rounding
    makes a direction's curvature pᵀAp non-positive (an A that is positive
    semi-definite but numerically singular, as FALKON's is on nearly repeated
    centres); the default raises, since for K + λI it means an indefinite kernel.
    """

    measure_name = "residual"
    size_name = "iterations"

    def __init__(
        self,
        apply,
        T,
        precondition=None,
        tol=DEFAULT_TOL,
        max_iter=DEFAULT_MAX_ITER,
        X0=None,
        breakdown="raise",
    ):
        self.apply = apply
        self.T = T
        self.precondition = precondition if precondition is not None else np.copy
        self.tol = tol
        self.max_iter = max_iter
        self.X0 = X0
        self.breakdown = breakdown
        t_norm = np.linalg.norm(T, axis=0)
        self.scale = np.where(t_norm > 0, t_norm, 1.0)

    def start(self):
        k = self.T.shape[1]
        if self.X0 is None:
            X, R = np.zeros_like(self.T), self.T.copy()
        else:  # a product only with the columns that have a start
            X = np.array(self.X0, dtype=np.float64).reshape(self.T.shape)
            R, started = self.T.copy(), np.flatnonzero(X.any(axis=0))
            if len(started):
                R[:, started] -= self.apply(X[:, started])
        state = {
            "X": X,
            "n_iter": 0,
            "first_run": True,
            "alphas": np.zeros((0, k)),
            "betas": np.zeros((0, k)),
        }
        return self._restart(state, R)

    def _restart(self, state, R):
        residual = np.linalg.norm(R, axis=0) / self.scale
        active = residual > self.tol
        Z = self.precondition(R)
        state.update(
            R=R,
            P=Z.copy(),
            rz=np.einsum("ij,ij->j", R, Z),
            active=active,
            residual=residual,
        )
        if "rz0" not in state:  # r₀ᵀM⁻¹r₀ of the first run: the probes' ‖z‖²_M⁻¹
            state["rz0"] = state["rz"].copy()
        if not active.any() or state.get("broken"):
            state["phase"] = "done"
        elif state["n_iter"] >= self.max_iter:
            state["phase"] = "done"
        else:
            state["phase"] = "iterate"
        return state

    def step(self, state):
        state = {
            k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()
        }
        if state["phase"] == "verify":
            R = self.T - self.apply(state["X"])
            state["first_run"] = False
            return self._restart(state, R)
        X, R, P, rz, active = (state[k] for k in ("X", "R", "P", "rz", "active"))
        cols = np.flatnonzero(active)
        AP = self.apply(P[:, cols])
        pAp = np.einsum("ij,ij->j", P[:, cols], AP)
        if self.breakdown == "stop" and (pAp <= 0).any():
            # rounding has made a direction look flat: keep the iterate, stop there
            bad = cols[pAp <= 0]
            active[bad] = False
            state["broken"] = True  # no restart after this: it would break down again
            keep = pAp > 0
            cols, AP, pAp = cols[keep], AP[:, keep], pAp[keep]
            if not len(cols):
                state["phase"] = "verify"
                return state
        if (pAp <= 0).any():
            raise LinAlgError(
                "K + lam*I is not positive definite (conjugate gradients found a "
                "direction of non-positive curvature); the kernel is not positive "
                "semi-definite on this data. Use a larger lam, a positive "
                "semi-definite kernel, or kernelref.ridge.KernelRidge."
            )
        alpha = rz[cols] / pAp
        X[:, cols] += alpha * P[:, cols]
        R[:, cols] -= alpha * AP
        state["n_iter"] += 1
        residual = state["residual"]
        residual[cols] = np.linalg.norm(R[:, cols], axis=0) / self.scale[cols]
        active[cols] = residual[cols] > self.tol
        moving = np.flatnonzero(active)
        Z = self.precondition(R[:, moving])
        rz_new = np.einsum("ij,ij->j", R[:, moving], Z)
        beta = rz_new / rz[moving]
        P[:, moving] = Z + beta * P[:, moving]
        rz[moving] = rz_new
        if state["first_run"]:
            k = len(rz)
            row_alpha, row_beta = np.full((1, k), np.nan), np.full((1, k), np.nan)
            row_alpha[0, cols] = alpha
            row_beta[0, moving] = beta
            state["alphas"] = np.vstack([state["alphas"], row_alpha])
            state["betas"] = np.vstack([state["betas"], row_beta])
        if not active.any() or state["n_iter"] >= self.max_iter:
            state["phase"] = "verify"
        return state

    def done(self, state):
        return state["phase"] == "done"

    def measure(self, state):
        return float(state["residual"].max()), int(state["n_iter"])

    def result(self, state, shape, stacklevel=2):
        """The ``CGResult``, warning if the iteration stopped short of tol."""
        residual = state["residual"]
        if not (residual <= self.tol).all():
            if state.get("broken"):
                reason = (
                    f"conjugate gradients stopped at iteration {state['n_iter']}, "
                    f"relative residual {residual.max():.3g} > tol={self.tol:g}: "
                    "rounding made a search direction flat (the system is numerically "
                    "singular, e.g. nearly repeated centres), so this is as far as it "
                    "goes; use a larger tol, fewer centres or a larger lam."
                )
            else:
                reason = (
                    f"conjugate gradients stopped after max_iter={self.max_iter} "
                    f"iterations at relative residual {residual.max():.3g} > "
                    f"tol={self.tol:g}; increase max_iter, use a preconditioner of "
                    "higher rank, or a larger lam."
                )
            warnings.warn(reason, ConvergenceWarning, stacklevel=stacklevel)
        return CGResult(
            state["X"].reshape(shape), int(state["n_iter"]), float(residual.max())
        )
