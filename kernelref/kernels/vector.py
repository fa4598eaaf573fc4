"""Kernels on vectors: linear, polynomial, Gaussian, exponential (Laplacian),
sigmoid, ARD Gaussian and the four-parameter kernel of the GP slides.

Each class states its formula with the book's equation label; ``_gradient_terms``
gives ∂K/∂log θ for the hyperparameters listed in ``hyperparameter_names``.

The linear, polynomial, Gaussian and sigmoid kernels also take ``scipy.sparse``
inputs (``accepts_sparse``), as libsvm does: each needs only the inner products
xᵀx′ — a sparse product — and the squared norms ‖x‖², summed over the stored
entries; X is never made dense, only the (n, m) kernel matrix is.
"""

import numpy as np
import scipy.sparse as sp
from scipy.spatial.distance import cdist

from kernelref.kernels.base import DEFAULT_BOUNDS, Kernel, as_2d, squared_distances


def _matrix(X, name="X"):
    """X as a float64 2-D array, or, when it is ``scipy.sparse``, as sparse CSR."""
    if sp.issparse(X):
        return X.tocsr().astype(np.float64, copy=False)
    return as_2d(X, name)


def _n_rows(X):
    return X.shape[0] if sp.issparse(X) else len(as_2d(X))


#: sparse X and Y of more than this many columns per stored entry are cut to their
#: shared columns before XYᵀ: scipy's product costs ~1.5 ns per column, the cut
#: ~160 ns per entry (measured, one thread: 256 × 1024 rows, 10⁶ columns, 1.3e5
#: entries: 1.5 ms uncut, 20 ms cut; 10⁸ columns, 2400 entries: 90 ms, 0.6 ms)
WIDE = 128


def _inner(X, Y=None):
    """The inner products xᵀy for all pairs, dense (n, m), from a sparse product
    when X or Y is sparse (over the columns both store, `shared_columns`, when X
    and Y are sparse with over `WIDE` columns per stored entry)."""
    X = _matrix(X)
    Y = X if Y is None else _matrix(Y, "Y")
    if sp.issparse(X) and sp.issparse(Y) and X.shape[1] > WIDE * (X.nnz + Y.nnz):
        X, Y = shared_columns(X, Y)
    G = X @ Y.T
    return G.toarray() if sp.issparse(G) else np.asarray(G)


def shared_columns(X, Y):
    """CSR X and Y cut to the columns that both store an entry in, renumbered
    0, 1, ...: the same inner products XYᵀ (bit for bit: scipy multiplies stored
    pairs only, in the same order), without the work and memory of X's width.
    scipy forms XYᵀ by turning Yᵀ into CSR, whose row pointers take one entry
    per column of X (400 MB at 10⁸ columns) on every call."""
    columns = np.intersect1d(X.indices, Y.indices)
    return _cut(X, columns), _cut(Y, columns)


def _cut(A, columns):
    """CSR A's entries in `columns` (sorted), renumbered by their position."""
    kept = np.isin(A.indices, columns)
    row = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    indptr = np.zeros(A.shape[0] + 1, dtype=A.indptr.dtype)
    np.cumsum(np.bincount(row[kept], minlength=A.shape[0]), out=indptr[1:])
    indices = np.searchsorted(columns, A.indices[kept]).astype(A.indices.dtype)
    return sp.csr_matrix(
        (A.data[kept], indices, indptr), shape=(A.shape[0], len(columns))
    )


def _row_norms_sq(X):
    X = _matrix(X)
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1), dtype=float).ravel()
    return np.einsum("ij,ij->i", X, X)


def _squared_distances(X, Y=None):
    """‖x − y‖² for all pairs. Dense inputs go to ``squared_distances``; with a
    sparse input it is ‖x‖² + ‖y‖² − 2xᵀy from the sparse product and norms
    (centring X would make it dense), clipped at zero, the diagonal zero for
    ``Y=None``."""
    if not (sp.issparse(X) or sp.issparse(Y)):
        return squared_distances(X, Y)
    D = _inner(X, Y)
    D *= -2.0
    D += _row_norms_sq(X)[:, None]
    D += _row_norms_sq(X if Y is None else Y)[None, :]
    np.maximum(D, 0.0, out=D)
    if Y is None:
        np.fill_diagonal(D, 0.0)
    return D


class Linear(Kernel):
    """k(x, x′) = xᵀx′ (label ``kernel-linear``)."""

    accepts_sparse = True

    def __init__(self):
        pass

    def __call__(self, X, Y=None):
        return _inner(X, Y)

    def diag(self, X):
        return _row_norms_sq(X)


