"""Gaussian-process classification by the Laplace approximation: identities,
finite differences, quadrature and scikit-learn parity."""

import numpy as np
import pytest
from scipy.integrate import dblquad, quad
from scipy.stats import multivariate_normal, norm
from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessClassifier as SklearnGPC
from sklearn.gaussian_process.kernels import RBF as SklearnRBF
from sklearn.gaussian_process.kernels import ConstantKernel
from sklearn.model_selection import GridSearchCV, cross_val_score

from kernelref.gp_classify import (
    GaussianProcessClassifier,
    laplace_covariance,
    laplace_mode,
    log_evidence_gradient,
    probit_probability,
    quadrature_probability,
)
from kernelref.kernels import ARD, RBF, Constant, Sigmoid
from kernelref.laplace import log_likelihood, sigmoid


def two_moons_ish(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] + 0.5 * X[:, 1] ** 2 - 0.5 + 0.4 * rng.normal(size=n) > 0).astype(int)
    return X, y


def overlapping_1d(n=30, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    y = np.where(np.sin(2 * X[:, 0]) + 0.5 * rng.normal(size=n) > 0, "yes", "no")
    return X, y


def length_scale(gamma):
    """Our RBF(γ) is scikit-learn's RBF(ℓ) with γ = 1/(2ℓ²)."""
    return 1.0 / np.sqrt(2.0 * np.asarray(gamma))


# (ours, scikit-learn's) at the same hyperparameters, for D input dimensions
KERNEL_PAIRS = [
    lambda D: (RBF(0.7), SklearnRBF(length_scale(0.7))),
    lambda D: (3.0 * RBF(0.4), ConstantKernel(3.0) * SklearnRBF(length_scale(0.4))),
    lambda D: (
        2.0 * ARD(np.linspace(0.3, 1.5, D)),
        ConstantKernel(2.0) * SklearnRBF(length_scale(np.linspace(0.3, 1.5, D))),
    ),
]
DATASETS = [two_moons_ish(), overlapping_1d()]


@pytest.mark.parametrize("data", DATASETS, ids=["2d", "1d-strings"])
@pytest.mark.parametrize("pair", KERNEL_PAIRS, ids=["rbf", "scaled-rbf", "scaled-ard"])
def test_fixed_hyperparameters_match_scikit_learn(data, pair):
    X, y = data
    ours_kernel, their_kernel = pair(X.shape[1])
    ours = GaussianProcessClassifier(ours_kernel, optimizer=None).fit(X, y)
    theirs = SklearnGPC(their_kernel, optimizer=None).fit(X, y)
    binary = theirs.base_estimator_
    np.testing.assert_array_equal(ours.classes_, theirs.classes_)
    np.testing.assert_allclose(ours.f_hat_, binary.f_cached, atol=1e-8)
    assert ours.log_marginal_likelihood_value_ == pytest.approx(
        theirs.log_marginal_likelihood_value_, rel=1e-10
    )
    X_test = np.random.default_rng(7).normal(scale=2, size=(50, X.shape[1]))
    mean, variance = binary.latent_mean_and_variance(X_test)
    np.testing.assert_allclose(ours.decision_function(X_test), mean, atol=1e-8)
    # scikit-learn integrates σ against the latent Gaussian by replacing σ with
    # five error functions (Williams & Barber 1998); that approximation is good
    # to about 1e-4, which bounds the agreement with our quadrature, while the
    # single-probit approximation is off by up to about 1e-2.
    quadrature = ours.predict_proba(X_test, method="quadrature")
    np.testing.assert_allclose(quadrature, theirs.predict_proba(X_test), atol=2e-4)
    probit = ours.predict_proba(X_test)
    assert np.max(np.abs(probit - quadrature)) < 0.02
    np.testing.assert_array_equal(ours.predict(X_test), theirs.predict(X_test))


def test_the_mode_is_the_fixed_point_f_equals_K_grad_log_likelihood():
    X, y = two_moons_ish()
    K = (2.0 * RBF(0.5))(X)
    mode = laplace_mode(K, y.astype(float))
    np.testing.assert_allclose(mode.f, K @ (y - sigmoid(mode.f)), atol=1e-9)
    assert mode.n_iter < 10


def test_the_mode_is_exact_to_rounding_not_to_the_square_root_of_it():
    """Near the mode Ψ is flat to second order, so an error of 1e-8 in f changes
    Ψ by less than its rounding; the Newton loop must still take the last step.
    (Comparing Ψ exactly, and stopping at a relative gain of 1e-10, left
    residuals up to 7e-10 here; the floor after extra Newton steps is 3e-13.)"""
    X, y = two_moons_ish(n=60, seed=6)
    t = y.astype(float)
    worst = 0.0
    for theta in np.random.default_rng(0).uniform([-1, -2], [5, 1], size=(25, 2)):
        K = (1.0 * RBF(1.0)).clone_with_theta(theta)(X)
        f = laplace_mode(K, t).f
        worst = max(worst, np.abs(f - K @ (t - sigmoid(f))).max() / np.abs(f).max())
    assert worst < 1e-11


def negative_log_posterior(f, K, t):
    """−log p(t | f) + ½fᵀK⁻¹f, up to a constant; K⁻¹ by a solve (test only)."""
    return -log_likelihood(f, t) + 0.5 * f @ np.linalg.solve(K, f)


def test_laplace_covariance_is_the_inverse_finite_difference_hessian():
    X, y = two_moons_ish(n=8, seed=3)
    X *= 2.0  # spread the points: K well conditioned
    K = (2.0 * RBF(0.3))(X)
    t = y.astype(float)
    mode = laplace_mode(K, t)
    n, h = len(t), 1e-3
    E = h * np.eye(n)
    psi = lambda f: negative_log_posterior(f, K, t)  # noqa: E731
    H = np.array(
        [
            [
                (
                    psi(mode.f + E[i] + E[j])
                    - psi(mode.f + E[i] - E[j])
                    - psi(mode.f - E[i] + E[j])
                    + psi(mode.f - E[i] - E[j])
                )
                / (4 * h * h)
                for j in range(n)
            ]
            for i in range(n)
        ]
    )
    np.testing.assert_allclose(
        laplace_covariance(K, mode), np.linalg.inv(H), rtol=1e-5, atol=1e-7
    )


def gaussian_approximation(K, t, mode):
    """The unnormalised Gaussian that the Laplace method integrates, as a function of
    f."""
    precision = np.linalg.inv(K) + np.diag(mode.W_sr**2)
    peak = log_likelihood(mode.f, t) + multivariate_normal(np.zeros(len(t)), K).logpdf(
        mode.f
    )

    def density(*f):
        d = np.array(f) - mode.f
        return np.exp(peak - 0.5 * d @ precision @ d)

    return density


def likelihood_times_prior(K, t):
    """p(t | f) N(f | 0, K), whose integral is the exact evidence."""
    K_inv, log_norm = np.linalg.inv(K), -0.5 * np.linalg.slogdet(2 * np.pi * K)[1]
    sign = 2 * t - 1
    return lambda *f: (
        np.prod(sigmoid(sign * np.array(f)))
        * np.exp(log_norm - 0.5 * np.array(f) @ K_inv @ np.array(f))
    )


@pytest.mark.parametrize("n", [1, 2])
def test_laplace_evidence_is_the_integral_of_its_gaussian(n, capsys):
    X = np.array([[0.0], [0.8]])[:n]
    t = np.array([1.0, 0.0])[:n]
    K = (2.5 * RBF(0.5))(X)
    mode = laplace_mode(K, t)
    sd = np.sqrt(np.diag(laplace_covariance(K, mode)))
    lo, hi = mode.f - 12 * sd, mode.f + 12 * sd
    gaussian, exact = gaussian_approximation(K, t, mode), likelihood_times_prior(K, t)
    if n == 1:
        gaussian_integral = quad(gaussian, lo[0], hi[0], epsabs=0, epsrel=1e-12)[0]
        exact_integral = quad(exact, -40, 40, epsabs=0, epsrel=1e-12)[0]
        # one positive label under a symmetric prior: p(t = 1) = ½ exactly
        assert exact_integral == pytest.approx(0.5, rel=1e-10)
    else:
        # dblquad calls func(inner, outer): swap back to (f1, f2)
        gaussian_integral = dblquad(
            lambda f2, f1: gaussian(f1, f2),
            lo[0],
            hi[0],
            lo[1],
            hi[1],
            epsabs=0,
            epsrel=1e-10,
        )[0]
        exact_integral = dblquad(
            lambda f2, f1: exact(f1, f2), -25, 25, -25, 25, epsabs=0, epsrel=1e-10
        )[0]
    assert np.log(gaussian_integral) == pytest.approx(mode.log_evidence, abs=1e-8)
    with capsys.disabled():
        print(
            f"\n  n={n}: log evidence exact {np.log(exact_integral):.6f}, Laplace "
            f"{mode.log_evidence:.6f}, gap "
            f"{np.log(exact_integral) - mode.log_evidence:+.2e}"
        )


@pytest.mark.parametrize(
    "kernel",
    [
        3.0 * RBF(0.4),
        2.0 * ARD(np.array([0.3, 1.5])),
        RBF(0.8) + Constant(0.5),
        (1.5 * RBF(0.2)) * RBF(2.0),
    ],
    ids=["scaled-rbf", "scaled-ard", "rbf-plus-constant", "product"],
)
def test_evidence_gradient_matches_finite_differences(kernel):
    X, y = two_moons_ish()
    model = GaussianProcessClassifier(kernel, optimizer=None).fit(X, y)
    theta = model.kernel_.theta
    value, gradient = model.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(model.log_marginal_likelihood_value_, rel=1e-12)
    h = 1e-5
    numeric = np.array(
        [
            (
                model.log_marginal_likelihood(theta + h * e)
                - model.log_marginal_likelihood(theta - h * e)
            )
            / (2 * h)
            for e in np.eye(len(theta))
        ]
    )
    np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-7)


