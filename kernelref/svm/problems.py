"""Every SVM formulation as one quadratic program, stated as data.

Each formulation is (label ``svm-generic-qp``)

    min_α f(α) = ½ αᵀQα + pᵀα   subject to   yᵀα = Δ,  0 ≤ α_t ≤ C_t,

with Q_st = y_s y_t k(x_src(s), x_src(t)); the ν forms add eᵀα = Δ₂ (label
``svm-nu-equality``). A formulation only says what p, y, C, the start α⁰ and
src (the sample behind each variable) are — the table of libsvm's ``svm.cpp``:

    form       variables  p             y       C_t    α⁰
    C-SVC      l          −1            labels  C·w_t  0
    ν-SVC      l          0             labels  w_t    ν Σw/2 per class, greedily
    one-class  l          0             +1      w_t    ν Σw, greedily from the front
    ε-SVR      2l         ε − z, ε + z  +1, −1  C·w_t  0
    ν-SVR      2l         −z, +z        +1, −1  C·w_t  C ν Σw/2, greedily, α = α*

(w_t are the sample weights; z the regression targets). ``KernelRows`` supplies
the rows of the Gram matrix the solver asks for, computed on demand and cached.
"""

import mmap
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kernelref._validation import check_gram, check_symmetric
from kernelref.kernels import RBF, Linear, Polynomial, Sigmoid
from kernelref.kernels.vector import WIDE

__all__ = [
    "QP",
    "ROW_CACHE_BYTES",
    "KernelRows",
    "c_svc",
    "dual_objective",
    "epsilon_svr",
    "gradient",
    "nu_svc",
    "nu_svr",
    "one_class",
]

# The Gram rows are cached in float64 up to this many bytes: 4 GiB holds every row
# for N ≤ 23 170 (N = 20 000 takes 3.2 GB). Beyond it rows are recomputed on demand.
ROW_CACHE_BYTES = 4 * 2**30


@dataclass(frozen=True)
class QP:
    """The data of (svm-generic-qp): per variable p, y (±1), C and α⁰; ``src`` maps
    each variable to its sample; ``nu`` marks the forms with (svm-nu-equality)."""

    p: np.ndarray
    y: np.ndarray
    C: np.ndarray
    alpha0: np.ndarray
    src: np.ndarray
    nu: bool


def _greedy_fill(total, C):
    """α_t = min(C_t, what is left of `total`), from the first variable on."""
    alpha = np.zeros_like(C)
    left = total
    for t, c in enumerate(C):
        if left <= 0:
            break
        alpha[t] = min(c, left)
        left -= alpha[t]
    return alpha


def c_svc(y, C):
    """C-SVC (label ``svm-soft-dual``): p = −1, bounds C_t, start at 0."""
    n = len(y)
    return QP(
        p=-np.ones(n),
        y=np.asarray(y, float),
        C=np.asarray(C, float),
        alpha0=np.zeros(n),
        src=np.arange(n),
        nu=False,
    )


def nu_svc(y, nu, w):
    """ν-SVC in libsvm's scaling (label ``svm-nu-dual``): bounds w_t, Σα = ν Σw,
    half of it on each class; the solution is rescaled by 1/r afterwards."""
    y = np.asarray(y, float)
    w = np.asarray(w, float)
    half = nu * w.sum() / 2.0
    alpha0 = np.zeros(len(y))
    for cls in (1.0, -1.0):
        members = np.flatnonzero(y == cls)
        alpha0[members] = _greedy_fill(half, w[members])
    return QP(
        p=np.zeros(len(y)),
        y=y,
        C=w.copy(),
        alpha0=alpha0,
        src=np.arange(len(y)),
        nu=True,
    )


def one_class(nu, w):
    """One-class SVM (label ``svm-one-class-dual``): y = +1, bounds w_t, Σα = ν Σw."""
    w = np.asarray(w, float)
    n = len(w)
    return QP(
        p=np.zeros(n),
        y=np.ones(n),
        C=w.copy(),
        alpha0=_greedy_fill(nu * w.sum(), w),
        src=np.arange(n),
        nu=False,
    )


def epsilon_svr(z, C, epsilon):
    """ε-SVR (label ``svr-dual``): α for the upper tube edge, α* for the lower one."""
    z = np.asarray(z, float)
    C = np.asarray(C, float)
    n = len(z)
    return QP(
        p=np.concatenate([epsilon - z, epsilon + z]),
        y=np.concatenate([np.ones(n), -np.ones(n)]),
        C=np.concatenate([C, C]),
        alpha0=np.zeros(2 * n),
        src=np.concatenate([np.arange(n)] * 2),
        nu=False,
    )


