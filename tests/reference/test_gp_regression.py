"""Gaussian-process regression: scikit-learn parity, the evidence gradient
against finite differences, ML-II, ARD, GP = kernel ridge, and clear errors."""

import numpy as np
import pytest
from scipy.optimize import approx_fprime
from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessRegressor as SklearnGPR
from sklearn.gaussian_process.kernels import RBF as SklearnRBF
from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

from kernelref.gp import (
    GaussianProcessRegressor,
    NotPositiveDefiniteError,
    sample_prior,
)
from kernelref.kernels import ARD, RBF, ExponentialQuadratic, Kernel, Sigmoid, White
from kernelref.ridge import KernelRidge


def sinusoid(n=40, seed=0, noise_sd=0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    return X, np.sin(2 * X[:, 0]) + noise_sd * rng.normal(size=n)


def five_d(n=60, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.column_stack([np.sin(X[:, 0]) + X[:, 1] ** 2 / 3, np.cos(X[:, 2])])
    return X, y + 0.05 * rng.normal(size=y.shape)


def length_scale(gamma):
    """scikit-learn's RBF is exp(−‖x − x′‖²/(2ℓ²)): ℓ = 1/√(2γ)."""
    return 1.0 / np.sqrt(2.0 * np.asarray(gamma, dtype=float))


# (ours, scikit-learn's, d log(their θ)/d log(our θ) for each entry of θ)
# log γ = −log 2 − 2 log ℓ, so ∂/∂log γ = −½ ∂/∂log ℓ.
PAIRS = {
    "scaled-rbf": (
        2.0 * RBF(0.3),
        ConstantKernel(2.0) * SklearnRBF(length_scale(0.3)),
        np.array([1.0, -0.5]),
    ),
    "scaled-ard": (
        1.5 * ARD(np.array([0.2, 1.0, 0.05])),
        ConstantKernel(1.5) * SklearnRBF(length_scale([0.2, 1.0, 0.05])),
        np.array([1.0, -0.5, -0.5, -0.5]),
    ),
    "rbf-plus-white": (
        2.0 * RBF(0.3) + White(0.05),
        ConstantKernel(2.0) * SklearnRBF(length_scale(0.3)) + WhiteKernel(0.05),
        np.array([1.0, -0.5, 1.0]),
    ),
}


def data_for(name):
    return five_d() if name == "scaled-ard" else sinusoid()


@pytest.mark.parametrize("normalize_y", [False, True])
@pytest.mark.parametrize("name", PAIRS)
def test_evidence_and_gradient_equal_scikit_learn(name, normalize_y):
    ours_kernel, their_kernel, chain = PAIRS[name]
    X, y = data_for(name)
    ours = GaussianProcessRegressor(
        ours_kernel, noise=0.01, optimizer=None, normalize_y=normalize_y
    ).fit(X, y)
    theirs = SklearnGPR(
        their_kernel, alpha=0.01, optimizer=None, normalize_y=normalize_y
    ).fit(X, y)
    assert ours.log_marginal_likelihood_value_ == pytest.approx(
        theirs.log_marginal_likelihood_value_, rel=1e-10
    )
    # also away from the fitted point: shift every log-hyperparameter
    shift = np.linspace(-0.4, 0.6, len(chain))
    lml, grad = ours.log_marginal_likelihood(
        ours.kernel_.theta + shift, eval_gradient=True
    )
    their_lml, their_grad = theirs.log_marginal_likelihood(
        theirs.kernel_.theta + chain * shift, eval_gradient=True
    )
    assert lml == pytest.approx(their_lml, rel=1e-8)
    np.testing.assert_allclose(
        grad, chain * their_grad, rtol=1e-8, atol=1e-8 * np.abs(their_grad).max()
    )


@pytest.mark.parametrize("normalize_y", [False, True])
@pytest.mark.parametrize("name", PAIRS)
def test_predictions_equal_scikit_learn(name, normalize_y):
    ours_kernel, their_kernel, _ = PAIRS[name]
    X, y = data_for(name)
    ours = GaussianProcessRegressor(
        ours_kernel, noise=0.01, optimizer=None, normalize_y=normalize_y
    ).fit(X, y)
    theirs = SklearnGPR(
        their_kernel, alpha=0.01, optimizer=None, normalize_y=normalize_y
    ).fit(X, y)
    X_test = np.concatenate([X[:7] + 0.1, X[-3:]])
    np.testing.assert_allclose(
        ours.predict(X_test), theirs.predict(X_test), rtol=1e-8, atol=1e-8
    )
    for option in ({"return_std": True}, {"return_cov": True}):
        for a, b in zip(
            ours.predict(X_test, **option), theirs.predict(X_test, **option)
        ):
            np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize(
    "kernel",
    [
        2.0 * RBF(0.3),
        1.5 * ARD(np.array([0.2, 1.0, 0.05])),
        ExponentialQuadratic(1.0, 2.0, 0.5, 0.2),
        RBF(0.5) * ExponentialQuadratic(1.0, 0.5, 0.1, 0.0) + White(0.1),
    ],
    ids=["scaled-rbf", "scaled-ard", "theta0-theta3", "product-plus-white"],
)
def test_evidence_gradient_matches_finite_differences(kernel):
    X, y = five_d()
    model = GaussianProcessRegressor(kernel, noise=0.01, optimizer=None).fit(X, y[:, 0])
    theta = model.kernel_.theta
    _, grad = model.log_marginal_likelihood(theta, eval_gradient=True)
    numeric = approx_fprime(theta, model.log_marginal_likelihood, 1e-7)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-5 * np.abs(grad).max())


def test_evidence_gradient_never_builds_the_gradient_array(monkeypatch):
    def refuse(self, X):
        raise AssertionError("the (p, n, n) gradient array was built")

    monkeypatch.setattr(Kernel, "gradient", refuse)
    X, y = five_d()
    model = GaussianProcessRegressor(
        1.5 * ARD(np.ones(3)) + White(0.1), noise=0.01
    ).fit(X, y)
    _, grad = model.log_marginal_likelihood(eval_gradient=True)
    assert grad.shape == (5,)


@pytest.mark.parametrize("name", PAIRS)
def test_optimised_evidence_is_at_least_scikit_learns(name):
    ours_kernel, their_kernel, _ = PAIRS[name]
    X, y = data_for(name)
    ours = GaussianProcessRegressor(ours_kernel, noise=0.01, n_restarts=0).fit(X, y)
    theirs = SklearnGPR(their_kernel, alpha=0.01, n_restarts_optimizer=0).fit(X, y)
    initial = GaussianProcessRegressor(ours_kernel, noise=0.01, optimizer=None).fit(
        X, y
    )
    assert ours.log_marginal_likelihood_value_ > initial.log_marginal_likelihood_value_
    # both stop at L-BFGS-B's tolerance (relative decrease 2.2e-9)
    assert ours.log_marginal_likelihood_value_ >= (
        theirs.log_marginal_likelihood_value_
        - 1e-7 * abs(theirs.log_marginal_likelihood_value_)
    )
    _, grad = ours.log_marginal_likelihood(eval_gradient=True)
    assert np.abs(grad).max() < 1e-3 * max(
        1.0, abs(ours.log_marginal_likelihood_value_)
    )


def test_restarts_are_reproducible_and_never_lower_the_evidence():
    X, y = sinusoid(30)
    kernel = 1.0 * RBF(50.0, gamma_bounds=(1e-3, 1e3)) + White(
        1.0, noise_level_bounds=(1e-4, 10)
    )
    single = GaussianProcessRegressor(kernel).fit(X, y)
    runs = [
        GaussianProcessRegressor(kernel, n_restarts=3, random_state=7).fit(X, y)
        for _ in range(2)
    ]
    assert (
        runs[0].log_marginal_likelihood_value_
        >= single.log_marginal_likelihood_value_ - 1e-9
    )
    np.testing.assert_array_equal(runs[0].kernel_.theta, runs[1].kernel_.theta)
    assert kernel.theta == pytest.approx(np.log([1.0, 50.0, 1.0]))  # fit left it alone


def test_zero_predictive_variance_at_noise_free_training_points():
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, size=(12, 1))
    y = np.sin(X[:, 0])
    model = GaussianProcessRegressor(RBF(0.5), noise=1e-10, optimizer=None).fit(X, y)
    mean, std = model.predict(X, return_std=True)
    np.testing.assert_allclose(mean, y, atol=1e-6)
    assert np.max(std**2) < 1e-8
    _, std_away = model.predict(X.max(axis=0, keepdims=True) + 1.5, return_std=True)
    assert std_away[0] > 0.5  # the variance is small only at the data


