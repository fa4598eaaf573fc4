"""A new user's walk through the installed ``kernelref`` command (session 26):
each case gave a wrong result, a traceback or an unclear message before its
fix. Every test runs the console script in a subprocess."""

import json

import numpy as np
import pytest
from test_cli import (
    write_csv,
    write_libsvm,
)  # tests/cli is on sys.path (rootdir-less dir)

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


def test_gram_refuses_a_chunk_size_below_one_by_name(run, tmp_path):
    """--chunk-size 0 crashed with 'ZeroDivisionError ... (unexpected ...)'."""
    np.save(tmp_path / "X.npy", X)
    for given in ("0", "-3", "x"):
        done = run(
            "gram", "--data", "X.npy", "--store", "g.zarr", "--chunk-size", given
        )
        assert done.returncode == 2, done.stderr
        assert "argument --chunk-size: expected an integer ≥ 1" in done.stderr
        assert "unexpected" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "g.zarr").exists()


@pytest.mark.slow
def test_gram_names_overwrite_for_a_store_of_another_kernel(run, tmp_path):
    """gram offers --overwrite, but its refusal of a store built with another
    kernel named only the Python fixes (shutil.rmtree, overwrite=True)."""
    pytest.importorskip("distributed")
    np.save(tmp_path / "X.npy", X)
    build = ("gram", "--data", "X.npy", "--store", "g.zarr", "--param")
    assert run(*build, "gamma=0.1").returncode == 0
    done = run(*build, "gamma=0.2")
    assert done.returncode == 1
    assert "add --overwrite to replace the store g.zarr" in done.stderr
    assert "shutil.rmtree" not in done.stderr
    done = run(*build, "gamma=0.2", "--overwrite")
    assert done.returncode == 0, done.stderr
    done = run("info", "g.zarr")
    assert '"gamma": 0.2' in done.stdout


SVM_TRAIN_FLAGS = [
    # (flags, the flag and value named, the estimator's words kept)
    (["-c", "-1"], "-c -1", "C must be in (0, inf]"),
    (["-c", "1", "-c", "-3"], "-c -3", "C must be in (0, inf]"),
    (["-g", "0"], "-g 0", "gamma must be a finite number > 0"),
    (["-e", "0"], "-e 0", "tol must be in (0, inf)"),
    (["-s", "1", "-n", "1.5"], "-n 1.5", "nu must be in (0, 1]"),
    (["-s", "3", "-p", "-1"], "-p -1", "epsilon must be in [0, inf)"),
    (["-t", "1", "-d", "0"], "-d 0", "degree must be an integer >= 1"),
    (["-w-1", "2", "-w+1", "-1"], "-w+1 -1", "class_weight[1] must be in (0, inf)"),
    (["-v", "3", "-c", "-2"], "-c -2", "C must be in (0, inf]"),
]


def test_svm_train_names_the_flag_of_a_refused_value(run, tmp_path):
    """A value the estimator refuses was reported by the estimator's parameter
    name ('C must be ...', exit 1): the user typed -c. Now a wrong command
    line (exit 2) naming the flag and the value given."""
    write_libsvm(tmp_path / "train", X, 2 * labels - 1)
    for flags, named, words in SVM_TRAIN_FLAGS:
        done = run("svm-train", *flags, "train", "m.krm")
        assert done.returncode == 2, (flags, done.stderr)
        assert done.stderr.startswith(f"kernelref: error: svm-train: {named}: ")
        assert words in done.stderr, (flags, done.stderr)
    assert not (tmp_path / "m.krm").exists()


def test_svm_train_and_predict_check_their_files_first(run, tmp_path):
    """A missing training or test file gave '[Errno 2] No such file or
    directory: ...', a missing output directory the same after the whole fit,
    and svm-train without arguments printed its help and exited 0."""
    write_libsvm(tmp_path / "train", X, 2 * labels - 1)
    assert run("svm-train", "-q", "train", "m.krm").returncode == 0
    cases = [
        (("svm-train",), "svm-train: give training_set_file"),
        (("svm-train", "nofile"), "svm-train: training_set_file nofile: no such"),
        (("svm-train", "train", "no/m.krm"), "no/m.krm: the directory"),
        (("svm-predict", "nofile", "m.krm", "o.txt"), "test_file nofile: no such"),
        (("svm-predict", "train", "m.krm", "no/o.txt"), "no/o.txt: the directory"),
    ]
    for args, message in cases:
        done = run(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)
        assert "Errno" not in done.stderr


