"""Gaussian-process classification by the Laplace approximation.

A latent function f ~ GP(0, k) passes through the logistic sigmoid,
p(t = 1 | f) = σ(f). The posterior over the training latents f is replaced by
a Gaussian at its mode f̂ with covariance (K⁻¹ + W)⁻¹ (label ``gpc-laplace``),
found by Newton's method (``gpc-newton-step``) in the stable form of GPML
Algorithm 3.1 (``gpc-B-form``); predictions follow Algorithm 3.2
(``gpc-predictive``, ``gpc-probit``), and the approximate log evidence and its
gradient Algorithms 3.1 and 5.1 (``gpc-evidence``, ``gpc-evidence-gradient``).
The likelihood pieces and the damped Newton loop live in ``kernelref.laplace``.

Reference: C. E. Rasmussen and C. K. I. Williams, *Gaussian Processes for
Machine Learning* (GPML), MIT Press 2006, chapters 3 and 5.
"""

import numbers
from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky, solve_triangular
from scipy.special import logsumexp

from kernelref._validation import (
    check_binary_labels,
    check_classification_targets,
    check_integer,
    check_is_fitted,
    check_n_features,
    check_samples,
    evaluate_kernel,
    record_n_features,
)
from kernelref.base import BaseEstimator, ClassifierMixin, restores_on_error
from kernelref.gp_restarts import maximise_evidence
from kernelref.kernels import RBF, Kernel
from kernelref.kernels.base import restart_bounds
from kernelref.laplace import (
    TOL,
    damped_newton,
    likelihood_curvature,
    log_likelihood,
    log_likelihood_gradient,
    log_likelihood_third_derivative,
    sigmoid,
)

__all__ = [
    "GaussianProcessClassifier",
    "LaplaceMode",
    "laplace_mode",
    "latent_predictive",
    "log_evidence_gradient",
    "probit_log_probability",
    "probit_probability",
    "quadrature_probability",
]

#: The trapezoid rule of ``quadrature_probability`` integrates over |x| ≤ 9
#: standard deviations; the Gaussian mass outside is 2Φ(−9) ≈ 2e-19.
QUADRATURE_HALF_WIDTH = 9.0
#: Entries of the (points × nodes) array made at once, to bound memory.
QUADRATURE_BLOCK = 2**20


@dataclass
class LaplaceMode:
    """The Laplace approximation at the mode (GPML Algorithm 3.1's outputs).

    ``f`` is the mode f̂, ``a`` = K⁻¹f̂, ``pi`` = σ(f̂), ``W_sr`` = W^½ and ``L``
    the lower Cholesky factor of B = I + W^½KW^½, all at f̂.
    """

    f: np.ndarray
    a: np.ndarray
    pi: np.ndarray
    W_sr: np.ndarray
    L: np.ndarray
    log_evidence: float
    n_iter: int


def _cholesky_B(K, W_sr):
    """L = cholesky(I + W^½KW^½) (Algorithm 3.1, line 5).

    B's eigenvalues are at least 1 when K is positive semi-definite, because
    W ≤ ¼; this is why the B form is stable where K⁻¹ + W is not.
    """
    B = W_sr[:, None] * K * W_sr[None, :]
    B.flat[:: len(B) + 1] += 1.0
    try:
        return cholesky(B, lower=True, check_finite=False)
    except LinAlgError:
        raise ValueError(
            "I + W^½KW^½ is not positive definite, so the kernel matrix K is not "
            "positive semi-definite on these inputs; use a positive semi-definite "
            "kernel (see kernelref.kernels.mercer_check) or add a small jitter to K's "
            "diagonal."
        ) from None


