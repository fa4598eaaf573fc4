"""kkt_report certifies SMO's stop: every KKT violation below tol, the gap near 0."""

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from kernelref.svm import SVC, SVR, NuSVC, NuSVR, OneClassSVM, kkt_report


def data(seed=0, n=60):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=n) > 0, 1, 0)
    z = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    return X, y, z


X, Y, Z = data()
Xm, Ym = make_blobs(n_samples=60, centers=3, cluster_std=1.5, random_state=0)
CASES = {
    "svc": (SVC(C=2.0, tol=1e-5), X, Y),
    "svc-weighted": (SVC(C=2.0, tol=1e-5, class_weight="balanced"), X, Y),
    "nusvc": (NuSVC(nu=0.4, tol=1e-5), X, Y),
    "svc-3-classes": (SVC(C=2.0, tol=1e-5), Xm, Ym),
    "svr": (SVR(C=2.0, epsilon=0.1, tol=1e-5), X, Z),
    "nusvr": (NuSVR(C=2.0, nu=0.4, tol=1e-5), X, Z),
    "one-class": (OneClassSVM(nu=0.3, tol=1e-5), X, None),
}


@pytest.mark.parametrize("name", CASES)
def test_kkt_holds_at_smo_solution(name):
    model, Xd, yd = CASES[name]
    model.fit(Xd, yd)
    report = kkt_report(model, Xd, yd)
    assert report.max_violation < model.tol
    assert report.primal_feasibility.max() < model.tol
    assert report.complementary_slackness.max() < model.tol
    assert report.stationarity.max() < 1e-8 * max(1.0, np.abs(report.dual_objective))
    assert report.duality_gap >= -1e-9 * abs(report.dual_objective)
    assert report.duality_gap <= 1e-4 * max(1.0, abs(report.dual_objective))


def test_kkt_report_sees_a_perturbed_solution():
    model = SVC(C=2.0, tol=1e-5).fit(X, Y)
    exact = kkt_report(model, X, Y)
    model.intercept_ = model.intercept_ + 0.05
    moved = kkt_report(model, X, Y)
    assert moved.max_violation > 0.04 > exact.max_violation
    assert moved.duality_gap > exact.duality_gap + 1e-3


