"""``RVR``: the relevance vector machine for regression (Tipping 2001).

Fitting maximises the evidence over α and β by one of three paths — the fast
sequential algorithm (kernelref.rvm.fast), re-estimation or EM
(kernelref.rvm.reestimate) — and keeps the training points whose α_i stays
finite: the relevance vectors. Prediction uses the posterior over their weights:

    y(x) = φ(x)ᵀμ,   σ²(x) = β⁻¹ + φ(x)ᵀΣφ(x)            (label ``rvm-predictive``).
"""

import warnings

import numpy as np

from kernelref._validation import (
    check_is_fitted,
    check_n_features,
    check_samples,
    check_targets,
    check_training_samples,
    evaluate_kernel,
    record_n_features,
)
from kernelref.base import BaseEstimator, RegressorMixin
from kernelref.exceptions import ConvergenceWarning
from kernelref.kernels import make_kernel
from kernelref.rvm.design import (
    check_evidence_settings,
    column_scales,
    design_matrix,
    initial_beta,
)
from kernelref.rvm.fast import ALIGNMENT_MAX
from kernelref.rvm.reestimate import initial_alpha, reestimate
from kernelref.rvm.schedules import check_beta_schedule, fast_regression

__all__ = ["ALPHA_MAX", "RVR", "ConvergenceWarning"]

#: Re-estimation and EM prune basis function i once α_i exceeds this: its prior
#: variance 1/α_i ≤ 1e-12 pins w_i within 1e-6 of zero, and the bound of Tipping's
#: SB1 and seed 004 (AlphaBound). α_i → ∞ only in the limit, so some bound is needed.
ALPHA_MAX = 1e12

METHODS = ("fast", "reestimate", "em")
UPDATES = ("standard", "accelerated")


