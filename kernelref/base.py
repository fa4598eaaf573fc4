"""Estimator conventions, scikit-learn's without depending on it.

Constructor arguments are stored unchanged; ``fit`` validates them, learns
attributes whose names end in ``_`` and returns ``self``. ``get_params`` and
``set_params`` read the constructor signature, so ``sklearn.base.clone``,
``GridSearchCV`` and ``Pipeline`` work, including nested names such as
``kernel__gamma``.
"""

import functools
import inspect

import numpy as np


class ParamsMixin:
    """``get_params``/``set_params`` read off the ``__init__`` signature."""

    @classmethod
    def _param_names(cls):
        signature = inspect.signature(cls.__init__)
        return sorted(
            p.name
            for p in signature.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )

    def get_params(self, deep=True):
        params = {}
        for name in self._param_names():
            value = getattr(self, name)
            params[name] = value
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                for sub, subvalue in value.get_params(deep=True).items():
                    params[f"{name}__{sub}"] = subvalue
        return params

    def set_params(self, **params):
        valid = self._param_names()
        nested = {}
        for key, value in params.items():
            name, _, sub = key.partition("__")
            if name not in valid:
                raise ValueError(
                    f"{key!r} is not a parameter of {type(self).__name__}; "
                    f"valid parameters are {valid}."
                )
            if sub:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
        for name, subparams in nested.items():
            getattr(self, name).set_params(**subparams)
        return self

    def __repr__(self):
        # Like scikit-learn, show only the arguments that differ from their defaults.
        defaults = {
            p.name: p.default
            for p in inspect.signature(type(self).__init__).parameters.values()
        }
        shown = []
        for name in (n for n in defaults if n in self._param_names()):
            value = getattr(self, name)
            default = defaults.get(name, inspect.Parameter.empty)
            if default is inspect.Parameter.empty or not _same(value, default):
                shown.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


def _same(value, default):
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray):
        return False
    try:
        return bool(value == default) and type(value) is type(default)
    except (TypeError, ValueError):
        return False


def restores_on_error(fit):
    """Decorate a ``fit``: if it raises, the estimator's attributes are put back
    as they were, so a refused or failed refit leaves an earlier fit intact
    (scikit-learn's expectation) rather than half of a new one."""

    @functools.wraps(fit)
    def guarded(self, *args, **kwargs):
        before = dict(vars(self))
        try:
            return fit(self, *args, **kwargs)
        except BaseException:
            vars(self).clear()
            vars(self).update(before)
            raise

    return guarded


class BaseEstimator(ParamsMixin):
    """Base of every estimator in kernelref."""

    _estimator_type = None

    def save(self, path, provenance=None):
        """Write this estimator to `path` as a model file: JSON metadata and raw
        arrays, checksummed, no pickle (see ``kernelref.io``); ``kernelref.load``
        reads it back."""
        from kernelref import io

        return io.save(self, path, provenance=provenance)

    def __sklearn_tags__(self):
        # Only scikit-learn calls this, so importing it here adds no dependency.
        from sklearn.utils import ClassifierTags, RegressorTags, Tags, TargetTags

        tags = Tags(
            estimator_type=self._estimator_type,
            target_tags=TargetTags(required=self._estimator_type is not None),
        )
        if self._estimator_type == "regressor":
            tags.regressor_tags = RegressorTags()
        elif self._estimator_type == "classifier":
            tags.classifier_tags = ClassifierTags()
        tags.input_tags.pairwise = getattr(self, "kernel", None) == "precomputed"
        tags.input_tags.sparse = self._takes_sparse()
        return tags

    #: True for the estimators whose fit takes scipy.sparse X when its kernel does
    #: (``accept_sparse="kernel"``); ``kernel=None`` means RBF there.
    sparse_input = False

    def _takes_sparse(self):
        if not self.sparse_input:
            return False
        from kernelref.kernels import accepts_sparse

        kernel = getattr(self, "kernel", None)
        return accepts_sparse("rbf" if kernel is None else kernel)


def takes_sparse(estimator):
    """True when `estimator`'s fit takes ``scipy.sparse`` X: its own answer
    (``_takes_sparse``) for kernelref's estimators and wrappers, which ask the
    estimator they wrap; for another estimator, whether its ``kernel`` is one
    computed from sparse products."""
    own = getattr(estimator, "_takes_sparse", None)
    if callable(own):
        return bool(own())
    from kernelref.kernels import accepts_sparse

    kernel = getattr(estimator, "kernel", None)
    return kernel is not None and accepts_sparse(kernel)


def check_wrapped_samples(wrapper, X):
    """X as the estimator `wrapper` wraps (``wrapper.estimator``) takes it: checked
    against its kernel, ``scipy.sparse`` X kept sparse (CSR) when it takes sparse
    input (`takes_sparse`: an SVM whose kernel is computed from sparse products, a
    one-vs-rest of such SVMs, …). When the wrapped estimator's kernel is why sparse
    X is refused, the message names that kernel."""
    from kernelref._validation import check_samples

    estimator = wrapper.estimator
    kernel = getattr(estimator, "kernel", None)
    if getattr(estimator, "sparse_input", False):
        kernel = "rbf" if kernel is None else kernel
        return check_samples(X, kernel, "X", accept_sparse="kernel")
    return check_samples(X, kernel, "X", accept_sparse=takes_sparse(estimator))


class RegressorMixin:
    """``score`` is the coefficient of determination R², as in scikit-learn."""

    _estimator_type = "regressor"

    def score(self, X, y):
        t = np.asarray(y, dtype=np.float64)
        residual = ((t - self.predict(X)) ** 2).sum(axis=0)
        total = ((t - t.mean(axis=0)) ** 2).sum(axis=0)
        return float(np.mean(1.0 - residual / total))


class ClassifierMixin:
    """``score`` is the accuracy, the fraction of correctly predicted labels."""

    _estimator_type = "classifier"

    def score(self, X, y):
        return float(np.mean(self.predict(X) == np.asarray(y)))
