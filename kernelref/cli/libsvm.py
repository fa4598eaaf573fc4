"""``svm-train`` and ``svm-predict`` with libsvm's flags, data format and output.

libsvm's options map onto the estimators one to one: ``-s`` picks SVC, NuSVC,
OneClassSVM, SVR or NuSVR; ``-t -d -g -r`` the kernel; ``-c -n -p -e -h`` the
problem and the solver; ``-wi`` a class weight; ``-b 1`` Platt-calibrated
probabilities (``PlattCalibrated``, five-fold as libsvm). The model file
written is a kernelref model file, not libsvm's text format.
"""

import contextlib
import os
import re
import sys

import numpy as np

from kernelref import io
from kernelref.base import takes_sparse
from kernelref.cli import data, runtime
from kernelref.cli.commands import check_writable, write_output
from kernelref.cli.models import UsageError

SVM_TYPES = {0: "SVC", 1: "NuSVC", 2: "OneClassSVM", 3: "SVR", 4: "NuSVR"}
KERNEL_TYPES = {0: "linear", 1: "poly", 2: "rbf", 3: "sigmoid", 4: "precomputed"}
#: flag: (meaning, parse, default) as in libsvm's svm-train usage text
TRAIN_FLAGS = {
    "-s": ("svm_type", int, 0),
    "-t": ("kernel_type", int, 2),
    "-d": ("degree", int, 3),
    "-g": ("gamma", float, None),
    "-r": ("coef0", float, 0.0),
    "-c": ("cost", float, 1.0),
    "-n": ("nu", float, 0.5),
    "-p": ("epsilon", float, 0.1),
    "-m": ("cachesize", float, 100.0),
    "-e": ("epsilon_tol", float, 1e-3),
    "-h": ("shrinking", int, 1),
    "-b": ("probability", int, 0),
    "-v": ("n_fold", int, 0),
}

TRAIN_USAGE = """\
usage: kernelref svm-train [options] training_set_file [model_file]

libsvm's svm-train, on kernelref's solver. model_file (default
training_set_file.model) is written as a kernelref model file (JSON header and
raw arrays, no pickle), which `kernelref svm-predict`, `kernelref predict` and
kernelref.load read; libsvm's own svm-predict cannot read it.

options:
-s svm_type : set type of SVM (default 0)
\t0 -- C-SVC\t\t(multi-class classification)
\t1 -- nu-SVC\t\t(multi-class classification)
\t2 -- one-class SVM
\t3 -- epsilon-SVR\t(regression)
\t4 -- nu-SVR\t\t(regression)
-t kernel_type : set type of kernel function (default 2)
\t0 -- linear: u'*v
\t1 -- polynomial: (gamma*u'*v + coef0)^degree
\t2 -- radial basis function: exp(-gamma*|u-v|^2)
\t3 -- sigmoid: tanh(gamma*u'*v + coef0)
\t4 -- precomputed kernel (kernel values in training_set_file)
-d degree : set degree in kernel function (default 3)
-g gamma : set gamma in kernel function (default 1/num_features)
-r coef0 : set coef0 in kernel function (default 0)
-c cost : set the parameter C of C-SVC, epsilon-SVR, and nu-SVR (default 1)
-n nu : set the parameter nu of nu-SVC, one-class SVM, and nu-SVR (default 0.5)
-p epsilon : set the epsilon in loss function of epsilon-SVR (default 0.1)
-m cachesize : set cache memory size in MB (default 100)
-e epsilon : set tolerance of termination criterion (default 0.001)
-h shrinking : whether to use the shrinking heuristics, 0 or 1 (default 1)
-b probability_estimates : whether to train a model for probability estimates, 0 or 1 \
(default 0)
-wi weight : set the parameter C of class i to weight*C, for C-SVC (default 1)
-v n: n-fold cross validation mode
-q : quiet mode (no outputs)

example:
  kernelref svm-train -s 0 -t 2 -g 0.5 -c 10 -e 0.001 heart_scale heart.krm
  kernelref svm-train -v 5 -c 10 heart_scale        # prints Cross Validation Accuracy
"""

