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
the loop when it asks.
"""

import numpy as np

from backends.dask.rvm.design import _key
from kernelref.rvm.coordinates import orthonormal_basis
from kernelref.rvm.softmax_design import WhitenedKronecker

__all__ = ["StreamedWhitenedKronecker", "streamed_softmax_approximation"]


class StreamedWhitenedKronecker(WhitenedKronecker):
    """R(Φ ⊗ I_K)diag(1/c) on a streamed Φ, with Φ̃ᵀt̃ and the warm start's
    coordinates from the pass that found c (`streamed_softmax_approximation`)."""

    def __init__(self, Phi, R, scales, t_tilde, kept):
        super().__init__(Phi, R, scales)
        self._t_key, self._PhiT_t = _key(t_tilde), None
        self._kept = kept

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


def streamed_softmax_approximation(Phi, a, t, likelihood, active=None):
    """The Gaussian approximation at the activations a for the softmax model's
    ``KroneckerDesign`` Φ on a ``StreamedDesign``: the whitened design on unit
    columns, its norms c and t̃ (labels ``rvc-linearised-target``,
    ``rvc-softmax-structured``; ``KroneckerDesign.whitened`` in memory), from
    one pass that also forms Φ̃ᵀt̃ and the coordinates of the model with the
    columns ``active``."""
    R, t_tilde = likelihood.whitening(a, t)
    d = np.einsum("njk,njk->nk", R, R)  # (B_n)_kk
    index = np.sort(np.asarray([] if active is None else active, dtype=int))
    U = _basis(Phi.Phi, R, index)
    V = np.vstack([t_tilde, U.T])  # (r, NK)
    N, K = R.shape[:2]
    turned = np.einsum("rnj,njk->rnk", V.reshape(-1, N, K), R)  # R_nᵀv_n
    squares, products = Phi.Phi.norms_and_product(
        d, turned.transpose(0, 2, 1).reshape(-1, N)
    )
    scales = np.sqrt(squares).ravel()  # c_mk, row-major
    M = Phi.Phi.shape[1]
    # products: row s·K + k holds Σ_n φ_m(x_n)(R_nᵀv_sn)_k; on unit columns
    products = products.reshape(-1, K, M).transpose(0, 2, 1).reshape(-1, M * K)
    unit = StreamedWhitenedKronecker(Phi.Phi, R, scales, t_tilde, None)
    products *= unit.inverse_scales
    unit._PhiT_t = products[0]
    if len(index):
        unit._kept = (index, U, products[1:])
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