def nu_svr(z, C, nu):
    """ν-SVR (label ``nu-svr-dual``): Σ(α + α*) = C ν Σw; the tube width is −r."""
    z = np.asarray(z, float)
    C = np.asarray(C, float)
    n = len(z)
    start = _greedy_fill(nu * C.sum() / 2.0, C)
    return QP(
        p=np.concatenate([-z, z]),
        y=np.concatenate([np.ones(n), -np.ones(n)]),
        C=np.concatenate([C, C]),
        alpha0=np.concatenate([start, start]),
        src=np.concatenate([np.arange(n)] * 2),
        nu=True,
    )


def gradient(qp, K, alpha):
    """G = Qα + p from the Gram matrix K of the samples (label ``svm-gradient``)."""
    coef = np.bincount(qp.src, weights=qp.y * alpha, minlength=K.shape[0])
    return qp.p + qp.y * (K @ coef)[qp.src]


def dual_objective(qp, K, alpha):
    """f(α) = ½ αᵀQα + pᵀα (svm-generic-qp), computed from scratch."""
    return float(0.5 * alpha @ (gradient(qp, K, alpha) + qp.p))


#: The row cache grows in blocks of about this size, each mapped in one call.
CACHE_BLOCK_BYTES = 64 * 2**20


def _prefaulted(shape):
    """An uninitialised float64 array whose memory is mapped in one call.

    Memory from ``np.empty`` is mapped page by page on first write, and each
    4 KiB fault is a trap: filling the row cache of a 10 000-point problem that
    way cost about 1.3 s here, more than the kernel rows themselves, while
    mapping it with MAP_POPULATE took 0.3 s. Where the flag does not exist (not
    Linux), this is ``np.empty``.
    """
    size = int(np.prod(shape)) * 8
    if size == 0 or not hasattr(mmap, "MAP_POPULATE"):
        return np.empty(shape)
    buffer = mmap.mmap(
        -1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE
    )
    return np.frombuffer(buffer, dtype=np.float64).reshape(shape)


#: A kernel from outside kernelref is checked for symmetry on this many samples.
SYMMETRY_PROBE = 32


def _probe_symmetry(kernel, X):
    """Refuse a user kernel whose Gram matrix on the first samples is not
    symmetric: SMO's steps decrease f(α) only for a symmetric Q, and with a
    non-symmetric one it can cycle for ever. kernelref's own kernels are
    symmetric by construction and are not probed."""
    if type(kernel).__module__.startswith("kernelref."):
        return
    m = min(SYMMETRY_PROBE, X.shape[0])
    head = X[:m]
    check_symmetric(
        check_gram(kernel(head), kernel, (m, m)),
        "k(X[:m], X[:m])",
        f"for the SVM, the kernel {kernel!r}",
    )


def stored_columns(X):
    """CSR X's columns as CSC, and the column of each stored entry of X in it.
    X much wider than it is full (over ``WIDE`` columns per entry) keeps only
    its stored columns, renumbered, so the CSC's column pointers are not one
    per column of X (800 MB at 10⁸ columns); rows X x_n are the same, bit for
    bit (the same entries, multiplied and added in the same order)."""
    if X.shape[1] <= WIDE * X.nnz:
        return X.tocsc(), X.indices
    columns, entry_columns = np.unique(X.indices, return_inverse=True)
    compact = sp.csr_matrix(
        (X.data, entry_columns, X.indptr), shape=(X.shape[0], len(columns))
    )
    return compact.tocsc(), entry_columns


