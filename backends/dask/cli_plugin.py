"""The Dask backend as the ``kernelref`` command line finds it.

``pyproject.toml`` registers this module in the entry point group
``kernelref.backends`` under the name ``dask``; ``kernelref fit --backend dask``
and ``kernelref gram`` load it from there (``kernelref.cli.plugins``), so
kernelref names no backend and imports none until one is asked for (the arrows
point from backends to kernelref). A backend offers ``estimators()``, if it
builds Gram stores ``GramStore``, and ``CLUSTER = True`` when its fits run on a
Dask cluster (the command line then connects to ``--scheduler`` and reads Zarr
input lazily); ``check_scheduler`` asks a ``--scheduler`` who it is within
``--timeout`` before the command line connects (``NotASchedulerError``: it is
not a scheduler).
"""

import backends.dask as package
from backends.dask.cluster import NotASchedulerError, check_scheduler
from backends.dask.gram_store import GramStore
from kernelref.base import BaseEstimator

__all__ = [
    "CLUSTER",
    "GramStore",
    "NotASchedulerError",
    "check_scheduler",
    "estimators",
]

#: the fits run on a Dask cluster: ``--scheduler`` applies, Zarr input stays lazy
CLUSTER = True


def estimators():
    """{name: class} of the estimators ``backends.dask`` exports."""
    found = {}
    for name in package.__all__:
        value = getattr(package, name)
        if isinstance(value, type) and issubclass(value, BaseEstimator):
            found[name] = value
    return found