def test_the_sign_of_the_implicit_term_is_decided_by_finite_differences():
    """Without the term through the mode, or with its sign flipped (−½ in
    front of ∇³log p instead of +½), the gradient misses the finite
    differences by far more than their error: the check can tell them apart."""
    X, y = two_moons_ish()
    kernel, t = 3.0 * RBF(0.4), y.astype(float)
    K = kernel(X)
    mode = laplace_mode(K, t)
    full = log_evidence_gradient(kernel, X, K, t, mode)
    R = mode.W_sr[:, None] * np.linalg.solve(mode.L @ mode.L.T, np.diag(mode.W_sr))
    explicit = kernel.gradient_dot(X, 0.5 * (np.outer(mode.a, mode.a) - R))
    flipped = 2 * explicit - full
    h = 1e-5
    numeric = np.array(
        [
            (
                laplace_mode(
                    kernel.clone_with_theta(kernel.theta + h * e)(X), t
                ).log_evidence
                - laplace_mode(
                    kernel.clone_with_theta(kernel.theta - h * e)(X), t
                ).log_evidence
            )
            / (2 * h)
            for e in np.eye(2)
        ]
    )
    assert np.max(np.abs(full - numeric)) < 1e-6
    assert np.max(np.abs(explicit - numeric)) > 1e-2
    assert np.max(np.abs(flipped - numeric)) > 1e-2


