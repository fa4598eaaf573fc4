"""Worker-side tile algebra of the exact Gaussian-process fits.

Every quantity of the exact GP (regression and Laplace classification) is
computed from one lower Cholesky factor L, of K + σ²I or of
B = I + W^½KW^½, held tile by tile in a Zarr array (``backends.dask.linalg``).
The kernel tiles are never stored: ``KernelTiles`` computes tile (i, j) on the
worker from the chunks i and j of the training inputs in the fit store
(``backends.dask.runtime.read_chunk``), so the factorisation reads the data,
not an N × N Gram matrix.

Three tasks follow the factor:

- ``gradient_column`` forms column block c of the inverse P = (L Lᵀ)⁻¹ by
  forward and back substitution on the identity's block c (rows i ≥ c only, by
  symmetry) and contracts each tile of Σ = ½ sym(F Gᵀ) − s·D P D with the
  tile of ∂K/∂log θ (labels ``gp-lml-grad``, ``gpc-evidence-gradient``). The
  N × N inverse and the N × N × p gradient array are never formed.
- ``forward_norms`` solves L V = R for row tiles R_i of a right-hand side and
  returns the column sums of V∘V (or VᵀV) and Rᵀα: the predictive variance and
  mean (labels ``gp-predictive-mean``, ``gp-predictive-var``, ``gpc-predictive``).
- ``kernel_times`` is one row chunk of the streamed product K v.
"""

from dataclasses import dataclass

import numpy as np
import scipy.sparse
from scipy.linalg import solve_triangular

from backends.dask.blocks import block_slice, n_blocks
from backends.dask.linalg import give_buffer, leading, read_tile, take_buffer
from backends.dask.runtime import read_chunk

__all__ = [
    "CrossRhs",
    "KernelTiles",
    "cross_gradient_dot",
    "cross_mean",
    "forward_norms",
    "gradient_column",
    "kernel_times",
    "tile_gradient_dot",
]


@dataclass(frozen=True)
class KernelTiles:
    """The tiles of D (K + jI) D + λI's matrix part D (K + jI) D, computed on a worker.

    ``kernel`` is the kernel, ``x_ref`` the ``ChunkRef`` of the training inputs,
    ``jitter`` j is added to K's diagonal and ``scale`` is the diagonal of D
    (``None``: D = I). A diagonal tile is ``kernel(X_i)``, as the reference
    evaluates the whole Gram matrix with Y omitted (a White kernel adds its noise
    there only). Quacks like a square-chunked Zarr array for ``linalg``.
    """

    kernel: object
    x_ref: object
    jitter: float = 0.0
    scale: object = None

    @property
    def shape(self):
        return (self.x_ref.n, self.x_ref.n)

    @property
    def chunks(self):
        return (self.x_ref.chunk_size, self.x_ref.chunk_size)

    def raw(self, i, j):
        """K_ij + j·I (if i = j), unscaled."""
        X_i = read_chunk(self.x_ref, i)
        if i == j:
            K = np.array(self.kernel(X_i), dtype=np.float64)
            K.flat[:: len(K) + 1] += self.jitter
            return K
        return np.asarray(self.kernel(X_i, read_chunk(self.x_ref, j)), dtype=np.float64)

    def tile(self, i, j):
        K = self.raw(i, j)
        if self.scale is not None:
            K *= self.scale[self.x_ref.rows(i), None]
            K *= self.scale[None, self.x_ref.rows(j)]
        return K


@dataclass(frozen=True)
class CrossRhs:
    """Row tiles R_i = D_i k(X_i, Y) of a right-hand side, for test inputs Y."""

    kernel: object
    x_ref: object
    Y: np.ndarray
    scale: object = None

    def raw(self, i):
        return np.asarray(
            self.kernel(read_chunk(self.x_ref, i), self.Y), dtype=np.float64
        )

    def scaled(self, i, raw):
        return raw if self.scale is None else raw * self.scale[self.x_ref.rows(i), None]


@dataclass(frozen=True)
class ColumnRhs:
    """Row tiles R_i = D_i K_ic of column block c of the training Gram matrix."""

    tiles: KernelTiles
    c: int

    def raw(self, i):
        return self.tiles.raw(i, self.c)

    def scaled(self, i, raw):
        s = self.tiles.scale
        return raw if s is None else raw * s[self.tiles.x_ref.rows(i), None]


