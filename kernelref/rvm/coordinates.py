"""The orthonormal coordinates in which the fast algorithm computes S_i and Q_i.

The Woodbury form S_i = βφ_iᵀφ_i − β²φ_iᵀΦΣΦᵀφ_i (label ``rvm-SQ-woodbury``), which
SparseBayes uses, subtracts two numbers that agree to every digit when the
columns of the model are nearly collinear (a wide kernel). Here the fast
algorithm keeps instead an orthonormal basis U of the span of the model's
columns Φ_M and the coordinates Ψ = UᵀΦ of every column, so that Φ_M = UR with
R = Ψ_M. Then

    C = β⁻¹I + Φ_MA⁻¹Φ_Mᵀ = β⁻¹[(I − UUᵀ) + UHUᵀ],   H = I + βRA⁻¹Rᵀ,

and, the two parts acting on orthogonal subspaces,
C⁻¹ = β[(I − UUᵀ) + UH⁻¹Uᵀ] (label ``rvm-SQ-stable``): S_i is a sum of two
nonnegative parts, neither a difference of large numbers, and H, with
eigenvalues at least 1, always has a Cholesky factor. U grows by Gram–Schmidt on an
addition and shrinks by an m×m QR on a deletion. The posterior and evidence
need only R and τ = Uᵀt (label ``rvm-evidence-split``), so an iteration costs
O(Pm² + m³) with m basis functions in the model and P candidates; only an
addition touches the N rows of Φ (the product Φᵀu).
"""

import numpy as np
from scipy.linalg import cholesky, lapack, solve_triangular

from kernelref.rvm.design import posterior

__all__ = [
    "GRAM_ROW_RESIDUAL_MIN",
    "add_coordinate",
    "add_in_span_step",
    "add_step",
    "cholesky_H",
    "cholesky_factor_update",
    "cholesky_rank_one",
    "coordinate_norms",
    "coordinate_posterior",
    "delete_step",
    "drop_coordinate",
    "fresh_statistics",
    "inverse_H",
    "log_evidence_at",
    "measured_drift",
    "new_coordinate_row",
    "orthonormal_basis",
    "orthonormal_coordinates",
    "rank_one_SQ",
    "reestimate_step",
    "span_residual",
    "split_log_evidence",
    "stable_SQ",
    "sums_of_squares_SQ",
]


#: `new_coordinate_row` uses a design's kept Gram row only when the new direction's
#: squared residual ‖r‖² is at least this: the row's rounding error grows as 1/‖r‖
#: (measured: at N = 5000 on sinc, γ = 0.1, the Dask backend's α parted from the
#: reference's by 8e-8 with every row from the Gram formula, by 2e-10 with this
#: bound, which sent 18 of the fit's 25 additions to the product with Φ).
GRAM_ROW_RESIDUAL_MIN = 1e-4


def orthonormal_coordinates(Phi, active):
    """An orthonormal basis U of the span of the model's columns and the
    coordinates Ψ = UᵀΦ of every column, from a QR factorisation. A design that
    formed them already (``Phi.coordinates(active)``: the Dask backend's
    reweighted design, in the pass of its column norms) answers instead."""
    kept = getattr(Phi, "coordinates", None)
    found = None if kept is None else kept(active)
    if found is not None:
        return found
    U = orthonormal_basis(Phi[:, active])
    return U, U.T @ Phi


