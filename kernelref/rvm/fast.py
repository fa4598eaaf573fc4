"""The fast marginal likelihood maximisation of Tipping & Faul (2003).

Start from one basis function and, one basis function at a time, add it,
re-estimate its α_i, or delete it — whichever raises the log evidence most.
The evidence splits around any one basis function i (label ``rvm-decomposition``):

    L(α) = L(α₋ᵢ) + ℓ(α_i),   ℓ(α_i) = ½[log α_i − log(α_i + s_i) + q_i²/(α_i + s_i)],

where, with C₋ᵢ the covariance C of the evidence without basis function i,
s_i = φ_iᵀC₋ᵢ⁻¹φ_i (sparsity) and q_i = φ_iᵀC₋ᵢ⁻¹t (quality). ℓ has its single
maximum at α_i = s_i²/(q_i² − s_i) when q_i² > s_i and rises towards α_i = ∞
(basis function out of the model) otherwise (label ``rvm-fast-alpha``). s_i and
q_i come from S_i = φ_iᵀC⁻¹φ_i and Q_i = φ_iᵀC⁻¹t of the current model
(label ``rvm-sq``).

Numerics and choices. Basis functions are scaled to unit norm (as SparseBayes
does); α is mapped back to the user's scale at the end: if φ̃ = φ/c then
w = w̃/c and α = α̃c². (SparseBayes divides by c² instead, returning α on the
wrong scale.) The columns Φᵀφ_j of the basis functions in the model are cached;
Σ, μ, S and Q are recomputed each iteration from a Cholesky factor of the M×M
posterior precision rather than by rank-one updates: with M basis functions
in the model and P candidates that costs O(PM² + M³), below the O(NP) product
Φᵀφ_j that an addition needs anyway (rank-one updates pay it too) while
M ≪ √N, and no rounding error accumulates over thousands of updates.
"""

from collections import namedtuple

import numpy as np

from kernelref.rvm.design import initial_beta, posterior
from kernelref.rvm.reestimate import gamma_factors, reestimate_beta

__all__ = [
    "ALIGNMENT_MAX", "BETA_MAX_FACTOR", "BETA_UPDATE_FREQUENCY", "BETA_UPDATE_START",
    "FastResult", "INIT_ALPHA_MAX", "MIN_DELTA_LOG_BETA", "ZERO_FACTOR", "ell",
    "fast_marginal_likelihood", "optimal_alpha", "sparsity_quality"]

# Defaults of SparseBayes 2.0 (SB2_ControlSettings, SB2_Initialisation).
#: q_i² − s_i at or below this counts as zero: the basis function is out.
ZERO_FACTOR = 1e-12
#: Terminate only if a β update changes log β by less than this.
MIN_DELTA_LOG_BETA = 1e-6
#: Update β at every one of the first iterations, to reach the right noise level early…
BETA_UPDATE_START = 10
#: …and every this many iterations afterwards, since each update changes every S_i, Q_i.
BETA_UPDATE_FREQUENCY = 5
#: The noise variance is kept above var(t)/BETA_MAX_FACTOR: a model that fits the
#: targets exactly would otherwise send β to infinity.
BETA_MAX_FACTOR = 1e6
#: A candidate whose unit-norm column has inner product above this with a column
#: in the model is (nearly) a copy of it and is not added: it would make the
#: posterior precision singular without changing the model.
ALIGNMENT_MAX = 1 - 1e-3
#: The starting α of the first basis function when q² ≤ s for it.
INIT_ALPHA_MAX = 1e3

#: ``active`` indexes the columns of Φ in the model; ``alpha`` (user scale), ``mu``,
#: ``Sigma`` belong to them; ``evidence`` is the log evidence after each iteration;
#: ``actions`` records ("add" | "reestimate" | "delete" | "none", column) per
#: iteration.
FastResult = namedtuple(
    "FastResult",
    "active alpha beta mu Sigma gamma log_evidence evidence actions n_iter converged")


def sparsity_quality(S, Q, alpha):
    """s_i, q_i from S_i, Q_i (label ``rvm-sq``).

    For a basis function in the model (finite α_i), s_i = α_iS_i/(α_i − S_i) and
    q_i = α_iQ_i/(α_i − S_i); for one outside it (α_i = ∞) s_i = S_i, q_i = Q_i.
    """
    inside = np.isfinite(alpha)
    factor = np.ones_like(S)
    factor[inside] = alpha[inside] / (alpha[inside] - S[inside])
    return factor * S, factor * Q


def ell(alpha, s, q):
    """ℓ(α_i) = ½[log α_i − log(α_i + s_i) + q_i²/(α_i + s_i)], the part of the log
    evidence that depends on α_i (label ``rvm-decomposition``); ℓ(∞) = 0."""
    alpha = np.asarray(alpha, dtype=float)
    finite = np.isfinite(alpha)
    a = np.where(finite, alpha, 1.0)
    value = 0.5 * (np.log(a) - np.log(a + s) + q**2 / (a + s))
    return np.where(finite, value, 0.0)


def optimal_alpha(s, q):
    """The maximiser of ℓ: s²/(q² − s) if q² > s, else ∞ (label ``rvm-fast-alpha``)."""
    theta = q**2 - s
    with np.errstate(divide="ignore"):
        return np.where(theta > ZERO_FACTOR, s**2 / np.where(theta > 0, theta, 1.0), np.inf)


