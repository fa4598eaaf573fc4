"""The softmax classifier's designs for the fast algorithm, without their zeros.

The softmax model's design Φ ⊗ I_K (``kernelref.rvm.softmax``) is NK × MK with one
nonzero in each of its rows' K-blocks, and its whitened form R(Φ ⊗ I_K), R
block diagonal with one K×K block R_n per point, is dense but still made of Φ and
the N blocks R_n: column (m, k) of it is, at the rows (n, j) of point n,

    φ_m(x_n) R_n[j, k],

so with d_nk = Σ_j R_n[j, k]² = (B_n)_kk its squared norm and a left product are

    c²_mk = Σ_n φ_m(x_n)² d_nk,
    (vᵀR(Φ ⊗ I_K))_mk = Σ_n φ_m(x_n) (R_nᵀv_n)_k     (``rvc-softmax-structured``),

sums over the N points, not the NK rows: a product costs O(NMK + NK²) instead of
O(NMK²), and neither matrix is stored (at N = 400, K = 10, the whitened design
alone is 128 MB). The fast algorithm uses a design only through its shape, its
columns and left products (``kernelref.rvm.fast.FastLoop``), so it runs on these
objects unchanged, as it does on the Dask backend's streamed design.

Φ itself is used the same way: its shape, its columns Φ[:, index], left products
V @ Φ and the K sums c²_·k above (`weighted_square_norms`). So Φ can be an array or
any design offering these (the Dask backend's streamed kernel design, whose
columns are never all in one place), and the softmax classifier runs on it as
the binary one does.
"""

import numpy as np

__all__ = [
    "GROWTH_FACTOR",
    "GROWTH_MIN",
    "KroneckerDesign",
    "WhitenedKronecker",
    "weighted_square_norms",
]

#: Each Gaussian approximation of the softmax model's fast path may end with at
#: most GROWTH_FACTOR times the weights it started with, or GROWTH_MIN weights
#: if that is more (`KroneckerDesign.growth_budget`). Without a bound, on digits
#: (10 classes, N = 700) the first approximation after the re-estimated start grew
#: the model from 50 weights to 915 and the next one deleted 889 of them, one at a
#: time: 150 of the fit's 187 s, at O(Pm) per step and an O(NKm²) Newton mode at
#: m ≈ 900, for a model of 38 weights in the end (``benchmarks/bench_rvc_softmax``).
#: With this bound (shared machine, CPU seconds): 73.0 -> 16.1 s, log evidence
#: -83.87 -> -83.72, loop iterations 5626 -> 2731. Tighter bounds (2× or 100–200
#: weights at least) ended 1–4 nats lower on most of eight digits subsets (N =
#: 300–700; the overshoot explores); at 400, on the five measured, equal on two,
#: +1.30 and +0.15 on two, −0.13 nats on one. The 12 softmax rows of
#: ``benchmarks/bench_rvc`` (P < 400) never reach it: the same paths bit for bit.
GROWTH_FACTOR = 2
GROWTH_MIN = 400


def weighted_square_norms(Phi, d):
    """Σ_n Φ[n, m]² d_nk for every column m of Φ and each of the K columns of the
    N × K array d: an M × K array (the c²_mk of ``rvc-softmax-structured`` for
    d_nk = (B_n)_kk). A design that sums them itself (``Phi.weighted_square_norms``:
    the Dask backend's, in one streamed pass) answers instead."""
    own = getattr(Phi, "weighted_square_norms", None)
    if own is not None:
        return own(d)
    return np.square(Phi).T @ d


def _base_columns(Phi, m):
    """Φ[:, m] for indices m that may repeat (the K weights of one basis
    function): each distinct column asked of Φ once."""
    distinct, where = np.unique(m, return_inverse=True)
    return Phi[:, distinct][:, where]


def _column_index(key, shape):
    """The column indices of ``Phi[:, index]`` or ``Phi[:, j]`` (then a scalar)."""
    rows, index = key
    if rows != slice(None):
        raise IndexError("a structured design gives whole columns only: Phi[:, j]")
    return np.arange(shape[1])[index]


