"""scikit-learn's remaining features: coef_ of linear SVMs, break_ties,
KernelRidge's sample_weight, KernelPCA's inverse_transform and predict_log_proba.

Each is checked against its mathematics and against scikit-learn (a test-only
oracle) on the same data.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from kernelref.exceptions import NotFittedError
from kernelref.gp import GaussianProcessClassifier
from kernelref.kernels import RBF, Linear
from kernelref.kpca import KernelPCA
from kernelref.ridge import KernelRidge
from kernelref.rvm import RVC
from kernelref.svm import SVC, SVR, NuSVC, NuSVR, OneClassSVM
from kernelref.svm.platt import PlattCalibrated

sklearn_svm = pytest.importorskip("sklearn.svm")


def data(seed=0, n=90, d=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.6, 0.6])
    z = X @ np.arange(1.0, d + 1) + 0.1 * rng.normal(size=n)
    return X, y, z


def triangle(seed=0):
    """Three classes around the vertices of a triangle, and a grid on its centre,
    where the one-vs-one votes of many points tie 1–1–1."""
    rng = np.random.default_rng(seed)
    centres = np.array([[np.cos(a), np.sin(a)] for a in 2 * np.pi * np.arange(3) / 3])
    X = np.vstack([m + 0.7 * rng.normal(size=(30, 2)) for m in centres])
    g = np.linspace(-0.6, 0.6, 41)
    return X, np.repeat([0, 1, 2], 30), np.array([[a, b] for a in g for b in g])


# -- coef_ ---------------------------------------------------------------------------
COEF_CASES = [
    (SVC, "SVC", "three", {}),
    (SVC, "SVC", "two", {}),
    (NuSVC, "NuSVC", "three", {"nu": 0.3}),
    (SVR, "SVR", "real", {}),
    (NuSVR, "NuSVR", "real", {}),
    (OneClassSVM, "OneClassSVM", "shifted", {}),
]


@pytest.mark.parametrize(
    "ours,name,target,params",
    COEF_CASES,
    ids=[c[1] + "-" + str(c[2]) for c in COEF_CASES],
)
def test_coef_of_linear_svm_equals_scikit_learns(ours, name, target, params):
    X, y, z = data()
    t = {"three": y, "two": y > 0, "real": z, "shifted": None}[target]
    if target == "shifted":
        # a linear one-class SVM separates the data from the origin: keep it away
        X = X + 3.0
    model = ours(kernel="linear", tol=1e-8, **params).fit(X, t)
    theirs = getattr(sklearn_svm, name)(kernel="linear", tol=1e-8, **params).fit(X, t)
    n_pairs = 3 if target == "three" else 1
    assert model.coef_.shape == theirs.coef_.shape == (n_pairs, X.shape[1])
    np.testing.assert_allclose(model.coef_, theirs.coef_, rtol=1e-5, atol=1e-5)
    # the primal weights reproduce every machine's decision value: wᵀx + b
    np.testing.assert_allclose(
        X @ model.coef_.T + model.intercept_,
        # libsvm's sign, which scikit-learn's binary classifier flips
        model.pairwise_decision(X) * (-1 if target == "two" else 1),
        atol=1e-10,
    )
    assert not model.coef_.flags.writeable
    sparse = ours(kernel=Linear(), tol=1e-8, **params).fit(sp.csr_matrix(X), t)
    np.testing.assert_allclose(sparse.coef_, model.coef_, atol=1e-6)


def test_coef_is_refused_for_nonlinear_kernels_as_in_scikit_learn():
    X, y, _ = data()
    model = SVC(kernel="rbf").fit(X, y)
    with pytest.raises(
        AttributeError, match="only available when using a linear kernel"
    ):
        _ = model.coef_
    assert not hasattr(SVR(kernel="poly").fit(X, y), "coef_")
    with pytest.raises(NotFittedError):
        _ = SVC(kernel="linear").coef_


# -- break_ties ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ours,name,kernel,params",
    [
        (SVC, "SVC", "linear", {}),
        (SVC, "SVC", "rbf", {}),
        (NuSVC, "NuSVC", "rbf", {"nu": 0.4}),
    ],
)
def test_break_ties_predicts_as_scikit_learn(ours, name, kernel, params):
    X, y, X_grid = triangle()
    model = ours(kernel=kernel, break_ties=True, tol=1e-8, **params).fit(X, y)
    theirs = getattr(sklearn_svm, name)(
        kernel=kernel, break_ties=True, tol=1e-8, **params
    ).fit(X, y)
    voted = ours(kernel=kernel, tol=1e-8, **params).fit(X, y).predict(X_grid)
    predicted = model.predict(X_grid)
    # the grid holds tied votes, where breaking them changes the answer
    assert np.count_nonzero(predicted != voted) >= 3
    np.testing.assert_array_equal(predicted, theirs.predict(X_grid))
    np.testing.assert_array_equal(
        predicted, np.argmax(model.decision_function(X_grid), axis=1)
    )


def test_break_ties_changes_nothing_for_two_classes_and_refuses_ovo():
    X, y, _ = data()
    X_test = data(1)[0]
    plain = SVC().fit(X, y > 0).predict(X_test)
    np.testing.assert_array_equal(
        SVC(break_ties=True).fit(X, y > 0).predict(X_test), plain
    )
    model = SVC(break_ties=True, decision_function_shape="ovo").fit(X, y)
    with pytest.raises(ValueError, match="break_ties must be False"):
        model.predict(X)
    with pytest.raises(TypeError, match="break_ties"):
        SVC(break_ties="yes").fit(X, y)


# -- KernelRidge(sample_weight) --------------------------------------------------------
@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly"])
def test_weighted_kernel_ridge_equals_scikit_learn_and_the_closed_form(kernel):
    from sklearn.kernel_ridge import KernelRidge as SklearnKernelRidge

    X, _, z = data(2, n=50)
    s = np.random.default_rng(3).exponential(size=len(z))
    s[4] = 0.0
    model = KernelRidge(lam=0.5, kernel=kernel, gamma=0.2).fit(X, z, sample_weight=s)
    theirs = SklearnKernelRidge(alpha=0.5, kernel=kernel, gamma=0.2).fit(
        X, z, sample_weight=s
    )
    np.testing.assert_allclose(
        model.dual_coef_, theirs.dual_coef_, rtol=1e-9, atol=1e-12
    )
    # stationarity of ½ Σ s_n (k_nᵀa − t_n)² + λ/2 aᵀKa: (SK + λI) a = S t
    K = model.kernel_(X)
    np.testing.assert_allclose(
        np.linalg.solve(s[:, None] * K + 0.5 * np.eye(len(z)), s * z),
        model.dual_coef_,
        rtol=1e-9,
        atol=1e-12,
    )
    assert model.dual_coef_[4] == 0.0


def test_weighted_kernel_ridge_with_several_targets_equals_scikit_learn():
    from sklearn.kernel_ridge import KernelRidge as SklearnKernelRidge

    X, _, z = data(3, n=40)
    T = np.column_stack([z, np.sin(z)])
    s = np.random.default_rng(4).exponential(size=len(z))
    model = KernelRidge(lam=0.3, kernel="rbf", gamma=0.5).fit(X, T, sample_weight=s)
    theirs = SklearnKernelRidge(alpha=0.3, kernel="rbf", gamma=0.5).fit(
        X, T, sample_weight=s
    )
    assert model.dual_coef_.shape == T.shape
    np.testing.assert_allclose(
        model.dual_coef_, theirs.dual_coef_, rtol=1e-9, atol=1e-12
    )


def test_integer_weights_equal_repeated_samples_and_zero_weights_dropped_ones():
    X, _, z = data(4, n=30)
    counts = np.random.default_rng(5).integers(0, 4, size=len(z))
    counts[0] = 0
    weighted = KernelRidge(lam=0.3, kernel="rbf", gamma=0.3).fit(
        X, z, sample_weight=counts
    )
    repeated = KernelRidge(lam=0.3, kernel="rbf", gamma=0.3).fit(
        np.repeat(X, counts, axis=0), np.repeat(z, counts)
    )
    X_test = data(6, n=20)[0]
    np.testing.assert_allclose(
        weighted.predict(X_test), repeated.predict(X_test), rtol=1e-8, atol=1e-10
    )


@pytest.mark.parametrize(
    "weights", [np.ones((30, 2)), -np.ones(30), np.zeros(30), np.ones(29)]
)
def test_bad_sample_weight_is_refused(weights):
    X, _, z = data(4, n=30)
    with pytest.raises(ValueError, match="sample_weight"):
        KernelRidge().fit(X, z, sample_weight=weights)


def test_a_single_sample_weight_weighs_every_sample_as_in_scikit_learn():
    from sklearn.kernel_ridge import KernelRidge as SklearnKernelRidge

    X, _, z = data(4, n=30)
    X_test = data(5, n=10)[0]
    ours = KernelRidge(lam=0.6, kernel="rbf", gamma=0.3).fit(X, z, sample_weight=3.0)
    theirs = SklearnKernelRidge(alpha=0.6, kernel="rbf", gamma=0.3)
    theirs.fit(X, z, sample_weight=3.0)
    np.testing.assert_allclose(ours.predict(X_test), theirs.predict(X_test), rtol=1e-10)
    # weight c on every squared error is penalty λ/c
    lighter = KernelRidge(lam=0.2, kernel="rbf", gamma=0.3).fit(X, z)
    np.testing.assert_allclose(
        ours.predict(X_test), lighter.predict(X_test), rtol=1e-10
    )
    for bad in (-1.0, 0.0, True):
        with pytest.raises(ValueError, match="sample_weight"):
            KernelRidge().fit(X, z, sample_weight=bad)


@pytest.mark.parametrize("make", [KernelRidge, SVC])
def test_sample_weight_of_the_wrong_length_is_named_as_weights(make):
    X, y, _ = data(4, n=30)
    with pytest.raises(ValueError, match="29 rows .* give one weight per row of X"):
        make().fit(X, y > 0, sample_weight=np.ones(29))


# -- KernelPCA.inverse_transform -------------------------------------------------------
@pytest.mark.parametrize(
    "kernel,params",
    [
        ("rbf", {"gamma": 0.3}),
        ("rbf", {}),
        ("poly", {"gamma": 0.2, "degree": 2}),
        ("linear", {}),
    ],
)
@pytest.mark.parametrize("n_components", [3, None])
def test_inverse_transform_equals_scikit_learn(kernel, params, n_components):
    from sklearn.decomposition import KernelPCA as SklearnKernelPCA

    X, _, _ = data(7, n=60, d=5)
    X_new = data(8, n=15, d=5)[0]
    args = dict(
        n_components=n_components,
        kernel=kernel,
        fit_inverse_transform=True,
        alpha=0.1,
        eigen_solver="dense",
        **params,
    )
    model = KernelPCA(**args).fit(X)
    theirs = SklearnKernelPCA(**args).fit(X)
    # projections differ at most in the sign of each component; pre-images do not
    np.testing.assert_allclose(
        model.inverse_transform(model.transform(X_new)),
        theirs.inverse_transform(theirs.transform(X_new)),
        rtol=1e-8,
        atol=1e-10,
    )


def test_inverse_transform_is_kernel_ridge_from_projections_to_inputs():
    X, _, _ = data(9, n=50, d=3)
    model = KernelPCA(
        n_components=2, kernel="rbf", gamma=0.5, fit_inverse_transform=True, alpha=0.01
    ).fit(X)
    Y = model.fit_transform(X)
    np.testing.assert_allclose(model.X_transformed_fit_, Y)
    ridge = KernelRidge(lam=0.01, kernel=RBF(0.5)).fit(Y, X)
    Y_new = Y[:7] + 0.1
    np.testing.assert_allclose(
        model.inverse_transform(Y_new), ridge.predict(Y_new), rtol=1e-10, atol=1e-12
    )
    # with every component and a tiny ridge the map interpolates: training points
    # come back to themselves
    full = KernelPCA(
        kernel="rbf", gamma=0.5, fit_inverse_transform=True, alpha=1e-10
    ).fit(X)
    np.testing.assert_allclose(full.inverse_transform(full.transform(X)), X, atol=1e-5)


def test_inverse_transform_refusals():
    X, _, _ = data(9, n=30, d=3)
    with pytest.raises(NotFittedError, match="fit_inverse_transform=True"):
        KernelPCA(n_components=2).fit(X).inverse_transform(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="precomputed"):
        KernelPCA(kernel="precomputed", fit_inverse_transform=True).fit(X @ X.T)
    with pytest.raises(TypeError, match="toarray"):
        KernelPCA(fit_inverse_transform=True).fit(sp.csr_matrix(X))
    with pytest.raises(ValueError, match="alpha"):
        KernelPCA(fit_inverse_transform=True, alpha=-1.0).fit(X)
    model = KernelPCA(n_components=2, fit_inverse_transform=True).fit(X)
    with pytest.raises(ValueError, match="one column per component"):
        model.inverse_transform(np.zeros((1, 3)))


# -- predict_log_proba -----------------------------------------------------------------
def classifiers():
    return [
        (
            "GPC",
            lambda: GaussianProcessClassifier(kernel=1.0 * Linear(), optimizer=None),
        ),
        ("Platt", lambda: PlattCalibrated(SVC(kernel="linear"), cv=3, random_state=0)),
        ("RVC", lambda: RVC(kernel="linear")),
        ("RVC-ovr", lambda: RVC(kernel="linear", multi_class="ovr")),
    ]


@pytest.mark.parametrize("name,make", classifiers(), ids=[c[0] for c in classifiers()])
def test_predict_log_proba_is_the_log_of_predict_proba(name, make):
    X, y, _ = data(10, n=60, d=2)
    X_test = data(11, n=30, d=2)[0]
    for labels in (y > 0, y):
        model = make().fit(X, labels)
        np.testing.assert_allclose(
            np.exp(model.predict_log_proba(X_test)),
            model.predict_proba(X_test),
            rtol=1e-12,
            atol=1e-15,
        )


def test_platt_log_probability_stays_finite_where_a_probability_rounds_to_zero():
    X, y, _ = data(10, n=60, d=2)
    model = PlattCalibrated(SVC(kernel="linear"), cv=3, random_state=0).fit(X, y > 0)
    far = np.array([[400.0, 200.0], [-400.0, -200.0]])
    assert np.any(model.predict_proba(far) == 0.0)  # its log would be −inf
    log_P = model.predict_log_proba(far)
    A, B = model.sigmoids_[0]
    z = A * model.estimators_[0].decision_function(far) + B
    # log σ(−|z|) = −|z| − log(1 + e^−|z|) = −|z| to double precision when |z| ≫ 1
    np.testing.assert_allclose(log_P.min(axis=1), -np.abs(z), rtol=1e-14)
    assert np.all(np.isfinite(log_P)) and np.all(log_P.min(axis=1) < -1000)


def test_probit_log_probability_is_finite_where_the_probability_underflows():
    from kernelref.gp_classify import probit_log_probability, probit_probability

    mean = np.array([-800.0, -40.0, 0.0, 40.0, 800.0])
    variance = np.array([0.0, 1.0, 2.0, 1.0, 0.0])
    kappa = 1.0 / np.sqrt(1.0 + np.pi * variance / 8.0)
    assert probit_probability(mean, variance)[0] == 0.0
    z = kappa * mean
    # log σ(z) in the two forms that cannot overflow: z − log(1 + eᶻ), −log(1 + e⁻ᶻ)
    exact = np.where(
        z < 0,
        z - np.log1p(np.exp(np.minimum(z, 0))),
        -np.log1p(np.exp(-np.maximum(z, 0))),
    )
    np.testing.assert_allclose(
        probit_log_probability(mean, variance), exact, rtol=1e-15
    )
    assert exact[0] == -800.0


def test_moderated_log_softmax_keeps_the_log_of_an_underflowing_probability():
    from scipy.special import log_softmax

    from kernelref.rvm.softmax import moderated_log_softmax, moderated_softmax

    rng = np.random.default_rng(3)
    # Without variance the moderated softmax is the softmax itself: exp(−2000)
    # underflows, its log must not (scipy's log_softmax is the oracle).
    mean = np.array([[0.0, 2000.0, 1.0], [-900.0, 0.0, 900.0]])
    exact = moderated_log_softmax(mean, np.zeros((2, 3, 3)))
    np.testing.assert_allclose(exact, log_softmax(mean, axis=1), rtol=1e-15)
    assert (
        exact[0, 0] == -2000.0
        and moderated_softmax(mean, np.zeros((2, 3, 3)))[0, 0] == 0
    )
    # With variance: the formula (rvc-softmax-predictive) in plain arithmetic.
    mean = rng.normal(size=(4, 3))
    B = rng.normal(size=(4, 3, 3))
    covariance = B @ np.swapaxes(B, 1, 2)
    v = np.einsum("nkk->nk", covariance)
    s2 = v[:, :, None] + v[:, None, :] - 2 * covariance
    kappa = 1 / np.sqrt(1 + np.pi * s2 / 8)
    p = 1 / np.exp(-kappa * (mean[:, :, None] - mean[:, None, :])).sum(axis=2)
    np.testing.assert_allclose(
        moderated_log_softmax(mean, covariance),
        np.log(p / p.sum(axis=1, keepdims=True)),
        rtol=1e-13,
    )


def test_rvc_log_probability_is_the_log_sigmoid_of_the_moderated_activation():
    X, y, _ = data(12, n=40, d=2)
    model = RVC(kernel="rbf", gamma=0.5).fit(X, y > 0)
    X_test = data(13, n=10, d=2)[0]
    phi = model._basis(X_test)
    mean = phi @ model.mu_
    variance = np.einsum("nm,mk,nk->n", phi, model.Sigma_, phi)
    z = mean / np.sqrt(1.0 + np.pi * variance / 8.0)
    expected = np.column_stack([-np.log1p(np.exp(z)), -np.log1p(np.exp(-z))])
    np.testing.assert_allclose(model.predict_log_proba(X_test), expected, rtol=1e-12)


def test_gpc_log_probability_is_the_log_sigmoid_of_the_moderated_mean():
    X, y, _ = data(12, n=40, d=2)
    model = GaussianProcessClassifier(kernel=1.0 * RBF(0.5), optimizer=None).fit(
        X, y > 0
    )
    X_test = data(13, n=10, d=2)[0]
    mean, variance = model._binary_latent(X_test)
    z = mean / np.sqrt(1.0 + np.pi * variance / 8.0)
    expected = np.column_stack([-np.log1p(np.exp(z)), -np.log1p(np.exp(-z))])
    np.testing.assert_allclose(model.predict_log_proba(X_test), expected, rtol=1e-13)
    np.testing.assert_allclose(
        model.predict_log_proba(X_test, method="quadrature"),
        np.log(model.predict_proba(X_test, method="quadrature")),
        rtol=1e-13,
    )


def test_softmax_gpc_log_probability_is_the_log_of_its_probability():
    from kernelref.gp_softmax import SoftmaxGaussianProcessClassifier

    X, y, _ = data(14, n=45, d=2)
    model = SoftmaxGaussianProcessClassifier(kernel=1.0 * RBF(0.5), optimizer=None)
    model.fit(X, y)
    X_test = data(15, n=10, d=2)[0]
    for method in ("monte_carlo", "moderated"):
        np.testing.assert_allclose(
            np.exp(model.predict_log_proba(X_test, method=method)),
            model.predict_proba(X_test, method=method),
            rtol=1e-12,
        )


def test_inverse_transform_is_refused_for_a_kernel_on_objects():
    from kernelref.structured import SpectrumKernel

    with pytest.raises(ValueError, match="kernel on objects"):
        KernelPCA(kernel=SpectrumKernel(2), fit_inverse_transform=True).fit(
            ["abab", "baba", "aabb"]
        )
