"""Support vector machines on a Dask cluster: block decomposition with a
divide-and-conquer warm start, for the five formulations of ``kernelref.svm``.

``SVC``, ``NuSVC``, ``SVR``, ``NuSVR`` and ``OneClassSVM`` take the reference's
arguments and return its fitted state; ``kkt_report`` certifies a fit at any
size, its products with the Gram matrix computed on the cluster.
"""

from backends.dask.svm.estimators import SVC, SVR, NuSVC, NuSVR, OneClassSVM
from backends.dask.svm.kkt import kkt_report

__all__ = ["SVC", "SVR", "NuSVC", "NuSVR", "OneClassSVM", "kkt_report"]
