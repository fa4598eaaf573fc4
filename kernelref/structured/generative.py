"""Kernels from a generative model p(x): the density product, the mixture
kernel and the Fisher kernel (book labels ``density-product``,
``mixture-kernel``, ``fisher-score``, ``fisher-information``, ``fisher-kernel``),
for a Gaussian mixture with spherical components,

    p(x) = Σ_i π_i N(x | μ_i, σ_i² I).

The Fisher kernel is g(x)ᵀ F⁻¹ g(x′) with the score g(x) = ∇_θ log p(x | θ)
and F ≈ (1/N) Σ_n g(x_n) g(x_n)ᵀ, the empirical Fisher information on a
reference sample. Under a change of parameters θ = θ(φ) with Jacobian J,
g_φ = Jᵀ g_θ and F_φ = Jᵀ F_θ J, so the kernel does not change. The mixture
weights are left out of θ: with π a softmax of K logits the K scores sum to
zero and F would be singular. They can enter unnormalised instead
(``"weights+means"``), as in Jaakkola and Haussler: ∂ log p/∂π_i = p(x | i)/p(x)
= r_i/π_i, whose expectation is 1, not 0.
"""

from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.special import logsumexp

from kernelref._validation import check_array
from kernelref.kernels.base import Kernel, as_2d

#: The parameter sets whose scores the Fisher kernel can use.
FISHER_PARAMETERS = ("means", "means+variances", "means+log_variances", "weights+means")


@dataclass(frozen=True, eq=False)
class GaussianMixture:
    """π (K,) the weights, μ (K, D) the means, σ² (K,) the variances."""

    weights: np.ndarray
    means: np.ndarray
    variances: np.ndarray

    def __post_init__(self):
        weights = np.asarray(self.weights, dtype=float)
        means = np.atleast_2d(np.asarray(self.means, dtype=float))
        variances = np.asarray(self.variances, dtype=float)
        K = len(weights)
        if (
            weights.ndim != 1
            or (weights < 0).any()
            or not np.isclose(weights.sum(), 1.0)
        ):
            raise ValueError(
                f"weights must be K ≥ 0 probabilities summing to 1; got {weights}."
            )
        if means.shape[0] != K or not np.isfinite(means).all():
            raise ValueError(
                f"means must be a finite ({K}, D) array; got shape {means.shape}."
            )
        if variances.shape != (K,) or not (variances > 0).all():
            raise ValueError(
                f"variances must be {K} positive numbers; got {variances}."
            )
        for name, value in (
            ("weights", weights),
            ("means", means),
            ("variances", variances),
        ):
            object.__setattr__(self, name, value)

    def check_inputs(self, X):
        X = as_2d(X)
        if X.shape[1] != self.means.shape[1]:
            raise ValueError(
                f"X has {X.shape[1]} features; the mixture is over "
                f"{self.means.shape[1]}."
            )
        return X

    def squared_distances(self, X):
        """‖x_n − μ_i‖², shape (n, K)."""
        X = self.check_inputs(X)
        return ((X[:, None, :] - self.means[None, :, :]) ** 2).sum(axis=2)

    def log_component_densities(self, X):
        """log N(x_n | μ_i, σ_i² I), shape (n, K)."""
        D = self.means.shape[1]
        return -0.5 * self.squared_distances(X) / self.variances - 0.5 * D * np.log(
            2 * np.pi * self.variances
        )

    def component_densities(self, X):
        """p(x_n | i), shape (n, K)."""
        return np.exp(self.log_component_densities(X))

    def density(self, X):
        """p(x_n) = Σ_i π_i p(x_n | i)."""
        return np.exp(
            logsumexp(self.log_component_densities(X), b=self.weights, axis=1)
        )

    def responsibilities(self, X):
        """r_ni = π_i p(x_n | i) / p(x_n)."""
        log_joint = self.log_component_densities(X) + np.log(self.weights)
        return np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))

    def sample(self, n, rng):
        """n points and the components that drew them."""
        z = rng.choice(len(self.weights), size=n, p=self.weights)
        noise = rng.standard_normal((n, self.means.shape[1]))
        return self.means[z] + np.sqrt(self.variances[z])[:, None] * noise, z