def laplace_mode(K, t, *, max_iter=100, tol=TOL):
    """The mode f̂ of p(f | X, t) and the approximate log evidence: GPML
    Algorithm 3.1 (labels ``gpc-newton-step``, ``gpc-B-form``, ``gpc-evidence``),
    from the deterministic start f = 0.

    Newton's update f_new = (K⁻¹ + W)⁻¹(Wf + ∇log p(t|f)) is written as
    f_new = Ka with a = b − W^½B⁻¹W^½Kb, b = Wf + ∇log p, so only B is
    factorised. Steps are taken in a (f = Ka is linear in a) by
    ``kernelref.laplace.damped_newton``, which halves any step that would lower
    Ψ(f) = log p(t | f) − ½ fᵀK⁻¹f = log p(t | Ka) − ½ aᵀKa.
    """
    t = check_binary_labels(t, "t")

    def objective(a):  # Algorithm 3.1, line 10, first two terms
        f = K @ a
        return -0.5 * a @ f + log_likelihood(f, t)

    def newton_step(a):
        f = K @ a
        W = likelihood_curvature(f)  # line 4
        W_sr = np.sqrt(W)
        L = _cholesky_B(K, W_sr)  # line 5
        b = W * f + log_likelihood_gradient(f, t)  # line 6
        return b - W_sr * cho_solve(
            (L, True), W_sr * (K @ b), check_finite=False
        )  # line 7

    result = damped_newton(
        objective, newton_step, np.zeros(len(t)), tol=tol, max_iter=max_iter
    )
    a = result.x
    f = K @ a  # line 8
    W_sr = np.sqrt(likelihood_curvature(f))
    L = _cholesky_B(K, W_sr)
    log_q = result.value - np.sum(
        np.log(np.diag(L))
    )  # line 10: −½aᵀf + log p(t|f) − Σ log L_ii
    return LaplaceMode(
        f=f,
        a=a,
        pi=sigmoid(f),
        W_sr=W_sr,
        L=L,
        log_evidence=float(log_q),
        n_iter=result.n_iter,
    )


def log_evidence_gradient(kernel, X, K, t, mode):
    """∂ log q(t | X, θ)/∂log θ_j for every hyperparameter: GPML Algorithm 5.1
    (label ``gpc-evidence-gradient``).

    The explicit term is ½aᵀ(∂K)a − ½tr(R ∂K) with R = W^½B⁻¹W^½. The implicit
    term runs through the mode: ∂f̂/∂θ_j = (I − KR) ∂K ∇log p (GPML eq. 5.24)
    times ∂log q/∂f̂ = −½ ∂log|B|/∂f̂ = −½ diag((K⁻¹ + W)⁻¹) ∂W/∂f̂. Since
    ∂W/∂f̂ = −∇³log p, the factor is +½ in front of the third derivative
    (``gpc-likelihood-derivatives``) and −½ in front of ∂W/∂f̂ (scikit-learn's form);
    mixing
    the two flips the term, and a finite-difference check tells them apart.

    Both terms are contractions Σ_ab M_ab ∂K_ab with
    M = ½(aaᵀ − R) + ((I − RK)s₂)(∇log p)ᵀ, so the kernel computes them by
    ``gradient_dot`` in O(n²) memory, never an n×n×p array.
    """
    t = check_binary_labels(t, "t")
    W_sr, L = mode.W_sr, mode.L
    R = W_sr[:, None] * cho_solve(
        (L, True), np.diag(W_sr), check_finite=False
    )  # line 7
    C = solve_triangular(L, W_sr[:, None] * K, lower=True, check_finite=False)  # line 8
    posterior_variance = np.diag(K) - np.einsum("ij,ij->j", C, C)  # diag((K⁻¹+W)⁻¹)
    s2 = (
        0.5 * posterior_variance * log_likelihood_third_derivative(mode.f)
    )  # line 9: +½∇³log p
    u = s2 - R @ (K @ s2)  # (I − RK)s₂
    M = 0.5 * (np.outer(mode.a, mode.a) - R) + np.outer(u, t - mode.pi)  # lines 12–15
    return np.asarray(kernel.gradient_dot(X, M), dtype=float)


def laplace_covariance(K, mode):
    """(K⁻¹ + W)⁻¹ = K − KW^½B⁻¹W^½K at the mode (label ``gpc-laplace``), by a
    triangular solve; used to check the approximation against the Hessian."""
    C = solve_triangular(mode.L, mode.W_sr[:, None] * K, lower=True, check_finite=False)
    return K - C.T @ C


