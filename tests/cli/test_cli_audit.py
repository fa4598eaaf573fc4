"""A practitioner's audit of the installed ``kernelref`` command: a scheduler
address that is no scheduler, scheduler files that are missing or wrong, a
one-vs-rest RVC evaluated, a model's target column left in at predict, an
interrupted fit told how to resume, warnings and a closed pipe. Each case failed
(a hang, a traceback, a crash or an unclear message) before its fix."""

import json
import os
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest
from test_cli import write_csv  # tests/cli is on sys.path (rootdir-less test dir)

import kernelref

distributed = pytest.importorskip("distributed")
from backends.dask.waiting import workers_killed  # noqa: E402 (after the skip)

pytestmark = pytest.mark.slow

rng = np.random.default_rng(24)
X = rng.normal(size=(60, 2))
t = np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)
labels = np.digitize(X[:, 0], [-0.5, 0.5])  # three classes


def environment():
    """The environment `run` gives the command (conftest's, not imported: other
    test directories have a conftest module too)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


class Listener:
    """A TCP port that accepts connections and then either says nothing (a
    service waiting for its client to speak first, such as a web server) or
    answers with `reply` bytes (another protocol)."""

    def __init__(self, reply=None):
        self.reply, self.held = reply, []
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.socket.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.held.append(connection)
            if self.reply is not None:
                connection.sendall(self.reply)

    def close(self):
        self.socket.close()
        for connection in self.held:
            connection.close()


def cluster():
    """One worker thread in this process; the command line reaches it over the
    network."""
    return distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        dashboard_address=":0",
    )


def fit_on(run, address, *extra, timeout=60):
    return run(
        "fit",
        "KernelRidge",
        "--data",
        "train.csv",
        "--target",
        "target",
        "--backend",
        "dask",
        *extra,
        "--timeout",
        "1",
        "--out",
        "x.krm",
        *(() if address is None else ("--scheduler", address)),
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "reply, said",
    [
        (None, "cannot reach tcp://127.0.0.1:"),  # waited forever before
        (b"\xff" * 64, "answered, but not as a Dask scheduler"),  # MemoryError
    ],
)
def test_a_port_that_is_no_scheduler_fails_within_the_timeout(
    run, tmp_path, reply, said
):
    write_csv(tmp_path / "train.csv", X, t)
    listener = Listener(reply)
    try:
        started = time.perf_counter()
        done = fit_on(run, listener.address)
        elapsed = time.perf_counter() - started
    finally:
        listener.close()
    assert done.returncode == 1, done.stderr
    assert said in done.stderr and "unexpected" not in done.stderr
    assert "Traceback" not in done.stderr
    assert elapsed < 50  # the process start, the imports and --timeout 1
    assert not (tmp_path / "x.krm").exists()


def test_scheduler_addresses_and_files_are_checked_before_any_work(run, tmp_path):
    write_csv(tmp_path / "train.csv", X, t)
    done = fit_on(run, "tcp://head")
    assert done.returncode == 2
    assert "--scheduler tcp://head: not a scheduler address" in done.stderr
    assert "tcp://HOST:PORT" in done.stderr
    # a missing file was waited for forever
    started = time.perf_counter()
    done = fit_on(run, None, "--scheduler-file", "missing.json")
    assert done.returncode == 1
    assert "--scheduler-file missing.json: no such file after 1 s" in done.stderr
    assert time.perf_counter() - started < 50
    # a file without an address raised a bare AssertionError
    (tmp_path / "other.json").write_text(json.dumps({"workers": {}}))
    done = fit_on(run, None, "--scheduler-file", "other.json")
    assert done.returncode == 2
    assert "--scheduler-file other.json: not a Dask scheduler file" in done.stderr
    assert not (tmp_path / "x.krm").exists()


def test_one_vs_rest_rvc_worker_address_and_target_column(run, tmp_path):
    """A worker's address is named as such; fit --verbose of a one-vs-rest RVC
    could not save it (each binary RVC kept --verbose's logger as progress=) and
    showed the logger's address; evaluate of a one-vs-rest RVC failed
    on its list of evidences; predict on the training file without --target said
    only 'X has 3 features, but it is expecting 2'; info on its store printed
    zarr's warnings about the checkpoint files."""
    write_csv(tmp_path / "train.csv", X, labels)
    with cluster() as local:
        (worker,) = local.workers.values()
        done = fit_on(run, worker.address)
        assert done.returncode == 1
        assert "is a Dask Worker, not a scheduler" in done.stderr
        address = local.scheduler_address
        done = run(
            "fit", "RVC", "--data", "train.csv", "--target", "target", "--backend",
            "dask", "--scheduler", address, "--param", "gamma=0.5", "--param",
            "multi_class=ovr", "--out", "rvc.krm", "--verbose",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        # --verbose showed progress=<function progress_callback.<locals>...>
        assert (
            "kernelref: fitting RVC(gamma=0.5, multi_class='ovr', "
            "store='rvc.krm.store') on train.csv (60 samples × 2 features)"
        ) in done.stderr
        done = run(
            "evaluate", "rvc.krm", "--data", "train.csv", "--target", "target",
            "--json", "--scheduler", address,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        model = kernelref.load(tmp_path / "rvc.krm")
        assert report["log_evidence"] == [float(v) for v in model.log_evidence_]
        assert len(report["log_evidence"]) == 3
        assert report["accuracy"] == np.mean(model.predict(X) == labels)
        done = run("predict", "rvc.krm", "--data", "train.csv", "--out", "p.csv")
        assert done.returncode == 2
        assert "give --target target here too" in done.stderr
        assert "fitted on 2" in done.stderr
    done = run("info", "rvc.krm.store")
    assert done.returncode == 0 and "kernelref.fit_store" in done.stdout
    assert "Warning" not in done.stderr  # zarr's, on the checkpoint files


def test_an_interrupted_fit_says_how_to_resume_and_resumes(
    run, kernelref_command, tmp_path
):
    n = 400
    data_X = rng.normal(size=(n, 2))
    data_t = np.sin(data_X[:, 0]) + 0.1 * rng.normal(size=n)
    write_csv(tmp_path / "train.csv", data_X, data_t)
    with cluster() as local:
        command = [
            "fit", "RVR", "--data", "train.csv", "--target", "target", "--backend",
            "dask", "--scheduler", local.scheduler_address, "--param", "gamma=2",
            "--out", "rvr.krm",
        ]  # fmt: skip
        process = subprocess.Popen(
            [kernelref_command, *command],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
        )
        store = tmp_path / "rvr.krm.store"
        deadline = time.monotonic() + 60
        while not list(store.glob("*.checkpoint.json")):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 130, err
        assert "interrupted" in err
        assert "the fit's last checkpoint is in rvr.krm.store: run the same " in err
        assert not (tmp_path / "rvr.krm").exists()
        done = run(*command)
        assert done.returncode == 0, done.stderr
    model = kernelref.load(tmp_path / "rvr.krm")
    reference = kernelref.RVR(gamma=2).fit(data_X, data_t)
    np.testing.assert_array_equal(model.relevance_, reference.relevance_)
    np.testing.assert_allclose(
        model.predict(data_X), reference.predict(data_X), rtol=1e-6, atol=1e-8
    )


def test_warnings_a_refused_param_and_a_closed_pipe(run, kernelref_command, tmp_path):
    write_csv(tmp_path / "train.csv", X, t)
    done = run(
        "fit", "RVR", "--data", "train.csv", "--target", "target", "--param",
        "gamma=0.5", "--param", "max_iter=2", "--out", "rvr.krm",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "kernelref: warning: ConvergenceWarning: RVR(" in done.stderr
    assert "raise max_iter" in done.stderr
    assert "warnings.warn" not in done.stderr and ".py:" not in done.stderr
    # a parameter refused by the estimator is a wrong --param (was status 1 and
    # the estimator's message alone)
    done = run(
        "fit", "SVC", "--data", "train.csv", "--target", "target", "--param",
        "C=-1", "--out", "svc.krm",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("kernelref: error: --param C: C must be in (0, inf]")
    # the reader of stdout is gone before kernelref writes (`... | head -0`)
    process = subprocess.Popen(
        [kernelref_command, "info", "rvr.krm"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment(),
    )
    process.stdout.close()
    err = process.stderr.read().decode()
    process.wait(timeout=60)
    assert process.returncode == 1
    assert err == ""  # was 'kernelref: error: [Errno 32] Broken pipe'
    # predict's --out into a missing directory: refused before any work (was
    # '[Errno 2] No such file or directory' after predicting)
    done = run("predict", "rvr.krm", "--data", "train.csv", "--target", "target",
               "--out", "missing/p.csv")  # fmt: skip
    assert done.returncode == 2
    assert "--out missing/p.csv: the directory" in done.stderr
    # info on a data Zarr group said 'Zarr group version ?'
    zarr = pytest.importorskip("zarr")
    zarr.open_group(str(tmp_path / "data.zarr"), mode="w")["X"] = X
    done = run("info", "data.zarr")
    assert done.returncode == 0
    assert done.stdout.startswith("data.zarr: a Zarr group, not a kernelref store")


def test_workers_that_died_are_explained(cli, tmp_path, monkeypatch):
    """A KilledWorker (every worker that ran a task died: on a 300 MiB worker,
    KernelPCA's default chunk_size=4096 at N = 6500 before its tasks formed their
    tiles in blocks) was printed as 'unexpected; please report it'. In this
    process: the fit raises what distributed raises."""
    write_csv(tmp_path / "train.csv", X, t)

    class Worker:
        address = "tcp://127.0.0.1:39183"

    killed = distributed.KilledWorker("gram_times-0", Worker(), 3)
    # as distributed raises it, and as the backends' waits raise it (explained)
    for raised in (killed, workers_killed(killed)):

        def dies(self, X, y=None, raised=raised):
            raise raised

        monkeypatch.setattr(kernelref.KernelPCA, "fit", dies)
        status, out, err = cli(
            "fit", "KernelPCA", "--data", "train.csv", "--target", "target",
            "--out", "kpca.krm",
        )  # fmt: skip
        assert status == 1 and out == ""
        assert "the cluster's workers died running a task" in err
        assert "dask worker --memory-limit" in err and "--param chunk_size" in err
        assert "unexpected" not in err and "memory_limit=" not in err


def test_predict_of_a_cluster_fitted_gp_needs_no_cluster(run, tmp_path):
    """predict and evaluate of exact GP models fitted on a cluster started an
    embedded cluster (5-15 s) when no --scheduler was given, even for a
    handful of points: their forward substitution ran on it. Now the mean
    alone reads no factor, and a small factor is read in this process; a
    factor to compute again (cut short) still starts the embedded cluster,
    which --verbose names."""
    zarr = pytest.importorskip("zarr")
    write_csv(tmp_path / "train.csv", X, t)
    write_csv(tmp_path / "classes.csv", X, labels)
    with cluster() as local:
        for model, data, name in (
            ("GaussianProcessRegressor", "train.csv", "gp.krm"),
            ("GaussianProcessClassifier", "classes.csv", "gpc.krm"),
        ):
            done = run(
                "fit", model, "--data", data, "--target", "target", "--backend",
                "dask", "--scheduler", local.scheduler_address, "--param",
                "optimizer=null", "--out", name, "-q",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
    embedded = "kernelref: started an embedded Dask cluster"
    gp, gpc = kernelref.load(tmp_path / "gp.krm"), kernelref.load(tmp_path / "gpc.krm")
    mean, std = gp.predict(X, return_std=True)
    for command, expected in (
        (("predict", "gp.krm", "--std", "--out", "std.npy"), np.c_[mean, std]),
        (("predict", "gpc.krm", "--proba", "--out", "p.npy"), gpc.predict_proba(X)),
    ):
        done = run(*command, "--data", "classes.csv", "--target", "target", "--verbose")
        assert done.returncode == 0, done.stderr
        assert embedded not in done.stderr
        np.testing.assert_array_equal(np.load(tmp_path / command[-1]), expected)
    # the mean alone (evaluate) reads no factor
    done = run("evaluate", "gp.krm", "--data", "train.csv", "--target", "target",
               "--json", "--verbose")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert embedded not in done.stderr
    assert json.loads(done.stdout)["r2"] == gp.score(X, t)
    # a factor cut short must be computed again: that still needs a cluster
    factor = zarr.open_array(store=gp.factor_.store.root, path=gp.factor_.path)
    factor.attrs["complete"] = False
    done = run("predict", "gp.krm", "--data", "train.csv", "--target", "target",
               "--std", "--out", "again.npy", "--verbose")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert embedded in done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "again.npy"), np.c_[mean, std])
    assert zarr.open_array(store=gp.factor_.store.root).attrs["complete"] is True


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_model_files_have_the_umask_permissions(run, tmp_path):
    """Model files were written 0600 (tempfile.mkstemp, then renamed): others
    could not read a model they were given. Now as numpy.save's files: 0666
    less the umask for a new file, an existing file's own mode when replaced;
    the write is still atomic (a temporary name, then rename)."""
    write_csv(tmp_path / "train.csv", X, t)
    old = os.umask(0o022)
    try:
        done = run("fit", "RVR", "--data", "train.csv", "--target", "target",
                   "--param", "gamma=0.5", "--out", "a.krm", "-q")  # fmt: skip
        assert done.returncode == 0, done.stderr
        model = kernelref.load(tmp_path / "a.krm")
        os.umask(0o027)
        model.save(tmp_path / "b.krm")
        for umask, name in ((0o022, "a"), (0o027, "b")):
            os.umask(umask)
            np.save(tmp_path / f"{name}.npy", X)  # numpy's file, for comparison
            modes = [
                os.stat(tmp_path / f"{name}{ext}").st_mode for ext in (".krm", ".npy")
            ]
            assert [m & 0o777 for m in modes] == [0o666 & ~umask] * 2
        os.chmod(tmp_path / "a.krm", 0o640)
        model.save(tmp_path / "a.krm")  # replaced: its mode is kept
        assert os.stat(tmp_path / "a.krm").st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
