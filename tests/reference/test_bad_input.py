"""A corpus of bad inputs: each gets a clear error of the right type naming the
argument (or file), or the right answer; none hangs or returns NaN silently."""

import warnings

import numpy as np
import pytest
import scipy.sparse

from kernelref.exceptions import ConvergenceWarning, NonFiniteError, NotFittedError
from kernelref.gp import GaussianProcessClassifier, GaussianProcessRegressor
from kernelref.kernels import ARD, RBF, Kernel, Polynomial, Sigmoid, squared_distances
from kernelref.kernels.base import check_kernel_param
from kernelref.kpca import KernelPCA
from kernelref.laplace import damped_newton
from kernelref.nadaraya_watson import NadarayaWatson
from kernelref.ridge import KernelRidge
from kernelref.rvm import RVC, RVR
from kernelref.svm import SVC, SVR, NuSVR, OneVsRestClassifier, problems
from kernelref.svm.platt import PlattCalibrated
from kernelref.svm.solver import solve

rng = np.random.default_rng(0)
X = rng.normal(size=(30, 2))
y_class = (X[:, 0] + 0.3 * rng.normal(size=30) > 0).astype(int)
y_real = np.sin(X[:, 0]) + 0.1 * rng.normal(size=30)


# -- the hangs: SMO used to loop for ever on NaN --------------------------------------
@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_huge_value_in_X_stops_smo_with_the_row(kernel):
    X_bad = X.copy()
    X_bad[3, 0] = 1e300
    with pytest.raises(NonFiniteError, match=r"non-finite value.*row") as info:
        SVC(kernel=kernel, gamma=0.5).fit(X_bad, y_class)
    assert isinstance(info.value, ValueError)


def test_gamma_scale_with_overflowing_variance_is_refused():
    X_bad = X.copy()
    X_bad[3, 0] = 1e300
    with pytest.raises(ValueError, match=r"gamma='scale'.*overflows"):
        SVC(gamma="scale").fit(X_bad, y_class)


@pytest.mark.parametrize("gamma", [np.array([0.5, 2.0]), [0.5], True])
@pytest.mark.parametrize("make", [SVR, KernelRidge, RVR])
def test_gamma_that_is_not_one_number_is_refused_by_name(make, gamma):
    """An array or list failed on 'truth value of an array is ambiguous' or
    '<=' between list and int; True was taken as gamma = 1."""
    with pytest.raises(ValueError, match=r"gamma must be a positive number.*ARD"):
        make(kernel="rbf", gamma=gamma).fit(X, y_real)


def test_fractional_degree_is_refused_before_fitting():
    with pytest.raises(
        ValueError, match=r"Polynomial: degree must be an integer >= 1; got 2.5"
    ):
        SVC(kernel="poly", degree=2.5).fit(X, y_class)


def test_non_symmetric_precomputed_gram_is_refused():
    K = X @ X.T
    K[0, 5] += 1.0
    with pytest.raises(ValueError, match=r"symmetric.*X\[(0, 5|5, 0)\]"):
        SVC(kernel="precomputed").fit(K, y_class)


def test_smo_stops_on_nan_in_the_gram_matrix():
    K = np.exp(-squared_distances(X))
    K[4, :] = K[:, 4] = np.nan  # past validation, straight to the solver
    qp = problems.c_svc(np.where(y_class == 1, 1.0, -1.0), np.ones(30))
    with pytest.raises(NonFiniteError, match=r"gradient is not finite.*samples"):
        solve(qp, problems.KernelRows("precomputed", K))


def test_non_symmetric_user_kernel_is_refused_by_the_svm():
    class Skewed(Kernel):
        def __call__(self, A, B=None):
            B = A if B is None else B
            return np.exp(-squared_distances(A, B)) + 0.1 * np.arange(len(A))[:, None]

        def diag(self, A):
            return np.ones(len(A)) + 0.1 * np.arange(len(A))

    with pytest.raises(ValueError, match="symmetric"):
        SVC(kernel=Skewed()).fit(X, y_class)


