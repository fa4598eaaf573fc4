"""Probabilities for SVM outputs: Platt's sigmoid and pairwise coupling.

An SVM's decision value f(x) is a score, not a probability. Platt (1999) fits
P(y = 1 | f) = 1 / (1 + exp(A f + B)) (label ``platt-sigmoid``) by minimising the
cross-entropy of smoothed targets t₊ = (N₊+1)/(N₊+2), t₋ = 1/(N₋+2) (label
``platt-objective``). The minimiser is found by Newton's
method with backtracking, in the numerically careful form of Lin, Lin & Weng
(2007), "A note on Platt's probabilistic outputs for support vector machines",
Machine Learning 68, Algorithm 1 — the algorithm of libsvm's ``sigmoid_train``.
The sign convention is libsvm's: A is negative when large f means class +1.

With K > 2 classes, one sigmoid per one-vs-one pair gives r_ij ≈ P(y = i | y ∈ {i, j}),
and the class probabilities solve the quadratic program of Wu, Lin & Weng (2004),
"Probability estimates for multi-class classification by pairwise coupling",
JMLR 5, their method 2 (label ``pairwise-coupling``), as in libsvm.

``PlattCalibrated`` wraps any classifier with ``fit`` and ``decision_function``;
the sigmoids are fitted on cross-validated decision values, so that they see
scores of points the classifier was not trained on. A wrapped estimator that keeps
its fit's data and checkpoints in a directory (a ``store`` argument, as a
backend's estimators do) gives each of its fits a sub-directory of that store
(``fit_store``), so each fold and each final fit has its own; and each fit is
named while it runs (``labelled_fit``: "pair 0-2 fold 3/5", "pair 0-2 final"),
so a backend's progress bar says which fit it shows.
"""

import copy
import numbers
import os
import warnings

import numpy as np
from scipy.special import expit

from kernelref._validation import (
    check_classification_targets,
    check_integer,
    check_is_fitted,
    check_n_features,
    record_n_features,
)
from kernelref.base import (
    BaseEstimator,
    ClassifierMixin,
    check_wrapped_samples,
    restores_on_error,
    takes_sparse,
)

__all__ = [
    "PlattCalibrated",
    "coupling_matrix",
    "cross_validated_decision",
    "fit_store",
    "labelled_fit",
    "pairwise_coupling",
    "platt_objective",
    "platt_targets",
    "sigmoid_predict",
    "sigmoid_train",
]

# Lin, Lin & Weng (2007), Algorithm 1: at most 100 Newton steps; a step shorter than
# 1e-10 means the line search has failed; σ = 1e-12 keeps the Hessian positive definite
# when every p(1 − p) underflows; |∇F| < 1e-5 stops; 1e-4 is the Armijo constant.
MAX_NEWTON_STEPS = 100
MIN_STEP = 1e-10
HESSIAN_RIDGE = 1e-12
GRADIENT_TOLERANCE = 1e-5
ARMIJO = 1e-4
# libsvm clips the pairwise probabilities to [1e-7, 1 − 1e-7] before coupling, so
# that every r_ij > 0 and the coupling matrix Q is positive definite.
MIN_PAIRWISE_PROBABILITY = 1e-7


def platt_targets(y):
    """Smoothed targets: t₊ = (N₊+1)/(N₊+2) where y = 1, t₋ = 1/(N₋+2) where y = 0
    (in label ``platt-objective``): the posterior mean of a Bernoulli under a uniform
    prior."""
    n_positive = np.count_nonzero(y == 1)
    n_negative = len(y) - n_positive
    return np.where(
        y == 1, (n_positive + 1.0) / (n_positive + 2.0), 1.0 / (n_negative + 2.0)
    )


def platt_objective(A, B, f, t):
    """F(A, B) = Σ_i t_i z_i + log(1 + exp(−z_i)) with z_i = A f_i + B
    (label ``platt-objective``), the cross-entropy of targets t and
    p_i = 1/(1 + exp(z_i)); ``logaddexp`` keeps it finite for any z."""
    z = A * f + B
    return float(np.sum(t * z + np.logaddexp(0.0, -z)))


