"""The shared Laplace machinery: the logistic likelihood's derivatives and the
damped Newton loop, in the function space of the GP and the weight space of the RVM."""

import warnings

import numpy as np
import pytest
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize

from kernelref.laplace import (
    ConvergenceWarning,
    damped_newton,
    likelihood_curvature,
    log_likelihood,
    log_likelihood_gradient,
    log_likelihood_third_derivative,
    sigmoid,
)


def central_difference(fun, f, h=1e-5):
    """Elementwise derivative of an elementwise function."""
    return (fun(f + h) - fun(f - h)) / (2 * h)


def test_log_likelihood_is_the_bernoulli_log_probability():
    rng = np.random.default_rng(0)
    f, t = rng.normal(scale=3, size=50), rng.integers(0, 2, size=50).astype(float)
    pi = 1 / (1 + np.exp(-f))
    bernoulli = np.sum(t * np.log(pi) + (1 - t) * np.log1p(-pi))
    assert log_likelihood(f, t) == pytest.approx(bernoulli, rel=1e-13)


def test_log_likelihood_and_sigmoid_are_exact_for_huge_latents():
    f = np.array([-800.0, 800.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow in exp
        assert log_likelihood(f, np.array([1.0, 0.0])) == -1600.0
        assert log_likelihood(f, np.array([0.0, 1.0])) == 0.0
        np.testing.assert_array_equal(sigmoid(f), [0.0, 1.0])
        np.testing.assert_array_equal(likelihood_curvature(f), [0.0, 0.0])


def test_likelihood_derivatives_match_finite_differences():
    rng = np.random.default_rng(1)
    f, t = rng.normal(scale=2, size=30), rng.integers(0, 2, size=30).astype(float)
    per_point = lambda g: -np.logaddexp(0.0, -(2 * t - 1) * g)  # noqa: E731
    gradient = central_difference(per_point, f)
    np.testing.assert_allclose(log_likelihood_gradient(f, t), gradient, atol=1e-9)
    W = -central_difference(lambda g: log_likelihood_gradient(g, t), f)
    np.testing.assert_allclose(likelihood_curvature(f), W, atol=1e-9)
    third = -central_difference(likelihood_curvature, f)
    np.testing.assert_allclose(log_likelihood_third_derivative(f), third, atol=1e-9)
    # The sign Algorithm 5.1 leans on: W falls away from f = 0 on both sides,
    # so ∂³log p = −∂W/∂f has the sign of f.
    assert np.all(np.sign(log_likelihood_third_derivative(f)) == np.sign(f))


def test_damped_newton_halves_the_steps_that_plain_newton_diverges_on():
    # −log cosh x is concave with its maximum at 0; from |x| > 1.09 the full
    # Newton step x − sinh x cosh x overshoots further each time.
    objective = lambda x: -np.log(np.cosh(x[0]))  # noqa: E731
    newton_step = lambda x: x - np.sinh(x) * np.cosh(x)  # noqa: E731
    x = np.array([2.0])
    plain = [x]
    for _ in range(2):
        plain.append(newton_step(plain[-1]))
    assert abs(plain[-1][0]) > 1e3
    result = damped_newton(objective, newton_step, np.array([2.0]), tol=1e-14)
    assert result.converged
    assert abs(result.x[0]) < 1e-6
    assert result.n_iter < 20


def test_damped_newton_never_lowers_the_objective():
    # Record the accepted iterates by wrapping the step: each step starts at
    # the point the previous one accepted.
    objective = lambda x: -np.log(np.cosh(x[0] - 1.0)) - 0.1 * x[0] ** 2  # noqa: E731

    def newton_step(x):
        starts.append(objective(x))
        u = x[0] - 1.0
        gradient = -np.tanh(u) - 0.2 * x[0]
        hessian = -1.0 / np.cosh(u) ** 2 - 0.2
        return x - gradient / hessian

    starts = []
    result = damped_newton(objective, newton_step, np.array([-6.0]), tol=1e-15)
    assert len(starts) >= 3
    assert np.all(np.diff(starts) >= 0)
    gradient_at_end = -np.tanh(result.x[0] - 1.0) - 0.2 * result.x[0]
    assert abs(gradient_at_end) < 1e-7


def test_damped_newton_warns_when_the_iteration_limit_is_reached():
    objective = lambda x: -np.log(np.cosh(x[0]))  # noqa: E731
    newton_step = lambda x: x - np.sinh(x) * np.cosh(x)  # noqa: E731
    with pytest.warns(ConvergenceWarning, match="raise max_iter"):
        result = damped_newton(objective, newton_step, np.array([2.0]), max_iter=2)
    assert not result.converged and result.n_iter == 2


def test_weight_space_newton_finds_the_penalised_logistic_mode():
    """The RVM's use: maximise log p(t | Φw) − ½wᵀAw with Newton steps
    w_new = (ΦᵀBΦ + A)⁻¹ΦᵀB(Φw + B⁻¹(t − π)), B = diag(π(1 − π)) (IRLS)."""
    rng = np.random.default_rng(2)
    Phi = rng.normal(size=(60, 4))
    t = (Phi @ np.array([3.0, -2.0, 0.0, 1.0]) + rng.normal(size=60) > 0).astype(float)
    A = np.diag([0.5, 1.0, 2.0, 0.1])

    def objective(w):
        return log_likelihood(Phi @ w, t) - 0.5 * w @ A @ w

    def newton_step(w):
        y = Phi @ w
        B = likelihood_curvature(y)
        Sigma_inv = Phi.T @ (B[:, None] * Phi) + A
        return cho_solve(
            cho_factor(Sigma_inv), Phi.T @ (B * y + log_likelihood_gradient(y, t))
        )

    result = damped_newton(objective, newton_step, np.zeros(4))
    generic = minimize(
        lambda w: -objective(w),
        np.zeros(4),
        method="BFGS",
        jac=lambda w: -(Phi.T @ log_likelihood_gradient(Phi @ w, t) - A @ w),
        options={"gtol": 1e-10},
    )
    np.testing.assert_allclose(result.x, generic.x, atol=1e-6)
    assert result.value >= -generic.fun - 1e-12
    assert result.n_iter < 15  # quadratic convergence, not BFGS's dozens
