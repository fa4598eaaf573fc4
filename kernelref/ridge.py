"""Kernel ridge regression in its dual form, and the primal form it equals.

Minimising J(w) = ½ Σ_n (wᵀφ(x_n) − t_n)² + λ/2 wᵀw gives w = Φᵀa with
a = (K + λI_N)⁻¹ t (label ``ridge-dual-solution``) and the prediction
y(x) = k(x)ᵀ a (label ``ridge-predict``). The primal solution
w = (ΦᵀΦ + λI_M)⁻¹ Φᵀ t (label ``ridge-primal``) is the same function when the
features are explicit.

With sample weights s_n ≥ 0 the loss is ½ Σ_n s_n (wᵀφ(x_n) − t_n)², and
a = S^½ (S^½ K S^½ + λI)⁻¹ S^½ t with S = diag(s) (label ``ridge-weighted``):
the same Cholesky solve, on a symmetric matrix, as scikit-learn computes it.
"""

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve, solve

from kernelref._validation import (
    check_is_fitted,
    check_n_features,
    check_positive,
    check_sample_weight,
    check_samples,
    check_targets,
    check_training_samples,
    evaluate_kernel,
    record_n_features,
)
from kernelref.base import BaseEstimator, RegressorMixin
from kernelref.kernels import make_kernel
from kernelref.nadaraya_watson import NadarayaWatson

__all__ = [
    "KernelRidge",
    "NadarayaWatson",
    "dual_coefficients",
    "dual_objective",
    "primal_weights",
    "weighted_dual_coefficients",
]


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


def weighted_dual_coefficients(K, t, lam, s, overwrite_K=False):
    """a = S^½ (S^½ K S^½ + λI)⁻¹ S^½ t for weights s ≥ 0 (label ``ridge-weighted``).

    Stationarity of ½ Σ s_n (k_nᵀa − t_n)² + λ/2 aᵀKa gives (SK + λI) a = S t;
    writing a = S^½ b makes the system symmetric, S^½ K S^½ + λI, which a Cholesky
    factor solves. A sample of weight zero gets a_n = 0.
    """
    root = np.sqrt(s)
    A = np.asarray(K, dtype=float) if overwrite_K else np.array(K, dtype=float)
    A *= root[:, None]
    A *= root[None, :]
    t_scaled = t * (root if t.ndim == 1 else root[:, None])
    b = dual_coefficients(A, t_scaled, lam, overwrite_K=True)
    return b * (root if b.ndim == 1 else root[:, None])


def primal_weights(Phi, t, lam):
    """w = (ΦᵀΦ + λI_M)⁻¹ Φᵀ t by Cholesky of the M×M matrix (label
    ``ridge-primal``)."""
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

    sparse_input = True

    def __init__(self, lam=1.0, kernel="rbf", gamma=None, degree=3, coef0=1):
        self.lam = lam
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0

    def _validate(self, X, y, sample_weight=None):
        lam = check_positive(
            self.lam,
            "lam",
            meaning="It is the ridge penalty λ; "
            "use a small positive value such as 1e-8 to nearly interpolate.",
        )
        X = check_training_samples(X, self.kernel, accept_sparse="kernel")
        t = check_targets(y, X.shape[0], "y")
        s = None
        if sample_weight is not None:
            s = check_sample_weight(
                sample_weight, X.shape[0], "it weighs each sample's squared error."
            )
        kernel = make_kernel(self.kernel, X, self.gamma, self.degree, self.coef0)
        return lam, X, t, s, kernel

    def fit(self, X, y, sample_weight=None):
        """a = (K + λI)⁻¹ t, or with ``sample_weight`` the weighted solution
        (label ``ridge-weighted``). ``sample_weight`` is one weight ≥ 0 per
        sample, or a single number for all (weight c is penalty λ/c)."""
        lam, X, t, s, self.kernel_ = self._validate(X, y, sample_weight)
        K = X if isinstance(self.kernel_, str) else evaluate_kernel(self.kernel_, X)
        if s is None:
            self.dual_coef_ = dual_coefficients(K, t, lam, overwrite_K=K is not X)
        else:
            self.dual_coef_ = weighted_dual_coefficients(
                K, t, lam, s, overwrite_K=K is not X
            )
        self.X_fit_ = (
            X.copy()
        )  # the model owns its data: later edits of X do not reach it
        record_n_features(self, X)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # y may be (n_samples, n_targets)
        return tags

    def _cross_kernel(self, X):
        """k(x)ᵀ for each row of X: the (n_test, n_train) matrix K(X, X_fit)."""
        check_is_fitted(self, "dual_coef_")
        X = check_samples(X, self.kernel_, "X", accept_sparse="kernel")
        if isinstance(self.kernel_, str):
            if X.shape[1] != len(self.X_fit_):
                raise ValueError(
                    f"with kernel='precomputed', X must be K(X_test, X_train) with "
                    f"{len(self.X_fit_)} columns; got {X.shape[1]}."
                )
            return X
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        return evaluate_kernel(self.kernel_, X, self.X_fit_)

    def predict(self, X):
        """y(x) = k(x)ᵀ a (label ``ridge-predict``)."""
        return self._cross_kernel(X) @ self.dual_coef_