def test_gp_mean_equals_kernel_ridge_with_lambda_equal_to_noise():
    X, y = five_d()
    kernel = 1.5 * ARD(np.array([0.2, 1.0, 0.05]))
    gp = GaussianProcessRegressor(kernel, noise=0.3, optimizer=None).fit(X, y)
    ridge = KernelRidge(lam=0.3, kernel=kernel).fit(X, y)
    np.testing.assert_allclose(gp.alpha_, ridge.dual_coef_, rtol=1e-10, atol=1e-12)
    X_test = X[::5] + 0.2
    np.testing.assert_allclose(
        gp.predict(X_test), ridge.predict(X_test), rtol=1e-10, atol=1e-12
    )


def test_ard_switches_off_an_irrelevant_input():
    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, size=(80, 3))
    y = (
        np.sin(X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.05 * rng.normal(size=80)
    )  # x_2 is noise
    model = GaussianProcessRegressor(
        1.0 * ARD(np.ones(3)) + White(0.1), n_restarts=1, random_state=0
    ).fit(X, y)
    gamma = model.kernel_.k1.kernel.gamma
    assert gamma[2] < 1e-2 * min(gamma[0], gamma[1])


def test_white_kernel_learns_the_noise_variance():
    X, y = sinusoid(150, seed=5, noise_sd=0.2)
    model = GaussianProcessRegressor(1.0 * RBF(1.0) + White(1.0)).fit(X, y)
    assert 0.5 * 0.04 < model.kernel_.k2.noise_level < 2 * 0.04


def test_white_kernel_is_noise_on_the_training_set_only():
    X = np.arange(6.0).reshape(3, 2)
    k = White(0.3)
    np.testing.assert_array_equal(k(X), 0.3 * np.eye(3))
    np.testing.assert_array_equal(k(X, X), np.zeros((3, 3)))
    np.testing.assert_array_equal(k.diag(X), [0.3] * 3)
    W = np.arange(9.0).reshape(3, 3)
    np.testing.assert_allclose(k.gradient_dot(X, W), [np.vdot(W, k.gradient(X)[0])])


def test_std_and_cov_agree_and_samples_have_the_predictive_moments():
    X, y = sinusoid(20)
    model = GaussianProcessRegressor(2.0 * RBF(0.5), noise=0.01, optimizer=None).fit(
        X, y
    )
    X_test = np.linspace(-3, 3, 5)[:, None]
    mean, std = model.predict(X_test, return_std=True)
    _, cov = model.predict(X_test, return_cov=True)
    np.testing.assert_allclose(std, np.sqrt(np.diag(cov)), rtol=1e-10)
    draws = model.sample_y(X_test, n_samples=20000, random_state=1)
    assert draws.shape == (5, 20000)
    # each sample mean lies within 5 standard errors of the predictive mean
    assert np.all(np.abs(draws.mean(axis=1) - mean) < 5 * std / np.sqrt(20000))
    np.testing.assert_allclose(np.cov(draws), cov, atol=0.05 * cov.max())


def test_unfitted_model_predicts_and_samples_the_prior():
    X = np.linspace(0, 1, 4)[:, None]
    kernel = 2.0 * RBF(3.0)
    model = GaussianProcessRegressor(kernel)
    mean, cov = model.predict(X, return_cov=True)
    np.testing.assert_array_equal(mean, 0.0)
    np.testing.assert_allclose(cov, kernel(X))
    draws = sample_prior(kernel, X, n_samples=20000, random_state=2)
    np.testing.assert_allclose(np.cov(draws), kernel(X), atol=0.1)
    np.testing.assert_allclose(
        model.sample_y(X, 3, random_state=5), sample_prior(kernel, X, 3, random_state=5)
    )


def test_multi_output_targets_equal_scikit_learn():
    X, y = five_d()
    ours = GaussianProcessRegressor(
        2.0 * RBF(0.3), noise=0.01, optimizer=None, normalize_y=True
    ).fit(X, y)
    theirs = SklearnGPR(
        ConstantKernel(2.0) * SklearnRBF(length_scale(0.3)),
        alpha=0.01,
        optimizer=None,
        normalize_y=True,
    ).fit(X, y)
    assert ours.log_marginal_likelihood_value_ == pytest.approx(
        theirs.log_marginal_likelihood_value_, rel=1e-10
    )
    for a, b in zip(
        ours.predict(X[:5] + 0.1, return_std=True),
        theirs.predict(X[:5] + 0.1, return_std=True),
    ):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-8)
    assert ours.sample_y(X[:4], 3).shape == (4, 2, 3)


