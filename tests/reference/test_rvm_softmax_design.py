"""The softmax RVC's structured designs (``kernelref.rvm.softmax_design``) against
the matrices they stand for, and the fast fit on them against the fit on the
dense expanded design."""

import tracemalloc

import numpy as np
import pytest

from kernelref.rvm import RVC
from kernelref.rvm.fast import unit_columns
from kernelref.rvm.rvc_fast import fast_classifier
from kernelref.rvm.softmax import Softmax, expanded_design, latent_moments, one_hot
from kernelref.rvm.softmax_design import KroneckerDesign


@pytest.fixture
def problem():
    rng = np.random.default_rng(3)
    N, M, K = 25, 26, 4
    Phi = rng.normal(size=(N, M))
    Phi[:, 5] = 0.0  # a zero column stays zero on unit columns
    a = 3 * rng.normal(size=N * K)
    a[:K] = [60.0, -60.0, 0.0, 0.0]  # a class ruled out: y underflows to 0
    t = one_hot(rng.integers(0, K, N), K)
    return Phi, K, a, t


def test_kronecker_design_is_the_expanded_design(problem):
    Phi, K, _, _ = problem
    dense, design = expanded_design(Phi, K), KroneckerDesign(Phi, K)
    assert design.shape == dense.shape
    index = np.array([0, 7, 21, 50, 103])
    np.testing.assert_array_equal(design[:, index], dense[:, index])
    np.testing.assert_array_equal(design[:, 21], dense[:, 21])
    rng = np.random.default_rng(0)
    v, V = rng.normal(size=dense.shape[0]), rng.normal(size=(3, dense.shape[0]))
    np.testing.assert_allclose(v @ design, v @ dense, rtol=0, atol=1e-13)
    np.testing.assert_allclose(V @ design, V @ dense, rtol=0, atol=1e-13)
    with pytest.raises(IndexError, match="whole columns"):
        design[0, 3]


def test_whitened_design_is_the_dense_whitening_on_unit_columns(problem):
    Phi, K, a, t = problem
    likelihood = Softmax(K)
    Phi_tilde, t_tilde = likelihood.whiten(expanded_design(Phi, K), a, t)
    unit, scales = unit_columns(Phi_tilde)
    design, scales_s, t_tilde_s = KroneckerDesign(Phi, K).whitened(a, t, likelihood)
    np.testing.assert_allclose(scales_s, scales, rtol=1e-14, atol=1e-15)
    assert np.all(scales_s[5 * K : 6 * K] == 0)  # the zero column's K weights
    np.testing.assert_array_equal(t_tilde_s, t_tilde)
    index = np.array([0, 1, 20, 21, 50, 103])
    np.testing.assert_allclose(design[:, index], unit[:, index], rtol=0, atol=1e-15)
    rng = np.random.default_rng(1)
    V = rng.normal(size=(4, unit.shape[0]))
    np.testing.assert_allclose(V @ design, V @ unit, rtol=0, atol=1e-13)
    np.testing.assert_allclose(t_tilde @ design, t_tilde @ unit, rtol=0, atol=1e-13)


