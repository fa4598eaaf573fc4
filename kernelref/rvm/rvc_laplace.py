"""The relevance vector classifier: the Laplace approximation, re-estimation.

Binary labels t_n ∈ {0, 1} pass through the logistic sigmoid, y_n = σ(a_n),
a = Φw, under the ARD prior w_i ~ N(0, α_i⁻¹) of the regression model
(Tipping 2001, §4; PRML §7.2.3). The posterior over w is not Gaussian; the
Laplace approximation puts a Gaussian at its mode w*:

    Ψ(w) = log p(t | w) − ½wᵀAw                      (label ``rvc-log-posterior``)
    ∇Ψ = Φᵀ(t − y) − Aw,   −∇∇Ψ = ΦᵀBΦ + A,  B = diag(y_n(1 − y_n))
    w_new = ΣΦᵀBt̂,  t̂ = Φw + B⁻¹(t − y)              (label ``rvc-irls``)
    Σ = (ΦᵀBΦ + A)⁻¹ at w*                            (label ``rvc-sigma``)
    log p(t | α) ≈ Ψ(w*) + ½Σ log α_i − ½ log|ΦᵀBΦ + A|
                                                 (label ``rvc-laplace-evidence``)

At the mode ∇Ψ = 0, that is w* = A⁻¹Φᵀ(t − y): a fixed-point condition, since y
depends on w* (seed 000 writes it as an explicit formula; PRML errata, 7.112–7.119).

The IRLS step is the posterior mean of a Gaussian regression of the linearised
target t̂ with noise precision B. Whitening by B^½ — Φ̃ = B^½Φ, t̃ = B^½t̂ — makes
it the regression model of ``kernelref.rvm.design`` with β = 1, so the regression
code serves unchanged: ``posterior`` is the IRLS step and Σ; the α updates act on
this Gaussian approximation, re-made at each new mode. Everything here takes the
likelihood as an argument (`BERNOULLI`, or ``kernelref.rvm.softmax.Softmax``
on the expanded design), so the multiclass model runs through the same code.
"""

from collections import namedtuple

import numpy as np
from scipy.linalg import lapack

from kernelref.laplace import (
    damped_newton,
    likelihood_curvature,
    log_likelihood,
    log_likelihood_gradient,
)
from kernelref.rvm.design import precision_factor
from kernelref.rvm.reestimate import GAMMA_MIN, gamma_factors, reestimate_alpha
from kernelref.rvm.regression import ALPHA_MAX

__all__ = [
    "BERNOULLI",
    "Bernoulli",
    "CANCELLATION_A",
    "ClassifierFit",
    "Laplace",
    "MAX_NEWTON_ITER",
    "laplace_log_evidence",
    "laplace_posterior",
    "log_posterior",
    "posterior_mean",
    "reestimate_classifier",
]


#: Newton steps per mode at most. From a warm start a mode takes a handful;
#: from w = 0 on separable data, where small α lets w grow large, a few dozen.
MAX_NEWTON_ITER = 100

#: Above this a, σ(a)(1 − σ(a)) loses its factor 1 − σ(a) < 2.1e-9 to
#: cancellation (and is 0 beyond a ≈ 37): `Bernoulli.row_weights` forms B^½
#: of a point labelled 0 there from logarithms instead.
CANCELLATION_A = 20.0

#: The Laplace approximation at the mode: ``mu`` = w*, ``Sigma`` and the lower
#: Cholesky factor ``L`` of Σ⁻¹ = ΦᵀBΦ + A, and the approximate log evidence.
Laplace = namedtuple("Laplace", "mu Sigma L log_evidence n_iter")

#: The result of an α loop: ``keep`` indexes the columns of Φ in the model;
#: ``alpha`` and the Laplace fields belong to them; ``evidence`` is the Laplace
#: log evidence after each iteration; ``n_loop_iter`` counts the iterations of
#: the sequential algorithm over all approximations (0 for re-estimation).
ClassifierFit = namedtuple(
    "ClassifierFit",
    "keep alpha mu Sigma log_evidence evidence n_iter converged n_loop_iter",
    defaults=(0,),
)


