"""Gaussian-process regression: the posterior of GPML Algorithm 2.1, the log
marginal likelihood (the evidence) with its gradient, and ML-II.

The model is t = f(x) + ε with f ~ GP(0, k) and ε ~ N(0, σ²) (label
``gp-prior``). Every quantity goes through one Cholesky factor, of

    B = K/σ² + I = L Lᵀ                                 (label ``gp-stable-B``).

B is the Gaussian-likelihood case W = I/σ² of the matrix B = I + W^½ K W^½
that the Laplace approximation factorises (GPML Algorithms 3.1, 3.2), so the
regression and classification chapters share one algebra. Its eigenvalues are
at least 1, so log|B| ≥ 0 and no entry of L is smaller than one on the
diagonal. In exact arithmetic cond(B) = cond(K + σ²I): the form buys
uniform scaling, not extra accuracy, and needs σ² > 0 (``noise``).
Then (K + σ²I)⁻¹ = B⁻¹/σ² and log|K + σ²I| = log|B| + n log σ².

References: C. E. Rasmussen and C. K. I. Williams, *Gaussian Processes for
Machine Learning* (GPML), 2006, Algorithm 2.1 (p. 19) and eq. 5.9 (p. 114).
"""

import copy
import warnings

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky, solve_triangular
from scipy.linalg.lapack import dpotri
from scipy.optimize import minimize

from kernelref._validation import (
    check_integer,
    check_is_fitted,
    check_n_features,
    check_positive,
    check_samples,
    check_targets,
    evaluate_kernel,
    record_n_features,
)
from kernelref.base import BaseEstimator, RegressorMixin
from kernelref.exceptions import ConvergenceWarning, NonFiniteError

# The classifier lives in its own module; it is re-exported so that both GP
# estimators are found in kernelref.gp, as scikit-learn's are in
# sklearn.gaussian_process.
from kernelref.gp_classify import GaussianProcessClassifier
from kernelref.gp_restarts import best_of_restarts
from kernelref.kernels import RBF, Kernel
from kernelref.kernels.base import restart_bounds

__all__ = [
    "ConvergenceWarning",
    "GaussianProcessClassifier",
    "GaussianProcessRegressor",
    "NotPositiveDefiniteError",
    "factorise",
    "log_marginal_likelihood",
    "lml_gradient",
    "sample_gaussian",
    "sample_prior",
]

LOG_2PI = np.log(2.0 * np.pi)


class NotPositiveDefiniteError(ValueError):
    """K/σ² + I has no Cholesky factor: the kernel is not PSD on the data, or
    σ² is too small to cover the rounding errors of K."""


def factorise(K, noise):
    """L with L Lᵀ = K/σ² + I (label ``gp-stable-B``; GPML Alg. 2.1, line 2).

    Overwrites `K`. Raises `NotPositiveDefiniteError` with the fix when the
    factorisation fails.
    """
    K /= noise
    K.flat[:: len(K) + 1] += 1.0
    try:
        return cholesky(K, lower=True, overwrite_a=True, check_finite=False)
    except LinAlgError:
        raise NotPositiveDefiniteError(
            "K/noise + I is not positive definite (Cholesky failed) with "
            f"noise={noise:g}. Either the kernel is not positive semi-definite on "
            "these inputs (kernelref.kernels.mercer_check reports its smallest Gram "
            "eigenvalue) or noise is too small for the rounding errors of K: "
            "increase noise (e.g. noise=1e-6) or add a White kernel to learn it."
        ) from None


def posterior_weights(L, t, noise):
    """α = (K + σ²I)⁻¹ t = B⁻¹ t / σ² (GPML Alg. 2.1, line 3)."""
    return cho_solve((L, True), t, check_finite=False) / noise


def log_marginal_likelihood(L, alpha, t, noise):
    """log p(t | X) = −½ tᵀα − Σ_i log L_ii − n/2 log σ² − n/2 log 2π (label ``gp-lml``;
    GPML Alg. 2.1, line 8, with log|K + σ²I| = 2 Σ log L_ii + n log σ²).

    Columns of a 2-D `t` are independent outputs: their evidences add.
    """
    n = len(t)
    n_targets = 1 if t.ndim == 1 else t.shape[1]
    data_fit = -0.5 * np.sum(t * alpha)
    complexity = -n_targets * (np.log(np.diag(L)).sum() + 0.5 * n * np.log(noise))
    return float(data_fit + complexity - 0.5 * n_targets * n * LOG_2PI)


