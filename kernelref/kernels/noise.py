"""The white-noise kernel: a learnable noise variance for GP regression.

k(x_n, x_m) = σ² δ_nm on the training set (label ``kernel-white``). Adding it
to a kernel turns the noise variance of the targets into a hyperparameter that
the evidence can learn, as scikit-learn's ``WhiteKernel`` does.
"""

import numpy as np
import scipy.sparse as sp

from kernelref.kernels.base import DEFAULT_BOUNDS, Kernel, as_2d


def _n_rows(X, name="X"):
    return X.shape[0] if sp.issparse(X) else len(as_2d(X, name))


class White(Kernel):
    """k(x, x′) = σ² when x and x′ are the same training point, 0 otherwise.

    "The same point" means the same row of the same set: ``k(X)`` (``Y=None``)
    is σ²I, while ``k(X, Y)`` is zero even if ``Y`` equals ``X``, because noise
    on a new observation is independent of the noise on the training targets.
    ``diag(X)`` is σ², the noise a new observation of y would carry.
    """

    hyperparameter_names = ("noise_level",)
    param_constraints = {"noise_level": "positive"}
    accepts_sparse = True

    def __init__(self, noise_level=1.0, noise_level_bounds=DEFAULT_BOUNDS):
        self.noise_level = noise_level
        self.noise_level_bounds = noise_level_bounds

    def __call__(self, X, Y=None):
        n = _n_rows(X)
        if Y is None:
            return float(self.noise_level) * np.eye(n)
        return np.zeros((n, _n_rows(Y, "Y")))

    def diag(self, X):
        return np.full(_n_rows(X), float(self.noise_level))

    def _gradient_terms(self, X):
        if self._own():
            yield self(X)

    def gradient_dot(self, X, W, K=None):
        """Σ_ab W_ab ∂K_ab/∂log σ² = σ² tr W, without forming σ²I."""
        if not self._own():
            return np.empty(0)
        return np.array([float(self.noise_level) * np.trace(W)])
