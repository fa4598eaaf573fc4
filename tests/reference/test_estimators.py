"""Estimator conventions: scikit-learn's machinery works with ours; bad input is
refused."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from kernelref import KernelRidge, NadarayaWatson
from kernelref._validation import NotFittedError
from kernelref.kernels import RBF

rng = np.random.default_rng(0)
X = rng.normal(size=(60, 3))
y = np.sin(X[:, 0]) + 0.05 * rng.normal(size=60)

ESTIMATORS = [
    KernelRidge(lam=0.1, kernel=RBF(0.5)),
    KernelRidge(kernel="poly", degree=2),
    NadarayaWatson(gamma=2.0),
]


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=repr)
def test_clone_gives_an_unfitted_equal_copy(estimator):
    fitted = clone(estimator).fit(X, y)
    copy = clone(fitted)
    assert repr(copy) == repr(estimator)
    assert not hasattr(copy, "X_fit_")
    if hasattr(estimator.kernel, "get_params"):
        assert copy.kernel is not fitted.kernel


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=repr)
def test_fit_returns_self_and_leaves_parameters_alone(estimator):
    before = repr(estimator.get_params())
    model = clone(estimator)
    assert model.fit(X, y) is model
    assert repr(model.get_params()) == before


def test_grid_search_tunes_a_nested_kernel_parameter():
    search = GridSearchCV(
        KernelRidge(kernel=RBF(1.0)),
        {"kernel__gamma": [0.01, 0.5, 50.0], "lam": [1e-3, 1.0]},
        cv=3,
    ).fit(X, y)
    assert search.best_params_["kernel__gamma"] == 0.5
    assert search.best_estimator_.kernel_.gamma == 0.5


def test_pipeline_and_cross_validation_work():
    pipe = make_pipeline(StandardScaler(), KernelRidge(lam=0.1, gamma=0.5))
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.mean() > 0.9


def test_set_params_refuses_unknown_names():
    with pytest.raises(ValueError, match="not a parameter of KernelRidge"):
        KernelRidge().set_params(alpha=1.0)


def test_predict_before_fit_is_refused():
    with pytest.raises(NotFittedError, match="call fit"):
        KernelRidge().predict(X)


@pytest.mark.parametrize(
    "X_bad,y_bad,message",
    [
        (np.full((3, 2), np.nan), np.zeros(3), "X contains NaN"),
        (np.zeros((3, 2)), [0.0, np.inf, 1.0], "y contains NaN or infinity"),
        (np.zeros((3, 2)), np.zeros(4), "y has 4 rows but X has 3"),
        (np.zeros((0, 2)), np.zeros(0), "X has 0 samples"),
        (np.zeros(5), np.zeros(5), "X must be 2-D"),
        ([["a", "b"]], [1.0], "X must be numeric"),
    ],
)
def test_bad_training_data_is_refused(X_bad, y_bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        KernelRidge().fit(X_bad, y_bad)


@pytest.mark.parametrize(
    "params,message",
    [
        ({"lam": 0.0}, "lam must be a finite number > 0"),
        ({"lam": -1.0}, "lam must be a finite number > 0"),
        ({"lam": "big"}, "lam must be a positive number"),
        ({"kernel": "gauss"}, "kernel must be one of"),
        ({"gamma": -2.0}, "gamma must be a finite number > 0"),
    ],
)
def test_bad_parameters_are_refused_before_work(params, message):
    with pytest.raises((ValueError, TypeError), match=message):
        KernelRidge(**params).fit(X, y)


def test_wrong_number_of_features_at_predict_is_refused():
    model = KernelRidge().fit(X, y)
    with pytest.raises(ValueError, match="fitted with 3"):
        model.predict(X[:, :2])


def test_precomputed_gram_must_be_square():
    with pytest.raises(ValueError, match="square training Gram matrix"):
        KernelRidge(kernel="precomputed").fit(np.ones((4, 3)), np.zeros(4))


def test_nadaraya_watson_refuses_a_signed_kernel_name():
    with pytest.raises(ValueError, match="Nadaraya"):
        NadarayaWatson(kernel="sigmoid").fit(X, y)
