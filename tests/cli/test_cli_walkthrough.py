"""A new user's walk through the installed ``kernelref`` command (session 26):
each case gave a wrong result, a traceback or an unclear message before its
fix. Every test runs the console script in a subprocess."""

import json

import numpy as np
import pytest

rng = np.random.default_rng(26)
X = rng.normal(size=(40, 2))
labels = (X[:, 0] + 0.3 * rng.normal(size=40) > 0).astype(int)


def zarr_group(path, **arrays):
    zarr = pytest.importorskip("zarr")
    group = zarr.open_group(str(path), mode="w")
    for name, value in arrays.items():
        group.create_array(name, shape=value.shape, dtype=value.dtype)[...] = value


def test_evaluate_certifies_kkt_on_the_training_zarr_store_only(run, tmp_path):
    """Two Zarr stores of other numbers have the same file names: the data
    fingerprint read names only, so `evaluate` printed a KKT violation of 4.1
    for data the SVM was not fitted on, as if the fit had failed."""
    zarr_group(tmp_path / "train.zarr", X=X, y=labels)
    zarr_group(tmp_path / "other.zarr", X=X + 1.0, y=labels)
    done = run("fit", "SVC", "--data", "train.zarr", "--out", "svc.krm")
    assert done.returncode == 0, done.stderr
    done = run("evaluate", "svc.krm", "--data", "train.zarr", "--json")
    assert done.returncode == 0, done.stderr
    assert 0 <= json.loads(done.stdout)["kkt_max_violation"] <= 1e-3
    done = run("evaluate", "svc.krm", "--data", "other.zarr", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "kkt_max_violation" not in report
    assert "not the model's training data" in report["kkt"]