class Bernoulli:
    """The logistic likelihood of binary labels, for the routines below."""

    #: Rows of the design per point (the softmax has K).
    K = 1

    @staticmethod
    def log_likelihood(a, t):
        """Σ log σ((2t − 1)a) (``kernelref.laplace.log_likelihood``)."""
        return log_likelihood(a, t)

    @staticmethod
    def whiten(Phi, a, t):
        """Φ̃ = B^½Φ and t̃ = B^½t̂ = B^½a + B^(−½)(t − y) (label
        ``rvc-linearised-target``).

        t̂ overflows where y(1 − y) underflows; its whitened residual does not:
        B^(−½)(t − y) = (2t − 1)exp(−(2t − 1)a/2), since (1 − σ(a))/√(σ(a)σ(−a))
        = √(σ(−a)/σ(a)) = e^(−a/2), and likewise for t = 0.
        """
        B_sqrt, t_tilde = Bernoulli.row_weights(a, t)
        return B_sqrt[:, None] * Phi, t_tilde

    @staticmethod
    def row_weights(a, t):
        """B^½ and t̃ = B^½t̂ of `whiten`: Φ̃ = diag(B^½)Φ scales Φ's rows.

        Where a point labelled 0 has a > `CANCELLATION_A` (confidently wrong, as
        at a wild Newton start), B^½ = e^(−½(log(1 + e^a) + log(1 + e^(−a)))):
        σ(a)(1 − σ(a)) would round it to 0 and drop the point's gradient
        B^½·B^(−½)(t − y) = −y from the Newton step. t̃ is +∞ on points wrong by
        |a| ≳ 1400 (`laplace_posterior` steps without it there).
        """
        B_sqrt = np.sqrt(likelihood_curvature(a))
        wrong = (a > CANCELLATION_A) & (t == 0)
        if wrong.any():
            log_B = -np.logaddexp(0.0, a[wrong]) - np.logaddexp(0.0, -a[wrong])
            B_sqrt[wrong] = np.exp(0.5 * log_B)
        sign = 2.0 * t - 1.0
        with np.errstate(over="ignore"):
            return B_sqrt, B_sqrt * a + sign * np.exp(-0.5 * sign * a)

    @staticmethod
    def residual(a, t):
        """t − y, the likelihood's gradient in a (label ``rvc-irls``)."""
        return log_likelihood_gradient(a, t)


BERNOULLI = Bernoulli()


def laplace_log_evidence(Psi, alpha, L):
    """Ψ(w*) + ½Σ log α_i − ½ log|Σ⁻¹|, log|Σ⁻¹| = 2Σ log L_ii (label
    ``rvc-laplace-evidence``)."""
    return Psi + 0.5 * np.sum(np.log(alpha)) - np.sum(np.log(np.diag(L)))


def log_posterior(Phi, t, alpha, w, likelihood=BERNOULLI):
    """Ψ(w) = log p(t | w) − ½wᵀAw (label ``rvc-log-posterior``)."""
    return likelihood.log_likelihood(Phi @ w, t) - 0.5 * w @ (alpha * w)


