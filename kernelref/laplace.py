"""The Laplace approximation for a logistic likelihood: the pieces shared by
Gaussian-process classification (``kernelref.gp_classify``) and the relevance
vector classifier.

Labels are t_n ∈ {0, 1}, as in PRML §4.3 and §7.2.3. With the latent value
f_n and the logistic sigmoid σ, the likelihood of one label is
p(t_n | f_n) = σ(f_n)^t_n (1 − σ(f_n))^(1 − t_n) = σ((2t_n − 1) f_n), so

    log p(t | f) = Σ_n log σ((2t_n − 1) f_n)      (label ``gpc-likelihood``)
    ∇ log p(t | f) = t − π,  π = σ(f)             (label ``gpc-likelihood-derivatives``)
    W = −∇∇ log p(t | f) = diag(π(1 − π))         (label ``gpc-likelihood-derivatives``)
    ∂³ log p(t_n | f_n) / ∂f_n³ = −π_n(1 − π_n)(1 − 2π_n)
                                                  (label ``gpc-likelihood-derivatives``)

GPML writes the same model with y = 2t − 1 ∈ {−1, +1}; the derivatives above
do not depend on the label beyond the gradient. The likelihood factorises, so
W is diagonal and is returned as the vector of its diagonal.

The mode of a log posterior Ψ = log p(t | f) + log prior is found by
``damped_newton``: Newton steps, each halved until Ψ does not decrease. The
GP takes its steps in the coefficients a of f = Ka (GPML Algorithm 3.1); the
RVM takes them in the weights w of f = Φw with Σ = (ΦᵀBΦ + A)⁻¹, B = diag(W).
Both objectives are concave, so the loop needs no line search beyond halving.
"""

import warnings
from dataclasses import dataclass

import numpy as np

from kernelref.exceptions import ConvergenceWarning, NonFiniteError

__all__ = [
    "ConvergenceWarning",
    "NewtonResult",
    "damped_newton",
    "likelihood_curvature",
    "log_likelihood",
    "log_likelihood_gradient",
    "log_likelihood_third_derivative",
    "sigmoid",
]

#: Halving a step 40 times shrinks it by 1e-12; a Newton direction of a
#: concave objective that still fails to ascend is lost in rounding.
MAX_HALVINGS = 40
#: Objective values within this relative distance count as equal. Near the
#: maximum the objective is flat to second order, so a step that shrinks the
#: error in x from 1e-8 to 1e-16 changes it by less than its rounding error
#: (a sum of N terms carries about √N·1e-16 relative); comparing values
#: exactly would reject that step and leave x wrong by 1e-8. Only steps that
#: lose less than this are let through, and a real overshoot loses far more.
ROUNDING = 1e-11
#: The default stopping tolerance on a step's relative gain. Newton's method
#: converges quadratically, so when a step gains 1e-12 relative (its start
#: was about 1e-6 from the maximum) its end is within about 1e-12: the mode
#: is then accurate enough for finite differences of the evidence.
TOL = 1e-12


def sigmoid(f):
    """σ(f) = 1 / (1 + e^(−f)), as exp(−log(1 + e^(−f))) so no overflow occurs."""
    return np.exp(-np.logaddexp(0.0, -np.asarray(f, dtype=float)))


def log_likelihood(f, t):
    """log p(t | f) = Σ log σ((2t − 1) f) (label ``gpc-likelihood``).

    log σ(z) = −log(1 + e^(−z)) by ``np.logaddexp``: exact for large |z|, where
    log(1 + exp(−z)) overflows for z ≪ 0 and rounds to 0 for z ≫ 0.
    """
    return -float(np.sum(np.logaddexp(0.0, -(2.0 * t - 1.0) * f)))


def log_likelihood_gradient(f, t):
    """∇ log p(t | f) = t − π with π = σ(f) (label ``gpc-likelihood-derivatives``)."""
    return t - sigmoid(f)


def likelihood_curvature(f):
    """The diagonal of W = −∇∇ log p(t | f): π(1 − π) (label
    ``gpc-likelihood-derivatives``).

    It does not depend on t, and lies in (0, ¼].
    """
    pi = sigmoid(f)
    return pi * (1.0 - pi)


def log_likelihood_third_derivative(f):
    """∂³ log p(t_n | f_n)/∂f_n³ = −π(1 − π)(1 − 2π) (label
    ``gpc-likelihood-derivatives``).

    It is −∂W_nn/∂f_n: the curvature W falls as |f| grows, so this term has
    the sign of f.
    """
    pi = sigmoid(f)
    return -pi * (1.0 - pi) * (1.0 - 2.0 * pi)


@dataclass
class NewtonResult:
    """Where ``damped_newton`` stopped: the point, the objective there, the
    number of Newton steps taken and whether the objective test was met."""

    x: np.ndarray
    value: float
    n_iter: int
    converged: bool


def damped_newton(objective, newton_step, x0, *, tol=TOL, max_iter=100):
    """Maximise a concave `objective` by Newton's method with step halving.

    ``newton_step(x)`` returns the full Newton iterate from x. The step from x
    to x + s (x_new − x) takes the largest s in 1, ½, ¼, … that does not
    decrease the objective (beyond rounding): a full Newton step can overshoot when the
    quadratic model is poor (far from the mode, or W nearly zero), and halving
    restores ascent because the Newton direction of a concave function
    ascends. The loop stops when a step raises the objective by at most
    ``tol · max(1, |objective|)``, a test on the quantity being maximised
    rather than on x, whose scale is the problem's. Starting from a fixed
    `x0` (zero for both the GP and the RVM) makes the result deterministic.

    Returns a ``NewtonResult``; warns with ``ConvergenceWarning`` if
    ``max_iter`` steps were not enough.
    """
    x = np.asarray(x0, dtype=float)
    value = objective(x)
    _check_finite_step(value, "the objective at the start", x)
    for n_iter in range(1, max_iter + 1):
        direction = newton_step(x) - x
        _check_finite_step(direction, f"the Newton step {n_iter}", x)
        step = 1.0
        for _ in range(MAX_HALVINGS):
            candidate = x + step * direction
            candidate_value = objective(candidate)
            if candidate_value >= value - ROUNDING * max(1.0, abs(value)):
                break
            step *= 0.5
        else:
            # No step size ascends: x is the maximiser to rounding precision.
            return NewtonResult(x, value, n_iter, True)
        gain = candidate_value - value
        x, value = candidate, candidate_value
        if gain <= tol * max(1.0, abs(value)):
            return NewtonResult(x, value, n_iter, True)
    warnings.warn(
        f"Newton's method did not converge in max_iter={max_iter} steps (last gain "
        f"{gain:.3g}); raise max_iter.",
        ConvergenceWarning,
        stacklevel=2,
    )
    return NewtonResult(x, value, max_iter, False)


def _check_finite_step(value, what, x):
    """Stop at once on a non-finite objective or step: NaN compares false with
    everything, so the halving loop would take it for convergence at x."""
    if not np.all(np.isfinite(value)):
        raise NonFiniteError(
            f"Newton's method met a non-finite value in {what} (at a point with "
            f"max |x| = {float(np.max(np.abs(x), initial=0.0)):.3g}): the kernel "
            "matrix or the design matrix holds NaN or infinity, or overflows. Scale X "
            "or change the kernel's parameters."
        )
