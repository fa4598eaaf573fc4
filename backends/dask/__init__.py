"""The Dask backend: kernel methods out of core, on any Dask cluster.

Gram matrices live in Zarr stores (``GramStore``), factorisations run tile by
tile on the workers (``linalg``), iterative solvers stream kernel blocks
without storing the Gram matrix (``cg``, ``nystrom``), the SVMs are solved by
block decomposition (``svm``) and the relevance vector machines by the fast
algorithm on a streamed design matrix (``rvm``); long fits share one loop
(``runtime``). Fitted
estimators carry the reference's fitted state, so prediction and checks are
shared with ``kernelref``. Nothing starts at import; ``get_client`` finds or
starts a cluster.
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
