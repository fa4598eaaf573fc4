"""The ``kernelref`` command: train, evaluate and predict without writing Python.

Exit status 0 on success, 2 for a wrong command line, 1 for a failure (bad
data, a damaged model file, an unreachable cluster); every error names the
file, line, column or argument at fault and the fix.
"""

import argparse
import os
import sys
import textwrap
import traceback
import warnings

from kernelref.cli import commands, libsvm, runtime
from kernelref.cli.data import DataError
from kernelref.cli.models import UsageError

DESCRIPTION = """\
Kernel machines from the command line: fit a model on a data file, save it as a
kernelref model file (JSON and raw arrays, never pickle), predict and evaluate
with it, build Gram stores, and train SVMs with libsvm's options.

Data files: CSV (.csv/.tsv, header row or not; --target names the target
column, or numbers it from 0, and --weight a column of sample weights),
libsvm/svmlight format, .npy/.npz (arrays X and y), Zarr (an array, or a group
with arrays X and y).
"""

EXAMPLES = r"""examples:
  kernelref fit SVC --data train.csv --target label --param C=10 --param gamma=0.5 \
      --out svc.krm
  kernelref fit KernelRidge --data train.csv --target y --weight w --param lam=0.1 \
      --out ridge.krm
  kernelref predict svc.krm --data test.csv --target label --out predictions.csv
  kernelref evaluate svc.krm --data test.csv --target label
  kernelref fit KernelRidge --data big.zarr --backend dask --scheduler tcp://host:8786 \
      --store /shared/gram.zarr --param lam=0.1 --out ridge.krm
  kernelref fit GaussianProcessRegressor --data t.csv --target y \
      --param 'kernel={"class": "RBF", "params": {"gamma": 0.5}}' --out gp.krm
  kernelref gram --data X.npy --kernel rbf --param gamma=0.1 --store gram.zarr
  kernelref info svc.krm
  kernelref svm-train -s 0 -t 2 -g 0.5 -c 10 heart_scale heart.krm
  kernelref svm-predict heart_scale.t heart.krm out.txt
"""


def _models_text():
    """The help's list of models, read off the library (every estimator the
    command line offers, meta-estimators included)."""
    from kernelref.cli.models import reference_estimators

    text = (
        "Models: the estimators of kernelref and kernelref.svm, "
        + ", ".join(sorted(reference_estimators()))
        + "; with --backend dask, those of them that backends.dask also offers. "
        "Run `kernelref svm-train -h` for libsvm's options."
    )
    return "\n" + textwrap.fill(text, 80, break_on_hyphens=False) + "\n"


#: where the help names the models, filled in when the help is shown (reading
#: them imports kernelref.svm, which a command that needs no SVM does not)
MODELS = "{models}"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")

    def format_help(self):
        if self.epilog and MODELS in self.epilog:
            self.epilog = self.epilog.replace(MODELS, _models_text())
        return super().format_help()


def _data_options(
    parser,
    target_help="the target column: a header name or a number from 0",
    weight_help=None,
):
    parser.add_argument("--data", required=True, metavar="FILE", help="the data file")
    parser.add_argument("--target", metavar="COLUMN", help=target_help)
    if weight_help is not None:
        parser.add_argument("--weight", metavar="COLUMN", help=weight_help)
    parser.add_argument(
        "--header",
        choices=("auto", "yes", "no"),
        default="auto",
        help="whether a CSV file's first row names the columns (default: auto)",
    )


def _cluster_options(parser):
    group = parser.add_argument_group("cluster (with --backend dask)")
    group.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a running scheduler, e.g. tcp://10.0.0.1:8786 or tls://...; "
        "default: an embedded local cluster",
    )
    group.add_argument(
        "--scheduler-file",
        metavar="FILE",
        help="the scheduler's JSON file (dask scheduler --scheduler-file)",
    )
    group.add_argument(
        "--tls-ca-file", metavar="PEM", help="the cluster's CA certificate"
    )
    group.add_argument("--tls-cert", metavar="PEM", help="this client's certificate")
    group.add_argument("--tls-key", metavar="PEM", help="this client's private key")
    group.add_argument(
        "--timeout",
        type=float,
        default=runtime.DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"give up on an unreachable scheduler after this long "
        f"(default {runtime.DEFAULT_TIMEOUT:g})",
    )


def _verbosity(parser):
    parser.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no progress bars or notes, results only",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="log what runs to stderr"
    )


