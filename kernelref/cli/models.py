"""Which estimator a model name means, and its parameters from ``NAME=VALUE``.

The names are read off the library at run time — every estimator exported by
``kernelref`` and ``kernelref.svm``, and for ``--backend NAME`` the class of the
same name that the backend registered as NAME offers (``kernelref.cli.plugins``:
backends are found through entry points, never imported by name) — so a new
estimator needs no code here.
"""

import importlib
import inspect
import json

from kernelref.base import BaseEstimator

#: the modules whose exported estimators the command line offers
REFERENCE_MODULES = ("kernelref", "kernelref.svm")


class UsageError(ValueError):
    """A wrong command line: exit status 2."""


def reference_estimators():
    """{name: class} of every estimator kernelref exports."""
    found = {}
    for module_name in REFERENCE_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseEstimator):
                found[name] = value
    return found


def backend_estimators(backend="dask"):
    """{name: class} of the estimators of `backend` (empty if not installed)."""
    from kernelref.cli import plugins  # here: plugins imports UsageError from us

    try:
        return plugins.load(backend).estimators()
    except UsageError:
        return {}


def estimator_class(name, backend="reference"):
    """The class for model `name` (case-insensitive) on `backend`.

    Only the module that exports `name` is imported (a short start-up); the
    whole list is read when the name is unknown, to say what is known.
    """
    cls = None
    for module_name in REFERENCE_MODULES:
        module = importlib.import_module(module_name)
        exported = {key.lower(): key for key in module.__all__}
        if name.lower() in exported:
            value = getattr(module, exported[name.lower()])
            if isinstance(value, type) and issubclass(value, BaseEstimator):
                cls = value
                break
    if cls is None:
        raise UsageError(
            f"unknown model {name!r}; the models are {sorted(reference_estimators())}."
        )
    name = cls.__name__
    if backend == "reference":
        return cls
    from kernelref.cli import plugins

    available = plugins.load(backend).estimators()  # a UsageError naming the fix
    if name not in available and wraps_an_estimator(cls):
        return cls  # runs here; its estimator= is the backend's (parse_params)
    if name not in available:
        raise UsageError(
            f"--backend {backend} has no {name} (it has {sorted(available)}); "
            f"use --backend {plugins.REFERENCE} for {name}."
        )
    return available[name]


def wraps_an_estimator(cls):
    """Whether `cls` is a meta-estimator (PlattCalibrated, OneVsRestClassifier):
    its work is its ``estimator``'s, so on a backend it wraps the backend's."""
    return "estimator" in cls._param_names()


def takes_weights(cls):
    """Whether ``cls.fit`` has a ``sample_weight`` parameter (read off its
    signature, so a backend's estimator answers for itself)."""
    return "sample_weight" in inspect.signature(cls.fit).parameters


def weighted_estimators(backend="reference"):
    """The names of `backend`'s estimators whose fit takes ``sample_weight``."""
    found = (
        reference_estimators()
        if backend == "reference"
        else backend_estimators(backend)
    )
    return sorted(name for name, cls in found.items() if takes_weights(cls))


def parse_params(pairs, cls, backend="reference"):
    """``["C=10", "kernel=rbf"]`` as constructor arguments of `cls`.

    A value is read as JSON when it parses (numbers, true/false/null, lists,
    objects), else as a string; ``none`` means None. A JSON object with
    ``class`` and ``params`` is a kernel spec (``Kernel.spec()``), one with
    ``estimator`` and ``params`` an estimator of `backend`.
    """
    valid = cls._param_names()
    params = {}
    for pair in pairs:
        name, equals, text = pair.partition("=")
        name = name.strip()
        if not equals or not name:
            raise UsageError(f"--param {pair!r} is not NAME=VALUE; e.g. --param C=10.")
        if name not in valid:
            raise UsageError(
                f"--param {name}: {cls.__name__} has no parameter {name!r}; its "
                f"parameters are {valid}."
            )
        params[name] = parse_value(text, f"--param {name}", backend)
    return params


def parse_value(text, where, backend="reference"):
    if text.lower() in ("none", "null"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and set(value) == {"class", "params"}:
        from kernelref.kernels import Kernel

        try:
            return Kernel.from_spec(value)
        except (TypeError, ValueError) as error:
            raise UsageError(f"{where}: {error}") from None
    if isinstance(value, dict) and set(value) == {"estimator", "params"}:
        return _estimator_from_spec(value, where, backend)
    if isinstance(value, dict):
        return {_key(k): v for k, v in value.items()}
    return value


def _estimator_from_spec(spec, where, backend="reference"):
    """``{"estimator": "SVC", "params": {"C": 10}}``: the inner estimator of a
    meta-estimator such as OneVsRestClassifier or PlattCalibrated, `backend`'s
    (``--backend dask``: the SVC trained on the cluster)."""
    try:
        cls = estimator_class(str(spec["estimator"]), backend)
    except UsageError as error:
        raise UsageError(f"{where}: {error}") from None
    text = [f"{name}={json.dumps(value)}" for name, value in spec["params"].items()]
    try:
        return cls(**parse_params(text, cls))
    except UsageError as error:
        raise UsageError(f"{where}: {error}") from None


def _key(text):
    """JSON keys are strings; class-weight keys are labels, often numbers."""
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() else number
