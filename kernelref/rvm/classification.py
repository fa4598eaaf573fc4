"""The relevance vector classifier: the Laplace approximation and its α loops.

Binary labels t_n ∈ {0, 1} pass through the logistic sigmoid, y_n = σ(a_n),
a = Φw, under the ARD prior w_i ~ N(0, α_i⁻¹) of the regression model
(Tipping 2001, §4; PRML §7.2.3). The posterior over w is not Gaussian; the
Laplace approximation puts a Gaussian at its mode w*:

    Ψ(w) = log p(t | w) − ½wᵀAw                           (label ``rvc-log-posterior``)
    ∇Ψ = Φᵀ(t − y) − Aw,   −∇∇Ψ = ΦᵀBΦ + A,  B = diag(y_n(1 − y_n))
    w_new = ΣΦᵀBt̂,  t̂ = Φw + B⁻¹(t − y)                   (label ``rvc-irls``)
    Σ = (ΦᵀBΦ + A)⁻¹ at w*                                 (label ``rvc-sigma``)
    log p(t | α) ≈ Ψ(w*) + ½Σ log α_i − ½ log|ΦᵀBΦ + A|    (label ``rvc-laplace-evidence``)

At the mode ∇Ψ = 0, that is w* = A⁻¹Φᵀ(t − y): a fixed-point condition, since y
depends on w* (seed 000 writes it as an explicit formula; PRML errata, 7.112–7.119).

The IRLS step is the posterior mean of a Gaussian regression of the linearised
target t̂ with noise precision B. Whitening by B^½ — Φ̃ = B^½Φ, t̃ = B^½t̂ — makes
it the regression model of ``kernelref.rvm.design`` with β = 1, so the regression
code serves unchanged: ``posterior`` is the IRLS step and Σ; the α updates act on
this Gaussian approximation, re-made at each new mode. Everything here takes the
likelihood as an argument (`BERNOULLI`, or ``kernelref.rvm.softmax.Softmax``
on the expanded design), so the multiclass model runs through the same code.
"""

import warnings
from collections import namedtuple

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve

from kernelref._validation import (
    check_classification_targets,
    check_is_fitted,
    check_n_features,
    check_samples,
    check_training_samples,
    record_n_features,
)
from kernelref.base import BaseEstimator, ClassifierMixin
from kernelref.exceptions import ConvergenceWarning
from kernelref.gp_classify import probit_log_probability, probit_probability
from kernelref.kernels import make_kernel
from kernelref.laplace import damped_newton, likelihood_curvature, log_likelihood
from kernelref.rvm.design import (
    check_evidence_settings,
    column_scales,
    design_matrix,
    posterior,
)
from kernelref.rvm.fast import (
    ALIGNMENT_MAX,
    SPAN_RESIDUAL_MIN,
    FastLoop,
    on_user_scale,
    run_to_end,
    unit_columns,
)
from kernelref.rvm.reestimate import (
    GAMMA_MIN,
    gamma_factors,
    initial_alpha,
    reestimate_alpha,
)
from kernelref.rvm.regression import ALPHA_MAX
from kernelref.rvm.softmax import (
    Softmax,
    expanded_design,
    latent_moments,
    moderated_softmax,
    one_hot,
)

__all__ = [
    "BERNOULLI",
    "Bernoulli",
    "ClassifierFit",
    "DENSE_START_SIZE",
    "LOOSE_TOL",
    "START_NAMES",
    "START_REESTIMATIONS",
    "STARTS",
    "TIE",
    "TOL_FRACTION",
    "dense_start",
    "extrapolated",
    "ACCELERATE_MAX",
    "ACCELERATE_RATE",
    "fast_path",
    "log_posterior",
    "posterior_mean",
    "reestimated_start",
    "dense_approximation",
    "Laplace",
    "MAX_NEWTON_ITER",
    "RVC",
    "STALL_PATIENCE",
    "fast_classifier",
    "laplace_posterior",
    "laplace_log_evidence",
    "reestimate_classifier",
]

#: A path of the fast classifier stops, unconverged, after this many Gaussian
#: approximations that neither raise its highest evidence nor move the α less than
#: the one before: the model is cycling (`fast_path`).
STALL_PATIENCE = 20

#: Where `fast_classifier` can start its paths, and where it does by default.
START_NAMES = ("empty", "dense", "reestimated")
STARTS = ("empty", "reestimated")

#: The dense start keeps at most this many basis functions (`dense_start`).
DENSE_START_SIZE = 50
#: Distances within this relative margin of the largest count as tied.
TIE = 1e-6

#: Re-estimations from the dense start before the 'reestimated' path's
#: sequential algorithm (`reestimated_start`).
START_REESTIMATIONS = 10

