"""Kernel ridge regression in its dual form, and the primal form it equals.

Minimising J(w) = ½ Σ_n (wᵀφ(x_n) − t_n)² + λ/2 wᵀw gives w = Φᵀa with
a = (K + λI_N)⁻¹ t (label ``ridge-dual-solution``) and the prediction
y(x) = k(x)ᵀ a (label ``ridge-predict``). The primal solution
w = (ΦᵀΦ + λI_M)⁻¹ Φᵀ t (label ``ridge-primal``) is the same function when the
features are explicit.
"""

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve, solve

from kernelref._validation import (
    check_is_fitted, check_n_features, check_positive, check_samples, check_targets,
    check_training_samples, record_n_features)
from kernelref.base import BaseEstimator, RegressorMixin
from kernelref.kernels import make_kernel
from kernelref.nadaraya_watson import NadarayaWatson

__all__ = ["KernelRidge", "NadarayaWatson", "dual_coefficients", "dual_objective",
           "primal_weights"]


def dual_objective(a, K, t, lam):
    """J(a) = ½ aᵀKKa − aᵀKt + ½ tᵀt + λ/2 aᵀKa (label ``ridge-dual-objective``)."""
    Ka = K @ a
    return 0.5 * Ka @ Ka - Ka @ t + 0.5 * t @ t + 0.5 * lam * a @ Ka


def dual_coefficients(K, t, lam, overwrite_K=False):
    """a = (K + λI)⁻¹ t by Cholesky (label ``ridge-dual-solution``).

    If the kernel is not positive semi-definite on the data (the sigmoid kernel,
    say), K + λI may be indefinite; the system is then solved by a symmetric
    indefinite (LDLᵀ) factorisation, which is exact but slower. With
    ``overwrite_K`` the N×N matrix is factorised in place, saving a copy.
    """
    A = np.asarray(K, dtype=float) if overwrite_K else np.array(K, dtype=float)
    A.flat[:: len(A) + 1] += lam
    try:
        factor = cho_factor(A, lower=True, overwrite_a=True, check_finite=False)
    except LinAlgError:
        # potrf wrote only the lower triangle; the upper one still holds K + λI.
        return solve(A, t, assume_a="sym", lower=False, check_finite=False)
    return cho_solve(factor, t, check_finite=False)


def primal_weights(Phi, t, lam):
    """w = (ΦᵀΦ + λI_M)⁻¹ Φᵀ t by Cholesky of the M×M matrix (label ``ridge-primal``)."""
    Phi = np.asarray(Phi, dtype=float)
    A = Phi.T @ Phi
    A.flat[:: len(A) + 1] += lam
    return cho_solve(cho_factor(A, lower=True), Phi.T @ t)


class KernelRidge(RegressorMixin, BaseEstimator):
    """Kernel ridge regression, solved in the dual.

    Parameters
    ----------
    lam : float > 0
        The penalty λ of J(w); scikit-learn calls it ``alpha``.
    kernel : str or Kernel
        'linear', 'poly', 'rbf', 'laplacian', 'sigmoid', 'precomputed' or a
        ``kernelref.kernels.Kernel``.
    gamma, degree, coef0
        Parameters of the named kernels; ``gamma=None`` means 1/n_features.

    Attributes
    ----------
    dual_coef_ : ndarray (n_samples,) or (n_samples, n_targets)
        a = (K + λI)⁻¹ t.
    X_fit_ : ndarray
        The training inputs (the training Gram matrix when precomputed).
    kernel_ : Kernel or "precomputed"
        The kernel used.
    """

    def __init__(self, lam=1.0, kernel="rbf", gamma=None, degree=3, coef0=1):
        self.lam = lam
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0

    def _validate(self, X, y):
        lam = check_positive(self.lam, "lam", meaning="It is the ridge penalty λ; "
                             "use a small positive value such as 1e-8 to nearly interpolate.")
        X = check_training_samples(X, self.kernel)
        t = check_targets(y, X.shape[0], "y")
        kernel = make_kernel(self.kernel, X, self.gamma, self.degree, self.coef0)
        return lam, X, t, kernel

    def fit(self, X, y):
        lam, X, t, self.kernel_ = self._validate(X, y)
        K = X if isinstance(self.kernel_, str) else self.kernel_(X)
        self.dual_coef_ = dual_coefficients(K, t, lam, overwrite_K=K is not X)
        self.X_fit_ = X
        record_n_features(self, X)
        return self

    def _cross_kernel(self, X):
        """k(x)ᵀ for each row of X: the (n_test, n_train) matrix K(X, X_fit)."""
        check_is_fitted(self, "dual_coef_")
        X = check_samples(X, self.kernel_, "X")
        if isinstance(self.kernel_, str):
            if X.shape[1] != len(self.X_fit_):
                raise ValueError(
                    f"with kernel='precomputed', X must be K(X_test, X_train) with "
                    f"{len(self.X_fit_)} columns; got {X.shape[1]}.")
            return X
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        return self.kernel_(X, self.X_fit_)

    def predict(self, X):
        """y(x) = k(x)ᵀ a (label ``ridge-predict``)."""
        return self._cross_kernel(X) @ self.dual_coef_
