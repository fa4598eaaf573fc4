"""``RVC`` on a Dask cluster: binary and one-vs-rest, the reference's classifier.

The reference's fast classifier (``kernelref.rvm.rvc_fast.fast_classifier``)
alternates two steps: the Gaussian approximation of the likelihood at the
current mode, Φ̃ = B^½Φ and t̃ (label ``rvc-linearised-target``), on which the
sequential algorithm runs with β = 1; and the mode itself, by Newton's method
over the m basis functions in the model (label ``rvc-irls``). Here:

- Φ is a ``StreamedDesign``; each approximation is the same design with row
  weights B^½ (`ApproximatedDesign.approximation`: one pass for both its
  column norms and Φ̃ᵀt̃, which the sequential algorithm asks for first), so
  Φ̃ is never formed either;
- the Newton iterations need only the model's m columns, N × m on the client;
- each approximation's ``FastLoop`` runs through the shared runtime under its
  own checkpoint, so an interrupted fit resumes where it stopped.

The softmax classifier couples the classes of each point (its whitening is
K × K per point, not a row weight) and stays in ``kernelref.rvm.RVC``.
"""

import copy
import hashlib

import numpy as np

from backends.dask.rvm.common import check_backend_args, open_store
from backends.dask.rvm.design import StreamedDesign
from backends.dask.rvm.loop import checkpointed_driver
from backends.dask.rvm.tasks import (
    ROW_GROUP,
    STRIP,
    _pieces,
    _square_buffer,
    clear_cache,
)
from backends.dask.svm.estimators import centring_shift, materialise
from kernelref.rvm import RVC as ReferenceRVC
from kernelref.rvm.classification import BERNOULLI
from kernelref.rvm.design import check_kernel_columns
from kernelref.rvm.fast import ALIGNMENT_MAX
from kernelref.rvm.regression import ALPHA_MAX

__all__ = [
    "ApproximatedDesign",
    "RVC",
    "norms_and_product_chunk",
    "streamed_approximation",
]


def norms_and_product_chunk(ref, span, kernel, shift, w2, W, cache_mb=0):
    """Worker task: ``tasks.squared_norms_chunk`` (row 0) and
    ``tasks.left_product_chunk`` of W (the rows after) for the same candidates,
    in one visit of their kernel block: each piece is formed or read once, and
    meets the same products in the same order as in the two tasks apart."""
    out = np.zeros((1 + len(W), span[1] - span[0]))
    norms, products = out[0], out[1:]
    square = _square_buffer()
    product = np.empty((ROW_GROUP, STRIP))
    groups = [slice(g, min(g + ROW_GROUP, len(W))) for g in range(0, len(W), ROW_GROUP)]
    for columns, rows, piece in _pieces(ref, span, kernel, shift, cache_mb):
        squared = np.square(piece, out=square[: piece.size].reshape(piece.shape))
        norms[columns] += w2[rows] @ squared
        for group in groups:
            part = product[: group.stop - group.start, : piece.shape[1]]
            np.matmul(W[group, rows], piece, out=part)
            products[group, columns] += part
    return out


class ApproximatedDesign(StreamedDesign):
    """The classifier's ``StreamedDesign``: `approximation` gives Φ̃ = B^½Φ on
    unit columns in one pass instead of two (norms, then Φ̃ᵀt̃)."""

    def approximation(self, weights, t_tilde):
        """diag(b)Φ on unit columns for the row weights b, its Φ̃ᵀt̃ kept as
        ``v @ design`` would give it (`StreamedDesign.__rmatmul__`): the norms
        c and the product with b∘t̃ from one pass (`norms_and_product_chunk`)."""
        other = copy.copy(self)
        other.weights = np.asarray(weights, dtype=float)
        other._seen, other._rows = {}, {}
        other._hits = other._extra = 0
        v = np.asarray(t_tilde, dtype=float)
        W = np.atleast_2d(v) * other.weights
        w2 = other.weights**2
        both = other._round(norms_and_product_chunk, other.shift, w2, W, other.cache_mb)
        kernel_part = np.sqrt(both[0])
        check_kernel_columns(kernel_part)
        bias = [np.sqrt(w2.sum())] if other.bias else []
        other.scales = np.concatenate([bias, kernel_part])
        other._inverse = np.where(
            other.scales > 0, 1 / np.maximum(other.scales, 1e-300), 0
        )
        product = np.empty(other.shape[1])
        if other.bias:
            product[0] = W.sum(axis=1)[0]
        product[other.offset :] = both[1]
        product *= other._inverse
        other._seen[hashlib.sha256(v.tobytes()).hexdigest()] = product
        return other


