"""Multiclass Gaussian-process classification: the softmax likelihood and the
Laplace approximation (GPML §3.5, Algorithms 3.3 and 3.4).

One latent function per class, f_c ~ GP(0, k), independent a priori, and

    p(y_i = c | f_i) = π_i^c = exp(f_i^c) / Σ_c′ exp(f_i^c′)   (label ``gpcm-softmax``).

The CN latents are stacked class by class, f = (f¹; …; f^C). The prior
covariance is block diagonal, K = diag(K_1, …, K_C) (here one kernel, so every
K_c is the same n × n matrix), and the negative Hessian of log p(y | f) is

    W = D − ΠΠᵀ,  D = diag(π),  Π = (D_1; …; D_C)              (label ``gpcm-W``),

block diagonal plus a rank-n term. Everything below uses that structure, so a
Newton step costs C + 1 Cholesky factorisations of n × n matrices instead of
one of CN × CN:

    (K + W⁻¹)⁻¹ = E − ER(Σ_c E_c)⁻¹RᵀE,  E_c = (K_c + D_c⁻¹)⁻¹  (label ``gpcm-inverse``)

with E = diag(E_1, …, E_C) and R = (I_n; …; I_n), the n × n blocks stacked.
(K + W⁻¹)⁻¹ stands for W(I + KW)⁻¹, which exists although W is singular.

Reference: C. E. Rasmussen and C. K. I. Williams, *Gaussian Processes for
Machine Learning* (GPML), MIT Press 2006, §3.5 and §5.5.
"""

import numbers
from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky, solve_triangular
from scipy.special import log_softmax, logsumexp, softmax

from kernelref._validation import (
    check_classification_targets,
    check_integer,
    check_is_fitted,
    check_n_features,
    check_samples,
    record_n_features,
)
from kernelref.base import BaseEstimator, ClassifierMixin
from kernelref.gp_restarts import maximise_evidence
from kernelref.kernels import RBF, Kernel
from kernelref.kernels.base import restart_bounds
from kernelref.laplace import TOL, damped_newton

__all__ = [
    "SoftmaxGaussianProcessClassifier",
    "SoftmaxMode",
    "latent_draws",
    "monte_carlo_log_probabilities",
    "monte_carlo_probabilities",
    "softmax_evidence_gradient",
    "softmax_laplace_mode",
    "softmax_predictive",
]


@dataclass
class SoftmaxMode:
    """The Laplace approximation at the mode (Algorithm 3.3's quantities).

    Arrays are (C, n), one row per class: ``f`` the mode f̂, ``a`` = K⁻¹f̂
    (= y − π̂ at the mode), ``pi`` = π̂. ``E`` holds the C matrices E_c of
    (gpcm-inverse), (C, n, n), and ``M`` the lower Cholesky factor of Σ_c E_c.
    """

    f: np.ndarray
    a: np.ndarray
    pi: np.ndarray
    E: np.ndarray
    M: np.ndarray
    log_evidence: float
    n_iter: int


def _cholesky(A, what):
    try:
        return cholesky(A, lower=True, check_finite=False)
    except LinAlgError:
        raise ValueError(
            f"{what} is not positive definite, so the kernel matrix K is not positive "
            "semi-definite on these inputs; use a positive semi-definite kernel (see "
            "kernelref.kernels.mercer_check) or add White(noise_level=1e-8) to it."
        ) from None


def class_factors(K, pi):
    """E_c = D_c^½ B_c⁻¹ D_c^½ with B_c = I + D_c^½KD_c^½ = L_cL_cᵀ, z_c = Σ_i log
    (L_c)_ii, and M = cholesky(Σ_c E_c), as in GPML Algorithm 3.3 (label
    ``gpcm-inverse``). E_c = (K + D_c⁻¹)⁻¹, formed without inverting D_c."""
    C, n = pi.shape
    E = np.empty((C, n, n))
    z = np.empty(C)
    for c in range(C):
        d_sr = np.sqrt(pi[c])
        B = d_sr[:, None] * K * d_sr[None, :]
        B.flat[:: n + 1] += 1.0
        L = _cholesky(B, "I + D_c^½KD_c^½")
        E[c] = d_sr[:, None] * cho_solve((L, True), np.diag(d_sr), check_finite=False)
        z[c] = np.sum(np.log(np.diag(L)))
    M = _cholesky(E.sum(axis=0), "Σ_c E_c")
    return E, z, M