#: The sequential algorithm's tolerance on log α on the first approximations of
#: a path, while its model changes: the next approximation moves the α anyway.
#: Once the model stays, `TOL_FRACTION` of the largest change of log α between
#: the last two approximations (at most `TOL_FRACTION` times the last
#: tolerance), down to ``tol`` and never up again.
LOOSE_TOL = 1.0
TOL_FRACTION = 0.1

#: A path whose model stays and whose last step in log α is a multiple ρ of the
#: one before with |ρ| at least this (slow convergence, or an oscillation) is
#: extrapolated (`extrapolated`), by at most ACCELERATE_MAX in each log α.
ACCELERATE_RATE = 0.5
ACCELERATE_MAX = 3.0

#: Newton steps per mode at most. From a warm start a mode takes a handful;
#: from w = 0 on separable data, where small α lets w grow large, a few dozen.
MAX_NEWTON_ITER = 100

#: The Laplace approximation at the mode: ``mu`` = w*, ``Sigma`` and the lower
#: Cholesky factor ``L`` of Σ⁻¹ = ΦᵀBΦ + A, and the approximate log evidence.
Laplace = namedtuple("Laplace", "mu Sigma L log_evidence n_iter")

#: The result of an α loop: ``keep`` indexes the columns of Φ in the model;
#: ``alpha`` and the Laplace fields belong to them; ``evidence`` is the Laplace
#: log evidence after each iteration; ``n_loop_iter`` counts the iterations of
#: the sequential algorithm over all approximations (0 for re-estimation).
ClassifierFit = namedtuple(
    "ClassifierFit",
    "keep alpha mu Sigma log_evidence evidence n_iter converged n_loop_iter",
    defaults=(0,),
)


class Bernoulli:
    """The logistic likelihood of binary labels, for the routines below."""

    @staticmethod
    def log_likelihood(a, t):
        """Σ log σ((2t − 1)a) (``kernelref.laplace.log_likelihood``)."""
        return log_likelihood(a, t)

    @staticmethod
    def whiten(Phi, a, t):
        """Φ̃ = B^½Φ and t̃ = B^½t̂ = B^½a + B^(−½)(t − y) (label
        ``rvc-linearised-target``).

        t̂ overflows where y(1 − y) underflows; its whitened residual does not:
        B^(−½)(t − y) = (2t − 1)exp(−(2t − 1)a/2), since (1 − σ(a))/√(σ(a)σ(−a))
        = √(σ(−a)/σ(a)) = e^(−a/2), and likewise for t = 0.
        """
        B_sqrt, t_tilde = Bernoulli.row_weights(a, t)
        return B_sqrt[:, None] * Phi, t_tilde

    @staticmethod
    def row_weights(a, t):
        """B^½ and t̃ = B^½t̂ of `whiten`: Φ̃ = diag(B^½)Φ scales Φ's rows."""
        B_sqrt = np.sqrt(likelihood_curvature(a))
        sign = 2.0 * t - 1.0
        return B_sqrt, B_sqrt * a + sign * np.exp(-0.5 * sign * a)


BERNOULLI = Bernoulli()


def laplace_log_evidence(Psi, alpha, L):
    """Ψ(w*) + ½Σ log α_i − ½ log|Σ⁻¹|, log|Σ⁻¹| = 2Σ log L_ii (label
    ``rvc-laplace-evidence``)."""
    return Psi + 0.5 * np.sum(np.log(alpha)) - np.sum(np.log(np.diag(L)))


def log_posterior(Phi, t, alpha, w, likelihood=BERNOULLI):
    """Ψ(w) = log p(t | w) − ½wᵀAw (label ``rvc-log-posterior``)."""
    return likelihood.log_likelihood(Phi @ w, t) - 0.5 * w @ (alpha * w)


def laplace_posterior(
    Phi, t, alpha, w0=None, likelihood=BERNOULLI, *, max_iter=MAX_NEWTON_ITER
):
    """The mode w*, Σ and the Laplace log evidence for the columns in `Phi`.

    Implements (rvc-irls) by ``kernelref.laplace.damped_newton`` from `w0`
    (w = 0 unless an α loop warm-starts it at the previous mode: deterministic
    either way), then (rvc-sigma) and (rvc-laplace-evidence). Each Newton
    iterate ΣΦᵀBt̂ is ``design.posterior``'s mean for the whitened problem.
    """

    def objective(w):
        return log_posterior(Phi, t, alpha, w, likelihood)

    def newton_step(w):
        return posterior_mean(*likelihood.whiten(Phi, Phi @ w, t), alpha)

    w0 = np.zeros(Phi.shape[1]) if w0 is None else w0
    result = damped_newton(objective, newton_step, w0, max_iter=max_iter)
    post = posterior(*likelihood.whiten(Phi, Phi @ result.x, t), alpha, 1.0)
    return Laplace(
        result.x,
        post.Sigma,
        post.L,
        laplace_log_evidence(result.value, alpha, post.L),
        result.n_iter,
    )


