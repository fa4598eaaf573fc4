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
wrong scale.)

S_i and Q_i, the posterior and the evidence are computed in orthonormal
coordinates of the model's span (`kernelref.rvm.coordinates`), not by the Woodbury
form, which cancels catastrophically on nearly collinear columns.
"""

from collections import namedtuple

import numpy as np

from kernelref.rvm.coordinates import (
    add_coordinate, coordinate_posterior, drop_coordinate, orthonormal_coordinates,
    span_residual, stable_SQ)
from kernelref.rvm.design import initial_beta
from kernelref.rvm.reestimate import gamma_factors

__all__ = [
    "ALIGNMENT_MAX", "BETA_MAX_FACTOR", "BETA_SCHEDULES", "BETA_UPDATE_FREQUENCY",
    "BETA_UPDATE_START", "FastResult", "INIT_ALPHA_MAX", "MIN_DELTA_LOG_BETA",
    "SPAN_RESIDUAL_MIN", "ZERO_FACTOR", "check_beta_schedule", "ell", "fast_marginal_likelihood",
    "fast_on_unit_columns", "fast_regression", "on_user_scale", "optimal_alpha",
    "sparsity_quality", "unit_columns"]

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
#: in the model is (nearly) a copy of it and is not added (SparseBayes's basis
#: alignment test; ``alignment_max`` of the estimators).
ALIGNMENT_MAX = 1 - 1e-3
#: The starting α of the first basis function when q² ≤ s for it.
INIT_ALPHA_MAX = 1e3

# Not in SparseBayes, which has no such test (see kernelref.rvm.coordinates).
#: A candidate whose unit-norm column lies within this squared distance of the span
#: of the model's columns is never added: below it the new direction (I − UUᵀ)φ_i,
#: computed with an absolute error of a few ε, is mostly rounding.
SPAN_RESIDUAL_MIN = 1e-10

#: How β is learnt alongside α (see `fast_regression`).
BETA_SCHEDULES = ("both", "update", "hold")

#: ``active`` indexes the columns of Φ in the model; ``alpha``, ``mu``, ``Sigma``
#: belong to them, on the scale of the columns the function was given; ``evidence`` is the log evidence after each iteration;
#: ``actions`` records ("add" | "reestimate" | "delete" | "none", column) per
#: iteration.
FastResult = namedtuple(
    "FastResult",
    "active alpha beta mu Sigma gamma log_evidence evidence actions n_iter converged")


def sparsity_quality(S, Q, alpha):
    """s_i, q_i from S_i, Q_i (label ``rvm-sq``).

    For a basis function in the model (finite α_i), s_i = α_iS_i/(α_i − S_i) and
    q_i = α_iQ_i/(α_i − S_i); for one outside it (α_i = ∞) s_i = S_i, q_i = Q_i.
    With α_i − S_i = α_i²/(α_i + s_i) the factor is 1 + s_i/α_i = q_i²/s_i at the
    optimum α_i: it magnifies the relative error of S_i, which is why S_i must be
    computed without cancellation (`kernelref.rvm.coordinates.stable_SQ`).
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


def _choose_action(alpha, s, q, refused, n_active):
    """The optimal α and the gain ΔL of changing it, for every column.

    For every column: its optimal α (rvm-fast-alpha) and ΔL = ℓ(α_new) − ℓ(α_old),
    which is an addition, a re-estimation or a deletion (a column that stays out
    gains 0). Deleting the last basis function and adding a `refused` one (aligned
    with a basis function in the model, or inside the model's span) are not allowed.
    """
    new_alpha = optimal_alpha(s, q)
    new_alpha[~np.isfinite(alpha) & refused] = np.inf
    if n_active == 1:
        last = np.isfinite(alpha) & ~np.isfinite(new_alpha)
        new_alpha[last] = alpha[last]
    gain = np.zeros_like(s)
    moves = np.flatnonzero(np.isfinite(alpha) | np.isfinite(new_alpha))
    gain[moves] = (ell(new_alpha[moves], s[moves], q[moves])
                   - ell(alpha[moves], s[moves], q[moves]))
    return new_alpha, gain