def write_precomputed(path, K, y):
    """libsvm's precomputed format: 'label 0:i 1:K(x,x_1) ... L:K(x,x_L)'."""
    with open(path, "w") as f:
        for i, (row, label) in enumerate(zip(K, y), 1):
            values = " ".join(f"{j}:{float(v)!r}" for j, v in enumerate(row, 1))
            f.write(f"{label:+d} 0:{i} {values}\n")


def rbf(A, B, gamma=0.5):
    return np.exp(-gamma * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))


def test_svm_train_reads_libsvms_precomputed_kernel_format(run, tmp_path):
    """-t 4, offered by svm-train's help, refused every precomputed file at
    its '0:i' serial number ('expected index:value with an index from 1'), and
    its model could not be saved (an empty support_vectors_). Now -t 4 on the
    RBF kernel matrix predicts what -t 2 predicts, and cross-validates alike;
    with -b 1 (refused before: Platt's folds cut rows, not columns) it gives the
    same probabilities."""
    X_test = rng.normal(size=(15, 2))
    y, y_test = 2 * labels - 1, np.where(X_test[:, 0] > 0, 1, -1)
    write_libsvm(tmp_path / "train", X, y)
    write_libsvm(tmp_path / "test", X_test, y_test)
    write_precomputed(tmp_path / "train.K", rbf(X, X), y)
    write_precomputed(tmp_path / "test.K", rbf(X_test, X), y_test)
    for flags, train, test in (
        (["-t", "2", "-g", "0.5"], "train", "test"),
        (["-t", "4"], "train.K", "test.K"),
    ):
        done = run("svm-train", "-q", *flags, train, f"{train}.krm")
        assert done.returncode == 0, done.stderr
        done = run("svm-predict", test, f"{train}.krm", f"{train}.out")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Accuracy = ")
    assert (tmp_path / "train.out").read_text() == (
        tmp_path / "train.K.out"
    ).read_text()
    cv = [
        run("svm-train", "-v", "4", *flags, file).stdout
        for flags, file in ((["-g", "0.5"], "train"), (["-t", "4"], "train.K"))
    ]
    assert cv[0] == cv[1] and cv[0].startswith("Cross Validation Accuracy = ")
    # -b 1: Platt's folds fit on their own kernel columns, so the probabilities
    # are those of the RBF fit on the features (printed to 6 digits)
    for flags, train, test in (
        (["-t", "2", "-g", "0.5"], "train", "test"),
        (["-t", "4"], "train.K", "test.K"),
    ):
        done = run("svm-train", "-q", "-b", "1", *flags, train, f"{train}.b.krm")
        assert done.returncode == 0, done.stderr
        done = run("svm-predict", "-b", "1", test, f"{train}.b.krm", f"{train}.p")
        assert done.returncode == 0, done.stderr
    probabilities = [
        np.loadtxt(tmp_path / name, skiprows=1) for name in ("train.p", "train.K.p")
    ]
    np.testing.assert_allclose(*probabilities, atol=2e-6)
    refused = [
        (("svm-train", "-t", "4", "train"), "data line 1 does not begin with 0:i"),
        (("svm-predict", "test", "train.K.krm", "o"), "does not begin with 0:i"),
    ]
    for args, message in refused:
        done = run(*args)
        assert done.returncode in (1, 2) and message in done.stderr, done.stderr