def posterior_mean(Phi_tilde, t_tilde, alpha):
    """The IRLS iterate ΣΦ̃ᵀt̃ of (rvc-irls) alone: ``design.posterior``'s mean
    (β = 1) by the same Cholesky factor, without Σ and the evidence, which a
    Newton step does not use."""
    precision = Phi_tilde.T @ Phi_tilde
    precision.flat[:: len(alpha) + 1] += alpha
    try:
        L, _ = cho_factor(precision, lower=True, check_finite=False)
    except LinAlgError:  # design.posterior's error, with its advice
        return posterior(Phi_tilde, t_tilde, alpha, 1.0).mu
    return cho_solve((np.tril(L), True), Phi_tilde.T @ t_tilde, check_finite=False)


def reestimate_classifier(
    Phi,
    t,
    alpha,
    likelihood=BERNOULLI,
    *,
    max_iter=10000,
    tol=1e-3,
    alpha_max=ALPHA_MAX,
    w0=None,
):
    """Tipping's loop: the mode for the current α, then α_i ← γ_i/μ_i² on the
    Gaussian approximation there, pruning as ``kernelref.rvm.reestimate`` does.

    Implements (rvc-irls), (rvc-sigma), (rvm-gamma) and (rvm-reestimate-alpha).
    Holding the mode fixed, these updates are the stationarity conditions of
    (rvc-laplace-evidence) in α; the dependence of B on w* through α is left out,
    as in Tipping 2001. Stops when nothing was pruned and every log α_i changed by
    less than `tol`. ``w0`` starts the first mode's Newton iterations (w = 0).
    """
    M = Phi.shape[1]
    keep = np.arange(M)
    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), (M,)).copy()
    w = np.zeros(M) if w0 is None else np.array(w0, dtype=float)
    evidence = []
    converged = False
    for n_iter in range(1, max_iter + 1):
        mode = laplace_posterior(Phi[:, keep], t, alpha, w, likelihood)
        evidence.append(mode.log_evidence)
        gamma = gamma_factors(alpha, np.diag(mode.Sigma))
        new_alpha = reestimate_alpha(gamma, mode.mu)
        stay = (new_alpha < alpha_max) & (gamma > GAMMA_MIN) & np.isfinite(new_alpha)
        if not stay.any():
            raise RuntimeError(
                "every basis function was pruned: the evidence prefers a model that "
                "ignores the inputs. Check the kernel width (gamma)."
            )
        change = np.max(np.abs(np.log(new_alpha[stay] / alpha[stay])))
        alpha, keep, w = new_alpha[stay], keep[stay], mode.mu[stay]
        if stay.all() and change < tol:
            converged = True
            break
    mode = laplace_posterior(Phi[:, keep], t, alpha, w, likelihood)
    return ClassifierFit(
        keep,
        alpha,
        mode.mu,
        mode.Sigma,
        mode.log_evidence,
        np.array(evidence + [mode.log_evidence]),
        n_iter,
        converged,
    )


def dense_approximation(Phi, a, t, likelihood):
    """Φ̃ = B^½Φ at the latent values a on columns of unit norm, their norms, and
    t̃ (label ``rvc-linearised-target``): the problem `fast_classifier` runs the
    sequential algorithm on."""
    Phi_tilde, t_tilde = likelihood.whiten(Phi, a, t)
    Phi_unit, scales = unit_columns(Phi_tilde)
    return Phi_unit, scales, t_tilde


