"""The Dask backend: kernel methods out of core, on any Dask cluster.

Gram matrices live in Zarr stores (``GramStore``), factorisations run tile by
tile on the workers (``linalg``), and iterative solvers stream kernel blocks
without storing the Gram matrix (``cg``). Fitted estimators carry the
reference's fitted state, so prediction and checks are shared with
``kernelref``. Nothing starts at import; ``get_client`` finds or starts a cluster.
"""

from backends.dask.cluster import get_client
from backends.dask.gram_store import GramStore
from backends.dask.ridge import KernelRidge

__all__ = ["GramStore", "KernelRidge", "get_client"]
