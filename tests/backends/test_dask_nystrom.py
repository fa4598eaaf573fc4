"""Nyström/FALKON kernel ridge and the resumable, streamed CG path of KernelRidge."""

import os

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse

pytest.importorskip("distributed")

from resilience import Interrupted, kill_a_worker  # noqa: E402

from backends.dask import KernelRidge, nystrom  # noqa: E402
from kernelref.kernels import RBF  # noqa: E402
from kernelref.ridge import KernelRidge as ReferenceKernelRidge  # noqa: E402

pytestmark = pytest.mark.slow

LAM, GAMMA = 0.1, 0.3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=len(X))
    return X, y


@pytest.fixture(scope="module")
def exact(data):
    X, y = data
    return ReferenceKernelRidge(lam=LAM, gamma=GAMMA).fit(X, y)


def fit(data, **kwargs):
    X, y = data
    options = dict(lam=LAM, gamma=GAMMA, chunk_size=150, progress=False)
    return KernelRidge(**{**options, **kwargs}).fit(X, y)


@pytest.mark.parametrize("centres", ["uniform", "leverage"])
def test_nystrom_with_every_point_a_centre_is_exact_ridge(client, data, exact, centres):
    model = fit(data, solver="nystrom", n_centres=len(data[0]), centres=centres)
    np.testing.assert_allclose(
        model.predict(data[0]), exact.predict(data[0]), atol=1e-8
    )
    # With M = N the FALKON preconditioner is exact: BᵀHB = I up to the jitter.
    assert model.n_iter_ <= 3


def test_nystrom_error_decreases_as_m_grows(client, data, exact):
    X = data[0]
    errors = []
    for m in (20, 60, 180):
        model = fit(data, solver="nystrom", n_centres=m, tol=1e-6)
        errors.append(np.sqrt(np.mean((model.predict(X) - exact.predict(X)) ** 2)))
    # Measured here: about 0.22, 0.11, 0.009 (the CG's tol=1e-6 is far below).
    assert errors[0] > errors[1] > errors[2] and errors[0] > 10 * errors[2]


def test_falkon_preconditioner_cuts_the_condition_number(data):
    X = data[0]
    kernel = RBF(gamma=GAMMA)
    C = X[:100]
    K_NM, K_MM = kernel(X, C), kernel(C)
    H = K_NM.T @ K_NM + LAM * K_MM
    before, after = nystrom.FalkonPreconditioner(K_MM, len(X), LAM).condition_numbers(H)
    # Measured here: about 8e7 before, 23 after (M = 100 of N = 300).
    assert before > 1e6 * after


def test_sketched_preconditioner_beats_falkons_and_is_exact_on_every_row(data):
    """FALKON's (N/M)K_MM² estimates K_NMᵀK_NM on the centres' own rows; the
    sketched preconditioner on 4M other rows, unbiased: a smaller cond(BᵀHB)."""
    X, y = data
    kernel = RBF(gamma=GAMMA)
    index = np.arange(0, len(X), 6)  # M = 50
    C = X[index]
    K_NM, K_MM = kernel(X, C), kernel(C)
    H = K_NM.T @ K_NM + LAM * K_MM
    S = nystrom.sketch_rows(len(X), index, 0)
    assert len(S) == 4 * len(C) and not np.isin(S, index).any()
    sketched = nystrom.SketchedPreconditioner(kernel, X[S], C, K_MM, len(X), LAM)
    _, falkon_after = nystrom.FalkonPreconditioner(K_MM, len(X), LAM).condition_numbers(
        H
    )
    _, sketched_after = sketched.condition_numbers(H)
    # Measured here: about 66 (FALKON) and 10 (sketched).
    assert sketched_after < falkon_after / 3
    beta = sketched.B(
        np.linalg.solve(sketched.B_T(sketched.B_T(H).T), sketched.B_T(K_NM.T @ y))
    )
    np.testing.assert_allclose(beta, np.linalg.solve(H, K_NM.T @ y), rtol=1e-8)
    # every row a sketch row (too few others): P = H, BᵀHB = I up to the jitter
    every = nystrom.SketchedPreconditioner(kernel, X, C, K_MM, len(X), LAM)
    BHB = every.B_T(every.B_T(H).T)
    np.testing.assert_allclose(BHB, np.eye(len(C)), atol=1e-6)
    assert len(nystrom.sketch_rows(len(X), np.arange(100), 0)) == len(X)