def test_evaluate_refuses_targets_the_model_never_predicts(run, tmp_path):
    """A classifier evaluated on another column (here real numbers), or a
    one-class SVM on 0/1 labels, printed accuracy 0 or 0.18 and exit 0; a
    regressor on class names failed with 'could not convert string to float'."""
    values = np.round(X[:, 1] * 7.0, 3)
    write_csv(tmp_path / "train.csv", X, labels)
    write_csv(tmp_path / "values.csv", X, values)
    write_csv(tmp_path / "three.csv", X, np.where(X[:, 1] > 1, 2, labels))
    np.save(tmp_path / "X.npy", X)
    fit = ("fit", "SVC", "--data", "train.csv", "--target", "target", "--out")
    assert run(*fit, "SVC.krm").returncode == 0
    assert (
        run("fit", "OneClassSVM", "--data", "X.npy", "--out", "oc.krm").returncode == 0
    )
    evaluate = ("evaluate", "--target", "target", "--data")
    done = run(*evaluate, "values.csv", "SVC.krm")
    assert done.returncode == 1 and "accuracy" not in done.stdout
    assert "values.csv: --target target holds [" in done.stderr
    assert "none of them among the classes of SVC.krm, [0, 1]" in done.stderr
    done = run(*evaluate, "train.csv", "oc.krm")
    assert done.returncode == 1
    assert "predicts +1 (inlier) and -1 (outlier)" in done.stderr
    write_csv(tmp_path / "names.csv", X, np.array(["cat", "dog"])[labels])
    fit_svr = ("fit", "SVR", "--data", "values.csv", "--target", "target")
    assert run(*fit_svr, "--out", "svr.krm").returncode == 0
    done = run(*evaluate, "names.csv", "svr.krm")
    assert done.returncode == 1
    assert "names.csv: --target target holds text (['cat', 'dog'])" in done.stderr
    done = run(*evaluate, "three.csv", "SVC.krm", "--json")
    assert done.returncode == 0, done.stderr
    assert "[2] not among the model's classes [0, 1]" in done.stderr
    assert 0 < json.loads(done.stdout)["accuracy"] < 1


def test_bad_arrays_in_a_data_file_are_refused_naming_the_file(run, tmp_path):
    """An .npz of 1-D X, of too few targets, or with NaN was refused with the
    estimator's words alone ('X must be 2-D ... Reshape your data with
    X.reshape(-1, 1)', 'X contains NaN ... before fitting'): no file named."""
    t = X[:, 0].copy()
    nan = X.copy()
    nan[3, 1] = np.nan
    np.savez(tmp_path / "flat.npz", X=X[:, 0], y=t)
    np.savez(tmp_path / "short.npz", X=X, y=t[:30])
    np.savez(tmp_path / "nan.npz", X=nan, y=t)
    np.savez(tmp_path / "ok.npz", X=X, y=t)
    cases = [
        ("fit", "flat.npz", "flat.npz: X has shape (40,); save it 2-D"),
        ("fit", "short.npz", "short.npz: the targets have shape (30,) but X has 40"),
        (
            "fit",
            "nan.npz",
            "--data nan.npz: X contains NaN or infinity (first at row 3)",
        ),
        ("predict", "nan.npz", "--data nan.npz: X contains NaN or infinity"),
        ("evaluate", "nan.npz", "--data nan.npz: X contains NaN or infinity"),
    ]
    assert (
        run("fit", "KernelRidge", "--data", "ok.npz", "--out", "m.krm").returncode == 0
    )
    for command, file, message in cases:
        args = {
            "fit": ("fit", "KernelRidge", "--data", file, "--out", "new.krm"),
            "predict": ("predict", "m.krm", "--data", file, "--out", "p.csv"),
            "evaluate": ("evaluate", "m.krm", "--data", file),
        }[command]
        done = run(*args)
        assert done.returncode == 1, (args, done.stderr)
        assert done.stderr.startswith("kernelref: error: " + message), done.stderr
        assert "before fitting" not in done.stderr
    assert not (tmp_path / "new.krm").exists() and not (tmp_path / "p.csv").exists()


