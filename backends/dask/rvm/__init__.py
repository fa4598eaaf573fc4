"""The relevance vector machine on a Dask cluster: the fast algorithm with its
candidates' kernel columns streamed (``design``), its loop on the shared runtime
(``loop``), and the reference's estimators around it."""

from backends.dask.rvm.classification import RVC
from backends.dask.rvm.regression import RVR

__all__ = ["RVC", "RVR"]