class DensityProductKernel(Kernel):
    """k(x, x′) = p(x) p(x′) (label ``density-product``): rank one, φ(x) = p(x)."""

    def __init__(self, mixture):
        self.mixture = mixture

    def __call__(self, X, Y=None):
        pY = self.mixture.density(X if Y is None else Y)
        return self.mixture.density(X)[:, None] * pY[None, :]

    def diag(self, X):
        return self.mixture.density(X) ** 2


class MixtureKernel(Kernel):
    """k(x, x′) = Σ_i p(x | i) p(x′ | i) π_i (label ``mixture-kernel``):
    φ_i(x) = √π_i p(x | i)."""

    def __init__(self, mixture):
        self.mixture = mixture

    def __call__(self, X, Y=None):
        P = self.mixture.component_densities(X)
        Q = P if Y is None else self.mixture.component_densities(Y)
        return (P * self.mixture.weights) @ Q.T

    def diag(self, X):
        P = self.mixture.component_densities(X)
        return (P**2) @ self.mixture.weights


def fisher_scores(mixture, X, parameters="means"):
    """g(x_n) = ∇_θ log p(x_n | θ), shape (n, P) (label ``fisher-score``).

    ∂/∂μ_i = r_i (x − μ_i)/σ_i²; ∂/∂σ_i² = r_i (‖x − μ_i‖²/σ_i² − D)/(2σ_i²);
    ∂/∂log σ_i² = σ_i² ∂/∂σ_i²; for unnormalised weights ∂/∂π_i = r_i/π_i.
    """
    if parameters not in FISHER_PARAMETERS:
        raise ValueError(
            f"parameters must be one of {FISHER_PARAMETERS}; got {parameters!r}."
        )
    X = mixture.check_inputs(X)
    r = mixture.responsibilities(X)
    var = mixture.variances
    d_means = r[:, :, None] * (X[:, None, :] - mixture.means[None]) / var[None, :, None]
    blocks = [d_means.reshape(len(X), -1)]
    if parameters == "weights+means":
        blocks.insert(0, r / mixture.weights)
    elif parameters != "means":
        D = X.shape[1]
        d_log_var = 0.5 * r * (mixture.squared_distances(X) / var - D)
        blocks.append(d_log_var / var if parameters == "means+variances" else d_log_var)
    return np.hstack(blocks)


def empirical_fisher(G):
    """F = (1/N) Σ_n g_n g_nᵀ from the scores G (N, P) (label
    ``fisher-information``)."""
    return G.T @ G / len(G)


def fisher_factor(G, what):
    """The Cholesky factor of the empirical Fisher information of the reference
    scores G; `what` names the reference samples in the error when F is singular."""
    try:
        return cho_factor(empirical_fisher(G), lower=True)
    except LinAlgError:
        raise ValueError(
            f"the empirical Fisher information of {len(G)} reference {what} over "
            f"{G.shape[1]} parameters is singular; give more, and more varied, "
            f"reference {what} than there are parameters."
        ) from None


class FisherKernel(Kernel):
    """k(x, x′) = g(x)ᵀ F⁻¹ g(x′) (label ``fisher-kernel``), with F the empirical
    Fisher information of the scores on the reference sample ``X_ref``."""

    def __init__(self, mixture, X_ref, parameters="means"):
        self.mixture = mixture
        self.X_ref = X_ref
        self.parameters = parameters

    def _factor(self):
        X_ref = check_array(self.X_ref, "X_ref")
        return fisher_factor(
            fisher_scores(self.mixture, X_ref, self.parameters), "points"
        )

    def __call__(self, X, Y=None):
        G = fisher_scores(self.mixture, X, self.parameters)
        H = G if Y is None else fisher_scores(self.mixture, Y, self.parameters)
        return G @ cho_solve(self._factor(), H.T)

    def diag(self, X):
        G = fisher_scores(self.mixture, X, self.parameters)
        return np.einsum("np,pn->n", G, cho_solve(self._factor(), G.T))
