"""Newton's method on the α of the basis functions in the model, and β, jointly.

The sequential algorithm changes one α_i per iteration. Once no addition or
deletion pays, what remains is to settle the α of the m basis functions in the
model (and β): coordinate ascent does it in many iterations, each moving one α_i
while the others wait, and β alternating with them. Here the evidence of the
model's own m-dimensional problem (R, τ, ‖(I − UUᵀ)t‖², label
``rvm-evidence-split``) is maximised over x = (log α_M, log β) by Newton's method
with a backtracking line search, from its gradient and Hessian
(label ``rvm-polish-hessian``). With Σ = (A + βRᵀR)⁻¹, μ = βΣRᵀτ and
ν = ΣAμ:

    ∂L/∂log α_i = ½(1 − α_i(μ_i² + Σ_ii)),
    ∂L/∂log β   = ½(N − m + tr AΣ − β e),     e = perp + ‖τ − Rμ‖²,
    ∂²L/∂log α_i∂log α_j = −½δ_ij α_i(μ_i² + Σ_ii) + α_iα_j(μ_iμ_jΣ_ij + ½Σ_ij²),
    ∂²L/∂log α_i∂log β   = −α_iμ_iν_i + ½α_i(Σ − ΣAΣ)_ii,
    ∂²L/∂log β²          = ½(−tr AΣ + tr (AΣ)² − βe) + (Aμ)ᵀν.

A basis function whose own optimum moves to α_i = ∞ is deleted on the way, as
the sequential algorithm would. The polish stops at its fixed point (every
Newton step below the tolerance on log α and log β) or when the line search
finds no ascent (the evidence no longer resolves the steps).
"""

from collections import namedtuple

import numpy as np
from scipy.linalg import LinAlgError, eigh, lapack

__all__ = [
    "MAX_LOG_STEP",
    "Polished",
    "evidence_derivatives",
    "newton_polish",
]

#: No Newton step moves any log α_i or log β by more than this (a factor e³).
MAX_LOG_STEP = 3.0

_LOG_2PI = np.log(2 * np.pi)


#: The result of `newton_polish`: α of the model's columns (∞ for those it
#: deleted), β, the log evidence, the steps taken (Newton steps and deletions),
#: and why it stopped ("settled", "flat", "max_steps").
Polished = namedtuple("Polished", "alpha beta log_evidence n_steps reason")


def _posterior(K, Rt_tau, tau_tau, perp, alpha, beta, N):
    """The Cholesky factor of Σ⁻¹ (`_covariance` gives Σ from it: only for the
    steps accepted), μ, e and L of the m-dimensional problem (K = RᵀR, Rᵀτ, τᵀτ)."""
    P = beta * K
    P.flat[:: len(alpha) + 1] += alpha
    L, info = lapack.dpotrf(P, lower=1, clean=1)
    if info != 0:
        raise LinAlgError("the posterior precision is not positive definite")
    mu = lapack.dpotrs(L, beta * Rt_tau, lower=1)[0]
    # ‖τ − Rμ‖² = τᵀτ − 2μᵀRᵀτ + μᵀKμ
    e = perp + max(tau_tau - 2 * mu @ Rt_tau + mu @ (K @ mu), 0.0)
    log_det = 2.0 * np.log(L.diagonal()).sum()
    log_evidence = -0.5 * (
        N * _LOG_2PI
        - N * np.log(beta)
        - np.log(alpha).sum()
        + log_det
        + beta * e
        + mu @ (alpha * mu)
    )
    return L, mu, e, log_evidence


def _covariance(L):
    """Σ from the lower Cholesky factor L of Σ⁻¹ (`_posterior`): dpotri gives Σ's
    lower triangle; the upper one stays zero (dpotrf's clean=1), so Σ is that
    triangle plus its transpose, the diagonal halved (exactly)."""
    Sigma = lapack.dpotri(L, lower=1)[0]
    Sigma += Sigma.T
    Sigma.flat[:: len(Sigma) + 1] *= 0.5
    return Sigma


def evidence_derivatives(R, tau, perp, alpha, beta, N, learn_beta=True):
    """The log evidence L, its gradient and Hessian with respect to
    (log α, log β) — or log α alone without ``learn_beta`` — of the model with
    coordinates R and τ (label ``rvm-polish-hessian``)."""
    K, Rt_tau = R.T @ R, R.T @ tau
    factor, mu, e, L = _posterior(K, Rt_tau, tau @ tau, perp, alpha, beta, N)
    Sigma = _covariance(factor)
    return (L,) + _derivatives(Sigma, mu, e, alpha, beta, N, learn_beta)


