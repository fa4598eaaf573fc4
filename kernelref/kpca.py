"""Kernel principal component analysis.

PCA of the features φ(x_n) centred in feature space, written through kernels
only. With K̃ the centred Gram matrix (label ``kpca-centre``), the coefficients
a_k of the k-th principal axis v_k = Σ_n a_kn φ̃(x_n) solve

    K̃ a_k = λ_k N a_k                                   (label ``kpca-eigen``)

where λ_k is the eigenvalue of the feature-space covariance (1/N) Σ φ̃ φ̃ᵀ;
‖v_k‖ = 1 becomes λ_k N a_kᵀ a_k = 1 (label ``kpca-normalise``), and the
projection of x on v_k is y_k(x) = Σ_n a_kn k̃(x, x_n) (label ``kpca-project``).

``eigenvalues_`` are the eigenvalues λ_k N of K̃, as in scikit-learn; divide by
N for the covariance eigenvalues λ_k.

A projection has no exact pre-image in general: φ(x) lives in feature space,
and most points there are images of no x. ``inverse_transform`` learns an
approximate map back, as scikit-learn does (Bakır, Weston & Schölkopf 2004):
kernel ridge regression (label ``ridge-dual-solution``) from the training
projections Y to the training inputs X, B = (K_Y + αI)⁻¹ X with K_Y the same
kernel on the projections, and x̂(y) = k_Y(y)ᵀ B (label ``kpca-preimage``).
"""

import numbers

import numpy as np
import scipy.sparse as sp
from scipy.linalg import eigh
from scipy.sparse.linalg import eigsh

from kernelref._validation import (
    check_is_fitted,
    check_n_features,
    check_samples,
    check_training_samples,
    evaluate_kernel,
    record_n_features,
    takes_objects,
)
from kernelref.base import BaseEstimator
from kernelref.exceptions import NotFittedError
from kernelref.kernels import make_kernel
from kernelref.ridge import dual_coefficients

__all__ = ["KernelPCA", "centre_gram", "centre_cross_gram"]

#: eigenvalues of K̃ below this fraction of the largest are rounding noise (as
#: scikit-learn)
ZERO_EIGENVALUE_RATIO = 1e-12
#: a negative eigenvalue beyond this fraction of the largest means K is not PSD (as
#: scikit-learn)
NEGATIVE_EIGENVALUE_RATIO = 1e-5
#: below this many samples, or for 10 or more components, "auto" uses the dense solver
ARPACK_MIN_SAMPLES = 200


def centre_gram(K):
    """K̃ = K − 1_N K − K 1_N + 1_N K 1_N, with (1_N)_nm = 1/N (label ``kpca-centre``).

    Returns K̃ and the column means of K, which centring new points needs.
    """
    column_means = K.mean(axis=0)
    K_tilde = K - column_means[None, :]
    K_tilde -= K.mean(axis=1)[:, None]
    K_tilde += column_means.mean()
    return K_tilde, column_means


def centre_cross_gram(K_new, column_means):
    """K̃′ = K′ − 1′_N K − K′ 1_N + 1′_N K 1_N for K′ = K(X_new, X_train)
    (label ``kpca-centre-new``): the training means, not the new points', centre."""
    K_tilde = K_new - column_means[None, :]
    K_tilde -= K_new.mean(axis=1)[:, None]
    K_tilde += column_means.mean()
    return K_tilde


