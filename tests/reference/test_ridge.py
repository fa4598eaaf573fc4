"""Dual ridge regression and Nadaraya–Watson: identities and scikit-learn parity."""

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.optimize import minimize
from sklearn.kernel_ridge import KernelRidge as SklearnKernelRidge

from kernelref import KernelRidge, NadarayaWatson
from kernelref.features import polynomial_feature_map
from kernelref.kernels import RBF, Polynomial
from kernelref.ridge import dual_coefficients, dual_objective, primal_weights


def datasets():
    rng = np.random.default_rng(3)
    X1 = rng.uniform(-3, 3, size=(80, 1))
    yield "sinusoid", X1, np.sin(X1[:, 0]) + 0.1 * rng.normal(size=80)
    X2 = rng.normal(size=(150, 5))
    yield "gaussian-5d", X2, X2 @ rng.normal(size=5) + np.cos(X2[:, 1])
    X3 = rng.normal(size=(60, 8)) * np.array([1, 10, 0.1, 1, 1, 5, 1, 1])
    yield "badly-scaled-multioutput", X3, np.column_stack([X3[:, 0], np.tanh(X3[:, 1])])


# scikit-learn warns when K + λI is not positive definite (the sigmoid kernel) and
# falls back to least squares; the system is nonsingular, so both are exact.
@pytest.mark.filterwarnings("ignore:Singular matrix in solving dual problem")
@pytest.mark.parametrize(
    "name,X,y", list(datasets()), ids=lambda v: v if isinstance(v, str) else ""
)
@pytest.mark.parametrize(
    "kernel,params",
    [
        ("rbf", {"gamma": 0.3}),
        ("poly", {"gamma": 0.2, "degree": 2, "coef0": 1.0}),
        ("linear", {}),
        ("sigmoid", {"gamma": 0.01, "coef0": 0.5}),
        ("rbf", {}),
    ],
)
def test_kernel_ridge_equals_scikit_learn(name, X, y, kernel, params):
    ours = KernelRidge(lam=0.5, kernel=kernel, **params).fit(X, y)
    theirs = SklearnKernelRidge(alpha=0.5, kernel=kernel, **params).fit(X, y)
    scale = np.max(np.abs(theirs.dual_coef_))
    np.testing.assert_allclose(
        ours.dual_coef_, theirs.dual_coef_, rtol=0, atol=1e-8 * scale
    )
    X_test = X[::3] + 0.05
    np.testing.assert_allclose(
        ours.predict(X_test), theirs.predict(X_test), rtol=1e-8, atol=1e-8
    )


def test_dual_equals_primal_with_explicit_polynomial_features():
    rng = np.random.default_rng(1)
    X, t = rng.normal(size=(40, 3)), rng.normal(size=40)
    kernel = Polynomial(degree=3, gamma=0.5, coef0=1.5)
    Phi = polynomial_feature_map(X, degree=3, gamma=0.5, coef0=1.5)
    w = primal_weights(Phi, t, lam=0.1)
    model = KernelRidge(lam=0.1, kernel=kernel).fit(X, t)
    X_new = rng.normal(size=(10, 3))
    Phi_new = polynomial_feature_map(X_new, degree=3, gamma=0.5, coef0=1.5)
    np.testing.assert_allclose(Phi_new @ w, model.predict(X_new), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(Phi.T @ model.dual_coef_, w, rtol=1e-8, atol=1e-9)


def test_dual_solution_minimises_the_dual_objective():
    rng = np.random.default_rng(2)
    X, t = rng.normal(size=(25, 2)), rng.normal(size=25)
    K, lam = RBF(0.5)(X), 0.3
    a = dual_coefficients(K, t, lam)
    gradient = K @ (K @ a) - K @ t + lam * K @ a
    assert np.max(np.abs(gradient)) < 1e-10
    generic = minimize(
        dual_objective,
        np.zeros(25),
        args=(K, t, lam),
        method="BFGS",
        options={"gtol": 1e-10},
    )
    assert dual_objective(a, K, t, lam) <= generic.fun + 1e-10


def test_small_lambda_interpolates_a_nonsingular_gram_matrix():
    rng = np.random.default_rng(4)
    X, t = (
        np.arange(15.0)[:, None],
        rng.normal(size=15),
    )  # well separated: K is well conditioned
    model = KernelRidge(lam=1e-10, kernel="rbf", gamma=1.0).fit(X, t)
    assert np.linalg.cond(model.kernel_(X)) < 10
    np.testing.assert_allclose(model.predict(X), t, atol=1e-8)


def test_indefinite_kernel_matrix_is_still_solved_exactly():
    rng = np.random.default_rng(5)
    X, t = rng.normal(size=(30, 2)), rng.normal(size=30)
    model = KernelRidge(lam=0.01, kernel="sigmoid", gamma=1.0, coef0=-1.0).fit(X, t)
    K = model.kernel_(X)
    np.testing.assert_allclose((K + 0.01 * np.eye(30)) @ model.dual_coef_, t, atol=1e-8)


def test_precomputed_kernel_gives_the_same_model():
    rng = np.random.default_rng(6)
    X, t = rng.normal(size=(30, 2)), rng.normal(size=30)
    kernel = RBF(0.4)
    a = KernelRidge(lam=0.2, kernel=kernel).fit(X, t)
    b = KernelRidge(lam=0.2, kernel="precomputed").fit(kernel(X), t)
    np.testing.assert_allclose(a.dual_coef_, b.dual_coef_, rtol=1e-13)
    X_new = rng.normal(size=(5, 2))
    np.testing.assert_allclose(
        a.predict(X_new), b.predict(kernel(X_new, X)), rtol=1e-12
    )


def test_nadaraya_watson_is_the_conditional_mean_of_the_kernel_density():
    """y(x) = ∫ t p(x, t) dt / ∫ p(x, t) dt for a product-Gaussian KDE (nw-predict)."""
    rng = np.random.default_rng(7)
    X, t = rng.uniform(0, 1, size=(12, 1)), rng.normal(size=12)
    h, s = 0.15, 0.3

    def density(x, tt):
        return np.mean(
            np.exp(-((x - X[:, 0]) ** 2) / (2 * h * h))
            * np.exp(-((tt - t) ** 2) / (2 * s * s))
        )

    model = NadarayaWatson(kernel="rbf", gamma=1 / (2 * h * h)).fit(X, t)
    for x in (0.1, 0.5, 0.93):
        numerator = quad(lambda tt: tt * density(x, tt), -10, 10, limit=200)[0]
        denominator = quad(lambda tt: density(x, tt), -10, 10, limit=200)[0]
        np.testing.assert_allclose(
            model.predict([[x]])[0], numerator / denominator, rtol=1e-7
        )


def test_nadaraya_watson_weights_sum_to_one_even_far_from_the_data():
    X = np.linspace(0, 1, 20)[:, None]
    model = NadarayaWatson(gamma=50.0).fit(X, np.arange(20.0))
    W = model.weights(np.array([[0.5], [100.0], [-100.0]]))
    np.testing.assert_allclose(W.sum(axis=1), 1.0)
    assert (W >= 0).all()
    np.testing.assert_allclose(
        model.predict([[100.0], [-100.0]]), [19.0, 0.0], atol=1e-12
    )