def curvature_times(pi, F):
    """W f = Df − ΠΠᵀf for (C, n) arrays (label ``gpcm-W``): per point,
    π ∘ f − π (πᵀf)."""
    return pi * F - pi * np.sum(pi * F, axis=0)


def psi(K, A, Y):
    """Ψ = −½ fᵀK⁻¹f + log p(y | f) at f = Ka (label ``gpcm-psi``), with
    log p(y | f) = Σ y ∘ f − Σ_i log Σ_c exp f_i^c (label ``gpcm-softmax``)."""
    F = A @ K
    return float(-0.5 * np.sum(A * F) + np.sum(Y * F) - np.sum(logsumexp(F, axis=0)))


def newton_step(K, A, Y):
    """The Newton iterate a_new with f_new = K a_new (label ``gpcm-newton``),
    the body of GPML Algorithm 3.3's loop.

    f_new = (K⁻¹ + W)⁻¹b, b = Wf + y − π, is K(b − (K + W⁻¹)⁻¹Kb), and with
    (gpcm-inverse) a_new = b − c + ER(Σ_c E_c)⁻¹Rᵀc, c = EKb.
    """
    F = A @ K
    pi = softmax(F, axis=0)
    E, _, M = class_factors(K, pi)
    b = curvature_times(pi, F) + Y - pi
    c = np.einsum("cij,cj->ci", E, b @ K)  # E K b, K symmetric
    q = cho_solve((M, True), c.sum(axis=0), check_finite=False)  # (Σ E_c)⁻¹Rᵀc
    return b - c + E @ q


def softmax_laplace_mode(K, Y, *, max_iter=100, tol=TOL):
    """The mode f̂ of p(f | X, y) from f = 0, and the approximate log evidence
    (labels ``gpcm-newton``, ``gpcm-evidence``): GPML Algorithm 3.3, with the
    step halving of ``kernelref.laplace.damped_newton`` on Ψ(a).

    ``Y`` is the (C, n) one-hot matrix of the labels.

    log q(y | X) = Ψ(f̂) − ½ log|I + KW|, and the determinant splits by the
    structure of W into Π_c |B_c| times |Σ_c E_c| (because Σ_c D_c = I), so
    ½ log|I + KW| = Σ_c z_c + Σ_i log M_ii; the second sum is not small (the
    tests compare with a dense determinant).
    """
    C, n = Y.shape
    result = damped_newton(
        lambda a: psi(K, a.reshape(C, n), Y),
        lambda a: newton_step(K, a.reshape(C, n), Y).ravel(),
        np.zeros(C * n),
        tol=tol,
        max_iter=max_iter,
    )
    A = result.x.reshape(C, n)
    F = A @ K
    pi = softmax(F, axis=0)
    E, z, M = class_factors(K, pi)
    log_q = result.value - z.sum() - np.sum(np.log(np.diag(M)))
    return SoftmaxMode(F, A, pi, E, M, float(log_q), result.n_iter)


def _posterior_blocks(K, mode):
    """S_i[c, c′] = cov(f_i^c, f_i^c′) under N(f̂, (K⁻¹ + W)⁻¹), shape (n, C, C).

    (K⁻¹ + W)⁻¹ = K − K(K + W⁻¹)⁻¹K; by (gpcm-inverse) its (c, c′) block has the
    diagonal δ_cc′(diag K − diag(KE_cK)) + colsum(G_c ∘ G_c′), G_c = M⁻¹E_cK.
    """
    EK = mode.E @ K
    G = np.stack([solve_triangular(mode.M, EKc, lower=True) for EKc in EK])
    S = np.einsum("cij,dij->jcd", G, G)
    own = np.diag(K)[None, :] - np.einsum("ij,cij->cj", K, EK)
    S[:, np.arange(len(G)), np.arange(len(G))] += own.T
    return S