def laplace_posterior(
    Phi, t, alpha, w0=None, likelihood=BERNOULLI, *, max_iter=MAX_NEWTON_ITER
):
    """The mode w*, Σ and the Laplace log evidence for the columns in `Phi`.

    Implements (rvc-irls) by ``kernelref.laplace.damped_newton`` from `w0`
    (w = 0 unless an α loop warm-starts it at the previous mode: deterministic
    either way), then (rvc-sigma) and (rvc-laplace-evidence). Each Newton
    iterate ΣΦᵀBt̂ is ``design.posterior``'s mean for the whitened problem; from
    a start that gets points wrong by |a| ≳ 1400, where t̃ overflows, it is
    Σ(Φ̃ᵀΦ̃w + Φᵀ(t − y)) (the likelihood's ``residual``), the same step.
    """

    def objective(w):
        return log_posterior(Phi, t, alpha, w, likelihood)

    def newton_step(w):
        a = Phi @ w
        Phi_tilde, t_tilde = likelihood.whiten(Phi, a, t)
        if np.all(np.isfinite(t_tilde)):
            return posterior_mean(Phi_tilde, t_tilde, alpha)
        # t̃ overflows on points wrong by |a| ≳ 1400; Φ̃ᵀt̃ = Φ̃ᵀΦ̃w + Φᵀ(t − y)
        # does not (the same step: B^½ cancels between Φ̃ and the residual)
        L = precision_factor(Phi_tilde, alpha, 1.0)
        rhs = Phi_tilde.T @ (Phi_tilde @ w) + Phi.T @ likelihood.residual(a, t)
        return lapack.dpotrs(L, rhs, lower=1)[0]

    w0 = np.zeros(Phi.shape[1]) if w0 is None else w0
    result = damped_newton(objective, newton_step, w0, max_iter=max_iter)
    Phi_tilde, _ = likelihood.whiten(Phi, Phi @ result.x, t)
    L = precision_factor(Phi_tilde, alpha, 1.0)
    L_inv, _ = lapack.dtrtri(L, lower=1)
    return Laplace(
        result.x,
        L_inv.T @ L_inv,
        L,
        laplace_log_evidence(result.value, alpha, L),
        result.n_iter,
    )


def posterior_mean(Phi_tilde, t_tilde, alpha):
    """The IRLS iterate ΣΦ̃ᵀt̃ of (rvc-irls) alone: ``design.posterior``'s mean
    (β = 1) by the same Cholesky factor, without Σ and the evidence, which a
    Newton step does not use."""
    L = precision_factor(Phi_tilde, alpha, 1.0)
    mu, _ = lapack.dpotrs(L, Phi_tilde.T @ t_tilde, lower=1)
    return mu


def reestimate_classifier(
    Phi,
    t,
    alpha,
    likelihood=BERNOULLI,
    *,
    max_iter=10000,
    tol=1e-3,
    alpha_max=ALPHA_MAX,
    w0=None,
):
    """Tipping's loop: the mode for the current α, then α_i ← γ_i/μ_i² on the
    Gaussian approximation there, pruning as ``kernelref.rvm.reestimate`` does.

    Implements (rvc-irls), (rvc-sigma), (rvm-gamma) and (rvm-reestimate-alpha).
    Holding the mode fixed, these updates are the stationarity conditions of
    (rvc-laplace-evidence) in α; the dependence of B on w* through α is left out,
    as in Tipping 2001. Stops when nothing was pruned and every log α_i changed by
    less than `tol`. ``w0`` starts the first mode's Newton iterations (w = 0).
    """
    M = Phi.shape[1]
    keep = np.arange(M)
    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), (M,)).copy()
    w = np.zeros(M) if w0 is None else np.array(w0, dtype=float)
    evidence = []
    converged = False
    for n_iter in range(1, max_iter + 1):
        mode = laplace_posterior(Phi[:, keep], t, alpha, w, likelihood)
        evidence.append(mode.log_evidence)
        gamma = gamma_factors(alpha, np.diag(mode.Sigma))
        new_alpha = reestimate_alpha(gamma, mode.mu)
        stay = (new_alpha < alpha_max) & (gamma > GAMMA_MIN) & np.isfinite(new_alpha)
        if not stay.any():
            raise RuntimeError(
                "every basis function was pruned: the evidence prefers a model that "
                "ignores the inputs. Check the kernel width (gamma)."
            )
        change = np.max(np.abs(np.log(new_alpha[stay] / alpha[stay])))
        alpha, keep, w = new_alpha[stay], keep[stay], mode.mu[stay]
        if stay.all() and change < tol:
            converged = True
            break
    mode = laplace_posterior(Phi[:, keep], t, alpha, w, likelihood)
    return ClassifierFit(
        keep,
        alpha,
        mode.mu,
        mode.Sigma,
        mode.log_evidence,
        np.array(evidence + [mode.log_evidence]),
        n_iter,
        converged,
    )