def lml_gradient(kernel, X, L, alpha, noise, K=None):
    """∂ log p(t | X)/∂ log θ_j = ½ tr((ααᵀ − (K + σ²I)⁻¹) ∂K/∂ log θ_j)
    (label ``gp-lml-grad``; GPML eq. 5.9).

    The trace of a product of symmetric matrices is the sum of their
    elementwise product, which ``kernel.gradient_dot`` contracts without
    building the (n, n, p) array of all ∂K/∂θ_j.
    """
    n_targets = 1 if alpha.ndim == 1 else alpha.shape[1]
    # ∂K is dense, so every entry of (K + σ²I)⁻¹ is needed: potri forms it from
    # L in a third of the flops of n triangular solves, and cannot fail, since
    # B ⪰ I makes every L_ii ≥ 1. It writes the lower triangle over a copy of L,
    # whose strict upper triangle is zero (scipy's cholesky clears it), so
    # B⁻¹ = P + Pᵀ − diag(P).
    P, _ = dpotri(L, lower=True)
    P *= n_targets / noise  # in place: P is dpotri's own array
    a = alpha.reshape(len(alpha), -1)
    W = a @ a.T
    W -= P
    W -= P.T
    W.flat[:: len(W) + 1] += np.diag(P)
    return 0.5 * kernel.gradient_dot(X, W, K=K)


def sample_gaussian(mean, cov, n_samples, rng):
    """Draws from N(mean, cov) as mean + U Λ^½ z with cov = U Λ Uᵀ, z ~ N(0, I).

    A posterior covariance is often singular to working precision, where a
    Cholesky factor fails; the eigendecomposition does not, and the rounding
    noise in its smallest eigenvalues (|λ| ≲ 1e-16 λ_max) is clipped to zero.
    Returns an array of shape (len(mean), n_samples).
    """
    lam, U = np.linalg.eigh(cov)
    root = U * np.sqrt(np.clip(lam, 0.0, None))
    return mean[:, None] + root @ rng.standard_normal((len(mean), n_samples))


