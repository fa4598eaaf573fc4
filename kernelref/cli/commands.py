"""The subcommands fit, predict, evaluate, gram and info."""

import contextlib
import copy
import json
import os
import pathlib
import shutil
import sys
import warnings

import numpy as np

from kernelref import io
from kernelref.base import takes_sparse
from kernelref.cli import data, models, plugins, runtime
from kernelref.cli.models import UsageError


def say(args, text):
    """A result line on stdout (kept under --quiet: results are the point)."""
    print(text)


def note(args, text):
    """A note on stderr, silenced by --quiet."""
    if not args.quiet:
        print(f"kernelref: {text}", file=sys.stderr)


def log(args, text):
    if args.verbose:
        print(f"kernelref: {text}", file=sys.stderr)


# -- fit -------------------------------------------------------------------------------
def fit(args):
    cls = models.estimator_class(args.model, args.backend)
    _check_weight(cls, args)
    params = models.parse_params(args.param, cls, args.backend)
    check_writable(args.out, keep=[("--data", args.data)])
    owner, own = _backend_part(cls, params)
    accepted = owner._param_names()
    if args.store is not None:
        if "store" not in accepted:
            raise UsageError(
                f"--store: {cls.__module__}.{cls.__name__} keeps no store; "
                "drop --store or use --backend dask."
            )
        own["store"] = args.store
    elif "store" in accepted and own.get("store") is None:
        # a backend model may refer to arrays in its store (a GP's factor), so the
        # store must outlive this process: keep it beside the model file
        own["store"] = args.out + ".store"
        note(args, f"the backend's store is {own['store']} (choose with --store)")
    if args.overwrite and own.get("store") is None:
        raise UsageError(
            f"--overwrite: {cls.__module__}.{cls.__name__} keeps no store; drop "
            "--overwrite."
        )
    if own.get("store") is not None:
        _check_foreign(own["store"], "--store" if args.store else "the store")
    cluster = plugins.on_cluster(args.backend)
    client = runtime.connect(args) if cluster else _refuse_cluster(args)
    try:
        if "progress" in accepted and "progress" not in own:
            own["progress"] = (
                (False if args.quiet else None)
                if not args.verbose
                else runtime.progress_callback(runtime._NoBar(), args)
            )
        if owner is not cls:
            params["estimator"].set_params(**own)
        estimator = cls(**params)
        # sparse data files stay sparse for a model that takes scipy.sparse X
        X, y, w = data.read_weighted(
            args.data,
            args.target,
            args.weight,
            args.header,
            lazy=cluster,
            sparse=takes_sparse(estimator),
        )
        _check_target(cls, y, args)
        shown = ", ".join(
            f"{k}={_without_progress(v)!r}"
            for k, v in params.items()
            if k != "progress"
        )
        # (not repr(estimator): --verbose's progress= is a function's address)
        log(args, f"fitting {cls.__name__}({shown}) on {args.data} ({_shape(X)})")
        # a backend fit with a progress= parameter shows its own bar
        steps = 0 if "progress" in accepted else 1
        if args.overwrite:
            _clear_store(own["store"])
        with (
            runtime.progress_bar(args, steps, f"fit {cls.__name__}") as bar,
            _store_fix(own.get("store")),
            _resume_note(
                args, own.get("store") if "resume" in accepted else None, estimator
            ),
            _param_fix(models.parse_params(args.param, cls, args.backend)),
            _data_fix(args),
        ):
            weighted = {} if w is None else {"sample_weight": w}
            estimator.fit(X, **weighted) if y is None else estimator.fit(
                X, y, **weighted
            )
            bar.update(1)
        log(args, f"fitted: {_fitted_summary(estimator)}")
        _drop_progress(estimator)
        estimator.save(
            args.out,
            provenance={
                "data": data.fingerprint(args.data),
                "command": _command_line(),
                **_columns(args),
            },
        )
    finally:
        if client is not None:
            client.close()
    say(args, f"saved {type(estimator).__name__} to {args.out}")
    return 0