def softmax_evidence_gradient(kernel, X, K, Y, mode):
    """∂ log q(y | X, θ)/∂log θ_j for a kernel shared by the classes (label
    ``gpcm-evidence-gradient``): the multiclass form of GPML Algorithm 5.1.

    With R̃ = (K + W⁻¹)⁻¹ of (gpcm-inverse), the explicit term is
    Σ_c ½a_cᵀ∂K a_c − ½tr(R̃_cc ∂K). The implicit term runs through the mode:
    ∂f̂/∂θ_j = (I − KR̃) ∂K (y − π̂) and ∂log q/∂f̂_i^c = s_i^c =
    −½ tr(S_i ∂W_i/∂f_i^c), with S_i the posterior covariance of point i's C
    latents and W_i = diag(π_i) − π_iπ_iᵀ. Both are contractions Σ_ab M_ab ∂K_ab,
    M = Σ_c ½(a_ca_cᵀ − R̃_cc) + u_c(y_c − π̂_c)ᵀ with u = (I − R̃K)s.
    """
    pi, E, M_chol = mode.pi, mode.E, mode.M
    C, n = pi.shape
    H = np.stack([solve_triangular(M_chol, Ec, lower=True) for Ec in E])  # M⁻¹E_c
    R_cc = E - np.einsum("cki,ckj->cij", H, H)  # R̃_cc = E_c − E_c(ΣE)⁻¹E_c
    # ∂W_i[c′, c″]/∂f_i^c with ∂π^c′/∂f^c = π^c′(δ_c′c − π^c); P[i, c′, c] is it.
    P = pi.T[:, :, None] * (np.eye(C)[None] - pi.T[:, None, :])
    dW = (
        np.einsum("ab,iac->iabc", np.eye(C), P)
        - np.einsum("iac,ib->iabc", P, pi.T)
        - np.einsum("ia,ibc->iabc", pi.T, P)
    )
    s = -0.5 * np.einsum("iab,iabc->ci", _posterior_blocks(K, mode), dW)
    Ks = s @ K
    q = cho_solve((M_chol, True), np.einsum("cij,cj->i", E, Ks), check_finite=False)
    u = s - np.einsum("cij,cj->ci", E, Ks) + E @ q  # (I − R̃K)s
    W = 0.5 * (mode.a.T @ mode.a - R_cc.sum(axis=0)) + u.T @ (Y - pi)
    return np.asarray(kernel.gradient_dot(X, W), dtype=float)


def softmax_predictive(K_star, k_star_star, Y, mode):
    """Mean (m, C) and covariance (m, C, C) of the test latents f_*: GPML
    Algorithm 3.4 (label ``gpcm-predictive``).

    μ^c = k_*ᵀ(y_c − π̂_c) and Σ = diag(k(x_*, x_*)) − Q_*ᵀ(K + W⁻¹)⁻¹Q_*,
    Q_* = diag(k_*, …, k_*); with (gpcm-inverse) the (c, c′) entry is
    δ_cc′(k_** − k_*ᵀE_ck_*) + (M⁻¹E_ck_*)ᵀ(M⁻¹E_c′k_*).
    """
    mean = K_star @ (Y - mode.pi).T
    B = mode.E @ K_star.T  # (C, n, m): E_c k_*
    V = np.stack([solve_triangular(mode.M, Bc, lower=True) for Bc in B])
    cov = np.einsum("cim,dim->mcd", V, V)
    own = k_star_star[None, :] - np.einsum("mi,cim->cm", K_star, B)
    C = len(B)
    cov[:, np.arange(C), np.arange(C)] += own.T
    return mean, cov


def latent_draws(mean, cov, n_samples, rng):
    """`n_samples` draws of the test latents f_* ~ N(mean, cov), shape
    (n_samples, m, C), as GPML Algorithm 3.4 draws them."""
    m, C = mean.shape
    # cov may be singular to rounding (the latents of a point are coupled): the
    # eigen-square-root with clipped eigenvalues is a factor in every case.
    values, vectors = np.linalg.eigh(cov)
    root = vectors * np.sqrt(np.maximum(values, 0.0))[:, None, :]
    z = rng.standard_normal((n_samples, m, C))
    return mean[None] + np.einsum("mcd,smd->smc", root, z)


def monte_carlo_probabilities(mean, cov, n_samples, rng):
    """E[softmax(f_*)] under N(mean, cov) by averaging over `n_samples` draws,
    as GPML Algorithm 3.4 ends. Each draw's probabilities sum to one, so
    their average does too."""
    return softmax(latent_draws(mean, cov, n_samples, rng), axis=2).mean(axis=0)


