"""The backend's SVMs take a single number as sample_weight, as the reference
does (its weight for every sample), and refuse a bad one before any task runs."""

import numpy as np
import pytest

pytest.importorskip("distributed")

from backends.dask import svm as dask_svm  # noqa: E402

pytestmark = pytest.mark.slow

rng = np.random.default_rng(4)
X = rng.normal(size=(60, 3))
y_class = np.where(X[:, 0] + 0.3 * rng.normal(size=60) > 0, 1, 0)
y_real = np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)
SMALL = dict(tol=1e-6, partition_size=100, progress=False)


@pytest.mark.parametrize(
    "make, y",
    [(dask_svm.SVC, y_class), (dask_svm.NuSVR, y_real), (dask_svm.OneClassSVM, None)],
)
def test_a_scalar_weight_fits_the_model_of_the_weight_spelt_out(make, y, client):
    address = client.scheduler.address
    scalar = make(address=address, **SMALL).fit(X, y, sample_weight=1.5)
    full = make(address=address, **SMALL).fit(X, y, sample_weight=np.full(60, 1.5))
    np.testing.assert_array_equal(scalar.support_, full.support_)
    np.testing.assert_array_equal(scalar.dual_coef_, full.dual_coef_)
    np.testing.assert_array_equal(scalar.intercept_, full.intercept_)
    report = dask_svm.kkt_report(scalar, X, y, 1.5, address=address)
    assert report.max_violation < scalar.tol


@pytest.mark.parametrize("bad", [-1.0, 0.0, np.nan])
def test_a_bad_scalar_weight_is_refused_naming_sample_weight(bad, client):
    model = dask_svm.SVC(address=client.scheduler.address, **SMALL)
    with pytest.raises(ValueError, match="sample_weight"):
        model.fit(X, y_class, sample_weight=bad)
    assert not hasattr(model, "support_")
