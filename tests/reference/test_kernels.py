"""Kernels: formulas, gradients against finite differences, construction rules PSD."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import approx_fprime
from sklearn.metrics.pairwise import (
    laplacian_kernel,
    linear_kernel,
    polynomial_kernel,
    rbf_kernel,
    sigmoid_kernel,
)

from kernelref.gp import GaussianProcessClassifier, GaussianProcessRegressor
from kernelref.gp_softmax import SoftmaxGaussianProcessClassifier
from kernelref.kernels import (
    ARD,
    RBF,
    Bilinear,
    Constant,
    Exp,
    ExponentialQuadratic,
    Laplacian,
    Linear,
    Mapped,
    Matern,
    Polynomial,
    PolynomialOf,
    Scaled,
    Sigmoid,
    Warped,
    make_kernel,
    mercer_check,
    squared_distances,
)

rng = np.random.default_rng(0)
X = rng.normal(size=(30, 3))
Y = rng.normal(size=(20, 3))


def brute(k, X, Y):
    return np.array([[k(x, y) for y in Y] for x in X])


FORMULAS = [
    (Linear(), lambda x, y: x @ y),
    (Polynomial(3, 0.5, 2.0), lambda x, y: (0.5 * x @ y + 2.0) ** 3),
    (RBF(0.7), lambda x, y: np.exp(-0.7 * np.sum((x - y) ** 2))),
    (Laplacian(0.7), lambda x, y: np.exp(-0.7 * np.linalg.norm(x - y))),
    (Laplacian(0.7, norm="l1"), lambda x, y: np.exp(-0.7 * np.abs(x - y).sum())),
    (Sigmoid(0.3, -0.5), lambda x, y: np.tanh(0.3 * x @ y - 0.5)),
    (
        ARD(np.array([0.1, 1.0, 3.0])),
        lambda x, y: np.exp(-np.sum(np.array([0.1, 1.0, 3.0]) * (x - y) ** 2)),
    ),
    (
        ExponentialQuadratic(2.0, 0.5, 0.3, 0.1),
        lambda x, y: 2.0 * np.exp(-0.25 * np.sum((x - y) ** 2)) + 0.3 + 0.1 * x @ y,
    ),
    (Bilinear(np.diag([1.0, 2.0, 3.0])), lambda x, y: x @ np.diag([1.0, 2.0, 3.0]) @ y),
]


@pytest.mark.parametrize("kernel,formula", FORMULAS, ids=lambda v: repr(v)[:30])
def test_kernel_matches_its_formula(kernel, formula):
    np.testing.assert_allclose(
        kernel(X, Y), brute(formula, X, Y), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(
        kernel.diag(X), np.diag(kernel(X)), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(kernel(X), kernel(X, X), rtol=1e-12, atol=1e-12)


def test_named_kernels_equal_scikit_learn():
    np.testing.assert_allclose(RBF(0.4)(X, Y), rbf_kernel(X, Y, gamma=0.4), rtol=1e-13)
    np.testing.assert_allclose(
        Polynomial(2, 0.4, 1.5)(X, Y),
        polynomial_kernel(X, Y, degree=2, gamma=0.4, coef0=1.5),
        rtol=1e-13,
    )
    np.testing.assert_allclose(
        Sigmoid(0.4, 0.2)(X, Y), sigmoid_kernel(X, Y, gamma=0.4, coef0=0.2)
    )
    np.testing.assert_allclose(Linear()(X, Y), linear_kernel(X, Y))
    np.testing.assert_allclose(
        Laplacian(0.4, norm="l1")(X, Y), laplacian_kernel(X, Y, gamma=0.4)
    )


def test_squared_distances_are_exact_on_the_diagonal_and_nonnegative():
    D = squared_distances(X)
    assert np.all(np.diag(D) == 0) and np.all(D >= 0)
    np.testing.assert_allclose(
        D, brute(lambda x, y: np.sum((x - y) ** 2), X, X), atol=1e-12
    )


GRADIENT_KERNELS = [
    RBF(0.7),
    Laplacian(0.5),
    Polynomial(3, 0.5, 2.0),
    Sigmoid(0.3, -0.2),
    ARD(np.array([0.2, 1.0, 2.5])),
    ARD(0.8),
    ExponentialQuadratic(2.0, 0.5, 0.3, 0.1),
    2.0 * RBF(0.5) + Constant(0.3),
    RBF(0.5) * Polynomial(2, 1.0, 1.0),
    Exp(0.2 * Linear()) * ARD(np.array([0.5, 1.0, 2.0])),
    PolynomialOf(RBF(0.4), [0.5, 1.0, 2.0]),
    Warped(RBF(0.6), lambda Z: 1.0 + Z[:, 0] ** 2),
    Mapped(RBF(0.6), lambda Z: Z[:, :2]),
]


@pytest.mark.parametrize("kernel", GRADIENT_KERNELS, ids=repr)
def test_log_hyperparameter_gradient_equals_finite_differences(kernel):
    Z = X[:12]
    theta = kernel.theta
    assert len(theta) > 0
    analytic = kernel.gradient(Z)
    for i in range(len(theta)):

        def entry_sum(th, i=i):
            return np.sum(kernel.clone_with_theta(th)(Z) * W)

        W = np.random.default_rng(i).normal(size=(12, 12))
        numeric = approx_fprime(theta, entry_sum, 1e-7)[i]
        np.testing.assert_allclose(
            np.vdot(W, analytic[i]), numeric, rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize("kernel", GRADIENT_KERNELS, ids=repr)
def test_gradient_dot_equals_contraction_of_full_gradient(kernel):
    W = rng.normal(size=(len(X), len(X)))
    expected = np.einsum("ab,jab->j", W, kernel.gradient(X))
    np.testing.assert_allclose(
        kernel.gradient_dot(X, W), expected, rtol=1e-10, atol=1e-10
    )
    # a caller that already holds K may pass it; the result must not change
    np.testing.assert_allclose(
        kernel.gradient_dot(X, W, K=kernel(X)), expected, rtol=1e-10, atol=1e-10
    )


def test_fixed_bounds_remove_a_hyperparameter():
    k = RBF(0.5, gamma_bounds="fixed") + Constant(2.0)
    assert [name for name, _ in k.hyperparameters] == ["k2__value"]
    assert k.gradient(X).shape == (1, len(X), len(X))


def test_theta_round_trips_through_logs_and_nested_names():
    k = 2.0 * ARD(np.array([0.5, 2.0]))
    assert [name for name, _ in k.hyperparameters] == ["scale", "kernel__gamma"]
    np.testing.assert_allclose(k.theta, np.log([2.0, 0.5, 2.0]))
    k2 = k.clone_with_theta(np.log([3.0, 1.0, 4.0]))
    assert (
        np.isclose(k2.scale, 3.0)
        and np.allclose(k2.kernel.gamma, [1.0, 4.0])
        and k.scale == 2.0
    )
    assert k.bounds.shape == (3, 2)


def test_nested_get_params_reach_inner_kernels():
    k = RBF(0.5) + 2.0 * Linear()
    params = k.get_params()
    assert params["k1__gamma"] == 0.5 and params["k2__scale"] == 2.0
    k.set_params(k1__gamma=3.0)
    assert k.k1.gamma == 3.0


def test_bad_bounds_are_refused_with_the_name():
    with pytest.raises(ValueError, match="gamma_bounds"):
        RBF(1.0, gamma_bounds=(0.0, 1.0)).bounds


@pytest.mark.parametrize(
    "bad",
    ["fix", (1.0,), 5.0, (np.nan, 1.0), (1.0, np.nan), (np.inf, np.inf), [[1, 2]] * 2],
    ids=repr,
)
def test_malformed_bounds_are_refused_with_the_name_and_the_form(bad):
    """A misspelt 'fixed', a single number or a list of pairs is named, with the
    form bounds take, before an optimiser reads them (not an unpacking error)."""
    kernel = 2.0 * Matern(np.ones(2), nu=1.5, length_scale_bounds=bad)
    with pytest.raises(ValueError, match="Matern: length_scale_bounds must be 'fix"):
        kernel.bounds
    X2 = np.random.default_rng(0).normal(size=(10, 2))
    with pytest.raises(ValueError, match="length_scale_bounds must be 'fixed' or one"):
        GaussianProcessRegressor(kernel=kernel).fit(X2, X2[:, 0])


@pytest.mark.parametrize(
    "make",
    [
        GaussianProcessRegressor,
        GaussianProcessClassifier,
        SoftmaxGaussianProcessClassifier,
    ],
)
def test_an_infinite_upper_bound_means_none_and_refuses_restarts(make):
    """(low, inf) leaves the hyperparameter unbounded above for L-BFGS-B; random
    restarts, drawn inside the bounds, then have nowhere to be drawn and are
    refused by name before any work (not numpy's 'Range exceeds valid bounds')."""
    kernel = 1.0 * Matern(np.ones(2), length_scale_bounds=(1e-3, np.inf))
    np.testing.assert_array_equal(
        kernel.bounds, [[np.log(1e-5), np.log(1e5)]] + [[np.log(1e-3), np.inf]] * 2
    )
    Z = np.random.default_rng(0).normal(size=(12, 2))
    labels = np.arange(12) % 3
    make(kernel=kernel).fit(Z, labels)
    with pytest.raises(ValueError, match="n_restarts > 0 .* must then be finite"):
        make(kernel=kernel, n_restarts=1).fit(Z, labels)


@pytest.mark.parametrize(
    "make,name",
    [
        (lambda v: RBF(v), "gamma"),
        (lambda v: Laplacian(v), "gamma"),
        (lambda v: Polynomial(2, gamma=v), "gamma"),
        (lambda v: Sigmoid(0.1, coef0=v), "coef0"),
        (lambda v: Constant(v), "value"),
        (lambda v: Scaled(v, RBF()), "scale"),
    ],
)
def test_an_array_for_a_single_number_is_refused(make, name):
    """RBF(gamma=[γ₁, γ₂]) broadcast against the (n, m) distances: an error for
    most n, a wrong, asymmetric Gram matrix for n = 2. One γ per input is ARD."""
    with pytest.raises(ValueError, match=f"{name} must be a single number.*ARD"):
        make(np.array([0.5, 2.0]))
    kernel = make(0.5)
    with pytest.raises(ValueError, match=f"{name} must be a single number"):
        kernel.set_params(**{name: [0.5]})
    np.testing.assert_array_equal(kernel(X[:3]), make(np.float64(0.5))(X[:3]))


def test_negative_polynomial_coefficient_is_refused():
    with pytest.raises(ValueError, match="coef"):
        PolynomialOf(RBF(1.0), [1.0, -1.0])(X)


def test_unknown_kernel_name_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="kernel must be one of"):
        make_kernel("gaussian-ish", X)