PREDICT_USAGE = """\
usage: kernelref svm-predict [options] test_file model_file output_file

libsvm's svm-predict for kernelref model files (written by kernelref svm-train
or kernelref fit); test_file is in libsvm's format.

options:
-b probability_estimates: whether to predict probability estimates, 0 or 1 (default 0)
-q : quiet mode (no outputs)

example:
  kernelref svm-predict heart_scale.t heart.krm heart.predictions
"""


class _Quiet:
    quiet, verbose = True, False


def parse_train(argv):
    """libsvm's argument list: (options, class weights, data file, model file)."""
    if not argv:
        raise UsageError(f"svm-train: give training_set_file.\n\n{TRAIN_USAGE}")
    if argv[0] in ("-h", "--help"):
        raise _Help(TRAIN_USAGE)
    options = {meaning: default for meaning, _, default in TRAIN_FLAGS.values()}
    weights, quiet, i = {}, False, 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        flag = argv[i]
        if flag == "-q":
            quiet, i = True, i + 1
            continue
        if i + 1 >= len(argv):
            raise UsageError(f"svm-train: {flag} needs a value.\n\n{TRAIN_USAGE}")
        value = argv[i + 1]
        if flag.startswith("-w") and flag != "-w":
            weights[_label(flag[2:])] = _convert(float, value, flag)
        elif flag in TRAIN_FLAGS:
            meaning, kind, _ = TRAIN_FLAGS[flag]
            options[meaning] = _convert(kind, value, flag)
        else:
            raise UsageError(f"svm-train: unknown option {flag}.\n\n{TRAIN_USAGE}")
        i += 2
    files = argv[i:]
    if len(files) not in (1, 2):
        raise UsageError(
            f"svm-train: give training_set_file [model_file]; got {files}.\n\n"
            f"{TRAIN_USAGE}"
        )
    model_file = (
        files[1] if len(files) == 2 else files[0].rstrip("/").split("/")[-1] + ".model"
    )
    _check_ranges(options)
    return options, weights, quiet, files[0], model_file


class _Help(Exception):
    """--help: print the text and exit 0."""


def _convert(kind, text, flag):
    try:
        return kind(text)
    except ValueError:
        raise UsageError(
            f"svm-train: {flag} takes {'an integer' if kind is int else 'a number'}"
            f"; got {text!r}."
        ) from None


def _label(text):
    number = float(text) if text.lstrip("+-").replace(".", "", 1).isdigit() else None
    if number is None:
        raise UsageError(
            f"svm-train: -w{text}: the class label after -w must be a number, "
            "as in -w1 2."
        )
    return int(number) if number.is_integer() else number


def _check_ranges(options):
    if options["svm_type"] not in SVM_TYPES:
        raise UsageError(f"svm-train: -s {options['svm_type']}: svm_type is 0 to 4.")
    if options["kernel_type"] not in KERNEL_TYPES:
        raise UsageError(
            f"svm-train: -t {options['kernel_type']}: kernel_type is 0 to 4."
        )
    if options["n_fold"] == 1 or options["n_fold"] < 0:
        raise UsageError("svm-train: -v n needs n >= 2 folds.")
    if options["shrinking"] not in (0, 1) or options["probability"] not in (0, 1):
        raise UsageError("svm-train: -h and -b take 0 or 1.")


def build_estimator(options, weights):
    """The estimator libsvm's options describe."""
    from kernelref import svm

    name = SVM_TYPES[options["svm_type"]]
    params = {
        "kernel": KERNEL_TYPES[options["kernel_type"]],
        "degree": options["degree"],
        "gamma": "auto" if options["gamma"] is None else options["gamma"],
        "coef0": options["coef0"],
        "tol": options["epsilon_tol"],
        "shrinking": bool(options["shrinking"]),
        "cache_size": options["cachesize"],
    }
    if name in ("SVC", "SVR", "NuSVR"):
        params["C"] = options["cost"]
    if name in ("NuSVC", "OneClassSVM", "NuSVR"):
        params["nu"] = options["nu"]
    if name == "SVR":
        params["epsilon"] = options["epsilon"]
    if weights:
        if name not in ("SVC", "NuSVC"):
            raise UsageError(
                "svm-train: -wi weights apply to classification (-s 0 or 1)."
            )
        params["class_weight"] = weights
    estimator = getattr(svm, name)(**params)
    if options["probability"] and name in ("SVC", "NuSVC"):
        return svm.PlattCalibrated(estimator, cv=5, random_state=0)
    return estimator


