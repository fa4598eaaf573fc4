"""The dot-product kernel of Gaussian-process practice: Bayesian linear
regression with a bias as a kernel.

k(x, x′) = σ₀² + xᵀx′ (label ``kernel-dot-product``) is the covariance of
f(x) = w₀ + wᵀx with w₀ ~ N(0, σ₀²) and w ~ N(0, I) (GPML §4.2).
The parametrisation is scikit-learn's ``DotProduct(sigma_0)``; the learnable
hyperparameter is σ₀, with ∂k/∂log σ₀ = 2σ₀². Multiply by a ``Constant`` for the
prior variance of w, or raise to a power with ``PolynomialOf``.
"""

import numpy as np

from kernelref.kernels.base import DEFAULT_BOUNDS, Kernel
from kernelref.kernels.vector import _inner, _n_rows, _row_norms_sq

__all__ = ["DotProduct"]


class DotProduct(Kernel):
    """k(x, x′) = σ₀² + xᵀx′ with σ₀ ≥ 0; σ₀ = 0 is the homogeneous linear
    kernel and leaves nothing to learn (as ``Polynomial``'s ``coef0 = 0``)."""

    param_constraints = {"sigma_0": "nonnegative"}
    #: xᵀx′ is a sparse product, as for ``Linear``: X is never made dense
    accepts_sparse = True

    def __init__(self, sigma_0=1.0, sigma_0_bounds=DEFAULT_BOUNDS):
        self.sigma_0 = sigma_0
        self.sigma_0_bounds = sigma_0_bounds

    @property
    def hyperparameter_names(self):
        return ("sigma_0",) if self.sigma_0 > 0 else ()

    def __call__(self, X, Y=None):
        K = _inner(X, Y)
        K += self.sigma_0**2
        return K

    def diag(self, X):
        return _row_norms_sq(X) + self.sigma_0**2

    def _gradient_terms(self, X):
        if self._own():
            n = _n_rows(X)
            yield np.full((n, n), 2.0 * self.sigma_0**2)

    def gradient_dot(self, X, W, K=None):
        """Σ_ab W_ab ∂K_ab/∂log σ₀ = 2σ₀² Σ_ab W_ab."""
        if not self._own():
            return np.empty(0)
        return np.array([2.0 * self.sigma_0**2 * np.sum(W)])
