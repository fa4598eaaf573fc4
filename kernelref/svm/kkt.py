"""The Karush–Kuhn–Tucker conditions of (svm-generic-qp), measured per variable.

With G = Qα + p, b = −ρ and r the multiplier of the ν forms' second equality
(0 otherwise), write g_t = G_t − ρ y_t − r: for C-SVC g_t = t_t y(x_t) − 1. The
conditions of the book (label ``svm-kkt``), each as a nonnegative violation:

- dual feasibility: 0 ≤ α_t ≤ C_t;
- primal feasibility: a variable below its bound has no slack, ξ_t = 0, so g_t ≥ 0;
- complementary slackness: α_t > 0 only on or inside the margin, g_t ≤ 0;
- the equalities yᵀα = Δ (Σ aₙtₙ = 0 for C-SVC) and, for the ν forms, eᵀα = Δ₂;
- stationarity: the model's decision values equal Σ_s y_s α_s k(x_s, x) − ρ.

SMO's stop m(α) − M(α) < tol bounds the first three by tol. The duality gap is
P(w, b, ξ) − D(α) ≥ 0 with P = ½‖w‖² + Σ C_t ξ_t − ρΔ − rΔ₂, ξ_t = max(0, −g_t)
and D = −f(α) (label ``svm-duality-gap``); it is 0 exactly at the optimum.
"""

from dataclasses import dataclass

import numpy as np

from kernelref._validation import check_samples

__all__ = ["DualProblem", "KKTReport", "gram_product", "kkt_report", "qp_kkt"]


@dataclass
class KKTReport:
    """Per-variable violations, the largest of all, and the duality gap."""

    primal_feasibility: np.ndarray
    dual_feasibility: np.ndarray
    complementary_slackness: np.ndarray
    stationarity: np.ndarray
    equality: float
    primal_objective: float
    dual_objective: float

    @property
    def duality_gap(self):
        return self.primal_objective - self.dual_objective

    @property
    def max_violation(self):
        arrays = (
            self.primal_feasibility,
            self.dual_feasibility,
            self.complementary_slackness,
            self.stationarity,
        )
        return float(max([self.equality] + [a.max(initial=0.0) for a in arrays]))


@dataclass
class DualProblem:
    """One binary machine's QP (svm-generic-qp) and the solution a fitted model holds:
    α (unscaled for ν-SVC), ρ, r, and ``scale``, the factor that turns the model's
    decision values into those of the QP (r for ν-SVC, whose model is α/r, ρ/r)."""

    qp: object
    alpha: np.ndarray
    rho: float
    r: float = 0.0
    scale: float = 1.0


#: α read back from ``dual_coef_`` (α/r for ν-SVC, rescaled here by r) carries a
#: few ulps of rounding; within this relative distance of a bound it is on the bound.
BOUND_RTOL = 1e-12


def _snap_to_bounds(alpha, C):
    scale = np.where(np.isfinite(C), C, 1.0)
    alpha = np.where(np.abs(alpha) <= BOUND_RTOL * scale, 0.0, alpha)
    return np.where(np.abs(alpha - C) <= BOUND_RTOL * scale, C, alpha)


def qp_kkt(qp, K, alpha, rho, r=0.0, decision=None):
    """KKTReport of (α, ρ, r) for `qp`; `decision` the model's decision values on the
    samples of the variables (libsvm's sign), for the stationarity check."""
    alpha = _snap_to_bounds(alpha, qp.C)
    coef = np.bincount(qp.src, weights=qp.y * alpha, minlength=K.shape[0])
    return _report(qp, alpha, rho, r, K @ coef, decision)


