"""Preconditioned conjugate gradients for (K + λI) a = t with streamed kernel blocks.

This solves for the dual coefficients a (label ``ridge-dual-solution``)
without storing the Gram matrix anywhere. The product (K + λI)v is computed on
the cluster one row block at a time, each task forming the kernel block
k(X_rows, X_cols) for b × b tiles and multiplying it with v; X is scattered to
the workers once per solve and v once per iteration.

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

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve, eigh

from kernelref.exceptions import ConvergenceWarning

__all__ = [
    "DEFAULT_MAX_ITER", "DEFAULT_TOL", "CGResult", "ConvergenceWarning", "StreamedGram",
    "WoodburyPreconditioner", "conjugate_gradients", "nystrom_factor", "pivoted_cholesky"]

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


def _kernel_rows_times(X, kernel, rows, V, b):
    """k(X_rows, X) V, forming one b × b kernel tile at a time.

    The diagonal tile is k(X_rows) with Y omitted, as the reference forms K, so
    the streamed product uses the same numbers as the stored Gram matrix.
    """
    out = np.zeros((rows.stop - rows.start, V.shape[1]))
    X_rows = X[rows]
    for start in range(0, len(X), b):
        cols = slice(start, min(start + b, len(X)))
        tile = kernel(X_rows) if cols == rows else kernel(X_rows, X[cols])
        out += tile @ V[cols]
    return out


class StreamedGram:
    """The map V ↦ KV computed on the cluster from kernel blocks; K is never stored.

    Use as a context manager so the scattered X is released from the workers.
    """

    def __init__(self, X, kernel, client, chunk_size):
        self.n = len(X)
        self.client = client
        self.chunk_size = chunk_size
        self.rows = [slice(s, min(s + chunk_size, self.n)) for s in range(0, self.n, chunk_size)]
        self._X = client.scatter(X, broadcast=True, hash=False)
        self._kernel = client.scatter(kernel, broadcast=True, hash=False)

    def __call__(self, V):
        V_future = self.client.scatter(np.ascontiguousarray(V), hash=False)
        futures = [self.client.submit(_kernel_rows_times, self._X, self._kernel, rows, V_future,
                                      self.chunk_size, pure=False) for rows in self.rows]
        try:
            return np.concatenate(self.client.gather(futures), axis=0)
        finally:
            self.client.cancel(futures + [V_future])

    def close(self):
        self.client.cancel([self._X, self._kernel])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def pivoted_cholesky(kernel, X, rank):
    """L (N × r′, r′ ≤ rank) with K ≈ LLᵀ, by greedy diagonal pivoting.

    Step k takes the pivot p with the largest diagonal of K − LLᵀ and appends the
    column (k(X, x_p) − L L_pᵀ)/√d_p; the trace of the residual K − LLᵀ is the sum
    of the remaining diagonal, which never increases.
    """
    d = np.array(kernel.diag(X), dtype=np.float64)
    n = len(d)
    rank = min(rank, n)
    L = np.zeros((n, rank))
    stop = PIVOT_RTOL * d.max() if n else 0.0
    for k in range(rank):
        p = int(np.argmax(d))
        if d[p] <= stop:
            return L[:, :k]
        column = kernel(X, X[p:p + 1])[:, 0] - L[:, :k] @ L[p, :k]
        L[:, k] = column / np.sqrt(d[p])
        d -= L[:, k] ** 2
        d[p] = 0.0
    return L


def nystrom_factor(kernel, X, m, random_state=0):
    """L (N × m′, m′ ≤ m) with K ≈ K_NS K_SS⁻¹ K_SN = LLᵀ on m random landmarks S.

    With K_SS = UΛUᵀ, L = K_NS U Λ^(-1/2), keeping eigenvalues above
    ``NYSTROM_RCOND`` times the largest so no inverse of a near-zero is formed.
    """
    rng = np.random.default_rng(random_state)
    S = np.sort(rng.choice(len(X), size=min(m, len(X)), replace=False))
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


def conjugate_gradients(K_times, t, lam, precondition=None, tol=DEFAULT_TOL,
                        max_iter=DEFAULT_MAX_ITER):
    """Solve (K + λI) a = t by preconditioned conjugate gradients (``ridge-dual-solution``).

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
    T = t.reshape(len(t), -1)
    t_norm = np.linalg.norm(T, axis=0)
    scale = np.where(t_norm > 0, t_norm, 1.0)
    A = np.zeros_like(T)
    R = T.copy()
    n_iter = 0
    while True:
        A, n_iter = _cg_run(K_times, lam, precondition, A, R, scale, tol, max_iter, n_iter)
        R = T - (K_times(A) + lam * A)
        residual = np.linalg.norm(R, axis=0) / scale
        if (residual <= tol).all() or n_iter >= max_iter:
            break
    if not (residual <= tol).all():
        warnings.warn(
            f"conjugate gradients stopped after max_iter={max_iter} iterations at relative "
            f"residual {residual.max():.3g} > tol={tol:g}; increase max_iter, use a "
            "preconditioner of higher rank, or a larger lam.", ConvergenceWarning, stacklevel=2)
    return CGResult(A.reshape(t.shape), n_iter, float(residual.max()))


def _cg_run(K_times, lam, precondition, A, R, scale, tol, max_iter, n_iter):
    """Preconditioned CG from A with residual R until every column reaches ``tol``."""
    M = precondition if precondition is not None else (lambda V: V.copy())
    active = np.linalg.norm(R, axis=0) / scale > tol
    Z = M(R)
    P = Z.copy()
    rz = np.einsum("ij,ij->j", R, Z)
    while active.any() and n_iter < max_iter:
        cols = np.flatnonzero(active)
        AP = K_times(P[:, cols]) + lam * P[:, cols]
        pAp = np.einsum("ij,ij->j", P[:, cols], AP)
        if (pAp <= 0).any():
            raise LinAlgError(
                "K + lam*I is not positive definite (conjugate gradients found a direction "
                "of non-positive curvature); the kernel is not positive semi-definite on this "
                "data. Use a larger lam, a positive semi-definite kernel, or "
                "kernelref.ridge.KernelRidge.")
        alpha = rz[cols] / pAp
        A[:, cols] += alpha * P[:, cols]
        R[:, cols] -= alpha * AP
        n_iter += 1
        active[cols] = np.linalg.norm(R[:, cols], axis=0) / scale[cols] > tol
        cols = np.flatnonzero(active)
        Z_cols = M(R[:, cols])
        rz_new = np.einsum("ij,ij->j", R[:, cols], Z_cols)
        P[:, cols] = Z_cols + (rz_new / rz[cols]) * P[:, cols]
        rz[cols] = rz_new
    return A, n_iter
