"""``backends.dask.KernelRidge`` equals the reference, with a Gram matrix larger than a
worker."""

import gc
import pathlib
import pickle

import numpy as np
import pytest
from scipy.linalg import LinAlgError

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
sklearn_base = pytest.importorskip("sklearn.base")

from backends.dask.ridge import KernelRidge  # noqa: E402
from kernelref.ridge import KernelRidge as ReferenceKernelRidge  # noqa: E402

pytestmark = pytest.mark.slow

SOLVERS = [
    {"solver": "cholesky"},
    {"solver": "cg"},
    {"solver": "cg", "preconditioner": "nystrom"},
]

# The large case. A worker process with numpy, scipy, zarr and distributed
# imported measured about 100 MB resident here, and about 115–125 MB at its peak
# while fitting in 512-wide tiles (the tiles, not N, set the peak). N = 5500 makes
# the Gram matrix 8·N² = 242 MB and the limit 90% of it, 218 MB, whose pause
# threshold (80%, 174 MB) leaves a margin of about 50 MB over the measured peak,
# for other library versions, while the Gram matrix cannot fit in a worker.
N_LARGE, CHUNK_LARGE = 5500, 512
GRAM_BYTES = 8 * N_LARGE**2
MEMORY_LIMIT = int(0.9 * GRAM_BYTES)


