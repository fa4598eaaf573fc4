"""A single number as the SVMs' sample_weight is the weight of every sample.

KernelRidge took a scalar weight (as scikit-learn's ``_check_sample_weight``
broadcasts it) while the SVMs refused it; both now read it through one helper,
``check_sample_weight``. scikit-learn's own SVC (1.9) fails on a scalar with an
IndexError, so its oracle here is the weight spelt out, ``np.full(n, w)``.
"""

import numpy as np
import pytest
from sklearn import svm as sk

from kernelref.svm import SVC, SVR, NuSVC, NuSVR, OneClassSVM, kkt_report

TOL = 1e-6
rng = np.random.default_rng(3)
X = rng.normal(size=(50, 2))
y_class = np.where(X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=50) > 0, 1, 0)
y_real = np.sin(X[:, 0]) + 0.1 * rng.normal(size=50)

MACHINES = [
    (SVC, dict(C=0.7), y_class),
    (NuSVC, dict(nu=0.3), y_class),
    (SVR, dict(C=0.7, epsilon=0.1), y_real),
    (NuSVR, dict(C=0.7, nu=0.3), y_real),
    (OneClassSVM, dict(nu=0.2), None),
]


@pytest.mark.parametrize("make, params, y", MACHINES)
@pytest.mark.parametrize("w", [2.5, np.float32(0.4), 3])
def test_a_scalar_weight_fits_the_model_of_the_weight_spelt_out(make, params, y, w):
    scalar = make(tol=TOL, **params).fit(X, y, sample_weight=w)
    full = make(tol=TOL, **params).fit(X, y, sample_weight=np.full(len(X), w))
    np.testing.assert_array_equal(scalar.support_, full.support_)
    np.testing.assert_array_equal(scalar.dual_coef_, full.dual_coef_)
    np.testing.assert_array_equal(scalar.intercept_, full.intercept_)
    np.testing.assert_array_equal(scalar.predict(X), full.predict(X))


def test_a_scalar_weight_scales_C_as_libsvm_does_with_the_weights_spelt_out():
    """Weight c on every sample is the bound cC (label ``svm-weighted``):
    libsvm with np.full(n, c), and ours with C·c unweighted, give our model."""
    ours = SVC(C=0.7, tol=TOL).fit(X, y_class, sample_weight=2.5)
    theirs = sk.SVC(C=0.7, tol=TOL).fit(X, y_class, sample_weight=np.full(50, 2.5))
    np.testing.assert_array_equal(ours.support_, theirs.support_)
    np.testing.assert_allclose(ours.dual_coef_, theirs.dual_coef_, atol=1e-4)
    np.testing.assert_allclose(
        ours.decision_function(X), theirs.decision_function(X), atol=1e-4
    )
    larger_C = SVC(C=0.7 * 2.5, tol=TOL).fit(X, y_class)
    np.testing.assert_array_equal(ours.support_, larger_C.support_)
    np.testing.assert_allclose(ours.dual_coef_, larger_C.dual_coef_, atol=1e-9)


def test_the_kkt_report_takes_the_scalar_weight_of_the_fit():
    model = SVC(C=0.7, tol=TOL).fit(X, y_class, sample_weight=2.5)
    scalar = kkt_report(model, X, y_class, 2.5)
    full = kkt_report(model, X, y_class, np.full(50, 2.5))
    assert scalar.max_violation == full.max_violation < model.tol


@pytest.mark.parametrize("make, params, y", MACHINES)
@pytest.mark.parametrize(
    "bad, match",
    [
        (
            -1.0,
            "sample_weight must be 1-D with one weight ≥ 0 per sample, not all zero",
        ),
        (0.0, "sample_weight must be 1-D with one weight ≥ 0 per sample, not all zero"),
        (np.nan, "sample_weight contains NaN or infinity"),
        (np.inf, "sample_weight contains NaN or infinity"),
        (True, r"sample_weight must be 1-D \(n_samples,\)"),
        (-np.ones(50), "sample_weight must be 1-D with one weight ≥ 0 per sample"),
        (np.r_[np.nan, np.ones(49)], r"sample_weight contains NaN .*row 0"),
        (np.ones(49), "sample_weight has 49 rows but X has 50 samples"),
    ],
)
def test_bad_weights_are_refused_naming_sample_weight(make, params, y, bad, match):
    model = make(**params)
    with pytest.raises(ValueError, match=match):
        model.fit(X, y, sample_weight=bad)
    assert not hasattr(model, "support_")


@pytest.mark.parametrize("bad", [-1.0, 0.0, -2])
def test_a_bad_single_weight_is_named_as_one(bad):
    """A single number is taken as every sample's weight, so refusing it as
    "1-D with one weight per sample" alone misleads: the message also says what
    a single number must be, and which was given."""
    for make, params, y in MACHINES:
        with pytest.raises(ValueError) as refused:
            make(**params).fit(X, y, sample_weight=bad)
        message = str(refused.value)
        assert "A single number is every sample's weight: give one > 0" in message
        assert f"not {float(bad)!r}." in message
    with pytest.raises(ValueError, match="per sample, not all zero; ") as refused:
        SVC().fit(X, y_class, sample_weight=-np.ones(50))
    assert "single number" not in str(refused.value)
