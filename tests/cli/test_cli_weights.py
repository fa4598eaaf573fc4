"""``kernelref fit --weight COLUMN``: the installed command's weighted fits equal
the Python API's ``fit(X, y, sample_weight=w)``, integer weights equal repeated
rows, and every wrong use is refused by name before any work."""

import json

import numpy as np
import pytest

# tests/cli is on sys.path (rootdir-less test dir)
from test_cli import write_csv, write_libsvm

import kernelref
from kernelref import io
from kernelref.cli import data

rng = np.random.default_rng(5)
X = rng.normal(size=(60, 3))
X_test = rng.normal(size=(15, 3))
t = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=60)
names = np.array(["no", "yes"])[(X[:, 0] + X[:, 1] > 0).astype(int)]
#: integer weights 0 to 3: a weight n is the row n times, 0 the row dropped
w = rng.integers(0, 4, size=60)
repeated = np.repeat(np.arange(60), w)

# model: (parameters, target or None); the SVC's tolerance is tight so that the
# repeated-rows fit (another QP, the same solution) agrees to 1e-8
CASES = {
    "KernelRidge": ({"lam": 0.1, "gamma": 0.5}, t),
    "SVC": ({"C": 10, "gamma": 0.5, "tol": 1e-10}, names),
    "OneClassSVM": ({"nu": 0.3, "gamma": 0.5}, None),
}


def fit_command(name, data_file, out, weight="weight"):
    params, target = CASES[name]
    command = ["fit", name, "--data", data_file, "--out", out]
    command += ["--target", "target"] if target is not None else []
    command += ["--weight", weight] if weight is not None else []
    for key, value in params.items():
        command += ["--param", f"{key}={json.dumps(value)}"]
    return command


def python_fit(name, X, sample_weight=None):
    params, target = CASES[name]
    estimator = _class(name)(**params)
    weighted = {} if sample_weight is None else {"sample_weight": sample_weight}
    if target is None:
        return estimator.fit(X, **weighted)
    return estimator.fit(X, target[: len(X)], **weighted)


def _class(name):
    from kernelref.cli.models import estimator_class

    return estimator_class(name)


def outputs(model, X):
    method = "predict" if name_of(model) == "KernelRidge" else "decision_function"
    return getattr(model, method)(X)


def name_of(model):
    return type(model).__name__


def test_weighted_fits_equal_the_python_api(run, tmp_path):
    """KernelRidge, SVC and OneClassSVM (no target) fitted by the installed command
    with --weight: the saved model predicts bit for bit as fit(X, y,
    sample_weight=w), `kernelref predict --weight` drops the column, the model
    file holds what the Python model's file holds (the weights only as the
    column's name in the provenance), and the weights matter."""
    np.save(tmp_path / "test.npy", X_test)
    for name, (params, target) in CASES.items():
        write_csv(tmp_path / f"{name}.csv", X, target, w)
        done = run(*fit_command(name, f"{name}.csv", f"{name}.krm"))
        assert done.returncode == 0, (name, done.stderr)
        loaded = kernelref.load(tmp_path / f"{name}.krm")
        expected = python_fit(name, X, sample_weight=w)
        assert np.array_equal(outputs(loaded, X_test), outputs(expected, X_test)), name
        unweighted = python_fit(name, X)
        assert not np.allclose(outputs(loaded, X_test), outputs(unweighted, X_test))

        done = run(
            "predict",
            f"{name}.krm",
            "--data",
            f"{name}.csv",
            "--weight",
            "weight",
            *(["--target", "target"] if target is not None else []),
            "--out",
            "p.npy",
        )
        assert done.returncode == 0, (name, done.stderr)
        assert np.array_equal(np.load(tmp_path / "p.npy"), expected.predict(X))

        header = io.read_header(tmp_path / f"{name}.krm")
        assert header["provenance"]["weight"] == "weight"
        assert header["provenance"].get("target") == (
            "target" if target is not None else None
        )
        own = io.read_header(expected.save(tmp_path / f"{name}.python.krm"))
        assert header["model"] == own["model"] and header["arrays"] == own["arrays"]
    done = run("info", "SVC.krm")
    assert 'provenance.weight: "weight"' in done.stdout


def test_integer_weights_equal_repeated_rows(run, tmp_path):
    """Weight n is the row given n times (0: dropped), through the command line."""
    for name in ("KernelRidge", "SVC"):
        _, target = CASES[name]
        write_csv(tmp_path / "weighted.csv", X, target, w)
        write_csv(tmp_path / "repeated.csv", X[repeated], target[repeated])
        assert run(*fit_command(name, "weighted.csv", "w.krm")).returncode == 0
        done = run(*fit_command(name, "repeated.csv", "r.krm", weight=None))
        assert done.returncode == 0, done.stderr
        weighted = kernelref.load(tmp_path / "w.krm")
        rows = kernelref.load(tmp_path / "r.krm")
        np.testing.assert_allclose(
            outputs(weighted, X_test), outputs(rows, X_test), rtol=0, atol=1e-7
        )