def cross_gradient_dot(kernel, X, Y, W):
    """Σ_ab W_ab ∂k(X, Y)_ab/∂log θ on a rectangular tile, in ``theta``'s order, for
    kernels built of ``Scaled``, ``Sum``, ``RBF``, ``White`` and ``Constant``;
    None for any other kernel (the caller then stacks the inputs).

    ∂(c·k₁)/∂log c = c·k₁, ∂ exp(−γd²)/∂log γ = −γd² exp(−γd²); White is zero
    between different points and Constant's derivative is its value.
    """
    name, module = type(kernel).__name__, type(kernel).__module__
    if module == "kernelref.kernels.compose" and name == "Scaled":
        inner = cross_gradient_dot(kernel.kernel, X, Y, W)
        if inner is None:
            return None
        own = [kernel.scale * np.vdot(W, kernel.kernel(X, Y))] if kernel._own() else []
        return np.concatenate([own, kernel.scale * inner])
    if module == "kernelref.kernels.compose" and name == "Sum":
        parts = [cross_gradient_dot(k, X, Y, W) for k in (kernel.k1, kernel.k2)]
        return None if any(p is None for p in parts) else np.concatenate(parts)
    if module == "kernelref.kernels.compose" and name == "Constant":
        return (
            np.array([float(kernel.value) * W.sum()]) if kernel._own() else np.empty(0)
        )
    if module == "kernelref.kernels.noise" and name == "White":
        return np.zeros(1) if kernel._own() else np.empty(0)
    if module == "kernelref.kernels.vector" and name == "RBF":
        if not kernel._own():
            return np.empty(0)
        G = kernel.log_kernel(X, Y)  # −γd²
        E = np.exp(G)
        G *= E
        return np.array([np.vdot(W, G)])
    return None


def tile_gradient_dot(kernel, X_i, X_j, W_ij, same):
    """Σ_ab W_ab ∂K_ab/∂log θ over tile (i, j) and, off the diagonal, its mirror (j, i).

    ``gradient_dot`` contracts a square Gram matrix; an off-diagonal tile is the
    corner of the Gram matrix of the stacked inputs [X_i; X_j], contracted with
    [[0, W], [Wᵀ, 0]], which counts the tile and its transpose: 2 Σ W ∘ ∂K_ij.
    """
    if same:
        return np.asarray(kernel.gradient_dot(X_i, W_ij), dtype=np.float64)
    direct = cross_gradient_dot(kernel, X_i, X_j, W_ij)
    if direct is not None:
        return 2.0 * np.asarray(direct, dtype=np.float64)
    m = X_i.shape[0]
    if scipy.sparse.issparse(X_i):
        Z = scipy.sparse.vstack([X_i, X_j], format="csr")
    else:
        Z = np.concatenate([X_i, X_j], axis=0)
    W = np.zeros((Z.shape[0], Z.shape[0]))
    W[:m, m:] = W_ij
    W[m:, :m] = W_ij.T
    return np.asarray(kernel.gradient_dot(Z, W), dtype=np.float64)


def inverse_column(L, c, buffers=None):
    """Rows i ≥ c of column block c of P = (L Lᵀ)⁻¹, as a list of tiles from c on.

    With a list ``buffers``, the tiles are held in reused buffers, appended to
    it for the caller to give back (``give_buffer``) when done with the tiles.

    Forward: L Z = E_c (Z_i = 0 for i < c, as L is lower); back: Lᵀ P = Z,
    from the last block row up to row c. About (T − c)² tile products, each
    tile read into one reused buffer and each product formed in another.
    """
    n, b = L.shape[0], L.chunks[0]
    T = n_blocks(n, b)
    size = [block_slice(i, n, b).stop - i * b for i in range(T)]
    product = take_buffer((b, b))
    Z = {}

    def subtract(rhs, i, j, transpose):
        """rhs −= L_ij Z_j, or L_jiᵀ Z_j when ``transpose``."""
        tile, buffer = read_tile(L, j, i, b) if transpose else read_tile(L, i, j, b)
        rhs -= np.matmul(
            tile.T if transpose else tile, Z[j], out=leading(product, rhs.shape)
        )
        give_buffer(buffer)

    def solve_diagonal(i, rhs, trans):
        tile, buffer = read_tile(L, i, i, b)
        Z[i] = solve_triangular(
            tile, rhs, lower=True, trans=trans, check_finite=False, overwrite_b=True
        )
        give_buffer(buffer)

    for i in range(c, T):
        if buffers is None:
            rhs = np.zeros((size[i], size[c]))
        else:  # Fortran order, so that the triangular solves work in place
            buffers.append(take_buffer((b, b)))
            rhs = leading(buffers[-1], (size[c], size[i])).T
            rhs.fill(0.0)
        if i == c:
            rhs[np.diag_indices(size[c])] = 1.0
        for j in range(c, i):
            subtract(rhs, i, j, False)
        solve_diagonal(i, rhs, 0)
    for i in reversed(range(c, T)):
        rhs = Z[i]
        for j in range(i + 1, T):
            subtract(rhs, i, j, True)
        solve_diagonal(i, rhs, 1)
    give_buffer(product)
    return [Z[i] for i in range(c, T)]