def _backend_part(cls, params):
    """The class whose store and progress --store, --overwrite and the bar set,
    and its arguments: `cls` and `params` themselves, or for a meta-estimator
    wrapping a backend's estimator (PlattCalibrated of the Dask SVC, which gives
    each of its fits a sub-directory of the store) the wrapped estimator's
    class and its store and progress as given (put into it before the fit)."""
    inner = params.get("estimator")
    if "store" in cls._param_names() or not hasattr(inner, "get_params"):
        return cls, params
    given = inner.get_params(deep=False)
    if "store" not in given:
        return cls, params
    return type(inner), {
        k: given[k] for k in ("store", "progress") if given.get(k) is not None
    }


def _without_progress(value):
    """A wrapped estimator as --verbose shows it: without its progress= callback."""
    if not callable(getattr(value, "progress", None)):
        return value
    value = copy.copy(value)
    value.progress = None
    return value


def _drop_progress(estimator):
    """--verbose's logger belongs to this run, not to the model, and a model file
    holds data only (saving a function fails): removed from the model and from
    the binary models a one-vs-rest model keeps (they were given it too)."""
    if callable(getattr(estimator, "progress", None)):
        estimator.set_params(progress=None)
    for inner in getattr(estimator, "estimators_", None) or ():
        if hasattr(inner, "get_params"):
            _drop_progress(inner)


#: the formats of the backends' stores that --overwrite may remove (the Dask
#: backend's FitStore and GramStore); kernelref does not import its backends
STORE_FORMATS = ("kernelref.fit_store", "kernelref.gram_store")


def _clear_store(path):
    """--overwrite: remove the store at `path` (if any) when its zarr.json names
    a kernelref store format, or when it is a directory of such stores only (a
    calibration's, one per fit); any other directory is never cleared."""
    path = pathlib.Path(path)
    if not path.exists():
        return
    if not _is_store_tree(path):
        raise UsageError(
            f"--overwrite: {path} is not a kernelref store (a fit store or a Gram "
            "store), and only those are replaced; remove it yourself or give "
            "another --store."
        )
    shutil.rmtree(path)


def _is_store_tree(path):
    """A kernelref store, or a directory holding nothing but such trees."""
    if not (path / "zarr.json").exists():
        children = list(path.iterdir()) if path.is_dir() else []
        return bool(children) and all(_is_store_tree(child) for child in children)
    try:
        attributes = json.loads((path / "zarr.json").read_text())["attributes"]
        kind = attributes.get("format")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        kind = None
    return kind in STORE_FORMATS


def _check_foreign(path, option):
    """A store path that is a file, or a directory of files none of which a
    store wrote (no zarr.json anywhere in it), is refused before any work: the
    backend refuses it too, but only once its cluster has started."""
    path = pathlib.Path(path)
    if path.is_file():
        found = "a file"
    elif path.is_dir() and any(path.iterdir()):
        if any("zarr.json" in files for _, _, files in os.walk(path)):
            return
        found = "a directory of other files"
    else:
        return
    raise UsageError(
        f"{option} {path}: it is {found}, not a kernelref store; give a new or "
        "empty directory as --store (a store is never written among other files)."
    )


@contextlib.contextmanager
def _store_fix(store):
    """A backend refuses a store made for other data with the fixes of its
    Python API; on the command line the fix is --overwrite."""
    try:
        yield
    except ValueError as error:
        mismatch = getattr(error, "mismatch", None)  # how the store differs
        if store is not None and mismatch is not None:
            raise ValueError(
                f"{mismatch}; add --overwrite to replace the store {store} (a model "
                "file saved with it may need it to predict), or give another --store."
            ) from error
        if store is None or "overwrite=True" not in str(error):
            raise
        raise ValueError(
            f"{error} On the command line: add --overwrite to replace the store "
            f"{store}, or give another --store."
        ) from error


@contextlib.contextmanager
def _resume_note(args, store, estimator=None):
    """An interrupted fit that checkpoints into `store` says how to go on. A
    calibration whose folds are drawn at random (``cv`` with random_state=None)
    draws other folds when run again, so its folds' checkpoints are not reused:
    it says so, and how to make it resumable."""
    try:
        yield
    except KeyboardInterrupt:
        if store is None:
            pass
        elif hasattr(estimator, "cv") and estimator.random_state is None:
            note(
                args,
                "the folds of this calibration are drawn afresh at each run "
                "(random_state=None), so the same command fits them anew; give "
                "--param random_state=0 (any integer) to make it resumable.",
            )
        else:
            note(
                args,
                f"the fit's last checkpoint is in {store}: run the same command "
                "again to resume it (--overwrite starts afresh).",
            )
        raise