# -- ν-SVR whose tube collapses: dual_coef_ holds α − α*, not the split -------------
def collapsed(n=10, d=30, seed=0):
    """N < D with a linear kernel: the data are fitted exactly, ε = 0, and
    Σ|α − α*| falls short of Σ(α + α*) = C ν N."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=n)


def generic_nu_svr_dual(K, t, C, nu):
    """The ν-SVR dual in libsvm's scaling (label ``nu-svr-dual``, box [0, C],
    Σ(a + â) = C ν N) by SLSQP: (a, â)."""
    from scipy.optimize import minimize

    n = len(t)

    def objective(z):
        beta = z[:n] - z[n:]
        return 0.5 * beta @ K @ beta - beta @ t

    def gradient(z):
        g = K @ (z[:n] - z[n:]) - t
        return np.concatenate([g, -g])

    start = np.full(2 * n, C * nu / 2.0)
    result = minimize(
        objective,
        start,
        jac=gradient,
        method="SLSQP",
        bounds=[(0.0, C)] * (2 * n),
        constraints=[
            {"type": "eq", "fun": lambda z: z[:n].sum() - z[n:].sum()},
            {"type": "eq", "fun": lambda z: z.sum() - C * nu * n},
        ],
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    assert result.success, result.message
    return result.x[:n], result.x[n:], result.fun


@pytest.mark.parametrize("C", [1.0, 10.0])
def test_collapsed_nu_svr_report_checks_what_the_model_determines(C):
    X, t = collapsed()
    nu, n = 0.5, len(t)
    model = NuSVR(nu=nu, C=C, kernel="linear", tol=1e-8).fit(X, t)
    report = kkt_report(model, X, t)
    # Before the fix: equality = C ν N − Σ|β| ≈ 4.4 (C = 1) and 49.4 (C = 10).
    assert report.equality < 1e-12 * C * nu * n
    assert report.max_violation < model.tol
    assert report.duality_gap <= 1e-6 * max(1.0, abs(report.dual_objective))
    assert report.notes and "α − α*" in report.notes[0]
    a, a_hat = report.alpha[:n], report.alpha[n:]
    beta = np.zeros(n)
    beta[model.support_] = model.dual_coef_[0]
    np.testing.assert_allclose(a - a_hat, beta, atol=1e-14)
    assert a.min() >= 0 and a_hat.min() >= 0 and max(a.max(), a_hat.max()) <= C
    # the same numbers from a generic solver's solution of the dual
    K = X @ X.T
    g_a, g_hat, g_f = generic_nu_svr_dual(K, t, C, nu)
    assert abs((g_a - g_hat).sum()) < 1e-8 * C * n
    assert abs((g_a + g_hat).sum() - C * nu * n) < 1e-8 * C * n
    assert abs(report.alpha.sum() - (g_a + g_hat).sum()) < 1e-8 * C * n
    assert abs(report.dual_objective - (-g_f)) < 1e-6 * max(1.0, abs(g_f))
    np.testing.assert_allclose(beta, g_a - g_hat, atol=1e-4 * C)


def test_collapsed_nu_svr_model_equals_libsvm():
    """The fit is right (only the report was wrong): scikit-learn's NuSVR, a
    test-only oracle, gives the same model."""
    from sklearn.svm import NuSVR as LibsvmNuSVR

    X, t = collapsed()
    ours = NuSVR(nu=0.5, C=10.0, kernel="linear", tol=1e-8).fit(X, t)
    theirs = LibsvmNuSVR(nu=0.5, C=10.0, kernel="linear", tol=1e-8).fit(X, t)
    np.testing.assert_allclose(ours.predict(X), theirs.predict(X), atol=1e-6)
    np.testing.assert_allclose(ours.predict(X), t, atol=1e-6)  # fitted exactly
    beta_ours, beta_theirs = np.zeros(len(t)), np.zeros(len(t))
    beta_ours[ours.support_] = ours.dual_coef_[0]
    beta_theirs[theirs.support_] = theirs.dual_coef_[0]
    np.testing.assert_allclose(beta_ours, beta_theirs, atol=1e-6)
    np.testing.assert_allclose(ours.intercept_, theirs.intercept_, atol=1e-6)


def test_collapsed_nu_svr_report_sees_a_moved_intercept():
    """Completing the split does not hide a wrong model: with b moved by 0.05
    every residual is 0.05 and no split satisfies the KKT conditions."""
    X, t = collapsed()
    model = NuSVR(nu=0.5, C=10.0, kernel="linear", tol=1e-8).fit(X, t)
    model.intercept_ = model.intercept_ + 0.05
    report = kkt_report(model, X, t)
    assert report.max_violation > 0.04
    assert report.complementary_slackness.max() > 0.04


def test_collapsed_nu_svr_report_survives_a_model_file(tmp_path):
    from kernelref import io

    X, t = collapsed()
    model = NuSVR(nu=0.5, C=10.0, kernel="linear", tol=1e-8).fit(X, t)
    loaded = io.load(io.save(model, tmp_path / "nusvr.kref"))
    before, after = kkt_report(model, X, t), kkt_report(loaded, X, t)
    np.testing.assert_array_equal(before.alpha, after.alpha)
    assert after.max_violation == before.max_violation < model.tol


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_svr_on_exactly_fitted_data_has_no_split_to_complete(epsilon):
    """ε-SVR has no Σ(α + α*) equality: the least split read from dual_coef_ is
    an optimum (for ε > 0 the only one), and the report needs no note."""
    X, t = collapsed()
    model = SVR(C=10.0, epsilon=epsilon, kernel="linear", tol=1e-8).fit(X, t)
    report = kkt_report(model, X, t)
    assert report.max_violation < model.tol and report.notes == ()
    assert report.equality < 1e-12
