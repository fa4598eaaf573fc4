"""kernelref: the reference implementation of the kernelref book.

numpy and scipy only; each function names the book's equation labels it implements.

The estimators are imported on first use, so that ``import kernelref.kernels`` —
what every Dask worker does to unpickle a kernel — does not pay for the whole
library's imports in time and memory.
"""

import importlib

__version__ = "0.1.0"

_ESTIMATORS = {
    "GaussianProcessClassifier": "kernelref.gp",
    "GaussianProcessRegressor": "kernelref.gp",
    "KernelFisherDiscriminant": "kernelref.kfda",
    "KernelPCA": "kernelref.kpca",
    "KernelRidge": "kernelref.ridge",
    "NadarayaWatson": "kernelref.nadaraya_watson",
    "RVC": "kernelref.rvm",
    "RVR": "kernelref.rvm",
    "SoftmaxGaussianProcessClassifier": "kernelref.gp_softmax",
}

__all__ = sorted(_ESTIMATORS) + ["kernels", "load"]


def load(path):
    """The estimator saved at `path` by ``estimator.save(path)``; runs no code
    from the file (see ``kernelref.io``)."""
    from kernelref import io

    return io.load(path)


def __getattr__(name):
    if name in _ESTIMATORS:
        return getattr(importlib.import_module(_ESTIMATORS[name]), name)
    if name == "kernels":
        return importlib.import_module("kernelref.kernels")
    raise AttributeError(f"module 'kernelref' has no attribute {name!r}")


def __dir__():
    return __all__ + ["__version__"]