def orthonormal_basis(A):
    """Q of the reduced QR factorisation A = QR (N×m, m ≤ N): LAPACK's dgeqrf and
    dorgqr called directly, with the workspaces they ask for — the calls, block
    sizes and row-major result of ``np.linalg.qr(A)[0]``, without its argument
    handling and its R (8 µs of 15 on a 118×6 matrix). With the numpy and scipy
    wheels installed here it equals ``np.linalg.qr(A)[0]`` bit for bit (checked on
    N up to 2000, m up to 238, and every fit of the RVM benchmarks)."""
    N, m = A.shape
    if m == 0 or m > N:
        return np.linalg.qr(A)[0]
    lwork = int(lapack.dgeqrf_lwork(N, m)[0])
    qr, tau, _, info = lapack.dgeqrf(A, lwork=lwork)
    if info == 0:
        lwork = int(lapack.dorgqr(qr, tau, lwork=-1)[1][0])
        Q, _, info = lapack.dorgqr(qr, tau, lwork=lwork, overwrite_a=1)
    if info != 0:  # an illegal argument (not expected): numpy's own error
        return np.linalg.qr(A)[0]
    # numpy's Q is row-major, and the order of an operand can change how BLAS
    # rounds the products taken with it
    return np.ascontiguousarray(Q)


def add_coordinate(Phi, U, Psi, j):
    """Extend U by the part of column j orthogonal to it: Gram–Schmidt, applied
    twice so that U stays orthonormal to rounding; Ψ gains the row uᵀΦ
    (`new_coordinate_row`)."""
    m, N = U.shape[1], U.shape[0]
    r = Phi[:, j] - U @ Psi[:, j]
    h = U.T @ r
    r -= U @ h
    norm = np.sqrt(r @ r)  # np.linalg.norm's arithmetic, without its checks
    u = r / norm
    U_new = np.empty((N, m + 1))
    U_new[:, :m] = U
    U_new[:, m] = u
    Psi_new = np.empty((m + 1, Psi.shape[1]))
    Psi_new[:m] = Psi
    Psi_new[m] = new_coordinate_row(Phi, u, j, h, norm, Psi)
    return U_new, Psi_new


def new_coordinate_row(Phi, u, j, h, norm, Psi):
    """uᵀΦ: the new direction's coordinate of every column, one product with Φ.

    A design that keeps rows of ΦᵀΦ (``Phi.gram_row(j)``: the Dask backend's
    streamed design forms several in one pass over the kernel) answers without
    touching Φ: u = (φ_j − Uc)/‖r‖ with c = ψ_j + h the coefficients Gram–Schmidt
    removed (h those of its second pass), so uᵀΦ = (φ_jᵀΦ − cᵀΨ)/‖r‖.
    """
    gram_row = getattr(Phi, "gram_row", None)
    # The difference φ_jᵀΦ − cᵀΨ cancels as ‖r‖ → 0, its rounding divided by ‖r‖:
    # below GRAM_ROW_RESIDUAL_MIN the product with Φ is taken instead.
    if gram_row is None or norm**2 < GRAM_ROW_RESIDUAL_MIN:
        return u @ Phi
    return (gram_row(j) - (Psi[:, j] + h) @ Psi) / norm


def drop_coordinate(U, Psi, R_rest):
    """Shrink U to the span of the columns left in the model, whose coordinates
    are R_rest: U ← UW and Ψ ← WᵀΨ with W an orthonormal basis of span R_rest."""
    W = orthonormal_basis(R_rest)
    return U @ W, W.T @ Psi


def span_residual(Psi, unit, norms=None):
    """‖(I − UUᵀ)φ_i‖² = ‖φ_i‖² − ‖ψ_i‖²: how far each column lies outside the
    span of the model (``unit`` holds ‖φ_i‖², 1 or 0 after normalisation).
    ``norms``, the ‖ψ_i‖² (`coordinate_norms`), are computed when not given."""
    if norms is None:
        norms = coordinate_norms(Psi)
    return np.maximum(unit - norms, 0.0)


def coordinate_norms(Psi, norms=None):
    """‖ψ_i‖² for every column of Ψ, summed over its rows in order; with ``norms``,
    those of Ψ without its last row, only that row's squares are added. The sum is
    the same either way, bit for bit: numpy's einsum adds the rows one after another
    into its result (checked for m up to 200 rows, P up to 2001 columns)."""
    if norms is None:
        return np.einsum("mp,mp->p", Psi, Psi)
    last = Psi[-1]
    return norms + last * last