class KroneckerDesign:
    """Φ ⊗ I_K (``softmax.expanded_design``), never formed: its shape, columns and
    left products. Row n·K + j, column m·K + k holds φ_m(x_n) if j = k, else 0."""

    __array_ufunc__ = None  # so that v @ design calls __rmatmul__

    def __init__(self, Phi, K):
        self.Phi, self.K = Phi, K
        self.shape = (Phi.shape[0] * K, Phi.shape[1] * K)

    def __getitem__(self, key):
        index = _column_index(key, self.shape)
        m, k = np.divmod(np.atleast_1d(index), self.K)
        out = np.zeros((self.Phi.shape[0], self.K, len(m)))
        out[:, k, np.arange(len(m))] = _base_columns(self.Phi, m)
        out = out.reshape(self.shape[0], len(m))
        return out[:, 0] if np.ndim(index) == 0 else out

    def __rmatmul__(self, V):
        """V(Φ ⊗ I_K) for V of shape (NK,) or (r, NK): entry (m, k) is
        Σ_n φ_m(x_n)v_nk."""
        return _left_product(self.Phi, np.asarray(V, dtype=float), self.K)

    def growth_budget(self, m):
        """The most weights a Gaussian approximation that starts with m may end
        with (``kernelref.rvm.rvc_fast.fast_path`` asks): `GROWTH_FACTOR`·m, at
        least `GROWTH_MIN`. The approximation is made at the current mode; a model
        it grows far beyond that is refitted, and mostly deleted, at the next."""
        return max(GROWTH_FACTOR * m, GROWTH_MIN)

    def whitened(self, a, t, likelihood):
        """The Gaussian approximation at the activations a: the whitened design on
        unit columns (`WhitenedKronecker`), its column norms c and t̃ (label
        ``rvc-linearised-target``), as ``rvc_fast.dense_approximation`` returns
        them for a dense design."""
        R, t_tilde = likelihood.whitening(a, t)
        d = np.einsum("njk,njk->nk", R, R)  # (B_n)_kk
        scales = np.sqrt(weighted_square_norms(self.Phi, d)).ravel()  # c_mk
        return WhitenedKronecker(self.Phi, R, scales), scales, t_tilde


class WhitenedKronecker:
    """R(Φ ⊗ I_K)diag(1/c) (label ``rvc-softmax-structured``), never formed: the
    whitened softmax design on unit columns (zero columns, c = 0, stay zero, as
    ``kernelref.rvm.fast.unit_columns`` leaves them)."""

    __array_ufunc__ = None  # so that v @ design calls __rmatmul__

    def __init__(self, Phi, R, scales):
        self.Phi, self.R, self.K = Phi, R, R.shape[1]
        self.shape = (Phi.shape[0] * self.K, Phi.shape[1] * self.K)
        self.inverse_scales = 1.0 / np.where(scales > 0, scales, 1.0)

    def __getitem__(self, key):
        index = _column_index(key, self.shape)
        m, k = np.divmod(np.atleast_1d(index), self.K)
        # rows (n, j): φ_m(x_n) R_n[j, k] / c_mk
        out = _base_columns(self.Phi, m)[:, None, :] * self.R[:, :, k]
        out *= self.inverse_scales[np.atleast_1d(index)]
        out = out.reshape(self.shape[0], len(m))
        return out[:, 0] if np.ndim(index) == 0 else out

    def __rmatmul__(self, V):
        """V R(Φ ⊗ I_K)diag(1/c) for V of shape (NK,) or (r, NK)
        (``rvc-softmax-structured``): each v_n turned by R_nᵀ, then summed over
        the points with Φ."""
        V = np.asarray(V, dtype=float)
        N = self.Phi.shape[0]
        turned = np.einsum("rnj,njk->rnk", V.reshape(-1, N, self.K), self.R)
        out = _left_product(self.Phi, turned.reshape(V.shape), self.K)
        out *= self.inverse_scales
        return out


def _left_product(Phi, V, K):
    """V(Φ ⊗ I_K) for V of shape (NK,) or (r, NK): one product with Φ, of the
    N × rK matrix whose column (s, k) holds v_snk (a left product, for a design
    that is not an array)."""
    N, M = Phi.shape
    W = V.reshape(-1, N, K)  # (r, N, K)
    r = len(W)
    stacked = W.transpose(1, 0, 2).reshape(N, r * K)
    if isinstance(Phi, np.ndarray):
        out = Phi.T @ stacked  # (M, r·K)
    else:
        out = (stacked.T @ Phi).T
    out = out.reshape(M, r, K).transpose(1, 0, 2).reshape(r, M * K)
    return out[0] if V.ndim == 1 else out
