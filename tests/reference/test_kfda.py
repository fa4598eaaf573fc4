"""Kernel Fisher discriminant against independent computations.

- the generalised eigenproblem (scipy.linalg.eigh) against the two-class
  closed form α ∝ N_μ⁻¹(m_2 − m_1) and against the Fisher criterion's maximum;
- the scatter matrices against the projections' scatter computed sample by sample;
- with a linear kernel, against classical LDA: the exact identity
  w = Xᵀα ∝ (S_W + μ(XᵀX)⁻¹)⁻¹(x̄_2 − x̄_1), and as μ → 0 scikit-learn's
  LinearDiscriminantAnalysis (a test-only oracle) for two and three classes.
"""

import numpy as np
import pytest
from scipy.linalg import eigh, subspace_angles
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

from kernelref.kernels import RBF
from kernelref.kfda import KernelFisherDiscriminant, scatter_matrices


def blobs(n_per_class, centres, seed=0):
    rng = np.random.default_rng(seed)
    A = np.array([[1.0, 0.4, 0.0], [0.0, 0.7, 0.3], [0.2, 0.0, 0.5]])
    X = np.vstack([c + rng.standard_normal((n_per_class, 3)) @ A for c in centres])
    y = np.repeat(np.arange(len(centres)), n_per_class)
    return X, y


TWO = [np.zeros(3), np.array([1.5, -0.5, 1.0])]
THREE = TWO + [np.array([-1.0, 2.0, 0.5])]


def test_scatter_matrices_are_the_projections_scatter():
    X, y = blobs(15, THREE)
    K = RBF(0.3)(X)
    M, N_W = scatter_matrices(K, y, 3)
    alpha = np.random.default_rng(1).standard_normal(len(X))
    z = K @ alpha  # projections of the training points
    between = sum((y == c).sum() * (z[y == c].mean() - z.mean()) ** 2 for c in range(3))
    within = sum(((z[y == c] - z[y == c].mean()) ** 2).sum() for c in range(3))
    assert alpha @ M @ alpha == pytest.approx(between, rel=1e-10)
    assert alpha @ N_W @ alpha == pytest.approx(within, rel=1e-10)


def test_two_classes_eigenproblem_equals_the_closed_form():
    X, y = blobs(20, TWO)
    mu = 0.05
    model = KernelFisherDiscriminant(mu=mu, kernel=RBF(0.4)).fit(X, y)
    K = RBF(0.4)(X)
    _, N_W = scatter_matrices(K, y, 2)
    N_mu = N_W + mu * np.eye(len(X))
    closed = np.linalg.solve(N_mu, K[:, y == 1].mean(1) - K[:, y == 0].mean(1))
    alpha = model.dual_coef_[:, 0]
    cosine = alpha @ closed / np.linalg.norm(alpha) / np.linalg.norm(closed)
    assert cosine == pytest.approx(1.0, abs=1e-10)
    np.testing.assert_allclose(alpha @ N_mu @ alpha, 1.0, rtol=1e-10)


def test_eigenvalue_is_the_maximum_of_the_fisher_criterion():
    X, y = blobs(15, THREE)
    mu = 0.1
    model = KernelFisherDiscriminant(mu=mu, kernel=RBF(0.3)).fit(X, y)
    M, N_W = scatter_matrices(RBF(0.3)(X), y, 3)
    N_mu = N_W + mu * np.eye(len(X))
    J = lambda a: (a @ M @ a) / (a @ N_mu @ a)  # noqa: E731
    alpha = model.dual_coef_
    for j in range(2):
        assert J(alpha[:, j]) == pytest.approx(model.eigenvalues_[j], rel=1e-9)
        residual = M @ alpha[:, j] - model.eigenvalues_[j] * N_mu @ alpha[:, j]
        assert np.abs(residual).max() < 1e-8 * np.abs(M).max()
    rng = np.random.default_rng(2)
    others = [J(alpha[:, 0] + 0.1 * rng.standard_normal(len(X))) for _ in range(50)]
    assert max(others) < model.eigenvalues_[0]