def test_condition_estimate_from_cg_bounds_the_dense_one(client, data):
    """``condition_estimate_``: CG's extreme Ritz values lie inside BᵀHB's
    spectrum, and after a run to 1e-8 they have nearly reached its ends."""
    X, y = data
    model = fit(data, solver="nystrom", n_centres=40, tol=1e-8)
    index = model.centre_indices_
    kernel = RBF(gamma=GAMMA)
    K_NM, K_MM = kernel(X, X[index]), kernel(X[index])
    H = K_NM.T @ K_NM + LAM * K_MM
    S = nystrom.sketch_rows(len(X), index, 0)
    P = nystrom.SketchedPreconditioner(kernel, X[S], X[index], K_MM, len(X), LAM)
    _, cond = P.condition_numbers(H)
    assert 0.5 * cond < model.condition_estimate_ <= cond * (1 + 1e-6)


def test_leverage_scores_are_exact_with_every_landmark(client, data):
    from backends.dask.runtime import FitStore

    X = data[0]
    kernel = RBF(gamma=GAMMA)
    store = FitStore.prepare(
        _tmp(), X, identity={"t": 1}, chunk_size=150, client=client
    )
    scores = nystrom.leverage_scores(
        client, store, kernel, X.mean(axis=0), LAM, len(X), np.random.default_rng(0)
    )
    K = kernel(X)
    expected = np.diag(scipy.linalg.solve(K + LAM * np.eye(len(X)), K))
    np.testing.assert_allclose(scores, expected, rtol=1e-6, atol=1e-8)


@pytest.fixture(scope="module")
def repeated(data):
    """300 rows of only 60 distinct values, each five times in a shuffled order,
    with targets that differ between the copies."""
    X, y = data
    rng = np.random.default_rng(5)
    index = rng.permutation(np.repeat(np.arange(60), 5))
    return X[index], y[index] + 0.1 * rng.normal(size=len(index))


def distinct_rows(A):
    return len(np.unique(A, axis=0))


@pytest.mark.parametrize("centres", ["uniform", "leverage"])
def test_centres_on_repeated_rows_are_distinct_and_solve_the_restricted_problem(
    client, repeated, centres
):
    """M = 40 centres of 300 rows with 60 values: rows of 40 distinct values (the
    plain draw repeats some), K_MM nonsingular, and β the dense solution of
    ``nystrom-normal`` on those centres."""
    X, y = repeated
    plain = np.random.default_rng(0).choice(len(X), size=40, replace=False)
    assert distinct_rows(X[plain]) < 40, "the test needs a draw that repeats"
    model = fit((X, y), solver="nystrom", n_centres=40, centres=centres, tol=1e-10)
    C = model.X_fit_
    assert C.shape == (40, X.shape[1]) and distinct_rows(C) == 40
    np.testing.assert_array_equal(C, X[model.centre_indices_])
    assert np.all(np.isfinite(model.dual_coef_)) and model.condition_estimate_ < 1e3
    kernel = RBF(gamma=GAMMA)
    K_NM, K_MM = kernel(X, C), kernel(C)
    assert np.linalg.cond(K_MM) < 1e8
    beta = np.linalg.solve(K_NM.T @ K_NM + LAM * K_MM, K_NM.T @ y)
    np.testing.assert_allclose(model.dual_coef_, beta, rtol=0, atol=1e-8)
    np.testing.assert_allclose(model.predict(X), K_NM @ beta, rtol=0, atol=1e-8)


def test_every_distinct_row_a_centre_is_exact_ridge_on_repeated_rows(client, repeated):
    """n_centres ≥ N on data with 60 values: the 60 distinct rows (first of each)
    are the centres, and the fit is the exact kernel ridge of all 300 rows."""
    X, y = repeated
    model = fit((X, y), solver="nystrom", n_centres=1000)
    first = np.sort(np.unique(X, axis=0, return_index=True)[1])
    np.testing.assert_array_equal(model.centre_indices_, first)
    exact = ReferenceKernelRidge(lam=LAM, gamma=GAMMA).fit(X, y)
    np.testing.assert_allclose(model.predict(X), exact.predict(X), rtol=0, atol=1e-8)