def latent_predictive(K_star, k_star_star, t, mode):
    """Mean and variance of the latent f* at test inputs: GPML Algorithm 3.2,
    lines 4–6 (label ``gpc-predictive``).

    ``K_star`` is k(X*, X) of shape (m, n), ``k_star_star`` the prior variances
    k(x*, x*). The mean is k*ᵀ∇log p(t | f̂); the variance
    k(x*, x*) − k*ᵀ(K + W⁻¹)⁻¹k* is k(x*, x*) − vᵀv with v = L⁻¹W^½k*.
    """
    mean = K_star @ (t - mode.pi)  # line 4
    v = solve_triangular(
        mode.L, mode.W_sr[:, None] * K_star.T, lower=True, check_finite=False
    )  # line 5
    variance = k_star_star - np.einsum("ij,ij->j", v, v)  # line 6
    return mean, np.maximum(variance, 0.0)


def probit_probability(mean, variance):
    """∫σ(z)N(z | μ, s²)dz ≈ σ(κ(s²)μ), κ(s²) = (1 + πs²/8)^(−½) (label ``gpc-probit``).

    σ(z) is replaced by the probit Φ(λz) with λ² = π/8 (equal slopes at 0), for
    which the integral is exact (PRML eqs. 4.152–4.155).
    """
    kappa = 1.0 / np.sqrt(1.0 + np.pi * variance / 8.0)
    return sigmoid(kappa * mean)


def probit_log_probability(mean, variance):
    """log σ(κ(s²)μ) of (label ``gpc-probit``) as −log(1 + exp(−κμ)), accurate where
    σ rounds to 0 or 1 (``logaddexp``, as the log-sigmoid everywhere here)."""
    kappa = 1.0 / np.sqrt(1.0 + np.pi * variance / 8.0)
    return -np.logaddexp(0.0, -kappa * mean)


