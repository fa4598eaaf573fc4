"""The installed ``kernelref`` command on Dask clusters started by the test:
by address, by scheduler file, with TLS (certificates made here), and an
unreachable scheduler that fails within the timeout."""

import json
import subprocess
import time

import numpy as np
import pytest
from test_cli import write_csv  # tests/cli is on sys.path (rootdir-less test dir)

import kernelref

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.slow

rng = np.random.default_rng(2)
X = rng.normal(size=(50, 2))
t = np.sin(X[:, 0]) + 0.1 * rng.normal(size=50)


def cluster(**options):
    """One worker thread in this process; the command line reaches it over the
    network."""
    return distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        dashboard_address=":0",
        **options,
    )


def test_fit_and_gram_on_a_cluster_by_address(run, tmp_path):
    write_csv(tmp_path / "train.csv", X, t)
    np.save(tmp_path / "X.npy", X)
    with cluster(protocol="tcp") as local:
        address = local.scheduler_address
        done = run(
            "fit",
            "KernelRidge",
            "--data",
            "train.csv",
            "--target",
            "target",
            "--backend",
            "dask",
            "--scheduler",
            address,
            "--store",
            "gram.zarr",
            "--param",
            "lam=0.1",
            "--param",
            "gamma=0.5",
            "--param",
            "chunk_size=16",
            "--out",
            "ridge.krm",
        )
        assert done.returncode == 0, done.stderr
        # What dask-scheduler --scheduler-file writes. (Client.write_scheduler_file
        # dumps the whole scheduler_info, whose worker metrics can have tuple keys
        # that json refuses once tasks have run.)
        (tmp_path / "scheduler.json").write_text(
            json.dumps({"type": "Scheduler", "address": address})
        )
        done = run(
            "gram",
            "--data",
            "X.npy",
            "--kernel",
            "rbf",
            "--param",
            "gamma=0.5",
            "--store",
            "g.zarr",
            "--chunk-size",
            "16",
            "--scheduler-file",
            "scheduler.json",
        )
        assert done.returncode == 0, done.stderr
    model = kernelref.load(tmp_path / "ridge.krm")
    assert type(model).__module__ == "backends.dask.ridge"
    assert model.store == "gram.zarr"
    reference = kernelref.KernelRidge(lam=0.1, gamma=0.5).fit(X, t)
    np.testing.assert_allclose(
        model.predict(X), reference.predict(X), rtol=1e-9, atol=1e-12
    )

    from backends.dask.gram_store import GramStore

    store = GramStore.open(tmp_path / "g.zarr", X=X)
    K = reference.kernel_(X)
    for i in range(store.n_blocks):
        for j in range(i + 1):
            rows, columns = store.block_slice(i), store.block_slice(j)
            np.testing.assert_allclose(store.block(i, j), K[rows, columns], rtol=1e-12)
    done = run("info", "g.zarr")
    assert done.returncode == 0 and "kernelref.gram_store" in done.stdout