#: the estimators' parameters as libsvm's flags set them, for the messages
PARAMETER_FLAGS = {
    "C": "-c",
    "nu": "-n",
    "epsilon": "-p",
    "tol": "-e",
    "gamma": "-g",
    "degree": "-d",
    "coef0": "-r",
}


@contextlib.contextmanager
def _flag_fix(argv):
    """An estimator refuses a parameter by its name ('C must be in (0, inf]'):
    in svm-train it came from a flag, a wrong command line naming the flag."""
    try:
        yield
    except ValueError as error:
        text = str(error).removeprefix("Polynomial: ").removeprefix("Sigmoid: ")
        flag = _flag_of(text, argv)
        if flag is None:
            raise
        value = argv[len(argv) - 1 - argv[::-1].index(flag) + 1]  # the last given
        raise UsageError(f"svm-train: {flag} {value}: {text}") from error


def _flag_of(text, argv):
    """The flag in `argv` that set the parameter a message refuses, or None."""
    weight = re.match(r"class_weight\[(.+?)\] must ", text)
    if weight:
        given = [a for a in argv if a.startswith("-w") and a != "-w"]
        return next((a for a in given if repr(_label(a[2:])) == weight[1]), None)
    for name, flag in PARAMETER_FLAGS.items():
        if text.startswith(f"{name} must ") and flag in argv:
            return flag
    return None


def svm_train(argv):
    try:
        options, weights, quiet, data_file, model_file = parse_train(argv)
    except _Help as help_text:
        print(help_text)
        return 0
    _check_file(data_file, "svm-train: training_set_file")
    check_writable(model_file, "svm-train: model_file", [("training", data_file)])
    estimator = build_estimator(options, weights)
    X, y = (
        _training_data(data_file, estimator)
        if options["kernel_type"] != 4
        else _precomputed(data_file)
    )
    y = _class_labels(y) if estimator._estimator_type == "classifier" else y
    with _flag_fix(argv):
        if options["n_fold"]:
            return _cross_validate(estimator, X, y, options["n_fold"], quiet)
        if type(estimator).__name__ == "OneClassSVM":
            estimator.fit(X)
        else:
            estimator.fit(X, y)
    estimator.save(
        model_file,
        provenance={
            "data": data.fingerprint(data_file),
            "command": " ".join(["kernelref", "svm-train"] + list(argv)),
        },
    )
    if not quiet:
        print(f"kernelref: wrote {model_file}", file=sys.stderr)
    return 0


def _check_file(path, name):
    """A data or model file that is not there, refused naming it."""
    if not os.path.isfile(path):
        what = "a directory, not a file" if os.path.isdir(path) else "no such file"
        raise UsageError(f"{name} {path}: {what}; check the path.")


def _training_data(path, estimator):
    """X sparse, as libsvm keeps it, when the file is mostly zeros and the
    estimator takes sparse input (the SVMs on the linear, polynomial, RBF and
    sigmoid kernels); dense otherwise."""
    return data.read_libsvm_as(path, type(estimator).__name__ != "PlattCalibrated")