class Polynomial(Kernel):
    """k(x, x′) = (γ xᵀx′ + c)^d (label ``kernel-polynomial``); c = coef0 ≥ 0.

    Hyperparameters: ``gamma`` and, when it is positive, ``coef0``.
    """

    param_constraints = {"degree": "degree", "gamma": "positive", "coef0": "finite"}

    accepts_sparse = True

    def __init__(
        self,
        degree=3,
        gamma=1.0,
        coef0=1.0,
        gamma_bounds=DEFAULT_BOUNDS,
        coef0_bounds=DEFAULT_BOUNDS,
    ):
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.gamma_bounds = gamma_bounds
        self.coef0_bounds = coef0_bounds

    @property
    def hyperparameter_names(self):
        return ("gamma", "coef0") if self.coef0 > 0 else ("gamma",)

    def __call__(self, X, Y=None):
        K = _inner(X, Y)
        K *= self.gamma
        K += self.coef0
        return K**self.degree

    def diag(self, X):
        return (self.gamma * _row_norms_sq(X) + self.coef0) ** self.degree

    def _gradient_terms(self, X):
        G = _inner(X)
        base = self.gamma * G + self.coef0
        slope = self.degree * base ** (self.degree - 1)
        for name, _ in self.hyperparameters:
            yield slope * (self.gamma * G if name == "gamma" else self.coef0)


class RBF(Kernel):
    """Gaussian kernel k(x, x′) = exp(−γ‖x − x′‖²) (label ``kernel-gaussian``).

    γ = 1/(2σ²) in the σ form of the sources.
    """

    hyperparameter_names = ("gamma",)
    param_constraints = {"gamma": "positive"}
    accepts_sparse = True

    def __init__(self, gamma=1.0, gamma_bounds=DEFAULT_BOUNDS):
        self.gamma = gamma
        self.gamma_bounds = gamma_bounds

    def log_kernel(self, X, Y=None):
        """log k(x, x′) = −γ‖x − x′‖², for normalising weights stably."""
        return -self.gamma * _squared_distances(X, Y)

    def __call__(self, X, Y=None):
        K = _squared_distances(X, Y)
        K *= -self.gamma
        return np.exp(K, out=K)

    def diag(self, X):
        return np.ones(_n_rows(X))

    def _gradient_terms(self, X):
        if self.hyperparameters:
            D2 = _squared_distances(X)
            yield -self.gamma * D2 * np.exp(-self.gamma * D2)


class Laplacian(Kernel):
    """Exponential kernel k(x, x′) = exp(−γ‖x − x′‖) (label ``kernel-exponential``).

    The norm is Euclidean, as in the sources. scikit-learn's ``laplacian_kernel``
    uses the L1 norm instead; ``norm="l1"`` gives that one (it is a product of
    one-dimensional exponential kernels, so it is positive definite too).
    """

    hyperparameter_names = ("gamma",)
    param_constraints = {"gamma": "positive"}

    def __init__(self, gamma=1.0, norm="l2", gamma_bounds=DEFAULT_BOUNDS):
        self.gamma = gamma
        self.norm = norm
        self.gamma_bounds = gamma_bounds

    def _distances(self, X, Y=None):
        # Computed directly, not as √(‖x‖² + ‖y‖² − 2xᵀy): near x = x′ that form
        # loses half the digits to cancellation, and √ exposes them.
        metrics = {"l2": "euclidean", "l1": "cityblock"}
        if self.norm not in metrics:
            raise ValueError(f"norm must be 'l2' or 'l1'; got {self.norm!r}.")
        X = as_2d(X)
        return cdist(X, X if Y is None else as_2d(Y, "Y"), metrics[self.norm])

    def log_kernel(self, X, Y=None):
        """log k(x, x′) = −γ‖x − x′‖."""
        return -self.gamma * self._distances(X, Y)

    def __call__(self, X, Y=None):
        return np.exp(self.log_kernel(X, Y))

    def diag(self, X):
        return np.ones(len(as_2d(X)))

    def _gradient_terms(self, X):
        if self.hyperparameters:
            log_K = self.log_kernel(X)
            yield log_K * np.exp(log_K)


class Sigmoid(Kernel):
    """k(x, x′) = tanh(γ xᵀx′ + c) (label ``kernel-sigmoid``).

    Not positive semi-definite for every γ and c: see ``mercer_check``. ``coef0``
    may be negative, so only ``gamma`` is a (log-scale) hyperparameter.
    """

    hyperparameter_names = ("gamma",)
    param_constraints = {"gamma": "positive", "coef0": "finite"}
    accepts_sparse = True

    def __init__(self, gamma=1.0, coef0=0.0, gamma_bounds=DEFAULT_BOUNDS):
        self.gamma = gamma
        self.coef0 = coef0
        self.gamma_bounds = gamma_bounds

    def __call__(self, X, Y=None):
        K = _inner(X, Y)
        K *= self.gamma
        K += self.coef0
        return np.tanh(K, out=K)

    def diag(self, X):
        return np.tanh(self.gamma * _row_norms_sq(X) + self.coef0)

    def _gradient_terms(self, X):
        if self.hyperparameters:
            G = _inner(X)
            yield (1.0 - np.tanh(self.gamma * G + self.coef0) ** 2) * self.gamma * G


