"""Matrix-free GP evidence: CG, stochastic Lanczos quadrature and probe traces,
behind ``backends.dask.GaussianProcessRegressor(solver="cg")``."""

import numpy as np
import pytest
from scipy.linalg import eigh

pytest.importorskip("distributed")

from resilience import Interrupted, kill_a_worker  # noqa: E402

from backends.dask import GaussianProcessRegressor, KernelRidge, cg  # noqa: E402
from backends.dask import gp_matrix_free as mf  # noqa: E402
from backends.dask.runtime import FitStore  # noqa: E402
from kernelref.gp import GaussianProcessRegressor as ReferenceGPR  # noqa: E402
from kernelref.kernels import RBF  # noqa: E402
from kernelref.ridge import KernelRidge as ReferenceKernelRidge  # noqa: E402

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
@pytest.mark.parametrize("estimator", ["hutchinson", "hutch++"])
def test_evidence_and_gradient_within_their_error_bars(
    client, problem, store, estimator
):
    X, y, kernel = problem
    exact = ReferenceGPR(kernel=kernel, noise=NOISE, optimizer=None).fit(X, y)
    lml, gradient = exact.log_marginal_likelihood(kernel.theta, eval_gradient=True)
    tol = 1e-8
    evidence = mf.MatrixFreeEvidence(
        client,
        store,
        X,
        y,
        NOISE,
        n_probes=32,
        tol=tol,
        rank=30,
        trace_estimator=estimator,
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
def test_hutchpp_with_a_full_sketch_gives_the_exact_gradient(client, tmp_path):
    """``hutchpp-trace``: when Q spans all of Rᴺ the trace is tr(QᵀFQ), exact;
    the remainder's probes add nothing (their error bar is zero)."""
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(30, 2)), rng.normal(size=30)
    kernel = 0.7 * RBF(gamma=0.5)
    exact = ReferenceGPR(kernel=kernel, noise=NOISE, optimizer=None).fit(X, y)
    lml, gradient = exact.log_marginal_likelihood(kernel.theta, eval_gradient=True)
    store = FitStore.prepare(
        tmp_path / "fit.zarr",
        X,
        identity={"test": "hutch++"},
        chunk_size=16,
        client=client,
    )
    evidence = mf.MatrixFreeEvidence(
        client,
        store,
        X,
        y,
        NOISE,
        n_probes=48,
        tol=1e-12,
        rank=5,
        trace_estimator="hutch++",
    )
    _, gradient_mf = evidence.evaluate(kernel)
    np.testing.assert_allclose(gradient_mf, gradient, rtol=1e-8)
    assert np.all(evidence.gradient_std_error < 1e-8 * np.abs(gradient))


def cg_model(**kw):
    settings = dict(
        kernel=1.5 * RBF(gamma=0.4),
        noise=NOISE,
        optimizer=None,
        solver="cg",
        tol=1e-10,
        n_probes=4,
        rank=30,
        chunk_size=150,
        progress=False,
    )
    settings.update(kw)
    return GaussianProcessRegressor(**settings)


@pytest.mark.slow
def test_solver_cg_mean_equals_the_exact_path_and_warm_starts(client, problem):
    X, y, kernel = problem
    exact = GaussianProcessRegressor(
        kernel=kernel, noise=NOISE, optimizer=None, chunk_size=150
    ).fit(X, y)
    model = cg_model(address=client.scheduler.address).fit(X, y)
    assert model.fit_solver_ == "cg" and model.n_evaluations_ == 1
    np.testing.assert_allclose(model.alpha_, exact.alpha_, atol=1e-6)
    np.testing.assert_allclose(model.predict(X[:50]), exact.predict(X[:50]), atol=1e-6)
    # the evidence within its error bar of the exact one
    gap = abs(
        model.log_marginal_likelihood_value_ - exact.log_marginal_likelihood_value_
    )
    assert gap <= 4 * model.fit_info_["log_marginal_likelihood_std_error"]
    evidence = model._matrix_free
    first = evidence.alpha_iterations
    evidence.evaluate(kernel.clone_with_theta(kernel.theta + 0.01), eval_gradient=False)
    assert evidence.alpha_iterations < first  # warm started from the previous α


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"solver": "lanczos"}, "solver"),
        ({"n_probes": 1}, "n_probes"),
        ({"rank": "big"}, "rank"),
        ({"rank": 0}, "rank"),
        ({"tol": 1.5}, "tol"),
        ({"lanczos_steps": 0}, "lanczos_steps"),
        ({"probe_seed": -1}, "probe_seed"),
        ({"trace_estimator": "hutch+"}, "trace_estimator"),
        ({"max_iter": 0}, "max_iter"),
    ],
)
def test_bad_matrix_free_arguments_are_named_before_any_work(problem, kw, name):
    X, y, _ = problem
    with pytest.raises(ValueError, match=name):
        cg_model(address="tcp://nowhere:1", **kw).fit(X, y)


