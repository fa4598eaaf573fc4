"""SVC, NuSVC, SVR, NuSVR and OneClassSVM: scikit-learn's interface on one SMO.

Arguments mean what they mean in scikit-learn; fitted attributes use its layout
(``dual_coef_``, ``support_``, ``support_vectors_``, ``intercept_``, ``n_support_``,
``n_iter_``). As there, a binary classifier's ``dual_coef_`` and ``intercept_`` have
the sign that makes a positive decision value mean ``classes_[1]``.

``cache_size`` is accepted and ignored: rows of the Gram matrix are cached up to
``kernelref.svm.problems.ROW_CACHE_BYTES``. ``SVC(C=np.inf)`` is the hard-margin
SVM (label ``svm-hard-dual``); it first checks, by a linear program, that the
classes are separable in the kernel's feature space and refuses them otherwise.
As in libsvm, ν-SVC has no C, so ``NuSVC``'s ``class_weight`` does not enter the
problem (only ``sample_weight`` does).
"""

import numbers
from dataclasses import replace

import numpy as np

from kernelref._validation import (
    check_classification_targets,
    check_is_fitted,
    check_n_features,
    check_sample_weight,
    check_samples,
    check_targets,
    check_training_samples,
    evaluate_kernel,
    plain,
    record_n_features,
)
from kernelref.base import (
    BaseEstimator,
    ClassifierMixin,
    RegressorMixin,
    restores_on_error,
)
from kernelref.kernels import Linear, make_kernel
from kernelref.svm import problems
from kernelref.svm.kkt import DualProblem
from kernelref.svm.multiclass import (
    assemble_one_vs_one,
    ovo_decision,
    ovo_vote,
    ovr_from_ovo,
    pairs,
)
from kernelref.svm.solver import solve

__all__ = ["NuSVC", "NuSVR", "OneClassSVM", "SVC", "SVR"]


def _check_number(value, name, low, high, *, low_open=True, allow_inf=False, hint=""):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number; got {plain(value)!r}.")
    value = float(value)
    finite_ok = np.isfinite(value) or (allow_inf and value == np.inf)
    below = value <= low if low_open else value < low
    if not finite_ok or below or value > high:
        left = "(" if low_open else "["
        right = "]" if np.isfinite(high) or allow_inf else ")"
        raise ValueError(
            f"{name} must be in {left}{low:g}, {high:g}{right}; got {value!r}.{hint}"
        )
    return value