def test_weighted_kernel_ridge_on_a_cluster(run, tmp_path):
    """--weight with --backend dask, from a CSV file and from a Zarr matrix read
    lazily: the Dask KernelRidge's weighted fit (the stored-Gram Cholesky path)
    equals the reference's fit(X, t, sample_weight=w)."""
    w = np.arange(len(X)) % 4  # 0 to 3: zero weights drop rows
    write_csv(tmp_path / "train.csv", X, t, w)
    with cluster(protocol="tcp") as local:
        on_cluster = (
            "--backend",
            "dask",
            "--scheduler",
            local.scheduler_address,
            "--param",
            "lam=0.1",
            "--param",
            "gamma=0.5",
            "--param",
            "chunk_size=16",
        )
        done = run(
            "fit",
            "KernelRidge",
            "--data",
            "train.csv",
            "--target",
            "target",
            "--weight",
            "weight",
            *on_cluster,
            "--out",
            "ridge.krm",
        )
        assert done.returncode == 0, done.stderr
        # a Zarr matrix, read lazily, its column 1 the weights; with --verbose,
        # whose progress logger is not saved (saving it failed: a function)
        zarr = pytest.importorskip("zarr")
        zarr.create_array(
            str(tmp_path / "m.zarr"),
            data=np.column_stack([X[:, 0], w, X[:, 1], t]),
            chunks=(16, 4),
        )
        lazy = run(
            "fit",
            "KernelRidge",
            "--data",
            "m.zarr",
            "--target",
            "-1",
            "--weight",
            "1",
            *on_cluster,
            "--verbose",
            "--out",
            "zarr.krm",
        )
    assert lazy.returncode == 0, lazy.stderr
    assert "fitting KernelRidge" in lazy.stderr
    reference = kernelref.KernelRidge(lam=0.1, gamma=0.5).fit(X, t, sample_weight=w)
    unweighted = kernelref.KernelRidge(lam=0.1, gamma=0.5).fit(X, t)
    for name in ("ridge.krm", "zarr.krm"):
        model = kernelref.load(tmp_path / name)
        assert type(model).__module__ == "backends.dask.ridge"
        np.testing.assert_allclose(
            model.predict(X), reference.predict(X), rtol=1e-9, atol=1e-12
        )
        assert not np.allclose(model.predict(X), unweighted.predict(X), atol=1e-3)


def make_certificate(directory):
    """A self-signed certificate for 127.0.0.1, used as the CA and by every party."""
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_tls_cluster_end_to_end(run, tmp_path):
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test's certificates")
    cert, key = make_certificate(tmp_path)
    security = distributed.Security(
        tls_ca_file=str(cert),
        tls_scheduler_cert=str(cert),
        tls_scheduler_key=str(key),
        tls_worker_cert=str(cert),
        tls_worker_key=str(key),
        tls_client_cert=str(cert),
        tls_client_key=str(key),
        require_encryption=True,
    )
    write_csv(tmp_path / "train.csv", X, t)
    with cluster(protocol="tls", security=security, host="127.0.0.1") as local:
        address = local.scheduler_address
        assert address.startswith("tls://")
        done = run(
            "fit",
            "KernelRidge",
            "--data",
            "train.csv",
            "--target",
            "target",
            "--backend",
            "dask",
            "--scheduler",
            address,
            "--tls-ca-file",
            cert,
            "--tls-cert",
            cert,
            "--tls-key",
            key,
            "--param",
            "gamma=0.5",
            "--param",
            "solver=cg",
            "--param",
            "chunk_size=16",
            "--out",
            "tls.krm",
        )
        assert done.returncode == 0, done.stderr
        done = run(
            "fit",
            "KernelRidge",
            "--data",
            "train.csv",
            "--target",
            "target",
            "--backend",
            "dask",
            "--scheduler",
            address,
            "--out",
            "plain.krm",
        )
    assert done.returncode == 2, done.stderr
    assert f"the scheduler at {address} speaks TLS: give --tls-ca-file" in done.stderr
    model = kernelref.load(tmp_path / "tls.krm")
    reference = kernelref.KernelRidge(gamma=0.5).fit(X, t)
    np.testing.assert_allclose(
        model.predict(X), reference.predict(X), rtol=1e-5, atol=1e-6
    )


def test_unreachable_scheduler_fails_within_the_timeout(run, tmp_path):
    write_csv(tmp_path / "train.csv", X, t)
    started = time.perf_counter()
    done = run(
        "fit",
        "KernelRidge",
        "--data",
        "train.csv",
        "--target",
        "target",
        "--backend",
        "dask",
        "--scheduler",
        "tcp://127.0.0.1:9",
        "--timeout",
        "1",
        "--out",
        "x.krm",
    )
    assert done.returncode == 1
    assert "cannot reach tcp://127.0.0.1:9 within 1 s" in done.stderr
    assert "raise --timeout" in done.stderr
    assert time.perf_counter() - started < 60
    assert not (tmp_path / "x.krm").exists()


