"""An exact screen of single swaps: one basis function replaced by another.

At a maximum of the sequential algorithm no single addition, deletion or
re-estimation pays, yet replacing a basis function i of the model by a column k
outside it (often a near neighbour of i) may. With every other α and β fixed, the
change of the log evidence of that swap is known in closed form (label
``rvm-swap-gain``): deleting i changes L by −ℓ(α_i) (label ``rvm-decomposition``),
and the covariance of the model without i is C₋ᵢ = C − α_i⁻¹φ_iφ_iᵀ, so

    C₋ᵢ⁻¹ = C⁻¹ + c_i e_ie_iᵀ,   e_i = C⁻¹φ_i,   c_i = 1/(α_i − S_i) = (α_i + s_i)/α_i²,

    S_k⁽⁻ⁱ⁾ = S_k + c_iV_ki²,   Q_k⁽⁻ⁱ⁾ = Q_k + c_iV_kiQ_i,   V_ki = φ_kᵀC⁻¹φ_i

(label ``rvm-SQ-rank-one`` with δ = −1/α_i); adding k to that model at its optimal
α gains ½[r − log(1 + r)] with r = (q² − s)/s, s = S_k⁽⁻ⁱ⁾, q = Q_k⁽⁻ⁱ⁾ (label
``rvm-fast-alpha``). Every φ_i of the model lies in the span of U, so
C⁻¹φ_i = βUH⁻¹ψ_i and V = βΨᵀH⁻¹Ψ_M: one P×m matrix, O(Pm·m_U) for all m·P
swaps, from what the loop keeps (Ψ, H⁻¹, S, Q), without a refit per trial.
"""

from collections import namedtuple

import numpy as np

from kernelref.rvm.fast_steps import SPAN_RESIDUAL_MIN
from kernelref.rvm.polish import newton_polish
from kernelref.rvm.sparsity import ZERO_FACTOR, sparsity_quality

__all__ = [
    "SWAP_MIN",
    "SWAP_SCREEN",
    "SWAP_VERIFY",
    "Swap",
    "polished_swap",
    "reestimation_estimates",
    "swap_gains",
    "swapped_coordinates",
]

#: The swaps with the largest exact gains (`swap_gains`) whose polish is estimated
#: (`reestimation_estimates`) …
SWAP_SCREEN = 40
#: … and of those, at most this many with an estimated gain above `SWAP_MIN`, best
#: estimate first, are polished (`polished_swap`) …
SWAP_VERIFY = 2
#: … and the first whose polished evidence beats the model's by this much (nats)
#: is taken: well above the rounding of L, so that runs whose inputs round
#: differently (the Dask backend's) take the same swaps.
SWAP_MIN = 1e-3

#: A swap that pays after a polish: the column ``k`` that joins, the columns
#: ``active`` of the swapped model (k last) and its `newton_polish` result
#: ``polished`` (α of ``active``, ∞ where the polish deleted, β, log evidence).
Swap = namedtuple("Swap", "k active polished")