def unit_columns(Phi):
    """Φ with every nonzero column divided by its norm c_i, and the norms c
    (0 for a zero column): the scaling SparseBayes works in."""
    scales = np.sqrt(np.einsum("np,np->p", Phi, Phi))
    return Phi / np.where(scales > 0, scales, 1.0), scales


def on_user_scale(result, scales):
    """A result on unit columns φ/c mapped back to the columns φ (label
    ``rvm-alpha-scale``): α = α̃c², μ = μ̃/c, Σ_ij = Σ̃_ij/(c_ic_j)."""
    c = scales[result.active]
    return result._replace(alpha=result.alpha * c**2, mu=result.mu / c,
                           Sigma=result.Sigma / np.outer(c, c))


def fast_marginal_likelihood(Phi, t, *, alpha=None, **settings):
    """Maximise the evidence by Tipping & Faul's sequential algorithm: scale the
    columns to unit norm, run `fast_on_unit_columns`, and report α, μ and Σ on
    the scale of the columns given.

    ``alpha`` (one per column of Φ, on its scale, ``np.inf`` outside the model)
    is a warm start; ``settings`` go to `fast_on_unit_columns`.
    """
    Phi_unit, scales = unit_columns(Phi)
    if alpha is not None:
        # A unit-norm column φ/c carries the weight c·w, so its α is α/c².
        alpha = np.asarray(alpha, dtype=float) / np.where(scales > 0, scales, 1.0) ** 2
    result = fast_on_unit_columns(Phi_unit, scales > 0, t, alpha=alpha, **settings)
    return on_user_scale(result, scales)


def fast_on_unit_columns(Phi, usable, t, *, max_iter=10000, tol=1e-3, update_beta=True,
                         beta=None, alpha=None, alignment_max=ALIGNMENT_MAX):
    """Tipping & Faul's sequential algorithm on columns of unit norm (or zero,
    where ``usable`` is false); α, μ and Σ are on the scale of these columns.

    Implements (rvm-sq), (rvm-decomposition), (rvm-fast-alpha) and the noise
    update (rvm-noise) on the schedule of SparseBayes. Starts, as SparseBayes
    does, from the column most aligned with t. Converged when no addition or
    deletion raises the evidence, every re-estimation changes log α_i by less
    than `tol` (SparseBayes's MinDeltaLogAlpha, 1e-3, looks only at the chosen
    one), and a final β update changes log β by less than `MIN_DELTA_LOG_BETA`.
    Columns of Φ that are zero, that have cosine above ``alignment_max`` with one
    in the model, or that lie within `SPAN_RESIDUAL_MIN` of the model's span are
    never added.

    ``beta`` replaces the starting β (with ``update_beta=False``, the fixed β),
    and ``alpha`` (one per column, ``np.inf`` outside the model) replaces the
    starting model: a warm start, which the relevance vector classifier uses on
    each new Gaussian approximation of its likelihood.
    """
    N, P = Phi.shape
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
        alpha = np.array(alpha, dtype=float)
        active = np.flatnonzero(np.isfinite(alpha))
    active = np.sort(np.asarray(active, dtype=int))
    unit = usable.astype(float)
    U, Psi = orthonormal_coordinates(Phi, active)
    t2 = t @ t

    tau = U.T @ t
    perp = max(t2 - tau @ tau, 0.0)                     # ‖(I − UUᵀ)t‖²
    post = coordinate_posterior(Psi[:, active], tau, perp, alpha[active], beta, N)
    evidence, actions = [], []
    converged = False
    for n_iter in range(1, max_iter + 1):
        residual = span_residual(Psi, unit)
        S, Q = stable_SQ(Psi, active, alpha[active], beta, residual, PhiT_t, tau)
        s, q = sparsity_quality(S, Q, alpha)
        refused = ~usable | (residual < SPAN_RESIDUAL_MIN)
        if alignment_max < 1:
            inner = Psi.T @ Psi[:, active]              # φ_iᵀφ_j, j in the model
            refused |= np.max(np.abs(inner), axis=1) > alignment_max
        new_alpha, gain = _choose_action(alpha, s, q, refused, len(active))
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
            active = active[active != j]
            U, Psi = drop_coordinate(U, Psi, Psi[:, active])
        elif not inside[j]:
            actions.append(("add", j))
            U, Psi = add_coordinate(Phi, U, Psi, j)
            active = np.sort(np.append(active, j))
        else:
            actions.append(("reestimate", j))
        if gain[j] > 0:
            alpha[j] = new_alpha[j]
        if actions[-1][0] in ("add", "delete"):          # the span changed
            tau = U.T @ t
            perp = max(t2 - tau @ tau, 0.0)

        post = coordinate_posterior(Psi[:, active], tau, perp, alpha[active], beta, N)
        beta_due = n_iter <= BETA_UPDATE_START or n_iter % BETA_UPDATE_FREQUENCY == 0
        beta_change = 0.0
        if update_beta and (beta_due or settled):
            gamma = gamma_factors(alpha[active], np.diag(post.Sigma))
            misfit = tau - Psi[:, active] @ post.mu
            # (rvm-noise) with ‖t − Φμ‖² = ‖(I − UUᵀ)t‖² + ‖τ − Rμ‖²
            new_beta = min((N - gamma.sum()) / (perp + misfit @ misfit), beta_max)
            beta_change, beta = abs(np.log(new_beta / beta)), new_beta
            post = coordinate_posterior(Psi[:, active], tau, perp, alpha[active], beta, N)
        evidence.append(post.log_evidence)
        if settled and beta_change < MIN_DELTA_LOG_BETA:
            converged = True
            break

    gamma = gamma_factors(alpha[active], np.diag(post.Sigma))
    return FastResult(active, alpha[active], beta, post.mu, post.Sigma, gamma,
                      post.log_evidence, np.array(evidence), actions, n_iter, converged)


