"""SVC, NuSVC, SVR, NuSVR, OneClassSVM against scikit-learn (libsvm) with tol = 1e-6."""

import numpy as np
import pytest
from sklearn import svm as sk
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.model_selection import GridSearchCV

from kernelref.svm import (
    SVC,
    SVR,
    NuSVC,
    NuSVR,
    OneClassSVM,
    OneVsRestClassifier,
    kkt_report,
    problems,
)


def classification(seed, n=60, d=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=n) > 0, "b", "a")
    return X, y


def multiclass(seed, n=75):
    X, y = make_blobs(n_samples=n, centers=3, cluster_std=2.0, random_state=seed)
    return X, y + 1


def regression(seed, n=60):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)


KERNELS = [
    dict(kernel="rbf"),
    dict(kernel="rbf", gamma=0.4),
    dict(kernel="linear"),
    dict(kernel="poly", degree=2, gamma=0.3, coef0=1.0),
]
TOL = 1e-6


def values(model, X):
    regressor = type(model).__name__ in ("SVR", "NuSVR")
    return model.predict(X) if regressor else model.decision_function(X)


def assert_same_model(ours, theirs, X):
    if ours.kernel == "linear":
        # With a rank-D Gram matrix α is not unique (ties); the function f(x) is.
        d_ours, d_theirs = values(ours, X), values(theirs, X)
        np.testing.assert_allclose(
            d_ours, d_theirs, atol=1e-3 * max(1.0, np.abs(d_theirs).max())
        )
        return
    np.testing.assert_array_equal(ours.support_, theirs.support_)
    np.testing.assert_array_equal(ours.n_support_, theirs.n_support_)
    scale = max(1.0, np.abs(theirs.dual_coef_).max())
    np.testing.assert_allclose(ours.dual_coef_, theirs.dual_coef_, atol=1e-4 * scale)
    np.testing.assert_allclose(ours.intercept_, theirs.intercept_, atol=1e-4 * scale)
    d_ours, d_theirs = values(ours, X), values(theirs, X)
    np.testing.assert_allclose(
        d_ours, d_theirs, atol=1e-4 * max(1.0, np.abs(d_theirs).max())
    )


def dual_value(model, X, y_pm, C):
    """½ coefᵀKcoef − Σ|coef|: the C-SVC dual objective from a fitted binary model."""
    K = model.kernel_(X) if hasattr(model, "kernel_") else None
    coef = np.zeros(len(X))
    coef[model.support_] = model.dual_coef_[0]
    return 0.5 * coef @ K @ coef - np.abs(coef).sum()


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "params", KERNELS, ids=lambda p: "-".join(map(str, p.values()))
)
def test_svc_equals_libsvm(seed, params):
    X, y = classification(seed)
    ours = SVC(C=3.0, tol=TOL, **params).fit(X, y)
    theirs = sk.SVC(C=3.0, tol=TOL, **params).fit(X, y)
    assert_same_model(ours, theirs, X)
    np.testing.assert_array_equal(ours.predict(X), theirs.predict(X))
    d_ours = dual_value(ours, X, None, 3.0)
    d_theirs = (
        -np.abs(theirs.dual_coef_).sum()
        + 0.5
        * theirs.dual_coef_[0]
        @ ours.kernel_(theirs.support_vectors_)
        @ theirs.dual_coef_[0]
    )
    assert d_ours == pytest.approx(d_theirs, rel=1e-6)


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("shape", ["ovo", "ovr"])
def test_multiclass_svc_equals_libsvm_one_vs_one_layout(seed, shape):
    X, y = multiclass(seed)
    ours = SVC(C=2.0, tol=TOL, decision_function_shape=shape).fit(X, y)
    theirs = sk.SVC(C=2.0, tol=TOL, decision_function_shape=shape).fit(X, y)
    assert ours.dual_coef_.shape == (2, len(ours.support_))
    assert_same_model(ours, theirs, X)
    np.testing.assert_array_equal(ours.predict(X), theirs.predict(X))


@pytest.mark.parametrize("seed", [0, 2])
@pytest.mark.parametrize("nu", [0.2, 0.5])
def test_nusvc_equals_libsvm(seed, nu):
    X, y = classification(seed)
    ours = NuSVC(nu=nu, tol=TOL).fit(X, y)
    theirs = sk.NuSVC(nu=nu, tol=TOL).fit(X, y)
    # dual_coef_ is α/r: the solvers' common stop (tol on the unscaled problem) and
    # libsvm's float32 kernel cache leave 1/r times more room, here r ≈ 0.02–0.2.
    np.testing.assert_array_equal(ours.support_, theirs.support_)
    r_inv = np.abs(theirs.dual_coef_).max()
    np.testing.assert_allclose(ours.dual_coef_, theirs.dual_coef_, atol=1e-4 * r_inv**2)
    np.testing.assert_allclose(
        ours.decision_function(X), theirs.decision_function(X), atol=1e-4 * r_inv**2
    )