def _report(qp, alpha, rho, r, K_coef, decision):
    """The report from K_coef = K @ Σ_t y_t α_t e_src(t), the only use of the Gram
    matrix: G = p + y ∘ K_coef[src] (label ``svm-gradient``)."""
    alpha = _snap_to_bounds(alpha, qp.C)
    G = qp.p + qp.y * K_coef[qp.src]
    g = G - rho * qp.y - r
    below, above = alpha < qp.C, alpha > 0
    primal = np.where(below, np.maximum(-g, 0.0), 0.0)
    slack = np.where(above, np.maximum(g, 0.0), 0.0)
    box = np.maximum(np.maximum(-alpha, alpha - qp.C), 0.0)
    delta = qp.y @ qp.alpha0
    equality = abs(qp.y @ alpha - delta)
    delta2 = qp.alpha0.sum() if qp.nu else 0.0
    if qp.nu:
        equality = max(equality, abs(alpha.sum() - delta2))
    f_model = K_coef[qp.src] - rho
    stationarity = (
        np.zeros(len(alpha)) if decision is None else np.abs(decision - f_model)
    )
    xi = np.maximum(-g, 0.0)
    penalty = np.where(np.isfinite(qp.C), qp.C * xi, np.where(xi > 0, np.inf, 0.0))
    quad = alpha @ (G - qp.p)
    f = 0.5 * quad + qp.p @ alpha
    primal_objective = 0.5 * quad + penalty.sum() - rho * delta - r * delta2
    return KKTReport(
        primal,
        box,
        slack,
        stationarity,
        float(equality),
        float(primal_objective),
        float(-f),
    )


#: Rows of the Gram matrix formed at a time by ``gram_product``.
PRODUCT_ROWS = 1024


def gram_product(kernel, X):
    """coef ↦ K @ coef for K = k(X, X), formed ``PRODUCT_ROWS`` rows at a time, so
    no N × N array is ever held; ``kernel="precomputed"`` takes X as K."""

    def product(coef):
        if isinstance(kernel, str):
            return X @ coef
        out = np.empty((X.shape[0],) + coef.shape[1:])
        used = np.flatnonzero(np.any(coef.reshape(len(coef), -1) != 0, axis=1))
        for start in range(0, X.shape[0], PRODUCT_ROWS):
            rows = slice(start, start + PRODUCT_ROWS)
            out[rows] = kernel(X[rows], X[used]) @ coef[used]
        return out

    return product


def kkt_report(
    estimator, X, y=None, sample_weight=None, *, product=None, decision=None
):
    """KKTReport of a fitted SVC, NuSVC, SVR, NuSVR or OneClassSVM on its training data.

    The estimator provides two public methods: ``dual_problems(y, sample_weight)``,
    the QP of each binary machine with the (α, ρ, r) read back from ``dual_coef_``,
    ``support_`` and ``intercept_``, and ``pairwise_decision(X)``, its decision
    values in libsvm's sign. The Gram matrix enters only through
    ``product(coef) = K @ coef`` for an (N, n_machines) matrix; the default forms
    K in row blocks in memory, and a backend passes its own (computed on a
    cluster), with `decision` computed there too. Multiclass machines give one
    report per pair; the returned one holds the largest violation and gap, with
    ``pair_reports`` listing all.
    """
    kernel = estimator.kernel_
    X = check_samples(X, kernel, "X", accept_sparse="kernel")
    problems_ = estimator.dual_problems(y, sample_weight)
    n = X.shape[0]
    coef = np.column_stack(
        [
            np.bincount(
                d.qp.src, weights=d.qp.y * _snap_to_bounds(d.alpha, d.qp.C), minlength=n
            )
            for d in problems_
        ]
    )
    K_coef = (product or gram_product(estimator.kernel_, X))(coef)
    if decision is None:
        decision = estimator.pairwise_decision(X)
    reports = [
        _report(
            d.qp, d.alpha, d.rho, d.r, K_coef[:, p], d.scale * decision[d.qp.src, p]
        )
        for p, d in enumerate(problems_)
    ]
    worst = max(reports, key=lambda rep: rep.max_violation)
    worst.pair_reports = reports
    return worst
