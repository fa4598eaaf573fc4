"""Predictive variance of the matrix-free GP (``solver="cg"``) by block CG, and
its fitted ``fit_info_``: ``backends.dask.gp_variance``."""

import gc
import os
import pathlib
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")

from backends.dask import GaussianProcessRegressor, cg, gp_variance  # noqa: E402
from backends.dask.gp_variance import predictive_covariance  # noqa: E402
from kernelref.gp import GaussianProcessRegressor as ReferenceGPR  # noqa: E402
from kernelref.kernels import RBF  # noqa: E402

NOISE = 0.05


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = 2.0 + 3.0 * np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=len(X))
    X_test = np.vstack([X[:5], rng.normal(size=(35, 3))])  # training points too
    return X, y, X_test, 1.5 * RBF(gamma=0.4)


def cg_model(**kw):
    settings = dict(
        kernel=1.5 * RBF(gamma=0.4),
        noise=NOISE,
        optimizer=None,
        solver="cg",
        tol=1e-10,
        n_probes=4,
        rank=30,
        predict_tol=1e-8,
        chunk_size=150,
        progress=False,
    )
    settings.update(kw)
    return GaussianProcessRegressor(**settings)


def test_cg_variance_is_an_upper_bound_within_the_residual_bound():
    """``cg-variance``: K*ᵀA⁻¹K* = K*ᵀV + VᵀR + RᵀA⁻¹R at any iterate V, so the
    CG covariance exceeds the exact one by RᵀA⁻¹R, each variance by at most
    ‖r_j‖²/σ²; checked densely at a loose tolerance, where the excess is visible."""
    rng = np.random.default_rng(1)
    X, X_star = rng.normal(size=(200, 2)), rng.normal(size=(12, 2))
    kernel = 1.5 * RBF(gamma=0.4)
    A = kernel(X) + NOISE * np.eye(len(X))
    K_star = kernel(X, X_star)
    L = cg.pivoted_cholesky(kernel, X, 5)
    solver = cg.ConjugateGradients(
        lambda V: A @ V, K_star, cg.WoodburyPreconditioner(L, NOISE), tol=1e-2
    )
    state = solver.start()
    while not solver.done(state):
        state = solver.step(state)
    V, R = state["X"], state["R"]
    np.testing.assert_allclose(R, K_star - A @ V, atol=1e-13)  # the true residual
    quadratic = K_star.T @ V + V.T @ R
    np.testing.assert_allclose(quadratic, quadratic.T, atol=1e-12)
    exact = K_star.T @ np.linalg.solve(A, K_star)
    excess = exact - quadratic
    np.testing.assert_allclose(excess, R.T @ np.linalg.solve(A, R), atol=1e-12)
    assert np.linalg.eigvalsh(excess).min() > -1e-12
    bound = np.einsum("ij,ij->j", R, R) / NOISE
    assert np.all(np.diag(excess) <= bound) and np.diag(excess).max() > 1e-6
    # K − LLᵀ ⪰ 0 (a Schur complement), so M ⪯ A and k*ᵀM⁻¹k* ≥ k*ᵀA⁻¹k*
    assert np.linalg.eigvalsh(kernel(X) - L @ L.T).min() > -1e-12
    from_M = np.einsum("ij,ij->j", K_star, cg.WoodburyPreconditioner(L, NOISE)(K_star))
    assert np.all(from_M >= np.diag(exact) - 1e-12)