class _BaseSVM(BaseEstimator):
    """Validation, the Gram rows and prediction shared by the five machines."""

    sparse_input = True

    def _validate_common(self):
        _check_number(self.tol, "tol", 0, np.inf, hint=" libsvm's default is 1e-3.")
        if (
            isinstance(self.max_iter, bool)
            or not isinstance(self.max_iter, numbers.Integral)
            or self.max_iter == 0
        ):
            raise ValueError(
                f"max_iter must be a nonzero integer (−1: no cap); got "
                f"{self.max_iter!r}."
            )
        if not isinstance(self.shrinking, (bool, np.bool_)):
            raise TypeError(f"shrinking must be True or False; got {self.shrinking!r}.")
        if isinstance(self.gamma, str) and self.gamma not in ("scale", "auto"):
            raise ValueError(
                f"gamma must be a positive number, 'scale' or 'auto'; "
                f"got {self.gamma!r}."
            )

    def _validate_X(self, X):
        return check_training_samples(X, self.kernel, accept_sparse="kernel")

    def _sample_weight(self, sample_weight, n):
        if sample_weight is None:
            return np.ones(n)
        return check_sample_weight(
            sample_weight, n, "it scales C (or the bound 1 of the ν forms) per sample."
        )

    def _prepare(self, X):
        self._validate_common()
        X = self._validate_X(X)
        self.kernel_ = make_kernel(self.kernel, X, self.gamma, self.degree, self.coef0)
        self._X_fit = X
        record_n_features(self, X)
        self.shape_fit_ = X.shape
        return X, problems.KernelRows(self.kernel_, X)

    def _solve(self, qp, rows):
        return solve(
            qp,
            rows,
            tol=self.tol,
            shrinking=bool(self.shrinking),
            max_iter=self.max_iter,
        )

    def _solve_all(self, qps, rows):
        """The ``Solution`` of every QP, in order (a backend solves them
        concurrently)."""
        return [self._solve(qp, rows) for qp in qps]

    def _set_support_vectors(self):
        if isinstance(self.kernel_, str):
            self.support_vectors_ = np.empty((0, 0))
        else:
            self.support_vectors_ = self._X_fit[self.support_]

    def _kernel_to_sv(self, X):
        """k(x, s) for the support vectors s, shape (n_samples, n_SV)."""
        check_is_fitted(self, "support_")
        X = check_samples(X, self.kernel_, "X", accept_sparse="kernel")
        if isinstance(self.kernel_, str):
            if X.shape[1] != self.shape_fit_[0]:
                raise ValueError(
                    f"with kernel='precomputed', X must be K(X_test, X_train) with "
                    f"{self.shape_fit_[0]} columns; got {X.shape[1]}."
                )
            return X[:, self.support_]
        if X.ndim == 2:
            check_n_features(X, self.n_features_in_)
        return evaluate_kernel(self.kernel_, X, self.support_vectors_)

    @property
    def coef_(self):
        """The primal weights w = Σ_s dual_coef_s x_s of a linear-kernel machine
        (label ``svm-hard-stationarity``), so that the decision value is wᵀx + b:
        shape (1, n_features), or one row per pair (i, j) for a multiclass SVC.
        A dense array also for sparse X (scikit-learn keeps it sparse there).
        Only the linear kernel has them; other kernels raise AttributeError."""
        if not (self.kernel == "linear" or type(self.kernel) is Linear):
            raise AttributeError("coef_ is only available when using a linear kernel")
        check_is_fitted(self, "support_")
        coef = np.asarray(self._coef_rows(), dtype=float)
        coef.flags.writeable = False
        return coef

    def _coef_rows(self):
        return self.dual_coef_ @ self.support_vectors_