def test_unsupported_kernel_is_refused_before_any_work(problem):
    from kernelref.kernels import Laplacian

    X, y, _ = problem
    model = cg_model(kernel=Laplacian(), address="tcp://nowhere:1")
    with pytest.raises(ValueError, match="supports kernel=RBF"):
        model.fit(X, y)


def test_auto_rank_stops_on_the_spectrum_or_at_its_cap():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 2))
    kernel, lam = RBF(gamma=0.05), 0.1

    def stopped(L):  # the remainder's trace below 0.1·λN, or every diagonal below λ
        d = np.diag(kernel(X) - L @ L.T)
        return d.sum() <= cg.AUTO_TRACE_FRACTION * lam * len(X) or d.max() <= lam

    # smooth kernel, large noise: stops early, at the first rank that qualifies
    L = cg.auto_pivoted_cholesky(kernel, X, lam)
    r = L.shape[1]
    assert 1 < r < 30 and stopped(L)
    assert not stopped(cg.pivoted_cholesky(kernel, X, r - 1))
    # rough kernel, small noise: the cap, 3√N
    L = cg.auto_pivoted_cholesky(RBF(gamma=50.0), X, 1e-4)
    assert L.shape[1] == cg.auto_rank_cap(len(X)) == 60


@pytest.mark.slow
def test_kernel_ridge_cg_with_auto_rank_equals_the_reference(client, problem):
    X, y, _ = problem
    model = KernelRidge(
        lam=0.1,
        gamma=0.4,
        solver="cg",
        rank="auto",
        tol=1e-10,
        chunk_size=150,
        progress=False,
        address=client.scheduler.address,
    ).fit(X, y)
    reference = ReferenceKernelRidge(lam=0.1, gamma=0.4).fit(X, y)
    np.testing.assert_allclose(model.predict(X), reference.predict(X), atol=1e-7)
    assert 0 < model.preconditioner_rank_ <= cg.auto_rank_cap(len(X))
    with pytest.raises(ValueError, match="preconditioner='pivoted_cholesky'"):
        KernelRidge(solver="cg", rank="auto", preconditioner="nystrom").fit(X, y)


def resilient_model(client, **kw):
    # a rank-5 preconditioner: ~100 CG iterations to interrupt (~6 s)
    return cg_model(
        rank=5, n_probes=3, tol=1e-8, address=client.scheduler.address, **kw
    )


@pytest.mark.slow
def test_interrupted_solve_resumes_to_the_same_model(client, problem, tmp_path):
    X, y, _ = problem
    clean_records = []
    clean = resilient_model(client, progress=clean_records.append).fit(X, y)
    assert clean.n_iter_ >= 6
    # a Record per CG iteration, the residual its measure
    iterations = [r.iteration for r in clean_records]
    assert iterations == list(range(1, len(iterations) + 1))
    assert len(iterations) > clean.n_iter_  # CG steps and the true-residual check
    assert clean_records[-1].measure <= 1e-8 < clean_records[0].measure

    def stop_at_three(record):
        if record.iteration == 3:
            raise Interrupted

    store = tmp_path / "fit.zarr"
    with pytest.raises(Interrupted):
        resilient_model(client, store=store, progress=stop_at_three).fit(X, y)
    seen = []
    resumed = resilient_model(client, store=store, progress=seen.append).fit(X, y)
    assert seen[0].iteration == 4, "the resumed solve starts after the checkpoint"
    assert resumed.n_iter_ == clean.n_iter_
    np.testing.assert_allclose(resumed.alpha_, clean.alpha_, rtol=0, atol=1e-12)
    assert resumed.log_det_ == pytest.approx(clean.log_det_, rel=1e-12)


@pytest.mark.slow
def test_killed_worker_gives_the_same_model(client, problem):
    X, y, _ = problem
    clean = resilient_model(client).fit(X, y)
    killed = []

    def kill_one(record):
        if record.iteration == 2 and not killed:
            killed.append(kill_a_worker(client))

    survivor = resilient_model(client, progress=kill_one).fit(X, y)
    assert killed
    assert survivor.n_iter_ == clean.n_iter_
    np.testing.assert_allclose(survivor.alpha_, clean.alpha_, rtol=0, atol=1e-12)
    assert survivor.log_det_ == pytest.approx(clean.log_det_, rel=1e-12)
    client.wait_for_workers(2, timeout=300)  # a loaded machine restarts slowly


@pytest.mark.slow
def test_nystrom_gp_mean_with_every_point_a_centre_is_the_exact_mean(client, problem):
    X, y, kernel = problem
    exact = ReferenceGPR(kernel=kernel, noise=NOISE, optimizer=None).fit(X, y)
    model = mf.nystrom_gp_mean(
        X, y, kernel, NOISE, len(X), chunk_size=150, tol=1e-8, progress=False
    )
    np.testing.assert_allclose(model.predict(X), exact.predict(X), atol=1e-6)