def check_beta_schedule(beta_schedule):
    """Refuse a β schedule that is not one of `BETA_SCHEDULES`."""
    if beta_schedule not in BETA_SCHEDULES:
        raise ValueError(f"beta_schedule must be one of {BETA_SCHEDULES}; got {beta_schedule!r}.")


def fast_regression(Phi, t, *, beta_schedule="both", **settings):
    """The fast algorithm with the noise precision β learnt on one of two schedules.

    'update' is SparseBayes's: β re-estimated at each of the first iterations.
    With a one-function model that makes most of the targets look like noise, and
    the run can stall at a poor maximum with one or two basis functions. 'hold'
    keeps β at its starting value (noise at a tenth of the targets' spread) until
    the α settle, then continues from there with β learnt. Each reaches a local
    maximum of L(α, β) and neither is always the higher; 'both' runs the two and
    keeps the higher evidence (the fast-algorithm chapter measures all three).
    The columns are scaled to unit norm once for all runs; ``settings`` go to
    `fast_on_unit_columns`.
    """
    check_beta_schedule(beta_schedule)
    Phi_unit, scales = unit_columns(Phi)                # once, for every run
    usable = scales > 0
    runs = []
    if beta_schedule in ("update", "both"):
        runs.append(fast_on_unit_columns(Phi_unit, usable, t, **settings))
    if beta_schedule in ("hold", "both"):
        held = fast_on_unit_columns(Phi_unit, usable, t, update_beta=False, **settings)
        alpha = np.full(Phi.shape[1], np.inf)
        alpha[held.active] = held.alpha
        released = fast_on_unit_columns(Phi_unit, usable, t, alpha=alpha, beta=held.beta,
                                        **settings)
        runs.append(released._replace(
            evidence=np.concatenate([held.evidence, released.evidence]),
            actions=held.actions + released.actions,
            n_iter=held.n_iter + released.n_iter,
            converged=held.converged and released.converged))
    return on_user_scale(max(runs, key=lambda run: run.log_evidence), scales)
