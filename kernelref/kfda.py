"""Kernel Fisher discriminant analysis (Mika et al. 1999).

Fisher's discriminant in the feature space of a kernel. A direction
w = Σ_n α_n φ(x_n) projects x to z(x) = Σ_n α_n k(x_n, x) (label
``kfda-project``). With K the Gram matrix, 1_c the indicator of class c and
N_c its size, the class means of the kernel columns are m_c = K 1_c / N_c and
m = K 1 / N (label ``kfda-means``); the between- and within-class scatters of
the projections are αᵀMα and αᵀN_Wα with

    M   = Σ_c N_c (m_c − m)(m_c − m)ᵀ                  (label ``kfda-between``)
    N_W = Σ_c K_c (I − 1/N_c) K_cᵀ                       (label ``kfda-within``)

(K_c the columns of K of class c). N_W has rank at most N − C, so it is
regularised, N_μ = N_W + μI, and the Fisher criterion J(α) = αᵀMα / αᵀN_μα
is maximised by the generalised eigenproblem

    M α = λ N_μ α                                      (label ``kfda-eigen``)

whose C − 1 largest eigenvectors span the discriminant subspace. For two
classes M is of rank one and the solution is α ∝ N_μ⁻¹(m_2 − m_1) (label
``kfda-two-class``). ``predict`` assigns the class whose projected mean is
nearest.
"""

import numpy as np
from scipy.linalg import eigh

from kernelref._validation import (
    check_classification_targets,
    check_is_fitted,
    check_n_features,
    check_positive,
    check_samples,
    check_training_samples,
    evaluate_kernel,
    record_n_features,
)
from kernelref.base import BaseEstimator, ClassifierMixin, restores_on_error
from kernelref.kernels import make_kernel

__all__ = ["KernelFisherDiscriminant", "scatter_matrices"]


def scatter_matrices(K, y_index, n_classes):
    """M and N_W of labels ``kfda-between`` and ``kfda-within`` for the Gram
    matrix K and class indices y_index (0 … n_classes − 1)."""
    N = len(K)
    m = K.mean(axis=1)
    M = np.zeros((N, N))
    N_W = np.zeros((N, N))
    for c in range(n_classes):
        K_c = K[:, y_index == c]
        m_c = K_c.mean(axis=1)  # label kfda-means
        M += K_c.shape[1] * np.outer(m_c - m, m_c - m)
        centred = K_c - m_c[:, None]  # K_c (I − 1/N_c)
        N_W += centred @ centred.T
    return M, N_W


class KernelFisherDiscriminant(ClassifierMixin, BaseEstimator):
    """Kernel Fisher discriminant analysis.

    Parameters
    ----------
    n_components : int or None
        Number of discriminant directions, at most n_classes − 1 (the rank of
        M); ``None`` takes n_classes − 1.
    mu : float > 0
        Regulariser of the within-class scatter, N_μ = N_W + μI.
    kernel : str or Kernel
        'linear', 'poly', 'rbf', 'laplacian', 'sigmoid', 'precomputed' or a
        ``kernelref.kernels.Kernel``.
    gamma, degree, coef0
        Parameters of the named kernels; ``gamma=None`` means 1/n_features.

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    dual_coef_ : ndarray (n_samples, n_components)
        α, the eigenvectors of ``kfda-eigen`` normalised so that αᵀN_μα = 1.
    eigenvalues_ : ndarray (n_components,)
        λ = J(α), decreasing.
    means_ : ndarray (n_classes, n_components)
        The class means of the training projections.
    """

    def __init__(
        self, n_components=None, mu=1e-3, kernel="rbf", gamma=None, degree=3, coef0=1
    ):
        self.n_components = n_components
        self.mu = mu
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0

    def __sklearn_tags__(self):
        from sklearn.utils import TransformerTags

        tags = super().__sklearn_tags__()
        tags.transformer_tags = TransformerTags(preserves_dtype=["float64"])
        tags.input_tags.pairwise = (
            isinstance(self.kernel, str) and self.kernel == "precomputed"
        )
        return tags

    def fit_transform(self, X, y):
        """Fit, then the projections of the training points."""
        return self.fit(X, y).transform(X)

    def _validate(self, X, y):
        mu = check_positive(self.mu, "mu", meaning="It regularises N_W + μI.")
        X = check_training_samples(X, self.kernel)
        n = X.shape[0] if hasattr(X, "shape") else len(X)
        classes, y_index = check_classification_targets(y, n)
        C = len(classes)
        k = C - 1 if self.n_components is None else self.n_components
        if (
            isinstance(k, bool)
            or not isinstance(k, (int, np.integer))
            or not 1 <= k < C
        ):
            raise ValueError(
                "n_components must be None or an integer in [1, n_classes - 1 = "
                f"{C - 1}] (M has rank n_classes - 1); got {self.n_components!r}."
            )
        kernel = make_kernel(self.kernel, X, self.gamma, self.degree, self.coef0)
        return X, classes, y_index, int(k), mu, kernel

    @restores_on_error
    def fit(self, X, y):
        """Solve M α = λ N_μ α (label ``kfda-eigen``) for the top directions."""
        X, classes, y_index, k, mu, kernel = self._validate(X, y)
        K = X if isinstance(kernel, str) else evaluate_kernel(kernel, X)
        M, N_W = scatter_matrices(K, y_index, len(classes))
        N = len(K)
        lam, alpha = eigh(M, N_W + mu * np.eye(N), subset_by_index=[N - k, N - 1])
        lam, alpha = lam[::-1], alpha[:, ::-1]
        # an eigenvector's sign is arbitrary: make the last class project highest
        Z = K @ alpha
        last = Z[y_index == len(classes) - 1].mean(axis=0)
        alpha = alpha * np.where(last >= Z.mean(axis=0), 1.0, -1.0)
        self.classes_, self.kernel_, self.X_fit_ = classes, kernel, X.copy()
        self.dual_coef_, self.eigenvalues_ = alpha, lam
        Z = K @ alpha
        self.means_ = np.array(
            [Z[y_index == c].mean(axis=0) for c in range(len(classes))]
        )
        record_n_features(self, X)
        return self

    def transform(self, X):
        """z(x) = Σ_n α_n k(x_n, x) for each row of X (label ``kfda-project``)."""
        check_is_fitted(self, "dual_coef_")
        X = check_samples(X, self.kernel_, "X")
        if isinstance(self.kernel_, str):
            if X.shape[1] != len(self.X_fit_):
                raise ValueError(
                    f"with kernel='precomputed', X must be K(X_new, X_train) with "
                    f"{len(self.X_fit_)} columns; got {X.shape[1]}."
                )
            return X @ self.dual_coef_
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        return evaluate_kernel(self.kernel_, X, self.X_fit_) @ self.dual_coef_

    def decision_function(self, X):
        """Two classes: z(x) minus the midpoint of the projected class means,
        positive for ``classes_[1]``. More: minus the squared distance of z(x)
        to each projected class mean, one column per class."""
        Z = self.transform(X)
        if len(self.classes_) == 2:
            return Z[:, 0] - self.means_[:, 0].mean()
        return -((Z[:, None, :] - self.means_[None, :, :]) ** 2).sum(axis=2)

    def predict(self, X):
        """The class whose projected mean is nearest to z(x)."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]