def test_quadrature_is_exact_and_the_probit_approximation_is_close():
    mu = np.linspace(-6, 6, 13)
    for s in [0.0, 0.3, 1.0, 3.0, 10.0, 40.0]:
        exact = (
            sigmoid(mu)
            if s == 0
            else np.array(
                [
                    quad(
                        lambda z: sigmoid(z) * norm.pdf(z, m, s),
                        m - 40 * s,
                        m + 40 * s,
                        points=[0.0],
                        epsabs=1e-15,
                        epsrel=1e-13,
                        limit=400,
                    )[0]
                    for m in mu
                ]
            )
        )
        np.testing.assert_allclose(quadrature_probability(mu, s * s), exact, atol=1e-12)
        # the probit approximation is exact at zero variance and at μ = 0, and
        # within 0.02 everywhere (its worst case is near s ≈ 2, |μ| ≈ 2).
        gap = np.abs(probit_probability(mu, s * s) - exact)
        assert gap.max() < 0.02
        assert gap[6] < 1e-15
    np.testing.assert_allclose(probit_probability(mu, 0.0), sigmoid(mu), rtol=1e-15)


def test_optimised_evidence_is_at_least_scikit_learns():
    X, y = two_moons_ish(n=50, seed=5)
    ours = GaussianProcessClassifier(1.0 * RBF(0.5)).fit(X, y)
    theirs = SklearnGPC(ConstantKernel(1.0) * SklearnRBF(length_scale(0.5))).fit(X, y)
    start = GaussianProcessClassifier(1.0 * RBF(0.5), optimizer=None).fit(X, y)
    assert (
        ours.log_marginal_likelihood_value_ > start.log_marginal_likelihood_value_ + 0.1
    )
    assert (
        ours.log_marginal_likelihood_value_
        >= theirs.log_marginal_likelihood_value_ - 1e-6
    )
    _, gradient = ours.log_marginal_likelihood(eval_gradient=True)
    inside = np.all(
        (ours.kernel_.theta > ours.kernel_.bounds[:, 0] + 1e-3)
        & (ours.kernel_.theta < ours.kernel_.bounds[:, 1] - 1e-3)
    )
    assert inside and np.max(np.abs(gradient)) < 1e-3