# -- kernel hyperparameters, wherever they are set -------------------------------------
@pytest.mark.parametrize(
    "make,name",
    [
        (lambda: RBF(gamma=-1.0), "gamma"),
        (lambda: RBF(gamma=np.nan), "gamma"),
        (lambda: Polynomial(coef0=np.nan), "coef0"),
        (lambda: Polynomial(degree=-1), "degree"),
        (lambda: Polynomial(degree=0.5), "degree"),
        (lambda: Sigmoid(coef0=np.inf), "coef0"),
        (lambda: ARD(gamma=[1.0, -2.0]), "gamma"),
        (lambda: RBF().set_params(gamma=0.0), "gamma"),
        (lambda: (1.0 * RBF()).set_params(kernel__gamma=-3.0), "gamma"),
    ],
)
def test_bad_kernel_hyperparameter_is_refused_where_set(make, name):
    with pytest.raises(ValueError, match=rf"{name} must be"):
        make()


def test_theta_setter_refuses_overflow():
    kernel = 1.0 * RBF(1.0)
    with pytest.raises(ValueError, match="gamma must be finite and > 0"):
        kernel.theta = np.array([0.0, 1e4])  # exp(1e4) = inf


def test_check_kernel_param_is_reusable():
    assert check_kernel_param("Matern", "nu", 1.5, "positive") == 1.5
    with pytest.raises(ValueError, match="Matern: nu must be finite and > 0; got -1"):
        check_kernel_param("Matern", "nu", -1, "positive")
    with pytest.raises(TypeError, match="length_scale must be a number"):
        check_kernel_param("Matern", "length_scale", "wide", "positive")


@pytest.mark.parametrize(
    "estimator",
    [
        KernelRidge(),
        GaussianProcessRegressor(optimizer=None),
        SVR(),
        RVR(),
        KernelPCA(),
    ],
)
def test_user_kernel_of_wrong_shape_is_refused_at_fit(estimator):
    class Truncated(Kernel):
        def __call__(self, A, B=None):
            B = A if B is None else B
            return np.exp(-squared_distances(A, B))[:, :-1]

        def diag(self, A):
            return np.ones(len(A))

    estimator.set_params(kernel=Truncated())
    args = (X,) if isinstance(estimator, KernelPCA) else (X, y_real)
    with pytest.raises(
        ValueError,
        match=r"Truncated\(\) returned .*of shape \(30, 29\); "
        r"expected \(30, 30\)",
    ):
        estimator.fit(*args)


def test_overflowing_kernel_stops_the_rvm_and_the_gp_classifier():
    X_big = X * 1e200
    with pytest.raises(NonFiniteError, match="Polynomial"):
        RVR(kernel="poly", gamma=1.0).fit(X_big, y_real)
    with pytest.raises(NonFiniteError, match="Polynomial"):
        GaussianProcessClassifier(Polynomial(gamma=1.0), optimizer=None).fit(
            X_big, y_class
        )


def test_newton_stops_on_a_nan_objective():
    with pytest.raises(NonFiniteError, match="non-finite"):
        damped_newton(lambda x: float("nan"), lambda x: x, np.zeros(2))


# -- exact distances and the GP optimiser ---------------------------------------------
def test_shifting_X_leaves_squared_distances_to_rounding():
    A = rng.normal(size=(20, 3))
    D, D_far = squared_distances(A), squared_distances(A + 1958.0)
    exact = ((A[:, None, :] - A[None, :, :]) ** 2).sum(axis=-1)
    np.testing.assert_allclose(D, exact, rtol=1e-12, atol=1e-13)
    # rounding of A + 1958 itself moves each coordinate by up to 1958·2⁻⁵³ ≈ 2e-13
    np.testing.assert_allclose(D_far, exact, rtol=1e-9, atol=1e-11)


def test_gp_on_years_learns_the_same_as_on_centred_years():
    years = (1958 + np.arange(0, 44 * 12, 4) / 12.0)[:, None]
    t = 0.01 * (years[:, 0] - 1958) ** 2 / 20 + np.sin(years[:, 0] / 3.0)
    start = 1.0 * RBF(0.01)
    # noise 1e-6, not the default 1e-10: at 1e-10 K + noise·I has condition ~6e13
    # at the maximum, the evidence itself is rounding there (2e-3 nats apart at
    # one θ between years and centred years) and L-BFGS-B ends ABNORMAL on both.
    # Here both fits converge, so a difference would be the distances' doing.
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        raw = GaussianProcessRegressor(start, noise=1e-6).fit(years, t)
        centred = GaussianProcessRegressor(start, noise=1e-6).fit(years - 1980.0, t)
    assert not np.allclose(raw.kernel_.theta, start.theta)  # it left its start
    np.testing.assert_allclose(raw.kernel_.theta, centred.kernel_.theta, atol=1e-6)