class _BaseSVC(ClassifierMixin, _BaseSVM):
    """One-vs-one over the pairs of classes; binary is the single pair (0, 1)."""

    def _validate_shape(self):
        if self.decision_function_shape not in ("ovr", "ovo"):
            raise ValueError(
                "decision_function_shape must be 'ovr' or 'ovo'; "
                f"got {self.decision_function_shape!r}."
            )
        if not isinstance(self.break_ties, (bool, np.bool_)):
            raise TypeError(
                f"break_ties must be True or False; got {self.break_ties!r}."
            )

    @restores_on_error
    def fit(self, X, y, sample_weight=None):
        self._validate_shape()
        self._validate_params()
        X_checked = self._validate_X(X)
        self.classes_, y_index = check_classification_targets(
            y, X_checked.shape[0], "y"
        )
        w = self._sample_weight(sample_weight, X_checked.shape[0])
        C_class = self._class_bounds(y_index, len(self.classes_))
        self._check_feasible(y_index, w)
        X, rows = self._prepare(X_checked)
        qps = self._pair_problems(y_index, C_class, w)
        if getattr(self, "C", None) == np.inf:
            for qp in qps:
                self._check_separable(rows, qp.src, qp.y)
        coefs, rhos, self._r, n_iter = [], [], [], []
        for qp, s in zip(qps, self._solve_all(qps, rows)):
            scale = 1.0 / s.r if qp.nu else 1.0
            coefs.append(dict(zip(qp.src.tolist(), qp.y * s.alpha * scale)))
            rhos.append(s.rho * scale)
            self._r.append(s.r)
            n_iter.append(s.n_iter)
        self.support_, self.n_support_, dual_coef = assemble_one_vs_one(
            y_index, len(self.classes_), coefs
        )
        intercept = -np.array(rhos)
        if len(self.classes_) == 2:
            # scikit-learn's sign: a positive decision value means classes_[1].
            dual_coef, intercept = -dual_coef, -intercept
        self.dual_coef_, self.intercept_ = dual_coef, intercept
        self.n_iter_ = np.array(n_iter, dtype=np.int32)
        self._set_support_vectors()
        return self

    def _pair_problems(self, y_index, C_class, w):
        """The QP of every pair (i, j) in libsvm's order; class i is y = +1."""
        qps = []
        for i, j in pairs(len(self.classes_)):
            idx = np.flatnonzero(((y_index == i) | (y_index == j)) & (w > 0))
            y_pm = np.where(y_index[idx] == i, 1.0, -1.0)
            qps.append(
                replace(
                    self._problem(y_pm, C_class[y_index[idx]] * w[idx], w[idx]), src=idx
                )
            )
        return qps

    def dual_problems(self, y, sample_weight=None):
        """Each pair's QP with the (α, ρ, r) this fitted model holds, read back from
        ``dual_coef_``, ``support_`` and ``intercept_`` (a list of ``DualProblem``):
        what ``kkt_report`` certifies."""
        check_is_fitted(self, "support_")
        classes, y_index = check_classification_targets(
            y, len(y) if y is not None else 0, "y"
        )
        n, n_classes = len(y_index), len(classes)
        w = self._sample_weight(sample_weight, n)
        starts = np.concatenate([[0], np.cumsum(self.n_support_)])
        binary = n_classes == 2
        dual = -self.dual_coef_ if binary else self.dual_coef_
        intercept = -self.intercept_ if binary else self.intercept_
        out = []
        for p, ((i, j), qp) in enumerate(
            zip(
                pairs(n_classes),
                self._pair_problems(y_index, self._class_bounds(y_index, n_classes), w),
            )
        ):
            coef = np.zeros(n)
            si, sj = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
            coef[self.support_[si]] = dual[j - 1, si]
            coef[self.support_[sj]] = dual[i, sj]
            alpha, rho, r = qp.y * coef[qp.src], -intercept[p], 0.0
            if qp.nu:
                # libsvm keeps α/r and ρ/r; the ν problem itself is in the unscaled α.
                r = self._r[p]
                alpha, rho = alpha * r, rho * r
            out.append(DualProblem(qp, alpha, rho, r, r if qp.nu else 1.0))
        return out

    def pairwise_decision(self, X):
        """Decision value of every binary machine, libsvm's sign (> 0 favours class i
        of pair (i, j)), shape (n_samples, n_pairs)."""
        K_sv = self._kernel_to_sv(X)
        return ovo_decision(
            K_sv,
            -self.dual_coef_ if len(self.classes_) == 2 else self.dual_coef_,
            -self.intercept_ if len(self.classes_) == 2 else self.intercept_,
            self.n_support_,
        )

    def _coef_rows(self):
        """Binary: dual_coef_ times the support vectors; multiclass: for pair (i, j)
        the coefficients of class i's and class j's support vectors in that machine
        (the layout of ``dual_coef_``, as in libsvm and scikit-learn)."""
        if len(self.classes_) == 2:
            return super()._coef_rows()
        starts = np.concatenate([[0], np.cumsum(self.n_support_)])
        rows = []
        for i, j in pairs(len(self.classes_)):
            si, sj = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
            rows.append(
                self.dual_coef_[j - 1, si] @ self.support_vectors_[si]
                + self.dual_coef_[i, sj] @ self.support_vectors_[sj]
            )
        return np.vstack(rows)

    def _check_separable(self, rows, idx, y_pm):
        """Hard margin: is there β, b with y_n(Σ_m K_nm β_m + b) ≥ 1? (a linear
        program)."""
        # Imported here: scipy.optimize costs 0.2 s at start-up, and only C=inf uses it.
        from scipy.optimize import linprog

        K = np.array([rows.row(n)[idx] for n in idx])
        A = -y_pm[:, None] * np.column_stack([K, np.ones(len(idx))])
        res = linprog(
            np.zeros(len(idx) + 1),
            A_ub=A,
            b_ub=-np.ones(len(idx)),
            bounds=(None, None),
            method="highs",
        )
        if res.status == 2:
            raise ValueError(
                "C=np.inf asks for the hard-margin SVM, but the classes are not "
                "separable in the kernel's feature space; use a finite C (the soft "
                "margin)."
            )

    def decision_function(self, X):
        """Binary: Σ dual_coef k(s, x) + b (> 0 means classes_[1]); multiclass: the
        pairwise values ('ovo', libsvm's sign) or their 'ovr' transformation."""
        K_sv = self._kernel_to_sv(X)
        if len(self.classes_) == 2:
            return K_sv @ self.dual_coef_[0] + self.intercept_[0]
        dec = ovo_decision(K_sv, self.dual_coef_, self.intercept_, self.n_support_)
        if self.decision_function_shape == "ovr":
            return ovr_from_ovo(dec, len(self.classes_))
        return dec

    def predict(self, X):
        """The class by (ovo-vote); binary: classes_[1] where the decision value is ≥ 0.

        With ``break_ties=True`` (only for ``decision_function_shape="ovr"``) and more
        than two classes, the class of largest 'ovr' decision value, as scikit-learn.
        """
        if self.break_ties and self.decision_function_shape == "ovo":
            raise ValueError(
                "break_ties must be False when decision_function_shape is "
                "'ovo'; ties are broken by the 'ovr' decision values."
            )
        if self.break_ties and len(self.classes_) > 2:
            return self.classes_[np.argmax(self.decision_function(X), axis=1)]
        K_sv = self._kernel_to_sv(X)
        if len(self.classes_) == 2:
            dec = K_sv @ self.dual_coef_[0] + self.intercept_[0]
            return self.classes_[(dec >= 0).astype(int)]
        dec = ovo_decision(K_sv, self.dual_coef_, self.intercept_, self.n_support_)
        return self.classes_[ovo_vote(dec, len(self.classes_))]


