"""The softmax RVC's Gaussian approximation on the cluster, in one streamed pass.

The reference runs the fast algorithm for the softmax model on Φ ⊗ I_K and its
whitened form R(Φ ⊗ I_K)diag(1/c) as structured designs
(``kernelref.rvm.softmax_design``, label ``rvc-softmax-structured``): every
product is a sum over the N points, one left product of Φ with an rK × N matrix,
and the column norms are the K sums c²_mk = Σ_n φ_m(x_n)² (B_n)_kk. With the
backend's ``StreamedDesign`` as Φ, each of these is one streamed pass over the
kernel, and the classes of a point never leave the client.

A new approximation would cost three passes taken one by one: the norms, Φ̃ᵀt̃
(which the sequential algorithm asks for first), and the coordinates UᵀΦ̃ of the
model it warm-starts from. `streamed_softmax_approximation` forms all three in
one (``StreamedDesign.norms_and_product``), as ``StreamedDesign.reweighted``
does for the binary model, and `StreamedWhitenedKronecker` hands the last two to
the loop when it asks. An addition's new coordinate row comes from the row
φ̃_jᵀΦ̃ of the whitened design's Gram matrix (``gram_row``), formed as the
streamed design forms its own: in one pass with the rows of the columns the
algorithm ranks next (``expect``), which later additions in the same
approximation then find kept.
"""

import numpy as np

from backends.dask.rvm.design import (
    PREFETCH,
    ROW_GROUP,
    ROWS_MB,
    _key,
    batch_size,
    forget,
)
from kernelref.rvm.coordinates import orthonormal_basis
from kernelref.rvm.softmax_design import WhitenedKronecker

__all__ = ["StreamedWhitenedKronecker", "streamed_softmax_approximation"]