def sigmoid_predict(f, A, B):
    """P(y = 1 | f) = 1 / (1 + exp(A f + B)) (label ``platt-sigmoid``)."""
    return expit(-(A * np.asarray(f, dtype=np.float64) + B))


def sigmoid_train(f, y):
    """(A, B) minimising ``platt_objective`` for decision values `f` and labels `y`
    in {0, 1}: Newton's method with backtracking on the gradient and Hessian of
    (platt-objective) (Lin, Lin & Weng 2007, Algorithm 1). Returns ``(A, B,
    n_iter)``."""
    f = np.asarray(f, dtype=np.float64)
    t = platt_targets(y)
    n_positive = np.count_nonzero(y == 1)
    # Start from A = 0 and the B that matches the smoothed class frequencies.
    A, B = 0.0, float(np.log((len(y) - n_positive + 1.0) / (n_positive + 1.0)))
    F = platt_objective(A, B, f, t)
    for n_iter in range(MAX_NEWTON_STEPS):
        p = sigmoid_predict(f, A, B)
        gradient = np.array([f @ (t - p), np.sum(t - p)])
        if np.all(np.abs(gradient) < GRADIENT_TOLERANCE):
            return A, B, n_iter
        w = p * (1.0 - p)
        H = np.array(
            [[f * f @ w + HESSIAN_RIDGE, f @ w], [f @ w, w.sum() + HESSIAN_RIDGE]]
        )
        direction = -np.linalg.solve(H, gradient)
        slope = gradient @ direction
        step = 1.0
        while step >= MIN_STEP:
            A_new, B_new = A + step * direction[0], B + step * direction[1]
            F_new = platt_objective(A_new, B_new, f, t)
            if F_new < F + ARMIJO * step * slope:
                A, B, F = A_new, B_new, F_new
                break
            step /= 2.0
        else:
            warnings.warn(
                "Platt scaling: the line search failed to decrease the "
                "cross-entropy; (A, B) are the last accepted values.",
                RuntimeWarning,
                stacklevel=2,
            )
            return A, B, n_iter + 1
    warnings.warn(
        f"Platt scaling: Newton's method reached {MAX_NEWTON_STEPS} steps "
        "without converging.",
        RuntimeWarning,
        stacklevel=2,
    )
    return A, B, MAX_NEWTON_STEPS


def coupling_matrix(r):
    """Q of method 2 for pairwise probabilities r (…, K, K), r_ij + r_ji = 1:
    Q_ii = Σ_{s≠i} r_si², Q_ij = −r_ji r_ij (label ``pairwise-coupling``)."""
    K = r.shape[-1]
    off = ~np.eye(K, dtype=bool)
    rT = np.swapaxes(r, -1, -2)
    Q = np.where(off, -rT * r, 0.0)
    diagonal = np.sum(np.where(off, r, 0.0) ** 2, axis=-2)
    return Q + diagonal[..., None] * np.eye(K)


def pairwise_coupling(r):
    """Class probabilities p from pairwise probabilities r (n, K, K) with
    r_ij ≈ P(y = i | y ∈ {i, j}): the minimiser of pᵀQp subject to Σ_i p_i = 1
    (Wu, Lin & Weng 2004, method 2; label ``pairwise-coupling``).

    The optimality conditions are Qp = (pᵀQp) 1 and 1ᵀp = 1, so p ∝ Q⁻¹1. Wu et al.
    show that the constraint p ≥ 0 is then inactive, which is why solving this
    linear system gives the same p as libsvm's iterative method.
    """
    r = np.clip(r, MIN_PAIRWISE_PROBABILITY, 1.0 - MIN_PAIRWISE_PROBABILITY)
    Q = coupling_matrix(r)
    ones = np.ones(Q.shape[:-1])
    u = np.linalg.solve(Q, ones[..., None])[..., 0]
    return u / u.sum(axis=-1, keepdims=True)


