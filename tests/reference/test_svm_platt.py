"""Platt scaling and pairwise coupling: optimality, libsvm parity, calibration."""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.base import clone as sklearn_clone
from sklearn.calibration import _sigmoid_calibration
from sklearn.datasets import make_blobs
from sklearn.svm import SVC as SklearnSVC

from kernelref._validation import NotFittedError
from kernelref.svm.platt import (
    PlattCalibrated,
    coupling_matrix,
    pairwise_coupling,
    platt_objective,
    platt_targets,
    sigmoid_predict,
    sigmoid_train,
    stratified_folds,
)


def scores(n, seed, shift=0.0):
    """Noisy decision values: label 1 is likelier for larger f."""
    rng = np.random.default_rng(seed)
    f = rng.normal(size=n) * 2.0
    y = (f + shift + rng.normal(size=n) > 0).astype(int)
    return f, y


def random_pairwise(n, K, seed):
    rng = np.random.default_rng(seed)
    r = rng.uniform(0.02, 0.98, size=(n, K, K))
    upper = np.triu(np.ones((K, K), dtype=bool), 1)
    return np.where(upper, r, 1.0 - np.swapaxes(r, 1, 2)) * ~np.eye(K, dtype=bool)


@pytest.mark.parametrize("seed,shift", [(0, 0.0), (1, 1.5), (2, -2.0)])
def test_sigmoid_train_minimises_the_smoothed_cross_entropy(seed, shift):
    f, y = scores(150, seed, shift)
    A, B, _ = sigmoid_train(f, y)
    t = platt_targets(y)
    p = sigmoid_predict(f, A, B)
    assert np.abs([f @ (t - p), np.sum(t - p)]).max() < 1e-5
    generic = minimize(
        lambda ab: platt_objective(ab[0], ab[1], f, t),
        [0.0, 0.0],
        method="BFGS",
        options={"gtol": 1e-10},
    )
    assert platt_objective(A, B, f, t) <= generic.fun + 1e-9
    np.testing.assert_allclose([A, B], generic.x, atol=1e-5)


@pytest.mark.parametrize("seed,shift", [(3, 0.0), (4, 0.8)])
def test_sigmoid_train_matches_scikit_learns_platt_fit(seed, shift):
    # libsvm's sigmoid_train cannot be called on given decision values from Python;
    # _sigmoid_calibration minimises the same smoothed cross-entropy (by L-BFGS).
    f, y = scores(200, seed, shift)
    A, B, _ = sigmoid_train(f, y)
    a_ref, b_ref = _sigmoid_calibration(f, y)
    np.testing.assert_allclose([A, B], [a_ref, b_ref], rtol=1e-5, atol=1e-6)


def test_targets_are_smoothed_class_frequencies():
    y = np.array([1, 1, 1, 0])
    np.testing.assert_array_equal(platt_targets(y), [4 / 5, 4 / 5, 4 / 5, 1 / 3])


def test_sigmoid_train_is_finite_for_huge_separable_scores():
    f = np.concatenate([np.linspace(-900.0, -300.0, 20), np.linspace(300.0, 900.0, 20)])
    y = (f > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow in exp, no failed search
        A, B, _ = sigmoid_train(f, y)
    t = platt_targets(y)
    assert A < 0 and np.isfinite(platt_objective(A, B, f, t))
    # smoothing keeps the fit from the infinite slope of a separable sample
    p = sigmoid_predict(f, A, B)
    assert p[y == 1].max() < 1 and p[y == 0].min() > 0


def test_pairwise_coupling_solves_its_optimality_conditions():
    r = random_pairwise(20, 4, seed=5)
    p = pairwise_coupling(r)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-14)
    assert p.min() > 0
    Q = coupling_matrix(r)
    Qp = np.einsum("nij,nj->ni", Q, p)
    pQp = np.einsum("ni,ni->n", p, Qp)
    # Qp = (pᵀQp)·1: every coordinate of the gradient equals the multiplier
    assert np.abs(Qp - pQp[:, None]).max() < 1e-13
    for n in range(3):
        generic = minimize(
            lambda q: q @ Q[n] @ q,
            np.full(4, 0.25),
            method="SLSQP",
            bounds=[(0, 1)] * 4,
            constraints={"type": "eq", "fun": lambda q: q.sum() - 1},
            options={"ftol": 1e-15, "maxiter": 500},
        )
        np.testing.assert_allclose(p[n], generic.x, atol=1e-6)


