"""Kernel functions, their construction rules and Mercer's check.

``make_kernel`` turns the estimators' ``kernel=`` strings into kernel objects.
"""

import numbers

import numpy as np
import scipy.sparse as sp

from kernelref.kernels.base import Kernel, squared_distances
from kernelref.kernels.compose import (
    Constant,
    Exp,
    Mapped,
    PolynomialOf,
    Product,
    Scaled,
    Sum,
    Warped,
)
from kernelref.kernels.dot_product import DotProduct
from kernelref.kernels.mercer import MercerReport, mercer_check
from kernelref.kernels.noise import White
from kernelref.kernels.stationary import ExpSineSquared, Matern, RationalQuadratic
from kernelref.kernels.vector import (
    ARD,
    RBF,
    Bilinear,
    ExponentialQuadratic,
    Laplacian,
    Linear,
    Polynomial,
    Sigmoid,
)

__all__ = [
    "ARD",
    "RBF",
    "Bilinear",
    "Constant",
    "Exp",
    "ExponentialQuadratic",
    "Kernel",
    "Laplacian",
    "Linear",
    "Mapped",
    "MercerReport",
    "Polynomial",
    "PolynomialOf",
    "Product",
    "Scaled",
    "Sigmoid",
    "Sum",
    "Warped",
    "make_kernel",
    "mercer_check",
    "squared_distances",
    "White",
    "DotProduct",
    "ExpSineSquared",
    "Matern",
    "RationalQuadratic",
]

KERNEL_NAMES = ("linear", "poly", "rbf", "laplacian", "sigmoid", "precomputed")


def resolve_gamma(gamma, X):
    """γ as scikit-learn reads it: ``None`` → 1/D, ``"scale"`` → 1/(D·Var X)."""
    n_features = X.shape[1]
    if gamma is None:
        return 1.0 / n_features
    if isinstance(gamma, str):
        if gamma == "scale":
            # for sparse X, E[x²] − E[x]² from the stored entries, as scikit-learn
            with np.errstate(over="ignore", invalid="ignore"):
                variance = (
                    float(X.multiply(X).mean() - X.mean() ** 2)
                    if sp.issparse(X)
                    else float(X.var())
                )
                gamma = 1.0 / (n_features * variance) if variance > 0 else 1.0
            if not (np.isfinite(variance) and 0 < gamma < np.inf):
                raise ValueError(
                    "gamma='scale' is 1/(n_features·Var X), but Var X = "
                    f"{variance:.3g} overflows or underflows on this X (entries as "
                    f"large as {float(abs(X).max()):.3g}); scale X (e.g. standardise "
                    "its columns) or give gamma as a number."
                )
            return gamma
        if gamma == "auto":
            return 1.0 / n_features
        raise ValueError(
            f"gamma must be a positive number, None, 'scale' or 'auto'; got {gamma!r}."
        )
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise ValueError(
            f"gamma must be a positive number, None, 'scale' or 'auto'; got {gamma!r}. "
            "One gamma per input is the ARD kernel: pass kernel=ARD(gamma=...)."
        )
    if not np.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"gamma must be a finite number > 0; got {float(gamma)!r}.")
    return float(gamma)


#: the named kernels computed from inner products and norms alone
SPARSE_KERNEL_NAMES = ("linear", "poly", "polynomial", "rbf", "sigmoid")


def accepts_sparse(kernel):
    """True when `kernel` (a name or a Kernel) takes ``scipy.sparse`` X."""
    if isinstance(kernel, str):
        return kernel in SPARSE_KERNEL_NAMES
    return bool(getattr(kernel, "accepts_sparse", False))


def make_kernel(kernel, X, gamma=None, degree=3, coef0=1.0):
    """The kernel object an estimator uses: `kernel` itself if it is one, else
    the named kernel with ``gamma``, ``degree`` and ``coef0`` read for data `X`.

    Returns the string ``"precomputed"`` unchanged.
    """
    if isinstance(kernel, Kernel):
        return kernel
    if not isinstance(kernel, str) or kernel not in KERNEL_NAMES + ("polynomial",):
        raise ValueError(
            f"kernel must be one of {KERNEL_NAMES} or a kernelref.kernels.Kernel; got "
            f"{kernel!r}."
        )
    if kernel == "precomputed":
        return kernel
    if kernel == "linear":
        return Linear()
    g = resolve_gamma(gamma, X)
    if kernel in ("poly", "polynomial"):
        return Polynomial(degree=degree, gamma=g, coef0=coef0)
    if kernel == "rbf":
        return RBF(gamma=g)
    if kernel == "laplacian":
        return Laplacian(gamma=g)
    return Sigmoid(gamma=g, coef0=coef0)