def clone(estimator):
    """A new, unfitted estimator with the same constructor arguments: estimators
    among them cloned, other callables shared (a ``progress=`` callback sees
    every fit, as the user gave it), the rest copied."""
    params = {}
    for name, value in estimator.get_params(deep=False).items():
        if hasattr(value, "get_params") and not isinstance(value, type):
            params[name] = clone(value)
        elif callable(value):
            params[name] = value
        else:
            params[name] = copy.deepcopy(value)
    return type(estimator)(**params)


def stratified_folds(y_index, n_folds, rng):
    """Each sample's fold in 0 … n_folds−1: every class is shuffled and dealt
    round-robin, so each fold holds every class in about its proportion."""
    folds = np.empty(len(y_index), dtype=int)
    for label in np.unique(y_index):
        members = rng.permutation(np.flatnonzero(y_index == label))
        folds[members] = np.arange(len(members)) % n_folds
    return folds


def fit_store(estimator, *where):
    """A clone of `estimator` for one fit of a calibration, with a store of its own.

    An estimator whose ``store`` argument names a directory (a backend's fit
    store: the fit's data and checkpoints) would otherwise give the same
    directory to every fold and refuse the second fold's data. The clone gets
    the sub-directory ``store/where[0]/where[1]/…`` instead: a fold's store holds
    that fold's data only, and a calibration fitted again into the same store
    (after an interruption, say) resumes each fit from its own checkpoints.
    ``where`` empty: the clone's store is unset (None: the estimator's temporary
    store). Estimators without a ``store``, or with none set, are cloned as they
    are.
    """
    model = clone(estimator)
    store = model.get_params(deep=False).get("store")
    if store is not None:
        model.set_params(
            store=os.path.join(os.fspath(store), *where) if where else None
        )
    return model


def labelled_fit(model, label, X, y):
    """``model.fit(X, y)`` with ``model.fit_label = label`` while it runs.

    A backend's estimator names its progress bar and records by the label, if
    it has one ("SVC pair 0-2 fold 3/5": ``backends.dask``'s SVMs), so one
    fit of a calibration is told from another; others ignore it. The label
    belongs to this fit alone: it is removed afterwards, and is neither a
    parameter nor saved with the model."""
    model.fit_label = label
    try:
        return model.fit(X, y)
    finally:
        vars(model).pop("fit_label", None)


def is_precomputed(estimator):
    """Does `estimator` take kernel values k(x, x_train) as X (libsvm's ``-t 4``)?"""
    return getattr(estimator, "kernel", None) == "precomputed"


def kernel_rows(X, rows, columns, precomputed):
    """Rows of X for a fit on the samples `columns`: with a precomputed kernel,
    X[rows, columns] (a model's X holds one column per training sample); else
    X[rows]."""
    return X[rows][:, columns] if precomputed else X[rows]


def cross_validated_decision(estimator, X, y, n_folds, rng, where=None, label=None):
    """Decision values of each sample from a clone fitted without its fold.

    `where` (a sequence of directory names) names the folds' stores
    ``where/fold-k`` within the estimator's ``store`` (``fit_store``); None gives
    them temporary stores. Fold k's fit is labelled ``"<label> fold k+1/n"``
    (``labelled_fit``; without `label`, ``"fold k+1/n"``). With a precomputed
    kernel X is the kernel matrix of the samples, and a fold's fit sees only the
    columns of its training samples (``kernel_rows``)."""
    folds = stratified_folds(y, n_folds, rng)
    precomputed = is_precomputed(estimator)
    f = np.empty(len(y))
    for k in range(n_folds):
        held_out = folds == k
        named = () if where is None else (*where, f"fold-{k}")
        which = f"fold {k + 1}/{n_folds}"
        model = labelled_fit(
            fit_store(estimator, *named),
            which if label is None else f"{label} {which}",
            kernel_rows(X, ~held_out, ~held_out, precomputed),
            y[~held_out],
        )
        f[held_out] = model.decision_function(
            kernel_rows(X, held_out, ~held_out, precomputed)
        )
    return f