@contextlib.contextmanager
def _param_fix(given):
    """An estimator refuses a parameter by its name ('C must be in (0, inf]...'):
    on the command line it came from --param NAME, a wrong command line."""
    try:
        yield
    except (ValueError, TypeError) as error:
        text = str(error)
        named = [name for name in given if text.startswith(f"{name} must ")]
        if not named or isinstance(error, UsageError):
            raise
        if "kernelref.kernels.Kernel" in text:  # a Kernel object, in Python
            text += f" {KERNEL_SPEC_HINT}"
        raise UsageError(f"--param {named[0]}: {text}") from error


#: how a Kernel object is given on the command line
KERNEL_SPEC_HINT = (
    "On the command line a kernel is given as its spec, e.g. --param "
    '\'kernel={"class": "RBF", "params": {"gamma": 0.5}}\'.'
)


@contextlib.contextmanager
def _data_fix(args):
    """An estimator refuses its input by the argument's name ('X contains NaN
    ... at row 3', 'y has 50 rows but X has 60'): on the command line those
    came from --data (the weights from its --weight column), which the
    message then names."""
    try:
        yield
    except (ValueError, TypeError) as error:
        text = str(error)
        if isinstance(error, UsageError) or not text.startswith(_DATA_NAMES):
            raise
        where = f"--data {args.data}"
        if text.startswith("sample_weight ") and args.weight is not None:
            where = f"--weight {args.weight} of {args.data}"
        raise data.DataError(f"{where}: {text}") from error


#: how the estimators name what the command line reads from --data
_DATA_NAMES = ("X ", "y ", "sample_weight ")


def _fitted_summary(estimator):
    """Iterations, model size and evidence, where the estimator has them."""
    parts = []
    for name in (
        "n_iter_",
        "support_",
        "relevance_",
        "log_marginal_likelihood_value_",
        "log_evidence_",
    ):
        value = getattr(estimator, name, None)
        if value is not None:
            if name in ("support_", "relevance_"):
                shown = len(value)
            else:
                shown = np.ravel(value)
                shown = f"{shown[0]:.6g}" if shown.size == 1 else shown.tolist()
            parts.append(f"{name.rstrip('_')}={shown}")
    return ", ".join(parts) or "done"


def _check_weight(cls, args):
    """--weight: refused, before any work, for an estimator whose fit takes no
    sample_weight, and when it names the target's column."""
    if args.weight is None:
        return
    if not models.takes_weights(cls):
        raise UsageError(
            f"--weight: {cls.__name__} (--backend {args.backend}) takes no sample "
            f"weights; the models that do are "
            f"{models.weighted_estimators(args.backend)}. Drop --weight or fit one "
            "of them."
        )
    if args.weight == args.target:
        raise UsageError(
            f"--weight {args.weight} is the target column; the weights must be a "
            "column of their own."
        )


def _columns(args):
    """The target and weight columns, and the feature columns' names of a CSV
    file with a header, for the model file's provenance (the weights
    themselves are not kept: the fitted model is all the file holds)."""
    names = data.feature_names(args.data, args.target, args.weight, args.header)
    return {
        name: value
        for name, value in (
            ("target", args.target),
            ("weight", args.weight),
            ("features", names),
        )
        if value is not None
    }


def _check_target(cls, y, args):
    if y is None and cls._estimator_type in ("classifier", "regressor"):
        raise UsageError(
            f"{cls.__name__} learns from targets: give --target COLUMN (a header "
            f"name or a column number from 0) for {args.data}."
        )


def _refuse_cluster(args):
    if args.scheduler or args.scheduler_file:
        raise UsageError(
            f"--scheduler/--scheduler-file: --backend {args.backend} runs on no "
            "cluster; use --backend dask (pip install 'kernelref[dask]')."
        )


