"""The multiclass relevance vector classifier: the softmax model of PRML §7.2.3
(Tipping 2001, §4).

K classes, one-hot targets t_nk, and one weight vector w_k per class:

    a_nk = φ_nᵀw_k,   y_nk = exp(a_nk) / Σ_j exp(a_nj),
    log p(t | w) = Σ_n Σ_k t_nk log y_nk          (label ``rvc-softmax-likelihood``)

with an ARD prior of its own on every weight, w_mk ~ N(0, α_mk⁻¹). The negative
Hessian of the log posterior is the MK×MK matrix with blocks

    H_kj = Σ_n y_nk(δ_kj − y_nj) φ_nφ_nᵀ + δ_kj A_k  (label ``rvc-softmax-hessian``).

Stacking the weights as w = vec(W), W of shape (M, K) in row-major order (weight
(m, k) at m·K + k), the activations are a = (Φ ⊗ I_K)w, so the softmax model is
a generalised linear model with the design Φ ⊗ I_K (``expanded_design``) and, per
point, the K×K curvature B_n = diag(y_n) − y_ny_nᵀ in place of the binary
model's scalar y_n(1 − y_n). With that design and ``Softmax.whiten`` every
binary routine of ``kernelref.rvm.classification`` applies unchanged: the IRLS
mode, Σ = H⁻¹, the Laplace evidence, the α re-estimation (one α per weight) and
the fast algorithm. The block structure above is what (Φ ⊗ I_K)ᵀB(Φ ⊗ I_K)
works out to.

The price is size: the whitened design is NK × MK and dense (B_n mixes the
classes), against K separate N × M designs for one-vs-rest, and a Newton step
factorises an MK × MK matrix. The fast algorithm runs on both designs without
forming them (``kernelref.rvm.softmax_design``: its products are sums over the N
points); re-estimation, which starts from every weight, forms them. For many
classes one-vs-rest is still the cheaper choice (digits, 10 classes: 4-12x
faster at N = 400 and 700, 2x at N = 1200, where one class's path needs
``rvc_fast.growth_budget``; ``benchmarks/bench_rvc_softmax``).
"""

import numpy as np
from scipy.special import logsumexp

__all__ = [
    "Softmax",
    "expanded_design",
    "latent_moments",
    "moderated_log_softmax",
    "moderated_softmax",
    "one_hot",
]


def one_hot(y_index, K):
    """The N×K matrix of targets t_nk = [class of n is k], flattened row-major."""
    return (np.asarray(y_index)[:, None] == np.arange(K)).astype(float).ravel()


def expanded_design(Phi, K):
    """Φ ⊗ I_K: row n·K + k, column m·K + k holds φ_m(x_n), so that
    (Φ ⊗ I_K) vec(W) = vec(ΦW), the activations a_nk in row-major order."""
    return np.kron(Phi, np.eye(K))


