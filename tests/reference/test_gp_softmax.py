"""Softmax GP classification (GPML Algorithms 3.3 and 3.4): the structured
computations against dense CN × CN ones, the mode against a generic optimiser,
the Hessian against finite differences, the evidence and its gradient, and the
predictive probabilities."""

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax
from sklearn.base import clone

from kernelref.gp_softmax import (
    SoftmaxGaussianProcessClassifier,
    class_factors,
    latent_draws,
    monte_carlo_probabilities,
    newton_step,
    softmax_evidence_gradient,
    softmax_laplace_mode,
    softmax_predictive,
)
from kernelref.gp_softmax import _posterior_blocks as posterior_blocks
from kernelref.kernels import RBF, DotProduct, Matern

rng = np.random.default_rng(0)
CENTRES = [(-1.5, 0.0), (1.5, 0.0), (0.0, 1.8)]
X = np.vstack([rng.normal(c, 0.8, size=(8, 2)) for c in CENTRES])
y = np.repeat([0, 1, 2], 8)
Y = (np.arange(3)[:, None] == y[None, :]).astype(float)
KERNEL = 2.0 * RBF(0.5)
K = KERNEL(X)
C, n = Y.shape


def dense(K, C):
    return np.kron(np.eye(C), K)


def dense_W(pi):
    """W = D − ΠΠᵀ (gpcm-W) as a CN × CN matrix, classes stacked."""
    Pi = np.vstack([np.diag(p) for p in pi])
    return np.diag(pi.ravel()) - Pi @ Pi.T


def log_likelihood(f):
    F = f.reshape(C, n)
    return np.sum(Y * F) - np.sum(logsumexp(F, axis=0))


def psi(f, K_big):
    return -0.5 * f @ np.linalg.solve(K_big, f) + log_likelihood(f)


@pytest.fixture(scope="module")
def mode():
    return softmax_laplace_mode(K, Y)


def test_likelihood_hessian_is_minus_W():
    """∂² log p(y | f) = −W at a random f, by central differences of the gradient."""
    f = rng.normal(size=C * n)

    def gradient(f):
        return (Y - softmax(f.reshape(C, n), axis=0)).ravel()

    h = 1e-5
    H = np.array(
        [(gradient(f + h * e) - gradient(f - h * e)) / (2 * h) for e in np.eye(C * n)]
    )
    np.testing.assert_allclose(H, -dense_W(softmax(f.reshape(C, n), axis=0)), atol=1e-9)


def test_structured_inverse_equals_dense():
    """(gpcm-inverse): E − ER(ΣE)⁻¹RᵀE equals W(I + KW)⁻¹, and E_c = (K + D_c⁻¹)⁻¹."""
    pi = softmax(rng.normal(size=(C, n)), axis=0)
    E, z, M = class_factors(K, pi)
    for c in range(C):
        np.testing.assert_allclose(
            E[c], np.linalg.inv(K + np.diag(1 / pi[c])), atol=1e-10
        )
    R = np.vstack([np.eye(n)] * C)
    E_big = np.zeros((C * n, C * n))
    for c in range(C):
        E_big[c * n : (c + 1) * n, c * n : (c + 1) * n] = E[c]
    structured = E_big - E_big @ R @ np.linalg.solve(M @ M.T, R.T @ E_big)
    W = dense_W(pi)
    np.testing.assert_allclose(
        structured, W @ np.linalg.inv(np.eye(C * n) + dense(K, C) @ W), atol=1e-10
    )


def test_newton_step_equals_dense_newton_step():
    A = rng.normal(size=(C, n)) * 0.3
    F = A @ K
    pi = softmax(F, axis=0)
    W, K_big = dense_W(pi), dense(K, C)
    b = W @ F.ravel() + (Y - pi).ravel()
    f_new = K_big @ np.linalg.solve(np.eye(C * n) + W @ K_big, b)  # (K⁻¹ + W)⁻¹b
    np.testing.assert_allclose((newton_step(K, A, Y) @ K).ravel(), f_new, atol=1e-9)