@pytest.mark.parametrize("seed", [0, 2])
def test_multiclass_nusvc_equals_libsvm(seed):
    # A pairwise decision value is (Σ αyK − ρ)/r and both solvers stop within tol on the
    # unscaled problem, so the values are determined to about tol/r. Overlapping classes
    # keep every r away from zero (asserted), so the comparison is meaningful.
    X, y = make_blobs(n_samples=75, centers=3, cluster_std=3.0, random_state=seed)
    ours = NuSVC(nu=0.5, tol=TOL, decision_function_shape="ovo").fit(X, y)
    theirs = sk.NuSVC(nu=0.5, tol=TOL, decision_function_shape="ovo").fit(X, y)
    r = np.array(ours._r)
    assert r.min() > 1e-3
    np.testing.assert_allclose(
        ours.decision_function(X), theirs.decision_function(X), atol=10 * TOL / r.min()
    )
    np.testing.assert_array_equal(ours.predict(X), theirs.predict(X))


def test_nusvc_on_a_degenerate_pair_is_certified_by_its_kkt_conditions():
    # Well-separated blobs and a small ν drive one pair's r to ~1e-6: α/r then magnifies
    # the solvers' tol-sized differences to order one, and the peers' predictions can
    # differ near that pair's boundary. Our solution is certified on its own terms.
    X, y = multiclass(0)
    model = NuSVC(nu=0.2, tol=TOL).fit(X, y)
    assert min(model._r) < 1e-4
    report = kkt_report(model, X, y)
    assert report.max_violation < TOL
    assert all(rep.duality_gap > -1e-12 for rep in report.pair_reports)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "params", KERNELS[:3], ids=lambda p: "-".join(map(str, p.values()))
)
def test_svr_nusvr_equal_libsvm(seed, params):
    X, z = regression(seed)
    assert_same_model(
        SVR(C=2.0, epsilon=0.2, tol=TOL, **params).fit(X, z),
        sk.SVR(C=2.0, epsilon=0.2, tol=TOL, **params).fit(X, z),
        X,
    )
    assert_same_model(
        NuSVR(C=2.0, nu=0.3, tol=TOL, **params).fit(X, z),
        sk.NuSVR(C=2.0, nu=0.3, tol=TOL, **params).fit(X, z),
        X,
    )


@pytest.mark.parametrize("nu", [0.1, 0.5])
def test_one_class_equals_libsvm(nu):
    X, _ = classification(4)
    ours, theirs = (
        OneClassSVM(nu=nu, tol=TOL).fit(X),
        sk.OneClassSVM(nu=nu, tol=TOL).fit(X),
    )
    assert_same_model(ours, theirs, X)
    # Free support vectors sit on the boundary, f = 0 up to tol: their sign is a tie.
    clear = np.abs(theirs.decision_function(X)) > 1e-4
    np.testing.assert_array_equal(ours.predict(X)[clear], theirs.predict(X)[clear])


def test_weights_and_precomputed_equal_libsvm():
    X, y = classification(5, n=70)
    w = np.random.default_rng(0).uniform(0.2, 2.0, size=70)
    w[3] = 0.0
    for cw in ["balanced", {"a": 2.0}]:
        ours = SVC(class_weight=cw, tol=TOL).fit(X, y, sample_weight=w)
        theirs = sk.SVC(class_weight=cw, tol=TOL).fit(X, y, sample_weight=w)
        # libsvm drops zero-weight samples and scikit-learn's support_ then indexes the
        # remaining ones; ours indexes X.
        np.testing.assert_array_equal(
            ours.support_, np.flatnonzero(w > 0)[theirs.support_]
        )
        np.testing.assert_allclose(ours.dual_coef_, theirs.dual_coef_, atol=1e-4)
        np.testing.assert_allclose(
            ours.decision_function(X), theirs.decision_function(X), atol=1e-4
        )
    K = X @ X.T
    ours = SVC(kernel="precomputed", tol=TOL).fit(K, y)
    theirs = sk.SVC(kernel="precomputed", tol=TOL).fit(K, y)
    np.testing.assert_allclose(
        ours.decision_function(K), theirs.decision_function(K), atol=1e-5
    )


@pytest.mark.parametrize("nu", [0.05, 0.2, 0.4, 0.6, 0.8])
def test_nu_bounds_margin_errors_and_support_vectors(nu):
    X, y = classification(6, n=100)
    model = NuSVC(nu=nu, tol=TOL).fit(X, y)
    a = np.abs(model.dual_coef_[0])
    at_bound = np.isclose(a, a.max(), rtol=1e-9)
    # Σα = νn with 0 ≤ α ≤ 1 before libsvm's 1/r rescale: #bound ≤ νn ≤ #SV.
    assert at_bound.sum() <= nu * len(X) + 1e-9 <= len(a) + 1e-9
    # Margin errors lie at the bound. Free SVs sit at margin 1 ± tol/r, so a point
    # counts as an error only clearly inside the margin.
    margin = np.where(y == model.classes_[1], 1, -1) * model.decision_function(X)
    errors = np.flatnonzero(margin < 0.99)
    assert set(errors) <= set(model.support_[at_bound])
    assert len(errors) / len(X) <= nu


