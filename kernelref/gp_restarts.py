"""Type-II maximum likelihood with restarts, shared by the Gaussian processes.

The evidence of a Gaussian process (labels ``gp-lml``, ``gpc-evidence``,
``gpcm-evidence``) can have several local maxima in the log-hyperparameters,
so each estimator runs a local optimiser on the negative log evidence from the
kernel's own log θ and from ``n_restarts`` starts drawn uniformly inside the
log-bounds, and keeps the best optimum. An optimiser here is a function
``optimizer(fun, theta0, bounds)`` returning ``(theta, fun(theta))``, where
``fun`` gives the objective and its gradient (the contract of
``GaussianProcessClassifier``'s callable ``optimizer``).
"""

import numpy as np
from scipy.optimize import minimize

__all__ = ["best_of_restarts", "lbfgs", "maximise_evidence"]


def lbfgs(fun, theta0, bounds):
    """One local run: L-BFGS-B with the gradient, from `theta0` inside `bounds`.
    Returns ``(theta, fun(theta))``."""
    result = minimize(fun, theta0, jac=True, method="L-BFGS-B", bounds=bounds)
    return result.x, result.fun


def best_of_restarts(optimizer, fun, theta0, bounds, n_restarts, random_state):
    """The lowest of the local minima of `fun` that `optimizer` finds from
    `theta0` and from `n_restarts` starts drawn uniformly inside the log-`bounds`,
    shape (len(theta0), 2).

    The starts are drawn by ``np.random.default_rng(random_state)`` before any
    run; of equal values the earliest start wins. Returns ``(theta, value)``.
    """
    rng = np.random.default_rng(random_state)
    starts = [theta0] + [
        rng.uniform(bounds[:, 0], bounds[:, 1]) for _ in range(n_restarts)
    ]
    # A loop, not a generator expression: no frame of ours between a run's
    # warnings and the estimator's fit, so the runs' stacklevel stays fixed.
    optima = []
    for start in starts:
        optima.append(optimizer(fun, start, bounds))
    return min(optima, key=lambda pair: pair[1])


def maximise_evidence(evidence, kernel, optimizer, n_restarts, random_state):
    """The kernel at the log θ of the highest ``evidence(kernel) -> (value,
    gradient in log θ)`` that `best_of_restarts` finds within the kernel's
    log-bounds, the classifiers' type-II maximum likelihood: `optimizer` is a
    callable run (``GaussianProcessClassifier``'s), or `lbfgs` for any other
    value ('L-BFGS-B')."""

    def negative_evidence(theta):
        value, gradient = evidence(kernel.clone_with_theta(theta))
        return -value, -gradient

    theta, _ = best_of_restarts(
        optimizer if callable(optimizer) else lbfgs,
        negative_evidence,
        kernel.theta,
        kernel.bounds,
        n_restarts,
        random_state,
    )
    return kernel.clone_with_theta(theta)