def quadrature_probability(mean, variance):
    """∫σ(z)N(z | μ, s²)dz by numerical quadrature (the integral of ``gpc-probit``).

    With z = μ + s x the integral is ∫σ(μ + s x)φ(x)dx, φ the standard normal
    density. Gauss–Hermite quadrature, the textbook choice, converges slowly
    here: σ(μ + s x) has poles at x = (±iπ − μ)/s, only π/s from the real
    axis, so its error at 64 nodes is 1e-7 for s = 3 but 3e-3 for s = 10. The
    trapezoid rule with step h converges like exp(−2πd/h) for an integrand
    analytic in the strip |Im x| < d; taking h = min(¼, π/(6s)) makes that
    exp(−12π) ≈ 4e-17 whatever s is, at 2·9/h + 1 nodes.
    """
    mean, variance = np.broadcast_arrays(
        np.asarray(mean, dtype=float), np.asarray(variance, dtype=float)
    )
    s = np.sqrt(variance).ravel()
    mu = mean.ravel()
    h = min(0.25, np.pi / (6.0 * max(float(s.max(initial=0.0)), 1e-300)))
    x = h * np.arange(
        -np.ceil(QUADRATURE_HALF_WIDTH / h), np.ceil(QUADRATURE_HALF_WIDTH / h) + 1
    )
    weights = h * np.exp(-0.5 * x**2) / np.sqrt(2.0 * np.pi)
    out = np.empty_like(mu)
    rows = max(1, QUADRATURE_BLOCK // len(x))
    for start in range(0, len(mu), rows):
        block = slice(start, start + rows)
        out[block] = sigmoid(mu[block, None] + s[block, None] * x) @ weights
    return out.reshape(mean.shape)


class GaussianProcessClassifier(ClassifierMixin, BaseEstimator):
    """Binary and one-vs-rest Gaussian-process classification by the Laplace
    approximation, with hyperparameters learned by maximising the approximate
    evidence.

    Parameters
    ----------
    kernel : Kernel or None
        The prior covariance k; ``None`` means ``1.0 * RBF(1.0)``.
    optimizer : "L-BFGS-B", callable or None
        How log θ is chosen: L-BFGS-B within ``kernel.bounds`` with the
        gradient of Algorithm 5.1; a callable ``optimizer(fun, theta0, bounds)``
        returning ``(theta, fun(theta))`` where ``fun`` gives the negative log
        evidence and its gradient; or ``None`` to keep the kernel as given.
    n_restarts : int ≥ 0
        Extra optimiser runs, started from log θ drawn uniformly inside the
        log bounds. scikit-learn exponentiates those draws, which puts its
        restarts at θ = exp(exp(·)); ours are on the log scale they are drawn on.
    max_iter_predict : int ≥ 1
        The limit on Newton steps for the mode (scikit-learn's name).
    jitter : float ≥ 0
        Added to K's diagonal, i.e. the kernel k + jitter·δ(x, x′), at training
        and test inputs; stored as ``jitter_``. Zero by default: B = I + W^½KW^½
        needs none.
    random_state : None, int or numpy Generator
        Seeds the restarts.
    multi_class : "one_vs_rest"
        More than two classes are handled by one binary classifier per class
        (``estimators_``), with probabilities normalised to sum to one.

    Attributes
    ----------
    classes_ : ndarray
        The sorted class labels; ``classes_[1]`` is the positive class (t = 1).
    kernel_ : Kernel, or list of them (one per class)
        The kernel with the learned hyperparameters.
    f_hat_ : ndarray (n_samples,) or (n_samples, n_classes)
        The mode f̂ of the latent posterior at the training inputs.
    log_marginal_likelihood_value_ : float
        log q(t | X, θ̂), the Laplace approximation of the log evidence; with
        several classes, the mean over the binary problems (as scikit-learn).
    pi_, W_sr_, L_ : ndarrays (binary only)
        σ(f̂), W^½ and the Cholesky factor of B at the mode.
    n_iter_ : int (binary only)
        Newton steps taken for the final mode.
    """

    sparse_input = True

    def __init__(
        self,
        kernel=None,
        optimizer="L-BFGS-B",
        n_restarts=0,
        max_iter_predict=100,
        jitter=0.0,
        random_state=None,
        multi_class="one_vs_rest",
    ):
        self.kernel = kernel
        self.optimizer = optimizer
        self.n_restarts = n_restarts
        self.max_iter_predict = max_iter_predict
        self.jitter = jitter
        self.random_state = random_state
        self.multi_class = multi_class

    # -- validation -----------------------------------------------------------------
    def _validate_params(self):
        kernel = 1.0 * RBF(1.0) if self.kernel is None else self.kernel
        if not isinstance(kernel, Kernel):
            raise TypeError(
                "kernel must be a kernelref.kernels.Kernel or None; got "
                f"{self.kernel!r}. Build one, e.g. 1.0 * RBF(gamma=0.5)."
            )
        if not (
            self.optimizer is None
            or self.optimizer == "L-BFGS-B"
            or callable(self.optimizer)
        ):
            raise ValueError(
                "optimizer must be 'L-BFGS-B', a callable or None; got "
                f"{self.optimizer!r}."
            )
        check_integer(self.n_restarts, "n_restarts", low=0)
        check_integer(self.max_iter_predict, "max_iter_predict")
        if (
            isinstance(self.jitter, bool)
            or not isinstance(self.jitter, numbers.Real)
            or not np.isfinite(self.jitter)
            or self.jitter < 0
        ):
            raise ValueError(
                "jitter must be a finite number >= 0 (it is added to K's diagonal); "
                f"got {self.jitter!r}."
            )
        if self.multi_class != "one_vs_rest":
            raise ValueError(
                f"multi_class must be 'one_vs_rest'; got {self.multi_class!r}."
            )
        if self.optimizer is not None and len(kernel.theta):
            bounds = restart_bounds(kernel, self.n_restarts)
            theta = kernel.theta
            outside = (theta < bounds[:, 0] - 1e-12) | (theta > bounds[:, 1] + 1e-12)
            if outside.any():
                names = [
                    name for name, size in kernel.hyperparameters for _ in range(size)
                ]
                bad = names[int(np.argmax(outside))]
                raise ValueError(
                    f"the kernel's {bad} starts outside its bounds; widen {bad}_bounds "
                    "or start inside them."
                )
        return kernel

    # -- the binary core --------------------------------------------------------------
    def _gram(self, kernel, X):
        K = evaluate_kernel(kernel, X)
        K.flat[:: len(K) + 1] += self.jitter
        return K

    def _evidence(self, kernel, X, t, eval_gradient):
        K = self._gram(kernel, X)
        mode = laplace_mode(K, t, max_iter=self.max_iter_predict)
        if not eval_gradient:
            return mode.log_evidence, mode
        return mode.log_evidence, log_evidence_gradient(kernel, X, K, t, mode)

    def _learn_theta(self, kernel, X, t):
        """Maximise log q(t | X, θ) over log θ within the log bounds, from the
        kernel's θ and ``n_restarts`` uniform draws (``best_of_restarts``)."""

        return maximise_evidence(
            lambda k: self._evidence(k, X, t, True),
            kernel,
            self.optimizer,
            self.n_restarts,
            self.random_state,
        )

    def _fit_binary(self, kernel, X, t):
        if self.optimizer is not None and len(kernel.theta):
            kernel = self._learn_theta(kernel, X, t)
        else:
            kernel = kernel.clone_with_theta(kernel.theta)
        value, mode = self._evidence(kernel, X, t, eval_gradient=False)
        self.kernel_ = kernel
        self.f_hat_ = mode.f
        self.pi_, self.W_sr_, self.L_ = mode.pi, mode.W_sr, mode.L
        self.n_iter_ = mode.n_iter
        self.log_marginal_likelihood_value_ = value
        self._mode, self._t = mode, t

    def _forget_fit(self):
        """Drop the state of an earlier fit, so a binary refit of a multiclass
        model (or the reverse) leaves nothing stale behind."""
        for name in [
            name for name in vars(self) if name.endswith("_") or name in ("_mode", "_t")
        ]:
            delattr(self, name)

    def _is_multiclass(self):
        check_is_fitted(self, "log_marginal_likelihood_value_")
        return len(self.classes_) > 2

    @restores_on_error
    def fit(self, X, y):
        """Find the mode (and, with an optimizer, the hyperparameters) for `X`, `y`."""
        kernel = self._validate_params()
        X = check_samples(X, kernel, "X", accept_sparse="kernel")
        classes, y_index = check_classification_targets(y, X.shape[0], "y")
        # only once the input is accepted: a refused refit leaves the earlier fit intact
        self._forget_fit()
        self.classes_ = classes
        self.X_fit_ = X = X.copy()  # the model owns its data
        record_n_features(self, X)
        self.jitter_ = float(self.jitter)
        if len(self.classes_) == 2:
            self._fit_binary(kernel, X, y_index.astype(float))
            return self
        self.estimators_ = []
        for k in range(len(self.classes_)):
            binary = GaussianProcessClassifier(**self.get_params(deep=False))
            binary.classes_ = np.array([0, 1])
            binary.X_fit_, binary.jitter_ = X, self.jitter_
            record_n_features(binary, X)
            binary._fit_binary(kernel, X, (y_index == k).astype(float))
            self.estimators_.append(binary)
        self.kernel_ = [e.kernel_ for e in self.estimators_]
        self.f_hat_ = np.column_stack([e.f_hat_ for e in self.estimators_])
        self.log_marginal_likelihood_value_ = float(
            np.mean([e.log_marginal_likelihood_value_ for e in self.estimators_])
        )
        return self

    # -- the evidence as a function of θ -----------------------------------------------
    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """log q(t | X, θ) (label ``gpc-evidence``) and, with ``eval_gradient``,
        its gradient with respect to log θ (label ``gpc-evidence-gradient``).

        ``theta=None`` means the fitted hyperparameters. With several classes,
        ``theta`` is shared by every binary problem and the mean is returned.
        """
        if self._is_multiclass():
            parts = [
                e.log_marginal_likelihood(theta, eval_gradient)
                for e in self.estimators_
            ]
            if not eval_gradient:
                return float(np.mean(parts))
            return float(np.mean([p[0] for p in parts])), np.mean(
                [p[1] for p in parts], axis=0
            )
        if theta is None and not eval_gradient:
            return self.log_marginal_likelihood_value_
        kernel = self.kernel_ if theta is None else self.kernel_.clone_with_theta(theta)
        value, gradient = self._evidence(kernel, self.X_fit_, self._t, eval_gradient)
        return (value, gradient) if eval_gradient else value

    # -- prediction ------------------------------------------------------------------
    def _latent(self, X):
        check_is_fitted(self, "log_marginal_likelihood_value_")
        # with several classes every binary model has a copy of the same kernel
        kernel = self.kernel_[0] if isinstance(self.kernel_, list) else self.kernel_
        X = check_samples(X, kernel, "X", accept_sparse="kernel")
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        return X

    def _binary_latent(self, X):
        k_star_star = self.kernel_.diag(X) + self.jitter_
        return latent_predictive(
            evaluate_kernel(self.kernel_, X, self.X_fit_),
            k_star_star,
            self._t,
            self._mode,
        )

    def decision_function(self, X):
        """The latent predictive mean E[f* | t] (Algorithm 3.2, line 4); one
        column per class with more than two classes."""
        X = self._latent(X)
        if self._is_multiclass():
            return np.column_stack([e._binary_latent(X)[0] for e in self.estimators_])
        return self._binary_latent(X)[0]

    def _positive_probability(self, X, method):
        mean, variance = self._binary_latent(X)
        if method == "probit":
            return probit_probability(mean, variance)
        return quadrature_probability(mean, variance)

    def predict_proba(self, X, method="probit"):
        """Class probabilities, columns in the order of ``classes_`` (Algorithm 3.2).

        ``method="probit"`` uses σ(κ(s²)μ) (``gpc-probit``); ``"quadrature"``
        integrates σ against the latent Gaussian numerically.
        """
        if method not in ("probit", "quadrature"):
            raise ValueError(
                f"method must be 'probit' or 'quadrature'; got {method!r}."
            )
        X = self._latent(X)
        if self._is_multiclass():
            P = np.column_stack(
                [e._positive_probability(X, method) for e in self.estimators_]
            )
            return P / P.sum(axis=1, keepdims=True)
        p = self._positive_probability(X, method)
        return np.column_stack([1.0 - p, p])

    def predict_log_proba(self, X, method="probit"):
        """log P(class | x), columns in the order of ``classes_``. With
        ``method="probit"`` in log space, so a confident prediction keeps its small
        probability instead of log 0: two classes, log σ(±κμ)
        (``probit_log_probability``); more, each class's log σ(κμ) less their
        log-sum-exp. ``"quadrature"``: the log of ``predict_proba``, clipped at the
        smallest positive float."""
        if method == "probit":
            X = self._latent(X)
            if self._is_multiclass():
                L = np.column_stack(
                    [
                        probit_log_probability(*e._binary_latent(X))
                        for e in self.estimators_
                    ]
                )
                return L - logsumexp(L, axis=1, keepdims=True)
            mean, variance = self._binary_latent(X)
            return np.column_stack(
                [
                    probit_log_probability(-mean, variance),
                    probit_log_probability(mean, variance),
                ]
            )
        P = self.predict_proba(X, method)
        return np.log(np.maximum(P, np.finfo(float).tiny))

    def predict(self, X):
        """The most probable class. For two classes that is the sign of the
        latent mean, whichever approximation of the probability is used."""
        if self._is_multiclass():
            return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
        return self.classes_[(self.decision_function(X) > 0).astype(int)]
