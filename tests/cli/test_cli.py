"""The installed ``kernelref`` command on real files: round trips equal the
Python API, libsvm's interface equals libsvm's (scikit-learn's copy), bad
input gets a clear error and a non-zero exit, progress only on a terminal."""

import fcntl
import json
import os
import pickle
import pty
import re
import struct
import subprocess
import termios

import numpy as np
import pytest

import kernelref
from kernelref.cli import models


def environment():
    """One BLAS thread per command, as the Makefile sets for the suite."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


rng = np.random.default_rng(1)
X = rng.normal(size=(60, 3))
X_test = rng.normal(size=(15, 3))
t = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=60)
names = np.array(["no", "yes"])[(X[:, 0] + X[:, 1] > 0).astype(int)]
three = np.array(["a", "b", "c"])[np.digitize(X[:, 0], [-0.4, 0.4])]
RBF_SPEC = {"class": "RBF", "params": {"gamma": 0.5}}

# model name: (parameters on the command line, target). Every estimator the command
# line offers has a case (test_every_estimator_has_a_case).
CASES = {
    "KernelRidge": ({"lam": 0.1, "gamma": 0.5}, t),
    "NadarayaWatson": ({"gamma": 2.0}, t),
    "KernelPCA": ({"n_components": 2, "gamma": 0.5}, None),
    "GaussianProcessRegressor": ({"kernel": RBF_SPEC, "noise": 0.01}, t),
    "GaussianProcessClassifier": ({"kernel": RBF_SPEC, "optimizer": None}, three),
    "SoftmaxGaussianProcessClassifier": (
        {"kernel": RBF_SPEC, "optimizer": None},
        three,
    ),
    "SVC": ({"C": 10, "gamma": 0.5}, names),
    "NuSVC": ({"nu": 0.3, "kernel": "poly", "degree": 2}, three),
    "SVR": ({"C": 1, "epsilon": 0.05}, t),
    "NuSVR": ({"nu": 0.4, "kernel": "linear"}, t),
    "OneClassSVM": ({"nu": 0.2, "gamma": 0.5}, None),
    "OneVsRestClassifier": (
        {"estimator": {"estimator": "SVC", "params": {"C": 2}}},
        three,
    ),
    "PlattCalibrated": (
        {"estimator": {"estimator": "SVC", "params": {}}, "cv": 3, "random_state": 0},
        names,
    ),
    "RVR": ({"gamma": 0.5}, t),
    "RVC": ({"gamma": 0.5, "multi_class": "ovr"}, three),
    "KernelFisherDiscriminant": ({"gamma": 0.5}, three),
}


def write_csv(path, X, target=None, weights=None, header=True):
    """Columns x0[, weight], x1, x2, …[, target]: the weights, if given, sit
    between features."""
    columns = [X[:, :1]] + ([weights[:, None]] if weights is not None else [])
    columns.append(X[:, 1:])
    with open(path, "w") as f:
        if header:
            f.write(
                ",".join(
                    ["x0"]
                    + (["weight"] if weights is not None else [])
                    + [f"x{j}" for j in range(1, X.shape[1])]
                    + (["target"] if target is not None else [])
                )
                + "\n"
            )
        for n, row in enumerate(np.hstack(columns)):
            cells = [repr(float(v)) for v in row]
            if target is not None:
                cells.append(str(target[n]))
            f.write(",".join(cells) + "\n")


def write_libsvm(path, X, y):
    with open(path, "w") as f:
        for row, label in zip(X, y):
            features = " ".join(
                f"{j + 1}:{float(v)!r}" for j, v in enumerate(row) if v != 0
            )
            f.write(f"{label:+g} {features}\n")


def python_api(name, params, X, y):
    """The same model through the Python API."""
    text = [f"{k}={json.dumps(v)}" for k, v in params.items()]
    cls = models.estimator_class(name)
    estimator = cls(**models.parse_params(text, cls))
    return estimator.fit(X) if y is None else estimator.fit(X, y)


def outputs(model, X):
    out = {}
    for method in ("predict", "decision_function", "predict_proba", "transform"):
        if hasattr(model, method):
            out[method] = getattr(model, method)(X)
    return out


def test_every_estimator_has_a_case():
    assert set(CASES) == set(models.reference_estimators())


def test_fit_save_load_predict_equals_python_api(kernelref_command, tmp_path):
    write_csv(tmp_path / "test.csv", X_test)
    processes = {}
    for name, (params, y) in CASES.items():
        data = tmp_path / f"{name}.csv"
        write_csv(data, X, y)
        command = [
            kernelref_command,
            "fit",
            name,
            "--data",
            data,
            "--out",
            f"{name}.krm",
        ]
        command += ["--target", "target"] if y is not None else []
        for key, value in params.items():
            command += ["--param", f"{key}={json.dumps(value)}"]
        processes[name] = subprocess.Popen(
            command,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
        )
    for name, process in processes.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, (name, err)
        assert f"saved {name} to {name}.krm" in out
        params, y = CASES[name]
        loaded = kernelref.load(tmp_path / f"{name}.krm")
        expected, got = (
            outputs(python_api(name, params, X, y), X_test),
            outputs(loaded, X_test),
        )
        assert expected.keys() == got.keys()
        for method in expected:
            assert np.array_equal(got[method], expected[method]), (name, method)


def test_predict_writes_what_the_model_offers(cli, tmp_path):
    write_csv(tmp_path / "train.csv", X, t)
    write_csv(tmp_path / "labels.csv", X, names)
    np.save(tmp_path / "test.npy", X_test)
    assert (
        cli(
            "fit",
            "RVR",
            "--data",
            "train.csv",
            "--target",
            "target",
            "--param",
            "gamma=0.5",
            "--out",
            "rvr.krm",
        )[0]
        == 0
    )
    status, _, err = cli(
        "predict", "rvr.krm", "--data", "test.npy", "--std", "--out", "rvr.npy"
    )
    assert status == 0, err
    mean, std = kernelref.RVR(gamma=0.5).fit(X, t).predict(X_test, return_std=True)
    assert np.array_equal(np.load(tmp_path / "rvr.npy"), np.column_stack([mean, std]))

    assert (
        cli(
            "fit",
            "PlattCalibrated",
            "--data",
            "labels.csv",
            "--target",
            "target",
            "--param",
            'estimator={"estimator": "SVC", "params": {}}',
            "--out",
            "platt.krm",
        )[0]
        == 0
    )
    status, _, err = cli(
        "predict", "platt.krm", "--data", "test.npy", "--proba", "--out", "p.csv"
    )
    assert status == 0, err
    header, *rows = (tmp_path / "p.csv").read_text().splitlines()
    assert header == "p(no),p(yes)" and len(rows) == len(X_test)
    P = np.array([[float(v) for v in row.split(",")] for row in rows])
    model = kernelref.load(tmp_path / "platt.krm")
    assert np.array_equal(P, model.predict_proba(X_test))
    status, out, _ = cli(
        "evaluate", "platt.krm", "--data", "labels.csv", "--target", "target", "--json"
    )
    assert json.loads(out)["accuracy"] == np.mean(model.predict(X) == names)
    status, _, err = cli(
        "predict", "rvr.krm", "--data", "test.npy", "--proba", "--out", "q"
    )
    assert status == 2 and "RVR gives no probabilities; drop --proba" in err


def test_evaluate_reports_accuracy_support_and_kkt(cli, tmp_path):
    write_csv(tmp_path / "train.csv", X, names)
    write_csv(tmp_path / "other.csv", X_test, names[:15])
    cli(
        "fit",
        "SVC",
        "--data",
        "train.csv",
        "--target",
        "target",
        "--param",
        "C=10",
        "--param",
        "gamma=0.5",
        "--out",
        "svc.krm",
    )
    _, out, _ = cli(
        "evaluate", "svc.krm", "--data", "train.csv", "--target", "target", "--json"
    )
    report = json.loads(out)
    model = kernelref.svm.SVC(C=10, gamma=0.5).fit(X, names)
    assert report["accuracy"] == model.score(X, names)
    assert report["support_vectors"] == len(model.support_)
    assert 0 <= report["kkt_max_violation"] <= model.tol
    _, out, _ = cli(
        "evaluate", "svc.krm", "--data", "other.csv", "--target", "target", "--json"
    )
    report = json.loads(out)
    assert "not the model's training data" in report["kkt"]
    assert report["accuracy"] == model.score(X_test, names[:15])


def test_info_names_format_version_and_provenance(cli, tmp_path):
    write_csv(tmp_path / "train.csv", X, t)
    cli(
        "fit",
        "KernelRidge",
        "--data",
        "train.csv",
        "--target",
        "target",
        "--out",
        "k.krm",
    )
    status, out, _ = cli("info", "k.krm")
    assert status == 0
    assert "k.krm: kernelref.model version 1" in out
    assert "estimator: kernelref.ridge:KernelRidge" in out
    assert str(tmp_path / "train.csv") in out and "library_version" in out


# -- libsvm ----------------------------------------------------------------------------
LIBSVM_LINES = {
    "-s 0 -t 2 -g 0.5 -c 10 -e 0.001": ("SVC", {"C": 10, "gamma": 0.5, "tol": 1e-3}),
    "-s 1 -t 1 -d 2 -g 0.3 -r 1 -n 0.3": (
        "NuSVC",
        {"nu": 0.3, "kernel": "poly", "degree": 2, "gamma": 0.3, "coef0": 1},
    ),
    "-s 3 -t 2 -g 0.5 -c 4 -p 0.05": ("SVR", {"C": 4, "gamma": 0.5, "epsilon": 0.05}),
    "-s 4 -t 0 -n 0.4 -c 2": ("NuSVR", {"nu": 0.4, "C": 2, "kernel": "linear"}),
    "-s 2 -t 2 -g 0.5 -n 0.2": ("OneClassSVM", {"nu": 0.2, "gamma": 0.5}),
}


def test_svm_train_equals_libsvm(run, tmp_path):
    svm = pytest.importorskip("sklearn.svm")
    y_class = np.where(X[:, 0] + X[:, 1] > 0, 1, -1)
    write_libsvm(tmp_path / "class.svm", X, y_class)
    write_libsvm(tmp_path / "regress.svm", X, t)
    for line, (name, params) in LIBSVM_LINES.items():
        regression = name in ("SVR", "NuSVR")
        data = "regress.svm" if regression else "class.svm"
        done = run("svm-train", *line.split(), data, "m.krm")  # the line verbatim
        assert done.returncode == 0, (line, done.stderr)
        ours = kernelref.load(tmp_path / "m.krm")
        y = t if regression else y_class
        peer = getattr(svm, name)(**params)
        peer.fit(X) if name == "OneClassSVM" else peer.fit(X, y)
        scale = max(1.0, np.abs(peer.dual_coef_).max())
        if "-t 2" in line:
            # K is positive definite: the dual solution is unique, so the support set
            # and the coefficients agree to the solvers' tolerance (1e-3). With the
            # linear and polynomial kernels (rank < N) only the function is unique.
            assert np.array_equal(ours.support_, peer.support_), line
            np.testing.assert_allclose(
                ours.dual_coef_, peer.dual_coef_, atol=5e-3 * scale
            )
            np.testing.assert_allclose(
                ours.intercept_, peer.intercept_, atol=5e-3 * scale
            )
        method = "predict" if regression else "decision_function"
        np.testing.assert_allclose(
            getattr(ours, method)(X_test),
            getattr(peer, method)(X_test),
            atol=1e-2 * scale,
        )

    write_libsvm(
        tmp_path / "test.svm", X_test, np.where(X_test[:, 0] + X_test[:, 1] > 0, 1, -1)
    )
    run("svm-train", "-c", "10", "-g", "0.5", "class.svm")  # default model name
    done = run("svm-predict", "test.svm", "class.svm.model", "out.txt")
    peer = svm.SVC(C=10, gamma=0.5).fit(X, y_class)
    y_test = np.where(X_test[:, 0] + X_test[:, 1] > 0, 1, -1)
    correct = int(np.sum(peer.predict(X_test) == y_test))
    assert done.stdout.strip() == (
        f"Accuracy = {100 * correct / len(y_test):g}% ({correct}/{len(y_test)}) "
        "(classification)"
    )
    written = np.loadtxt(tmp_path / "out.txt")
    assert np.array_equal(
        written, kernelref.load(tmp_path / "class.svm.model").predict(X_test)
    )


def test_svm_train_cross_validation_prints_what_libsvm_prints(cli, tmp_path):
    write_libsvm(tmp_path / "class.svm", X, np.where(X[:, 0] > 0, 1, -1))
    write_libsvm(tmp_path / "regress.svm", X, t)
    _, out, _ = cli("svm-train", "-v", "5", "-c", "10", "class.svm")
    assert re.fullmatch(r"Cross Validation Accuracy = [0-9.]+%\n", out), out
    accuracy = float(out.split("=")[1].strip(" %\n"))
    assert 80 <= accuracy <= 100  # the classes are split by x0 > 0
    _, out, _ = cli("svm-train", "-s", "3", "-v", "4", "regress.svm")
    lines = out.splitlines()
    assert re.fullmatch(r"Cross Validation Mean squared error = [0-9.e-]+", lines[0])
    assert re.fullmatch(
        r"Cross Validation Squared correlation coefficient = [0-9.e-]+", lines[1]
    )
    assert not (tmp_path / "regress.svm.model").exists()  # -v trains no model file


def test_cross_validation_folds_are_stratified():
    from kernelref.cli.libsvm import folds

    y = np.array([0] * 10 + [1] * 5)
    fold = folds(y, 5, classification=True)
    for k in range(5):
        assert np.sum(y[fold == k] == 0) == 2 and np.sum(y[fold == k] == 1) == 1


def test_svm_train_probability_and_weights(cli, tmp_path):
    y_class = np.where(X[:, 0] + X[:, 1] > 0, 1, -1)
    write_libsvm(tmp_path / "class.svm", X, y_class)
    assert cli("svm-train", "-b", "1", "-w1", "3", "class.svm", "b.krm")[0] == 0
    model = kernelref.load(tmp_path / "b.krm")
    assert type(model).__name__ == "PlattCalibrated"
    assert model.estimator.class_weight == {1: 3.0}
    status, _, err = cli("svm-predict", "-b", "1", "class.svm", "b.krm", "p.txt")
    assert status == 0, err
    header, first = (tmp_path / "p.txt").read_text().splitlines()[:2]
    assert header == "labels -1 1"
    _label, *probabilities = first.split()
    assert abs(sum(map(float, probabilities)) - 1) < 1e-5


# -- bad input -------------------------------------------------------------------------
def bad_files(tmp_path, cli):
    """A good model file and its damaged copies; a CSV with a non-numeric cell."""
    write_csv(tmp_path / "train.csv", X, t)
    assert (
        cli(
            "fit",
            "KernelRidge",
            "--data",
            "train.csv",
            "--target",
            "target",
            "--out",
            "ok.krm",
        )[0]
        == 0
    )
    model_file = tmp_path / "ok.krm"
    raw = bytearray(model_file.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "bad.krm").write_bytes(bytes(raw))
    (tmp_path / "pickle.krm").write_bytes(pickle.dumps(kernelref.load(model_file)))
    (tmp_path / "cut.krm").write_bytes(model_file.read_bytes()[:-64])
    text = (tmp_path / "train.csv").read_text().splitlines()
    row = text[3].split(",")
    row[1] = "abc"
    text[3] = ",".join(row)
    (tmp_path / "cell.csv").write_text("\n".join(text) + "\n")


def test_installed_command_refuses_bad_files_with_status_1(run, cli, tmp_path):
    bad_files(tmp_path, cli)
    cases = [
        (
            (
                "predict",
                "bad.krm",
                "--data",
                "train.csv",
                "--target",
                "target",
                "--out",
                "o.npy",
            ),
            1,
            "bad.krm is corrupted: its sha256 checksum does not match",
        ),
        (
            ("predict", "pickle.krm", "--data", "train.csv", "--out", "o.npy"),
            1,
            "pickle.krm is not a kernelref model file: it looks like a Python pickle",
        ),
        (
            (
                "fit",
                "SVR",
                "--data",
                "cell.csv",
                "--target",
                "target",
                "--out",
                "x.krm",
            ),
            1,
            "cell.csv:4:2: column 2 ('x1') 'abc' is not a number",
        ),
        (
            ("fit", "SVM", "--data", "train.csv", "--out", "x.krm"),
            2,
            "unknown model 'SVM'",
        ),
    ]
    for args, status, message in cases:
        done = run(*args)
        assert done.returncode == status, (args, done.stderr)
        assert done.stderr.startswith("kernelref: error: "), done.stderr
        assert message in done.stderr, (args, done.stderr)
    assert not (tmp_path / "x.krm").exists() and not (tmp_path / "o.npy").exists()


def test_bad_input_gets_a_clear_error_and_nonzero_exit(cli, tmp_path):
    bad_files(tmp_path, cli)
    cases = [
        (("info", "cut.krm"), 1, "cut.krm is truncated"),
        (
            (
                "fit",
                "SVR",
                "--data",
                "train.csv",
                "--target",
                "price",
                "--out",
                "x.krm",
            ),
            1,
            "train.csv: no column named 'price'",
        ),
        (
            ("fit", "SVR", "--data", "train.csv", "--target", "9", "--out", "x.krm"),
            1,
            "--target 9 is outside the 4 columns",
        ),
        (
            (
                "fit",
                "SVR",
                "--data",
                "train.csv",
                "--target",
                "target",
                "--param",
                "gama=1",
                "--out",
                "x.krm",
            ),
            2,
            "--param gama: SVR has no parameter 'gama'",
        ),
        (
            ("fit", "SVR", "--data", "train.csv", "--out", "x.krm"),
            2,
            "give --target COLUMN",
        ),
        (
            (
                "fit",
                "SVR",
                "--data",
                "train.csv",
                "--target",
                "target",
                "--param",
                "C=-1",
                "--out",
                "x.krm",
            ),
            2,  # a value the estimator refuses is a wrong --param
            "--param C: C must be",
        ),
        (
            ("fit", "SVR", "--data", "nothere.csv", "--out", "x.krm"),
            1,
            "nothere.csv: no such data file",
        ),
        (
            (
                "fit",
                "SVR",
                "--data",
                "train.csv",
                "--target",
                "target",
                "--out",
                "no/x.krm",
            ),
            2,
            "--out no/x.krm: the directory",
        ),
        (
            (
                "fit",
                "SVR",
                "--data",
                "train.csv",
                "--target",
                "target",
                "--store",
                "s.zarr",
                "--out",
                "x.krm",
            ),
            2,
            "SVR keeps no store; drop --store or use --backend dask",
        ),
        (
            (
                "fit",
                "SVR",
                "--data",
                "train.csv",
                "--target",
                "target",
                "--backend",
                "spark",
                "--out",
                "x.krm",
            ),
            2,
            "--backend spark: no backend of that name is installed",
        ),
        (("svm-train", "-s", "7", "train.csv"), 2, "svm_type is 0 to 4"),
        (("svm-train", "-c", "ten", "train.csv"), 2, "-c takes a number; got 'ten'"),
        (("svm-train", "-x", "1", "train.csv"), 2, "unknown option -x"),
        (
            ("svm-predict", "train.csv", "ok.krm"),
            2,
            "give test_file model_file output_file",
        ),
        (("predict", "--data", "train.csv"), 2, "the following arguments are required"),
    ]
    for args, status, message in cases:
        code, _, err = cli(*args)
        assert code == status, (args, err)
        assert err.startswith("kernelref: error: "), err
        assert message in err, (args, err)
    assert not (tmp_path / "x.krm").exists()


def test_libsvm_file_errors_name_line_and_column(cli, tmp_path):
    (tmp_path / "a.svm").write_text("+1 1:0.5 2:1\n-1 1:0.2 x:3\n")
    (tmp_path / "b.svm").write_text("+1 2:0.5 1:1\n")
    (tmp_path / "c.svm").write_text("+1 1:0.5\nfoo 1:1\n")
    for name, message in (
        ("a.svm", "a.svm:2:10: expected index:value"),
        ("b.svm", "b.svm:1:10: index 1 does not increase"),
        ("c.svm", "c.svm:2:1: the label 'foo' is not a number"),
    ):
        code, _, err = cli("svm-train", name)
        assert code == 1 and message in err, err


def test_help_has_examples(cli):
    code, out, _ = cli("--help")
    assert code == 0 and "examples:" in out and "svm-train" in out
    code, out, _ = cli("svm-train", "-h")
    assert code == 0 and "kernelref model file" in out and "-wi weight" in out
    code, out, _ = cli("fit", "--help")
    assert code == 0 and "--scheduler" in out and "--tls-ca-file" in out


def test_backends_are_found_through_entry_points():
    """--backend dask is the module registered in kernelref.backends (pyproject)."""
    pytest.importorskip("distributed")
    import backends.dask
    from kernelref.cli import plugins

    assert plugins.names()[0] == "reference" and "dask" in plugins.names()
    dask = plugins.load("dask")
    assert dask.GramStore is backends.dask.GramStore
    assert dask.estimators()["SVC"] is backends.dask.SVC
    assert models.estimator_class("svc", "dask") is backends.dask.SVC


# -- progress --------------------------------------------------------------------------
def on_terminal(command):
    """What `command` writes to stderr when stderr is a (pseudo-)terminal."""
    controller, terminal = pty.openpty()
    # a new pseudo-terminal is 0 columns wide, where a bar has no room: size it as a
    # window
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=terminal, env=environment()
    ) as process:
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal closed: the command ended
                break
            if not chunk:
                break
            seen += chunk
        assert process.wait(timeout=60) == 0
    os.close(controller)
    return seen


def test_progress_on_a_terminal_only(kernelref_command, tmp_path):
    pytest.importorskip("tqdm")
    write_libsvm(tmp_path / "class.svm", X, np.where(X[:, 0] > 0, 1, -1))
    command = [kernelref_command, "svm-train", "-v", "3", str(tmp_path / "class.svm")]
    piped = subprocess.run(command, capture_output=True, text=True, env=environment())
    assert piped.returncode == 0 and "Cross Validation Accuracy" in piped.stdout
    assert piped.stderr == ""
    seen = on_terminal(command)
    assert b"cross-validation" in seen and b"/3 [" in seen
    assert on_terminal(command[:2] + ["-q"] + command[2:]) == b""


def test_every_data_format_reads_the_same_numbers(tmp_path):
    from kernelref.cli import data

    target = np.arange(len(X)) % 3
    write_csv(tmp_path / "named.csv", X, target)
    write_csv(tmp_path / "bare.csv", np.column_stack([target, X]), header=False)
    (tmp_path / "tabs.tsv").write_text(
        (tmp_path / "named.csv").read_text().replace(",", "\t")
    )
    write_libsvm(tmp_path / "file.svm", X, target)
    np.savez(tmp_path / "arrays.npz", X=X, y=target)
    np.save(tmp_path / "matrix.npy", np.column_stack([X, target]))
    readings = {
        "named.csv": data.read(tmp_path / "named.csv", "target"),
        "bare.csv": data.read(tmp_path / "bare.csv", "0"),
        "tabs.tsv": data.read(tmp_path / "tabs.tsv", "-1"),
        "file.svm": data.read(tmp_path / "file.svm"),
        "arrays.npz": data.read(tmp_path / "arrays.npz"),
        "matrix.npy": data.read(tmp_path / "matrix.npy", "-1"),
    }
    zarr = pytest.importorskip("zarr")
    group = zarr.open_group(str(tmp_path / "group.zarr"), mode="w")
    group.create_array("X", data=X, chunks=(16, 3))
    group.create_array("y", data=target)
    readings["group.zarr"] = data.read(tmp_path / "group.zarr")
    lazy_X, lazy_y = data.read(tmp_path / "group.zarr", lazy=True)
    assert type(lazy_X).__module__.startswith("dask") and lazy_X.chunks[0][0] == 16
    readings["group.zarr lazy"] = (np.asarray(lazy_X), lazy_y)
    for name, (X_read, y_read) in readings.items():
        assert np.array_equal(X_read, X), name
        assert np.array_equal(y_read, target), name


def test_sparse_libsvm_file_trains_as_sparse_and_predicts_alike(cli, tmp_path):
    X_sparse = np.where(np.abs(X) > 1.2, X, 0.0)  # about 23% stored
    y_class = np.where(X[:, 0] + X[:, 1] > 0, 1, -1)
    write_libsvm(tmp_path / "sparse.svm", X_sparse, y_class)
    assert cli("svm-train", "-c", "4", "-g", "0.5", "sparse.svm", "s.krm")[0] == 0
    model = kernelref.load(tmp_path / "s.krm")
    assert type(model.support_vectors_).__module__.startswith("scipy.sparse")
    dense = kernelref.svm.SVC(C=4, gamma=0.5).fit(X_sparse, y_class)
    assert np.array_equal(model.support_, dense.support_)
    np.testing.assert_allclose(
        model.decision_function(X_test),
        dense.decision_function(X_test),
        rtol=1e-10,
        atol=1e-12,
    )
    write_libsvm(tmp_path / "test.svm", X_test, np.ones(len(X_test), dtype=int))
    assert cli("svm-predict", "test.svm", "s.krm", "out.txt")[0] == 0
    assert np.array_equal(np.loadtxt(tmp_path / "out.txt"), dense.predict(X_test))