@pytest.mark.slow
def test_std_and_cov_equal_the_reference_to_the_cg_bound(client, problem):
    X, y, X_test, kernel = problem
    reference = ReferenceGPR(
        kernel=kernel, noise=NOISE, optimizer=None, normalize_y=True
    ).fit(X, y)
    mean_ref, std_ref = reference.predict(X_test, return_std=True)
    _, cov_ref = reference.predict(X_test, return_cov=True)
    model = cg_model(
        normalize_y=True, predict_batch=16, address=client.scheduler.address
    ).fit(X, y)
    records = []
    model.progress = records.append
    mean, std = model.predict(X_test, return_std=True)  # three batches
    np.testing.assert_allclose(mean, mean_ref, atol=1e-7)
    scale = model._y_std**2
    # predict_tol 1e-8: the bound (tol·‖k*‖)²/σ² is far below rounding
    np.testing.assert_allclose(std, std_ref, rtol=0, atol=1e-9)
    assert records and records[-1].measure <= 1e-8  # a Record per CG iteration
    # a loose tolerance: the variances are upper bounds, above the exact ones by
    # no more than the reported bound, and the bound is not vacuous
    model.set_params(predict_tol=1e-2)
    result = predictive_covariance(model, X_test)
    excess = result.value - std_ref**2
    assert np.all(excess >= -1e-12 * scale)
    assert np.all(excess <= result.error_bound + 1e-12 * scale)
    assert excess.max() > 1e-9 * scale and len(result.n_iter) == 3
    # the preconditioner's bound from below: M = LLᵀ + σ²I ⪯ A
    assert np.all(result.lower <= std_ref**2 + 1e-12 * scale)
    assert np.all(result.lower < result.value)

    model.set_params(predict_tol=1e-8, predict_batch=len(X_test))  # one solve
    _, cov = model.predict(X_test, return_cov=True)
    np.testing.assert_allclose(cov, cov_ref, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(cov, cov.T, rtol=0, atol=1e-14 * scale)


@pytest.mark.slow
def test_fit_info_holds_the_estimates_and_their_error_bars(client, problem):
    X, y, _, kernel = problem
    model = cg_model(n_probes=8, address=client.scheduler.address).fit(X, y)
    info = model.fit_info_
    exact = ReferenceGPR(kernel=kernel, noise=NOISE, optimizer=None).fit(X, y)
    lml, gradient = exact.log_marginal_likelihood(kernel.theta, eval_gradient=True)
    assert info["log_marginal_likelihood"] == model.log_marginal_likelihood_value_
    assert info["n_iter"] == model.n_iter_ and info["log_det"] == model.log_det_
    assert info["n_probes"] == 8 and info["n_columns"] == 9 and info["rank"] == 30
    assert (
        abs(info["log_marginal_likelihood"] - lml)
        <= 4 * info["log_marginal_likelihood_std_error"]
    )
    assert np.all(np.abs(info["gradient"] - gradient) <= 4 * info["gradient_std_error"])
    assert np.all(info["gradient_std_error"] > 0)
    # log_marginal_likelihood at the fitted θ is answered from the fit's record
    lml_again, gradient_again = model.log_marginal_likelihood(
        kernel.theta, eval_gradient=True
    )
    assert model.n_evaluations_ == 1 and lml_again == info["log_marginal_likelihood"]
    np.testing.assert_array_equal(gradient_again, info["gradient"])


@pytest.mark.slow
def test_a_model_loaded_after_its_store_is_gone_predicts_the_same(client, problem):
    X, y, X_test, _ = problem
    model = cg_model(address=client.scheduler.address).fit(X, y)
    _, std = model.predict(X_test[:8], return_std=True)
    path = pathlib.Path(model.store_).parent
    loaded = pickle.loads(pickle.dumps(model))
    del model
    gc.collect()
    assert not path.exists()  # the temporary store went with the model
    _, std_loaded = loaded.predict(X_test[:8], return_std=True)
    np.testing.assert_allclose(std_loaded, std, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"predict_tol": 0.0}, "predict_tol"),
        ({"predict_tol": 1.5}, "predict_tol"),
        ({"predict_batch": 0}, "predict_batch"),
        ({"predict_batch": 2.5}, "predict_batch"),
    ],
)
def test_bad_predict_arguments_are_named_before_any_work(problem, kw, name):
    X, y, _, _ = problem
    with pytest.raises(ValueError, match=name):
        cg_model(address="tcp://nowhere:1", **kw).fit(X, y)