def _precomputed(path):
    """libsvm's precomputed training file: line i reads ``label 0:i 1:K(x_i,
    x_1) ... L:K(x_i, x_L)``, the serial numbers 1 to L in line order (the
    order in which libsvm's documentation writes them; another order would
    need the serials kept in the model to predict)."""
    X, y = data.read_libsvm(path, sparse=True, first=0)
    K = _kernel_columns(X, X.shape[1] - 1, path)
    serials = X[:, [0]].toarray().ravel()
    wrong = np.flatnonzero(serials != np.arange(1, len(y) + 1))
    if wrong.size:
        i = int(wrong[0])
        raise data.DataError(
            f"{path}: with -t 4 (precomputed kernel) line i of the file begins "
            f"'label 0:i', its serial number, i = 1, 2, ... in order; data line "
            f"{i + 1} has 0:{serials[i]:g}. Write the kernel values of x_i as "
            "'0:i 1:K(x_i,x_1) ... L:K(x_i,x_L)'."
        )
    if K.shape[1] != len(y):
        raise data.DataError(
            f"{path}: with -t 4 (precomputed kernel) the file is the training "
            f"kernel matrix: {len(y)} lines of K(x_i, x_1) ... K(x_i, x_{len(y)}); "
            f"its largest index is {K.shape[1]}, not {len(y)}."
        )
    return K, y


def _kernel_columns(X, n_train, path):
    """K(x, x_1) ... K(x, x_L) of a precomputed file read from index 0 (CSR):
    the columns after the serial number, L = `n_train` of them (a line may end
    early where the last values are 0, as libsvm writes them). A line without
    its ``0:`` serial number is refused, as libsvm refuses it: the file is
    then most likely one of features, not of kernel values."""
    first = X.indices[X.indptr[:-1]] if X.nnz else np.array([])
    missing = np.flatnonzero((np.diff(X.indptr) == 0) | (first != 0))
    if missing.size:
        raise data.DataError(
            f"{path}: data line {missing[0] + 1} does not begin with 0:i; with "
            "-t 4 (precomputed kernel) each line reads 'label 0:i 1:K(x,x_1) ... "
            f"{n_train}:K(x,x_{n_train})', i the sample's serial number."
        )
    K = X[:, 1:].toarray()
    if K.shape[1] > n_train:
        raise data.DataError(
            f"{path}: with -t 4 (precomputed kernel) each line gives K(x, x_j) for "
            f"the {n_train} training samples x_j, at indices 1 to {n_train}; this "
            f"file has index {K.shape[1]}."
        )
    return np.hstack([K, np.zeros((len(K), n_train - K.shape[1]))])


def _class_labels(y):
    """libsvm's labels are numbers; integral ones are kept as integers."""
    return y.astype(int) if np.all(y == np.round(y)) else y


def folds(y, n_fold, classification, seed=0):
    """Fold index of each sample: shuffled, and for classification stratified
    (each class dealt round the folds), as libsvm's svm_cross_validation."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(y), dtype=int)
    groups = (
        [np.flatnonzero(y == c) for c in np.unique(y)]
        if classification
        else [np.arange(len(y))]
    )
    start = 0
    for members in groups:
        members = rng.permutation(members)
        fold[members] = (start + np.arange(len(members))) % n_fold
        start += len(members)
    return fold


def _cross_validate(estimator, X, y, n_fold, quiet):
    from kernelref.base import ParamsMixin

    classification = estimator._estimator_type == "classifier"
    precomputed = getattr(estimator, "kernel", None) == "precomputed"
    fold = folds(y, n_fold, classification)
    predicted = np.empty(len(y), dtype=y.dtype if classification else float)
    args = _Quiet() if quiet else type("A", (), {"quiet": False, "verbose": False})()
    with runtime.progress_bar(args, n_fold, "cross-validation") as bar:
        for k in range(n_fold):
            train, test = fold != k, fold == k
            # a precomputed X holds K(x, x_j): only the training fold's columns
            columns = train if precomputed else slice(None)
            model = type(estimator)(**ParamsMixin.get_params(estimator, deep=False))
            model.fit(X[train][:, columns], y[train])
            predicted[test] = model.predict(X[test][:, columns])
            bar.update(1)
    if classification or _labels_out(estimator):
        print(f"Cross Validation Accuracy = {100.0 * np.mean(predicted == y):g}%")
    else:
        mse, r2 = regression_scores(y, predicted)
        print(f"Cross Validation Mean squared error = {mse:g}")
        print(f"Cross Validation Squared correlation coefficient = {r2:g}")
    return 0


def _labels_out(model):
    """A one-class SVM predicts labels, +1 and -1: libsvm scores it, as a
    classifier, by accuracy against the test file's labels."""
    return getattr(model, "_estimator_type", None) == "outlier_detector"


