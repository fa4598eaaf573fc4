"""Mercer's condition on data: is the Gram matrix positive semi-definite?

A function is a valid kernel exactly when every Gram matrix it makes is
symmetric positive semi-definite (label ``mercer``). On a finite sample we can
only refute that, by finding a negative eigenvalue larger than rounding.
"""

from dataclasses import dataclass

import numpy as np
from scipy.linalg import eigh

from kernelref.kernels.base import as_2d


@dataclass(frozen=True)
class MercerReport:
    """What ``mercer_check`` found on one sample."""

    min_eigenvalue: float
    max_eigenvalue: float
    n_negative: int
    asymmetry: float
    tolerance: float

    @property
    def is_psd(self):
        return (
            self.asymmetry <= self.tolerance and self.min_eigenvalue >= -self.tolerance
        )

    @property
    def verdict(self):
        if self.asymmetry > self.tolerance:
            return f"not symmetric (max |K - Kᵀ| = {self.asymmetry:.3g})"
        if self.is_psd:
            return "positive semi-definite on this sample"
        return (
            f"not positive semi-definite: {self.n_negative} eigenvalue(s) below "
            f"-{self.tolerance:.3g}, the smallest {self.min_eigenvalue:.6g}"
        )


def mercer_check(kernel, X, rtol=None):
    """Eigenvalues of the Gram matrix of `kernel` on `X`, and a verdict.

    `X` is a float matrix, or a list of objects for a kernel on objects.

    `rtol` scales the rounding allowance ``rtol * max|λ|``; the default
    ``n * eps`` is the usual bound on eigenvalue error of a symmetric solver.
    """
    X = X if getattr(kernel, "takes_objects", False) else as_2d(X)
    K = kernel(X)
    n = len(K)
    asymmetry = float(np.max(np.abs(K - K.T))) if n else 0.0
    eigenvalues = eigh(0.5 * (K + K.T), eigvals_only=True)
    scale = float(np.max(np.abs(eigenvalues))) if n else 0.0
    rtol = n * np.finfo(float).eps if rtol is None else rtol
    tolerance = rtol * max(scale, np.finfo(float).tiny)
    return MercerReport(
        min_eigenvalue=float(eigenvalues[0]),
        max_eigenvalue=float(eigenvalues[-1]),
        n_negative=int(np.sum(eigenvalues < -tolerance)),
        asymmetry=asymmetry,
        tolerance=tolerance,
    )