def cholesky_H(R, alpha, beta):
    """The lower Cholesky factor of H = I + βRA⁻¹Rᵀ (label ``rvm-SQ-stable``)."""
    G = R * np.sqrt(beta / alpha)  # √β R A^(−½)
    H = G @ G.T
    H.flat[:: len(H) + 1] += 1.0
    L, info = lapack.dpotrf(H, lower=1, clean=1)
    if info != 0:  # H's eigenvalues are at least 1: only NaN or ∞ get here
        raise np.linalg.LinAlgError(f"H is not positive definite (dpotrf info {info})")
    return L


def stable_SQ(Psi, active, alpha, beta, residual, PhiT_t, tau, L=None, z=None):
    """S_i = φ_iᵀC⁻¹φ_i and Q_i = φ_iᵀC⁻¹t for every column (label ``rvm-SQ-stable``).

    With C⁻¹ = β[(I − UUᵀ) + UH⁻¹Uᵀ], H = I + βRA⁻¹Rᵀ, R = Ψ_M and τ = Uᵀt:
    S_i = β[‖φ_i‖² − ‖ψ_i‖² + ψ_iᵀH⁻¹ψ_i] and Q_i = β[φ_iᵀt − ψ_iᵀτ + ψ_iᵀH⁻¹τ];
    ``residual`` holds ‖φ_i‖² − ‖ψ_i‖² (`span_residual`). H's eigenvalues are
    at least 1, so ψ_iᵀH⁻¹ψ_i ≤ ‖ψ_i‖² and no term is a difference of large numbers.
    ``L``, H's Cholesky factor (`cholesky_H`), and z = L⁻¹τ are computed when not
    given.
    """
    if L is None:
        L = cholesky_H(Psi[:, active], alpha, beta)
    if z is None:
        z = _solve_lower(L, tau)
    Z = _solve_lower(L, Psi)
    outside = residual.copy()
    outside[active] = 0.0
    S = beta * (outside + np.einsum("mp,mp->p", Z, Z))
    outside_t = PhiT_t - Psi.T @ tau  # φ_iᵀ(I − UUᵀ)t
    outside_t[active] = 0.0
    Q = beta * (outside_t + Z.T @ z)
    return S, Q


def coordinate_posterior(R, tau, perp, alpha, beta, N):
    """Σ, μ and the log evidence from the model's coordinates alone (label
    ``rvm-evidence-split``).

    Φ_M = UR gives Φ_MᵀΦ_M = RᵀR and Φ_Mᵀt = Rᵀτ, so Σ and μ are those of the
    m-dimensional problem (R, τ). The targets split into τ = Uᵀt inside the span
    and t − Uτ, of squared norm ``perp`` = ‖t‖² − ‖τ‖², outside it, where the
    model is noise alone: L = L_R(τ) + log N(t − Uτ | 0, β⁻¹I_(N−m)).
    """
    post = posterior(R, tau, alpha, beta)
    outside = -0.5 * ((N - len(tau)) * np.log(2 * np.pi / beta) + beta * perp)
    return post._replace(log_evidence=post.log_evidence + outside)


# -- rank-one maintenance (Tipping & Faul 2003, §4; label ``rvm-SQ-rank-one``) ---------
#
# Changing one α_j changes C by one rank-one term, C' = C + δφ_jφ_jᵀ with
# δ = 1/α_j' − 1/α_j (1/α_j' for an addition, −1/α_j for a deletion), so
#
#     C'⁻¹ = C⁻¹ − κ e_j e_jᵀ,  e_j = C⁻¹φ_j,  κ = δ/(1 + δS_j),
#     S_i' = S_i − κv_i²,  Q_i' = Q_i − κv_iQ_j,  v_i = φ_iᵀC⁻¹φ_j,
#
# and, in the coordinates above, H⁻¹ changes by one Sherman–Morrison term. The
# denominators 1 + δS_j are written through s_j, as sums of positive numbers: for a
# basis function in the model α_j − S_j = α_j²/(α_j + s_j) would otherwise cancel.
# Each update rounds; `measured_drift` compares the maintained S, Q with a fresh
# factorisation, and the fast algorithm refactors often enough to keep it bounded.