def _choose_action(alpha, s, q, aligned, n_active):
    """The index and gain ΔL of the single-α change that raises the evidence most.

    For every column: its optimal α (rvm-fast-alpha) and ΔL = ℓ(α_new) − ℓ(α_old),
    which is an addition, a re-estimation or a deletion. Deleting the last basis
    function and adding an aligned one are not allowed.
    """
    new_alpha = optimal_alpha(s, q)
    new_alpha[~np.isfinite(alpha) & aligned] = np.inf
    if n_active == 1:
        last = np.isfinite(alpha) & ~np.isfinite(new_alpha)
        new_alpha[last] = alpha[last]
    gain = ell(new_alpha, s, q) - ell(alpha, s, q)
    return new_alpha, gain


def fast_marginal_likelihood(Phi, t, *, max_iter=10000, tol=1e-3, update_beta=True,
                             beta=None, alpha=None):
    """Maximise the evidence by Tipping & Faul's sequential algorithm.

    Implements (rvm-sq), (rvm-decomposition), (rvm-fast-alpha) and the noise
    update (rvm-noise) on the schedule of SparseBayes. Starts, as SparseBayes
    does, from the column most aligned with t. Converged when no addition or
    deletion raises the evidence, every re-estimation changes log α_i by less
    than `tol` (SparseBayes's MinDeltaLogAlpha, 1e-3, looks only at the chosen
    one), and a final β update changes log β by less than `MIN_DELTA_LOG_BETA`.
    Columns of Φ that are zero are never candidates.

    ``beta`` replaces the starting β (with ``update_beta=False``, the fixed β),
    and ``alpha`` (one per column of Φ, user scale, ``np.inf`` outside the model)
    replaces the starting model: a warm start, which the relevance vector
    classifier uses on each new Gaussian approximation of its likelihood.
    """
    N, P = Phi.shape
    scales = np.sqrt(np.einsum("np,np->p", Phi, Phi))
    usable = scales > 0
    Phi = Phi / np.where(usable, scales, 1.0)
    PhiT_t = Phi.T @ t
    beta = initial_beta(t) if beta is None else float(beta)
    beta_max = BETA_MAX_FACTOR / np.var(t) if update_beta else np.inf

    if alpha is None:
        first = int(np.argmax(np.abs(PhiT_t)))
        active = [first]
        s1, q1 = beta, beta * PhiT_t[first]             # S, Q of a unit column when C = β⁻¹I
        alpha = np.full(P, np.inf)
        alpha[first] = s1**2 / (q1**2 - s1) if q1**2 > s1 else INIT_ALPHA_MAX
    else:
        # A unit-norm column φ/c carries the weight c·w, so its α is α/c².
        alpha = np.asarray(alpha, dtype=float) / np.where(usable, scales, 1.0) ** 2
        active = [int(j) for j in np.flatnonzero(np.isfinite(alpha))]
    PhiT_Phi = Phi.T @ Phi[:, active]                   # cached columns Φᵀφ_j, j in model

    evidence, actions = [], []
    converged = False
    post = posterior(Phi[:, active], t, alpha[active], beta)
    for n_iter in range(1, max_iter + 1):
        S = beta * usable - beta**2 * np.einsum("pm,mk,pk->p", PhiT_Phi, post.Sigma, PhiT_Phi)
        Q = beta * PhiT_t - beta * PhiT_Phi @ post.mu
        s, q = sparsity_quality(S, Q, alpha)
        aligned = ~usable | (np.max(np.abs(PhiT_Phi), axis=1) > ALIGNMENT_MAX)
        new_alpha, gain = _choose_action(alpha, s, q, aligned, len(active))
        j = int(np.argmax(gain))
        inside = np.isfinite(alpha)
        log_change = np.abs(np.log(new_alpha[inside] / alpha[inside]))
        settled = np.all(log_change < tol) and not np.any(np.isinf(new_alpha) != ~inside)
        # When no gain is positive the remaining changes of α are below what the
        # evidence resolves in floating point: the α are as settled as they can get.
        settled = settled or gain[j] <= 0

        if gain[j] <= 0:
            # No single α change raises the evidence: only β may still move.
            actions.append(("none", j))
        elif np.isinf(new_alpha[j]):
            actions.append(("delete", j))
            k = active.index(j)
            del active[k]
            PhiT_Phi = np.delete(PhiT_Phi, k, axis=1)
        elif not inside[j]:
            actions.append(("add", j))
            active.append(j)
            PhiT_Phi = np.column_stack([PhiT_Phi, Phi.T @ Phi[:, j]])
        else:
            actions.append(("reestimate", j))
        if gain[j] > 0:
            alpha[j] = new_alpha[j]

        beta_due = n_iter <= BETA_UPDATE_START or n_iter % BETA_UPDATE_FREQUENCY == 0
        beta_change = 0.0
        if update_beta and (beta_due or settled):
            post = posterior(Phi[:, active], t, alpha[active], beta)
            gamma = gamma_factors(alpha[active], np.diag(post.Sigma))
            new_beta = min(reestimate_beta(t, Phi[:, active], post.mu, gamma), beta_max)
            beta_change, beta = abs(np.log(new_beta / beta)), new_beta
        post = posterior(Phi[:, active], t, alpha[active], beta)
        evidence.append(post.log_evidence)
        if settled and beta_change < MIN_DELTA_LOG_BETA:
            converged = True
            break

    active = np.array(active)
    order = np.argsort(active)
    active = active[order]
    post = posterior(Phi[:, active], t, alpha[active], beta)
    gamma = gamma_factors(alpha[active], np.diag(post.Sigma))
    c = scales[active]
    return FastResult(active, alpha[active] * c**2, beta, post.mu / c,
                      post.Sigma / np.outer(c, c), gamma, post.log_evidence,
                      np.array(evidence), actions, n_iter, converged)