def test_restarts_are_drawn_on_the_log_scale_inside_the_bounds():
    X, y = two_moons_ish(n=30)
    starts = []

    def recording_optimizer(fun, theta0, bounds):
        starts.append((theta0, bounds))
        return theta0, fun(theta0)[0]

    kernel = 2.0 * RBF(0.5, gamma_bounds=(1e-2, 1e2))
    GaussianProcessClassifier(
        kernel, optimizer=recording_optimizer, n_restarts=20, random_state=0
    ).fit(X, y)
    np.testing.assert_allclose(starts[0][0], kernel.theta)
    drawn = np.array([theta for theta, _ in starts[1:]])
    bounds = starts[0][1]
    assert len(drawn) == 20
    assert np.all((drawn >= bounds[:, 0]) & (drawn <= bounds[:, 1]))
    # spread over the log range, e.g. log γ both below and above 0
    assert drawn[:, 1].min() < -1 and drawn[:, 1].max() > 1
    restarted = GaussianProcessClassifier(kernel, n_restarts=3, random_state=0).fit(
        X, y
    )
    single = GaussianProcessClassifier(kernel).fit(X, y)
    assert (
        restarted.log_marginal_likelihood_value_
        >= single.log_marginal_likelihood_value_ - 1e-9
    )


def test_one_vs_rest_matches_scikit_learn_for_three_classes():
    rng = np.random.default_rng(4)
    centres = np.array([[0, 0], [2.5, 0], [0, 2.5]])
    X = np.vstack([c + rng.normal(size=(15, 2)) for c in centres])
    y = np.repeat([0, 1, 2], 15)
    ours = GaussianProcessClassifier(2.0 * RBF(0.3), optimizer=None).fit(X, y)
    theirs = SklearnGPC(
        ConstantKernel(2.0) * SklearnRBF(length_scale(0.3)), optimizer=None
    ).fit(X, y)
    for k, estimator in enumerate(theirs.base_estimator_.estimators_):
        np.testing.assert_allclose(ours.f_hat_[:, k], estimator.f_cached, atol=1e-8)
    assert ours.log_marginal_likelihood_value_ == pytest.approx(
        theirs.log_marginal_likelihood_value_, rel=1e-10
    )
    X_test = rng.uniform(-2, 4, size=(40, 2))
    P = ours.predict_proba(X_test, method="quadrature")
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    np.testing.assert_allclose(P, theirs.predict_proba(X_test), atol=2e-4)
    assert ours.score(X, y) > 0.85
    assert ours.decision_function(X_test).shape == (40, 3)


def test_jitter_is_added_to_the_diagonal_and_reported():
    X, y = two_moons_ish()
    kernel = 2.0 * RBF(0.5)
    model = GaussianProcessClassifier(kernel, optimizer=None, jitter=0.1).fit(X, y)
    K = kernel(X) + 0.1 * np.eye(len(X))
    assert model.jitter_ == 0.1
    np.testing.assert_allclose(
        model.f_hat_, laplace_mode(K, y.astype(float)).f, atol=1e-12
    )
    plain = GaussianProcessClassifier(kernel, optimizer=None).fit(X, y)
    assert np.max(np.abs(model.f_hat_ - plain.f_hat_)) > 1e-3


