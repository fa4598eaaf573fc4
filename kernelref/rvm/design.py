"""What every RVM regression path shares: the design matrix Φ, the Gaussian
posterior over the weights, and the log evidence.

The model (label ``rvm-model``) is t = Φw + ε with ε ~ N(0, β⁻¹I) and the ARD
prior w_i ~ N(0, α_i⁻¹). Given α and β the posterior over w is Gaussian with

    Σ = (A + βΦᵀΦ)⁻¹,   μ = βΣΦᵀt                     (label ``rvm-posterior``)

and the evidence is t ~ N(0, C) with C = β⁻¹I + ΦA⁻¹Φᵀ (label ``rvm-evidence``).
Everything here works with the M×M posterior precision A + βΦᵀΦ of the basis
functions currently in the model and its Cholesky factor; the N×N matrix C is
never formed.
"""

import numbers
from collections import namedtuple

import numpy as np
from scipy.linalg import lapack

from kernelref._validation import check_integer, check_positive, evaluate_kernel

__all__ = [
    "NOISE_FRACTION_INIT",
    "Posterior",
    "check_evidence_settings",
    "check_kernel_columns",
    "column_scales",
    "design_matrix",
    "initial_beta",
    "log_evidence",
    "posterior",
]

#: The noise standard deviation starts at this fraction of the targets' (SparseBayes's
#: GAUSSIAN_SNR_INIT): a guess that the signal dominates, corrected by the first
#: β updates.
NOISE_FRACTION_INIT = 0.1

#: A Gaussian posterior over the weights of the basis functions in the model.
#: ``L`` is the lower Cholesky factor of the precision Σ⁻¹ = A + βΦᵀΦ.
Posterior = namedtuple("Posterior", "mu Sigma L log_evidence")


def check_evidence_settings(estimator):
    """Check the settings every RVM estimator shares: the iteration cap, the
    convergence tolerance, the pruning bound on α and the alignment test's cosine."""
    check_integer(estimator.max_iter, "max_iter")
    check_positive(
        estimator.tol, "tol", meaning="It bounds the change of log α at convergence."
    )
    check_positive(
        estimator.alpha_max,
        "alpha_max",
        meaning="It is the α above which a basis function is pruned; 1e12 is usual.",
    )
    alignment_max = estimator.alignment_max
    if (
        isinstance(alignment_max, bool)
        or not isinstance(alignment_max, numbers.Real)
        or not 0 < alignment_max <= 1
    ):
        raise ValueError(
            "alignment_max must be a cosine in (0, 1]; got "
            f"{estimator.alignment_max!r}. Use 1 - 1e-3 (SparseBayes's default) or "
            "1.0 to turn the test off."
        )


def design_matrix(kernel, X, X_basis, bias):
    """Φ with rows φ(x_n)ᵀ = [1, k(x_n, x_1), …, k(x_n, x_N)] (label ``rvm-design``).

    The bias column comes first when ``bias`` is true; it is a basis function
    like the others, with its own α_0, and is pruned if the evidence says so
    (Tipping 2001, §2). ``kernel="precomputed"`` means `X` already is
    K(X, X_basis).
    """
    K = X if isinstance(kernel, str) else evaluate_kernel(kernel, X, X_basis)
    if not bias:
        return np.array(K, dtype=np.float64)
    return np.hstack([np.ones((K.shape[0], 1)), K])


def initial_beta(t):
    """β = 1/(0.1·std t)², the starting noise precision (see `NOISE_FRACTION_INIT`)."""
    return 1.0 / (NOISE_FRACTION_INIT * np.std(t)) ** 2


def column_scales(Phi):
    """The Euclidean norm of every column of the kernel part of Φ.

    Raises when every column is zero: the kernel is then zero on the training
    data and its basis functions can explain nothing.
    """
    return check_kernel_columns(np.sqrt(np.einsum("nm,nm->m", Phi, Phi)))


def check_kernel_columns(scales):
    """Refuse kernel columns whose norms ``scales`` are all zero (see
    `column_scales`); return the norms."""
    if not np.any(scales > 0):
        raise ValueError(
            "the kernel is zero on all pairs of training points, so the design "
            "matrix Φ has no nonzero kernel column and no basis function can explain "
            "the targets; choose another kernel or kernel parameter (e.g. a smaller "
            "gamma for 'rbf')."
        )
    return scales


def posterior(Phi, t, alpha, beta):
    """Σ, μ and the log evidence for the basis functions in `Phi`.

    Implements (rvm-posterior) by a Cholesky factor L of Σ⁻¹ = A + βΦᵀΦ;
    Σ = L⁻ᵀL⁻¹ costs O(M³) on the M columns in the model, never an N×N solve.
    """
    L = precision_factor(Phi, alpha, beta)
    if len(alpha) == 0:  # no basis function (LAPACK refuses a 0 × 0 system)
        mu, Sigma = np.zeros(0), np.zeros((0, 0))
    else:
        # LAPACK's dpotrs and dtrtrs directly: the routines scipy's cho_solve and
        # solve_triangular call on this Fortran-ordered L, without their checks,
        # which cost more than the solves on the small models of the fast loop
        mu = lapack.dpotrs(L, beta * (Phi.T @ t), lower=1)[0]
        L_inv = lapack.dtrtrs(L, np.eye(len(alpha)), lower=1)[0]
        Sigma = L_inv.T @ L_inv
    return Posterior(mu, Sigma, L, log_evidence(Phi, t, alpha, beta, mu, L))


def precision_factor(Phi, alpha, beta):
    """The lower Cholesky factor L of Σ⁻¹ = A + βΦᵀΦ (rvm-posterior), its upper
    triangle zero; a clear error where Σ⁻¹ is not numerically positive definite.
    The relevance vector classifier's Newton steps use it with β = 1 on the
    whitened design."""
    precision = Phi.T @ Phi
    if beta != 1:
        precision *= beta
    precision.flat[:: len(alpha) + 1] += alpha
    L, info = lapack.dpotrf(precision, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError(
            "the posterior precision A + βΦᵀΦ is not numerically positive definite; "
            "the basis functions in the model are (nearly) linearly dependent at these "
            "α. Use a narrower kernel or method='fast', which refuses aligned basis "
            "functions."
        )
    return L


def log_evidence(Phi, t, alpha, beta, mu, L):
    """log N(t | 0, C), C = β⁻¹I + ΦA⁻¹Φᵀ, from the posterior (label
    ``rvm-log-evidence``).

    With the determinant lemma log|C| = −N log β − Σ log α_i + log|Σ⁻¹| and
    tᵀC⁻¹t = β‖t − Φμ‖² + μᵀAμ, where log|Σ⁻¹| = 2 Σ log L_ii:

        L(α, β) = −½ [N log 2π − N log β − Σ log α_i + log|Σ⁻¹|
                      + β‖t − Φμ‖² + μᵀAμ].
    """
    N = len(t)
    residual = t - Phi @ mu
    log_det_precision = 2.0 * np.sum(np.log(np.diag(L)))
    return -0.5 * (
        N * np.log(2 * np.pi)
        - N * np.log(beta)
        - np.sum(np.log(alpha))
        + log_det_precision
        + beta * residual @ residual
        + mu @ (alpha * mu)
    )