def check_writable(path, option="--out", keep=()):
    """An output path that cannot be written, or that is one of the input files
    `keep` ((option, path) pairs: the data, the model), refused before any work
    (the input would be overwritten)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"{option} {path}: the directory {directory} does not exist.")
    if os.path.isdir(path):
        raise UsageError(f"{option} {path} is a directory; give a file name.")
    for given, other in keep:
        if os.path.exists(path) and os.path.exists(other):
            if os.path.samefile(path, other):
                raise UsageError(
                    f"{option} {path} is the {given} file, which writing would "
                    "overwrite; give another file name."
                )


def _shape(X):
    return f"{X.shape[0]} samples" + (
        f" × {X.shape[1]} features" if np.ndim(X) == 2 else ""
    )


def _command_line():
    return " ".join(["kernelref"] + sys.argv[1:])


# -- predict ---------------------------------------------------------------------------
def predict(args):
    """A backend model predicts on the cluster given (or the embedded one)."""
    with _cluster(args), _data_fix(args):
        return _predict(args)


@contextlib.contextmanager
def _cluster(args):
    client = runtime.connect(args)
    try:
        yield client
    finally:
        if client is not None:
            client.close()


def _predict(args):
    check_writable(args.out, keep=[("--data", args.data), ("model", args.model_file)])
    model = io.load(args.model_file)
    X, _, _ = _read(args, model)
    if args.proba and args.std:
        raise UsageError("give --proba or --std, not both.")
    if args.proba:
        if not hasattr(model, "predict_proba"):
            raise UsageError(
                f"{type(model).__name__} gives no probabilities; drop --proba. An "
                "SVM gives them Platt-calibrated: kernelref fit PlattCalibrated "
                '--param \'estimator={"estimator": "SVC", "params": {...}}\' '
                "--param random_state=0 (with --backend dask the SVMs of the "
                "folds and the final fit train on the cluster), or svm-train -b 1."
            )
        result, names = model.predict_proba(X), [f"p({c})" for c in model.classes_]
    elif args.std:
        try:
            mean, std = model.predict(X, return_std=True)
        except TypeError:
            raise UsageError(
                f"{type(model).__name__} gives no predictive standard "
                "deviation; drop --std."
            ) from None
        result, names = np.column_stack([mean, std]), ["mean", "std"]
    elif hasattr(model, "predict"):
        result, names = model.predict(X), ["prediction"]
    else:
        result = model.transform(X)
        names = [f"component_{k}" for k in range(1, np.shape(result)[1] + 1)]
        write_output(args.out, result, names)
        say(
            args,
            f"wrote the projections of {len(result)} samples on "
            f"{len(names)} components to {args.out}",
        )
        return 0
    write_output(args.out, result, names)
    say(args, f"wrote {len(result)} predictions to {args.out}")
    return 0


def write_output(path, result, names=None):
    """.npy, or text: CSV with a header for .csv, one row per line otherwise."""
    result = np.asarray(result)
    if path.lower().endswith(".npy"):
        np.save(path, result, allow_pickle=False)
        return
    rows = result.reshape(len(result), -1)
    with open(path, "w", encoding="utf-8") as f:
        if (
            path.lower().endswith(".csv")
            and names is not None
            and len(names) == rows.shape[1]
        ):
            f.write(",".join(names) + "\n")
        separator = "," if path.lower().endswith(".csv") else " "
        f.writelines(separator.join(_text(v) for v in row) + "\n" for row in rows)


def _text(value):
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return str(value)


def _read(args, model):
    """X, y, w of --data as `model` takes them: sparse files kept sparse when it
    takes scipy.sparse X, libsvm files padded to its number of features."""
    provenance = io.read_header(args.model_file).get("provenance", {})
    _check_dropped_columns(args, model, provenance)
    X, y, w = data.read_weighted(
        args.data,
        args.target,
        args.weight,
        args.header,
        sparse=takes_sparse(model),
        width=getattr(model, "n_features_in_", None),
    )
    _check_columns(args, model, X, provenance)
    _check_feature_names(args, provenance)
    return X, y, w


def _check_dropped_columns(args, model, provenance):
    """A CSV header that still has the model's target or weight column by name
    where this command keeps it as a feature: refused naming the option that
    drops it, before reading (a column of class names would otherwise be
    refused as 'not a number'). `provenance`: the model file's."""
    names = data.feature_names(args.data, header=args.header) or []
    kept = [
        option
        for option in ("target", "weight")
        if getattr(args, option) is None and provenance.get(option) in names
    ]
    if kept:
        what = " and ".join(f"{o} ({provenance[o]!r})" for o in kept)
        fix = " ".join(f"--{o} {provenance[o]}" for o in kept)
        n = getattr(model, "n_features_in_", None)
        fitted = "" if n is None else f", fitted on {n} features without it,"
        raise UsageError(
            f"{args.data} keeps as features the columns that {args.model_file}"
            f"{fitted} took as {what}: give {fix} here too, to drop them."
        )


