"""Matrix-free GP evidence: CG, stochastic Lanczos quadrature and probe traces."""

import numpy as np
import pytest
from scipy.linalg import eigh

pytest.importorskip("distributed")

from backends.dask import cg  # noqa: E402
from backends.dask import gp_matrix_free as mf  # noqa: E402
from backends.dask.runtime import FitStore  # noqa: E402
from kernelref.gp import GaussianProcessRegressor as ReferenceGPR  # noqa: E402
from kernelref.kernels import RBF  # noqa: E402

NOISE = 0.05


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=len(X))
    return X, y, 1.5 * RBF(gamma=0.4)


def test_lanczos_from_cg_equals_the_dense_quadratic_form(problem):
    """``cg-lanczos`` and ``slq-quadrature``: one probe's quadrature from its CG
    coefficients equals zᵀM^(-1/2) log(M^(-1/2)AM^(-1/2)) M^(-1/2)z."""
    X, _, kernel = problem
    n = len(X)
    A = kernel(X) + NOISE * np.eye(n)
    L = cg.pivoted_cholesky(kernel, X, 20)
    M = L @ L.T + NOISE * np.eye(n)
    rng = np.random.default_rng(1)
    Z = L @ rng.normal(size=(L.shape[1], 3)) + np.sqrt(NOISE) * rng.normal(size=(n, 3))
    solver = cg.ConjugateGradients(
        lambda V: A @ V, Z, cg.WoodburyPreconditioner(L, NOISE), tol=1e-12
    )
    state = solver.start()
    while not solver.done(state):
        state = solver.step(state)
    w, V = eigh(M)
    M_half_inv = V @ np.diag(w**-0.5) @ V.T
    mu, U = eigh(M_half_inv @ A @ M_half_inv)
    log_B = U @ np.diag(np.log(mu)) @ U.T
    for j in range(3):
        expected = Z[:, j] @ M_half_inv @ log_B @ M_half_inv @ Z[:, j]
        got = mf.slq_log_quadrature(
            state["alphas"][:, j], state["betas"][:, j], state["rz0"][j]
        )
        assert got == pytest.approx(expected, rel=1e-8)


@pytest.fixture(scope="module")
def store(client, problem, tmp_path_factory):
    path = tmp_path_factory.mktemp("gp") / "fit.zarr"
    return FitStore.prepare(
        path,
        problem[0],
        identity={"test": "matrix-free"},
        chunk_size=150,
        client=client,
    )


@pytest.mark.slow
def test_evidence_and_gradient_within_their_error_bars(client, problem, store):
    X, y, kernel = problem
    exact = ReferenceGPR(kernel=kernel, noise=NOISE, optimizer=None).fit(X, y)
    lml, gradient = exact.log_marginal_likelihood(kernel.theta, eval_gradient=True)
    tol = 1e-8
    evidence = mf.MatrixFreeEvidence(
        client, store, X, y, NOISE, n_probes=32, tol=tol, rank=30
    )
    lml_mf, gradient_mf = evidence.evaluate(kernel)
    # α to the CG tolerance: ‖α − α*‖ ≤ cond(A)·tol·‖α*‖
    A = kernel(X) + NOISE * np.eye(len(X))
    bound = np.linalg.cond(A) * tol * np.linalg.norm(exact.alpha_)
    assert np.linalg.norm(evidence.alpha - exact.alpha_) <= bound
    # the probe averages within four of their standard errors (fixed seed)
    assert abs(lml_mf - lml) <= 4 * 0.5 * evidence.logdet_std_error
    assert np.all(np.abs(gradient_mf - gradient) <= 4 * evidence.gradient_std_error)
    # and the error bars are small: measured ~1% of |log|A|| and of the gradient
    assert evidence.logdet_std_error < 0.02 * abs(np.linalg.slogdet(A)[1])
    assert np.all(evidence.gradient_std_error < 0.05 * np.abs(gradient))


@pytest.mark.slow
def test_estimator_mean_equals_the_exact_mean_and_warm_starts(client, problem):
    X, y, kernel = problem
    exact = ReferenceGPR(kernel=kernel, noise=NOISE, optimizer=None).fit(X, y)
    model = mf.MatrixFreeGaussianProcessRegressor(
        kernel=kernel,
        noise=NOISE,
        optimizer=None,
        tol=1e-10,
        n_probes=4,
        rank=30,
        chunk_size=150,
    ).fit(X, y)
    np.testing.assert_allclose(model.predict(X), exact.predict(X), atol=1e-6)
    evidence = model._matrix_free
    first = evidence.alpha_iterations
    evidence.evaluate(kernel.clone_with_theta(kernel.theta + 0.01), eval_gradient=False)
    assert evidence.alpha_iterations < first  # warm started from the previous α
    with pytest.raises(NotImplementedError, match="exact path"):
        model.predict(X, return_std=True)


def test_unsupported_kernel_is_refused_before_any_work(problem):
    from kernelref.kernels import Laplacian

    X, y, _ = problem
    model = mf.MatrixFreeGaussianProcessRegressor(kernel=Laplacian(), optimizer=None)
    with pytest.raises(ValueError, match="supports kernel=RBF"):
        model.fit(X, y)


@pytest.mark.slow
def test_nystrom_gp_mean_with_every_point_a_centre_is_the_exact_mean(client, problem):
    X, y, kernel = problem
    exact = ReferenceGPR(kernel=kernel, noise=NOISE, optimizer=None).fit(X, y)
    model = mf.nystrom_gp_mean(
        X, y, kernel, NOISE, len(X), chunk_size=150, tol=1e-8, progress=False
    )
    np.testing.assert_allclose(model.predict(X), exact.predict(X), atol=1e-6)