def test_every_backend_model_saves_and_loads_bit_identically(tmp_path):
    """Each estimator of backends.dask, found by name as the command line finds
    it, fitted on a cluster, saved and loaded: the same predictions, bit for bit."""
    from test_cli import outputs

    from kernelref.cli.models import backend_estimators

    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    found = backend_estimators()
    assert "KernelRidge" in found
    with cluster(protocol="tcp") as local, distributed.Client(local):
        for name, cls in sorted(found.items()):
            accepted = cls._param_names()
            wanted = {
                "chunk_size": 16,
                "store": str(tmp_path / f"{name}.zarr"),
                "optimizer": None,
                "progress": False,
            }
            model = cls(**{k: v for k, v in wanted.items() if k in accepted})
            kind = cls._estimator_type
            fit_on = (
                (X, y)
                if kind == "classifier"
                else (X, t)
                if kind == "regressor"
                else (X,)
            )
            model.fit(*fit_on)
            loaded = kernelref.load(model.save(tmp_path / f"{name}.krm"))
            assert type(loaded) is cls
            expected, got = outputs(model, X[:7]), outputs(loaded, X[:7])
            assert expected and expected.keys() == got.keys(), name
            for method in expected:
                assert np.array_equal(got[method], expected[method]), (name, method)


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_refitting_on_other_data_replaces_the_store_with_overwrite(
    solver, run, tmp_path
):
    """`kernelref fit` keeps a backend's store beside --out; fitting again with the
    same --out on other data is refused (the store is for the first data), the
    message naming --overwrite (not only the Python argument overwrite=True), and
    --overwrite replaces the store: the model is the reference's on the new data.
    A directory that is not a kernelref store is never cleared. (Gram store for
    cholesky, fit store for cg; before, --overwrite did not exist.)"""
    other = X + 1.0
    np.savez(tmp_path / "a.npz", X=X, y=t)
    np.savez(tmp_path / "b.npz", X=other, y=t)
    params = ["--param", "lam=0.1", "--param", "gamma=0.5", "--param", "chunk_size=16"]
    params += ["--param", f"solver={solver}", "--backend", "dask", "--out", "m.krm"]
    with cluster(protocol="tcp") as local:
        address = ["--scheduler", local.scheduler_address]
        done = run("fit", "KernelRidge", "--data", "a.npz", *params, *address)
        assert done.returncode == 0, done.stderr
        done = run("fit", "KernelRidge", "--data", "b.npz", *params, *address)
        assert done.returncode == 1
        assert "--overwrite" in done.stderr and "m.krm.store" in done.stderr
        assert "shutil.rmtree" not in done.stderr  # the Python fixes are not shown
        done = run(
            "fit", "KernelRidge", "--data", "b.npz", *params, *address, "--overwrite"
        )
        assert done.returncode == 0, done.stderr
        model = kernelref.load(tmp_path / "m.krm")
        expected = kernelref.KernelRidge(lam=0.1, gamma=0.5).fit(other, t)
        np.testing.assert_allclose(
            model.predict(other), expected.predict(other), atol=1e-8
        )
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "notes.txt").write_text("keep me")
        done = run(
            "fit", "KernelRidge", "--data", "b.npz", *params, *address,
            "--overwrite", "--store", "mine",
        )  # fmt: skip
        assert done.returncode == 2 and "not a kernelref store" in done.stderr
        assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    done = run("fit", "KernelRidge", "--data", "a.npz", "--overwrite", "--out", "r.krm")
    assert done.returncode == 2 and "keeps no store" in done.stderr


