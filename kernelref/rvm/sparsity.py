"""Sparsity and quality: the evidence as a function of one α_i at a time.

The log evidence splits around any one basis function i (label
``rvm-decomposition``):

    L(α) = L(α₋ᵢ) + ℓ(α_i),   ℓ(α_i) = ½[log α_i − log(α_i + s_i) + q_i²/(α_i + s_i)],

where, with C₋ᵢ the covariance C of the evidence without basis function i,
s_i = φ_iᵀC₋ᵢ⁻¹φ_i (sparsity) and q_i = φ_iᵀC₋ᵢ⁻¹t (quality), obtained from
S_i = φ_iᵀC⁻¹φ_i and Q_i = φ_iᵀC⁻¹t of the current model (label ``rvm-sq``).
ℓ has its single maximum at α_i = s_i²/(q_i² − s_i) when q_i² > s_i and rises
towards α_i = ∞ (basis function out of the model) otherwise (label
``rvm-fast-alpha``). Everything here is elementwise in (α, s, q): the
sequential algorithm (``kernelref.rvm.fast``) takes the best of these gains.
"""

import numpy as np

__all__ = ["ZERO_FACTOR", "action_gains", "ell", "optimal_alpha", "sparsity_quality"]

#: q_i² − s_i at or below this counts as zero: the basis function is out
#: (SparseBayes 2.0's default, SB2_ControlSettings).
ZERO_FACTOR = 1e-12


def sparsity_quality(S, Q, alpha, inside=None):
    """s_i, q_i from S_i, Q_i (label ``rvm-sq``).

    For a basis function in the model (finite α_i), s_i = α_iS_i/(α_i − S_i) and
    q_i = α_iQ_i/(α_i − S_i); for one outside it (α_i = ∞) s_i = S_i, q_i = Q_i.
    With α_i − S_i = α_i²/(α_i + s_i) the factor is 1 + s_i/α_i = q_i²/s_i at the
    optimum α_i: it magnifies the relative error of S_i, which is why S_i must be
    computed without cancellation (`kernelref.rvm.coordinates.stable_SQ`).
    ``inside`` indexes the finite α_i when the caller knows them (the model's
    ``active``).
    """
    if inside is None:
        inside = np.flatnonzero(np.isfinite(alpha))
    s, q = S.copy(), Q.copy()
    S_in, alpha_in = S[inside], alpha[inside]
    factor = alpha_in / (alpha_in - S_in)
    s[inside] = factor * S_in
    q[inside] = factor * Q[inside]
    return s, q


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
        return np.where(
            theta > ZERO_FACTOR, s**2 / np.where(theta > 0, theta, 1.0), np.inf
        )


def action_gains(alpha, active, s, q, refused, theta=None, wanted=None):
    """The optimal α and the gain ΔL of changing it, for every column.

    For every column: its optimal α (rvm-fast-alpha) and ΔL = ℓ(α_new) − ℓ(α_old)
    (rvm-fast-gains), which is an addition, a re-estimation or a deletion (a column
    that stays out gains 0). At the optimum α* = s/r, with r = (q² − s)/s,
    ℓ(α*) = ½[r − log(1 + r)], the gain of an addition; only the columns with
    q² − s above `ZERO_FACTOR` have one. Deleting the last basis function and adding
    a ``refused`` column (aligned with a basis function in the model, or inside the
    model's span; those in the model, ``active``, are never refused) are not allowed.
    ``theta``, q² − s, and ``wanted``, the mask q² − s > `ZERO_FACTOR`, are
    computed when not given.
    """
    if theta is None:
        theta = q * q - s
    if wanted is None:
        wanted = theta > ZERO_FACTOR
    to = (wanted & ~refused).nonzero()[0]
    s_to = s[to]
    r = theta[to] / s_to
    new_alpha = np.empty(len(s))  # np.full's values, without its call overhead
    new_alpha.fill(np.inf)
    new_alpha[to] = s_to / r
    gain = np.zeros(len(s))
    gain[to] = 0.5 * (r - np.log1p(r))  # ℓ(α_new), 0 for α_new = ∞
    ell_old = _ell_finite(alpha[active], s[active], q[active])
    if len(active) == 1 and np.isinf(new_alpha[active[0]]):  # the last one stays
        new_alpha[active], gain[active] = alpha[active], ell_old
    gain[active] -= ell_old  # − ℓ(α_old), 0 for α_old = ∞
    return new_alpha, gain


def _ell_finite(alpha, s, q):
    """ℓ(α_i) of `ell` for finite α_i only (no masking)."""
    a_s = alpha + s
    return 0.5 * (np.log(alpha / a_s) + q * q / a_s)
