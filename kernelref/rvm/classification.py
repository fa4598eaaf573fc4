"""The relevance vector classifier, `RVC`: binary, softmax and one-vs-rest.

Its pieces live beside it and are re-exported here: the Laplace approximation and
re-estimation (``kernelref.rvm.rvc_laplace``, where the equations are) and the fast
path (``kernelref.rvm.rvc_fast``).
"""

import warnings

import numpy as np
from scipy.special import logsumexp

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
from kernelref.rvm.design import check_evidence_settings, column_scales, design_matrix
from kernelref.rvm.fast import ALIGNMENT_MAX, run_to_end
from kernelref.rvm.reestimate import initial_alpha
from kernelref.rvm.regression import ALPHA_MAX
from kernelref.rvm.rvc_fast import (  # re-exported: the chapter imports them here
    ABANDON_AFTER,
    ABANDON_MARGIN,
    ABANDON_MARGIN_N,
    ACCELERATE_MAX,
    ACCELERATE_RATE,
    DENSE_START_SIZE,
    LOOSE_TOL,
    REESTIMATED_ALIGNMENT_FACTOR,
    STALL_PATIENCE,
    START_NAMES,
    START_REESTIMATIONS,
    STARTS,
    TIE,
    TOL_FRACTION,
    WIDE_START_SIZE,
    abandon_margin,
    dense_approximation,
    dense_columns,
    dense_start,
    extrapolated,
    fast_classifier,
    fast_path,
    reestimated_start,
)
from kernelref.rvm.rvc_laplace import (  # re-exported as well
    BERNOULLI,
    MAX_NEWTON_ITER,
    Bernoulli,
    ClassifierFit,
    Laplace,
    laplace_log_evidence,
    laplace_posterior,
    log_posterior,
    posterior_mean,
    reestimate_classifier,
)
from kernelref.rvm.softmax import (
    Softmax,
    expanded_design,
    latent_moments,
    moderated_log_softmax,
    moderated_softmax,
    one_hot,
)
from kernelref.rvm.softmax_design import KroneckerDesign

__all__ = [
    "ABANDON_AFTER",
    "ABANDON_MARGIN",
    "ABANDON_MARGIN_N",
    "ACCELERATE_MAX",
    "ACCELERATE_RATE",
    "BERNOULLI",
    "Bernoulli",
    "ClassifierFit",
    "DENSE_START_SIZE",
    "LOOSE_TOL",
    "Laplace",
    "MAX_NEWTON_ITER",
    "REESTIMATED_ALIGNMENT_FACTOR",
    "RVC",
    "STALL_PATIENCE",
    "START_NAMES",
    "START_REESTIMATIONS",
    "STARTS",
    "TIE",
    "TOL_FRACTION",
    "WIDE_START_SIZE",
    "abandon_margin",
    "dense_approximation",
    "dense_columns",
    "dense_start",
    "extrapolated",
    "fast_classifier",
    "fast_path",
    "laplace_log_evidence",
    "laplace_posterior",
    "log_posterior",
    "posterior_mean",
    "reestimate_classifier",
    "reestimated_start",
]


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
        (`fast_classifier`: two paths, from at most 50 independent basis
        functions, or 100 evenly spaced where Φ's rank is lower, after ten
        re-estimations, with a looser alignment test where those columns are
        nearly dependent, and from one basis function, abandoned where it
        falls far behind; the higher Laplace
        evidence kept), or
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
            columns = None  # the dense start's columns depend on Φ alone: once
            if self.method == "fast":
                whole = len(usable) == Phi.shape[1]
                columns = dense_columns(Phi if whole else Phi[:, usable])
            for k in range(K):
                binary = type(self)(**self.get_params(deep=False))
                binary._run_name = f"class-{k}-"  # one machine per class
                binary.classes_, binary.kernel_ = np.array([0, 1]), kernel
                record_n_features(binary, X)
                binary._X = X
                binary._fit_binary(Phi, usable, (y_index == k).astype(float), columns)
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
                f"RVC(method={self.method!r}) stopped before converging, {reason}. "
                "Raise max_iter or tol, or try method='reestimate'.",
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

    def _run(self, Phi, t, likelihood, columns=None):
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
                columns=columns,
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

    def _fit_binary(self, Phi, usable, t, columns=None):
        """``columns``: the fast path's dense start, if chosen (`dense_columns`)."""
        whole = len(usable) == Phi.shape[1]  # no zero column: Φ as it is
        result = self._run(Phi if whole else Phi[:, usable], t, BERNOULLI, columns)
        self._keep_basis(usable[result.keep])
        self.alpha_, self.mu_, self.Sigma_ = result.alpha, result.mu, result.Sigma

    def _fit_softmax(self, Phi, usable, y_index, K):
        """The fast path runs on Φ ⊗ I_K as a `KroneckerDesign` (never formed, nor
        its whitened form: label ``rvc-softmax-structured``); re-estimation, which
        starts from every weight, on the matrix itself."""
        expand = KroneckerDesign if self.method == "fast" else expanded_design
        whole = len(usable) == Phi.shape[1]  # no zero column: Φ as it is
        base = Phi if whole else Phi[:, usable]
        result = self._run(expand(base, K), one_hot(y_index, K), Softmax(K))
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
        classes one column per class (softmax activations, or the binary ones of
        'ovr')."""
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
        """log of ``predict_proba``, in log space throughout, so finite where a
        probability rounds to 0 or 1. Binary: log σ(±κμ_a)
        (``probit_log_probability``). Softmax: `moderated_log_softmax`. 'ovr': each
        class's binary log probability, less their log-sum-exp."""
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
        if self.multi_class == "ovr":
            L = np.column_stack(
                [e.predict_log_proba(X)[:, 1] for e in self.estimators_]
            )
            return L - logsumexp(L, axis=1, keepdims=True)
        return moderated_log_softmax(
            *latent_moments(self._basis(X), self.mu_, self.Sigma_, self.kept_weights_)
        )

    def predict(self, X):
        """The most probable class; for two, the sign of the mean activation."""
        if self._multiclass():
            return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
        return self.classes_[(self.decision_function(X) > 0).astype(int)]