def test_coupling_matrix_is_the_method_2_objective():
    # pᵀQp = ½ Σ_i Σ_{j≠i} (r_ji p_i − r_ij p_j)², Wu, Lin & Weng (2004), eq. (18)
    r = random_pairwise(1, 5, seed=6)[0]
    p = np.random.default_rng(7).dirichlet(np.ones(5))
    direct = 0.5 * sum(
        (r[j, i] * p[i] - r[i, j] * p[j]) ** 2
        for i in range(5)
        for j in range(5)
        if j != i
    )
    np.testing.assert_allclose(p @ coupling_matrix(r) @ p, direct, rtol=1e-13)


def test_consistent_pairwise_probabilities_are_recovered_exactly():
    p_true = np.array([0.5, 0.3, 0.15, 0.05])
    r = p_true[:, None] / (p_true[:, None] + p_true[None, :])
    np.fill_diagonal(r, 0.0)
    np.testing.assert_allclose(pairwise_coupling(r[None])[0], p_true, atol=1e-13)


def test_pairwise_coupling_matches_libsvm():
    X, y = make_blobs(120, centers=4, cluster_std=2.5, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # probability=True is deprecated
        svc = SklearnSVC(
            probability=True, random_state=0, decision_function_shape="ovo"
        ).fit(X, y)
        prob_A, prob_B = svc.probA_, svc.probB_
        libsvm_proba = svc.predict_proba(X)
    D = svc.decision_function(X)
    K = 4
    r = np.zeros((len(X), K, K))
    pairs = [(i, j) for i in range(K) for j in range(i + 1, K)]
    for c, (i, j) in enumerate(pairs):
        r[:, i, j] = sigmoid_predict(D[:, c], prob_A[c], prob_B[c])
        r[:, j, i] = 1 - r[:, i, j]
    # libsvm iterates until max_i |(Qp)_i − pᵀQp| < 0.005/K, so it agrees only to
    # that order; the exact solution of the same conditions is within 0.005.
    difference = np.abs(pairwise_coupling(r) - libsvm_proba).max()
    assert difference < 0.005


def two_gaussians(n, seed):
    """Classes ±1 with means ±1 and unit variance: P(y=1 | x) = σ(2x) exactly."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    return rng.normal(np.where(y == 1, 1.0, -1.0), 1.0)[:, None], y


def test_binary_probabilities_are_calibrated():
    X, y = two_gaussians(800, seed=0)
    X_test, _ = two_gaussians(20_000, seed=1)
    p_true = expit(2 * X_test[:, 0])
    model = PlattCalibrated(SklearnSVC(kernel="linear"), cv=5, random_state=0).fit(X, y)
    p = model.predict_proba(X_test)[:, 1]

    def worst_bin(prob):
        bins = np.digitize(prob, np.linspace(0, 1, 6)[1:-1])
        return max(
            abs(prob[bins == k].mean() - p_true[bins == k].mean())
            for k in range(5)
            if np.count_nonzero(bins == k) >= 500
        )

    # The decision value is linear in x, so the sigmoid family holds the truth and only
    # the fit of (A, B) errs. From N = 800 points each has a standard error of about
    # 1/√(N p(1−p)) ≈ 0.07 in the logit, i.e. ≤ 0.02 in probability (p(1−p) ≤ ¼):
    # a reliability of 0.05 per bin allows two and a half standard errors.
    tolerance = 0.05
    assert worst_bin(p) < tolerance
    # The tolerance can fail: doubling the slope of the same sigmoid breaks it.
    ((A, B),) = model.sigmoids_
    assert (
        worst_bin(sigmoid_predict(model.decision_function(X_test), 2 * A, B))
        > tolerance
    )


def test_predict_is_argmax_and_differs_from_the_base_exactly_between_the_thresholds():
    rng = np.random.default_rng(2)
    X = np.vstack([rng.normal(-1, 1.2, (150, 2)), rng.normal(1, 1.2, (30, 2))])
    y = np.repeat([0, 1], [150, 30])
    model = PlattCalibrated(SklearnSVC(kernel="rbf", C=1.0), random_state=0).fit(X, y)
    X_test = rng.uniform(-3, 3, (2000, 2))
    proba = model.predict_proba(X_test)
    np.testing.assert_array_equal(
        model.predict(X_test), model.classes_[proba.argmax(1)]
    )
    f = model.decision_function(X_test)
    ((A, B),) = model.sigmoids_
    base = model.estimators_[0].predict(X_test)
    disagree = model.predict(X_test) != base
    between = f * (f + B / A) < 0  # f between 0 and the sigmoid's −B/A
    assert disagree.any()
    np.testing.assert_array_equal(disagree, between)


def test_multiclass_probabilities_sum_to_one_and_predict_well():
    X, y = make_blobs(150, centers=3, cluster_std=1.5, random_state=3)
    labels = np.array(["a", "b", "c"])[y]
    model = PlattCalibrated(SklearnSVC(C=1.0), cv=3, random_state=1).fit(X, labels)
    proba = model.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-13)
    assert model.decision_function(X).shape == (150, 3) and model.sigmoids_.shape == (
        3,
        2,
    )
    assert model.score(X, labels) > 0.9
    assert set(model.predict(X)) <= set(labels)


def test_folds_are_stratified():
    y = np.repeat([0, 1, 2], [10, 20, 30])
    folds = stratified_folds(y, 5, np.random.default_rng(0))
    for k in range(5):
        np.testing.assert_array_equal(
            np.bincount(y[folds == k], minlength=3), [2, 4, 6]
        )


def test_clone_and_params_follow_scikit_learn():
    model = PlattCalibrated(SklearnSVC(C=2.0), cv=4, random_state=3)
    copy = sklearn_clone(model)
    assert copy.get_params()["estimator__C"] == 2.0 and copy.cv == 4
    assert copy.estimator is not model.estimator
    X, y = make_blobs(60, centers=2, random_state=0)
    model.fit(X, y)
    assert model.get_params(deep=False)["cv"] == 4 and not hasattr(
        model.estimator, "support_"
    )
    model.set_params(estimator__C=0.5)
    assert model.estimator.C == 0.5


@pytest.mark.parametrize(
    "kwargs,X,y,error,match",
    [
        (
            {"estimator": object()},
            None,
            None,
            TypeError,
            "estimator must be a classifier",
        ),
        ({"cv": 1}, None, None, ValueError, "cv must be an integer"),
        ({"cv": True}, None, None, ValueError, "cv must be an integer"),
        ({"random_state": "seed"}, None, None, TypeError, "random_state"),
        ({}, None, np.zeros(40), ValueError, "single class"),
        ({}, np.full((40, 2), np.nan), None, ValueError, "NaN"),
        ({}, None, np.r_[np.zeros(37), np.ones(3)], ValueError, "at least cv samples"),
        ({}, np.zeros(40), None, ValueError, "2-D"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(kwargs, X, y, error, match):
    X = np.random.default_rng(0).normal(size=(40, 2)) if X is None else X
    y = np.repeat([0, 1], 20) if y is None else y
    params = {"estimator": SklearnSVC(), **kwargs}
    with pytest.raises(error, match=match):
        PlattCalibrated(**params).fit(X, y)


def test_use_before_fit_and_wrong_width_are_refused():
    model = PlattCalibrated(SklearnSVC())
    with pytest.raises(NotFittedError, match="not fitted"):
        model.predict_proba(np.zeros((2, 2)))
    X, y = make_blobs(40, centers=2, random_state=0)
    model.fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.zeros((2, 3)))


def test_wraps_kernelref_svc_in_a_multiclass_problem():
    from kernelref.svm.estimators import SVC

    X, y = make_blobs(90, centers=3, cluster_std=1.5, random_state=4)
    ours = PlattCalibrated(
        SVC(kernel="linear", C=1.0, tol=1e-6), cv=3, random_state=0
    ).fit(X, y)
    theirs = PlattCalibrated(
        SklearnSVC(kernel="linear", C=1.0, tol=1e-6), cv=3, random_state=0
    ).fit(X, y)
    # same folds, same pairwise problems: the two solvers give the same sigmoids
    np.testing.assert_allclose(ours.sigmoids_, theirs.sigmoids_, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
        ours.predict_proba(X), theirs.predict_proba(X), atol=1e-4
    )


@pytest.mark.parametrize("n_classes", [2, 3])
def test_precomputed_kernel_gives_the_probabilities_of_its_kernel(n_classes, tmp_path):
    """SVC(kernel="precomputed") on K = k(X, X): each pair and fold fits on the
    columns of its own training samples, so the probabilities are those of
    SVC(kernel=k) on X; they survive a model file."""
    from kernelref.io import load
    from kernelref.kernels import RBF
    from kernelref.svm.estimators import SVC

    X, y = make_blobs(90, centers=n_classes, cluster_std=2.0, random_state=5)
    X_test = np.random.default_rng(6).normal(size=(20, 2)) * 4
    k = RBF(0.3)
    on_X = PlattCalibrated(SVC(gamma=0.3, tol=1e-8), cv=3, random_state=0).fit(X, y)
    on_K = PlattCalibrated(SVC(kernel="precomputed", tol=1e-8), cv=3, random_state=0)
    on_K.fit(k(X, X), y)
    K_test = k(X_test, X)
    np.testing.assert_allclose(
        on_K.predict_proba(K_test), on_X.predict_proba(X_test), atol=1e-8
    )
    on_K.save(tmp_path / "m.krm")
    np.testing.assert_array_equal(
        load(tmp_path / "m.krm").predict_proba(K_test), on_K.predict_proba(K_test)
    )
    with pytest.raises(ValueError, match="kernel is 'precomputed': give the square"):
        on_K.fit(X, y)