@pytest.mark.slow
def test_bad_predict_requests_are_refused_before_any_work(client, problem):
    X, y, X_test, _ = problem
    model = cg_model(address=client.scheduler.address).fit(X, y)
    model.set_params(address="tcp://nowhere:1")  # any work would fail to connect
    with pytest.raises(ValueError, match="not both"):
        model.predict(X_test, return_std=True, return_cov=True)
    model.set_params(predict_batch=8)
    with pytest.raises(ValueError, match="predict_batch=8"):
        model.predict(X_test, return_cov=True)
    model.set_params(predict_batch=None, predict_tol=-1.0)
    with pytest.raises(ValueError, match="predict_tol"):
        model.predict(X_test, return_std=True)


# -- a saved model's variance without a cluster -------------------------------------
FRESH_PROCESS = """
import sys

import numpy as np

import kernelref

model = kernelref.load(sys.argv[1])
X_test = np.load(sys.argv[2])
mean, std = model.predict(X_test, return_std=True)
_, cov = model.predict(X_test[:8], return_cov=True)
np.savez(sys.argv[3], mean=mean, std=std, cov=cov)
print("distributed imported" if "distributed" in sys.modules else "no cluster")
"""


def fresh(*args, cwd):
    """Run a command in a new process on this environment (threads as here)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [*map(str, args)], cwd=cwd, capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
def test_a_saved_model_predicts_its_variance_without_a_cluster(
    client, problem, tmp_path
):
    """A saved matrix-free GP's predict(return_std) started the embedded cluster
    (15-45 s here at N = 300, where the mean takes none): the block CG's
    products ran on it. With no cluster running and N ≤ ``LOCAL_ROWS`` the same
    tasks now run in the process: the same numbers, bit for bit, and no
    ``distributed`` imported, so no cluster or client can have been made."""
    X, y, X_test, _ = problem
    model = cg_model(
        normalize_y=True,
        predict_batch=16,  # three batches of the 40 points
        store=tmp_path / "fit.zarr",
        address=client.scheduler.address,
    ).fit(X, y)
    on_cluster = model.predict(X_test, return_std=True)
    _, cov_on_cluster = model.predict(X_test[:8], return_cov=True)
    model.set_params(address=None)  # as the command line saves it
    model.save(tmp_path / "gp.krm")
    np.save(tmp_path / "X_test.npy", X_test)
    done = fresh(
        sys.executable, "-c", FRESH_PROCESS, "gp.krm", "X_test.npy", "here.npz",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.stdout.split() == ["no", "cluster"], done.stderr
    here = np.load(tmp_path / "here.npz")
    np.testing.assert_array_equal(here["mean"], on_cluster[0])
    np.testing.assert_array_equal(here["std"], on_cluster[1])
    np.testing.assert_array_equal(here["cov"], cov_on_cluster)
    # the console script, as a practitioner predicts later
    command = shutil.which("kernelref", path=os.path.dirname(sys.executable))
    np.savetxt(tmp_path / "test.csv", X_test, delimiter=",")
    done = fresh(
        command, "predict", "gp.krm", "--data", "test.csv", "--header", "no",
        "--std", "--out", "std.npy", "--verbose", cwd=tmp_path,
    )  # fmt: skip
    assert "embedded Dask cluster" not in done.stderr
    np.testing.assert_array_equal(
        np.load(tmp_path / "std.npy"), np.column_stack(on_cluster)
    )


def test_the_variance_needs_a_cluster_only_beyond_local_rows(problem, monkeypatch):
    """``variance_client``: the cluster at ``address=`` or the active client if
    there is one; else this process up to ``LOCAL_ROWS`` training rows; else
    the embedded cluster (``get_client``)."""
    from backends.dask import cluster

    X, y, _, _ = problem
    model = cg_model()
    model.X_train_, model.address = X, None
    started = []
    monkeypatch.setattr(cluster, "running_client", lambda address: None)
    monkeypatch.setattr(cluster, "get_client", lambda address: started.append(1))
    monkeypatch.setattr(gp_variance, "LOCAL_ROWS", len(X))
    assert gp_variance.variance_client(model) is None and not started
    monkeypatch.setattr(gp_variance, "LOCAL_ROWS", len(X) - 1)
    gp_variance.variance_client(model)
    assert started == [1]
    running = object()
    monkeypatch.setattr(cluster, "running_client", lambda address: running)
    assert gp_variance.variance_client(model) is running