def inverse_H(R, alpha, beta):
    """H⁻¹ for H = I + βRA⁻¹Rᵀ (label ``rvm-SQ-stable``), by a Cholesky factor of H,
    whose eigenvalues are at least 1: the m×m matrix the rank-one updates maintain."""
    G = R * np.sqrt(beta / alpha)
    H = G @ G.T
    H.flat[:: len(H) + 1] += 1.0
    L = cholesky(H, lower=True, check_finite=False)
    L_inv = solve_triangular(L, np.eye(len(H)), lower=True, check_finite=False)
    return L_inv.T @ L_inv


def fresh_statistics(Psi, active, alpha, beta, residual, PhiT_t, tau):
    """S, Q of every column (`stable_SQ`), H⁻¹ (`inverse_H`) and log|H| and τᵀH⁻¹τ
    (as a sum of squares), from scratch: the starting point of the rank-one
    updates, what they are refreshed to, and with C = β⁻¹[(I − UUᵀ) + UHUᵀ] the
    evidence (`split_log_evidence`)."""
    L = cholesky_H(Psi[:, active], alpha, beta)
    z = _solve_lower(L, tau)
    S, Q = stable_SQ(Psi, active, alpha, beta, residual, PhiT_t, tau, L, z)
    log_det_H = 2.0 * np.log(L.diagonal()).sum()
    # dpotri writes H⁻¹'s lower triangle over L, whose upper one is zero
    # (`cholesky_H`'s clean=1): H⁻¹ is that plus its transpose, the diagonal
    # halved (exactly).
    H_inv = lapack.dpotri(L, lower=1, overwrite_c=1)[0]
    H_inv += H_inv.T
    H_inv.flat[:: len(H_inv) + 1] *= 0.5
    return S, Q, H_inv, log_det_H, z @ z


def sums_of_squares_SQ(beta, residual, outside_t, active, Z, z):
    """S_i = β[‖(I − UUᵀ)φ_i‖² + ‖z_i‖²] and Q_i = β[φ_iᵀ(I − UUᵀ)t + z_iᵀz] from
    Z = L⁻¹Ψ and z = L⁻¹τ, since ψ_iᵀH⁻¹ψ_i = ‖L⁻¹ψ_i‖² (label ``rvm-SQ-stable``):
    S_i is a sum of squares however Z was obtained."""
    outside = residual.copy()
    outside[active] = 0.0
    return beta * (outside + np.einsum("mp,mp->p", Z, Z)), beta * (outside_t + Z.T @ z)


def cholesky_rank_one(Z, z, p, sign, sigma=None):
    """Z' = L'⁻¹Ψ and z' = L'⁻¹τ from Z = L⁻¹Ψ and z = L⁻¹τ, where L' is the
    Cholesky factor of H' = H + sign·(Lp)(Lp)ᵀ, in O(mP) (label
    ``rvm-cholesky-rank-one``).

    H' = L(I + sign·ppᵀ)Lᵀ and I + sign·ppᵀ = TTᵀ with T lower triangular,
    T_jj = √(σ_j/σ_(j−1)) and T_ij = sign·p_ip_j/√(σ_jσ_(j−1)) below the diagonal,
    σ_j = 1 + sign·Σ_(k≤j) p_k² (σ_0 = 1): so L' = LT (`cholesky_factor_update`),
    and Z' = T⁻¹Z has rows z'_j = (z_j − sign·p_j Σ_(i<j) p_iz_i/σ_(j−1))/T_jj —
    cumulative sums, no loop over j. For a downdate (sign −1) ``sigma`` is
    σ_m = 1 − ‖p‖², given from a formula without cancellation, and
    σ_j = σ_m + Σ_(k>j) p_k² is a sum of positive numbers.
    """
    sigma_j, sigma_prev = _sigmas(p, sign, sigma)
    d = np.sqrt(sigma_j / sigma_prev)  # T_jj
    h = sign * p / sigma_prev
    pZ = p[:, None] * Z
    before = np.cumsum(pZ, axis=0) - pZ  # Σ_(i<j) p_i z_i, for every column
    pz = p * z
    before_z = np.cumsum(pz) - pz
    return (Z - h[:, None] * before) / d[:, None], (z - h * before_z) / d