def test_predict_of_kernel_pca_writes_its_components_with_a_header(run, tmp_path):
    """predict of a KernelPCA said 'wrote 40 predictions' and its .csv had no
    header row, though --out promises '.csv (with a header)'."""
    np.save(tmp_path / "X.npy", X)
    fit = ("fit", "KernelPCA", "--data", "X.npy", "--param", "n_components=2")
    assert run(*fit, "--out", "kpca.krm").returncode == 0
    done = run("predict", "kpca.krm", "--data", "X.npy", "--out", "z.csv")
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout == "wrote the projections of 40 samples on 2 components to z.csv\n"
    )
    header, *rows = (tmp_path / "z.csv").read_text().splitlines()
    assert header == "component_1,component_2" and len(rows) == 40


def test_a_store_path_of_other_files_is_refused_before_the_cluster(run, tmp_path):
    """--store naming a file, or a directory of the user's files, was refused
    by the backend once its embedded cluster had started (10 s here), exit 1,
    and the message did not name --store; now at once, exit 2."""
    pytest.importorskip("distributed")
    write_csv(tmp_path / "train.csv", X, labels)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("mine")
    (tmp_path / "m.krm.store").write_text("mine")
    fit = ("fit", "SVC", "--data", "train.csv", "--target", "target")
    for store, found in (("notes.txt", "a file"), ("mine", "a directory of other")):
        for overwrite in ((), ("--overwrite",)):
            done = run(
                *fit,
                "--backend",
                "dask",
                "--store",
                store,
                *overwrite,
                "--out",
                "m.krm",
                "--verbose",
            )
            assert done.returncode == 2, done.stderr
            assert f"--store {store}: it is {found}" in done.stderr
            assert "Dask cluster" not in done.stderr  # none started
    done = run(*fit, "--backend", "dask", "--out", "m.krm")
    assert done.returncode == 2
    assert "the store m.krm.store: it is a file, not a kernelref store" in done.stderr
    assert (tmp_path / "mine" / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "m.krm").exists()


