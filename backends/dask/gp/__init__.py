"""Exact Gaussian processes on a Dask cluster: regression and Laplace classification.

The N × N algebra runs tile by tile on the workers (``tiles``); the estimators
subclass the reference's (``kernelref.gp``), so their parameters, fitted state
and ML-II are the reference's own.
"""

from backends.dask.gp.classification import GaussianProcessClassifier
from backends.dask.gp.regression import GaussianProcessRegressor

__all__ = ["GaussianProcessClassifier", "GaussianProcessRegressor"]