def test_more_centres_than_distinct_rows_is_refused_before_any_work(repeated, tmp_path):
    store = tmp_path / "fit.zarr"
    with pytest.raises(
        ValueError, match=r"n_centres=61 .* distinct rows \(60 of 300\).*<= 60"
    ):
        fit(repeated, solver="nystrom", n_centres=61, store=store)
    assert not store.exists()
    assert nystrom.check_n_centres(60, 300, 60) == 60  # every distinct value
    labels, count = nystrom.row_labels(np.array([[0.0, 1], [-0.0, 1], [1, 0.0]]))
    assert count == 2 and labels[0] == labels[1] != labels[2]  # -0.0 is 0.0


def sparse_text(n, d, seed):
    """Sparse rows: four dense-ish informative columns among `d` mostly empty
    ones (about 30 stored entries per row), targets from the informative part."""
    rng = np.random.default_rng(seed)
    informative = rng.normal(size=(n, 4)) * (rng.random((n, 4)) < 0.7)
    nnz = 26 * n
    noise = scipy.sparse.csr_matrix(
        (rng.random(nnz), (rng.integers(n, size=nnz), rng.integers(4, d, size=nnz))),
        shape=(n, d),
    )
    empty = scipy.sparse.csr_matrix((n, d - 4))  # never dense: d may be millions
    X = scipy.sparse.hstack([scipy.sparse.csr_matrix(informative), empty]) + noise
    return X.tocsr(), np.sin(informative[:, 0]) + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("centres", ["uniform", "leverage"])
def test_sparse_nystrom_equals_the_dense_fit(client, centres):
    """scipy.sparse X is not densified: the fit store holds CSR, the centres are
    CSR rows of X, and the model is the dense input's (the same centres, β and
    predictions to the CG's tolerance)."""
    X, y = sparse_text(300, 5000, seed=3)
    Xt, _ = sparse_text(50, 5000, seed=4)
    options = dict(lam=LAM, gamma=0.2, chunk_size=64, progress=False, solver="nystrom")
    options.update(n_centres=60, centres=centres, tol=1e-10)
    sparse = KernelRidge(**options).fit(X, y)
    dense = KernelRidge(**options).fit(X.toarray(), y)
    assert scipy.sparse.issparse(sparse.X_fit_) and sparse.X_fit_.shape == (60, 5000)
    np.testing.assert_array_equal(sparse.centre_indices_, dense.centre_indices_)
    assert (sparse.X_fit_ != X[sparse.centre_indices_]).nnz == 0
    np.testing.assert_allclose(sparse.dual_coef_, dense.dual_coef_, rtol=0, atol=1e-7)
    np.testing.assert_allclose(
        sparse.predict(Xt), dense.predict(Xt.toarray()), rtol=0, atol=1e-8
    )
    assert sparse.n_iter_ <= dense.n_iter_ + 1


def test_sparse_row_labels_equal_the_dense_ones():
    """Equal rows get equal labels on sparse X as on its dense form, with stored
    zeros and -0.0, entries stored twice (summed) and CSC input."""
    rng = np.random.default_rng(6)
    A = rng.integers(0, 3, size=(40, 6)).astype(float) * (rng.random((40, 6)) < 0.3)
    A[5] = A[9] = A[2]
    A[2, 0] = 2.0
    A[5, 0] = 1.0  # stored twice below: 1 + 1 = 2, so row 5 equals row 2
    A[9, 0] = 2.0
    S = scipy.sparse.coo_matrix(A)
    S = scipy.sparse.coo_matrix(
        (
            np.r_[S.data, 1.0, 0.0, -0.0],
            (np.r_[S.row, 5, 3, 9], np.r_[S.col, 0, 1, 1]),
        ),
        shape=A.shape,
    )
    A[5, 0] = 2.0
    A[9, 1] = -0.0 if A[9, 1] == 0 else A[9, 1]
    labels, count = nystrom.row_labels(A)
    assert labels[2] == labels[5] == labels[9] and count < 40
    for X in (S.tocsr(), S.tocsc()):
        sparse_labels, sparse_count = nystrom.row_labels(X)
        assert sparse_count == count
        np.testing.assert_array_equal(
            sparse_labels[:, None] == sparse_labels, labels[:, None] == labels
        )