def test_hard_margin_is_the_large_C_limit_and_refuses_overlap():
    X, y = make_blobs(n_samples=40, centers=2, cluster_std=0.6, random_state=1)
    hard = SVC(C=np.inf, kernel="linear", tol=TOL).fit(X, y)
    soft = SVC(C=1e6, kernel="linear", tol=TOL).fit(X, y)
    np.testing.assert_allclose(
        hard.decision_function(X), soft.decision_function(X), atol=1e-5
    )
    margin = np.where(y == 1, 1, -1) * hard.decision_function(X)
    assert margin.min() == pytest.approx(1.0, abs=1e-5)
    Xo, yo = classification(0)
    with pytest.raises(ValueError, match="not separable"):
        SVC(C=np.inf, kernel="linear").fit(Xo, yo)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: SVC(C=0).fit(*classification(0)), "C must be in"),
        (lambda: SVC(C=-1.0).fit(*classification(0)), "C must be in"),
        (lambda: NuSVC(nu=1.5).fit(*classification(0)), "nu must be in"),
        (lambda: NuSVR(nu=0.0).fit(*regression(0)), "nu must be in"),
        (lambda: OneClassSVM(nu=-0.1).fit(classification(0)[0]), "nu must be in"),
        (
            lambda: NuSVC(nu=0.9).fit(np.arange(20.0)[:, None], [0] * 4 + [1] * 16),
            "infeasible",
        ),
        # ν at its limit 2 min(n₊, n₋)/n: feasible, but the margin is undefined (r = ∞).
        (
            lambda: NuSVC(nu=0.4).fit(np.arange(20.0)[:, None], [0] * 4 + [1] * 16),
            "undefined",
        ),
        (lambda: SVC().fit(np.ones((5, 2)), [1] * 5), "single class"),
        (lambda: SVC().fit([[np.nan, 1.0], [0.0, 1.0]], [0, 1]), "NaN"),
        (lambda: SVR().fit(*classification(0)), "could not be converted"),
        (lambda: SVC(kernel="cubic").fit(*classification(0)), "kernel must be one of"),
        (lambda: SVC(gamma="wide").fit(*classification(0)), "gamma must be"),
        (
            lambda: SVC(decision_function_shape="ova").fit(*classification(0)),
            "decision_function_shape",
        ),
        (lambda: SVR(epsilon=-1).fit(*regression(0)), "epsilon must be in"),
        (lambda: SVC(class_weight={"z": 1.0}).fit(*classification(0)), "not in y"),
    ],
)
def test_bad_input_gets_a_clear_error(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_clone_and_grid_search_work():
    X, y = classification(1, n=80)
    model = SVC(C=2.0, gamma=0.5)
    assert clone(model).get_params() == model.get_params()
    search = GridSearchCV(
        SVC(tol=1e-4), {"C": [0.5, 5.0], "gamma": [0.1, 1.0]}, cv=3
    ).fit(X, y)
    assert search.best_score_ > 0.6
    assert isinstance(search.best_estimator_, SVC)


def test_one_vs_rest_has_ambiguous_regions_one_vs_one_resolves():
    X, y = multiclass(2)
    ovr = OneVsRestClassifier(SVC(kernel="linear")).fit(X, y)
    grid = np.random.default_rng(0).uniform(X.min(0), X.max(0), size=(400, 2))
    assert ovr.ambiguous(grid).any()
    assert set(ovr.predict(grid)) <= set(np.unique(y))
    assert ovr.score(X, y) > 0.6


def test_ovo_tie_goes_to_the_lowest_class():
    from kernelref.svm.multiclass import ovo_vote

    # Three classes, each pair votes in a cycle: 0 beats 1, 1 beats 2, 2 beats 0.
    dec = np.array([[1.0, -1.0, 1.0]])
    assert ovo_vote(dec, 3)[0] == 0


def test_kernel_rows_with_a_small_cache_recompute_rows():
    X, y = classification(3, n=50)
    rows = problems.KernelRows(
        SVC()._prepare(X)[0] is not None
        and __import__("kernelref.kernels", fromlist=["RBF"]).RBF(0.5),
        X,
        cache_bytes=8 * 50 * 4,
    )
    K = __import__("kernelref.kernels", fromlist=["RBF"]).RBF(0.5)(X)
    for n in [0, 7, 3, 9, 0, 7, 12]:
        np.testing.assert_allclose(rows.row(n), K[n], atol=1e-12)