def fast_classifier(
    Phi,
    t,
    likelihood=BERNOULLI,
    *,
    max_iter=1000,
    tol=1e-3,
    alignment_max=ALIGNMENT_MAX,
    approximation=None,
    drive=run_to_end,
    starts=STARTS,
):
    """Tipping & Faul's fast algorithm on the Gaussian approximation (their §4),
    from each of ``starts`` (`fast_path`), the highest Laplace evidence kept.

    The Laplace evidence has many local maxima, and the α loops reach different
    ones from different starts. 'empty' builds the model up from the basis
    function most aligned with the target, as the sequential algorithm does on
    regression; 'dense' starts, as re-estimation does, from many basis functions
    with small α (`dense_start`); 'reestimated' from there after
    `START_REESTIMATIONS` iterations of re-estimation (`reestimated_start`),
    whose pruning while the mode moves is what finds re-estimation's better
    maxima. The default runs 'empty' and 'reestimated' (the book's RVC chapter
    and ``benchmarks/bench_rvc.py`` measure the choice). ``n_iter`` and
    ``n_loop_iter`` count the α iterations and the sequential algorithm's
    iterations of every path.

    Φ is used only through its columns, ``approximation`` (`dense_approximation`
    by default) and ``drive`` (`kernelref.rvm.fast.run_to_end`, given each
    approximation's `FastLoop` and a name): the Dask backend passes a streamed
    design and its own two.
    """
    unknown = set(starts) - set(START_NAMES)
    if not starts or unknown:
        raise ValueError(
            f"starts must be a nonempty sequence of {START_NAMES}; got {starts!r}."
        )
    dense = None if set(starts) == {"empty"} else dense_start(Phi, t, likelihood)
    fits, n_iter = [], 0
    for start in starts:
        alpha, w = (None, None) if start == "empty" else dense
        if start == "reestimated":
            alpha, w, n_reestimations = reestimated_start(
                Phi, t, likelihood, alpha, w, tol=tol
            )
            n_iter += n_reestimations
            if alpha is None:  # every basis function pruned: no path from here,
                if fits or start != starts[-1]:  # unless no other path is left
                    continue
                start = "empty"
        fit = fast_path(
            Phi,
            t,
            likelihood,
            alpha,
            w,
            max_iter=max_iter,
            tol=tol,
            alignment_max=alignment_max,
            approximation=approximation,
            drive=drive,
            name=f"{start}-",
        )
        n_iter += fit.n_iter
        fits.append(fit)
    best = max(fits, key=lambda fit: fit.log_evidence)
    return best._replace(
        n_iter=n_iter, n_loop_iter=sum(fit.n_loop_iter for fit in fits)
    )


def dense_start(Phi, t, likelihood):
    """α and the mode of re-estimation's start (α_i = 1/N², `initial_alpha`) on
    at most `DENSE_START_SIZE` basis functions, chosen among evenly spaced
    columns of Φ as a pivoted QR would: next the unit column farthest from the
    span of those chosen, while that squared distance is above
    `SPAN_RESIDUAL_MIN` (the sequential algorithm's test for a new direction).

    Of distances within a factor 1 − `TIE` of the largest the first column is
    taken: a pivoted QR takes the largest, and where several are nearly equal
    (many, on a dense sample) designs whose entries round differently (the Dask
    backend's) chose differently."""
    P = Phi.shape[1]
    candidates = np.unique(
        np.linspace(0, P - 1, min(P, 4 * DENSE_START_SIZE)).astype(int)
    )
    R, _ = unit_columns(Phi[:, candidates])  # the parts outside the chosen span
    keep = []
    for _ in range(min(DENSE_START_SIZE, len(candidates))):
        distance = np.einsum("nj,nj->j", R, R)
        if distance.max() <= SPAN_RESIDUAL_MIN:
            break
        j = int(np.argmax(distance >= (1 - TIE) * distance.max()))
        keep.append(candidates[j])
        q = R[:, j] / np.sqrt(distance[j])
        R = R - np.outer(q, q @ R)  # modified Gram–Schmidt
    keep = np.sort(keep)
    alpha = np.full(P, np.inf)
    alpha[keep] = initial_alpha(len(t))
    mode = laplace_posterior(Phi[:, keep], t, alpha[keep], None, likelihood)
    w = np.zeros(P)
    w[keep] = mode.mu
    return alpha, w


def reestimated_start(Phi, t, likelihood, alpha, w, *, tol=1e-3):
    """`START_REESTIMATIONS` iterations of `reestimate_classifier` on the basis
    functions in the model of ``alpha`` (from its mode ``w``): α (``np.inf``
    outside the model), the last mode, and the iterations run; α = None if
    re-estimation pruned every basis function."""
    keep = np.flatnonzero(np.isfinite(alpha))
    try:
        fit = reestimate_classifier(
            Phi[:, keep],
            t,
            alpha[keep],
            likelihood,
            max_iter=START_REESTIMATIONS,
            tol=tol,
            w0=w[keep],
        )
    except RuntimeError:  # every basis function pruned: no start
        return None, None, START_REESTIMATIONS
    alpha, w = np.full(len(alpha), np.inf), np.zeros(len(alpha))
    alpha[keep[fit.keep]], w[keep[fit.keep]] = fit.alpha, fit.mu
    return alpha, w, fit.n_iter


