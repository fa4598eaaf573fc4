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

from dataclasses import dataclass, replace

import numpy as np

from kernelref._validation import check_classification_targets, check_samples, check_targets
from kernelref.svm import problems
from kernelref.svm.multiclass import pairs

__all__ = ["KKTReport", "kkt_report", "qp_kkt"]


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
        arrays = (self.primal_feasibility, self.dual_feasibility,
                  self.complementary_slackness, self.stationarity)
        return float(max([self.equality] + [a.max(initial=0.0) for a in arrays]))


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
    G = problems.gradient(qp, K, alpha)
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
    coef = np.bincount(qp.src, weights=qp.y * alpha, minlength=K.shape[0])
    f_model = (K @ coef)[qp.src] - rho
    stationarity = np.zeros(len(alpha)) if decision is None else np.abs(decision - f_model)
    xi = np.maximum(-g, 0.0)
    penalty = np.where(np.isfinite(qp.C), qp.C * xi, np.where(xi > 0, np.inf, 0.0))
    quad = alpha @ (G - qp.p)
    f = 0.5 * quad + qp.p @ alpha
    primal_objective = 0.5 * quad + penalty.sum() - rho * delta - r * delta2
    return KKTReport(primal, box, slack, stationarity, float(equality),
                     float(primal_objective), float(-f))


def _gram(estimator, X):
    if isinstance(estimator.kernel_, str):
        return X
    return estimator.kernel_(X)


def kkt_report(estimator, X, y=None, sample_weight=None):
    """KKTReport of a fitted SVC, NuSVC, SVR, NuSVR or OneClassSVM on its training data.

    α is read back from the public ``dual_coef_``/``support_``, b from ``intercept_``.
    Multiclass machines give one report per pair; the returned one holds the largest
    violation and gap, with ``pair_reports`` listing all.
    """
    from kernelref.svm.estimators import NuSVC, OneClassSVM, _BaseSVC

    X = check_samples(X, estimator.kernel_, "X")
    K = _gram(estimator, X)
    n = X.shape[0]
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, float)
    coef = np.zeros(n)
    if not isinstance(estimator, _BaseSVC):
        coef[estimator.support_] = estimator.dual_coef_[0]
        decision = estimator.decision_function(X)
        rho = -estimator.intercept_[0]
        keep = np.flatnonzero(w > 0)
        if isinstance(estimator, OneClassSVM):
            qp = estimator._problem(w[keep])
            alpha = coef[keep]
        else:
            z = check_targets(y, n, "y")
            qp = estimator._problem(z[keep], w[keep])
            alpha = np.concatenate([np.maximum(coef[keep], 0), np.maximum(-coef[keep], 0)])
        qp = replace(qp, src=keep[qp.src])
        return qp_kkt(qp, K, alpha, rho, estimator._r[0], decision[qp.src])
    classes, y_index = check_classification_targets(y, n, "y")
    n_classes = len(classes)
    starts = np.concatenate([[0], np.cumsum(estimator.n_support_)])
    binary = n_classes == 2
    dual = -estimator.dual_coef_ if binary else estimator.dual_coef_
    intercept = -estimator.intercept_ if binary else estimator.intercept_
    if binary:
        dec_all = -estimator.decision_function(X)[:, None]
    else:
        from kernelref.svm.multiclass import ovo_decision
        K_sv = K[:, estimator.support_]
        dec_all = ovo_decision(K_sv, estimator.dual_coef_, estimator.intercept_,
                               estimator.n_support_)
    C_class = estimator._class_bounds(y_index, n_classes)
    reports = []
    for p, (i, j) in enumerate(pairs(n_classes)):
        idx = np.flatnonzero(((y_index == i) | (y_index == j)) & (w > 0))
        y_pm = np.where(y_index[idx] == i, 1.0, -1.0)
        coef = np.zeros(n)
        coef[estimator.support_[starts[i]:starts[i + 1]]] = dual[j - 1, starts[i]:starts[i + 1]]
        coef[estimator.support_[starts[j]:starts[j + 1]]] = dual[i, starts[j]:starts[j + 1]]
        alpha = y_pm * coef[idx]
        rho = -intercept[p]
        qp = replace(estimator._problem(y_pm, C_class[y_index[idx]] * w[idx], w[idx]), src=idx)
        decision = dec_all[idx, p]
        if isinstance(estimator, NuSVC):
            # libsvm returns α/r, ρ/r; the ν problem itself is in the unscaled α.
            r = estimator._r[p]
            alpha, rho, decision = alpha * r, rho * r, decision * r
            reports.append(qp_kkt(qp, K, alpha, rho, r, decision))
        else:
            reports.append(qp_kkt(qp, K, alpha, rho, 0.0, decision))
    worst = max(reports, key=lambda rep: rep.max_violation)
    worst.pair_reports = reports
    return worst
