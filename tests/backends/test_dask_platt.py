"""Probabilities of SVMs trained on a Dask cluster: ``PlattCalibrated`` wrapping
the backend's SVC and NuSVC equals ``PlattCalibrated`` of the reference's on the
same folds, keeps one store per fit under the user's store, resumes an
interrupted calibration, refuses a fold's store given other data, and saves.
The backend's small QPs, solved whole on a worker, say when they resumed.

The QPs here are on more than ``partition_size`` samples, so each fit goes
through the warm start and the block decomposition on the cluster; the sigmoid
fits and the coupling run on the client, as in the reference.
"""

import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")
pytest.importorskip("zarr")

import problems  # noqa: E402
from resilience import Interrupted, StopInRun  # noqa: E402
from terminal import stderr_on_a_terminal  # noqa: E402

from backends.dask import svm as dask_svm  # noqa: E402
from backends.dask.runtime import StoreMismatchError  # noqa: E402
from kernelref import io  # noqa: E402
from kernelref import svm as reference  # noqa: E402
from kernelref.cli import commands  # noqa: E402
from kernelref.cli.models import UsageError  # noqa: E402

pytestmark = pytest.mark.slow

TOL = 1e-5
# QPs on more than 40 samples go through the warm start and the decomposition
BACKEND = dict(partition_size=40, working_set_size=64, chunk_size=32)
PARAMS = {"SVC": dict(C=2.0, gamma=0.5), "NuSVC": dict(nu=0.4, gamma=0.5)}
# Measured at tol = 1e-3 / 1e-5 / 1e-6 (n = 150, 210): the largest difference of
# the probabilities was 1.1e-3 / 1.3e-5 / 1.9e-6, about the solvers' tolerance.
PROBABILITY_ATOL = 5 * TOL


def classification(n, n_classes=2):
    return problems.classification(n, n_classes, seed=1)


def backend(name, client, **options):
    params = dict(PARAMS[name], tol=TOL)
    return getattr(dask_svm, name)(
        address=client.scheduler.address, **params, **{**BACKEND, **options}
    )


def calibrated(estimator, **options):
    return reference.PlattCalibrated(estimator, cv=3, random_state=0, **options)


@pytest.mark.parametrize(("name", "n_classes"), [("SVC", 2), ("SVC", 3), ("NuSVC", 2)])
def test_probabilities_equal_the_reference(name, n_classes, client, tmp_path):
    X, y = classification(150 if n_classes == 2 else 210, n_classes)
    store = tmp_path / "calibration"
    model = calibrated(backend(name, client, store=store, progress=False)).fit(X, y)
    ref = calibrated(getattr(reference, name)(**dict(PARAMS[name], tol=TOL)))
    ref.fit(X, y)
    assert all(
        m.fit_info_[0]["solver"] == "block decomposition" for m in model.estimators_
    )
    np.testing.assert_allclose(
        model.predict_proba(X), ref.predict_proba(X), atol=PROBABILITY_ATOL
    )
    # one store per fit: store/pair-i-j/fold-k and store/pair-i-j/final
    pairs = [f"pair-{i}-{j}" for i in range(n_classes) for j in range(i + 1, n_classes)]
    assert sorted(p.name for p in store.iterdir()) == pairs
    for pair in pairs:
        fits = sorted(p.name for p in (store / pair).iterdir())
        assert fits == ["final", "fold-0", "fold-1", "fold-2"]
        assert all((store / pair / fit / "zarr.json").is_file() for fit in fits)
    assert [m.store_ for m in model.estimators_] == [
        str((store / pair / "final").resolve()) for pair in pairs
    ]
    # the model file holds the calibration; loaded, it predicts the same
    io.save(model, tmp_path / "model.krm")
    loaded = io.load(tmp_path / "model.krm")
    assert type(loaded.estimators_[0]) is getattr(dask_svm, name)
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))


def test_an_interrupted_calibration_resumes_and_other_folds_are_refused(
    client, tmp_path, caplog
):
    X, y = classification(150)
    clean = calibrated(backend("SVC", client, progress=False)).fit(X, y)
    store = tmp_path / "calibration"
    stop = StopInRun(run=2, iteration=2)  # fold-1's second outer iteration
    with pytest.raises(Interrupted):
        calibrated(backend("SVC", client, store=store, progress=stop)).fit(X, y)
    assert not (store / "pair-0-1" / "fold-2").exists()
    records = []
    with caplog.at_level(logging.INFO, logger="backends.dask.runtime"):
        resumed = calibrated(
            backend("SVC", client, store=store, progress=records.append)
        )
        resumed.fit(X, y)
    said = [r.getMessage() for r in caplog.records if r.name == "backends.dask.runtime"]
    # fold-0 was done and is read back; fold-1 goes on from its checkpoint
    assert len([m for m in said if "resumed from its checkpoint" in m]) == 2
    assert records[0].resumed_from == 2 and records[0].iteration == 3
    np.testing.assert_allclose(
        resumed.predict_proba(X), clean.predict_proba(X), atol=1e-12
    )
    np.testing.assert_allclose(resumed.sigmoids_, clean.sigmoids_, atol=1e-12)
    # other folds (another seed) into the same store: refused, not reused
    with pytest.raises(StoreMismatchError, match="holds other data") as refused:
        reference.PlattCalibrated(
            backend("SVC", client, store=store, progress=False), cv=3, random_state=1
        ).fit(X, y)
    assert str(store / "pair-0-1" / "fold-0") in str(refused.value)