def _derivatives(Sigma, mu, e, alpha, beta, N, learn_beta):
    m = len(alpha)
    d = Sigma.diagonal()
    a_md = alpha * (mu**2 + d)  # α_i(μ_i² + Σ_ii), in g and on H's diagonal
    a_mu = alpha * mu
    # H = (Aμ)(Aμ)ᵀ∘Σ + ½ααᵀ∘Σ∘Σ, in place (the same products, fewer m×m arrays),
    # written straight into the (m + 1)×(m + 1) Hessian when β is learnt
    out = np.empty((m + 1, m + 1) if learn_beta else (m, m))
    H = np.multiply(a_mu[:, None], a_mu, out=out[:m, :m])  # np.outer's arithmetic
    H *= Sigma
    half = np.multiply(0.5 * alpha[:, None], alpha)  # ½ααᵀ (×½ is exact)
    half *= np.square(Sigma)
    if learn_beta:
        # ½α_i(ΣAΣ)_ii = Σ_j ½α_iα_jΣ_ij² and ½tr (AΣ)² = Σ_ij ½α_iα_jΣ_ij²: the
        # sums of ½ααᵀ∘Σ∘Σ, without AΣ
        half_SAS = half.sum(axis=1)
        tr_ASAS = 2.0 * half_SAS.sum()
    H += half
    step = len(out) + 1  # H's diagonal, in the flat order of ``out``
    out.flat[: m * step : step] -= 0.5 * a_md
    if not learn_beta:
        return 0.5 * (1.0 - a_md), out
    nu = Sigma @ a_mu  # ΣAμ
    tr_AS = alpha @ d
    g_beta = 0.5 * (N - m + tr_AS - beta * e)
    h_ab = -a_mu * nu + 0.5 * alpha * d - half_SAS
    h_bb = 0.5 * (-tr_AS + tr_ASAS - beta * e) + a_mu @ nu
    out[:m, m] = out[m, :m] = h_ab
    out[m, m] = h_bb
    g = np.empty(m + 1)
    np.multiply(0.5, 1.0 - a_md, out=g[:m])
    g[m] = g_beta
    return g, out


def _ascent_direction(g, H):
    """The Newton step −H⁻¹g where H is negative definite; otherwise the step of
    −|H|, H with its eigenvalues made negative (and bounded away from zero)."""
    c, info = lapack.dpotrf(-H, lower=1)
    if info == 0:
        return lapack.dpotrs(c, g, lower=1)[0]
    step = _flipped_step(g, H)
    if step is not None:
        return step
    w, V = eigh(H, check_finite=False, driver="evd")
    w = np.maximum(np.abs(w), 1e-8 * max(np.abs(w).max(), 1.0))
    return V @ ((V.T @ g) / w)


def _flipped_step(g, H):
    """|H|⁻¹g of `_ascent_direction` from the few eigenpairs of H that are not
    well below zero, where no eigenvalue needs the bound away from zero: with
    H = VWVᵀ, |H| = −H + 2V₊W₊V₊ᵀ over the positive eigenvalues W₊, a positive
    definite matrix solved by its Cholesky factor. Near a maximum H has 1–7 such
    eigenvalues of 100–240 (measured on ``benchmarks/bench_rvm.py``'s polishes),
    so only they are computed (LAPACK's dsyevr on the eigenvalues above −b, b the
    bound): a third of the full decomposition's cost at m = 240. None when an
    eigenvalue lies within b of zero, or the factor fails: the full decomposition
    then decides, as before."""
    m = len(H)
    bound = 1e-8 * max(np.sqrt(np.einsum("ij,ij->", H, H)), 1.0)  # ≥ 1e-8‖H‖₂
    lwork, liwork, _ = lapack.dsyevr_lwork(m, lower=1)
    w, V, found, _, info = lapack.dsyevr(
        H,
        compute_v=1,
        range="V",
        lower=1,
        vl=-bound,
        vu=np.inf,
        lwork=int(lwork),
        liwork=int(liwork),
    )
    if info != 0:
        return None
    w, V = w[:found], V[:, :found]
    if (np.abs(w) < bound).any():
        return None
    flipped = V * (2.0 * w)
    M = flipped @ V.T
    M -= H
    c, info = lapack.dpotrf(M, lower=1)
    if info != 0:
        return None
    return lapack.dpotrs(c, g, lower=1)[0]


