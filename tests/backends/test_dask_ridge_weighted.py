"""``backends.dask.KernelRidge.fit(X, y, sample_weight)`` solves the reference's
weighted problem (label ``ridge-weighted``) with each of its solvers."""

import os
import pathlib

import numpy as np
import pytest

pytest.importorskip("distributed")

# tests/backends is on sys.path (rootdir-less test dir)
from resilience import Interrupted, kill_a_worker  # noqa: E402
from test_dask_ridge import regression_data  # noqa: E402

from backends.dask import cg  # noqa: E402
from backends.dask.ridge import KernelRidge  # noqa: E402
from kernelref.kernels import RBF  # noqa: E402
from kernelref.ridge import KernelRidge as ReferenceKernelRidge  # noqa: E402

pytestmark = pytest.mark.slow

LAM, GAMMA = 0.5, 0.4
KERNEL = dict(kernel="laplacian", gamma=GAMMA)

# The solvers, and how close each comes to the reference: the tolerances of the
# unweighted backend-vs-reference tests (test_dask_ridge: dual coefficients to
# 1e-8; test_dask_nystrom: predictions with every point a centre to 1e-8).
SOLVERS = {
    "cholesky": {"solver": "cholesky"},
    "cg": {"solver": "cg"},
    "cg-nystrom": {"solver": "cg", "preconditioner": "nystrom"},
    "nystrom": {"solver": "nystrom"},
}


@pytest.fixture
def address(client):
    return client.scheduler.address


def integer_weights(n, seed=1):
    """0, 1, 2 or 3 per sample: a quarter of the samples weigh nothing."""
    return np.random.default_rng(seed).integers(0, 4, size=n).astype(float)


def backend(name, n, address, tmp_path, **kwargs):
    """The backend estimator with solver `name`; Nyström with every point a centre
    (exact ridge), so all solvers answer the same problem."""
    options = dict(
        lam=LAM,
        chunk_size=64,
        rank=40,
        n_centres=n,
        progress=False,
        store=tmp_path / "store",
        address=address,
    )
    return KernelRidge(**{**options, **KERNEL, **SOLVERS[name], **kwargs})


def assert_same_model(model, reference, X_test, name):
    """Dual coefficients (and so predictions) to 1e-8; Nyström's β are the
    coefficients of its centres, compared by their predictions (test_dask_nystrom)."""
    if name != "nystrom":
        np.testing.assert_allclose(
            model.dual_coef_, reference.dual_coef_, rtol=0, atol=1e-8
        )
    np.testing.assert_allclose(
        model.predict(X_test), reference.predict(X_test), rtol=0, atol=1e-8
    )