class PlattCalibrated(ClassifierMixin, BaseEstimator):
    """Probabilities for a classifier by Platt scaling on cross-validated scores.

    Two classes: the estimator is cross-validated to collect out-of-fold decision
    values f, a sigmoid (A, B) is fitted to them, and the estimator is refitted on
    all data. K > 2 classes: for every pair i < j a clone is trained on the pair's
    samples the same way, and the K(K−1)/2 sigmoids are combined by pairwise
    coupling, as libsvm does.

    ``predict`` returns the class of largest probability. It can disagree with
    the wrapped estimator's ``predict``: a sigmoid crosses ½ where A f + B = 0,
    i.e. at f = −B/A, not at f = 0, and for K > 2 classes coupling weighs the pairs
    by their confidence while voting counts them. That is why this is a wrapper
    with its own ``predict`` rather than a flag of the solver.

    An estimator with a ``store`` directory (``backends.dask``'s SVMs) keeps the
    fits of pair (i, j) in ``store/pair-i-j/``: fold k's in ``fold-k``, the final
    fit's in ``final``. Fitting again into the same store resumes each fit from
    its checkpoints; a fold's store given other data (another ``cv`` or
    ``random_state``) is refused by the estimator, never reused. With
    ``random_state=None`` the folds differ at every fit, so their stores are
    temporary and only the final fits are kept. Each fit is labelled while it
    runs, "pair i-j fold k/cv" (k from 1: the store's ``fold-(k−1)``) or
    "pair i-j final" (``labelled_fit``), and a backend's bar shows it.

    Parameters
    ----------
    estimator : classifier with ``fit`` and ``decision_function``
        Binary decision values are positive for the larger label.
    cv : int ≥ 2
        Number of stratified folds for the out-of-fold decision values.
    random_state : int or None
        Seed of the fold shuffling.
    decision_function_shape : "ovo" or "ovr"
        What ``decision_function`` returns: "ovo" the wrapped estimators' own
        decision values (see there); "ovr" scores that agree with ``predict``,
        as scikit-learn expects of a classifier: log P(y = c | x) per class,
        or for two classes the calibrated logit log P(classes_[1]) − log P(classes_[0]).

    Attributes
    ----------
    classes_ : ndarray (K,)
    estimators_ : list
        The fitted estimator (K = 2) or one per pair (0, 1), (0, 2), …, (K−2, K−1).
    sigmoids_ : ndarray (n_pairs, 2)
        (A, B) of each sigmoid, in the order of ``estimators_``.
    """

    def __init__(
        self, estimator, cv=5, random_state=None, decision_function_shape="ovo"
    ):
        self.estimator = estimator
        self.cv = cv
        self.random_state = random_state
        self.decision_function_shape = decision_function_shape

    def _validate(self, X, y):
        for method in ("fit", "decision_function"):
            if not callable(getattr(self.estimator, method, None)):
                raise TypeError(
                    f"estimator must be a classifier with fit and decision_function; "
                    f"{type(self.estimator).__name__} has no {method}."
                )
        check_integer(self.cv, "cv", low=2, meaning="It is the number of folds.")
        if self.decision_function_shape not in ("ovo", "ovr"):
            raise ValueError(
                "decision_function_shape must be 'ovo' or 'ovr'; "
                f"got {self.decision_function_shape!r}."
            )
        if self.random_state is not None and not isinstance(
            self.random_state, numbers.Integral
        ):
            raise TypeError(
                f"random_state must be None or an integer seed; got "
                f"{self.random_state!r}."
            )
        X = check_wrapped_samples(self, X)
        if is_precomputed(self.estimator) and (X.ndim != 2 or X.shape[0] != X.shape[1]):
            raise ValueError(
                f"X has shape {X.shape}, but the estimator's kernel is 'precomputed': "
                "give the square matrix k(x_i, x_j) of the training samples."
            )
        classes, y_index = check_classification_targets(y, X.shape[0], "y")
        counts = np.bincount(y_index)
        if counts.min() < self.cv:
            raise ValueError(
                f"y has {counts.min()} samples of class {classes[counts.argmin()]!r}, "
                f"fewer than cv={self.cv} folds; every class needs at least cv "
                "samples. Lower cv or collect more samples of that class."
            )
        return X, classes, y_index

    def _takes_sparse(self):
        return takes_sparse(self.estimator)

    @restores_on_error
    def fit(self, X, y):
        X, self.classes_, y_index = self._validate(X, y)
        precomputed = is_precomputed(self.estimator)
        rng = np.random.default_rng(self.random_state)
        self.estimators_, sigmoids, columns = [], [], []
        for i, j in self._pairs():
            on_pair = (y_index == i) | (y_index == j)
            X_pair = kernel_rows(X, on_pair, on_pair, precomputed)
            y_pair = (y_index[on_pair] == j).astype(int)
            columns.append(on_pair)
            pair = f"pair-{i}-{j}"
            kept = None if self.random_state is None else (pair,)
            label = f"pair {i}-{j}"
            f = cross_validated_decision(
                self.estimator, X_pair, y_pair, self.cv, rng, kept, label
            )
            sigmoids.append(sigmoid_train(f, y_pair)[:2])
            final = fit_store(self.estimator, pair, "final")
            self.estimators_.append(
                labelled_fit(final, f"{label} final", X_pair, y_pair)
            )
        self.sigmoids_ = np.array(sigmoids)
        # a precomputed kernel: pair p's model takes the columns pair_columns_[p]
        self.pair_columns_ = np.array(columns) if precomputed else None
        record_n_features(self, X)
        return self

    def _pairs(self):
        K = len(self.classes_)
        return [(i, j) for i in range(K) for j in range(i + 1, K)]

    def decision_function(self, X):
        """With ``decision_function_shape="ovo"`` the estimators' decision values:
        (n,) for two classes, positive for ``classes_[1]``; (n, K(K−1)/2) for more,
        column (i, j) positive for ``classes_[j]``. With "ovr", scores ranked as
        ``predict_proba``: the logit of P(classes_[1]) for two classes, else
        log P(y = c | x), shape (n, K)."""
        if self.decision_function_shape == "ovr":
            P = self.predict_proba(X)
            with np.errstate(divide="ignore"):
                log_P = np.log(P)
            return log_P[:, 1] - log_P[:, 0] if len(self.classes_) == 2 else log_P
        return self._pair_decisions(X)

    def _pair_decisions(self, X):
        check_is_fitted(self, "sigmoids_")
        X = check_wrapped_samples(self, X)
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        columns = getattr(self, "pair_columns_", None)
        f = np.column_stack(
            [
                np.ravel(
                    m.decision_function(X if columns is None else X[:, columns[p]])
                )
                for p, m in enumerate(self.estimators_)
            ]
        )
        return f[:, 0] if len(self.classes_) == 2 else f

    def predict_proba(self, X):
        """P(y = c | x) for each class c in ``classes_``, rows summing to one."""
        f = self._pair_decisions(X)
        f = f.reshape(f.shape[0], -1)
        K = len(self.classes_)
        if K == 2:
            p1 = sigmoid_predict(f[:, 0], *self.sigmoids_[0])
            return np.column_stack([1.0 - p1, p1])
        r = np.zeros((f.shape[0], K, K))
        for column, ((i, j), (A, B)) in enumerate(zip(self._pairs(), self.sigmoids_)):
            r[:, j, i] = sigmoid_predict(f[:, column], A, B)
            r[:, i, j] = 1.0 - r[:, j, i]
        return pairwise_coupling(r)

    def predict_log_proba(self, X):
        """log P(y = c | x). Two classes: log σ(∓(Af + B)) directly, as
        −log(1 + exp(±(Af + B))), finite where a probability rounds to 0 or 1;
        more: the log of the coupled probabilities, clipped at the smallest
        positive float."""
        if len(self.classes_) == 2:
            A, B = self.sigmoids_[0]
            z = A * self._pair_decisions(X) + B
            return -np.logaddexp(0.0, np.column_stack([-z, z]))
        return np.log(np.maximum(self.predict_proba(X), np.finfo(float).tiny))

    def predict(self, X):
        """The class of largest probability (see the class docstring)."""
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