class SVC(_BaseSVC):
    """C-support vector classification (labels ``svm-soft-dual``, ``svm-hard-dual``)."""

    def __init__(
        self,
        C=1.0,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        shrinking=True,
        tol=1e-3,
        cache_size=200,
        class_weight=None,
        max_iter=-1,
        decision_function_shape="ovr",
        break_ties=False,
    ):
        self.C, self.kernel, self.degree, self.gamma, self.coef0 = (
            C,
            kernel,
            degree,
            gamma,
            coef0,
        )
        self.shrinking, self.tol, self.cache_size = shrinking, tol, cache_size
        self.class_weight, self.max_iter = class_weight, max_iter
        self.decision_function_shape, self.break_ties = (
            decision_function_shape,
            break_ties,
        )

    def _validate_params(self):
        _check_number(
            self.C,
            "C",
            0,
            np.inf,
            allow_inf=True,
            hint=" C > 0 weighs the slack; C=np.inf is the hard margin.",
        )

    def _class_bounds(self, y_index, n_classes):
        cw = np.ones(n_classes)
        if isinstance(self.class_weight, str) and self.class_weight == "balanced":
            cw = len(y_index) / (n_classes * np.bincount(y_index, minlength=n_classes))
        elif isinstance(self.class_weight, dict):
            for label, weight in self.class_weight.items():
                hits = np.flatnonzero(self.classes_ == label)
                if len(hits) == 0:
                    raise ValueError(
                        f"class_weight names the label {label!r}, which is not "
                        f"in y; the classes are {self.classes_.tolist()}."
                    )
                cw[hits[0]] = _check_number(
                    weight, f"class_weight[{label!r}]", 0, np.inf
                )
        elif self.class_weight is not None:
            raise ValueError(
                f"class_weight must be None, 'balanced' or a dict; "
                f"got {self.class_weight!r}."
            )
        return float(self.C) * cw

    def _check_feasible(self, y_index, w):
        pass

    def _problem(self, y_pm, C, w):
        return problems.c_svc(y_pm, C)


