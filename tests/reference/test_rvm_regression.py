"""Relevance vector regression: the sinc benchmark, scikit-learn's ARD fixed point,
the evidence identities of the fast algorithm, and the predictive variance."""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.stats import multivariate_normal
from sklearn.base import clone
from sklearn.linear_model import ARDRegression
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVR

from kernelref.kernels import RBF
from kernelref.rvm import RVR
from kernelref.rvm.design import design_matrix, initial_beta, posterior
from kernelref.rvm.fast import fast_marginal_likelihood
from kernelref.rvm.reestimate import em_alpha, gamma_factors, initial_alpha, reestimate
from kernelref.rvm.regression import ConvergenceWarning
from kernelref.rvm.sparsity import ell, optimal_alpha, sparsity_quality

#: Tipping's Gaussian kernel of width 3, exp(−(x − x′)²/(2·3²)), i.e. γ = 1/18.
SINC_GAMMA = 1.0 / 18.0


def sinc_data(seed, n=100, noise=0.1):
    """Tipping 2001's benchmark: x uniform on [−10, 10], t = sin(x)/x + N(0, noise²)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-10, 10, size=n)
    return x[:, None], np.sinc(x / np.pi) + noise * rng.normal(size=n)


def direct_log_evidence(Phi, t, alpha, beta):
    """log N(t | 0, β⁻¹I + ΦA⁻¹Φᵀ), formed as an N×N covariance: an independent
    oracle."""
    C = np.eye(len(t)) / beta + (Phi / alpha) @ Phi.T
    return multivariate_normal(mean=np.zeros(len(t)), cov=C).logpdf(t)


def test_sinc_benchmark_is_sparse_and_accurate_and_sparser_than_svr():
    x_test = np.linspace(-10, 10, 1001)[:, None]
    truth = np.sinc(x_test[:, 0] / np.pi)
    counts, errors, svr_counts = [], [], []
    for seed in range(5):
        X, t = sinc_data(seed)
        model = RVR(kernel="rbf", gamma=SINC_GAMMA).fit(X, t)
        counts.append(len(model.relevance_))
        errors.append(np.sqrt(np.mean((model.predict(x_test) - truth) ** 2)))
        svr = GridSearchCV(
            SVR(kernel="rbf", gamma=SINC_GAMMA, epsilon=0.1),
            {"C": [0.3, 1, 3, 10, 30]},
            cv=5,
        ).fit(X, t)
        svr_counts.append(len(svr.best_estimator_.support_))
    # Measured: 5.8 relevance vectors on average (5 or 6, plus the bias), RMS error
    # 0.036; the tuned SVR keeps about 33 support vectors.
    assert 4 <= np.mean(counts) <= 12
    assert np.mean(errors) < 0.06
    assert np.mean(counts) < 0.5 * np.mean(svr_counts)


def test_reestimation_reaches_the_fixed_point_of_ard_regression():
    X, t = sinc_data(0, n=40)
    K = RBF(SINC_GAMMA)(X)
    tiny = 1e-12  # hyperpriors so flat that both maximise the same evidence
    ard = ARDRegression(
        alpha_1=tiny,
        alpha_2=tiny,
        lambda_1=tiny,
        lambda_2=tiny,
        fit_intercept=False,
        threshold_lambda=1e12,
        max_iter=100000,
        tol=1e-9,
    ).fit(K, t)
    # Same start as scikit-learn: every α = 1, β = 1/var(t).
    ours = reestimate(
        K,
        t,
        1.0,
        1.0 / (np.var(t) + np.finfo(float).eps),
        tol=1e-9,
        max_iter=100000,
        alpha_max=1e12,
    )
    assert ours.converged
    # Ours sits on the fixed point α_i = γ_i/μ_i² to rounding error.
    np.testing.assert_allclose(ours.gamma / ours.mu**2, ours.alpha, rtol=1e-10)
    # scikit-learn stops on Σ|Δw| < tol while basis functions with α_j ≳ 6e3 are still
    # on their slow way to infinity; their prior variance (≤ 2e-4) moves the fixed point
    # of the others by about 2e-5 relative (measured, and unchanged with tol=1e-12),
    # so 1e-4 is the tolerance for "the same fixed point".
    np.testing.assert_allclose(ard.lambda_[ours.keep], ours.alpha, rtol=1e-4)
    np.testing.assert_allclose(ard.alpha_, ours.beta, rtol=1e-4)
    # The other α are on their slow way to infinity in scikit-learn's run (it stops on
    # the change of w, which is already negligible), so compare the fitted functions.
    pruned = np.setdiff1d(np.arange(len(t)), ours.keep)
    assert ard.lambda_[pruned].min() > 100 * ours.alpha.max()
    np.testing.assert_allclose(K @ ard.coef_, K[:, ours.keep] @ ours.mu, atol=1e-5)


def test_log_evidence_gradient_vanishes_at_the_reestimation_fixed_point():
    X, t = sinc_data(1, n=30)
    Phi = design_matrix(RBF(SINC_GAMMA), X, X, bias=True)
    result = reestimate(
        Phi, t, initial_alpha(30), initial_beta(t), tol=1e-10, max_iter=200000
    )
    assert result.converged
    Phi_kept, alpha, beta = Phi[:, result.keep], result.alpha, result.beta
    L0 = direct_log_evidence(Phi_kept, t, alpha, beta)
    assert abs(L0 - result.log_evidence) < 1e-8 * abs(L0)
    h = 1e-5
    for i in range(len(alpha)):
        up, down = alpha.copy(), alpha.copy()
        up[i] *= np.exp(h)
        down[i] *= np.exp(-h)
        gradient = (
            direct_log_evidence(Phi_kept, t, up, beta)
            - direct_log_evidence(Phi_kept, t, down, beta)
        ) / (2 * h)
        assert abs(gradient) < 1e-5, (i, gradient)
    gradient_beta = (
        direct_log_evidence(Phi_kept, t, alpha, beta * np.exp(h))
        - direct_log_evidence(Phi_kept, t, alpha, beta * np.exp(-h))
    ) / (2 * h)
    assert abs(gradient_beta) < 1e-5


def test_em_has_the_same_fixed_point_as_reestimation():
    X, t = sinc_data(2, n=30)
    Phi = design_matrix(RBF(SINC_GAMMA), X, X, bias=True)
    result = reestimate(
        Phi, t, initial_alpha(30), initial_beta(t), tol=1e-10, max_iter=200000
    )
    np.testing.assert_allclose(
        em_alpha(result.mu, np.diag(result.Sigma)), result.alpha, rtol=1e-8
    )


@pytest.mark.parametrize("seed", [0, 3])
def test_fast_evidence_is_close_to_reestimation_with_no_more_vectors(seed):
    X, t = sinc_data(seed, n=60)
    fast = RVR(gamma=SINC_GAMMA, method="fast").fit(X, t)
    slow = RVR(gamma=SINC_GAMMA, method="reestimate", max_iter=50000).fit(X, t)
    assert slow.converged_ and fast.converged_
    assert abs(fast.log_evidence_ - slow.log_evidence_) < 3.0
    assert len(fast.relevance_) <= len(slow.relevance_)


def test_fast_evidence_trace_never_decreases():
    for seed in range(3):
        X, t = sinc_data(seed)
        model = RVR(gamma=SINC_GAMMA).fit(X, t)
        steps = np.diff(model.evidence_)
        assert steps.min() >= -1e-9 * abs(model.log_evidence_)
        assert model.evidence_[-1] > model.evidence_[0]


def random_problem(seed, N=25, M=6):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(N, M))
    t = Phi[:, :2] @ np.array([1.5, -2.0]) + 0.3 * rng.normal(size=N)
    return Phi, t, rng.uniform(0.2, 5.0, size=M), 4.0


@pytest.mark.parametrize("seed", range(4))
def test_evidence_splits_into_the_rest_and_ell_of_one_alpha(seed):
    Phi, t, alpha, beta = random_problem(seed)
    i = seed % Phi.shape[1]
    rest = np.delete(np.arange(Phi.shape[1]), i)
    C_rest = np.eye(len(t)) / beta + (Phi[:, rest] / alpha[rest]) @ Phi[:, rest].T
    s_i = Phi[:, i] @ np.linalg.solve(C_rest, Phi[:, i])
    q_i = Phi[:, i] @ np.linalg.solve(C_rest, t)
    L_full = direct_log_evidence(Phi, t, alpha, beta)
    L_rest = direct_log_evidence(Phi[:, rest], t, alpha[rest], beta)
    assert np.isclose(L_full, L_rest + ell(alpha[i], s_i, q_i), rtol=0, atol=1e-10)

    # s_i, q_i from S_i, Q_i of the full model.
    C = C_rest + np.outer(Phi[:, i], Phi[:, i]) / alpha[i]
    S = np.array([Phi[:, i] @ np.linalg.solve(C, Phi[:, i])])
    Q = np.array([Phi[:, i] @ np.linalg.solve(C, t)])
    s, q = sparsity_quality(S, Q, alpha[[i]])
    np.testing.assert_allclose([s[0], q[0]], [s_i, q_i], rtol=1e-10)

    # The maximiser s²/(q² − s) against a numerical 1-D search over log α.
    if q_i**2 > s_i:
        best = minimize_scalar(
            lambda a: -ell(np.exp(a), s_i, q_i),
            bounds=(-20, 20),
            method="bounded",
            options={"xatol": 1e-10},
        )
        np.testing.assert_allclose(optimal_alpha(s_i, q_i), np.exp(best.x), rtol=1e-6)
    else:
        assert np.isinf(optimal_alpha(s_i, q_i))


def test_ell_maximiser_is_infinite_when_quality_is_below_sparsity():
    s, q = 2.0, 1.0  # q² < s: ℓ increases all the way to α = ∞ where it is 0
    grid = np.logspace(-4, 8, 200)
    assert np.all(np.diff(ell(grid, s, q)) > 0)
    assert np.all(ell(grid, s, q) < 0)
    assert np.isinf(optimal_alpha(s, q))


def test_fast_alpha_is_on_the_users_basis_scale():
    # Columns of norm far from 1 make the normalisation matter: k = 40·RBF.
    X, t = sinc_data(4, n=60)
    kernel = 40.0 * RBF(SINC_GAMMA)
    Phi = design_matrix(kernel, X, X, bias=True)
    result = fast_marginal_likelihood(Phi, t, tol=1e-10)
    assert result.converged
    post = posterior(Phi[:, result.active], t, result.alpha, result.beta)
    gamma = gamma_factors(result.alpha, np.diag(post.Sigma))
    # The fitted α is the re-estimation fixed point γ_i/μ_i² on the unnormalised Φ …
    np.testing.assert_allclose(result.alpha, gamma / post.mu**2, rtol=1e-6)
    np.testing.assert_allclose(result.mu, post.mu, rtol=1e-8)
    # … and SparseBayes's α̃/c² (c the column norms) is not.
    c = np.linalg.norm(Phi[:, result.active], axis=0)
    sparsebayes = result.alpha / c**4
    assert np.max(np.abs(np.log(sparsebayes / result.alpha))) > 5


def test_accelerated_update_does_not_reach_an_evidence_stationary_point():
    X, t = sinc_data(0, n=50)
    Phi = design_matrix(RBF(SINC_GAMMA), X, X, bias=True)
    standard = reestimate(Phi, t, initial_alpha(50), initial_beta(t), max_iter=3000)
    accelerated = reestimate(
        Phi, t, initial_alpha(50), initial_beta(t), update="accelerated", max_iter=3000
    )

    def largest_gradient(r):
        # ∂L/∂log α_i = ½(γ_i − α_iμ_i²): zero at a stationary point of the evidence.
        return np.max(np.abs(0.5 * (r.gamma - r.alpha * r.mu**2)))

    assert standard.converged and largest_gradient(standard) < 1e-2
    assert largest_gradient(accelerated) > 0.05
    assert accelerated.log_evidence < standard.log_evidence


def test_predictive_std_equals_the_formula():
    X, t = sinc_data(5, n=50)
    model = RVR(gamma=SINC_GAMMA).fit(X, t)
    X_new = np.linspace(-12, 12, 7)[:, None]
    mean, std = model.predict(X_new, return_std=True)

    # Rebuild Σ = (A + βΦᵀΦ)⁻¹ by a plain inverse from the kept columns.
    def phi(Z):
        K = np.exp(-SINC_GAMMA * (Z - model.relevance_vectors_[:, 0]) ** 2)
        return np.hstack([np.ones((len(Z), 1)), K]) if model.bias_used_ else K

    Phi = phi(X)
    Sigma = np.linalg.inv(np.diag(model.alpha_) + model.beta_ * Phi.T @ Phi)
    np.testing.assert_allclose(model.Sigma_, Sigma, rtol=1e-8, atol=1e-12)
    mu = model.beta_ * Sigma @ Phi.T @ t
    P = phi(X_new)
    np.testing.assert_allclose(mean, P @ mu, rtol=1e-8, atol=1e-10)
    expected = np.sqrt(1 / model.beta_ + np.sum((P @ Sigma) * P, axis=1))
    np.testing.assert_allclose(std, expected, rtol=1e-8)


@pytest.mark.parametrize("method", ["fast", "reestimate"])
def test_precomputed_kernel_gives_the_same_model(method):
    X, t = sinc_data(6, n=40)
    kernel = RBF(SINC_GAMMA)
    a = RVR(kernel=kernel, method=method).fit(X, t)
    b = RVR(kernel="precomputed", method=method).fit(kernel(X), t)
    np.testing.assert_array_equal(a.relevance_, b.relevance_)
    X_new = np.linspace(-9, 9, 5)[:, None]
    np.testing.assert_allclose(
        a.predict(X_new), b.predict(kernel(X_new, X)), atol=1e-10
    )


def test_bad_input_gets_clear_errors():
    X, t = sinc_data(0, n=20)
    with pytest.raises(ValueError, match="y is constant"):
        RVR().fit(X, np.ones(20))
    t_nan = t.copy()
    t_nan[3] = np.nan
    with pytest.raises(ValueError, match="y contains NaN"):
        RVR().fit(X, t_nan)
    with pytest.raises(ValueError, match="X contains NaN"):
        RVR().fit(np.where(X > 0, np.nan, X), t)
    with pytest.raises(ValueError, match="kernel is zero"):
        RVR(kernel="linear").fit(np.zeros((20, 2)), t)
    with pytest.raises(ValueError, match="method must be one of"):
        RVR(method="newton").fit(X, t)
    with pytest.raises(ValueError, match="update must be one of"):
        RVR(update="faster").fit(X, t)
    with pytest.raises(ValueError, match="accelerated"):
        RVR(method="fast", update="accelerated").fit(X, t)
    with pytest.raises(ValueError, match="alpha_max"):
        RVR(alpha_max=0).fit(X, t)
    with pytest.raises(ValueError, match="max_iter"):
        RVR(max_iter=0).fit(X, t)
    with pytest.raises(ValueError, match="y has 19 rows"):
        RVR().fit(X, t[:19])


def test_clone_and_params_round_trip():
    model = RVR(kernel="rbf", gamma=0.2, method="reestimate", tol=1e-4)
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    X, t = sinc_data(7, n=30)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        copy.fit(X, t)
    assert copy.get_params() == model.get_params()
    assert not hasattr(model, "mu_")
    assert 0.9 < copy.score(X, t) <= 1.0


def test_posterior_of_the_empty_model_is_the_noise_alone():
    """No basis function: μ and Σ are empty and the evidence is N(t | 0, β⁻¹I)
    (the re-estimation chapter's loop can prune every function)."""
    t = np.random.default_rng(0).normal(size=7)
    post = posterior(np.zeros((7, 0)), t, np.zeros(0), 4.0)
    assert post.mu.shape == (0,) and post.Sigma.shape == (0, 0)
    expected = multivariate_normal(np.zeros(7), np.eye(7) / 4.0).logpdf(t)
    np.testing.assert_allclose(post.log_evidence, expected, rtol=1e-12)