def test_mode_zeroes_the_gradient_and_matches_a_generic_optimiser(mode):
    K_big = dense(K, C)
    f_hat = mode.f.ravel()
    gradient = (Y - mode.pi).ravel() - np.linalg.solve(K_big, f_hat)
    assert np.max(np.abs(gradient)) < 1e-8
    np.testing.assert_allclose(mode.a, Y - mode.pi, atol=1e-8)

    def negative_psi(a):  # in a = K⁻¹f, where the objective is well conditioned
        f = K_big @ a
        grad_f = (Y.ravel() - softmax(f.reshape(C, n), axis=0).ravel()) - a
        return -psi(f, K_big), -K_big @ grad_f

    generic = minimize(
        negative_psi, np.zeros(C * n), jac=True, method="BFGS", options={"gtol": 1e-10}
    )
    np.testing.assert_allclose(K_big @ generic.x, f_hat, atol=1e-6)
    assert mode.n_iter < 20


def test_hessian_of_psi_against_finite_differences(mode):
    """∂²Ψ at the mode is −(K⁻¹ + W), the Laplace precision, by differencing Ψ."""
    K_big = dense(K, C)
    f_hat = mode.f.ravel()
    h = 1e-4
    I = np.eye(C * n)
    idx = [0, 5, n + 3, 2 * n + 7]  # a few entries, the full FD Hessian is slow
    expected = -(np.linalg.inv(K_big) + dense_W(mode.pi))
    for i in idx:
        for j in idx:
            fd = (
                psi(f_hat + h * I[i] + h * I[j], K_big)
                - psi(f_hat + h * I[i] - h * I[j], K_big)
                - psi(f_hat - h * I[i] + h * I[j], K_big)
                + psi(f_hat - h * I[i] - h * I[j], K_big)
            ) / (4 * h * h)
            assert abs(fd - expected[i, j]) < 1e-4 * max(1.0, abs(expected[i, j]))


def test_evidence_equals_dense_laplace_evidence(mode):
    """log q = Ψ(f̂) − ½ log|I + KW| (gpcm-evidence), the determinant done densely."""
    K_big = dense(K, C)
    W = dense_W(mode.pi)
    expected = (
        psi(mode.f.ravel(), K_big)
        - 0.5 * np.linalg.slogdet(np.eye(C * n) + K_big @ W)[1]
    )
    assert mode.log_evidence == pytest.approx(expected, abs=1e-9)


def test_laplace_evidence_is_close_to_the_true_evidence_on_a_tiny_problem():
    """On 4 points and 3 classes, log p(y | X) = log E_prior[p(y | f)] by Monte
    Carlo (12-dimensional; p(y | f) ≤ 1, so plain averaging converges). The
    Laplace value is an approximation: it lands within 0.1 nats here."""
    X4, y4 = np.array([[0.0], [0.4], [1.5], [3.0]]), np.array([0, 0, 1, 2])
    Y4 = (np.arange(3)[:, None] == y4[None, :]).astype(float)
    K4 = RBF(0.3)(X4)
    laplace = softmax_laplace_mode(K4, Y4).log_evidence
    draws = np.random.default_rng(1).multivariate_normal(
        np.zeros(4), K4, size=(200_000, 3)
    )
    log_lik = np.sum(
        Y4 * (draws - logsumexp(draws, axis=1, keepdims=True)), axis=(1, 2)
    )
    true = logsumexp(log_lik) - np.log(len(log_lik))
    standard_error = np.std(np.exp(log_lik - true)) / np.sqrt(len(log_lik))
    assert standard_error < 0.01
    assert abs(laplace - true) < 0.1


