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
"""

import numpy as np

__all__ = ["KroneckerDesign", "WhitenedKronecker"]


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
        out[:, k, np.arange(len(m))] = self.Phi[:, m]
        out = out.reshape(self.shape[0], len(m))
        return out[:, 0] if np.ndim(index) == 0 else out

    def __rmatmul__(self, V):
        """V(Φ ⊗ I_K) for V of shape (NK,) or (r, NK): entry (m, k) is
        Σ_n φ_m(x_n)v_nk."""
        return _left_product(self.Phi, np.asarray(V, dtype=float), self.K)

    def whitened(self, a, t, likelihood):
        """The Gaussian approximation at the activations a: the whitened design on
        unit columns (`WhitenedKronecker`), its column norms c and t̃ (label
        ``rvc-linearised-target``), as ``rvc_fast.dense_approximation`` returns
        them for a dense design."""
        R, t_tilde = likelihood.whitening(a, t)
        d = np.einsum("njk,njk->nk", R, R)  # (B_n)_kk
        scales = np.sqrt(np.square(self.Phi).T @ d).ravel()  # c_mk, row-major
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
        out = self.Phi[:, None, m] * self.R[:, :, k]
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
    N × rK matrix whose column (s, k) holds v_snk."""
    N, M = Phi.shape
    W = V.reshape(-1, N, K)  # (r, N, K)
    r = len(W)
    out = Phi.T @ W.transpose(1, 0, 2).reshape(N, r * K)  # (M, r·K)
    out = out.reshape(M, r, K).transpose(1, 0, 2).reshape(r, M * K)
    return out[0] if V.ndim == 1 else out
