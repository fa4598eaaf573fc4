"""Conjugate gradients, their preconditioners and the streamed kernel products."""

import numpy as np
import pytest
import scipy.linalg

pytest.importorskip("distributed")

from backends.dask import cg  # noqa: E402
from kernelref.kernels import RBF, Linear  # noqa: E402

KERNEL = RBF(gamma=0.5)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    return X, KERNEL(X), rng.normal(size=(400, 2))


def preconditioners(X, lam, rank=60):
    return {
        "none": None,
        "pivoted_cholesky": cg.WoodburyPreconditioner(
            cg.pivoted_cholesky(KERNEL, X, rank), lam
        ),
        "nystrom": cg.WoodburyPreconditioner(
            cg.nystrom_factor(KERNEL, X, rank, 0), lam
        ),
    }


@pytest.mark.parametrize("name", ["none", "pivoted_cholesky", "nystrom"])
@pytest.mark.parametrize("lam", [1.0, 1e-2])
def test_cg_converges_to_the_direct_solution(problem, name, lam):
    X, K, t = problem
    result = cg.conjugate_gradients(
        lambda V: K @ V, t, lam, preconditioners(X, lam)[name]
    )
    expected = scipy.linalg.solve(K + lam * np.eye(len(K)), t, assume_a="pos")
    assert result.residual <= cg.DEFAULT_TOL
    true_residual = np.linalg.norm(t - (K @ result.a + lam * result.a), axis=0)
    assert (true_residual <= cg.DEFAULT_TOL * np.linalg.norm(t, axis=0)).all()
    # The error bound of a residual test: ‖a − a*‖ ≤ cond(K + λI)·tol·‖a*‖ per column.
    # At λ = 1e-2 cond ≈ 1e4, so rounding (einsum's summation order depends on
    # the arrays' alignment) moves a by ~1e-8 between runs, within this bound.
    bound = np.linalg.cond(K + lam * np.eye(len(K))) * cg.DEFAULT_TOL
    error = np.linalg.norm(result.a - expected, axis=0)
    assert (error <= bound * np.linalg.norm(expected, axis=0)).all()
    if lam == 1.0:  # cond ≈ 1e2: the docstring's 1e-8 agreement with a direct solve
        np.testing.assert_allclose(result.a, expected, rtol=0, atol=1e-8)


def test_preconditioning_reduces_iterations_on_rbf(problem):
    X, K, t = problem
    lam = 1e-2
    counts = {
        name: cg.conjugate_gradients(lambda V: K @ V, t[:, 0], lam, M).n_iter
        for name, M in preconditioners(X, lam).items()
    }
    assert 2 * counts["pivoted_cholesky"] < counts["none"], counts
    assert 2 * counts["nystrom"] < counts["none"], counts


def test_columns_of_t_are_solved_independently(problem):
    X, K, t = problem
    together = cg.conjugate_gradients(lambda V: K @ V, t, 0.1).a
    for k in range(t.shape[1]):
        alone = cg.conjugate_gradients(lambda V: K @ V, t[:, k], 0.1).a
        np.testing.assert_allclose(together[:, k], alone, rtol=0, atol=1e-9)


def test_zero_targets_give_zero_coefficients(problem):
    _, K, _ = problem
    result = cg.conjugate_gradients(lambda V: K @ V, np.zeros(len(K)), 0.1)
    assert result.n_iter == 0
    np.testing.assert_array_equal(result.a, 0.0)


def test_iteration_cap_warns_with_the_residual(problem):
    _, K, t = problem
    with pytest.warns(cg.ConvergenceWarning, match="max_iter=3 .* residual"):
        result = cg.conjugate_gradients(lambda V: K @ V, t, 1e-3, max_iter=3)
    assert result.n_iter == 3
    assert result.residual > cg.DEFAULT_TOL


def test_negative_curvature_is_reported():
    with pytest.raises(scipy.linalg.LinAlgError, match="not positive definite"):
        cg.conjugate_gradients(lambda V: -2.0 * V, np.ones(5), 1.0)


def test_pivoted_cholesky_of_full_rank_reproduces_k(problem):
    X, K, _ = problem
    X = X[:80]
    L = cg.pivoted_cholesky(KERNEL, X, 80)
    np.testing.assert_allclose(L @ L.T, KERNEL(X), rtol=0, atol=1e-8)


def test_pivoted_cholesky_stops_at_the_rank_of_k(problem):
    X = problem[0]
    L = cg.pivoted_cholesky(Linear(), X, 50)
    assert L.shape == (len(X), X.shape[1])
    np.testing.assert_allclose(L @ L.T, X @ X.T, rtol=0, atol=1e-10)


def test_pivoted_cholesky_residual_trace_decreases(problem):
    X, K, _ = problem
    traces = [
        np.trace(K - L @ L.T)
        for L in (cg.pivoted_cholesky(KERNEL, X, r) for r in (5, 20, 60))
    ]
    assert traces[0] > traces[1] > traces[2] > 0


def test_nystrom_on_all_points_reproduces_k(problem):
    X, K, _ = problem
    X = X[:80]
    L = cg.nystrom_factor(KERNEL, X, 80)
    np.testing.assert_allclose(L @ L.T, KERNEL(X), rtol=0, atol=1e-8)


def test_woodbury_equals_the_direct_inverse(problem):
    X, _, t = problem
    L = cg.pivoted_cholesky(KERNEL, X, 30)
    expected = scipy.linalg.solve(L @ L.T + 0.3 * np.eye(len(X)), t)
    np.testing.assert_allclose(
        cg.WoodburyPreconditioner(L, 0.3)(t), expected, rtol=1e-10, atol=1e-10
    )


@pytest.mark.slow
@pytest.mark.parametrize("chunk_size", [64, 400, 1000])
def test_streamed_product_equals_k_times_v(client, problem, chunk_size):
    X, K, t = problem
    with cg.StreamedGram(X, KERNEL, client, chunk_size) as K_times:
        np.testing.assert_allclose(K_times(t), K @ t, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(
            K_times(t[:, :1]), K @ t[:, :1], rtol=1e-12, atol=1e-12
        )


@pytest.mark.slow
def test_streamed_cg_equals_the_direct_solution(client, problem):
    X, K, t = problem
    M = cg.WoodburyPreconditioner(cg.pivoted_cholesky(KERNEL, X, 40), 0.5)
    with cg.StreamedGram(X, KERNEL, client, 150) as K_times:
        result = cg.conjugate_gradients(K_times, t, 0.5, M)
    expected = scipy.linalg.solve(K + 0.5 * np.eye(len(K)), t, assume_a="pos")
    np.testing.assert_allclose(result.a, expected, rtol=0, atol=1e-8)