def swap_gains(model, usable, alignment_max):
    """The exact gain ΔL of every swap (label ``rvm-swap-gain``) and the optimal α
    of the column that joins: two P×m arrays, column a for the basis function
    ``model.active[a]``, −∞ (and ∞) where the swap is not allowed: k in the model,
    unusable, within `SPAN_RESIDUAL_MIN` of U's span (which holds the model's), or
    aligned beyond ``alignment_max`` with a basis function other than the one it
    replaces; or with q² − s at most `ZERO_FACTOR` in the model without i. Only the
    rows of the columns that may join are computed: O(P_out·m·m_U) for P_out of
    them, where all P rows cost O(m²m_U) more (a model of nearly every column)."""
    active, alpha = model.active, model.alpha
    S, Q, beta = model.S, model.Q, model.beta
    s, q = sparsity_quality(S, Q, alpha, active)
    a_M, s_M, q_M = alpha[active], s[active], q[active]
    c = (a_M + s_M) / a_M**2  # 1/(α_i − S_i), written without cancellation
    ell_M = 0.5 * (np.log(a_M / (a_M + s_M)) + q_M**2 / (a_M + s_M))
    R = model.Psi[:, active]
    out = usable & ~np.isfinite(alpha) & (model.residual >= SPAN_RESIDUAL_MIN)
    out = np.flatnonzero(out)  # the columns that may join
    V = beta * ((model.Psi[:, out].T @ model.G) @ R)  # V_ki = φ_kᵀC⁻¹φ_i
    S_k = S[out, None] + c * V**2
    Q_k = Q[out, None] + V * (c * Q[active])
    theta = Q_k**2 - S_k
    ok = theta > ZERO_FACTOR
    ok &= _allowed(model, alignment_max, R, out)
    r = np.where(ok, theta / np.where(ok, S_k, 1.0), 0.0)
    gain = np.full((len(alpha), len(active)), -np.inf)
    new_alpha = np.full((len(alpha), len(active)), np.inf)
    gain[out] = np.where(ok, 0.5 * (r - np.log1p(r)) - ell_M, -np.inf)
    new_alpha[out] = np.where(ok, S_k / np.where(ok, r, 1.0), np.inf)
    return gain, new_alpha


def _allowed(model, alignment_max, R, out):
    """len(out)×m: whether column k of ``out`` may replace ``model.active[a]`` by
    the alignment test."""
    active = model.active
    allowed = np.ones((len(out), len(active)), dtype=bool)
    if alignment_max < 1 and len(active) > 1:
        # |φ_kᵀφ_j| = |ψ_kᵀψ_j|, j in the model
        cosine = np.abs(model.Psi[:, out].T @ R)
        first = cosine.argmax(axis=1)
        rows = np.arange(len(cosine))
        top = cosine[rows, first]
        cosine[rows, first] = -1.0  # the largest of the others: the second
        second = cosine.max(axis=1)
        # the largest cosine with the model without i: the second where i is first
        without = np.where(
            np.arange(len(active)) == first[:, None], second[:, None], top[:, None]
        )
        allowed &= without <= alignment_max
    return allowed


def reestimation_estimates(model, gain, new_alpha, pairs):
    """For each swap (k, a) of ``pairs``: its exact gain plus the gains of
    re-estimating each other basis function j of the swapped model alone, from its
    S_j, Q_j there (label ``rvm-SQ-rank-one`` twice: i leaves, then k joins with
    κ = 1/(α_k + S_k⁽⁻ⁱ⁾) and V_jk⁽⁻ⁱ⁾ = V_jk + c_iV_jiV_ki), O(m) per swap: a
    diagonal estimate of what a joint polish after the swap would reach."""
    active, alpha, beta = model.active, model.alpha, model.beta
    S, Q = model.S, model.Q
    s, _ = sparsity_quality(S, Q, alpha, active)
    a_M = alpha[active]
    c = (a_M + s[active]) / a_M**2
    k, a = pairs[:, 0], pairs[:, 1]
    # V_jk for j in the model and each swap's k, V_ji and V_ki: O(n·m·m_U)
    R = model.Psi[:, active]
    V_k = beta * ((model.Psi[:, k].T @ model.G) @ R)  # (n, m)
    V_ji = beta * ((R[:, a].T @ model.G) @ R)  # (n, m)
    V_ki = V_k[np.arange(len(k)), a]
    c_i, Q_i = c[a], Q[active[a]]
    S_k = S[k] + c_i * V_ki**2
    Q_k = Q[k] + c_i * V_ki * Q_i
    kappa = 1.0 / (new_alpha[k, a] + S_k)
    V_jk = V_k + (c_i * V_ki)[:, None] * V_ji
    S_j = S[active] + c_i[:, None] * V_ji**2 - kappa[:, None] * V_jk**2
    Q_j = Q[active] + (c_i * Q_i)[:, None] * V_ji - (kappa * Q_k)[:, None] * V_jk
    rows = np.arange(len(k))
    S_j[rows, a], Q_j[rows, a] = 0.5 * a_M[a], 0.0  # i has left: placeholders
    # An estimate: where rounding puts S_j at or above α_j (γ_j near 1), that
    # basis function's term is left out rather than read from a cancelled s_j.
    with np.errstate(divide="ignore", invalid="ignore"):
        s_j = a_M * S_j / (a_M - S_j)
        q_j = a_M * Q_j / (a_M - S_j)
        old = 0.5 * (np.log(a_M / (a_M + s_j)) + q_j**2 / (a_M + s_j))
        theta = q_j**2 - s_j
        r = np.where(theta > ZERO_FACTOR, theta, 0.0) / s_j
        best = 0.5 * (r - np.log1p(r))  # ℓ at the optimum, 0 for α = ∞
        more = np.maximum(best - old, 0.0)
    more[(rows, a)] = 0.0
    more[~np.isfinite(more) | (s_j <= 0)] = 0.0
    return gain[k, a] + more.sum(axis=1)