def regression_scores(y, predicted):
    """libsvm's mean squared error and squared correlation coefficient."""
    n = len(y)
    mse = float(np.mean((predicted - y) ** 2))
    sv, sy = predicted.sum(), y.sum()
    svv, syy, svy = (predicted**2).sum(), (y**2).sum(), (predicted * y).sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        # constant targets or predictions: 0/0, nan, as libsvm prints it
        r2 = ((n * svy - sv * sy) ** 2) / ((n * svv - sv**2) * (n * syy - sy**2))
    return mse, float(r2)


def svm_predict(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(PREDICT_USAGE)
        return 0 if argv else 2
    probability, quiet, i = 0, False, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] == "-q":
            quiet, i = True, i + 1
        elif argv[i] == "-b" and i + 1 < len(argv) and argv[i + 1] in ("0", "1"):
            probability, i = int(argv[i + 1]), i + 2
        else:
            raise UsageError(
                f"svm-predict: unknown option {argv[i]} (options are -b 0|1 and "
                f"-q).\n\n{PREDICT_USAGE}"
            )
    if len(argv) - i != 3:
        raise UsageError(
            f"svm-predict: give test_file model_file output_file.\n\n{PREDICT_USAGE}"
        )
    test_file, model_file, output_file = argv[i:]
    _check_file(test_file, "svm-predict: test_file")
    check_writable(
        output_file,
        "svm-predict: output_file",
        [("test", test_file), ("model", model_file)],
    )
    model = io.load(model_file)
    if not hasattr(model, "predict"):
        raise UsageError(
            f"svm-predict: {model_file} holds a {type(model).__name__}, which "
            "predicts no labels or values (it transforms); `kernelref predict "
            f"{model_file} --data {test_file} --out FILE` writes its projection."
        )
    X, y = _test_data(test_file, model)
    classification = getattr(model, "_estimator_type", None) == "classifier"
    if probability:
        if not hasattr(model, "predict_proba"):
            raise UsageError(
                f"svm-predict: {model_file} holds no probability model; train "
                "it with svm-train -b 1, or predict with -b 0."
            )
        P = model.predict_proba(X)
        predicted = model.classes_[np.argmax(P, axis=1)]
        _write_probabilities(output_file, model.classes_, predicted, P)
    else:
        predicted = model.predict(X)
        write_output(output_file, predicted)
    if quiet:
        return 0
    if classification or _labels_out(model):
        correct = int(np.sum(predicted == _class_labels(y)))
        print(
            f"Accuracy = {100.0 * correct / len(y):g}% ({correct}/{len(y)}) "
            "(classification)"
        )
    else:
        mse, r2 = regression_scores(y, np.asarray(predicted, dtype=float))
        print(f"Mean squared error = {mse:g} (regression)")
        print(f"Squared correlation coefficient = {r2:g} (regression)")
    return 0


def _test_data(path, model):
    """X and y of svm-predict's test file: a sparse file stays sparse for a
    model that takes sparse X; for a model of -t 4, the kernel values after the
    serial number (libsvm's ``label 0:? 1:K(x,x_1) ...``)."""
    width = getattr(model, "n_features_in_", None)
    # a -b 1 model (PlattCalibrated) is precomputed when the SVM it wraps is
    if getattr(getattr(model, "estimator", model), "kernel", None) == "precomputed":
        X, y = data.read_libsvm(path, sparse=True, first=0)
        return _kernel_columns(X, width, path), y
    return data.read_libsvm_as(path, takes_sparse(model), width)


def _write_probabilities(path, classes, predicted, P):
    with open(path, "w", encoding="utf-8") as f:
        f.write("labels " + " ".join(str(c) for c in classes) + "\n")
        f.writelines(
            f"{label} " + " ".join(f"{p:g}" for p in row) + "\n"
            for label, row in zip(predicted, P)
        )