def test_evaluate_certifies_a_weighted_svm_for_its_weights(cli, tmp_path):
    write_csv(tmp_path / "train.csv", X, names, w)
    assert cli(*fit_command("SVC", "train.csv", "svc.krm"))[0] == 0
    status, out, err = cli(
        "evaluate",
        "svc.krm",
        "--data",
        "train.csv",
        "--target",
        "target",
        "--weight",
        "weight",
        "--json",
    )
    assert status == 0, err
    report = json.loads(out)
    model = python_fit("SVC", X, sample_weight=w)
    assert report["accuracy"] == model.score(X, names)
    assert 0 <= report["kkt_max_violation"] <= model.tol
    # the same model judged against the unweighted problem violates its KKT
    # conditions: the certificate did use the weights
    from kernelref.svm import kkt_report

    assert kkt_report(model, X, names).max_violation > 1e-3


def test_evaluate_weights_the_scores(cli, tmp_path):
    """evaluate --weight: the weighted scores equal scikit-learn's with
    sample_weight, and the unweighted scores of the rows repeated."""
    metrics = pytest.importorskip("sklearn.metrics")
    write_csv(tmp_path / "train.csv", X, t, w)
    write_csv(tmp_path / "labels.csv", X, names, w)
    assert cli(*fit_command("KernelRidge", "train.csv", "ridge.krm"))[0] == 0
    assert cli(*fit_command("SVC", "labels.csv", "svc.krm"))[0] == 0
    test_t, test_names = np.sin(X_test[:, 0]), names[:15]
    s = np.arange(15) % 3  # zero weights: rows left out
    write_csv(tmp_path / "test.csv", X_test, test_t, s)
    write_csv(tmp_path / "test_labels.csv", X_test, test_names, s)
    rows = np.repeat(np.arange(15), s)
    write_csv(tmp_path / "rows.csv", X_test[rows], test_t[rows])
    write_csv(tmp_path / "rows_labels.csv", X_test[rows], test_names[rows])

    def evaluate(model, data_file, weight="weight"):
        weighted = ("--weight", weight) if weight else ()
        status, out, err = cli(
            "evaluate",
            model,
            "--data",
            data_file,
            "--target",
            "target",
            "--json",
            *weighted,
        )
        assert status == 0, err
        return json.loads(out)

    ridge = python_fit("KernelRidge", X, sample_weight=w).predict(X_test)
    report = evaluate("ridge.krm", "test.csv")
    assert report["rmse"] == pytest.approx(
        np.sqrt(metrics.mean_squared_error(test_t, ridge)), rel=1e-12
    )
    assert report["weighted_rmse"] == pytest.approx(
        np.sqrt(metrics.mean_squared_error(test_t, ridge, sample_weight=s)), rel=1e-12
    )
    assert report["weighted_r2"] == pytest.approx(
        metrics.r2_score(test_t, ridge, sample_weight=s), rel=1e-12
    )
    repeated_rows = evaluate("ridge.krm", "rows.csv", weight=None)
    assert report["weighted_rmse"] == pytest.approx(repeated_rows["rmse"], rel=1e-12)
    assert report["weighted_r2"] == pytest.approx(repeated_rows["r2"], rel=1e-12)

    svc = python_fit("SVC", X, sample_weight=w).predict(X_test)
    report = evaluate("svc.krm", "test_labels.csv")
    assert report["accuracy"] == metrics.accuracy_score(test_names, svc)
    assert report["weighted_accuracy"] == pytest.approx(
        metrics.accuracy_score(test_names, svc, sample_weight=s), rel=1e-12
    )
    assert report["weighted_accuracy"] == pytest.approx(
        evaluate("svc.krm", "rows_labels.csv", weight=None)["accuracy"], rel=1e-12
    )
    assert report["weighted_accuracy"] != report["accuracy"]

    write_csv(tmp_path / "negative.csv", X_test, test_t, s - 2 * (s == 1))
    status, _, err = cli(
        "evaluate",
        "ridge.krm",
        "--data",
        "negative.csv",
        "--target",
        "target",
        "--weight",
        "weight",
    )
    assert status == 1
    assert "negative.csv: --weight weight: the weights must be finite numbers" in err