class RVR(RegressorMixin, BaseEstimator):
    """Relevance vector regression.

    Parameters
    ----------
    kernel : str or Kernel
        'rbf', 'linear', 'poly', 'laplacian', 'sigmoid', 'precomputed' or a
        ``kernelref.kernels.Kernel``; the basis functions are k(·, x_n).
    gamma, degree, coef0
        Parameters of the named kernels; ``gamma=None`` means 1/n_features.
    bias : bool
        Add the constant basis function φ_0 = 1, with its own α_0 (Tipping 2001).
    method : {'fast', 'reestimate', 'em'}
        Tipping & Faul's sequential algorithm; MacKay re-estimation of all α at
        once; or EM. The fast path starts from one basis function and costs
        O(N·M) per addition; the others start from all N + 1 and cost O(N³) per
        iteration until pruning has shrunk the model. EM approaches the same
        fixed points as re-estimation, but so slowly that it prunes little.
    update : {'standard', 'accelerated'}
        For 'reestimate' and 'em': 'accelerated' uses seed 001's eq. (13) for
        growing α_i; it is not a fixed point of the evidence (see
        kernelref.rvm.reestimate) and is offered for study, not for use.
    max_iter : int
        Iterations at most (10000, SparseBayes's default).
    tol : float
        Converged when log α_i (and log β) change by less than this; 1e-3 is
        SparseBayes's MinDeltaLogAlpha. An EM step changes log α_i by about
        twice the gradient ∂L/∂log α_i, so for 'em' this bounds the gradient:
        EM stops on the plateau where irrelevant α_i grow slowly, typically
        before it has pruned anything (the regression chapter measures it).
    alpha_max : float
        Re-estimation and EM prune α_i above this (see `ALPHA_MAX`); the fast
        path prunes exactly, when q_i² ≤ s_i.
    alignment_max : float
        For 'fast': a candidate whose basis function has cosine above this with
        one already in the model is not added (SparseBayes's basis alignment
        test, default 1 − 1e-3; see ``kernelref.rvm.fast.ALIGNMENT_MAX``), except
        in the 'auto' schedule's final pass, which loosens it to a
        ``FINAL_ALIGNMENT_FACTOR``-th of its distance from 1. 1.0 turns the test
        off; the algorithm stays stable without it, since candidates
        (numerically) inside the span of the model are refused anyway, and may
        find a higher evidence at the price of more iterations
        (see the fast-algorithm chapter).
    beta_schedule : {'auto', 'both', 'update', 'hold'}
        For 'fast': learn the noise from the first iterations (SparseBayes,
        'update'), only once the α have settled at the starting noise level
        ('hold'), or run both and keep the higher evidence ('both', two runs).
        'auto' (the default) holds the noise only while basis functions are
        being found, then learns it, ends with a final pass at a looser
        alignment test, and runs 'hold' too (with its own final pass): in full
        if that run stalled, with its held phase bounded (once its evidence
        stops rising, at most in size) if the final pass changed the model;
        the higher evidence is kept. See
        ``kernelref.rvm.schedules.fast_schedule``.

    Attributes
    ----------
    relevance_ : ndarray of int
        Indices of the training points kept (the bias is not among them).
    relevance_vectors_ : ndarray
        Those training points (rows of the training Gram matrix if precomputed).
    bias_used_ : bool
        Whether the bias basis function survived.
    alpha_, mu_, Sigma_ : ndarray
        α, posterior mean and covariance of the kept weights, bias first, on the
        scale of the user's basis functions.
    beta_ : float
        The noise precision.
    n_iter_, converged_ : int, bool
    n_factorisations_ : int
        For 'fast', the fresh factorisations of the model (O(Pm² + m³) each; the
        other iterations are rank-one updates, O(Pm)); for 'reestimate' and 'em',
        one per iteration.
    evidence_ : ndarray
        The log evidence after each iteration.
    log_evidence_ : float
        The final log evidence log p(t | α, β).
    """

    def __init__(
        self,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1,
        bias=True,
        method="fast",
        update="standard",
        max_iter=10000,
        tol=1e-3,
        alpha_max=ALPHA_MAX,
        alignment_max=ALIGNMENT_MAX,
        beta_schedule="auto",
    ):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.bias = bias
        self.method = method
        self.update = update
        self.max_iter = max_iter
        self.tol = tol
        self.alpha_max = alpha_max
        self.alignment_max = alignment_max
        self.beta_schedule = beta_schedule

    def _validate(self, X, y):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {self.method!r}.")
        if self.update not in UPDATES:
            raise ValueError(f"update must be one of {UPDATES}; got {self.update!r}.")
        if self.update == "accelerated" and self.method == "fast":
            raise ValueError(
                "update='accelerated' modifies the re-estimation of all α at once; "
                "use it with method='reestimate' or 'em' (the fast method sets "
                "α_i = s_i²/(q_i² − s_i))."
            )
        check_evidence_settings(self)
        check_beta_schedule(self.beta_schedule)
        X = check_training_samples(X, self.kernel)
        t = check_targets(y, X.shape[0], "y")
        if t.ndim != 1:
            raise ValueError(
                f"y must be 1-D (one target per sample); got shape {t.shape}. "
                "Fit one RVR per column for several targets."
            )
        if len(t) < 2:
            raise ValueError(
                "y has 1 sample; RVR needs at least 2 samples to estimate the noise "
                "level."
            )
        if np.ptp(t) == 0:
            raise ValueError(
                "y is constant, so its variance is zero and the noise level cannot be "
                "estimated; a constant needs no regression (predict the mean)."
            )
        kernel = make_kernel(self.kernel, X, self.gamma, self.degree, self.coef0)
        return X, t, kernel

    def fit(self, X, y):
        """Maximise the evidence and keep the relevance vectors."""
        X, t, self.kernel_ = self._validate(X, y)
        offset = 1 if self.bias else 0
        if self.method == "fast":
            result = self._fit_fast(X, t)
            kept = result.active
        else:
            Phi = design_matrix(self.kernel_, X, X, self.bias)
            scales = np.concatenate([np.ones(offset), column_scales(Phi[:, offset:])])
            # α is bounded on the user's scale; columns that are zero carry no
            # information.
            alpha0 = np.where(scales > 0, initial_alpha(len(t)), np.inf)
            keep = np.flatnonzero(scales > 0)
            result = reestimate(
                Phi[:, keep],
                t,
                alpha0[keep],
                initial_beta(t),
                method=self.method,
                update=self.update,
                max_iter=self.max_iter,
                tol=self.tol,
                alpha_max=self.alpha_max,
            )
            kept = keep[result.keep]
        if not result.converged:
            warnings.warn(
                f"RVR(method={self.method!r}) stopped after max_iter={self.max_iter} "
                "iterations before converging; raise max_iter or tol.",
                ConvergenceWarning,
                stacklevel=2,
            )
        self.bias_used_ = bool(self.bias and kept[0] == 0)
        self.relevance_ = kept[kept >= offset] - offset
        self.relevance_vectors_ = X[self.relevance_]
        self.alpha_, self.beta_ = result.alpha, float(result.beta)
        self.mu_, self.Sigma_ = result.mu, result.Sigma
        self.n_iter_, self.converged_ = result.n_iter, result.converged
        self.n_factorisations_ = int(getattr(result, "n_fresh", result.n_iter))
        self.evidence_, self.log_evidence_ = result.evidence, float(result.log_evidence)
        record_n_features(self, X)
        return self

    def _fit_fast(self, X, t):
        """The fast algorithm on the design matrix of X, as a `FastResult` on the
        scale of its columns. (The Dask backend replaces this one method.)"""
        Phi = design_matrix(self.kernel_, X, X, self.bias)
        column_scales(Phi[:, 1 if self.bias else 0 :])  # refuses a zero kernel
        return fast_regression(
            Phi,
            t,
            copy=False,  # Φ is this fit's own: scaled in place
            beta_schedule=self.beta_schedule,
            max_iter=self.max_iter,
            tol=self.tol,
            alignment_max=self.alignment_max,
        )

    def _basis(self, X):
        """φ(x)ᵀ of the kept basis functions for each row of X."""
        check_is_fitted(self, "mu_")
        X = check_samples(X, self.kernel_, "X")
        if isinstance(self.kernel_, str):
            if X.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"with kernel='precomputed', X must be K(X_test, X_train) with "
                    f"{self.n_features_in_} columns; got {X.shape[1]}."
                )
            K = X[:, self.relevance_]
        else:
            if X.ndim == 2:
                check_n_features(X, self.n_features_in_)
            K = evaluate_kernel(self.kernel_, X, self.relevance_vectors_)
        if self.bias_used_:
            return np.hstack([np.ones((len(X), 1)), K])
        return K

    def predict(self, X, return_std=False):
        """The predictive mean φ(x)ᵀμ and, with ``return_std``, the standard deviation
        √(β⁻¹ + φ(x)ᵀΣφ(x)) of a new target (label ``rvm-predictive``)."""
        phi = self._basis(X)
        mean = phi @ self.mu_
        if not return_std:
            return mean
        variance = 1.0 / self.beta_ + np.einsum("nm,mk,nk->n", phi, self.Sigma_, phi)
        return mean, np.sqrt(variance)