def test_true_evidence_by_quadrature_against_monte_carlo_and_laplace():
    """Two points, three classes: log p(y | X) = log ∫ p(y | f) N(f | 0, K) df is a
    6-dimensional integral, done by tensor Gauss–Hermite quadrature over
    f_c = L z_c (8 nodes a dimension, converged to 1e-4 against 6). The
    Monte-Carlo estimator of the test above agrees with it within 4 standard
    errors, and the Laplace approximation is within 0.1 nats of it."""
    from numpy.polynomial.hermite_e import hermegauss

    X2, y2 = np.array([[0.0], [0.8]]), np.array([0, 2])
    Y2 = (np.arange(3)[:, None] == y2[None, :]).astype(float)
    K2 = RBF(0.5)(X2)
    L = np.linalg.cholesky(K2)

    def quadrature(m):
        x, w = hermegauss(m)
        Z = np.stack(np.meshgrid(*[x] * 6, indexing="ij"), -1).reshape(-1, 3, 2)
        weights = np.prod(
            np.stack(np.meshgrid(*[w / np.sqrt(2 * np.pi)] * 6, indexing="ij"), -1),
            axis=-1,
        ).ravel()
        F = Z @ L.T
        log_lik = np.sum(Y2 * (F - logsumexp(F, axis=1, keepdims=True)), axis=(1, 2))
        return np.log(weights @ np.exp(log_lik))

    exact = quadrature(8)
    assert abs(exact - quadrature(6)) < 1e-4
    draws = np.random.default_rng(2).multivariate_normal(
        np.zeros(2), K2, size=(100_000, 3)
    )
    log_lik = np.sum(
        Y2 * (draws - logsumexp(draws, axis=1, keepdims=True)), axis=(1, 2)
    )
    monte_carlo = logsumexp(log_lik) - np.log(len(log_lik))
    standard_error = np.std(np.exp(log_lik - monte_carlo)) / np.sqrt(len(log_lik))
    assert abs(monte_carlo - exact) < 4 * standard_error
    assert abs(softmax_laplace_mode(K2, Y2).log_evidence - exact) < 0.1


def test_monte_carlo_probabilities_match_quadrature():
    """E[softmax(f)] under N(μ, Σ) for C = 3 by Gauss–Hermite quadrature on
    f = μ + Rz (30 nodes a dimension) against the seeded Monte-Carlo average."""
    from numpy.polynomial.hermite_e import hermegauss

    mean = np.array([[0.5, -0.3, 1.0]])
    A = rng.normal(size=(3, 3))
    cov = (A @ A.T)[None]
    x, w = hermegauss(30)
    Z = np.stack(np.meshgrid(x, x, x, indexing="ij"), -1).reshape(-1, 3)
    weights = np.prod(
        np.stack(np.meshgrid(*[w / np.sqrt(2 * np.pi)] * 3, indexing="ij"), -1),
        axis=-1,
    ).ravel()
    exact = weights @ softmax(mean[0] + Z @ np.linalg.cholesky(cov[0]).T, axis=1)
    P = monte_carlo_probabilities(mean, cov, 100_000, np.random.default_rng(3))
    np.testing.assert_allclose(P[0], exact, atol=5e-3)  # SE <= 0.5/√1e5 = 1.6e-3
    assert abs(exact.sum() - 1.0) < 1e-10


def test_evidence_gradient_against_central_differences(mode):
    kernel = 1.5 * Matern([0.8, 1.4], nu=2.5)
    Kk = kernel(X)
    analytic = softmax_evidence_gradient(kernel, X, Kk, Y, softmax_laplace_mode(Kk, Y))

    def evidence(theta):
        k = kernel.clone_with_theta(theta)
        return softmax_laplace_mode(k(X), Y).log_evidence

    h = 1e-5
    numeric = [
        (evidence(kernel.theta + h * e) - evidence(kernel.theta - h * e)) / (2 * h)
        for e in np.eye(len(kernel.theta))
    ]
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def test_predictive_moments_equal_dense_formulas(mode):
    X_star = rng.normal(size=(6, 2))
    K_star, kss = KERNEL(X_star, X), KERNEL.diag(X_star)
    mean, cov = softmax_predictive(K_star, kss, Y, mode)
    np.testing.assert_allclose(mean, K_star @ (Y - mode.pi).T, atol=1e-12)
    W, K_big = dense_W(mode.pi), dense(K, C)
    R_tilde = W @ np.linalg.inv(np.eye(C * n) + K_big @ W)
    for m in range(len(X_star)):
        Q = np.kron(np.eye(C), K_star[m][:, None])  # (CN, C)
        expected = kss[m] * np.eye(C) - Q.T @ R_tilde @ Q
        np.testing.assert_allclose(cov[m], expected, atol=1e-10)