class KernelPCA(BaseEstimator):
    """Kernel PCA.

    Parameters
    ----------
    n_components : int or None
        Number of components; ``None`` keeps every one with a non-zero eigenvalue.
    kernel : str or Kernel
        'linear', 'poly', 'rbf', 'laplacian', 'sigmoid', 'precomputed' or a
        ``kernelref.kernels.Kernel``.
    gamma, degree, coef0
        Parameters of the named kernels; ``gamma=None`` means 1/n_features.
    eigen_solver : "auto", "dense" or "arpack"
        "dense" is ``scipy.linalg.eigh`` on the wanted index range, "arpack"
        is ``scipy.sparse.linalg.eigsh`` (Lanczos) for a few components of a
        large K̃; "auto" takes arpack for fewer than 10 components of more
        than 200 samples.
    random_state : int, Generator or None
        Seeds arpack's starting vector.
    alpha : float ≥ 0
        Ridge penalty of the learned pre-image map (``fit_inverse_transform``).
    fit_inverse_transform : bool
        Learn the map from projections back to inputs that ``inverse_transform``
        applies (not with ``kernel="precomputed"`` or sparse X).

    Attributes
    ----------
    eigenvalues_ : ndarray (n_components,)
        Eigenvalues λN of K̃, in decreasing order.
    eigenvectors_ : ndarray (n_samples, n_components)
        Unit-norm eigenvectors u of K̃, each with its largest-magnitude entry positive.
    dual_coef_ : ndarray (n_samples, n_components)
        a = u/√(λN), so that λN aᵀa = 1 (label ``kpca-normalise``); zero for λ = 0.
    X_transformed_fit_ : ndarray (n_samples, n_components)
        With ``fit_inverse_transform``: the training projections Y.
    inverse_dual_coef_ : ndarray (n_samples, n_features)
        With ``fit_inverse_transform``: B = (K_Y + αI)⁻¹ X (scikit-learn's
        ``dual_coef_``; ours holds the a of ``kpca-normalise``).
    """

    sparse_input = True

    def __init__(
        self,
        n_components=None,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        eigen_solver="auto",
        random_state=None,
        alpha=1.0,
        fit_inverse_transform=False,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.eigen_solver = eigen_solver
        self.random_state = random_state
        self.alpha = alpha
        self.fit_inverse_transform = fit_inverse_transform

    def _validate_inverse(self, X):
        if not isinstance(self.fit_inverse_transform, (bool, np.bool_)):
            raise TypeError(
                f"fit_inverse_transform must be True or False; "
                f"got {self.fit_inverse_transform!r}."
            )
        if not self.fit_inverse_transform:
            return
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            raise ValueError(
                "fit_inverse_transform=True needs the inputs X to map back "
                "to; with kernel='precomputed' there are none. Pass X."
            )
        if takes_objects(self.kernel):
            raise ValueError(
                "fit_inverse_transform=True learns a map back to vectors; a "
                "kernel on objects has none. Do not fit the inverse transform."
            )
        if sp.issparse(X):
            raise TypeError(
                "fit_inverse_transform=True maps projections to dense "
                "(n_samples, n_features) inputs; pass X.toarray() or do not "
                "fit the inverse transform."
            )
        if (
            isinstance(self.alpha, bool)
            or not isinstance(self.alpha, numbers.Real)
            or not np.isfinite(self.alpha)
            or self.alpha < 0
        ):
            raise ValueError(
                f"alpha must be a finite number >= 0 (the ridge penalty of the "
                f"pre-image map); got {self.alpha!r}."
            )

    def _validate(self, X):
        self._validate_inverse(X)
        X = check_training_samples(X, self.kernel, accept_sparse="kernel")
        n = X.shape[0]
        if self.n_components is not None and (
            isinstance(self.n_components, bool)
            or not isinstance(self.n_components, numbers.Integral)
            or not 1 <= self.n_components <= n
        ):
            raise ValueError(
                f"n_components must be None or an integer in [1, n_samples={n}]; "
                f"got {self.n_components!r}."
            )
        if self.eigen_solver not in ("auto", "dense", "arpack"):
            raise ValueError(
                "eigen_solver must be 'auto', 'dense' or 'arpack'; got "
                f"{self.eigen_solver!r}."
            )
        n_components = n if self.n_components is None else self.n_components
        solver = self.eigen_solver
        if solver == "auto":
            solver = (
                "arpack" if n > ARPACK_MIN_SAMPLES and n_components < 10 else "dense"
            )
        if solver == "arpack" and n_components >= n:
            raise ValueError(
                f"eigen_solver='arpack' finds fewer than n_samples={n} eigenvectors; "
                f"got n_components={n_components}. Use eigen_solver='dense' or fewer "
                "components."
            )
        kernel = make_kernel(self.kernel, X, self.gamma, self.degree, self.coef0)
        return X, kernel, n_components, solver

    def __sklearn_tags__(self):
        from sklearn.utils import TransformerTags

        tags = super().__sklearn_tags__()
        tags.transformer_tags = TransformerTags(preserves_dtype=["float64"])
        tags.input_tags.pairwise = (
            isinstance(self.kernel, str) and self.kernel == "precomputed"
        )
        return tags

    def _top_eigenpairs(self, K_tilde, k, solver):
        """The k largest eigenpairs of K̃ (label ``kpca-eigen``), decreasing."""
        n = len(K_tilde)
        if solver == "dense":
            lam, U = eigh(K_tilde, subset_by_index=[n - k, n - 1])
        else:
            # a random start, as in scikit-learn, so that no eigenvector is
            # missed by being orthogonal to a fixed one
            v0 = np.random.default_rng(self.random_state).uniform(-1.0, 1.0, n)
            lam, U = eigsh(K_tilde, k, which="LA", v0=v0)
        order = np.argsort(lam)[::-1]
        return lam[order], U[:, order]

    def fit(self, X, y=None):
        """Centre K, solve K̃a = λNa and normalise λN aᵀa = 1."""
        X, kernel, n_components, solver = self._validate(X)
        K = X if isinstance(kernel, str) else evaluate_kernel(kernel, X)
        K_tilde, column_means = centre_gram(K)
        lam, U = self._top_eigenpairs(K_tilde, n_components, solver)
        return self._fit_eigenpairs(X, kernel, column_means, lam, U)

    def _fit_eigenpairs(self, X, kernel, column_means, lam, U):
        """The model from K̃'s top eigenpairs (λN, u), decreasing, however found
        (the backend's block Krylov iteration too): refuse a kernel that is not
        PSD, zero the rounding noise, fix the signs and normalise a = u/√(λN)
        (label ``kpca-normalise``); then the pre-image map if asked."""
        largest = max(lam.max(), 0.0)
        if lam.min() < -NEGATIVE_EIGENVALUE_RATIO * largest:
            raise ValueError(
                f"the centred Gram matrix has an eigenvalue {lam.min():.3g} (largest "
                f"{largest:.3g}): the kernel is not positive semi-definite on these "
                "inputs (see kernelref.kernels.mercer_check); choose a PSD kernel or "
                "parameters."
            )
        lam = np.where(lam > ZERO_EIGENVALUE_RATIO * largest, lam, 0.0)
        if self.n_components is None:
            U, lam = U[:, lam > 0], lam[lam > 0]
        # an eigenvector's sign is arbitrary: fix it by its largest entry
        rows = np.argmax(np.abs(U), axis=0)
        U *= np.sign(U[rows, np.arange(U.shape[1])])
        # a = u/√(λN) (label kpca-normalise); a zero-variance direction projects to 0
        positive = lam > 0
        a = np.zeros_like(U)
        a[:, positive] = U[:, positive] / np.sqrt(lam[positive])
        self.kernel_, self._K_column_means = kernel, column_means
        self.eigenvalues_, self.eigenvectors_, self.dual_coef_ = lam, U, a
        self.X_fit_ = X.copy()  # the model owns its data
        record_n_features(self, X)
        for name in ("X_transformed_fit_", "inverse_dual_coef_"):
            self.__dict__.pop(name, None)
        if self.fit_inverse_transform:
            self._fit_inverse_transform(X)
        return self

    def _fit_inverse_transform(self, X):
        """B = (K_Y + αI)⁻¹ X for the training projections Y (label
        ``kpca-preimage``)."""
        Y = self.eigenvectors_ * np.sqrt(self.eigenvalues_)
        self.inverse_dual_coef_ = dual_coefficients(
            self.kernel_(Y), X, float(self.alpha), overwrite_K=True
        )
        self.X_transformed_fit_ = Y

    def inverse_transform(self, Y):
        """Approximate pre-images x̂(y) = k_Y(y)ᵀ B of projections Y (label
        ``kpca-preimage``), by the map learnt with ``fit_inverse_transform=True``."""
        if not hasattr(self, "inverse_dual_coef_"):
            raise NotFittedError(
                "inverse_transform needs the pre-image map: fit with "
                "fit_inverse_transform=True."
            )
        Y = check_samples(Y, self.kernel_, "Y")
        if Y.shape[1] != self.X_transformed_fit_.shape[1]:
            raise ValueError(
                f"Y must have one column per component "
                f"({self.X_transformed_fit_.shape[1]}); got {Y.shape[1]}."
            )
        return self.kernel_(Y, self.X_transformed_fit_) @ self.inverse_dual_coef_

    def fit_transform(self, X, y=None):
        """Projections of the training points: K̃a = λN a = √(λN) u."""
        self.fit(X)
        return self.eigenvectors_ * np.sqrt(self.eigenvalues_)

    def transform(self, X):
        """y_k(x) = Σ_n a_kn k̃(x, x_n) for each row of X (label ``kpca-project``)."""
        check_is_fitted(self, "dual_coef_")
        X = check_samples(X, self.kernel_, "X", accept_sparse="kernel")
        if isinstance(self.kernel_, str):
            if X.shape[1] != len(self.X_fit_):
                raise ValueError(
                    f"with kernel='precomputed', X must be K(X_new, X_train) with "
                    f"{len(self.X_fit_)} columns; got {X.shape[1]}."
                )
            K_new = X
        else:
            if X.ndim == 2:
                check_n_features(X, self.n_features_in_)
            K_new = evaluate_kernel(self.kernel_, X, self.X_fit_)
        return centre_cross_gram(K_new, self._K_column_means) @ self.dual_coef_