def test_linear_kernel_is_lda_with_a_regularised_within_scatter():
    X, y = blobs(25, TWO)
    mu = 0.5
    model = KernelFisherDiscriminant(mu=mu, kernel="linear").fit(X, y)
    w = X.T @ model.dual_coef_[:, 0]
    S_W = sum(np.cov(X[y == c].T, bias=True) * (y == c).sum() for c in range(2))
    d = X[y == 1].mean(0) - X[y == 0].mean(0)
    expected = np.linalg.solve(S_W + mu * np.linalg.inv(X.T @ X), d)
    np.testing.assert_allclose(
        w / np.linalg.norm(w), expected / np.linalg.norm(expected), atol=1e-10
    )


@pytest.mark.parametrize("centres", [TWO, THREE], ids=["two", "three"])
def test_linear_kernel_tends_to_sklearn_lda(centres):
    X, y = blobs(25, centres)
    model = KernelFisherDiscriminant(mu=1e-9, kernel="linear").fit(X, y)
    W = X.T @ model.dual_coef_
    lda = LinearDiscriminantAnalysis(solver="eigen").fit(X, y)
    W_lda = lda.scalings_[:, : len(centres) - 1]
    assert np.rad2deg(subspace_angles(W, W_lda)).max() < 1e-4
    # the eigenvalues: Rayleigh quotients of the primal scatter matrices
    S_W = sum(
        np.cov(X[y == c].T, bias=True) * (y == c).sum() for c in range(len(centres))
    )
    S_B = sum(
        (y == c).sum()
        * np.outer(X[y == c].mean(0) - X.mean(0), X[y == c].mean(0) - X.mean(0))
        for c in range(len(centres))
    )
    primal = eigh(S_B, S_W, eigvals_only=True)[::-1][: len(centres) - 1]
    np.testing.assert_allclose(model.eigenvalues_, primal, rtol=1e-6)
    assert np.mean(model.predict(X) == lda.predict(X)) > 0.9


def test_predict_is_the_nearest_projected_mean():
    X, y = blobs(20, THREE, seed=3)
    labels = np.array(["a", "b", "c"])[y]
    model = KernelFisherDiscriminant(mu=0.01, kernel=RBF(0.5)).fit(X, labels)
    Z = model.transform(X)
    nearest = np.argmin(((Z[:, None] - model.means_[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_array_equal(model.predict(X), model.classes_[nearest])
    assert model.score(X, labels) > 0.8


def test_two_class_decision_function_sign_and_precomputed():
    X, y = blobs(20, TWO, seed=4)
    model = KernelFisherDiscriminant(mu=0.01, kernel=RBF(0.5)).fit(X, y)
    scores = model.decision_function(X)
    np.testing.assert_array_equal(model.predict(X), (scores > 0).astype(int))
    assert scores[y == 1].mean() > 0 > scores[y == 0].mean()
    pre = KernelFisherDiscriminant(mu=0.01, kernel="precomputed").fit(RBF(0.5)(X), y)
    np.testing.assert_allclose(
        pre.decision_function(RBF(0.5)(X[:5], X)), scores[:5], rtol=1e-8
    )


@pytest.mark.parametrize(
    "params, match",
    [({"mu": 0.0}, "mu"), ({"mu": -1.0}, "mu"), ({"n_components": 2}, "n_components")],
)
def test_bad_parameters_are_refused(params, match):
    X, y = blobs(5, TWO)
    with pytest.raises(ValueError, match=match):
        KernelFisherDiscriminant(**params).fit(X, y)


def test_scikit_learn_estimator_checks():
    from sklearn.utils.estimator_checks import check_estimator

    # the same two expected failures as every kernelref classifier (see
    # test_sklearn_checks.py): its own NotFittedError class, and a column y refused
    expected = {"check_estimators_unfitted", "check_supervised_y_2d"}
    with pytest.warns(UserWarning):  # "does not inherit from sklearn's BaseEstimator"
        results = check_estimator(KernelFisherDiscriminant(), on_fail=None)
    failed = {r["check_name"] for r in results if r["status"] == "failed"}
    assert failed == expected


def test_model_file_round_trip(tmp_path):
    from kernelref import load

    X, y = blobs(15, THREE, seed=5)
    model = KernelFisherDiscriminant(mu=0.05, kernel=RBF(0.5)).fit(X, y)
    path = tmp_path / "kfda.model"
    model.save(path)
    loaded = load(path)
    assert type(loaded) is KernelFisherDiscriminant
    np.testing.assert_array_equal(loaded.transform(X), model.transform(X))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
