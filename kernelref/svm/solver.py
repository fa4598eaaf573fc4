"""One SMO solver for every SVM formulation (Fan, Chen & Lin 2005; Chang & Lin 2001).

The solver works on (svm-generic-qp) as stated by ``kernelref.svm.problems``.
Its state is the gradient in the form −y_t G_t, G = Qα + p. With

    I_up(α)  = {t : y_t = +1, α_t < C_t} ∪ {t : y_t = −1, α_t > 0},
    I_low(α) = {t : y_t = +1, α_t > 0} ∪ {t : y_t = −1, α_t < C_t},
    m(α) = max_{t ∈ I_up} −y_t G_t,   M(α) = min_{t ∈ I_low} −y_t G_t,

α is optimal exactly when m(α) ≤ M(α) (label ``smo-optimality``); the solver stops
when m(α) − M(α) < tol. Each iteration takes i attaining m(α) and, among the
t ∈ I_low with b_it = m(α) + y_t G_t > 0, the j with the largest decrease b²/a of
the second-order model, a_it = K_ii + K_tt − 2K_it (label ``smo-working-set``).
The ν forms (second equality) choose i and j within one class (Solver_NU).
"""

import warnings
from dataclasses import dataclass

import numpy as np

from kernelref.exceptions import ConvergenceWarning, NonFiniteError

__all__ = ["TAU", "ConvergenceWarning", "IterationInfo", "Solution", "solve"]

# libsvm's τ: the curvature a_ij of a pair is replaced by τ when it is not positive
# (a non-PSD kernel, or duplicate points), so that the step stays finite; the step
# is then clipped by the box as usual.
TAU = 1e-12
# libsvm shrinks every min(l, 1000) iterations, and undoes it once the gap falls
# below 10·tol so that the last iterations see every variable.
SHRINK_INTERVAL = 1000
UNSHRINK_FACTOR = 10.0


@dataclass
class Solution:
    """α, ρ (b = −ρ), r (the second multiplier of the ν forms, else 0), f(α)."""

    alpha: np.ndarray
    rho: float
    r: float
    objective: float
    n_iter: int
    gap: float
    converged: bool


@dataclass
class IterationInfo:
    """Passed to ``callback`` after every pair step: the iteration, the pair,
    a copy of α and the violation m(α) − M(α) before the step."""

    iteration: int
    i: int
    j: int
    alpha: np.ndarray
    gap: float


class _State:
    """The variables of the active set, contiguous; ``index`` maps them back.

    The ν forms keep the variables of class +1 first, so that each class is a slice.
    """

    def __init__(self, qp, rows, order):
        self.index = order
        self.y = qp.y[order]
        self.C = qp.C[order]
        self.alpha = qp.alpha0[order].astype(float)
        self.src = qp.src[order]
        self.QD = rows.diag[self.src]
        self.n_pos = int(np.count_nonzero(self.y > 0))
        self.identity = bool(np.array_equal(self.src, np.arange(len(rows.diag))))
        self.update_sets()

    def update_sets(self):
        positive = self.y > 0
        below, above = self.alpha < self.C, self.alpha > 0
        self.up = np.where(positive, below, above)
        self.low = np.where(positive, above, below)

    def update_sets_at(self, t):
        a, positive = self.alpha[t], self.y[t] > 0
        self.up[t] = a < self.C[t] if positive else a > 0
        self.low[t] = a > 0 if positive else a < self.C[t]

    def keep(self, mask):
        for name in ("index", "y", "C", "alpha", "src", "QD", "up", "low", "neg_yG"):
            setattr(self, name, getattr(self, name)[mask])
        self.n_pos = int(np.count_nonzero(self.y > 0))
        self.identity = False


def _row(rows, state, t):
    """k(x_src(t), x_src(s)) for every active variable s."""
    full = rows.row(state.src[t])
    return full if state.identity else full[state.src]


def _extremes(up_vals, low_vals, blocks):
    """(i, m, M) within each block: i attains m = max over I_up; M = min over I_low."""
    out = []
    for lo, hi in blocks:
        if hi <= lo:
            out.append((-1, -np.inf, np.inf))
            continue
        i = lo + int(up_vals[lo:hi].argmax())
        out.append((i, up_vals[i], low_vals[lo:hi].min()))
    return out