def streamed_approximation(Phi, a, t, likelihood=BERNOULLI):
    """The Gaussian approximation at the latent values a as a reweighted
    ``StreamedDesign`` on unit columns, its norms, and t̃ (labels
    ``rvc-linearised-target``; ``rvc_fast.dense_approximation`` in memory)."""
    B_sqrt, t_tilde = likelihood.row_weights(a, t)
    unit = Phi.approximation(B_sqrt, t_tilde)
    return unit, unit.scales, t_tilde


class RVC(ReferenceRVC):
    """Relevance vector classification by the fast algorithm on a Dask cluster.

    Parameters
    ----------
    kernel, gamma, degree, coef0, bias, max_iter, tol, alignment_max
        As in ``kernelref.rvm.RVC``; ``method`` must be 'fast'.
    multi_class : {'ovr'}
        One binary machine per class; 'softmax' is refused (see the module).
    store, chunk_size, address, progress, resume, cache_size
        As in ``backends.dask.RVR``; the progress records come per iteration
        of each approximation's sequential algorithm.
    """

    def __init__(
        self,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        bias=True,
        method="fast",
        multi_class="ovr",
        max_iter=10000,
        tol=1e-3,
        alpha_max=ALPHA_MAX,
        alignment_max=ALIGNMENT_MAX,
        store=None,
        chunk_size=4096,
        address=None,
        progress=None,
        resume=True,
        cache_size=1024,
    ):
        super().__init__(
            kernel=kernel,
            gamma=gamma,
            degree=degree,
            coef0=coef0,
            bias=bias,
            method=method,
            multi_class=multi_class,
            max_iter=max_iter,
            tol=tol,
            alpha_max=alpha_max,
            alignment_max=alignment_max,
        )
        self.store, self.chunk_size, self.address = store, chunk_size, address
        self.progress, self.resume, self.cache_size = progress, resume, cache_size

    def fit(self, X, y):
        """Fit as the reference does, each approximation's passes on the cluster."""
        check_backend_args(self)
        if self.multi_class != "ovr":
            raise ValueError(
                "backends.dask.RVC fits one binary machine per class "
                f"(multi_class='ovr'); got multi_class={self.multi_class!r}. The "
                "softmax classifier couples the classes of every point: fit it with "
                "kernelref.rvm.RVC."
            )
        self._X_input, self._y_input = X, y
        try:
            return super().fit(materialise(X), y)
        finally:
            del self._X_input, self._y_input
            store = getattr(self, "_store", None)
            if store is not None:
                self._client.run(clear_cache)
                store.remove_if_temporary()
                del self._store, self._client

    def _design(self, kernel, X):
        labels = self._encoded_labels()
        store, client = open_store(self, self._X_input, labels, kernel)
        self._store = store
        shift = centring_shift(kernel, X)
        self._client = client
        Phi = ApproximatedDesign(
            X,
            shift,
            kernel,
            self.bias,
            store,
            client,
            unit=False,
            cache_mb=self.cache_size,
        )
        self.fit_info_ = Phi.counts  # the passes, counted as they happen
        return Phi, np.arange(Phi.shape[1])

    def _encoded_labels(self):
        """The labels as class indices, for the store's record of the data."""
        return np.unique(np.asarray(self._y_input), return_inverse=True)[1]

    def _approximation(self):
        return streamed_approximation

    def _driver(self, Phi):
        return checkpointed_driver(
            Phi.store,
            progress=self.progress,
            resume=self.resume,
            prefix=f"rvc-{getattr(self, '_run_name', '')}",
        )

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_store", None)
        state.pop("_client", None)
        return state