class KernelRows:
    """Rows k(x_n, ·) of the training Gram matrix, each computed once and cached.

    ``kernel`` is a kernel object, or ``"precomputed"`` with `X` the Gram matrix.
    `X` may be ``scipy.sparse`` (for kernels that accept it): a row is then one
    sparse product X x_n, as libsvm computes on sparse data.
    SMO touches only the rows of the variables it moves, so computing rows on
    demand costs less than building the whole matrix first. Rows take the cache
    slots in the order they are first asked for, and the cache grows by blocks
    of ``CACHE_BLOCK_BYTES`` mapped at once (``_prefaulted``), so only the memory
    of rows actually used is ever mapped. When the cache holds fewer than N rows
    the oldest slot is reused.
    """

    def __init__(self, kernel, X, cache_bytes=ROW_CACHE_BYTES):
        self.kernel, self.X = kernel, X
        n = X.shape[0]
        self.n_computed = 0
        self._precomputed = isinstance(kernel, str)
        if self._precomputed:
            self.diag = np.ascontiguousarray(np.diag(X))
            return
        self.diag = check_gram(
            kernel.diag(X)[None, :], kernel, (1, n), "the Gram diagonal"
        )[0]
        _probe_symmetry(kernel, X)
        self._capacity = int(min(n, max(2, cache_bytes // (8 * n))))
        self._block_rows = max(1, CACHE_BLOCK_BYTES // (8 * n))
        self._blocks = []
        self._slot = np.full(n, -1)
        self._next_slot = 0
        self._sparse = sp.issparse(X)
        self._fast_rbf = type(kernel) is RBF
        if self._sparse:
            # Rows come from X x_n = Σ_j x_nj X[:, j] over the entries of x_n, so the
            # columns of X are kept in CSC too; no D-long vector is ever formed.
            self.X = X.tocsr()
            self._Xc, self._entry_columns = stored_columns(self.X)
            self._norms = np.asarray(
                self.X.multiply(self.X).sum(axis=1), dtype=float
            ).ravel()
        elif self._fast_rbf:
            # Centred once, so that the expansion's cancellation is relative to the
            # data's spread, not to its distance from the origin.
            self._X_centred = X - X.mean(axis=0)
            self._Xt = np.ascontiguousarray(self._X_centred.T)
            self._gamma_norms = kernel.gamma * np.einsum(
                "ij,ij->i", self._X_centred, self._X_centred
            )

    def _compute(self, n, out):
        # Overflow is not warned about: a non-finite row is refused below, by name.
        with np.errstate(over="ignore", invalid="ignore"):
            self._compute_row(n, out)
        if not np.isfinite(out).all():
            check_gram(out[None, :], self.kernel, (1, len(out)), f"row {n} of K")
        self.n_computed += 1

    def _compute_row(self, n, out):
        if self._sparse:
            self._compute_sparse(n, out)
        elif self._fast_rbf:
            # exp(−γ‖x_n − x‖²) = exp(2γ x_nᵀx − γ‖x‖² − γ‖x_n‖²), one GEMV per row.
            np.matmul(self._X_centred[n], self._Xt, out=out)
            out *= 2.0 * self.kernel.gamma
            out -= self._gamma_norms
            out -= self._gamma_norms[n]
            np.minimum(out, 0.0, out=out)
            np.exp(out, out=out)
        else:
            row = self.kernel(self.X[n : n + 1], self.X)
            out[:] = check_gram(row, self.kernel, (1, len(out)), f"row {n} of K")[0]

    def _compute_sparse(self, n, out):
        """Row n on sparse X. The kernels that accept sparse X are maps of the
        inner products g = X x_n (the Gaussian also of the squared norms), and g
        is one sparse product: the columns of X where x_n has entries."""
        k, kind = self.kernel, type(self.kernel)
        if kind not in (Linear, Polynomial, RBF, Sigmoid):
            out[:] = k(self.X[n : n + 1], self.X)[0]
            return
        start, stop = self.X.indptr[n], self.X.indptr[n + 1]
        columns = self._entry_columns[start:stop]
        out[:] = self._Xc[:, columns] @ self.X.data[start:stop]
        if kind is RBF:
            out *= 2.0
            out -= self._norms
            out -= self._norms[n]
            np.minimum(out, 0.0, out=out)
            out *= k.gamma
            np.exp(out, out=out)
        elif kind is not Linear:
            out *= k.gamma
            out += k.coef0
            if kind is Polynomial:
                out **= k.degree
            else:
                np.tanh(out, out=out)

    def _slot_row(self, slot):
        """The cache's storage for `slot`, mapping one more block when needed."""
        block, offset = divmod(slot, self._block_rows)
        while len(self._blocks) <= block:
            rows = min(
                self._block_rows, self._capacity - len(self._blocks) * self._block_rows
            )
            self._blocks.append(_prefaulted((rows, len(self.diag))))
        return self._blocks[block][offset]

    def row(self, n):
        """k(x_n, x_m) for every training sample m. Do not write to it."""
        if self._precomputed:
            return self.X[n]
        if self._slot[n] < 0:
            slot = self._next_slot
            self._next_slot = (slot + 1) % self._capacity
            if self._capacity < len(self._slot):
                self._slot[self._slot == slot] = -1
            self._compute(n, self._slot_row(slot))
            self._slot[n] = slot
        stored = self._slot_row(self._slot[n])
        # With a full-size cache a row is never overwritten; otherwise the slot may
        # be reused by the next row requested, so hand out a copy.
        return stored if self._capacity == len(self._slot) else stored.copy()

    def weighted_sum(self, coef):
        """Σ_n coef_n k(x_n, ·) over the nonzero coef_n: K @ coef, row by row."""
        out = np.zeros(self.X.shape[0])
        for n in np.flatnonzero(coef):
            out += coef[n] * self.row(n)
        return out