def test_a_kernel_spec_with_a_misspelt_parameter_lists_the_right_ones(run, tmp_path):
    """A kernel spec's misspelt parameter gave Python's own words: "--param
    kernel: RBF.__init__() got an unexpected keyword argument 'gama'"."""
    write_csv(tmp_path / "train.csv", X, X[:, 0])
    rbf = {"class": "RBF", "params": {"gama": 1}}
    inner = {
        "class": "Sum",
        "params": {"k1": rbf, "k2": {"class": "Linear", "params": {}}},
    }
    for spec in (rbf, inner):
        done = run(
            "fit",
            "KernelRidge",
            "--data",
            "train.csv",
            "--target",
            "target",
            "--param",
            f"kernel={json.dumps(spec)}",
            "--out",
            "m.krm",
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr == (
            "kernelref: error: --param kernel: RBF has no parameter 'gama'; its "
            "parameters are ['gamma', 'gamma_bounds'].\n"
        )


def test_integer_class_labels_of_a_csv_file_come_back_as_written(run, tmp_path):
    """Labels 0 and 1 in a CSV file were read as 0.0 and 1.0: predict wrote
    '1.0', --proba's header 'p(0.0),p(1.0)'."""
    write_csv(tmp_path / "train.csv", X, labels)
    platt = '{"estimator": "SVC", "params": {}}'
    for model, extra in (
        ("SVC", ()),
        ("PlattCalibrated", ("--param", f"estimator={platt}")),
    ):
        done = run(
            "fit",
            model,
            "--data",
            "train.csv",
            "--target",
            "target",
            *extra,
            "--out",
            f"{model}.krm",
        )
        assert done.returncode == 0, done.stderr
    done = run(
        "predict",
        "SVC.krm",
        "--data",
        "train.csv",
        "--target",
        "target",
        "--out",
        "p.csv",
    )
    assert done.returncode == 0, done.stderr
    header, *rows = (tmp_path / "p.csv").read_text().splitlines()
    assert header == "prediction" and set(rows) == {"0", "1"}
    done = run(
        "predict",
        "PlattCalibrated.krm",
        "--data",
        "train.csv",
        "--target",
        "target",
        "--proba",
        "--out",
        "p.csv",
    )
    assert (tmp_path / "p.csv").read_text().splitlines()[0] == "p(0),p(1)"


def test_help_names_every_model_the_command_line_offers(run):
    """The help listed 12 models by hand; PlattCalibrated (which the README and
    predict --proba's message send the user to), OneVsRestClassifier,
    KernelFisherDiscriminant and SoftmaxGaussianProcessClassifier were missing."""
    from kernelref.cli.models import reference_estimators

    for args in (("--help",), ("fit", "--help")):
        done = run(*args)
        assert done.returncode == 0
        text = " ".join(done.stdout.split())
        for name in reference_estimators():
            assert name in text, (args, name)
        assert max(map(len, done.stdout.splitlines())) <= 88


def test_svm_predict_of_a_transformer_and_of_constant_targets(run, tmp_path):
    """svm-predict of a KernelPCA model crashed ('AttributeError ...
    (unexpected ...)'); test values all equal printed two RuntimeWarnings
    beside libsvm's 'Squared correlation coefficient = nan'."""
    np.save(tmp_path / "X.npy", X)
    write_libsvm(tmp_path / "train", X, X[:, 0])
    write_libsvm(tmp_path / "flat", X, np.ones(len(X)))
    assert (
        run("fit", "KernelPCA", "--data", "X.npy", "--out", "kpca.krm").returncode == 0
    )
    assert run("svm-train", "-q", "-s", "3", "train", "svr.krm").returncode == 0
    done = run("svm-predict", "flat", "kpca.krm", "o.txt")
    assert done.returncode == 2
    assert "svm-predict: kpca.krm holds a KernelPCA, which predicts no" in done.stderr
    done = run("svm-predict", "flat", "svr.krm", "o.txt")
    assert done.returncode == 0 and done.stderr == ""
    assert "Squared correlation coefficient = nan (regression)" in done.stdout


def test_info_of_a_calibrations_store_lists_its_stores(run, tmp_path):
    """PlattCalibrated --backend dask keeps one store per fit under its store
    (pair-i-j/fold-k, pair-i-j/final); `kernelref info` of it said 'is neither
    a model file nor a Zarr store'. The tree is written as the backend writes
    each store's zarr.json (a Zarr group whose attributes name the format)."""
    pytest.importorskip("zarr")
    for fit in ("pair-0-1/fold-0", "pair-0-1/fold-1", "pair-0-1/final"):
        (tmp_path / "cal.store" / fit).mkdir(parents=True)
        meta = {
            "zarr_format": 3,
            "node_type": "group",
            "attributes": {"format": "kernelref.fit_store"},
        }
        (tmp_path / "cal.store" / fit / "zarr.json").write_text(json.dumps(meta))
    done = run("info", "cal.store")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "cal.store: a directory of 3 kernelref stores",
        "pair-0-1/final: kernelref.fit_store",
        "pair-0-1/fold-0: kernelref.fit_store",
        "pair-0-1/fold-1: kernelref.fit_store",
    ]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    done = run("info", "mine")
    assert (
        done.returncode == 2 and "neither a model file nor a Zarr store" in done.stderr
    )


def test_an_output_that_is_an_input_or_a_directory_is_refused_first(run, tmp_path):
    """fit --out train.csv overwrote the training data with the model, predict
    --out test.csv the data with its predictions (exit 0, both); --out DIR
    failed after the fit with '[Errno 21] Is a directory: ...part -> DIR'."""
    write_csv(tmp_path / "train.csv", X, labels)
    write_libsvm(tmp_path / "train", X, 2 * labels - 1)
    (tmp_path / "dir").mkdir()
    original = (tmp_path / "train.csv").read_bytes()
    fit = ("fit", "SVC", "--data", "train.csv", "--target", "target", "--out")
    assert run(*fit, "m.krm").returncode == 0
    predict = ("predict", "m.krm", "--data", "train.csv", "--target", "target", "--out")
    cases = [
        ((*fit, "./train.csv"), "--out ./train.csv is the --data file"),
        ((*fit, "dir"), "--out dir is a directory; give a file name"),
        ((*predict, "train.csv"), "--out train.csv is the --data file"),
        ((*predict, "m.krm"), "--out m.krm is the model file"),
        (("svm-train", "train", "train"), "model_file train is the training file"),
        (("svm-predict", "train", "m.krm", "m.krm"), "output_file m.krm is the model"),
        (("svm-predict", "train", "m.krm", "train"), "output_file train is the test"),
    ]
    for args, message in cases:
        done = run(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)
    assert (tmp_path / "train.csv").read_bytes() == original
    assert run("info", "m.krm").returncode == 0