# -- data ownership ------------------------------------------------------------------
@pytest.mark.parametrize(
    "estimator",
    [
        KernelRidge(kernel="rbf", gamma=0.5),
        NadarayaWatson(gamma=0.5),
        GaussianProcessRegressor(optimizer=None),
        KernelPCA(n_components=2, gamma=0.5),
        GaussianProcessClassifier(optimizer=None),
    ],
)
def test_fitted_model_owns_its_data(estimator):
    X_own = X.copy()
    target = (
        y_class if isinstance(estimator, GaussianProcessClassifier) else y_real.copy()
    )
    estimator.fit(X_own, target)
    method = (
        estimator.transform
        if isinstance(estimator, KernelPCA)
        else (
            estimator.decision_function
            if hasattr(estimator, "decision_function")
            else estimator.predict
        )
    )
    before = method(X[:5])
    X_own += 10.0
    if target is not y_class:
        target += 10.0
    np.testing.assert_array_equal(method(X[:5]), before)


# -- scikit-learn conformance ----------------------------------------------------------
@pytest.mark.parametrize(
    "estimator",
    [
        SVC(),
        RVC(),
        GaussianProcessClassifier(optimizer=None),
        OneVsRestClassifier(SVC()),
        PlattCalibrated(SVC(), cv=3),
    ],
)
def test_classifiers_refuse_continuous_targets(estimator):
    with pytest.raises(
        ValueError, match=r"y holds continuous values.*Unknown label type"
    ):
        estimator.fit(X, y_real)


def test_one_vs_rest_decision_is_one_column_for_two_classes():
    model = OneVsRestClassifier(SVC(kernel="linear")).fit(X, y_class)
    decision = model.decision_function(X)
    assert decision.shape == (30,)
    np.testing.assert_array_equal(
        model.predict(X), model.classes_[(decision > 0).astype(int)]
    )


def test_platt_ovr_scores_agree_with_predict():
    labels = np.digitize(X[:, 0], [-0.5, 0.5])
    model = PlattCalibrated(SVC(), cv=3, random_state=0, decision_function_shape="ovr")
    model.fit(X, labels)
    np.testing.assert_array_equal(
        model.decision_function(X).argmax(axis=1),
        np.searchsorted(model.classes_, model.predict(X)),
    )
    with pytest.raises(ValueError, match="decision_function_shape must be"):
        PlattCalibrated(SVC(), decision_function_shape="both").fit(X, labels)


@pytest.mark.parametrize("estimator", [SVR(C=np.inf), NuSVR(C=np.inf)])
def test_regression_svm_refuses_infinite_C_consistently(estimator):
    with pytest.raises(ValueError, match=r"C must be in \(0, inf\); got inf"):
        estimator.fit(X, y_real)


def test_not_fitted_error_is_scikit_learns_kind():
    assert issubclass(NotFittedError, ValueError) and issubclass(
        NotFittedError, AttributeError
    )
    with pytest.raises(NotFittedError, match="not fitted yet"):
        SVC().predict(X)


def test_messages_print_plain_numbers():
    with pytest.raises(ValueError) as info:
        SVC(C=np.float64(-1.0)).fit(X, y_class)
    assert "np.float64" not in str(info.value) and "-1.0" in str(info.value)
    with pytest.raises(ValueError) as info:
        SVC().fit(X, np.ones(30, dtype=np.int64))
    assert "np.int64" not in str(info.value) and "(1)" in str(info.value)


def test_complex_X_is_refused():
    with pytest.raises(ValueError, match="X is complex.*Complex data not supported"):
        KernelRidge().fit(X + 1j, y_real)


@pytest.mark.parametrize("estimator", [NadarayaWatson(), RVR()])
def test_sparse_X_is_refused_with_a_message_that_says_so(estimator):
    with pytest.raises(TypeError, match="X is a scipy.sparse matrix.*sparse"):
        estimator.fit(scipy.sparse.csr_array(X), y_real)


