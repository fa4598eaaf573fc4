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

__all__ = [
    "DualProblem",
    "KKTReport",
    "complete_split",
    "gram_product",
    "kkt_report",
    "qp_kkt",
]


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
    #: the α checked, and what the report had to choose because the stored model
    #: does not determine it (empty when it determines every α_t)
    alpha: np.ndarray = None
    notes: tuple = ()

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
    decision values into those of the QP (r for ν-SVC, whose model is α/r, ρ/r).

    ``split_known`` is False for ν-SVR read back from ``dual_coef_``, which holds
    β_n = α_n − α*_n only: `alpha` is then the least split (α_n = max(β_n, 0),
    α*_n = max(−β_n, 0)), and ``kkt_report`` completes it (``complete_split``)."""

    qp: object
    alpha: np.ndarray
    rho: float
    r: float = 0.0
    scale: float = 1.0
    split_known: bool = True


#: α read back from ``dual_coef_`` (α/r for ν-SVC, rescaled here by r) carries a
#: few ulps of rounding; within this relative distance of a bound it is on the bound.
BOUND_RTOL = 1e-12


def _snap_to_bounds(alpha, C):
    scale = np.where(np.isfinite(C), C, 1.0)
    alpha = np.where(np.abs(alpha) <= BOUND_RTOL * scale, 0.0, alpha)
    return np.where(np.abs(alpha - C) <= BOUND_RTOL * scale, C, alpha)


def complete_split(qp, alpha, g):
    """The ν-SVR split (α, α*) with α − α* as in `alpha` that meets Σ(α + α*) = Δ₂
    (label ``nu-svr-dual``) with the least KKT violation; returns (α, notes).

    `alpha` is the least split, α_n α*_n = 0, of total Σ|β_n| ≤ Δ₂ at an optimum.
    Adding s_n to both α_n and α*_n keeps β and f(α) (pᵀα = −zᵀβ, Qα depends on β
    only) and costs the complementary slackness max(g_n, g*_n, 0) wherever both
    become positive; g_n + g*_n = −2r = 2ε. With a tube ε > 0 no optimum has both
    positive, so the least split is the solver's; when the tube collapses (ε = 0,
    e.g. N < D with a linear kernel: the data are fitted exactly) Σ|β_n| < Δ₂
    and the solver spread the remaining Δ₂ − Σ|β_n| over samples with α_n, α*_n
    both positive, a split ``dual_coef_`` cannot hold. The model is optimal
    exactly when some split satisfies the KKT conditions: the remainder goes to
    the samples of least cost first, each up to its box, which makes the largest
    cost the least possible. What cannot be placed stays an equality violation.
    """
    half = len(alpha) // 2
    a, a_star = alpha[:half].copy(), alpha[half:].copy()
    remainder = qp.alpha0.sum() - alpha.sum()
    if remainder <= BOUND_RTOL * qp.alpha0.sum():
        return alpha, ()
    room = np.maximum(qp.C[:half] - np.maximum(a, a_star), 0.0)
    cost = np.maximum(g[:half], g[half:])
    left = remainder / 2.0
    filled = 0
    for n in np.argsort(cost, kind="stable"):
        if left <= 0:
            break
        s = min(room[n], left)
        a[n] += s
        a_star[n] += s
        left -= s
        filled += int(s > 0)
    note = (
        f"dual_coef_ holds α − α* only; Σ(α + α*) = {qp.alpha0.sum():.6g} needs "
        f"{remainder:.6g} more than Σ|α − α*|, checked by adding half of it to α "
        f"and half to α* of the {filled} samples of least max(g, g*) (any split of "
        "the same α − α* has the same objective)"
    )
    return _snap_to_bounds(np.concatenate([a, a_star]), qp.C), (note,)


def qp_kkt(qp, K, alpha, rho, r=0.0, decision=None):
    """KKTReport of (α, ρ, r) for `qp`; `decision` the model's decision values on the
    samples of the variables (libsvm's sign), for the stationarity check."""
    alpha = _snap_to_bounds(alpha, qp.C)
    coef = np.bincount(qp.src, weights=qp.y * alpha, minlength=K.shape[0])
    return _report(qp, alpha, rho, r, K @ coef, decision)


def _report(qp, alpha, rho, r, K_coef, decision, split_known=True):
    """The report from K_coef = K @ Σ_t y_t α_t e_src(t), the only use of the Gram
    matrix: G = p + y ∘ K_coef[src] (label ``svm-gradient``). Without
    `split_known`, α is ν-SVR's least split, completed by ``complete_split``."""
    alpha = _snap_to_bounds(alpha, qp.C)
    G = qp.p + qp.y * K_coef[qp.src]
    g = G - rho * qp.y - r
    notes = ()
    if not split_known:
        alpha, notes = complete_split(qp, alpha, g)
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
        alpha,
        notes,
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
    ``pair_reports`` listing all. ``notes`` says what the stored model leaves
    open and how it was checked (ν-SVR's split of α − α*, ``complete_split``).
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
            d.qp,
            d.alpha,
            d.rho,
            d.r,
            K_coef[:, p],
            d.scale * decision[d.qp.src, p],
            d.split_known,
        )
        for p, d in enumerate(problems_)
    ]
    worst = max(reports, key=lambda rep: rep.max_violation)
    worst.pair_reports = reports
    return worst