finite = st.floats(-3, 3, allow_nan=False)
positive = st.floats(0.05, 3.0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), gamma=positive, c=positive, scale=positive)
def test_construction_rules_give_psd_gram_matrices(seed, gamma, c, scale):
    Z = np.random.default_rng(seed).normal(size=(25, 2))
    B = np.random.default_rng(seed + 1).normal(size=(2, 2))
    rules = [
        RBF(gamma) + Polynomial(2, gamma, c),  # rule-sum
        scale * Laplacian(gamma),  # rule-scale
        RBF(gamma) * Polynomial(2, gamma, c),  # rule-product
        Warped(RBF(gamma), lambda Z: np.sin(Z[:, 0]) + Z[:, 1]),  # rule-warp
        Exp(gamma * Linear()),  # rule-exp
        PolynomialOf(RBF(gamma), [c, 1.0, scale]),  # rule-polynomial
        Bilinear(B @ B.T),  # x^T A x' with A PSD
        Mapped(RBF(gamma), lambda Z: np.tanh(Z)),  # rule-map
        ExponentialQuadratic(scale, gamma, c, c),
    ]
    for k in rules:
        report = mercer_check(k, Z, rtol=1e-9)
        assert report.is_psd, (k, report.verdict)


def test_sigmoid_kernel_fails_mercer_for_some_parameters():
    Z = np.random.default_rng(1).normal(size=(40, 2))
    report = mercer_check(Sigmoid(gamma=1.0, coef0=-1.0), Z)
    assert not report.is_psd and report.min_eigenvalue < -1e-3
    assert "not positive semi-definite" in report.verdict


def test_mercer_check_accepts_the_gaussian_kernel():
    report = mercer_check(RBF(0.5), X)
    assert report.is_psd and report.min_eigenvalue > -report.tolerance