def test_sparse_files_and_softmax_rvc_on_a_cluster(run, tmp_path):
    """`kernelref fit --backend dask` passes a libsvm file of 10⁸ columns to
    backends.dask.SVC as CSR (the model file stays small and predicts as the
    reference's sparse fit), and fits RVC(multi_class='softmax'), whose saved
    model gives the reference's class probabilities (the backend's rounding,
    2e-7 measured in 5974bbd)."""
    from test_cli_sparse import wide_problem, write_sparse_libsvm

    from kernelref import rvm
    from kernelref.svm import SVC

    X_wide, labels, _ = wide_problem()
    write_sparse_libsvm(tmp_path / "wide.svm", X_wide, labels)
    rng = np.random.default_rng(4)
    centres = np.array([[0.0, 2.0], [-1.7, -1.0], [1.7, -1.0]])
    y3 = rng.integers(0, 3, 90)
    X3 = centres[y3] + rng.normal(size=(90, 2))
    np.savez(tmp_path / "three.npz", X=X3, y=y3)
    with cluster(protocol="tcp") as local:
        on = ["--backend", "dask", "--scheduler", local.scheduler_address]
        done = run(
            "fit", "SVC", "--data", "wide.svm", "--param", "gamma=0.5",
            "--param", "C=10", "--param", "chunk_size=16", "--out", "svc.krm", *on,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        done = run(
            "fit", "RVC", "--data", "three.npz", "--param", "gamma=0.5",
            "--param", "multi_class=softmax", "--out", "rvc.krm", *on,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        done = run("predict", "rvc.krm", "--data", "three.npz", "--proba", "--out",
                   "p.npy", *on[2:])  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "svc.krm").stat().st_size < 1e6
    svc = kernelref.load(tmp_path / "svc.krm")
    expected = SVC(gamma=0.5, C=10.0).fit(X_wide, labels)
    np.testing.assert_array_equal(svc.support_, expected.support_)
    np.testing.assert_array_equal(svc.predict(X_wide), expected.predict(X_wide))
    softmax = kernelref.load(tmp_path / "rvc.krm")
    assert softmax.multi_class == "softmax"
    reference = rvm.RVC(gamma=0.5, multi_class="softmax").fit(X3, y3)
    np.testing.assert_array_equal(softmax.relevance_, reference.relevance_)
    P = np.load(tmp_path / "p.npy")
    np.testing.assert_array_equal(P, softmax.predict_proba(X3))
    np.testing.assert_allclose(P, reference.predict_proba(X3), atol=1e-6)


def test_gram_of_a_sparse_file_keeps_it_sparse(run, tmp_path):
    """`kernelref gram` on a libsvm file of 10⁸ columns builds the store from CSR
    (blocks equal the kernel's, 1e-12); a kernel that needs dense X is refused
    by name before any cluster is reached (before: the file was made dense,
    MemoryError, and len() of sparse X failed)."""
    from test_cli_sparse import wide_problem, write_sparse_libsvm

    from backends.dask.gram_store import GramStore
    from kernelref.kernels import RBF

    X_wide, labels, _ = wide_problem()
    write_sparse_libsvm(tmp_path / "wide.svm", X_wide, labels)
    with cluster(protocol="tcp") as local:
        done = run(
            "gram", "--data", "wide.svm", "--kernel", "rbf", "--param", "gamma=0.5",
            "--store", "g.zarr", "--chunk-size", "16",
            "--scheduler", local.scheduler_address,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    store = GramStore.open(tmp_path / "g.zarr", X=X_wide)
    K = RBF(0.5)(X_wide)
    for i in range(store.n_blocks):
        for j in range(i + 1):
            rows, columns = store.block_slice(i), store.block_slice(j)
            np.testing.assert_allclose(store.block(i, j), K[rows, columns], rtol=1e-12)
    done = run("info", "g.zarr")  # the stores' format_version (was "version ?")
    assert done.stdout.startswith("g.zarr: kernelref.gram_store version 1\n")
    assert '"layout": "csr"' in done.stdout
    done = run(
        "gram", "--data", "wide.svm", "--kernel", "laplacian", "--store", "l.zarr",
        "--scheduler", "tcp://127.0.0.1:9", "--timeout", "1",
    )  # fmt: skip
    assert done.returncode == 1 and "Laplacian" in done.stderr
    assert (
        "needs it dense, 29.8 GiB" in done.stderr and "cannot reach" not in done.stderr
    )
    assert not (tmp_path / "l.zarr").exists()


def test_softmax_rvc_shows_progress_on_a_terminal_only(
    kernelref_command, run, tmp_path
):
    """`kernelref fit RVC --backend dask --param multi_class=softmax` draws the
    backend's progress bar (log evidence, basis functions per Gaussian
    approximation) on a pseudo-terminal, and writes nothing to a pipe."""
    pytest.importorskip("tqdm")
    from test_cli import on_terminal

    rng = np.random.default_rng(5)
    centres = np.array([[0.0, 2.0], [-1.7, -1.0], [1.7, -1.0]])
    y3 = rng.integers(0, 3, 60)
    np.savez(tmp_path / "three.npz", X=centres[y3] + rng.normal(size=(60, 2)), y=y3)
    with cluster(protocol="tcp") as local:
        command = [
            "fit", "RVC", "--data", str(tmp_path / "three.npz"), "--backend", "dask",
            "--scheduler", local.scheduler_address, "--param", "gamma=0.5",
            "--param", "multi_class=softmax",
        ]  # fmt: skip
        seen = on_terminal(
            [kernelref_command, *command, "--out", str(tmp_path / "t.krm")]
        )
        piped = run(*command, "--out", "p.krm")
    assert b"log evidence=" in seen and b"approximation" in seen
    assert piped.returncode == 0 and "log evidence" not in piped.stderr
    assert kernelref.load(tmp_path / "t.krm").multi_class == "softmax"


def test_sparse_ridge_and_kernel_pca_model_files_on_a_cluster(run, tmp_path):
    """backends.dask.KernelRidge (cholesky and cg) and KernelPCA fitted by the
    command line on a libsvm file of 10⁸ columns keep X sparse: small model
    files whose predictions and projections are the reference's sparse fits'
    (a guard of 53bc199/87aa57a through the CLI and the model files)."""
    from test_cli_sparse import wide_problem, write_sparse_libsvm

    X_wide, _, score = wide_problem()
    write_sparse_libsvm(tmp_path / "wide.svm", X_wide, score)
    fits = {
        "cholesky.krm": ["KernelRidge", "--param", "solver=cholesky"],
        "cg.krm": ["KernelRidge", "--param", "solver=cg"],
        "kpca.krm": ["KernelPCA", "--param", "n_components=3"],
    }
    with cluster(protocol="tcp") as local:
        for out, model in fits.items():
            done = run(
                "fit", *model, "--data", "wide.svm", "--param", "gamma=0.5",
                "--param", "chunk_size=16", "--out", out, "--backend", "dask",
                "--scheduler", local.scheduler_address,
            )  # fmt: skip
            assert done.returncode == 0, (out, done.stderr)
            assert (tmp_path / out).stat().st_size < 1e6
    ridge = kernelref.KernelRidge(gamma=0.5).fit(X_wide, score)
    for out in ("cholesky.krm", "cg.krm"):
        np.testing.assert_allclose(
            kernelref.load(tmp_path / out).predict(X_wide),
            ridge.predict(X_wide),
            atol=1e-7,
        )
    pca = kernelref.KernelPCA(n_components=3, gamma=0.5).fit(X_wide)
    Z, Z_ref = (
        kernelref.load(tmp_path / "kpca.krm").transform(X_wide),
        pca.transform(X_wide),
    )
    np.testing.assert_allclose(Z, Z_ref, atol=1e-6)  # signs fixed alike