def three_classes(N=60, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 2.0], [-1.7, -1.0], [1.7, -1.0]])
    y = rng.integers(0, 3, N)
    X = centres[y] + rng.normal(size=(N, 2))
    Phi = np.exp(-0.5 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    return np.column_stack([np.ones(N), Phi]), y


def test_fast_softmax_fit_on_the_structured_design_equals_the_dense_one():
    Phi, y = three_classes()
    K, t = 3, one_hot(y, 3)
    dense = fast_classifier(expanded_design(Phi, K), t, Softmax(K))
    structured = fast_classifier(KroneckerDesign(Phi, K), t, Softmax(K))
    np.testing.assert_array_equal(structured.keep, dense.keep)
    assert structured.n_iter == dense.n_iter
    assert structured.n_loop_iter == dense.n_loop_iter
    np.testing.assert_allclose(structured.alpha, dense.alpha, rtol=1e-7)
    np.testing.assert_allclose(structured.mu, dense.mu, rtol=1e-7, atol=1e-9)
    assert abs(structured.log_evidence - dense.log_evidence) < 1e-8 * abs(
        dense.log_evidence
    )


def test_fast_softmax_fit_never_forms_the_nk_by_mk_design():
    """Peak memory of a fit below the size of one NK × MK matrix (the dense path
    held three: Φ ⊗ I_K, its whitened form and that on unit columns)."""
    rng = np.random.default_rng(5)
    N, K = 150, 6
    X = rng.normal(size=(N, 3))
    y = np.arange(N) % K
    X[:, 0] += 4.0 * y  # well separated: the fit is quick
    dense_bytes = (N * K) * ((N + 1) * K) * 8
    tracemalloc.start()
    try:
        model = RVC(gamma=0.3, max_iter=200).fit(X, y)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < dense_bytes, (peak, dense_bytes)  # the dense path: 3.1 times
    assert np.mean(model.predict(X) == y) > 0.9


def test_latent_moments_use_the_kept_columns_of_the_expansion_only():
    """The activations' moments from the kept weights' columns equal those from
    (Φ* ⊗ I_K)[:, kept], entry for entry."""
    rng = np.random.default_rng(0)
    n, M, K = 20, 7, 4
    Phi_star = rng.normal(size=(n, M))
    kept = rng.random((M, K)) < 0.4
    mu = rng.normal(size=(M, K))
    B = rng.normal(size=(kept.sum(), kept.sum()))
    Sigma = B @ B.T
    J = expanded_design(Phi_star, K)[:, kept.ravel()].reshape(n, K, -1)
    mean, covariance = latent_moments(Phi_star, mu, Sigma, kept)
    np.testing.assert_array_equal(covariance, np.einsum("nkp,pq,njq->nkj", J, Sigma, J))
    np.testing.assert_array_equal(mean, Phi_star @ mu)


class DesignObject:
    """Φ behind the interface the structured designs ask of their base (shape,
    columns, left products, `weighted_square_norms`), counting its calls."""

    __array_ufunc__ = None  # so that V @ design calls __rmatmul__

    def __init__(self, Phi):
        self.Phi, self.shape, self.calls = Phi, Phi.shape, []

    def __getitem__(self, key):
        self.calls.append("columns")
        return self.Phi[key]

    def __rmatmul__(self, V):
        self.calls.append("product")
        return V @ self.Phi

    def weighted_square_norms(self, d):
        self.calls.append("norms")
        return np.einsum("nm,nm,nk->mk", self.Phi, self.Phi, d)


def test_structured_designs_work_over_any_base_design(problem):
    """KroneckerDesign over an object that is not an array (the Dask backend's
    streamed design is one) gives the designs, products and fit it gives over
    the array, and asks the object for its norms through its own method."""
    Phi, K, a, t = problem
    base = DesignObject(Phi)
    likelihood = Softmax(K)
    on_array = KroneckerDesign(Phi, K).whitened(a, t, likelihood)
    on_object = KroneckerDesign(base, K).whitened(a, t, likelihood)
    assert base.calls == ["norms"]
    np.testing.assert_allclose(on_object[1], on_array[1], rtol=1e-14)
    np.testing.assert_array_equal(on_object[2], on_array[2])
    index = np.array([0, 1, 20, 21, 50, 103])
    np.testing.assert_array_equal(on_object[0][:, index], on_array[0][:, index])
    V = np.random.default_rng(4).normal(size=(3, len(t)))
    np.testing.assert_allclose(V @ on_object[0], V @ on_array[0], rtol=0, atol=1e-13)
    assert set(base.calls) == {"norms", "columns", "product"}
    Phi3, y = three_classes()
    fits = [
        fast_classifier(KroneckerDesign(design, 3), one_hot(y, 3), Softmax(3))
        for design in (Phi3, DesignObject(Phi3))
    ]
    np.testing.assert_array_equal(fits[1].keep, fits[0].keep)
    assert fits[1].n_loop_iter == fits[0].n_loop_iter
    np.testing.assert_allclose(fits[1].log_evidence, fits[0].log_evidence, rtol=1e-10)


def test_growth_budget_bounds_every_approximation_of_the_fast_path():
    """KroneckerDesign.growth_budget: twice the weights, at least GROWTH_MIN; the
    fast path asks it, so no approximation ends above the bound of its start (a
    small bound here, so that it binds: without it the path passes it)."""
    from kernelref.rvm.fast import run_to_end
    from kernelref.rvm.softmax_design import GROWTH_FACTOR, GROWTH_MIN

    design = KroneckerDesign(np.ones((3, 2)), 3)
    assert design.growth_budget(0) == GROWTH_MIN
    assert design.growth_budget(GROWTH_MIN) == GROWTH_FACTOR * GROWTH_MIN

    class SmallBound(KroneckerDesign):
        def growth_budget(self, m):
            return max(2 * m, 12)

    class Unbounded(KroneckerDesign):
        growth_budget = None

    Phi, y = three_classes(N=90, seed=1)

    def sizes(design_class):
        ends = []

        def drive(loop, name):
            result = run_to_end(loop, name)
            start = 0 if loop.alpha0 is None else int(np.isfinite(loop.alpha0).sum())
            if "swap-" not in name:  # the swap pass screens, at no bound
                ends.append((start, len(result.active)))
            return result

        fast_classifier(design_class(Phi, 3), one_hot(y, 3), Softmax(3), drive=drive)
        return ends

    assert all(end <= max(2 * start, 12) for start, end in sizes(SmallBound))
    assert any(end > max(2 * start, 12) for start, end in sizes(Unbounded))