class Softmax:
    """The softmax likelihood of K classes, for the routines of
    ``kernelref.rvm.classification``; targets and activations are flat, n·K + k."""

    def __init__(self, K):
        self.K = K

    def log_likelihood(self, a, t):
        """Σ t_nk log y_nk (label ``rvc-softmax-likelihood``), log y by
        ``logsumexp``."""
        A = a.reshape(-1, self.K)
        return float(
            np.sum(t.reshape(-1, self.K) * (A - logsumexp(A, axis=1, keepdims=True)))
        )

    def residual(self, a, t):
        """t − y, the likelihood's gradient in a (flat, as a and t are)."""
        A = a.reshape(-1, self.K)
        return t - np.exp(A - logsumexp(A, axis=1, keepdims=True)).ravel()

    def whiten(self, Phi, a, t):
        """Φ̃ = R Φ and t̃ = R a + r with RᵀR = B and Rᵀr = t − y (label
        ``rvc-linearised-target``), R block diagonal with one K×K block per point
        (`whitening`)."""
        R, t_tilde = self.whitening(a, t)
        Phi_blocks = Phi.reshape(len(R), self.K, Phi.shape[1])
        Phi_tilde = np.einsum("njk,nkp->njp", R, Phi_blocks).reshape(Phi.shape)
        return Phi_tilde, t_tilde

    def whitening(self, a, t):
        """The blocks R_n (an N×K×K array) of `whiten`'s R and t̃ = R a + r.

        B_n = diag(y) − yyᵀ is singular (B_n 1 = 0: adding a constant to every
        a_nk changes nothing), so t̂ = a + B⁻¹(t − y) does not exist. A factor
        does, in closed form: with u = √y (so ‖u‖ = 1) and the projector
        P = I − uuᵀ, R_n = P diag(u) gives RᵀR = diag(u) P diag(u) = B_n, and
        r_n = (t_n − y_n)/u gives Rᵀr = (t − y) − y Σ_k(t_k − y_k) = t − y.
        Then Φ̃ᵀΦ̃ = ΦᵀBΦ and Φ̃ᵀt̃ = ΦᵀBa + Φᵀ(t − y), which is all the IRLS step
        and the fast algorithm use; no eigenvalue is thresholded.
        """
        A = a.reshape(-1, self.K)
        log_y = A - logsumexp(A, axis=1, keepdims=True)
        u = np.exp(0.5 * log_y)
        P = np.eye(self.K)[None] - u[:, :, None] * u[:, None, :]
        R = P * u[:, None, :]  # P diag(u), per point
        # (t − y)/u = t/u − u: exact where a class is confidently ruled out (t = 0,
        # u underflowing to 0), where the quotient itself would be 0/0.
        T = t.reshape(-1, self.K)
        with np.errstate(divide="ignore", over="ignore"):  # +∞ where y ≲ e^−1400
            r = np.divide(T, u, out=np.zeros_like(u), where=T > 0) - u
        t_tilde = np.einsum("njk,nk->nj", R, A) + r
        return R, t_tilde.ravel()


def latent_moments(Phi_star, mu, Sigma, kept):
    """Mean (n, K) and covariance (n, K, K) of the activations a_k(x) = φ(x)ᵀw_k
    under the Gaussian posterior (label ``rvc-softmax-predictive``).

    ``mu`` is the (M, K) mean, ``kept`` the (M, K) mask of the weights in the
    model and ``Sigma`` their covariance, in the row-major order of ``kept``.
    """
    K = mu.shape[1]
    # J = (Φ* ⊗ I_K)[:, kept], (n, K, P): only the kept weights' columns, the
    # same entries without forming the nK × MK expansion
    m, k = np.nonzero(kept)  # row-major, as the weights are stacked
    J = np.zeros((len(Phi_star), K, len(m)))
    J[:, k, np.arange(len(m))] = Phi_star[:, m]
    covariance = np.einsum("nkp,pq,njq->nkj", J, Sigma, J)
    return Phi_star @ mu, covariance


def moderated_softmax(mean, covariance):
    """p_k ∝ 1 / Σ_j exp(−κ(s²_kj)(μ_k − μ_j)), s²_kj = var(a_k − a_j), κ(s²) = (1 +
    πs²/8)^(−½)
    (label ``rvc-softmax-predictive``).

    The softmax written through differences, p_k = 1/Σ_j exp(a_j − a_k), with each
    difference moderated as the binary model moderates its one activation
    (``gpc-probit``). It is an approximation of E[softmax(a)] that is exact where
    the variances vanish and, for K = 2, equals the binary σ(κ(s²)μ); for K > 2
    the p_k need not sum to one and are normalised. Computed in log space
    (`moderated_log_softmax`).
    """
    return np.exp(moderated_log_softmax(mean, covariance))


def moderated_log_softmax(mean, covariance):
    """log p_k of `moderated_softmax`: log p̃_k = −log Σ_j exp(−κ(s²_kj)(μ_k − μ_j)),
    normalised by subtracting log Σ_l p̃_l, both by log-sum-exp, so that a
    probability below the smallest float keeps its logarithm."""
    variance = np.einsum("nkk->nk", covariance)
    s2 = (
        variance[:, :, None]
        + variance[:, None, :]
        - covariance
        - np.swapaxes(covariance, 1, 2)
    )
    kappa = 1.0 / np.sqrt(1.0 + np.pi * np.maximum(s2, 0.0) / 8.0)
    z = -kappa * (mean[:, :, None] - mean[:, None, :])
    log_p = -logsumexp(z, axis=2)
    return log_p - logsumexp(log_p, axis=1, keepdims=True)
