"""Evidence maximisation by re-estimation (MacKay) and by EM, with pruning.

Each iteration computes the posterior (rvm-posterior) of the basis functions
still in the model, updates every α_i and β at once, and prunes the basis
functions whose α_i has run off to infinity. Setting the derivatives of the log
evidence to zero and rearranging gives (Tipping 2001, eqs. 16 and 18)

    γ_i = 1 − α_i Σ_ii                                  (label ``rvm-gamma``)
    α_i ← γ_i / μ_i²                                    (label ``rvm-reestimate-alpha``)
    β   ← (N − Σ_i γ_i) / ‖t − Φμ‖²                     (label ``rvm-noise``)

and treating w as missing data gives the EM updates (Tipping 2001, appendix A)

    α_i ← 1 / (μ_i² + Σ_ii)                             (label ``rvm-em-alpha``)
    β   ← N / (‖t − Φμ‖² + β⁻¹ Σ_i γ_i)                 (label ``rvm-em-noise``).

Seed 001 (eq. 13) proposes α_i ← γ_i(γ_i − Σ_ii)/μ_i² to speed up the
divergence of α; it is offered as ``update="accelerated"`` so the book can
measure it. It is not a fixed point of the evidence: at a fixed point of it
α_i μ_i² = γ_i(γ_i − Σ_ii) ≠ γ_i, so ∂L/∂α_i = ½(γ_i − α_iμ_i²)/α_i ≠ 0, and it
mixes γ_i (a pure number) with Σ_ii (a squared weight), so its answer changes
with the units of the basis functions.

Everything works on `Phi` as given: α is on the scale of its columns.
"""

from collections import namedtuple

import numpy as np

from kernelref._validation import check_finite_values
from kernelref.rvm.design import posterior

__all__ = [
    "GAMMA_MIN",
    "Reestimation",
    "accelerated_alpha",
    "em_alpha",
    "em_beta",
    "gamma_factors",
    "initial_alpha",
    "reestimate",
    "reestimate_alpha",
    "reestimate_beta",
]

#: γ_i = 1 − α_iΣ_ii is computed with a relative rounding error of about machine
#: epsilon; below that it cannot be told from 0 (the prior alone fixes w_i) and
#: γ_i/μ_i² would be noise, so the basis function is pruned.
GAMMA_MIN = np.finfo(np.float64).eps

#: The result of `reestimate`: ``keep`` indexes the columns of Φ still in the model;
#: ``alpha``, ``mu``, ``Sigma`` belong to them; ``evidence`` is the log evidence
#: after each iteration.
Reestimation = namedtuple(
    "Reestimation",
    "keep alpha beta mu Sigma gamma log_evidence evidence n_iter converged",
)


def initial_alpha(N):
    """The starting α_i = (1/N)² of Tipping's SB1 demonstrations: a broad prior, so
    that the data, not the start, decide which α_i grow."""
    return 1.0 / N**2


def gamma_factors(alpha, Sigma_diag):
    """γ_i = 1 − α_iΣ_ii, how well the data determine w_i (label ``rvm-gamma``)."""
    return 1.0 - alpha * Sigma_diag


def reestimate_alpha(gamma, mu):
    """α_i = γ_i/μ_i² (label ``rvm-reestimate-alpha``)."""
    return gamma / mu**2


def em_alpha(mu, Sigma_diag):
    """α_i = 1/⟨w_i²⟩ = 1/(μ_i² + Σ_ii) (label ``rvm-em-alpha``)."""
    return 1.0 / (mu**2 + Sigma_diag)


def accelerated_alpha(gamma, mu, Sigma_diag):
    """Seed 001 eq. (13): α_i = γ_i(γ_i − Σ_ii)/μ_i² (label ``rvm-accelerated``).

    Not a fixed point of evidence maximisation (see the module docstring).
    """
    return gamma * (gamma - Sigma_diag) / mu**2