def fast_path(
    Phi,
    t,
    likelihood,
    alpha=None,
    w=None,
    *,
    max_iter=1000,
    tol=1e-3,
    alignment_max=ALIGNMENT_MAX,
    approximation=None,
    drive=run_to_end,
    name="",
):
    """The fast algorithm from one start: α (``np.inf`` outside the model; None:
    empty) and the weights w of the first approximation (None: w = 0).

    Each iteration whitens the approximation at the current mode (label
    ``rvc-linearised-target``), runs ``kernelref.rvm.fast``'s additions,
    re-estimations and deletions on it with the noise precision fixed at 1
    (B is inside Φ̃), warm-started from the current model, and then finds the
    new mode (rvc-irls). SparseBayes re-finds the mode after every single
    action; running the sequential algorithm on each approximation, to a
    tolerance loose while the model changes (`LOOSE_TOL`, `TOL_FRACTION`),
    reaches the same kind of fixed point — a mode whose α maximise the evidence
    of the approximation made there — with fewer Newton solves. Where the α
    converge slowly or oscillate, the next approximation is made at their
    extrapolated limit (`extrapolated`). Converged when an approximation run at
    ``tol`` changed neither the model nor any log α_i by ``tol`` or more.

    The loop need not reach a fixed point: a basis function worth adding under
    one approximation can be worth deleting under the next, and the model then
    cycles. When `STALL_PATIENCE` approximations have neither raised the highest
    Laplace evidence seen nor moved the α less than the one before (a model
    settling onto its fixed point can lose evidence on the way), the loop stops,
    unconverged, and returns the fit with that evidence.
    """
    approximation = dense_approximation if approximation is None else approximation
    P = Phi.shape[1]
    w = np.zeros(P) if w is None else w
    active = (
        np.zeros(0, dtype=int) if alpha is None else np.flatnonzero(np.isfinite(alpha))
    )
    evidence = []
    best, since_best, n_loop_iter = None, 0, 0
    loop_tol, last_change, last_step = max(tol, LOOSE_TOL), np.inf, None
    for n_iter in range(1, max_iter + 1):
        a = Phi[:, active] @ w[active]
        Phi_unit, scales, t_tilde = approximation(Phi, a, t, likelihood)
        unit_alpha = None
        if alpha is not None:  # a unit column φ/c carries the weight c·w: α/c²
            unit_alpha = alpha / np.where(scales > 0, scales, 1.0) ** 2
        loop = FastLoop(
            Phi_unit,
            scales > 0,
            t_tilde,
            beta=1.0,
            update_beta=False,
            alpha=unit_alpha,
            tol=loop_tol,
            alignment_max=alignment_max,
        )
        step = on_user_scale(drive(loop, f"{name}approximation-{n_iter}"), scales)
        n_loop_iter += step.n_iter
        active = step.active
        # Newton starts from the approximation's weights μ (one IRLS step ahead
        # of the last mode) or, where they fit worse, the last mode: μ of an
        # approximation far from the new mode can be wild (huge weights at α
        # found to a loose tolerance).
        Phi_active = Phi[:, active]
        starts = (step.mu, w[active])
        w0 = max(
            starts,
            key=lambda v: log_posterior(Phi_active, t, step.alpha, v, likelihood),
        )
        mode = laplace_posterior(Phi_active, t, step.alpha, w0, likelihood)
        evidence.append(mode.log_evidence)
        new_alpha = np.full(P, np.inf)
        new_alpha[step.active] = step.alpha
        w = np.zeros(P)
        w[step.active] = mode.mu
        change, step_log = np.inf, None
        if alpha is not None and np.array_equal(
            np.isfinite(alpha), np.isfinite(new_alpha)
        ):
            step_log = np.log(new_alpha[active] / alpha[active])
            change = np.max(np.abs(step_log))
        settled = loop_tol <= tol and change < tol
        if not settled and step_log is not None and last_step is not None:
            accelerated = extrapolated(
                Phi_active, t, likelihood, step.alpha, mode, step_log, last_step
            )
            if accelerated is not None:
                mode, step = accelerated, step._replace(alpha=accelerated.alpha)
                new_alpha[active], w[active] = step.alpha, mode.mu
                evidence[-1], step_log = mode.log_evidence, None
        last_step = step_log
        # The next approximation's α need be found only to a fraction of how far
        # the approximations still move them: never looser than before, and
        # tighter by at most TOL_FRACTION (an approximation that changed nothing
        # at a loose tolerance says little about how settled the α are).
        loop_tol = max(tol, min(loop_tol, TOL_FRACTION * max(change, loop_tol)))
        alpha = new_alpha
        fit = ClassifierFit(
            step.active,
            step.alpha,
            mode.mu,
            mode.Sigma,
            mode.log_evidence,
            None,
            n_iter,
            settled,
            n_loop_iter,
        )
        if settled:
            return fit._replace(evidence=np.array(evidence))
        if best is None or fit.log_evidence > best.log_evidence:
            best, since_best = fit, 0
        elif not change < last_change:  # not a model settling: a cycle
            since_best += 1
            if since_best >= STALL_PATIENCE:
                break
        last_change = change
    return best._replace(
        evidence=np.array(evidence), n_iter=n_iter, n_loop_iter=n_loop_iter
    )