def _positive_int(text):
    """An argument that counts something: an integer ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 1, got {text!r}")
    return value


def build_parser():
    parser = _Parser(
        prog="kernelref",
        description=DESCRIPTION,
        epilog=EXAMPLES + MODELS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser(
        "fit",
        help="fit a model on a data file and save it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES + MODELS,
    )
    p.add_argument(
        "model", metavar="MODEL", help="an estimator's name, e.g. SVC or RVR"
    )
    _data_options(
        p,
        weight_help="a column of sample weights, named or numbered as --target and "
        "removed from the features like it (.npz/Zarr groups: an array's name; not "
        "for libsvm files): fit(X, y, sample_weight=w), for the models whose fit "
        "takes sample_weight (KernelRidge and the SVMs); the model file records "
        "the column's name, not the weights",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a constructor parameter (repeat); values are JSON or text, a kernel "
        'is a spec {"class": ..., "params": ...}',
    )
    p.add_argument(
        "--backend",
        default="reference",
        metavar="NAME",
        help="reference (in this process, the default) or an installed backend: "
        "dask (pip install 'kernelref[dask]'); backends register in the entry "
        "point group kernelref.backends",
    )
    p.add_argument("--store", metavar="DIR", help="the backend's store directory")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the backend's store (--store, or MODEL_FILE.store) and fit "
        "afresh. Without it a store of this very fit is resumed, and one made for "
        "other data or another fit refused. A model file saved with the replaced "
        "store no longer predicts",
    )
    p.add_argument(
        "--out", required=True, metavar="MODEL_FILE", help="where to save the model"
    )
    _cluster_options(p)
    _verbosity(p)

    p = sub.add_parser("predict", help="predict with a saved model")
    p.add_argument("model_file", metavar="MODEL_FILE")
    _data_options(
        p,
        "a column to drop from the features (the target, if the file has one)",
        "another column to drop (the weights, if the file has them)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help=".npy, .csv (with a header) or text (one row per line)",
    )
    p.add_argument("--proba", action="store_true", help="class probabilities")
    p.add_argument(
        "--std", action="store_true", help="predictive mean and standard deviation"
    )
    _cluster_options(p)
    _verbosity(p)

    p = sub.add_parser("evaluate", help="score a saved model on labelled data")
    p.add_argument("model_file", metavar="MODEL_FILE")
    _data_options(
        p,
        weight_help="a column of sample weights, dropped from the features: the "
        "scores weighted by it (weighted_accuracy, or weighted_rmse and "
        "weighted_r2) are reported beside the unweighted ones, and an SVM fitted "
        "with --weight gets its KKT certificate on its training data for them",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _cluster_options(p)
    _verbosity(p)

    p = sub.add_parser("gram", help="build a Gram store (Zarr) on a Dask cluster")
    _data_options(p, "a column to drop from the features")
    p.add_argument(
        "--kernel",
        default="rbf",
        help="linear, poly, rbf, laplacian, sigmoid, or a kernel spec (JSON)",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="gamma=, degree= or coef0= of a named kernel",
    )
    p.add_argument("--store", required=True, metavar="DIR")
    p.add_argument(
        "--chunk-size",
        type=_positive_int,
        default=1024,
        help="rows and columns of the store's square chunks (default 1024)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a store built for other data or another kernel",
    )
    _cluster_options(p)
    _verbosity(p)

    p = sub.add_parser("info", help="what a model file or store holds")
    p.add_argument("path", metavar="MODEL_FILE|STORE")
    _verbosity(p)

    sub.add_parser(
        "svm-train",
        help="libsvm's svm-train (run with -h for its options)",
        add_help=False,
    )
    sub.add_parser(
        "svm-predict",
        help="libsvm's svm-predict (run with -h for its options)",
        add_help=False,
    )
    return parser


COMMANDS = {
    "fit": commands.fit,
    "predict": commands.predict,
    "evaluate": commands.evaluate,
    "gram": commands.gram,
    "info": commands.info,
}


def main(argv=None):
    """Run the command line; returns the exit status (the console script exits with
    it)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _run(argv)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """A warning as one line of the command's own, without the source line of
    the library that raised it (a ConvergenceWarning says what to change)."""
    print(f"kernelref: warning: {category.__name__}: {message}", file=sys.stderr)


def _run(argv):
    try:
        if argv and argv[0] == "svm-train":
            return libsvm.svm_train(argv[1:])
        if argv and argv[0] == "svm-predict":
            return libsvm.svm_predict(argv[1:])
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help()
            return 2
        with runtime.backend_log(args):
            return COMMANDS[args.command](args)
    except UsageError as error:
        print(f"kernelref: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kernelref: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of stdout went away (`kernelref info ... | head`): stop
        # quietly, and keep the interpreter's last flush from failing again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (
        DataError,
        ValueError,
        TypeError,
        OSError,
        RuntimeError,
        ImportError,
    ) as error:
        if "--verbose" in argv:
            traceback.print_exc()
        print(f"kernelref: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 (the last resort: a message, not a trace)
        if "--verbose" in argv:
            traceback.print_exc()
        # distributed's KilledWorker (or the backends' explained subclass of it),
        # told by name: kernelref imports no backend
        if any(c.__name__ == "KilledWorker" for c in type(error).__mro__):
            print(f"kernelref: error: {killed_workers(error)}", file=sys.stderr)
            return 1
        print(
            f"kernelref: error: {type(error).__name__}: {error} (unexpected; rerun "
            "with --verbose for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


def killed_workers(error):
    """What a KilledWorker means for the user, and the fix: the workers that ran
    a task all died, on a cluster most often for want of memory."""
    error = getattr(error, "original", error)  # distributed's words alone
    return (
        f"the cluster's workers died running a task ({error}) Most often a worker "
        "ran out of memory: its log then says 'exceeded 95% memory budget'. Give "
        "each worker more memory (dask worker --memory-limit), or make the tasks "
        "smaller: a smaller --param chunk_size (its tasks hold blocks of the "
        "kernel matrix with chunk_size rows)."
    )


if __name__ == "__main__":
    sys.exit(main())