def regression_data(n, seed=0, n_targets=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.sin(X).sum(axis=1) + 0.1 * rng.normal(size=n)
    if n_targets is not None:
        y = np.column_stack([y * (k + 1) for k in range(n_targets)])
    return X, y


def worker_functions():
    """Functions for ``client.run``, made in a closure so they travel by value:
    a worker unpickling them does not import this module (and scikit-learn)."""

    def resident_bytes():
        """The process's resident set size and its peak, from /proc (Linux)."""
        import pathlib

        status = pathlib.Path("/proc/self/status").read_text().splitlines()
        fields = dict(line.split(":", 1) for line in status)
        return {
            name: int(fields[name].split()[0]) * 1024 for name in ("VmRSS", "VmHWM")
        }

    def warm_up():
        """Import what the fit's tasks import, so the baseline includes it."""
        import backends.dask.cg  # noqa: F401
        import backends.dask.linalg  # noqa: F401

    return resident_bytes, warm_up


resident_bytes, warm_up = worker_functions()


@pytest.fixture(scope="module")
def small_workers():
    """Two single-threaded worker processes whose memory limit is below the Gram
    matrix's size, with distributed's default spill/pause/terminate thresholds."""
    if not pathlib.Path("/proc/self/status").exists():
        pytest.skip("reads worker memory from /proc")
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=MEMORY_LIMIT,
            dashboard_address=":0",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.run(warm_up)
        yield client


@pytest.fixture(scope="module")
def large_reference():
    X, y = regression_data(N_LARGE)
    return X, y, ReferenceKernelRidge(lam=1.0).fit(X, y)


@pytest.mark.parametrize("options", SOLVERS[:2], ids=["cholesky", "cg"])
def test_backend_equals_reference_when_gram_exceeds_worker_memory(
    small_workers, large_reference, tmp_path, options
):
    client = small_workers
    memory = dask.config.get("distributed.worker.memory")
    assert memory["pause"] and memory["terminate"], "the default thresholds must be on"
    assert GRAM_BYTES > MEMORY_LIMIT
    baseline = client.run(resident_bytes)
    assert all(
        b["VmRSS"] < memory["pause"] * MEMORY_LIMIT for b in baseline.values()
    ), baseline
    X, y, reference = large_reference

    model = KernelRidge(
        lam=1.0,
        chunk_size=CHUNK_LARGE,
        store=tmp_path / "gram",
        address=client.scheduler.address,
        **options,
    ).fit(X, y)

    np.testing.assert_allclose(
        model.dual_coef_, reference.dual_coef_, rtol=0, atol=1e-8
    )
    X_test = regression_data(300, seed=1)[0]
    np.testing.assert_allclose(
        model.predict(X_test), reference.predict(X_test), rtol=0, atol=1e-8
    )
    after = client.run(resident_bytes)
    assert after.keys() == baseline.keys(), "a worker was restarted"
    for worker in after.values():
        assert worker["VmHWM"] < memory["pause"] * MEMORY_LIMIT < GRAM_BYTES, after


@pytest.fixture
def address(client):
    return client.scheduler.address


@pytest.mark.parametrize("options", SOLVERS, ids=["cholesky", "cg", "cg-nystrom"])
@pytest.mark.parametrize("n_targets", [None, 2])
def test_backend_equals_reference_small(address, tmp_path, options, n_targets):
    X, y = regression_data(450, n_targets=n_targets)
    reference = ReferenceKernelRidge(lam=0.5, kernel="laplacian", gamma=0.4).fit(X, y)
    model = KernelRidge(
        lam=0.5,
        kernel="laplacian",
        gamma=0.4,
        chunk_size=100,
        rank=50,
        store=tmp_path / "gram",
        address=address,
        **options,
    ).fit(X, y)
    np.testing.assert_allclose(
        model.dual_coef_, reference.dual_coef_, rtol=0, atol=1e-8
    )
    assert model.score(X, y) == pytest.approx(reference.score(X, y), abs=1e-10)
    assert model.kernel_ == reference.kernel_ and model.n_features_in_ == 3


@pytest.mark.parametrize("options", SOLVERS[:2], ids=["cholesky", "cg"])
def test_numpy_and_dask_inputs_give_the_same_fit(address, options):
    X, y = regression_data(300)
    from_numpy = KernelRidge(chunk_size=128, address=address, **options).fit(X, y)
    from_dask = KernelRidge(chunk_size=128, address=address, **options).fit(
        da.from_array(X, chunks=(70, 3)), da.from_array(y, chunks=70)
    )
    np.testing.assert_array_equal(from_dask.dual_coef_, from_numpy.dual_coef_)
    assert isinstance(from_dask.X_fit_, np.ndarray)


BAD_ARGUMENTS = [
    ({"lam": 0.0}, ValueError, "lam must be a finite number > 0"),
    ({"kernel": "precomputed"}, ValueError, "precomputed"),
    ({"kernel": "cosine"}, ValueError, "kernel must be one of"),
    ({"solver": "lu"}, ValueError, "solver must be one of"),
    ({"preconditioner": "jacobi"}, ValueError, "preconditioner must be one of"),
    ({"chunk_size": 0}, ValueError, "chunk_size must be a positive integer"),
    ({"chunk_size": 10.5}, ValueError, "chunk_size must be a positive integer"),
    ({"rank": -1}, ValueError, "rank must be a positive integer"),
    ({"max_iter": True}, ValueError, "max_iter must be a positive integer"),
    ({"tol": 0.0}, ValueError, "tol must be a finite number > 0"),
    ({"tol": 2.0}, ValueError, "tol must be < 1"),
    ({"compressor": "zstd"}, ValueError, "compressor must be one of"),
    ({"store": 3}, TypeError, "store must be a directory path"),
    ({"address": 8786}, TypeError, "address must be a scheduler address"),
    ({"random_state": "seed"}, TypeError, "random_state must be an integer"),
]


@pytest.mark.parametrize("kwargs, error, match", BAD_ARGUMENTS)
def test_bad_arguments_are_refused_before_any_work(tmp_path, kwargs, error, match):
    X, y = regression_data(20)
    store = tmp_path / "gram"
    kwargs = {"store": store, **kwargs}
    with pytest.raises(error, match=match):
        KernelRidge(**kwargs).fit(X, y)
    assert not store.exists()


@pytest.mark.parametrize(
    "change, match",
    [
        (
            lambda X, y: (np.where(np.arange(20)[:, None] == 3, np.nan, X), y),
            "X contains NaN",
        ),
        (lambda X, y: (X, y[:-1]), "y has 19 rows"),
        (lambda X, y: (X[:0], y[:0]), "X has 0 samples"),
        (lambda X, y: (X[:, 0], y), "X must be 2-D"),
    ],
)
def test_bad_data_is_refused_before_any_work(tmp_path, change, match):
    X, y = change(*regression_data(20))
    with pytest.raises(ValueError, match=match):
        KernelRidge(store=tmp_path / "gram").fit(X, y)
    assert not (tmp_path / "gram").exists()


def test_clone_copies_parameters_not_fit(address):
    X, y = regression_data(60)
    model = KernelRidge(
        lam=0.3, solver="cg", rank=7, chunk_size=32, address=address
    ).fit(X, y)
    copy = sklearn_base.clone(model)
    assert copy.get_params() == model.get_params()
    assert not hasattr(copy, "dual_coef_")
    np.testing.assert_array_equal(copy.fit(X, y).dual_coef_, model.dual_coef_)


def store_files(path):
    return {
        p: p.stat().st_mtime_ns for p in pathlib.Path(path).rglob("*") if p.is_file()
    }


def test_second_fit_reuses_the_store_and_its_factor(address, tmp_path):
    X, y = regression_data(250)
    store = tmp_path / "gram"
    first = KernelRidge(lam=0.5, chunk_size=64, store=store, address=address).fit(X, y)
    written = store_files(store)
    assert any("cholesky" in p.parts for p in written)

    again = KernelRidge(lam=0.5, chunk_size=64, store=store, address=address).fit(X, y)
    assert store_files(store) == written
    np.testing.assert_array_equal(again.dual_coef_, first.dual_coef_)

    other_lam = KernelRidge(lam=2.0, chunk_size=64, store=store, address=address).fit(
        X, y
    )
    rewritten = store_files(store)
    gram = {p: t for p, t in written.items() if "K" in p.relative_to(store).parts[:1]}
    assert gram and all(rewritten[p] == t for p, t in gram.items())
    assert any(rewritten[p] != t for p, t in written.items() if "cholesky" in p.parts)
    np.testing.assert_allclose(
        other_lam.dual_coef_,
        ReferenceKernelRidge(lam=2.0).fit(X, y).dual_coef_,
        rtol=0,
        atol=1e-10,
    )


def test_store_for_other_data_is_refused(address, tmp_path):
    X, y = regression_data(100)
    store = tmp_path / "gram"
    KernelRidge(chunk_size=64, store=store, address=address).fit(X, y)
    written = store_files(store)
    with pytest.raises(ValueError, match="other data"):
        KernelRidge(chunk_size=64, store=store, address=address).fit(X + 1.0, y)
    with pytest.raises(ValueError, match="built with kernel"):
        KernelRidge(
            kernel="laplacian", chunk_size=64, store=store, address=address
        ).fit(X, y)
    assert store_files(store) == written


def test_temporary_store_is_removed_with_the_estimator(address):
    X, y = regression_data(80)
    model = KernelRidge(chunk_size=32, address=address).fit(X, y)
    path = pathlib.Path(model.store_)
    assert path.exists()
    copy = pickle.loads(pickle.dumps(model))
    del model
    gc.collect()
    assert not path.exists() and not path.parent.exists()
    np.testing.assert_allclose(
        copy.predict(X), ReferenceKernelRidge().fit(X, y).predict(X), rtol=0, atol=1e-10
    )


def test_indefinite_kernel_is_reported(address, tmp_path):
    X, y = regression_data(60)
    model = KernelRidge(
        lam=1e-3,
        kernel="sigmoid",
        gamma=2.0,
        coef0=-1.0,
        chunk_size=20,
        store=tmp_path / "gram",
        address=address,
    )
    with pytest.raises(LinAlgError, match="not positive definite"):
        model.fit(X, y)


def test_cg_reports_its_iterations(address):
    X, y = regression_data(200)
    plain = KernelRidge(
        lam=0.3, solver="cg", preconditioner=None, chunk_size=100, address=address
    ).fit(X, y)
    preconditioned = KernelRidge(
        lam=0.3, solver="cg", rank=40, chunk_size=100, address=address
    ).fit(X, y)
    assert 0 < preconditioned.n_iter_ < plain.n_iter_
    assert not hasattr(preconditioned, "store_")