def _check_feature_names(args, provenance):
    """A CSV file whose header names other feature columns, or the same in
    another order, than the model's training file: refused (the model would
    read each column as the one in its place), naming both lists."""
    fitted = provenance.get("features")
    given = data.feature_names(args.data, args.target, args.weight, args.header)
    if fitted is None or given is None or given == fitted:
        return
    if sorted(given) == sorted(fitted):
        fix = "put the columns in the model's order"
    else:
        fix = "give the columns the model was fitted on (and --target/--weight)"
    raise data.DataError(
        f"{args.data}: its feature columns are {_listed(given)}, but "
        f"{args.model_file} was fitted on {_listed(fitted)}, in that order; {fix}."
    )


def _check_columns(args, model, X, provenance):
    """Columns the model was fitted without (its --target or --weight) but that
    this command keeps as features: refused naming the option that drops them."""
    expected = getattr(model, "n_features_in_", None)
    if expected is None or np.ndim(X) != 2 or X.shape[1] <= expected:
        return
    missing = [
        f"--{option} {provenance[option]}"
        for option in ("target", "weight")
        if provenance.get(option) is not None and getattr(args, option) is None
    ]
    if missing and X.shape[1] - expected == len(missing):
        raise UsageError(
            f"{args.data} gives {X.shape[1]} features, but {args.model_file} was "
            f"fitted on {expected}, with {' and '.join(missing)} removed from its "
            f"columns: give {' '.join(missing)} here too."
        )


# -- evaluate --------------------------------------------------------------------------
def evaluate(args):
    with _cluster(args), _data_fix(args):
        return _evaluate(args)


def _evaluate(args):
    model = io.load(args.model_file)
    X, y, w = _read(args, model)
    if y is None:
        raise UsageError(
            f"evaluate compares predictions with targets: give --target COLUMN "
            f"for {args.data}."
        )
    s = None if w is None else _score_weights(w, args)
    report = {"model": type(model).__name__, "samples": len(y)}
    kind = getattr(model, "_estimator_type", None)
    if not hasattr(model, "predict"):
        raise UsageError(
            f"{type(model).__name__} predicts no targets to compare with "
            "(it transforms); `kernelref predict` writes its projection."
        )
    predicted = model.predict(X)
    if kind in ("classifier", "outlier_detector"):
        # an outlier detector's labels are +1 (inlier) and -1 (outlier)
        _check_labels(args, model, _like(y, predicted))
        report["accuracy"] = float(np.mean(predicted == _like(y, predicted)))
    else:
        _check_numeric_targets(args, model, y)
        residual = np.asarray(predicted, dtype=float) - np.asarray(y, dtype=float)
        report["rmse"] = float(np.sqrt(np.mean(residual**2)))
        report["r2"] = float(model.score(X, y))
    if s is not None:
        report.update(_weighted_scores(predicted, y, s, "rmse" not in report))
    for name in ("log_marginal_likelihood_value_", "log_evidence_"):
        if hasattr(model, name):
            # one number, or one per binary problem (a one-vs-rest RVC)
            value = np.ravel(np.asarray(getattr(model, name), dtype=float))
            report["log_evidence"] = (
                float(value[0]) if value.size == 1 else value.tolist()
            )
    if hasattr(model, "support_"):
        report["support_vectors"] = len(model.support_)
    if hasattr(model, "relevance_"):
        report["relevance_vectors"] = len(model.relevance_)
    report.update(_kkt(model, X, y, w, args))
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            say(
                args,
                f"{key}: {value:.6g}"
                if isinstance(value, float)
                else f"{key}: {value}",
            )
    return 0