def cholesky_factor_update(L, p, sign, sigma=None):
    """L' = LT of `cholesky_rank_one`: the Cholesky factor of LLᵀ + sign·(Lp)(Lp)ᵀ,
    in O(m²): column j of L' is T_jjL_(:,j) + T_(i>j,j)-weighted Σ_(i>j) p_iL_(:,i)."""
    sigma_j, sigma_prev = _sigmas(p, sign, sigma)
    Lp = L * p
    after = np.cumsum(Lp[:, ::-1], axis=1)[:, ::-1] - Lp  # Σ_(i>j) p_iL_(:,i)
    return L * np.sqrt(sigma_j / sigma_prev) + after * (
        sign * p / np.sqrt(sigma_j * sigma_prev)
    )


def _sigmas(p, sign, sigma):
    """σ_j and σ_(j−1) of `cholesky_rank_one`."""
    p2 = p * p
    if sign > 0:
        sigma_j = 1.0 + np.cumsum(p2)
        return sigma_j, np.concatenate(([1.0], sigma_j[:-1]))
    sigma_j = sigma + (np.cumsum(p2[::-1])[::-1] - p2)  # σ_m + Σ_(k>j) p_k²
    return sigma_j, sigma_j + p2


def _solve_lower(L, B):
    """L⁻¹B for a lower triangular L (LAPACK's dtrtrs, without scipy's checks)."""
    return lapack.dtrtrs(L, B, lower=1)[0]


def log_evidence_at(R, tau, perp, alpha, beta, N):
    """The log evidence of the model's coordinates (R, τ, perp) at α and β
    (`split_log_evidence`): one Cholesky factor of H = I + βRA⁻¹Rᵀ, O(m³), without
    the S, Q and H⁻¹ that `fresh_statistics` forms too."""
    L = cholesky_H(R, alpha, beta)
    z = _solve_lower(L, tau)
    log_det_H = 2.0 * np.log(L.diagonal()).sum()
    return split_log_evidence(N, beta, log_det_H, z @ z, perp)


def split_log_evidence(N, beta, log_det_H, tau_H_tau, perp):
    """log N(t | 0, C) with C = β⁻¹[(I − UUᵀ) + UHUᵀ] (label ``rvm-evidence-split``):
    log|C| = −N log β + log|H| and tᵀC⁻¹t = β(‖(I − UUᵀ)t‖² + τᵀH⁻¹τ)."""
    return -0.5 * (N * np.log(2 * np.pi / beta) + log_det_H + beta * (perp + tau_H_tau))


def rank_one_SQ(S, Q, v, kappa, j):
    """S_i' = S_i − κv_i², Q_i' = Q_i − κv_iQ_j after one α_j changes (label
    ``rvm-SQ-rank-one``): C'⁻¹ = C⁻¹ − κe_je_jᵀ with v_i = φ_iᵀC⁻¹φ_j."""
    return S - kappa * v**2, Q - (kappa * Q[j]) * v


def measured_drift(S, Q, S_fresh, Q_fresh, tCt):
    """How far the maintained S, Q have drifted from a fresh factorisation: the
    largest |S_i − S_i*|/S_i* and |Q_i − Q_i*|/√(S_i*·tᵀC⁻¹t), the bound
    Cauchy–Schwarz puts on |Q_i| (columns with S_i* = 0, zero columns, are skipped)."""
    ok = S_fresh > 0
    dS = np.abs(S[ok] - S_fresh[ok]) / S_fresh[ok]
    dQ = np.abs(Q[ok] - Q_fresh[ok]) / np.sqrt(S_fresh[ok] * tCt)
    return float(max(dS.max(initial=0.0), dQ.max(initial=0.0)))