def test_weight_refusals(run, cli, tmp_path):
    write_csv(tmp_path / "train.csv", X, t, w)
    write_libsvm(tmp_path / "train.svm", X, t)
    np.savez(tmp_path / "arrays.npz", X=X, y=t, w=w)
    for bad, text in (("-1", "neg"), ("nan", "nan"), ("heavy", "word")):
        lines = (tmp_path / "train.csv").read_text().splitlines()
        row = lines[5].split(",")
        row[1] = bad
        lines[5] = ",".join(row)
        (tmp_path / f"{text}.csv").write_text("\n".join(lines) + "\n")
    fit = ("fit", "--out", "x.krm")
    cases = [
        # refused before any work: the data file is not even looked for
        (
            (*fit, "RVR", "--data", "none.csv", "--target", "t", "--weight", "w"),
            2,
            "--weight: RVR (--backend reference) takes no sample weights; the "
            "models that do are ['KernelRidge', 'NuSVC', 'NuSVR', 'OneClassSVM', "
            "'SVC', 'SVR']",
        ),
        (
            (*fit, "SVR", "--data", "none.csv", "--target", "t", "--weight", "t"),
            2,
            "--weight t is the target column",
        ),
        (
            (*fit, "SVR", "--data", "train.csv", "--target", "4", "--weight", "target"),
            1,
            "--weight target is column 4 ('target'), the target's column",
        ),
        (
            (*fit, "SVR", "--data", "train.csv", "--target", "target", "--weight", "7"),
            1,
            "--weight 7 is outside the 5 columns",
        ),
        (
            (*fit, "SVR", "--data", "train.csv", "--target", "y", "--weight", "mass"),
            1,
            "no column named 'y'",
        ),
        (
            (*fit, "SVR", "--data", "train.csv", "--target", "target", "--weight", "m"),
            1,
            "no column named 'm'",
        ),
        (
            (*fit, "SVR", "--data", "train.svm", "--weight", "0"),
            1,
            "train.svm: a libsvm file has no columns to read weights from",
        ),
        (
            (*fit, "SVR", "--data", "arrays.npz", "--weight", "mass"),
            1,
            "arrays.npz: no weight array 'mass'; the arrays are ['X', 'y', 'w']",
        ),
        (
            (*fit, "SVR", "--data", "arrays.npz", "--weight", "y"),
            1,
            "arrays.npz: --weight y is the target array",
        ),
        # bad weights: the estimator's own validation, naming sample_weight
        (
            (*fit, "SVR", "--data", "neg.csv", "--target", "target", "--weight", "1"),
            1,
            "sample_weight must be 1-D with one weight ≥ 0 per sample",
        ),
        (
            (*fit, "KernelRidge", "--data", "nan.csv", "--target", "target")
            + ("--weight", "weight"),
            1,
            "sample_weight contains NaN or infinity (first at row 4)",
        ),
        (
            (*fit, "KernelRidge", "--data", "word.csv", "--target", "target")
            + ("--weight", "weight"),
            1,
            "sample_weight must be numeric",
        ),
    ]
    for args, status, message in cases:
        code, _, err = cli(*args)
        assert code == status, (args, err)
        assert err.startswith("kernelref: error: "), err
        assert message in err, (args, err)
    assert not (tmp_path / "x.krm").exists()
    # the installed command says the same
    done = run(*cases[0][0])
    assert done.returncode == 2 and cases[0][2] in done.stderr


def test_every_format_with_columns_reads_the_same_weights(tmp_path):
    write_csv(tmp_path / "named.csv", X, t, w)
    write_csv(tmp_path / "bare.csv", X, t, w, header=False)
    A = np.column_stack([X[:, 0], w, X[:, 1:], t])
    np.save(tmp_path / "matrix.npy", A)
    np.savez(tmp_path / "arrays.npz", X=X, y=t, mass=w)
    readings = {
        "named.csv": data.read_weighted(tmp_path / "named.csv", "target", "weight"),
        "bare.csv": data.read_weighted(tmp_path / "bare.csv", "-1", "1"),
        "matrix.npy": data.read_weighted(tmp_path / "matrix.npy", "4", "1"),
        "arrays.npz": data.read_weighted(tmp_path / "arrays.npz", None, "mass"),
    }
    zarr = pytest.importorskip("zarr")
    group = zarr.open_group(str(tmp_path / "group.zarr"), mode="w")
    group.create_array("X", data=X, chunks=(16, 3))
    group.create_array("y", data=t)
    group.create_array("mass", data=w)
    readings["group.zarr"] = data.read_weighted(tmp_path / "group.zarr", "y", "mass")
    zarr.create_array(str(tmp_path / "matrix.zarr"), data=A, chunks=(16, 5))
    lazy = data.read_weighted(tmp_path / "matrix.zarr", "-1", "1", lazy=True)
    readings["matrix.zarr lazy"] = tuple(np.asarray(a) for a in lazy)
    for name, (X_read, y_read, w_read) in readings.items():
        assert np.array_equal(X_read, X), name
        assert np.array_equal(y_read, t), name
        assert np.array_equal(w_read, w), name
    # without --weight nothing changes: the weight column is a feature
    X_all, y_all, none = data.read_weighted(tmp_path / "named.csv", "target")
    assert none is None and X_all.shape == (60, 4) and np.array_equal(y_all, t)


def test_help_tells_of_weight(run):
    done = run("fit", "--help")
    assert done.returncode == 0 and "--weight COLUMN" in done.stdout
    assert "sample_weight=w" in done.stdout and "--weight w" in done.stdout
    done = run("evaluate", "--help")
    assert done.returncode == 0 and "weighted_rmse" in done.stdout
    done = run("predict", "--help")
    assert done.returncode == 0 and "--weight COLUMN" in done.stdout