def test_random_folds_keep_only_the_final_fit(client, tmp_path):
    X, y = classification(150)
    store = tmp_path / "calibration"
    svc = backend("SVC", client, store=store, progress=False, partition_size=4000)
    reference.PlattCalibrated(svc, cv=3).fit(X, y)  # random_state=None
    assert [p.name for p in store.iterdir()] == ["pair-0-1"]
    assert [p.name for p in (store / "pair-0-1").iterdir()] == ["final"]


def test_one_vs_rest_keeps_one_store_per_class(client, tmp_path):
    X, y = classification(120, n_classes=3)
    store = tmp_path / "ovr"
    svc = backend("SVC", client, store=store, progress=False, partition_size=4000)
    model = reference.OneVsRestClassifier(svc).fit(X, y)
    ref = reference.OneVsRestClassifier(reference.SVC(**PARAMS["SVC"], tol=TOL))
    np.testing.assert_allclose(
        model.decision_function(X), ref.fit(X, y).decision_function(X), atol=1e-10
    )
    assert sorted(p.name for p in store.iterdir()) == ["class-0", "class-1", "class-2"]


# -- which fit a bar shows ----------------------------------------------------------
def labels(records):
    """The records' labels, each once, in the order they came."""
    return list(dict.fromkeys(r.label for r in records))


def test_each_fit_of_a_calibration_says_which_it_is(client, tmp_path, monkeypatch):
    """Every fold's and final fit's bar was labelled "SVC": fold 3 of pair 0-2
    could not be told from the final fit. Now the records (``Record.label``)
    and the bar name the fit, on the decomposition's path and on the small
    QPs' (solved whole), and a one-vs-rest model's fits name their class."""
    X, y = classification(150)
    records = []
    calibrated(backend("SVC", client, progress=records.append)).fit(X, y)
    assert labels(records) == [
        "SVC pair 0-1 fold 1/3", "SVC pair 0-1 fold 2/3", "SVC pair 0-1 fold 3/3",
        "SVC pair 0-1 final",
    ]  # fmt: skip
    X3, y3 = classification(120, n_classes=3)
    records = []
    small = backend("SVC", client, progress=records.append, partition_size=4000)
    model = calibrated(small).fit(X3, y3)
    assert labels(records) == [
        f"SVC pair {i}-{j} {fit}"
        for i, j in [(0, 1), (0, 2), (1, 2)]
        for fit in ["fold 1/3", "fold 2/3", "fold 3/3", "final"]
    ]
    # the label belongs to the fit: neither kept by the model nor by the wrapped
    assert not any(hasattr(m, "fit_label") for m in [small, *model.estimators_])
    records = []
    reference.OneVsRestClassifier(small.set_params(progress=records.append)).fit(X3, y3)
    assert labels(records) == [f"SVC class {c} vs rest" for c in range(3)]
    # an SVC of its own: the bar as before, records without a label
    records = []
    small.set_params(progress=records.append).fit(X3, y3)
    assert labels(records) == [None]
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    calibrated(backend("SVC", client, progress=None, partition_size=4000)).fit(X, y)
    monkeypatch.undo()
    shown = "".join(terminal.text)
    assert "SVC pair 0-1 fold 2/3: 1 machine solved whole" in shown
    assert "SVC pair 0-1 final: 1 machine solved whole" in shown


def test_a_calibration_is_not_kept_inside_another_fits_store(client, tmp_path):
    """A calibration given the store of a single fit (an earlier SVC's) put its
    fits' stores inside it, where replacing that store removed them too. Now it
    is refused before any work, naming the store, as a single fit into a
    calibration's directory is; the command line's --overwrite replaces it."""
    X, y = classification(100)
    store = tmp_path / "svc"
    backend("SVC", client, store=store, progress=False, partition_size=4000).fit(X, y)
    for wrapper in (calibrated, reference.OneVsRestClassifier):
        svc = backend("SVC", client, store=store, progress=False)
        svc.set_params(address="tcp://nowhere:1")  # refused before any work
        with pytest.raises(StoreMismatchError, match="fit store of another fit"):
            wrapper(svc).fit(*classification(90, n_classes=3))
    assert not list(store.glob("pair-*")) + list(store.glob("class-*"))
    np.savez(tmp_path / "two.npz", X=X, y=y)
    spec = '{"estimator": "SVC", "params": {"gamma": 0.5}}'
    command = shutil.which("kernelref", path=os.path.dirname(sys.executable))
    fit = [
        command, "fit", "PlattCalibrated", "--data", "two.npz", "--param",
        f"estimator={spec}", "--param", "cv=3", "--backend", "dask", "--scheduler",
        client.scheduler.address, "--store", "svc", "--out", "p.krm", "-q",
    ]  # fmt: skip
    refused = subprocess.run(fit, cwd=tmp_path, capture_output=True, text=True)
    assert refused.returncode != 0
    assert "add --overwrite to replace the store svc" in refused.stderr
    kernelref(*fit[1:], "--overwrite", cwd=tmp_path)
    assert [p.name for p in store.iterdir()] == ["pair-0-1"]