def swapped_coordinates(model, PhiT_t, a, k):
    """The coordinates (R, τ, perp) of the model with ``model.active[a]`` replaced
    by column k (label ``rvm-evidence-split``), from what the loop keeps: U
    extended by k's direction u, of squared length ``residual[k]``, so k's
    coordinates are (ψ_k, ‖(I − UUᵀ)φ_k‖), τ gains uᵀt = φ_kᵀ(I − UUᵀ)t/‖…‖ and
    perp loses its square. Ψ may span deleted directions too; R's rows there are
    those of the model's own columns."""
    rest = np.delete(model.active, a)
    m_U = model.Psi.shape[0]
    rho = np.sqrt(model.residual[k])
    R = np.zeros((m_U + 1, len(rest) + 1))
    R[:m_U, :-1] = model.Psi[:, rest]
    R[:m_U, -1] = model.Psi[:, k]
    R[m_U, -1] = rho
    u_t = (PhiT_t[k] - model.Psi[:, k] @ model.tau) / rho
    tau = np.append(model.tau, u_t)
    return R, tau, max(model.perp - u_t**2, 0.0), np.append(rest, k)


def polished_swap(
    model, usable, alignment_max, PhiT_t, N, *, learn_beta, beta_max, tol
):
    """A swap that pays after a polish, or None: screen every swap exactly
    (`swap_gains`), estimate the polish of the `SWAP_SCREEN` best
    (`reestimation_estimates`), polish at most `SWAP_VERIFY` of those estimated to
    gain more than `SWAP_MIN`, best estimate first (`newton_polish` on
    `swapped_coordinates`, α and β with ``learn_beta``), and return the first
    whose polished evidence beats the model's by `SWAP_MIN` (a `Swap`)."""
    gain, new_alpha = swap_gains(model, usable, alignment_max)
    flat = -gain.ravel()
    if flat.size > SWAP_SCREEN:  # the SWAP_SCREEN best, in no order
        flat = np.argpartition(flat, SWAP_SCREEN - 1)[:SWAP_SCREEN]
    else:
        flat = np.arange(flat.size)
    pairs = np.column_stack(np.unravel_index(flat, gain.shape))
    pairs = pairs[np.isfinite(gain[pairs[:, 0], pairs[:, 1]])]
    if len(pairs) == 0:
        return None
    estimate = reestimation_estimates(model, gain, new_alpha, pairs)
    floor = model.log_evidence + SWAP_MIN
    order = np.argsort(-estimate, kind="stable")[:SWAP_VERIFY]
    for k, a in pairs[order[estimate[order] > SWAP_MIN]]:
        R, tau, perp, active = swapped_coordinates(model, PhiT_t, a, k)
        alpha = model.alpha[active]
        alpha[-1] = new_alpha[k, a]
        polished = newton_polish(
            R,
            tau,
            perp,
            alpha,
            model.beta,
            N,
            learn_beta=learn_beta,
            beta_max=beta_max,
            tol=tol,
            zero_factor=ZERO_FACTOR,
        )
        if polished.log_evidence > floor:
            return Swap(int(k), active, polished)
    return None
