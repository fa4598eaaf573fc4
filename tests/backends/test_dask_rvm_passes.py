"""The Dask RVM's streamed passes: fewer of them for the same path.

A pass over the kernel is what a fit on the cluster pays for (N² kernel entries
recomputed when the workers cannot cache them). These tests pin the passes the
design saves, and that each saving gives the digits a pass would: the model of
a fit is bit for bit the model of the fit without the saving.
"""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("zarr")

from backends.dask import rvm as dask_rvm  # noqa: E402
from backends.dask.runtime import FitStore  # noqa: E402
from backends.dask.rvm import design as streamed  # noqa: E402
from backends.dask.rvm.design import StreamedDesign  # noqa: E402
from kernelref import rvm as reference  # noqa: E402
from kernelref.kernels import RBF  # noqa: E402
from kernelref.rvm.coordinates import orthonormal_basis  # noqa: E402

pytestmark = pytest.mark.slow


def sinc(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-10, 10, size=(n, 1))
    return X, np.sinc(X[:, 0] / np.pi) + rng.normal(0, 0.1, size=n)


@pytest.fixture
def stored(client):
    X, t = sinc(600, seed=4)
    store = FitStore.prepare(None, X, identity={"t": 2}, chunk_size=200, client=client)
    yield X, t, store
    store.remove_if_temporary()


def design(X, store, client, **kwargs):
    return StreamedDesign(X, X.mean(axis=0), RBF(0.1), True, store, client, **kwargs)


def test_the_norms_pass_also_forms_the_targets_product(client, stored):
    X, t, store = stored
    apart, together = design(X, store, client), design(X, store, client, t=t)
    assert together.counts["passes"] == 1
    PhiT_t = t @ together  # from the norms' pass: no pass of its own
    assert together.counts["passes"] == 1
    np.testing.assert_array_equal(together.scales, apart.scales)
    np.testing.assert_array_equal(PhiT_t, t @ apart)  # the digits of its own pass
    assert apart.counts["passes"] == 2


def test_a_product_asked_again_takes_no_pass_and_has_a_pass_digits(client, stored):
    X, t, store = stored
    kept, fresh = design(X, store, client), design(X, store, client)
    U = orthonormal_basis(kept.columns([0, 5, 300]))
    first = U.T @ kept
    passes = kept.counts["passes"]
    again = U.T @ kept
    assert kept.counts["passes"] == passes
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(again, U.T @ fresh)
    again[0, 0] += 1.0  # the caller's copy: the kept product is unchanged
    np.testing.assert_array_equal(U.T @ kept, first)
    # the same numbers in another layout are another product (other digits)
    np.ascontiguousarray(U.T) @ kept
    assert kept.counts["passes"] == passes + 1


def test_kept_products_stay_within_their_budget(client, stored, monkeypatch):
    X, t, store = stored
    one = 8 * (len(X) + 1)  # bytes of one row of products
    monkeypatch.setattr(streamed, "PRODUCTS_MB", 2.5 * one / 2**20)
    Phi = design(X, store, client)
    rows = np.random.default_rng(0).normal(size=(3, len(X)))
    for row in rows:
        row @ Phi
    assert Phi.counts["passes"] == 4  # the norms, then one per row
    rows[2] @ Phi  # the newest two are kept
    rows[1] @ Phi
    assert Phi.counts["passes"] == 4
    rows[0] @ Phi  # the oldest was dropped
    assert Phi.counts["passes"] == 5


def test_kept_products_save_passes_and_change_no_digit(client, monkeypatch):
    """'auto' on densely sampled sinc asks for t @ Φ̃ once per run, and runs the
    hold a second time (its final pass moves the model) from the same first
    column as the first: the same cold start and first additions, whose
    products the design keeps. Without them (no products kept) the fit is bit
    for bit the same, in more passes."""
    X, t = sinc(1000, seed=3)
    params = dict(gamma=0.1, chunk_size=250, progress=False)
    params["address"] = client.scheduler.address
    ref = reference.RVR(gamma=0.1).fit(X, t)
    fit = dask_rvm.RVR(**params).fit(X, t)
    monkeypatch.setattr(streamed, "PRODUCTS_MB", 0)
    plain = dask_rvm.RVR(**params).fit(X, t)
    assert fit.fit_info_["passes"] < plain.fit_info_["passes"]
    np.testing.assert_array_equal(fit.relevance_, plain.relevance_)
    np.testing.assert_array_equal(fit.alpha_, plain.alpha_)
    np.testing.assert_array_equal(fit.evidence_, plain.evidence_)
    np.testing.assert_array_equal(fit.relevance_, ref.relevance_)
    np.testing.assert_allclose(fit.log_evidence_, ref.log_evidence_, rtol=1e-12)
