"""The KKT certificate of a fitted SVM at any size, its products on the cluster.

``kernelref.svm.kkt_report`` needs the Gram matrix only as K @ coef, and the
model's decision values on the training points. Here both are computed chunk
by chunk on the workers from the data in a fit store, so no N × N array (nor
an N × n_SV one) exists anywhere: the client holds O(N · machines).
"""

import numpy as np
import scipy.sparse

from backends.dask.cluster import get_client
from backends.dask.runtime import FitStore, map_chunks
from backends.dask.sparse_rows import is_sparse
from backends.dask.svm.estimators import _is_lazy, centring_shift, materialise
from backends.dask.svm.tasks import product_chunk, product_chunk_at, shifted
from kernelref._validation import check_samples
from kernelref.svm import kkt as reference_kkt
from kernelref.svm.multiclass import ovo_coefficients

__all__ = ["kkt_report", "pair_coefficients"]


def pair_coefficients(estimator):
    """(D, b): every binary machine's decision values are k(x, SVs) @ D + b, in
    libsvm's sign (> 0 favours class i of pair (i, j)); D is (n_SV, machines)."""
    dual = estimator.dual_coef_
    if not hasattr(estimator, "classes_"):
        return dual.T.copy(), estimator.intercept_.copy()
    if len(estimator.classes_) == 2:
        return -dual.T, -estimator.intercept_
    return ovo_coefficients(dual, estimator.n_support_), estimator.intercept_.copy()


def kkt_report(
    estimator,
    X,
    y=None,
    sample_weight=None,
    *,
    address=None,
    chunk_size=4096,
    store=None,
):
    """``kernelref.svm.kkt_report`` of a fitted SVM (reference or backend) with
    K @ coef and the decision values computed on the cluster.

    X (what the reference takes: a list, a pandas frame, scipy.sparse for the
    kernels that take it, kept sparse; or a Zarr or dask array) is written once
    into a fit store (`store`, or a temporary directory) in chunks of
    `chunk_size` rows.
    """
    kernel = estimator.kernel_
    if isinstance(kernel, str):
        raise TypeError(
            "kkt_report on the cluster needs a kernel, not kernel='precomputed'; use "
            "kernelref.svm.kkt_report, which takes the Gram matrix as X."
        )
    X_client = check_samples(materialise(X), kernel, "X", accept_sparse="kernel")
    client = get_client(address)
    data = FitStore.prepare(
        store,
        X if _is_lazy(X) else X_client,
        identity={"purpose": "kkt_report"},
        chunk_size=chunk_size,
        client=client,
    )
    shift = centring_shift(kernel, X_client)

    def product(coef):
        used = np.flatnonzero(np.any(coef != 0, axis=1))
        parts = map_chunks(
            client, product_chunk_at, data.x_ref, kernel, shift, used, coef[used]
        )
        return np.concatenate(parts)

    try:
        D, b = pair_coefficients(estimator)
        rows, support_vectors = estimator.support_, estimator.support_vectors_
        if _same_rows(support_vectors, X_client, rows):
            # The support vectors are rows of X: the workers gather them.
            order = np.argsort(rows, kind="stable")
            task, S, D = product_chunk_at, rows[order], D[order]
        else:
            if is_sparse(support_vectors) and shift is not None:
                support_vectors = support_vectors.toarray()  # X is dense here
            task, S = product_chunk, shifted(support_vectors, shift)
        decision = (
            np.concatenate(map_chunks(client, task, data.x_ref, kernel, shift, S, D))
            + b
        )
        return reference_kkt.kkt_report(
            estimator, X_client, y, sample_weight, product=product, decision=decision
        )
    finally:
        data.remove_if_temporary()


def _same_rows(S, X, rows):
    """True when the support vectors S are the rows `rows` of X (either may be
    sparse: then compared entry by entry, never densified)."""
    if rows.max(initial=-1) >= X.shape[0] or S.shape != (len(rows), X.shape[1]):
        return False
    if is_sparse(S) or is_sparse(X):
        S, X_rows = scipy.sparse.csr_matrix(S), scipy.sparse.csr_matrix(X[rows])
        return (S != X_rows).nnz == 0
    return np.array_equal(S, X[rows])