def extrapolated(Phi, t, likelihood, alpha, mode, step, last_step):
    """Aitken's extrapolation of the α of a path whose model stays: where the
    last step in log α, ``step``, is a multiple ρ of the one before,
    ``last_step`` (|ρ| at least `ACCELERATE_RATE`: slow linear convergence, or
    for ρ < 0 an oscillation about the fixed point), the geometric series of the
    steps to come sums to step·ρ/(1 − ρ). Returns the Laplace approximation
    there (a `Laplace` with its ``alpha``), or None."""
    size = last_step @ last_step
    rho = (step @ last_step) / size if size > 0 else 0.0
    if not (ACCELERATE_RATE <= abs(rho) and -2 < rho < 1):
        return None
    jump = np.clip(step * rho / (1 - rho), -ACCELERATE_MAX, ACCELERATE_MAX)
    alpha = alpha * np.exp(jump)
    ahead = laplace_posterior(Phi, t, alpha, mode.mu, likelihood)
    return AcceleratedLaplace(*ahead, alpha)


#: A `Laplace` approximation at extrapolated α (`extrapolated`).
AcceleratedLaplace = namedtuple("AcceleratedLaplace", Laplace._fields + ("alpha",))


METHODS = ("fast", "reestimate")
MULTI_CLASS = ("softmax", "ovr")


