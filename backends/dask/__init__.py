"""The Dask backend: kernel methods out of core, on any Dask cluster.

Gram matrices live in Zarr stores (``GramStore``), factorisations run tile by
tile on the workers (``linalg``), iterative solvers stream kernel blocks
without storing the Gram matrix (``cg``, ``nystrom``), the SVMs are solved by
block decomposition (``svm``), the relevance vector machines (binary,
one-vs-rest and softmax) by the fast algorithm on a streamed design matrix
(``rvm``), the Gaussian processes by tiled or matrix-free solves (``gp``,
``gp_matrix_free``) and kernel PCA by block Krylov passes (``kpca``); long
fits share one loop (``runtime``): a fit store, checkpoints, resume, progress.
Fitted estimators carry the reference's fitted state, so prediction and checks
are shared with ``kernelref``. X (N × D) must fit the client's memory; the
N × N kernel never has to fit the client or one worker. ``scipy.sparse`` X
stays sparse (CSR in the store) in the estimators listed in
``estimator_args.SPARSE_BACKENDS``. Nothing starts at import; ``get_client``
finds or starts a cluster.
"""

from backends.dask.cluster import get_client
from backends.dask.gp import GaussianProcessClassifier, GaussianProcessRegressor
from backends.dask.gram_store import GramStore
from backends.dask.kpca import KernelPCA
from backends.dask.ridge import KernelRidge
from backends.dask.rvm import RVC, RVR
from backends.dask.svm import SVC, SVR, NuSVC, NuSVR, OneClassSVM

__all__ = [
    "RVC",
    "RVR",
    "SVC",
    "SVR",
    "GaussianProcessClassifier",
    "GaussianProcessRegressor",
    "GramStore",
    "KernelPCA",
    "KernelRidge",
    "NuSVC",
    "NuSVR",
    "OneClassSVM",
    "get_client",
]