class StreamedWhitenedKronecker(WhitenedKronecker):
    """R(Φ ⊗ I_K)diag(1/c) on a streamed Φ, with Φ̃ᵀt̃, the warm start's
    coordinates and some Gram rows from the pass that found c
    (`streamed_softmax_approximation`)."""

    def __init__(self, Phi, R, scales):
        super().__init__(Phi, R, scales)
        self._t_key, self._PhiT_t, self._kept = None, None, None
        self._rows, self._expected = {}, np.empty(0, dtype=int)
        self._hits = self._extra = 0

    def expect(self, ranked):
        """The columns likely to join the model next, most likely first
        (``kernelref.rvm.fast``): the ones the next missing Gram row brings along."""
        self._expected = np.asarray(ranked, dtype=int)

    def gram_row(self, j):
        """φ̃_jᵀΦ̃, from memory or by one pass that also forms the rows of
        expected columns not yet kept: about ``PREFETCH`` rows of the product
        with Φ in all (K per column; ``design.batch_size``)."""
        counts = self.Phi.counts
        counts["row_additions"] += 1
        if j in self._rows:
            self._hits += 1
            return self._rows[j]
        size = max(batch_size(PREFETCH, self._hits, self._extra) // self.K, 1)
        others = [int(k) for k in self._expected if k != j and k not in self._rows]
        batch = [j, *others[: size - 1]]
        self._keep_rows(batch, _turned_columns(self.Phi, self.R, batch) @ self.Phi)
        self._extra += len(batch) - 1
        return self._rows[j]

    def _keep_rows(self, batch, product):
        """Keep the Gram rows of the columns ``batch`` from the product of their
        `_turned_columns` with Φ (row s·K + k of column s)."""
        K = self.K
        forget(self._rows, len(batch), ROWS_MB, self.shape[1], PREFETCH)
        for s, k in enumerate(batch):
            row = product[s * K : (s + 1) * K].T.ravel()
            self._rows[k] = row * self.inverse_scales[k] * self.inverse_scales
        self.Phi.counts["gram_rows"] += len(batch)

    def __rmatmul__(self, V):
        """V @ Φ̃ (`WhitenedKronecker`), t̃ @ Φ̃ from memory."""
        V = np.asarray(V, dtype=float)
        if V.ndim == 1 and self._PhiT_t is not None and _key(V) == self._t_key:
            return self._PhiT_t.copy()
        return super().__rmatmul__(V)

    def coordinates(self, active):
        """(U, Ψ) of the model with the columns ``active`` if the pass formed
        them for exactly those columns, else None
        (``kernelref.rvm.coordinates.orthonormal_coordinates``)."""
        kept = self._kept
        if kept is None or not np.array_equal(kept[0], np.sort(active)):
            return None
        return kept[1].copy(), kept[2].copy()


def _turned_columns(Phi, R, batch):
    """For each column (m, k) of ``batch``, the K rows (R_nᵀ φ_m(x_n)R_n e_k)_j,
    n = 1..N: the column of R(Φ ⊗ I_K) before its scaling, turned for a left
    product with Φ (``rvc-softmax-structured``); zeros after them to whole
    groups of ``ROW_GROUP``. Each column is formed and turned alone and the
    groups are whole, so a Gram row's digits do not depend on which others
    shared its pass (a resumed fit forms other batches; as
    ``StreamedDesign.gram_row``)."""
    N, K = R.shape[:2]
    V = np.zeros((-(-len(batch) * K // ROW_GROUP) * ROW_GROUP, N))
    for s, j in enumerate(batch):
        m, k = divmod(int(j), K)
        column = Phi[:, m][:, None] * R[:, :, k]  # φ_m(x_n)R_n e_k
        V[s * K : (s + 1) * K] = np.einsum("nj,njk->kn", column, R)
    return V


def streamed_softmax_approximation(Phi, a, t, likelihood, active=None):
    """The Gaussian approximation at the activations a for the softmax model's
    ``KroneckerDesign`` Φ on a ``StreamedDesign``: the whitened design on unit
    columns, its norms c and t̃ (labels ``rvc-linearised-target``,
    ``rvc-softmax-structured``; ``KroneckerDesign.whitened`` in memory), from
    one pass that also forms Φ̃ᵀt̃ and the coordinates of the model with the
    columns ``active``."""
    base = Phi.Phi
    R, t_tilde = likelihood.whitening(a, t)
    d = np.einsum("njk,njk->nk", R, R)  # (B_n)_kk
    index = np.sort(np.asarray([] if active is None else active, dtype=int))
    U = _basis(base, R, index)
    V = np.vstack([t_tilde, U.T])  # (r, NK)
    N, K = R.shape[:2]
    turned = np.einsum("rnj,njk->rnk", V.reshape(-1, N, K), R)  # R_nᵀv_n
    squares, products = base.norms_and_product(
        d, turned.transpose(0, 2, 1).reshape(-1, N)
    )
    scales = np.sqrt(squares).ravel()  # c_mk, row-major
    unit = StreamedWhitenedKronecker(base, R, scales)
    M = base.shape[1]
    # row s·K + k holds Σ_n φ_m(x_n)(R_nᵀv_sn)_k; on unit columns
    PhiT_V = products.reshape(-1, K, M).transpose(0, 2, 1)
    PhiT_V = PhiT_V.reshape(-1, M * K) * unit.inverse_scales
    unit._t_key, unit._PhiT_t = _key(t_tilde), PhiT_V[0]
    if len(index):
        unit._kept = (index, U, PhiT_V[1:])
    return unit, scales, t_tilde


def _basis(Phi, R, index):
    """An orthonormal basis (NK × m) of the span of the whitened columns
    ``index``: their QR after scaling by norms computed here (the pass computes
    c, which only scales them)."""
    if not len(index):
        return np.zeros((R.shape[0] * R.shape[1], 0))
    unscaled = WhitenedKronecker(Phi, R, np.ones(Phi.shape[1] * R.shape[1]))
    A = unscaled[:, index]
    norms = np.linalg.norm(A, axis=0)
    return orthonormal_basis(A / np.where(norms > 0, norms, 1.0))