class RVC(ClassifierMixin, BaseEstimator):
    """Relevance vector classification, binary and multiclass.

    Parameters
    ----------
    kernel : str or Kernel
        'rbf', 'linear', 'poly', 'laplacian', 'sigmoid', 'precomputed' or a
        ``kernelref.kernels.Kernel``; the basis functions are k(·, x_n).
    gamma, degree, coef0
        Parameters of the named kernels; ``gamma=None`` means 1/n_features.
    bias : bool
        Add the constant basis function φ_0 = 1 with its own α_0.
    method : {'fast', 'reestimate'}
        Tipping & Faul's sequential algorithm on the Gaussian approximation
        (`fast_classifier`: two paths, from one basis function and from at most
        50 after ten re-estimations, the higher Laplace evidence kept), or
        Tipping's re-estimation
        of all α after every mode (`reestimate_classifier`, from α_i = 1/N² on
        every basis function, as in Tipping's SB1). Both reach nearby Laplace
        evidences (local maxima, often different ones), the fast one at a
        fraction of the cost.
    multi_class : {'softmax', 'ovr'}
        With more than two classes: the softmax model (``kernelref.rvm.softmax``)
        with one α per weight and the MK×MK Hessian, or K binary classifiers of
        one class against the rest, their probabilities normalised. Ignored
        for two classes, where both are the binary model.
    max_iter : int
        α iterations at most: re-estimations, or Gaussian approximations of each
        fast path (each runs the sequential algorithm to its tolerance).
    tol : float
        Converged when every log α_i changes by less than this (SparseBayes's
        MinDeltaLogAlpha, 1e-3).
    alpha_max : float
        Re-estimation prunes α_i above this (``kernelref.rvm.regression.ALPHA_MAX``);
        the fast path prunes exactly, when q_i² ≤ s_i.
    alignment_max : float
        For 'fast': SparseBayes's alignment test, as for ``RVR``; 1.0 turns it
        off, which a kernel much wider than the data may need (all its basis
        functions are then nearly parallel).

    Attributes
    ----------
    classes_ : ndarray
        The sorted labels; with two, ``classes_[1]`` is the class with t = 1.
    relevance_, relevance_vectors_ : ndarray
        Indices of the training points whose basis functions are kept (for
        'ovr', kept by any of the binary models), and those points.
    bias_used_ : bool
        Whether the bias basis function survived (any class's, for multiclass).
    alpha_, mu_, Sigma_ : ndarray
        Binary: α, w* and Σ of the kept weights, bias first. Softmax: alpha_ and
        mu_ are (M, K), np.inf and 0 where a weight was pruned, ``kept_weights_``
        is the (M, K) mask of the others and Sigma_ their covariance in its
        row-major order. 'ovr': lists, one entry per class (also ``estimators_``).
    log_evidence_ : float
        The Laplace approximation of log p(t | α) (per class for 'ovr').
    n_iter_, converged_ : int, bool
        Iterations (for 'fast': of all its paths) and whether the kept fit
        converged.
    n_loop_iter_ : int
        For 'fast': iterations of the sequential algorithm over all Gaussian
        approximations (0 for 'reestimate'; per class for 'ovr').
    evidence_ : ndarray
        The Laplace log evidence after each iteration.
    """

    def __init__(
        self,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        bias=True,
        method="fast",
        multi_class="softmax",
        max_iter=10000,
        tol=1e-3,
        alpha_max=ALPHA_MAX,
        alignment_max=ALIGNMENT_MAX,
    ):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.bias = bias
        self.method = method
        self.multi_class = multi_class
        self.max_iter = max_iter
        self.tol = tol
        self.alpha_max = alpha_max
        self.alignment_max = alignment_max

    def _validate(self, X, y):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {self.method!r}.")
        if self.multi_class not in MULTI_CLASS:
            raise ValueError(
                f"multi_class must be one of {MULTI_CLASS}; got {self.multi_class!r}."
            )
        check_evidence_settings(self)
        X = check_training_samples(X, self.kernel)
        classes, y_index = check_classification_targets(y, X.shape[0], "y")
        kernel = make_kernel(self.kernel, X, self.gamma, self.degree, self.coef0)
        return X, classes, y_index, kernel

    def fit(self, X, y):
        """Find the mode and the α that maximise the Laplace evidence; keep the
        relevance vectors."""
        X, classes, y_index, kernel = self._validate(X, y)
        for name in [name for name in vars(self) if name.endswith("_")]:
            delattr(self, name)  # nothing stale from an earlier fit
        Phi, usable = self._design(kernel, X)
        self.classes_, self.kernel_ = classes, kernel
        record_n_features(self, X)
        self._X = X
        K = len(classes)
        if K == 2:
            self._fit_binary(Phi, usable, y_index.astype(float))
        elif self.multi_class == "ovr":
            self.estimators_ = []
            for k in range(K):
                binary = type(self)(**self.get_params(deep=False))
                binary._run_name = f"class-{k}-"  # one machine per class
                binary.classes_, binary.kernel_ = np.array([0, 1]), kernel
                record_n_features(binary, X)
                binary._X = X
                binary._fit_binary(Phi, usable, (y_index == k).astype(float))
                self.estimators_.append(binary)
            for name in (
                "alpha_",
                "mu_",
                "Sigma_",
                "log_evidence_",
                "n_iter_",
                "converged_",
                "evidence_",
                "n_loop_iter_",
            ):
                setattr(self, name, [getattr(e, name) for e in self.estimators_])
            self.relevance_ = np.unique(
                np.concatenate([e.relevance_ for e in self.estimators_])
            )
            self.bias_used_ = any(e.bias_used_ for e in self.estimators_)
            self.converged_ = all(self.converged_)
            self.relevance_vectors_ = X[self.relevance_]
        else:
            self._fit_softmax(Phi, usable, y_index, K)
        if not self.converged_:
            reason = (
                f"after max_iter={self.max_iter} iterations"
                if self.method != "fast"
                else "with the model cycling between Gaussian approximations, or after "
                f"max_iter={self.max_iter}; the fit with the highest evidence is kept"
            )
            warnings.warn(
                f"RVC(method={self.method!r}) stopped before converging, {reason}. Raise "
                "max_iter or tol, or try method='reestimate'.",
                ConvergenceWarning,
                stacklevel=2,
            )
        return self

    def _design(self, kernel, X):
        """Φ and the indices of its nonzero columns (zero columns carry no
        information). The Dask backend replaces this and the two below."""
        Phi = design_matrix(kernel, X, X, self.bias)
        offset = int(bool(self.bias))
        scales = np.concatenate([np.ones(offset), column_scales(Phi[:, offset:])])
        return Phi, np.flatnonzero(scales > 0)

    def _approximation(self):
        """How `fast_classifier` forms each Gaussian approximation (None: dense)."""
        return None

    def _driver(self, Phi):
        """What runs each approximation's `FastLoop` on Φ (`run_to_end`)."""
        return run_to_end

    def _run(self, Phi, t, likelihood):
        if self.method == "fast":
            result = fast_classifier(
                Phi,
                t,
                likelihood,
                max_iter=self.max_iter,
                tol=self.tol,
                alignment_max=self.alignment_max,
                approximation=self._approximation(),
                drive=self._driver(Phi),
            )
        else:
            result = reestimate_classifier(
                Phi,
                t,
                initial_alpha(len(self._X)),
                likelihood,
                max_iter=self.max_iter,
                tol=self.tol,
                alpha_max=self.alpha_max,
            )
        self.log_evidence_, self.evidence_ = float(result.log_evidence), result.evidence
        self.n_iter_, self.converged_ = result.n_iter, result.converged
        self.n_loop_iter_ = int(result.n_loop_iter)
        return result

    def _keep_basis(self, columns):
        """Record which basis functions (columns of Φ) the model kept."""
        offset = int(bool(self.bias))
        self.bias_used_ = bool(self.bias and columns[0] == 0)
        self.relevance_ = columns[columns >= offset] - offset
        self.relevance_vectors_ = self._X[self.relevance_]

    def _fit_binary(self, Phi, usable, t):
        whole = len(usable) == Phi.shape[1]  # no zero column: Φ as it is
        result = self._run(Phi if whole else Phi[:, usable], t, BERNOULLI)
        self._keep_basis(usable[result.keep])
        self.alpha_, self.mu_, self.Sigma_ = result.alpha, result.mu, result.Sigma

    def _fit_softmax(self, Phi, usable, y_index, K):
        result = self._run(
            expanded_design(Phi[:, usable], K), one_hot(y_index, K), Softmax(K)
        )
        basis = np.unique(
            result.keep // K
        )  # weight m·K + k belongs to basis function m
        self._keep_basis(usable[basis])
        row = np.searchsorted(basis, result.keep // K)
        self.kept_weights_ = np.zeros((len(basis), K), dtype=bool)
        self.kept_weights_[row, result.keep % K] = True
        self.alpha_ = np.full((len(basis), K), np.inf)
        self.alpha_[row, result.keep % K] = result.alpha
        self.mu_ = np.zeros((len(basis), K))
        self.mu_[row, result.keep % K] = result.mu
        self.Sigma_ = result.Sigma

    # -- prediction ------------------------------------------------------------------
    def _basis(self, X):
        """φ(x)ᵀ of the kept basis functions for each row of X."""
        check_is_fitted(self, "log_evidence_")
        X = check_samples(X, self.kernel_, "X")
        if isinstance(self.kernel_, str):
            if X.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"with kernel='precomputed', X must be K(X_test, X_train) with "
                    f"{self.n_features_in_} columns; got {X.shape[1]}."
                )
            return design_matrix(
                self.kernel_, X[:, self.relevance_], None, self.bias_used_
            )
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        return design_matrix(self.kernel_, X, self.relevance_vectors_, self.bias_used_)

    def _multiclass(self):
        check_is_fitted(self, "log_evidence_")
        return len(self.classes_) > 2

    def decision_function(self, X):
        """The mean activation φ(x)ᵀw* (label ``rvc-predictive``); with more than two
        classes one column per class (softmax activations, or the binary ones of 'ovr')."""
        if self._multiclass() and self.multi_class == "ovr":
            return np.column_stack([e.decision_function(X) for e in self.estimators_])
        return self._basis(X) @ self.mu_

    def predict_proba(self, X):
        """Class probabilities, columns in the order of ``classes_``.

        Binary: σ(κ(σ_a²)μ_a) with μ_a = φᵀw*, σ_a² = φᵀΣφ (labels ``rvc-predictive``,
        ``gpc-probit``). Softmax: `moderated_softmax`. 'ovr': each class's binary
        probability, normalised to sum to one.
        """
        if not self._multiclass():
            phi = self._basis(X)
            variance = np.einsum("nm,mk,nk->n", phi, self.Sigma_, phi)
            p = probit_probability(phi @ self.mu_, variance)
            return np.column_stack([1.0 - p, p])
        if self.multi_class == "ovr":
            P = np.column_stack([e.predict_proba(X)[:, 1] for e in self.estimators_])
            return P / P.sum(axis=1, keepdims=True)
        return moderated_softmax(
            *latent_moments(self._basis(X), self.mu_, self.Sigma_, self.kept_weights_)
        )

    def predict_log_proba(self, X):
        """log of ``predict_proba``. Binary: log σ(±κμ_a) directly
        (``probit_log_probability``), finite where a probability rounds to 0 or 1;
        otherwise the log of the probabilities, clipped at the smallest positive float."""
        if not self._multiclass():
            phi = self._basis(X)
            variance = np.einsum("nm,mk,nk->n", phi, self.Sigma_, phi)
            mean = phi @ self.mu_
            return np.column_stack(
                [
                    probit_log_probability(-mean, variance),
                    probit_log_probability(mean, variance),
                ]
            )
        return np.log(np.maximum(self.predict_proba(X), np.finfo(float).tiny))

    def predict(self, X):
        """The most probable class; for two, the sign of the mean activation."""
        if self._multiclass():
            return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
        return self.classes_[(self.decision_function(X) > 0).astype(int)]