def sample_prior(kernel, X, n_samples=1, random_state=None):
    """Functions f ~ GP(0, k) evaluated at the rows of `X` (label ``gp-prior``):
    an array of shape (len(X), n_samples)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a kernelref.kernels.Kernel; got {kernel!r}.")
    X = check_samples(X, kernel, "X", accept_sparse="kernel")
    K = kernel(X)
    return sample_gaussian(
        np.zeros(X.shape[0]), K, n_samples, np.random.default_rng(random_state)
    )


class GaussianProcessRegressor(RegressorMixin, BaseEstimator):
    """Gaussian-process regression with hyperparameters by ML-II.

    Parameters
    ----------
    kernel : Kernel or None
        The prior covariance; ``None`` means ``1.0 * RBF(1.0)``. Its free
        hyperparameters are learned when ``optimizer`` is set. Add a
        ``White(noise_level)`` kernel to learn the noise variance.
    noise : float > 0
        Noise variance σ² added to the diagonal of K; fixed. The default 1e-10
        is a nearly noise-free fit (scikit-learn's ``alpha``).
    optimizer : "L-BFGS-B" or None
        Maximise the log marginal likelihood over the log-hyperparameters
        inside ``kernel.bounds``; ``None`` keeps the kernel as given.
    n_restarts : int ≥ 0
        Further optimiser starts drawn uniformly inside the log-bounds.
    normalize_y : bool
        Fit the targets standardised to zero mean and unit variance; predictions
        are mapped back.
    random_state : int, Generator or None
        Seed of ``np.random.default_rng`` for the restarts.

    Attributes
    ----------
    kernel_ : Kernel
        The kernel with the learned hyperparameters.
    L_ : ndarray (n, n)
        Lower Cholesky factor of B = K/σ² + I; that of K + σ²I is σ·L_.
    alpha_ : ndarray
        α = (K + σ²I)⁻¹ t.
    log_marginal_likelihood_value_ : float
        log p(t | X) at ``kernel_``.
    X_train_, y_train_ : ndarray
        Training inputs and targets (standardised if ``normalize_y``).
    """

    sparse_input = True

    def __init__(
        self,
        kernel=None,
        noise=1e-10,
        optimizer="L-BFGS-B",
        n_restarts=0,
        normalize_y=False,
        random_state=None,
    ):
        self.kernel = kernel
        self.noise = noise
        self.optimizer = optimizer
        self.n_restarts = n_restarts
        self.normalize_y = normalize_y
        self.random_state = random_state

    # -- validation ---------------------------------------------------------------
    def _prior_kernel(self):
        if self.kernel is None:
            return 1.0 * RBF(1.0)
        if not isinstance(self.kernel, Kernel):
            raise TypeError(
                "kernel must be a kernelref.kernels.Kernel or None; got "
                f"{self.kernel!r}."
            )
        return copy.deepcopy(self.kernel)

    def _validate_params(self):
        kernel = self._prior_kernel()
        noise = check_positive(
            self.noise,
            "noise",
            meaning=(
                "It is the noise variance σ² added to the diagonal; use a small value "
                "such as 1e-10 for noise-free targets."
            ),
        )
        if self.optimizer not in ("L-BFGS-B", None):
            raise ValueError(
                f"optimizer must be 'L-BFGS-B' or None; got {self.optimizer!r}."
            )
        check_integer(self.n_restarts, "n_restarts", low=0)
        if self.optimizer is not None and kernel.theta.size:
            restart_bounds(kernel, self.n_restarts)
        return kernel, noise

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # y may be (n_samples, n_targets)
        return tags

    # -- the evidence -------------------------------------------------------------
    def _evidence(self, kernel, X, t, noise, eval_gradient):
        K = evaluate_kernel(kernel, X)
        # factorise overwrites its argument; the gradient needs K again, and a
        # copy (one more n × n array) is cheaper than evaluating the kernel twice.
        L = factorise(K.copy() if eval_gradient else K, noise)
        alpha = posterior_weights(L, t, noise)
        lml = log_marginal_likelihood(L, alpha, t, noise)
        if not eval_gradient:
            return lml
        return lml, lml_gradient(kernel, X, L, alpha, noise, K=K)

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """log p(t | X, θ) (label ``gp-lml``) and, with ``eval_gradient``, its
        gradient with respect to log θ (label ``gp-lml-grad``).

        ``theta`` is on the log scale, as ``kernel_.theta``; ``None`` means the
        fitted hyperparameters.
        """
        check_is_fitted(self, "kernel_")
        if theta is None:
            if not eval_gradient:
                return self.log_marginal_likelihood_value_
            theta = self.kernel_.theta
        theta = np.asarray(theta, dtype=float)
        if theta.shape != self.kernel_.theta.shape or not np.isfinite(theta).all():
            raise ValueError(
                f"theta must be {self.kernel_.theta.size} finite log-hyperparameters "
                f"(the layout of kernel_.theta); got {theta!r}."
            )
        kernel = self.kernel_.clone_with_theta(theta)
        return self._evidence(
            kernel, self.X_train_, self.y_train_, self._noise, eval_gradient
        )

    def _maximise_evidence(self, kernel, X, t, noise):
        """ML-II: L-BFGS-B on −log p(t | X, θ) over the log-bounds, from the
        kernel's θ and from ``n_restarts`` uniform draws inside the bounds
        (``best_of_restarts``)."""
        failed = []

        def objective(theta):
            try:
                lml, grad = self._evidence(
                    kernel.clone_with_theta(theta), X, t, noise, True
                )
            except NotPositiveDefiniteError:
                # a step into an indefinite region: +∞ makes the line search back off
                failed.append(theta)
                return np.inf, np.zeros_like(theta)
            if not (np.isfinite(lml) and np.isfinite(grad).all()):
                raise NonFiniteError(
                    f"the log marginal likelihood or its gradient is not finite at "
                    f"log-hyperparameters {np.round(theta, 4).tolist()} of {kernel!r}; "
                    "scale X and y, or narrow the kernel's bounds."
                )
            return -lml, -grad

        def local_minimum(fun, theta0, bounds):
            failed.clear()
            result = minimize(fun, theta0, method="L-BFGS-B", jac=True, bounds=bounds)
            if not result.success:
                warnings.warn(
                    f"L-BFGS-B stopped without converging: {result.message}",
                    ConvergenceWarning,
                    stacklevel=5,
                )
            elif failed and np.array_equal(result.x, theta0):
                # Every trial step failed to factorise, and the +∞ they returned
                # made L-BFGS-B call its start optimal: that is not a maximum.
                warnings.warn(
                    "L-BFGS-B did not move from its start "
                    f"{np.round(theta0, 4).tolist()}: K/noise + I failed to factorise "
                    f"at {len(failed)} trial point(s). Increase noise, add a White "
                    "kernel, or centre and scale X.",
                    ConvergenceWarning,
                    stacklevel=5,
                )
            return result.x, result.fun

        # The starting point is the user's kernel: if it cannot be factorised,
        # say so now instead of letting the optimiser wander.
        self._evidence(kernel, X, t, noise, False)
        theta, _ = best_of_restarts(
            local_minimum,
            objective,
            kernel.theta,
            kernel.bounds,
            self.n_restarts,
            self.random_state,
        )
        return theta

    # -- fitting and prediction ---------------------------------------------------
    def fit(self, X, y):
        """Learn the hyperparameters (if ``optimizer``), then L_ and α_ at them."""
        kernel, noise = self._validate_params()
        X = check_samples(X, kernel, "X", accept_sparse="kernel")
        t = check_targets(y, X.shape[0], "y")
        if self.normalize_y:
            y_mean, std = t.mean(axis=0), t.std(axis=0)
            y_std = np.where(std > 0, std, 1.0)  # a constant target stays as it is
        else:
            y_mean, y_std = np.zeros(t.shape[1:]), np.ones(t.shape[1:])
        t = (t - y_mean) / y_std
        if self.optimizer is not None and kernel.theta.size:
            kernel = kernel.clone_with_theta(
                self._maximise_evidence(kernel, X, t, noise)
            )
        L = factorise(evaluate_kernel(kernel, X), noise)
        alpha = posterior_weights(L, t, noise)
        # fitted attributes only once everything has been computed
        self.kernel_, self._noise, self.L_, self.alpha_ = kernel, noise, L, alpha
        self._y_mean, self._y_std = y_mean, y_std
        self.log_marginal_likelihood_value_ = log_marginal_likelihood(
            L, alpha, t, noise
        )
        self.X_train_, self.y_train_ = X.copy(), t
        record_n_features(self, X)
        return self

    def predict(self, X, return_std=False, return_cov=False):
        """Predictive mean (label ``gp-predictive-mean``; GPML Alg. 2.1, line 4)
        and, on request, standard deviation or covariance of f(x)
        (label ``gp-predictive-var``; lines 5–6).

        Before ``fit`` these are the prior's: mean 0 and covariance k.
        """
        if return_std and return_cov:
            raise ValueError(
                "ask for return_std or return_cov, not both; "
                "the standard deviation is the root of the covariance's diagonal."
            )
        fitted = hasattr(self, "kernel_")
        kernel = self.kernel_ if fitted else self._prior_kernel()
        X = check_samples(X, kernel, "X", accept_sparse="kernel")
        if not fitted:
            mean = np.zeros(X.shape[0])
            if return_cov:
                return mean, kernel(X)
            return (mean, np.sqrt(kernel.diag(X))) if return_std else mean
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        K_star = evaluate_kernel(self.kernel_, X, self.X_train_)
        mean = self._y_mean + self._y_std * (K_star @ self.alpha_)
        if not (return_std or return_cov):
            return mean
        # k*ᵀ(K + σ²I)⁻¹k* = ‖v‖² with v = L⁻¹k*/σ, since K + σ²I = σ² L Lᵀ
        V = solve_triangular(self.L_, K_star.T, lower=True, check_finite=False)
        V /= np.sqrt(self._noise)
        scale = self._y_std**2
        if return_cov:
            cov = self.kernel_(X) - V.T @ V
            return mean, cov * scale if mean.ndim == 1 else cov[:, :, None] * scale
        var = self.kernel_.diag(X) - np.einsum("ij,ij->j", V, V)
        # at noise-free training points the variance is zero up to rounding,
        # which can leave it a few ulps below zero
        np.clip(var, 0.0, None, out=var)
        std = np.sqrt(var * scale if mean.ndim == 1 else var[:, None] * scale)
        return mean, std

    def sample_y(self, X, n_samples=1, random_state=0):
        """Functions drawn from the posterior (the prior before ``fit``) at the
        rows of `X`: shape (n, n_samples), or (n, n_targets, n_samples)."""
        mean, cov = self.predict(X, return_cov=True)
        rng = np.random.default_rng(random_state)
        if mean.ndim == 1:
            return sample_gaussian(mean, cov, n_samples, rng)
        return np.stack(
            [
                sample_gaussian(mean[:, j], cov[:, :, j], n_samples, rng)
                for j in range(mean.shape[1])
            ],
            axis=1,
        )