def reestimate_beta(t, Phi, mu, gamma):
    """β = (N − Σγ_i)/‖t − Φμ‖² (label ``rvm-noise``)."""
    residual = t - Phi @ mu
    return (len(t) - gamma.sum()) / (residual @ residual)


def em_beta(t, Phi, mu, gamma, beta):
    """β = N/(‖t − Φμ‖² + β⁻¹Σγ_i), the EM noise update (label ``rvm-em-noise``)."""
    residual = t - Phi @ mu
    return len(t) / (residual @ residual + gamma.sum() / beta)


def _new_alpha(method, update, grew, mu, Sigma_diag, gamma):
    """The α update of `method`; with ``update="accelerated"`` eq. (13) replaces the
    standard update for every α_i that grew in the previous iteration (the seed
    applies it once "α is growing steadily") while it stays positive."""
    if method == "em":
        new = em_alpha(mu, Sigma_diag)
    else:
        new = reestimate_alpha(gamma, mu)
    if update == "accelerated":
        fast = accelerated_alpha(gamma, mu, Sigma_diag)
        use = grew & (fast > 0)
        new = np.where(use, fast, new)
    return new


def reestimate(
    Phi,
    t,
    alpha,
    beta,
    *,
    method="reestimate",
    update="standard",
    max_iter=1000,
    tol=1e-3,
    alpha_max=1e12,
):
    """Maximise the evidence over α and β by re-estimation or EM, pruning as it goes.

    Implements (rvm-gamma), (rvm-reestimate-alpha) and (rvm-noise), or
    (rvm-em-alpha) and (rvm-em-noise) with ``method="em"``. Basis function i
    leaves the model when α_i exceeds ``alpha_max`` (scalar, or one bound per
    column) or γ_i falls below `GAMMA_MIN`: its weight is then pinned at 0 by
    the prior. Stops when no basis function was pruned and every log α_i and
    log β changed by less than `tol`.
    """
    N, M = Phi.shape
    keep = np.arange(M)
    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), (M,)).copy()
    alpha_max = np.broadcast_to(np.asarray(alpha_max, dtype=float), (M,))
    grew = np.zeros(M, dtype=bool)
    evidence = []
    converged = False
    for n_iter in range(1, max_iter + 1):
        post = posterior(Phi[:, keep], t, alpha, beta)
        evidence.append(post.log_evidence)
        Sigma_diag = np.diag(post.Sigma)
        gamma = gamma_factors(alpha, Sigma_diag)
        new_alpha = _new_alpha(method, update, grew, post.mu, Sigma_diag, gamma)
        if method == "em":
            new_beta = em_beta(t, Phi[:, keep], post.mu, gamma, beta)
        else:
            new_beta = reestimate_beta(t, Phi[:, keep], post.mu, gamma)
        check_finite_values(
            f"RVM {method}",
            n_iter,
            log_evidence=post.log_evidence,
            mu=post.mu,
            beta=new_beta,
        )
        stay = (
            (new_alpha < alpha_max[keep]) & (gamma > GAMMA_MIN) & np.isfinite(new_alpha)
        )
        if not stay.any():
            raise RuntimeError(
                "every basis function was pruned: the evidence prefers explaining the "
                "targets as noise. Check the kernel width (gamma) or the scale of y."
            )
        change = np.max(np.abs(np.log(new_alpha[stay] / alpha[stay])), initial=0.0)
        change = max(change, abs(np.log(new_beta / beta)))
        grew = (new_alpha > alpha)[stay]
        alpha, beta, keep = new_alpha[stay], new_beta, keep[stay]
        if stay.all() and change < tol:
            converged = True
            break
    post = posterior(Phi[:, keep], t, alpha, beta)
    gamma = gamma_factors(alpha, np.diag(post.Sigma))
    return Reestimation(
        keep,
        alpha,
        beta,
        post.mu,
        post.Sigma,
        gamma,
        post.log_evidence,
        np.array(evidence + [post.log_evidence]),
        n_iter,
        converged,
    )
