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
from scipy.linalg import cholesky, solve_triangular

from kernelref.rvm.design import posterior

__all__ = ["add_coordinate", "coordinate_posterior", "drop_coordinate",
           "orthonormal_coordinates", "span_residual", "stable_SQ"]


def orthonormal_coordinates(Phi, active):
    """An orthonormal basis U of the span of the model's columns and the
    coordinates Ψ = UᵀΦ of every column, from a QR factorisation."""
    U, _ = np.linalg.qr(Phi[:, active])
    return U, U.T @ Phi


def add_coordinate(Phi, U, Psi, j):
    """Extend U by the part of column j orthogonal to it: Gram–Schmidt, applied
    twice so that U stays orthonormal to rounding; Ψ gains the row uᵀΦ."""
    r = Phi[:, j] - U @ Psi[:, j]
    r -= U @ (U.T @ r)
    u = r / np.linalg.norm(r)
    return np.column_stack([U, u]), np.vstack([Psi, u @ Phi])


def drop_coordinate(U, Psi, R_rest):
    """Shrink U to the span of the columns left in the model, whose coordinates
    are R_rest: U ← UW and Ψ ← WᵀΨ with W an orthonormal basis of span R_rest."""
    W, _ = np.linalg.qr(R_rest)
    return U @ W, W.T @ Psi


def span_residual(Psi, unit):
    """‖(I − UUᵀ)φ_i‖² = ‖φ_i‖² − ‖ψ_i‖²: how far each column lies outside the
    span of the model (``unit`` holds ‖φ_i‖², 1 or 0 after normalisation)."""
    return np.maximum(unit - np.einsum("mp,mp->p", Psi, Psi), 0.0)


def stable_SQ(Psi, active, alpha, beta, residual, PhiT_t, tau):
    """S_i = φ_iᵀC⁻¹φ_i and Q_i = φ_iᵀC⁻¹t for every column (label ``rvm-SQ-stable``).

    With C⁻¹ = β[(I − UUᵀ) + UH⁻¹Uᵀ], H = I + βRA⁻¹Rᵀ, R = Ψ_M and τ = Uᵀt:
    S_i = β[‖φ_i‖² − ‖ψ_i‖² + ψ_iᵀH⁻¹ψ_i] and Q_i = β[φ_iᵀt − ψ_iᵀτ + ψ_iᵀH⁻¹τ];
    ``residual`` holds ‖φ_i‖² − ‖ψ_i‖² (`span_residual`). H's eigenvalues are
    at least 1, so ψ_iᵀH⁻¹ψ_i ≤ ‖ψ_i‖² and no term is a difference of large numbers.
    """
    G = Psi[:, active] * np.sqrt(beta / alpha)          # √β R A^(−½)
    H = G @ G.T
    H.flat[:: len(active) + 1] += 1.0
    L = cholesky(H, lower=True, check_finite=False)
    Z = solve_triangular(L, Psi, lower=True, check_finite=False)
    z = solve_triangular(L, tau, lower=True, check_finite=False)
    outside = residual.copy()
    outside[active] = 0.0
    S = beta * (outside + np.einsum("mp,mp->p", Z, Z))
    outside_t = PhiT_t - Psi.T @ tau                    # φ_iᵀ(I − UUᵀ)t
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