# -- the command line ----------------------------------------------------------------
def kernelref(*args, cwd):
    """The installed console script (this interpreter's), on this environment."""
    command = shutil.which("kernelref", path=os.path.dirname(sys.executable))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [command, *map(str, args)], cwd=cwd, capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return done


def test_the_command_line_calibrates_on_the_cluster(client, tmp_path):
    X, y = classification(100)
    np.savez(tmp_path / "two.npz", X=X, y=y)
    spec = '{"estimator": "SVC", "params": {"C": 2.0, "gamma": 0.5, "tol": 1e-5}}'
    address = client.scheduler.address
    kernelref(
        "fit", "PlattCalibrated", "--data", "two.npz", "--param", f"estimator={spec}",
        "--param", "cv=3", "--param", "random_state=0", "--backend", "dask",
        "--scheduler", address, "--out", "model.krm", "--quiet", cwd=tmp_path,
    )  # fmt: skip
    kept = tmp_path / "model.krm.store"  # the command line's store, beside the file
    assert sorted(p.name for p in (kept / "pair-0-1").iterdir()) == [
        "final", "fold-0", "fold-1", "fold-2"
    ]  # fmt: skip
    kernelref("predict", "model.krm", "--data", "two.npz", "--proba", "--out",
              "p.npy", "--scheduler", address, cwd=tmp_path)  # fmt: skip
    model = io.load(tmp_path / "model.krm")
    assert type(model.estimators_[0]) is dask_svm.SVC
    ref = calibrated(reference.SVC(C=2.0, gamma=0.5, tol=1e-5)).fit(X, y)
    np.testing.assert_allclose(
        np.load(tmp_path / "p.npy"), ref.predict_proba(X), atol=PROBABILITY_ATOL
    )
    # the bar on a terminal, and --verbose's records, say which fit they show
    command = shutil.which("kernelref", path=os.path.dirname(sys.executable))
    fit = [
        command, "fit", "PlattCalibrated", "--data", "two.npz", "--param",
        f"estimator={spec}", "--param", "cv=3", "--param", "random_state=0",
        "--backend", "dask", "--scheduler", address, "--out", "again.krm",
    ]  # fmt: skip
    _, shown, status = stderr_on_a_terminal(fit, columns=120, cwd=tmp_path)
    assert status == 0, shown
    for fit_label in ["pair 0-1 fold 1/3", "pair 0-1 fold 3/3", "pair 0-1 final"]:
        assert f"SVC {fit_label}: 1 machine solved whole" in shown
    verbose = kernelref(*fit[1:-1], "verbose.krm", "--verbose", cwd=tmp_path).stderr
    assert "label=SVC pair 0-1 fold 2/3" in verbose
    assert "label=SVC pair 0-1 final" in verbose
    # --overwrite replaces a directory of fit stores (a calibration's), nothing else
    commands._clear_store(kept)
    assert not kept.exists()
    (tmp_path / "other" / "pair-0-1").mkdir(parents=True)
    (tmp_path / "other" / "pair-0-1" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a kernelref store"):
        commands._clear_store(tmp_path / "other")


# -- the small QPs, solved whole on a worker ----------------------------------------
def small_svc(client, store, progress):
    return dask_svm.SVC(
        C=1.0,
        gamma=0.5,
        store=store,
        progress=progress,
        address=client.scheduler.address,
    )


class Terminal:
    def __init__(self):
        self.text = []

    def write(self, text):
        self.text.append(text)

    def flush(self):
        pass

    def isatty(self):
        return True


def test_small_machines_say_they_resumed(client, tmp_path, caplog, monkeypatch):
    X, y = classification(120, n_classes=3)  # three pairs, each solved whole
    store = tmp_path / "svc.zarr"
    seen = []

    def stop_after_two(record):
        seen.append(record)
        if record.iteration == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        small_svc(client, store, stop_after_two).fit(X, y)
    assert [r.resumed_from for r in seen] == [None, None]
    clean = small_svc(client, None, False).fit(X, y)
    records = []
    with caplog.at_level(logging.INFO, logger="backends.dask.runtime"):
        resumed = small_svc(client, store, records.append).fit(X, y)
    assert [(r.iteration, r.resumed_from) for r in records] == [(3, 2)]
    assert records[0].measure < resumed.tol
    said = [r.getMessage() for r in caplog.records if r.name == "backends.dask.runtime"]
    assert any("'machine-0', 'machine-1'" in m and "2 of 3" in m for m in said), said
    np.testing.assert_allclose(resumed.dual_coef_, clean.dual_coef_, atol=1e-12)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    small_svc(client, store, None).fit(X, y)
    monkeypatch.undo()
    assert "(resumed at iteration 3)" in "".join(terminal.text)