@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize("n_targets", [None, 2])
def test_weighted_ridge_equals_the_reference(address, tmp_path, name, n_targets):
    X, y = regression_data(300, n_targets=n_targets)
    w = np.random.default_rng(2).uniform(0.0, 3.0, size=len(X))
    w[::7] = 0.0
    reference = ReferenceKernelRidge(lam=LAM, **KERNEL).fit(X, y, sample_weight=w)
    unweighted = ReferenceKernelRidge(lam=LAM, **KERNEL).fit(X, y)
    assert np.abs(reference.dual_coef_ - unweighted.dual_coef_).max() > 0.1
    model = backend(name, len(X), address, tmp_path).fit(X, y, sample_weight=w)
    assert_same_model(model, reference, regression_data(50, seed=3)[0], name)
    assert model.dual_coef_.shape[1:] == y.shape[1:]
    if name == "nystrom":  # M = N: the sketch is every row and P = H_s, weights too
        assert model.n_iter_ <= 3


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_nystrom_on_fewer_centres_solves_the_restricted_problem(
    address, tmp_path, weighted
):
    """M = 40 < N: β solves K_NMᵀ S K_NM β + λ K_MM β = K_NMᵀ S t on the fit's
    centres, and (integer weights) equals the unweighted Nyström solution on the
    rows repeated, with the same centres. The unweighted fit meets the same
    tolerance; measured here: predictions within about 1.5e-10 of both oracles."""
    X, y = regression_data(300)
    s = integer_weights(len(X)) if weighted else np.ones(len(X))
    model = backend("nystrom", len(X), address, tmp_path, n_centres=40).fit(
        X, y, sample_weight=s if weighted else None
    )
    C = X[model.centre_indices_]
    kernel = model.kernel_
    K_NM, K_MM = kernel(X, C), kernel(C)
    beta = np.linalg.solve(K_NM.T @ (s[:, None] * K_NM) + LAM * K_MM, K_NM.T @ (s * y))
    repeated = np.repeat(np.arange(len(X)), s.astype(int))
    K_RM = kernel(X[repeated], C)
    beta_repeated = np.linalg.solve(K_RM.T @ K_RM + LAM * K_MM, K_RM.T @ y[repeated])
    for oracle in (beta, beta_repeated):
        np.testing.assert_allclose(model.predict(X), K_NM @ oracle, rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", SOLVERS)
def test_integer_weights_equal_duplicated_rows(address, tmp_path, name):
    """Weight m counts a sample m times: the same function as the reference's
    unweighted fit on the data with each row repeated m times (0: left out), a
    check that does not use the weighted formula."""
    X, y = regression_data(150)
    w = integer_weights(len(X))
    repeated = np.repeat(np.arange(len(X)), w.astype(int))
    oracle = ReferenceKernelRidge(lam=LAM, **KERNEL).fit(X[repeated], y[repeated])
    model = backend(name, len(X), address, tmp_path).fit(X, y, sample_weight=w)
    X_test = regression_data(50, seed=3)[0]
    np.testing.assert_allclose(
        model.predict(X_test), oracle.predict(X_test), rtol=0, atol=1e-8
    )
    if name != "nystrom":  # a_n is the sum of its copies' coefficients
        summed = np.bincount(repeated, oracle.dual_coef_, minlength=len(X))
        np.testing.assert_allclose(model.dual_coef_, summed, rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", SOLVERS)
def test_zero_weight_equals_dropping_the_sample(address, tmp_path, name):
    X, y = regression_data(150, seed=4)
    w = np.ones(len(X))
    w[[0, 17, 18, 149]] = 0.0
    kept = w > 0
    dropped = ReferenceKernelRidge(lam=LAM, **KERNEL).fit(X[kept], y[kept])
    model = backend(name, len(X), address, tmp_path).fit(X, y, sample_weight=w)
    X_test = regression_data(50, seed=3)[0]
    np.testing.assert_allclose(
        model.predict(X_test), dropped.predict(X_test), rtol=0, atol=1e-8
    )
    if name != "nystrom":
        assert np.all(model.dual_coef_[~kept] == 0.0)
        np.testing.assert_allclose(
            model.dual_coef_[kept], dropped.dual_coef_, rtol=0, atol=1e-8
        )


def test_one_number_is_one_weight_for_all(address, tmp_path):
    """sample_weight=c is penalty λ/c, as in the reference."""
    X, y = regression_data(120)
    model = backend("cholesky", len(X), address, tmp_path).fit(X, y, sample_weight=4.0)
    reference = ReferenceKernelRidge(lam=LAM / 4.0, **KERNEL).fit(X, y)
    np.testing.assert_allclose(
        model.dual_coef_, reference.dual_coef_, rtol=0, atol=1e-8
    )


def store_files(path):
    return {
        p: p.stat().st_mtime_ns for p in pathlib.Path(path).rglob("*") if p.is_file()
    }


def factor_files(files):
    return {p: t for p, t in files.items() if "cholesky" in p.parts}


def test_factor_is_reused_for_the_same_weights_only(address, tmp_path):
    X, y = regression_data(200)
    w, w_other = integer_weights(len(X), 5), integer_weights(len(X), 6)
    store = tmp_path / "store"

    def fit(weights):
        return backend("cholesky", len(X), address, tmp_path).fit(
            X, y, sample_weight=weights
        )

    first = fit(w)
    written = store_files(store)
    assert factor_files(written)
    again = fit(w.copy())  # the same weights, another array: reused
    assert store_files(store) == written
    np.testing.assert_array_equal(again.dual_coef_, first.dual_coef_)

    for weights in (w_other, None):  # other weights, or none: refactored
        model = fit(weights)
        rewritten = store_files(store)
        gram = {p: t for p, t in written.items() if p not in factor_files(written)}
        assert gram and all(rewritten[p] == t for p, t in gram.items())
        changed = [p for p, t in factor_files(written).items() if rewritten[p] != t]
        assert changed
        reference = ReferenceKernelRidge(lam=LAM, **KERNEL).fit(
            X, y, sample_weight=weights
        )
        np.testing.assert_allclose(
            model.dual_coef_, reference.dual_coef_, rtol=0, atol=1e-8
        )
        written = rewritten
    back = fit(w)  # weights w once more: the factor of None is not reused either
    np.testing.assert_allclose(back.dual_coef_, first.dual_coef_, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["cg", "nystrom"])
def test_iterative_store_of_other_weights_is_not_resumed(address, tmp_path, name):
    """The weights are part of the fit store's data: an interrupted fit resumes
    from its checkpoint for the same weights, and a user's store (with its
    checkpoint) for weights w is refused for w'; the estimator's own temporary
    store is replaced."""
    X, y = regression_data(120)
    w, w_other = integer_weights(len(X), 7), integer_weights(len(X), 8)
    whole = backend(name, len(X), address, tmp_path, store=None, n_centres=20)
    whole.fit(X, y, sample_weight=w)
    assert whole.n_iter_ > 4

    def stop_at_three(record):
        if record.iteration == 3:
            raise Interrupted

    with pytest.raises(Interrupted):
        backend(
            name, len(X), address, tmp_path, progress=stop_at_three, n_centres=20
        ).fit(X, y, sample_weight=w)
    records = []
    resumed = backend(
        name, len(X), address, tmp_path, progress=records.append, n_centres=20
    ).fit(X, y, sample_weight=w)
    assert records[0].iteration == 4  # continued, not restarted
    np.testing.assert_array_equal(resumed.dual_coef_, whole.dual_coef_)
    with pytest.raises(ValueError, match=r"other data.*\['s'\]"):
        backend(name, len(X), address, tmp_path).fit(X, y, sample_weight=w_other)
    own = backend(name, len(X), address, tmp_path, store=None)
    own.fit(X, y, sample_weight=w)
    own.fit(X, y, sample_weight=w_other)
    reference = ReferenceKernelRidge(lam=LAM, **KERNEL).fit(X, y, sample_weight=w_other)
    np.testing.assert_allclose(own.predict(X), reference.predict(X), atol=1e-8)


@pytest.mark.parametrize("name", ["cg", "nystrom"])
def test_worker_killed_mid_weighted_fit_gives_the_reference_fit(client, tmp_path, name):
    """A worker process killed by its pid (SIGKILL) after the second iteration of
    a weighted fit: the lost tasks are recomputed from the fit store, and the fit
    is bit for bit the one without the kill and, for CG, the reference's weighted
    fit (as test_dask_nystrom's kill test of the unweighted fit). Nyström on
    M = 40 < N centres (with M = N it takes one step) is checked against the
    dense solution of ``nystrom-weighted`` on its centres."""
    X, y = regression_data(200, seed=6)
    w = integer_weights(len(X), 9)
    address = client.scheduler.address
    options = dict(store=None, n_centres=40, tol=1e-10)
    whole = backend(name, len(X), address, tmp_path, **options)
    whole.fit(X, y, sample_weight=w)
    assert whole.n_iter_ > 4
    pids, killed = set(client.run(os.getpid).values()), []

    def kill_one(record):
        if record.iteration == 2:
            killed.append(kill_a_worker(client))

    survived = backend(
        name, len(X), address, tmp_path, progress=kill_one, **options
    ).fit(X, y, sample_weight=w)
    client.wait_for_workers(2, timeout=60)
    assert len(killed) == 1 and killed[0] not in client.run(os.getpid).values()
    assert killed[0] in pids
    np.testing.assert_array_equal(survived.dual_coef_, whole.dual_coef_)
    assert survived.n_iter_ == whole.n_iter_
    if name == "cg":
        reference = ReferenceKernelRidge(lam=LAM, **KERNEL).fit(X, y, sample_weight=w)
        assert_same_model(survived, reference, regression_data(50, seed=3)[0], name)
    else:
        kernel, C = survived.kernel_, survived.X_fit_
        K_NM, K_MM = kernel(X, C), kernel(C)
        H_s = K_NM.T @ (w[:, None] * K_NM) + LAM * K_MM
        beta = np.linalg.solve(H_s, K_NM.T @ (w * y))
        np.testing.assert_allclose(survived.predict(X), K_NM @ beta, rtol=0, atol=1e-8)


BAD_WEIGHTS = [
    (-np.ones(20), ValueError, "sample_weight must be 1-D with one weight ≥ 0"),
    (np.zeros(20), ValueError, "not all zero"),
    (np.ones(19), ValueError, "sample_weight has 19 rows"),
    (np.ones((20, 2)), ValueError, "sample_weight must be 1-D"),
    (np.r_[np.nan, np.ones(19)], ValueError, "sample_weight contains NaN"),
    (True, ValueError, "sample_weight must be 1-D"),
    ("heavy", TypeError, "sample_weight must be numeric"),
    (-1.0, ValueError, "sample_weight must be 1-D with one weight ≥ 0"),
]


@pytest.mark.parametrize("name", SOLVERS)
@pytest.mark.parametrize("weights, error, match", BAD_WEIGHTS)
def test_bad_weights_are_refused_before_any_work(tmp_path, name, weights, error, match):
    X, y = regression_data(20)
    model = backend(name, len(X), None, tmp_path)
    with pytest.raises(error, match=match):
        model.fit(X, y, sample_weight=weights)
    assert not (tmp_path / "store").exists() and not hasattr(model, "dual_coef_")


def test_weighted_ridge_pivoted_cholesky_is_that_of_the_weighted_matrix():
    """The CG preconditioner's factor of S^½ K S^½: full rank reproduces it, and a
    zero-weight row is never a pivot (its row of L stays zero)."""
    X = regression_data(60)[0]
    kernel = RBF(gamma=0.3)
    s = integer_weights(len(X))
    root = np.sqrt(s)
    L = cg.pivoted_cholesky(kernel, X, 60, weights=s)
    np.testing.assert_allclose(
        L @ L.T, root[:, None] * kernel(X) * root[None, :], rtol=0, atol=1e-10
    )
    assert np.all(L[s == 0] == 0.0)
    np.testing.assert_array_equal(
        cg.pivoted_cholesky(kernel, X, 10, weights=np.ones(len(X))),
        cg.pivoted_cholesky(kernel, X, 10),
    )