def test_a_csv_file_saved_by_excel_with_a_byte_order_mark_reads_alike(run, tmp_path):
    """Excel's 'CSV UTF-8' starts with a byte order mark: the first column's
    name became '\\ufeffy' (--target y: 'no column named y'), and in a file
    without a header the first row was taken for one and silently dropped."""
    rows = "".join(
        ",".join(map(repr, map(float, row))) + "\n" for row in X[:, [0, 0, 1]]
    )
    (tmp_path / "head.csv").write_text("\ufeffy,a,b\n" + rows, encoding="utf-8")
    (tmp_path / "bare.csv").write_text("\ufeff" + rows, encoding="utf-8")
    for file, target in (("head.csv", "y"), ("bare.csv", "0")):
        done = run(
            "fit",
            "KernelRidge",
            "--data",
            file,
            "--target",
            target,
            "--out",
            "m.krm",
            "--verbose",
        )
        assert done.returncode == 0, done.stderr
        assert f"on {file} ({len(X)} samples × 2 features)" in done.stderr


def test_svm_predict_scores_a_one_class_svm_by_accuracy_as_libsvm(run, tmp_path):
    """libsvm's svm-predict and svm-train -v score a one-class SVM (-s 2) by
    accuracy against the file's labels; kernelref printed nothing, and under
    -v a mean squared error."""
    import kernelref

    X_test = rng.normal(size=(30, 2))
    y, y_test = 2 * labels - 1, np.where(np.abs(X_test[:, 0]) < 1, 1, -1)
    write_libsvm(tmp_path / "train", X, y)
    write_libsvm(tmp_path / "test", X_test, y_test)
    assert (
        run("svm-train", "-q", "-s", "2", "-n", "0.3", "train", "oc.krm").returncode
        == 0
    )
    done = run("svm-predict", "test", "oc.krm", "o.txt")
    model = kernelref.load(tmp_path / "oc.krm")
    expected = int(np.sum(model.predict(X_test) == y_test))
    assert done.stdout == (
        f"Accuracy = {100 * expected / 30:g}% ({expected}/30) (classification)\n"
    )
    done = run("svm-train", "-s", "2", "-n", "0.3", "-v", "3", "train")
    assert done.stdout.startswith("Cross Validation Accuracy = "), done.stdout


def test_a_kernel_name_where_a_kernel_object_is_needed_shows_the_spec(run, tmp_path):
    """--param kernel=rbf for a Gaussian process was refused in Python's terms
    ('kernel must be a kernelref.kernels.Kernel or None'), with nothing on how
    to give a Kernel on the command line."""
    np.savez(tmp_path / "train.npz", X=X, y=X[:, 0])
    done = run(
        "fit",
        "GaussianProcessRegressor",
        "--data",
        "train.npz",
        "--param",
        "kernel=rbf",
        "--out",
        "gp.krm",
    )
    assert done.returncode == 2
    assert "--param kernel: kernel must be a kernelref.kernels.Kernel" in done.stderr
    assert """--param 'kernel={"class": "RBF", "params": {"gamma": 0.5}}'""" in (
        done.stderr
    )


