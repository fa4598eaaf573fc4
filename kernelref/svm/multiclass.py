"""Multiclass SVMs: one-vs-one in libsvm's layout, and a plain one-vs-rest.

One-vs-one trains a binary machine for every pair i < j of classes, in the
order (0, 1), (0, 2), …, (0, K−1), (1, 2), …; class i is y = +1 in pair (i, j).
The model keeps each support vector once, grouped by class in index order;
``dual_coef_`` has K − 1 rows: the coefficient of a support vector of class i
in pair (i, j) sits in row j − 1, that of a support vector of class j in row i
(libsvm's ``sv_coef``). Prediction is a vote: pair (i, j) votes for i when its
decision value is > 0, else for j; the most votes win, and a tie goes to the
lowest class index (label ``ovo-vote``).
"""

import numpy as np

from kernelref._validation import (
    check_classification_targets,
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
from kernelref.svm.platt import clone, fit_store, labelled_fit

__all__ = [
    "OneVsRestClassifier",
    "assemble_one_vs_one",
    "ovo_coefficients",
    "ovo_decision",
    "ovo_vote",
    "ovr_from_ovo",
    "pairs",
]


def pairs(n_classes):
    """The pairs (i, j), i < j, in libsvm's order."""
    return [(i, j) for i in range(n_classes) for j in range(i + 1, n_classes)]


def assemble_one_vs_one(y_index, n_classes, pair_coefs):
    """(support_, n_support_, dual_coef_) from each pair's coefficients y_t α_t.

    `pair_coefs[p]` is a dict sample index → coefficient for pair p.
    """
    used = np.zeros(len(y_index), bool)
    for coefs in pair_coefs:
        for n, c in coefs.items():
            used[n] |= c != 0
    support = np.concatenate(
        [np.flatnonzero(used & (y_index == c)) for c in range(n_classes)]
    )
    n_support = np.array(
        [np.count_nonzero(used & (y_index == c)) for c in range(n_classes)],
        dtype=np.int32,
    )
    position = {int(n): k for k, n in enumerate(support)}
    dual_coef = np.zeros((n_classes - 1, len(support)))
    for (i, j), coefs in zip(pairs(n_classes), pair_coefs):
        for n, c in coefs.items():
            if n in position:
                row = j - 1 if y_index[n] == i else i
                dual_coef[row, position[n]] = c
    return support, n_support, dual_coef


def ovo_coefficients(dual_coef, n_support):
    """D, shape (n_SV, n_pairs): pair p's decision value is k(x, SVs) @ D[:, p] + b_p.

    Column p of pair (i, j) holds the coefficients of the support vectors of
    class i (row j − 1 of ``dual_coef``) and of class j (row i), zeros elsewhere.
    """
    starts = np.concatenate([[0], np.cumsum(n_support)])
    D = np.zeros((dual_coef.shape[1], len(n_support) * (len(n_support) - 1) // 2))
    for p, (i, j) in enumerate(pairs(len(n_support))):
        si, sj = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
        D[si, p] = dual_coef[j - 1, si]
        D[sj, p] = dual_coef[i, sj]
    return D


def ovo_decision(K_sv, dual_coef, intercept, n_support):
    """Decision value of every pair (libsvm's sign: > 0 favours class i), shape
    (n_samples, n_pairs), from K_sv = k(x, support vectors)."""
    return K_sv @ ovo_coefficients(dual_coef, n_support) + intercept


def ovo_vote(dec, n_classes):
    """Class index by (ovo-vote); np.argmax returns the first maximum, the lowest
    class."""
    votes = np.zeros((len(dec), n_classes), dtype=int)
    rows = np.arange(len(dec))
    for p, (i, j) in enumerate(pairs(n_classes)):
        np.add.at(votes, (rows, np.where(dec[:, p] > 0, i, j)), 1)
    return votes.argmax(axis=1)


def ovr_from_ovo(dec, n_classes):
    """scikit-learn's 'ovr' shape: votes plus the summed confidences squashed into
    (−1/3, 1/3), so that they break ties without overturning a vote."""
    votes = np.zeros((len(dec), n_classes))
    confidence = np.zeros((len(dec), n_classes))
    for p, (i, j) in enumerate(pairs(n_classes)):
        confidence[:, i] += dec[:, p]
        confidence[:, j] -= dec[:, p]
        votes[:, i] += dec[:, p] > 0
        votes[:, j] += dec[:, p] <= 0
    return votes + confidence / (3.0 * (np.abs(confidence) + 1.0))


class OneVsRestClassifier(ClassifierMixin, BaseEstimator):
    """One binary machine per class, that class against the rest; predict the class
    whose machine gives the largest decision value (label ``ovr-decision``).

    The book uses ``ambiguous(X)`` to show where one-vs-rest is undecided: no
    machine, or more than one, claims the point.
    """

    def __init__(self, estimator):
        self.estimator = estimator

    def _takes_sparse(self):
        return takes_sparse(self.estimator)

    @restores_on_error
    def fit(self, X, y):
        X = check_wrapped_samples(self, X)
        self.classes_, y_index = check_classification_targets(y, X.shape[0], "y")
        record_n_features(self, X)
        # Two classes need one machine, classes_[1] against classes_[0], as in
        # scikit-learn.
        positives = [1] if len(self.classes_) == 2 else range(len(self.classes_))
        self.estimators_ = []
        for c in positives:
            target = np.where(y_index == c, 1, -1)
            if len(positives) == 1:
                self.estimators_.append(clone(self.estimator).fit(X, target))
                continue
            # an estimator with a store= directory (a backend's) keeps each
            # class's fit in store/class-c (platt.fit_store), and its bar says
            # which class it fits (platt.labelled_fit)
            model = fit_store(self.estimator, f"class-{c}")
            self.estimators_.append(
                labelled_fit(model, f"class {c} vs rest", X, target)
            )
        return self

    def _decisions(self, X):
        """One column per class: for two classes (−f, f) from the single machine."""
        check_is_fitted(self, "estimators_")
        X = check_wrapped_samples(self, X)
        if X.ndim == 2 and hasattr(self, "n_features_in_"):
            check_n_features(X, self.n_features_in_)
        D = np.column_stack(
            [np.ravel(m.decision_function(X)) for m in self.estimators_]
        )
        return np.column_stack([-D[:, 0], D[:, 0]]) if len(self.classes_) == 2 else D

    def decision_function(self, X):
        """Each machine's decision value, shape (n_samples, n_classes); for two
        classes the one machine's, shape (n_samples,), positive for classes_[1]."""
        D = self._decisions(X)
        return D[:, 1] if len(self.classes_) == 2 else D

    def predict(self, X):
        return self.classes_[self._decisions(X).argmax(axis=1)]

    def ambiguous(self, X):
        """True where not exactly one machine puts x on its positive side."""
        return np.count_nonzero(self._decisions(X) > 0, axis=1) != 1