class NuSVC(SVC):
    """ν-support vector classification (label ``svm-nu-dual``): ν ∈ (0, 1] bounds the
    fraction of margin errors from above and of support vectors from below."""

    def __init__(
        self,
        nu=0.5,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        shrinking=True,
        tol=1e-3,
        cache_size=200,
        class_weight=None,
        max_iter=-1,
        decision_function_shape="ovr",
        break_ties=False,
    ):
        self.nu, self.kernel, self.degree, self.gamma, self.coef0 = (
            nu,
            kernel,
            degree,
            gamma,
            coef0,
        )
        self.shrinking, self.tol, self.cache_size = shrinking, tol, cache_size
        self.class_weight, self.max_iter = class_weight, max_iter
        self.decision_function_shape, self.break_ties = (
            decision_function_shape,
            break_ties,
        )

    def _validate_params(self):
        _check_number(self.nu, "nu", 0, 1, hint=" ν is a fraction of the training set.")

    def _class_bounds(self, y_index, n_classes):
        return np.ones(n_classes)

    def _check_feasible(self, y_index, w):
        """ν-SVC is feasible only if ν (w_i + w_j)/2 ≤ min(w_i, w_j) for every pair,
        w_i the weight of class i (Chang & Lin 2001)."""
        totals = np.bincount(y_index, weights=w)
        for i, j in pairs(len(totals)):
            if self.nu * (totals[i] + totals[j]) / 2.0 >= min(totals[i], totals[j]):
                limit = 2.0 * min(totals[i], totals[j]) / (totals[i] + totals[j])
                raise ValueError(
                    f"nu={self.nu:g} is infeasible for classes "
                    f"{plain(self.classes_[i])!r} and {plain(self.classes_[j])!r}: "
                    f"ν-SVC needs ν < 2 min(n₊, n₋)/n = {limit:.4g}, as Σα = νn/2 must "
                    "fit in each class's box; at equality every multiplier of the "
                    "smaller class is at its bound and the margin is undefined "
                    "(r = ∞); lower nu."
                )

    def _problem(self, y_pm, C, w):
        return problems.nu_svc(y_pm, self.nu, w)


class _BaseRegressionLike(_BaseSVM):
    def _finish(self, qp, s, n):
        coef = np.bincount(qp.src, weights=qp.y * s.alpha, minlength=n)
        self.support_ = np.flatnonzero(coef != 0).astype(np.int32)
        self.dual_coef_ = coef[self.support_][None, :]
        self.intercept_ = np.array([-s.rho])
        self.n_support_ = np.array([len(self.support_)], dtype=np.int32)
        self.n_iter_ = s.n_iter
        self._r = [s.r]
        self._set_support_vectors()

    def dual_problems(self, y=None, sample_weight=None):
        """The QP with the (α, ρ, r) this fitted model holds, read back from
        ``dual_coef_``, ``support_`` and ``intercept_``: a list of one
        ``DualProblem``."""
        check_is_fitted(self, "support_")
        n = self.shape_fit_[0]
        w = self._sample_weight(sample_weight, n)
        coef = np.zeros(n)
        coef[self.support_] = self.dual_coef_[0]
        keep = np.flatnonzero(w > 0)
        if isinstance(self, OneClassSVM):
            qp, alpha = self._problem(w[keep]), coef[keep]
        else:
            qp = self._problem(check_targets(y, n, "y")[keep], w[keep])
            alpha = np.concatenate(
                [np.maximum(coef[keep], 0), np.maximum(-coef[keep], 0)]
            )
        qp = replace(qp, src=keep[qp.src])
        # dual_coef_ holds α − α* only; ν-SVR's Σ(α + α*) = Δ₂ may need more than
        # the least split read here (kkt.complete_split). ε-SVR has no such
        # equality, and with ε > 0 no optimum has α_n, α*_n both positive.
        return [
            DualProblem(
                qp, alpha, -self.intercept_[0], self._r[0], split_known=not qp.nu
            )
        ]

    def pairwise_decision(self, X):
        """The decision values as one column, shape (n_samples, 1)."""
        return self.decision_function(X)[:, None]

    def decision_function(self, X):
        """Σ_s dual_coef_s k(x_s, x) + b (labels ``svr-predict``,
        ``svm-one-class-dual``)."""
        return self._kernel_to_sv(X) @ self.dual_coef_[0] + self.intercept_[0]