class ARD(Kernel):
    """ARD Gaussian k(x, x′) = exp(−Σ_d γ_d (x_d − x′_d)²) (label ``kernel-ard``).

    One γ_d per input dimension; a γ_d driven to zero switches input d off.
    """

    hyperparameter_names = ("gamma",)
    param_constraints = {"gamma": "positive"}
    array_params = ("gamma",)

    def __init__(self, gamma=1.0, gamma_bounds=DEFAULT_BOUNDS):
        self.gamma = gamma
        self.gamma_bounds = gamma_bounds

    def _scaled(self, X):
        X = as_2d(X)
        gamma = np.broadcast_to(np.asarray(self.gamma, dtype=float), (X.shape[1],))
        return X * np.sqrt(gamma)

    def log_kernel(self, X, Y=None):
        """log k(x, x′) = −Σ_d γ_d (x_d − x′_d)²."""
        return -squared_distances(
            self._scaled(X), None if Y is None else self._scaled(Y)
        )

    def __call__(self, X, Y=None):
        return np.exp(self.log_kernel(X, Y))

    def diag(self, X):
        return np.ones(len(as_2d(X)))

    def _gradient_terms(self, X):
        if not self.hyperparameters:
            return
        X = as_2d(X)
        K = self(X)
        if np.ndim(self.gamma) == 0:
            yield self.log_kernel(X) * K
            return
        for d, gamma_d in enumerate(np.asarray(self.gamma, dtype=float)):
            yield -gamma_d * squared_distances(X[:, d : d + 1]) * K

    def gradient_dot(self, X, W, K=None):
        """Σ_ab W_ab ∂K_ab/∂log γ_d for all d in O(n²) memory (label
        ``kernel-ard-grad``).

        With M = W ∘ K, Σ_ab M_ab (x_ad − x_bd)² = x_d²·(M1 + Mᵀ1) − 2 x_dᵀ M x_d,
        so no (n, n, D) array is formed.
        """
        if not self.hyperparameters:
            return np.empty(0)
        X = as_2d(X)
        M = W * (self(X) if K is None else K)
        X2 = X**2
        quad = (
            X2.T @ M.sum(axis=1)
            + X2.T @ M.sum(axis=0)
            - 2.0 * np.einsum("ad,ad->d", M @ X, X)
        )
        gamma = np.broadcast_to(np.asarray(self.gamma, dtype=float), (X.shape[1],))
        if np.ndim(self.gamma):
            return -gamma * quad
        return np.array([-(gamma * quad).sum()])


class ExponentialQuadratic(Kernel):
    """The four-parameter kernel of the GP slides (label ``kernel-theta``):

    k(x, x′) = θ₀ exp(−θ₁/2 ‖x − x′‖²) + θ₂ + θ₃ xᵀx′.

    θ₂ and θ₃ may be zero; a zero parameter is held fixed.
    """

    param_constraints = dict.fromkeys(
        ("theta0", "theta1", "theta2", "theta3"), "nonnegative"
    )

    def __init__(
        self,
        theta0=1.0,
        theta1=1.0,
        theta2=0.0,
        theta3=0.0,
        theta0_bounds=DEFAULT_BOUNDS,
        theta1_bounds=DEFAULT_BOUNDS,
        theta2_bounds=DEFAULT_BOUNDS,
        theta3_bounds=DEFAULT_BOUNDS,
    ):
        self.theta0, self.theta1, self.theta2, self.theta3 = (
            theta0,
            theta1,
            theta2,
            theta3,
        )
        self.theta0_bounds, self.theta1_bounds = theta0_bounds, theta1_bounds
        self.theta2_bounds, self.theta3_bounds = theta2_bounds, theta3_bounds

    @property
    def hyperparameter_names(self):
        names = ("theta0", "theta1", "theta2", "theta3")
        return tuple(n for n in names if getattr(self, n) > 0)

    def __call__(self, X, Y=None):
        K = self.theta0 * np.exp(-0.5 * self.theta1 * squared_distances(X, Y))
        K += self.theta2
        if self.theta3:
            K += self.theta3 * _inner(X, Y)
        return K

    def diag(self, X):
        return self.theta0 + self.theta2 + self.theta3 * _row_norms_sq(X)

    def _gradient_terms(self, X):
        D2 = squared_distances(X)
        E = np.exp(-0.5 * self.theta1 * D2)
        terms = {
            "theta0": lambda: self.theta0 * E,
            "theta1": lambda: -0.5 * self.theta1 * D2 * self.theta0 * E,
            "theta2": lambda: np.full_like(D2, self.theta2),
            "theta3": lambda: self.theta3 * _inner(X),
        }
        for name, _ in self.hyperparameters:
            yield terms[name]()


class Bilinear(Kernel):
    """k(x, x′) = xᵀAx′ (label ``kernel-bilinear``): a valid kernel when A is
    symmetric positive semi-definite."""

    param_constraints = {"A": "finite"}
    array_params = ("A",)

    def __init__(self, A):
        self.A = A

    def __call__(self, X, Y=None):
        X = as_2d(X)
        Y = X if Y is None else as_2d(Y, "Y")
        return X @ np.asarray(self.A, dtype=float) @ Y.T

    def diag(self, X):
        X = as_2d(X)
        return np.einsum("ij,jk,ik->i", X, np.asarray(self.A, dtype=float), X)