def select_working_set(state, rows, tol, buf):
    """(i, j, gap) by (smo-working-set); i = −1 when m(α) − M(α) < tol.

    For the ν forms the extremes and the pair are taken within each class.
    """
    nyg = state.neg_yG
    up_vals = np.where(state.up, nyg, -np.inf)
    low_vals = np.where(state.low, nyg, np.inf)
    n, P = len(nyg), state.n_pos
    blocks = [(0, P), (P, n)] if state.nu else [(0, n)]
    ext = _extremes(up_vals, low_vals, blocks)
    gap = max(m - M for _, m, M in ext)
    if gap < tol:
        return -1, -1, gap
    b, a = buf[0][:n], buf[1][:n]
    np.copyto(a, state.QD)
    for (i, m, _), (lo, hi) in zip(ext, blocks):
        # b_it = m(α) − (−y_t G_t) for t in I_low; below zero t cannot pair with i.
        np.subtract(m, low_vals[lo:hi], out=b[lo:hi])
        if i < 0:
            continue
        Ki = _row(rows, state, i)
        a[lo:hi] -= 2.0 * Ki[lo:hi]
        a[lo:hi] += state.QD[i]
    np.maximum(b, 0.0, out=b)
    np.maximum(a, TAU, out=a)
    b *= b
    b /= a
    j = int(b.argmax())
    i = ext[0][0] if not state.nu or j < P else ext[1][0]
    return i, j, gap


def pair_step(state, i, j, Ki, Kj):
    """Move α_i by y_i t and α_j by −y_j t, which keeps yᵀα (and, as i and j share a
    class in the ν forms, eᵀα) fixed (label ``smo-pair-update``).

    f changes by −t b_ij + ½t² a_ij, minimised at t = b_ij / a_ij and clipped so
    that both variables stay in their boxes. Returns t.
    """
    y, alpha, C = state.y, state.alpha, state.C
    a_ij = max(state.QD[i] + state.QD[j] - 2.0 * Ki[j], TAU)
    b_ij = state.neg_yG[i] - state.neg_yG[j]
    room_i = C[i] - alpha[i] if y[i] > 0 else alpha[i]
    room_j = alpha[j] if y[j] > 0 else C[j] - alpha[j]
    t = b_ij / a_ij
    if t >= room_i or t >= room_j:
        t = min(room_i, room_j)
    new_i = alpha[i] + y[i] * t
    new_j = alpha[j] - y[j] * t
    # Land exactly on the bound that stopped the step, so the sets I_up, I_low are
    # exact.
    if t == room_i:
        new_i = C[i] if y[i] > 0 else 0.0
    if t == room_j:
        new_j = 0.0 if y[j] > 0 else C[j]
    alpha[i], alpha[j] = new_i, new_j
    state.update_sets_at(i)
    state.update_sets_at(j)
    # −yG changes by t (K_j − K_i): Q_:i Δα_i + Q_:j Δα_j = t y ∘ (K_i − K_j).
    state.neg_yG += t * (Kj - Ki)
    return t


def reconstruct_gradient(qp, rows, alpha_full):
    """−y ∘ G for every variable, from α alone (after shrinking, label
    ``svm-gradient``)."""
    coef = np.bincount(qp.src, weights=qp.y * alpha_full, minlength=len(rows.diag))
    return -qp.y * qp.p - rows.weighted_sum(coef)[qp.src]


def shrink(state, tol, unshrunk):
    """Drop the variables that cannot join a violating pair soon (libsvm's
    ``be_shrunk``): one only in I_up with −y_tG_t < M(α), or only in I_low with
    −y_tG_t > m(α). With the ν forms, m and M of its own class."""
    nyg, n, P = state.neg_yG, len(state.neg_yG), state.n_pos
    up_vals = np.where(state.up, nyg, -np.inf)
    low_vals = np.where(state.low, nyg, np.inf)
    blocks = [(0, P), (P, n)] if state.nu else [(0, n)]
    ext = _extremes(up_vals, low_vals, blocks)
    m = np.empty(n)
    M = np.empty(n)
    for (_, mb, Mb), (lo, hi) in zip(ext, blocks):
        m[lo:hi], M[lo:hi] = mb, Mb
    drop = (state.up & ~state.low & (nyg < M)) | (state.low & ~state.up & (nyg > m))
    return ~drop


def _rho(y, alpha, C, G):
    """ρ = mean of y_t G_t over the free α_t; with none, the midpoint of the
    interval the KKT conditions leave for it (label ``smo-rho``)."""
    yG = y * G
    free = (alpha > 0) & (alpha < C)
    if free.any():
        return float(yG[free].mean())
    positive = y > 0
    up_only = np.where(positive, alpha <= 0, alpha >= C)
    low_only = np.where(positive, alpha >= C, alpha <= 0)
    ub = yG[up_only].min() if up_only.any() else np.inf
    lb = yG[low_only].max() if low_only.any() else -np.inf
    return float((ub + lb) / 2.0)