def test_nystrom_on_two_million_columns(client, tmp_path):
    """X of 150 rows and 2·10⁶ columns (2.4 GB dense, refused before as more
    than 1 GiB to densify): every row a centre, the exact kernel ridge of the
    reference's sparse fit; the store holds O(N + nnz) bytes of X."""
    rng = np.random.default_rng(7)
    X, y = sparse_text(150, 2_000_000, seed=8)
    model = KernelRidge(
        lam=LAM,
        gamma=0.2,
        solver="nystrom",
        n_centres=150,
        chunk_size=50,
        progress=False,
        store=tmp_path / "fit",
    ).fit(X, y)
    exact = ReferenceKernelRidge(lam=LAM, gamma=0.2).fit(X, y)
    Xt = X[rng.choice(150, 40)]
    np.testing.assert_allclose(model.predict(Xt), exact.predict(Xt), atol=1e-8)
    stored = sum(f.stat().st_size for f in (tmp_path / "fit" / "X").rglob("*"))
    assert stored < 16 * X.nnz + 8 * X.shape[0] + 100_000


def _tmp():
    import pathlib
    import tempfile

    return pathlib.Path(tempfile.mkdtemp()) / "fit.zarr"


def test_cg_path_equals_exact_ridge_and_reports_progress(client, data, exact):
    records = []
    model = fit(data, solver="cg", progress=records.append)
    np.testing.assert_allclose(model.dual_coef_, exact.dual_coef_, atol=1e-7)
    assert [r.iteration for r in records] == list(range(1, len(records) + 1))
    assert records[-1].measure <= model.tol


@pytest.mark.parametrize("solver", ["cg", "nystrom"])
def test_interrupted_then_resumed_fit_gives_the_same_model(
    client, data, tmp_path, solver
):
    # M = 40 of 300: with M = 100 the sketch is every row and CG takes one step
    kwargs = dict(solver=solver, n_centres=40, tol=1e-6)
    whole = fit(data, **kwargs)
    assert whole.n_iter_ > 4

    def stop_at_three(record):
        if record.iteration == 3:
            raise Interrupted

    store = tmp_path / "fit.zarr"
    with pytest.raises(Interrupted):
        fit(data, store=store, progress=stop_at_three, **kwargs)
    resumed_records = []
    resumed = fit(data, store=store, progress=resumed_records.append, **kwargs)
    assert resumed_records[0].iteration == 4  # continued, not restarted
    np.testing.assert_array_equal(resumed.dual_coef_, whole.dual_coef_)
    assert resumed.n_iter_ == whole.n_iter_


def test_worker_killed_mid_fit_gives_the_same_model(client, data):
    whole = fit(data, solver="cg", tol=1e-6)

    killed = []

    def kill_one(record):
        if record.iteration == 2:
            killed.append(kill_a_worker(client))

    survived = fit(data, solver="cg", tol=1e-6, progress=kill_one)
    client.wait_for_workers(2, timeout=60)
    assert len(killed) == 1 and killed[0] not in client.run(os.getpid).values()
    np.testing.assert_array_equal(survived.dual_coef_, whole.dual_coef_)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (
            dict(solver="nystrom", centres="random"),
            ValueError,
            "centres must be one of",
        ),
        (dict(solver="nystrom", n_centres=0), ValueError, "n_centres"),
        (dict(solver="cg", progress="yes"), TypeError, "progress must be"),
        (dict(solver="cg", resume=1), TypeError, "resume must be"),
    ],
)
def test_bad_arguments_are_refused(data, kwargs, error, match):
    with pytest.raises(error, match=match):
        fit(data, **kwargs)
