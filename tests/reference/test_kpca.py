"""Kernel PCA: the eigenproblem and normalisation, centring in feature space,
scikit-learn parity up to sign, linear kernel PCA = PCA, and clear errors."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_circles
from sklearn.decomposition import PCA
from sklearn.decomposition import KernelPCA as SklearnKernelPCA

from kernelref.features import polynomial_feature_map
from kernelref.kernels import RBF, Polynomial
from kernelref.kpca import KernelPCA, centre_cross_gram, centre_gram

rng = np.random.default_rng(0)
X = rng.normal(size=(250, 4)) * np.array([2.0, 1.0, 0.5, 0.2])
X_new = rng.normal(size=(15, 4))


def column_signs(A, B):
    """±1 per column: the sign that makes B's column agree with A's."""
    return np.sign(np.sum(A * B, axis=0))


@pytest.mark.parametrize(
    "kernel,params",
    [
        ("rbf", {"gamma": 0.2}),
        ("poly", {"degree": 2, "gamma": 0.5, "coef0": 1.0}),
        ("linear", {}),
        ("rbf", {}),
    ],
)
@pytest.mark.parametrize(
    "solver,n_components", [("dense", 6), ("arpack", 6), ("dense", None)]
)
def test_eigenvalues_and_projections_equal_scikit_learn(
    kernel, params, solver, n_components
):
    ours = KernelPCA(
        n_components, kernel=kernel, eigen_solver=solver, random_state=0, **params
    )
    theirs = SklearnKernelPCA(
        n_components, kernel=kernel, eigen_solver=solver, random_state=0, **params
    )
    Z, Z_theirs = ours.fit_transform(X), theirs.fit_transform(X)
    # Weyl: rounding δ ≈ 1e-16 in the entries of K moves every eigenvalue by at most
    # ‖E‖₂ ≤ nδ, so eigenvalues near 1e-11·λ_max agree only to that absolute level;
    # our distances are centred first, scikit-learn's are not, so their rounding
    # differs.
    np.testing.assert_allclose(
        ours.eigenvalues_,
        theirs.eigenvalues_,
        rtol=1e-8,
        atol=len(X) * 1e-16 * theirs.eigenvalues_[0],
    )
    signs, scale = column_signs(Z, Z_theirs), np.abs(Z_theirs).max()
    np.testing.assert_allclose(Z, signs * Z_theirs, atol=1e-8 * scale)
    # a = u/√λ magnifies the rounding of K by λ_max/λ: on components with
    # λ < 1e-8·λ_max the two libraries' roundings of K (see above) differ beyond 1e-8.
    sound = ours.eigenvalues_ > 1e-8 * ours.eigenvalues_[0]
    np.testing.assert_allclose(
        ours.transform(X_new)[:, sound],
        (signs * theirs.transform(X_new))[:, sound],
        atol=1e-8 * scale,
    )


def test_eigen_equation_and_normalisation_hold():
    model = KernelPCA(5, kernel="rbf", gamma=0.3).fit(X)
    N = len(X)
    one_N = np.full((N, N), 1.0 / N)
    K = RBF(0.3)(X)
    K_tilde = K - one_N @ K - K @ one_N + one_N @ K @ one_N
    a, lam_N = model.dual_coef_, model.eigenvalues_
    np.testing.assert_allclose(
        K_tilde @ a, a * lam_N, atol=1e-10 * lam_N.max()
    )  # kpca-eigen
    np.testing.assert_allclose(
        lam_N * np.sum(a * a, axis=0), 1.0, rtol=1e-10
    )  # kpca-normalise
    assert np.all(np.diff(lam_N) <= 0)
    # the training projections are K̃a, whether computed by fit_transform or transform
    np.testing.assert_allclose(model.transform(X), K_tilde @ a, atol=1e-10)


def test_centring_is_centring_of_explicit_features():
    kernel = Polynomial(degree=2, gamma=0.5, coef0=1.0)
    Phi = polynomial_feature_map(X, degree=2, gamma=0.5, coef0=1.0)
    Phi_new = polynomial_feature_map(X_new, degree=2, gamma=0.5, coef0=1.0)
    mean = Phi.mean(axis=0)
    K_tilde, column_means = centre_gram(kernel(X))
    np.testing.assert_allclose(K_tilde, (Phi - mean) @ (Phi - mean).T, atol=1e-9)
    np.testing.assert_allclose(
        centre_cross_gram(kernel(X_new, X), column_means),
        (Phi_new - mean) @ (Phi - mean).T,
        atol=1e-9,
    )


def test_linear_kernel_pca_is_pca():
    kpca = KernelPCA(3, kernel="linear").fit(X)
    pca = PCA(3).fit(X)
    Z, Z_pca = kpca.transform(X), pca.transform(X)
    signs = column_signs(Z, Z_pca)
    np.testing.assert_allclose(Z, signs * Z_pca, atol=1e-10)
    np.testing.assert_allclose(
        kpca.transform(X_new), signs * pca.transform(X_new), atol=1e-10
    )
    # eigenvalues of K̃ are N times those of the (biased) sample covariance
    N = len(X)
    np.testing.assert_allclose(
        kpca.eigenvalues_ / N, pca.explained_variance_ * (N - 1) / N, rtol=1e-10
    )
    # and, by an independent route, the squared singular values of the centred data
    singular = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)
    np.testing.assert_allclose(kpca.eigenvalues_, singular[:3] ** 2, rtol=1e-10)


def test_dense_and_arpack_solvers_agree():
    dense = KernelPCA(4, gamma=0.2, eigen_solver="dense").fit(X)
    arpack = KernelPCA(4, gamma=0.2, eigen_solver="arpack", random_state=1).fit(X)
    np.testing.assert_allclose(arpack.eigenvalues_, dense.eigenvalues_, rtol=1e-10)
    # the sign convention (largest entry positive) makes the vectors equal outright
    np.testing.assert_allclose(arpack.eigenvectors_, dense.eigenvectors_, atol=1e-8)
    assert KernelPCA(4)._validate(X)[3] == "arpack"
    assert KernelPCA(20)._validate(X)[3] == "dense"


def test_rbf_kernel_pca_separates_circles_that_pca_cannot():
    Xc, labels = make_circles(n_samples=200, factor=0.3, noise=0.05, random_state=0)

    def gap(z):
        """Positive when a threshold on z separates the classes."""
        inner, outer = z[labels == 1], z[labels == 0]
        return max(inner.min() - outer.max(), outer.min() - inner.max())

    assert gap(KernelPCA(1, gamma=2.0).fit_transform(Xc)[:, 0]) > 0
    for component in PCA(2).fit_transform(Xc).T:
        assert gap(component) < 0


def test_n_components_none_keeps_the_nonzero_eigenvalues():
    model = KernelPCA(kernel="linear").fit(X)
    assert model.eigenvalues_.shape == (4,)  # rank of the centred data
    assert model.fit_transform(X).shape == (250, 4)


def test_precomputed_gram_matrix_gives_the_same_projections():
    kernel = RBF(0.2)
    direct = KernelPCA(3, kernel=kernel).fit(X)
    pre = KernelPCA(3, kernel="precomputed").fit(kernel(X))
    np.testing.assert_allclose(pre.eigenvalues_, direct.eigenvalues_, rtol=1e-12)
    np.testing.assert_allclose(
        pre.transform(kernel(X_new, X)), direct.transform(X_new), atol=1e-12
    )


def test_clone_and_params_follow_scikit_learn_conventions():
    model = KernelPCA(3, kernel="poly", degree=2)
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    copy.fit(X)
    assert not hasattr(model, "eigenvalues_") and copy.n_components == 3


@pytest.mark.parametrize(
    "kwargs,data,match",
    [
        ({}, "nan", "X contains NaN"),
        ({"n_components": 0}, None, "n_components must be"),
        ({"n_components": 251}, None, "n_components must be"),
        ({"n_components": 2.5}, None, "n_components must be"),
        ({"eigen_solver": "lobpcg"}, None, "eigen_solver must be"),
        (
            {"n_components": 250, "eigen_solver": "arpack"},
            None,
            "eigen_solver='arpack'",
        ),
        ({"kernel": "cosine"}, None, "kernel must be one of"),
        ({"gamma": -1.0}, None, "gamma must be"),
        (
            {"kernel": "sigmoid", "gamma": 1.0, "coef0": -1.0},
            None,
            "not positive semi-definite",
        ),
    ],
)
def test_bad_input_gets_a_clear_error(kwargs, data, match):
    data_X = X.copy()
    if data == "nan":
        data_X[5, 2] = np.nan
    with pytest.raises(ValueError, match=match):
        KernelPCA(**kwargs).fit(data_X)


def test_transform_checks_its_input():
    with pytest.raises(AttributeError, match="not fitted yet"):
        KernelPCA(2).transform(X)
    model = KernelPCA(2).fit(X)
    with pytest.raises(ValueError, match="features"):
        model.transform(X[:, :3])
    with pytest.raises(ValueError, match="K\\(X_new, X_train\\)"):
        KernelPCA(2, kernel="precomputed").fit(RBF(1.0)(X)).transform(np.ones((3, 5)))