def calculate_rho(qp, alpha, G):
    """(ρ, r): for the standard forms ρ by (smo-rho) and r = 0; for the ν forms
    r₁, r₂ by (smo-rho) within each class, ρ = (r₁ − r₂)/2, r = (r₁ + r₂)/2."""
    if not qp.nu:
        return _rho(qp.y, alpha, qp.C, G), 0.0
    pos, neg = qp.y > 0, qp.y < 0
    r1 = _rho(np.ones(pos.sum()), alpha[pos], qp.C[pos], G[pos])
    r2 = _rho(np.ones(neg.sum()), alpha[neg], qp.C[neg], G[neg])
    return (r1 - r2) / 2.0, (r1 + r2) / 2.0


def solve(qp, rows, tol=1e-3, shrinking=True, max_iter=-1, callback=None):
    """Minimise (svm-generic-qp) by SMO; returns a ``Solution``.

    `rows` is a ``KernelRows``; `max_iter` < 0 means no cap (a capped run warns
    with ``ConvergenceWarning``); `callback(IterationInfo)` runs after each step.
    """
    n = len(qp.y)
    order = (
        np.concatenate([np.flatnonzero(qp.y > 0), np.flatnonzero(qp.y < 0)])
        if qp.nu
        else np.arange(n)
    )
    state = _State(qp, rows, order)
    state.nu = qp.nu
    alpha_full = qp.alpha0.astype(float)
    state.neg_yG = reconstruct_gradient(qp, rows, alpha_full)[order]
    buf = np.empty((2, n))
    interval = min(n, SHRINK_INTERVAL)
    counter, unshrunk, it, gap = interval, False, 0, np.inf
    while max_iter < 0 or it < max_iter:
        if shrinking:
            counter -= 1
            if counter == 0:
                counter = interval
                if not unshrunk and _gap(state) <= UNSHRINK_FACTOR * tol:
                    unshrunk = True
                    state = _restore(qp, rows, alpha_full, order)
                state.keep(shrink(state, tol, unshrunk))
        i, j, gap = select_working_set(state, rows, tol, buf)
        _check_finite_gap(gap, state)
        if i < 0:
            if len(state.index) == n:
                break
            # Optimal on the active set: check again on every variable.
            state = _restore(qp, rows, alpha_full, order)
            i, j, gap = select_working_set(state, rows, tol, buf)
            if i < 0:
                break
            counter = 1
        Ki = _row(rows, state, i)
        Kj = _row(rows, state, j)
        pair_step(state, i, j, Ki, Kj)
        alpha_full[state.index[i]] = state.alpha[i]
        alpha_full[state.index[j]] = state.alpha[j]
        it += 1
        if callback is not None:
            callback(
                IterationInfo(
                    it,
                    int(state.index[i]),
                    int(state.index[j]),
                    alpha_full.copy(),
                    float(gap),
                )
            )
    converged = gap < tol
    if not converged:
        warnings.warn(
            f"SMO stopped at max_iter={max_iter} iterations with m(α) − M(α) = "
            f"{gap:.3g} ≥ tol = {tol:g}; raise max_iter or tol.",
            ConvergenceWarning,
            stacklevel=3,
        )
    G = -qp.y * reconstruct_gradient(qp, rows, alpha_full)
    rho, r = calculate_rho(qp, alpha_full, G)
    objective = float(0.5 * alpha_full @ (G + qp.p))
    return Solution(alpha_full, rho, r, objective, it, float(gap), converged)


def _check_finite_gap(gap, state):
    """Stop on a NaN or infinite violation: m(α) − M(α) < tol is never true for
    NaN, so without this SMO would run for ever (max_iter=-1)."""
    if gap < np.inf:
        return
    bad = state.index[~np.isfinite(state.neg_yG)][:5]
    raise NonFiniteError(
        f"SMO stopped: the gradient is not finite (m(α) − M(α) = {gap}) at the "
        f"variables of samples {bad.tolist()}; the kernel matrix holds NaN or infinity "
        "there. Scale X or change the kernel's parameters."
    )


def _gap(state):
    nyg, n, P = state.neg_yG, len(state.neg_yG), state.n_pos
    blocks = [(0, P), (P, n)] if state.nu else [(0, n)]
    ext = _extremes(
        np.where(state.up, nyg, -np.inf), np.where(state.low, nyg, np.inf), blocks
    )
    return max(m - M for _, m, M in ext)


def _restore(qp, rows, alpha_full, order):
    """Every variable active again, with the gradient rebuilt from α."""
    qp_state = _State(qp, rows, order)
    qp_state.nu = qp.nu
    qp_state.alpha = alpha_full[order].copy()
    qp_state.update_sets()
    qp_state.neg_yG = reconstruct_gradient(qp, rows, alpha_full)[order]
    return qp_state