def test_refused_refit_leaves_the_earlier_fit_intact():
    model = GaussianProcessClassifier(optimizer=None).fit(X, y_class)
    before = model.predict_proba(X[:5])
    with pytest.raises(ValueError, match="continuous"):
        model.fit(X, y_real)
    np.testing.assert_array_equal(model.predict_proba(X[:5]), before)
    svc = SVC(kernel="linear").fit(X, y_class)
    support = svc.support_.copy()
    with pytest.raises(ValueError, match="not separable"):
        svc.set_params(C=np.inf).fit(X, y_class)  # overlapping classes
    np.testing.assert_array_equal(svc.support_, support)
    assert svc.kernel_ is not None


def test_kernel_pca_declares_transformer_tags():
    pytest.importorskip("sklearn")
    assert KernelPCA().__sklearn_tags__().transformer_tags is not None


def test_kernel_on_strings_refuses_tuples_after_fitting_on_strings():
    from kernelref.structured.strings import SpectrumKernel

    words = ["abca", "bcab", "aaab", "bbba", "abab", "baba"]
    model = SVC(kernel=SpectrumKernel(2)).fit(words, [0, 1, 0, 1, 0, 1])
    with pytest.raises(
        TypeError, match=r"type \['tuple'\] with samples of type \['str'\]"
    ):
        model.predict([tuple("abca")])


def test_rvm_reestimation_stops_on_an_overflowing_design_matrix():
    from kernelref.rvm.reestimate import reestimate

    Phi = rng.normal(size=(20, 5)) * 1e160  # finite, but ΦᵀΦ overflows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(
            NonFiniteError,
            match="RVM reestimate stopped at iteration 1: log_evidence is not finite",
        ):
            reestimate(Phi, rng.normal(size=20), np.ones(5), 1.0)


def test_ml2_that_cannot_leave_its_start_says_so():
    class Fragile(RBF):
        """Positive definite at γ = 1 only: every trial step fails to factorise."""

        def __call__(self, A, B=None):
            K = super().__call__(A, B)
            return K - 5.0 * np.eye(len(K)) if B is None and self.gamma != 1.0 else K

    grid = np.linspace(0.0, 1.0, 15)[:, None]
    with pytest.warns(ConvergenceWarning, match=r"did not move from its start \[0.0\]"):
        GaussianProcessRegressor(Fragile(1.0), noise=1e-2).fit(
            grid, np.sin(3 * grid[:, 0])
        )


@pytest.mark.parametrize("sparse", [False, True])
def test_nan_given_to_predict_is_not_called_a_fit(sparse):
    """The message for NaN in X said 'before fitting' when predicting too."""
    X = np.random.default_rng(0).normal(size=(20, 2))
    model = KernelRidge(gamma=0.5).fit(X, X[:, 0])
    X_new = X[:3].copy()
    X_new[1, 0] = np.nan
    with pytest.raises(ValueError, match="at row 1") as error:
        model.predict(scipy.sparse.csr_matrix(X_new) if sparse else X_new)
    assert "before fitting" not in str(error.value)
    assert "remove or impute those entries" in str(error.value)


def test_a_data_frame_with_text_columns_is_refused_naming_them():
    """A pandas frame with a text column was refused as 'could not convert
    string to float: 'r'', without saying which column holds it."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {
            "a": [0.5, 1.5, 2.0, 3.0],
            "colour": ["r", "g", "b", "r"],
            "n": pd.array([1, 2, 3, 4], dtype="Int64"),
            "kind": pd.Categorical(["x", "y", "x", "y"]),
        }
    )
    with pytest.raises(TypeError, match=r"The columns \['colour', 'kind'\] are not"):
        SVC().fit(frame, [0, 1, 0, 1])
    with pytest.raises(TypeError, match=r"The columns \['a'\] have missing values"):
        SVC().fit(
            pd.DataFrame(
                {
                    "a": pd.array([0.5, None, 2.0, 3.0], dtype="Float64"),
                    "n": pd.array([1, 2, 3, 4], dtype="Int64"),
                }
            ),
            [0, 1, 0, 1],
        )
