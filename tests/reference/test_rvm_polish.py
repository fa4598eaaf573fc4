"""Newton's polish of the fast RVM (label ``rvm-polish-hessian``): the gradient and
Hessian against finite differences and the explicit density, its fixed point a
stationary point of the evidence, and the fast algorithm's evidence trace with it."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from kernelref.kernels import RBF
from kernelref.rvm.coordinates import coordinate_posterior
from kernelref.rvm.design import design_matrix
from kernelref.rvm.polish import evidence_derivatives, newton_polish
from kernelref.rvm.schedules import fast_regression


def coordinates_problem(seed, m=6, N=40):
    """R, τ, perp of a model with m orthonormal directions, some of whose columns
    carry signal, and the N×N data (Φ = UR, t) they stand for."""
    rng = np.random.default_rng(seed)
    perp = 2.5
    Q, _ = np.linalg.qr(rng.normal(size=(N, m + 1)))
    U, u_perp = Q[:, :m], Q[:, m]
    R = rng.normal(size=(m, m))
    tau = R @ (rng.normal(size=m) * (rng.uniform(size=m) < 0.6)) + 0.3 * rng.normal(
        size=m
    )
    return R, tau, perp, U @ R, U @ tau + np.sqrt(perp) * u_perp


@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_and_hessian_equal_finite_differences(seed):
    R, tau, perp, Phi, t = coordinates_problem(seed)
    rng = np.random.default_rng(seed + 10)
    m, N = R.shape[1], len(t)
    alpha, beta = rng.uniform(0.2, 4.0, m), 1.7
    L, g, H = evidence_derivatives(R, tau, perp, alpha, beta, N)
    C = np.eye(N) / beta + (Phi / alpha) @ Phi.T
    assert L == pytest.approx(multivariate_normal(np.zeros(N), C).logpdf(t), rel=1e-12)
    x, h = np.append(np.log(alpha), np.log(beta)), 1e-5

    def at(y):
        return evidence_derivatives(R, tau, perp, np.exp(y[:m]), np.exp(y[m]), N)

    steps = h * np.eye(m + 1)
    g_fd = np.array([(at(x + e)[0] - at(x - e)[0]) / (2 * h) for e in steps])
    H_fd = np.array([(at(x + e)[1] - at(x - e)[1]) / (2 * h) for e in steps])
    np.testing.assert_allclose(g, g_fd, atol=1e-7 * max(1.0, np.abs(g).max()))
    np.testing.assert_allclose(H, H_fd, atol=1e-6 * max(1.0, np.abs(H).max()))
    np.testing.assert_array_equal(H, H.T)
    # α alone: the leading block
    L_a, g_a, H_a = evidence_derivatives(R, tau, perp, alpha, beta, N, learn_beta=False)
    np.testing.assert_array_equal(g_a, g[:m])
    np.testing.assert_array_equal(H_a, H[:m, :m])


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_polish_ends_at_a_stationary_point_with_a_higher_evidence(seed):
    R, tau, perp, Phi, t = coordinates_problem(seed, m=5, N=60)
    N = len(t)
    alpha0, beta0 = np.full(5, 0.5), 1.0
    L0 = coordinate_posterior(R, tau, perp, alpha0, beta0, N).log_evidence
    out = newton_polish(R, tau, perp, alpha0, beta0, N, learn_beta=True, tol=1e-6)
    assert out.reason == "settled" and out.log_evidence > L0
    kept = np.flatnonzero(np.isfinite(out.alpha))
    L, g, _ = evidence_derivatives(R[:, kept], tau, perp, out.alpha[kept], out.beta, N)
    assert L == pytest.approx(out.log_evidence, rel=1e-12)
    assert np.abs(g).max() < 1e-6  # ∂L/∂log α_i and ∂L/∂log β vanish
    # In the fast algorithm's terms, from explicit N×N covariances C₋ᵢ: each α_i
    # kept is its own optimum s_i²/(q_i² − s_i) (rvm-fast-alpha).
    for i in kept:
        others = kept[kept != i]
        C = (
            np.eye(N) / out.beta
            + (Phi[:, others] / out.alpha[others]) @ Phi[:, others].T
        )
        s, q = (
            Phi[:, i] @ np.linalg.solve(C, Phi[:, i]),
            t @ np.linalg.solve(C, Phi[:, i]),
        )
        assert out.alpha[i] == pytest.approx(s**2 / (q**2 - s), rel=1e-5)


def test_fast_rvr_with_the_polish_has_a_non_decreasing_trace_and_uses_it():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((150, 4))
    t = np.sin(X[:, 0]) + X[:, 1] ** 2 / 3 + 0.3 * rng.standard_normal(150)
    Phi = design_matrix(RBF(0.25), X, X, bias=True)
    with_polish = fast_regression(Phi, t)
    without = fast_regression(Phi, t, polish=False)
    assert with_polish.converged and without.converged
    assert any(kind == "polish" for kind, _ in with_polish.actions)
    assert np.all(
        np.diff(with_polish.evidence) >= -1e-9 * np.abs(with_polish.evidence[1:])
    )
    assert with_polish.n_iter < without.n_iter


def eigen_step(g, H):
    """|H|⁻¹g from the full eigendecomposition, eigenvalues bounded away from zero
    by 1e-8 of the largest (the step `_ascent_direction` takes)."""
    w, V = np.linalg.eigh(H)
    w = np.maximum(np.abs(w), 1e-8 * max(np.abs(w).max(), 1.0))
    return V @ ((V.T @ g) / w)


@pytest.mark.parametrize("positive", [0, 1, 3, 7])
def test_indefinite_newton_step_equals_the_full_eigendecomposition(positive):
    # The step from the few eigenpairs above −1e-8‖H‖ (dsyevr and a Cholesky solve
    # of −H + 2V₊W₊V₊ᵀ) against |H|⁻¹g from every eigenpair.
    from kernelref.rvm.polish import _ascent_direction, _flipped_step

    rng = np.random.default_rng(positive)
    m = 60
    V, _ = np.linalg.qr(rng.normal(size=(m, m)))
    w = -np.exp(rng.normal(size=m) * 2)
    w[:positive] = np.exp(rng.normal(size=positive))
    H = (V * w) @ V.T
    H = (H + H.T) / 2
    g = rng.normal(size=m)
    expected = eigen_step(g, H)
    np.testing.assert_allclose(_ascent_direction(g, H), expected, rtol=1e-9)
    if positive:  # the few-eigenpair path, not the full decomposition's fallback
        np.testing.assert_allclose(_flipped_step(g, H), expected, rtol=1e-9)


def test_an_eigenvalue_near_zero_falls_back_to_the_bounded_decomposition():
    from kernelref.rvm.polish import _ascent_direction, _flipped_step

    rng = np.random.default_rng(5)
    m = 30
    V, _ = np.linalg.qr(rng.normal(size=(m, m)))
    w = -np.exp(rng.normal(size=m))
    w[0], w[1] = 2.0, 1e-12  # one positive, one within the bound of zero
    H = (V * w) @ V.T
    H = (H + H.T) / 2
    g = rng.normal(size=m)
    assert _flipped_step(g, H) is None
    np.testing.assert_allclose(_ascent_direction(g, H), eigen_step(g, H), rtol=1e-6)