def test_default_kernel_is_a_scaled_rbf_and_clone_works():
    X, y = sinusoid(20)
    model = GaussianProcessRegressor(optimizer=None).fit(X, y)
    assert model.kernel_ == 1.0 * RBF(1.0)
    assert model.kernel is None
    copy = clone(GaussianProcessRegressor(2.0 * RBF(0.3), noise=0.5))
    assert copy.get_params()["kernel__kernel__gamma"] == 0.3


@pytest.mark.parametrize(
    "kwargs,data,match",
    [
        ({}, "nan-x", "X contains NaN"),
        ({}, "nan-y", "y contains NaN"),
        ({"noise": 0.0}, None, "noise must be a finite number > 0"),
        ({"noise": -1.0}, None, "noise must be a finite number > 0"),
        ({"kernel": RBF(1.0, gamma_bounds=(0.0, 10.0))}, None, "gamma_bounds must be"),
        ({"kernel": RBF(1.0, gamma_bounds=(-1.0, 10.0))}, None, "gamma_bounds must be"),
        ({"optimizer": "bfgs"}, None, "optimizer must be"),
        ({"n_restarts": -1}, None, "n_restarts must be"),
        ({"kernel": "rbf"}, None, "kernel must be a kernelref.kernels.Kernel"),
    ],
)
def test_bad_input_gets_a_clear_error(kwargs, data, match):
    X, y = sinusoid(10)
    if data == "nan-x":
        X[3, 0] = np.nan
    if data == "nan-y":
        y[2] = np.nan
    with pytest.raises((ValueError, TypeError), match=match):
        GaussianProcessRegressor(**kwargs).fit(X, y)


