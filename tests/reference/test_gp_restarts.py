"""ML-II with restarts: one function, ``best_of_restarts``, for the three
Gaussian processes, giving exactly what their written-out loops gave.

The loops drew every start first (the kernel's log θ, then ``n_restarts``
uniform draws inside the log-bounds from ``np.random.default_rng(random_state)``),
ran L-BFGS-B from each and kept the first lowest negative evidence. The oracle
below is that loop, run on each estimator's evidence through its public
``log_marginal_likelihood``; the fitted log θ and log evidence must be equal
to the last bit.
"""

import numpy as np
import pytest
from scipy.optimize import minimize

from kernelref.gp import GaussianProcessClassifier, GaussianProcessRegressor
from kernelref.gp_restarts import best_of_restarts, lbfgs, maximise_evidence
from kernelref.gp_softmax import SoftmaxGaussianProcessClassifier
from kernelref.kernels import RBF, Constant, White

BOUNDS = np.array([[-2.0, 3.0], [0.0, 1.0], [-5.0, -4.0]])


def test_the_starts_are_theta0_then_uniform_draws_in_the_bounds():
    seen = []

    def record(fun, start, bounds):
        assert fun is objective and bounds is BOUNDS
        seen.append(start)
        return start, float(len(seen))

    def objective(theta):
        raise AssertionError("only the optimiser calls the objective")

    theta0 = np.array([0.5, 0.5, -4.5])
    best_of_restarts(record, objective, theta0, BOUNDS, 3, random_state=11)
    rng = np.random.default_rng(11)
    assert seen[0] is theta0 and len(seen) == 4
    for start in seen[1:]:
        np.testing.assert_array_equal(start, rng.uniform(BOUNDS[:, 0], BOUNDS[:, 1]))
        assert np.all((BOUNDS[:, 0] <= start) & (start <= BOUNDS[:, 1]))


def test_the_lowest_value_wins_and_the_earliest_start_of_a_tie():
    values = iter([2.0, -1.0, 5.0, -1.0])

    def run(fun, start, bounds):
        return start, next(values)

    theta, value = best_of_restarts(run, None, np.zeros(3), BOUNDS, 3, random_state=0)
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(theta, rng.uniform(BOUNDS[:, 0], BOUNDS[:, 1]))
    assert value == -1.0


def test_no_restarts_is_one_run_from_theta0():
    runs = []

    def run(fun, start, bounds):
        runs.append(start)
        return start, 0.0

    theta, _ = best_of_restarts(run, None, np.ones(3), BOUNDS, 0, None)
    assert len(runs) == 1 and runs[0] is theta


def test_a_generator_as_random_state_is_drawn_from_in_place():
    generator = np.random.default_rng(4)
    best_of_restarts(lambda f, s, b: (s, 0.0), None, np.ones(3), BOUNDS, 2, generator)
    twin = np.random.default_rng(4)
    twin.uniform(size=(2, 3))
    assert generator.uniform() == twin.uniform()


def test_lbfgs_finds_the_minimum_of_a_quadratic_inside_the_bounds():
    centre = np.array([0.3, 0.9, -6.0])  # the last lies below its bounds

    def quadratic(theta):
        return np.sum((theta - centre) ** 2), 2 * (theta - centre)

    theta, value = lbfgs(quadratic, np.zeros(3), BOUNDS)
    np.testing.assert_allclose(theta, [0.3, 0.9, -5.0], atol=1e-8)
    assert value == pytest.approx(1.0)


def written_out_restarts(model, theta0, bounds, n_restarts, random_state):
    """The estimators' loop before ``best_of_restarts``, on `model`'s evidence;
    returns the best log θ and which start gave it."""

    def negative_evidence(theta):
        value, gradient = model.log_marginal_likelihood(theta, eval_gradient=True)
        return -value, -gradient

    rng = np.random.default_rng(random_state)
    starts = [theta0] + [
        rng.uniform(bounds[:, 0], bounds[:, 1]) for _ in range(n_restarts)
    ]
    best, best_start = None, None
    for index, start in enumerate(starts):
        result = minimize(
            negative_evidence, start, jac=True, method="L-BFGS-B", bounds=bounds
        )
        if best is None or result.fun < best.fun:
            best, best_start = result, index
    return best.x, best_start


rng = np.random.default_rng(7)
X = rng.normal(size=(30, 2))
z = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.normal(size=30)
y2 = (X[:, 0] + 0.5 * rng.normal(size=30) > 0).astype(int)
y3 = np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.5])

CASES = {
    "regressor": (
        lambda **kw: GaussianProcessRegressor(
            Constant(1.0) * RBF(1.0) + White(0.1), **kw
        ),
        z,
    ),
    "binary classifier": (
        lambda **kw: GaussianProcessClassifier(Constant(1.0) * RBF(1.0), **kw),
        y2,
    ),
    "softmax classifier": (
        lambda **kw: SoftmaxGaussianProcessClassifier(Constant(1.0) * RBF(1.0), **kw),
        y3,
    ),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_gp_fits_exactly_what_its_written_out_loop_gave(name, seed):
    make, y = CASES[name]
    fitted = make(n_restarts=2, random_state=seed).fit(X, y)
    fixed = make(optimizer=None).fit(X, y)
    prior = fixed.kernel_
    theta, _ = written_out_restarts(fixed, prior.theta, prior.bounds, 2, seed)
    # the fitted kernel is the clone at the best θ; its theta is log(exp(θ))
    assert np.array_equal(fitted.kernel_.theta, prior.clone_with_theta(theta).theta)
    assert fitted.log_marginal_likelihood_value_ == fixed.log_marginal_likelihood(theta)


def test_the_restarts_find_a_better_optimum_than_the_start_here():
    """Without this the equality above could hold by ignoring the restarts."""
    found = []
    for name, (make, y) in CASES.items():
        fixed = make(optimizer=None).fit(X, y)
        for seed in (0, 1, 2):
            prior = fixed.kernel_
            found.append(
                written_out_restarts(fixed, prior.theta, prior.bounds, 2, seed)[1]
            )
    assert max(found) > 0


def test_maximise_evidence_is_the_classifiers_restart_loop():
    """``maximise_evidence``, the one restart loop of both GP classifiers,
    maximises the evidence as the written-out loop does, with L-BFGS-B for
    'L-BFGS-B' and with a callable optimizer where one is given."""
    model = GaussianProcessClassifier(Constant(1.0) * RBF(1.0), optimizer=None)
    prior = model.fit(X, y2).kernel_

    def evidence(kernel):
        return model.log_marginal_likelihood(kernel.theta, eval_gradient=True)

    theta, _ = written_out_restarts(model, prior.theta, prior.bounds, 2, 4)
    found = maximise_evidence(evidence, prior, "L-BFGS-B", 2, 4)
    np.testing.assert_array_equal(found.theta, prior.clone_with_theta(theta).theta)
    runs = []

    def optimizer(fun, theta0, bounds):
        runs.append(theta0)
        return lbfgs(fun, theta0, bounds)

    again = maximise_evidence(evidence, prior, optimizer, 2, 4)
    assert len(runs) == 3 and np.array_equal(runs[0], prior.theta)
    np.testing.assert_array_equal(again.theta, found.theta)