def reestimate_step(Psi, G, beta, j_row, alpha_old, alpha_new, s_j):
    """v = ΦᵀC⁻¹φ_j, κ and the new H⁻¹ when α_j of a basis function in the model
    changes from ``alpha_old`` to ``alpha_new`` (label ``rvm-SQ-rank-one``).

    ``j_row`` is ψ_j = Uᵀφ_j; φ_j lies in the span, so C⁻¹φ_j = βUH⁻¹ψ_j and
    v = βΨᵀH⁻¹ψ_j. H' = H + βδψ_jψ_jᵀ, and 1 + δS_j = α(α' + s_j)/(α'(α + s_j)).
    """
    delta = 1.0 / alpha_new - 1.0 / alpha_old
    denominator = alpha_old * (alpha_new + s_j) / (alpha_new * (alpha_old + s_j))
    w = G @ j_row
    v = beta * (Psi.T @ w)
    kappa = delta / denominator
    return v, kappa, _plus_outer(G, w, -(beta * delta / denominator))


def delete_step(Psi, G, beta, j_row, alpha_j, s_j):
    """As `reestimate_step` for α_j → ∞ (a deletion, label ``rvm-SQ-rank-one``):
    δ = −1/α_j, 1 + δS_j = α_j/(α_j + s_j), so κ = −(α_j + s_j)/α_j² and S grows.
    The basis U keeps φ_j's direction: it spans more than the model, which the
    coordinate form allows (H is I on the extra directions)."""
    w = G @ j_row
    v = beta * (Psi.T @ w)
    c = (alpha_j + s_j) / alpha_j**2
    return v, -c, _plus_outer(G, w, beta * c)


def add_in_span_step(Psi, G, beta, j, alpha_j, S_j):
    """v, κ and the new H⁻¹ when column j, already inside the span of U (a column
    deleted since the last refactorisation), rejoins the model with α_j:
    H' = H + (β/α_j)ψ_jψ_jᵀ, κ = 1/(α_j + S_j) (label ``rvm-SQ-rank-one``)."""
    w = G @ Psi[:, j]
    v = beta * (Psi.T @ w)
    return v, 1.0 / (alpha_j + S_j), _plus_outer(G, w, -(beta / (alpha_j + S_j)))


def add_step(Psi, G, beta, j, alpha_j, S_j):
    """v, κ and the new H⁻¹ when column j joins the model with α_j, after
    `add_coordinate` has given Ψ its new last row uᵀΦ (label ``rvm-SQ-rank-one``).

    With r̃ = (ψ_j, ρ) its coordinates in the extended basis (ρ = uᵀφ_j) and
    H̃ = diag(H, 1), H' = H̃ + (β/α_j)r̃r̃ᵀ; w = H̃⁻¹r̃ = (H⁻¹ψ_j, ρ) gives
    v = βΨᵀw, κ = 1/(α_j + S_j) and H'⁻¹ = H̃⁻¹ − βwwᵀ/(α_j + S_j).
    """
    m = len(G)
    w = np.empty(m + 1)
    w[:m] = G @ Psi[:m, j]
    w[m] = Psi[m, j]
    v = beta * (Psi.T @ w)
    G_new = np.multiply(w[:, None], w)  # H̃⁻¹ − βwwᵀ/(α_j + S_j), H̃⁻¹ = diag(H⁻¹, 1)
    G_new *= -(beta / (alpha_j + S_j))
    G_new[:m, :m] += G
    G_new[m, m] += 1.0
    return v, 1.0 / (alpha_j + S_j), G_new


def _plus_outer(G, w, c):
    """G + c·wwᵀ, in one new array."""
    out = np.multiply(w[:, None], w)
    out *= c
    out += G
    return out