@pytest.mark.parametrize("optimizer", [None, "L-BFGS-B"])
def test_indefinite_kernel_error_suggests_adding_noise(optimizer):
    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(30, 2)), rng.normal(size=30)
    kernel = Sigmoid(gamma=1.0, coef0=-1.0)
    assert np.linalg.eigvalsh(kernel(X)).min() < -1e-2  # truly indefinite
    with pytest.raises(NotPositiveDefiniteError, match="increase noise"):
        GaussianProcessRegressor(kernel, optimizer=optimizer).fit(X, y)


def test_bad_calls_after_fitting_get_clear_errors():
    X, y = sinusoid(10)
    with pytest.raises(AttributeError, match="not fitted yet"):
        GaussianProcessRegressor().log_marginal_likelihood()
    model = GaussianProcessRegressor(optimizer=None).fit(X, y)
    with pytest.raises(ValueError, match="theta must be 2 finite"):
        model.log_marginal_likelihood(np.zeros(3))
    with pytest.raises(ValueError, match="not both"):
        model.predict(X, return_std=True, return_cov=True)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.ones((2, 2)))


def test_a_failed_refit_leaves_the_previous_fit_intact():
    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(30, 2)), rng.normal(size=30)
    model = GaussianProcessRegressor(RBF(0.5), noise=0.1, optimizer=None).fit(X, y)
    before = model.predict(X[:3])
    model.set_params(kernel=Sigmoid(gamma=1.0, coef0=-1.0), noise=1e-10)
    with pytest.raises(NotPositiveDefiniteError):
        model.fit(X, y)
    assert model.kernel_ == RBF(0.5)
    np.testing.assert_array_equal(model.predict(X[:3]), before)