def test_predictive_at_training_inputs_is_the_laplace_marginal(mode):
    """At x_* = x_i the predictive latent is the Laplace posterior of f_i:
    mean f̂_i and covariance the (i, i) blocks of (K⁻¹ + W)⁻¹."""
    mean, cov = softmax_predictive(K, np.diag(K), Y, mode)
    np.testing.assert_allclose(mean, mode.f.T, atol=1e-8)
    Sigma = np.linalg.inv(np.linalg.inv(dense(K, C)) + dense_W(mode.pi))
    blocks = Sigma.reshape(C, n, C, n)[:, np.arange(n), :, np.arange(n)]
    np.testing.assert_allclose(cov, blocks, atol=1e-8)
    np.testing.assert_allclose(posterior_blocks(K, mode), blocks, atol=1e-8)


def test_monte_carlo_probabilities_sum_to_one_and_converge():
    mean = rng.normal(size=(5, 3))
    L = rng.normal(size=(5, 3, 3))
    cov = L @ np.swapaxes(L, 1, 2)
    P = monte_carlo_probabilities(mean, cov, 4000, np.random.default_rng(0))
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
    reference = monte_carlo_probabilities(mean, cov, 200_000, np.random.default_rng(1))
    assert np.max(np.abs(P - reference)) < 0.03  # about 4 standard errors at 4000 draws


def test_log_probability_is_finite_where_the_monte_carlo_average_underflows():
    """Far along a linear kernel the Monte-Carlo probabilities of the far classes
    are 0 in double precision; their logs are the log-space average of the same
    draws, checked in extended precision (float80 reaches e^-11355)."""
    assert np.finfo(np.longdouble).minexp < -16000  # x86 extended precision
    model = SoftmaxGaussianProcessClassifier(DotProduct(1.0), optimizer=None)
    model.fit(X, y)
    far = np.array([[-6e4, 0.0], [6e4, 0.0], [0.3, 0.2]])
    P, log_P = model.predict_proba(far), model.predict_log_proba(far)
    assert P[0, 1] == 0.0  # np.log(P) would be −inf there
    mean, cov = model.latent_predictive(far)
    F = latent_draws(
        mean, cov, model.n_samples, np.random.default_rng(model.random_state)
    ).astype(np.longdouble)
    pi = np.exp(F - F.max(axis=2, keepdims=True))
    pi /= pi.sum(axis=2, keepdims=True)
    expected = np.log(pi.mean(axis=0))
    assert np.all(np.isfinite(expected)) and expected[0, 1] < -3000
    np.testing.assert_allclose(log_P, expected.astype(float), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.exp(log_P), P, rtol=1e-12, atol=0)


def test_classifier_learns_hyperparameters_and_classifies():
    start = SoftmaxGaussianProcessClassifier(KERNEL, optimizer=None).fit(X, y)
    fitted = SoftmaxGaussianProcessClassifier(KERNEL).fit(X, y)
    assert fitted.log_marginal_likelihood_value_ > start.log_marginal_likelihood_value_
    _, gradient = fitted.log_marginal_likelihood(eval_gradient=True)
    assert np.max(np.abs(gradient)) < 1e-3
    assert fitted.score(X, y) > 0.9
    P = fitted.predict_proba(X)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(P, fitted.predict_proba(X))  # seeded draws
    moderated = fitted.predict_proba(X, method="moderated")
    assert np.max(np.abs(moderated - P)) < 0.1
    assert fitted.f_hat_.shape == (n, C) and fitted.pi_.shape == (n, C)
    assert KERNEL.theta == pytest.approx(
        np.log([2.0, 0.5])
    )  # the given kernel untouched