class SVR(RegressorMixin, _BaseRegressionLike):
    """ε-support vector regression (label ``svr-dual``)."""

    def __init__(
        self,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        tol=1e-3,
        C=1.0,
        epsilon=0.1,
        shrinking=True,
        cache_size=200,
        max_iter=-1,
    ):
        self.kernel, self.degree, self.gamma, self.coef0 = kernel, degree, gamma, coef0
        self.tol, self.C, self.epsilon = tol, C, epsilon
        self.shrinking, self.cache_size, self.max_iter = shrinking, cache_size, max_iter

    def _validate_params(self):
        _check_number(self.C, "C", 0, np.inf)
        _check_number(
            self.epsilon,
            "epsilon",
            0,
            np.inf,
            low_open=False,
            hint=" ε is the half-width of the insensitive tube.",
        )

    def _problem(self, z, w):
        return problems.epsilon_svr(z, float(self.C) * w, float(self.epsilon))

    @restores_on_error
    def fit(self, X, y, sample_weight=None):
        self._validate_params()
        X_checked = self._validate_X(X)
        z = check_targets(y, X_checked.shape[0], "y")
        if z.ndim != 1:
            raise ValueError(
                f"y must be 1-D of shape (n_samples,); got shape {z.shape}."
            )
        w = self._sample_weight(sample_weight, X_checked.shape[0])
        X, rows = self._prepare(X_checked)
        keep = np.flatnonzero(w > 0)
        qp = self._problem(z[keep], w[keep])
        qp = replace(qp, src=keep[qp.src])
        self._finish(qp, self._solve_all([qp], rows)[0], X.shape[0])
        return self

    def predict(self, X):
        return self.decision_function(X)


class NuSVR(SVR):
    """ν-support vector regression (label ``nu-svr-dual``): the tube width is learnt."""

    def __init__(
        self,
        nu=0.5,
        C=1.0,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        shrinking=True,
        tol=1e-3,
        cache_size=200,
        max_iter=-1,
    ):
        self.nu, self.C, self.kernel, self.degree = nu, C, kernel, degree
        self.gamma, self.coef0, self.shrinking, self.tol = gamma, coef0, shrinking, tol
        self.cache_size, self.max_iter = cache_size, max_iter

    def _validate_params(self):
        _check_number(self.C, "C", 0, np.inf)
        _check_number(self.nu, "nu", 0, 1, hint=" ν is a fraction of the training set.")

    def _problem(self, z, w):
        return problems.nu_svr(z, float(self.C) * w, float(self.nu))


class OneClassSVM(_BaseRegressionLike):
    """One-class SVM (label ``svm-one-class-dual``): about a fraction ν of the
    training points fall outside; ``predict`` gives +1 inside, −1 outside."""

    _estimator_type = "outlier_detector"

    def __init__(
        self,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        tol=1e-3,
        nu=0.5,
        shrinking=True,
        cache_size=200,
        max_iter=-1,
    ):
        self.kernel, self.degree, self.gamma, self.coef0 = kernel, degree, gamma, coef0
        self.tol, self.nu, self.shrinking = tol, nu, shrinking
        self.cache_size, self.max_iter = cache_size, max_iter

    def _validate_params(self):
        _check_number(self.nu, "nu", 0, 1, hint=" ν is a fraction of the training set.")

    def _problem(self, w):
        return problems.one_class(float(self.nu), w)

    @restores_on_error
    def fit(self, X, y=None, sample_weight=None):
        self._validate_params()
        X_checked = self._validate_X(X)
        w = self._sample_weight(sample_weight, X_checked.shape[0])
        X, rows = self._prepare(X_checked)
        keep = np.flatnonzero(w > 0)
        qp = self._problem(w[keep])
        qp = replace(qp, src=keep[qp.src])
        self._finish(qp, self._solve_all([qp], rows)[0], X.shape[0])
        self.offset_ = -self.intercept_
        return self

    def score_samples(self, X):
        return self.decision_function(X) + self.offset_[0]

    def predict(self, X):
        """+1 where the decision value is > 0, else −1 (libsvm's rule)."""
        return np.where(self.decision_function(X) > 0, 1, -1)