def gradient_column(L, kernel, x_ref, c, F, G, s, D):
    """Σ over tiles (i, c), i ≥ c, of the contraction of Σ_ic with ∂K_ic (and mirror).

    Σ = ½ (F Gᵀ + G Fᵀ) − s · D P D with P = (L Lᵀ)⁻¹ and D = diag(``D``) (None:
    D = I). Regression: F = α, G = ½α, s = ½·targets; classification:
    F = [a, u], G = [½a, ∇log p], s = ½, D = W^½.
    """
    buffers = []
    P = inverse_column(L, c, buffers)
    X_c = read_chunk(x_ref, c)
    rows_c = x_ref.rows(c)
    outer = take_buffer((x_ref.chunk_size, x_ref.chunk_size))
    total = 0.0
    for offset in range(len(P)):
        i = c + offset
        rows_i = x_ref.rows(i)
        W, P[offset] = P[offset], None  # Σ_ic is formed in P_ic's memory
        if D is not None:
            W *= D[rows_i, None]
            W *= D[None, rows_c]
        W *= -s
        term = leading(outer, W.shape)
        W += np.matmul(0.5 * F[rows_i], G[rows_c].T, out=term)
        W += np.matmul(0.5 * G[rows_i], F[rows_c].T, out=term)
        total = total + tile_gradient_dot(kernel, read_chunk(x_ref, i), X_c, W, i == c)
    give_buffer(outer, *buffers)
    return total


def cross_mean(rhs, alpha):
    """Σ_i raw(R_i)ᵀ α_i, the mean ``forward_norms`` returns (same order of sums,
    so the same digits), without reading the factor."""
    ref, mean = rhs.x_ref, None
    for i in range(ref.n_chunks):
        term = rhs.raw(i).T @ alpha[ref.rows(i)]
        mean = term if mean is None else mean + term
    return mean


def forward_norms(L, rhs, alpha, full):
    """Solve L V = R tile by tile; return (Σ_i raw(R_i)ᵀ α_i, Σ_rows V∘V or VᵀV).

    ``rhs`` gives the row tiles (``CrossRhs`` or ``ColumnRhs``); ``alpha`` (N, k)
    or None. V is held only while the substitution needs it.
    """
    n, b = L.shape[0], L.chunks[0]
    T = n_blocks(n, b)
    V, mean, second = [], None, None
    for i in range(T):
        raw = rhs.raw(i)
        if alpha is not None:
            term = raw.T @ alpha[block_slice(i, n, b)]
            mean = term if mean is None else mean + term
        R = rhs.scaled(i, raw)
        for j in range(i):
            tile, buffer = read_tile(L, i, j, b)
            R -= tile @ V[j]
            give_buffer(buffer)
        tile, buffer = read_tile(L, i, i, b)
        V.append(solve_triangular(tile, R, lower=True, check_finite=False))
        give_buffer(buffer)
        part = V[i].T @ V[i] if full else np.einsum("ij,ij->j", V[i], V[i])
        second = part if second is None else second + part
    return mean, second


def kernel_times(x_ref, i, tiles, v):
    """Row chunk i of K v, the kernel tiles computed on the worker (no Gram stored)."""
    out = 0.0
    for j in range(x_ref.n_chunks):
        out = out + tiles.raw(i, j) @ v[x_ref.rows(j)]
    return out