def monte_carlo_log_probabilities(mean, cov, n_samples, rng):
    """log E[softmax(f_*)] from the same draws as ``monte_carlo_probabilities``
    (the same `rng` state gives the same draws), averaged in log space:
    log((1/S) Σ_s π_s) = logsumexp_s(log π_s) − log S, with log π_s the log-softmax
    of draw s. Finite where every π_s, and so their average, underflows to 0."""
    log_pi = log_softmax(latent_draws(mean, cov, n_samples, rng), axis=2)
    return logsumexp(log_pi, axis=0) - np.log(n_samples)


def _check_method(method):
    """The predictive probabilities' ``method``: 'monte_carlo' or 'moderated'."""
    if method not in ("monte_carlo", "moderated"):
        raise ValueError(
            f"method must be 'monte_carlo' or 'moderated'; got {method!r}."
        )


class SoftmaxGaussianProcessClassifier(ClassifierMixin, BaseEstimator):
    """Multiclass Gaussian-process classification with the softmax likelihood
    and the Laplace approximation (GPML Algorithms 3.3, 3.4), one latent
    function per class with a shared kernel, and the kernel's hyperparameters
    learned by maximising the approximate evidence.

    Parameters
    ----------
    kernel : Kernel or None
        The prior covariance of every f_c; ``None`` means ``1.0 * RBF(1.0)``.
    optimizer : "L-BFGS-B" or None
        Learn log θ within ``kernel.bounds`` with the gradient
        (gpcm-evidence-gradient), or keep the kernel as given.
    n_restarts : int ≥ 0
        Extra optimiser runs from log θ drawn uniformly inside the log bounds.
    max_iter_predict : int ≥ 1
        The limit on Newton steps for the mode.
    n_samples : int ≥ 1
        Monte-Carlo draws per test point for ``predict_proba`` (Algorithm 3.4).
    random_state : None, int or numpy Generator
        Seeds the restarts and the Monte-Carlo draws; with an int, predictions
        are reproducible.

    Attributes
    ----------
    classes_, kernel_, log_marginal_likelihood_value_, n_iter_
    f_hat_ : ndarray (n_samples, n_classes)
        The mode f̂, one column per class.
    pi_ : ndarray (n_samples, n_classes)
        π̂, the softmax of f̂.
    """

    sparse_input = True

    def __init__(
        self,
        kernel=None,
        optimizer="L-BFGS-B",
        n_restarts=0,
        max_iter_predict=100,
        n_samples=1000,
        random_state=0,
    ):
        self.kernel = kernel
        self.optimizer = optimizer
        self.n_restarts = n_restarts
        self.max_iter_predict = max_iter_predict
        self.n_samples = n_samples
        self.random_state = random_state

    def _validate_params(self):
        kernel = 1.0 * RBF(1.0) if self.kernel is None else self.kernel
        if not isinstance(kernel, Kernel):
            raise TypeError(
                "kernel must be a kernelref.kernels.Kernel or None; got "
                f"{self.kernel!r}. Build one, e.g. 1.0 * RBF(gamma=0.5)."
            )
        if self.optimizer not in (None, "L-BFGS-B"):
            raise ValueError(
                f"optimizer must be 'L-BFGS-B' or None; got {self.optimizer!r}."
            )
        check_integer(self.n_restarts, "n_restarts", low=0)
        if self.optimizer is not None and kernel.theta.size:
            restart_bounds(kernel, self.n_restarts)
        check_integer(self.max_iter_predict, "max_iter_predict")
        check_integer(self.n_samples, "n_samples")
        if not (
            self.random_state is None
            or isinstance(self.random_state, np.random.Generator)
            or (
                isinstance(self.random_state, numbers.Integral)
                and not isinstance(self.random_state, bool)
            )
        ):
            raise ValueError(
                "random_state must be None, an int or a numpy Generator; "
                f"got {self.random_state!r}."
            )
        return kernel

    def _evidence(self, kernel, X, Y, eval_gradient):
        K = kernel(X)
        mode = softmax_laplace_mode(K, Y, max_iter=self.max_iter_predict)
        if not eval_gradient:
            return mode.log_evidence, mode
        return mode.log_evidence, softmax_evidence_gradient(kernel, X, K, Y, mode)

    def _learn_theta(self, kernel, X, Y):
        """Maximise log q(y | X, θ) (label ``gpcm-evidence``) over log θ within the
        log bounds, from the kernel's θ and ``n_restarts`` uniform draws
        (``best_of_restarts``)."""

        return maximise_evidence(
            lambda k: self._evidence(k, X, Y, True),
            kernel,
            self.optimizer,  # 'L-BFGS-B': lbfgs
            self.n_restarts,
            self.random_state,
        )

    def fit(self, X, y):
        """Find the hyperparameters (with an optimizer) and the mode for `X`, `y`."""
        kernel = self._validate_params()
        X = check_samples(X, kernel, "X", accept_sparse="kernel")
        self.classes_, y_index = check_classification_targets(y, X.shape[0], "y")
        Y = (np.arange(len(self.classes_))[:, None] == y_index[None, :]).astype(float)
        if self.optimizer is not None and len(kernel.theta):
            kernel = self._learn_theta(kernel, X, Y)
        else:
            kernel = kernel.clone_with_theta(kernel.theta)
        value, mode = self._evidence(kernel, X, Y, eval_gradient=False)
        self.X_fit_ = X
        record_n_features(self, X)
        self.kernel_ = kernel
        self.f_hat_, self.pi_ = mode.f.T, mode.pi.T
        self.n_iter_ = mode.n_iter
        self.log_marginal_likelihood_value_ = value
        self._mode, self._Y = mode, Y
        return self

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """log q(y | X, θ) (label ``gpcm-evidence``) and, with ``eval_gradient``,
        its gradient with respect to log θ (label ``gpcm-evidence-gradient``)."""
        check_is_fitted(self, "log_marginal_likelihood_value_")
        if theta is None and not eval_gradient:
            return self.log_marginal_likelihood_value_
        kernel = self.kernel_ if theta is None else self.kernel_.clone_with_theta(theta)
        value, gradient = self._evidence(kernel, self.X_fit_, self._Y, eval_gradient)
        return (value, gradient) if eval_gradient else value

    def latent_predictive(self, X):
        """Mean (m, C) and covariance (m, C, C) of the latents at `X`
        (gpcm-predictive)."""
        check_is_fitted(self, "log_marginal_likelihood_value_")
        X = check_samples(X, self.kernel_, "X", accept_sparse="kernel")
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        K_star = self.kernel_(X, self.X_fit_)
        return softmax_predictive(K_star, self.kernel_.diag(X), self._Y, self._mode)

    def decision_function(self, X):
        """The latent predictive means E[f_*^c | y], one column per class."""
        return self.latent_predictive(X)[0]

    def predict_proba(self, X, method="monte_carlo"):
        """Class probabilities, columns in the order of ``classes_``.

        ``"monte_carlo"`` averages the softmax over ``n_samples`` draws of the
        latents (Algorithm 3.4); ``"moderated"`` is the deterministic
        approximation ``kernelref.rvm.softmax.moderated_softmax``.
        """
        _check_method(method)
        mean, cov = self.latent_predictive(X)
        if method == "moderated":
            # imported here: the RVM package is not needed for the default method
            from kernelref.rvm.softmax import moderated_softmax

            return moderated_softmax(mean, cov)
        rng = np.random.default_rng(self.random_state)
        return monte_carlo_probabilities(mean, cov, self.n_samples, rng)

    def predict_log_proba(self, X, method="monte_carlo"):
        """log of ``predict_proba`` (same ``method``, same draws). "monte_carlo"
        averages the draws in log space (``monte_carlo_log_probabilities``), so a
        probability that underflows to 0 keeps its log; so does "moderated"
        (``kernelref.rvm.softmax.moderated_log_softmax``)."""
        _check_method(method)
        mean, cov = self.latent_predictive(X)
        if method == "moderated":
            from kernelref.rvm.softmax import moderated_log_softmax

            return moderated_log_softmax(mean, cov)
        rng = np.random.default_rng(self.random_state)
        return monte_carlo_log_probabilities(mean, cov, self.n_samples, rng)

    def predict(self, X):
        """The most probable class by the Monte-Carlo probabilities."""
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