def _check_labels(args, model, y):
    """Targets a classifier can never predict: all of them is the wrong column
    or the wrong model (accuracy 0 said nothing of the kind), refused; some of
    them (a class absent from the training data) counted as errors, with a note.
    An outlier detector's targets are +1 (inlier) and -1 (outlier)."""
    target = _target_name(args)
    given = np.unique(y)
    if getattr(model, "_estimator_type", None) == "outlier_detector":
        if not np.all(np.isin(given, (-1, 1))):
            raise data.DataError(
                f"{args.data}: {target} holds {_listed(given)}, but "
                f"{type(model).__name__} predicts +1 (inlier) and -1 (outlier); "
                "give a column of +1 and -1 (recode your labels so)."
            )
        return
    known = np.asarray(model.classes_)
    unknown = given[~np.isin(given, known)]
    if unknown.size == given.size:
        raise data.DataError(
            f"{args.data}: {target} holds {_listed(given)}, none of them among "
            f"the classes of {args.model_file}, {_listed(known)}; give the column "
            "of those labels (the one the model was fitted on)."
        )
    if unknown.size:
        note(
            args,
            f"{target}: {_listed(unknown)} not among the model's classes "
            f"{_listed(known)}, so never predicted (counted as errors).",
        )


def _check_numeric_targets(args, model, y):
    """A regressor's targets must be numbers: text (class names) is refused
    naming the column, before any score."""
    if np.asarray(y).dtype.kind not in "biuf":
        target = _target_name(args)
        raise data.DataError(
            f"{args.data}: {target} holds text ({_listed(np.unique(y))}), but "
            f"{args.model_file} ({type(model).__name__}) predicts numbers; give "
            "the column of numbers it was fitted on."
        )


def _target_name(args):
    """The targets as a message names them: by their --target column, if given."""
    return "the targets" if args.target is None else f"--target {args.target}"


def _listed(values, most=10):
    """Labels as a short list for a message."""
    shown = [v.item() if isinstance(v, np.generic) else v for v in values[:most]]
    return str(shown) + (
        f" and {len(values) - most} more" if len(values) > most else ""
    )


def _score_weights(w, args):
    """evaluate's --weight column as numbers ≥ 0, finite and not all zero."""
    try:
        s = np.asarray(w, dtype=float)
    except ValueError:
        s = None
    if s is None or not np.all(np.isfinite(s)) or np.any(s < 0) or not np.any(s > 0):
        raise data.DataError(
            f"{args.data}: --weight {args.weight}: the weights must be finite "
            "numbers ≥ 0, not all zero."
        )
    return s


def _weighted_scores(predicted, y, s, classification):
    """The scores with sample i counted s_i times: scikit-learn's accuracy_score,
    mean_squared_error and r2_score with sample_weight=s."""
    if classification:
        hit = predicted == _like(y, predicted)
        return {"weighted_accuracy": float(np.average(hit, weights=s))}
    t = np.asarray(y, dtype=float)
    r = np.asarray(predicted, dtype=float) - t
    t_bar = np.average(t, weights=s)
    return {
        "weighted_rmse": float(np.sqrt(np.average(r**2, weights=s))),
        "weighted_r2": float(1.0 - np.sum(s * r**2) / np.sum(s * (t - t_bar) ** 2)),
    }


def _like(y, predicted):
    """Targets read as floats compared with integer labels, or as given: only
    whole numbers are cast (0.7 is no label 0)."""
    y = np.asarray(y)
    if (
        np.asarray(predicted).dtype.kind in "iuf"
        and y.dtype.kind == "f"
        and np.all(y == np.round(y))
    ):
        return y.astype(np.asarray(predicted).dtype)
    return y


def _kkt(model, X, y, w, args):
    """The KKT certificate of an SVM, on its own training data only (the
    certificate speaks of the training problem): recognised by the data
    fingerprint recorded when the model was fitted. A model fitted with
    --weight is certified for its weights, given again as --weight."""
    if not hasattr(model, "dual_problems"):
        return {}
    provenance = io.read_header(args.model_file)["provenance"]
    if not data.same_data(provenance.get("data", {}), args.data):
        return {"kkt": "not shown: the data are not the model's training data"}
    weight = provenance.get("weight")
    if weight is not None and w is None:
        return {
            "kkt": f"not shown: the model was fitted with --weight {weight}; give "
            "it here too"
        }
    from kernelref.svm import kkt_report

    labels = y if model._estimator_type != "classifier" else _like(y, model.classes_)
    certificate = kkt_report(
        model,
        X,
        None if type(model).__name__ == "OneClassSVM" else labels,
        sample_weight=None if weight is None else w,
    )
    return {"kkt_max_violation": float(certificate.max_violation)}