def test_pandas_row_index_in_a_csv_file_is_refused(run, tmp_path):
    """DataFrame.to_csv writes the row index as an unnamed first column; it was
    read as a feature, and the model learnt from the row numbers."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(X, columns=["a", "b"]).assign(label=labels)
    frame.to_csv(tmp_path / "indexed.csv")
    frame.to_csv(tmp_path / "plain.csv", index=False)
    fit = ("fit", "SVC", "--target", "label", "--out", "m.krm", "--data")
    done = run(*fit, "indexed.csv")
    assert done.returncode == 1
    assert "indexed.csv: the first column has no name and counts the rows" in (
        done.stderr
    )
    assert "to_csv(index=False)" in done.stderr
    done = run(*fit, "plain.csv", "--verbose")
    assert done.returncode == 0 and "(40 samples × 2 features)" in done.stderr


def test_a_csv_file_with_the_columns_in_another_order_is_refused(run, tmp_path):
    """A test file whose header has the model's columns in another order (or
    other columns) was predicted from silently, each column read as the one in
    its place. The model file now records the feature names of a CSV header."""
    t = X[:, 0] - 2 * X[:, 1]
    write_csv(tmp_path / "train.csv", X, t)  # x0, x1, target
    swapped = (tmp_path / "train.csv").read_text().splitlines()
    swapped = [",".join([b, a, c]) for a, b, c in (r.split(",") for r in swapped)]
    (tmp_path / "swapped.csv").write_text("\n".join(swapped) + "\n")
    fit = ("fit", "KernelRidge", "--data", "train.csv", "--target", "target")
    assert run(*fit, "--out", "m.krm").returncode == 0
    assert 'provenance.features: ["x0", "x1"]' in run("info", "m.krm").stdout
    for command in (("predict", "--out", "p.csv"), ("evaluate",)):
        done = run(
            command[0],
            "m.krm",
            "--data",
            "swapped.csv",
            "--target",
            "target",
            *command[1:],
        )
        assert done.returncode == 1, done.stderr
        assert (
            "swapped.csv: its feature columns are ['x1', 'x0'], but m.krm was "
            "fitted on ['x0', 'x1'], in that order" in done.stderr
        )
    done = run("evaluate", "m.krm", "--data", "train.csv", "--target", "target")
    assert done.returncode == 0, done.stderr


def test_a_csv_file_separated_by_semicolons_is_refused_naming_it(run, tmp_path):
    """Excel in many locales writes ';' between columns and ',' as the decimal
    point: the whole line was one column, and the user read 'no column named
    label (the columns are ['a;b;label'])' or 'column 1 ... is not a number'."""
    (tmp_path / "semi.csv").write_text("a;b;label\n1,5;2;0\n2,5;1;1\n0,5;3;0\n")
    (tmp_path / "tabs.csv").write_text("a\tb\tlabel\n1.5\t2\t0\n2.5\t1\t1\n")
    for file, shown in (("semi.csv", "';'"), ("tabs.csv", "a tab")):
        for target in ("label", "0"):
            done = run(
                "fit", "SVC", "--data", file, "--target", target, "--out", "m.krm"
            )
            assert done.returncode == 1
            assert f"{file}: line 1 has one column and holds {shown}" in done.stderr
    assert "(or name it .tsv)" in done.stderr


def test_readme_predict_example_with_the_target_column_left_in(run, tmp_path):
    """README's 'kernelref predict svc.krm --data test.csv --out ...' on the
    test.csv its evaluate example reads (with the label column) failed with
    'test.csv:2:4: column 4 ('label') 'neg' is not a number'. Now the model's
    target and weight columns, named in a CSV header, are refused naming the
    options that drop them, before reading."""
    names = np.array(["neg", "pos"])[labels]
    write_csv(tmp_path / "train.csv", X, names, weights=np.ones(len(X)))
    fit = ("fit", "SVC", "--data", "train.csv", "--target", "target")
    assert run(*fit, "--weight", "weight", "--out", "svc.krm").returncode == 0
    done = run("predict", "svc.krm", "--data", "train.csv", "--out", "p.csv")
    assert done.returncode == 2
    assert "give --target target --weight weight here too" in done.stderr
    done = run("evaluate", "svc.krm", "--data", "train.csv", "--target", "target")
    assert done.returncode == 2 and "give --weight weight here too" in done.stderr
    done = run(
        "predict",
        "svc.krm",
        "--data",
        "train.csv",
        "--target",
        "target",
        "--weight",
        "weight",
        "--out",
        "p.csv",
    )
    assert done.returncode == 0, done.stderr