def newton_polish(
    R,
    tau,
    perp,
    alpha,
    beta,
    N,
    *,
    learn_beta,
    beta_max=np.inf,
    tol=1e-3,
    zero_factor=1e-12,
    max_steps=50,
):
    """Maximise the evidence of the model's coordinates (R, τ, perp) over its α
    (and β with ``learn_beta``, at most ``beta_max``) by Newton's method with
    backtracking (label ``rvm-polish-hessian``); a `Polished`, with α = ∞ for the
    basis functions it deleted.

    Each step is accepted only if it raises L. Before each Newton step, the basis
    functions whose own optimum is α_i = ∞ (q_i² − s_i ≤ ``zero_factor``, with
    s_i = 1/Σ_ii − α_i = β(ΣRᵀR)_ii/Σ_ii and q_i = μ_i/Σ_ii, label
    ``rvm-fast-alpha``) are deleted:
    all of them at once if that raises L, else the one whose deletion gains most,
    −ℓ(α_i) (label ``rvm-decomposition``); the last basis function stays. It stops
    when the next Newton step would change every log α_i and log β by less than
    ``tol``, or when no backtracked step raises L (beyond rounding). That last
    step is not taken: its gain, O(tol²), is at the rounding of L, so whether it
    is accepted would depend on the rounding of the inputs (the Dask backend's
    differ), while Newton's quadratic convergence puts the steps before it far
    above ``tol`` and the ones after far below.
    """
    K_all, Rt_tau_all, tau_tau = R.T @ R, R.T @ tau, tau @ tau
    alpha_all = np.array(alpha, dtype=float)
    keep = np.arange(len(alpha_all))
    alpha, beta = alpha_all.copy(), float(beta)
    K, Rt_tau = K_all, Rt_tau_all
    factor, mu, e, L = _posterior(K, Rt_tau, tau_tau, perp, alpha, beta, N)
    Sigma = _covariance(factor)

    def finish(n_steps, reason):
        out = np.full(len(alpha_all), np.inf)
        out[keep] = alpha
        return Polished(out, beta, L, n_steps, reason)

    for n_steps in range(max_steps):
        d = Sigma.diagonal()
        # s_i = γ_i/Σ_ii with γ_i = 1 − α_iΣ_ii = β(ΣK)_ii, which does not cancel
        # when α_i ≫ s_i; q_i = μ_i/Σ_ii.
        s = beta * np.einsum("ij,ji->i", Sigma, K) / d
        q = mu / d
        irrelevant = q**2 - s <= zero_factor
        if len(keep) > 1 and irrelevant.any():
            ell = 0.5 * (np.log(alpha / (alpha + s)) + q**2 / (alpha + s))
            if irrelevant.all():  # the last basis function stays
                irrelevant[np.argmax(ell)] = False
            for drop in (irrelevant, np.arange(len(keep)) == np.argmin(ell)):
                rest = (~drop).nonzero()[0]
                K_rest = K[np.ix_(rest, rest)]
                trial = _posterior(
                    K_rest, Rt_tau[rest], tau_tau, perp, alpha[rest], beta, N
                )
                if trial[3] >= L:
                    break
            keep, alpha, K, Rt_tau = keep[rest], alpha[rest], K_rest, Rt_tau[rest]
            factor, mu, e, L = trial
            Sigma = _covariance(factor)
            continue
        m = len(alpha)
        fit_beta = learn_beta
        g, H = _derivatives(Sigma, mu, e, alpha, beta, N, fit_beta)
        step = _ascent_direction(g, H)
        if fit_beta and beta >= beta_max and step[m] > 0:  # β held at its cap
            step = _ascent_direction(g[:m], H[:m, :m])
            fit_beta = False
        biggest = np.abs(step).max()
        if biggest < tol:  # settled; the step is not taken (see `newton_polish`)
            return finish(n_steps, "settled")
        if biggest > MAX_LOG_STEP:
            step *= MAX_LOG_STEP / biggest
        # L is computed to about 1e-12 relative: accept a step that does not lower it
        # by more, so that the path does not depend on the rounding of the inputs.
        slack = 1e-12 * abs(L)
        scale, accepted = 1.0, False
        while scale > 1e-4:
            new_alpha = alpha * np.exp(scale * step[:m])
            new_beta = (
                min(beta * np.exp(scale * step[m]), beta_max) if fit_beta else beta
            )
            try:
                trial = _posterior(K, Rt_tau, tau_tau, perp, new_alpha, new_beta, N)
            except LinAlgError:
                trial = None
            if trial is not None and trial[3] >= L - slack:
                accepted = True
                break
            scale *= 0.5
        if not accepted:
            return finish(n_steps, "flat")
        alpha, beta = new_alpha, new_beta
        factor, mu, e, L = trial
        Sigma = _covariance(factor)
    return finish(max_steps, "max_steps")