def test_string_labels_and_clone():
    labels = np.array(["a", "b", "c"])[y]
    model = SoftmaxGaussianProcessClassifier(KERNEL, optimizer=None).fit(X, labels)
    assert set(model.predict(X)) <= set(labels)
    twin = clone(model).fit(X, labels)
    assert twin.log_marginal_likelihood_value_ == model.log_marginal_likelihood_value_


@pytest.mark.parametrize(
    "params,error,match",
    [
        ({"kernel": "rbf"}, TypeError, "kernel must be"),
        ({"optimizer": "adam"}, ValueError, "optimizer must be"),
        ({"n_samples": 0}, ValueError, "n_samples"),
        ({"max_iter_predict": 0}, ValueError, "max_iter_predict"),
        ({"random_state": 1.5}, ValueError, "random_state"),
    ],
)
def test_bad_parameters_are_refused(params, error, match):
    with pytest.raises(error, match=match):
        SoftmaxGaussianProcessClassifier(**params).fit(X, y)


def test_bad_input_is_refused():
    model = SoftmaxGaussianProcessClassifier(KERNEL, optimizer=None)
    with pytest.raises(ValueError, match="one class"):
        model.fit(X, np.zeros(n))
    with pytest.raises(ValueError, match="labels but X has"):
        model.fit(X, y[:-1])
    model.fit(X, y)
    with pytest.raises(ValueError, match="method must be"):
        model.predict_proba(X, method="probit")
    with pytest.raises(ValueError):
        model.predict(X[:, :1])


def test_two_class_softmax_is_the_binary_model_on_the_difference():
    """With C = 2 only g = f¹ − f² enters the likelihood, σ(g), and g ~ GP(0, 2k);
    the orthogonal direction f¹ + f² keeps its Gaussian prior, which the Laplace
    approximation integrates exactly. So the softmax evidence equals the binary
    Laplace evidence with kernel 2k, and the predictive g has the binary moments."""
    from kernelref.gp_classify import laplace_mode, latent_predictive

    two = y < 2
    X2, t2 = X[two], (y[two] == 0).astype(float)
    Y2 = np.vstack([t2, 1 - t2])
    K2 = KERNEL(X2)
    softmax_mode = softmax_laplace_mode(K2, Y2)
    binary_mode = laplace_mode(2 * K2, t2)
    assert softmax_mode.log_evidence == pytest.approx(
        binary_mode.log_evidence, abs=1e-9
    )
    np.testing.assert_allclose(
        softmax_mode.f[0] - softmax_mode.f[1], binary_mode.f, atol=1e-8
    )
    X_star = rng.normal(size=(5, 2))
    mean, cov = softmax_predictive(
        KERNEL(X_star, X2), KERNEL.diag(X_star), Y2, softmax_mode
    )
    g_mean, g_var = latent_predictive(
        2 * KERNEL(X_star, X2), 2 * KERNEL.diag(X_star), t2, binary_mode
    )
    np.testing.assert_allclose(mean[:, 0] - mean[:, 1], g_mean, atol=1e-9)
    g_var_softmax = cov[:, 0, 0] + cov[:, 1, 1] - 2 * cov[:, 0, 1]
    np.testing.assert_allclose(g_var_softmax, g_var, atol=1e-9)


def test_model_file_round_trip(tmp_path):
    """A fitted softmax GPC with a composite ARD kernel saves as data and loads
    to the same predictions; the kernel also survives spec() → from_spec()."""
    from kernelref.io import load, save
    from kernelref.kernels import ExpSineSquared, Kernel, RationalQuadratic

    kernel = 1.5 * Matern([0.8, 1.4], nu=2.5) + RationalQuadratic(1.0, 2.0) * (
        ExpSineSquared(2.0, 3.0, periodicity_bounds="fixed")
    )
    model = SoftmaxGaussianProcessClassifier(kernel, optimizer=None).fit(X, y)
    save(model, tmp_path / "softmax.kref")
    loaded = load(tmp_path / "softmax.kref")
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))
    assert loaded.kernel_ == model.kernel_
    assert Kernel.from_spec(kernel.spec()) == kernel