# -- gram ------------------------------------------------------------------------------
def gram(args):
    import scipy.sparse

    from kernelref.kernels import accepts_sparse, make_kernel

    try:
        GramStore = plugins.load("dask").GramStore
    except UsageError:
        raise UsageError(
            "gram builds a Zarr store on Dask: pip install 'kernelref[dask]'."
        ) from None
    options = {"gamma": None, "degree": 3, "coef0": 1.0}
    spec = models.parse_value(args.kernel, "--kernel")
    for pair in args.param:
        name, equals, text = pair.partition("=")
        if not equals or name not in options:
            raise UsageError(
                f"--param {pair!r}: gram takes gamma=, degree= and coef0= (or a "
                'kernel spec as --kernel \'{"class": ..., "params": ...}\').'
            )
        options[name] = models.parse_value(text, f"--param {name}")
    # a sparse file stays sparse for a kernel computed from inner products
    X, _ = data.read(args.data, args.target, args.header, sparse=True)
    try:
        kernel = make_kernel(spec, X, **options)
    except (TypeError, ValueError) as error:
        raise UsageError(f"--kernel/--param: {error}") from None
    if scipy.sparse.issparse(X) and not accepts_sparse(kernel):
        X = data.dense(X, args.data, f"the kernel {kernel!r}")
    client = runtime.connect(args)
    try:
        blocks = -(-X.shape[0] // args.chunk_size)
        with runtime.progress_bar(
            args, blocks * (blocks + 1) // 2, "Gram blocks"
        ) as bar:
            done_before = [0]

            def advance(done, total):
                bar.update(done - done_before[0])
                done_before[0] = done

            with _store_fix(args.store):
                store = GramStore.build(
                    args.store,
                    X,
                    kernel,
                    chunk_size=args.chunk_size,
                    client=client,
                    overwrite=args.overwrite,
                    progress=advance,
                )
    finally:
        if client is not None:
            client.close()
    say(args, f"built {store!r}")
    return 0


# -- info ------------------------------------------------------------------------------
def info(args):
    path = args.path
    if os.path.isdir(path):
        try:
            import zarr
        except ImportError:
            raise UsageError(
                f"{path} is a directory (a store?); reading stores needs the "
                "dask extra: pip install 'kernelref[dask]'."
            ) from None
        if not os.path.exists(os.path.join(path, "zarr.json")) and _is_store_tree(
            pathlib.Path(path)
        ):
            _describe_store_tree(args, pathlib.Path(path))
            return 0
        try:
            group = zarr.open_group(store=path, mode="r")
        except Exception as error:  # noqa: BLE001 (zarr raises many kinds)
            raise UsageError(
                f"{path} is neither a model file nor a Zarr store ({error})."
            ) from None
        with warnings.catch_warnings():
            # a fit store keeps its checkpoints as plain files beside its arrays
            warnings.filterwarnings("ignore", message=".*not recognized as a comp")
            _describe_store(args, path, group)
        return 0
    say(args, io.describe(path))
    return 0


def _describe_store_tree(args, path):
    """`kernelref info` of a directory of stores (a calibration keeps one per
    fit: pair-i-j/fold-k, pair-i-j/final): each store's path and format."""
    stores = sorted(meta.parent for meta in path.rglob("zarr.json"))
    stores = [s for s in stores if not any(p in stores for p in s.parents)]
    say(args, f"{path}: a directory of {len(stores)} kernelref stores")
    for store in stores:
        attributes = json.loads((store / "zarr.json").read_text())["attributes"]
        say(args, f"{store.relative_to(path)}: {attributes['format']}")


def _describe_store(args, path, group):
    """`kernelref info` of a Zarr store: its format, attributes and arrays."""
    attrs = dict(group.attrs)
    if "format" in attrs:
        version = attrs.get("format_version", attrs.get("version", "?"))
        say(args, f"{path}: {attrs['format']} version {version}")
    else:  # a data file (--data X.zarr), say
        say(args, f"{path}: a Zarr group, not a kernelref store")
    for key, value in attrs.items():
        say(args, f"{key}: {json.dumps(value)}")
    for name in sorted(group.array_keys()):
        array = group[name]
        say(args, f"array {name}: shape {array.shape}, chunks {array.chunks}")