def test_scikit_learn_machinery_works():
    X, y = two_moons_ish()
    model = GaussianProcessClassifier(1.0 * RBF(0.5), optimizer=None)
    fitted = clone(model).fit(X, y)
    assert not hasattr(clone(fitted), "f_hat_")
    assert repr(model.get_params()) == repr(clone(model).get_params())
    search = GridSearchCV(model, {"kernel__kernel__gamma": [0.01, 0.5]}, cv=3).fit(X, y)
    assert search.best_params_["kernel__kernel__gamma"] == 0.5
    assert cross_val_score(model, X, y, cv=3).mean() > 0.75


def test_default_kernel_is_unit_amplitude_rbf():
    X, y = two_moons_ish()
    default = GaussianProcessClassifier(optimizer=None).fit(X, y)
    explicit = GaussianProcessClassifier(1.0 * RBF(1.0), optimizer=None).fit(X, y)
    np.testing.assert_array_equal(default.f_hat_, explicit.f_hat_)


X_OK, Y_OK = two_moons_ish(n=20)
X_NAN = np.where(np.arange(40).reshape(20, 2) == 5, np.nan, X_OK)
BOUNDED = RBF(50.0, gamma_bounds=(1e-2, 10.0))


@pytest.mark.parametrize(
    "kwargs,X,y,error,match",
    [
        ({}, X_NAN, Y_OK, ValueError, "X contains NaN"),
        (
            {},
            X_OK,
            np.where(np.arange(20) == 3, np.nan, Y_OK),
            ValueError,
            "y contains NaN",
        ),
        ({}, X_OK, np.zeros(20), ValueError, "single class"),
        ({}, X_OK, Y_OK[:10], ValueError, "one label per row"),
        (
            {"kernel": RBF(1.0, gamma_bounds=(0.0, 10.0))},
            X_OK,
            Y_OK,
            ValueError,
            "gamma_bounds",
        ),
        (
            {"kernel": RBF(1.0, gamma_bounds=(1e-5, -1.0))},
            X_OK,
            Y_OK,
            ValueError,
            "gamma_bounds",
        ),
        ({"kernel": BOUNDED}, X_OK, Y_OK, ValueError, "outside its bounds"),
        ({"kernel": "rbf"}, X_OK, Y_OK, TypeError, "kernelref.kernels.Kernel"),
        ({"jitter": -1e-6}, X_OK, Y_OK, ValueError, "jitter must be"),
        ({"n_restarts": -1}, X_OK, Y_OK, ValueError, "n_restarts must be"),
        ({"max_iter_predict": 0}, X_OK, Y_OK, ValueError, "max_iter_predict must be"),
        ({"optimizer": "bfgs"}, X_OK, Y_OK, ValueError, "optimizer must be"),
        ({"multi_class": "one_vs_one"}, X_OK, Y_OK, ValueError, "multi_class must be"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(kwargs, X, y, error, match):
    with pytest.raises(error, match=match):
        GaussianProcessClassifier(**kwargs).fit(X, y)


def test_the_binary_core_refuses_labels_that_are_not_zero_and_one():
    K = RBF(1.0)(X_OK)
    for t in (np.where(Y_OK == 1, 1.0, -1.0), np.arange(20) % 3):
        with pytest.raises(ValueError, match="binary labels 0 and 1"):
            laplace_mode(K, t)


def test_an_indefinite_kernel_is_refused():
    kernel = 40.0 * Sigmoid(gamma=1.0, coef0=-1.0)
    assert (
        np.linalg.eigvalsh(kernel(X_OK)).min() < -4
    )  # so I + K/4 is indefinite at f = 0
    with pytest.raises(ValueError, match="not positive semi-definite"):
        GaussianProcessClassifier(kernel, optimizer=None).fit(X_OK, Y_OK)


def test_prediction_checks_its_input():
    model = GaussianProcessClassifier(optimizer=None).fit(X_OK, Y_OK)
    with pytest.raises(ValueError, match="fitted with 2"):
        model.predict(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="method must be"):
        model.predict_proba(X_OK, method="laplace")
    with pytest.raises(ValueError, match="call fit"):
        GaussianProcessClassifier().predict(X_OK)
